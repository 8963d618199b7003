#include <metal_stdlib>
using namespace metal;
kernel void conf_locals(device int* data0 [[buffer(0)]], device const int* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup int temp[16];
  int gidx0 = gid.x; /* 4 */
  int lidx0 = lid.x; /* 16 */
  int alu0 = ((gidx0*16)+lidx0);
  int val0 = data1[alu0];
  temp[lidx0] = val0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int val1 = temp[(15+(-lidx0))];
  data0[alu0] = val1;
}
