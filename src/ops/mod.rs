//! The user facade: `matvec`, `gate_up` and `expand` on a backend you hold (make it
//! once: it keeps its compiled kernels). The tier picks the family: `exact` runs the
//! SIMT families (`reduce`, `gate_up`: SPEC 5 bits, M up to 8 a launch), `fast` the
//! matrix-unit families (`reduce_mma`, `gate_up_mma`: the SPEC 7 bound, M up to 16 a
//! launch); a larger M runs as several launches, with the same bits and one copy of each
//! matrix to the device. A `gate_up` pair of two block sizes T (SPEC 6 allows it; the
//! fused kernels take one) runs as two `matvec`s and the tail on the host. The tuning
//! tables choose the variant ([`crate::tune::select_for`]), and the `_with` forms force
//! one. Host data in, host data out (a [`Resident`] matrix stays on the device between
//! calls, and so do its calls' x and y tensors, written over by the next call); every
//! input is validated before any kernel runs. The fast tier prescales x on the device
//! ([`crate::families::reduce_mma::Prescale`]). A resident matrix also runs
//! on activations kept on the device ([`Resident::matvec_device`],
//! [`Resident::gate_up_device`], and their `_into` forms, both tiers), y left there: the
//! exact tier in one launch, the fast tier after a prescale kernel whose per-sample flags
//! it reads back where the host must check a sample (then reading that x). The host
//! checks shape and dtype there, not the values. The fast tier runs
//! the rare sample its f16 operands cannot hold (values spanning more than 2^28 where a
//! row weights only the tiny ones, magnitudes near the ends of f32's range:
//! [`crate::families::reduce_mma::beyond_f16_operands`]) on the exact kernels instead, at
//! f32 with unit row scales, and applies the scales in f64 (so no weight is rounded to T).

use crate::backend::{AnyBackend, BackendVisitor};
use crate::error::{Error, Result};
use crate::families::expand::{ExpandFamily, ExpandProblem};
use crate::families::gate_up::{GateUpDevice, GateUpFamily, GateUpProblem};
use crate::families::gate_up_mma::{GateUpMmaDevice, GateUpMmaFamily};
use crate::families::mma::{MmaVariant, MAX_M_MMA};
use crate::families::reduce::{ReduceDevice, ReduceFamily, ReduceProblem};
use crate::families::reduce_mma::{
    operand_exponent, pow2, Prescaled, ReduceMmaDevice, ReduceMmaFamily,
};
use crate::families::simt::MAX_M;
use crate::family::{self, Family};
use crate::kernel::{Backend, KernelSpec, TensorSpec};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::{Tail, Tier};
use crate::{DType, ScaleDType};
use std::sync::Arc;

mod resident;
mod uploaded;

use resident::{fast_on_device, Source};
pub use resident::{gate_up_resident, Resident};
use uploaded::{held_samples, Uploaded};

/// The SIMT families' variant, which the `_with` forms take.
pub use crate::families::simt::Variant;
pub use crate::families::{upload_activations, DeviceActivations, DeviceMatrix};

/// Activations must be finite: a NaN or infinity would silently poison every output
/// it touches.
fn check_finite(x: &Activations) -> Result<()> {
    check_each(x, |v| v.is_finite(), "activations must be finite")
}

/// The fast tier's output: the fast kernels' (`fast`), with the samples of `x` `held`
/// back from them (ascending: those their f16 operands cannot carry,
/// [`crate::families::reduce_mma::beyond_f16_operands`]) from `fallback`. Where every
/// sample is held back the fast kernels do not run.
fn with_held_samples(
    x: &Activations,
    held: &[usize],
    fast: impl FnOnce() -> Result<Activations>,
    fallback: impl Fn(&Activations) -> Result<Activations>,
) -> Result<Activations> {
    if held.is_empty() {
        return fast();
    }
    let part = fallback(&Activations {
        data: held
            .iter()
            .flat_map(|&m| x.row(m).iter().copied())
            .collect(),
        rows: held.len(),
        ..*x
    })?;
    if held.len() == x.rows {
        return Ok(part); // every sample held, in order: the fallback's part is the output
    }
    let mut y = fast()?;
    for (i, &m) in held.iter().enumerate() {
        y.data[m * y.cols..(m + 1) * y.cols].copy_from_slice(part.row(i));
    }
    Ok(y)
}

