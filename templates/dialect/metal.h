// ---- Metal dialect shim (MLX MetalKernel header). MLX writes the kernel signature;
// the body binds the attributes it needs by name (see the kernel body's first lines).
#include <metal_stdlib>
using namespace metal;
#pragma clang fp contract(off)  // SPEC 5: no contraction of separate multiply/add

#define DEVICE inline
#define GLOBAL device
#define GROUP_SHARED threadgroup
#ifndef GROUP_PTR  // the simulator's <metal_stdlib> defines its own (threadgroup pointers)
#define GROUP_PTR threadgroup
#endif
#define THREAD_PTR thread  // address space of a pointer to a thread's own array
#define UNROLL _Pragma("clang loop unroll(full)")
#define BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
#define GROUP_X group_x_
#define GROUP_Y group_y_
#define THREAD_IN_GROUP thread_in_group_
#define GROUP_THREADS group_threads_
#define SIMDGROUP_ID simdgroup_id_
#define LANE_ID lane_id_

#include "simt_gpu.h"  // the row and lane vocabulary, shared with CUDA (codegen::prelude inlines it)
#define REDUCE_FAST(name, i) simd_sum(name[0][i])

// SPEC 5 step 4 with explicit xor shuffles (simd_sum's order is unspecified).
DEVICE float lane_butterfly(float v) {
  UNROLL for (ushort o = 16; o > 0; o >>= 1) v = v + simd_shuffle_xor(v, o);
  return v;
}

#include "simt_emulated.h"  // bytesum_acc, funnel_r: shared with the CPU (codegen::prelude inlines it)
DEVICE float fma32(float a, float b, float c) { return metal::fma(a, b, c); }
DEVICE float mul32(float a, float b) { return a * b; }
DEVICE float add32(float a, float b) { return a + b; }
// One fma step (Markstein's) after `1.0f / b`: correctly rounded if MSL's `/` is (its
// accuracy table, fast math off), and if it is within an ulp unless b's significand is all ones.
DEVICE float div32(float a, float b) {
  const float r = 1.0f / b, q = a * r;
  return metal::fma(metal::fma(-q, b, a), r, q);
}
DEVICE float half_bits_to_f32(uint b) { return float(as_type<half>(ushort(b))); }
DEVICE float round_f16(float v) { return float(half(v)); }
DEVICE float as_f32(uint b) { return as_type<float>(b); }

DEVICE float to_f32(float v) { return v; }
DEVICE float to_f32(half v) { return float(v); }
DEVICE float to_f32(bfloat16_t v) { return float(v); }
template <typename T> DEVICE T from_f32(float v) { return static_cast<T>(v); }
template <typename T> DEVICE float round_as(float v) { return to_f32(from_f32<T>(v)); }
DEVICE float native_exp(float v) { return metal::exp(v); }
// x of one run in registers (x_stage = registers): eight vec<T, 4> loads converted to
// float4, as the seed does.
template <typename T> struct xrun { float v[32]; };
template <typename T> DEVICE void xrun_load(thread xrun<T>& r, const device T* p) {
  const device vec<T, 4>* q = (const device vec<T, 4>*)p;
  UNROLL for (uint i = 0; i < 8u; ++i) {
    const float4 f = float4(q[i]);
    r.v[4u * i] = f.x; r.v[4u * i + 1u] = f.y; r.v[4u * i + 2u] = f.z; r.v[4u * i + 3u] = f.w;
  }
}
// Run l of the 1024-column slice of a lane-interleaved x (`Activations::lane_interleaved`):
// 16-byte chunk i at chunk 32 i + l.
template <typename T> DEVICE void xrun_load_interleaved(thread xrun<T>& r, const device T* slice, uint l) {
  const uint e = 16u / sizeof(T);
  UNROLL for (uint i = 0; i < 8u; ++i) {
    const uint j = 4u * i;  // the run's value j: chunk j / e, its (j % e)-th value
    const float4 f = float4(*(const device vec<T, 4>*)(slice + (32u * (j / e) + l) * e + j % e));
    r.v[j] = f.x; r.v[j + 1u] = f.y; r.v[j + 2u] = f.z; r.v[j + 3u] = f.w;
  }
}
template <typename T> DEVICE float xrun_at(thread const xrun<T>& r, uint j) { return r.v[j]; }
template <uint N> DEVICE void load_words(thread uint* w, const device uint32_t* p) {
  UNROLL for (uint i = 0; i < N; ++i) w[i] = p[i];
}
