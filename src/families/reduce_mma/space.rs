//! The `reduce_mma` candidate space: the launch shapes the tuner measures, and why each
//! is there or gone (each step cites the H200 measurement that put it in or took it out).
//! `gate_up_mma` builds its space from the same pieces.

use super::{ReduceMmaFamily, ReduceMmaProblem};
use crate::dtype::DType;
use crate::families::mma::{
    bf16_operands_fit, paired_windows_fit, register_budget, MmaLayout, MmaOperands, MmaVariant,
    MmaXStage,
};
use crate::families::simt::{Proj, MAX_SHARED_BYTES};
use crate::family::Family;
use crate::numerics::Tier;

/// The candidate space of `p`: the launch shapes of [`candidates_for`] and the
/// residency candidates, then at the tuned sizes the twins and edges the H200 tunes asked
/// for (each step says why).
pub(crate) fn candidates(p: &ReduceMmaProblem, tier: Tier, quick: bool) -> Vec<MmaVariant> {
    let bf16_ok = bf16_operands_fit(p.act, &[p.geometry.code]);
    let mut out = candidates_for(p.m, tier, quick, bf16_ok);
    out.extend(residency_candidates(
        p.m,
        p.geometry.k,
        tier,
        quick,
        bf16_ok,
    ));
    // The rest at the tuned sizes only (not the verify catalog's).
    let tuned = !quick && p.geometry.rows >= crate::families::catalog::TUNED_ROWS;
    if tuned && p.m <= 8 {
        widen_edges(p.geometry.rows, p.m, &mut out);
    }
    // Each shape again with paired windows where they save work.
    if tuned && paired_windows_fit(Proj::of(&p.geometry)) {
        add_paired_twins(&mut out);
    }
    // x rounded to f16 once by the host rather than per threadgroup or fragment.
    if tuned && p.act != DType::F16 {
        with_host_f16_x(&mut out);
    }
    // Batched staging where a thread stages most (4 samples and more).
    if tuned && p.m >= 4 {
        add_batched_stage_twins(&mut out);
    }
    if tuned {
        out.retain(|v| !far(p.m, v));
        // The first code words before the staging.
        add_early_words_twins(&mut out);
    }
    if tuned && p.m > 8 {
        // x staged past 48 KB where the M = 16 splits need it (not measured below).
        opt_in_where_needed(p, &mut out);
    }
    if offers_fused(p) {
        add_fused_twins(&mut out);
    }
    out
}

/// Whether `p`'s space holds twins that prescale x themselves ([`MmaVariant::fused_x`]):
/// bf16 x at M 1 at the tuned sizes, where the prototypes and the template's form beat
/// the prescale kernel then the matrix kernel (H100, M 1: 27.7 against 28.2 us at
/// 17408 x 5120, 29.2 against 31.2 at 5120 x 17408, `prototypes/results/session58/`);
/// at M 16 every fused form lost (each row group converts its own copy of x). Where it
/// holds them, every other candidate is timed after the prescale kernel a call runs
/// before it ([`crate::family::Family::with_call_prelude`]). Neither side's flags' read
/// is timed: the facade reads the prescale kernel's while the matrix kernel runs, a fused
/// kernel's after it (on the H100 that read cost the fused call its 1.8 us of GPU time,
/// through pageable memory; `prototypes/results/session58/`).
pub(crate) fn offers_fused(p: &ReduceMmaProblem) -> bool {
    FUSED_OFFERED
        && p.geometry.rows >= crate::families::catalog::TUNED_ROWS
        && p.m == 1
        && p.act == DType::Bf16
}

/// Off until the H200 re-measures the 72 `reduce_mma` M 1 entries its table holds (the
/// twins change their candidate space; `prototypes/session58/offer-fused.patch` turns it
/// on, and `prototypes/next/NEXT.md` has the run).
const FUSED_OFFERED: bool = false;

