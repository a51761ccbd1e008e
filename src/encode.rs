//! The encoder: tail-biting Viterbi quantization of a dense matrix (QTIP's two-pass
//! scheme) into the format of `SPEC.md`.
//!
//! Every block of `T` weights of a row is quantized to the path of the bitshift trellis
//! (SPEC section 2) whose code values (SPEC section 3), times the row scale, are nearest
//! to the weights in squared error:
//!
//! 1. row `r` is searched at scale `rms(row) / rms(code values) * m`, the targets being
//!    `row / scale`; the multiplier `m` (one per matrix) is chosen on a sample of blocks
//!    (`RowEncoder::search_multiplier`);
//! 2. pass 1 runs unconstrained Viterbi on the block rotated by `T/2` and reads the state
//!    the path takes at original position 0; its high `L-k` bits are the overlap `o`;
//! 3. pass 2 runs Viterbi on the block in order, with the first state restricted to
//!    `s_0 >> k == o` and the last to `s_{T-1} mod 2^(L-k) == o`, so the path closes on
//!    itself and [`layout::pack_block`] stores it exactly;
//! 4. the row scale becomes the least-squares optimum for the chosen values
//!    (`sum w v / sum v v`), rounded to f16; the reported MSE decodes the packed codes.
//!
//! A Viterbi step costs `O(2^L)` for its `2^L * 2^k` edges: the `2^k` successors of a
//! state share their predecessors `p | h << (L-k)`, so one minimum per predecessor
//! group serves them all (`step`). The loops run over plain slices in fixed-size
//! blocks so LLVM vectorises them; on x86-64 the same code is also compiled for AVX2 and
//! picked at run time (the per-lane operations are identical, so the result does not
//! depend on the CPU). Rows run in parallel (rayon), and so do the blocks of a row.

use crate::codes::Code;
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::layout;
use crate::matrix::QuantizedMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use std::cell::RefCell;

/// What to quantize to.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodeOptions {
    /// `T`: weights per block.
    pub t: usize,
    /// `k`: bits per weight.
    pub k: u32,
    /// `L`: trellis state bits.
    pub l: u32,
    /// State -> value map.
    pub code: Code,
    /// The `2^L` table of code `lut` (see [`gaussian_lut`]); `None` for computed codes.
    pub lut: Option<Vec<f32>>,
    /// Report progress on stderr as plain lines (`quantize: <done>/<rows> rows`, about
    /// every 10%). For a progress bar of your own, use [`quantize_with_progress`].
    pub progress: bool,
}

/// A quantized matrix and how far it is from its input.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// Codes, f16 scales and (code `lut`) the table.
    pub matrix: QuantizedMatrix,
    /// Mean over all weights of `(value(s) * scale - w)^2`: the product in f32 (the
    /// SPEC section 4 weight at `T = f32`), the sum in f64.
    pub mse: f64,
}

/// A Gaussian table of `2^l` values for code `lut`: i.i.d. standard normal samples from
/// `ChaCha8Rng::seed_from_u64(seed)`, so the same `(l, seed)` always gives the same table.
/// An L outside SPEC 1's 2..=16 is an error.
pub fn gaussian_lut(l: u32, seed: u64) -> Result<Vec<f32>> {
    crate::codes::check_l(l)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok((0..1usize << l)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect())
}

/// Quantize `dense`, row-major `[rows, cols]` f32, with tail-biting Viterbi.
///
/// Errors (naming the field) on a geometry outside SPEC section 1, on
/// `dense.len() != rows * cols`, on a missing, misfit or non-finite `lut`, on non-finite
/// weights and on a row whose scale overflows f16. A row whose scale falls below f16's
/// normal range keeps it as f16 has it, subnormal or 0: it decodes as coarse multiples or
/// zeros, which its `mse` shows (the CLI names such rows in a warning).
pub fn quantize(dense: &[f32], rows: usize, cols: usize, opts: &EncodeOptions) -> Result<Encoded> {
    quantize_inner(dense, rows, cols, opts, false, &|_| {}).map(|(e, _)| e)
}

/// [`quantize`], calling `on_rows(done)` (from any thread) each time a row is finished,
/// with the number of rows finished so far. The CLI draws its progress bar with it.
pub fn quantize_with_progress(
    dense: &[f32],
    rows: usize,
    cols: usize,
    opts: &EncodeOptions,
    on_rows: &(dyn Fn(usize) + Sync),
) -> Result<Encoded> {
    quantize_inner(dense, rows, cols, opts, false, on_rows).map(|(e, _)| e)
}

/// The tail-biting path of one block: states `s_0 .. s_{T-1}` of the bitshift trellis
/// (`s_{t+1} = (s_t << k) mod 2^L | new bits`, closing from `s_{T-1}` back to `s_0`)
/// that make `sum_t (values[s_t] - targets[t])^2` small, by QTIP's two Viterbi passes.
/// [`quantize`] runs this on every block of `row / scale`; [`layout::pack_block`]
/// stores the result. `values` is the code's table ([`Code::table`]).
pub fn tail_biting_path(values: &[f32], k: u32, l: u32, targets: &[f32]) -> Result<Vec<u32>> {
    crate::geometry::check_kl(k, l)?;
    if values.len() != 1 << l {
        return Err(Error::invalid(
            "values length",
            values.len(),
            format!("must be 2^L = {}", 1 << l),
        ));
    }
    check_backpointers(targets.len(), k, l, 1)?;
    if targets.len() < 2 {
        return Err(Error::invalid(
            "targets length",
            targets.len(),
            "a block needs at least 2 weights",
        ));
    }
    if let Some(i) = values.iter().position(|v| !in_range(*v)) {
        return Err(Error::invalid(
            format!("values[{i}]"),
            values[i],
            format!("must be finite and at most {MAX_MAGNITUDE:e} in magnitude"),
        ));
    }
    if let Some(i) = targets.iter().position(|v| !in_range(*v)) {
        return Err(Error::invalid(
            format!("targets[{i}]"),
            targets[i],
            format!("must be finite and at most {MAX_MAGNITUDE:e} in magnitude"),
        ));
    }
    let mut states = vec![0u32; targets.len()];
    SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        s.targets.clear();
        s.targets.extend_from_slice(targets);
        encode_block(values, k, l, &mut states, s);
        *s = Scratch::default();
    });
    // Pass 2 may find no closed path for a block of fewer bits than the trellis has
    // (its start and end constraints overlap); the geometry's T >= 32 never is one.
    if !layout::is_tail_biting(&states, k, l) {
        return Err(Error::invalid(
            "targets length",
            targets.len(),
            format!(
                "is too short for a closed path at k = {k}, L = {l} ({} bits)",
                targets.len() * k as usize
            ),
        ));
    }
    Ok(states)
}

