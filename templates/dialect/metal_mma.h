// ---- Matrix units (fast tier) through simdgroup_matrix<half, 8, 8>. The body builds
// its operand words in the PTX m16n8k16 fragment layout (the decode is the same on
// every dialect); here a simdgroup stages one tile's fragments in threadgroup memory,
// multiplies the 16 x 16 A by the 16 x 8 B as 2 x 2 blocks of 8 x 8 matrices with
// simdgroup_multiply_accumulate, and reads its accumulator fragment back.
#define FOR_EACH_SIMDGROUP(sg, N) for (uint sg = SIMDGROUP_ID, once_sg_ = 1u; once_sg_; once_sg_ = 0u)
#define MAX_REGISTERS(n)  /* MLX writes the signature; the compiler budgets registers */
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
// The step loop unrolled twice: the next step's words land in the other buffer, no copies.
#define UNROLL2 
#define GROUP_ALIGN16
DEVICE void group_load4(thread uint* w, const GROUP_PTR uint* p) { w[0] = p[0]; w[1] = p[1]; w[2] = p[2]; w[3] = p[3]; }
DEVICE void group_load2(thread uint* w, const GROUP_PTR uint* p) { w[0] = p[0]; w[1] = p[1]; }
DEVICE uint mul_lo(uint a, uint b) { return a * b; }
DEVICE uint dup_lo16(uint w) { return (w & 0xFFFFu) * 0x10001u; }
DEVICE uint dup_hi16(uint w) { return (w >> 16) * 0x10001u; }
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
// Split-K arrivals (reduce_mma k_split > 1): MSL 3.2's device-scope fence, a relaxed
// counter bump, and a volatile load of another threadgroup's part.
DEVICE void device_fence() { atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device); }
DEVICE uint atomic_add_u32(device uint* p, uint v) { return atomic_fetch_add_explicit((device atomic_uint*)p, v, memory_order_relaxed); }
DEVICE float load_coherent(const device float* p) { return *(const volatile device float*)p; }
