#include <math.h>
void r_8_4(float* restrict data0, const float* restrict data1) {
  for (long long ridx0 = 0; ridx0 < 8; ridx0++) {
    float acc0;
    acc0 = (-__builtin_inff());
    for (long long ridx1 = 0; ridx1 < 4; ridx1++) {
      float val0 = data1[ridx0+(ridx1*8)];
      acc0 = ((acc0>val0)?acc0:val0);
    }
    data0[ridx0] = acc0;
  }
}
