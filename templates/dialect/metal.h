// ---- Metal dialect shim (MLX MetalKernel header). MLX writes the kernel signature;
// the body binds the attributes it needs by name (see the kernel body's first lines).
#include <metal_stdlib>
using namespace metal;
#pragma clang fp contract(off)  // SPEC 5: no contraction of separate multiply/add
typedef ulong ulong_t;

#define DEVICE inline
#define GLOBAL device
#define GROUP_SHARED threadgroup
#ifndef GROUP_PTR  // the simulator's <metal_stdlib> defines its own (threadgroup pointers)
#define GROUP_PTR threadgroup
#endif
#define UNROLL _Pragma("clang loop unroll(full)")
#define BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
#define GROUP_X group_x_
#define GROUP_Y group_y_
#define THREAD_IN_GROUP thread_in_group_
#define GROUP_THREADS group_threads_
#define SIMDGROUP_ID simdgroup_id_
#define LANE_ID lane_id_

#define FOR_EACH_ROW(row, R, RPG) \
  for (uint row = GROUP_X * (RPG) + SIMDGROUP_ID, once_row_ = 1u; once_row_ && row < (R); once_row_ = 0u)
#define FOR_EACH_ROWS(row0, R, RPG, RPS) \
  for (uint row0 = (GROUP_X * (RPG) + SIMDGROUP_ID) * (RPS), once_row_ = 1u; once_row_ && row0 < (R); once_row_ = 0u)
#define LANE_ARRAY(type, name, n) type name[1][n]
#define FOR_EACH_LANE(lane) for (uint lane = LANE_ID, once_lane_ = 1u; once_lane_; once_lane_ = 0u)
#define LANE(name) name[0]
#define LANE_IS_ZERO (LANE_ID == 0u)
#define BUTTERFLY(name, i) lane_butterfly(name[0][i])
#define REDUCE_FAST(name, i) simd_sum(name[0][i])

// SPEC 5 step 4 with explicit xor shuffles (simd_sum's order is unspecified).
DEVICE float lane_butterfly(float v) {
  UNROLL for (ushort o = 16; o > 0; o >>= 1) v = v + simd_shuffle_xor(v, o);
  return v;
}

DEVICE uint bytesum_acc(uint x, uint c) { return c + (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24); }
DEVICE float fma32(float a, float b, float c) { return metal::fma(a, b, c); }
DEVICE float mul32(float a, float b) { return a * b; }
DEVICE float add32(float a, float b) { return a + b; }
// MSL does not promise a correctly rounded `/`; refine the quotient with one fma step.
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
DEVICE uint funnel_r(uint lo, uint hi, uint off) { return (lo >> off) | (hi << (32u - off)); }
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
template <typename T> DEVICE float xrun_at(thread const xrun<T>& r, uint j) { return r.v[j]; }
template <uint N> DEVICE void load_words(thread uint* w, const device uint32_t* p) {
  UNROLL for (uint i = 0; i < N; ++i) w[i] = p[i];
}

// ---- Matrix units (fast tier) through simdgroup_matrix<half, 8, 8>. The body builds
// its operand words in the PTX m16n8k16 fragment layout (the decode is the same on
// every dialect); here a simdgroup stages one tile's fragments in threadgroup memory,
// multiplies the 16 x 16 A by the 16 x 8 B as 2 x 2 blocks of 8 x 8 matrices with
// simdgroup_multiply_accumulate, and reads its accumulator fragment back.
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = SIMDGROUP_ID, once_sg_ = 1u; once_sg_; once_sg_ = 0u)
#define MMA_SCRATCH(N) \
  threadgroup half mma_a_[(N) * 256]; threadgroup half mma_b_[(N) * 128]; threadgroup float mma_c_[(N) * 128]
#define WARP_MMA_F16(acc, ai, a, b, bi) \
  simdgroup_mma_m16n8k16(&(acc)[0][ai], (a)[0], &(b)[0][bi], mma_a_ + SIMDGROUP_ID * 256u, mma_b_ + SIMDGROUP_ID * 128u, mma_c_ + SIMDGROUP_ID * 128u, LANE_ID)
