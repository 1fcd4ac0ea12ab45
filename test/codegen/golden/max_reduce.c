typedef int fg_mask8 __attribute__((vector_size(32)));
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
void r_8_4(float* restrict data0, const float* restrict data1) {
  float8 acc0;
  float8 alu0 = ((float8){(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff()),(-__builtin_inff())});
  acc0 = alu0;
  for (long long ridx1 = 0; ridx1 < 4; ridx1++) {
    float8 val0 = (*(const float8_u*)&data1[ridx1*8]);
    acc0 = ((float8)(((fg_mask8)acc0&((acc0>val0)|(acc0!=acc0)))|((fg_mask8)val0&~((acc0>val0)|(acc0!=acc0)))));
  }
  (*(float8_u*)&data0[0]) = acc0;
}
