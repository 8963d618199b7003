#include <metal_stdlib>
using namespace metal;
kernel void E_64_64(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], device const float* data2 [[buffer(2)]], device const float* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 64 */
  int gidx0 = gid.x; /* 64 */
  int alu0 = ((gidx0*64)+lidx0);
  float val0 = data1[alu0];
  float val1 = data2[gidx0];
  int alu1 = (gidx0*2);
  float val2 = data3[alu1];
  float val3 = data3[(alu1+1)];
  float alu2 = (val2+val3);
  float alu3 = (((alu2*alu2)<2.938735877055719e-39f)?1.8446744073709552e+19f:1.0f);
  data0[alu0] = ((precise::exp2(((val0+(-val1))*1.4426950216293335f))*(1/(alu2*alu3)))*alu3);
}
