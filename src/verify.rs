//! Verification of generated kernels against the CPU reference: every specialization of
//! the catalog on random matrices (exact tier bit for bit, fast tier within SPEC 7,
//! native tails within a tolerance), plus the conformance vectors. `cargo xtask verify`
//! prints the report; tests call it for the CPU backend.

use crate::catalog::{self, AnyKernel};
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::kernel::{Backend, Dialect, KernelSpec};
use crate::kernels::{Tail, Tier, Variant};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::ops::{self, DeviceMatrix};
use crate::{reference, Code, Geometry};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// What one specialization did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub family: &'static str,
    pub symbol: String,
    pub case: String,
    pub variant: Variant,
    /// `Ok(detail)` when it matched; `Err(detail)` on mismatch, compile or launch failure.
    pub result: std::result::Result<String, String>,
}

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

/// ulp of `v` in `dtype` (the spacing at |v|; min normal spacing near zero).
pub fn ulp(dtype: DType, v: f32) -> f64 {
    let mant = match dtype {
        DType::Bf16 => 7,
        DType::F16 => 10,
        DType::F32 => 23,
    };
    let min_exp = match dtype {
        DType::Bf16 | DType::F32 => -126,
        DType::F16 => -14,
    };
    let e = if v == 0.0 {
        min_exp
    } else {
        (v.abs() as f64).log2().floor() as i32
    }
    .max(min_exp);
    2f64.powi(e - mant)
}

/// SPEC 7: `|y_fast - y_real| <= ulp_T(y_real) + 2^-17 * sum |w x|` for every output.
/// Returns the first violation.
pub fn check_fast_bound(
    w_dense: &[f32],
    cols: usize,
    x: &Activations,
    got: &Activations,
) -> std::result::Result<(), String> {
    let rows = got.cols;
    for m in 0..x.rows {
        for r in 0..rows {
            let (mut real, mut abs) = (0f64, 0f64);
            for c in 0..cols {
                let p = w_dense[r * cols + c] as f64 * x.row(m)[c] as f64;
                real += p;
                abs += p.abs();
            }
            let y = got.data[m * rows + r] as f64;
            let bound = ulp(x.dtype, real as f32) + abs * 2f64.powi(-17);
            if (y - real).abs() > bound {
                return Err(format!(
                    "y[{m},{r}] = {y} but real sum {real} (bound {bound:e})"
                ));
            }
        }
    }
    Ok(())
}

/// First differing bit pattern, described.
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

/// Fast-tier or native-tail `gate_up` against the exact result (no SPEC bound exists after
/// the nonlinearity): within 2 T-ulps plus 2^-12 relative.
pub fn within_fast_tolerance(
    got: &Activations,
    want: &Activations,
) -> std::result::Result<String, String> {
    within(got, want, 2.0)
}

fn within(got: &Activations, want: &Activations, ulps: f64) -> std::result::Result<String, String> {
    for (i, (a, b)) in got.data.iter().zip(&want.data).enumerate() {
        // A reordered f32 sum moves g and u by ~2^-20 relative; allow 2^-12 relative on
        // top of `ulps` T-ulps (no SPEC bound exists after the nonlinearity).
        let tol = ulps * ulp(got.dtype, *b) + (*b as f64).abs() * 2f64.powi(-12) + 2f64.powi(-24);
        if ((*a as f64) - (*b as f64)).abs() > tol {
            return Err(format!(
                "[{}, {}]: {a:e} vs exact {b:e} (tolerance {tol:e})",
                i / got.cols,
                i % got.cols
            ));
        }
    }
    Ok(format!("within {ulps} ulp of exact"))
}

struct Case {
    name: String,
    gate: QuantizedMatrix,
    up: QuantizedMatrix,
    x: Activations,
    y: Activations,
    mid: Activations,
    dense: Vec<f32>,
}

