// ---- Shared by every dialect: SPEC section 3 codes and section 6 exp, written once.
// Constants come from src/codes.rs; the dialect shim above supplies the primitives.

// bytesum_acc(x, c) = c + byte sum of x (the shim's). With c = 0x4B000000, the bits of
// the f32 2^23, the result is the bits of the f32 2^23 + byte sum: an exact int -> float
// conversion without a conversion instruction.

// 1mad: byte sum of an LCG step, centred, divided by {{ c.mad_divisor_bits }} (as f32 bits).
// bytesum_acc on the bits of 1.5 * 2^23 - 510 gives the f32 1.5 * 2^23 + (y - 510) for
// every byte sum y (one binade, so the bits add exactly); one subtraction leaves the
// centred sum. The quotient is fma(a, hi, a * lo) with hi + lo the split reciprocal,
// which equals the IEEE division for all 1021 centred sums (exhaustive test in
// src/codes.rs): one multiply and one fma, identical bits in every dialect.
DEVICE float trellis_value_onemad(uint s) {
  const float a = add32(as_f32(bytesum_acc(s * {{ c.mad_mul }}u + {{ c.mad_add }}u, {{ "{:#X}"|format(c.mad_bias_bits) }}u - {{ c.mad_center }}u)), -{{ "{:.1}"|format(c.mad_bias) }}f);
  return fma32(a, as_f32({{ c.mad_recip_bits }}u), mul32(a, as_f32({{ c.mad_recip_lo_bits }}u)));
}
// 3inst and mcg: two halves of a masked word, added, rounded to f16.
DEVICE float trellis_half_pair(uint x) {
  const uint r = (x & {{ c.half_pair_mask }}u) ^ {{ c.half_pair_xor }}u;
  return round_f16(add32(half_bits_to_f32(r >> 16), half_bits_to_f32(r & 0xFFFFu)));
}
DEVICE float trellis_value_threeinst(uint s) { return trellis_half_pair(s * {{ c.inst_mul }}u + {{ c.inst_add }}u); }
DEVICE float trellis_value_mcg(uint s) { return trellis_half_pair(s * {{ c.mcg_mul }}u); }
// mul1: byte sum through one f16 multiply-add (exact in f32, so one rounding).
DEVICE float trellis_value_mul1(uint s) {
  const float y = as_f32(bytesum_acc(s * {{ c.mul1_mul }}u, {{ "{:#X}"|format(c.f32_int_base_bits) }}u + {{ c.mul1_offset }}u)) - {{ "{:.1}"|format(c.f32_int_base) }}f;
  return round_f16(fma32(y, as_f32({{ c.mul1_scale_f32_bits }}u), as_f32({{ c.mul1_bias_f32_bits }}u)));
}

// The L-bit state of weight j (0..31) of a run, from the k+1 words that hold the run
// (SPEC 2: weight t starts at bit (T-1-t)*k; the run's words start at a word boundary).
// With j unrolled every shift is a constant: one shift (a funnel shift when the window
// crosses a word) and one mask.
{%- let b = crate::layout::run_bit_c("j", "K") %}
#define TRELLIS_STATE(w, j, K, L) \
  ((({{ b }} & 31u) + (L) > 32u \
     ? funnel_r((w)[{{ b }} >> 5], (w)[({{ b }} >> 5) + 1u], {{ b }} & 31u) \
     : (w)[{{ b }} >> 5] >> ({{ b }} & 31u)) \
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
