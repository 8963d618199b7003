#include <metal_stdlib>
using namespace metal;
kernel void conf_alu_cmplt_fp8e5m2(device bool* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], device const uchar* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
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
  data0[gidx0] = ((((cast0&128u)!=0u)?(-alu2):alu2)<(((cast1&128u)!=0u)?(-alu5):alu5));
}
