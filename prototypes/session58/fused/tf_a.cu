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

// One simdgroup (warp) is one row: the lane loop runs once, as this thread's lane.
#define FOR_EACH_ROW(row, R, RPG) \
  for (uint row = GROUP_X * (RPG) + SIMDGROUP_ID, once_row_ = 1u; once_row_ && row < (R); once_row_ = 0u)
// A simdgroup holds RPS consecutive rows from row0 (rows_per_simd): each lane keeps its
// lane's partials of all of them, so one x load serves RPS rows.
#define FOR_EACH_ROWS(row0, R, RPG, RPS) \
  for (uint row0 = (GROUP_X * (RPG) + SIMDGROUP_ID) * (RPS), once_row_ = 1u; once_row_ && row0 < (R); once_row_ = 0u)
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

// ---- Shared by every dialect: SPEC section 3 codes and section 6 exp, written once.
// Constants come from src/codes.rs; the dialect shim above supplies the primitives.

// bytesum_acc(x, c) = c + byte sum of x (the shim's). With c = 0x4B000000, the bits of
// the f32 2^23, the result is the bits of the f32 2^23 + byte sum: an exact int -> float
// conversion without a conversion instruction.

// 1mad: byte sum of an LCG step, centred, divided by 1125371120 (as f32 bits).
// bytesum_acc on the bits of 1.5 * 2^23 - 510 gives the f32 1.5 * 2^23 + (y - 510) for
// every byte sum y (one binade, so the bits add exactly); one subtraction leaves the
// centred sum. The quotient is fma(a, hi, a * lo) with hi + lo the split reciprocal,
// which equals the IEEE division for all 1021 centred sums (exhaustive test in
// src/codes.rs): one multiply and one fma, identical bits in every dialect.
DEVICE float trellis_value_onemad(uint s) {
  const float a = add32(as_f32(bytesum_acc(s * 34038481u + 76625530u, 0x4B400000u - 510u)), -12582912.0f);
  return fma32(a, as_f32(1004385351u), mul32(a, as_f32(2943649470u)));
}
// 3inst and mcg: two halves of a masked word, added, rounded to f16.
DEVICE float trellis_half_pair(uint x) {
  const uint r = (x & 2415890431u) ^ 996162400u;
  return round_f16(add32(half_bits_to_f32(r >> 16), half_bits_to_f32(r & 0xFFFFu)));
}
DEVICE float trellis_value_threeinst(uint s) { return trellis_half_pair(s * 89226354u + 64248484u); }
DEVICE float trellis_value_mcg(uint s) { return trellis_half_pair(s * 3417055213u); }
// mul1: byte sum through one f16 multiply-add (exact in f32, so one rounding).
DEVICE float trellis_value_mul1(uint s) {
  const float y = as_f32(bytesum_acc(s * 2212286765u, 0x4B000000u + 1024u)) - 8388608.0f;
  return round_f16(fma32(y, as_f32(1004388352u), as_f32(3240501248u)));
}

// The L-bit state of weight j (0..31) of a run, from the k+1 words that hold the run
// (SPEC 2: weight t starts at bit (T-1-t)*k; the run's words start at a word boundary).
// With j unrolled every shift is a constant: one shift (a funnel shift when the window
// crosses a word) and one mask.
#define TRELLIS_STATE(w, j, K, L) \
  (((((31u - (j)) * (K)) & 31u) + (L) > 32u \
     ? funnel_r((w)[((31u - (j)) * (K)) >> 5], (w)[(((31u - (j)) * (K)) >> 5) + 1u], ((31u - (j)) * (K)) & 31u) \
     : (w)[((31u - (j)) * (K)) >> 5] >> (((31u - (j)) * (K)) & 31u)) \
   & ((1u << (L)) - 1u))

