//! The user facade: `matvec`, `gate_up` and `expand` on a backend you hold (make it
//! once: it keeps its compiled kernels). The tier picks the family: `exact` runs the
//! SIMT families (`reduce`, `gate_up`: SPEC 5 bits, M up to 8 a launch), `fast` the
//! matrix-unit families (`reduce_mma`, `gate_up_mma`: the SPEC 7 bound, M up to 16 a
//! launch); a larger M runs as several launches, with the same bits and one copy of each
//! matrix to the device. A `gate_up` pair of two block sizes T (SPEC 6 allows it; the
//! fused kernels take one) runs as two `matvec`s and the tail on the host. The tuning
//! tables choose the variant ([`crate::tune::select_for`]), and the `_with` forms force
//! one. Host data in, host data out (a [`Resident`] matrix stays on the device between
//! calls); every input is validated before any kernel runs. A resident matrix also runs
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
    beyond_f16_operands_of, operand_exponent, pow2, OperandFacts, Prescale, Prescaled,
    ReduceMmaDevice, ReduceMmaFamily, TablePowers,
};
use crate::families::simt::MAX_M;
use crate::family;
use crate::kernel::{Backend, DeviceTensor, Elem, KernelSpec};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::{Tail, Tier};
use crate::{DType, ScaleDType};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// The SIMT families' variant, which the `_with` forms take.
pub use crate::families::simt::Variant;
pub use crate::families::{upload_activations, DeviceActivations, DeviceMatrix};

/// Activations must be finite: a NaN or infinity would silently poison every output
/// it touches.
fn check_finite(x: &Activations) -> Result<()> {
    check_each(x, |v| v.is_finite(), "activations must be finite")
}

/// The fast tier's output: the fast kernels' (`fast`), with the samples `held` of `x`
/// (ascending) that their f16 operands cannot hold ([`beyond_f16_operands`]) from
/// `fallback`. Where every sample is held the fast kernels do not run.
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
/// [`Family::FAST`](crate::family::Family::FAST) twin runs there (`reduce` on
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

/// A matrix uploaded on the first launch that needs it and shared by the call's other
/// launches (the chunks of a large M), so one call copies each matrix to the device once
/// (and a [`Resident`] one, none). It also remembers the activation dtypes its weights
/// were found finite in: the matrix is held (borrowed or shared), so it cannot change, and the check
/// reads every scale and the value table (about 0.1 ms at 17408 rows, L 16, a call).
struct Uploaded<'a, B: Backend> {
    b: Held<'a, B>,
    w: Held<'a, QuantizedMatrix>,
    /// The upload, made on the first launch that needs it and shared by the clones.
    dev: Arc<OnceLock<Arc<DeviceMatrix<B>>>>,
    /// Bit `i`: the weights are finite in `DType::ALL[i]`.
    finite_in: Arc<AtomicU8>,
    /// What the fast tier's operand check reads of the matrix, made on first need.
    facts: Arc<OnceLock<OperandFacts>>,
    /// The fast tier's table and its power, for its device path (first need).
    fast_tables: Arc<OnceLock<Arc<FastTables<B>>>>,
    /// The fast device path's buffers of its last few keys (a call with this matrix
    /// first), reused: four allocations a call saved on CUDA and the CPU (Metal's
    /// launches return fresh arrays, so there it saves nothing).
    scratch: Arc<Pool<FastScratch<B>>>,
    /// The prescale's `powers` inputs of the last few calls with this matrix first (its
    /// table's power; a fused pair's, gate's then up's), by value.
    powers: Arc<Pool<PowersUpload<B>>>,
}

/// The prescale's `powers` (their bits, in order) and their upload.
type PowersUpload<B> = (Vec<u32>, Arc<<B as Backend>::Tensor>);

/// A few values kept for reuse, most recently put last; a lock held only to take or
/// put one.
struct Pool<T>(std::sync::Mutex<Vec<T>>);

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool(Default::default())
    }
}

impl<T> Pool<T> {
    /// The most a pool keeps: a resident's matvec and fused pair at a couple of M.
    const KEEP: usize = 4;

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take out the value `is` picks, if one is here.
    fn take(&self, is: impl Fn(&T) -> bool) -> Option<T> {
        let mut kept = self.lock();
        let i = kept.iter().position(is)?;
        Some(kept.remove(i))
    }

