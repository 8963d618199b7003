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
  float alu5 = (((alu4*alu4)<2.938735877055719e-39f)?1.8446744073709552e+19f:1.0f);
  uint cast2 = as_type<uint>((((((cast0&128u)!=0u)?(-alu1):alu1)*(1/(alu4*alu5)))*alu5));
  uint alu6 = (cast2&2147483647u);
  uint alu7 = (alu6>>23u);
  uint alu8 = ((alu6&8388607u)|((alu7!=0u)?8388608u:0u));
  int alu9 = (((int)((alu7>1u)?alu7:1u))+(-121));
  int alu10 = (-alu9);
  int alu11 = ((alu10>0)?alu10:0);
  int alu12 = (((alu11<6)?alu11:6)+20);
  uint cast3 = ((uint)alu12);
  uint alu13 = ((((uint)((alu9>0)?alu9:0))<<3u)+(((alu8+((1u<<((uint)(alu12+(-1))))+4294967295u))+((alu8>>cast3)&1u))>>cast3));
  uint cast4 = ((uint)((uchar)(((alu6<2139095040u)?((alu13<127u)?alu13:126u):((alu6!=2139095040u)?127u:127u))|((cast2>>31u)<<7u))));
  uint alu14 = ((cast4>>3u)&15u);
  float alu15 = (((cast4&127u)!=127u)?(((float)((cast4&7u)|((alu14!=0u)?8u:0u)))*as_type<float>(((((alu14>1u)?alu14:1u)+117u)<<23u))):NAN);
  uint cast5 = as_type<uint>((((cast4&128u)!=0u)?(-alu15):alu15));
  uint alu16 = (cast5&2147483647u);
  uint alu17 = (alu16>>23u);
  uint alu18 = ((alu16&8388607u)|((alu17!=0u)?8388608u:0u));
  int alu19 = (((int)((alu17>1u)?alu17:1u))+(-121));
  int alu20 = (-alu19);
  int alu21 = ((alu20>0)?alu20:0);
  int alu22 = (((alu21<6)?alu21:6)+20);
  uint cast6 = ((uint)alu22);
  uint alu23 = ((((uint)((alu19>0)?alu19:0))<<3u)+(((alu18+((1u<<((uint)(alu22+(-1))))+4294967295u))+((alu18>>cast6)&1u))>>cast6));
  data0[gidx0] = ((uchar)(((alu16<2139095040u)?((alu23<127u)?alu23:126u):((alu16!=2139095040u)?127u:127u))|((cast5>>31u)<<7u)));
}
