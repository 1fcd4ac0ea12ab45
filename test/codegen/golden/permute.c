#include <math.h>
void E_4_8(float* restrict data0, const float* restrict data1) {
  for (long long ridx0 = 0; ridx0 < 4; ridx0++) {
    long long alu0 = (ridx0*8);
    #pragma omp simd
    for (long long ridx1 = 0; ridx1 < 8; ridx1++) {
      float val0 = data1[ridx0+(ridx1*4)];
      data0[ridx1+alu0] = val0;
    }
  }
}
