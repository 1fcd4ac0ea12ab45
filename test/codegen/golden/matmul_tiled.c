#include <math.h>
#ifdef FUSEGRAD_MVEC
float exp2f(float) __attribute__((simd("notinbranch")));
float log2f(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
double exp2(double) __attribute__((simd("notinbranch")));
double log2(double) __attribute__((simd("notinbranch")));
double sin(double) __attribute__((simd("notinbranch")));
#endif
void r_16_16_4(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  for (long long ridx0 = 0; ridx0 < 2; ridx0++) {
    long long alu0 = (ridx0*128);
    long long alu1 = (ridx0*32);
    for (long long ridx1 = 0; ridx1 < 2; ridx1++) {
      long long alu2 = (ridx1*8);
      float acc0[64];
      for (long long ridx5 = 0; ridx5 < 8; ridx5++) {
        long long alu3 = (ridx5*8);
        #pragma omp simd
        for (long long ridx6 = 0; ridx6 < 8; ridx6++) {
          acc0[alu3+ridx6] = 0.0f;
        }
      }
      #pragma GCC unroll 4
      for (long long ridx2 = 0; ridx2 < 4; ridx2++) {
        long long alu4 = (ridx2*16);
        #pragma GCC unroll 8
        for (long long ridx7 = 0; ridx7 < 8; ridx7++) {
          long long alu5 = (ridx7*8);
          float val0 = data1[ridx2+(alu1+(ridx7*4))];
          #pragma omp simd
          for (long long ridx8 = 0; ridx8 < 8; ridx8++) {
            float val1 = data2[(ridx8+alu2)+alu4];
            acc0[alu5+ridx8] = (acc0[alu5+ridx8]+(val0*val1));
          }
        }
      }
      for (long long ridx3 = 0; ridx3 < 8; ridx3++) {
        long long alu6 = (alu0+(ridx3*16));
        long long alu7 = (ridx3*8);
        #pragma omp simd
        for (long long ridx4 = 0; ridx4 < 8; ridx4++) {
          data0[(ridx4+alu2)+alu6] = acc0[alu7+ridx4];
        }
      }
    }
  }
}
