#include <metal_stdlib>
using namespace metal;
kernel void r_64_16_2_4(device float* data0 [[buffer(0)]], device const float* data1 [[buffer(1)]], device const float* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 64 */
  float4 acc0 = float4(0.0f,0.0f,0.0f,0.0f);
  float4 acc1 = float4(0.0f,0.0f,0.0f,0.0f);
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu0 = ((gidx0*64)+(ridx0*4));
    float4 val0 = float4(data1[alu0], data1[alu0+1], data1[alu0+2], data1[alu0+3]);
    float val1 = data2[gidx0];
    float4 vec0 = float4(val1,val1,val1,val1);
    bool4 alu1 = bool4((val0[0]!=vec0[0]),(val0[1]!=vec0[1]),(val0[2]!=vec0[2]),(val0[3]!=vec0[3]));
    float4 vec1 = float4(0.0f,0.0f,0.0f,0.0f);
    float4 vec2 = float4(1.0f,1.0f,1.0f,1.0f);
    float4 alu2 = float4((alu1[0]?vec1[0]:vec2[0]),(alu1[1]?vec1[1]:vec2[1]),(alu1[2]?vec1[2]:vec2[2]),(alu1[3]?vec1[3]:vec2[3]));
    bool4 alu3 = bool4((alu2[0]!=vec1[0]),(alu2[1]!=vec1[1]),(alu2[2]!=vec1[2]),(alu2[3]!=vec1[3]));
    float4 alu4 = precise::exp2(((val0+(-vec0))*float4(1.4426950216293335f,1.4426950216293335f,1.4426950216293335f,1.4426950216293335f)));
    acc0 = (acc0+float4((alu3[0]?alu4[0]:vec1[0]),(alu3[1]?alu4[1]:vec1[1]),(alu3[2]?alu4[2]:vec1[2]),(alu3[3]?alu4[3]:vec1[3])));
    float4 alu5 = float4((alu1[0]?vec2[0]:vec1[0]),(alu1[1]?vec2[1]:vec1[1]),(alu1[2]?vec2[2]:vec1[2]),(alu1[3]?vec2[3]:vec1[3]));
    bool4 alu6 = bool4((alu5[0]!=vec1[0]),(alu5[1]!=vec1[1]),(alu5[2]!=vec1[2]),(alu5[3]!=vec1[3]));
    acc1 = (acc1+float4((alu6[0]?alu4[0]:vec1[0]),(alu6[1]?alu4[1]:vec1[1]),(alu6[2]?alu4[2]:vec1[2]),(alu6[3]?alu4[3]:vec1[3])));
  }
  float alu7 = ((acc1[0]+acc1[1])+(acc1[2]+acc1[3]));
  int alu8 = (gidx0*2);
  data0[alu8] = ((acc0[0]+acc0[1])+(acc0[2]+acc0[3]));
  data0[(alu8+1)] = alu7;
}
