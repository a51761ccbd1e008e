//! The vocabulary of this crate's SIMT kernel families (`reduce`, `gate_up`, `expand`):
//! the projection coding ([`Proj`], which the matrix-unit families share), the tunable
//! [`Variant`] and its parts, and the x-staging helpers templates call ([`XLayout`]). The
//! families themselves live in [`crate::families`], above this module; the numerics
//! choices ([`Tier`], [`Tail`](crate::numerics::Tail)) in [`crate::numerics`].

use crate::codes::Code;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::kernel::{Dialect, Elem, Grid};
use crate::matrix::INTERLEAVE_COLS;
use crate::numerics::Tier;
use std::fmt;

/// Largest M a SIMT kernel accepts (the matrix-unit families take up to
/// [`crate::families::mma::MAX_M_MMA`]).
pub const MAX_M: u32 = 8;
/// Threadgroup memory a specialization may declare (CUDA's static limit); backends
/// with less (Metal: 32 KB) reject larger ones before launch.
pub const MAX_SHARED_BYTES: usize = crate::kernel::Limits::CUDA_STATIC.threadgroup_bytes;

/// How a kernel obtains the value of a state; every form is bit-identical.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Representation {
    /// Computed from the state with the code's integer/f16 arithmetic (`lut`: read from
    /// global memory).
    Inline,
    /// A `2^L` f32 value table in global memory (cached by the device).
    GlobalTable,
    /// The value table staged into threadgroup/shared memory once per group.
    SharedTable,
}

impl Representation {
    /// Every representation.
    pub const ALL: [Representation; 3] = [
        Representation::Inline,
        Representation::GlobalTable,
        Representation::SharedTable,
    ];
    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Representation::Inline => "inline",
            Representation::GlobalTable => "global_table",
            Representation::SharedTable => "shared_table",
        }
    }
    /// For templates.
    pub fn is_shared(&self) -> bool {
        *self == Representation::SharedTable
    }
    /// For templates.
    pub fn is_global(&self) -> bool {
        *self == Representation::GlobalTable
    }
}

/// How the M samples are spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MStrategy {
    /// One grid slice per sample (each slice decodes the weights again).
    PerSample,
    /// All samples in one slice, sharing one decode of every weight.
    SharedDecode,
}

impl MStrategy {
    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            MStrategy::PerSample => "per_sample",
            MStrategy::SharedDecode => "shared_decode",
        }
    }
}

parse_by_name!(
    Representation,
    "representation",
    [
        Representation::Inline,
        Representation::GlobalTable,
        Representation::SharedTable
    ]
);
parse_by_name!(
    MStrategy,
    "m_strategy",
    [MStrategy::PerSample, MStrategy::SharedDecode]
);
parse_by_name!(
    XStage,
    "x_stage",
    [
        XStage::Global,
        XStage::SharedF32,
        XStage::SharedAct,
        XStage::Registers
    ]
);

/// Where the activations are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XStage {
    /// Straight from global memory, converted per use.
    Global,
    /// Staged once per group into threadgroup memory as f32.
    SharedF32,
    /// Staged once per group in the activation dtype (half the bytes for 16-bit dtypes).
    SharedAct,
    /// Each lane loads its run of x as wide vectors straight into registers (the seed's
    /// way: 16-byte loads on CUDA, `vec<T, 4>` on Metal, plain loads on the CPU), and the
    /// run's code words as vectors where k makes them aligned.
    Registers,
}

impl XStage {
    /// Every staging.
    pub const ALL: [XStage; 4] = [
        XStage::Global,
        XStage::SharedF32,
        XStage::SharedAct,
        XStage::Registers,
    ];
    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            XStage::Global => "global",
            XStage::SharedF32 => "shared_f32",
            XStage::SharedAct => "shared_act",
            XStage::Registers => "registers",
        }
    }
    /// For templates: staged in threadgroup memory.
    pub fn is_shared(&self) -> bool {
        matches!(self, XStage::SharedF32 | XStage::SharedAct)
    }
    /// For templates: loaded per run as vectors into registers.
    pub fn is_registers(&self) -> bool {
        *self == XStage::Registers
    }
    /// For templates: staged copy stays in the activation dtype.
    pub fn is_act(&self) -> bool {
        *self == XStage::SharedAct
    }
}