// SPEC 6 exp_spec: a fixed sequence of f32 operations, identical on every backend.
DEVICE float exp_spec(float x) {
  x = fmin(fmax(x, -86.0f), 80.0f);
  const float n = rint(mul32(x, as_f32(0x3FB8AA3Bu)));
  float r = fma32(n, -0.693359375f, x);
  r = fma32(n, as_f32(0x395E8083u), r);
  float p = 1.9875691500e-4f;
  p = fma32(p, r, 1.3981999507e-3f);
  p = fma32(p, r, 8.3334519073e-3f);
  p = fma32(p, r, 4.1665795894e-2f);
  p = fma32(p, r, 1.6666665459e-1f);
  p = fma32(p, r, 5.0000001201e-1f);
  const float z = mul32(r, r);
  const float e = add32(fma32(p, z, r), 1.0f);
  return mul32(e, as_f32((uint)((int)n + 127) << 23));
}
// SPEC 6 exact tail: round_T(round_T(silu(g)) * u) for already rounded g and u.
template <typename T> DEVICE float swiglu_exact(float g, float u) {
  const float sig = div32(1.0f, add32(1.0f, exp_spec(-g)));
  return round_as<T>(mul32(round_as<T>(mul32(g, sig)), u));
}
// Native tail: the backend's own exp; checked against exact within a tolerance.
template <typename T> DEVICE float swiglu_native(float g, float u) {
  const float sig = 1.0f / (1.0f + native_exp(-g));
  return round_as<T>(round_as<T>(g * sig) * u);
}


