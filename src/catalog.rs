//! Every specialization worth building: the list `xtask render`, `xtask verify` and the
//! Metal shim check walk, and the candidate space the tuner draws from.

use crate::codes::Code;
use crate::dtype::{DType, ScaleDType};
use crate::error::Result;
use crate::kernel::{Dialect, KernelSpec, Launch, Rendered, TensorSpec};
use crate::kernels::{
    Expand, GateUp, MStrategy, Proj, Reduce, Representation, Tail, Tier, Variant, XStage,
    ROWS_PER_SIMD,
};

/// One specialization of any of this crate's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyKernel {
    Reduce(Reduce),
    GateUp(GateUp),
    Expand(Expand),
}

/// Call the same method on whichever kernel `$k` holds.
macro_rules! each {
    ($k:expr, |$s:ident| $e:expr) => {
        match $k {
            AnyKernel::Reduce($s) => $e,
            AnyKernel::GateUp($s) => $e,
            AnyKernel::Expand($s) => $e,
        }
    };
}

impl AnyKernel {
    /// Family name (`reduce`, `gate_up`, `gate_up_mixed`, `expand`).
    pub fn family(&self) -> &'static str {
        match self {
            AnyKernel::Reduce(_) => "reduce",
            AnyKernel::GateUp(k) => k.family_name(),
            AnyKernel::Expand(_) => "expand",
        }
    }
    /// Unique symbol.
    pub fn symbol(&self) -> String {
        each!(self, |k| k.symbol())
    }
    /// Render for a dialect.
    pub fn render(&self, d: Dialect) -> Result<Rendered> {
        each!(self, |k| k.render(d))
    }
    /// Validate the specialization.
    pub fn validate(&self) -> Result<()> {
        each!(self, |k| k.validate())
    }
    /// Inputs in signature order.
    pub fn inputs(&self) -> Vec<TensorSpec> {
        each!(self, |k| k.inputs())
    }
    /// Outputs in signature order.
    pub fn outputs(&self) -> Vec<TensorSpec> {
        each!(self, |k| k.outputs())
    }
    /// The tunable part.
    pub fn variant(&self) -> Variant {
        each!(self, |k| k.variant)
    }
    /// A launch request (for `Backend::precompile`).
    pub fn launch_request<'r>(
        &self,
        render: &'r dyn Fn(Dialect) -> Result<Rendered>,
    ) -> Launch<'r> {
        each!(self, |k| k.launch_request(render))
    }
}

/// Launch shapes and representations the tuner and verifier enumerate for a tier.
///
/// x read per weight (from global memory, or staged in threadgroup memory) goes with one
/// row per simdgroup; x loaded per run into registers goes with 1, 2 or 4 rows per
/// simdgroup (one x load serves them all). The quick catalog (CI, 2 cores) keeps one
/// group size and, for registers, one rows-per-simdgroup value per representation.
pub fn variants(tier: Tier, m: u32, quick: bool) -> Vec<Variant> {
    let mut out = Vec::new();
    let rpgs: &[u32] = if quick { &[4] } else { &[4, 16] };
    // With x in registers a group stages nothing; on the H200 4 simdgroups beat 8 in all
    // but one prototype case, so 2 is offered too (a winner at a bound of the space
    // means the space should widen).
    let reg_rpgs: &[u32] = if quick { &[4] } else { &[2, 4, 8] };
    // Quick: one rows-per-simdgroup value per representation, so the three of them and
    // the three representations are each covered once with x in registers.
    let reg_rps = |repr: Representation| -> &'static [u32] {
        match (quick, repr) {
            (false, _) => &ROWS_PER_SIMD,
            (true, Representation::Inline) => &[4],
            (true, Representation::GlobalTable) => &[2],
            (true, Representation::SharedTable) => &[1],
        }
    };
    let strategies: &[MStrategy] = if m == 1 {
        &[MStrategy::SharedDecode]
    } else {
        &[MStrategy::SharedDecode, MStrategy::PerSample]
    };
    for repr in Representation::ALL {
        for &m_strategy in strategies {
            for x_stage in XStage::ALL {
                let (rpgs, rpss): (&[u32], &[u32]) = if x_stage.is_registers() {
                    (reg_rpgs, reg_rps(repr))
                } else {
                    (rpgs, &[1])
                };
                for &rows_per_group in rpgs {
                    for &rows_per_simd in rpss {
                        out.push(Variant {
                            repr,
                            m_strategy,
                            rows_per_group,
                            x_stage,
                            tier,
                            rows_per_simd,
                        });
                    }
                }
            }
        }
    }
    out
}

