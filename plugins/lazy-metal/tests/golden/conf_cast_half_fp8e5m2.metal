#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_half_fp8e5m2(device uchar* data0 [[buffer(0)]], device const half* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  half val0 = data1[gidx0];
  uint cast0 = as_type<uint>(((float)val0));
  uint alu0 = (cast0&2147483647u);
  uint alu1 = (alu0>>23u);
  uint alu2 = ((alu0&8388607u)|((alu1!=0u)?8388608u:0u));
  int alu3 = (((int)((alu1>1u)?alu1:1u))+(-113));
  int alu4 = (-alu3);
  int alu5 = ((alu4>0)?alu4:0);
  int alu6 = (((alu5<5)?alu5:5)+21);
  uint cast1 = ((uint)alu6);
  uint alu7 = ((((uint)((alu3>0)?alu3:0))<<2u)+(((alu2+((1u<<((uint)(alu6+(-1))))+4294967295u))+((alu2>>cast1)&1u))>>cast1));
  uint cast2 = ((uint)((uchar)(((alu0<2139095040u)?((alu7<124u)?alu7:123u):((alu0!=2139095040u)?127u:124u))|((cast0>>31u)<<7u))));
  uint alu8 = ((cast2>>2u)&31u);
  uint alu9 = (cast2&127u);
  float alu10 = ((alu9<124u)?(((float)((cast2&3u)|((alu8!=0u)?4u:0u)))*as_type<float>(((((alu8>1u)?alu8:1u)+110u)<<23u))):((alu9!=124u)?NAN:INFINITY));
  uint cast3 = as_type<uint>((((cast2&128u)!=0u)?(-alu10):alu10));
  uint alu11 = (cast3&2147483647u);
  uint alu12 = (alu11>>23u);
  uint alu13 = ((alu11&8388607u)|((alu12!=0u)?8388608u:0u));
  int alu14 = (((int)((alu12>1u)?alu12:1u))+(-113));
  int alu15 = (-alu14);
  int alu16 = ((alu15>0)?alu15:0);
  int alu17 = (((alu16<5)?alu16:5)+21);
  uint cast4 = ((uint)alu17);
  uint alu18 = ((((uint)((alu14>0)?alu14:0))<<2u)+(((alu13+((1u<<((uint)(alu17+(-1))))+4294967295u))+((alu13>>cast4)&1u))>>cast4));
  data0[gidx0] = ((uchar)(((alu11<2139095040u)?((alu18<124u)?alu18:123u):((alu11!=2139095040u)?127u:124u))|((cast3>>31u)<<7u)));
}
