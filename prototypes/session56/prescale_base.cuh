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


typedef bf16_t act_t;
// Values a thread loads at once (its registers).
#define CHUNK 16u
typedef f16_t out_t;
// 2^e as f32, exact for e in -149..=127 (subnormal below -126).
DEVICE float pow2_f32(int e) {
  return e >= -126 ? as_f32((uint)(e + 127) << 23) : as_f32(1u << (uint)(e + 149));
}
// floor(log2(v)) for a finite v > 0, by bisection over exact powers of two (no bit
// casts or clz, which the dialects spell differently).
DEVICE int floor_log2(float v) {
  int lo = -149, hi = 127;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (pow2_f32(mid) <= v) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <uint COLS> __global__ void __launch_bounds__(512) prescale_base(const bf16_t* __restrict__ x, const float* __restrict__ powers, f16_t* __restrict__ xs, float* __restrict__ unscale, uint32_t* __restrict__ flags) {

  // x is read in chunks of CHUNK values a thread (at the group's stride), each chunk's
  // loads in one unrolled loop: they all go out before the first returns. One sample is
  // all a group has, so a load at a time would cost a round of memory latency each.
  GROUP_SHARED float part_max[512];
  GROUP_SHARED uint part_tiny[512];
  const ulong row = (ulong)GROUP_X * COLS;
  const uint chunk = CHUNK * GROUP_THREADS;
  // The largest magnitude (a NaN never wins, as the host's fold skips it).
  float mx = 0.0f;
  for (uint base = 0u; base < COLS; base += chunk) {
    float v[CHUNK];
    UNROLL for (uint j = 0u; j < CHUNK; ++j) {
      const uint c = base + THREAD_IN_GROUP + j * GROUP_THREADS;
      v[j] = c < COLS ? to_f32(x[row + c]) : 0.0f;
    }
    UNROLL for (uint j = 0u; j < CHUNK; ++j) mx = fmax(mx, fmax(v[j], -v[j]));
  }
  // Over the group, as a tree (fmax is exact in any order).
  part_max[THREAD_IN_GROUP] = mx;
  BARRIER();
  for (uint half = GROUP_THREADS / 2u; half > 0u; half /= 2u) {
    if (THREAD_IN_GROUP < half) {
      part_max[THREAD_IN_GROUP] = fmax(part_max[THREAD_IN_GROUP], part_max[THREAD_IN_GROUP + half]);
    }
    BARRIER();
  }
  mx = part_max[0];
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? floor_log2(mx) : 13;  // 13: e = 0
  const int e = top - 13 < -126 ? -126 : top - 13;  // at most 127 - 13: within +-126
  // A value below 2^-28 of the largest, or a largest the clamp could not lift.
  const float floor_tiny = mul32(mx, as_f32(0x31800000u));
  uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
  // x again (now in cache), prescaled, each value checked for tininess on the way.
  const float down = as_f32((uint)(127 - e) << 23);
  for (uint base = 0u; base < COLS; base += chunk) {
    float v[CHUNK];
    UNROLL for (uint j = 0u; j < CHUNK; ++j) {
      const uint c = base + THREAD_IN_GROUP + j * GROUP_THREADS;
      v[j] = c < COLS ? to_f32(x[row + c]) : 0.0f;
    }
    UNROLL for (uint j = 0u; j < CHUNK; ++j) {
      const uint c = base + THREAD_IN_GROUP + j * GROUP_THREADS;
      if (v[j] != 0.0f && fmax(v[j], -v[j]) < floor_tiny) tiny = 1u;
      if (c < COLS) xs[row + c] = from_f32<out_t>(mul32(v[j], down));
    }
  }
  part_tiny[THREAD_IN_GROUP] = tiny;
  BARRIER();
  for (uint half = GROUP_THREADS / 2u; half > 0u; half /= 2u) {
    if (THREAD_IN_GROUP < half) part_tiny[THREAD_IN_GROUP] |= part_tiny[THREAD_IN_GROUP + half];
    BARRIER();
  }
  if (THREAD_IN_GROUP == 0u) {
    flags[GROUP_X] = part_tiny[0];
    unscale[GROUP_X] = as_f32((uint)(e + 127) << 23);
    if (GROUP_X == 0u) {
      for (uint p = 0u; p < 2u; ++p) unscale[gridDim.x + p] = powers[p];
    }
  }
}
