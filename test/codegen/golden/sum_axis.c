#include <math.h>
#ifdef FUSEGRAD_MVEC
float exp2f(float) __attribute__((simd("notinbranch")));
float log2f(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
double exp2(double) __attribute__((simd("notinbranch")));
double log2(double) __attribute__((simd("notinbranch")));
double sin(double) __attribute__((simd("notinbranch")));
#endif
void r_4_8(float* restrict data0, const float* restrict data1) {
  for (long long ridx0 = 0; ridx0 < 4; ridx0++) {
    float acc0;
    acc0 = 0.0f;
    long long alu0 = (ridx0*8);
    #pragma omp simd reduction(+:acc0)
    for (long long ridx1 = 0; ridx1 < 8; ridx1++) {
      float val0 = data1[ridx1+alu0];
      acc0 = (acc0+val0);
    }
    data0[ridx0] = acc0;
  }
}
