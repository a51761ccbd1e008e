// ---- CUDA dialect shim (NVRTC). Maps the kernel vocabulary onto CUDA built-ins.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef unsigned int uint;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned long long ulong;

#define DEVICE __device__ __forceinline__
#define GLOBAL                      /* address space of kernel buffers */
#define GROUP_SHARED __shared__     /* declares threadgroup memory */
#define GROUP_PTR                   /* address space of a pointer into it */
#define UNROLL _Pragma("unroll")
#define BARRIER() __syncthreads()
#define GROUP_X blockIdx.x
#define GROUP_Y blockIdx.y
#define THREAD_IN_GROUP threadIdx.x
#define GROUP_THREADS blockDim.x
#define SIMDGROUP_ID (threadIdx.x >> 5)
#define LANE_ID (threadIdx.x & 31u)

// One simdgroup (warp) is one row: the lane loop runs once, as this thread's lane.
#define FOR_EACH_ROW(row, R, RPG) \
  for (uint row = GROUP_X * (RPG) + SIMDGROUP_ID, once_row_ = 1u; once_row_ && row < (R); once_row_ = 0u)
#define LANE_ARRAY(type, name, n) type name[1][n]
#define FOR_EACH_LANE(lane) for (uint lane = LANE_ID, once_lane_ = 1u; once_lane_; once_lane_ = 0u)
#define LANE(name) name[0]
#define LANE_IS_ZERO (LANE_ID == 0u)
#define BUTTERFLY(name, i) lane_butterfly(name[0][i])
#define REDUCE_FAST(name, i) lane_reduce_fast(name[0][i])

// SPEC 5 step 4: v_l = v_l + v_(l xor o), o = 16, 8, 4, 2, 1.
DEVICE float lane_butterfly(float v) {
  UNROLL for (uint o = 16u; o > 0u; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Fast tier: any order; lane 0's value is the result.
DEVICE float lane_reduce_fast(float v) {
  UNROLL for (uint o = 16u; o > 0u; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

DEVICE uint bytesum(uint x) { return __dp4a(x, 0x01010101u, 0u); }
DEVICE float fma32(float a, float b, float c) { return __fmaf_rn(a, b, c); }
DEVICE float mul32(float a, float b) { return __fmul_rn(a, b); }
DEVICE float add32(float a, float b) { return __fadd_rn(a, b); }
DEVICE float div32(float a, float b) { return __fdiv_rn(a, b); }
DEVICE float half_bits_to_f32(uint b) { return __half2float(__ushort_as_half((unsigned short)b)); }
DEVICE float round_f16(float v) { return __half2float(__float2half_rn(v)); }
DEVICE float as_f32(uint b) { return __uint_as_float(b); }

DEVICE float to_f32(float v) { return v; }
DEVICE float to_f32(__half v) { return __half2float(v); }
DEVICE float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> DEVICE T from_f32(float v);
template <> DEVICE float from_f32<float>(float v) { return v; }
template <> DEVICE __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> DEVICE __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// round_T of SPEC 4, as an f32 value.
template <typename T> DEVICE float round_as(float v) { return to_f32(from_f32<T>(v)); }
DEVICE float native_exp(float v) { return expf(v); }
