#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_ushort_bfloat16(device bfloat* data0 [[buffer(0)]], device const ushort* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  ushort val0 = data1[gidx0];
  data0[gidx0] = ((bfloat)((float)val0));
}
