#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_idiv_long(device long* data0 [[buffer(0)]], device const long* data1 [[buffer(1)]], device const long* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  long val0 = data1[gidx0];
  long val1 = data2[gidx0];
  data0[gidx0] = ((val1)==0?0:(val1)==-1?(-val0):(val0/val1));
}
