#include <metal_stdlib>
using namespace metal;
kernel void conf_vector4(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 5 */
  int alu0 = (gidx0*4);
  float4 val0 = float4(data1[alu0], data1[alu0+1], data1[alu0+2], data1[alu0+3]);
  float4 alu1 = (val0+val0);
  float4 vec0 = float4(alu1[3],alu1[2],alu1[1],alu1[0]);
  data0[alu0] = vec0[0]; data0[alu0+1] = vec0[1]; data0[alu0+2] = vec0[2]; data0[alu0+3] = vec0[3];
}
