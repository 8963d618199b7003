#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_max_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  float alu2 = (((cast0&128u)!=0u)?(-alu1):alu1);
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu3 = ((cast1>>3u)&15u);
  float alu4 = (((cast1&127u)!=127u)?(((float)((cast1&7u)|((alu3!=0u)?8u:0u)))*as_type<float>(((((alu3>1u)?alu3:1u)+117u)<<23u))):NAN);
  float alu5 = (((cast1&128u)!=0u)?(-alu4):alu4);
  uint cast2 = as_type<uint>((((alu2>=alu5)||(alu2!=alu2))?alu2:alu5));
  uint alu6 = (cast2&2147483647u);
  uint alu7 = (alu6>>23u);
  uint alu8 = ((alu6&8388607u)|((alu7!=0u)?8388608u:0u));
  int alu9 = (((int)((alu7>1u)?alu7:1u))+(-121));
  int alu10 = (-alu9);
  int alu11 = ((alu10>0)?alu10:0);
  int alu12 = (((alu11<6)?alu11:6)+20);
  uint cast3 = ((uint)alu12);
  uint alu13 = ((((uint)((alu9>0)?alu9:0))<<3u)+(((alu8+((1u<<((uint)(alu12+(-1))))+4294967295u))+((alu8>>cast3)&1u))>>cast3));
  data0[gidx0] = ((uchar)(((alu6<2139095040u)?((alu13<127u)?alu13:126u):((alu6!=2139095040u)?127u:127u))|((cast2>>31u)<<7u)));
}
