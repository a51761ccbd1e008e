//! `gate_up`: the fused SwiGLU `mid = silu(G x) * (U x)` (SPEC 6), template
//! `templates/gate_up.kernel`; listed as `gate_up_mixed` when the two k differ.

use super::{check_m, DeviceActivations, DeviceMatrix};
use crate::check::{self, RealSums};
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::families::simt::{check_common, grid, Proj, RowScales, Variant, XLayout, MAX_M};
use crate::family::{Family, ProblemSpec, TuneSpace};
use crate::kernel::Backend;
use crate::key::{KeyFields, KeyForm};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::{Tail, Tier};
use crate::Geometry;
use std::fmt;
use std::sync::Arc;

/// `mid = silu(G x) * (U x)`; named `gate_up_mixed` in listings when the two k differ.
#[crate::kernel(
    name = "gate_up",
    template = "gate_up.kernel",
    grid = grid(self.rows, self.m, &self.variant),
    validate = self.check(),
    shared = self.shared(),
    inputs(
        x: act[self.m, self.cols],
        gcodes: u32[self.rows, self.cols / self.t, self.gate_words_per_block()],
        gscales: gate_scale[self.rows],
        gtable: f32[self.gate.table_arg_len(self.variant.repr)],
        ucodes: u32[self.rows, self.cols / self.t, self.up_words_per_block()],
        uscales: up_scale[self.rows],
        utable: f32[self.up.table_arg_len(self.variant.repr)],
    ),
    outputs(mid: act[self.m, self.rows]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GateUp {
    /// Rows R of each projection.
    pub rows: usize,
    /// Columns C (inputs per sample).
    pub cols: usize,
    /// Weights per block T (shared by both projections).
    pub t: usize,
    /// The gate projection's coding.
    pub gate: Proj,
    /// The up projection's coding.
    pub up: Proj,
    /// Samples M.
    pub m: u32,
    /// Activation dtype (of x and mid).
    pub act: DType,
    /// The row scales each projection's kernel reads (stored, or folded with `1mad`'s
    /// divisor).
    pub gate_scale: RowScales,
    /// The up projection's row scales (as `gate_scale`).
    pub up_scale: RowScales,
    /// How the SwiGLU of the two sums is computed.
    pub tail: Tail,
    /// The tuned variant this specialization renders.
    pub variant: Variant,
}

impl GateUp {
    fn check(&self) -> Result<()> {
        check_common(
            self.rows,
            self.cols,
            self.t,
            &[("gate", self.gate), ("up", self.up)],
            self.m,
            &self.variant,
            self.shared(),
        )
    }
    fn shared(&self) -> usize {
        let tables = if self.variant.repr.is_shared() {
            self.gate.table_bytes() + self.up.table_bytes()
        } else {
            0
        };
        tables + self.x_stage_bytes()
    }
    // Template helpers: each projection's, at this kernel's shape.
    fn gate_states(&self) -> usize {
        self.gate.states()
    }
    fn up_states(&self) -> usize {
        self.up.states()
    }
    fn gate_words_per_block(&self) -> usize {
        self.gate.words_per_block(self.t)
    }
    fn up_words_per_block(&self) -> usize {
        self.up.words_per_block(self.t)
    }
    fn gate_words_per_row(&self) -> usize {
        self.gate.words_per_row(self.cols, self.t)
    }
    fn up_words_per_row(&self) -> usize {
        self.up.words_per_row(self.cols, self.t)
    }
}

impl XLayout for GateUp {
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

/// A `gate_up` problem: the two matrices' geometry (same rows, cols and, for the fused
/// kernels, T), their scale
/// dtypes, the activation dtype, M and the tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateUpProblem {
    /// The gate matrix's geometry.
    pub gate: Geometry,
    /// The up matrix's geometry.
    pub up: Geometry,
    /// The dtype of the gate's row scales.
    pub gate_scale: ScaleDType,
    /// The dtype of the up's row scales.
    pub up_scale: ScaleDType,
    /// Activation dtype.
    pub act: DType,
    /// Samples M.
    pub m: u32,
    /// The SwiGLU tail.
    pub tail: Tail,
}

impl fmt::Display for GateUpProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.gate;
        write!(
            f,
            "{}x{} T={} gate {} up {} {} M={} tail={}",
            g.rows,
            g.cols,
            g.t,
            Proj::of(g),
            Proj::of(&self.up),
            self.act,
            self.m,
            self.tail
        )
    }
}