    /// Keep `t` unless `is` picks one kept already (a thread's call that ran beside
    /// another of the same key), dropping the least recent past [`Pool::KEEP`].
    fn put(&self, t: T, is: impl Fn(&T) -> bool) {
        let mut kept = self.lock();
        if !kept.iter().any(is) {
            if kept.len() == Self::KEEP {
                kept.remove(0);
            }
            kept.push(t);
        }
    }
}

/// The fast device path's buffers for a prescale and a variant: the prescale's outputs
/// (x prescaled, `unscale`, the flags) and the matrix kernel's outputs after y (its
/// split-K partials, `ws`; none for a fused pair). A call takes them out of the pool and
/// puts them back once its kernels are queued: calls run in stream order, so the next
/// call's prescale writes them after this call's kernels have read them, and two
/// threads' calls at once use two.
struct FastScratch<B: Backend> {
    key: (Prescale, MmaVariant),
    prescaled: [B::Tensor; 3],
    rest: Vec<B::Tensor>,
}

/// What the fast tier's device path reads of one matrix alone, uploaded once: its
/// prescaled value table (code `lut`) and the table's power of two (the prescale's
/// `powers` input, [`Uploaded::prescale_powers`]).
struct FastTables<B: Backend> {
    table: Option<Arc<B::Tensor>>,
    power: f32,
}

impl<B: Backend> Clone for Uploaded<'_, B> {
    fn clone(&self) -> Self {
        Uploaded {
            b: self.b.clone(),
            w: self.w.clone(),
            dev: self.dev.clone(),
            finite_in: self.finite_in.clone(),
            facts: self.facts.clone(),
            fast_tables: self.fast_tables.clone(),
            scratch: self.scratch.clone(),
            powers: self.powers.clone(),
        }
    }
}

/// A value borrowed for `'a`, or shared (a [`Resident::shared`]'s backend and matrix).
enum Held<'a, T> {
    Borrowed(&'a T),
    Shared(Arc<T>),
}

impl<T> Clone for Held<'_, T> {
    fn clone(&self) -> Self {
        match self {
            Held::Borrowed(t) => Held::Borrowed(t),
            Held::Shared(t) => Held::Shared(t.clone()),
        }
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Borrowed(t) => t,
            Held::Shared(t) => t,
        }
    }
}

impl<'a, B: Backend> Uploaded<'a, B> {
    fn new(b: &'a B, w: &'a QuantizedMatrix) -> Self {
        Uploaded::held(Held::Borrowed(b), Held::Borrowed(w))
    }

    fn held(b: Held<'a, B>, w: Held<'a, QuantizedMatrix>) -> Self {
        Uploaded {
            b,
            w,
            dev: Default::default(),
            finite_in: Default::default(),
            facts: Default::default(),
            fast_tables: Default::default(),
            scratch: Default::default(),
            powers: Default::default(),
        }
    }

    /// The prescale's `powers` input (one or two: a matrix's, a fused pair's) on the
    /// device: a recent call's upload of the same values (bits), else a new one.
    fn prescale_powers(&self, powers: &[f32]) -> Result<Arc<B::Tensor>> {
        let key: Vec<u32> = powers.iter().map(|p| p.to_bits()).collect();
        let is = |(k, _): &PowersUpload<B>| *k == key;
        let t = match self.powers.take(is) {
            Some((_, t)) => t,
            None => {
                let bytes: Vec<u8> = powers.iter().flat_map(|v| v.to_le_bytes()).collect();
                Arc::new(self.b.upload(Elem::F32, &[powers.len()], &bytes)?)
            }
        };
        self.powers.put((key.clone(), t.clone()), is);
        Ok(t)
    }

    /// [`FastTables`] of the matrix, uploaded once while this (or a clone) lives.
    fn fast_tables(&self) -> Result<Arc<FastTables<B>>> {
        if let Some(t) = self.fast_tables.get() {
            return Ok(t.clone());
        }
        let TablePowers { mut tables, powers } = TablePowers::upload(&*self.b, &[&self.w])?;
        let t = Arc::new(FastTables {
            table: tables.pop().flatten(),
            power: powers.first().copied().unwrap_or(1.0),
        });
        Ok(self.fast_tables.get_or_init(|| t).clone())
    }

