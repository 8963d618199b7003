#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_mulacc_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], device const uchar* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu2 = ((cast1>>3u)&15u);
  float alu3 = (((cast1&127u)!=127u)?(((float)((cast1&7u)|((alu2!=0u)?8u:0u)))*as_type<float>(((((alu2>1u)?alu2:1u)+117u)<<23u))):NAN);
  uchar val2 = data3[gidx0];
  uint cast2 = ((uint)val2);
  uint alu4 = ((cast2>>3u)&15u);
  float alu5 = (((cast2&127u)!=127u)?(((float)((cast2&7u)|((alu4!=0u)?8u:0u)))*as_type<float>(((((alu4>1u)?alu4:1u)+117u)<<23u))):NAN);
  uint cast3 = as_type<uint>(fma((((cast0&128u)!=0u)?(-alu1):alu1),(((cast1&128u)!=0u)?(-alu3):alu3),(((cast2&128u)!=0u)?(-alu5):alu5)));
  uint alu6 = (cast3&2147483647u);
  uint alu7 = (alu6>>23u);
  uint alu8 = ((alu6&8388607u)|((alu7!=0u)?8388608u:0u));
  int alu9 = (((int)((alu7>1u)?alu7:1u))+(-121));
  int alu10 = (-alu9);
  int alu11 = ((alu10>0)?alu10:0);
  int alu12 = (((alu11<6)?alu11:6)+20);
  uint cast4 = ((uint)alu12);
  uint alu13 = ((((uint)((alu9>0)?alu9:0))<<3u)+(((alu8+((1u<<((uint)(alu12+(-1))))+4294967295u))+((alu8>>cast4)&1u))>>cast4));
  uint cast5 = ((uint)((uchar)(((alu6<2139095040u)?((alu13<127u)?alu13:126u):((alu6!=2139095040u)?127u:127u))|((cast3>>31u)<<7u))));
  uint alu14 = ((cast5>>3u)&15u);
  float alu15 = (((cast5&127u)!=127u)?(((float)((cast5&7u)|((alu14!=0u)?8u:0u)))*as_type<float>(((((alu14>1u)?alu14:1u)+117u)<<23u))):NAN);
  uint cast6 = as_type<uint>((((cast5&128u)!=0u)?(-alu15):alu15));
  uint alu16 = (cast6&2147483647u);
  uint alu17 = (alu16>>23u);
  uint alu18 = ((alu16&8388607u)|((alu17!=0u)?8388608u:0u));
  int alu19 = (((int)((alu17>1u)?alu17:1u))+(-121));
  int alu20 = (-alu19);
  int alu21 = ((alu20>0)?alu20:0);
  int alu22 = (((alu21<6)?alu21:6)+20);
  uint cast7 = ((uint)alu22);
  uint alu23 = ((((uint)((alu19>0)?alu19:0))<<3u)+(((alu18+((1u<<((uint)(alu22+(-1))))+4294967295u))+((alu18>>cast7)&1u))>>cast7));
  data0[gidx0] = ((uchar)(((alu16<2139095040u)?((alu23<127u)?alu23:126u):((alu16!=2139095040u)?127u:127u))|((cast6>>31u)<<7u)));
}
