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
  for (long long ridx10 = 0; ridx10 < 4; ridx10++) {
    long long alu2 = (ridx10*144);
    long long alu3 = (ridx10*9);
    for (long long ridx11 = 0; ridx11 < 3; ridx11++) {
      long long alu4 = (ridx11*48);
      long long alu5 = (ridx11*3);
      for (long long ridx12 = 0; ridx12 < 3; ridx12++) {
        long long alu6 = (ridx12*16);
        #pragma omp simd simdlen(FG_SIMDLEN)
        for (long long ridx13 = 0; ridx13 < 16; ridx13++) {
          float val0 = data2[ridx12+((alu3+(ridx13*36))+alu5)];
          acc0[((ridx13+alu6)+alu4)+alu2] = val0;
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
    for (long long ridx2 = 0; ridx2 < 4; ridx2++) {
      long long alu16 = (ridx2*16);
      long long alu17 = (ridx2*2);
      for (long long ridx3 = 0; ridx3 < 4; ridx3++) {
        long long alu18 = (ridx3*2);
        float8 acc1[8];
        for (long long ridx15 = 0; ridx15 < 2; ridx15++) {
          long long alu19 = (ridx15*4);
          for (long long ridx16 = 0; ridx16 < 2; ridx16++) {
            long long alu20 = (ridx16*2);
            for (long long ridx17 = 0; ridx17 < 2; ridx17++) {
              acc1[alu19+(alu20+ridx17)] = alu1;
            }
          }
        }
        #pragma GCC unroll 4
        for (long long ridx4 = 0; ridx4 < 4; ridx4++) {
          long long alu21 = (alu15+(ridx4*64));
          long long alu22 = (ridx4*144);
          #pragma GCC unroll 3
          for (long long ridx5 = 0; ridx5 < 3; ridx5++) {
            long long alu23 = (ridx5*8);
            long long alu24 = (ridx5*48);
            #pragma GCC unroll 3
            for (long long ridx6 = 0; ridx6 < 3; ridx6++) {
              long long alu25 = (ridx6*16);
              #pragma GCC unroll 2
              for (long long ridx18 = 0; ridx18 < 2; ridx18++) {
                long long alu26 = (ridx18*4);
                long long alu27 = (((alu16+(ridx18*8))+alu23)+alu21);
                long long alu28 = (ridx5+(ridx18+alu17));
                _Bool alu29 = ((!(alu28<1))&(alu28<9));
                #pragma GCC unroll 2
                for (long long ridx19 = 0; ridx19 < 2; ridx19++) {
                  long long alu30 = (ridx19*2);
                  long long alu31 = (ridx6+(ridx19+alu18));
                  float val1 = (((alu29&(!(alu31<1)))&(alu31<9))?data1[(alu31+alu27)-9]:0.0f);
                  float8 alu32 = ((float8){val1,val1,val1,val1,val1,val1,val1,val1});
                  #pragma GCC unroll 2
                  for (long long ridx20 = 0; ridx20 < 2; ridx20++) {
                    acc1[alu26+(alu30+ridx20)] = fg_fma_float8(alu32,(*(const float8_u*)&acc0[(((ridx20*8)+alu25)+alu24)+alu22]),acc1[alu26+(alu30+ridx20)]);
                  }
                }
              }
            }
          }
        }
        for (long long ridx7 = 0; ridx7 < 2; ridx7++) {
          long long alu33 = (alu16+(ridx7*8));
          long long alu34 = (ridx7*4);
          for (long long ridx8 = 0; ridx8 < 2; ridx8++) {
            long long alu35 = (ridx8+alu18);
            long long alu36 = (ridx8*2);
            for (long long ridx14 = 0; ridx14 < 2; ridx14++) {
              long long alu37 = (ridx14*512);
              data0[alu35+(((alu37+alu0)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][0];
              data0[alu35+(((alu37+alu7)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][1];
              data0[alu35+(((alu37+alu8)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][2];
              data0[alu35+(((alu37+alu9)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][3];
              data0[alu35+(((alu37+alu10)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][4];
              data0[alu35+(((alu37+alu11)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][5];
              data0[alu35+(((alu37+alu12)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][6];
              data0[alu35+(((alu37+alu13)+alu14)+alu33)] = acc1[alu34+(alu36+ridx14)][7];
            }
          }
        }
      }
    }
  }
}
