//! The CPU reference (SPEC sections 4-6): the oracle every kernel is checked against.
//! Deliberately plain: one function per SPEC step, no representation tricks.

use crate::canonical;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::matrix::{Activations, QuantizedMatrix};
use rayon::prelude::*;

/// SPEC section 4: `w(r, c) = round_T(value(s) * f32(scales[r]))` for every row, `[R, C]`.
pub fn dequantize(w: &QuantizedMatrix, dtype: DType) -> Result<Vec<f32>> {
    w.validate()?;
    let g = &w.geometry;
    let mut out = filled(g.rows, g.cols, 0.0f32, "dequantized weights (rows x cols)")?;
    dequantize_into(w, dtype, &mut out)?;
    Ok(out)
}

fn dequantize_into(w: &QuantizedMatrix, dtype: DType, out: &mut [f32]) -> Result<()> {
    crate::error::check_threads_env()?; // before the first use builds rayon's pool
    let table = w.value_table()?;
    out.par_chunks_mut(w.geometry.cols)
        .enumerate()
        .for_each(|(r, row)| {
            for (c, v) in row.iter_mut().enumerate() {
                *v = dtype.round(table[w.state(r, c) as usize] * w.scales[r]);
            }
        });
    Ok(())
}

/// `a * b` values of `fill`, or an error naming `what` when the count overflows or the
/// memory cannot be had (a huge M or matrix through the reference is an error, not an
/// allocation abort).
fn filled<T: Clone>(a: usize, b: usize, fill: T, what: &str) -> Result<Vec<T>> {
    let n = a
        .checked_mul(b)
        .ok_or_else(|| Error::invalid(what, format!("{a} x {b}"), "the element count overflows"))?;
    let mut v = crate::error::reserve(n, what, format!("{a} x {b}"))?;
    v.resize(n, fill);
    Ok(v)
}

/// x's shape `[M, C]` against the matrix's `cols`: C must be them (an x that looks
/// transposed is named as such) and M at least 1. Host activations
/// ([`check_activations`]) and those on a device share it.
pub fn check_x_shape([rows, x_cols]: [usize; 2], cols: usize) -> Result<()> {
    if x_cols != cols && rows == cols {
        return Err(Error::invalid(
            "x shape",
            format!("[{rows}, {x_cols}]"),
            format!("x is [M, C] with C = {cols}, the matrix's cols: this one looks transposed"),
        ));
    }
    if x_cols != cols {
        return Err(Error::Shape {
            name: "x".into(),
            actual: vec![rows, x_cols],
            expected: vec![rows, cols],
        });
    }
    if rows == 0 {
        return Err(Error::invalid("M", 0, "x must have at least one row"));
    }
    Ok(())
}

/// Check that `x` fits a matrix with `cols` input features.
pub fn check_activations(x: &Activations, cols: usize) -> Result<()> {
    check_x_shape([x.rows, x.cols], cols)?;
    // Its fields are public: the data must hold exactly M x C values.
    if x.rows.checked_mul(x.cols) != Some(x.data.len()) {
        return Err(Error::Shape {
            name: "x data".into(),
            actual: vec![x.data.len()],
            expected: vec![x.rows, x.cols],
        });
    }
    // Each value must be one of its dtype's: the kernels read the stored bits, the
    // reference these values (NaN is the finiteness checks' to name).
    if let Some(i) = x.dtype.first_foreign(&x.data) {
        return Err(Error::invalid(
            format!("x[{}, {}]", i / x.cols, i % x.cols),
            x.data[i],
            format!("not a {} value (the activations' dtype)", x.dtype),
        ));
    }
    Ok(())
}

