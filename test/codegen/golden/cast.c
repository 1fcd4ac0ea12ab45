#include <math.h>
void E_16(float* restrict data0, const int* restrict data1) {
  #pragma omp simd
  for (long long ridx0 = 0; ridx0 < 16; ridx0++) {
    int val0 = data1[ridx0];
    data0[ridx0] = ((float)(val0));
  }
}
