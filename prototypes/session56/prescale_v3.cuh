template <uint COLS> __global__ void __launch_bounds__(512) prescale_v3(const bf16_t* __restrict__ x, const float* __restrict__ powers, f16_t* __restrict__ xs, float* __restrict__ unscale, uint32_t* __restrict__ flags) {

  // Each reduction folds in two levels through group memory (a thread of the first 32
  // folds a strided share, then every thread folds those 32): four barriers in all.
  GROUP_SHARED float part_max[512];
  GROUP_SHARED float part_max2[32];
  GROUP_SHARED uint part_tiny[512];
  GROUP_SHARED uint part_tiny2[32];
  const ulong row = (ulong)GROUP_X * COLS;
  const uint span = ((COLS + 511u) / 512u) * PRESCALE_THREADS;
  // The largest magnitude (a NaN never wins, as the host's fold skips it). Where one
  // span holds the sample (on a GPU), v keeps it for the second pass.
  float v[((COLS + 511u) / 512u)];
  float mx = 0.0f;
  for (uint base = 0u; base < COLS; base += span) {
    UNROLL for (uint j = 0u; j < ((COLS + 511u) / 512u); ++j) {
      const uint c = base + THREAD_IN_GROUP + j * PRESCALE_THREADS;
      v[j] = c < COLS ? to_f32(x[row + c]) : 0.0f;
    }
    UNROLL for (uint j = 0u; j < ((COLS + 511u) / 512u); ++j) mx = fmax(mx, fmax(v[j], -v[j]));
  }
  // Over the group (fmax is exact in any order).
  part_max[THREAD_IN_GROUP] = mx;
  BARRIER();
  if (THREAD_IN_GROUP < FIRSTS) {
    UNROLL for (uint i = 1u; i < PRESCALE_THREADS / 32u; ++i) mx = fmax(mx, part_max[THREAD_IN_GROUP + 32u * i]);
    part_max2[THREAD_IN_GROUP] = mx;
  }
  BARRIER();
  UNROLL for (uint t = 0u; t < FIRSTS; ++t) mx = fmax(mx, part_max2[t]);
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? floor_log2(mx) : 13;  // 13: e = 0
  const int e = top - 13 < -126 ? -126 : top - 13;  // at most 127 - 13: within +-126
  // A value below 2^-28 of the largest, or a largest the clamp could not lift.
  const float floor_tiny = mul32(mx, as_f32(0x31800000u));
  uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
  // x prescaled (from v, or read again from cache where one span is not the sample),
  // each value checked for tininess on the way.
  const float down = as_f32((uint)(127 - e) << 23);
  for (uint base = 0u; base < COLS; base += span) {
    if (span < COLS) {
      UNROLL for (uint j = 0u; j < ((COLS + 511u) / 512u); ++j) {
        const uint c = base + THREAD_IN_GROUP + j * PRESCALE_THREADS;
        v[j] = c < COLS ? to_f32(x[row + c]) : 0.0f;
      }
    }
    UNROLL for (uint j = 0u; j < ((COLS + 511u) / 512u); ++j) {
      const uint c = base + THREAD_IN_GROUP + j * PRESCALE_THREADS;
      if (v[j] != 0.0f && fmax(v[j], -v[j]) < floor_tiny) tiny = 1u;
      if (c < COLS) xs[row + c] = from_f32<out_t>(mul32(v[j], down));
    }
  }
  part_tiny[THREAD_IN_GROUP] = tiny;
  BARRIER();
  if (THREAD_IN_GROUP < FIRSTS) {
    UNROLL for (uint i = 1u; i < PRESCALE_THREADS / 32u; ++i) tiny |= part_tiny[THREAD_IN_GROUP + 32u * i];
    part_tiny2[THREAD_IN_GROUP] = tiny;
  }
  BARRIER();
  if (THREAD_IN_GROUP == 0u) {
    UNROLL for (uint t = 1u; t < FIRSTS; ++t) tiny |= part_tiny2[t];
    flags[GROUP_X] = tiny;
    unscale[GROUP_X] = as_f32((uint)(e + 127) << 23);
    if (GROUP_X == 0u) {
      for (uint p = 0u; p < 2u; ++p) unscale[gridDim.x + p] = powers[p];
    }
  }
}
