#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;
float2 lazy_wmma_half_float(half2 a, half2 b, float2 c) {
  simdgroup_float8x8 ma, mb, mc;
  ma.thread_elements()[0] = float(a[0]);
  ma.thread_elements()[1] = float(a[1]);
  mb.thread_elements()[0] = float(b[0]);
  mb.thread_elements()[1] = float(b[1]);
  mc.thread_elements()[0] = c[0];
  mc.thread_elements()[1] = c[1];
  simdgroup_multiply_accumulate(mc, ma, mb, mc);
  return float2(mc.thread_elements()[0], mc.thread_elements()[1]);
}
kernel void conf_wmma_simdgroup_8x8x8_half_float(device float* data0 [[buffer(0)]], device const half* data1 [[buffer(1)]], device const half* data2 [[buffer(2)]], device const float* data3 [[buffer(3)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 32 */
  int alu0 = (((((((lidx0>>1)&1)*8)+(((lidx0>>2)&1)*16))+(((lidx0>>4)&1)*32))+(((lidx0>>0)&1)*2))+(((lidx0>>3)&1)*4));
  int alu1 = (alu0+1);
  half val0 = data1[alu0];
  half val1 = data1[alu1];
  half val2 = data2[alu0];
  half val3 = data2[alu1];
  float val4 = data3[alu0];
  float val5 = data3[alu1];
  float2 wmma0 = lazy_wmma_half_float(half2(val0,val1), half2(val2,val3), float2(val4,val5));
  data0[alu0] = wmma0[0];
  data0[alu1] = wmma0[1];
}
