#include <metal_stdlib>
using namespace metal;
kernel void conf_cast_char_fp8e4m3(device uchar* data0 [[buffer(0)]], device const char* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 33 */
  char val0 = data1[gidx0];
  uint cast0 = as_type<uint>(((float)val0));
  uint alu0 = (cast0&2147483647u);
  uint alu1 = (alu0>>23u);
  uint alu2 = ((alu0&8388607u)|((alu1!=0u)?8388608u:0u));
  int alu3 = (((int)((alu1>1u)?alu1:1u))+(-121));
  int alu4 = (-alu3);
  int alu5 = ((alu4>0)?alu4:0);
  int alu6 = (((alu5<6)?alu5:6)+20);
  uint cast1 = ((uint)alu6);
  uint alu7 = ((((uint)((alu3>0)?alu3:0))<<3u)+(((alu2+((1u<<((uint)(alu6+(-1))))+4294967295u))+((alu2>>cast1)&1u))>>cast1));
  uint cast2 = ((uint)((uchar)(((alu0<2139095040u)?((alu7<127u)?alu7:126u):((alu0!=2139095040u)?127u:127u))|((cast0>>31u)<<7u))));
  uint alu8 = ((cast2>>3u)&15u);
  float alu9 = (((cast2&127u)!=127u)?(((float)((cast2&7u)|((alu8!=0u)?8u:0u)))*as_type<float>(((((alu8>1u)?alu8:1u)+117u)<<23u))):NAN);
  uint cast3 = as_type<uint>((((cast2&128u)!=0u)?(-alu9):alu9));
  uint alu10 = (cast3&2147483647u);
  uint alu11 = (alu10>>23u);
  uint alu12 = ((alu10&8388607u)|((alu11!=0u)?8388608u:0u));
  int alu13 = (((int)((alu11>1u)?alu11:1u))+(-121));
  int alu14 = (-alu13);
  int alu15 = ((alu14>0)?alu14:0);
  int alu16 = (((alu15<6)?alu15:6)+20);
  uint cast4 = ((uint)alu16);
  uint alu17 = ((((uint)((alu13>0)?alu13:0))<<3u)+(((alu12+((1u<<((uint)(alu16+(-1))))+4294967295u))+((alu12>>cast4)&1u))>>cast4));
  data0[gidx0] = ((uchar)(((alu10<2139095040u)?((alu17<127u)?alu17:126u):((alu10!=2139095040u)?127u:127u))|((cast3>>31u)<<7u)));
}