/// The most bytes of Viterbi back pointers the encoder holds at once: one per step and
/// state group, `T * 2^(L - k)` (8 MiB at T = 256, L = 16, k = 1), on each thread that
/// encodes (rayon's pool for [`quantize`], the caller's for [`tail_biting_path`]).
pub const MAX_BACKPOINTER_BYTES: u64 = 4 << 30;

/// Whether [`quantize`] can encode at geometry `g` on this thread pool: a block too long
/// for its trellis is an error naming T (and the threads), where the workers' tables
/// would abort the process on allocation. The CLI asks before it reads anything more.
pub fn check_geometry(g: &Geometry) -> Result<()> {
    crate::error::check_threads_env()?; // before the first use builds rayon's pool
    check_backpointers(g.t, g.k, g.l, rayon::current_num_threads())
}

fn check_backpointers(t: usize, k: u32, l: u32, threads: usize) -> Result<()> {
    let bytes = (t as u64)
        .checked_mul(1u64 << (l - k))
        .and_then(|b| b.checked_mul(threads as u64));
    if bytes.is_none_or(|b| b > MAX_BACKPOINTER_BYTES) {
        return Err(Error::invalid(
            "T",
            t,
            format!(
                "the encoder's Viterbi keeps T x 2^(L - k) = {t} x 2^{} bytes on each of \
                 its {threads} threads, more than {MAX_BACKPOINTER_BYTES} in all; use a \
                 smaller T (or fewer threads: {})",
                l - k,
                crate::error::THREADS_ENV
            ),
        ));
    }
    Ok(())
}

/// [`quantize`], optionally also returning the state of every weight, `[rows, cols]`.
fn quantize_inner(
    dense: &[f32],
    rows: usize,
    cols: usize,
    opts: &EncodeOptions,
    keep_states: bool,
    on_rows: &(dyn Fn(usize) + Sync),
) -> Result<(Encoded, Vec<u32>)> {
    let g = Geometry::new(rows, cols, opts.t, opts.k, opts.l, opts.code)?;
    check_geometry(&g)?;
    if dense.len() != rows * cols {
        return Err(Error::Shape {
            name: "dense".into(),
            actual: vec![dense.len()],
            expected: vec![rows, cols],
        });
    }
    if g.code != Code::Lut && opts.lut.is_some() {
        return Err(Error::invalid(
            "lut",
            "present",
            format!("code {} takes no table", g.code),
        ));
    }
    let values = g.code.table(g.l, opts.lut.as_deref())?;
    check_table_values("lut", &values)?;
    if let Some(i) = dense.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(
            format!("dense[{}, {}]", i / cols, i % cols),
            dense[i],
            "weights must be finite",
        ));
    }

    let search = unit_sized(&values);
    let mut enc = RowEncoder::new(&g, &values, &search, dense);
    enc.mult = enc.search_multiplier();
    // Rows finish in any order; counting under a lock keeps the reports monotonic.
    let done = std::sync::Mutex::new(0usize);
    let step = rows.div_ceil(10).max(1);
    let mut codes = vec![0u32; g.codes_shape().iter().product()];
    let rows_out: Vec<Result<RowResult>> = codes
        .par_chunks_mut(g.words_per_row())
        .enumerate()
        .map(|(r, out)| {
            let mut res = enc.row(r, out);
            if let (Ok(row), false) = (&mut res, keep_states) {
                row.states = Vec::new();
            }
            let mut n = done.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            on_rows(*n);
            if opts.progress && ((*n).is_multiple_of(step) || *n == rows) {
                eprintln!("quantize: {}/{rows} rows", *n);
            }
            drop(n);
            res
        })
        .collect();
    // The workers' back pointers (up to [`MAX_BACKPOINTER_BYTES`] in all) are not kept
    // past the call.
    rayon::broadcast(|_| SCRATCH.with(|s| s.take()));
    let mut scales = Vec::with_capacity(rows);
    let mut states = Vec::with_capacity(if keep_states { rows * cols } else { 0 });
    let mut sse = 0.0f64;
    for res in rows_out {
        let res = res?;
        scales.push(res.scale);
        sse += res.sse;
        if keep_states {
            states.extend_from_slice(&res.states);
        }
    }
    let matrix = QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, opts.lut.clone())?;
    let mse = sse / (rows * cols) as f64;
    Ok((Encoded { matrix, mse }, states))
}

/// The grid of search-scale multipliers: `MULT_POINTS` from `MULT_LOW` by `MULT_RATIO`,
/// extended while the best is at an end inside `MULT_MIN ..= MULT_MAX`.
const MULT_LOW: f64 = 0.75;
const MULT_RATIO: f64 = 1.1;
const MULT_POINTS: i32 = 8;
const MULT_MIN: f64 = 0.3;
const MULT_MAX: f64 = 3.0;

/// `values` times the power of two that brings their rms nearest 1: the table the
/// Viterbi search runs on. A power of two scales each target, difference and cost
/// exactly, so the path is the one the table itself gives, save where its costs would
/// leave f32's range (a table of values near 2^-70 squares them below it).
fn unit_sized(values: &[f32]) -> Vec<f32> {
    let ss: f64 = values.iter().map(|&v| v as f64 * v as f64).sum();
    let e = (ss / values.len() as f64).sqrt().log2().round();
    if e == 0.0 || !e.is_finite() {
        return values.to_vec();
    }
    let f = (-e).exp2();
    values.iter().map(|&v| (v as f64 * f) as f32).collect()
}

/// What every row shares: geometry, value table, the input and the search multiplier.
struct RowEncoder<'a> {
    g: &'a Geometry,
    /// The code's values (the scales are fitted to these).
    values: &'a [f32],
    /// The values the path search runs on ([`unit_sized`]).
    search: &'a [f32],
    dense: &'a [f32],
    /// `rms` of every row of `dense`.
    row_rms: Vec<f64>,
    /// `rms` of the search table.
    values_rms: f64,
    /// Row `r` is searched at scale `row_rms[r] / values_rms * mult`.
    mult: f64,
}

/// One quantized row.
struct RowResult {
    /// The f16 scale, as f32.
    scale: f32,
    /// Sum of squared errors of the decoded row.
    sse: f64,
    /// The state of every weight.
    states: Vec<u32>,
}

