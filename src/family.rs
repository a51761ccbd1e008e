//! The kernel-family contract. A family (`reduce`, `gate_up`, `reduce_mma`, a downstream
//! crate's own) is one module beside its template: it turns a *problem* (geometry, M,
//! dtypes, ...) and a tunable *variant* into a declared kernel, lists its candidate
//! variants, knows its reference result and how to check a kernel against it, uploads
//! and binds its device arguments, and names its tuning key. Everything generic (the
//! verify catalog, the tuner, the selector's `fit`, the facade's launches, `xtask render`
//! and `bench`) works through this trait; `crate::families` registers this crate's families.

use crate::error::{Error, Result};
use crate::kernel::{Backend, DeviceTensor, KernelSpec, Limits};
use crate::key::{Bucket, TuneKey};
use crate::matrix::Activations;
use crate::numerics::Tier;
use crate::DType;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt;
use std::hash::Hash;

/// A kernel family. See the module docs; `examples/downstream` implements one outside
/// this crate.
pub trait Family: 'static {
    /// Name in tables, listings and on the command line.
    const NAME: &'static str;
    /// Other names that select this family (`gate_up_mixed` for `gate_up`).
    const ALIASES: &'static [&'static str] = &[];
    /// The family that runs this family's problems in the fast tier when another one does
    /// (`reduce_mma` for `reduce`): how the facade's names map to families
    /// ([`crate::ops::family_for`]).
    const FAST: Option<&'static str> = None;

    /// Everything that fixes a launch except the tunable variant.
    /// (`Sync`: the tuner compiles the next problem's candidates on another thread.
    /// `Debug` shows every field: the selector memoizes its choices by it.)
    type Problem: Clone + PartialEq + fmt::Debug + fmt::Display + Sync;
    /// The tunable part: same results (within a tier), different speed. Tables store it
    /// as a TOML table through serde. (`Send + Sync`: the selector memoizes its choices
    /// for every thread.)
    type Variant: Copy
        + Eq
        + Hash
        + fmt::Debug
        + fmt::Display
        + Serialize
        + DeserializeOwned
        + Send
        + Sync;
    /// The declared kernel (`#[trellis::kernel]`).
    type Kernel: KernelSpec;
    /// Host data of one instance (matrices, activations).
    type Host;
    /// What the reference computes from the host data.
    type Expected;
    /// Host data uploaded to a backend.
    type Device<B: Backend>;

    /// The specialization for a problem and variant.
    fn kernel(p: &Self::Problem, v: Self::Variant) -> Self::Kernel;
    /// The variant's numerics tier.
    fn tier(v: &Self::Variant) -> Tier;
    /// What runs when no table has an entry.
    fn default_variant(p: &Self::Problem, tier: Tier) -> Self::Variant;
    /// The candidate space of a tier (`quick`: a small subset, for slow compilers).
    fn candidates(p: &Self::Problem, tier: Tier, quick: bool) -> Vec<Self::Variant>;
    /// Whether [`Family::candidates`] leaves `v` out of `p`'s space because the device
    /// measured its structure and it never came close to a key's best. The tuner does not
    /// name such a variant as an edge the space could widen past.
    fn measured_far(_p: &Self::Problem, _v: &Self::Variant) -> bool {
        false
    }

    /// `time` given the launch a call makes before variant `v`'s in the same stream, where
    /// the tuner must count it: `reduce_mma`'s prescale kernel, for a variant that reads
    /// x prescaled where a variant that prescales x itself competes
    /// ([`crate::families::mma::MmaVariant::fused_x`]). By default none (a launch that
    /// does nothing is not made: `time` gets `None`).
    fn with_call_prelude<B: Backend, T>(
        _b: &B,
        _p: &Self::Problem,
        _v: &Self::Variant,
        time: impl FnOnce(Option<&mut dyn FnMut() -> Result<()>>) -> Result<T>,
    ) -> Result<T> {
        time(None)
    }

    /// The name this problem is listed under (`gate_up_mixed` when the two k differ).
    fn label(_p: &Self::Problem) -> &'static str {
        Self::NAME
    }
    /// The tuning-key fields beyond family, tier and size bucket (dtype, M, coding...);
    /// this crate's families write a [`crate::key::KeyFields`].
    fn key_fields(p: &Self::Problem) -> String;
    /// Whether `fields` (a table entry's `key`) is one this family writes: a table holding
    /// a key its family cannot have is ignored with a warning naming it, where the key
    /// would otherwise never match. By default any string.
    fn check_key_fields(_fields: &str) -> Result<()> {
        Ok(())
    }
    /// The matrix shape `(rows, cols)` the size bucket is taken from.
    fn shape(p: &Self::Problem) -> (usize, usize);
    /// The problems the verify catalog covers (and whose renders the staleness hash of
    /// tables covers).
    fn catalog(quick: bool) -> Vec<Self::Problem>;
    /// The part of the family's kernels a problem's come from, named (its codes): a
    /// table entry goes stale when the catalog's kernels of that part change
    /// ([`crate::tune::source_hash_of`]), so a change to one code's decode leaves the
    /// other codes' entries current. `None`: the whole family.
    fn source_slice(_p: &Self::Problem) -> Option<String> {
        None
    }

    /// Random host data for a problem (every code bit pattern is valid).
    fn random_host(p: &Self::Problem, seed: u64) -> Result<Self::Host>;
    /// The reference result.
    fn expected(p: &Self::Problem, host: &Self::Host) -> Result<Self::Expected>;
    /// Check a kernel's downloaded outputs (in declaration order): exact variants bit
    /// for bit, fast ones within SPEC section 7. `Ok` holds a short description.
    fn check(
        p: &Self::Problem,
        v: &Self::Variant,
        host: &Self::Host,
        want: &Self::Expected,
        got: &[Activations],
    ) -> std::result::Result<String, String>;

    /// Upload the host data.
    fn upload<B: Backend>(b: &B, p: &Self::Problem, host: &Self::Host) -> Result<Self::Device<B>>;
    /// The kernel's inputs, in declaration order, for a variant; an error where the
    /// device data lacks a form the variant reads (data uploaded for another variant).
    fn inputs<'d, B: Backend>(
        d: &'d Self::Device<B>,
        v: &Self::Variant,
    ) -> Result<Vec<&'d B::Tensor>>;
    /// Bytes a launch must move at least (for the bandwidth column of reports).
    fn bytes(p: &Self::Problem) -> usize;
    /// The problem a command line describes (`trellis select`); families that cannot be
    /// described this way say so.
    fn problem(_spec: &ProblemSpec) -> Result<Self::Problem> {
        Err(Error::invalid(
            "family",
            Self::NAME,
            "has no tuned choice to select (its problems are not described by flags)",
        ))
    }
    /// The problem as flags would describe it (what prior rules match on), when it can
    /// be described so.
    fn spec(_p: &Self::Problem) -> Option<ProblemSpec> {
        None
    }
    /// The same problem with `m` samples, where the family takes that many in a launch
    /// (`None` by default, and for a family without samples): what the selector asks of a
    /// table that lacks the problem's own M, for the nearest M it has.
    fn with_m(_p: &Self::Problem, _m: u32) -> Option<Self::Problem> {
        None
    }
    /// The problems of a tuning space this family tunes (none by default).
    fn problems(_space: &TuneSpace) -> Result<Vec<Self::Problem>> {
        Ok(Vec::new())
    }

    /// The tuning key of a problem.
    fn key(p: &Self::Problem, tier: Tier) -> TuneKey {
        let (rows, cols) = Self::shape(p);
        TuneKey {
            family: Self::label(p).to_string(),
            fields: Self::key_fields(p),
            tier,
            bucket: Bucket::of(rows, cols),
        }
    }
}

