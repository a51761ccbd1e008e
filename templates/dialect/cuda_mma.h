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
