// The m16n8k16 fragments (PTX mma.sync.aligned.m16n8k16.row.col) for the dialects that
// emulate the matrix unit (CPU, Metal): the fast body builds its operand words in this
// layout on every dialect, and CUDA's hardware reads it as is. Lane 4 g + t holds A words
// a0 (row g, k 2t, 2t+1), a1 (row g + 8), a2 (row g, k 2t + 8, 2t + 9), a3 (row g + 8,
// k 2t + 8..); B words b0 (k 2t, 2t+1, column g), b1 (k 2t + 8..); accumulators c0 / c1
// (row g, columns 2t / 2t + 1), c2 / c3 (row g + 8). A word's lower half is the lower k.
DEVICE uint frag_a_row(uint i, uint g) { return g + ((i & 1u) != 0u ? 8u : 0u); }
DEVICE uint frag_a_k(uint i, uint t) { return 2u * t + ((i & 2u) != 0u ? 8u : 0u); }
DEVICE uint frag_b_k(uint i, uint t) { return 2u * t + (i != 0u ? 8u : 0u); }
DEVICE uint frag_c_row(uint i, uint g) { return g + ((i & 2u) != 0u ? 8u : 0u); }
DEVICE uint frag_c_col(uint i, uint t) { return 2u * t + (i & 1u); }
// The operand helpers, in their portable form (CUDA's shim has PTX for each).
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
#define GROUP_ALIGN16
// B words from staged x (threadgroup memory) and from x in device memory, converted.
DEVICE void group_load4(THREAD_PTR uint* w, const GROUP_PTR uint* p) { w[0] = p[0]; w[1] = p[1]; w[2] = p[2]; w[3] = p[3]; }
DEVICE void group_load2(THREAD_PTR uint* w, const GROUP_PTR uint* p) { w[0] = p[0]; w[1] = p[1]; }
template <typename T> DEVICE void x_f16x2_quad2(const GLOBAL T* p, THREAD_PTR uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[2u * i]), to_f32(p[2u * i + 1u]));
}
template <typename T> DEVICE void x_f16x2_dup2(const GLOBAL T* p, THREAD_PTR uint* b) {
  for (uint i = 0; i < 4u; ++i) b[i] = pack_f16x2(to_f32(p[i]), to_f32(p[i]));
}
