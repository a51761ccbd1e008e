//! `reduce`: `y = W x` for M samples (SPEC 4-5), template `templates/reduce.kernel`.

use super::{check_m, DeviceActivations, DeviceMatrix};
use crate::check::{self, RealSums};
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::families::simt::{check_common, grid, Proj, RowScales, Variant, XLayout, MAX_M};
use crate::family::{Family, ProblemSpec, TuneSpace};
use crate::kernel::Backend;
use crate::key::{KeyFields, KeyForm};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::Tier;
use crate::Geometry;
use std::fmt;
use std::sync::Arc;

/// `y = W x` for `m` samples.
#[crate::kernel(
    name = "reduce",
    template = "reduce.kernel",
    grid = grid(self.rows, self.m, &self.variant),
    validate = check_common(self.rows, self.cols, self.t, &[("", self.proj)], self.m, &self.variant, self.shared()),
    shared = self.shared(),
    inputs(
        x: act[self.m, self.cols],
        codes: u32[self.rows, self.cols / self.t, self.words_per_block()],
        scales: scale[self.rows],
        table: f32[self.proj.table_arg_len(self.variant.repr)],
    ),
    outputs(y: act[self.m, self.rows]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    /// Rows R of the matrix (outputs per sample).
    pub rows: usize,
    /// Columns C (inputs per sample).
    pub cols: usize,
    /// Weights per block T.
    pub t: usize,
    /// The matrix's coding (k, L, code).
    pub proj: Proj,
    /// Samples M.
    pub m: u32,
    /// Activation dtype (of x and y).
    pub act: DType,
    /// The row scales it reads (stored, or folded with `1mad`'s divisor).
    pub scale: RowScales,
    /// The tuned variant this specialization renders.
    pub variant: Variant,
}

impl Reduce {
    fn shared(&self) -> usize {
        let table = if self.variant.repr.is_shared() {
            self.proj.table_bytes()
        } else {
            0
        };
        table + self.x_stage_bytes()
    }
    // Template helpers: the projection's, at this kernel's shape.
    fn states(&self) -> usize {
        self.proj.states()
    }
    fn words_per_block(&self) -> usize {
        self.proj.words_per_block(self.t)
    }
    fn words_per_row(&self) -> usize {
        self.proj.words_per_row(self.cols, self.t)
    }
}

impl XLayout for Reduce {
    fn act(&self) -> DType {
        self.act
    }
    fn samples(&self) -> u32 {
        self.m
    }
    fn tuned(&self) -> &Variant {
        &self.variant
    }
    fn x_cols(&self) -> usize {
        self.cols
    }
}

/// A `reduce` problem: one matrix, its scale dtype, the activation dtype and M.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceProblem {
    /// The matrix's geometry (SPEC 1).
    pub geometry: Geometry,
    /// The dtype of its row scales.
    pub scale: ScaleDType,
    /// Activation dtype.
    pub act: DType,
    /// Samples M.
    pub m: u32,
}

impl fmt::Display for ReduceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        write!(
            f,
            "{}x{} T={} {} {} M={}",
            g.rows,
            g.cols,
            g.t,
            Proj::of(g),
            self.act,
            self.m
        )
    }
}