impl GateUpProblem {
    /// The source slice of its tuning entries ([`Family::source_slice`]): its codes
    /// (one name when both projections share it).
    pub fn source_slice(&self) -> Option<String> {
        let (g, u) = (self.gate.code.to_string(), self.up.code.to_string());
        Some(if g == u { g } else { format!("{g}+{u}") })
    }
    /// The problem of a gate/up pair and activations (their shapes checked against each
    /// other), for a family taking M up to `max_m`.
    pub fn of(
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
        tail: Tail,
        max_m: u32,
    ) -> Result<Self> {
        crate::reference::check_activations(x, gate.geometry.cols)?;
        Self::of_samples(gate, up, x.dtype, x.rows, tail, max_m)
    }
    /// The problem of a gate/up pair and `rows` samples of `act` whose shape the caller
    /// checked (activations on a device: [`crate::reference::check_x_shape`]).
    pub fn of_samples(
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        act: DType,
        rows: usize,
        tail: Tail,
        max_m: u32,
    ) -> Result<Self> {
        check_fused_pair(gate, up)?;
        Ok(GateUpProblem {
            gate: gate.geometry,
            up: up.geometry,
            gate_scale: gate.scale_dtype,
            up_scale: up.scale_dtype,
            act,
            m: super::samples_of(rows, max_m)?,
            tail,
        })
    }
    /// The problem flags describe (`trellis select`; up takes `ku`, else `k`), for a
    /// family taking M up to `max_m`.
    pub fn from_spec(s: &ProblemSpec, max_m: u32) -> Result<Self> {
        check_m(s.m, max_m)?;
        let gate = Geometry::new(s.rows, s.cols, s.t, s.k, s.l, s.code)?;
        let ku = s.ku.unwrap_or(s.k);
        let up = Geometry::new(s.rows, s.cols, s.t, ku, s.l, s.code).map_err(|e| match e {
            Error::Invalid {
                field,
                value,
                reason,
            } if field == "k" => Error::Invalid {
                field: "ku".into(),
                value,
                reason,
            },
            e => e,
        })?;
        Ok(GateUpProblem {
            gate,
            up,
            gate_scale: ScaleDType::F16,
            up_scale: ScaleDType::F16,
            act: s.dtype,
            m: s.m,
            tail: Tail::Exact,
        })
    }

    /// This problem as flags would describe it.
    pub fn spec(&self) -> ProblemSpec {
        let g = &self.gate;
        ProblemSpec {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            k: g.k,
            ku: Some(self.up.k),
            l: g.l,
            code: g.code,
            dtype: self.act,
            m: self.m,
        }
    }

