#include <metal_stdlib>
using namespace metal;
kernel void E_64_64(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], device const float* data2 [[buffer(2)]], device const float* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 64 */
  int gidx0 = gid.x; /* 64 */
  int alu0 = ((gidx0*64)+lidx0);
  float val0 = data1[alu0];
  float val1 = data2[gidx0];
  float alu1 = (val0+(-val1));
  float alu2 = (alu1*1.4426950216293335f);
  float alu3 = ((alu1<(-104.66500854492188f))?(-104.66500854492188f):alu1);
  float alu4 = ((89.41580200195312f<alu3)?89.41580200195312f:alu3);
  float alu5 = ((alu4*1.4426950216293335f)+12582912.0f);
  float alu6 = (alu5+(-12582912.0f));
  uint alu7 = (as_type<uint>(alu5)+3032482048u);
  uint alu8 = (alu7>>1u);
  int alu9 = (gidx0*2);
  float val2 = data3[alu9];
  float val3 = data3[(alu9+1)];
  float alu10 = (val2+val3);
  float alu11 = (-alu10);
  float alu12 = (((alu10*alu10)<2.938735877055719e-39f)?1.8446744073709552e+19f:(((((alu10>=alu11)||(alu10!=alu10))?alu10:alu11)<4.253529586511731e+37f)?1.0f:5.421010862427522e-20f));
  data0[alu0] = ((((precise::exp2((fma(alu6,(-1.428606765330187e-06f),fma(alu6,(-0.693145751953125f),alu4))*1.4426950216293335f))*as_type<float>(((alu8+4294967295u)<<23u)))*as_type<float>((((alu7+(-alu8))+4294967295u)<<23u)))*(1/(alu10*alu12)))*alu12);
}
