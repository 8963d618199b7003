#include <metal_stdlib>
using namespace metal;
kernel void conf_gated(device int* data0 [[buffer(0)]], device const int* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 12 */
  int val0 = ((gidx0<7)?data1[gidx0]:(-1));
  if (((gidx0%3)!=1)) { data0[gidx0] = val0; }
}
