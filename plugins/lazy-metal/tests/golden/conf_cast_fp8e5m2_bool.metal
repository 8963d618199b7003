#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_fp8e5m2_bool(device bool* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>2u)&31u);
  uint alu1 = (cast0&127u);
  float alu2 = ((alu1<124u)?(((float)((cast0&3u)|((alu0!=0u)?4u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+110u)<<23u))):((alu1!=124u)?NAN:INFINITY));
  data0[gidx0] = ((bool)(((cast0&128u)!=0u)?(-alu2):alu2));
}