    /// [`OperandFacts::of`] the matrix, once while this (or a clone) lives.
    fn operand_facts(&self) -> Result<&OperandFacts> {
        if let Some(f) = self.facts.get() {
            return Ok(f);
        }
        let f = OperandFacts::of(&self.w)?;
        Ok(self.facts.get_or_init(|| f))
    }

    /// [`QuantizedMatrix::check_weights_finite`], once per dtype while this (or a clone)
    /// lives.
    fn check_weights_finite(&self, dtype: DType) -> Result<()> {
        let i = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(0);
        let bit = 1u8 << i;
        if self.finite_in.load(Ordering::Relaxed) & bit == 0 {
            self.w.check_weights_finite(dtype)?;
            self.finite_in.fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Self::check_weights_finite`] of a gate/up pair, each named.
    fn check_pair_finite([gate, up]: [&Self; 2], dtype: DType) -> Result<()> {
        gate.check_weights_finite(dtype).map_err(|e| e.of("gate"))?;
        up.check_weights_finite(dtype).map_err(|e| e.of("up"))
    }

    /// The upload, made now if no launch made it yet. (Two threads of a [`Resident`]
    /// need not race here: `Resident`s upload when they are made.)
    fn get(&self) -> Result<Arc<DeviceMatrix<B>>> {
        if let Some(d) = self.dev.get() {
            return Ok(d.clone());
        }
        let d = Arc::new(DeviceMatrix::upload(&*self.b, &self.w)?);
        Ok(self.dev.get_or_init(|| d).clone())
    }
}

/// The samples of `x` the fast kernels' operands cannot hold ([`beyond_f16_operands_of`]
/// over the matrices' facts, made once per upload); none where the operands are bf16.
fn held_samples<B: Backend>(
    x: &Activations,
    ws: &[&Uploaded<B>],
    f16_operands: bool,
) -> Result<Vec<usize>> {
    if !f16_operands {
        return Ok(Vec::new());
    }
    let facts = ws
        .iter()
        .map(|w| w.operand_facts())
        .collect::<Result<Vec<_>>>()?;
    let mats: Vec<&QuantizedMatrix> = ws.iter().map(|w| &*w.w).collect();
    beyond_f16_operands_of(x, &mats, &facts)
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

/// Which variant a call runs: the tables' choice in a tier, or a forced exact one (the
/// `_with` forms).
#[derive(Clone, Copy)]
enum Choice {
    Tables(Tier),
    Exact(Variant),
}

impl Choice {
    fn tier(self) -> Tier {
        match self {
            Choice::Tables(tier) => tier,
            Choice::Exact(_) => Tier::Exact,
        }
    }
    /// The exact variant: the forced one, else the tables' for `p` on `b`.
    fn exact<F: family::Family<Variant = Variant>, B: Backend>(
        self,
        b: &B,
        p: &F::Problem,
    ) -> Variant {
        match self {
            Choice::Exact(v) => v,
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
    if let Choice::Tables(tier @ Tier::Fast) = choice {
        check_finite(x)?;
        let p = ReduceMmaFamily::problem_of(w, x)?;
        let v = crate::tune::select_for::<ReduceMmaFamily, B>(b, &p, tier).variant;
        let held = held_samples(x, &[wd], v.operands.is_f16())?;
        let fast = || {
            let d = ReduceMmaDevice {
                w: wd.get()?,
                ops: Prescaled::upload_for(b, x, &[w], &v)?,
            };
            family::run::<ReduceMmaFamily, B>(b, &p, v, &d).map(first)
        };
        return with_held_samples(x, &held, fast, |xs| fallback_matvec(b, w, xs));
    }
    let p = ReduceFamily::problem_of(w, x)?;
    check_finite(x)?;
    wd.check_weights_finite(x.dtype)?;
    let v = choice.exact::<ReduceFamily, B>(b, &p);
    reduce_launch(wd, x, &p, v)
}

/// One exact `reduce` launch of variant `v` (checked to fit) on problem `p`.
fn reduce_launch<B: Backend>(
    wd: &Uploaded<B>,
    x: &Activations,
    p: &ReduceProblem,
    v: Variant,
) -> Result<Activations> {
    let b = &*wd.b;
    family::fits::<ReduceFamily>(p, v, &b.limits())?;
    let d = ReduceDevice {
        w: wd.get()?,
        x: DeviceActivations::upload_for(b, x, &v)?,
    };
    family::run::<ReduceFamily, B>(b, p, v, &d).map(first)
}

/// `y = W x` on `b`, exact, with a forced variant (any M, as [`matvec`]).
pub fn matvec_with<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    variant: Variant,
) -> Result<Activations> {
    matvec_uploaded(Uploaded::new(b, w), x, Choice::Exact(variant))
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
    let (b, gate, up) = (&*ws[0].b, &*ws[0].w, &*ws[1].w);
    let tier = choice.tier();
    // Each matrix checked whole (its scales and table too) and named, before any launch.
    gate.validate().map_err(|e| e.of("gate"))?;
    up.validate().map_err(|e| e.of("up"))?;
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
    if let Choice::Tables(tier @ Tier::Fast) = choice {
        check_finite(x)?;
        let p = GateUpMmaFamily::problem_of(gate, up, x, tail)?;
        let v = crate::tune::select_for::<GateUpMmaFamily, B>(b, &p, tier).variant;
        let held = held_samples(x, &[gd, ud], v.operands.is_f16())?;
        let fast = || {
            let d = GateUpMmaDevice {
                gate: gd.get()?,
                up: ud.get()?,
                ops: Prescaled::upload_for(b, x, &[gate, up], &v)?,
            };
            family::run::<GateUpMmaFamily, B>(b, &p, v, &d).map(first)
        };
        return with_held_samples(x, &held, fast, |xs| fallback_gate_up(b, gate, up, xs));
    }
    let p = GateUpFamily::problem_of(gate, up, x, tail)?;
    check_finite(x)?;
    Uploaded::check_pair_finite([gd, ud], x.dtype)?;
    let v = choice.exact::<GateUpFamily, B>(b, &p);
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
    let b = &*gd.b;
    family::fits::<GateUpFamily>(p, v, &b.limits())?;
    let d = GateUpDevice {
        gate: gd.get()?,
        up: ud.get()?,
        x: DeviceActivations::upload_for(b, x, &v)?,
    };
    family::run::<GateUpFamily, B>(b, p, v, &d).map(first)
}

/// `mid = silu(G x) * (U x)` on `b`, exact, with a forced variant (any M, as
/// [`gate_up`]).
pub fn gate_up_with<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    variant: Variant,
) -> Result<Activations> {
    let ws = [Uploaded::new(b, gate), Uploaded::new(b, up)];
    gate_up_uploaded(ws, x, tail, Choice::Exact(variant))
}

/// A matrix uploaded to a backend once and kept there for any number of calls
/// ([`Resident::matvec`], [`gate_up_resident`]), with the same results as [`matvec`] and
/// [`gate_up`], which copy their matrices to the device every call. It holds the host
/// matrix, which the fast tier's checks and its fallback read, borrowed ([`Resident::new`])
/// or shared ([`Resident::shared`]: a `Resident<'static, B>`, to keep in a server's state),
/// and checks its weights finite once per activation dtype (the matrix cannot change
/// while it is held). It is `Send` and `Sync` where the backend is (the cpu, cuda and
/// metal-sim backends): several threads may call one. On a backend chosen at run time,
/// make them inside [`AnyBackend::visit`] (`examples/facade.rs` does).
pub struct Resident<'a, B: Backend> {
    w: Uploaded<'a, B>,
}

impl<'a, B: Backend> Resident<'a, B> {
    /// Validate `w` and upload it to `b`.
    pub fn new(b: &'a B, w: &'a QuantizedMatrix) -> Result<Self> {
        Resident::upload(Uploaded::new(b, w))
    }

