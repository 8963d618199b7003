#include <metal_stdlib>
using namespace metal;
kernel void conf_if(device int* data0 [[buffer(0)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 10 */
  if ((gidx0<4)) {
    data0[gidx0] = (gidx0+100);
  }
}
