//! `reduce_mma`: fast-tier `y = W x` on matrix units, template
//! `templates/reduce_mma.kernel`; the kernels' design and the vocabulary both matrix-unit
//! families share are in [`crate::families::mma`].
//!
//! The candidate space the tuner measures is in `space.rs` (each step with the measurement
//! behind it); the host's power-of-two prescaling of x for f16 operands in `prescale.rs`.

use super::DeviceMatrix;
use crate::check::{self, RealSums};
use crate::dtype::{DType, ScaleDType};
use crate::error::Result;
use crate::families::simt::Proj;
use crate::family::{Family, ProblemSpec, TuneSpace};
use crate::kernel::Backend;
use crate::key::{KeyFields, KeyForm};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::Tier;
use std::sync::Arc;

mod prescale;
mod space;

use crate::families::mma::{MmaLayout, MmaProj, MmaVariant, MAX_M_MMA};
pub use prescale::{
    beyond_f16_operands, beyond_f16_operands_of, operand_exponent, FusedInputs, OperandFacts,
    Prescale, Prescaled,
};
pub(crate) use prescale::{pow2, TablePowers};
pub use space::{
    add_batched_stage_twins, add_early_words_twins, add_fused_twins, add_paired_twins,
    opt_in_where_needed, with_host_f16_x,
};
pub(crate) use space::{add_col_split_twins, candidates_for, default_for};

/// Fast `y = W x` on matrix units.
#[crate::kernel(
    name = "reduce_mma",
    template = "reduce_mma.kernel",
    grid = self.mma_grid(),
    validate = self.mma_check(),
    shared = self.mma_shared(),
    dynamic_shared = self.mma_dynamic_shared(),
    inputs(
        x: x_elem()[self.m, self.cols],
        codes: u32[self.rows, self.cols / self.t, self.words_per_block()],
        scales: scale[self.rows],
        table: f32[self.the_proj().table_arg_len()],
        unscale: f32[self.unscale_len()],
    ),
    outputs(y: act[self.m, self.rows], ws: f32[self.ws_words()]),
    zero_outputs = self.variant.k_split > 1,
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReduceMma {
    /// Rows R of the matrix (outputs per sample).
    pub rows: usize,
    /// Columns C (inputs per sample).
    pub cols: usize,
    /// Weights per block T.
    pub t: usize,
    /// The matrix's coding (k, L, code).
    pub proj: Proj,
    /// Samples M (1..=[`MAX_M_MMA`]).
    pub m: u32,
    /// Activation dtype (of x and y).
    pub act: DType,
    /// The dtype of the stored row scales.
    pub scale: ScaleDType,
    /// The tuned variant this specialization renders.
    pub variant: MmaVariant,
}

impl MmaLayout for ReduceMma {
    fn dims(&self) -> (usize, usize, usize, u32, MmaVariant) {
        (self.rows, self.cols, self.t, self.m, self.variant)
    }
    fn act(&self) -> DType {
        self.act
    }
    fn projs(&self) -> Vec<MmaProj> {
        vec![self.the_proj()]
    }
}

impl ReduceMma {
    fn the_proj(&self) -> MmaProj {
        MmaProj::new(
            self.proj,
            self.cols,
            self.t,
            ["", "codes", "scales", "table"],
        )
    }
    fn words_per_block(&self) -> usize {
        self.proj.words_per_block(self.t)
    }
}

/// A `reduce_mma` problem: `reduce`'s, with M up to 16.
pub type ReduceMmaProblem = super::reduce::ReduceProblem;

/// Host data of a `reduce_mma` instance: `reduce`'s.
pub type ReduceMmaHost = super::reduce::ReduceHost;

/// The SPEC 7 real sums, computed on first use.
pub struct ReduceMmaExpected {
    real: check::LazyRealSums<1>,
}

impl ReduceMmaExpected {
    /// The SPEC 7 real sums of `host`.
    pub fn real(&self, host: &ReduceMmaHost) -> std::result::Result<&RealSums, String> {
        let [sums] = self.real.get([&host.w], &host.x)?;
        Ok(sums)
    }
}

/// Uploaded `reduce_mma` data: the matrix, and x as [`Prescaled`].
pub struct ReduceMmaDevice<B: Backend> {
    /// The matrix on the device (shared: the facade uploads it once for a call's launches).
    pub w: Arc<DeviceMatrix<B>>,
    /// x prescaled, with the unscale factors and table.
    pub ops: Prescaled<B>,
}

impl<B: Backend> ReduceMmaDevice<B> {
    /// Upload a matrix and its activations.
    pub fn upload(b: &B, w: &QuantizedMatrix, x: &Activations) -> Result<Self> {
        Ok(ReduceMmaDevice {
            w: Arc::new(DeviceMatrix::upload(b, w)?),
            ops: Prescaled::upload(b, x, &[w])?,
        })
    }
}

/// The `reduce_mma` family (fast tier only: it has no exact candidates).
pub struct ReduceMmaFamily;

impl ReduceMmaFamily {
    /// The problem of a matrix and activations (M in 1..=16).
    pub fn problem_of(w: &QuantizedMatrix, x: &Activations) -> Result<ReduceMmaProblem> {
        ReduceMmaProblem::of(w, x, MAX_M_MMA)
    }
}