/// The fast tier's fallback: SPEC 7's real sums `y*[m, r] = scale_r sum_c value x[m, c]`
/// of `w`, `[M * R]` in f64, to f32 accumulation error only. `b`'s exact kernels (T = f32)
/// run on `w` with unit row scales (its lut table and each sample of x divided by a
/// power of two, [`operand_exponent`], exactly), so no weight is rounded; the scales and
/// the powers are applied here, in f64. (The exact tier's own results round every weight
/// to T, which SPEC 7's 2^-8 does not cover where the weights are subnormal in T: a row
/// scale of 2^-136 with bf16 x, say.)
fn real_sums_on<B: Backend>(b: &B, w: &QuantizedMatrix, x: &Activations) -> Result<Vec<f64>> {
    let table_e = w.lut.as_deref().map_or(0, operand_exponent);
    // A copy of the codes: reserved first, so a matrix the host has no room to copy is an
    // error, not an allocation abort.
    let codes = crate::error::collect_reserved(
        w.codes.len(),
        w.codes.iter().copied(),
        "fast-tier fallback codes",
        format!("{} words", w.codes.len()),
    )?;
    let unit = QuantizedMatrix {
        geometry: w.geometry,
        codes,
        scales: vec![1.0; w.geometry.rows],
        scale_dtype: ScaleDType::F32,
        lut: w
            .lut
            .as_ref()
            .map(|t| t.iter().map(|v| v * pow2(-table_e)).collect()),
    };
    let exps: Vec<i32> = (0..x.rows).map(|m| operand_exponent(x.row(m))).collect();
    let data = crate::error::collect_reserved(
        x.data.len(),
        (0..x.rows).flat_map(|m| {
            let f = pow2(-exps[m]); // exponents within +-126: exact
            x.row(m).iter().map(move |v| v * f)
        }),
        "fast-tier fallback x",
        format!("{} values", x.data.len()),
    )?;
    let xs = Activations {
        dtype: DType::F32,
        data,
        ..*x
    };
    let y = matvec(b, &unit, &xs, Tier::Exact)?;
    let rows = w.geometry.rows;
    Ok(y.data
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (m, r) = (i / rows, i % rows);
            v as f64 * w.scales[r] as f64 * 2f64.powi(exps[m] + table_e)
        })
        .collect())
}

/// The fallback's `y`: its real sums rounded to T once (f16 held at its edge as the fast
/// kernels hold it, [`crate::numerics::f16_hold`]: the f32 sums may carry one in range
/// past 65520).
fn fallback_matvec<B: Backend>(b: &B, w: &QuantizedMatrix, x: &Activations) -> Result<Activations> {
    let y = real_sums_on(b, w, x)?;
    let round = |v: f64| match x.dtype {
        DType::F16 => x.dtype.round_f64(crate::numerics::f16_hold(v)),
        t => t.round_f64(v),
    };
    Ok(Activations {
        dtype: x.dtype,
        rows: x.rows,
        cols: w.geometry.rows,
        data: y.iter().map(|&v| round(v)).collect(),
    })
}

/// The fallback's `mid`: `silu(g) u` of its real sums, in f64, rounded to T once (within
/// SPEC 7's `gate_up` bound for either tail, whose tail error it leaves at 0).
fn fallback_gate_up<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
) -> Result<Activations> {
    let (g, u) = (real_sums_on(b, gate, x)?, real_sums_on(b, up, x)?);
    Ok(crate::reference::fast_mids(&g, &u, x, gate.geometry.rows))
}

/// `f` over `x` in chunks of at most `max` samples, their outputs stacked in sample order.
/// Every sample's result depends on its own activations only (SPEC 5's order and SPEC 7's
/// bound are per sample), so the bits are those a launch of all M would give: the
/// families take M up to their limit (exact [`MAX_M`], fast [`MAX_M_MMA`]), and a larger
/// M runs as several launches. `x` is checked against `cols` first (it is sliced here),
/// and the `[M, out_cols]` output is allocated before any chunk runs (a huge M is an
/// error naming it, not an allocation abort half way).
fn in_chunks(
    x: &Activations,
    cols: usize,
    out_cols: usize,
    max: u32,
    mut f: impl FnMut(&Activations) -> Result<Activations>,
) -> Result<Activations> {
    crate::reference::check_activations(x, cols)?;
    if x.cols == 0 {
        return f(x); // a hand-made matrix of no columns: the family names what is wrong
    }
    let n = x.rows.checked_mul(out_cols).ok_or_else(|| {
        Error::invalid(
            "output (M x rows)",
            format!("{} x {out_cols}", x.rows),
            "the element count overflows",
        )
    })?;
    let mut data =
        crate::error::reserve(n, "output (M x rows)", format!("{} x {out_cols}", x.rows))?;
    for chunk in x.data.chunks(max as usize * x.cols) {
        let part = f(&Activations {
            data: chunk.to_vec(),
            rows: chunk.len() / x.cols,
            ..*x
        })?;
        data.extend_from_slice(&part.data);
    }
    Ok(Activations {
        dtype: x.dtype,
        rows: x.rows,
        cols: out_cols,
        data,
    })
}

