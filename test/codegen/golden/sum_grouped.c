#ifdef __AVX512F__
#define FG_SIMDLEN 16
#else
#define FG_SIMDLEN 8
#endif
#include <math.h>
#ifdef FUSEGRAD_MVEC
float exp2f(float) __attribute__((simd("notinbranch")));
float log2f(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
double exp2(double) __attribute__((simd("notinbranch")));
double log2(double) __attribute__((simd("notinbranch")));
double sin(double) __attribute__((simd("notinbranch")));
#endif
void r_1048576(float* restrict data0, const float* restrict data1) {
  float acc2;
  acc2 = 0.0f;
  float acc0[16];
  #pragma omp parallel for
  for (long long ridx1 = 0; ridx1 < 16; ridx1++) {
    float acc1;
    acc1 = 0.0f;
    long long alu0 = (ridx1*65536);
    #pragma omp simd reduction(+:acc1) simdlen(FG_SIMDLEN)
    for (long long ridx0 = 0; ridx0 < 65536; ridx0++) {
      float val0 = data1[ridx0+alu0];
      acc1 = (acc1+val0);
    }
    acc0[ridx1] = acc1;
  }
  #pragma omp simd reduction(+:acc2) simdlen(FG_SIMDLEN)
  for (long long ridx2 = 0; ridx2 < 16; ridx2++) {
    acc2 = (acc2+acc0[ridx2]);
  }
  data0[0] = acc2;
}
