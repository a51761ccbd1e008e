//! `gate_up_mma`: fast-tier fused SwiGLU `mid = silu(G x) * (U x)` on matrix units,
//! the same template and vocabulary ([`crate::families::mma`]) as [`super::reduce_mma`] (`templates/reduce_mma.kernel`) with two
//! projections (same-k or mixed-k, any codes): each tile accumulates `G x` and `U x`,
//! rounds each to the activation dtype after its row factor, then applies the SPEC 6
//! tail (`exact` or the backend's `native` exp). Checked with `check::fast_gate_up`
//! (SPEC 7 v2); listed as `gate_up_mma_mixed` when the two k differ.

use super::reduce_mma::{add_paired_twins, Prescaled};
use super::DeviceMatrix;
use crate::check::{self, RealSums};
use crate::dtype::{DType, ScaleDType};
use crate::error::Result;
use crate::families::mma::{
    bf16_operands_fit, paired_windows_fit, MmaLayout, MmaProj, MmaVariant, MmaXStage, MAX_M_MMA,
};
use crate::families::simt::Proj;
use crate::family::{Family, ProblemSpec, TuneSpace};
use crate::kernel::Backend;
use crate::key::{KeyFields, KeyForm};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::{Tail, Tier};
use std::sync::Arc;

/// Declares a kernel struct over `gate_up_mma`'s inputs, the one list of them (the
/// template binds them by name): the plain kernel and [`GateUpMmaParts`] differ only in
/// their outputs, each `[M, rows]` of the activation dtype. (The shapes are written
/// here, not passed in: `self` in the caller's tokens would not name the method's.)
macro_rules! gate_up_mma_kernel {
    ($name:tt, outputs($($output:ident),+), $item:item) => {
        #[crate::kernel(
            name = $name,
            template = "reduce_mma.kernel",
            grid = self.mma_grid(),
            validate = self.mma_check(),
            shared = self.mma_shared(),
            dynamic_shared = self.mma_dynamic_shared(),
            inputs(
                x: x_elem()[self.m, self.cols],
                gcodes: u32[self.rows, self.cols / self.t, self.gate.words_per_block(self.t)],
                gscales: gate_scale()[self.rows],
                gtable: f32[self.projs()[0].table_arg_len()],
                ucodes: u32[self.rows, self.cols / self.t, self.up.words_per_block(self.t)],
                uscales: up_scale()[self.rows],
                utable: f32[self.projs()[1].table_arg_len()],
                unscale: f32[self.unscale_len()],
            ),
            outputs($($output: act()[self.m, self.rows]),+),
        )]
        $item
    };
}

gate_up_mma_kernel! {
    "gate_up_mma",
    outputs(mid),
    /// Fast `mid = silu(G x) * (U x)` on matrix units.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct GateUpMma {
        /// Rows R of each matrix (outputs per sample).
        pub rows: usize,
        /// Columns C of each matrix (inputs per sample).
        pub cols: usize,
        /// Weights per block T (shared by both matrices).
        pub t: usize,
        /// The gate matrix's coding (k, L, code).
        pub gate: Proj,
        /// The up matrix's coding (its k may differ from the gate's).
        pub up: Proj,
        /// Samples M (1..=[`MAX_M_MMA`]).
        pub m: u32,
        /// Activation dtype (of x and mid).
        pub act: DType,
        /// The dtype of the gate matrix's stored row scales.
        pub gate_scale: ScaleDType,
        /// The dtype of the up matrix's stored row scales.
        pub up_scale: ScaleDType,
        /// SwiGLU tail arithmetic (SPEC 6).
        pub tail: Tail,
        /// The tuned variant this specialization renders.
        pub variant: MmaVariant,
    }
}

impl MmaLayout for GateUpMma {
    fn dims(&self) -> (usize, usize, usize, u32, MmaVariant) {
        (self.rows, self.cols, self.t, self.m, self.variant)
    }
    fn act(&self) -> DType {
        self.act
    }
    fn projs(&self) -> Vec<MmaProj> {
        vec![
            MmaProj::new(
                self.gate,
                self.cols,
                self.t,
                ["g", "gcodes", "gscales", "gtable"],
            ),
            MmaProj::new(
                self.up,
                self.cols,
                self.t,
                ["u", "ucodes", "uscales", "utable"],
            ),
        ]
    }
    fn is_gate_up(&self) -> bool {
        true
    }
    fn tail(&self) -> Tail {
        self.tail
    }
    fn out_name(&self) -> &'static str {
        "mid"
    }
}