/// SPEC section 5: `y[m, r]` for every sample, `[M, R]` in the dtype of `x`.
pub fn reduce(w: &QuantizedMatrix, x: &Activations) -> Result<Activations> {
    // The fields are public: a hand-made matrix is checked before it is indexed.
    w.validate()?;
    check_activations(x, w.geometry.cols)?;
    let (rows, cols) = (w.geometry.rows, w.geometry.cols);
    let mut dense = filled(rows, cols, 0.0f32, "dequantized weights (rows x cols)")?;
    dequantize_into(w, x.dtype, &mut dense)?;
    let mut y = filled(x.rows, rows, 0.0f32, "y (M x rows)")?;
    // Every output on its own, so M = 1 uses every core too.
    y.par_iter_mut().enumerate().for_each(|(i, o)| {
        let (m, r) = (i / rows, i % rows);
        let wr = &dense[r * cols..(r + 1) * cols];
        *o = x.dtype.round(canonical::dot(x.row(m), |c| wr[c]));
    });
    Ok(Activations {
        dtype: x.dtype,
        rows: x.rows,
        cols: rows,
        data: y,
    })
}

/// SPEC section 6's `exp_spec` constants, as the SPEC writes them (each literal means its
/// nearest f32). `templates/common.h` spells the kernels' copy; a test holds the two
/// equal, in order (the kernels' text is hashed into the tuning tables, so it is not
/// rendered from these).
#[allow(clippy::excessive_precision)]
pub mod exp_spec_constants {
    /// The clamp of x: `min(max(x, LOW), HIGH)`.
    pub const LOW: f32 = -86.0;
    /// See [`LOW`].
    pub const HIGH: f32 = 80.0;
    /// log2(e) as f32.
    pub const LOG2E_BITS: u32 = 0x3FB8AA3B;
    /// Cody-Waite's high part of -ln 2.
    pub const C1: f32 = -0.693359375;
    /// Cody-Waite's low part of ln 2.
    pub const C2_BITS: u32 = 0x395E8083;
    /// The polynomial's coefficients, highest degree first (Horner's order).
    pub const POLY: [f32; 6] = [
        1.9875691500e-4,
        1.3981999507e-3,
        8.3334519073e-3,
        4.1665795894e-2,
        1.6666665459e-1,
        5.0000001201e-1,
    ];
}