DEVICE half lo_half(uint w) { return as_type<half>(ushort(w & 0xFFFFu)); }
DEVICE half hi_half(uint w) { return as_type<half>(ushort(w >> 16)); }
DEVICE void simdgroup_mma_m16n8k16(thread float* c, thread const uint* a, thread const uint* b,
                                   GROUP_PTR half* sa, GROUP_PTR half* sb, GROUP_PTR float* sc, uint lane) {
  const uint g = lane >> 2, t = lane & 3u;
  sa[g * 16u + 2u * t] = lo_half(a[0]);             sa[g * 16u + 2u * t + 1u] = hi_half(a[0]);
  sa[(g + 8u) * 16u + 2u * t] = lo_half(a[1]);      sa[(g + 8u) * 16u + 2u * t + 1u] = hi_half(a[1]);
  sa[g * 16u + 2u * t + 8u] = lo_half(a[2]);        sa[g * 16u + 2u * t + 9u] = hi_half(a[2]);
  sa[(g + 8u) * 16u + 2u * t + 8u] = lo_half(a[3]); sa[(g + 8u) * 16u + 2u * t + 9u] = hi_half(a[3]);
  sb[(2u * t) * 8u + g] = lo_half(b[0]);            sb[(2u * t + 1u) * 8u + g] = hi_half(b[0]);
  sb[(2u * t + 8u) * 8u + g] = lo_half(b[1]);       sb[(2u * t + 9u) * 8u + g] = hi_half(b[1]);
  sc[g * 8u + 2u * t] = c[0];                       sc[g * 8u + 2u * t + 1u] = c[1];
  sc[(g + 8u) * 8u + 2u * t] = c[2];                sc[(g + 8u) * 8u + 2u * t + 1u] = c[3];
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 a00, a01, a10, a11, b0, b1;
  simdgroup_float8x8 c0, c1;
  simdgroup_load(a00, sa, 16, ulong2(0, 0));
  simdgroup_load(a01, sa, 16, ulong2(8, 0));
  simdgroup_load(a10, sa, 16, ulong2(0, 8));
  simdgroup_load(a11, sa, 16, ulong2(8, 8));
  simdgroup_load(b0, sb, 8);
  simdgroup_load(b1, sb + 64, 8);
  simdgroup_load(c0, sc, 8);
  simdgroup_load(c1, sc + 64, 8);
  simdgroup_multiply_accumulate(c0, a00, b0, c0);
  simdgroup_multiply_accumulate(c0, a01, b1, c0);
  simdgroup_multiply_accumulate(c1, a10, b0, c1);
  simdgroup_multiply_accumulate(c1, a11, b1, c1);
  simdgroup_store(c0, sc, 8);
  simdgroup_store(c1, sc + 64, 8);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  c[0] = sc[g * 8u + 2u * t];        c[1] = sc[g * 8u + 2u * t + 1u];
  c[2] = sc[(g + 8u) * 8u + 2u * t]; c[3] = sc[(g + 8u) * 8u + 2u * t + 1u];
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
DEVICE uint pack_f16x2(float lo, float hi) { return uint(as_type<ushort>(half(lo))) | (uint(as_type<ushort>(half(hi))) << 16); }
DEVICE uint f16x2_sub(uint a, uint b) {
  return pack_f16x2(float(lo_half(a)) - float(lo_half(b)), float(hi_half(a)) - float(hi_half(b)));
}
DEVICE uint and_xor(uint x, uint m, uint c) { return (x & m) ^ c; }
DEVICE uint opaque_u32(uint v) { return v; }
#define LOAD_STREAM(p) (*(p))
template <typename T> DEVICE void x_f16x2_quad2(const device T* p, thread uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[2u * i]), to_f32(p[2u * i + 1u]));
}
template <typename T> DEVICE void x_f16x2_dup2(const device T* p, thread uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[i]), to_f32(p[i]));
}