impl ReduceProblem {
    /// The tuning key's fields, the same in both tiers' families (`reduce`, `reduce_mma`).
    pub fn key_fields(&self) -> KeyFields {
        KeyFields {
            act: self.act,
            m: Some(self.m),
            projs: vec![(None, Proj::of(&self.geometry))],
            tail: None,
        }
    }
    /// The candidates offered on top of the catalog's only at the tuned sizes (register
    /// budgets at M = 8, 3 rows per simdgroup, at M = 1 also under a 40-register budget,
    /// the 8-row probe, scalar code words at M = 1, 2 and 8, prefetched and evict-first
    /// code words, lane-interleaved x at M = 2 and 4): part of [`ReduceFamily`]'s space,
    /// and what `cargo xtask bench` times next to the table's choice.
    pub fn tuned_size_candidates(&self, tier: Tier) -> Vec<Variant> {
        let rows = self.geometry.rows;
        let mut out = crate::families::catalog::budget_variants(tier, self.m, rows, &[4]);
        out.extend(crate::families::catalog::three_row_variants(
            tier, self.m, rows,
        ));
        out.extend(crate::families::catalog::one_wave_variants(
            tier, self.m, rows,
        ));
        out.extend(crate::families::catalog::three_row_m8_variants(
            tier, self.m, rows,
        ));
        out.extend(crate::families::catalog::edge_probe_variants(tier, rows));
        out.extend(crate::families::catalog::scalar_word_variants(
            tier,
            self.m,
            rows,
            Proj::of(&self.geometry).code_vec() > 1,
        ));
        out.extend(crate::families::catalog::code_load_variants(
            tier, self.m, rows,
        ));
        out.extend(crate::families::catalog::interleaved_x_variants(
            tier,
            self.m,
            rows,
            self.geometry.cols,
        ));
        out
    }
    /// The source slice of its tuning entries ([`Family::source_slice`]): its code.
    pub fn source_slice(&self) -> Option<String> {
        Some(self.geometry.code.to_string())
    }
    /// The problem of a matrix and activations (their shapes checked against each other),
    /// for a family taking M up to `max_m`.
    pub fn of(w: &QuantizedMatrix, x: &Activations, max_m: u32) -> Result<Self> {
        crate::reference::check_activations(x, w.geometry.cols)?;
        Self::of_samples(w, x.dtype, x.rows, max_m)
    }
    /// The problem of a matrix and `rows` samples of `act` whose shape the caller checked
    /// (activations on a device: [`crate::reference::check_x_shape`]).
    pub fn of_samples(w: &QuantizedMatrix, act: DType, rows: usize, max_m: u32) -> Result<Self> {
        Ok(ReduceProblem {
            geometry: w.geometry,
            scale: w.scale_dtype,
            act,
            m: super::samples_of(rows, max_m)?,
        })
    }
    /// The problem flags describe (`trellis select`), for a family taking M up to `max_m`.
    pub fn from_spec(s: &ProblemSpec, max_m: u32) -> Result<Self> {
        if let Some(ku) = s.ku.filter(|&ku| ku != s.k) {
            return Err(Error::invalid(
                "ku",
                ku,
                "only gate_up has a separate up k (leave it out or equal to --k)",
            ));
        }
        check_m(s.m, max_m)?;
        Ok(ReduceProblem {
            geometry: Geometry::new(s.rows, s.cols, s.t, s.k, s.l, s.code)?,
            scale: ScaleDType::F16,
            act: s.dtype,
            m: s.m,
        })
    }

    /// This problem as flags would describe it.
    pub fn spec(&self) -> ProblemSpec {
        let g = &self.geometry;
        ProblemSpec {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            k: g.k,
            ku: None,
            l: g.l,
            code: g.code,
            dtype: self.act,
            m: self.m,
        }
    }

