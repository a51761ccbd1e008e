//! SPEC section 5: the canonical reduction order, the one summation every `exact`
//! kernel reproduces bit for bit. The kernel templates implement the same steps with
//! the same names (lane, run, `a0`/`a1`, butterfly); this is the plain version.

/// Lanes of a simdgroup the order spreads a row's runs over.
pub const LANES: usize = 32;

/// Weights per run.
pub const RUN: usize = 32;

/// Butterfly offsets, in order.
pub const BUTTERFLY: [usize; 5] = [16, 8, 4, 2, 1];

/// Lane `lane`'s partial `a0 + a1` over its runs `u = lane, lane + 32, ...`.
/// `w(c)` is the (already rounded) weight of column `c`; `x` the activation row.
pub fn lane_partial(lane: usize, x: &[f32], w: impl Fn(usize) -> f32) -> f32 {
    let (mut a0, mut a1) = (0.0f32, 0.0f32);
    for u in (lane..x.len() / RUN).step_by(LANES) {
        for j in 0..RUN {
            let c = RUN * u + j;
            if j % 2 == 0 {
                a0 = w(c).mul_add(x[c], a0);
            } else {
                a1 = w(c).mul_add(x[c], a1);
            }
        }
    }
    a0 + a1
}

/// Step 4: the xor butterfly; every lane ends with the same value, lane 0's is returned.
pub fn butterfly(mut v: [f32; LANES]) -> f32 {
    for o in BUTTERFLY {
        let prev = v;
        for (l, vl) in v.iter_mut().enumerate() {
            *vl = prev[l] + prev[l ^ o];
        }
    }
    v[0]
}

/// `sum_c w(c) * x[c]` in the canonical order, before `round_T`.
pub fn dot(x: &[f32], w: impl Fn(usize) -> f32 + Copy) -> f32 {
    butterfly(std::array::from_fn(|lane| lane_partial(lane, x, w)))
}
