#include <metal_stdlib>
using namespace metal;
kernel void conf_bitcast_uchar_fp8e4m3(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  uint cast1 = as_type<uint>((((cast0&128u)!=0u)?(-alu1):alu1));
  uint alu2 = (cast1&2147483647u);
  uint alu3 = (alu2>>23u);
  uint alu4 = ((alu2&8388607u)|((alu3!=0u)?8388608u:0u));
  int alu5 = (((int)((alu3>1u)?alu3:1u))+(-121));
  int alu6 = (-alu5);
  int alu7 = ((alu6>0)?alu6:0);
  int alu8 = (((alu7<6)?alu7:6)+20);
  uint cast2 = ((uint)alu8);
  uint alu9 = ((((uint)((alu5>0)?alu5:0))<<3u)+(((alu4+((1u<<((uint)(alu8+(-1))))+4294967295u))+((alu4>>cast2)&1u))>>cast2));
  data0[gidx0] = ((uchar)(((alu2<2139095040u)?((alu9<127u)?alu9:126u):((alu2!=2139095040u)?127u:127u))|((cast1>>31u)<<7u)));
}