/// Append to `variants` each that stages plain x for f16 operands again, batched and
/// prescaling the caller's x itself ([`MmaVariant::fused_x`]).
pub fn add_fused_twins(variants: &mut Vec<MmaVariant>) {
    let mut twins: Vec<MmaVariant> = Vec::new();
    for v in variants
        .iter()
        .filter(|v| v.x_stage == MmaXStage::Shared && v.operands.is_f16() && !v.fused_x)
    {
        let twin = MmaVariant {
            x_f16: false,
            batch_stage: true,
            early_words: false,
            fused_x: true,
            ..*v
        };
        // Variants that differ only in what the twin sets have one twin.
        if !twins.contains(&twin) {
            twins.push(twin);
        }
    }
    variants.extend(twins);
}

/// Whether `candidates` leaves `v` out at the tuned sizes: a structure measured far from
/// every key's best ([`crate::family::Family::measured_far`]).
pub(crate) fn measured_far(p: &ReduceMmaProblem, v: &MmaVariant) -> bool {
    p.geometry.rows >= crate::families::catalog::TUNED_ROWS && far(p.m, v)
}

/// Append to `variants` the twin `twin` makes of each that `keep` selects, in order.
fn add_twins(
    variants: &mut Vec<MmaVariant>,
    keep: impl Fn(&MmaVariant) -> bool,
    twin: impl Fn(MmaVariant) -> MmaVariant,
) {
    let twins: Vec<MmaVariant> = variants
        .iter()
        .filter(|v| keep(v))
        .map(|&v| twin(v))
        .collect();
    variants.extend(twins);
}

/// Append to `variants` each of them again with paired state windows.
pub fn add_paired_twins(variants: &mut Vec<MmaVariant>) {
    add_twins(
        variants,
        |_| true,
        |v| MmaVariant {
            paired_windows: true,
            ..v
        },
    );
}

/// Append to `variants` each that stages x again with batched staging
/// ([`MmaVariant::batch_stage`]).
pub fn add_batched_stage_twins(variants: &mut Vec<MmaVariant>) {
    add_twins(
        variants,
        |v| v.x_stage.is_shared(),
        |v| MmaVariant {
            batch_stage: true,
            ..v
        },
    );
}

/// Append to `variants` each that stages x again with its first code words loaded
/// before the staging ([`MmaVariant::early_words`]).
pub fn add_early_words_twins(variants: &mut Vec<MmaVariant>) {
    add_twins(
        variants,
        |v| v.x_stage.is_shared(),
        |v| MmaVariant {
            early_words: true,
            fused_x: false,
            ..v
        },
    );
}

/// The structures that never came close at the tuned sizes. At M <= 8, never within
/// 1.09x of a key's best in the twenty-sixth and twenty-seventh sessions' full re-tunes
/// (every tuned key of both presets) and the twenty-eighth's probe
/// (`prototypes/session28/`): 18 % of the measurements. One-tile unsplit groups of one
/// simdgroup (1.18x and more), and of two except with x from device memory at M 4-8
/// (which comes within 1.02-1.05); at M 4-8 staged splits of K with one simdgroup a tile
/// (1.10x) and duplicated staged splits with eight (1.12x). At M = 16, x staged unsplit
/// (a threadgroup stages all of x for one or two row tiles): never within 1.23x (all 72
/// keys of the twenty-sixth session's re-tune, `prototypes/session26/space.py`), so only
/// the splits stage x there.
fn far(m: u32, v: &MmaVariant) -> bool {
    if m > 8 {
        return v.x_stage.is_shared() && v.k_split == 1;
    }
    let m4_8 = (4..=8).contains(&m);
    let unsplit_tile = v.row_tiles == 1 && v.k_split == 1;
    (unsplit_tile && v.col_split == 1)
        || (unsplit_tile && v.col_split == 2 && (!m4_8 || v.x_stage.is_shared()))
        || (m4_8 && v.k_split > 1 && v.col_split == 1 && v.x_stage.is_shared())
        || (m4_8 && v.k_split > 1 && v.col_split == 8 && v.x_stage.is_dup())
}

