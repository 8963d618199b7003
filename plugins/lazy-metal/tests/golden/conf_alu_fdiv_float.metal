#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_fdiv_float(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], device const float* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  float val0 = data1[gidx0];
  float val1 = data2[gidx0];
  float alu0 = (-val1);
  float alu1 = (((val1*val1)<2.938735877055719e-39f)?1.8446744073709552e+19f:(((((val1>=alu0)||(val1!=val1))?val1:alu0)<4.253529586511731e+37f)?1.0f:5.421010862427522e-20f));
  data0[gidx0] = ((val0*(1/(val1*alu1)))*alu1);
}
