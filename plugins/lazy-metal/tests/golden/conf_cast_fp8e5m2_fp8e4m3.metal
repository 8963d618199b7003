#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_fp8e5m2_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  uint cast1 = as_type<uint>((((cast0&128u)!=0u)?(-alu2):alu2));
  uint alu3 = (cast1&2147483647u);
  uint alu4 = (alu3>>23u);
  uint alu5 = ((alu3&8388607u)|((alu4!=0u)?8388608u:0u));
  int alu6 = (((int)((alu4>1u)?alu4:1u))+(-121));
  int alu7 = (-alu6);
  int alu8 = ((alu7>0)?alu7:0);
  int alu9 = (((alu8<6)?alu8:6)+20);
  uint cast2 = ((uint)alu9);
  uint alu10 = ((((uint)((alu6>0)?alu6:0))<<3u)+(((alu5+((1u<<((uint)(alu9+(-1))))+4294967295u))+((alu5>>cast2)&1u))>>cast2));
  uint cast3 = ((uint)((uchar)(((alu3<2139095040u)?((alu10<127u)?alu10:126u):((alu3!=2139095040u)?127u:127u))|((cast1>>31u)<<7u))));
  uint alu11 = ((cast3>>3u)&15u);
  float alu12 = (((cast3&127u)!=127u)?(((float)((cast3&7u)|((alu11!=0u)?8u:0u)))*as_type<float>(((((alu11>1u)?alu11:1u)+117u)<<23u))):NAN);
  uint cast4 = as_type<uint>((((cast3&128u)!=0u)?(-alu12):alu12));
  uint alu13 = (cast4&2147483647u);
  uint alu14 = (alu13>>23u);
  uint alu15 = ((alu13&8388607u)|((alu14!=0u)?8388608u:0u));
  int alu16 = (((int)((alu14>1u)?alu14:1u))+(-121));
  int alu17 = (-alu16);
  int alu18 = ((alu17>0)?alu17:0);
  int alu19 = (((alu18<6)?alu18:6)+20);
  uint cast5 = ((uint)alu19);
  uint alu20 = ((((uint)((alu16>0)?alu16:0))<<3u)+(((alu15+((1u<<((uint)(alu19+(-1))))+4294967295u))+((alu15>>cast5)&1u))>>cast5));
  data0[gidx0] = ((uchar)(((alu13<2139095040u)?((alu20<127u)?alu20:126u):((alu13!=2139095040u)?127u:127u))|((cast4>>31u)<<7u)));
}
