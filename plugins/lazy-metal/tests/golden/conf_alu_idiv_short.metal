#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_idiv_short(device short* data0 [[buffer(0)]], device const short* data1 [[buffer(1)]], device const short* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  short val0 = data1[gidx0];
  short val1 = data2[gidx0];
  data0[gidx0] = ((short)((val1)==0?0:(val1)==-1?(-val0):(val0/val1)));
}