/// The tunable part of a specialization: same output bits (within a tier), different speed.
///
/// `Hash` and `Debug` leave `max_registers`, `scalar_words`, `prefetch_words`,
/// `stream_words` and `interleaved_x` out at their defaults, as the tables do (serde): a variant without them
/// keeps the kernel symbol and the tuning space hashes it had before the fields existed,
/// so adding a field re-tunes only the entries whose space it widens.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// How the kernel obtains state values.
    pub repr: Representation,
    /// How the M samples are spread over the grid.
    pub m_strategy: MStrategy,
    /// Simdgroups per threadgroup (`rpg=` in listings; the name is the table format's):
    /// each holds `rows_per_simd` rows, so a threadgroup holds the product. On the CPU a
    /// task runs one threadgroup.
    pub rows_per_group: u32,
    /// Where x is read from.
    pub x_stage: XStage,
    /// The numerics tier the variant belongs to.
    pub tier: Tier,
    /// Rows per simdgroup (1..=[`MAX_ROWS_PER_SIMD`]; the general space offers 1, 2 and 4):
    /// each lane holds its lane of every one of them, so one x load serves them all.
    pub rows_per_simd: u32,
    /// Registers per thread the CUDA compiler may use (0: its own choice). At M = 8 and 4
    /// rows per simdgroup the k 2 and 4 kernels take 200-202 registers (their code words
    /// as 8- and 16-byte loads) where k 3 takes 168: 8 instead of 12 warps per SM. The
    /// other dialects ignore it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub max_registers: u32,
    /// Load a run's code words one word at a time where k allows vector loads (k a
    /// multiple of 2, x in registers). The vectors take fewer load instructions but aligned
    /// register tuples: in the H200 SASS at 3 rows per simdgroup, M 1, k 2 and 4 take 48
    /// registers with them and 40 without (loop +0.03 / +0.09 instructions per weight),
    /// and 40 is what holds 17408 rows of 3-row sets in one wave. Rejected where the words
    /// load one at a time anyway.
    #[serde(default, skip_serializing_if = "is_default")]
    pub scalar_words: bool,
    /// Ask L2 for the lane's code words of its next run while this one decodes (CUDA
    /// `prefetch.global.L2`, one per row and run). Where few simdgroups share a scheduler
    /// (5120 rows: 4 per H200 scheduler) the loop waits on its code words from DRAM: ncu
    /// of 5120 x 17408 k 3 M 1 reads 71 % issue at 1.5 eligible warps, long-scoreboard
    /// stalls first. The other dialects ignore it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub prefetch_words: bool,
    /// Load the code words evict-first (CUDA `ld.global.cs`): each is read once, x is read
    /// by every simdgroup of the SM. The other dialects ignore it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub stream_words: bool,
    /// Read x from its lane-interleaved copy ([`crate::matrix::Activations::lane_interleaved`],
    /// x in registers, columns a multiple of 1024), where each 16-byte load of a
    /// simdgroup reads 512 contiguous bytes instead of half of 32 sectors. Where the L1
    /// bounds the loop (5120 x 17408 M 4 on the H200: L1/TEX at 91 % of peak in ncu), a
    /// prototype ran 8 % faster with the L1 at 28 % (`prototypes/results/xperm.md`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub interleaved_x: bool,
}