/// Whether a variant's specialization is valid and fits a device's limits.
pub fn fits<F: Family>(p: &F::Problem, v: F::Variant, limits: &Limits) -> Result<()> {
    let k = F::kernel(p, v);
    k.validate()?;
    limits.check_resources(
        &format!("variant `{v}`"),
        k.shared_bytes(),
        k.grid().threads,
        "the device",
    )
}

/// Outputs allocated for a kernel, to be written by [`Backend::launch_into`].
pub fn alloc_outputs<B: Backend, K: KernelSpec>(b: &B, k: &K) -> Result<Vec<B::Tensor>> {
    k.outputs().iter().map(|s| b.alloc(s)).collect()
}

/// Download float outputs as `[rows, cols]` activations (rows: the first dimension).
pub fn download<B: Backend>(b: &B, t: &B::Tensor) -> Result<Activations> {
    let shape = t.shape();
    let dtype = DType::try_from(t.elem()).map_err(|e| e.of("output"))?;
    let rows = shape.first().copied().unwrap_or(1);
    let cols = shape.iter().skip(1).product::<usize>();
    let bytes = b.download(t)?;
    Ok(Activations {
        dtype,
        rows,
        cols,
        data: dtype.try_decode(&bytes, "output")?,
    })
}

/// Run variant `v` of a problem on uploaded data into preallocated outputs (each
/// borrowed: a caller's y beside a scratch's partials).
pub fn launch_into<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    d: &F::Device<B>,
    outputs: &mut [&mut B::Tensor],
) -> Result<()> {
    let k = F::kernel(p, v);
    let launch = k.launch_request()?;
    let inputs = F::inputs(d, &v)?;
    b.launch_into(&launch, &inputs, outputs)
}

