//! The matrix-unit vocabulary the fast tier's families share (`reduce_mma`,
//! `gate_up_mma`), as [`crate::families::simt`] is the SIMT one: the tunable [`MmaVariant`], a
//! projection as the template sees it ([`MmaProj`]) and [`MmaLayout`], what
//! `templates/reduce_mma.kernel` asks of a declaration and the launch shape, checks and
//! threadgroup memory that follow. The candidate space and the host's prescaling are
//! `reduce_mma`'s (`families/reduce_mma/`), which `gate_up_mma` extends.
//!
//! The kernels: CUDA `mma.sync` m16n8k16, Metal `simdgroup_matrix`, the CPU an exact
//! emulation of the PTX fragments.
//!
//! A simdgroup owns a tile of 16 rows: the weights are the A operand (16 rows x 16
//! k-slots), the samples B's 8 columns (M 9..16: two B per A). Lane `4 g + t` decodes a
//! run of 32 consecutive weights of rows `g` and `g + 8` per step (128 columns per
//! step and tile). Operands are f16 by default: 1mad feeds its centred byte sums (exact;
//! the divisor and the row scale go to the f32 epilogue), 3inst/mcg the two f16 halves of
//! the masked word as two k-slots against x duplicated (the matrix unit adds them),
//! mul1 and lut their values rounded to f16. With bf16 activations, codes of one k-slot
//! per weight may take bf16 operands instead ([`MmaOperands::Bf16`]: x as it is, the
//! value rounded to bf16). B fragments are read from x in device memory
//! (`x_stage = global`) or from its copy staged once per threadgroup in threadgroup memory
//! (`shared`; `shared_dup` stores each value twice, the B words of 3inst/mcg). The host
//! takes a power of two out of each sample and out of each lut table, which the epilogue
//! puts back ([`Prescaled`](crate::families::reduce_mma::Prescaled)), so f16's range holds any magnitude, and in the same pass
//! rounds x to f16 for the variants that take it so ([`MmaVariant::x_f16`], what the
//! tuned sizes offer); the others convert x as they read or stage it. Accumulation is f32.
//! Results meet SPEC 7 (v2).
//!
//! Measured on the H200 (`tuning/reports/nvidia-h200-mma-bench.md`): the 1mad loop is
//! 5.4 instructions per weight (window SHF + LOP3, LCG IMAD, byte-sum IDP.4A, half a
//! pack and half a centring HADD2, the rest loads and mma), bound by the integer ALU and
//! FMA-heavy pipes together. 3inst/mcg cut a window that lies inside one word with a
//! multiply by a power of two and one shift (`MMA_STATE`, `templates/mma.h`), moving
//! half of their window work from the ALU pipe, which bound them, to the FMA pipe.
//! Paired state windows (`MmaVariant::paired_windows`) take 1mad's loop at k 2 L 16 to 5.0
//! (one window, masked and shifted, for two states), for 56 registers instead of 48.

use crate::codes::Code;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::families::simt::{is_default, Proj, Representation, MAX_SHARED_BYTES};
use crate::kernel::{Dialect, Elem, Grid, Limits};
use crate::numerics::Tail;
use crate::Geometry;
use std::fmt;

/// Largest M this family takes (two B operands per A).
pub const MAX_M_MMA: u32 = 16;