/// Let each variant of `p` in `variants` whose staged x is past 48 KB opt in to it
/// ([`MmaVariant::opt_in_shared`]), and no other.
pub fn opt_in_where_needed(p: &ReduceMmaProblem, variants: &mut [MmaVariant]) {
    for v in variants.iter_mut() {
        v.opt_in_shared =
            v.x_stage.is_shared() && ReduceMmaFamily::kernel(p, *v).mma_shared() > MAX_SHARED_BYTES;
    }
}

/// Take x rounded to f16 by the host in every f16-operand candidate
/// ([`MmaVariant::x_f16`]). Measured on the H200 against the converting twins (every
/// `reduce_mma` candidate of 24 keys, 1mad and 3inst, k 2 / 4, M 1 / 4 / 16, both Qwen3-14B
/// shapes: `prototypes/results/xf16.md`), the twin was the faster of the pair in nearly
/// every case (median per key 0.94-0.995), so at the tuned sizes the space offers that
/// form only (`gate_up_mma`'s too).
pub fn with_host_f16_x(variants: &mut [MmaVariant]) {
    for v in variants.iter_mut().filter(|v| v.operands.is_f16()) {
        v.x_f16 = true;
    }
}

/// The built-in default of `reduce_mma` (H200 bench, 17408 x 5120 and 5120 x 17408):
/// one tile per threadgroup, 8 simdgroups splitting the columns, 16 for few row tiles
/// (up to M = 8).
pub(crate) fn default_for(rows: usize, m: u32) -> MmaVariant {
    let col_split = if m <= 8 && few_tiles(rows) { 16 } else { 8 };
    MmaVariant::unsplit(1, col_split, 16, MmaXStage::Global)
}

/// Whether `rows` make too few 16-row tiles to fill the H200 with one per threadgroup
/// (5120 rows: 320 tiles for 132 SMs), where splitting the columns across threadgroups
/// pays.
fn few_tiles(rows: usize) -> bool {
    rows.div_ceil(16) < 512
}

/// Widen the space past the edges the H200 winners sat at (`tuning/reports/nvidia-h200-
/// tune.md`), at the tuned sizes up to M = 8: 4 simdgroups per one-tile group, the fewest
/// offered, won 36 keys, so each such candidate comes again with 2 and (where 2 then won
/// 3 M = 8 keys by 7-10 %) 1; 4 column splits, the most offered, won 20 keys at 5120 x
/// 17408, so where tiles are few each candidate of 4 comes again with 8 and (8 then won
/// 28 keys by 2-3 %) 16, and (where 16 then won 5 keys, and with batched staging 7 M = 8
/// keys) 32, which won none (`tuning/reports/nvidia-h200-tune.md` item 25) but keeps 16
/// off the space's edge. With batched staging, 4 splits won 21 keys of M = 4 / 8 at the
/// many-tile shapes (item 26), so from M = 4 those come again with 8, and at M = 8 (where
/// 8 then won 3 keys at 14336 x 4096, item 27) 16.
fn widen_edges(rows: usize, m: u32, variants: &mut Vec<MmaVariant>) {
    add_col_split_twins(variants, 4, &[2, 1]);
    let splits: &[u32] = match (few_tiles(rows), m) {
        (true, _) => &[8, 16, 32],
        (false, 5..) => &[8, 16],
        (false, 4) => &[8],
        (false, _) => &[],
    };
    let more_splits: Vec<MmaVariant> = variants
        .iter()
        .filter(|v| v.k_split == 4)
        .flat_map(|v| splits.iter().map(|&k_split| MmaVariant { k_split, ..*v }))
        .collect();
    variants.extend(more_splits);
}