    fn upload(w: Uploaded<'a, B>) -> Result<Self> {
        w.get()?;
        Ok(Resident { w })
    }

    /// The host matrix.
    pub fn matrix(&self) -> &QuantizedMatrix {
        &self.w.w
    }

    /// `y = W x` in `tier`, as [`matvec`] gives it.
    pub fn matvec(&self, x: &Activations, tier: Tier) -> Result<Activations> {
        matvec_uploaded(self.w.clone(), x, Choice::Tables(tier))
    }

    /// `y = W x`, exact, with a forced variant, as [`matvec_with`] gives it.
    pub fn matvec_with(&self, x: &Activations, variant: Variant) -> Result<Activations> {
        matvec_uploaded(self.w.clone(), x, Choice::Exact(variant))
    }

    /// `y = W x` on activations already on the device (uploaded once with
    /// [`DeviceActivations::upload`], or a previous kernel's output through
    /// [`DeviceActivations::from_tensor`]), y left there: `[M, R]` in x's dtype, with the
    /// bits [`Resident::matvec`] gives, and no copy between host and device. M is one
    /// launch's (exact 1..=8, fast 1..=16). The host does not check x's values: a NaN or
    /// an infinity in x makes non-finite outputs, as IEEE arithmetic does (the host
    /// facade refuses them; so does a fast call that reads x on the host, below).
    ///
    /// Exact: where `x` lacks the layout the table's winner reads (x as it is, or its
    /// lane-interleaved copy), the winner's twin that reads the other runs (the same
    /// bits: the layout only moves x in memory).
    ///
    /// Fast: a kernel prescales x on the device as the host facade does
    /// ([`Prescale`]). With f16 operands (the tables' usual choice) and bf16 or f32
    /// activations it also flags the samples the host's operand check must read (a
    /// value below 2^-28 of its sample's largest, or a largest below 2^-113), and the
    /// call waits for those flags (a small copy back, before the matrix kernel starts):
    /// a flagged sample brings x to the host (its values checked finite there, as the
    /// host facade checks them), and where the check holds a sample the whole call runs
    /// as [`Resident::matvec`] on it, y uploaded. bf16 operands and f16 activations need
    /// no flags and leave the call asynchronous. A matrix whose every sample the f16
    /// operands cannot serve (a lut table spanning more than 2^28, row scales below
    /// 2^-60, products near f32's ends), and x uploaded for an interleaved variant alone
    /// (no plain copy), run through the host as well.
    pub fn matvec_device(
        &self,
        x: &DeviceActivations<B>,
        tier: Tier,
    ) -> Result<DeviceActivations<B>> {
        if tier == Tier::Fast {
            let mut y = self
                .w
                .b
                .alloc(&output_spec("y", x, self.w.w.geometry.rows))?;
            self.matvec_device_fast(x, &mut y)?;
            return DeviceActivations::from_tensor(y);
        }
        let (p, v, d) = self.reduce_on_device(x, tier)?;
        DeviceActivations::from_tensor(first(family::launch::<ReduceFamily, B>(
            &self.w.b, &p, v, &d,
        )?))
    }