// ---- Matrix units (fast tier). One simdgroup (warp) is a 16-row tile; the body runs
// once per simdgroup, as this thread's lane.
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = SIMDGROUP_ID, once_sg_ = 1u; once_sg_; once_sg_ = 0u)
#define MMA_SCRATCH_F16(N)  /* Metal stages fragments in threadgroup memory; CUDA needs none */
#define MMA_SCRATCH_BF16(N)
// A register budget per thread, for a header's KERNEL_ATTRS (see `codegen::cuda_unit`).
#define MAX_REGISTERS(n) __maxnreg__(n)
// acc[ai..ai+4] += A(a[0..4]) * B(b[bi..bi+2]): mma.sync m16n8k16 with the PTX fragment
// layouts (lane = 4 g + t: a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// b0 (k 2t.., n g), b1 (k 2t+8.., n g); c0/c1 (g, 2t/2t+1), c2/c3 (g+8, 2t/2t+1)).
#define WARP_MMA_F16(acc, ai, a, b, bi) mma_m16n8k16_f16(&(acc)[0][ai], (a)[0], &(b)[0][bi])
#define WARP_MMA_BF16(acc, ai, a, b, bi) mma_m16n8k16_bf16(&(acc)[0][ai], (a)[0], &(b)[0][bi])
DEVICE void mma_m16n8k16_f16(float* c, const uint* a, const uint* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
DEVICE void mma_m16n8k16_bf16(float* c, const uint* a, const uint* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Two f32 as f16 (bf16), round to nearest even, `lo` in the lower half: one cvt.
DEVICE uint pack_f16x2(float lo, float hi) { uint r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
DEVICE uint pack_bf16x2(float lo, float hi) { uint r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
// Threadgroup words, 4 (2) from an address aligned to 16 (8) bytes: one LDS.128 (.64).
// The step loop unrolled twice: the next step's words land in the other buffer, no copies.
#define UNROLL2 _Pragma("unroll 2")
#define GROUP_ALIGN16 __align__(16)
DEVICE void group_load4(uint* w, const uint* p) { const uint4 v = *reinterpret_cast<const uint4*>(p); w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }
DEVICE void group_load2(uint* w, const uint* p) { const uint2 v = *reinterpret_cast<const uint2*>(p); w[0] = v.x; w[1] = v.y; }
// One 16-bit half duplicated: one PRMT.
DEVICE uint mul_lo(uint a, uint b) { uint r; asm("mul.lo.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
DEVICE uint dup_lo16(uint w) { return __byte_perm(w, 0u, 0x1010); }
DEVICE uint dup_hi16(uint w) { return __byte_perm(w, 0u, 0x3232); }
DEVICE uint f16x2_sub(uint a, uint b) { uint r; asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
// (x & m) ^ c as one LOP3 (ptxas splits it when m and c are immediates: pass them through
// opaque_u32 once, outside the loop).
DEVICE uint and_xor(uint x, uint m, uint c) { uint r; asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(r) : "r"(x), "r"(m), "r"(c)); return r; }
DEVICE uint opaque_u32(uint v) { uint r; asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v)); return r; }
// Code words are read once: evict-first loads.
DEVICE uint load_stream(const uint* p) { uint v; asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(v) : "l"(p)); return v; }
#define LOAD_STREAM(p) load_stream(p)
// B fragments of two mmas from x in one load, as f16 pairs (`dup`: x duplicated against
// the two halves of a 3inst weight): `quad2` gives (p[0], p[1]), (p[2], p[3]), (p[4], p[5]),
// (p[6], p[7]); `dup2` gives (p[0], p[0]), (p[1], p[1]), (p[2], p[2]), (p[3], p[3]).
DEVICE void x_f16x2_quad2(const f16_t* p, uint* b) { const uint4 v = *(const uint4*)p; b[0] = v.x; b[1] = v.y; b[2] = v.z; b[3] = v.w; }
DEVICE void x_f16x2_quad2(const bf16_t* p, uint* b) {
  const uint4 v = *(const uint4*)p;
  b[0] = pack_f16x2(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u));
  b[1] = pack_f16x2(__uint_as_float(v.y << 16), __uint_as_float(v.y & 0xFFFF0000u));
  b[2] = pack_f16x2(__uint_as_float(v.z << 16), __uint_as_float(v.z & 0xFFFF0000u));
  b[3] = pack_f16x2(__uint_as_float(v.w << 16), __uint_as_float(v.w & 0xFFFF0000u));
}
DEVICE void x_f16x2_quad2(const float* p, uint* b) {
  const float4 v = *(const float4*)p, w = *(const float4*)(p + 4);
  b[0] = pack_f16x2(v.x, v.y); b[1] = pack_f16x2(v.z, v.w); b[2] = pack_f16x2(w.x, w.y); b[3] = pack_f16x2(w.z, w.w);
}
// bf16 operands: bf16 x as it is.
DEVICE void x_bf16x2_quad2(const bf16_t* p, uint* b) { const uint4 v = *(const uint4*)p; b[0] = v.x; b[1] = v.y; b[2] = v.z; b[3] = v.w; }
DEVICE void x_f16x2_dup2(const f16_t* p, uint* b) {
  const uint2 v = *(const uint2*)p;
  b[0] = __byte_perm(v.x, 0u, 0x1010); b[1] = __byte_perm(v.x, 0u, 0x3232); b[2] = __byte_perm(v.y, 0u, 0x1010); b[3] = __byte_perm(v.y, 0u, 0x3232);
}
DEVICE void x_f16x2_dup2(const bf16_t* p, uint* b) {
  const uint2 v = *(const uint2*)p;
  const float f0 = __uint_as_float(v.x << 16), f1 = __uint_as_float(v.x & 0xFFFF0000u);
  const float f2 = __uint_as_float(v.y << 16), f3 = __uint_as_float(v.y & 0xFFFF0000u);
  b[0] = pack_f16x2(f0, f0); b[1] = pack_f16x2(f1, f1); b[2] = pack_f16x2(f2, f2); b[3] = pack_f16x2(f3, f3);
}
DEVICE void x_f16x2_dup2(const float* p, uint* b) {
  const float4 v = *(const float4*)p;
  b[0] = pack_f16x2(v.x, v.x); b[1] = pack_f16x2(v.y, v.y); b[2] = pack_f16x2(v.z, v.z); b[3] = pack_f16x2(v.w, v.w);
}
// Split-K arrivals (reduce_mma k_split > 1): a device-scope fence, a counter bump, and a
// load of another threadgroup's part that bypasses this SM's L1 (not coherent).
DEVICE void device_fence() { __threadfence(); }
DEVICE uint atomic_add_u32(uint* p, uint v) { return atomicAdd(p, v); }
DEVICE float load_coherent(const float* p) { float v; asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v; }

// ---- Fast tier on matrix units, shared by every dialect (after the dialect's matrix-unit
// shim): operand words of two f16 (lower half = lower k-slot). Only the matrix-unit
// families include this, so the SIMT kernels' units do not change with it.
// 1mad: f16 bits of 1024 + byte sum straight from the byte-sum primitive (exact: the
// f16 spacing at 1024..2047 is 1), packed two to a word, one packed subtraction centres
// both exactly; the division by the divisor goes to the f32 epilogue with the row scale.
// d0 < 2^16, so the packing is one multiply-add (the integer ALU pipe, busiest with the
// state windows, is spared a PRMT).
DEVICE uint trellis_f16x2_onemad(uint s0, uint s1) {
  const uint d0 = bytesum_acc(s0 * 34038481u + 76625530u, 0x6400u);
  const uint d1 = bytesum_acc(s1 * 34038481u + 76625530u, 0x6400u);
  return f16x2_sub(d1 * 65536u + d0, 1711171070u);
}
// bf16 operands: the centred byte sum exactly in f32 (2^23 + sum as bits, less 2^23 + the
// centre: both in one binade), two rounded to bf16 (2^-9) and packed.
DEVICE uint trellis_bf16x2_onemad(uint s0, uint s1) {
  const float y0 = add32(as_f32(bytesum_acc(s0 * 34038481u + 76625530u, 0x4B000000u)), as_f32(-889191938u));
  const float y1 = add32(as_f32(bytesum_acc(s1 * 34038481u + 76625530u, 0x4B000000u)), as_f32(-889191938u));
  return pack_bf16x2(y0, y1);
}
DEVICE float trellis_onemad_divisor() { return as_f32(1125371120u); }
// The L-bit state of weight j as TRELLIS_STATE, with a window inside one word taken as a
// multiply by a power of two (top-aligned: IMAD.SHL, the FMA pipe) and one right shift,
// instead of shift and mask (both on the integer ALU pipe).
#define MMA_SH_(j, K) (((31u - (j)) * (K)) & 31u)
#define MMA_IX_(j, K) (((31u - (j)) * (K)) >> 5)
#define MMA_STATE(w, j, K, L) \
  ((MMA_SH_(j, K) + (L) > 32u) \
     ? (funnel_r((w)[MMA_IX_(j, K)], (w)[MMA_IX_(j, K) + 1u], MMA_SH_(j, K)) & ((1u << (L)) - 1u)) \
     : (mul_lo((w)[MMA_IX_(j, K)], 1u << (32u - (L) - MMA_SH_(j, K))) >> (32u - (L))))
// 3inst and mcg: the masked word is the two f16 halves whose sum is the value (before
// its f16 rounding); fed as two k-slots against x duplicated, the matrix unit adds them.
// Mask and xor come as arguments so a dialect can keep them in registers (one LOP3).
DEVICE uint trellis_half_pair_mask() { return 2415890431u; }
DEVICE uint trellis_half_pair_xor() { return 996162400u; }
DEVICE uint trellis_f16x2_threeinst(uint s, uint mask, uint xr) { return and_xor(s * 89226354u + 64248484u, mask, xr); }
DEVICE uint trellis_f16x2_mcg(uint s, uint mask, uint xr) { return and_xor(s * 3417055213u, mask, xr); }

typedef bf16_t act_t;
#define TW_SH_(j, K) (((31u - (j)) * (K)) & 31u)
#define TW_IX_(j, K) (((31u - (j)) * (K)) >> 5)
#define TW_WIN_(w, ix, sh) ((sh) == 0u ? (w)[ix] : funnel_r((w)[ix], (w)[(ix) + 1u], (sh)))
#define TRELLIS_STATE_PAIRED(w, j, K, L) \
  (TW_SH_(j, K) >= 32u - (L) \
     ? TW_WIN_(w, TW_IX_(j, K), TW_SH_(j, K) - (32u - (L))) >> (32u - (L)) \
     : TW_WIN_(w, TW_IX_(j, K), TW_SH_(j, K)) & ((1u << (L)) - 1u))
// The threads that run a threadgroup, known to the compiler (the CPU shim runs a group on one).
#define GROUP_THREADS_FIXED 256u
// The fused staging: a simdgroup's lanes (the CPU runs a group as one thread), its
// simdgroups; its threads' values of x (eight bf16 as four words), their largest
// magnitude, whether one is tiny against `floor_tiny`.
#define FX_LANES (GROUP_THREADS_FIXED < 32u ? GROUP_THREADS_FIXED : 32u)
#define FX_WARPS (GROUP_THREADS_FIXED / FX_LANES)
#ifndef THREAD_PTR  // a pointer to a thread's own array: Metal's `thread`, elsewhere plain
#define THREAD_PTR
#endif
DEVICE uint f32_bits(float v) { return __float_as_uint(v); }
DEVICE float fx_shuffle_xor(float v, uint o) { return __shfl_xor_sync(0xffffffffu, v, o); }
// floor(log2(v)) for a normal v > 0; -127 for a subnormal, which gives the rule the same
// e (clamped to -126) and the same flag as the exact floor would.
DEVICE int top_bits(float v) { return (int)(f32_bits(v) >> 23) - 127; }
// The largest over a simdgroup's lanes (xor shuffles; fmax drops NaN as the folds do).
DEVICE float fx_lane_max(float v) {
  UNROLL for (uint o = FX_LANES / 2u; o > 0u; o >>= 1) v = fmax(v, fx_shuffle_xor(v, o));
  return v;
}
DEVICE void x_raw8(const GLOBAL act_t* p, THREAD_PTR uint* w) { load_words<4u>(w, (const GLOBAL uint32_t*)p); }
DEVICE float fx_lo(uint w) { return as_f32(w << 16); }
DEVICE float fx_hi(uint w) { return as_f32(w & 0xFFFF0000u); }
DEVICE float fx_absmax8(THREAD_PTR const uint* w) {
  float m = 0.0f;
  UNROLL for (uint k = 0; k < 4u; ++k) {
    const float lo = fx_lo(w[k]), hi = fx_hi(w[k]);
    m = fmax(m, fmax(fmax(lo, -lo), fmax(hi, -hi)));
  }
  return m;
}
DEVICE uint fx_tiny8(THREAD_PTR const uint* w, float floor_tiny) {
  uint t = 0u;
  UNROLL for (uint k = 0; k < 4u; ++k) {
    const float lo = fx_lo(w[k]), hi = fx_hi(w[k]);
    if ((lo != 0.0f && fmax(lo, -lo) < floor_tiny) || (hi != 0.0f && fmax(hi, -hi) < floor_tiny)) t = 1u;
  }
  return t;
}

extern "C" __global__ void reduce_mma_3f1d88ac55760e89(const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes, const f16_t* __restrict__ scales, const float* __restrict__ table, const float* __restrict__ unscale, bf16_t* __restrict__ y, float* __restrict__ ws) {

  const uint m0 = GROUP_Y * 16u;  // first sample of this slice
  const uint z0 = 0u, z1 = 40u;  // every step
  GROUP_SHARED float red[1024];
  MMA_SCRATCH_F16(8u);
  // x of the slice's samples in steps [z0, z1) as f16 pairs, converted once per
  // threadgroup; run 4 z0 + u of sample n at word n * stride + xs_run(u) (the padding
  // keeps fragment reads apart).
  // The fused prescale's folds (per staged sample, a word per simdgroup) and each
  // sample's 2^e.
  GROUP_SHARED float fx_part[1u * FX_WARPS], fx_tinyp[1u * FX_WARPS];
  GROUP_SHARED float xup[1];
  GROUP_SHARED GROUP_ALIGN16 uint xs[2888];
  
  const uint q0 = z0 * 16u, nq = 640u;
  const uint fx_warp = THREAD_IN_GROUP / FX_LANES, fx_lane = THREAD_IN_GROUP % FX_LANES;
  uint fx_raw[(640u + GROUP_THREADS_FIXED - 1u) / GROUP_THREADS_FIXED][4];
  float fx_mx[1];
  UNROLL for (uint s = 0; s < 1u; ++s) fx_mx[s] = 0.0f;
  UNROLL for (uint c = 0; c < (640u + GROUP_THREADS_FIXED - 1u) / GROUP_THREADS_FIXED; ++c) {
    const uint ic = THREAD_IN_GROUP + c * GROUP_THREADS_FIXED, i = ic < 1u * nq ? ic : 1u * nq - 1u;
    const uint n = i / nq, q = q0 + (i - n * nq);
    const uint nx = m0 + n < 1u ? m0 + n : 0u;
    x_raw8(x + (ulong)nx * 5120u + q * 8u, fx_raw[c]);
    const float a = fx_absmax8(fx_raw[c]);
    UNROLL for (uint s = 0; s < 1u; ++s) if (s == n) fx_mx[s] = fmax(fx_mx[s], a);
  }
  UNROLL for (uint s = 0; s < 1u; ++s) {
    const float mx = fx_lane_max(fx_mx[s]);
    if (fx_lane == 0u) fx_part[s * FX_WARPS + fx_warp] = mx;
  }
  BARRIER();
  // Every thread folds the simdgroups' largest and takes each sample's power (the same
  // on every thread: no second barrier to share it).
  float fx_down[1], fx_floor[1], fx_tiny[1];
  UNROLL for (uint s = 0; s < 1u; ++s) {
    float mx = fx_part[s * FX_WARPS];
    UNROLL for (uint w = 1u; w < FX_WARPS; ++w) mx = fmax(mx, fx_part[s * FX_WARPS + w]);
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? top_bits(mx) : 13;  // 13: e = 0
  const int e = top - 13 < -126 ? -126 : top - 13;  // at most 127 - 13: within +-126
  // A value below 2^-28 of the largest, or a largest the clamp could not lift.
  const float floor_tiny = mul32(mx, as_f32(0x31800000u));
  uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
    fx_down[s] = as_f32((uint)(127 - e) << 23);
    fx_floor[s] = floor_tiny;
    fx_tiny[s] = (float)tiny;  // the clamp's flag, folded with the values' below
    if (THREAD_IN_GROUP == 0u) xup[s] = as_f32((uint)(e + 127) << 23);
  }
  UNROLL for (uint c = 0; c < (640u + GROUP_THREADS_FIXED - 1u) / GROUP_THREADS_FIXED; ++c) {
    const uint ic = THREAD_IN_GROUP + c * GROUP_THREADS_FIXED, i = ic < 1u * nq ? ic : 1u * nq - 1u;
    const uint n = i / nq, q = q0 + (i - n * nq), u = (q >> 2) - z0 * 4u;
    float down = fx_down[0];
    UNROLL for (uint s = 1; s < 1u; ++s) if (s == n) down = fx_down[s];
    const uint o = n * 2888u + (u * 16u + (u >> 1) * 4u) + (q & 3u) * 4u;
    UNROLL for (uint k = 0; k < 4u; ++k) xs[o + k] = pack_f16x2(mul32(fx_lo(fx_raw[c][k]), down), mul32(fx_hi(fx_raw[c][k]), down));
  }
  // Row group 0 alone (a branch whole groups take) looks for tiny values, reading its
  // chunks again: checked as they are staged, they held 8 more registers in every group.
  if (GROUP_X == 0u) {
    for (uint i = THREAD_IN_GROUP; i < 1u * nq; i += GROUP_THREADS_FIXED) {
      const uint n = i / nq, q = q0 + (i - n * nq);
      const uint nx = m0 + n < 1u ? m0 + n : 0u;
      uint w[4];
      x_raw8(x + (ulong)nx * 5120u + q * 8u, w);
      float floor_tiny = fx_floor[0];
      UNROLL for (uint s = 1; s < 1u; ++s) if (s == n) floor_tiny = fx_floor[s];
      if (fx_tiny8(w, floor_tiny) != 0u) {
        UNROLL for (uint s = 0; s < 1u; ++s) if (s == n) fx_tiny[s] = 1.0f;
      }
    }
    UNROLL for (uint s = 0; s < 1u; ++s) {
      const float t = fx_lane_max(fx_tiny[s]);
      if (fx_lane == 0u) fx_tinyp[s * FX_WARPS + fx_warp] = t;
    }
  }
  BARRIER();
  // The flags, by row group 0 (the staging's barrier orders them): the last words of ws,
  // after a split kernel's parts and counters.
  if (GROUP_X == 0u) {
    for (uint s = THREAD_IN_GROUP; s < 1u; s += GROUP_THREADS_FIXED) {
      float t = 0.0f;
      UNROLL for (uint w = 0u; w < FX_WARPS; ++w) t = fmax(t, fx_tinyp[s * FX_WARPS + w]);
      if (m0 + s < 1u) ((GLOBAL uint*)(ws + 0u))[0u * 1u + m0 + s] = t != 0.0f ? 1u : 0u;
    }
  }
  FOR_EACH_SIMDGROUP(sg, 8u) {
    const uint tile = GROUP_X * 1u + sg / 8u;
    const uint part = sg % 8u;
    const uint first_step = z0 + part, last_step = z1;
    LANE_ARRAY(float, acc, 4);
    FOR_EACH_LANE(lane) {
      UNROLL for (uint i = 0; i < 4u; ++i) LANE(acc)[i] = 0.0f;
    }
    // The next step's code words (`nw`), loaded while the current ones (`w`) decode.
    LANE_ARRAY(uint, nwg, 3);
    LANE_ARRAY(uint, nwh, 3);
    LANE_ARRAY(ulong, wo, 4);
    FOR_EACH_LANE(lane) {
      const uint g = lane >> 2, u = first_step * 4u + (lane & 3u);
      const uint blk = u / 8u, pos = u - blk * 8u;
      const uint first = blk * 16u + (7u - pos) * 2u;
      const uint hist = pos == 0u ? blk * 16u : first + 2u;
      const uint ra = tile * 16u + g, rb = ra + 8u;
      const ulong oa = (ulong)(ra < 17408u ? ra : 17407u) * 320u;
      const ulong ob = (ulong)(rb < 17408u ? rb : 17407u) * 320u;
      LANE(wo)[0] = oa + first; LANE(wo)[1] = oa + hist;
      LANE(wo)[2] = ob + first; LANE(wo)[3] = ob + hist;
    }
    FOR_EACH_LANE(lane) {
      const ulong adv = (ulong)(0u) * 64u;
      UNROLL for (uint v = 0; v < 2u; v += 2u) {
        load_words<2u>(&LANE(nwg)[v], codes + LANE(wo)[0] + adv + v);
        load_words<2u>(&LANE(nwh)[v], codes + LANE(wo)[0] + 2560u + adv + v);
      }
      LANE(nwg)[2] = LOAD_STREAM(codes + LANE(wo)[1] + adv);
      LANE(nwh)[2] = LOAD_STREAM(codes + LANE(wo)[1] + 2560u + adv);
    }
    // This lane's staged x per B operand: its sample's run in step z0 (xs_run(4 (step -
    // z0) + t) = xs_run(t) + xs_step() * (step - z0)).
    LANE_ARRAY(uint, xb, 1);
    FOR_EACH_LANE(lane) {
      const uint g = lane >> 2, tq = lane & 3u;
      UNROLL for (uint nb = 0; nb < 1u; ++nb) {
        const uint n0 = m0 + nb * 8u + g, n = n0 < 1u ? n0 : 0u;
        LANE(xb)[nb] = (n - m0) * 2888u + (tq * 16u + (tq >> 1) * 4u);
      }
    }
    UNROLL2 for (uint step = first_step, it = 1u; step < last_step; step += 8u, ++it) {
      const uint next_step = step + 8u;
      LANE_ARRAY(uint, wg, 3);
      LANE_ARRAY(uint, wh, 3);
      FOR_EACH_LANE(lane) {
        UNROLL for (uint i = 0; i <= 2u; ++i) { LANE(wg)[i] = LANE(nwg)[i]; LANE(wh)[i] = LANE(nwh)[i]; }
      }
      if (next_step < last_step) {
        FOR_EACH_LANE(lane) {
      const ulong adv = (ulong)(it) * 64u;
      UNROLL for (uint v = 0; v < 2u; v += 2u) {
        load_words<2u>(&LANE(nwg)[v], codes + LANE(wo)[0] + adv + v);
        load_words<2u>(&LANE(nwh)[v], codes + LANE(wo)[0] + 2560u + adv + v);
      }
      LANE(nwg)[2] = LOAD_STREAM(codes + LANE(wo)[1] + adv);
      LANE(nwh)[2] = LOAD_STREAM(codes + LANE(wo)[1] + 2560u + adv);
    }
      }
      LANE_ARRAY(uint, bf, 4);  // B fragments of mmas j and j + 1
      UNROLL for (uint j = 0; j < 8u; ++j) {
        LANE_ARRAY(uint, af, 4);
        FOR_EACH_LANE(lane) {
          const uint g = lane >> 2, tq = lane & 3u;
          const uint u = step * 4u + tq;
          // Weights 4j, 4j+1 (slots 2t, 2t+1) and 4j+2, 4j+3 (slots 2t+8, 2t+9).
          {
            const uint s0 = TRELLIS_STATE_PAIRED(LANE(wg), 4u * j + 0u, 2u, 12u);
            const uint s1 = TRELLIS_STATE_PAIRED(LANE(wg), 4u * j + 1u, 2u, 12u);
            LANE(af)[0] = trellis_f16x2_onemad(s0, s1);
          }
          {
            const uint s0 = TRELLIS_STATE_PAIRED(LANE(wh), 4u * j + 0u, 2u, 12u);
            const uint s1 = TRELLIS_STATE_PAIRED(LANE(wh), 4u * j + 1u, 2u, 12u);
            LANE(af)[1] = trellis_f16x2_onemad(s0, s1);
          }
          {
            const uint s0 = TRELLIS_STATE_PAIRED(LANE(wg), 4u * j + 2u, 2u, 12u);
            const uint s1 = TRELLIS_STATE_PAIRED(LANE(wg), 4u * j + 3u, 2u, 12u);
            LANE(af)[2] = trellis_f16x2_onemad(s0, s1);
          }
          {
            const uint s0 = TRELLIS_STATE_PAIRED(LANE(wh), 4u * j + 2u, 2u, 12u);
            const uint s1 = TRELLIS_STATE_PAIRED(LANE(wh), 4u * j + 3u, 2u, 12u);
            LANE(af)[3] = trellis_f16x2_onemad(s0, s1);
          }
          // x for mmas j and j + 1 in one load (even j).
          if ((j & 1u) == 0u) {
            UNROLL for (uint nb = 0; nb < 1u; ++nb) {
              const uint n0 = m0 + nb * 8u + g, n = n0 < 1u ? n0 : 0u;  // absent samples: any finite x
              const uint o = LANE(xb)[nb] + (step - z0) * 72u;
              group_load4(&LANE(bf)[4u * nb], xs + o + 2u * j);
            }
          }
        }
        UNROLL for (uint nb = 0; nb < 1u; ++nb) {
          WARP_MMA_F16(acc, 4u * nb, af, bf, 4u * nb + 2u * (j & 1u));
        }
      }
    }
    FOR_EACH_LANE(lane) {
      UNROLL for (uint i = 0; i < 4u; ++i) red[((sg * 1u + 0u) * 4u + i) * 32u + lane] = LANE(acc)[i];
    }
  }
  BARRIER();
  FOR_EACH_SIMDGROUP(sg, 8u) {
    const uint tile = GROUP_X * 1u + sg / 8u;
    if (sg % 8u == 0u) {
      FOR_EACH_LANE(lane) {
        float sum[4];
        UNROLL for (uint i = 0; i < 4u; ++i) {
          sum[i] = 0.0f;
          UNROLL for (uint q = 0; q < 8u; ++q) sum[i] += red[(((sg + q) * 1u + 0u) * 4u + i) * 32u + lane];
        }
        const uint g = lane >> 2, tq = lane & 3u;
        UNROLL for (uint i = 0; i < 4u; ++i) {
          const uint n = m0 + (i >> 2) * 8u + 2u * tq + (i & 1u);
          const uint r = tile * 16u + g + ((i & 2u) ? 8u : 0u);
          if (n < 1u && r < 17408u) {
            y[(ulong)n * 17408u + r] = from_f32<act_t>(mul32(mul32(mul32(sum[i], div32(to_f32(scales[r]), trellis_onemad_divisor())), unscale[0u]), xup[n - m0]));
          }
        }
      }
    }
  }
}
