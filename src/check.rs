//! What a correct kernel result is: SPEC section 5 bits for `exact` variants, the SPEC
//! section 7 (v2) bound for `fast` ones; and the random test data every check uses.

use crate::dtype::{DType, ScaleDType};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::{Code, Geometry};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A random quantized matrix: uniform codes (every bit pattern is valid), f16 scales
/// around 0.02, and a Gaussian table for `lut`.
pub fn random_matrix(g: Geometry, seed: u64) -> QuantizedMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let codes = (0..g.codes_shape().iter().product::<usize>())
        .map(|_| rng.random::<u32>())
        .collect();
    let scales = (0..g.rows)
        .map(|_| half::f16::from_f32(rng.random_range(0.005f32..0.04)).to_f32())
        .collect();
    let lut = (g.code == Code::Lut).then(|| crate::encode::gaussian_lut(g.l, seed));
    QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, lut).expect("valid random matrix")
}

/// Random activations in `dtype`, roughly unit scale.
pub fn random_activations(dtype: DType, m: usize, cols: usize, seed: u64) -> Activations {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let data = (0..m * cols)
        .map(|_| rng.random_range(-3.0f32..3.0))
        .collect();
    Activations::from_f32(dtype, m, cols, data).expect("shape matches")
}

/// Random activations with outliers: one column in 64 is scaled up to `2^15` (f16: up
/// to 2^10), the case SPEC 7 says must never overflow.
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
    let e = if v == 0.0 || !v.is_finite() {
        min_exp
    } else {
        v.abs().log2().floor() as i32
    }
    .max(min_exp);
    2f64.powi(e - mant)
}

/// First differing bit pattern, described (`None`: bit for bit equal).
pub fn first_mismatch(got: &Activations, want: &Activations) -> Option<String> {
    if got.rows != want.rows || got.cols != want.cols {
        return Some(format!(
            "shape {}x{} vs {}x{}",
            got.rows, got.cols, want.rows, want.cols
        ));
    }
    got.data
        .iter()
        .zip(&want.data)
        .enumerate()
        .find(|(_, (a, b))| a.to_bits() != b.to_bits())
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

/// Whether a non-finite output is the right one: infinity of `want`'s sign where a value
/// within `bound` of `want` rounds to infinity in `dtype`. SPEC 7 forbids overflow where
/// the real result is in range ("f16 activations: up to their own range"); beyond the
/// range, infinity is the dtype's rounding of the real result (the exact tier gives it
/// too), and no finite output is within the bound.
fn right_overflow(dtype: DType, got: f32, want: f64, bound: f64) -> bool {
    got.is_infinite()
        && (got > 0.0) == (want > 0.0)
        && want.abs() + bound >= overflow_threshold(dtype)
}

/// A fast `reduce` result against SPEC 7 (v2); finite where `y*` is finite and in the
/// activation dtype's range.
pub fn fast_reduce(got: &Activations, real: &RealSums) -> Result<String, String> {
    let mut worst = 0f64;
    for (i, &y) in got.data.iter().enumerate() {
        let (want, bound) = (real.y[i], real.bound(got.dtype, i));
        if right_overflow(got.dtype, y, want, bound) {
            continue;
        }
        let err = (y as f64 - want).abs();
        if !y.is_finite() || err > bound {
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

/// A fast (or native-tail) `gate_up` result against SPEC 7 (v2): `g` and `u` meet the
/// `reduce` bound before the tail, so `mid` is within
/// `2 ulp_T(mid*) + 1.1 (B_g + ulp_T(g*)) |u*| + |silu(g*)| (B_u + ulp_T(u*)) + tail`.
/// `native_tail`: the backend's own exp, allowed 2 more T-ulps and 2^-12 relative.
pub fn fast_gate_up(
    got: &Activations,
    g: &RealSums,
    u: &RealSums,
    native_tail: bool,
) -> Result<String, String> {
    let t = got.dtype;
    let mut worst = 0f64;
    for (i, &mid) in got.data.iter().enumerate() {
        let (gs, us) = (g.y[i], u.y[i]);
        let silu = crate::reference::silu_f64(gs);
        let want = silu * us;
        let tail = if native_tail {
            2.0 * ulp(t, want) + want.abs() * 2f64.powi(-12)
        } else {
            0.0
        };
        let bound = 2.0 * ulp(t, want)
            + 1.1 * (g.bound(t, i) + ulp(t, gs)) * us.abs()
            + silu.abs() * (u.bound(t, i) + ulp(t, us))
            + tail;
        if right_overflow(t, mid, want, bound) {
            continue;
        }
        let err = (mid as f64 - want).abs();
        if !mid.is_finite() || err > bound {
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
        assert!(fast_reduce(&wrong, &real).is_err());
        let mut inf = exact;
        inf.data[0] = f32::INFINITY;
        assert!(fast_reduce(&inf, &real).is_err());
    }

    /// Beyond the dtype's range the right output is infinity of the real result's sign
    /// (what rounding gives, and the exact tier): f16 activations whose products pass
    /// 65520. Inside it, infinity is still wrong, and NaN always is.
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
        let (g, u) = (real(600.0), real(200.0));
        assert!(fast_gate_up(&out(f32::INFINITY), &g, &u, false).is_ok());
        assert!(fast_gate_up(&out(f32::INFINITY), &real(60.0), &u, false).is_err());
    }
}