/// The most samples one launch of `tier`'s families takes; [`matvec`] and [`gate_up`]
/// run a larger M as launches of this many and one of the rest.
pub fn max_samples(tier: Tier) -> u32 {
    match tier {
        Tier::Exact => MAX_M,
        Tier::Fast => MAX_M_MMA,
    }
}

/// The first activation failing `ok`, as an error naming `x[m, c]` and its value.
fn check_each(x: &Activations, ok: impl Fn(f32) -> bool, reason: &str) -> Result<()> {
    match x.data.iter().position(|&v| !ok(v)) {
        None => Ok(()),
        Some(i) => Err(Error::invalid(
            format!("x[{}, {}]", i / x.cols.max(1), i % x.cols.max(1)),
            x.data[i],
            reason,
        )),
    }
}

/// The exact `reduce` problem of a matrix and activations (validated: shapes, M, finite
/// x, weights finite in T: [`QuantizedMatrix::check_weights_finite`]).
pub fn reduce_problem(w: &QuantizedMatrix, x: &Activations) -> Result<ReduceProblem> {
    let p = ReduceFamily::problem_of(w, x)?;
    check_finite(x)?;
    w.check_weights_finite(x.dtype)?;
    Ok(p)
}

/// The exact `gate_up` problem of a pair of matrices and activations (validated: shapes,
/// M, finite x, weights finite in T).
pub fn gate_up_problem(
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
) -> Result<GateUpProblem> {
    let p = GateUpFamily::problem_of(gate, up, x, tail)?;
    check_finite(x)?;
    gate.check_weights_finite(x.dtype)
        .map_err(|e| e.of("gate"))?;
    up.check_weights_finite(x.dtype).map_err(|e| e.of("up"))?;
    Ok(p)
}

/// The family this facade (and `trellis matvec|gate-up`) runs for a family name and a
/// tier, by name (for `trellis select` and reports): the fast tier of a family with a
/// [`Family::FAST`] twin runs there (`reduce` on
/// `reduce_mma`, `gate_up` and `gate_up_mixed` on `gate_up_mma`); every other name is its
/// own family. [`matvec`] and [`gate_up`] dispatch the same way, typed (a `gate_up` pair
/// of two block sizes T runs as two `matvec`s: `reduce`, or `reduce_mma` when fast).
pub fn family_for(name: &str, tier: Tier) -> &str {
    use crate::family::{Family, FamilyVisitor};
    struct Fast<'a>(&'a str, Option<&'static str>);
    impl FamilyVisitor for Fast<'_> {
        fn visit<F: Family>(&mut self) {
            if crate::families::is::<F>(self.0) {
                self.1 = self.1.or(F::FAST);
            }
        }
    }
    if tier != Tier::Fast {
        return name;
    }
    let mut fast = Fast(name, None);
    crate::families::for_each(&mut fast);
    fast.1.unwrap_or(name)
}

fn first<T>(mut outs: Vec<T>) -> T {
    outs.swap_remove(0)
}

/// `y = W x` on `b` in `tier` (see the module docs), with the variant the tables choose
/// on this device: x is `[M, C]` (C the matrix's columns) in its dtype T, any M; y is
/// `[M, R]` in T, `y[m, r] = sum_c w[r, c] x[m, c]`.
pub fn matvec<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    tier: Tier,
) -> Result<Activations> {
    matvec_uploaded(Uploaded::new(b, w), x, Choice::Tables(tier))
}

/// Which variant a call runs: the tables' choice in a tier, or a forced variant of the
/// SIMT families (the `_with` forms; exact or one of their own `fast` variants).
#[derive(Clone, Copy)]
enum Choice {
    Tables(Tier),
    Forced(Variant),
}

