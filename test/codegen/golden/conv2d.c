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
void r_2_16_8_8_4_3_3(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  float8 alu0 = ((float8){0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f});
  for (long long ridx0 = 0; ridx0 < 2; ridx0++) {
    long long alu1 = (ridx0*1024);
    long long alu2 = (ridx0*256);
    for (long long ridx1 = 0; ridx1 < 8; ridx1++) {
      long long alu3 = (ridx1*8);
      float acc0[288] __attribute__((aligned(32)));
      for (long long ridx9 = 0; ridx9 < 4; ridx9++) {
        long long alu4 = (ridx9*72);
        long long alu5 = (alu2+(ridx9*64));
        for (long long ridx10 = 0; ridx10 < 3; ridx10++) {
          long long alu6 = (ridx10*24);
          long long alu7 = (alu5+(alu3+(ridx10*8)));
          long long alu8 = (ridx1+ridx10);
          _Bool alu9 = ((!(alu8<1))&(alu8<9));
          for (long long ridx11 = 0; ridx11 < 3; ridx11++) {
            long long alu10 = (ridx11*8);
            #pragma omp simd
            for (long long ridx12 = 0; ridx12 < 8; ridx12++) {
              long long alu11 = (ridx11+ridx12);
              float val0 = (((alu9&(!(alu11<1)))&(alu11<9))?data1[(alu11+alu7)-9]:0.0f);
              acc0[((ridx12+alu10)+alu6)+alu4] = val0;
            }
          }
        }
      }
      for (long long ridx2 = 0; ridx2 < 2; ridx2++) {
        long long alu12 = (ridx2*512);
        float8 acc1[8];
        for (long long ridx13 = 0; ridx13 < 8; ridx13++) {
          acc1[ridx13] = alu0;
        }
        long long alu13 = (ridx2*288);
        #pragma GCC unroll 4
        for (long long ridx4 = 0; ridx4 < 4; ridx4++) {
          long long alu14 = (ridx4*72);
          long long alu15 = (ridx4*9);
          #pragma GCC unroll 3
          for (long long ridx5 = 0; ridx5 < 3; ridx5++) {
            long long alu16 = (ridx5*24);
            long long alu17 = (ridx5*3);
            #pragma GCC unroll 3
            for (long long ridx6 = 0; ridx6 < 3; ridx6++) {
              #pragma GCC unroll 8
              for (long long ridx14 = 0; ridx14 < 8; ridx14++) {
                float val1 = data2[ridx6+(((alu13+(ridx14*36))+alu15)+alu17)];
                acc1[ridx14] = fg_fma_float8((*(const float8_u*)&acc0[((ridx6*8)+alu16)+alu14]),((float8){val1,val1,val1,val1,val1,val1,val1,val1}),acc1[ridx14]);
              }
            }
          }
        }
        for (long long ridx7 = 0; ridx7 < 8; ridx7++) {
          (*(float8_u*)&data0[((alu12+(ridx7*64))+alu1)+alu3]) = acc1[ridx7];
        }
      }
    }
  }
}
