// Balanced row sets for the exact `reduce` at 17408 x 5120, k 3, L 12, 1mad, M 1 (issue
// 10's goal key). NVRTC-compatible (no host code), so `prototypes/sass/sass.py` reads its
// registers and SASS here; `balanced.cu` adds the timing harness for nvcc on the device.
//
// Why: the table's winner (`unit_k3_rps3.cu`, not kept in git: render it with `cargo run
// --release --example reduce_unit -- 17408 5120 3 1mad 12 1 1 3 0 >
// prototypes/balanced/unit_k3_rps3.cu`; `run.sh` names its kernel `UNIT_KERNEL`) runs
// 5803 warps of 3 rows at 48
// registers: 42 warps per SM are resident, 44 are needed, so the last warps run nearly
// alone (ncu: 39 % of the SM's warp slots active on average, 77.7 % issue). 4 rows per warp
// fit one wave (56 registers, 4352 warps) but give the 528 schedulers 8 or 9 sets: 36 rows
// on the busiest where the mean is 33. Here every warp of a grid of W (the residency) takes
// rows [w R / W, (w + 1) R / W): 3 or 4 rows, spread evenly, so every scheduler gets about
// 33 rows in one wave. A 4-row warp runs one 4-row body (56 registers) or, with SPLIT, a
// 3-row body and then a 1-row body (48 registers: 10 warps per scheduler).
//
// The bits: a row's sum is the same whatever rows share its warp (the canonical order is
// per row), so every kernel here must match the unit's output bit for bit.
#include "unit_k3_rps3.cu"

template <uint N>
DEVICE void rows_body(uint row_s, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                      const float* __restrict__ scales, bf16_t* __restrict__ y) {
  const uint lane = LANE_ID;
  float scale[N];
  UNROLL for (uint r = 0; r < N; ++r) scale[r] = scales[row_s + r];
  float a0[N], a1[N];
  UNROLL for (uint i = 0; i < N; ++i) { a0[i] = 0.0f; a1[i] = 0.0f; }
  for (uint u = lane; u < 160u; u += 32u) {
    const uint blk = u / 8u, t0 = (u - blk * 8u) * 32u;
    const uint w_0 = (256u - 32u - t0) * 3u / 32u;
    uint w[N][4];
    const auto w_set = codes + (ulong)row_s * 480u + blk * 24u;
    UNROLL for (uint r = 0; r < N; ++r) {
      const auto w_blk = w_set + r * 480u;
      UNROLL for (uint i = 0; i < 3u; ++i) w[r][i] = w_blk[w_0 + i];
      w[r][3] = w_blk[w_0 + 3u >= 24u ? 0u : w_0 + 3u];
    }
    const uint c0 = u * 32u;
    xrun<bf16_t> xr;
    xrun_load(xr, x + c0);
    UNROLL for (uint j = 0; j < 32u; ++j) {
      const float xv = xrun_at(xr, j);
      UNROLL for (uint r = 0; r < N; ++r) {
        const uint s = TRELLIS_STATE_MUL(w[r], j, 3u, 12u);
        const float wv = round_as<bf16_t>(fma32(trellis_biased_onemad(s), scale[r], mul32(-as_f32(1262485504u), scale[r])));
        if (j & 1u) a1[r] = fma32(wv, xv, a1[r]); else a0[r] = fma32(wv, xv, a0[r]);
      }
    }
  }
  UNROLL for (uint r = 0; r < N; ++r) {
    const float v = lane_butterfly(add32(a0[r], a1[r]));
    if (lane == 0u) y[row_s + r] = from_f32<bf16_t>(v);
  }
}

// W warps (blocks of one warp), R = 17408 rows: warp w takes rows [w R / W, (w + 1) R / W),
// 3 or 4 of them for 4352 <= W <= 5802.
template <bool SPLIT>
__device__ __forceinline__ void balanced(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                         const float* __restrict__ scales, bf16_t* __restrict__ y) {
  const uint w = blockIdx.x;
  if (w >= W) return;
  const uint s = (uint)((ulong)w * 17408u / W), e = (uint)((ulong)(w + 1u) * 17408u / W);
  if (e - s == 4u) {
    if (SPLIT) {
      rows_body<3>(s, x, codes, scales, y);
      rows_body<1>(s + 3u, x, codes, scales, y);
    } else {
      rows_body<4>(s, x, codes, scales, y);
    }
  } else {
    rows_body<3>(s, x, codes, scales, y);
  }
}

extern "C" __global__ void reduce_balanced4(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                            const float* __restrict__ scales, bf16_t* __restrict__ y) {
  balanced<false>(W, x, codes, scales, y);
}
extern "C" __global__ void reduce_balanced31(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                             const float* __restrict__ scales, bf16_t* __restrict__ y) {
  balanced<true>(W, x, codes, scales, y);
}
// The split kernel under the unit's 48 registers (10 warps per scheduler).
extern "C" __global__ void __maxnreg__(48) reduce_balanced31_r48(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                                                 const float* __restrict__ scales, bf16_t* __restrict__ y) {
  balanced<true>(W, x, codes, scales, y);
}

// The unit's own structure with the simdgroup id known to be 0 (a group of one warp): 3
// rows at 40 registers where the unit takes 48 (`../next/one-simdgroup.patch` does this in
// the templates), so all 11 sets per scheduler are resident; and 4 rows at 48.
extern "C" __global__ void reduce_solo3(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                        const float* __restrict__ scales, bf16_t* __restrict__ y) {
  const uint w = blockIdx.x;
  if (w >= W) return;
  rows_body<3>(w * 3u < 17405u ? w * 3u : 17405u, x, codes, scales, y);
}
extern "C" __global__ void reduce_solo4(uint W, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                        const float* __restrict__ scales, bf16_t* __restrict__ y) {
  const uint w = blockIdx.x;
  if (w >= W) return;
  rows_body<4>(w * 4u, x, codes, scales, y);
}

// Graded row sets (tenth session, prepared): groups of 2 warps like the table's winner
// (`rpg=2 rps=3`, 40 registers, every set resident at once), where the last G2 warps take
// 2 rows and the others 3 (G2 = 1 mod 3, so 3 G3 + 2 G2 = 17408). Blocks start in index
// order, so the last ones are the youngest warps on their schedulers, which the issue
// order serves last: with less work they should shorten the tail where a scheduler's
// last warps run nearly alone. `graded<false>` puts the 2-row sets first (the control).
template <bool LAST>
__device__ __forceinline__ void graded(uint G2, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                       const float* __restrict__ scales, bf16_t* __restrict__ y) {
  const uint w = blockIdx.x * 2u + SIMDGROUP_ID;
  const uint G3 = (17408u - 2u * G2) / 3u;
  if (w >= G3 + G2) return;
  if (LAST) {
    if (w < G3) rows_body<3>(3u * w, x, codes, scales, y);
    else rows_body<2>(3u * G3 + 2u * (w - G3), x, codes, scales, y);
  } else {
    if (w < G2) rows_body<2>(2u * w, x, codes, scales, y);
    else rows_body<3>(2u * G2 + 3u * (w - G2), x, codes, scales, y);
  }
}
extern "C" __global__ void reduce_graded_last(uint G2, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                              const float* __restrict__ scales, bf16_t* __restrict__ y) {
  graded<true>(G2, x, codes, scales, y);
}
extern "C" __global__ void reduce_graded_first(uint G2, const bf16_t* __restrict__ x, const uint32_t* __restrict__ codes,
                                               const float* __restrict__ scales, bf16_t* __restrict__ y) {
  graded<false>(G2, x, codes, scales, y);
}
