// ---- Matrix units (fast tier), emulated. A simdgroup is a 16-row tile: the group's
// simdgroups run one after another, each running its 32 lanes in turn ([32][n] arrays).
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = 0u; sg < (N); ++sg)
#define MMA_SCRATCH_F16(N)
#define MMA_SCRATCH_BF16(N)
#define MAX_REGISTERS(n)  /* no register file to budget */
#define WARP_MMA_F16(acc, ai, a, b, bi) \
  warp_mma_m16n8k16(&(acc)[0][0], sizeof((acc)[0]) / sizeof(float), ai, &(a)[0][0], sizeof((a)[0]) / sizeof(uint), &(b)[0][0], sizeof((b)[0]) / sizeof(uint), bi, false)
#define WARP_MMA_BF16(acc, ai, a, b, bi) \
  warp_mma_m16n8k16(&(acc)[0][0], sizeof((acc)[0]) / sizeof(float), ai, &(a)[0][0], sizeof((a)[0]) / sizeof(uint), &(b)[0][0], sizeof((b)[0]) / sizeof(uint), bi, true)
DEVICE float operand_half(uint w, uint i, bool bf16) {
  const uint h = (w >> (16u * i)) & 0xFFFFu;
  return bf16 ? as_f32(h << 16) : half_bits_to_f32(h);
}
DEVICE uint pack_f16x2(float lo, float hi) { return (uint)f32_to_half_bits(lo) | ((uint)f32_to_half_bits(hi) << 16); }
DEVICE uint pack_bf16x2(float lo, float hi) { return (uint)f32_to_bf16_bits(lo) | ((uint)f32_to_bf16_bits(hi) << 16); }
#include "mma_emulated.h"  // the fragment layout and operand helpers, shared with Metal
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} over the 32 lanes' fragments: D = A B
// + C with the 16 products (exact in f32) added to C in f32, k ascending.
DEVICE void warp_mma_m16n8k16(float* acc, uint as, uint ai, const uint* a, uint aw, const uint* b, uint bw, uint bi, bool bf16) {
  float A[16][16], B[16][8], C[16][8];
  for (uint lane = 0; lane < 32u; ++lane) {
    const uint g = lane >> 2, t = lane & 3u;
    const uint* fa = a + lane * aw;
    const uint* fb = b + lane * bw + bi;
    const float* fc = acc + lane * as + ai;
    for (uint e = 0; e < 2u; ++e) {
      for (uint i = 0; i < 4u; ++i) A[frag_a_row(i, g)][frag_a_k(i, t) + e] = operand_half(fa[i], e, bf16);
      for (uint i = 0; i < 2u; ++i) B[frag_b_k(i, t) + e][g] = operand_half(fb[i], e, bf16);
    }
    for (uint i = 0; i < 4u; ++i) C[frag_c_row(i, g)][frag_c_col(i, t)] = fc[i];
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
    for (uint i = 0; i < 4u; ++i) fc[i] = C[frag_c_row(i, g)][frag_c_col(i, t)];
  }
}
// The step loop unrolled twice: the next step's words land in the other buffer, no copies.
#define UNROLL2 _Pragma("GCC unroll 2")
DEVICE void x_bf16x2_quad2(const bf16_t* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = (uint)p[2u * i].bits | ((uint)p[2u * i + 1u].bits << 16);
}
// Split-K arrivals (reduce_mma k_split > 1): threadgroups are tasks on a thread pool.
DEVICE void device_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
DEVICE uint atomic_add_u32(uint* p, uint v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
DEVICE float load_coherent(const float* p) { float v; __atomic_load(p, &v, __ATOMIC_ACQUIRE); return v; }