    /// [`Resident::matvec_device`] into `y`, a `[M, R]` tensor of x's element type made
    /// once (`Backend::alloc`) and reused: no allocation a call (the fast tier's reuses
    /// its scratch too; where it runs a call on the host, the result is written into
    /// y). Every element of y is written; a y of another shape or type is an error
    /// naming it.
    pub fn matvec_device_into(
        &self,
        x: &DeviceActivations<B>,
        y: &mut B::Tensor,
        tier: Tier,
    ) -> Result<()> {
        if tier == Tier::Fast {
            return self.matvec_device_fast(x, y);
        }
        let (p, v, d) = self.reduce_on_device(x, tier)?;
        family::launch_into::<ReduceFamily, B>(&self.w.b, &p, v, &d, &mut [y])
    }

    /// The fast tier of [`Resident::matvec_device`], into `y`.
    fn matvec_device_fast(&self, x: &DeviceActivations<B>, y: &mut B::Tensor) -> Result<()> {
        let w = &*self.w.w;
        crate::reference::check_x_shape([x.samples(), x.cols()], w.geometry.cols)?;
        let p = ReduceProblem::of_samples(w, x.dtype(), x.samples(), MAX_M_MMA)?;
        let matrix = self.w.get()?;
        fast_on_device::<ReduceMmaFamily, B>(
            &[&self.w],
            &p,
            x,
            y,
            |ops| ReduceMmaDevice { w: matrix, ops },
            |d| d.ops,
            |xh| self.matvec(xh, Tier::Fast),
        )
    }