fn build_case(c: &catalog::Case, seed: u64) -> Result<Case> {
    let (gp, up) = (c.gate, c.up);
    let gg = Geometry::new(c.rows, c.cols, c.t, gp.k, gp.l, gp.code)?;
    let ug = Geometry::new(c.rows, c.cols, c.t, up.k, up.l, up.code)?;
    let gate = random_matrix(gg, seed);
    let upm = random_matrix(ug, seed + 1);
    let x = random_activations(c.act, c.m as usize, c.cols, seed + 2);
    Ok(Case {
        name: format!(
            "{}x{} T={} {}/k{}/L{} + {}/k{}/L{} {} M={}",
            c.rows, c.cols, c.t, gp.code, gp.k, gp.l, up.code, up.k, up.l, c.act, c.m
        ),
        y: reference::reduce(&gate, &x)?,
        mid: reference::gate_up(&gate, &upm, &x)?,
        dense: reference::dequantize(&gate, c.act),
        gate,
        up: upm,
        x,
    })
}

fn run_one<B: Backend>(
    b: &B,
    k: &AnyKernel,
    case: &Case,
    dg: &DeviceMatrix<B>,
    du: &DeviceMatrix<B>,
    dx: &B::Tensor,
) -> std::result::Result<String, String> {
    let v = k.variant();
    let fail = |e: Error| e.to_string();
    match k {
        AnyKernel::Reduce(spec) => {
            let out = spec
                .launch(b, dx, &dg.codes, &dg.scales, dg.table(v.repr))
                .map_err(fail)?;
            let got = ops::download_activations(
                b,
                &out.y,
                case.x.dtype,
                case.x.rows,
                case.gate.geometry.rows,
            )
            .map_err(fail)?;
            match v.tier {
                Tier::Exact => first_mismatch(&got, &case.y).map_or(Ok("bit-exact".into()), Err),
                Tier::Fast => check_fast_bound(&case.dense, case.x.cols, &case.x, &got)
                    .map(|_| "within SPEC 7 bound".into()),
            }
        }
        AnyKernel::GateUp(spec) => {
            let out = spec
                .launch(
                    b,
                    dx,
                    &dg.codes,
                    &dg.scales,
                    dg.table(v.repr),
                    &du.codes,
                    &du.scales,
                    du.table(v.repr),
                )
                .map_err(fail)?;
            let got = ops::download_activations(
                b,
                &out.mid,
                case.x.dtype,
                case.x.rows,
                case.gate.geometry.rows,
            )
            .map_err(fail)?;
            match (v.tier, spec.tail) {
                (Tier::Exact, Tail::Exact) => {
                    first_mismatch(&got, &case.mid).map_or(Ok("bit-exact".into()), Err)
                }
                // Reordered sums move g and u by a few f32 ulps, and a different exp by a
                // few more; after rounding to T that is at most a couple of T ulps.
                _ => within_fast_tolerance(&got, &case.mid),
            }
        }
        AnyKernel::Expand(spec) => {
            let out = spec
                .launch(b, &dg.codes, &dg.scales, dg.table(v.repr))
                .map_err(fail)?;
            let got = ops::download_activations(b, &out.dense, spec.act, spec.rows, spec.cols)
                .map_err(fail)?;
            let want = Activations {
                dtype: spec.act,
                rows: spec.rows,
                cols: spec.cols,
                data: case.dense.clone(),
            };
            first_mismatch(&got, &want).map_or(Ok("bit-exact".into()), Err)
        }
    }
}

