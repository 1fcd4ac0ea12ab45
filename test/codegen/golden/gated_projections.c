#ifdef __AVX512F__
#define FG_SIMDLEN 16
#else
#define FG_SIMDLEN 8
#endif
typedef float float8 __attribute__((vector_size(32)));
typedef float float8_u __attribute__((vector_size(32), aligned(4), may_alias));
#ifndef FG_EXP2F
#define FG_EXP2F
#ifdef FUSEGRAD_MVEC
#define fg_exp2f __builtin_exp2f
#else
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA)
#define FG_MADDF(a, b, c) __builtin_fmaf(a, b, c)
#else
#define FG_MADDF(a, b, c) ((a) * (b) + (c))
#endif
static inline float fg_exp2f(float x) {
  x = x < -151.0f ? -151.0f : x;
  x = x > 129.0f ? 129.0f : x;
  float t = x + 12582912.0f;
  float f = x - (t - 12582912.0f);
  unsigned bits, lo, hi;
  __builtin_memcpy(&bits, &t, 4);
  int n = (int)(bits - 0x4b400000u), half = n >> 1;
  lo = ((unsigned)half << 23) + 0x3f800000u;
  hi = ((unsigned)(n - half) << 23) + 0x3f800000u;
  float p = FG_MADDF(0x1.388748p-13f, f, 0x1.5efff6p-10f), a, b;
  p = FG_MADDF(p, f, 0x1.3b3a9p-7f);
  p = FG_MADDF(p, f, 0x1.c6af98p-5f);
  p = FG_MADDF(p, f, 0x1.ebfbcep-3f);
  p = FG_MADDF(p, f, 0x1.62e43p-1f);
  p = FG_MADDF(p, f, 1.0f);
  __builtin_memcpy(&a, &lo, 4);
  __builtin_memcpy(&b, &hi, 4);
  return p * a * b;
}
#endif
#endif
#ifndef FG_HAVE_EXP2_FLOAT8
#define FG_HAVE_EXP2_FLOAT8
#if defined(FUSEGRAD_MVEC) && defined(__x86_64__) && defined(__AVX2__)
float8 _ZGVdN8v_exp2f(float8);
#define fg_exp2_float8 _ZGVdN8v_exp2f
#else
static inline float8 fg_exp2_float8(float8 v) {
  for (int i = 0; i < 8; i++) v[i] = (float)fg_exp2f(v[i]);
  return v;
}
#endif
#endif
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
void r_16_16_32_32(float* restrict data0, const float* restrict data1, const float* restrict data2, const float* restrict data3) {
  float8 alu0 = ((float8){0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f,0.0f});
  float acc0[512] __attribute__((aligned(32)));
  for (long long ridx6 = 0; ridx6 < 32; ridx6++) {
    long long alu1 = (ridx6*16);
    #pragma omp simd simdlen(FG_SIMDLEN)
    for (long long ridx7 = 0; ridx7 < 16; ridx7++) {
      float val0 = data2[ridx6+(ridx7*32)];
      acc0[ridx7+alu1] = val0;
    }
  }
  float8 alu2 = ((float8){1.0f,1.0f,1.0f,1.0f,1.0f,1.0f,1.0f,1.0f});
  float8 alu3 = ((float8){(-1.442695f),(-1.442695f),(-1.442695f),(-1.442695f),(-1.442695f),(-1.442695f),(-1.442695f),(-1.442695f)});
  float acc1[512] __attribute__((aligned(32)));
  for (long long ridx8 = 0; ridx8 < 32; ridx8++) {
    long long alu4 = (ridx8*16);
    #pragma omp simd simdlen(FG_SIMDLEN)
    for (long long ridx9 = 0; ridx9 < 16; ridx9++) {
      float val1 = data3[ridx8+(ridx9*32)];
      acc1[ridx9+alu4] = val1;
    }
  }
  for (long long ridx0 = 0; ridx0 < 4; ridx0++) {
    long long alu5 = (ridx0*64);
    float8 acc2[8];
    for (long long ridx11 = 0; ridx11 < 4; ridx11++) {
      long long alu6 = (ridx11*2);
      for (long long ridx12 = 0; ridx12 < 2; ridx12++) {
        acc2[alu6+ridx12] = alu0;
      }
    }
    long long alu7 = (ridx0*128);
    for (long long ridx2 = 0; ridx2 < 32; ridx2++) {
      long long alu8 = (ridx2*16);
      #pragma GCC unroll 4
      for (long long ridx13 = 0; ridx13 < 4; ridx13++) {
        long long alu9 = (ridx13*2);
        float val2 = data1[ridx2+(alu7+(ridx13*32))];
        float8 alu10 = ((float8){val2,val2,val2,val2,val2,val2,val2,val2});
        #pragma GCC unroll 2
        for (long long ridx14 = 0; ridx14 < 2; ridx14++) {
          acc2[alu9+ridx14] = fg_fma_float8(alu10,(*(const float8_u*)&acc0[(ridx14*8)+alu8]),acc2[alu9+ridx14]);
        }
      }
    }
    float8 acc3[8];
    for (long long ridx15 = 0; ridx15 < 4; ridx15++) {
      long long alu11 = (ridx15*2);
      for (long long ridx16 = 0; ridx16 < 2; ridx16++) {
        acc3[alu11+ridx16] = alu0;
      }
    }
    for (long long ridx3 = 0; ridx3 < 32; ridx3++) {
      long long alu12 = (ridx3*16);
      #pragma GCC unroll 4
      for (long long ridx17 = 0; ridx17 < 4; ridx17++) {
        long long alu13 = (ridx17*2);
        float val3 = data1[ridx3+(alu7+(ridx17*32))];
        float8 alu14 = ((float8){val3,val3,val3,val3,val3,val3,val3,val3});
        #pragma GCC unroll 2
        for (long long ridx18 = 0; ridx18 < 2; ridx18++) {
          acc3[alu13+ridx18] = fg_fma_float8(alu14,(*(const float8_u*)&acc1[(ridx18*8)+alu12]),acc3[alu13+ridx18]);
        }
      }
    }
    for (long long ridx4 = 0; ridx4 < 4; ridx4++) {
      long long alu15 = (ridx4*16);
      long long alu16 = (ridx4*2);
      for (long long ridx10 = 0; ridx10 < 2; ridx10++) {
        long long alu17 = (alu16+ridx10);
        (*(float8_u*)&data0[((ridx10*8)+alu5)+alu15]) = ((acc2[alu17]*(1/(alu2+fg_exp2_float8((acc2[alu17]*alu3)))))*acc3[alu17]);
      }
    }
  }
}
