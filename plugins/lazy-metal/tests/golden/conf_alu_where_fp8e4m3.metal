#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_where_fp8e4m3(device uchar* data0 [[buffer(0)]], device const bool* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], device const uchar* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  bool val0 = data1[gidx0];
  uchar val1 = data2[gidx0];
  uint cast0 = ((uint)val1);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uchar val2 = data3[gidx0];
  uint cast1 = ((uint)val2);
  uint alu2 = ((cast1>>3u)&15u);
  float alu3 = (((cast1&127u)!=127u)?(((float)((cast1&7u)|((alu2!=0u)?8u:0u)))*as_type<float>(((((alu2>1u)?alu2:1u)+117u)<<23u))):NAN);
  uint cast2 = as_type<uint>((val0?(((cast0&128u)!=0u)?(-alu1):alu1):(((cast1&128u)!=0u)?(-alu3):alu3)));
  uint alu4 = (cast2&2147483647u);
  uint alu5 = (alu4>>23u);
  uint alu6 = ((alu4&8388607u)|((alu5!=0u)?8388608u:0u));
  int alu7 = (((int)((alu5>1u)?alu5:1u))+(-121));
  int alu8 = (-alu7);
  int alu9 = ((alu8>0)?alu8:0);
  int alu10 = (((alu9<6)?alu9:6)+20);
  uint cast3 = ((uint)alu10);
  uint alu11 = ((((uint)((alu7>0)?alu7:0))<<3u)+(((alu6+((1u<<((uint)(alu10+(-1))))+4294967295u))+((alu6>>cast3)&1u))>>cast3));
  data0[gidx0] = ((uchar)(((alu4<2139095040u)?((alu11<127u)?alu11:126u):((alu4!=2139095040u)?127u:127u))|((cast2>>31u)<<7u)));
}