/// One verify case: a gate (or the only) matrix, an up matrix, their shared shape, the
/// activation dtype and M.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub gate: Proj,
    pub up: Proj,
    pub rows: usize,
    pub cols: usize,
    pub t: usize,
    pub act: DType,
    pub m: u32,
}

impl Case {
    /// Whether a specialization belongs to this case.
    pub fn covers(&self, k: &AnyKernel) -> bool {
        let c = self;
        match k {
            AnyKernel::Reduce(r) => {
                (r.proj, r.rows, r.cols, r.t, r.act, r.m)
                    == (c.gate, c.rows, c.cols, c.t, c.act, c.m)
            }
            AnyKernel::GateUp(g) => {
                (g.gate, g.up, g.rows, g.cols, g.t, g.act, g.m)
                    == (c.gate, c.up, c.rows, c.cols, c.t, c.act, c.m)
            }
            AnyKernel::Expand(e) => {
                (e.proj, e.rows, e.cols, e.t, e.act) == (c.gate, c.rows, c.cols, c.t, c.act)
            }
        }
    }
}

/// The matrices `xtask verify` and `xtask render` cover: every code, k 1..8 spread over
/// L 8..16, T 32..256, odd row counts, all three dtypes, M up to 8.
#[rustfmt::skip]
pub fn verify_cases(quick: bool) -> Vec<Case> {
    let p = |k, l, code| Proj { k, l, code };
    let case = |gate, up, rows, cols, t, act, m| Case { gate, up, rows, cols, t, act, m };
    //              gate                       up                         rows  cols   T    dtype       M
    let mut cases = vec![
        case(p(3, 12, Code::OneMad),    p(3, 12, Code::OneMad),    37,  512,  256, DType::Bf16, 1),
        case(p(2, 12, Code::OneMad),    p(4, 12, Code::OneMad),    19,  256,  128, DType::Bf16, 4),
        case(p(4, 16, Code::ThreeInst), p(3, 16, Code::ThreeInst), 33,  256,  64,  DType::F16,  2),
        case(p(1, 8, Code::Mcg),        p(2, 9, Code::Mcg),        7,   96,   32,  DType::F32,  3),
        case(p(5, 13, Code::Mul1),      p(5, 13, Code::Mul1),      21,  320,  160, DType::Bf16, 8),
        case(p(8, 12, Code::Lut),       p(6, 11, Code::OneMad),    9,   512,  256, DType::Bf16, 8),
    ];
    if !quick {
        cases.extend([
            case(p(7, 16, Code::OneMad), p(7, 16, Code::OneMad),    11,  256,  256, DType::F16,  5),
            case(p(6, 10, Code::Mul1),   p(2, 10, Code::ThreeInst), 65,  384,  128, DType::F32,  8),
            case(p(2, 14, Code::Mcg),    p(4, 14, Code::Mcg),       130, 1024, 256, DType::Bf16, 1),
        ]);
    }
    cases
}

/// Every specialization of the verify/render catalog for a dialect.
pub fn specializations(dialect: Dialect, quick: bool) -> Vec<AnyKernel> {
    let mut out = Vec::new();
    let tails: &[Tail] = if dialect == Dialect::Cpu {
        &[Tail::Exact]
    } else {
        &[Tail::Exact, Tail::Native]
    };
    for Case {
        gate: gp,
        up,
        rows,
        cols,
        t,
        act,
        m,
    } in verify_cases(quick)
    {
        for tier in [Tier::Exact, Tier::Fast] {
            for variant in variants(tier, m, quick) {
                let reduce = Reduce {
                    rows,
                    cols,
                    t,
                    proj: gp,
                    m,
                    act,
                    scale: ScaleDType::F16,
                    variant,
                };
                out.push(AnyKernel::Reduce(reduce));
                for &tail in tails {
                    let g = GateUp {
                        rows,
                        cols,
                        t,
                        gate: gp,
                        up,
                        m,
                        act,
                        gate_scale: ScaleDType::F16,
                        up_scale: ScaleDType::F16,
                        tail,
                        variant,
                    };
                    out.push(AnyKernel::GateUp(g));
                }
                if tier == Tier::Exact
                    && variant.m_strategy == MStrategy::SharedDecode
                    && variant.x_stage == XStage::Global
                {
                    out.push(AnyKernel::Expand(Expand {
                        rows,
                        cols,
                        t,
                        proj: gp,
                        act,
                        scale: ScaleDType::F16,
                        variant,
                    }));
                }
            }
        }
    }
    out.retain(|k| k.validate().is_ok());
    out
}