impl<'a> RowEncoder<'a> {
    fn new(g: &'a Geometry, values: &'a [f32], search: &'a [f32], dense: &'a [f32]) -> Self {
        let ss: f64 = search.iter().map(|&v| v as f64 * v as f64).sum();
        let row_rms = dense
            .par_chunks(g.cols)
            .map(|w| (w.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / g.cols as f64).sqrt())
            .collect();
        RowEncoder {
            g,
            values,
            search,
            dense,
            row_rms,
            values_rms: (ss / search.len() as f64).sqrt(),
            mult: 1.0,
        }
    }

    /// The scale row `r` is searched at with multiplier `mult`; rows of zeros use 1.
    fn search_scale(&self, r: usize, mult: f64) -> f64 {
        let s = self.row_rms[r] / self.values_rms * mult;
        if s > 0.0 && s.is_finite() {
            s
        } else {
            1.0
        }
    }

    /// Choose the multiplier of the rms-matched search scale. Trellis paths do not
    /// reproduce the source's variance (the code's tails are bounded, the best paths
    /// shrink), so the best scale is up to ~40% off `rms(row)/rms(values)` at large k
    /// (about 0.9 at k = 1, 1.0 at k = 2, 1.2 at k = 4, 1.3-1.45 at k = 8 for Gaussian
    /// rows). Single unconstrained Viterbi passes on a few blocks spread over the matrix
    /// (1/16 of them, at least 8 and at most 32) rate a geometric grid of multipliers
    /// (ratio 1.1, extended until the best is inside); a parabola through the best and
    /// its neighbours (in log m) gives the answer, which averages out the sample's
    /// noise. Deterministic: the sample and the sums do not depend on threads.
    ///
    /// The sample is drawn from the rows that are not all zeros: a zero row rates every
    /// multiplier alike, so a sample of zero rows alone would walk the grid to its low
    /// end. With no such row, any multiplier codes the matrix alike: 1.
    fn search_multiplier(&self) -> f64 {
        let g = self.g;
        let bpr = g.blocks_per_row();
        let live: Vec<usize> = (0..g.rows).filter(|&r| self.row_rms[r] > 0.0).collect();
        if live.is_empty() {
            return 1.0;
        }
        let total = live.len() * bpr;
        let n = (total / 16).clamp(8, 32).min(total);
        let sample: Vec<usize> = (0..n)
            .map(|i| (2 * i + 1) * total / (2 * n))
            .map(|b| live[b / bpr] * bpr + b % bpr)
            .collect();
        let rate = |mults: &[f64]| -> Vec<f64> {
            let pairs: Vec<(f64, usize)> = mults
                .iter()
                .flat_map(|&m| sample.iter().map(move |&b| (m, b)))
                .collect();
            let errs: Vec<f64> = pairs
                .into_par_iter()
                .map(|(m, b)| self.block_error(b, m))
                .collect();
            errs.chunks(n).map(|c| c.iter().sum()).collect()
        };
        let mut grid: Vec<f64> = (0..MULT_POINTS)
            .map(|i| MULT_LOW * MULT_RATIO.powi(i))
            .collect();
        let mut errs = rate(&grid);
        let argmin =
            |e: &[f64]| (0..e.len()).fold(0, |best, i| if e[i] < e[best] { i } else { best });
        loop {
            let i = argmin(&errs);
            if i == 0 && grid[0] > MULT_MIN {
                let m = grid[0] / MULT_RATIO;
                grid.insert(0, m);
                errs.insert(0, rate(&[m])[0]);
            } else if i == grid.len() - 1 && grid[i] < MULT_MAX {
                let m = grid[i] * MULT_RATIO;
                grid.push(m);
                errs.push(rate(&[m])[0]);
            } else {
                break;
            }
        }
        let i = argmin(&errs);
        if i == 0 || i == grid.len() - 1 {
            return grid[i];
        }
        let (a, b, c) = (errs[i - 1], errs[i], errs[i + 1]);
        let curvature = a - 2.0 * b + c;
        let offset = if curvature > 0.0 {
            (0.5 * (a - c) / curvature).clamp(-0.5, 0.5)
        } else {
            0.0
        };
        grid[i] * MULT_RATIO.powf(offset)
    }

    /// Squared error of the unconstrained Viterbi path of block `b` (counted over the
    /// whole matrix) at search multiplier `mult`.
    fn block_error(&self, b: usize, mult: f64) -> f64 {
        let g = self.g;
        let r = b / g.blocks_per_row();
        let start = r * g.cols + (b % g.blocks_per_row()) * g.t;
        let scale = self.search_scale(r, mult);
        let inv = 1.0 / scale;
        SCRATCH.with(|s| {
            let s = &mut *s.borrow_mut();
            s.targets.clear();
            s.targets.extend(
                self.dense[start..start + g.t]
                    .iter()
                    .map(|&v| (v as f64 * inv) as f32),
            );
            let mut states = std::mem::take(&mut s.states);
            states.resize(g.t, 0);
            let targets = std::mem::take(&mut s.targets);
            let cost = viterbi(self.search, g.k, g.l, &targets, None, &mut states, s);
            s.targets = targets;
            s.states = states;
            cost as f64 * scale * scale
        })
    }

    /// Quantize row `r` into `out` (its codes).
    fn row(&self, r: usize, out: &mut [u32]) -> Result<RowResult> {
        let g = self.g;
        let w = &self.dense[r * g.cols..(r + 1) * g.cols];
        // In f64: a row of tiny weights has a search scale far below f32's range.
        let inv = 1.0 / self.search_scale(r, self.mult);
        let mut states = vec![0u32; g.cols];
        // Blocks are independent once the search scale is fixed.
        states
            .par_chunks_mut(g.t)
            .zip(out.par_chunks_mut(g.words_per_block()))
            .zip(w.par_chunks(g.t))
            .for_each(|((st, words), wb)| {
                SCRATCH.with(|s| {
                    let s = &mut *s.borrow_mut();
                    s.targets.clear();
                    s.targets
                        .extend(wb.iter().map(|&v| (v as f64 * inv) as f32));
                    encode_block(self.search, g.k, g.l, st, s);
                });
                layout::pack_block(st, g.k, words);
            });
        // Least-squares scale for the chosen values, rounded to f16.
        let (mut wv, mut vv) = (0.0f64, 0.0f64);
        for (&st, &x) in states.iter().zip(w) {
            let v = self.values[st as usize] as f64;
            wv += x as f64 * v;
            vv += v * v;
        }
        let ls = if vv > 0.0 { wv / vv } else { 0.0 };
        let scale = f16_scale(r, ls)?;
        // The reported error uses the decoded weights, read back from the packed codes.
        let wpb = g.words_per_block();
        let mut sse = 0.0f64;
        for (b, wb) in w.chunks(g.t).enumerate() {
            let block = &out[b * wpb..(b + 1) * wpb];
            for (t, &x) in wb.iter().enumerate() {
                let s = layout::state(block, g.t, g.k, g.l, t);
                let d = (self.values[s as usize] * scale) as f64 - x as f64;
                sse += d * d;
            }
        }
        Ok(RowResult { scale, sse, states })
    }
}

