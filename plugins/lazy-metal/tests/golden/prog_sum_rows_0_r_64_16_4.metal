#include <metal_stdlib>
using namespace metal;
kernel void r_64_16_4(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 64 */
  float4 acc0 = float4(0.0f,0.0f,0.0f,0.0f);
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu0 = ((gidx0*64)+(ridx0*4));
    float4 val0 = float4(data1[alu0], data1[alu0+1], data1[alu0+2], data1[alu0+3]);
    acc0 = (acc0+val0);
  }
  data0[gidx0] = ((acc0[0]+acc0[1])+(acc0[2]+acc0[3]));
}