/// Whether a field holds its type's default (serde leaves such fields out of the tables).
pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// `Hash` and `Debug` as `derive` writes them, except that the last fields are left out
/// while they hold their defaults, as serde leaves them out of the tables: a field added at
/// its default keeps every existing variant's kernel symbol and tuning space hash, so only
/// the entries whose space it widens go stale.
/// `hash_debug_skipping_default!(Type { a, b } + last, later)`.
///
/// A set field is hashed without its name, so two variants that differ only in which of
/// several such flags is set hash alike (and share a symbol). The symbols, and with them
/// the tables' hashes, stay as they were measured; [`crate::kernel::KernelId`] tells such
/// twins apart by their `Debug`, which names the fields.
macro_rules! hash_debug_skipping_default {
    ($ty:ident { $($field:ident),* } + $($last:ident),+) => {
        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                $(std::hash::Hash::hash(&self.$field, h);)*
                $(
                    if !$crate::families::simt::is_default(&self.$last) {
                        std::hash::Hash::hash(&self.$last, h);
                    }
                )+
            }
        }
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut d = f.debug_struct(stringify!($ty));
                $(d.field(stringify!($field), &self.$field);)*
                $(
                    if !$crate::families::simt::is_default(&self.$last) {
                        d.field(stringify!($last), &self.$last);
                    }
                )+
                d.finish()
            }
        }
    };
}
pub(crate) use hash_debug_skipping_default;

hash_debug_skipping_default!(
    Variant {
        repr,
        m_strategy,
        rows_per_group,
        x_stage,
        tier,
        rows_per_simd
    } + max_registers,
    scalar_words,
    prefetch_words,
    stream_words,
    interleaved_x
);

/// How a SIMT kernel receives a matrix's row scales: as stored, or, for `1mad` with f16
/// scales decoded inline into bf16 weights, folded with the code's divisor on the host
/// ([`crate::codes::onemad_folded_scale`], f32): the weight is then one fma of the biased
/// byte sum, `round_bf16(fma(1.5 * 2^23 + y, S, -(1.5 * 2^23) * S))`, where the SPEC
/// order spends a centring add, the division's multiply and fma and the scale's multiply,
/// with SPEC 4's bits (exhaustive test in `src/codes.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowScales {
    /// The matrix's `scales`, in their stored dtype.
    Stored(crate::ScaleDType),
    /// `1mad` f16 scales folded with the divisor on the host, as f32.
    FoldedOneMad,
}

impl RowScales {
    /// The scales a kernel of this code, stored scale dtype, activation dtype and value
    /// representation reads.
    pub fn of(code: Code, stored: crate::ScaleDType, act: Elem, repr: Representation) -> Self {
        if Self::foldable(code, stored) && act == Elem::Bf16 && repr == Representation::Inline {
            RowScales::FoldedOneMad
        } else {
            RowScales::Stored(stored)
        }
    }
    /// Whether a matrix of this code and stored scale dtype has folded scales for some
    /// kernel (bf16 weights decoded inline): `1mad` with f16 scales.
    pub fn foldable(code: Code, stored: crate::ScaleDType) -> bool {
        code == Code::OneMad && stored == crate::ScaleDType::F16
    }
    /// Whether the weights take the folded form (templates).
    pub fn is_folded(&self) -> bool {
        *self == RowScales::FoldedOneMad
    }
}

impl From<RowScales> for Elem {
    fn from(s: RowScales) -> Self {
        match s {
            RowScales::Stored(d) => d.into(),
            RowScales::FoldedOneMad => Elem::F32,
        }
    }
}

/// `rows_per_simd` of the verify catalog and the general tuning space; 3 is valid too,
/// offered at large row counts only ([`crate::families::catalog::three_row_variants`]).
pub const ROWS_PER_SIMD: [u32; 3] = [1, 2, 4];

/// The most rows one simdgroup may hold. Each row costs a lane its k + 1 code words and
/// two accumulators per sample in registers; past a few rows that is the compiler's
/// problem (and the tuner's), not a correctness one. Wide sets trade simdgroups for
/// independent work within one: at M = 1 the k 3 loop runs 8.06 instructions per weight
/// at 3 rows and 7.53 at 11 (`prototypes/results/wide-rows-sass.md`), but on the H200 5-12
/// rows ran 3-9 % behind 3 (too few simdgroups per scheduler to hide the loads); the tuner
/// keeps one 8-row probe ([`crate::families::catalog::edge_probe_variants`]).
pub const MAX_ROWS_PER_SIMD: u32 = 16;