/// Row `r`'s least-squares scale `ls` rounded to f16 once, nearest-even: the f16 nearest
/// the optimum is the best f16 scale (the error is quadratic in it). `half`'s
/// `f16::from_f64` rounds through f32 on x86-64 with F16C (twice) and drops low bits
/// without it, so about one scale in 15,000 came out one f16 ulp off, differently by CPU.
fn f16_scale(r: usize, ls: f64) -> Result<f32> {
    let scale = DType::F16.round_f64(ls);
    if !scale.is_finite() {
        return Err(Error::invalid(
            format!("scale of row {r}"),
            ls,
            "exceeds the f16 range of scales",
        ));
    }
    Ok(scale)
}

/// Per-thread working memory of the Viterbi passes.
#[derive(Default)]
struct Scratch {
    /// `M_t`: the cheapest path into each predecessor group (see [`step`]).
    mins: Vec<f32>,
    mins_next: Vec<f32>,
    /// `T * 2^(L-k)` back pointers: the high `k` bits of the best predecessor.
    bp: Vec<u8>,
    targets: Vec<f32>,
    rotated: Vec<f32>,
    states: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The tail-biting path for `s.targets` (one block) into `states`: pass 1 on the block
/// rotated by `T/2` fixes the overlap, pass 2 finds the best path through it that closes.
fn encode_block(values: &[f32], k: u32, l: u32, states: &mut [u32], s: &mut Scratch) {
    let t_len = s.targets.len();
    let half = t_len / 2;
    s.rotated.clear();
    s.rotated
        .extend((0..t_len).map(|i| s.targets[(i + half) % t_len]));
    let rotated = std::mem::take(&mut s.rotated);
    viterbi(values, k, l, &rotated, None, states, s);
    s.rotated = rotated;
    // Rotated position `t_len - half` is original position 0 (`half` for an even T).
    let overlap = states[t_len - half] >> k;
    let targets = std::mem::take(&mut s.targets);
    viterbi(values, k, l, &targets, Some(overlap), states, s);
    s.targets = targets;
}

/// Bound on code values and Viterbi targets: path costs stay far below the cost that
/// marks an excluded start state. (`quantize` scales its targets to the table's rms, so
/// weights need no bound.)
pub const MAX_MAGNITUDE: f32 = 1e6;

/// A value table the encoder can code with, its entries named `name[i]`: every value
/// finite and at most [`MAX_MAGNITUDE`] in magnitude, and not all one value (a table of
/// one value, all zeros say, codes every weight as that value: no row scale fits it).
pub fn check_table_values(name: &str, values: &[f32]) -> Result<()> {
    if let Some(i) = values.iter().position(|v| !in_range(*v)) {
        return Err(Error::invalid(
            format!("{name}[{i}]"),
            values[i],
            format!("must be finite and at most {MAX_MAGNITUDE:e} in magnitude"),
        ));
    }
    if let Some(&v) = values.first().filter(|&&v| values.iter().all(|&w| w == v)) {
        return Err(Error::invalid(
            name,
            format!("{} x {v}", values.len()),
            "the table's values are all equal: it codes every weight as that one value",
        ));
    }
    Ok(())
}

/// Finite and at most [`MAX_MAGNITUDE`] in magnitude.
fn in_range(v: f32) -> bool {
    v.is_finite() && v.abs() <= MAX_MAGNITUDE
}

/// A finite stand-in for an infinite cost (an excluded start state), so that the bit
/// tricks of [`step`] never meet an infinity or a NaN.
const EXCLUDED: f32 = 1e30;

/// Viterbi over `x` (`x.len()` steps); `overlap = Some(o)` restricts the path to start in
/// a state with high bits `o` and end in one with low bits `o` (a tail-biting path).
/// Writes the best path's states to `states` and returns its cost.
fn viterbi(
    values: &[f32],
    k: u32,
    l: u32,
    x: &[f32],
    overlap: Option<u32>,
    states: &mut [u32],
    s: &mut Scratch,
) -> f32 {
    let p_n = 1usize << (l - k);
    let t_len = x.len();
    s.mins.resize(p_n, 0.0);
    s.mins_next.resize(p_n, 0.0);
    s.bp.resize(t_len * p_n, 0);
    // mins[q] = 0 for the allowed start groups q = s_0 >> k, excluded otherwise.
    match overlap {
        None => s.mins.fill(0.0),
        Some(o) => {
            s.mins.fill(EXCLUDED);
            s.mins[o as usize] = 0.0;
        }
    }
    forward(values, k, x, &mut s.mins, &mut s.mins_next, &mut s.bp);
    // The cost of ending in state i is d_{T-1}(i) + mins[i >> k].
    let xl = x[t_len - 1];
    let end_cost = |i: u32| {
        let d = values[i as usize] - xl;
        d * d + s.mins[(i >> k) as usize]
    };
    // The allowed end states; the first one wins ties.
    let first = overlap.unwrap_or(0);
    let (mut best, mut best_cost) = (first, end_cost(first));
    let mut consider = |i: u32| {
        let c = end_cost(i);
        if c < best_cost {
            best = i;
            best_cost = c;
        }
    };
    match overlap {
        None => (1..1u32 << l).for_each(&mut consider),
        Some(o) => (1..1u32 << k).for_each(|h| consider(o | h << (l - k))),
    }
    states[t_len - 1] = best;
    for t in (1..t_len).rev() {
        let p = states[t] >> k;
        let h = s.bp[t * p_n + p as usize] as u32;
        states[t - 1] = p | h << (l - k);
    }
    best_cost
}

/// The forward pass: on return `mins` holds `M_{T-1}` (see [`step`]) and
/// `bp[t * 2^(L-k) + p]` the back pointers of every step `t >= 1`.
fn forward(values: &[f32], k: u32, x: &[f32], mins: &mut [f32], next: &mut [f32], bp: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { forward_avx2(values, k, x, mins, next, bp) };
            return;
        }
    }
    forward_any(values, k, x, mins, next, bp)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn forward_avx2(
    values: &[f32],
    k: u32,
    x: &[f32],
    mins: &mut [f32],
    next: &mut [f32],
    bp: &mut [u8],
) {
    forward_k(values, k, x, mins, next, bp)
}

