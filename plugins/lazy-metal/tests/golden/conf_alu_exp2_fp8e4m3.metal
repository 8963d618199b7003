#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_exp2_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uint cast1 = as_type<uint>(precise::exp2((((cast0&128u)!=0u)?(-alu1):alu1)));
  uint alu2 = (cast1&2147483647u);
  uint alu3 = (alu2>>23u);
  uint alu4 = ((alu2&8388607u)|((alu3!=0u)?8388608u:0u));
  int alu5 = (((int)((alu3>1u)?alu3:1u))+(-121));
  int alu6 = (-alu5);
  int alu7 = ((alu6>0)?alu6:0);
  int alu8 = (((alu7<6)?alu7:6)+20);
  uint cast2 = ((uint)alu8);
  uint alu9 = ((((uint)((alu5>0)?alu5:0))<<3u)+(((alu4+((1u<<((uint)(alu8+(-1))))+4294967295u))+((alu4>>cast2)&1u))>>cast2));
  uint cast3 = ((uint)((uchar)(((alu2<2139095040u)?((alu9<127u)?alu9:126u):((alu2!=2139095040u)?127u:127u))|((cast1>>31u)<<7u))));
  uint alu10 = ((cast3>>3u)&15u);
  float alu11 = (((cast3&127u)!=127u)?(((float)((cast3&7u)|((alu10!=0u)?8u:0u)))*as_type<float>(((((alu10>1u)?alu10:1u)+117u)<<23u))):NAN);
  uint cast4 = as_type<uint>((((cast3&128u)!=0u)?(-alu11):alu11));
  uint alu12 = (cast4&2147483647u);
  uint alu13 = (alu12>>23u);
  uint alu14 = ((alu12&8388607u)|((alu13!=0u)?8388608u:0u));
  int alu15 = (((int)((alu13>1u)?alu13:1u))+(-121));
  int alu16 = (-alu15);
  int alu17 = ((alu16>0)?alu16:0);
  int alu18 = (((alu17<6)?alu17:6)+20);
  uint cast5 = ((uint)alu18);
  uint alu19 = ((((uint)((alu15>0)?alu15:0))<<3u)+(((alu14+((1u<<((uint)(alu18+(-1))))+4294967295u))+((alu14>>cast5)&1u))>>cast5));
  data0[gidx0] = ((uchar)(((alu12<2139095040u)?((alu19<127u)?alu19:126u):((alu12!=2139095040u)?127u:127u))|((cast4>>31u)<<7u)));
}