impl Choice {
    /// The tier whose families run the call (and whose limits apply): a forced variant
    /// runs the SIMT families, the exact tier's, whatever its own tier.
    fn tier(self) -> Tier {
        match self {
            Choice::Tables(tier) => tier,
            Choice::Forced(_) => Tier::Exact,
        }
    }
    /// The SIMT families' variant: the forced one, else the tables' for `p` on `b`.
    fn simt<F: family::Family<Variant = Variant>, B: Backend>(
        self,
        b: &B,
        p: &F::Problem,
    ) -> Variant {
        match self {
            Choice::Forced(v) => v,
            Choice::Tables(tier) => crate::tune::select_for::<F, B>(b, p, tier).variant,
        }
    }
}

/// [`matvec`] of a matrix uploaded already, or on its first launch.
fn matvec_uploaded<B: Backend>(
    wd: Uploaded<B>,
    x: &Activations,
    choice: Choice,
) -> Result<Activations> {
    let (b, w) = (&*wd.b, &*wd.w);
    let tier = choice.tier();
    // A hand-edited geometry (its fields are public) is named as such, before M is.
    w.geometry.validate()?;
    if x.rows > max_samples(tier) as usize {
        // Every chunk's values, before any kernel runs (and named by their row in x).
        check_finite(x)?;
        if tier == Tier::Exact {
            wd.check_weights_finite(x.dtype)?;
        }
        let (cols, rows) = (w.geometry.cols, w.geometry.rows);
        return in_chunks(x, cols, rows, max_samples(tier), |xs| {
            matvec_launch(b, &wd, xs, choice)
        });
    }
    matvec_launch(b, &wd, x, choice)
}

/// One launch of [`matvec`] (M within the tier's limit).
fn matvec_launch<B: Backend>(
    b: &B,
    wd: &Uploaded<B>,
    x: &Activations,
    choice: Choice,
) -> Result<Activations> {
    let w = &*wd.w;
    if let Choice::Tables(Tier::Fast) = choice {
        check_finite(x)?;
        let p = ReduceMmaFamily::problem_of(w, x)?;
        return fast_launch::<ReduceMmaFamily, B>(
            &[wd],
            &p,
            x,
            |matrices, ops| ReduceMmaDevice {
                w: matrices[0].clone(),
                ops,
            },
            |d| d.ops,
            |xs| fallback_matvec(b, w, xs),
        );
    }
    let p = ReduceFamily::problem_of(w, x)?;
    check_finite(x)?;
    wd.check_weights_finite(x.dtype)?;
    let v = choice.simt::<ReduceFamily, B>(b, &p);
    reduce_launch(wd, x, &p, v)
}

/// One exact `reduce` launch of variant `v` (checked to fit) on problem `p`.
fn reduce_launch<B: Backend>(
    wd: &Uploaded<B>,
    x: &Activations,
    p: &ReduceProblem,
    v: Variant,
) -> Result<Activations> {
    let w = wd.get()?;
    exact_launch::<ReduceFamily, B>(wd, x, p, v, |x| ReduceDevice { w, x })
}

/// One exact launch of family `F`'s variant `v` (checked to fit) on problem `p`, x from
/// the host, the call's tensors kept by `wd` (the first projection); `device` makes the
/// family's device data of x on the device.
fn exact_launch<F: Family<Variant = Variant>, B: Backend>(
    wd: &Uploaded<B>,
    x: &Activations,
    p: &F::Problem,
    v: Variant,
    device: impl FnOnce(DeviceActivations<B>) -> F::Device<B>,
) -> Result<Activations> {
    let b = &*wd.b;
    family::fits::<F>(p, v, &b.limits())?;
    let kernel = F::kernel(p, v);
    kernel.validate()?;
    on_host_data(wd, x, v.interleaved_x, &kernel.outputs(), |xd, outs| {
        family::launch_into::<F, B>(b, p, v, &device(xd.clone()), outs)
    })
}