/// The baseline build (SSE2 on x86-64).
fn forward_any(
    values: &[f32],
    k: u32,
    x: &[f32],
    mins: &mut [f32],
    next: &mut [f32],
    bp: &mut [u8],
) {
    forward_k(values, k, x, mins, next, bp)
}

#[inline(always)]
fn forward_k(values: &[f32], k: u32, x: &[f32], mins: &mut [f32], next: &mut [f32], bp: &mut [u8]) {
    match k {
        1 => forward_const::<1>(values, x, mins, next, bp),
        2 => forward_const::<2>(values, x, mins, next, bp),
        3 => forward_const::<3>(values, x, mins, next, bp),
        4 => forward_const::<4>(values, x, mins, next, bp),
        5 => forward_const::<5>(values, x, mins, next, bp),
        6 => forward_const::<6>(values, x, mins, next, bp),
        7 => forward_const::<7>(values, x, mins, next, bp),
        8 => forward_const::<8>(values, x, mins, next, bp),
        _ => unreachable!("k validated by Geometry"),
    }
}

/// Predecessor groups `p` per cache block of a step: their running minima stay in L1
/// while the `2^k` predecessor slices stream past.
const BLOCK: usize = 256;

#[inline(always)]
fn forward_const<const K: u32>(
    values: &[f32],
    x: &[f32],
    mins: &mut [f32],
    next: &mut [f32],
    bp: &mut [u8],
) {
    let p_n = mins.len();
    let (mut cur, mut nxt) = (&mut *mins, &mut *next);
    for t in 1..x.len() {
        step::<K>(values, cur, nxt, &mut bp[t * p_n..(t + 1) * p_n], x[t - 1]);
        std::mem::swap(&mut cur, &mut nxt);
    }
    if x.len().is_multiple_of(2) {
        // An odd number of steps left M_{T-1} in `next`.
        mins.copy_from_slice(next);
    }
}