impl GateUpMma {
    // The declaration's element types are calls (`gate_up_mma_kernel!`), so that
    // `GateUpMmaParts` reaches them through `Deref`.
    fn gate_scale(&self) -> ScaleDType {
        self.gate_scale
    }
    fn up_scale(&self) -> ScaleDType {
        self.up_scale
    }
}

gate_up_mma_kernel! {
    "gate_up_mma_parts",
    outputs(mid, gate_out, up_out),
    /// [`GateUpMma`] that also stores `g` and `u`, each rounded to the activation dtype
    /// before the tail, beside `mid`: what SPEC 7 bounds of a fast `gate_up` besides `mid`
    /// (the same template; its lines for them render nothing in `GateUpMma`, whose tuned
    /// units stay as they are). For checks, not for tuning: `tests/gate_up_parts.rs` runs it
    /// against the plain kernel (the same `mid`, bit for bit) and SPEC 7.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct GateUpMmaParts {
        /// The kernel whose parts are stored.
        pub kernel: GateUpMma,
    }
}

impl std::ops::Deref for GateUpMmaParts {
    type Target = GateUpMma;
    fn deref(&self) -> &GateUpMma {
        &self.kernel
    }
}

impl GateUpMmaParts {
    fn stores_parts(&self) -> bool {
        true
    }
}

/// The launch shapes that never came within 1.09x of a key's best in the
/// twenty-seventh session's full re-tune (every tuned key of both presets, same-k and
/// mixed; `prototypes/session26/space.py --family gate_up_mma`, and `gate_up_mma_mixed`),
/// 21 % of its measurements: two tiles of 8 simdgroups each (1.10-1.31x at every M); one
/// tile of 2 simdgroups at M <= 2 (1.10-1.25x), of 1 at M = 8 (1.16-1.30x) and of 16 at
/// M = 16 (1.24-1.26x). The twenty-ninth session's re-tune without them: new over old
/// median 1.000 (0.985-1.016) over all 300 entries.
fn far(m: u32, v: &MmaVariant) -> bool {
    let one_tile = v.row_tiles == 1;
    (v.row_tiles == 2 && v.col_split == 8)
        || (one_tile && m <= 2 && v.col_split == 2)
        || (one_tile && m == 8 && v.col_split == 1)
        || (one_tile && m > 8 && v.col_split == 16)
}

/// A `gate_up_mma` problem: as `gate_up`'s, with M up to 16.
pub type GateUpMmaProblem = super::gate_up::GateUpProblem;

/// Host data of a `gate_up_mma` instance: `gate_up`'s.
pub type GateUpMmaHost = super::gate_up::GateUpHost;

/// The SPEC 7 real sums of both projections, computed on first use.
pub struct GateUpMmaExpected {
    real: check::LazyRealSums<2>,
}

impl GateUpMmaExpected {
    /// The real sums of the gate and up projections.
    pub fn real(&self, h: &GateUpMmaHost) -> std::result::Result<&[RealSums; 2], String> {
        self.real.get([&h.gate, &h.up], &h.x)
    }
}

/// Uploaded `gate_up_mma` data: both matrices, and x as [`Prescaled`].
pub struct GateUpMmaDevice<B: Backend> {
    /// The gate matrix on the device (shared: the facade uploads it once for a call's
    /// launches).
    pub gate: Arc<DeviceMatrix<B>>,
    /// The up matrix on the device (shared likewise).
    pub up: Arc<DeviceMatrix<B>>,
    /// x prescaled, with the unscale factors and tables (projections: gate, then up).
    pub ops: Prescaled<B>,
}

impl<B: Backend> GateUpMmaDevice<B> {
    /// Upload both matrices and the activations.
    pub fn upload(
        b: &B,
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
    ) -> Result<Self> {
        Ok(GateUpMmaDevice {
            gate: Arc::new(DeviceMatrix::upload(b, gate)?),
            up: Arc::new(DeviceMatrix::upload(b, up)?),
            ops: Prescaled::upload(b, x, &[gate, up])?,
        })
    }
}