impl Default for Variant {
    /// The built-in default: what runs when no tuning table has an entry (or a table's
    /// choice does not fit). x in registers, 2 rows per simdgroup: on the H200 within 5 %
    /// of the best candidate at both Qwen3-14B MLP shapes, k 2-4, M 1 (4.4x the previous
    /// default, x read per weight from global memory); it needs no threadgroup memory, so
    /// it fits every shape.
    fn default() -> Self {
        Variant {
            repr: Representation::Inline,
            m_strategy: MStrategy::SharedDecode,
            rows_per_group: 4,
            x_stage: XStage::Registers,
            tier: Tier::Exact,
            rows_per_simd: 2,
            max_registers: 0,
            scalar_words: false,
            prefetch_words: false,
            stream_words: false,
            interleaved_x: false,
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} rpg={} x={}",
            self.repr, self.m_strategy, self.rows_per_group, self.x_stage
        )?;
        if self.rows_per_simd != 1 {
            write!(f, " rps={}", self.rows_per_simd)?;
        }
        if self.max_registers > 0 {
            write!(f, " regs={}", self.max_registers)?;
        }
        if self.scalar_words {
            write!(f, " words=1")?;
        }
        if self.prefetch_words {
            write!(f, " prefetch")?;
        }
        if self.stream_words {
            write!(f, " stream")?;
        }
        if self.interleaved_x {
            write!(f, " xi")?;
        }
        write!(f, " {}", self.tier)
    }
}

/// The coding of one projection: bits per weight, state bits, code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Proj {
    /// Bits per weight k (1..=8).
    pub k: u32,
    /// Trellis state bits L (`k < L <= 16`).
    pub l: u32,
    /// The state -> value map (SPEC 3).
    pub code: Code,
}

impl Proj {
    /// Words per vector load of a run's first k code words at most: the largest of 4, 2, 1
    /// that divides k (a run's words start at a multiple of k words from a block start,
    /// and blocks and rows are whole multiples of k words). A SIMT variant may load them
    /// one by one (`XLayout::run_code_vec`).
    pub fn code_vec(&self) -> u32 {
        [4, 2, 1]
            .into_iter()
            .find(|v| self.k.is_multiple_of(*v))
            .unwrap_or(1)
    }
    /// The coding of a matrix.
    pub fn of(g: &Geometry) -> Self {
        Proj {
            k: g.k,
            l: g.l,
            code: g.code,
        }
    }
    /// Entries of the value table (`2^L`).
    pub fn states(&self) -> usize {
        crate::geometry::states(self.l)
    }
    /// Bytes of the value table as f32, in threadgroup memory where a kernel stages it.
    pub fn table_bytes(&self) -> usize {
        self.states().saturating_mul(4)
    }
    /// Length of the table argument a kernel in representation `repr` reads: the value
    /// table, or a one-element placeholder when it reads none.
    pub fn table_arg_len(&self, repr: Representation) -> usize {
        if repr != Representation::Inline || self.code == Code::Lut {
            self.states()
        } else {
            1
        }
    }
    /// u32 words of one block of `t` weights.
    pub fn words_per_block(&self, t: usize) -> usize {
        crate::geometry::words_per_block(t, self.k)
    }
    /// u32 words of one row of `cols` weights in blocks of `t` (0 for `t = 0`, which
    /// the geometry's check then names: a kernel's layout is worked out before it is
    /// validated).
    pub fn words_per_row(&self, cols: usize, t: usize) -> usize {
        cols.checked_div(t).unwrap_or(0) * self.words_per_block(t)
    }
}

impl fmt::Display for Proj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "k{} L{} {}", self.k, self.l, self.code)
    }
}