    /// Every problem of a tuning space's gate/up shapes with M up to `max_m`, one per key
    /// and shape:
    /// the same-k pairs first, then each mixed pair `(k, k + 1)` whose two k are both in
    /// the space (Qwen3-14B's 3/4).
    pub fn in_space(space: &TuneSpace, max_m: u32) -> Result<Vec<Self>> {
        let same = space.ks.iter().map(|&k| (k, k));
        let mixed = space
            .ks
            .iter()
            .filter(|&&k| space.ks.contains(&(k + 1)))
            .map(|&k| (k, k + 1));
        let pairs: Vec<(u32, u32)> = same.chain(mixed).collect();
        let mut out: Vec<Self> = Vec::new();
        for &(kg, ku) in &pairs {
            for shape in space.shapes.iter().filter(|s| s.gate_up) {
                for &m in space.ms.iter().filter(|&&m| (1..=max_m).contains(&m)) {
                    for &l in &space.ls {
                        for &code in &space.codes {
                            let geometry =
                                |k| Geometry::new(shape.rows, shape.cols, space.t, k, l, code);
                            let p = GateUpProblem {
                                gate: geometry(kg)?,
                                up: geometry(ku)?,
                                gate_scale: ScaleDType::F16,
                                up_scale: ScaleDType::F16,
                                act: space.dtype,
                                m,
                                tail: Tail::Exact,
                            };
                            let key = |q: &Self| {
                                (GateUpFamily::key(q, Tier::Exact), GateUpFamily::shape(q))
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

    /// Bytes a launch must move at least: both projections' codes, activations, scales.
    pub fn bytes(&self) -> usize {
        let (g, u) = (&self.gate, &self.up);
        g.code_bytes()
            + u.code_bytes()
            + self.m as usize * (g.cols + g.rows) * self.act.size()
            + g.rows * (self.gate_scale.size() + self.up_scale.size())
    }
}

/// Host data of a `gate_up` instance.
pub struct GateUpHost {
    /// The gate matrix.
    pub gate: QuantizedMatrix,
    /// The up matrix.
    pub up: QuantizedMatrix,
    /// The activations, `[M, C]`.
    pub x: Activations,
}

/// The reference `mid` (SPEC 6 bits) and, computed on first use, the SPEC 7 real sums.
pub struct GateUpExpected {
    /// The reference result, `[M, R]`.
    pub mid: Activations,
    /// The exact projections `g` and `u` it was computed from (SPEC 5), for the native
    /// tail's tolerance.
    pub proj: [Activations; 2],
    real: check::LazyRealSums<2>,
}

impl GateUpExpected {
    /// The SPEC 7 real sums of the gate and up projections.
    pub fn real(&self, h: &GateUpHost) -> std::result::Result<&[RealSums; 2], String> {
        self.real.get([&h.gate, &h.up], &h.x)
    }
}

/// Gate and up as one fused launch takes them: [`crate::reference::check_pair`], and one
/// T (the kernels read both code streams with it).
fn check_fused_pair(gate: &QuantizedMatrix, up: &QuantizedMatrix) -> Result<()> {
    crate::reference::check_pair(gate, up)?;
    if gate.geometry.t != up.geometry.t {
        return Err(Error::invalid(
            "up.T",
            up.geometry.t,
            format!(
                "the fused gate_up kernels read both matrices with one T; gate has {} \
                 (ops::gate_up runs such a pair on host activations, as two reduce launches)",
                gate.geometry.t
            ),
        ));
    }
    Ok(())
}

/// Uploaded `gate_up` data.
pub struct GateUpDevice<B: Backend> {
    /// The gate matrix on the device (shared: the facade uploads it once for a call's
    /// launches).
    pub gate: Arc<DeviceMatrix<B>>,
    /// The up matrix on the device (shared likewise).
    pub up: Arc<DeviceMatrix<B>>,
    /// The activations on the device.
    pub x: DeviceActivations<B>,
}

impl<B: Backend> GateUpDevice<B> {
    /// Upload both matrices and the activations.
    pub fn upload(
        b: &B,
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
    ) -> Result<Self> {
        Ok(GateUpDevice {
            gate: Arc::new(DeviceMatrix::upload(b, gate)?),
            up: Arc::new(DeviceMatrix::upload(b, up)?),
            x: DeviceActivations::upload(b, x)?,
        })
    }
}

/// The `gate_up` family.
pub struct GateUpFamily;

impl GateUpFamily {
    /// The problem of a gate/up pair and activations (their shapes checked against each
    /// other).
    pub fn problem_of(
        gate: &QuantizedMatrix,
        up: &QuantizedMatrix,
        x: &Activations,
        tail: Tail,
    ) -> Result<GateUpProblem> {
        GateUpProblem::of(gate, up, x, tail, MAX_M)
    }
}

impl Family for GateUpFamily {
    const NAME: &'static str = "gate_up";
    const ALIASES: &'static [&'static str] = &["gate_up_mixed"];
    const FAST: Option<&'static str> = Some(super::gate_up_mma::GateUpMmaFamily::NAME);
    type Problem = GateUpProblem;
    type Variant = Variant;
    type Kernel = GateUp;
    type Host = GateUpHost;
    type Expected = GateUpExpected;
    type Device<B: Backend> = GateUpDevice<B>;

    fn kernel(p: &GateUpProblem, variant: Variant) -> GateUp {
        let g = &p.gate;
        GateUp {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            gate: Proj::of(g),
            up: Proj::of(&p.up),
            m: p.m,
            act: p.act,
            gate_scale: RowScales::of(g.code, p.gate_scale, p.act.into(), variant.repr),
            up_scale: RowScales::of(p.up.code, p.up_scale, p.act.into(), variant.repr),
            tail: p.tail,
            variant,
        }
    }
    fn tier(v: &Variant) -> Tier {
        v.tier
    }
    fn default_variant(_p: &GateUpProblem, tier: Tier) -> Variant {
        Variant {
            tier,
            ..Variant::default()
        }
    }
    fn candidates(p: &GateUpProblem, tier: Tier, quick: bool) -> Vec<Variant> {
        let mut out = crate::families::catalog::variants(tier, p.m, quick);
        out.extend(crate::families::catalog::budget_variants(
            tier,
            p.m,
            p.gate.rows,
            &[4, 2],
        ));
        out.extend(crate::families::catalog::three_row_variants(
            tier,
            p.m,
            p.gate.rows,
        ));
        // Scalar code words at M 1 and 2 only: at M 8 its 2-row sets keep their registers.
        if p.m <= 2 {
            let vector_words = [&p.gate, &p.up].iter().any(|g| Proj::of(g).code_vec() > 1);
            out.extend(crate::families::catalog::scalar_word_variants(
                tier,
                p.m,
                p.gate.rows,
                vector_words,
            ));
        }
        out
    }
    fn label(p: &GateUpProblem) -> &'static str {
        // Mixed k pairs are their own label (the tables' and reports' grouping).
        if p.gate.k == p.up.k {
            Self::NAME
        } else {
            Self::ALIASES[0]
        }
    }
    fn key_fields(p: &GateUpProblem) -> String {
        KeyFields {
            act: p.act,
            m: Some(p.m),
            projs: vec![
                (Some("gate"), Proj::of(&p.gate)),
                (Some("up"), Proj::of(&p.up)),
            ],
            tail: None,
        }
        .to_string()
    }
    fn check_key_fields(fields: &str) -> Result<()> {
        let form = KeyForm {
            tail: false,
            ..KeyForm::GATE_UP
        };
        KeyFields::check(fields, form)
    }
    fn shape(p: &GateUpProblem) -> (usize, usize) {
        (p.gate.rows, p.gate.cols)
    }
    fn source_slice(p: &GateUpProblem) -> Option<String> {
        p.source_slice()
    }
    fn catalog(quick: bool) -> Vec<GateUpProblem> {
        let mut out = Vec::new();
        for c in crate::families::catalog::verify_cases(quick) {
            let (Ok(gate), Ok(up)) = (c.gate_geometry(), c.up_geometry()) else {
                continue;
            };
            for tail in [Tail::Exact, Tail::Native] {
                out.push(GateUpProblem {
                    gate,
                    up,
                    gate_scale: ScaleDType::F16,
                    up_scale: ScaleDType::F16,
                    act: c.act,
                    m: c.m,
                    tail,
                });
            }
        }
        out
    }
    fn random_host(p: &GateUpProblem, seed: u64) -> Result<GateUpHost> {
        let gate = check::try_random_matrix_scaled(p.gate, p.gate_scale, seed)?;
        let up = check::try_random_matrix_scaled(p.up, p.up_scale, seed + 1)?;
        let x = check::random_activations(p.act, p.m as usize, p.gate.cols, seed + 2);
        Ok(GateUpHost { gate, up, x })
    }
    fn expected(_p: &GateUpProblem, h: &GateUpHost) -> Result<GateUpExpected> {
        crate::reference::check_pair(&h.gate, &h.up)?;
        let g = crate::reference::reduce(&h.gate, &h.x)?;
        let u = crate::reference::reduce(&h.up, &h.x)?;
        Ok(GateUpExpected {
            mid: crate::reference::swiglu_tail(&g, &u)?,
            proj: [g, u],
            real: Default::default(),
        })
    }
    fn check(
        p: &GateUpProblem,
        v: &Variant,
        host: &GateUpHost,
        want: &GateUpExpected,
        got: &[Activations],
    ) -> std::result::Result<String, String> {
        let mid = got.first().ok_or("no output")?;
        match (v.tier, p.tail) {
            (Tier::Exact, Tail::Exact) => check::bits(mid, &want.mid),
            // SPEC 6: a native tail against the exact one, within its tolerance.
            (Tier::Exact, Tail::Native) => {
                let [g, u] = &want.proj;
                check::native_gate_up(mid, &want.mid, g, u)
            }
            // `mid` only: the kernel writes no `g` and `u` (SPEC 7 bounds them too). Their
            // sums are `reduce.kernel`'s fast branch line for line (checked there); the
            // fast tier the facade runs is `gate_up_mma`, whose parts are checked
            // (`GateUpMmaParts`).
            (Tier::Fast, tail) => {
                let [g, u] = want.real(host)?;
                check::fast_gate_up(mid, g, u, tail == Tail::Native)
            }
        }
    }
    fn upload<B: Backend>(b: &B, _p: &GateUpProblem, h: &GateUpHost) -> Result<GateUpDevice<B>> {
        GateUpDevice::upload(b, &h.gate, &h.up, &h.x)
    }
    fn inputs<'d, B: Backend>(d: &'d GateUpDevice<B>, v: &Variant) -> Result<Vec<&'d B::Tensor>> {
        Ok(vec![
            d.x.for_variant(v)?,
            &d.gate.codes,
            d.gate.row_scales(d.x.elem(), v.repr),
            d.gate.table(v.repr),
            &d.up.codes,
            d.up.row_scales(d.x.elem(), v.repr),
            d.up.table(v.repr),
        ])
    }
    fn problem(s: &ProblemSpec) -> Result<GateUpProblem> {
        GateUpProblem::from_spec(s, MAX_M)
    }
    fn spec(p: &GateUpProblem) -> Option<ProblemSpec> {
        Some(p.spec())
    }
    fn with_m(p: &GateUpProblem, m: u32) -> Option<GateUpProblem> {
        (1..=MAX_M)
            .contains(&m)
            .then_some(GateUpProblem { m, ..*p })
    }
    fn problems(space: &TuneSpace) -> Result<Vec<GateUpProblem>> {
        GateUpProblem::in_space(space, MAX_M)
    }
    fn bytes(p: &GateUpProblem) -> usize {
        p.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::preset;

    /// The tune space covers Qwen3-14B's mixed gate/up (3/4) after every same-k pair.
    #[test]
    fn tune_space_has_same_k_then_mixed_pairs() {
        let space = TuneSpace {
            shapes: preset("qwen3-14b").expect("preset"),
            ms: vec![1, 8],
            ks: vec![2, 3, 4],
            ls: vec![12],
            codes: vec![crate::Code::OneMad],
            dtype: DType::Bf16,
            t: 256,
        };
        let problems = GateUpProblem::in_space(&space, MAX_M).expect("space");
        let pairs: Vec<(u32, u32)> = problems.iter().map(|p| (p.gate.k, p.up.k)).collect();
        // One gate/up shape, 2 M: 3 same-k pairs, then (2, 3) and (3, 4).
        let expected: Vec<(u32, u32)> = [(2, 2), (3, 3), (4, 4), (2, 3), (3, 4)]
            .iter()
            .flat_map(|&pair| [pair, pair])
            .collect();
        assert_eq!(pairs, expected);
        let labels: Vec<&str> = problems.iter().map(GateUpFamily::label).collect();
        assert_eq!(labels[..6], ["gate_up"; 6]);
        assert_eq!(labels[6..], ["gate_up_mixed"; 4]);
        assert!(problems
            .iter()
            .all(|p| p.gate.rows == 17408 && p.gate.cols == 5120));
    }
}
