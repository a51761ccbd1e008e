// ---- CPU dialect shim (host C++17). Each task is one threadgroup; its rows run in
// turn and each row's 32 lanes run one after another, keeping per-lane state in
// [32][n] arrays so the SPEC butterfly sees every lane's partial.
#include <cstdint>
#include <cstring>
#include <cmath>
typedef unsigned int uint;
typedef unsigned long long ulong;

#define DEVICE static inline
#define GLOBAL
#define GROUP_SHARED
#define GROUP_PTR
#define UNROLL _Pragma("GCC unroll 32")
#define BARRIER() ((void)0)
#define GROUP_X group_x_
#define GROUP_Y group_y_
#define THREAD_IN_GROUP 0u
#define GROUP_THREADS 1u

#define FOR_EACH_ROW(row, R, RPG) \
  for (uint row = GROUP_X * (RPG); row < (R) && row < GROUP_X * (RPG) + (RPG); ++row)
#define FOR_EACH_ROWS(row0, R, RPG, RPS) \
  for (uint row0 = GROUP_X * (RPG) * (RPS); row0 < (R) && row0 < (GROUP_X + 1u) * (RPG) * (RPS); row0 += (RPS))
#define LANE_ARRAY(type, name, n) type name[32][n]
#define FOR_EACH_LANE(lane) for (uint lane = 0u; lane < 32u; ++lane)
#define LANE(name) name[lane]
#define LANE_IS_ZERO true
#define BUTTERFLY(name, i) lane_butterfly(&name[0][0], sizeof(name[0]) / sizeof(float), i)
#define REDUCE_FAST(name, i) lane_reduce_fast(&name[0][0], sizeof(name[0]) / sizeof(float), i)

// SPEC 5 step 4 over an emulated simdgroup: v[l] = v[l] + v[l ^ o] for all lanes at once.
DEVICE float lane_butterfly(const float* lanes, uint stride, uint i) {
  float v[32], w[32];
  for (uint l = 0; l < 32u; ++l) v[l] = lanes[l * stride + i];
  for (uint o = 16u; o > 0u; o >>= 1) {
    for (uint l = 0; l < 32u; ++l) w[l] = v[l] + v[l ^ o];
    std::memcpy(v, w, sizeof v);
  }
  return v[0];
}
DEVICE float lane_reduce_fast(const float* lanes, uint stride, uint i) {
  float s = 0.0f;
  for (uint l = 0; l < 32u; ++l) s += lanes[l * stride + i];
  return s;
}

DEVICE float fma32(float a, float b, float c) { return std::fmaf(a, b, c); }
DEVICE float mul32(float a, float b) { return a * b; }
DEVICE float add32(float a, float b) { return a + b; }
DEVICE float div32(float a, float b) { return a / b; }
DEVICE float as_f32(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
DEVICE uint32_t f32_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

// binary16 <-> f32, round to nearest even (finite inputs; NaN stays NaN).
DEVICE float half_bits_to_f32(uint h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1Fu) return as_f32(sign | 0x7F800000u | (man << 13));
  if (exp != 0u) return as_f32(sign | ((exp + 112u) << 23) | (man << 13));
  float v = (float)man * 5.9604644775390625e-8f;  // subnormal: man * 2^-24, exact
  return sign ? -v : v;
}
DEVICE uint16_t f32_to_half_bits(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // rounds to infinity
  if (ax < 0x38800000u) {  // f16 subnormal or zero: scale to an integer, round even
    float v = as_f32(ax) * 16777216.0f;  // 2^24, exact
    uint32_t m = (uint32_t)std::nearbyintf(v);
    return (uint16_t)(sign | m);
  }
  uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
DEVICE float round_f16(float v) { return half_bits_to_f32(f32_to_half_bits(v)); }
DEVICE uint bytesum_acc(uint x, uint c) { return c + (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24); }
DEVICE float native_exp(float v) { return std::exp(v); }
DEVICE uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };
DEVICE float to_f32(float v) { return v; }
DEVICE float to_f32(f16_t v) { return half_bits_to_f32(v.bits); }
DEVICE float to_f32(bf16_t v) { return as_f32((uint32_t)v.bits << 16); }
template <typename T> DEVICE T from_f32(float v);
template <> inline float from_f32<float>(float v) { return v; }
template <> inline f16_t from_f32<f16_t>(float v) { return f16_t{f32_to_half_bits(v)}; }
template <> inline bf16_t from_f32<bf16_t>(float v) { return bf16_t{f32_to_bf16_bits(v)}; }
template <typename T> DEVICE float round_as(float v) { return to_f32(from_f32<T>(v)); }
DEVICE uint funnel_r(uint lo, uint hi, uint off) { return (lo >> off) | (hi << (32u - off)); }
// x of one run in registers (x_stage = registers): plain loads.
template <typename T> struct xrun { T v[32]; };
template <typename T> DEVICE void xrun_load(xrun<T>& r, const T* p) { std::memcpy(r.v, p, sizeof r.v); }
template <typename T> DEVICE float xrun_at(const xrun<T>& r, uint j) { return to_f32(r.v[j]); }
template <uint N> DEVICE void load_words(uint* w, const uint32_t* p) {
  for (uint i = 0; i < N; ++i) w[i] = p[i];
}

