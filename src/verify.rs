//! Verification of generated kernels against the CPU reference, generic over
//! [`Family`]: every candidate of every problem of a family's catalog, both tiers
//! (exact bit for bit, fast within SPEC 7 v2), plus the conformance vectors.
//! `cargo xtask verify` prints the report; tests call it for the CPU backend.

use crate::check::bits;
use crate::error::{Error, Result};
use crate::families::gate_up::{GateUpDevice, GateUpFamily};
use crate::families::reduce::{ReduceDevice, ReduceFamily};
use crate::families::simt::{Representation, Variant};
use crate::family::{self, Family, FamilyVisitor};
use crate::kernel::{Backend, KernelSpec};
use crate::numerics::{Tail, Tier};
use std::path::Path;

pub use crate::check::{
    first_mismatch, random_activations, random_activations_with_outliers, random_matrix, ulp,
};

/// What one specialization did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The family's listing label for the problem (`reduce`, `gate_up_mixed`, ...).
    pub family: &'static str,
    /// The kernel symbol, or `vector <file>` for a conformance vector.
    pub symbol: String,
    /// The problem as displayed, or the vector's file name.
    pub case: String,
    /// The variant as displayed.
    pub variant: String,
    /// The variant's numerics tier.
    pub tier: Tier,
    /// `Ok(detail)` when it matched; `Err(detail)` on mismatch, compile or launch failure.
    pub result: std::result::Result<String, String>,
}

/// Every problem of a family's catalog (duplicates dropped) with its variants, both
/// tiers, that fit the backend's limits.
pub fn specializations<F: Family>(
    quick: bool,
    limits: &crate::kernel::Limits,
) -> Vec<(F::Problem, Vec<F::Variant>)> {
    let mut problems: Vec<F::Problem> = Vec::new();
    for p in F::catalog(quick) {
        if !problems.contains(&p) {
            problems.push(p);
        }
    }
    problems
        .into_iter()
        .map(|p| {
            let vs = [Tier::Exact, Tier::Fast]
                .into_iter()
                .flat_map(|tier| F::candidates(&p, tier, quick))
                .filter(|v| family::fits::<F>(&p, *v, limits).is_ok())
                .collect();
            (p, vs)
        })
        .collect()
}

/// Verify every catalog specialization of family `F` on `b`. `progress` is called
/// after each one with (done, total).
pub fn verify_family<F: Family, B: Backend>(
    b: &B,
    quick: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Outcome>> {
    let all = specializations::<F>(quick, &b.limits());
    let total = all.iter().map(|(_, vs)| vs.len()).sum();
    family::precompile::<F, B>(b, &all)?;
    let mut out = Vec::with_capacity(total);
    for (i, (p, vs)) in all.iter().enumerate() {
        let host = F::random_host(p, 1000 + i as u64)?;
        let want = F::expected(p, &host)?;
        let dev = F::upload(b, p, &host)?;
        for v in vs {
            let result = family::run::<F, B>(b, p, *v, &dev)
                .map_err(|e| e.to_string())
                .and_then(|got| F::check(p, v, &host, &want, &got));
            out.push(Outcome {
                family: F::label(p),
                symbol: F::kernel(p, *v).symbol(),
                case: p.to_string(),
                variant: v.to_string(),
                tier: F::tier(v),
                result,
            });
            progress(out.len(), total);
        }
    }
    Ok(out)
}

/// Verify every registered family on `b`.
pub fn verify_catalog<B: Backend>(
    b: &B,
    quick: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Outcome>> {
    struct All<'a, B: Backend> {
        b: &'a B,
        quick: bool,
        progress: &'a mut dyn FnMut(usize, usize),
        out: Result<Vec<Outcome>>,
    }
    impl<B: Backend> FamilyVisitor for All<'_, B> {
        fn visit<F: Family>(&mut self) {
            if let Ok(out) = &mut self.out {
                match verify_family::<F, B>(self.b, self.quick, self.progress) {
                    Ok(o) => out.extend(o),
                    Err(e) => self.out = Err(e),
                }
            }
        }
    }
    let mut all = All {
        b,
        quick,
        progress,
        out: Ok(Vec::new()),
    };
    crate::families::for_each(&mut all);
    all.out
}

