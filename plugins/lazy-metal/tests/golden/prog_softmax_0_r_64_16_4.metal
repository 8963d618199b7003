#include <metal_stdlib>
using namespace metal;
kernel void r_64_16_4(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 64 */
  float4 acc0 = float4((-INFINITY),(-INFINITY),(-INFINITY),(-INFINITY));
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu0 = ((gidx0*64)+(ridx0*4));
    float4 val0 = float4(data1[alu0], data1[alu0+1], data1[alu0+2], data1[alu0+3]);
    acc0 = float4((((acc0[0]>=val0[0])||(acc0[0]!=acc0[0]))?acc0[0]:val0[0]),(((acc0[1]>=val0[1])||(acc0[1]!=acc0[1]))?acc0[1]:val0[1]),(((acc0[2]>=val0[2])||(acc0[2]!=acc0[2]))?acc0[2]:val0[2]),(((acc0[3]>=val0[3])||(acc0[3]!=acc0[3]))?acc0[3]:val0[3]));
  }
  float gep0 = acc0[0];
  float gep1 = acc0[1];
  float gep2 = acc0[2];
  float gep3 = acc0[3];
  float alu1 = (((gep0>=gep1)||(gep0!=gep0))?gep0:gep1);
  float alu2 = (((gep2>=gep3)||(gep2!=gep2))?gep2:gep3);
  data0[gidx0] = (((alu1>=alu2)||(alu1!=alu1))?alu1:alu2);
}
