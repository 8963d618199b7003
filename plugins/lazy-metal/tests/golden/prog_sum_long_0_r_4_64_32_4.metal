#include <metal_stdlib>
using namespace metal;
kernel void r_4_64_32_4(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 64 */
  int gidx0 = gid.x; /* 4 */
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 32; ridx0++) {
    int alu0 = (((gidx0*8192)+(ridx0*256))+lidx0);
    float val0 = data1[alu0];
    acc0 = (acc0+val0);
    float val1 = data1[(alu0+64)];
    acc0 = (acc0+val1);
    float val2 = data1[(alu0+128)];
    acc0 = (acc0+val2);
    float val3 = data1[(alu0+192)];
    acc0 = (acc0+val3);
  }
  threadgroup float temp[64];
  temp[lidx0] = acc0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if ((lidx0<1)) {
    float acc1 = 0.0f;
    for (int ridx1 = 0; ridx1 < 64; ridx1++) {
      float val4 = temp[ridx1];
      acc1 = (acc1+val4);
    }
    data0[gidx0] = acc1;
  }
}