/// The tunable part of a `reduce_mma` kernel (fast tier only). `Hash` and `Debug` leave
/// the fields added later (`paired_windows`, `x_f16`, `batch_stage`, `opt_in_shared`,
/// `early_words`) out while they are at their defaults, as the tables do (serde), so the
/// variants that existed before each keep their kernel symbols and their entries' space
/// hashes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmaVariant {
    /// 16-row tiles per threadgroup.
    pub row_tiles: u32,
    /// Simdgroups sharing one tile, each taking every `col_split`-th step of 128
    /// columns; their sums meet in threadgroup memory.
    pub col_split: u32,
    /// Samples per grid slice: 8 (one B per A; M > 8 adds slices) or 16 (two B per A).
    pub m_tile: u32,
    /// Where the B fragments come from: x converted per fragment from device memory, or
    /// x of the slice converted once per threadgroup into threadgroup memory.
    #[serde(default)]
    pub x_stage: MmaXStage,
    /// Threadgroups sharing one tile's columns (split-K, `reduce_mma` only): each adds
    /// up its share of the steps, writes its partial sums to the `ws` output, and the last
    /// to finish adds the partials in slice order (deterministic) and writes `y`. More,
    /// smaller threadgroups even out the last wave and fill the GPU at few row tiles.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub k_split: u32,
    /// Registers per thread the CUDA compiler may use (0: its own choice). Just above 48
    /// an 8-simdgroup threadgroup loses a fifth of its residency (5 -> 4 per SM); a budget
    /// trades a few spills for the occupancy. The other dialects ignore it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub max_registers: u32,
    /// The matrix unit's operand type.
    #[serde(default, skip_serializing_if = "MmaOperands::is_f16")]
    pub operands: MmaOperands,
    /// One 32-bit window serves two states (codes of one k-slot per weight): the state at
    /// bit P is its low L bits, the state at P + 32 - L its high L bits, where k divides
    /// 32 - L (k 2 and 4 at L 12 and 16). Per weight that is 1.44 integer-ALU operations
    /// instead of 1.88 (H200 SASS, 1mad k 2 L 16), for a few more live registers.
    #[serde(default, skip_serializing_if = "is_default")]
    pub paired_windows: bool,
    /// x arrives as f16, rounded when x is prescaled (by the prescale kernel, or the host:
    /// [`Prescaled::x_f16`](crate::families::reduce_mma::Prescaled::x_f16)), so B fragments and staging are plain loads: the kernel converts nothing. The same
    /// rounding the kernel's conversion makes (to nearest even), so the same bits. For f16
    /// operands and bf16 or f32 activations (f16 ones are f16 already).
    #[serde(default, skip_serializing_if = "is_default")]
    pub x_f16: bool,
    /// The threadgroup stages x (`x_stage` shared) in a compile-time count of chunks per
    /// thread, unrolled, so each thread's loads are in flight together; the plain form's
    /// loop strides by the launch's thread count, unknown to the compiler, and waits on
    /// each load before the next. At M = 16 a thread stages 5 chunks of 16 bytes, and ncu
    /// read the serial waits as long-scoreboard stalls before the loop
    /// (`prototypes/results/m16-ncu.md`). Same loads and stores, so the same bits.
    #[serde(default, skip_serializing_if = "is_default")]
    pub batch_stage: bool,
    /// The staged x is past the 48 KB of threadgroup memory a kernel may declare
    /// statically, so CUDA sizes it at launch and the backend opts in to it (dynamic
    /// shared memory: up to 227 KB a threadgroup on the H200). The other dialects declare
    /// it as before; Metal's 32 KB and CUDA devices with less to give drop such variants
    /// where the space meets the device (`family::fits`). Only where x needs it (a
    /// variant that fits 48 KB is refused), so it is never a twin of a fitting variant.
    /// At M = 16, 8 splits of K stage 56 KB of duplicated x for 3inst / mcg at 17408
    /// columns and 76 KB of plain x at 14336 columns.
    #[serde(default, skip_serializing_if = "is_default")]
    pub opt_in_shared: bool,
    /// Each simdgroup loads its first step's code words before the threadgroup stages x
    /// (`x_stage` shared), so their latency overlaps the staging rather than following
    /// its barrier: at M = 16 ncu put 6 % of the 3inst winner's stall samples on those
    /// first words (`prototypes/results/session26/m16-3inst-sass.csv`). The words wait in
    /// registers the loop does not yet hold. On the CPU each simdgroup then stages x
    /// itself (the same values; a group runs on one thread). Same loads, so the same bits.
    #[serde(default, skip_serializing_if = "is_default")]
    pub early_words: bool,
    /// The prescale fused into the staging (`x_stage` shared, `batch_stage`): x arrives as
    /// the caller's activations, and each threadgroup takes a power of two out of each
    /// staged sample's columns as it converts them to f16 (the largest over its own
    /// columns, as `prescale.kernel` does over the whole sample), puts it back in the
    /// epilogue (or on its split's part before the combine) and writes the sample's tiny
    /// flag per split (the last `[k_split, M]` words of `ws`), so no prescale kernel runs
    /// first. Without split-K a group's columns are the whole sample: the prescale
    /// pipeline's bits. The facade's fast device path runs it (the flags read from `ws`);
    /// the tuning space offers it at M 1 once the H200 table is re-measured
    /// (`reduce_mma::space::offers_fused`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub fused_x: bool,
}

crate::families::simt::hash_debug_skipping_default!(
    MmaVariant {
        row_tiles,
        col_split,
        m_tile,
        x_stage,
        k_split,
        max_registers,
        operands
    } + paired_windows,
    x_f16,
    batch_stage,
    opt_in_shared,
    early_words,
    fused_x
);

/// The operand type of the matrix unit (the accumulator is f32 either way).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MmaOperands {
    /// f16: 1mad's byte sum and 3inst/mcg's halves are f16 bits as decoded (exact); x is
    /// converted to f16 by the host ([`MmaVariant::x_f16`]) or by the kernel (per fragment
    /// or once per threadgroup).
    #[default]
    F16,
    /// bf16, for bf16 activations and codes of one k-slot per weight (1mad, mul1, lut):
    /// x goes to the matrix unit as it is (no conversion: 1.5 instructions per weight
    /// less at M = 16 in the H200 SASS), the value is rounded to bf16 (2^-9, inside SPEC
    /// 7) at half an instruction per weight more.
    Bf16,
}

