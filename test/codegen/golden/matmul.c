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
  for (long long ridx0 = 0; ridx0 < 4; ridx0++) {
    long long alu0 = (ridx0*5);
    long long alu1 = (ridx0*6);
    for (long long ridx1 = 0; ridx1 < 5; ridx1++) {
      float acc0;
      acc0 = 0.0f;
      #pragma omp simd reduction(+:acc0)
      for (long long ridx2 = 0; ridx2 < 6; ridx2++) {
        float val0 = data1[ridx2+alu1];
        float val1 = data2[ridx1+(ridx2*5)];
        acc0 = __builtin_fmaf(val0,val1,acc0);
      }
      data0[ridx1+alu0] = acc0;
    }
  }
}
