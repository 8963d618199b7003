#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_max_fp8e5m2(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  float alu3 = (((cast0&128u)!=0u)?(-alu2):alu2);
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu4 = ((cast1>>2u)&31u);
  uint alu5 = (cast1&127u);
  float alu6 = ((alu5<124u)?(((float)((cast1&3u)|((alu4!=0u)?4u:0u)))*as_type<float>(((((alu4>1u)?alu4:1u)+110u)<<23u))):((alu5!=124u)?NAN:INFINITY));
  float alu7 = (((cast1&128u)!=0u)?(-alu6):alu6);
  uint cast2 = as_type<uint>((((alu3>=alu7)||(alu3!=alu3))?alu3:alu7));
  uint alu8 = (cast2&2147483647u);
  uint alu9 = (alu8>>23u);
  uint alu10 = ((alu8&8388607u)|((alu9!=0u)?8388608u:0u));
  int alu11 = (((int)((alu9>1u)?alu9:1u))+(-113));
  int alu12 = (-alu11);
  int alu13 = ((alu12>0)?alu12:0);
  int alu14 = (((alu13<5)?alu13:5)+21);
  uint cast3 = ((uint)alu14);
  uint alu15 = ((((uint)((alu11>0)?alu11:0))<<2u)+(((alu10+((1u<<((uint)(alu14+(-1))))+4294967295u))+((alu10>>cast3)&1u))>>cast3));
  data0[gidx0] = ((uchar)(((alu8<2139095040u)?((alu15<124u)?alu15:123u):((alu8!=2139095040u)?127u:124u))|((cast2>>31u)<<7u)));
}