impl MmaOperands {
    /// Whether the operands are f16 (serde: the default, not written).
    pub fn is_f16(&self) -> bool {
        *self == MmaOperands::F16
    }
    /// The operand type's name in the templates' helpers (`f16`, `bf16`).
    pub fn name(&self) -> &'static str {
        match self {
            MmaOperands::F16 => "f16",
            MmaOperands::Bf16 => "bf16",
        }
    }
}

fn one() -> u32 {
    1
}
fn is_one(v: &u32) -> bool {
    *v == 1
}

/// Where a matrix-unit kernel reads its B fragments (x as f16 pairs) from.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MmaXStage {
    /// Each lane loads (and, without `x_f16`, converts) its fragment of x from device
    /// memory per mma pair: no threadgroup memory, the loads repeated per 16-row tile.
    #[default]
    Global,
    /// The threadgroup converts x of its samples once into threadgroup memory (padded
    /// so the fragment reads do not conflict); needs samples x cols x 2 bytes.
    Shared,
    /// As `Shared`, each f16 stored twice (the B words of 3inst/mcg, whose weights take
    /// two k-slots, read as they are: no per-fragment duplication); twice the memory,
    /// and only where every projection is 3inst or mcg.
    SharedDup,
}

impl MmaXStage {
    /// Whether x is staged in threadgroup memory (template helper).
    pub fn is_shared(&self) -> bool {
        *self != MmaXStage::Global
    }
    /// Whether the staged x is duplicated (template helper).
    pub fn is_dup(&self) -> bool {
        *self == MmaXStage::SharedDup
    }
}

impl Default for MmaVariant {
    fn default() -> Self {
        MmaVariant::unsplit(1, 8, 16, MmaXStage::Global)
    }
}

impl MmaVariant {
    /// A launch shape: unsplit, registers at the compiler's choice.
    pub fn unsplit(row_tiles: u32, col_split: u32, m_tile: u32, x_stage: MmaXStage) -> Self {
        MmaVariant {
            row_tiles,
            col_split,
            m_tile,
            x_stage,
            k_split: 1,
            max_registers: 0,
            operands: MmaOperands::F16,
            paired_windows: false,
            x_f16: false,
            batch_stage: false,
            opt_in_shared: false,
            early_words: false,
            fused_x: false,
        }
    }
}

/// The register budget of the residency candidates at `k` bits per weight (see
/// `residency_candidates`): 48 keeps 5 groups of 8 simdgroups per SM where the
/// kernels sit at 48-56 registers (k <= 3), 64 keeps 4 where they sit at 56-64.
pub fn register_budget(k: u32) -> u32 {
    if k <= 3 {
        48
    } else {
        64
    }
}

impl fmt::Display for MmaVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mma rt={} cs={} mt={}{}",
            self.row_tiles,
            self.col_split,
            self.m_tile,
            match self.x_stage {
                MmaXStage::Global => "",
                MmaXStage::Shared => " x=shared",
                MmaXStage::SharedDup => " x=shared_dup",
            }
        )?;
        if self.k_split > 1 {
            write!(f, " ks={}", self.k_split)?;
        }
        if self.max_registers > 0 {
            write!(f, " regs={}", self.max_registers)?;
        }
        if !self.operands.is_f16() {
            write!(f, " ops={}", self.operands.name())?;
        }
        if self.paired_windows {
            write!(f, " pw")?;
        }
        if self.x_f16 {
            write!(f, " xf16")?;
        }
        if self.batch_stage {
            write!(f, " bs")?;
        }
        if self.opt_in_shared {
            write!(f, " optin")?;
        }
        if self.early_words {
            write!(f, " ew")?;
        }
        if self.fused_x {
            write!(f, " fx")?;
        }
        Ok(())
    }
}

/// One projection of a matrix-unit kernel, as its template sees it: the coding and the
/// names of its kernel arguments (`reduce_mma`: `codes`, ...; `gate_up_mma`: `gcodes`,
/// ...), and `name`, the suffix of its variables in the body.
#[derive(Clone, Copy, Debug)]
pub struct MmaProj {
    /// The projection's coding (k, L, code).
    pub proj: Proj,
    /// Suffix of its variables in the body (`g`, `u`; empty for `reduce_mma`).
    pub name: &'static str,
    /// Name of its codes argument.
    pub codes: &'static str,
    /// Name of its scales argument.
    pub scales: &'static str,
    /// Name of its value-table argument.
    pub table: &'static str,
    /// u32 code words per matrix row.
    pub words_per_row: usize,
    /// u32 code words per block of T weights.
    pub words_per_block: usize,
}

