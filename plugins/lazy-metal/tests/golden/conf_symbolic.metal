#include <metal_stdlib>
using namespace metal;
kernel void conf_symbolic(device int* data0 [[buffer(0)]], constant long& n [[buffer(1)]], constant long& step [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 16 */
  if ((gidx0<((int)n))) {
    data0[gidx0] = (gidx0*((int)step));
  }
}
