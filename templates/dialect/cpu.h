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
#define THREAD_PTR
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
#include "simt_emulated.h"  // bytesum_acc, funnel_r: shared with Metal (codegen::prelude inlines it)
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
// x of one run in registers (x_stage = registers): plain loads.
template <typename T> struct xrun { T v[32]; };
template <typename T> DEVICE void xrun_load(xrun<T>& r, const T* p) { std::memcpy(r.v, p, sizeof r.v); }
// Run l of the 1024-column slice of a lane-interleaved x (`Activations::lane_interleaved`):
// 16-byte chunk i at chunk 32 i + l.
template <typename T> DEVICE void xrun_load_interleaved(xrun<T>& r, const T* slice, uint l) {
  constexpr uint e = 16u / sizeof(T);
  for (uint i = 0; i < 32u / e; ++i) std::memcpy(&r.v[i * e], slice + (32u * i + l) * e, 16);
}
template <typename T> DEVICE float xrun_at(const xrun<T>& r, uint j) { return to_f32(r.v[j]); }
template <uint N> DEVICE void load_words(uint* w, const uint32_t* p) {
  for (uint i = 0; i < N; ++i) w[i] = p[i];
}
