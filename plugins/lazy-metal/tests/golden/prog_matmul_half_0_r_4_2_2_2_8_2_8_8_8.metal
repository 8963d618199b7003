#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;
float2 lazy_wmma_float_float(float2 a, float2 b, float2 c) {
  simdgroup_float8x8 ma, mb, mc;
  ma.thread_elements()[0] = a[0];
  ma.thread_elements()[1] = a[1];
  mb.thread_elements()[0] = b[0];
  mb.thread_elements()[1] = b[1];
  mc.thread_elements()[0] = c[0];
  mc.thread_elements()[1] = c[1];
  simdgroup_multiply_accumulate(mc, ma, mb, mc);
  return float2(mc.thread_elements()[0], mc.thread_elements()[1]);
}
kernel void r_4_2_2_2_8_2_8_8_8(device half* data0 [[buffer(0)]], device const half* data1 [[buffer(1)]], device const half* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 32 */
  int lidx1 = lid.y; /* 2 */
  int lidx2 = lid.z; /* 2 */
  int gidx0 = gid.x; /* 2 */
  int gidx1 = gid.y; /* 4 */
  float2 acc0 = float2(0.0f,0.0f);
  float2 acc1 = float2(0.0f,0.0f);
  for (int ridx0 = 0; ridx0 < 8; ridx0++) {
    int alu0 = (lidx0/2);
    int alu1 = (lidx0/4);
    int alu2 = (lidx0/8);
    int alu3 = ((((((alu0%2)*64)+((alu1%2)*128))+((alu2%2)*4))+((lidx0%2)*2))+((lidx0/16)*256));
    int alu4 = (((alu3+(gidx1*1024))+(lidx2*512))+(ridx0*8));
    half val0 = data1[alu4];
    half val1 = data1[(alu4+1)];
    float2 vec0 = float2(((float)val0),((float)val1));
    int alu5 = (((alu3+(gidx0*32))+(lidx1*16))+(ridx0*512));
    half val2 = data2[alu5];
    half val3 = data2[(alu5+1)];
    float2 wmma0 = lazy_wmma_float_float(vec0, float2(((float)val2),((float)val3)), acc0);
    acc0 = wmma0;
    half val4 = data2[(alu5+8)];
    half val5 = data2[(alu5+9)];
    float2 wmma1 = lazy_wmma_float_float(vec0, float2(((float)val4),((float)val5)), acc1);
    acc1 = wmma1;
  }
  int alu6 = (lidx0/2);
  int alu7 = (lidx0/4);
  int alu8 = (lidx0/8);
  int alu9 = ((((((((((alu6%2)*64)+((alu7%2)*128))+((alu8%2)*4))+((lidx0%2)*2))+((lidx0/16)*256))+(gidx1*1024))+(gidx0*32))+(lidx2*512))+(lidx1*16));
  data0[alu9] = ((half)acc0[0]);
  data0[(alu9+1)] = ((half)acc0[1]);
  data0[(alu9+8)] = ((half)acc1[0]);
  data0[(alu9+9)] = ((half)acc1[1]);
}
