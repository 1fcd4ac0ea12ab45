#include <math.h>
#ifdef FUSEGRAD_MVEC
float exp2f(float) __attribute__((simd("notinbranch")));
float log2f(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
double exp2(double) __attribute__((simd("notinbranch")));
double log2(double) __attribute__((simd("notinbranch")));
double sin(double) __attribute__((simd("notinbranch")));
#endif
void r_4_5_6(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  for (long long ridx1 = 0; ridx1 < 5; ridx1++) {
    float acc0[4];
    #pragma omp simd
    for (long long ridx4 = 0; ridx4 < 4; ridx4++) {
      acc0[ridx4] = 0.0f;
    }
    for (long long ridx2 = 0; ridx2 < 6; ridx2++) {
      float val0 = data2[ridx1+(ridx2*5)];
      #pragma omp simd
      for (long long ridx5 = 0; ridx5 < 4; ridx5++) {
        float val1 = data1[ridx2+(ridx5*6)];
        acc0[ridx5] = (acc0[ridx5]+(val1*val0));
      }
    }
    #pragma omp simd
    for (long long ridx3 = 0; ridx3 < 4; ridx3++) {
      data0[ridx1+(ridx3*5)] = acc0[ridx3];
    }
  }
}