impl MmaProj {
    pub(crate) fn new(proj: Proj, cols: usize, t: usize, names: [&'static str; 4]) -> Self {
        MmaProj {
            proj,
            name: names[0],
            codes: names[1],
            scales: names[2],
            table: names[3],
            words_per_row: proj.words_per_row(cols, t),
            words_per_block: proj.words_per_block(t),
        }
    }
    /// How the operand words are made.
    pub fn operand(&self) -> Operand {
        Operand::of(self.proj.code)
    }
    /// k-slots per weight.
    pub fn slots(&self) -> usize {
        if self.operand().is_half_pair() {
            2
        } else {
            1
        }
    }
    /// mmas per step (128 columns) and tile.
    pub fn mmas(&self) -> usize {
        8 * self.slots()
    }
    /// Length of the table argument: the value table for `lut`, else a placeholder.
    pub fn table_arg_len(&self) -> usize {
        self.proj.table_arg_len(Representation::Inline)
    }
}

/// How a code's matrix-unit operand words are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// 1mad: its centred byte sum (exact in f16); the divisor goes to the epilogue.
    OneMad,
    /// 3inst, mcg: the masked word's two f16 halves as two k-slots against x duplicated.
    HalfPair,
    /// mul1, lut: the value rounded to the operand type.
    Value,
}

impl Operand {
    /// The operand of `code`.
    pub fn of(code: Code) -> Self {
        match code {
            Code::OneMad => Operand::OneMad,
            Code::ThreeInst | Code::Mcg => Operand::HalfPair,
            Code::Mul1 | Code::Lut => Operand::Value,
        }
    }
    /// 1mad's byte sum (for the templates).
    pub fn is_one_mad(self) -> bool {
        self == Operand::OneMad
    }
    /// Two k-slots a weight (for the templates).
    pub fn is_half_pair(self) -> bool {
        self == Operand::HalfPair
    }
}

/// Whether paired state windows save work for `proj` (see [`MmaVariant::paired_windows`]):
/// a code of one k-slot per weight, and a second state at the top of each window (L <= 16,
/// k divides 32 - L). Elsewhere they are correct but save nothing.
pub fn paired_windows_fit(proj: Proj) -> bool {
    !Operand::of(proj.code).is_half_pair() && proj.l <= 16 && (32 - proj.l).is_multiple_of(proj.k)
}

/// Whether a problem of activations `act` and these codes can take bf16 operands: bf16
/// activations, and codes of one k-slot per weight (what `validate` asks of `operands =
/// bf16`).
pub(crate) fn bf16_operands_fit(act: DType, codes: &[Code]) -> bool {
    act == DType::Bf16 && codes.iter().all(|&c| !Operand::of(c).is_half_pair())
}