/// The `gate_up_mma` family (fast tier only).
pub struct GateUpMmaFamily;

impl GateUpMmaFamily {
    /// The problem of two matrices and activations (M in 1..=16).
    pub fn problem_of(
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
        tail: Tail,
    ) -> Result<GateUpMmaProblem> {
        GateUpMmaProblem::of(gate, up, x, tail, MAX_M_MMA)
    }
}

impl Family for GateUpMmaFamily {
    const NAME: &'static str = "gate_up_mma";
    const ALIASES: &'static [&'static str] = &["gate_up_mma_mixed"];
    type Problem = GateUpMmaProblem;
    type Variant = MmaVariant;
    type Kernel = GateUpMma;
    type Host = GateUpMmaHost;
    type Expected = GateUpMmaExpected;
    type Device<B: Backend> = GateUpMmaDevice<B>;

    fn kernel(p: &GateUpMmaProblem, variant: MmaVariant) -> GateUpMma {
        let g = &p.gate;
        GateUpMma {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            gate: Proj::of(g),
            up: Proj::of(&p.up),
            m: p.m,
            act: p.act,
            gate_scale: p.gate_scale,
            up_scale: p.up_scale,
            tail: p.tail,
            variant,
        }
    }
    fn tier(_v: &MmaVariant) -> Tier {
        Tier::Fast
    }
    fn default_variant(_p: &GateUpMmaProblem, _tier: Tier) -> MmaVariant {
        // H200 bench (17408 x 5120, k 3/3 and 3/4): 4 simdgroups per tile were 1.1x faster
        // than 8 at M 1, 8 and 16.
        MmaVariant::unsplit(1, 4, 16, MmaXStage::Global)
    }
    fn candidates(p: &GateUpMmaProblem, tier: Tier, quick: bool) -> Vec<MmaVariant> {
        let bf16_ok = bf16_operands_fit(p.act, &[p.gate.code, p.up.code]);
        let mut out = super::reduce_mma::candidates_for(p.m, tier, quick, bf16_ok);
        // Two projections per tile: 61 of the 90 H200 winners took the fewest simdgroups
        // offered (4), and 2 also runs; at M = 16 three keys then took 2, so 1 joins there
        // at the tuned sizes (it won none of the 30 M = 16 keys), and at M = 8, where two
        // mcg k 3 keys at 14336 x 4096 took 2 (`far` takes some out again).
        let tuned = !quick && p.gate.rows >= crate::families::catalog::TUNED_ROWS;
        if !quick {
            let fewer: &[u32] = if p.m >= 8 && tuned { &[2, 1] } else { &[2] };
            super::reduce_mma::add_col_split_twins(&mut out, 4, fewer);
        }
        if tuned {
            out.retain(|v| !far(p.m, v));
        }
        // Paired state windows where either projection's pairs save work (the other's
        // windows in the paired form cost as many operations), at the tuned sizes (as
        // `reduce_mma` offers them).
        let fit = |g: &crate::Geometry| paired_windows_fit(Proj::of(g));
        if tuned && (fit(&p.gate) || fit(&p.up)) {
            add_paired_twins(&mut out);
        }
        // x rounded to f16 once by the host, as `reduce_mma` takes it at the tuned sizes.
        if tuned && p.act != DType::F16 {
            super::reduce_mma::with_host_f16_x(&mut out);
        }
        out
    }
    fn measured_far(p: &GateUpMmaProblem, v: &MmaVariant) -> bool {
        p.gate.rows >= crate::families::catalog::TUNED_ROWS && far(p.m, v)
    }
    fn label(p: &GateUpMmaProblem) -> &'static str {
        // Mixed k pairs are their own label (the tables' and reports' grouping).
        if p.gate.k == p.up.k {
            Self::NAME
        } else {
            Self::ALIASES[0]
        }
    }
    fn key_fields(p: &GateUpMmaProblem) -> String {
        KeyFields {
            act: p.act,
            m: Some(p.m),
            projs: vec![
                (Some("gate"), Proj::of(&p.gate)),
                (Some("up"), Proj::of(&p.up)),
            ],
            tail: Some(p.tail),
        }
        .to_string()
    }
    fn check_key_fields(fields: &str) -> Result<()> {
        KeyFields::check(fields, KeyForm::GATE_UP)
    }
    fn shape(p: &GateUpMmaProblem) -> (usize, usize) {
        (p.gate.rows, p.gate.cols)
    }
    fn source_slice(p: &GateUpMmaProblem) -> Option<String> {
        p.source_slice()
    }
    fn catalog(quick: bool) -> Vec<GateUpMmaProblem> {
        let mut out = Vec::new();
        for (i, c) in crate::families::catalog::verify_cases(quick)
            .into_iter()
            .enumerate()
        {
            let (Ok(gate), Ok(up)) = (c.gate_geometry(), c.up_geometry()) else {
                continue;
            };
            // Both tails on a few cases; M up to 16 on two.
            let tail = if i % 2 == 0 {
                Tail::Exact
            } else {
                Tail::Native
            };
            let m = match i {
                1 => 16,
                4 => 13,
                _ => c.m,
            };
            out.push(GateUpMmaProblem {
                gate,
                up,
                gate_scale: ScaleDType::F16,
                up_scale: if i == 2 {
                    ScaleDType::F32
                } else {
                    ScaleDType::F16
                },
                act: c.act,
                m,
                tail,
            });
        }
        out
    }
    fn random_host(p: &GateUpMmaProblem, seed: u64) -> Result<GateUpMmaHost> {
        let gate = check::try_random_matrix_scaled(p.gate, p.gate_scale, seed)?;
        let up = check::try_random_matrix_scaled(p.up, p.up_scale, seed + 1)?;
        let x = check::random_activations_with_outliers(p.act, p.m as usize, p.gate.cols, seed + 2);
        Ok(GateUpMmaHost { gate, up, x })
    }
    fn expected(_p: &GateUpMmaProblem, _h: &GateUpMmaHost) -> Result<GateUpMmaExpected> {
        Ok(GateUpMmaExpected {
            real: Default::default(),
        })
    }
    fn check(
        p: &GateUpMmaProblem,
        _v: &MmaVariant,
        host: &GateUpMmaHost,
        want: &GateUpMmaExpected,
        got: &[Activations],
    ) -> std::result::Result<String, String> {
        let mid = got.first().ok_or("no output")?;
        let [g, u] = want.real(host)?;
        check::fast_gate_up(mid, g, u, p.tail == Tail::Native)
    }
    fn upload<B: Backend>(
        b: &B,
        _p: &GateUpMmaProblem,
        h: &GateUpMmaHost,
    ) -> Result<GateUpMmaDevice<B>> {
        GateUpMmaDevice::upload(b, &h.gate, &h.up, &h.x)
    }
    fn inputs<'d, B: Backend>(
        d: &'d GateUpMmaDevice<B>,
        v: &MmaVariant,
    ) -> Result<Vec<&'d B::Tensor>> {
        Ok(vec![
            d.ops.x_for(v),
            &d.gate.codes,
            &d.gate.scales,
            d.ops.table(0, &d.gate),
            &d.up.codes,
            &d.up.scales,
            d.ops.table(1, &d.up),
            &d.ops.unscale,
        ])
    }
    fn problem(s: &ProblemSpec) -> Result<GateUpMmaProblem> {
        GateUpMmaProblem::from_spec(s, MAX_M_MMA)
    }
    fn spec(p: &GateUpMmaProblem) -> Option<ProblemSpec> {
        Some(p.spec())
    }
    fn with_m(p: &GateUpMmaProblem, m: u32) -> Option<GateUpMmaProblem> {
        (1..=MAX_M_MMA)
            .contains(&m)
            .then_some(GateUpMmaProblem { m, ..*p })
    }
    fn problems(space: &TuneSpace) -> Result<Vec<GateUpMmaProblem>> {
        GateUpMmaProblem::in_space(space, MAX_M_MMA)
    }
    fn bytes(p: &GateUpMmaProblem) -> usize {
        p.bytes()
    }
}