/// Verify every catalog specialization for the backend's dialect. `progress` is called
/// after each one with (done, total).
pub fn verify_catalog<B: Backend>(
    b: &B,
    quick: bool,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<Outcome>> {
    let mut all = catalog::specializations(b.dialect(), quick);
    // What needs more threadgroup memory than this device has is not a specialization
    // here (Metal: 32 KB), as the selector's defaults never do.
    all.retain(|k| k.launch_request(&|d| k.render(d)).shared_bytes <= b.max_shared_bytes());
    // Compile everything up front (the CPU backend batches, CUDA compiles in parallel).
    let renders: Vec<_> = all.iter().map(|k| move |d: Dialect| k.render(d)).collect();
    let launches: Vec<_> = all
        .iter()
        .zip(&renders)
        .map(|(k, r)| k.launch_request(r))
        .collect();
    b.precompile(&launches)?;
    let mut out = Vec::with_capacity(all.len());
    for (i, c) in catalog::verify_cases(quick).iter().enumerate() {
        let case = build_case(c, 1000 + i as u64)?;
        let dg = DeviceMatrix::upload(b, &case.gate)?;
        let du = DeviceMatrix::upload(b, &case.up)?;
        let dx = ops::upload_activations(b, &case.x)?;
        for k in all.iter().filter(|k| c.covers(k)) {
            let result = run_one(b, k, &case, &dg, &du, &dx);
            out.push(Outcome {
                family: k.family(),
                symbol: k.symbol(),
                case: case.name.clone(),
                variant: k.variant(),
                result,
            });
            progress(out.len(), all.len());
        }
    }
    Ok(out)
}

/// Run the conformance vectors of `dir` (its `index.json`) through the backend with
/// every representation: `y` and `mid` bit for bit.
pub fn verify_vectors<B: Backend>(b: &B, dir: &Path) -> Result<Vec<Outcome>> {
    let index_path = dir.join("index.json");
    let index = std::fs::read_to_string(&index_path).map_err(|e| Error::file(&index_path, e))?;
    let index: serde_json::Value =
        serde_json::from_str(&index).map_err(|e| Error::file(&index_path, e))?;
    let entries = index
        .as_array()
        .ok_or_else(|| Error::file(&index_path, "expected a JSON array"))?;
    let mut out = Vec::new();
    for e in entries {
        let file = e["file"].as_str().unwrap_or_default();
        let kind = e["kind"].as_str().unwrap_or_default();
        let path = dir.join(file);
        for repr in crate::kernels::Representation::ALL {
            let variant = Variant {
                repr,
                ..Variant::default()
            };
            let (family, result) = match kind {
                "matvec" => {
                    let w = crate::io::read_quantized(&path, "w")?;
                    let x = crate::io::read_activations(&path, "x")?;
                    // Representations that cannot exist for this geometry (a 2^16-entry
                    // table in 48 KB) are not specializations; skip them.
                    if ops::reduce_spec(&w.geometry, w.scale_dtype, x.dtype, x.rows as u32, variant)
                        .validate()
                        .is_err()
                    {
                        continue;
                    }
                    let want = crate::io::read_activations(&path, "y")?;
                    let got = ops::matvec(b, &w, &x, variant);
                    (
                        "reduce",
                        got.map_err(|e| e.to_string()).and_then(|g| {
                            first_mismatch(&g, &want).map_or(Ok("bit-exact".into()), Err)
                        }),
                    )
                }
                "gate_up" => {
                    let g = crate::io::read_quantized(&path, "gate")?;
                    let u = crate::io::read_quantized(&path, "up")?;
                    let x = crate::io::read_activations(&path, "x")?;
                    let spec = ops::gate_up_spec(
                        &g.geometry,
                        &u.geometry,
                        (g.scale_dtype, u.scale_dtype),
                        x.dtype,
                        x.rows as u32,
                        Tail::Exact,
                        variant,
                    );
                    if spec.validate().is_err() {
                        continue;
                    }
                    let want = crate::io::read_activations(&path, "mid")?;
                    let got = ops::gate_up(b, &g, &u, &x, Tail::Exact, variant);
                    let fam = if g.geometry.k == u.geometry.k {
                        "gate_up"
                    } else {
                        "gate_up_mixed"
                    };
                    (
                        fam,
                        got.map_err(|e| e.to_string()).and_then(|gt| {
                            first_mismatch(&gt, &want).map_or(Ok("bit-exact".into()), Err)
                        }),
                    )
                }
                _ => continue,
            };
            out.push(Outcome {
                family,
                symbol: format!("vector {file}"),
                case: file.to_string(),
                variant,
                result,
            });
        }
    }
    Ok(out)
}