/// Append each one-tile candidate of `from` simdgroups per tile again with each count of
/// `to` (the twins of one candidate together, in `to`'s order).
pub(crate) fn add_col_split_twins(variants: &mut Vec<MmaVariant>, from: u32, to: &[u32]) {
    let twins: Vec<MmaVariant> = variants
        .iter()
        .filter(|v| v.row_tiles == 1 && v.col_split == from)
        .flat_map(|v| {
            to.iter()
                .map(move |&col_split| MmaVariant { col_split, ..*v })
        })
        .collect();
    variants.extend(twins);
}

/// Candidates that buy residency (`reduce_mma` only): a register budget, and split-K
/// under it. On the H200 the kernels of k <= 3 sit at 48-56 registers, where 8
/// simdgroups per threadgroup run 5 or 4 groups per SM; 48 keeps 5 (k 4 sits at 56-64:
/// 64 keeps 4). Split-K multiplies the groups of a short grid (5120 x 17408: 320 row
/// tiles for 132 SMs; `tuning/reports/nvidia-h200-mma-bench.md`), stages only its share
/// of x, and at M = 16 lets several row tiles share that x. Its arrival bookkeeping
/// costs ptxas about 8 registers, so every split runs under the budget.
fn residency_candidates(m: u32, k: u32, tier: Tier, quick: bool, bf16_ok: bool) -> Vec<MmaVariant> {
    if tier == Tier::Exact {
        return Vec::new();
    }
    let v = |col_split, x_stage, k_split| MmaVariant {
        k_split,
        max_registers: register_budget(k),
        ..MmaVariant::unsplit(1, col_split, 16, x_stage)
    };
    if quick {
        return vec![
            v(2, MmaXStage::Shared, 2),
            v(4, MmaXStage::Global, 3),
            v(4, MmaXStage::SharedDup, 1),
            MmaVariant {
                row_tiles: 2,
                ..v(2, MmaXStage::Shared, 3)
            },
        ];
    }
    let mut out = Vec::new();
    if m > 8 {
        // M = 16 converts as many x values as it multiplies weights unless row tiles share
        // them: several tiles per threadgroup over a split's share of x, staged once (the
        // H200 SASS: 1mad k 2 7.25 -> 5.69 instructions per weight, 3inst 6.62 in one pass
        // where m_tile = 8 decodes twice at 5.74). 5 splits of 40 steps give 2 or 4
        // simdgroups per tile whole steps each; 17 splits of 136 steps (17408 columns) are
        // the one split whose staged x fits 48 KB at 8 tiles and M = 16 (H200 bench: 3inst
        // k 2 66.6 -> 49.8 us at 5120 x 17408).
        for (row_tiles, col_split, k_split) in [
            (8, 1, 8),
            (4, 2, 8),
            (2, 4, 8),
            (4, 2, 5),
            (2, 4, 5),
            (8, 1, 17),
        ] {
            for x_stage in [MmaXStage::Shared, MmaXStage::SharedDup] {
                out.push(MmaVariant {
                    row_tiles,
                    max_registers: 64,
                    ..v(col_split, x_stage, k_split)
                });
            }
        }
        return out;
    }
    for x_stage in [MmaXStage::Global, MmaXStage::Shared, MmaXStage::SharedDup] {
        for col_split in [4, 8] {
            // 3 won no key of the first H200 tune (2 and 4 won 62 of 72 at 5120 x 17408).
            for k_split in [1, 2, 4] {
                out.push(v(col_split, x_stage, k_split));
            }
        }
    }
    if bf16_ok {
        for (col_split, k_split) in [(8, 1), (8, 2), (8, 4), (4, 4)] {
            out.push(MmaVariant {
                operands: MmaOperands::Bf16,
                ..v(col_split, MmaXStage::Global, k_split)
            });
        }
    }
    out
}