/// Checks every family of this crate shares: each projection's geometry (SPEC 1), M,
/// the launch shape and threadgroup memory.
pub(crate) fn check_common(
    rows: usize,
    cols: usize,
    t: usize,
    projs: &[(&str, Proj)],
    m: u32,
    v: &Variant,
    shared: usize,
) -> Result<()> {
    for (name, p) in projs {
        Geometry::new(rows, cols, t, p.k, p.l, p.code).map_err(|e| match e {
            Error::Invalid {
                field,
                value,
                reason,
            } if !name.is_empty() => Error::Invalid {
                field: format!("{name}.{field}"),
                value,
                reason,
            },
            e => e,
        })?;
    }
    if !(1..=MAX_M).contains(&m) {
        return Err(Error::invalid("M", m, format!("must be in 1..={MAX_M}")));
    }
    if !matches!(v.rows_per_group, 1 | 2 | 4 | 8 | 16 | 32) {
        return Err(Error::invalid(
            "rows_per_group",
            v.rows_per_group,
            "must be a power of two in 1..=32",
        ));
    }
    crate::kernel::check_max_registers(v.max_registers)?;
    if v.scalar_words && !(v.x_stage.is_registers() && projs.iter().any(|(_, p)| p.code_vec() > 1))
    {
        return Err(Error::invalid(
            "scalar_words",
            v.scalar_words,
            "the code words load one at a time anyway (vector loads need x in registers and \
             k a multiple of 2)",
        ));
    }
    if v.interleaved_x && !(v.x_stage.is_registers() && cols.is_multiple_of(INTERLEAVE_COLS)) {
        return Err(Error::invalid(
            "interleaved_x",
            v.interleaved_x,
            format!(
                "the lane-interleaved x needs x in registers and a multiple of \
                 {INTERLEAVE_COLS} columns (here {cols})"
            ),
        ));
    }
    if !(1..=MAX_ROWS_PER_SIMD).contains(&v.rows_per_simd) {
        return Err(Error::invalid(
            "rows_per_simd",
            v.rows_per_simd,
            format!("must be in 1..={MAX_ROWS_PER_SIMD}"),
        ));
    }
    if shared > MAX_SHARED_BYTES {
        return Err(Error::invalid(
            "threadgroup memory",
            shared,
            format!("variant `{v}` needs more than {MAX_SHARED_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// What the templates ask of every kernel that reads activations: how many samples a
/// grid slice holds, how x is staged, and the C types involved.
pub trait XLayout {
    /// The activation dtype.
    fn act(&self) -> DType;
    /// M.
    fn samples(&self) -> u32;
    /// The tunable part.
    fn tuned(&self) -> &Variant;
    /// Columns of x.
    fn x_cols(&self) -> usize;

    /// Fast f16 results past f16's edge are held at its largest value (`decode::f16_hold`,
    /// [`crate::numerics::F16_HOLD_BELOW`]); written into fast f16 units only, so every
    /// exact unit stays as tuned.
    fn holds_f16_edge(&self) -> bool {
        self.tuned().tier == Tier::Fast && self.act() == DType::F16
    }

    /// Samples per grid slice.
    fn mb(&self) -> usize {
        match self.tuned().m_strategy {
            MStrategy::PerSample => 1,
            MStrategy::SharedDecode => self.samples() as usize,
        }
    }
    /// Elements per staged 32-weight run of x: one 4-byte word of padding per run, so
    /// the 32 lanes (each on its own run) read 32 different banks.
    fn x_run_stride(&self) -> usize {
        if self.tuned().x_stage.is_act() && self.act().size() == 2 {
            34
        } else {
            33
        }
    }
    /// Threadgroup bytes of the staged x.
    fn x_stage_bytes(&self) -> usize {
        let v = self.tuned();
        let elem = if v.x_stage.is_act() {
            self.act().size()
        } else {
            4
        };
        if v.x_stage.is_shared() {
            self.mb() * (self.x_cols() / 32) * self.x_run_stride() * elem
        } else {
            0
        }
    }
    /// C type of the staged x.
    fn xs_c(&self, d: &Dialect) -> &'static str {
        if self.tuned().x_stage.is_act() {
            Elem::from(self.act()).c_type(*d)
        } else {
            "float"
        }
    }
    /// C type of the activations.
    fn act_c(&self, d: &Dialect) -> &'static str {
        Elem::from(self.act()).c_type(*d)
    }
    /// Accumulators per lane and projection: rows per simdgroup times samples per slice.
    fn acc_n(&self) -> usize {
        self.tuned().rows_per_simd as usize * self.mb()
    }
    /// Whether `rows` is a multiple of rows per simdgroup (no row set is cut short).
    fn rows_whole(&self, rows: &usize) -> bool {
        rows.is_multiple_of(self.tuned().rows_per_simd as usize)
    }
    /// Whether `rows` holds at least one whole row set (so the last set can be moved back
    /// to end at the last row instead of clamping its reads: `row_set` in decode.inc).
    fn rows_fill_a_set(&self, rows: &usize) -> bool {
        *rows >= self.tuned().rows_per_simd as usize
    }
    /// Whether the SIMT loop takes its state windows with `TRELLIS_STATE_MUL`
    /// (`templates/dialect/cuda.inc`): on CUDA, up to M = 4 per slice. Read in the SASS of the
    /// H200 table's exact winners (`prototypes/results/mul-windows-sass.md`): at M 1-4 the
    /// integer ALU pipe is the busier, 0.75-0.95 of the issue slots in cycles (k 3 M 1: 0.94
    /// -> 0.79 with the multiply, the FMA pipe 0.51 -> 0.66); at M = 8 the FMAs of the
    /// samples already load the FMA pipe (0.64-0.66), which the multiply would make the
    /// busier (about 0.73).
    fn state_mul(&self, d: &Dialect) -> bool {
        d.is_cuda() && self.mb() <= 4
    }
    /// The state-window macro of the SIMT loops (see [`XLayout::state_mul`]).
    fn state_macro(&self, d: &Dialect) -> &'static str {
        if self.state_mul(d) {
            "TRELLIS_STATE_MUL"
        } else {
            "TRELLIS_STATE"
        }
    }
    /// Whether each of a run's k + 1 scalar code words keeps its own wrap test (`load_runs`
    /// in decode.inc; otherwise only word k can wrap): under the M = 8 register budget.
    /// Without the tests ptxas issues those loads earlier, and `gate_up` with a k 3
    /// projection spilled 12 bytes at 168 registers (2-8 % slower on the H200); M = 1's
    /// 40-register candidate was measured without them.
    fn wrap_each_word(&self, p: &Proj) -> bool {
        self.run_code_vec(p) == 1 && self.tuned().max_registers > 0 && self.samples() > 1
    }
    /// Whether the SIMT loop asks L2 for the next run's code words ([`Variant::prefetch_words`]).
    fn prefetch_words(&self, d: &Dialect) -> bool {
        d.is_cuda() && self.tuned().prefetch_words
    }
    /// Whether the SIMT loop loads its code words evict-first ([`Variant::stream_words`]).
    fn stream_words(&self, d: &Dialect) -> bool {
        d.is_cuda() && self.tuned().stream_words
    }
    /// What a code-word load is wrapped in (`load_runs` in decode.inc): `__ldcs(&` and `)`
    /// for evict-first loads, nothing otherwise (the unit's text, so its kernel symbol,
    /// stays as it was).
    fn word_load(&self, d: &Dialect) -> (&'static str, &'static str) {
        if self.stream_words(d) {
            ("__ldcs(&", ")")
        } else {
            ("", "")
        }
    }
    /// The vector load of code words: `load_words`, or its evict-first twin
    /// `load_words_cs` (`cuda::code_loads`, `templates/dialect/cuda.inc`).
    fn load_words_fn(&self, d: &Dialect) -> &'static str {
        if self.stream_words(d) {
            "load_words_cs"
        } else {
            "load_words"
        }
    }
    /// Words per vector load of a run's code words of `p` in this variant's loads (1:
    /// scalar loads): [`Proj::code_vec`], the widest k allows, with x in registers unless
    /// the variant asks for scalar words.
    fn run_code_vec(&self, p: &Proj) -> u32 {
        if self.tuned().x_stage.is_registers() && !self.tuned().scalar_words {
            p.code_vec()
        } else {
            1
        }
    }
}

/// `rows_per_group` simdgroups of `rows_per_simd` rows each per threadgroup; per-sample
/// strategies add a grid slice per sample.
pub(crate) fn grid(rows: usize, m: u32, v: &Variant) -> Grid {
    let slices = match v.m_strategy {
        MStrategy::PerSample => m,
        MStrategy::SharedDecode => 1,
    };
    let rows_per_threadgroup = (v.rows_per_group * v.rows_per_simd) as usize;
    Grid {
        groups: [rows.div_ceil(rows_per_threadgroup) as u32, slices, 1],
        threads: 32 * v.rows_per_group,
    }
}
