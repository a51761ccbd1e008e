// ---- CUDA dialect shim (NVRTC). Maps the kernel vocabulary onto CUDA built-ins.
// 16-bit floats are bit-wrappers converted with single PTX `cvt` instructions, so no
// CUDA header is needed at NVRTC time.
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

#include "simt_gpu.h"  // the row and lane vocabulary, shared with Metal (codegen::prelude inlines it)
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

struct __align__(2) f16_t { unsigned short bits; };
struct __align__(2) bf16_t { unsigned short bits; };

// c + byte sum in one instruction: dot product of the four bytes with (1, 1, 1, 1).
DEVICE uint bytesum_acc(uint x, uint c) { uint r; asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(0x01010101u), "r"(c)); return r; }
DEVICE float fma32(float a, float b, float c) { return __fmaf_rn(a, b, c); }
DEVICE float mul32(float a, float b) { return __fmul_rn(a, b); }
DEVICE float add32(float a, float b) { return __fadd_rn(a, b); }
DEVICE float div32(float a, float b) { return __fdiv_rn(a, b); }
DEVICE float half_bits_to_f32(uint b) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)b)); return f; }
DEVICE unsigned short f32_to_half_bits(float v) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); return h; }
DEVICE unsigned short f32_to_bf16_bits(float v) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v)); return h; }
DEVICE float round_f16(float v) { return half_bits_to_f32(f32_to_half_bits(v)); }
DEVICE float as_f32(uint b) { return __uint_as_float(b); }
// Bits lo >> off | hi << (32 - off), 0 < off < 32: one SHF.
DEVICE uint funnel_r(uint lo, uint hi, uint off) { return __funnelshift_r(lo, hi, off); }

DEVICE float to_f32(float v) { return v; }
DEVICE float to_f32(f16_t v) { return half_bits_to_f32(v.bits); }
DEVICE float to_f32(bf16_t v) { return __uint_as_float((uint)v.bits << 16); }
template <typename T> DEVICE T from_f32(float v);
template <> DEVICE float from_f32<float>(float v) { return v; }
template <> DEVICE f16_t from_f32<f16_t>(float v) { return f16_t{f32_to_half_bits(v)}; }
template <> DEVICE bf16_t from_f32<bf16_t>(float v) { return bf16_t{f32_to_bf16_bits(v)}; }
// round_T of SPEC 4, as an f32 value.
template <typename T> DEVICE float round_as(float v) { return to_f32(from_f32<T>(v)); }
// bf16: the packing convert (F2FP, 64/clk/SM) of (v, 0) leaves bf16(v) in the high half
// and zeros below, already the f32 bits of bf16(v); the single convert (F2F) is 16/clk.
template <> DEVICE float round_as<bf16_t>(float v) {
  uint b;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b) : "f"(v), "f"(0.0f));
  return __uint_as_float(b);
}

// x of one 32-weight run in registers (x_stage = registers), loaded as 16-byte vectors;
// 16-bit dtypes stay packed two to a word and are unpacked per use (one instruction,
// shared by the rows of the simdgroup). Runs start 64 (128) bytes apart: aligned.
struct __align__(16) u32x4_t { uint x, y, z, w; };
struct __align__(8) u32x2_t { uint x, y; };
template <typename T> struct xrun { uint w[8 * sizeof(T)]; };
template <typename T> DEVICE void xrun_load(xrun<T>& r, const T* p) {
  const u32x4_t* q = reinterpret_cast<const u32x4_t*>(p);
  UNROLL for (uint i = 0; i < 2u * sizeof(T); ++i) {
    const u32x4_t v = q[i];
    r.w[4u * i] = v.x; r.w[4u * i + 1u] = v.y; r.w[4u * i + 2u] = v.z; r.w[4u * i + 3u] = v.w;
  }
}
DEVICE float xrun_at(const xrun<float>& r, uint j) { return __uint_as_float(r.w[j]); }
DEVICE float xrun_at(const xrun<bf16_t>& r, uint j) {
  const uint p = r.w[j >> 1];
  return __uint_as_float((j & 1u) ? (p & 0xFFFF0000u) : (p << 16));
}
DEVICE float xrun_at(const xrun<f16_t>& r, uint j) {
  const uint p = r.w[j >> 1];
  return half_bits_to_f32((j & 1u) ? (p >> 16) : (p & 0xFFFFu));
}
// N consecutive code words from an address aligned to 4N bytes, as one vector load.
template <uint N> DEVICE void load_words(uint* w, const uint32_t* p);
template <> DEVICE void load_words<1>(uint* w, const uint32_t* p) { w[0] = p[0]; }
template <> DEVICE void load_words<2>(uint* w, const uint32_t* p) {
  const u32x2_t v = *reinterpret_cast<const u32x2_t*>(p);
  w[0] = v.x; w[1] = v.y;
}
template <> DEVICE void load_words<4>(uint* w, const uint32_t* p) {
  const u32x4_t v = *reinterpret_cast<const u32x4_t*>(p);
  w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}
DEVICE float native_exp(float v) { return expf(v); }