/// SPEC section 6: `exp_spec`, a bit-reproducible f32 exponential
/// ([`exp_spec_constants`]). `max`/`min` are IEEE maxNum/minNum like the kernels'
/// `fmax`/`fmin` (NaN goes to -86, where `clamp` would keep it).
#[allow(clippy::manual_clamp)]
pub fn exp_spec(x: f32) -> f32 {
    use exp_spec_constants as c;
    let x = x.max(c::LOW).min(c::HIGH);
    let n = (x * f32::from_bits(c::LOG2E_BITS)).round_ties_even();
    let r = n.mul_add(c::C1, x);
    let r = n.mul_add(f32::from_bits(c::C2_BITS), r);
    let p = c::POLY[1..]
        .iter()
        .fold(c::POLY[0], |p, &a| p.mul_add(r, a));
    let z = r * r;
    let e = p.mul_add(z, r) + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `silu(g) = g * sigmoid(g)`, `sigmoid(g) = 1 / (1 + exp_spec(-g))`.
pub fn silu(g: f32) -> f32 {
    g * (1.0 / (1.0 + exp_spec(-g)))
}

/// The exact SwiGLU tail: `round_T(round_T(silu(g)) * u)` for rounded `g`, `u`.
pub fn swiglu(g: f32, u: f32, dtype: DType) -> f32 {
    dtype.round(dtype.round(silu(g)) * u)
}

/// SPEC section 6 with `tail = exact`: `mid = silu(G x) * (U x)`, `[M, R]`.
pub fn gate_up(
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
) -> Result<Activations> {
    check_pair(gate, up)?;
    swiglu_tail(&reduce(gate, x)?, &reduce(up, x)?)
}

/// SPEC section 6's exact tail of the projections `g = G x` and `u = U x` (each `[M, R]`
/// in the activation dtype, as [`reduce`] gives them): `mid`, element by element. The two
/// must agree in shape and dtype.
pub fn swiglu_tail(g: &Activations, u: &Activations) -> Result<Activations> {
    if (g.rows, g.cols, g.dtype) != (u.rows, u.cols, u.dtype) || g.data.len() != u.data.len() {
        return Err(Error::invalid(
            "u",
            format!(
                "[{}, {}] {} ({} values)",
                u.rows,
                u.cols,
                u.dtype,
                u.data.len()
            ),
            format!(
                "must match g: [{}, {}] {} ({} values)",
                g.rows,
                g.cols,
                g.dtype,
                g.data.len()
            ),
        ));
    }
    let data = g
        .data
        .iter()
        .zip(&u.data)
        .map(|(&gv, &uv)| swiglu(gv, uv, g.dtype))
        .collect();
    Ok(Activations {
        data,
        dtype: g.dtype,
        rows: g.rows,
        cols: g.cols,
    })
}

/// SPEC section 7 (v2): the real sums `y*[m, r] = sum_c value(s) * scale[r] * x[m, c]`
/// and `sum_c |...|`, in f64 (each product of an f32 value, an f32 scale and an
/// activation is exact in f64 up to its last bits; the sum's error is far below any
/// bound it is compared with). Both `[M, R]`, row-major.
pub fn real_sums(w: &QuantizedMatrix, x: &Activations) -> Result<(Vec<f64>, Vec<f64>)> {
    w.validate()?;
    check_activations(x, w.geometry.cols)?;
    let (rows, cols) = (w.geometry.rows, w.geometry.cols);
    let table = w.value_table()?;
    crate::error::check_threads_env()?;
    let mut out = filled(x.rows, rows, (0f64, 0f64), "real sums (M x rows)")?;
    // Row by row in parallel: each weight is decoded once for all M samples (the decode,
    // not the product, is the cost), into a buffer each worker keeps.
    let per_row: Vec<Vec<(f64, f64)>> = (0..rows)
        .into_par_iter()
        .map_init(Vec::new, |w_row: &mut Vec<f64>, r| {
            let scale = w.scales[r] as f64;
            w_row.clear();
            w_row.extend((0..cols).map(|c| table[w.state(r, c) as usize] as f64 * scale));
            (0..x.rows)
                .map(|m| {
                    let (mut y, mut a) = (0f64, 0f64);
                    for (&wc, &xc) in w_row.iter().zip(x.row(m)) {
                        let p = wc * xc as f64;
                        y += p;
                        a += p.abs();
                    }
                    (y, a)
                })
                .collect()
        })
        .collect();
    for (r, sums) in per_row.into_iter().enumerate() {
        for (m, s) in sums.into_iter().enumerate() {
            out[m * rows + r] = s;
        }
    }
    Ok(out.into_iter().unzip())
}

/// `silu` in f64, for the fast `gate_up` bound.
pub fn silu_f64(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

/// SPEC 7's fast `mid` of the real sums `g*` and `u*` (each `[M, rows]`, as
/// [`real_sums`] gives them, for the samples of `x`): `silu(g*) u*` in f64, rounded to T
/// once (its tail error is 0, within the fast `gate_up` bound for either tail).
pub fn fast_mids(g: &[f64], u: &[f64], x: &Activations, rows: usize) -> Activations {
    Activations {
        dtype: x.dtype,
        rows: x.rows,
        cols: rows,
        data: (g.iter().zip(u))
            .map(|(&g, &u)| x.dtype.round_f64(silu_f64(g) * u))
            .collect(),
    }
}

/// A fast `reduce` by SPEC 7's own reference: `round_T(y*)`, the real sums
/// ([`real_sums`]) rounded once. Within the bound for every output, where [`reduce`]
/// (which rounds each weight to T first) is not: weights subnormal in T (a row scale of
/// 2^-136 with bf16 x, say) lose more than the bound's 2^-8.
pub fn reduce_fast(w: &QuantizedMatrix, x: &Activations) -> Result<Activations> {
    let (y, _) = real_sums(w, x)?;
    Ok(Activations {
        dtype: x.dtype,
        rows: x.rows,
        cols: w.geometry.rows,
        data: y.iter().map(|&v| x.dtype.round_f64(v)).collect(),
    })
}

/// A fast `gate_up` by SPEC 7's own reference: [`fast_mids`] of the real sums.
pub fn gate_up_fast(
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
) -> Result<Activations> {
    check_pair(gate, up)?;
    let ((g, _), (u, _)) = (real_sums(gate, x)?, real_sums(up, x)?);
    Ok(fast_mids(&g, &u, x, gate.geometry.rows))
}

/// Gate and up must share rows and cols (SPEC 6); each has its own T, k, L, code, scales
/// and table.
pub fn check_pair(gate: &QuantizedMatrix, up: &QuantizedMatrix) -> Result<()> {
    let (g, u) = (&gate.geometry, &up.geometry);
    for (field, a, b) in [("rows", g.rows, u.rows), ("cols", g.cols, u.cols)] {
        if a != b {
            return Err(Error::invalid(
                format!("up.{field}"),
                b,
                format!("gate and up must share {field}; gate has {a}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::Code;

    /// A count that overflows, or memory that cannot be had, is an error naming what was
    /// asked for, not an allocation abort.
    #[test]
    fn oversized_outputs_are_errors() {
        let err = filled(usize::MAX, 2, 0.0f32, "y (M x rows)")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("y (M x rows)") && err.contains("overflows"),
            "{err}"
        );
        let err = filled(1 << 30, 1 << 30, 0u8, "y (M x rows)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot allocate"), "{err}");
        assert_eq!(filled(2, 3, 1u8, "y").unwrap(), vec![1u8; 6]);
    }
    use crate::dtype::ScaleDType;
    use crate::geometry::Geometry;

    fn random_matrix(g: Geometry, seed: u64) -> QuantizedMatrix {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let codes = (0..g.codes_shape().iter().product::<usize>())
            .map(|_| next() as u32)
            .collect();
        let scales = (0..g.rows)
            .map(|_| half::f16::from_f32(0.01 + (next() % 1000) as f32 * 1e-5).to_f32())
            .collect();
        QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, None).unwrap()
    }

    /// A matrix edited by hand (its fields are public) is an error, not a panic.
    #[test]
    fn a_hand_edited_matrix_is_an_error() {
        let g = Geometry::new(4, 256, 128, 2, 8, Code::OneMad).unwrap();
        let x = Activations::from_f32(DType::F32, 1, 256, vec![1.0; 256]).unwrap();
        let mut short_codes = random_matrix(g, 1);
        short_codes.codes.pop();
        let mut short_scales = random_matrix(g, 2);
        short_scales.scales.pop();
        let mut no_lut = random_matrix(g, 3);
        no_lut.geometry.code = Code::Lut;
        for (w, field) in [
            (short_codes, "codes"),
            (short_scales, "scales"),
            (no_lut, "lut"),
        ] {
            let e = reduce(&w, &x).unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
            let e = real_sums(&w, &x).unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
            let e = dequantize(&w, DType::F32).unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    /// The real sums of M samples are those of each sample alone, in `[M, R]` order, and
    /// the f64 sum of each row's products in column order (each weight decoded once for
    /// all samples must not change a bit).
    #[test]
    fn real_sums_of_m_samples_are_each_samples_own() {
        let g = Geometry::new(5, 512, 128, 2, 10, Code::ThreeInst).unwrap();
        let w = random_matrix(g, 7);
        let m = 3;
        let data: Vec<f32> = (0..m * g.cols)
            .map(|i| ((i * 7919 % 997) as f32 - 498.0) / 100.0)
            .collect();
        let x = Activations::from_f32(DType::F32, m, g.cols, data).unwrap();
        let (y, abs) = real_sums(&w, &x).unwrap();
        assert_eq!((y.len(), abs.len()), (m * g.rows, m * g.rows));
        let table = w.value_table().unwrap();
        for n in 0..m {
            let one = Activations::from_f32(DType::F32, 1, g.cols, x.row(n).to_vec()).unwrap();
            let (y1, abs1) = real_sums(&w, &one).unwrap();
            for r in 0..g.rows {
                let (mut want, mut want_abs) = (0f64, 0f64);
                for c in 0..g.cols {
                    let p = table[w.state(r, c) as usize] as f64
                        * w.scales[r] as f64
                        * x.row(n)[c] as f64;
                    want += p;
                    want_abs += p.abs();
                }
                let i = n * g.rows + r;
                assert_eq!(
                    (y[i].to_bits(), abs[i].to_bits()),
                    (want.to_bits(), want_abs.to_bits()),
                    "sample {n}, row {r}"
                );
                assert_eq!(
                    (y1[r].to_bits(), abs1[r].to_bits()),
                    (want.to_bits(), want_abs.to_bits())
                );
            }
        }
    }

    /// The canonical order differs from the real sum only by rounding: the exact result
    /// meets SPEC 7 (v2)'s bound around the real-number sum (`check::fast_reduce`), as
    /// every fast result must.
    #[test]
    fn reduce_is_within_the_spec7_bound_of_the_real_sum() {
        for (dtype, code) in [
            (DType::F32, Code::OneMad),
            (DType::Bf16, Code::ThreeInst),
            (DType::F16, Code::Mul1),
        ] {
            let g = Geometry::new(7, 2048, 128, 3, 12, code).unwrap();
            let w = random_matrix(g, 42);
            let x = Activations::from_f32(
                dtype,
                3,
                g.cols,
                (0..3 * g.cols)
                    .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0)
                    .collect(),
            )
            .unwrap();
            let y = reduce(&w, &x).unwrap();
            let real = crate::check::RealSums::of(&w, &x).unwrap();
            if let Err(e) = crate::check::fast_reduce(&y, &real) {
                panic!("{dtype} {code}: {e}");
            }
        }
    }

    #[test]
    fn the_kernels_exp_spec_has_the_references_constants() {
        let h = include_str!("../templates/common.h");
        let start = h
            .find("DEVICE float exp_spec(float x) {")
            .expect("exp_spec in common.h");
        let body = &h[start..start + h[start..].find("\n}").unwrap()];
        // Every numeric literal of the body, in order, as an f32 (hex ones as bits).
        let mut found = Vec::new();
        let b = body.as_bytes();
        let mut i = body.find('{').unwrap();
        while i < b.len() {
            let neg = b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit);
            let starts = (b[i].is_ascii_digit() || neg)
                && !b[i.saturating_sub(1)].is_ascii_alphanumeric()
                && b[i.saturating_sub(1)] != b'_';
            if !starts {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < b.len()
                && (b[j].is_ascii_alphanumeric()
                    || b[j] == b'.'
                    || ((b[j] == b'-' || b[j] == b'+') && b[j - 1] == b'e'))
            {
                j += 1;
            }
            let lit = &body[i..j];
            found.push(if let Some(hex) = lit.strip_prefix("0x") {
                f32::from_bits(u32::from_str_radix(hex.trim_end_matches('u'), 16).unwrap())
            } else {
                lit.trim_end_matches('f').parse::<f32>().unwrap()
            });
            i = j;
        }
        use exp_spec_constants as c;
        let mut want = vec![c::LOW, c::HIGH, f32::from_bits(c::LOG2E_BITS), c::C1];
        want.push(f32::from_bits(c::C2_BITS));
        want.extend(c::POLY);
        // The `+ 1.0` and the exponent's bias and shift.
        want.extend([1.0, 127.0, 23.0]);
        assert_eq!(found, want, "in {body}");
    }

    #[test]
    fn exp_spec_tracks_exp() {
        for i in -860..=800 {
            let x = i as f32 / 10.0;
            let (a, b) = (exp_spec(x) as f64, (x as f64).exp());
            assert!(((a - b) / b).abs() < 4e-7, "x={x}: {a} vs {b}");
        }
    }

    #[test]
    fn mismatched_pair_is_rejected() {
        let g = random_matrix(Geometry::new(4, 256, 256, 2, 12, Code::OneMad).unwrap(), 1);
        let u = random_matrix(Geometry::new(5, 256, 256, 3, 12, Code::OneMad).unwrap(), 2);
        let msg = check_pair(&g, &u).unwrap_err().to_string();
        assert!(msg.contains("up.rows = 5"), "{msg}");
    }
}