/// One trellis step, with the costs kept implicit: the best path into state `s` at step
/// `t` costs `c_t(s) = (values[s] - x_t)^2 + M_t[s >> k]`, so a step only reads the
/// value table and `M_{t-1}` (`prev`) and writes `M_t` (`next`):
///
/// `next[p] = min_h c_{t-1}(p | h << (L-k))`, `bp[p]` = that `h` (the smallest on ties),
/// with `xt` = `x_{t-1}`.
///
/// The minimum carries its argument: a candidate's key is its f32 bits (costs are
/// never negative, so the bits order like the values) with the low `k` mantissa bits
/// replaced by `h`; one integer min per candidate finds both. The comparison thereby
/// ignores cost differences below `2^(k-23)` relative, far below one weight's error.
#[inline(always)]
fn step<const K: u32>(values: &[f32], prev: &[f32], next: &mut [f32], bp: &mut [u8], xt: f32) {
    let h_n = 1usize << K;
    let p_n = prev.len();
    let pb = p_n.min(BLOCK);
    let keep = !(h_n as u32 - 1);
    let mut keys = [0u32; BLOCK];
    let mut spread = [0.0f32; BLOCK];
    for p0 in (0..p_n).step_by(pb) {
        let keys = &mut keys[..pb];
        for h in 0..h_n {
            // States base .. base + pb: the predecessors p0.. with high bits h.
            let base = h * p_n + p0;
            let vals = &values[base..base + pb];
            let e = &mut spread[..pb];
            if pb.is_multiple_of(h_n) {
                let q0 = base >> K;
                for (ee, &mm) in e.chunks_exact_mut(h_n).zip(&prev[q0..q0 + pb / h_n]) {
                    ee.fill(mm);
                }
            } else {
                for (i, ee) in e.iter_mut().enumerate() {
                    *ee = prev[(base + i) >> K];
                }
            }
            if h == 0 {
                for ((kk, &v), &m) in keys.iter_mut().zip(vals).zip(e.iter()) {
                    let d = v - xt;
                    *kk = (d * d + m).to_bits() & keep;
                }
            } else {
                for ((kk, &v), &m) in keys.iter_mut().zip(vals).zip(e.iter()) {
                    let d = v - xt;
                    *kk = (*kk).min(((d * d + m).to_bits() & keep) | h as u32);
                }
            }
        }
        for ((o, b), &kk) in next[p0..p0 + pb]
            .iter_mut()
            .zip(&mut bp[p0..p0 + pb])
            .zip(keys.iter())
        {
            *o = f32::from_bits(kk);
            *b = (kk & !keep) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::reference;

    fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| rng.sample::<f32, _>(StandardNormal))
            .collect()
    }

    fn opts(code: Code, t: usize, k: u32, l: u32) -> EncodeOptions {
        EncodeOptions {
            t,
            k,
            l,
            code,
            lut: (code == Code::Lut).then(|| gaussian_lut(l, 7).unwrap()),
            progress: false,
        }
    }

    /// The MSE the reference decoder gives for `e` against `dense`.
    fn reference_mse(e: &Encoded, dense: &[f32]) -> f64 {
        let w = reference::dequantize(&e.matrix, DType::F32).unwrap();
        let sse: f64 = w
            .iter()
            .zip(dense)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum();
        sse / dense.len() as f64
    }

    /// A table and weights both scaled by a power of two code alike: the same states,
    /// the scales alike (the search runs on the table brought to unit size, so a table
    /// of tiny values does not underflow the f32 path costs; 2^-70 squared is below f32's
    /// range, and coded as it stood it chose other states).
    #[test]
    fn a_tiny_table_codes_as_a_unit_one() {
        let (rows, cols, l) = (4, 512, 10);
        let w = gaussian(rows * cols, 21);
        let lut = gaussian_lut(l, 22).unwrap();
        let f = 2f32.powi(-70);
        let at = |w: &[f32], lut: &[f32]| {
            let o = EncodeOptions {
                lut: Some(lut.to_vec()),
                ..opts(Code::Lut, 256, 2, l)
            };
            quantize(w, rows, cols, &o).unwrap()
        };
        let unit = at(&w, &lut);
        let tiny_w: Vec<f32> = w.iter().map(|v| v * f).collect();
        let tiny = at(&tiny_w, &lut.iter().map(|v| v * f).collect::<Vec<_>>());
        assert_eq!(tiny.matrix.codes, unit.matrix.codes);
        assert_eq!(tiny.matrix.scales, unit.matrix.scales);
    }

    /// An i.i.d. unit Gaussian source lands where QTIP's paper puts these codes
    /// (k=2, L=16: about 0.069; L=12 somewhat worse; k=4 far lower), above the
    /// rate-distortion bound 2^(-2k).
    #[test]
    fn gaussian_mse_is_in_the_published_range() {
        let (rows, cols) = (16, 1024);
        let w = gaussian(rows * cols, 1);
        let cases = [
            (Code::OneMad, 2, 16, 0.0660, 0.0710),
            (Code::ThreeInst, 2, 16, 0.0660, 0.0710),
            (Code::OneMad, 2, 12, 0.0700, 0.0770),
            (Code::ThreeInst, 2, 12, 0.0700, 0.0770),
            (Code::OneMad, 4, 12, 0.0040, 0.0060),
            (Code::ThreeInst, 4, 12, 0.0040, 0.0060),
        ];
        for (code, k, l, lo, hi) in cases {
            let e = quantize(&w, rows, cols, &opts(code, 256, k, l)).unwrap();
            eprintln!("{code} k={k} L={l}: mse {:.5}", e.mse);
            assert!(
                (lo..=hi).contains(&e.mse),
                "{code} k={k} L={l}: mse {} outside [{lo}, {hi}]",
                e.mse
            );
            assert!(e.mse > 0.25f64.powi(k as i32), "below D(R)");
        }
    }

    /// Every code and a spread of T, k, L: the packed codes decode (through
    /// `QuantizedMatrix::state`) to exactly the states the encoder chose, every block
    /// is a closed tail-biting path, and the reported MSE is the reference decoder's.
    #[test]
    fn every_code_round_trips() {
        let cases = [
            (Code::OneMad, 64, 1, 2),
            (Code::OneMad, 256, 2, 12),
            (Code::ThreeInst, 128, 3, 9),
            (Code::Mcg, 32, 8, 16),
            (Code::Mul1, 256, 5, 11),
            (Code::Lut, 96, 2, 10),
            (Code::Lut, 64, 4, 13),
        ];
        for (i, (code, t, k, l)) in cases.into_iter().enumerate() {
            let (rows, cols) = (3, 2 * t);
            let w: Vec<f32> = gaussian(rows * cols, 10 + i as u64)
                .iter()
                .enumerate()
                .map(|(j, &v)| v * (0.01 + (j / cols) as f32))
                .collect();
            let o = opts(code, t, k, l);
            let (e, states) = quantize_inner(&w, rows, cols, &o, true, &|_| {}).unwrap();
            let m = &e.matrix;
            assert_eq!(m.scale_dtype, ScaleDType::F16);
            assert_eq!(m.lut, o.lut);
            for r in 0..rows {
                assert_eq!(half::f16::from_f32(m.scales[r]).to_f32(), m.scales[r]);
                for b in 0..cols / t {
                    let st = &states[r * cols + b * t..r * cols + (b + 1) * t];
                    assert!(layout::is_tail_biting(st, k, l), "{code} r{r} b{b}");
                }
                for c in 0..cols {
                    assert_eq!(m.state(r, c), states[r * cols + c], "{code} ({r}, {c})");
                }
            }
            let want = reference_mse(&e, &w);
            assert!(
                (e.mse - want).abs() <= 1e-9 * want,
                "{code}: {} vs {want}",
                e.mse
            );
        }
    }

    #[test]
    fn mse_equals_reference_dequantize() {
        let (rows, cols) = (5, 512);
        let w = gaussian(rows * cols, 3);
        for code in Code::ALL {
            let e = quantize(&w, rows, cols, &opts(code, 128, 3, 10)).unwrap();
            let want = reference_mse(&e, &w);
            assert!(
                (e.mse - want).abs() <= 1e-9 * want,
                "{code}: {} vs {want}",
                e.mse
            );
        }
    }

    #[test]
    fn zero_rows_get_zero_scale() {
        let (rows, cols) = (2, 256);
        let mut w = gaussian(rows * cols, 4);
        w[..cols].fill(0.0);
        let e = quantize(&w, rows, cols, &opts(Code::OneMad, 256, 2, 8)).unwrap();
        assert_eq!(e.matrix.scales[0], 0.0);
        assert!(e.matrix.scales[1] > 0.0);
        assert!((e.mse - reference_mse(&e, &w)).abs() <= 1e-12);
        // Subnormal weights: the search scale is far below f32's range, the f16
        // scale underflows to 0, and nothing breaks.
        w[..cols]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = (i as f32 - 128.0) * 1e-42);
        let e = quantize(&w, rows, cols, &opts(Code::OneMad, 256, 2, 8)).unwrap();
        assert_eq!(e.matrix.scales[0], 0.0);
        assert!((e.mse - reference_mse(&e, &w)).abs() <= 1e-12);
    }

    /// The row scale is the least-squares optimum rounded to f16 once: ties and near-ties
    /// that rounding through f32 (or dropping low bits) decides wrongly.
    #[test]
    fn the_row_scale_is_rounded_to_f16_once() {
        let p = |e: i32| 2f64.powi(e);
        for (ls, want) in [
            // Just under the tie between 1 + 2^-10 and 1 + 2^-9: through f32 it becomes
            // the tie, which rounds to even (1 + 2^-9).
            (1.0 + p(-10) + p(-11) - p(-30), 1.0 + p(-10)),
            // Just over the tie between 1 and 1 + 2^-10, by less than f32 keeps.
            (1.0 + p(-11) + p(-40), 1.0 + p(-10)),
            (-(1.0 + p(-11) + p(-40)), -(1.0 + p(-10))),
            (65519.0, 65504.0),
            (0.0, 0.0),
        ] {
            assert_eq!(f16_scale(3, ls).unwrap() as f64, want, "ls = {ls:e}");
        }
        let e = f16_scale(3, 65520.0).unwrap_err().to_string();
        assert!(e.contains("scale of row 3 = 65520"), "{e}");
    }

    /// Rows of zeros do not steer the multiplier search: the other rows code as they
    /// would alone (a sample of zero rows only walked the grid to its low end, at 23x
    /// the error at k = 4).
    #[test]
    fn zero_rows_leave_the_other_rows_as_they_would_code_alone() {
        let (live, rows, cols) = (16, 1024, 256);
        let mut w = gaussian(live * cols, 12);
        let o = opts(Code::OneMad, 256, 4, 10);
        let alone = quantize(&w, live, cols, &o).unwrap();
        w.resize(rows * cols, 0.0);
        let with_zeros = quantize(&w, rows, cols, &o).unwrap();
        let words = live * alone.matrix.geometry.words_per_row();
        assert_eq!(with_zeros.matrix.codes[..words], alone.matrix.codes[..]);
        assert_eq!(with_zeros.matrix.scales[..live], alone.matrix.scales[..]);
        assert!(with_zeros.matrix.scales[live..].iter().all(|&s| s == 0.0));
        // No row to rate a multiplier on: all zeros code as zeros.
        let zeros = quantize(&vec![0.0; 64 * cols], 64, cols, &o).unwrap();
        assert!(zeros.matrix.scales.iter().all(|&s| s == 0.0) && zeros.mse == 0.0);
    }

    /// Blocks of any length from the trellis's own up close (odd ones too: the overlap
    /// is read at original position 0); shorter ones are an error, not an open path.
    #[test]
    fn tail_biting_paths_close_at_every_length_or_are_refused() {
        for (code, k, l) in [
            (Code::OneMad, 1u32, 16u32),
            (Code::Mcg, 3, 10),
            (Code::ThreeInst, 2, 12),
        ] {
            let values = code.table(l, None).unwrap();
            for len in 2..=48usize {
                let x = gaussian(len, len as u64);
                match tail_biting_path(&values, k, l, &x) {
                    Ok(st) => assert!(
                        layout::is_tail_biting(&st, k, l),
                        "{code} k {k} L {l} T {len}"
                    ),
                    Err(e) => {
                        assert!(
                            len * (k as usize) < l as usize,
                            "{code} k {k} L {l} T {len}: {e}"
                        );
                        assert!(
                            e.to_string().contains(&format!("targets length = {len}")),
                            "{e}"
                        );
                    }
                }
            }
        }
    }

    /// The public block-level entry point: a closed path, and errors naming fields.
    #[test]
    fn tail_biting_path_closes_and_checks_input() {
        let values = Code::Mcg.table(10, None).unwrap();
        let x = gaussian(96, 9);
        let st = tail_biting_path(&values, 3, 10, &x).unwrap();
        assert!(layout::is_tail_biting(&st, 3, 10));
        let mut words = vec![0u32; 96 * 3 / 32];
        layout::pack_block(&st, 3, &mut words);
        assert_eq!(layout::block_states(&words, 96, 3, 10), st);
        let cases = [
            (tail_biting_path(&values, 0, 10, &x), "k = 0"),
            (tail_biting_path(&values, 3, 17, &x), "L = 17"),
            (tail_biting_path(&values, 3, 11, &x), "values length = 1024"),
            (
                tail_biting_path(&values, 3, 10, &x[..1]),
                "targets length = 1",
            ),
            (
                tail_biting_path(&values, 3, 10, &[0.0, f32::NAN]),
                "targets[1]",
            ),
        ];
        for (res, needle) in cases {
            let msg = res.unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
    }

    /// Same input, same output, whatever the number of threads.
    #[test]
    fn deterministic_across_thread_counts() {
        let (rows, cols) = (6, 512);
        let w = gaussian(rows * cols, 5);
        let o = opts(Code::ThreeInst, 256, 2, 10);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| quantize(&w, rows, cols, &o).unwrap());
        let many = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(|| quantize(&w, rows, cols, &o).unwrap());
        assert_eq!(one, many);
    }

    #[test]
    fn bad_input_errors_name_the_field() {
        let w = vec![0.5f32; 4 * 256];
        let o = |code, t, k, l, lut| EncodeOptions {
            t,
            k,
            l,
            code,
            lut,
            progress: false,
        };
        let cases: Vec<(&[f32], usize, usize, EncodeOptions, &str)> = vec![
            (
                &w[..100],
                4,
                256,
                o(Code::OneMad, 256, 2, 12, None),
                "dense",
            ),
            (&w, 4, 256, o(Code::OneMad, 48, 2, 12, None), "T = 48"),
            (&w, 4, 256, o(Code::OneMad, 256, 0, 12, None), "k = 0"),
            (&w, 4, 256, o(Code::OneMad, 256, 9, 12, None), "k = 9"),
            (&w, 4, 256, o(Code::OneMad, 256, 4, 4, None), "L = 4"),
            (&w, 4, 256, o(Code::OneMad, 256, 2, 17, None), "L = 17"),
            (&w, 2, 512, o(Code::OneMad, 384, 2, 12, None), "cols = 512"),
            (
                &w[..0],
                0,
                256,
                o(Code::OneMad, 256, 2, 12, None),
                "rows = 0",
            ),
            (&w, 4, 256, o(Code::Lut, 256, 2, 12, None), "lut = missing"),
            (
                &w,
                4,
                256,
                o(Code::Lut, 256, 2, 12, Some(vec![0.0; 100])),
                "lut length = 100",
            ),
            (
                &w,
                4,
                256,
                o(Code::Mul1, 256, 2, 12, Some(gaussian_lut(12, 1).unwrap())),
                "lut = present",
            ),
        ];
        for (dense, rows, cols, opts, needle) in cases {
            let msg = quantize(dense, rows, cols, &opts).unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
        let mut nan_lut = gaussian_lut(8, 1).unwrap();
        nan_lut[5] = f32::NAN;
        let msg = quantize(&w, 4, 256, &o(Code::Lut, 256, 2, 8, Some(nan_lut)))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("lut[5]"), "{msg}");
        let mut bad = w.clone();
        bad[256 + 7] = f32::INFINITY;
        let msg = quantize(&bad, 4, 256, &o(Code::OneMad, 256, 2, 8, None))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("dense[1, 7]"), "{msg}");
        let huge = vec![1e30f32; 256];
        let msg = quantize(&huge, 1, 256, &o(Code::OneMad, 256, 2, 8, None))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("scale of row 0"), "{msg}");
    }

    /// A block whose Viterbi tables would not fit is an error naming T, before anything
    /// is allocated.
    #[test]
    fn oversized_blocks_are_rejected() {
        let values = gaussian_lut(16, 1).unwrap();
        // 8 GiB of back pointers on the caller's one thread.
        let e = tail_biting_path(&values, 1, 16, &vec![0.0; 1 << 18])
            .unwrap_err()
            .to_string();
        assert!(e.contains("T = 262144") && e.contains("smaller T"), "{e}");
        assert!(check_backpointers(usize::MAX, 1, 16, 1).is_err());
        assert!(check_backpointers(256, 1, 16, 1).is_ok());
        // The budget is the pool's: what one thread may hold, 64 may not.
        let t = 1 << 15; // 1 GiB a thread at k = 1, L = 16
        assert!(check_backpointers(t, 1, 16, 4).is_ok());
        let e = check_backpointers(t, 1, 16, 64).unwrap_err().to_string();
        assert!(
            e.contains("T = 32768") && e.contains("its 64 threads"),
            "{e}"
        );
    }

    /// The costs of every path of a tiny trellis, by enumeration: Viterbi finds the
    /// cheapest (unconstrained, and with the tail-biting restriction of pass 2).
    #[test]
    fn viterbi_finds_the_cheapest_path() {
        for (k, l, t_len) in [(1u32, 3u32, 9usize), (2, 4, 7), (3, 5, 5), (1, 2, 10)] {
            let values: Vec<f32> = gaussian(1 << l, l as u64);
            let x = gaussian(t_len, 100 + k as u64);
            let low = (1u32 << (l - k)) - 1;
            let cost = |st: &[u32]| -> f32 {
                st.iter()
                    .zip(&x)
                    .map(|(&s, &xt)| (values[s as usize] - xt).powi(2))
                    .sum()
            };
            // Every path: a start state, then k new bits per step.
            let mut best_free = f32::INFINITY;
            let mut best_tied = vec![f32::INFINITY; 1 << (l - k)];
            for start in 0..1u32 << l {
                for bits in 0..1u64 << (k as usize * (t_len - 1)) {
                    let mut st = vec![start];
                    for t in 1..t_len {
                        let new = (bits >> (k as usize * (t - 1))) as u32 & ((1 << k) - 1);
                        st.push(((st[t - 1] << k) & ((1 << l) - 1)) | new);
                    }
                    let c = cost(&st);
                    best_free = best_free.min(c);
                    let o = start >> k;
                    if st[t_len - 1] & low == o {
                        best_tied[o as usize] = best_tied[o as usize].min(c);
                    }
                }
            }
            let mut s = Scratch::default();
            let mut states = vec![0u32; t_len];
            let got = viterbi(&values, k, l, &x, None, &mut states, &mut s);
            let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * b.max(1e-3);
            assert!(close(got, best_free), "k{k} L{l}: {got} vs {best_free}");
            assert!(close(cost(&states), best_free));
            for o in 0..1u32 << (l - k) {
                let got = viterbi(&values, k, l, &x, Some(o), &mut states, &mut s);
                let want = best_tied[o as usize];
                assert!(close(got, want), "k{k} L{l} o{o}: {got} vs {want}");
                assert!(close(cost(&states), want));
                assert_eq!(states[0] >> k, o);
                assert_eq!(states[t_len - 1] & low, o);
            }
        }
    }

    /// The AVX2 build and the baseline build compute the same bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_and_baseline_agree() {
        // Every x86-64 machine this runs on has AVX2; one without it fails here rather than
        // passing a comparison it never made.
        assert!(
            std::is_x86_feature_detected!("avx2"),
            "this machine has no AVX2, so the AVX2 build cannot be compared"
        );
        for (k, l) in [
            (1u32, 6u32),
            (2, 12),
            (3, 11),
            (4, 13),
            (5, 9),
            (6, 14),
            (7, 9),
            (8, 16),
        ] {
            let values = Code::OneMad.table(l, None).unwrap();
            let x = gaussian(64, k as u64);
            let p_n = 1usize << (l - k);
            let run = |avx2: bool| {
                let (mut m, mut n, mut bp) =
                    (vec![0.0f32; p_n], vec![0.0f32; p_n], vec![0u8; 64 * p_n]);
                m[3 % p_n] = EXCLUDED;
                if avx2 {
                    unsafe { forward_avx2(&values, k, &x, &mut m, &mut n, &mut bp) }
                } else {
                    forward_any(&values, k, &x, &mut m, &mut n, &mut bp)
                }
                (m.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), bp)
            };
            assert!(run(true) == run(false), "k{k} L{l}");
        }
    }

    #[test]
    fn gaussian_lut_is_seeded() {
        let a = gaussian_lut(10, 3).unwrap();
        assert_eq!(a.len(), 1024);
        assert_eq!(a, gaussian_lut(10, 3).unwrap());
        assert_ne!(a, gaussian_lut(10, 4).unwrap());
        let var = a.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / 1024.0;
        assert!((var - 1.0).abs() < 0.15, "{var}");
    }

    /// The MSE table of docs/encoder.md (unit Gaussian 64 x 4096, T = 256), each entry
    /// reproduced to the table's 3 significant digits and above the rate-distortion bound
    /// `2^(-2k)`. The digits are a regression snapshot of this encoder (they keep the
    /// doc true; a deliberate change to the search re-measures the table), the bound and
    /// `gaussian_mse_is_in_the_published_range` the independent checks.
    /// (About 20 s in a release build.)
    #[test]
    fn mse_table() {
        let (rows, cols) = (64, 4096);
        let w = gaussian(rows * cols, 11);
        // (code, k, L, the table's MSE)
        let table = [
            (Code::OneMad, 2, 12, 0.0748),
            (Code::OneMad, 3, 12, 0.0194),
            (Code::OneMad, 4, 12, 0.00502),
            (Code::OneMad, 2, 16, 0.0690),
            (Code::OneMad, 3, 16, 0.0176),
            (Code::OneMad, 4, 16, 0.00453),
            (Code::ThreeInst, 2, 12, 0.0732),
            (Code::ThreeInst, 3, 12, 0.0196),
            (Code::ThreeInst, 4, 12, 0.00530),
            (Code::ThreeInst, 2, 16, 0.0690),
            (Code::ThreeInst, 3, 16, 0.0178),
            (Code::ThreeInst, 4, 16, 0.00462),
            (Code::Mcg, 2, 12, 0.0732),
            (Code::Mcg, 3, 12, 0.0194),
            (Code::Mcg, 4, 12, 0.00522),
            (Code::Mul1, 2, 12, 0.0726),
            (Code::Mul1, 3, 12, 0.0189),
            (Code::Mul1, 4, 12, 0.00503),
            (Code::Lut, 2, 12, 0.0736),
            (Code::Lut, 3, 12, 0.0195),
            (Code::Lut, 4, 12, 0.00519),
        ];
        for (code, k, l, want) in table {
            let t0 = std::time::Instant::now();
            let e = quantize(&w, rows, cols, &opts(code, 256, k, l)).unwrap();
            eprintln!(
                "| {code} | {k} | {l} | {:.5} | {:.1} s |",
                e.mse,
                t0.elapsed().as_secs_f64()
            );
            assert!(
                e.mse > 2f64.powi(-2 * k as i32),
                "{code} k {k} L {l}: {}",
                e.mse
            );
            // To the table's 3 significant digits.
            assert_eq!(
                format!("{:.2e}", e.mse),
                format!("{want:.2e}"),
                "{code} k {k} L {l}: {}",
                e.mse
            );
        }
    }
}
