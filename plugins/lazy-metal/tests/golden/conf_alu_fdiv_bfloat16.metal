#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_fdiv_bfloat16(device bfloat* data0 [[buffer(0)]], device const bfloat* data1 [[buffer(1)]], device const bfloat* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  bfloat val0 = data1[gidx0];
  bfloat val1 = data2[gidx0];
  float cast0 = ((float)val1);
  float alu0 = (-cast0);
  float alu1 = (((cast0*cast0)<2.938735877055719e-39f)?1.8446744073709552e+19f:(((((cast0>=alu0)||(cast0!=cast0))?cast0:alu0)<4.253529586511731e+37f)?1.0f:5.421010862427522e-20f));
  data0[gidx0] = ((bfloat)((((float)val0)*(1/(cast0*alu1)))*alu1));
}