/// The fast tier's launch of family `F` on problem `p` over `projections` (one matrix,
/// or a fused pair: gate, then up; the first keeps the call's tensors), x from the
/// host: the samples the f16 operands cannot hold from `fallback`, the rest through
/// the fast device path (x prescaled on the device; the host has checked it, so no
/// flags are read). `device` makes the family's device data of the matrices and the
/// prescaled operands, `operands` takes the operands back.
fn fast_launch<F, B>(
    projections: &[&Uploaded<B>],
    p: &F::Problem,
    x: &Activations,
    device: impl FnOnce(&[Arc<DeviceMatrix<B>>], Prescaled<B>) -> F::Device<B>,
    operands: impl FnOnce(F::Device<B>) -> Prescaled<B>,
    fallback: impl Fn(&Activations) -> Result<Activations>,
) -> Result<Activations>
where
    F: Family<Variant = MmaVariant>,
    F::Kernel: crate::families::mma::MmaLayout,
    B: Backend,
{
    let wd = projections[0];
    let v = crate::tune::select_for::<F, B>(&*wd.b, p, Tier::Fast).variant;
    let held = held_samples(x, projections, v.operands.is_f16())?;
    let fast = || {
        let matrices = projections
            .iter()
            .map(|w| w.get())
            .collect::<Result<Vec<_>>>()?;
        on_host_data(wd, x, false, &[y_spec(x, &wd.w)], |xd, outs| {
            fast_on_device::<F, B>(
                projections,
                (p, v),
                xd,
                outs[0],
                |ops| device(&matrices, ops),
                operands,
                Source::Host(&fallback),
            )
        })
    };
    with_held_samples(x, &held, fast, &fallback)
}

/// `launch` of a call on host data: x copied to the device (lane-interleaved where
/// `interleaved_x`, else as it is), into tensors of `outputs`' specs (x's and theirs a
/// recent call's where `wd` keeps some: [`Uploaded::io_upload`]), the first output read
/// back; the tensors kept for the next call once it has been.
fn on_host_data<B: Backend>(
    wd: &Uploaded<B>,
    x: &Activations,
    interleaved_x: bool,
    outputs: &[TensorSpec],
    launch: impl FnOnce(&DeviceActivations<B>, &mut [&mut B::Tensor]) -> Result<()>,
) -> Result<Activations> {
    let xd = DeviceActivations::upload_layout(x, interleaved_x, |elem, shape, bytes| {
        wd.io_upload(elem, shape, bytes)
    })?;
    let mut outs = outputs
        .iter()
        .map(|s| wd.io_alloc(s))
        .collect::<Result<Vec<_>>>()?;
    launch(&xd, &mut outs.iter_mut().collect::<Vec<_>>())?;
    let y = family::download(&*wd.b, &outs[0])?;
    wd.io_keep(xd.into_tensors(), outs);
    Ok(y)
}

/// y of `matvec` of `w` on `x`: `[M, R]` in x's dtype.
fn y_spec(x: &Activations, w: &QuantizedMatrix) -> TensorSpec {
    TensorSpec {
        name: "y",
        elem: x.dtype.into(),
        shape: vec![x.rows, w.geometry.rows],
    }
}

/// `y = W x` on `b` with a forced variant of the SIMT family `reduce` (an exact one, or
/// one of its own `fast` variants; any M, as [`matvec`]).
pub fn matvec_with<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    variant: Variant,
) -> Result<Activations> {
    matvec_uploaded(Uploaded::new(b, w), x, Choice::Forced(variant))
}

/// `mid = silu(G x) * (U x)` on `b` with the variant the tables choose for `tier`: x is
/// `[M, C]` in its dtype T, any M; mid is `[M, R]` in T (SPEC 6's tail, `tail`). Gate and
/// up share rows and cols; a pair of two block sizes runs unfused (two [`matvec`]
/// launches and the tail on the host), with the same bits in the exact tier.
pub fn gate_up<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    tier: Tier,
) -> Result<Activations> {
    gate_up_uploaded(
        [Uploaded::new(b, gate), Uploaded::new(b, up)],
        x,
        tail,
        Choice::Tables(tier),
    )
}

