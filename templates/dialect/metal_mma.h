// ---- Matrix units (fast tier) through simdgroup_matrix<half, 8, 8> (float for bf16
// operands). The body builds its operand words in the PTX m16n8k16 fragment layout
// (mma_emulated.h; the decode is the same on every dialect); here a simdgroup stages one
// tile's fragments in threadgroup memory, multiplies the 16 x 16 A by the 16 x 8 B as
// 2 x 2 blocks of 8 x 8 matrices with simdgroup_multiply_accumulate, and reads its
// accumulator fragment back.
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = SIMDGROUP_ID, once_sg_ = 1u; once_sg_; once_sg_ = 0u)
#define MAX_REGISTERS(n)  /* MLX writes the signature; the compiler budgets registers */
// A and B stage as half (f16 operands) or as float (bf16 operands: exact, products and
// sums in f32 as on the matrix units of the other dialects).
#define MMA_SCRATCH_F16(N) \
  threadgroup half mma_a_[(N) * 256]; threadgroup half mma_b_[(N) * 128]; threadgroup float mma_c_[(N) * 128]
#define MMA_SCRATCH_BF16(N) \
  threadgroup float mma_a_[(N) * 256]; threadgroup float mma_b_[(N) * 128]; threadgroup float mma_c_[(N) * 128]
#define WARP_MMA_F16(acc, ai, a, b, bi) \
  simdgroup_mma_m16n8k16(&(acc)[0][ai], (a)[0], &(b)[0][bi], mma_a_ + SIMDGROUP_ID * 256u, mma_b_ + SIMDGROUP_ID * 128u, mma_c_ + SIMDGROUP_ID * 128u, LANE_ID)
#define WARP_MMA_BF16(acc, ai, a, b, bi) WARP_MMA_F16(acc, ai, a, b, bi)
DEVICE uint pack_f16x2(float lo, float hi) { return uint(as_type<ushort>(half(lo))) | (uint(as_type<ushort>(half(hi))) << 16); }
// bf16 through f32 bits (MLX's `bfloat16_t` is `bfloat` or its own type: both convert).
DEVICE uint bf16_bits(float v) { return as_type<uint>(float(bfloat16_t(v))) >> 16; }
DEVICE uint pack_bf16x2(float lo, float hi) { return bf16_bits(lo) | (bf16_bits(hi) << 16); }
#include "mma_emulated.h"  // the fragment layout and operand helpers, shared with the CPU
DEVICE half lo_half(uint w) { return as_type<half>(ushort(w & 0xFFFFu)); }
DEVICE half hi_half(uint w) { return as_type<half>(ushort(w >> 16)); }
// The lower (upper) operand of a word as the staging type: f16 as half, bf16 as float.
DEVICE half operand_lo(uint w, half) { return lo_half(w); }
DEVICE half operand_hi(uint w, half) { return hi_half(w); }
DEVICE float operand_lo(uint w, float) { return as_type<float>(w << 16); }
DEVICE float operand_hi(uint w, float) { return as_type<float>(w & 0xFFFF0000u); }
template <typename T>
DEVICE void simdgroup_mma_m16n8k16(thread float* c, thread const uint* a, thread const uint* b,
                                   GROUP_PTR T* sa, GROUP_PTR T* sb, GROUP_PTR float* sc, uint lane) {
  const uint g = lane >> 2, t = lane & 3u;
  const T z = T(0);
  UNROLL for (uint i = 0; i < 4u; ++i) {
    sa[frag_a_row(i, g) * 16u + frag_a_k(i, t)] = operand_lo(a[i], z);
    sa[frag_a_row(i, g) * 16u + frag_a_k(i, t) + 1u] = operand_hi(a[i], z);
    sc[frag_c_row(i, g) * 8u + frag_c_col(i, t)] = c[i];
  }
  UNROLL for (uint i = 0; i < 2u; ++i) {
    sb[frag_b_k(i, t) * 8u + g] = operand_lo(b[i], z);
    sb[(frag_b_k(i, t) + 1u) * 8u + g] = operand_hi(b[i], z);
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<T, 8, 8> a00, a01, a10, a11, b0, b1;
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
  UNROLL for (uint i = 0; i < 4u; ++i) c[i] = sc[frag_c_row(i, g) * 8u + frag_c_col(i, t)];
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
// The step loop as the compiler unrolls it (the CPU and CUDA shims ask for two steps).
#define UNROLL2
DEVICE void x_bf16x2_quad2(const device bfloat16_t* p, thread uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = bf16_bits(float(p[2u * i])) | (bf16_bits(float(p[2u * i + 1u])) << 16);
}
// Split-K arrivals (reduce_mma k_split > 1): MSL 3.2's device-scope fence, a relaxed
// counter bump, and a volatile load of another threadgroup's part.
DEVICE void device_fence() { atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device); }
// A barrier that orders the group's device-memory writes too (before one thread's fence).
#define BARRIER_DEVICE() threadgroup_barrier(mem_flags::mem_device)
DEVICE uint atomic_add_u32(device uint* p, uint v) { return atomic_fetch_add_explicit((device atomic_uint*)p, v, memory_order_relaxed); }
DEVICE float load_coherent(const device float* p) { return *(const volatile device float*)p; }