    /// The problem, variant (checked to fit) and device data of a `matvec` on `x`.
    fn reduce_on_device(
        &self,
        x: &DeviceActivations<B>,
        tier: Tier,
    ) -> Result<(ReduceProblem, Variant, ReduceDevice<B>)> {
        let (b, w) = (&*self.w.b, &*self.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], w.geometry.cols)?;
        let p = ReduceProblem::of_samples(w, x.dtype(), x.samples(), MAX_M)?;
        self.w.check_weights_finite(x.dtype())?;
        let v = device_variant(Choice::Tables(tier).exact::<ReduceFamily, B>(b, &p), x);
        family::fits::<ReduceFamily>(&p, v, &b.limits())?;
        let d = ReduceDevice {
            w: self.w.get()?,
            x: x.clone(),
        };
        Ok((p, v, d))
    }

    /// `mid = silu(G x) * (U x)` with this matrix as G and `up` as U on activations
    /// already on the device, mid left there, as [`Resident::matvec_device`] does for
    /// `matvec`: the bits [`Resident::gate_up`] gives, in either tier (M as one launch's:
    /// exact 1..=8, fast 1..=16; the fast tier prescales x, reads flags back and treats
    /// NaN, infinity and held samples as `matvec_device` does). The pair must share T
    /// (one fused matrix kernel; a pair of two T takes host activations: its tail runs
    /// on the host).
    pub fn gate_up_device(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        tail: Tail,
        tier: Tier,
    ) -> Result<DeviceActivations<B>> {
        if tier == Tier::Fast {
            let mut mid = self
                .w
                .b
                .alloc(&output_spec("mid", x, self.w.w.geometry.rows))?;
            self.gate_up_device_fast(up, x, &mut mid, tail)?;
            return DeviceActivations::from_tensor(mid);
        }
        let (p, v, d) = self.gate_up_on_device(up, x, tail, tier)?;
        DeviceActivations::from_tensor(first(family::launch::<GateUpFamily, B>(
            &self.w.b, &p, v, &d,
        )?))
    }

    /// [`Resident::gate_up_device`] into `mid`, a `[M, R]` tensor of x's element type
    /// made once and reused, as [`Resident::matvec_device_into`] writes y.
    pub fn gate_up_device_into(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        mid: &mut B::Tensor,
        tail: Tail,
        tier: Tier,
    ) -> Result<()> {
        if tier == Tier::Fast {
            return self.gate_up_device_fast(up, x, mid, tail);
        }
        let (p, v, d) = self.gate_up_on_device(up, x, tail, tier)?;
        family::launch_into::<GateUpFamily, B>(&self.w.b, &p, v, &d, &mut [mid])
    }

    /// The fast tier of [`Resident::gate_up_device`], into `mid`.
    fn gate_up_device_fast(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        mid: &mut B::Tensor,
        tail: Tail,
    ) -> Result<()> {
        same_backend(self, up)?;
        let (gate, upm) = (&*self.w.w, &*up.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], gate.geometry.cols)?;
        let p = GateUpProblem::of_samples(gate, upm, x.dtype(), x.samples(), tail, MAX_M_MMA)?;
        let (gm, um) = (self.w.get()?, up.w.get()?);
        fast_on_device::<GateUpMmaFamily, B>(
            &[&self.w, &up.w],
            &p,
            x,
            mid,
            |ops| GateUpMmaDevice {
                gate: gm,
                up: um,
                ops,
            },
            |d| d.ops,
            |xh| self.gate_up(up, xh, tail, Tier::Fast),
        )
    }

    /// The problem, variant (checked to fit) and device data of a `gate_up` on `x`.
    fn gate_up_on_device(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        tail: Tail,
        tier: Tier,
    ) -> Result<(GateUpProblem, Variant, GateUpDevice<B>)> {
        same_backend(self, up)?;
        let (b, gate, upm) = (&*self.w.b, &*self.w.w, &*up.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], gate.geometry.cols)?;
        let p = GateUpProblem::of_samples(gate, upm, x.dtype(), x.samples(), tail, MAX_M)?;
        Uploaded::check_pair_finite([&self.w, &up.w], x.dtype())?;
        let v = device_variant(Choice::Tables(tier).exact::<GateUpFamily, B>(b, &p), x);
        family::fits::<GateUpFamily>(&p, v, &b.limits())?;
        let d = GateUpDevice {
            gate: self.w.get()?,
            up: up.w.get()?,
            x: x.clone(),
        };
        Ok((p, v, d))
    }

    /// `mid = silu(G x) * (U x)` with this matrix as G and `up` as U, in `tier`, as
    /// [`gate_up`] gives it ([`gate_up_resident`]).
    pub fn gate_up(
        &self,
        up: &Resident<'_, B>,
        x: &Activations,
        tail: Tail,
        tier: Tier,
    ) -> Result<Activations> {
        gate_up_resident(self, up, x, tail, tier)
    }
}

