//! What a correct kernel result is: SPEC section 5 bits for `exact` variants, the SPEC
//! section 7 (v2) bound for `fast` ones; and the random test data every check uses.

use crate::dtype::{DType, ScaleDType};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::{Code, Geometry};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A random quantized matrix with `scale` row scales: as [`random_matrix`], and for f32
/// scales values f16 cannot hold, of either sign (so a kernel that narrows f32 scales, or
/// loses their sign, shows).
pub fn random_matrix_scaled(g: Geometry, scale: ScaleDType, seed: u64) -> QuantizedMatrix {
    try_random_matrix_scaled(g, scale, seed).expect("room for a random matrix")
}

/// [`random_matrix_scaled`] with its codes and scales reserved first: a matrix the host
/// has no room for (a tuner's `--shape` of a valid but huge geometry) is an error naming
/// it, not an allocation abort.
pub fn try_random_matrix_scaled(
    g: Geometry,
    scale: ScaleDType,
    seed: u64,
) -> crate::Result<QuantizedMatrix> {
    let mut w = try_random_matrix(g, seed)?;
    if scale == ScaleDType::F32 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5ca1e);
        for s in &mut w.scales {
            // An odd low mantissa bit: 24 significant bits, never an f16 value.
            let v = f32::from_bits(rng.random_range(0.005f32..0.04).to_bits() | 1);
            *s = if rng.random::<bool>() { -v } else { v };
        }
    }
    w.scale_dtype = scale;
    Ok(w)
}

/// A random quantized matrix: uniform codes (every bit pattern is valid), f16 scales
/// of magnitude around 0.02 and either sign (a scale's sign is the format's too: a kernel
/// that drops it shows), and a Gaussian table for `lut`.
pub fn random_matrix(g: Geometry, seed: u64) -> QuantizedMatrix {
    try_random_matrix(g, seed).expect("room for a random matrix")
}

fn try_random_matrix(g: Geometry, seed: u64) -> crate::Result<QuantizedMatrix> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // The signs from a stream of their own, so codes and magnitudes are as they were.
    let mut signs = ChaCha8Rng::seed_from_u64(seed ^ 0x5191);
    let words = g.codes_shape().iter().product::<usize>();
    let what = format!("a random {}x{} matrix", g.rows, g.cols);
    let codes = crate::error::collect_reserved(
        words,
        (0..words).map(|_| rng.random::<u32>()),
        "codes",
        format!("{words} words ({what})"),
    )?;
    let scales = crate::error::collect_reserved(
        g.rows,
        (0..g.rows).map(|_| {
            let v = half::f16::from_f32(rng.random_range(0.005f32..0.04)).to_f32();
            if signs.random::<bool>() {
                -v
            } else {
                v
            }
        }),
        "scales",
        format!("{} rows ({what})", g.rows),
    )?;
    let lut = (g.code == Code::Lut)
        .then(|| crate::encode::gaussian_lut(g.l, seed))
        .transpose()?;
    QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, lut)
}

/// Random activations in `dtype`, roughly unit scale.
pub fn random_activations(dtype: DType, m: usize, cols: usize, seed: u64) -> Activations {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let data = (0..m * cols)
        .map(|_| rng.random_range(-3.0f32..3.0))
        .collect();
    Activations::from_f32(dtype, m, cols, data).expect("shape matches")
}

/// Random activations with outliers: one column in 64 is scaled up to `2^15`, the case
/// SPEC 7 says must never overflow (f16, whose range SPEC 7 leaves to the type: `2^10`,
/// so the sums stay in f16's range).
pub fn random_activations_with_outliers(
    dtype: DType,
    m: usize,
    cols: usize,
    seed: u64,
) -> Activations {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let big = if dtype == DType::F16 { 1024.0 } else { 32768.0 };
    let data = (0..m * cols)
        .map(|i| {
            let v = rng.random_range(-3.0f32..3.0);
            if i % 64 == 17 {
                v.signum() * big
            } else {
                v
            }
        })
        .collect();
    Activations::from_f32(dtype, m, cols, data).expect("shape matches")
}

