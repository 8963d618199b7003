#include <metal_stdlib>
using namespace metal;
kernel void conf_reduce_add(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 5 */
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 19; ridx0++) {
    float val0 = data1[((gidx0*19)+ridx0)];
    acc0 = (acc0+val0);
  }
  data0[gidx0] = acc0;
}
