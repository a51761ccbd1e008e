// ---- Fast tier on matrix units, shared by every dialect (after the dialect's matrix-unit
// shim): operand words of two f16 (lower half = lower k-slot). Only the matrix-unit
// families include this, so the SIMT kernels' units do not change with it.
// 1mad: f16 bits of 1024 + byte sum straight from the byte-sum primitive (exact: the
// f16 spacing at 1024..2047 is 1), packed two to a word, one packed subtraction centres
// both exactly; the division by the divisor goes to the f32 epilogue with the row scale.
// d0 < 2^16, so the packing is one multiply-add (the integer ALU pipe, busiest with the
// state windows, is spared a PRMT).
DEVICE uint trellis_f16x2_onemad(uint s0, uint s1) {
  const uint d0 = bytesum_acc(s0 * {{ c.mad_mul }}u + {{ c.mad_add }}u, {{ "{:#X}"|format(c.f16_int_base_bits) }}u);
  const uint d1 = bytesum_acc(s1 * {{ c.mad_mul }}u + {{ c.mad_add }}u, {{ "{:#X}"|format(c.f16_int_base_bits) }}u);
  return f16x2_sub(d1 * 65536u + d0, {{ c.mad_f16x2_centre }}u);
}
// bf16 operands: the centred byte sum exactly in f32 (2^23 + sum as bits, less 2^23 + the
// centre: both in one binade), two rounded to bf16 (2^-9) and packed.
DEVICE uint trellis_bf16x2_onemad(uint s0, uint s1) {
  const float y0 = add32(as_f32(bytesum_acc(s0 * {{ c.mad_mul }}u + {{ c.mad_add }}u, {{ "{:#X}"|format(c.f32_int_base_bits) }}u)), as_f32({{ c.mad_f32_neg_centre_bits }}u));
  const float y1 = add32(as_f32(bytesum_acc(s1 * {{ c.mad_mul }}u + {{ c.mad_add }}u, {{ "{:#X}"|format(c.f32_int_base_bits) }}u)), as_f32({{ c.mad_f32_neg_centre_bits }}u));
  return pack_bf16x2(y0, y1);
}
DEVICE float trellis_onemad_divisor() { return as_f32({{ c.mad_divisor_bits }}u); }
// The L-bit state of weight j as TRELLIS_STATE, with a window inside one word taken as a
// multiply by a power of two (top-aligned: IMAD.SHL, the FMA pipe) and one right shift,
// instead of shift and mask (both on the integer ALU pipe).
#define MMA_SH_(j, K) ({{ crate::layout::run_bit_c("j", "K") }} & 31u)
#define MMA_IX_(j, K) ({{ crate::layout::run_bit_c("j", "K") }} >> 5)
#define MMA_STATE(w, j, K, L) \
  ((MMA_SH_(j, K) + (L) > 32u) \
     ? (funnel_r((w)[MMA_IX_(j, K)], (w)[MMA_IX_(j, K) + 1u], MMA_SH_(j, K)) & ((1u << (L)) - 1u)) \
     : (mul_lo((w)[MMA_IX_(j, K)], 1u << (32u - (L) - MMA_SH_(j, K))) >> (32u - (L))))
// 3inst and mcg: the masked word is the two f16 halves whose sum is the value (before
// its f16 rounding); fed as two k-slots against x duplicated, the matrix unit adds them.
// Mask and xor come as arguments so a dialect can keep them in registers (one LOP3).
DEVICE uint trellis_half_pair_mask() { return {{ c.half_pair_mask }}u; }
DEVICE uint trellis_half_pair_xor() { return {{ c.half_pair_xor }}u; }
DEVICE uint trellis_f16x2_threeinst(uint s, uint mask, uint xr) { return and_xor(s * {{ c.inst_mul }}u + {{ c.inst_add }}u, mask, xr); }
DEVICE uint trellis_f16x2_mcg(uint s, uint mask, uint xr) { return and_xor(s * {{ c.mcg_mul }}u, mask, xr); }
