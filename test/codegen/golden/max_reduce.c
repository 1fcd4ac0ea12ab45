#include <math.h>
#ifdef FUSEGRAD_MVEC
float exp2f(float) __attribute__((simd("notinbranch")));
float log2f(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
double exp2(double) __attribute__((simd("notinbranch")));
double log2(double) __attribute__((simd("notinbranch")));
double sin(double) __attribute__((simd("notinbranch")));
#endif
void r_8_4(float* restrict data0, const float* restrict data1) {
  float acc0[8] __attribute__((aligned(32)));
  #pragma omp simd
  for (long long ridx3 = 0; ridx3 < 8; ridx3++) {
    acc0[ridx3] = (-__builtin_inff());
  }
  #pragma GCC unroll 4
  for (long long ridx1 = 0; ridx1 < 4; ridx1++) {
    long long alu0 = (ridx1*8);
    #pragma omp simd
    for (long long ridx4 = 0; ridx4 < 8; ridx4++) {
      float val0 = data1[ridx4+alu0];
      acc0[ridx4] = (((acc0[ridx4]>val0)|(acc0[ridx4]!=acc0[ridx4]))?acc0[ridx4]:val0);
    }
  }
  #pragma omp simd
  for (long long ridx2 = 0; ridx2 < 8; ridx2++) {
    data0[ridx2] = acc0[ridx2];
  }
}
