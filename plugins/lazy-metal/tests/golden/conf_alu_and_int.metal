#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_and_int(device int* data0 [[buffer(0)]], device const int* data1 [[buffer(1)]], device const int* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  int val0 = data1[gidx0];
  int val1 = data2[gidx0];
  data0[gidx0] = (val0&val1);
}