impl<B: Backend + 'static> Resident<'static, B> {
    /// Validate `w` and upload it to `b`, both shared: the resident owns its part and
    /// borrows nothing.
    pub fn shared(b: Arc<B>, w: Arc<QuantizedMatrix>) -> Result<Self> {
        Resident::upload(Uploaded::held(Held::Shared(b), Held::Shared(w)))
    }
}

/// A device call's output `name`: `[M, rows]` of x's element type.
fn output_spec<B: Backend>(
    name: &'static str,
    x: &DeviceActivations<B>,
    rows: usize,
) -> crate::kernel::TensorSpec {
    crate::kernel::TensorSpec {
        name,
        elem: x.elem(),
        shape: vec![x.samples(), rows],
    }
}

/// The fast tier on activations on the device, into `y`: the table's variant of
/// family `F` for problem `p` over `projections` (one matrix, or a fused pair: gate,
/// then up), x prescaled on the device ([`prescale_on_device`]). `device` makes the
/// family's device data of the prescaled operands and `operands` takes them back (they
/// go back to the scratch); `on_host` is the host facade's call, for x the operand
/// check holds (y written from its result).
#[allow(clippy::too_many_arguments)]
fn fast_on_device<F, B>(
    projections: &[&Uploaded<B>],
    p: &F::Problem,
    x: &DeviceActivations<B>,
    y: &mut B::Tensor,
    device: impl FnOnce(Prescaled<B>) -> F::Device<B>,
    operands: impl FnOnce(F::Device<B>) -> Prescaled<B>,
    on_host: impl FnOnce(&Activations) -> Result<Activations>,
) -> Result<()>
where
    F: family::Family<Variant = MmaVariant>,
    F::Kernel: crate::families::mma::MmaLayout,
    B: Backend,
{
    let (owner, b) = (projections[0], &*projections[0].b);
    let v = crate::tune::select_for::<F, B>(b, p, Tier::Fast).variant;
    family::fits::<F>(p, v, &b.limits())?;
    let kernel = F::kernel(p, v);
    kernel.validate()?;
    let specs = kernel.outputs();
    specs[0].check(kernel.id().name, y.elem(), &y.shape())?;
    let host = |xh: &Activations, y: &mut B::Tensor| {
        let yh = on_host(xh)?;
        b.write(y, &yh.dtype.try_encode(&yh.data, "y")?)
    };
    // x without its plain copy (uploaded for an interleaved SIMT variant alone), or a
    // matrix whose every sample f16 operands cannot serve (whatever x is): the host's.
    let Some(plain) = x.tensor() else {
        return host(&x.download(b)?, y);
    };
    let mut every = false;
    if v.operands.is_f16() {
        for w in projections {
            every |= w.operand_facts()?.every_sample();
        }
    }
    if every {
        return host(&x.download(b)?, y);
    }
    let tables = projections
        .iter()
        .map(|w| w.fast_tables())
        .collect::<Result<Vec<_>>>()?;
    let powers = owner.prescale_powers(&tables.iter().map(|t| t.power).collect::<Vec<_>>())?;
    let k = Prescale::of(&kernel)?;
    k.validate()?;
    let key = (k, v);
    let is = |s: &FastScratch<B>| s.key == key;
    let FastScratch {
        mut prescaled,
        mut rest,
        ..
    } = match owner.scratch.take(is) {
        Some(s) => s,
        None => FastScratch {
            key,
            prescaled: prescale_outputs(b, &k)?,
            rest: specs[1..]
                .iter()
                .map(|s| b.alloc(s))
                .collect::<Result<_>>()?,
        },
    };
    let held = prescale_on_device(b, projections, x, plain, &k, &powers, &v, &mut prescaled)?;
    if let Some(xh) = held {
        owner.scratch.put(
            FastScratch {
                key,
                prescaled,
                rest,
            },
            is,
        );
        return host(&xh, y);
    }
    let [xs, unscale, flags] = prescaled;
    let d = device(Prescaled {
        x: xs,
        x_f16: None,
        unscale,
        tables: tables.iter().map(|t| t.table.clone()).collect(),
    });
    // y the caller's; the partials the scratch's (zeroed when bound, where the kernel
    // needs them zeroed).
    let mut outs: Vec<&mut B::Tensor> = std::iter::once(y).chain(rest.iter_mut()).collect();
    let launched = family::launch_into::<F, B>(b, p, v, &d, &mut outs);
    let Prescaled { x: xs, unscale, .. } = operands(d);
    let prescaled = [xs, unscale, flags];
    owner.scratch.put(
        FastScratch {
            key,
            prescaled,
            rest,
        },
        is,
    );
    launched
}