/// Run the conformance vectors of `dir` (its `index.json`) through the backend with
/// every representation: `y` and `mid` bit for bit.
pub fn verify_vectors<B: Backend>(b: &B, dir: &Path) -> Result<Vec<Outcome>> {
    let index_path = dir.join("index.json");
    let index = crate::io::read_text(&index_path, 16 << 20)?;
    let index: serde_json::Value =
        serde_json::from_str(&index).map_err(|e| Error::file(&index_path, e))?;
    let entries = index
        .as_array()
        .ok_or_else(|| Error::file(&index_path, "expected a JSON array"))?;
    // A verify that checked no vector must not pass: an empty index, an entry of an
    // unknown kind, or an index of no kernel's vector is an error naming it.
    if entries.is_empty() {
        return Err(Error::file(&index_path, "lists no vectors"));
    }
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let file = e["file"].as_str().unwrap_or_default();
        let kind = e["kind"].as_str().unwrap_or_default();
        // The vectors of SPEC 6's functions alone (`exp_spec`, the tail) run no kernel:
        // `tests/vectors.rs` checks them against the reference.
        if kind == "functions" {
            continue;
        }
        let path = dir.join(file);
        // Errors reading a vector name its file.
        let at = |e: Error| e.in_file(&path);
        for repr in Representation::ALL {
            let variant = Variant {
                repr,
                ..Variant::default()
            };
            let (family, result) = match kind {
                "matvec" => {
                    let w = crate::io::read_quantized(&path, "w").map_err(at)?;
                    let x = crate::io::read_activations(&path, "x").map_err(at)?;
                    let want = crate::io::read_activations(&path, "y").map_err(at)?;
                    let p = ReduceFamily::problem_of(&w, &x).map_err(at)?;
                    // Representations that cannot exist for this geometry (a 2^16-entry
                    // table in 48 KB) are not specializations; skip them.
                    if family::fits::<ReduceFamily>(&p, variant, &b.limits()).is_err() {
                        continue;
                    }
                    let got = ReduceDevice::upload(b, &w, &x)
                        .and_then(|d| family::run::<ReduceFamily, B>(b, &p, variant, &d));
                    (
                        ReduceFamily::label(&p),
                        got.map_err(|e| e.to_string())
                            .and_then(|g| bits(&g[0], &want)),
                    )
                }
                "gate_up" => {
                    let g = crate::io::read_quantized(&path, "gate").map_err(at)?;
                    let u = crate::io::read_quantized(&path, "up").map_err(at)?;
                    let x = crate::io::read_activations(&path, "x").map_err(at)?;
                    let want = crate::io::read_activations(&path, "mid").map_err(at)?;
                    let p = GateUpFamily::problem_of(&g, &u, &x, Tail::Exact).map_err(at)?;
                    if family::fits::<GateUpFamily>(&p, variant, &b.limits()).is_err() {
                        continue;
                    }
                    let got = GateUpDevice::upload(b, &g, &u, &x)
                        .and_then(|d| family::run::<GateUpFamily, B>(b, &p, variant, &d));
                    (
                        GateUpFamily::label(&p),
                        got.map_err(|e| e.to_string())
                            .and_then(|gt| bits(&gt[0], &want)),
                    )
                }
                _ => {
                    return Err(Error::file(
                        &index_path,
                        Error::invalid(
                            format!("entry[{i}]"),
                            e,
                            "needs a \"kind\" of matvec, gate_up or functions",
                        ),
                    ))
                }
            };
            out.push(Outcome {
                family,
                symbol: format!("vector {file}"),
                case: file.to_string(),
                variant: variant.to_string(),
                tier: Tier::Exact,
                result,
            });
        }
    }
    if out.is_empty() {
        return Err(Error::file(
            &index_path,
            "lists no matvec or gate_up vector",
        ));
    }
    Ok(out)
}
