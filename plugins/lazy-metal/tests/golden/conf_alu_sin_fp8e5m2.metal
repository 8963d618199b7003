#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_sin_fp8e5m2(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  uint cast1 = as_type<uint>(precise::sin((((cast0&128u)!=0u)?(-alu2):alu2)));
  uint alu3 = (cast1&2147483647u);
  uint alu4 = (alu3>>23u);
  uint alu5 = ((alu3&8388607u)|((alu4!=0u)?8388608u:0u));
  int alu6 = (((int)((alu4>1u)?alu4:1u))+(-113));
  int alu7 = (-alu6);
  int alu8 = ((alu7>0)?alu7:0);
  int alu9 = (((alu8<5)?alu8:5)+21);
  uint cast2 = ((uint)alu9);
  uint alu10 = ((((uint)((alu6>0)?alu6:0))<<2u)+(((alu5+((1u<<((uint)(alu9+(-1))))+4294967295u))+((alu5>>cast2)&1u))>>cast2));
  uint cast3 = ((uint)((uchar)(((alu3<2139095040u)?((alu10<124u)?alu10:123u):((alu3!=2139095040u)?127u:124u))|((cast1>>31u)<<7u))));
  uint alu11 = ((cast3>>2u)&31u);
  uint alu12 = (cast3&127u);
  float alu13 = ((alu12<124u)?(((float)((cast3&3u)|((alu11!=0u)?4u:0u)))*as_type<float>(((((alu11>1u)?alu11:1u)+110u)<<23u))):((alu12!=124u)?NAN:INFINITY));
  uint cast4 = as_type<uint>((((cast3&128u)!=0u)?(-alu13):alu13));
  uint alu14 = (cast4&2147483647u);
  uint alu15 = (alu14>>23u);
  uint alu16 = ((alu14&8388607u)|((alu15!=0u)?8388608u:0u));
  int alu17 = (((int)((alu15>1u)?alu15:1u))+(-113));
  int alu18 = (-alu17);
  int alu19 = ((alu18>0)?alu18:0);
  int alu20 = (((alu19<5)?alu19:5)+21);
  uint cast5 = ((uint)alu20);
  uint alu21 = ((((uint)((alu17>0)?alu17:0))<<2u)+(((alu16+((1u<<((uint)(alu20+(-1))))+4294967295u))+((alu16>>cast5)&1u))>>cast5));
  data0[gidx0] = ((uchar)(((alu14<2139095040u)?((alu21<124u)?alu21:123u):((alu14!=2139095040u)?127u:124u))|((cast4>>31u)<<7u)));
}