    /// Every problem of a tuning space with M up to `max_m`, one per key and shape
    /// (shapes that share a size bucket are each measured; the selector takes the nearest).
    pub fn in_space(space: &TuneSpace, max_m: u32) -> Result<Vec<Self>> {
        let mut out: Vec<Self> = Vec::new();
        for shape in &space.shapes {
            for &m in space.ms.iter().filter(|&&m| (1..=max_m).contains(&m)) {
                for &k in &space.ks {
                    for &l in &space.ls {
                        for &code in &space.codes {
                            let p = ReduceProblem {
                                geometry: Geometry::new(
                                    shape.rows, shape.cols, space.t, k, l, code,
                                )?,
                                scale: ScaleDType::F16,
                                act: space.dtype,
                                m,
                            };
                            let key = |q: &Self| {
                                (ReduceFamily::key(q, Tier::Exact), ReduceFamily::shape(q))
                            };
                            if !out.iter().any(|q| key(q) == key(&p)) {
                                out.push(p);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Bytes a launch must move at least: codes, activations in and out, scales.
    pub fn bytes(&self) -> usize {
        let g = &self.geometry;
        g.code_bytes()
            + self.m as usize * (g.cols + g.rows) * self.act.size()
            + g.rows * self.scale.size()
    }
}

/// Host data of a `reduce` instance.
pub struct ReduceHost {
    /// The matrix.
    pub w: QuantizedMatrix,
    /// The activations, `[M, C]`.
    pub x: Activations,
}

/// The reference `y` (SPEC 5 bits) and, computed on first use, the SPEC 7 real sums.
pub struct ReduceExpected {
    /// The reference result, `[M, R]`.
    pub y: Activations,
    real: check::LazyRealSums<1>,
}

impl ReduceExpected {
    /// The SPEC 7 real sums of `host`.
    pub fn real(&self, host: &ReduceHost) -> std::result::Result<&RealSums, String> {
        let [sums] = self.real.get([&host.w], &host.x)?;
        Ok(sums)
    }
}

/// Uploaded `reduce` data.
pub struct ReduceDevice<B: Backend> {
    /// The matrix on the device (shared: the facade uploads it once for a call's launches).
    pub w: Arc<DeviceMatrix<B>>,
    /// The activations on the device.
    pub x: DeviceActivations<B>,
}

impl<B: Backend> ReduceDevice<B> {
    /// Upload a matrix and its activations.
    pub fn upload(b: &B, w: &QuantizedMatrix, x: &Activations) -> Result<Self> {
        Ok(ReduceDevice {
            w: Arc::new(DeviceMatrix::upload(b, w)?),
            x: DeviceActivations::upload(b, x)?,
        })
    }
}

/// The `reduce` family.
pub struct ReduceFamily;

impl ReduceFamily {
    /// The problem of a matrix and activations (their shapes checked against each other).
    pub fn problem_of(w: &QuantizedMatrix, x: &Activations) -> Result<ReduceProblem> {
        ReduceProblem::of(w, x, MAX_M)
    }
}

impl Family for ReduceFamily {
    const NAME: &'static str = "reduce";
    const FAST: Option<&'static str> = Some(super::reduce_mma::ReduceMmaFamily::NAME);
    type Problem = ReduceProblem;
    type Variant = Variant;
    type Kernel = Reduce;
    type Host = ReduceHost;
    type Expected = ReduceExpected;
    type Device<B: Backend> = ReduceDevice<B>;

    fn kernel(p: &ReduceProblem, variant: Variant) -> Reduce {
        let g = &p.geometry;
        Reduce {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            proj: Proj::of(g),
            m: p.m,
            act: p.act,
            scale: RowScales::of(g.code, p.scale, p.act.into(), variant.repr),
            variant,
        }
    }
    fn tier(v: &Variant) -> Tier {
        v.tier
    }
    fn default_variant(_p: &ReduceProblem, tier: Tier) -> Variant {
        Variant {
            tier,
            ..Variant::default()
        }
    }
    fn candidates(p: &ReduceProblem, tier: Tier, quick: bool) -> Vec<Variant> {
        let mut out = crate::families::catalog::variants(tier, p.m, quick);
        out.extend(p.tuned_size_candidates(tier));
        out
    }
    fn key_fields(p: &ReduceProblem) -> String {
        p.key_fields().to_string()
    }
    fn check_key_fields(fields: &str) -> Result<()> {
        KeyFields::check(fields, KeyForm::MATVEC)
    }
    fn shape(p: &ReduceProblem) -> (usize, usize) {
        (p.geometry.rows, p.geometry.cols)
    }
    fn source_slice(p: &ReduceProblem) -> Option<String> {
        p.source_slice()
    }
    fn catalog(quick: bool) -> Vec<ReduceProblem> {
        crate::families::catalog::verify_cases(quick)
            .iter()
            .filter_map(|c| {
                Some(ReduceProblem {
                    geometry: c.gate_geometry().ok()?,
                    scale: ScaleDType::F16,
                    act: c.act,
                    m: c.m,
                })
            })
            .collect()
    }
    fn random_host(p: &ReduceProblem, seed: u64) -> Result<ReduceHost> {
        let w = check::try_random_matrix_scaled(p.geometry, p.scale, seed)?;
        let x =
            check::random_activations_with_outliers(p.act, p.m as usize, p.geometry.cols, seed + 2);
        Ok(ReduceHost { w, x })
    }
    fn expected(_p: &ReduceProblem, host: &ReduceHost) -> Result<ReduceExpected> {
        Ok(ReduceExpected {
            y: crate::reference::reduce(&host.w, &host.x)?,
            real: Default::default(),
        })
    }
    fn check(
        _p: &ReduceProblem,
        v: &Variant,
        host: &ReduceHost,
        want: &ReduceExpected,
        got: &[Activations],
    ) -> std::result::Result<String, String> {
        let y = got.first().ok_or("no output")?;
        match v.tier {
            Tier::Exact => check::bits(y, &want.y),
            Tier::Fast => check::fast_reduce(y, want.real(host)?),
        }
    }
    fn upload<B: Backend>(b: &B, _p: &ReduceProblem, host: &ReduceHost) -> Result<ReduceDevice<B>> {
        ReduceDevice::upload(b, &host.w, &host.x)
    }
    fn inputs<'d, B: Backend>(d: &'d ReduceDevice<B>, v: &Variant) -> Result<Vec<&'d B::Tensor>> {
        Ok(vec![
            d.x.for_variant(v)?,
            &d.w.codes,
            d.w.row_scales(d.x.elem(), v.repr),
            d.w.table(v.repr),
        ])
    }
    fn problem(s: &ProblemSpec) -> Result<ReduceProblem> {
        ReduceProblem::from_spec(s, MAX_M)
    }
    fn spec(p: &ReduceProblem) -> Option<ProblemSpec> {
        Some(p.spec())
    }
    fn with_m(p: &ReduceProblem, m: u32) -> Option<ReduceProblem> {
        (1..=MAX_M)
            .contains(&m)
            .then_some(ReduceProblem { m, ..*p })
    }
    fn problems(space: &TuneSpace) -> Result<Vec<ReduceProblem>> {
        ReduceProblem::in_space(space, MAX_M)
    }
    fn bytes(p: &ReduceProblem) -> usize {
        p.bytes()
    }
}