/// ulp of `v` in `dtype` (the spacing at |v|; min normal spacing near zero).
pub fn ulp(dtype: DType, v: f64) -> f64 {
    let mant = dtype.mantissa_bits();
    let (min_exp, _) = dtype.normal_exponents();
    // The exponent from the bits: `log2().floor()` rounds up just below a power of two.
    let e = if v == 0.0 || !v.is_finite() {
        min_exp
    } else {
        ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023
    }
    .max(min_exp);
    2f64.powi(e - mant)
}

/// First differing bit pattern, described (`None`: bit for bit equal, a NaN matching
/// any NaN).
pub fn first_mismatch(got: &Activations, want: &Activations) -> Option<String> {
    if got.dtype != want.dtype {
        return Some(format!("dtype {} vs {}", got.dtype, want.dtype));
    }
    if got.rows != want.rows || got.cols != want.cols || got.data.len() != want.data.len() {
        return Some(format!(
            "shape {}x{} ({} values) vs {}x{} ({} values)",
            got.rows,
            got.cols,
            got.data.len(),
            want.rows,
            want.cols,
            want.data.len()
        ));
    }
    got.data
        .iter()
        .zip(&want.data)
        .enumerate()
        // A NaN's sign and payload are the platform's (x86's default NaN is negative,
        // CUDA's positive), so NaN matches NaN; every other value matches bit for bit.
        .find(|(_, (a, b))| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()))
        .map(|(i, (a, b))| {
            format!(
                "[{}, {}]: got {a:e} ({:#010x}) want {b:e} ({:#010x})",
                i / got.cols,
                i % got.cols,
                a.to_bits(),
                b.to_bits()
            )
        })
}

/// `Ok("bit-exact")` or the first mismatch.
pub fn bits(got: &Activations, want: &Activations) -> Result<String, String> {
    first_mismatch(got, want).map_or(Ok("bit-exact".into()), Err)
}

/// The SPEC 7 (v2) bound of one `reduce` output: `ulp_T(y*) + (2^-8 + (C+1) 2^-23) * abs`.
pub fn reduce_bound(dtype: DType, cols: usize, y_real: f64, abs: f64) -> f64 {
    ulp(dtype, y_real) + (2f64.powi(-8) + (cols as f64 + 1.0) * 2f64.powi(-23)) * abs
}

/// Real sums of one projection for the fast check: `y*` and `sum |w* x|`, `[M, R]`.
#[derive(Clone, Debug)]
pub struct RealSums {
    /// `y*[m, r] = sum_c w*(r, c) * x[m, c]` in f64, row-major `[M, R]`.
    pub y: Vec<f64>,
    /// `sum_c |w*(r, c) * x[m, c]|` in f64, row-major `[M, R]`.
    pub abs: Vec<f64>,
    /// Columns C of the matrix (the bound's `C`).
    pub cols: usize,
}

/// The SPEC 7 real sums of `N` matrices over the same activations, computed on first
/// use (a fast check needs them; an exact family's `Expected` keeps them for its fast
/// variants), the error kept as text so every later call sees the same.
#[derive(Default)]
pub struct LazyRealSums<const N: usize>(
    std::cell::OnceCell<std::result::Result<[RealSums; N], String>>,
);

