#include <math.h>
void E_n(float* restrict data0, const float* restrict data1, long long n) {
  #pragma omp simd
  for (long long ridx0 = 0; ridx0 < n; ridx0++) {
    float val0 = data1[ridx0];
    data0[ridx0] = (val0*3.0f);
  }
}