/// [`gate_up`] of matrices uploaded already, or on their first launch.
fn gate_up_uploaded<B: Backend>(
    ws: [Uploaded<B>; 2],
    x: &Activations,
    tail: Tail,
    choice: Choice,
) -> Result<Activations> {
    let (b, gate) = (&*ws[0].b, &*ws[0].w);
    let tier = choice.tier();
    // Each matrix checked whole (its scales and table too) and named, before any launch
    // (a resident's once).
    ws[0].validate().map_err(|e| e.of("gate"))?;
    ws[1].validate().map_err(|e| e.of("up"))?;
    if x.rows > max_samples(tier) as usize {
        // Every chunk's values, before any kernel runs (and named by their row in x).
        check_finite(x)?;
        if tier == Tier::Exact {
            Uploaded::check_pair_finite([&ws[0], &ws[1]], x.dtype)?;
        }
        let (cols, rows) = (gate.geometry.cols, gate.geometry.rows);
        return in_chunks(x, cols, rows, max_samples(tier), |xs| {
            gate_up_launch(b, &ws, xs, tail, choice)
        });
    }
    gate_up_launch(b, &ws, x, tail, choice)
}

/// One launch of [`gate_up`] (M within the tier's limit).
fn gate_up_launch<B: Backend>(
    b: &B,
    [gd, ud]: &[Uploaded<B>; 2],
    x: &Activations,
    tail: Tail,
    choice: Choice,
) -> Result<Activations> {
    let (gate, up) = (&*gd.w, &*ud.w);
    if gate.geometry.t != up.geometry.t {
        crate::reference::check_pair(gate, up)?;
        if choice.tier() == Tier::Exact {
            check_finite(x)?;
            Uploaded::check_pair_finite([gd, ud], x.dtype)?;
        }
        return gate_up_unfused(b, [gd, ud], x, tail, choice);
    }
    if let Choice::Tables(Tier::Fast) = choice {
        check_finite(x)?;
        let p = GateUpMmaFamily::problem_of(gate, up, x, tail)?;
        return fast_launch::<GateUpMmaFamily, B>(
            &[gd, ud],
            &p,
            x,
            |matrices, ops| GateUpMmaDevice {
                gate: matrices[0].clone(),
                up: matrices[1].clone(),
                ops,
            },
            |d| d.ops,
            |xs| fallback_gate_up(b, gate, up, xs),
        );
    }
    let p = GateUpFamily::problem_of(gate, up, x, tail)?;
    check_finite(x)?;
    Uploaded::check_pair_finite([gd, ud], x.dtype)?;
    let v = choice.simt::<GateUpFamily, B>(b, &p);
    gate_up_exact_launch([gd, ud], x, &p, v)
}

/// A pair of different block sizes T, which SPEC 6 allows and the fused kernels do not
/// take (they read both code streams with one T): the two projections as [`matvec`]'s
/// launches of `choice` (exact: `reduce`, a forced variant as given; fast:
/// `reduce_mma`), and the tail on the host: SPEC 6's exact one (the fused kernels' bits),
/// or the host's `exp` for `Tail::Native` (as the cpu backend's native tail). Fast: each
/// projection within its SPEC 7 bound and rounded to T, as the fast `gate_up` bound
/// allows.
fn gate_up_unfused<B: Backend>(
    b: &B,
    [gd, ud]: [&Uploaded<B>; 2],
    x: &Activations,
    tail: Tail,
    choice: Choice,
) -> Result<Activations> {
    // Named by matrix, and as a `reduce` (a forced gate_up variant may not fit one).
    let unfused =
        |whose: &str, e: Error| e.of(&format!("{whose} (a reduce: gate and up differ in T)"));
    let g = matvec_launch(b, gd, x, choice).map_err(|e| unfused("gate", e))?;
    let u = matvec_launch(b, ud, x, choice).map_err(|e| unfused("up", e))?;
    match tail {
        Tail::Exact => crate::reference::swiglu_tail(&g, &u),
        Tail::Native => {
            let t = x.dtype;
            let native = |g: f32, u: f32| t.round(t.round(g * (1.0 / (1.0 + (-g).exp()))) * u);
            Ok(Activations {
                data: g
                    .data
                    .iter()
                    .zip(&u.data)
                    .map(|(&g, &u)| native(g, u))
                    .collect(),
                ..g
            })
        }
    }
}

/// One exact `gate_up` launch of variant `v` (checked to fit) on problem `p`.
fn gate_up_exact_launch<B: Backend>(
    [gd, ud]: [&Uploaded<B>; 2],
    x: &Activations,
    p: &GateUpProblem,
    v: Variant,
) -> Result<Activations> {
    let (gate, up) = (gd.get()?, ud.get()?);
    exact_launch::<GateUpFamily, B>(gd, x, p, v, |x| GateUpDevice { gate, up, x })
}

