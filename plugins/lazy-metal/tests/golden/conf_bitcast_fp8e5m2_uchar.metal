#include <metal_stdlib>
using namespace metal;
kernel void conf_bitcast_fp8e5m2_uchar(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
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
  int alu6 = (((int)((alu4>1u)?alu4:1u))+(-113));
  int alu7 = (-alu6);
  int alu8 = ((alu7>0)?alu7:0);
  int alu9 = (((alu8<5)?alu8:5)+21);
  uint cast2 = ((uint)alu9);
  uint alu10 = ((((uint)((alu6>0)?alu6:0))<<2u)+(((alu5+((1u<<((uint)(alu9+(-1))))+4294967295u))+((alu5>>cast2)&1u))>>cast2));
  data0[gidx0] = ((uchar)(((alu3<2139095040u)?((alu10<124u)?alu10:123u):((alu3!=2139095040u)?127u:124u))|((cast1>>31u)<<7u)));
}
