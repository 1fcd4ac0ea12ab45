#ifdef __AVX512F__
#define FG_SIMDLEN 16
#else
#define FG_SIMDLEN 8
#endif
typedef float float8 __attribute__((vector_size(32)));
typedef float float8_u __attribute__((vector_size(32), aligned(4), may_alias));
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
  float acc4;
  acc4 = 0.0f;
  float acc0[16] __attribute__((aligned(32)));
  float8 alu0 = ((float8){0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f});
  #pragma omp parallel for
  for (long long ridx1 = 0; ridx1 < 16; ridx1++) {
    float acc3;
    acc3 = 0.0f;
    float acc1[32] __attribute__((aligned(32)));
    float8 acc2[4];
    for (long long ridx6 = 0; ridx6 < 4; ridx6++) {
      acc2[ridx6] = alu0;
    }
    long long alu1 = (ridx1*65536);
    for (long long ridx0 = 0; ridx0 < 2048; ridx0++) {
      long long alu2 = (ridx0*32);
      #pragma GCC unroll 4
      for (long long ridx7 = 0; ridx7 < 4; ridx7++) {
        float8 val0 = (*(const float8_u*)&data1[((ridx7*8)+alu2)+alu1]);
        acc2[ridx7] = (acc2[ridx7]+val0);
      }
    }
    for (long long ridx5 = 0; ridx5 < 4; ridx5++) {
      (*(float8_u*)&acc1[ridx5*8]) = acc2[ridx5];
    }
    #pragma omp simd reduction(+:acc3) simdlen(FG_SIMDLEN)
    for (long long ridx4 = 0; ridx4 < 32; ridx4++) {
      acc3 = (acc3+acc1[ridx4]);
    }
    acc0[ridx1] = acc3;
  }
  #pragma omp simd reduction(+:acc4) simdlen(FG_SIMDLEN)
  for (long long ridx2 = 0; ridx2 < 16; ridx2++) {
    acc4 = (acc4+acc0[ridx2]);
  }
  data0[0] = acc4;
}
