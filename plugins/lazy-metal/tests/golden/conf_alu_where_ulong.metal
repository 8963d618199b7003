#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_where_ulong(device ulong* data0 [[buffer(0)]], device const bool* data1 [[buffer(1)]], device const ulong* data2 [[buffer(2)]], device const ulong* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  bool val0 = data1[gidx0];
  ulong val1 = data2[gidx0];
  ulong val2 = data3[gidx0];
  data0[gidx0] = (val0?val1:val2);
}
