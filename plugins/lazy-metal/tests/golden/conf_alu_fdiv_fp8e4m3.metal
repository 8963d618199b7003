#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_fdiv_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu2 = ((cast1>>3u)&15u);
  float alu3 = (((cast1&127u)!=127u)?(((float)((cast1&7u)|((alu2!=0u)?8u:0u)))*as_type<float>(((((alu2>1u)?alu2:1u)+117u)<<23u))):NAN);
  float alu4 = (((cast1&128u)!=0u)?(-alu3):alu3);
  float alu5 = (-alu4);
  float alu6 = (((alu4*alu4)<2.938735877055719e-39f)?1.8446744073709552e+19f:(((((alu4>=alu5)||(alu4!=alu4))?alu4:alu5)<4.253529586511731e+37f)?1.0f:5.421010862427522e-20f));
  uint cast2 = as_type<uint>((((((cast0&128u)!=0u)?(-alu1):alu1)*(1/(alu4*alu6)))*alu6));
  uint alu7 = (cast2&2147483647u);
  uint alu8 = (alu7>>23u);
  uint alu9 = ((alu7&8388607u)|((alu8!=0u)?8388608u:0u));
  int alu10 = (((int)((alu8>1u)?alu8:1u))+(-121));
  int alu11 = (-alu10);
  int alu12 = ((alu11>0)?alu11:0);
  int alu13 = (((alu12<6)?alu12:6)+20);
  uint cast3 = ((uint)alu13);
  uint alu14 = ((((uint)((alu10>0)?alu10:0))<<3u)+(((alu9+((1u<<((uint)(alu13+(-1))))+4294967295u))+((alu9>>cast3)&1u))>>cast3));
  uint cast4 = ((uint)((uchar)(((alu7<2139095040u)?((alu14<127u)?alu14:126u):((alu7!=2139095040u)?127u:127u))|((cast2>>31u)<<7u))));
  uint alu15 = ((cast4>>3u)&15u);
  float alu16 = (((cast4&127u)!=127u)?(((float)((cast4&7u)|((alu15!=0u)?8u:0u)))*as_type<float>(((((alu15>1u)?alu15:1u)+117u)<<23u))):NAN);
  uint cast5 = as_type<uint>((((cast4&128u)!=0u)?(-alu16):alu16));
  uint alu17 = (cast5&2147483647u);
  uint alu18 = (alu17>>23u);
  uint alu19 = ((alu17&8388607u)|((alu18!=0u)?8388608u:0u));
  int alu20 = (((int)((alu18>1u)?alu18:1u))+(-121));
  int alu21 = (-alu20);
  int alu22 = ((alu21>0)?alu21:0);
  int alu23 = (((alu22<6)?alu22:6)+20);
  uint cast6 = ((uint)alu23);
  uint alu24 = ((((uint)((alu20>0)?alu20:0))<<3u)+(((alu19+((1u<<((uint)(alu23+(-1))))+4294967295u))+((alu19>>cast6)&1u))>>cast6));
  data0[gidx0] = ((uchar)(((alu17<2139095040u)?((alu24<127u)?alu24:126u):((alu17!=2139095040u)?127u:127u))|((cast5>>31u)<<7u)));
}
