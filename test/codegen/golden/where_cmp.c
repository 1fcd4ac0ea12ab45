#include <math.h>
void E_16(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  #pragma omp simd
  for (long long ridx0 = 0; ridx0 < 16; ridx0++) {
    float val0 = data1[ridx0];
    float val1 = data2[ridx0];
    float alu0 = (val1*2.0f);
    data0[ridx0] = ((val0<val1)?val0:alu0);
  }
}
