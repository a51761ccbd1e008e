//! The verify cases (matrices every family's catalog is built from) and the candidate
//! space of this crate's SIMT families (`reduce`, `gate_up`, `expand`).

use crate::codes::Code;
use crate::dtype::DType;
use crate::error::Result;
use crate::families::simt::{MStrategy, Proj, Representation, Variant, XStage, ROWS_PER_SIMD};
use crate::geometry::Geometry;
use crate::matrix::INTERLEAVE_COLS;
use crate::numerics::Tier;

/// Launch shapes and representations the tuner and verifier enumerate for a tier.
///
/// x read per weight (from global memory, or staged in threadgroup memory) goes with one
/// row per simdgroup; x loaded per run into registers goes with 1, 2 or 4 rows per
/// simdgroup (one x load serves them all). The quick catalog (CI, 2 cores) keeps one
/// group size and, for registers, one rows-per-simdgroup value per representation.
pub fn variants(tier: Tier, m: u32, quick: bool) -> Vec<Variant> {
    let mut out = Vec::new();
    // x staged in threadgroup memory or read per weight from global memory: measured
    // slower than x in registers everywhere on the H200 (tuning/reports); kept in the
    // space at their old best shape (16 simdgroups) so the tuner keeps checking that.
    let rpgs: &[u32] = if quick { &[4] } else { &[16] };
    // With x in registers a group stages nothing, so its size only sets the scheduling
    // grain: on the H200 4 simdgroups beat 8 in all but one prototype case; 2 then won 34
    // keys at the edge of the space, so 1 joined (it won 17, each within 0.8 %: the edge
    // is flat).
    let reg_rpgs: &[u32] = if quick { &[4] } else { &[1, 2, 4, 8] };
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
                let (rpgs, rpss): (&[u32], &[u32]) = match (x_stage.is_registers(), m_strategy) {
                    (true, MStrategy::SharedDecode) => (reg_rpgs, reg_rps(repr)),
                    // One decode per sample: one row per simdgroup is its natural shape.
                    (true, MStrategy::PerSample) => (reg_rpgs, &[1]),
                    (false, _) => (rpgs, &[1]),
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
                            max_registers: 0,
                            scalar_words: false,
                            prefetch_words: false,
                            stream_words: false,
                            interleaved_x: false,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Rows from which candidates meant for the tuned sizes are offered (register budgets,
/// paired state windows): the verify catalog's matrices are all smaller, so such a
/// candidate leaves the families' source hashes as they were and re-tunes only the
/// entries whose space it widens; `tests/cpu_backend.rs` and `tests/reduce_mma.rs` check
/// those kernels' bits instead.
pub const TUNED_ROWS: usize = 4096;

/// Candidates under a register budget, for a problem of `rows` rows and M = `m`, on top of
/// [`variants`], one per rows per group (2, 4) and entry of `rows_per_simd`. At M = 8 with
/// 4 rows per simdgroup the CUDA `reduce` kernels of k 2 and 4 take 200-202 registers
/// (k 3: 168), 8 warps per SM instead of 12, so 5120 x 17408 needs 1.21 waves of
/// simdgroups on the H200 instead of 0.81; 168 holds 12 (a few spills outside the loop;
/// measured: 117-120 -> 99 us there, 2-8 % at 17408 x 5120). `gate_up` holds two
/// projections' accumulators, so its 2 rows per simdgroup are `reduce`'s 4: with the
/// folded 1mad bias its M = 8 kernels there take 174 registers, 2 groups of 4 simdgroups
/// per SM instead of 3. Offered from 4096 rows, where thousands of simdgroups make
/// residency decide the waves; the verify catalog's small matrices (and so the families'
/// source hashes) are left as they were, and `tests/cpu_backend.rs` checks the budgeted
/// kernels bit for bit.
pub fn budget_variants(tier: Tier, m: u32, rows: usize, rows_per_simd: &[u32]) -> Vec<Variant> {
    if m < 8 || rows < TUNED_ROWS {
        return Vec::new();
    }
    let mut out = Vec::new();
    for &rps in rows_per_simd {
        for rows_per_group in [2u32, 4] {
            out.push(inline_registers(tier, rows_per_group, rps, 168));
        }
    }
    out
}

/// Rows from which 3 rows per simdgroup are offered ([`three_row_variants`]).
pub const BALANCE_ROWS: usize = 8192;

/// Candidates of 3 rows per simdgroup, for a problem of `rows` rows, on top of
/// [`variants`]. The exact kernels at the tuned sizes are issue-bound, so a launch is as
/// long as its busiest scheduler: at 17408 rows the H200's 528 schedulers get 8 or 9 sets
/// of 4 rows (8.24 on average, 8 % lost) but 11 sets of 3 (33 rows each). (At 48 registers
/// per thread 42 of the 44 sets per SM are resident at once; at 40, in groups of 2 or more
/// simdgroups, all of them: k 3 with the uniform simdgroup id, [`one_wave_variants`].)
/// Measured (`prototypes/results/rps3-bench.md`): 2-4 % faster than the table's winners
/// at 17408 x 5120, M 1 and 2; 10-16 % slower at 5120 rows, where too few simdgroups
/// exist. Offered from [`BALANCE_ROWS`], so the verify catalog (and the families'
/// source hashes) stay as they were; `tests/cpu_backend.rs` checks these kernels' bits.
/// M = 8 has its own ([`three_row_m8_variants`], `reduce` only).
pub fn three_row_variants(tier: Tier, m: u32, rows: usize) -> Vec<Variant> {
    if rows < BALANCE_ROWS || m > 4 {
        return Vec::new();
    }
    [1u32, 2, 4]
        .into_iter()
        .map(|rows_per_group| inline_registers(tier, rows_per_group, 3, 0))
        .collect()
}

/// `reduce`'s 3 rows per simdgroup at M = 8, from [`TUNED_ROWS`] rows, unbudgeted: in
/// the H200 SASS (17408 x 5120, groups of 2) they take 136-148 registers (13-14 simdgroups
/// per SM; the 4-row winners under the 168 budget: 12) at 17.1-17.3 instructions per
/// weight (4 rows: 16.5-17.6), and give the busiest scheduler 33 rows instead of 36.
/// Measured (tuned on the H200, eleventh session): from 8192 rows they won 8 of 12 keys
/// (3inst 5-8 %, 1mad k 2 2-4 %). At 5120 rows the busiest scheduler gets 12 rows either
/// way (4 sets of 3 or 3 of 4), with more simdgroups to choose from at 3.
/// Not for `gate_up`, whose rows hold two projections' accumulators.
pub fn three_row_m8_variants(tier: Tier, m: u32, rows: usize) -> Vec<Variant> {
    if rows < TUNED_ROWS || m != 8 {
        return Vec::new();
    }
    [1u32, 2, 4]
        .into_iter()
        .map(|rows_per_group| inline_registers(tier, rows_per_group, 3, 0))
        .collect()
}

/// `reduce`'s 3 rows per simdgroup at M = 1 under a 40-register budget, in groups of 2
/// simdgroups, from [`BALANCE_ROWS`] rows: every set resident at once (48 simdgroups per
/// H200 SM against the 44 that 17408 rows ask for; at 48 registers 42 fit, and the last
/// sets run as a thin second wave). Groups of one simdgroup cannot be one wave there: an
/// SM holds at most 32 groups. With the simdgroup id uniform (ninth session) k 3 takes 40
/// registers unbudgeted and won its keys at 2 simdgroups per group (31.0 -> 29.2 us); this
/// budget is for k 2 and 4, which then take 48, and spill under it in the loop (40-48 bytes,
/// loop 7.53-7.66 -> 7.90 instructions per weight in the SASS). Before, at one simdgroup
/// per group, it lost every key (2-20 % behind). Not for `gate_up`, whose rows hold two
/// projections.
pub fn one_wave_variants(tier: Tier, m: u32, rows: usize) -> Vec<Variant> {
    if rows < BALANCE_ROWS || m != 1 {
        return Vec::new();
    }
    vec![inline_registers(tier, 2, 3, 40)]
}

/// Twins with scalar code words ([`Variant::scalar_words`]) of the tuned-size candidates
/// whose registers they lower, for a problem of `rows` rows and M = `m` whose k allows
/// vector loads (`vector_words`): with the 3-row sets from [`BALANCE_ROWS`] rows, with the
/// M = 8 budgets and 3-row sets from [`TUNED_ROWS`]. In the H200 SASS: M 1, 3
/// rows: 48 -> 40 registers (k 2 / 4), so groups of 2 hold all 5803 sets of 17408 rows in
/// one wave, as k 3 does (+0.03 / +0.09 instructions per weight); M 2, 3 rows: 64 -> 56;
/// M 8, 4 rows: k 4 186 -> 144 (no budget needed), k 2 203 -> 195 (so also under the
/// 168-register budget). M 4 keeps its registers (80 / 96), so it is not offered there.
/// Measured (tuned on the H200, tenth session): in `reduce` won 11 of its 32 keys, 1mad
/// M 1 k 2 / 4 at 17408 x 5120 by 2-3 % (29.6 / 30.3 -> 28.7 / 29.4 us) and M 8 k 4 by
/// 6-8 %; in `gate_up` (M 1 and 2 only: its M 8 sets of 2 rows keep their registers) 12 of
/// 32, by at most 2.3 % (M 1, 3 rows: 3/4 64 -> 56 registers, 4/4 72 -> 56 in the SASS).
pub fn scalar_word_variants(tier: Tier, m: u32, rows: usize, vector_words: bool) -> Vec<Variant> {
    let shapes: &[(u32, u32, u32)] = match m {
        _ if !vector_words => &[],
        1 if rows >= BALANCE_ROWS => &[(2, 3, 0), (4, 3, 0)],
        2 if rows >= BALANCE_ROWS => &[(1, 3, 0), (2, 3, 0), (4, 3, 0)],
        8 if rows >= TUNED_ROWS => &[
            (2, 4, 0),
            (4, 4, 0),
            (2, 4, 168),
            (4, 4, 168),
            (1, 3, 0),
            (2, 3, 0),
            (4, 3, 0),
        ],
        _ => &[],
    };
    shapes
        .iter()
        .map(|&(rpg, rps, regs)| Variant {
            scalar_words: true,
            ..inline_registers(tier, rpg, rps, regs)
        })
        .collect()
}

/// Twins of the tuned sizes' candidates with their code words prefetched to L2 one run
/// ahead ([`Variant::prefetch_words`]), loaded evict-first ([`Variant::stream_words`]), or
/// both, for a problem of `rows` rows and M = `m`: at 2 rows per simdgroup (at M = 4 also
/// 3 and 4) from [`TUNED_ROWS`] to [`BALANCE_ROWS`] rows at M = 1, 2 and 4, where 4-5 simdgroups per H200
/// scheduler leave the loop waiting on its code words (5120 x 17408 k 3 M 1: 71 % issue at
/// 1.5 eligible warps, long-scoreboard stalls first, in ncu), at 3 rows from
/// [`BALANCE_ROWS`] at M = 4, and at M = 8 below [`BALANCE_ROWS`] rows with the 3-row sets
/// and the 4-row budgets (5120 x 17408: 2-3 simdgroups per scheduler). Prototype (tenth session, every candidate tuned with the
/// loads changed for all of them): the prefetch 4-6 % at 5120 x 17408 M 1 k 2 / 4 (1 % at
/// k 3), evict-first 1-5 % on most M 1 / 4 keys of both Qwen shapes (3 % worse at 5120 x
/// 17408 M 1 k 2); the goal key (17408 x 5120 k 3 M 1) gained from neither.
pub fn code_load_variants(tier: Tier, m: u32, rows: usize) -> Vec<Variant> {
    let sets = code_load_sets(tier, m, rows);
    let mut out = Vec::new();
    for (prefetch_words, stream_words) in [(true, false), (false, true), (true, true)] {
        out.extend(sets.iter().map(|v| Variant {
            prefetch_words,
            stream_words,
            ..*v
        }));
    }
    out
}

/// The row sets [`code_load_variants`] loads differently.
fn code_load_sets(tier: Tier, m: u32, rows: usize) -> Vec<Variant> {
    match m {
        1 | 2 | 4 if (TUNED_ROWS..BALANCE_ROWS).contains(&rows) => {
            let widths: &[u32] = if m == 4 { &[2, 3, 4] } else { &[2] };
            let mut sets = Vec::new();
            for &rps in widths {
                sets.extend([1u32, 2, 4].map(|rpg| inline_registers(tier, rpg, rps, 0)));
            }
            sets
        }
        4 if rows >= BALANCE_ROWS => three_row_variants(tier, m, rows),
        8 if (TUNED_ROWS..BALANCE_ROWS).contains(&rows) => {
            let mut sets = three_row_m8_variants(tier, m, rows);
            sets.extend(budget_variants(tier, m, rows, &[4]));
            sets
        }
        _ => Vec::new(),
    }
}

/// Twins reading the lane-interleaved x ([`Variant::interleaved_x`]) of the row sets of
/// [`code_load_variants`] and of its twins, at M = 2 and 4 from [`TUNED_ROWS`] to
/// [`BALANCE_ROWS`] rows where the columns are whole 1024-column slices. There x's loads
/// bound the loop: ncu of the H200's 5120 x 17408 k 3 M 4 winner reads L1/TEX at 91 % of
/// peak, and its interleaved twin ran 53.2 -> 48.9 us with the L1 at 28 %
/// (`prototypes/results/xperm.md`); M = 1, M = 8 and 17408 rows were flat.
pub fn interleaved_x_variants(tier: Tier, m: u32, rows: usize, cols: usize) -> Vec<Variant> {
    let fits = matches!(m, 2 | 4) && rows < BALANCE_ROWS && cols.is_multiple_of(INTERLEAVE_COLS);
    if !fits {
        return Vec::new();
    }
    let mut out = code_load_sets(tier, m, rows);
    out.extend(code_load_variants(tier, m, rows));
    out.into_iter()
        .map(|v| Variant {
            interleaved_x: true,
            ..v
        })
        .collect()
}

/// One candidate of 8 rows per simdgroup at every M, from [`TUNED_ROWS`] rows: the probe
/// past the tuned winners' edge (twice `rows_per_simd` 4, the largest [`variants`] offers;
/// the kernels take up to `simt::MAX_ROWS_PER_SIMD`), so that the tuner measures
/// the next width instead of reporting the winners at a bound. It lost all 96 keys on the
/// H200 (eighth session: 58 pruned after the first round, the rest 7-30 % behind), as
/// 5-12 rows at M <= 2 had (3-9 % behind 3 rows: too few simdgroups per scheduler to hide
/// the loads); at M = 8 the accumulators and x of 8 rows take all 255 registers and spill
/// (2 simdgroups per scheduler).
pub fn edge_probe_variants(tier: Tier, rows: usize) -> Vec<Variant> {
    if rows < TUNED_ROWS {
        return Vec::new();
    }
    vec![inline_registers(tier, 1, 8, 0)]
}

/// The shape of the tuned sizes' extra candidates: inline decode shared by the samples, x
/// in registers, with these rows per group and simdgroup and register budget.
pub fn inline_registers(
    tier: Tier,
    rows_per_group: u32,
    rows_per_simd: u32,
    max_registers: u32,
) -> Variant {
    Variant {
        repr: Representation::Inline,
        m_strategy: MStrategy::SharedDecode,
        rows_per_group,
        x_stage: XStage::Registers,
        tier,
        rows_per_simd,
        max_registers,
        scalar_words: false,
        prefetch_words: false,
        stream_words: false,
        interleaved_x: false,
    }
}

/// One verify case: a gate (or the only) matrix, an up matrix, their shared shape, the
/// activation dtype and M.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Coding of the gate matrix (the only matrix for `reduce` and `expand`).
    pub gate: Proj,
    /// Coding of the up matrix (the second matrix of `gate_up`).
    pub up: Proj,
    /// Rows R (output features) of each matrix.
    pub rows: usize,
    /// Columns C (input features) of each matrix.
    pub cols: usize,
    /// Weights per block T (SPEC 1).
    pub t: usize,
    /// Activation dtype.
    pub act: DType,
    /// Samples M: rows of the activations `x`.
    pub m: u32,
}

impl Case {
    /// Geometry of the gate (or only) matrix.
    pub fn gate_geometry(&self) -> Result<Geometry> {
        let p = self.gate;
        Geometry::new(self.rows, self.cols, self.t, p.k, p.l, p.code)
    }
    /// Geometry of the up matrix.
    pub fn up_geometry(&self) -> Result<Geometry> {
        let p = self.up;
        Geometry::new(self.rows, self.cols, self.t, p.k, p.l, p.code)
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

#[cfg(test)]
mod tests {
    use super::{verify_cases, TUNED_ROWS};

    /// Candidates offered from `TUNED_ROWS` stay out of the verify catalog (and so out of
    /// the families' source hashes) only while every verify matrix is smaller.
    #[test]
    fn verify_matrices_are_below_the_tuned_sizes() {
        for quick in [true, false] {
            for c in verify_cases(quick) {
                assert!(c.rows < TUNED_ROWS, "{c:?}");
            }
        }
    }
}
