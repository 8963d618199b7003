#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_mulacc_half(device half* data0 [[buffer(0)]], device const half* data1 [[buffer(1)]], device const half* data2 [[buffer(2)]], device const half* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  half val0 = data1[gidx0];
  half val1 = data2[gidx0];
  half val2 = data3[gidx0];
  data0[gidx0] = ((half)fma(((float)val0),((float)val1),((float)val2)));
}
