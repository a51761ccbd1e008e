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
DEVICE uint pack_bf16x2(float lo, float hi) { return (uint)f32_to_bf16_bits(lo) | ((uint)f32_to_bf16_bits(hi) << 16); }
// The step loop unrolled twice: the next step's words land in the other buffer, no copies.
#define UNROLL2 _Pragma("GCC unroll 2")
#define GROUP_ALIGN16
DEVICE void group_load4(uint* w, const uint* p) { w[0] = p[0]; w[1] = p[1]; w[2] = p[2]; w[3] = p[3]; }
DEVICE void group_load2(uint* w, const uint* p) { w[0] = p[0]; w[1] = p[1]; }
DEVICE uint mul_lo(uint a, uint b) { return a * b; }
DEVICE uint dup_lo16(uint w) { return (w & 0xFFFFu) * 0x10001u; }
DEVICE uint dup_hi16(uint w) { return (w >> 16) * 0x10001u; }
DEVICE uint f16x2_sub(uint a, uint b) {
  return pack_f16x2(half_bits_to_f32(a & 0xFFFFu) - half_bits_to_f32(b & 0xFFFFu),
                    half_bits_to_f32(a >> 16) - half_bits_to_f32(b >> 16));
}
DEVICE uint and_xor(uint x, uint m, uint c) { return (x & m) ^ c; }
DEVICE uint opaque_u32(uint v) { return v; }
#define LOAD_STREAM(p) (*(p))
DEVICE void x_bf16x2_quad2(const bf16_t* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = (uint)p[2u * i].bits | ((uint)p[2u * i + 1u].bits << 16);
}
template <typename T> DEVICE void x_f16x2_quad2(const T* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[2u * i]), to_f32(p[2u * i + 1u]));
}
template <typename T> DEVICE void x_f16x2_dup2(const T* p, uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[i]), to_f32(p[i]));
}
// Split-K arrivals (reduce_mma k_split > 1): threadgroups are tasks on a thread pool.
DEVICE void device_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
DEVICE uint atomic_add_u32(uint* p, uint v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
DEVICE float load_coherent(const float* p) { float v; __atomic_load(p, &v, __ATOMIC_ACQUIRE); return v; }
