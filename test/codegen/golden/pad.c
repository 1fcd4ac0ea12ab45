#include <math.h>
void E_10(float* restrict data0, const float* restrict data1) {
  #pragma omp simd
  for (long long ridx0 = 0; ridx0 < 10; ridx0++) {
    float val0 = (((!(ridx0<1))&(ridx0<9))?data1[ridx0-1]:0.0f);
    data0[ridx0] = val0;
  }
}
