#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_shl_char(device char* data0 [[buffer(0)]], device const char* data1 [[buffer(1)]], device const char* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  char val0 = data1[gidx0];
  char val1 = data2[gidx0];
  data0[gidx0] = ((char)(val0<<val1));
}