/// Run variant `v` into fresh outputs, left on the device.
pub fn launch<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    d: &F::Device<B>,
) -> Result<Vec<B::Tensor>> {
    // Checked first: a forced variant outside its ranges (0 rows per group, say) is an
    // error naming the field before its launch shape is computed.
    let kernel = F::kernel(p, v);
    kernel.validate()?;
    let mut outs = alloc_outputs(b, &kernel)?;
    launch_into::<F, B>(b, p, v, d, &mut outs.iter_mut().collect::<Vec<_>>())?;
    Ok(outs)
}

/// Run variant `v` and download its outputs.
pub fn run<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    d: &F::Device<B>,
) -> Result<Vec<Activations>> {
    let outs = launch::<F, B>(b, p, v, d)?;
    outs.iter().map(|t| download(b, t)).collect()
}

/// Compile every (problem, variants) of a family ahead of use: the CPU backend batches
/// many into one compiler call, CUDA compiles them in parallel.
pub fn precompile<F: Family, B: Backend>(
    b: &B,
    specs: &[(F::Problem, Vec<F::Variant>)],
) -> Result<()> {
    with_launches::<F, _>(specs, |launches| b.precompile(launches))
}

/// [`precompile`] on a detached compiler ([`Backend::ahead_compiler`]), from any thread.
pub fn compile_ahead<F: Family>(
    c: &dyn crate::kernel::AheadCompiler,
    specs: &[(F::Problem, Vec<F::Variant>)],
) {
    with_launches::<F, _>(specs, |launches| c.compile_ahead(launches))
}

/// `f` of the launch requests of every (problem, variants).
fn with_launches<F: Family, R>(
    specs: &[(F::Problem, Vec<F::Variant>)],
    f: impl FnOnce(&[crate::kernel::Launch<'_>]) -> R,
) -> R {
    let kernels: Vec<F::Kernel> = specs
        .iter()
        .flat_map(|(p, vs)| vs.iter().map(move |v| F::kernel(p, *v)))
        .collect();
    // A variant that does not validate is left to its own launch, which says why.
    let launches: Vec<_> = kernels
        .iter()
        .filter_map(|k| k.launch_request().ok())
        .collect();
    f(&launches)
}

/// A family known by name at run time: what the CLI, `xtask` and reports enumerate.
/// [`crate::families::for_each`] visits the registered ones.
pub trait FamilyVisitor {
    /// Called once per registered family.
    fn visit<F: Family>(&mut self);
}

/// The space `cargo xtask tune` explores, in the words of trellis matrices: families
/// turn it into their problems ([`Family::problems`]).
#[derive(Clone, Debug)]
pub struct TuneSpace {
    /// Matrix shapes; fused gate/up problems are made only for shapes marked `gate_up`.
    pub shapes: Vec<Shape>,
    /// Sample counts M.
    pub ms: Vec<u32>,
    /// Bits per weight k (gate/up families also pair each k with k + 1).
    pub ks: Vec<u32>,
    /// State bits L.
    pub ls: Vec<u32>,
    /// Codes (SPEC 3).
    pub codes: Vec<crate::Code>,
    /// Activation dtype.
    pub dtype: DType,
    /// Weights per block.
    pub t: usize,
}

/// One matrix shape to tune, `R x C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Rows R (output features).
    pub rows: usize,
    /// Columns C (input features).
    pub cols: usize,
    /// An MLP's gate/up projection shape (also tune the fused gate/up kernel on it).
    pub gate_up: bool,
}

/// Shapes of the MLP presets: Qwen3-14B and Llama-3-8B (gate/up, then down).
pub fn preset(name: &str) -> Option<Vec<Shape>> {
    let mlp = |inter: usize, hidden: usize| {
        vec![
            Shape {
                rows: inter,
                cols: hidden,
                gate_up: true,
            },
            Shape {
                rows: hidden,
                cols: inter,
                gate_up: false,
            },
        ]
    };
    match name {
        "qwen3-14b" => Some(mlp(17408, 5120)),
        "llama-3-8b" => Some(mlp(14336, 4096)),
        _ => None,
    }
}

/// A problem as flags describe it (`trellis select`): one matrix shape and coding, an
/// optional second k (fused gate/up), the activation dtype and M.
#[derive(Clone, Debug)]
pub struct ProblemSpec {
    /// Rows R.
    pub rows: usize,
    /// Columns C.
    pub cols: usize,
    /// Weights per block T.
    pub t: usize,
    /// Bits per weight k (the gate's, for a fused gate/up).
    pub k: u32,
    /// The up projection's k of a fused gate/up (`None`: a single matrix).
    pub ku: Option<u32>,
    /// State bits L.
    pub l: u32,
    /// The code (SPEC 3).
    pub code: crate::Code,
    /// Activation dtype.
    pub dtype: DType,
    /// Samples M.
    pub m: u32,
}
