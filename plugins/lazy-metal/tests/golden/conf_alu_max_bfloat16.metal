#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_max_bfloat16(device bfloat* data0 [[buffer(0)]], device const bfloat* data1 [[buffer(1)]], device const bfloat* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  bfloat val0 = data1[gidx0];
  bfloat val1 = data2[gidx0];
  data0[gidx0] = ((bfloat)(((((float)val0)>=((float)val1))||(((float)val0)!=((float)val0)))?((float)val0):((float)val1)));
}