impl<const N: usize> LazyRealSums<N> {
    /// The real sums of each of `ws` with `x`, computed on the first call.
    pub fn get(
        &self,
        ws: [&QuantizedMatrix; N],
        x: &Activations,
    ) -> std::result::Result<&[RealSums; N], String> {
        self.0
            .get_or_init(|| {
                let mut sums = Vec::with_capacity(N);
                for w in ws {
                    sums.push(RealSums::of(w, x).map_err(|e| e.to_string())?);
                }
                sums.try_into()
                    .map_err(|_| "one real sum per matrix".to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl RealSums {
    /// SPEC 7 reference sums of `w` against `x`.
    pub fn of(w: &QuantizedMatrix, x: &Activations) -> crate::Result<Self> {
        let (y, abs) = crate::reference::real_sums(w, x)?;
        Ok(RealSums {
            y,
            abs,
            cols: w.geometry.cols,
        })
    }
    /// The bound of output `i`.
    pub fn bound(&self, dtype: DType, i: usize) -> f64 {
        reduce_bound(dtype, self.cols, self.y[i], self.abs[i])
    }
}

/// The smallest magnitude that rounds to infinity in `dtype` (round to nearest even):
/// the largest finite value plus half its ulp (f16: 65520).
pub fn overflow_threshold(dtype: DType) -> f64 {
    let mant = dtype.mantissa_bits();
    let (_, max_exp) = dtype.normal_exponents();
    (2.0 - 2f64.powi(-mant - 1)) * 2f64.powi(max_exp)
}

/// Whether a non-finite output is the right one: infinity of `want`'s sign where
/// - `want` (the real result) rounds to infinity in `dtype`: infinity is the dtype's
///   rounding there (the exact tier gives it too), and no finite output is within the
///   bound; or
/// - `want` lies in the dtype's top binade and a value within `slack` of it rounds to
///   infinity: at the edge of the range the relative errors the bound allows (the
///   operands' rounding, which SPEC 6's exact arithmetic has too) carry a value past it.
///
/// `slack` is relative to `want`, never the bound's `sum |w* x|` term: SPEC 7 keeps sums in
/// range finite ("f16 activations: up to their own range"), and a sum of large terms that
/// cancel has a large bound, which an overflowed partial sum must not pass for.
fn right_overflow(dtype: DType, got: f32, want: f64, slack: f64) -> bool {
    let edge = overflow_threshold(dtype);
    got.is_infinite()
        && (got > 0.0) == (want > 0.0)
        && (want.abs() >= edge || (want.abs() >= edge / 2.0 && want.abs() + slack >= edge))
}

/// Whether an f16 output is the largest f16 held at the edge ([`crate::numerics::f16_hold`]),
/// of `want`'s sign, where some value within `bound` of `want` lies in the hold's window
/// `[65520, F16_HOLD_BELOW)`: what the fast kernels write for an f32 result there. (A
/// 65504 far from the edge is judged by the bound, as any finite output.)
fn held_at_f16_edge(dtype: DType, got: f32, want: f64, bound: f64) -> bool {
    let (lo, hi) = (want.abs() - bound, want.abs() + bound);
    dtype == DType::F16
        && got.abs() == 65504.0
        && (got > 0.0) == (want > 0.0)
        && hi >= overflow_threshold(DType::F16)
        && lo < crate::numerics::F16_HOLD_BELOW as f64
}

/// The part of SPEC 7's bound relative to the result, `2^-8 + (C + 1) 2^-23`: how far
/// a sum without cancellation may stray, relatively.
fn relative_bound(cols: usize) -> f64 {
    2f64.powi(-8) + (cols as f64 + 1.0) * 2f64.powi(-23)
}

/// `err <= bound`, false where either is NaN.
fn within(err: f64, bound: f64) -> bool {
    matches!(
        err.partial_cmp(&bound),
        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
    )
}

/// `got` holds its `rows x cols` values and as many as the real sums (`want`): a short
/// or empty result is no pass.
fn same_size(got: &Activations, want: usize) -> Result<(), String> {
    if got.data.len() != want || got.rows * got.cols != want {
        return Err(format!(
            "shape {}x{} ({} values) where the real sums have {want}",
            got.rows,
            got.cols,
            got.data.len()
        ));
    }
    Ok(())
}

/// A fast `reduce` result against SPEC 7 (v2); finite where `y*` is finite and in the
/// activation dtype's range.
pub fn fast_reduce(got: &Activations, real: &RealSums) -> Result<String, String> {
    same_size(got, real.y.len())?;
    let mut worst = 0f64;
    for (i, &y) in got.data.iter().enumerate() {
        let (want, bound) = (real.y[i], real.bound(got.dtype, i));
        // f16 sums take no slack at the edge: SPEC 7 keeps them finite up to f16's own
        // range, and the fast kernels hold one just past it at the largest f16 instead
        // ([`crate::numerics::F16_HOLD_BELOW`], [`held_at_f16_edge`]).
        let slack = if got.dtype == DType::F16 {
            0.0
        } else {
            ulp(got.dtype, want) + relative_bound(real.cols) * want.abs()
        };
        if right_overflow(got.dtype, y, want, slack) || held_at_f16_edge(got.dtype, y, want, bound)
        {
            continue;
        }
        let err = (y as f64 - want).abs();
        // A NaN sum or bound is a failure, not a pass (`err > bound` would be false).
        if !y.is_finite() || !within(err, bound) {
            return Err(format!(
                "y[{}, {}] = {y:e} but y* = {want:e} (error {err:e}, bound {bound:e})",
                i / got.cols,
                i % got.cols
            ));
        }
        worst = worst.max(err / bound);
    }
    Ok(format!("within SPEC 7 bound (worst {:.3} of it)", worst))
}

/// The native tail's tolerance (SPEC 6 leaves it to the backend; SPEC 7's fast `gate_up`
/// bound adds it), at `mid = round_T(round_T(silu(g)) * u)`: the backend's own exp may
/// move `round_T(silu)` one T-ulp, which moves the product by `ulp_T(silu) |u|`; 2 T-ulps
/// of `mid` for the final rounding going the other way; 2^-12 relative for f32 T, where
/// no rounding to T hides the exp's own error.
pub fn native_tail_tolerance(t: DType, mid: f64, silu: f64, u: f64) -> f64 {
    2.0 * ulp(t, mid) + ulp(t, silu) * u.abs() + mid.abs() * 2f64.powi(-12)
}

/// A native tail's `mid` against the exact tail's over the same (exact) projections `g`
/// and `u` (SPEC 6: "checked against exact within a tolerance, never bit for bit"):
/// equal bits, or finite and within [`native_tail_tolerance`].
pub fn native_gate_up(
    got: &Activations,
    exact: &Activations,
    g: &Activations,
    u: &Activations,
) -> Result<String, String> {
    let n = exact.data.len();
    if (got.rows, got.cols) != (exact.rows, exact.cols)
        || [got.data.len(), g.data.len(), u.data.len()] != [n; 3]
    {
        return Err(format!(
            "shape {}x{} ({} values) vs {}x{} ({n} values; g {}, u {})",
            got.rows,
            got.cols,
            got.data.len(),
            exact.rows,
            exact.cols,
            g.data.len(),
            u.data.len()
        ));
    }
    let t = got.dtype;
    let mut worst = 0f64;
    for (i, (&mid, &want)) in got.data.iter().zip(&exact.data).enumerate() {
        if mid.to_bits() == want.to_bits() {
            continue;
        }
        let silu = crate::reference::silu(g.data[i]) as f64;
        // Below g = -80 exp_spec clamps its argument (SPEC 6), so the exact silu is
        // g e^-80 where the true one (and a native exp's) is smaller, down to 0: a native
        // tail may differ by the whole exact term there.
        let clamped = if g.data[i] < -80.0 {
            silu.abs() * (u.data[i] as f64).abs()
        } else {
            0.0
        };
        let tol = native_tail_tolerance(t, want as f64, silu, u.data[i] as f64) + clamped;
        let err = (mid as f64 - want as f64).abs();
        if !mid.is_finite() || !want.is_finite() || err > tol {
            return Err(format!(
                "mid[{}, {}] = {mid:e} but the exact tail gives {want:e} (error {err:e}, \
                 native tolerance {tol:e})",
                i / got.cols,
                i % got.cols
            ));
        }
        worst = worst.max(err / tol);
    }
    Ok(format!(
        "within the native tail's tolerance of the exact tail (worst {worst:.3} of it)"
    ))
}

/// A fast `gate_up` result against SPEC 7 (v2): `mid` within
/// `2 ulp_T(mid*) + 1.1 (B_g + ulp_T(g*)) |u*| + |silu(g*)| (B_u + ulp_T(u*)) + tail`,
/// the tail term [`native_tail_tolerance`] for a native tail (`native_tail`), else 0.
/// SPEC 7 also asks `g` and `u` to meet the `reduce` bound before the tail; the fused
/// kernels return `mid` only, so that half is checked on `GateUpMmaParts`, the same
/// kernel storing `g` and `u` beside a `mid` equal to the plain kernel's
/// (`tests/gate_up_parts.rs`, with [`fast_reduce`]).
pub fn fast_gate_up(
    got: &Activations,
    g: &RealSums,
    u: &RealSums,
    native_tail: bool,
) -> Result<String, String> {
    if g.y.len() != u.y.len() {
        return Err(format!("g has {} real sums, u {}", g.y.len(), u.y.len()));
    }
    same_size(got, g.y.len())?;
    let t = got.dtype;
    let mut worst = 0f64;
    for (i, &mid) in got.data.iter().enumerate() {
        let (gs, us) = (g.y[i], u.y[i]);
        let silu = crate::reference::silu_f64(gs);
        let want = silu * us;
        let tail = if native_tail {
            native_tail_tolerance(t, want, silu, us)
        } else {
            0.0
        };
        let bound = 2.0 * ulp(t, want)
            + 1.1 * (g.bound(t, i) + ulp(t, gs)) * us.abs()
            + silu.abs() * (u.bound(t, i) + ulp(t, us))
            + tail;
        // g* or u* beyond T's range: the tail takes g and u rounded to T (SPEC 6), so
        // what the exact tail gives on them is right too where it is not finite (an
        // infinity, or NaN where an infinite u meets a zero silu(g)); a finite output is
        // judged by the bound below, and another infinity by mid*.
        let (gt, ut) = (t.round_f64(gs), t.round_f64(us));
        if !(gt.is_finite() && ut.is_finite()) {
            let exact = crate::reference::swiglu(gt, ut, t);
            if !exact.is_finite()
                && (mid.to_bits() == exact.to_bits() || (mid.is_nan() && exact.is_nan()))
            {
                continue;
            }
        }
        // mid*'s relative error: silu's (at most 1.1 times g's) and u's, each the bound's
        // relative part and their rounding to T, and mid's own two ulps.
        let operand = 2f64.powi(-t.mantissa_bits());
        let slack = 2.0 * ulp(t, want)
            + (1.1 * (relative_bound(g.cols) + operand) + relative_bound(u.cols) + operand)
                * want.abs();
        if right_overflow(t, mid, want, slack) || held_at_f16_edge(t, mid, want, bound) {
            continue;
        }
        let err = (mid as f64 - want).abs();
        if !mid.is_finite() || !within(err, bound) {
            return Err(format!(
                "mid[{}, {}] = {mid:e} but silu(g*) u* = {want:e} (error {err:e}, bound {bound:e})",
                i / got.cols,
                i % got.cols
            ));
        }
        worst = worst.max(err / bound);
    }
    Ok(format!("within SPEC 7 bound (worst {:.3} of it)", worst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_of_common_values() {
        assert_eq!(ulp(DType::Bf16, 1.0), 2f64.powi(-7));
        assert_eq!(ulp(DType::F16, 1.5), 2f64.powi(-10));
        assert_eq!(ulp(DType::F32, 0.0), 2f64.powi(-149));
        // Just below a power of two (where an f64 log2 rounds up to the power).
        let below = 2f64.powi(20) * (1.0 - f64::EPSILON / 2.0);
        assert_eq!(ulp(DType::F32, below), 2f64.powi(19 - 23));
        assert_eq!(ulp(DType::Bf16, -below), 2f64.powi(19 - 7));
    }

    #[test]
    fn fast_bound_accepts_the_exact_result_and_rejects_a_wrong_one() {
        let g = Geometry::new(8, 256, 256, 3, 12, Code::OneMad).unwrap();
        let w = random_matrix(g, 3);
        let x = random_activations_with_outliers(DType::Bf16, 2, 256, 4);
        let real = RealSums::of(&w, &x).unwrap();
        let exact = crate::reference::reduce(&w, &x).unwrap();
        assert!(fast_reduce(&exact, &real).is_ok());
        let mut wrong = exact.clone();
        wrong.data[3] = wrong.data[3] * 1.5 + 1.0;
        let e = fast_reduce(&wrong, &real).unwrap_err();
        assert!(e.starts_with("y[0, 3] = ") && e.contains("bound"), "{e}");
        let mut inf = exact.clone();
        inf.data[0] = f32::INFINITY;
        let e = fast_reduce(&inf, &real).unwrap_err();
        assert!(e.starts_with("y[0, 0] = inf"), "{e}");

        // A result missing a sample, or empty, is no pass (nor a panic for a longer one),
        // for `reduce`, `gate_up` and the bit comparison alike.
        let short = Activations::from_f32(DType::Bf16, 1, 8, exact.data[..8].to_vec()).unwrap();
        let empty = Activations::from_f32(DType::Bf16, 0, 8, Vec::new()).unwrap();
        let long = Activations::from_f32(
            DType::Bf16,
            3,
            8,
            [&exact.data[..], &exact.data[..8]].concat(),
        )
        .unwrap();
        for bad in [&short, &empty, &long] {
            let e = fast_reduce(bad, &real).unwrap_err();
            assert!(e.contains("where the real sums have 16"), "{e}");
            let e = fast_gate_up(bad, &real, &real, false).unwrap_err();
            assert!(e.contains("where the real sums have 16"), "{e}");
            assert!(first_mismatch(bad, &exact).unwrap().starts_with("shape "));
        }
        let mut f16 = exact.clone();
        f16.dtype = DType::F16;
        assert_eq!(first_mismatch(&f16, &exact).unwrap(), "dtype f16 vs bf16");
        assert_eq!(first_mismatch(&exact, &exact), None);
    }

    /// SPEC 6: a native tail is checked against the exact one within a tolerance: an exp
    /// a few f32 ulps off passes (its `round_T(silu)` may go the other way), a result 8
    /// T-ulps off (f32: 2^-10 relative) or NaN does not.
    #[test]
    fn a_native_tail_is_within_its_tolerance_of_the_exact_one() {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            let n = 4000;
            let g = random_activations(dtype, 1, n, 7);
            let mut u = random_activations(dtype, 1, n, 8);
            u.data[0] = 0.0;
            let exact = crate::reference::swiglu_tail(&g, &u).unwrap();
            let native = |rel: f32| {
                let data = g
                    .data
                    .iter()
                    .zip(&u.data)
                    .map(|(&gv, &uv)| {
                        let e = (-gv).exp() * (1.0 + rel);
                        dtype.round(dtype.round(gv * (1.0 / (1.0 + e))) * uv)
                    })
                    .collect();
                Activations::from_f32(dtype, 1, n, data).unwrap()
            };
            for rel in [0.0, 4e-7, -4e-7] {
                let got = native(rel);
                native_gate_up(&got, &exact, &g, &u).unwrap();
            }
            assert!(native_gate_up(&exact, &exact, &g, &u).is_ok());
            let mut off = exact.clone();
            let i = off.data.iter().position(|v| v.abs() > 1.0).unwrap();
            let v = off.data[i] as f64;
            off.data[i] = (v + (8.0 * ulp(dtype, v)).max(v.abs() * 2f64.powi(-10))) as f32;
            let e = native_gate_up(&off, &exact, &g, &u).unwrap_err();
            assert!(
                e.starts_with(&format!("mid[0, {i}] = ")) && e.contains("native tolerance"),
                "{dtype:?}: {e}"
            );
            let mut nan = exact.clone();
            nan.data[3] = f32::NAN;
            let e = native_gate_up(&nan, &exact, &g, &u).unwrap_err();
            assert!(e.starts_with("mid[0, 3] = NaN"), "{dtype:?}: {e}");
            // Operands of another shape are an error naming both, not an index past them.
            let short = Activations::from_f32(dtype, 1, 8, vec![0.5; 8]).unwrap();
            let e = native_gate_up(&exact, &exact, &short, &u).unwrap_err();
            assert!(e.contains("g 8"), "{dtype:?}: {e}");
        }
    }

    /// Below g = -80 the exact tail's exp_spec clamps (silu = g e^-80, not about 0), where
    /// a native exp gives 0 or a smaller term: within the tolerance there, and a wrong
    /// value there still is not.
    #[test]
    fn a_native_tail_may_drop_the_exact_clamps_term() {
        for dtype in [DType::Bf16, DType::F32] {
            let gs = [-80.5f32, -85.0, -88.0, -89.0, -100.0, -1000.0, -3.0e4];
            let g = Activations::from_f32(dtype, 1, gs.len(), gs.to_vec()).unwrap();
            let u = Activations::from_f32(dtype, 1, gs.len(), vec![-3.0e4; gs.len()]).unwrap();
            let exact = crate::reference::swiglu_tail(&g, &u).unwrap();
            assert!(
                exact.data.iter().all(|&m| m != 0.0),
                "{dtype:?}: {:?}",
                exact.data
            );
            let native = Activations {
                data: (g.data.iter().zip(&u.data))
                    .map(|(&g, &u)| dtype.round(dtype.round(g * (1.0 / (1.0 + (-g).exp()))) * u))
                    .collect(),
                ..exact.clone()
            };
            native_gate_up(&native, &exact, &g, &u).unwrap_or_else(|e| panic!("{dtype:?}: {e}"));
            let mut off = exact.clone();
            off.data[4] = 1.0;
            assert!(native_gate_up(&off, &exact, &g, &u).is_err(), "{dtype:?}");
        }
    }

    /// f32 row scales of the random data are no f16 values and take both signs: a kernel
    /// that narrows them, or drops the sign, fails its check.
    #[test]
    fn random_f32_scales_are_not_f16_values_and_take_both_signs() {
        let g = Geometry::new(64, 256, 256, 2, 12, Code::OneMad).unwrap();
        let w = random_matrix_scaled(g, ScaleDType::F32, 3);
        assert_eq!(w.scale_dtype, ScaleDType::F32);
        assert!(w
            .scales
            .iter()
            .all(|&s| half::f16::from_f32(s).to_f32() != s));
        assert!(w.scales.iter().any(|&s| s < 0.0) && w.scales.iter().any(|&s| s > 0.0));
        let h = random_matrix_scaled(g, ScaleDType::F16, 3);
        assert_eq!(h.scales, random_matrix(g, 3).scales);
    }

    /// Beyond the dtype's range the right output is infinity of the real result's sign
    /// (what rounding gives, and the exact tier): f16 activations whose products pass
    /// 65520. Inside it, infinity is still wrong, however large the bound, and NaN always
    /// is.
    #[test]
    fn fast_bound_takes_infinity_only_beyond_the_dtype_range() {
        assert_eq!(overflow_threshold(DType::F16), 65520.0);
        assert_eq!(
            overflow_threshold(DType::Bf16),
            f64::from(half::bf16::MAX) + 2f64.powi(127 - 8)
        );
        assert_eq!(
            overflow_threshold(DType::F32),
            f64::from(f32::MAX) + 2f64.powi(127 - 24)
        );
        let out = |v: f32| Activations::from_f32(DType::F16, 1, 1, vec![v]).unwrap();
        let real = |y: f64| RealSums {
            y: vec![y],
            abs: vec![y.abs()],
            cols: 256,
        };
        assert!(fast_reduce(&out(f32::INFINITY), &real(1.2e5)).is_ok());
        assert!(fast_reduce(&out(f32::NEG_INFINITY), &real(-1.2e5)).is_ok());
        assert!(fast_reduce(&out(f32::NEG_INFINITY), &real(1.2e5)).is_err());
        assert!(fast_reduce(&out(f32::NAN), &real(1.2e5)).is_err());
        // 60000 is in range (its bound, about 240, does not reach 65520).
        assert!(fast_reduce(&out(f32::INFINITY), &real(6.0e4)).is_err());
        assert!(fast_reduce(&out(60000.0), &real(6.0e4)).is_ok());
        // In range and below the top binade, however large the bound: 1000 from terms of
        // 2^24 that cancel (bound about 73700) must stay finite.
        let cancelling = RealSums {
            y: vec![1000.0],
            abs: vec![2f64.powi(24)],
            cols: 4096,
        };
        assert!(fast_reduce(&out(f32::INFINITY), &cancelling).is_err());
        assert!(fast_reduce(&out(1000.0), &cancelling).is_ok());
        // At f16's edge: 65510 is in range (it rounds to 65504), so no infinity, though
        // its bound (about 290 here) reaches 65520; the fast kernels hold such a sum at
        // 65504 (`F16_HOLD_BELOW`), which is right also past the edge where the bound
        // reaches back below the hold's end, and not beyond.
        assert!(fast_reduce(&out(f32::INFINITY), &real(65510.0)).is_err());
        assert!(fast_reduce(&out(65504.0), &real(65510.0)).is_ok());
        assert!(fast_reduce(&out(65504.0), &real(65700.0)).is_ok());
        assert!(fast_reduce(&out(f32::INFINITY), &real(65700.0)).is_ok());
        assert!(fast_reduce(&out(-65504.0), &real(-65900.0)).is_ok());
        assert!(fast_reduce(&out(65504.0), &real(-65700.0)).is_err());
        assert!(fast_reduce(&out(65504.0), &real(1.2e5)).is_err());
        // Nor far below the edge: a 65504 is then judged by the bound alone.
        assert!(fast_reduce(&out(65504.0), &real(1.0)).is_err());
        assert!(fast_reduce(&out(-65504.0), &real(-3.0)).is_err());
        assert!(fast_gate_up(&out(65504.0), &real(1.0), &real(2.0), false).is_err());
        // bf16 keeps the top binade's slack (SPEC 7 asks its sums finite up to 2^20).
        let out_bf16 = |v: f32| Activations::from_f32(DType::Bf16, 1, 1, vec![v]).unwrap();
        let top = f64::from(half::bf16::MAX) * (1.0 - 2f64.powi(-9));
        assert!(fast_reduce(&out_bf16(f32::INFINITY), &real(top)).is_ok());
        // The top binade but the bound short of the edge: finite.
        assert!(fast_reduce(&out(f32::INFINITY), &real(40000.0)).is_err());
        // A NaN real sum passes nothing.
        assert!(fast_reduce(&out(1.0), &real(f64::NAN)).is_err());
        let (g, u) = (real(600.0), real(200.0));
        assert!(fast_gate_up(&out(f32::INFINITY), &g, &u, false).is_ok());
        assert!(fast_gate_up(&out(f32::INFINITY), &real(60.0), &u, false).is_err());
        // g* beyond f16's range with mid* inside it: g rounds to infinity before the tail
        // (SPEC 6), as in the exact tier.
        assert!(fast_gate_up(&out(f32::INFINITY), &real(7.0e4), &real(0.5), false).is_ok());
        assert!(fast_gate_up(&out(f32::NEG_INFINITY), &real(7.0e4), &real(-0.5), false).is_ok());
        assert!(fast_gate_up(&out(f32::NEG_INFINITY), &real(7.0e4), &real(0.5), false).is_err());
        // u* beyond the range where silu(g) rounds to 0: the exact tail gives NaN (inf
        // times 0), and so may the fast one; no infinity is right there.
        let (zero, huge) = (real(0.0), real(7.0e4));
        assert!(fast_gate_up(&out(f32::NAN), &zero, &huge, false).is_ok());
        assert!(fast_gate_up(&out(f32::INFINITY), &zero, &huge, false).is_err());
        assert!(fast_gate_up(&out(f32::NEG_INFINITY), &zero, &huge, false).is_err());
        // g* far below the range (mid* = +0): the exact tail on g rounded to -inf gives
        // +inf, which passes, as does mid* itself; -inf does not.
        let (g, u) = (real(-7.0e4), real(-0.5));
        assert_eq!(
            crate::reference::swiglu(f32::NEG_INFINITY, -0.5, DType::F16),
            f32::INFINITY
        );
        assert!(fast_gate_up(&out(f32::INFINITY), &g, &u, false).is_ok());
        assert!(fast_gate_up(&out(0.0), &g, &u, false).is_ok());
        assert!(fast_gate_up(&out(f32::NEG_INFINITY), &g, &u, false).is_err());
    }

    /// In the top binade, infinity needs the result itself near the edge: a result of
    /// 40000 from terms that cancel (its bound, from `sum |w* x|`, passes 65520) is an
    /// overflowed partial sum when it comes back infinite.
    #[test]
    fn a_large_bound_from_cancelling_terms_admits_no_infinity() {
        let out = |v: f32| Activations::from_f32(DType::F16, 1, 1, vec![v]).unwrap();
        let cancelling = RealSums {
            y: vec![40000.0],
            abs: vec![16_678_016.0],
            cols: 256,
        };
        assert!(cancelling.bound(DType::F16, 0) > 65520.0);
        assert!(fast_reduce(&out(f32::INFINITY), &cancelling).is_err());
        assert!(fast_reduce(&out(40000.0), &cancelling).is_ok());
        let g = RealSums {
            y: vec![400.0],
            abs: vec![1e9],
            cols: 256,
        };
        let u = RealSums {
            y: vec![100.0],
            abs: vec![100.0],
            cols: 256,
        };
        assert!(fast_gate_up(&out(f32::INFINITY), &g, &u, false).is_err());
    }

    /// The exact comparison matches NaN with NaN whatever the sign and payload (the
    /// platform's), and everything else bit for bit (signed zeros included).
    #[test]
    fn exact_bits_match_nan_as_a_class() {
        let act = |v: f32| Activations::from_f32(DType::F32, 1, 1, vec![v]).unwrap();
        let (pos, neg) = (f32::from_bits(0x7fc0_0000), f32::from_bits(0xffc0_0000));
        assert!(first_mismatch(&act(pos), &act(neg)).is_none());
        assert!(first_mismatch(&act(pos), &act(1.0)).is_some());
        assert!(first_mismatch(&act(0.0), &act(-0.0)).is_some());
    }
}