/// The candidate space of the matrix-unit families (fast tier only). Staged-x variants
/// too big for a device's threadgroup memory are dropped where the space meets the
/// device (`family::fits`). `bf16_ok`: the problem takes bf16 operands (bf16
/// activations, codes of one k-slot per weight).
pub(crate) fn candidates_for(m: u32, tier: Tier, quick: bool, bf16_ok: bool) -> Vec<MmaVariant> {
    if tier == Tier::Exact {
        return Vec::new();
    }
    let m_tiles: &[u32] = if m > 8 { &[16, 8] } else { &[16] };
    let v = MmaVariant::unsplit;
    let bf16 = |v: MmaVariant| MmaVariant {
        operands: MmaOperands::Bf16,
        ..v
    };
    let mut out = Vec::new();
    if quick {
        for &m_tile in m_tiles {
            out.push(v(2, 2, m_tile, MmaXStage::Global));
        }
        out.push(v(1, 1, 16, MmaXStage::Global));
        out.push(v(1, 4, 8, MmaXStage::Shared));
        out.push(v(2, 1, 16, MmaXStage::SharedDup));
        if bf16_ok {
            out.push(bf16(v(
                1,
                2,
                *m_tiles.last().unwrap_or(&16),
                MmaXStage::Global,
            )));
        }
        return out;
    }
    // H200 (bench of 26 problems): one or two tiles per threadgroup, 4 to 16 simdgroups
    // splitting the columns; fewer left too few warps, more tiles per group only cost.
    for &m_tile in m_tiles {
        for x_stage in [MmaXStage::Global, MmaXStage::Shared, MmaXStage::SharedDup] {
            for (row_tiles, col_split) in [(1, 4), (1, 8), (1, 16), (2, 4), (2, 8)] {
                out.push(v(row_tiles, col_split, m_tile, x_stage));
            }
        }
        if bf16_ok {
            for (row_tiles, col_split) in [(1, 4), (1, 8), (2, 4)] {
                out.push(bf16(v(row_tiles, col_split, m_tile, MmaXStage::Global)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ScaleDType;
    use crate::kernel::KernelSpec;
    use crate::{Code, Geometry};

    /// The fused twins of the space's staged f16-operand candidates at the tuned M 1 keys
    /// of both shapes are kernels that validate (batched, bf16 x read as it is), unless
    /// their staged x is past 48 KB, at most one per such candidate.
    #[test]
    fn fused_twins_are_valid_kernels_of_the_staged_candidates() {
        for (rows, cols) in [(17408, 5120), (5120, 17408)] {
            fused_twins_are_valid_at(rows, cols);
        }
    }

    fn fused_twins_are_valid_at(rows: usize, cols: usize) {
        let geometry = Geometry::new(rows, cols, 256, 2, 12, Code::OneMad).unwrap();
        let p = ReduceMmaProblem {
            geometry,
            scale: ScaleDType::F16,
            act: DType::Bf16,
            m: 1,
        };
        let mut vs: Vec<MmaVariant> = candidates(&p, Tier::Fast, false)
            .into_iter()
            .filter(|v| !v.fused_x)
            .collect();
        let (before, staged) = (
            vs.len(),
            vs.iter()
                .filter(|v| v.x_stage == MmaXStage::Shared && v.operands.is_f16())
                .count(),
        );
        add_fused_twins(&mut vs);
        let twins = &vs[before..];
        assert!(staged > 0 && !twins.is_empty() && twins.len() <= staged);
        // Where row tiles are few the space splits K, and so do its twins.
        assert!(
            rows > cols || twins.iter().any(|t| t.k_split > 1),
            "{rows}x{cols}"
        );
        let mut valid = 0;
        for t in twins {
            assert!(
                t.fused_x && t.batch_stage && !t.x_f16 && !t.early_words,
                "{t}"
            );
            // Valid, or past 48 KB of staged x as its plain source is (the tuner drops
            // those where the device meets the space).
            match ReduceMmaFamily::kernel(&p, *t).validate() {
                Ok(()) => valid += 1,
                Err(e) => assert!(e.to_string().contains("threadgroup memory"), "{t}: {e}"),
            }
        }
        assert!(valid > 0, "{rows}x{cols}: no valid fused twin");
    }
}
