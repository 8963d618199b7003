#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_fp8e4m3_fp8e5m2(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uint cast1 = as_type<uint>((((cast0&128u)!=0u)?(-alu1):alu1));
  uint alu2 = (cast1&2147483647u);
  uint alu3 = (alu2>>23u);
  uint alu4 = ((alu2&8388607u)|((alu3!=0u)?8388608u:0u));
  int alu5 = (((int)((alu3>1u)?alu3:1u))+(-113));
  int alu6 = (-alu5);
  int alu7 = ((alu6>0)?alu6:0);
  int alu8 = (((alu7<5)?alu7:5)+21);
  uint cast2 = ((uint)alu8);
  uint alu9 = ((((uint)((alu5>0)?alu5:0))<<2u)+(((alu4+((1u<<((uint)(alu8+(-1))))+4294967295u))+((alu4>>cast2)&1u))>>cast2));
  uint cast3 = ((uint)((uchar)(((alu2<2139095040u)?((alu9<124u)?alu9:123u):((alu2!=2139095040u)?127u:124u))|((cast1>>31u)<<7u))));
  uint alu10 = ((cast3>>2u)&31u);
  uint alu11 = (cast3&127u);
  float alu12 = ((alu11<124u)?(((float)((cast3&3u)|((alu10!=0u)?4u:0u)))*as_type<float>(((((alu10>1u)?alu10:1u)+110u)<<23u))):((alu11!=124u)?NAN:INFINITY));
  uint cast4 = as_type<uint>((((cast3&128u)!=0u)?(-alu12):alu12));
  uint alu13 = (cast4&2147483647u);
  uint alu14 = (alu13>>23u);
  uint alu15 = ((alu13&8388607u)|((alu14!=0u)?8388608u:0u));
  int alu16 = (((int)((alu14>1u)?alu14:1u))+(-113));
  int alu17 = (-alu16);
  int alu18 = ((alu17>0)?alu17:0);
  int alu19 = (((alu18<5)?alu18:5)+21);
  uint cast5 = ((uint)alu19);
  uint alu20 = ((((uint)((alu16>0)?alu16:0))<<2u)+(((alu15+((1u<<((uint)(alu19+(-1))))+4294967295u))+((alu15>>cast5)&1u))>>cast5));
  data0[gidx0] = ((uchar)(((alu13<2139095040u)?((alu20<124u)?alu20:123u):((alu13!=2139095040u)?127u:124u))|((cast4>>31u)<<7u)));
}
