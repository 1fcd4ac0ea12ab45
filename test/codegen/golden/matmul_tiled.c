typedef float float8 __attribute__((vector_size(32)));
typedef float float8_u __attribute__((vector_size(32), aligned(4), may_alias));
#ifndef FG_HAVE_FMA_FLOAT8
#define FG_HAVE_FMA_FLOAT8
static inline float8 fg_fma_float8(float8 a, float8 b, float8 c) {
#if defined(__x86_64__) && defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  for (int i = 0; i < 8; i++) a[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return a;
#endif
}
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
void r_16_16_4(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  float8 alu0 = ((float8){0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f});
  for (long long ridx0 = 0; ridx0 < 4; ridx0++) {
    long long alu1 = (ridx0*64);
    float8 acc0[8];
    for (long long ridx6 = 0; ridx6 < 4; ridx6++) {
      long long alu2 = (ridx6*2);
      for (long long ridx7 = 0; ridx7 < 2; ridx7++) {
        acc0[alu2+ridx7] = alu0;
      }
    }
    long long alu3 = (ridx0*16);
    #pragma GCC unroll 4
    for (long long ridx2 = 0; ridx2 < 4; ridx2++) {
      long long alu4 = (ridx2*16);
      #pragma GCC unroll 4
      for (long long ridx8 = 0; ridx8 < 4; ridx8++) {
        long long alu5 = (ridx8*2);
        float val0 = data1[ridx2+(alu3+(ridx8*4))];
        float8 alu6 = ((float8){val0,val0,val0,val0,val0,val0,val0,val0});
        #pragma GCC unroll 2
        for (long long ridx9 = 0; ridx9 < 2; ridx9++) {
          float8 val1 = (*(const float8_u*)&data2[(ridx9*8)+alu4]);
          acc0[alu5+ridx9] = fg_fma_float8(alu6,val1,acc0[alu5+ridx9]);
        }
      }
    }
    for (long long ridx3 = 0; ridx3 < 4; ridx3++) {
      long long alu7 = (ridx3*16);
      long long alu8 = (ridx3*2);
      for (long long ridx5 = 0; ridx5 < 2; ridx5++) {
        (*(float8_u*)&data0[((ridx5*8)+alu1)+alu7]) = acc0[alu8+ridx5];
      }
    }
  }
}
