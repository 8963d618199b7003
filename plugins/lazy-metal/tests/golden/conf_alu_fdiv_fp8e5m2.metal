#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_fdiv_fp8e5m2(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu3 = ((cast1>>2u)&31u);
  uint alu4 = (cast1&127u);
  float alu5 = ((alu4<124u)?(((float)((cast1&3u)|((alu3!=0u)?4u:0u)))*as_type<float>(((((alu3>1u)?alu3:1u)+110u)<<23u))):((alu4!=124u)?NAN:INFINITY));
  float alu6 = (((cast1&128u)!=0u)?(-alu5):alu5);
  float alu7 = (-alu6);
  float alu8 = (((alu6*alu6)<2.938735877055719e-39f)?1.8446744073709552e+19f:(((((alu6>=alu7)||(alu6!=alu6))?alu6:alu7)<4.253529586511731e+37f)?1.0f:5.421010862427522e-20f));
  uint cast2 = as_type<uint>((((((cast0&128u)!=0u)?(-alu2):alu2)*(1/(alu6*alu8)))*alu8));
  uint alu9 = (cast2&2147483647u);
  uint alu10 = (alu9>>23u);
  uint alu11 = ((alu9&8388607u)|((alu10!=0u)?8388608u:0u));
  int alu12 = (((int)((alu10>1u)?alu10:1u))+(-113));
  int alu13 = (-alu12);
  int alu14 = ((alu13>0)?alu13:0);
  int alu15 = (((alu14<5)?alu14:5)+21);
  uint cast3 = ((uint)alu15);
  uint alu16 = ((((uint)((alu12>0)?alu12:0))<<2u)+(((alu11+((1u<<((uint)(alu15+(-1))))+4294967295u))+((alu11>>cast3)&1u))>>cast3));
  uint cast4 = ((uint)((uchar)(((alu9<2139095040u)?((alu16<124u)?alu16:123u):((alu9!=2139095040u)?127u:124u))|((cast2>>31u)<<7u))));
  uint alu17 = ((cast4>>2u)&31u);
  uint alu18 = (cast4&127u);
  float alu19 = ((alu18<124u)?(((float)((cast4&3u)|((alu17!=0u)?4u:0u)))*as_type<float>(((((alu17>1u)?alu17:1u)+110u)<<23u))):((alu18!=124u)?NAN:INFINITY));
  uint cast5 = as_type<uint>((((cast4&128u)!=0u)?(-alu19):alu19));
  uint alu20 = (cast5&2147483647u);
  uint alu21 = (alu20>>23u);
  uint alu22 = ((alu20&8388607u)|((alu21!=0u)?8388608u:0u));
  int alu23 = (((int)((alu21>1u)?alu21:1u))+(-113));
  int alu24 = (-alu23);
  int alu25 = ((alu24>0)?alu24:0);
  int alu26 = (((alu25<5)?alu25:5)+21);
  uint cast6 = ((uint)alu26);
  uint alu27 = ((((uint)((alu23>0)?alu23:0))<<2u)+(((alu22+((1u<<((uint)(alu26+(-1))))+4294967295u))+((alu22>>cast6)&1u))>>cast6));
  data0[gidx0] = ((uchar)(((alu20<2139095040u)?((alu27<124u)?alu27:123u):((alu20!=2139095040u)?127u:124u))|((cast5>>31u)<<7u)));
}
