#ifdef __AVX512F__
#define FG_SIMDLEN 16
#else
#define FG_SIMDLEN 8
#endif
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
  long long alu0 = (0*64);
  float8 alu1 = ((float8){0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f});
  float acc0[576] __attribute__((aligned(32)));
  for (long long ridx9 = 0; ridx9 < 4; ridx9++) {
    long long alu2 = (ridx9*144);
    long long alu3 = (ridx9*9);
    for (long long ridx10 = 0; ridx10 < 3; ridx10++) {
      long long alu4 = (ridx10*48);
      long long alu5 = (ridx10*3);
      for (long long ridx11 = 0; ridx11 < 3; ridx11++) {
        long long alu6 = (ridx11*16);
        #pragma omp simd simdlen(FG_SIMDLEN)
        for (long long ridx12 = 0; ridx12 < 16; ridx12++) {
          float val0 = data2[ridx11+(((ridx12*36)+alu3)+alu5)];
          acc0[((ridx12+alu6)+alu4)+alu2] = val0;
        }
      }
    }
  }
  long long alu7 = (1*64);
  long long alu8 = (2*64);
  long long alu9 = (3*64);
  long long alu10 = (4*64);
  long long alu11 = (5*64);
  long long alu12 = (6*64);
  long long alu13 = (7*64);
  for (long long ridx0 = 0; ridx0 < 2; ridx0++) {
    long long alu14 = (ridx0*1024);
    long long alu15 = (ridx0*256);
    for (long long ridx2 = 0; ridx2 < 8; ridx2++) {
      long long alu16 = (ridx2*8);
      for (long long ridx3 = 0; ridx3 < 2; ridx3++) {
        long long alu17 = (ridx3*4);
        float8 acc1[8];
        for (long long ridx14 = 0; ridx14 < 4; ridx14++) {
          long long alu18 = (ridx14*2);
          for (long long ridx15 = 0; ridx15 < 2; ridx15++) {
            acc1[alu18+ridx15] = alu1;
          }
        }
        #pragma GCC unroll 4
        for (long long ridx4 = 0; ridx4 < 4; ridx4++) {
          long long alu19 = (alu15+(ridx4*64));
          long long alu20 = (ridx4*144);
          #pragma GCC unroll 3
          for (long long ridx5 = 0; ridx5 < 3; ridx5++) {
            long long alu21 = (alu19+(alu16+(ridx5*8)));
            long long alu22 = (ridx2+ridx5);
            _Bool alu23 = ((!(alu22<1))&(alu22<9));
            long long alu24 = (ridx5*48);
            #pragma GCC unroll 3
            for (long long ridx6 = 0; ridx6 < 3; ridx6++) {
              long long alu25 = (ridx6*16);
              #pragma GCC unroll 4
              for (long long ridx16 = 0; ridx16 < 4; ridx16++) {
                long long alu26 = (ridx16*2);
                long long alu27 = (ridx6+(ridx16+alu17));
                float val1 = (((alu23&(!(alu27<1)))&(alu27<9))?data1[(alu27+alu21)-9]:0.0f);
                float8 alu28 = ((float8){val1,val1,val1,val1,val1,val1,val1,val1});
                #pragma GCC unroll 2
                for (long long ridx17 = 0; ridx17 < 2; ridx17++) {
                  acc1[alu26+ridx17] = fg_fma_float8(alu28,(*(const float8_u*)&acc0[(((ridx17*8)+alu25)+alu24)+alu20]),acc1[alu26+ridx17]);
                }
              }
            }
          }
        }
        for (long long ridx7 = 0; ridx7 < 4; ridx7++) {
          long long alu29 = (ridx7+alu17);
          long long alu30 = (ridx7*2);
          for (long long ridx13 = 0; ridx13 < 2; ridx13++) {
            long long alu31 = (ridx13*512);
            data0[alu29+(((alu31+alu0)+alu14)+alu16)] = acc1[alu30+ridx13][0];
            data0[alu29+(((alu31+alu7)+alu14)+alu16)] = acc1[alu30+ridx13][1];
            data0[alu29+(((alu31+alu8)+alu14)+alu16)] = acc1[alu30+ridx13][2];
            data0[alu29+(((alu31+alu9)+alu14)+alu16)] = acc1[alu30+ridx13][3];
            data0[alu29+(((alu31+alu10)+alu14)+alu16)] = acc1[alu30+ridx13][4];
            data0[alu29+(((alu31+alu11)+alu14)+alu16)] = acc1[alu30+ridx13][5];
            data0[alu29+(((alu31+alu12)+alu14)+alu16)] = acc1[alu30+ridx13][6];
            data0[alu29+(((alu31+alu13)+alu14)+alu16)] = acc1[alu30+ridx13][7];
          }
        }
      }
    }
  }
}
