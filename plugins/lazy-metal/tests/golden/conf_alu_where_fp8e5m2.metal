#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_where_fp8e5m2(device uchar* data0 [[buffer(0)]], device const bool* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], device const uchar* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  bool val0 = data1[gidx0];
  uchar val1 = data2[gidx0];
  uint cast0 = ((uint)val1);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  uchar val2 = data3[gidx0];
  uint cast1 = ((uint)val2);
  uint alu3 = ((cast1>>2u)&31u);
  uint alu4 = (cast1&127u);
  float alu5 = ((alu4<124u)?(((float)((cast1&3u)|((alu3!=0u)?4u:0u)))*as_type<float>(((((alu3>1u)?alu3:1u)+110u)<<23u))):((alu4!=124u)?NAN:INFINITY));
  uint cast2 = as_type<uint>((val0?(((cast0&128u)!=0u)?(-alu2):alu2):(((cast1&128u)!=0u)?(-alu5):alu5)));
  uint alu6 = (cast2&2147483647u);
  uint alu7 = (alu6>>23u);
  uint alu8 = ((alu6&8388607u)|((alu7!=0u)?8388608u:0u));
  int alu9 = (((int)((alu7>1u)?alu7:1u))+(-113));
  int alu10 = (-alu9);
  int alu11 = ((alu10>0)?alu10:0);
  int alu12 = (((alu11<5)?alu11:5)+21);
  uint cast3 = ((uint)alu12);
  uint alu13 = ((((uint)((alu9>0)?alu9:0))<<2u)+(((alu8+((1u<<((uint)(alu12+(-1))))+4294967295u))+((alu8>>cast3)&1u))>>cast3));
  data0[gidx0] = ((uchar)(((alu6<2139095040u)?((alu13<124u)?alu13:123u):((alu6!=2139095040u)?127u:124u))|((cast2>>31u)<<7u)));
}