/// What the matrix-unit template (`templates/reduce_mma.kernel`) asks of a kernel
/// declaration, and the launch shape, checks and threadgroup memory that follow.
pub trait MmaLayout {
    /// `(rows, cols, t, m, variant)`.
    fn dims(&self) -> (usize, usize, usize, u32, MmaVariant);
    /// The projections, in accumulation order.
    fn projs(&self) -> Vec<MmaProj>;
    /// The activation dtype.
    fn act(&self) -> DType;
    /// C type of the activations.
    fn act_c(&self, d: &Dialect) -> &'static str {
        Elem::from(self.act()).c_type(*d)
    }
    /// The fused SwiGLU of two projections (gate, up) instead of one output per projection.
    fn is_gate_up(&self) -> bool {
        false
    }
    /// The SPEC 6 tail (`gate_up` only).
    fn tail(&self) -> Tail {
        Tail::Exact
    }
    /// The output argument.
    fn out_name(&self) -> &'static str {
        "y"
    }
    /// f16 outputs just past f16's edge are held at its largest value
    /// ([`crate::numerics::F16_HOLD_BELOW`]): the epilogue's `f16_hold` (`decode.inc`),
    /// written into f16 units only (every other unit stays as tuned).
    fn holds_f16_edge(&self) -> bool {
        self.act() == DType::F16
    }
    /// `gate_up` only: also store `g` and `u` (each rounded to the activation dtype,
    /// before the tail) in outputs `gate_out` and `up_out`, so that a check sees what
    /// SPEC 7 bounds of them ([`crate::families::gate_up_mma::GateUpMmaParts`]). Renders nothing
    /// when off, so the tuned units stay as they are.
    fn stores_parts(&self) -> bool {
        false
    }

    /// Words of the `unscale` input ([`Prescaled`](crate::families::reduce_mma::Prescaled)): one per sample, then one per
    /// projection.
    fn unscale_len(&self) -> usize {
        // A fused variant takes the samples' powers itself: the projections' alone.
        if self.dims().4.fused_x {
            self.projs().len()
        } else {
            self.dims().3 as usize + self.projs().len()
        }
    }
    /// Words of a fused variant's tiny flags, the last of `ws` (`[k_split, M]` u32, each
    /// written every launch); none otherwise.
    fn flag_words(&self) -> usize {
        let (_, _, _, m, v) = self.dims();
        if v.fused_x {
            v.k_split as usize * m as usize
        } else {
            0
        }
    }
    /// Simdgroups per threadgroup.
    fn warps(&self) -> usize {
        let v = self.dims().4;
        (v.row_tiles * v.col_split) as usize
    }
    /// B operands (of 8 samples) per A: samples of a slice / 8, rounded up.
    fn nb(&self) -> usize {
        let (_, _, _, m, v) = self.dims();
        m.min(v.m_tile).div_ceil(8) as usize
    }
    /// Whether every 16-row tile is whole (rows a multiple of 16): then row g + 8 of a
    /// lane's tile is never clamped, and its code words sit a constant `8 words_per_row`
    /// past row g's (an immediate offset of the same loads' address, one pointer fewer).
    fn whole_tiles(&self) -> bool {
        self.dims().0.is_multiple_of(16)
    }
    /// Runs of 32 weights per row.
    fn runs(&self) -> usize {
        self.dims().1 / 32
    }
    /// Steps of 128 columns (4 runs) per row.
    fn steps(&self) -> usize {
        self.runs().div_ceil(4)
    }
    /// The element type of the x input: f16 where the host rounds x to f16
    /// ([`MmaVariant::x_f16`]), else the activations'.
    fn x_elem(&self) -> Elem {
        if self.dims().4.x_f16 {
            Elem::F16
        } else {
            self.act().into()
        }
    }
    /// The operand type's name in the templates' helpers (`f16`, `bf16`).
    fn ops(&self) -> &'static str {
        self.dims().4.operands.name()
    }
    /// Whether a projection feeds f16 halves (3inst, mcg).
    fn any_half_pair(&self) -> bool {
        self.projs().iter().any(|p| p.operand().is_half_pair())
    }
    /// The matrix-unit vocabulary of `dialect` (template: the header's first lines).
    fn matrix_units(&self, d: &Dialect) -> String {
        crate::codegen::matrix_units(*d)
    }
    /// The macro that cuts a state out of a lane's code words (`TRELLIS_STATE`, or its
    /// paired form where the variant asks for it).
    fn state_macro(&self) -> &'static str {
        if self.dims().4.paired_windows {
            "TRELLIS_STATE_PAIRED"
        } else {
            "TRELLIS_STATE"
        }
    }
    /// Whether every step holds 4 live runs (no run is masked off).
    fn all_live(&self) -> bool {
        self.runs().is_multiple_of(4)
    }
    /// Whether a lane's code words advance by a constant per step: all runs live and
    /// a simdgroup's stride of 4 `col_split` runs a whole number of trellis blocks (run
    /// `u`'s words sit at `k (T/32 - 1 - u)` in its block, SPEC 2), so addresses are
    /// computed once, outside the loop.
    fn linear_words(&self) -> bool {
        let (_, _, t, _, v) = self.dims();
        self.all_live() && (4 * v.col_split as usize).is_multiple_of(t / 32)
    }
    /// Whether a simdgroup's first step can lie past the row's last (its part of a split
    /// with fewer steps than `col_split`, the last split's): such a simdgroup runs no
    /// step, but the words it loads before its loop must still be the matrix's, so the
    /// first run is clamped to the row's last where this holds (and only there, so the
    /// tuned units that never start past the end render as before).
    fn first_step_may_pass_end(&self) -> bool {
        let (s, v) = (self.steps(), self.dims().4);
        let (ks, cs) = (v.k_split.max(1) as usize, v.col_split.max(1) as usize);
        (ks - 1) * s / ks + cs > s
    }
    /// Samples of a slice staged in threadgroup memory (`x_stage = shared`).
    fn x_samples(&self) -> usize {
        let (_, _, _, m, v) = self.dims();
        m.min(v.m_tile) as usize
    }
    /// Word offset of run `u` within a staged sample. Plain: 16 words per run and 4 more
    /// after every second run; duplicated: 32 words per run, 36 apart. Either way the 4
    /// runs a quarter-simdgroup reads at once (16 bytes each) fall in distinct banks.
    fn xs_run(&self, u: &str) -> String {
        if self.dims().4.x_stage.is_dup() {
            format!("({u} * 36u)")
        } else {
            format!("({u} * 16u + ({u} >> 1) * 4u)")
        }
    }
    /// Words from one step's runs to the next's in a staged sample (4 runs).
    fn xs_step(&self) -> usize {
        if self.dims().4.x_stage.is_dup() {
            4 * 36
        } else {
            4 * 16 + 2 * 4
        }
    }
    /// Words per staged sample, padded so the two samples a quarter-simdgroup reads fall
    /// in the other half of the banks (8 mod 32 plain, 16 mod 32 duplicated).
    fn xs_stride(&self) -> usize {
        let runs = self.staged_runs();
        let (used, to) = if self.dims().4.x_stage.is_dup() {
            (runs * 36, 16)
        } else {
            (runs * 16 + runs.div_ceil(2) * 4, 8)
        };
        used + (to + 32 - used % 32) % 32
    }
    /// Runs of a sample one threadgroup stages: its split's steps (all with one split).
    fn staged_runs(&self) -> usize {
        let k_split = self.dims().4.k_split as usize;
        self.runs().min(4 * self.steps().div_ceil(k_split))
    }
    /// The staging's 16-byte chunks of one sample: per step of 128 columns, and per row
    /// (8 columns each, or 4 duplicated).
    fn stage_chunks(&self) -> (usize, usize) {
        let (_, cols, _, _, v) = self.dims();
        if v.x_stage.is_dup() {
            (32, cols / 4)
        } else {
            (16, cols / 8)
        }
    }
    /// Chunks of one sample each split stages, from steps [z0, z1) (the last run's chunks
    /// end the row).
    fn split_chunks(&self) -> Vec<usize> {
        let (per, row) = self.stage_chunks();
        let (s, ks) = (self.steps(), self.dims().4.k_split as usize);
        (0..ks)
            .map(|z| ((z + 1) * s / ks * per).min(row) - z * s / ks * per)
            .collect()
    }
    /// The staging's `nq` (chunks of one sample this threadgroup stages). Batched, a
    /// constant where every split stages as many (so `i / nq` is a multiply); else, and
    /// in the plain form, computed from the split's steps.
    fn stage_nq(&self) -> String {
        let (per, row) = self.stage_chunks();
        let counts = self.split_chunks();
        if self.dims().4.batch_stage && counts.iter().all(|&c| c == counts[0]) {
            format!("{}u", counts[0])
        } else {
            format!("(z1 * {per}u < {row}u ? z1 * {per}u : {row}u) - q0")
        }
    }
    /// Rounds of the batched staging: the most chunks any split stages over the threads
    /// of a threadgroup (the CPU shim's one thread takes them all).
    fn stage_rounds(&self) -> String {
        let most = self.x_samples() * self.split_chunks().into_iter().max().unwrap_or(0);
        format!("({most}u + GROUP_THREADS_FIXED - 1u) / GROUP_THREADS_FIXED")
    }
    /// The threads that run one threadgroup on `d`, as a constant: the launch's on a GPU,
    /// one on the CPU (its shim runs a group's threads in turn).
    fn group_threads_fixed(&self, d: &Dialect) -> usize {
        if d.is_cpu() {
            1
        } else {
            32 * self.warps()
        }
    }
    /// Threadgroup words of the staged x (0 unless `x_stage = shared`).
    fn xs_words(&self) -> usize {
        if self.dims().4.x_stage.is_shared() {
            self.x_samples() * self.xs_stride()
        } else {
            0
        }
    }
    /// The bytes CUDA sizes at launch: the staged x of a variant that opts in past 48 KB.
    fn mma_dynamic_shared(&self) -> usize {
        if self.dims().4.opt_in_shared {
            self.xs_words() * 4
        } else {
            0
        }
    }
    /// How a body declares an array sized at launch on `d` (the `GROUP_SHARED_AT_LAUNCH`
    /// macro of an [`MmaVariant::opt_in_shared`] unit): CUDA's dynamic shared memory,
    /// an ordinary threadgroup array on the other dialects.
    fn shared_at_launch(&self, d: &Dialect) -> &'static str {
        if d.is_cuda() {
            "extern __shared__ __align__(16) type name[]"
        } else {
            "GROUP_SHARED GROUP_ALIGN16 type name[n]"
        }
    }
    /// The fused staging's two primitives in the dialect's words (`fused_x`): `f32_bits`
    /// (the CPU's header has it) and a simdgroup's xor shuffle (the CPU runs a group as
    /// one thread: nothing to exchange). Here, not in the dialect headers, which every
    /// tuned unit hashes.
    fn fused_shim(&self, d: &Dialect) -> &'static str {
        match d {
            Dialect::Cuda => concat!(
                "DEVICE uint f32_bits(float v) { return __float_as_uint(v); }\n",
                "DEVICE float fx_shuffle_xor(float v, uint o) { return __shfl_xor_sync(0xffffffffu, v, o); }"
            ),
            Dialect::Metal => concat!(
                "DEVICE uint f32_bits(float v) { return as_type<uint>(v); }\n",
                "DEVICE float fx_shuffle_xor(float v, uint o) { return simd_shuffle_xor(v, (ushort)o); }"
            ),
            Dialect::Cpu => "DEVICE float fx_shuffle_xor(float v, uint) { return v; }  // never called: one lane",
        }
    }
    /// Threadgroup bytes: the column-split sums, the staged x, and the fragment staging
    /// of the Metal dialect (counted everywhere so one specialization fits every backend
    /// alike).
    fn mma_shared(&self) -> usize {
        let red = if self.dims().4.col_split > 1 {
            self.warps() * self.projs().len() * self.nb() * 4 * 32 * 4
        } else {
            0
        };
        // Metal stages each simdgroup's fragments: A and B as half, or as float for bf16.
        let operand_bytes = if self.dims().4.operands.is_f16() {
            2
        } else {
            4
        };
        // Split-K's `last_group` flag.
        let flag = if self.dims().4.k_split > 1 { 4 } else { 0 };
        // The fused staging's folds (per sample: a largest and a flag per simdgroup) and
        // each sample's 2^e.
        let fused = if self.dims().4.fused_x {
            self.x_samples() * (2 * self.warps() + 1) * 4
        } else {
            0
        };
        red + self.xs_words() * 4
            + self.warps() * ((256 + 128) * operand_bytes + 128 * 4)
            + flag
            + fused
    }
    /// Grid slices of samples (`m_tile` each).
    fn slices(&self) -> usize {
        let (_, _, _, m, v) = self.dims();
        m.div_ceil(v.m_tile) as usize
    }
    /// Steps `[z0, z1)` of split `z` (an expression) of `k_split`.
    fn split_steps(&self, z: &str) -> (String, String) {
        let (s, ks) = (self.steps(), self.dims().4.k_split);
        (
            format!("({z}) * {s}u / {ks}u"),
            format!("(({z}) + 1u) * {s}u / {ks}u"),
        )
    }
    /// Words of the split parts in `ws`: f32 `[k_split, M, rows]`.
    fn ws_parts(&self) -> usize {
        let (rows, _, _, m, v) = self.dims();
        v.k_split as usize * m as usize * rows
    }
    /// Words of the `ws` output: with split-K the parts, then one u32 arrival counter per
    /// row group and slice (`[groups_x, slices]`); then a fused variant's flags; one
    /// unused word where there is none of these (a tensor is never empty).
    fn ws_words(&self) -> usize {
        (self.ws_flags() + self.flag_words()).max(1)
    }
    /// Where a fused variant's flags start in `ws`: after the split parts and counters.
    fn ws_flags(&self) -> usize {
        if self.dims().4.k_split <= 1 {
            return 0;
        }
        self.ws_parts() + self.mma_grid().groups[0] as usize * self.slices()
    }
    /// One simdgroup per 16-row tile and column part; M beyond `m_tile` in grid slices,
    /// times `k_split` column splits (slice `GROUP_Y % slices`, split `GROUP_Y / slices`).
    fn mma_grid(&self) -> Grid {
        let (rows, _, _, _, v) = self.dims();
        Grid {
            groups: [
                rows.div_ceil(16).div_ceil(v.row_tiles as usize) as u32,
                (self.slices() * v.k_split as usize) as u32,
                1,
            ],
            threads: 32 * self.warps() as u32,
        }
    }
    /// Geometry of every projection, M and the variant's ranges.
    fn mma_check(&self) -> Result<()> {
        let (rows, cols, t, m, v) = self.dims();
        // The template writes one output per projection only where there is one (the
        // split-K combine and the plain epilogue store each projection's sum to `y`).
        let projs = self.projs();
        let want = if self.is_gate_up() { 2 } else { 1 };
        if projs.len() != want {
            return Err(Error::invalid(
                "projections",
                projs.len(),
                format!("a layout of this kind takes {want}"),
            ));
        }
        for p in projs {
            let q = p.proj;
            Geometry::new(rows, cols, t, q.k, q.l, q.code)?;
        }
        if !(1..=MAX_M_MMA).contains(&m) {
            return Err(Error::invalid(
                "M",
                m,
                format!("must be in 1..={MAX_M_MMA}"),
            ));
        }
        if !matches!(v.row_tiles, 1 | 2 | 4 | 8) {
            return Err(Error::invalid(
                "row_tiles",
                v.row_tiles,
                "must be 1, 2, 4 or 8",
            ));
        }
        if !matches!(v.col_split, 1 | 2 | 4 | 8 | 16) {
            return Err(Error::invalid(
                "col_split",
                v.col_split,
                "must be a power of two in 1..=16",
            ));
        }
        if v.row_tiles * v.col_split > 32 {
            return Err(Error::invalid(
                "row_tiles * col_split",
                v.row_tiles * v.col_split,
                "at most 32 simdgroups per threadgroup",
            ));
        }
        if !matches!(v.m_tile, 8 | 16) {
            return Err(Error::invalid("m_tile", v.m_tile, "must be 8 or 16"));
        }
        if !(1..=32).contains(&v.k_split) || v.k_split as usize > self.steps() {
            return Err(Error::invalid(
                "k_split",
                v.k_split,
                format!(
                    "must be in 1..=32 and at most the {} steps of 128 columns",
                    self.steps()
                ),
            ));
        }
        crate::kernel::check_max_registers(v.max_registers)?;
        if v.operands == MmaOperands::Bf16 {
            let why = if self.act() != DType::Bf16 {
                Some(format!(
                    "takes bf16 activations (x goes to the matrix unit as it is), not {}",
                    self.act()
                ))
            } else if self.projs().iter().any(|p| p.slots() != 1) {
                Some("is for codes of one k-slot per weight (1mad, mul1, lut)".to_string())
            } else if v.x_stage.is_shared() {
                Some("reads x from device memory (x_stage = global)".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::invalid("operands", "bf16", why));
            }
        }
        if v.x_f16 && !v.operands.is_f16() {
            return Err(Error::invalid(
                "x_f16",
                true,
                "is for f16 operands (bf16 operands take x as it is)",
            ));
        }
        if v.x_f16 && self.act() == DType::F16 {
            return Err(Error::invalid(
                "x_f16",
                true,
                "is for bf16 or f32 activations (f16 ones are f16 already)",
            ));
        }
        if v.batch_stage && !v.x_stage.is_shared() {
            return Err(Error::invalid(
                "batch_stage",
                true,
                "is for x staged in threadgroup memory (x_stage = shared or shared_dup)",
            ));
        }
        if v.early_words && !v.x_stage.is_shared() {
            return Err(Error::invalid(
                "early_words",
                true,
                "is for x staged in threadgroup memory (x_stage = shared or shared_dup)",
            ));
        }
        if v.fused_x {
            let why = if self.is_gate_up() {
                Some("is for reduce_mma for now (gate_up_mma has no ws output to hold its flags)")
            } else if v.x_stage != MmaXStage::Shared || !v.batch_stage {
                Some("is for x staged in threadgroup memory in batches (x_stage = shared, batch_stage)")
            } else if self.act() != DType::Bf16 {
                Some("takes bf16 activations (its staging unpacks bf16 pairs)")
            } else if !v.operands.is_f16() {
                Some("is for f16 operands (bf16 operands take x as it is)")
            } else if v.x_f16 {
                Some("reads the caller's x, not the host's f16 copy (x_f16)")
            } else if self.x_samples() > 4 {
                Some("stages at most 4 samples (its folds' group memory grows with them, and it only pays at small M)")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::invalid("fused_x", true, why));
            }
        }
        if v.paired_windows && self.projs().iter().any(|p| p.slots() != 1) {
            return Err(Error::invalid(
                "paired_windows",
                true,
                "is for codes of one k-slot per weight (1mad, mul1, lut); 3inst and mcg cut their windows with MMA_STATE",
            ));
        }
        if v.k_split > 1 && self.is_gate_up() {
            return Err(Error::invalid(
                "k_split",
                v.k_split,
                "splits only reduce_mma (gate_up_mma takes 1)",
            ));
        }
        if v.x_stage.is_dup() && self.projs().iter().any(|p| p.slots() != 2) {
            return Err(Error::invalid(
                "x_stage",
                "shared_dup",
                "is for 3inst and mcg only (two k-slots per weight)",
            ));
        }
        let (shared, staged) = (self.mma_shared(), self.xs_words() * 4);
        if v.opt_in_shared {
            let most = Limits::CUDA_OPT_IN.threadgroup_bytes;
            let why = if !v.x_stage.is_shared() {
                Some(
                    "is for x staged in threadgroup memory (x_stage = shared or shared_dup)"
                        .to_string(),
                )
            } else if shared <= MAX_SHARED_BYTES {
                Some(format!("is for variants past {MAX_SHARED_BYTES} bytes of threadgroup memory; this one needs {shared}"))
            } else if shared > most {
                Some(format!("variant `{v}` needs {shared} bytes of threadgroup memory, past the {most} a kernel may opt in to"))
            } else if shared - staged > MAX_SHARED_BYTES {
                Some(format!(
                    "variant `{v}` declares {} bytes besides the staged x, past {MAX_SHARED_BYTES}",
                    shared - staged
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::invalid("opt_in_shared", true, why));
            }
        } else if shared > MAX_SHARED_BYTES {
            return Err(Error::invalid(
                "threadgroup memory",
                shared,
                format!("variant `{v}` needs more than {MAX_SHARED_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}
