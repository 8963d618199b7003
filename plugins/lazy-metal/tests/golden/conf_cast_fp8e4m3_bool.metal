#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_fp8e4m3_bool(device bool* data0 [[buffer(0)]], device const uchar* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  uchar val0 = data1[gidx0];
  uint cast0 = ((uint)val0);
  uint alu0 = ((cast0>>3u)&15u);
  float alu1 = (((cast0&127u)!=127u)?(((float)((cast0&7u)|((alu0!=0u)?8u:0u)))*as_type<float>(((((alu0>1u)?alu0:1u)+117u)<<23u))):NAN);
  data0[gidx0] = ((bool)(((cast0&128u)!=0u)?(-alu1):alu1));
}