impl Family for ReduceMmaFamily {
    const NAME: &'static str = "reduce_mma";
    type Problem = ReduceMmaProblem;
    type Variant = MmaVariant;
    type Kernel = ReduceMma;
    type Host = ReduceMmaHost;
    type Expected = ReduceMmaExpected;
    type Device<B: Backend> = ReduceMmaDevice<B>;

    fn kernel(p: &ReduceMmaProblem, variant: MmaVariant) -> ReduceMma {
        let g = &p.geometry;
        ReduceMma {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            proj: Proj::of(g),
            m: p.m,
            act: p.act,
            scale: p.scale,
            variant,
        }
    }
    fn tier(_v: &MmaVariant) -> Tier {
        Tier::Fast
    }
    fn default_variant(p: &ReduceMmaProblem, _tier: Tier) -> MmaVariant {
        default_for(p.geometry.rows, p.m)
    }
    fn candidates(p: &ReduceMmaProblem, tier: Tier, quick: bool) -> Vec<MmaVariant> {
        space::candidates(p, tier, quick)
    }
    fn measured_far(p: &ReduceMmaProblem, v: &MmaVariant) -> bool {
        space::measured_far(p, v)
    }
    fn with_call_prelude<B: Backend, T>(
        b: &B,
        p: &ReduceMmaProblem,
        v: &MmaVariant,
        time: impl FnOnce(Option<&mut dyn FnMut() -> Result<()>>) -> Result<T>,
    ) -> Result<T> {
        // Where a fused variant competes, the others pay for the prescale kernel.
        if v.fused_x || !space::offers_fused(p) {
            return time(None);
        }
        Prescale::of(&Self::kernel(p, *v))?.with_bound(b, |before| time(Some(before)))
    }
    fn key_fields(p: &ReduceMmaProblem) -> String {
        p.key_fields().to_string()
    }
    fn check_key_fields(fields: &str) -> Result<()> {
        KeyFields::check(fields, KeyForm::MATVEC)
    }
    fn shape(p: &ReduceMmaProblem) -> (usize, usize) {
        (p.geometry.rows, p.geometry.cols)
    }
    fn source_slice(p: &ReduceMmaProblem) -> Option<String> {
        p.source_slice()
    }
    fn catalog(quick: bool) -> Vec<ReduceMmaProblem> {
        let cases = crate::families::catalog::verify_cases(quick);
        let mut out: Vec<ReduceMmaProblem> = cases
            .iter()
            .filter_map(|c| {
                Some(ReduceMmaProblem {
                    geometry: c.gate_geometry().ok()?,
                    scale: ScaleDType::F16,
                    act: c.act,
                    m: c.m,
                })
            })
            .collect();
        // M beyond the SIMT families' 8: two B operands per A, and a partial second one.
        if let Some(first) = out.first().copied() {
            out.push(ReduceMmaProblem { m: 16, ..first });
        }
        if let Some(c) = cases.get(2) {
            if let Ok(geometry) = c.up_geometry() {
                out.push(ReduceMmaProblem {
                    geometry,
                    scale: ScaleDType::F32,
                    act: c.act,
                    m: 11,
                });
            }
        }
        out
    }
    fn random_host(p: &ReduceMmaProblem, seed: u64) -> Result<ReduceMmaHost> {
        let w = check::try_random_matrix_scaled(p.geometry, p.scale, seed)?;
        let x =
            check::random_activations_with_outliers(p.act, p.m as usize, p.geometry.cols, seed + 2);
        Ok(ReduceMmaHost { w, x })
    }
    fn expected(_p: &ReduceMmaProblem, _host: &ReduceMmaHost) -> Result<ReduceMmaExpected> {
        Ok(ReduceMmaExpected {
            real: Default::default(),
        })
    }
    fn check(
        _p: &ReduceMmaProblem,
        _v: &MmaVariant,
        host: &ReduceMmaHost,
        want: &ReduceMmaExpected,
        got: &[Activations],
    ) -> std::result::Result<String, String> {
        let y = got.first().ok_or("no output")?;
        check::fast_reduce(y, want.real(host)?)
    }
    fn upload<B: Backend>(
        b: &B,
        _p: &ReduceMmaProblem,
        host: &ReduceMmaHost,
    ) -> Result<ReduceMmaDevice<B>> {
        ReduceMmaDevice::upload(b, &host.w, &host.x)
    }
    fn inputs<'d, B: Backend>(
        d: &'d ReduceMmaDevice<B>,
        v: &MmaVariant,
    ) -> Result<Vec<&'d B::Tensor>> {
        let (x, unscale) = d.ops.x_and_unscale(v)?;
        Ok(vec![
            x,
            &d.w.codes,
            &d.w.scales,
            d.ops.table(0, &d.w),
            unscale,
        ])
    }
    fn problem(s: &ProblemSpec) -> Result<ReduceMmaProblem> {
        ReduceMmaProblem::from_spec(s, MAX_M_MMA)
    }
    fn spec(p: &ReduceMmaProblem) -> Option<ProblemSpec> {
        Some(p.spec())
    }
    fn with_m(p: &ReduceMmaProblem, m: u32) -> Option<ReduceMmaProblem> {
        (1..=MAX_M_MMA)
            .contains(&m)
            .then_some(ReduceMmaProblem { m, ..*p })
    }
    fn problems(space: &TuneSpace) -> Result<Vec<ReduceMmaProblem>> {
        ReduceMmaProblem::in_space(space, MAX_M_MMA)
    }
    fn bytes(p: &ReduceMmaProblem) -> usize {
        p.bytes()
    }
}
