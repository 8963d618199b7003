#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_fdiv_fp8e5m2(device uchar* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  uchar val1 = data2[gidx0];
  uint cast1 = ((uint)val1);
  uint alu3 = ((cast1>>2u)&31u);
  uint alu4 = (cast1&127u);
  float alu5 = ((alu4<124u)?(((float)((cast1&3u)|((alu3!=0u)?4u:0u)))*as_type<float>(((((alu3>1u)?alu3:1u)+110u)<<23u))):((alu4!=124u)?NAN:INFINITY));
  float alu6 = (((cast1&128u)!=0u)?(-alu5):alu5);
  float alu7 = (((alu6*alu6)<2.938735877055719e-39f)?1.8446744073709552e+19f:1.0f);
  uint cast2 = as_type<uint>((((((cast0&128u)!=0u)?(-alu2):alu2)*(1/(alu6*alu7)))*alu7));
  uint alu8 = (cast2&2147483647u);
  uint alu9 = (alu8>>23u);
  uint alu10 = ((alu8&8388607u)|((alu9!=0u)?8388608u:0u));
  int alu11 = (((int)((alu9>1u)?alu9:1u))+(-113));
  int alu12 = (-alu11);
  int alu13 = ((alu12>0)?alu12:0);
  int alu14 = (((alu13<5)?alu13:5)+21);
  uint cast3 = ((uint)alu14);
  uint alu15 = ((((uint)((alu11>0)?alu11:0))<<2u)+(((alu10+((1u<<((uint)(alu14+(-1))))+4294967295u))+((alu10>>cast3)&1u))>>cast3));
  uint cast4 = ((uint)((uchar)(((alu8<2139095040u)?((alu15<124u)?alu15:123u):((alu8!=2139095040u)?127u:124u))|((cast2>>31u)<<7u))));
  uint alu16 = ((cast4>>2u)&31u);
  uint alu17 = (cast4&127u);
  float alu18 = ((alu17<124u)?(((float)((cast4&3u)|((alu16!=0u)?4u:0u)))*as_type<float>(((((alu16>1u)?alu16:1u)+110u)<<23u))):((alu17!=124u)?NAN:INFINITY));
  uint cast5 = as_type<uint>((((cast4&128u)!=0u)?(-alu18):alu18));
  uint alu19 = (cast5&2147483647u);
  uint alu20 = (alu19>>23u);
  uint alu21 = ((alu19&8388607u)|((alu20!=0u)?8388608u:0u));
  int alu22 = (((int)((alu20>1u)?alu20:1u))+(-113));
  int alu23 = (-alu22);
  int alu24 = ((alu23>0)?alu23:0);
  int alu25 = (((alu24<5)?alu24:5)+21);
  uint cast6 = ((uint)alu25);
  uint alu26 = ((((uint)((alu22>0)?alu22:0))<<2u)+(((alu21+((1u<<((uint)(alu25+(-1))))+4294967295u))+((alu21>>cast6)&1u))>>cast6));
  data0[gidx0] = ((uchar)(((alu19<2139095040u)?((alu26<124u)?alu26:123u):((alu19!=2139095040u)?127u:124u))|((cast5>>31u)<<7u)));
}
