#include <metal_stdlib>
using namespace metal;
kernel void conf_reduce_max(device int* data0 [[buffer(0)]], device const int* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 5 */
  int acc0 = (-2147483647-1);
  for (int ridx0 = 0; ridx0 < 19; ridx0++) {
    int val0 = data1[((gidx0*19)+ridx0)];
    acc0 = ((acc0>val0)?acc0:val0);
  }
  data0[gidx0] = acc0;
}