/// `mid = silu(G x) * (U x)` on `b` with a forced variant of the SIMT family `gate_up`
/// (an exact one, or one of its own `fast` variants; any M, as [`gate_up`]).
pub fn gate_up_with<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    variant: Variant,
) -> Result<Activations> {
    let ws = [Uploaded::new(b, gate), Uploaded::new(b, up)];
    gate_up_uploaded(ws, x, tail, Choice::Forced(variant))
}

/// The facade on a backend chosen at run time: each method runs its function on the
/// backend the [`AnyBackend`] holds (defined here, above the backends, so they need not
/// know the facade).
impl AnyBackend {
    /// [`matvec`] on the held backend.
    pub fn matvec(&self, w: &QuantizedMatrix, x: &Activations, tier: Tier) -> Result<Activations> {
        struct Run<'a>(&'a QuantizedMatrix, &'a Activations, Tier);
        impl BackendVisitor for Run<'_> {
            type Out = Result<Activations>;
            fn visit<B: Backend>(self, b: &B) -> Self::Out {
                matvec(b, self.0, self.1, self.2)
            }
        }
        self.visit(Run(w, x, tier))
    }

    /// [`gate_up`] on the held backend.
    pub fn gate_up(
        &self,
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
        tail: Tail,
        tier: Tier,
    ) -> Result<Activations> {
        struct Run<'a>([&'a QuantizedMatrix; 2], &'a Activations, Tail, Tier);
        impl BackendVisitor for Run<'_> {
            type Out = Result<Activations>;
            fn visit<B: Backend>(self, b: &B) -> Self::Out {
                gate_up(b, self.0[0], self.0[1], self.1, self.2, self.3)
            }
        }
        self.visit(Run([gate, up], x, tail, tier))
    }
}

/// Dequantize to dense `[R, C]` values of `act` on `b`.
pub fn expand<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    act: DType,
    variant: Variant,
) -> Result<Activations> {
    // The matrix's fields first (a hand-set one): the fit below sizes its table.
    w.validate()?;
    let p = ExpandProblem {
        geometry: w.geometry,
        scale: w.scale_dtype,
        act,
    };
    family::fits::<ExpandFamily>(&p, variant, &b.limits())?;
    let d = DeviceMatrix::upload(b, w)?;
    family::run::<ExpandFamily, B>(b, &p, variant, &d).map(first)
}

#[cfg(test)]
mod tests {
    use super::{family_for, in_chunks};
    use crate::numerics::Tier;
    use crate::{Activations, Result};

    #[test]
    fn the_fast_tier_of_reduce_and_gate_up_runs_on_matrix_units() {
        assert_eq!(family_for("reduce", Tier::Fast), "reduce_mma");
        assert_eq!(family_for("gate_up", Tier::Fast), "gate_up_mma");
        assert_eq!(family_for("gate_up_mixed", Tier::Fast), "gate_up_mma");
        assert_eq!(family_for("reduce", Tier::Exact), "reduce");
        assert_eq!(family_for("expand", Tier::Fast), "expand");
        // They are the families this facade launches in the fast tier (by type).
        use super::{GateUpFamily, GateUpMmaFamily, ReduceFamily, ReduceMmaFamily};
        use crate::family::Family;
        assert_eq!(ReduceFamily::FAST, Some(ReduceMmaFamily::NAME));
        assert_eq!(GateUpFamily::FAST, Some(GateUpMmaFamily::NAME));
        // Every answer is a registered family.
        for name in ["reduce", "gate_up", "gate_up_mixed", "expand"] {
            for tier in [Tier::Exact, Tier::Fast] {
                let f = family_for(name, tier);
                assert!(
                    crate::families::names().contains(&f),
                    "{name} {tier:?}: {f}"
                );
            }
        }
    }

    /// An output of more elements than memory holds (or than usize counts) is an error
    /// naming M and the rows before any chunk runs.
    #[test]
    fn a_huge_chunked_output_is_an_error_before_any_launch() {
        let x = Activations::from_f32(crate::DType::F32, 17, 1, vec![1.0; 17]).unwrap();
        let never = |_: &Activations| -> Result<Activations> { panic!("no chunk may run") };
        for out_cols in [usize::MAX / 8, 1 << 58] {
            let e = in_chunks(&x, 1, out_cols, 16, never)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("output (M x rows)") && e.contains(&format!("17 x {out_cols}")),
                "{e}"
            );
        }
    }
}