// ---- Matrix units (fast tier), emulated. A simdgroup is a 16-row tile: the group's
// simdgroups run one after another, each running its 32 lanes in turn ([32][n] arrays).
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = 0u; sg < (N); ++sg)
#define MMA_SCRATCH(N)
#define WARP_MMA_F16(acc, ai, a, b, bi) \
  warp_mma_m16n8k16(&(acc)[0][0], sizeof((acc)[0]) / sizeof(float), ai, &(a)[0][0], sizeof((a)[0]) / sizeof(uint), &(b)[0][0], sizeof((b)[0]) / sizeof(uint), bi, false)
#define WARP_MMA_BF16(acc, ai, a, b, bi) \
  warp_mma_m16n8k16(&(acc)[0][0], sizeof((acc)[0]) / sizeof(float), ai, &(a)[0][0], sizeof((a)[0]) / sizeof(uint), &(b)[0][0], sizeof((b)[0]) / sizeof(uint), bi, true)
DEVICE float operand_half(uint w, uint i, bool bf16) {
  const uint h = (w >> (16u * i)) & 0xFFFFu;
  return bf16 ? as_f32(h << 16) : half_bits_to_f32(h);
}
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the 32 lanes' fragments in the PTX
// layouts (lane = 4 g + t: a0 (row g, k 2t, 2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..),
// a3 (g+8, 2t+8..); b0 (k 2t.., col g), b1 (k 2t+8.., col g); c0/c1 (g, 2t/2t+1),
// c2/c3 (g+8, 2t/2t+1); lower half = lower k), D = A B + C with the 16 products
// (exact in f32) added to C in f32, k ascending.
DEVICE void warp_mma_m16n8k16(float* acc, uint as, uint ai, const uint* a, uint aw, const uint* b, uint bw, uint bi, bool bf16) {
  float A[16][16], B[16][8], C[16][8];
  for (uint lane = 0; lane < 32u; ++lane) {
    const uint g = lane >> 2, t = lane & 3u;
    const uint* fa = a + lane * aw;
    const uint* fb = b + lane * bw + bi;
    const float* fc = acc + lane * as + ai;
    for (uint e = 0; e < 2u; ++e) {
      A[g][2 * t + e] = operand_half(fa[0], e, bf16);
      A[g + 8][2 * t + e] = operand_half(fa[1], e, bf16);
      A[g][2 * t + 8 + e] = operand_half(fa[2], e, bf16);
      A[g + 8][2 * t + 8 + e] = operand_half(fa[3], e, bf16);
      B[2 * t + e][g] = operand_half(fb[0], e, bf16);
      B[2 * t + 8 + e][g] = operand_half(fb[1], e, bf16);
      C[g][2 * t + e] = fc[e];
      C[g + 8][2 * t + e] = fc[2 + e];
    }
  }
  for (uint r = 0; r < 16u; ++r)
    for (uint n = 0; n < 8u; ++n) {
      float s = C[r][n];
      for (uint k = 0; k < 16u; ++k) s = std::fmaf(A[r][k], B[k][n], s);
      C[r][n] = s;
    }
  for (uint lane = 0; lane < 32u; ++lane) {
    const uint g = lane >> 2, t = lane & 3u;
    float* fc = acc + lane * as + ai;
    for (uint e = 0; e < 2u; ++e) {
      fc[e] = C[g][2 * t + e];
      fc[2 + e] = C[g + 8][2 * t + e];
    }
  }
}
DEVICE uint pack_f16x2(float lo, float hi) { return (uint)f32_to_half_bits(lo) | ((uint)f32_to_half_bits(hi) << 16); }
DEVICE uint f16x2_sub(uint a, uint b) {
  return pack_f16x2(half_bits_to_f32(a & 0xFFFFu) - half_bits_to_f32(b & 0xFFFFu),
                    half_bits_to_f32(a >> 16) - half_bits_to_f32(b >> 16));
}
DEVICE uint and_xor(uint x, uint m, uint c) { return (x & m) ^ c; }
DEVICE uint opaque_u32(uint v) { return v; }
#define LOAD_STREAM(p) (*(p))
template <typename T> DEVICE void x_f16x2_quad2(const T* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[2u * i]), to_f32(p[2u * i + 1u]));
}
template <typename T> DEVICE void x_f16x2_dup2(const T* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[i]), to_f32(p[i]));
}