/// Fresh outputs of prescale `k`: x prescaled, `unscale`, the flags.
fn prescale_outputs<B: Backend>(b: &B, k: &Prescale) -> Result<[B::Tensor; 3]> {
    family::alloc_outputs(b, k)?
        .try_into()
        .map_err(|o: Vec<_>| {
            Error::invalid("prescale outputs", o.len(), "the kernel declares three")
        })
}

/// The fast tier's prescale of `x` (its plain tensor `plain`) on the device into `outs`
/// (x prescaled, `unscale`, the flags) for variant `v` of a kernel over `projections`
/// (in order; `powers` their tables' powers on the device). `Some(x)`, read
/// back to the host and checked finite there, where the host's operand check holds a
/// flagged sample: the call then runs on the host. Only bf16 and f32 samples can be
/// held with f16 operands (f16 ones fit them; bf16 operands hold any), so only those
/// read the flags back.
#[allow(clippy::too_many_arguments)]
fn prescale_on_device<B: Backend>(
    b: &B,
    projections: &[&Uploaded<B>],
    x: &DeviceActivations<B>,
    plain: &B::Tensor,
    k: &Prescale,
    powers: &B::Tensor,
    v: &MmaVariant,
    outs: &mut [B::Tensor; 3],
) -> Result<Option<Activations>> {
    {
        let mut refs: Vec<&mut B::Tensor> = outs.iter_mut().collect();
        b.launch_into(&k.launch_request()?, &[plain, powers], &mut refs)?;
    }
    if !v.operands.is_f16() || x.dtype() == DType::F16 {
        return Ok(None);
    }
    if b.download(&outs[2])?.iter().all(|&f| f == 0) {
        return Ok(None);
    }
    let xh = x.download(b)?;
    // Read on the host: checked as the host facade checks it (an infinity flags its
    // sample: every finite value is tiny beside it).
    check_finite(&xh)?;
    Ok((!held_samples(&xh, projections, true)?.is_empty()).then_some(xh))
}

/// Variant `v` for activations on the device: where `x` lacks the layout `v` reads
/// (x as it is, or its lane-interleaved copy), `v`'s twin that reads the other (the same
/// bits: the layout only moves x in memory; the launch checks that the twin fits).
fn device_variant<B: Backend>(v: Variant, x: &DeviceActivations<B>) -> Variant {
    let interleaved_x = match v.interleaved_x {
        true => x.has_interleaved(),
        false => x.tensor().is_none(),
    };
    Variant { interleaved_x, ..v }
}

/// An error naming up's backend where `gate` and `up` are resident on two.
fn same_backend<B: Backend>(gate: &Resident<B>, up: &Resident<B>) -> Result<()> {
    if std::ptr::eq(&*gate.w.b, &*up.w.b) {
        return Ok(());
    }
    Err(Error::invalid(
        "up's backend",
        format!("{} {}", up.w.b.name(), up.w.b.device_id()),
        format!(
            "is not the gate's ({} {}): both must be resident on one backend",
            gate.w.b.name(),
            gate.w.b.device_id()
        ),
    ))
}

/// `mid = silu(G x) * (U x)` of two resident matrices in `tier`, as [`gate_up`] gives it;
/// both must be resident on the same backend.
pub fn gate_up_resident<B: Backend>(
    gate: &Resident<B>,
    up: &Resident<B>,
    x: &Activations,
    tail: Tail,
    tier: Tier,
) -> Result<Activations> {
    same_backend(gate, up)?;
    gate_up_uploaded(
        [gate.w.clone(), up.w.clone()],
        x,
        tail,
        Choice::Tables(tier),
    )
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
