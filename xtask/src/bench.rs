//! `cargo xtask bench --backend cuda`: the tuned trellis kernels (exact and fast tier)
//! against dense bf16 cuBLAS and the copy bandwidth, all measured in one run with the
//! tuner's own timing (warm-up, rotating copies several times the L2, bound launches:
//! nothing allocated or checked in the timed region, for cuBLAS alike), written as a
//! markdown report.
//!
//! Narrowed by the environment: `TRELLIS_BENCH_PRESETS` (qwen3-14b, llama-3-8b),
//! `TRELLIS_BENCH_SHAPES` (RxC of a preset), `TRELLIS_BENCH_K` and `TRELLIS_BENCH_M`
//! (default 1, 2, 4, 8; above the SIMT families' 8, up to 16, a row is fast only).

use cudarc::cublas::CudaBlas;
use half::bf16;
use std::fmt::Write;
use std::path::Path;
use trellis::backend::cuda::CudaBackend;
use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
use trellis::families::gate_up_mma::GateUpMmaFamily;
use trellis::families::mma::{MmaLayout, MmaVariant};
use trellis::families::reduce::{ReduceFamily, ReduceProblem};
use trellis::families::reduce_mma::{Prescale, ReduceMmaFamily};
use trellis::families::simt::{MStrategy, Representation, Variant, XStage, MAX_M, ROWS_PER_SIMD};
use trellis::family::{preset, Family};
use trellis::kernel::{Backend, Elem, KernelSpec, TensorSpec};
use trellis::numerics::{Tail, Tier};
use trellis::tune::harness::{self, measure, Stats, TuneOptions};
use trellis::tune::Selector;
use trellis::{Code, DType, Error, Geometry, Result, ScaleDType};

fn err(e: impl std::fmt::Debug) -> Error {
    Error::backend("cuda", format!("{e:?}"))
}

fn copy_bandwidth(b: &CudaBackend) -> Result<f64> {
    let n = 1usize << 30;
    let src = b.stream().alloc_zeros::<u8>(n).map_err(err)?;
    let mut dst = b.stream().alloc_zeros::<u8>(n).map_err(err)?;
    let mut samples = Vec::new();
    for i in 0..12 {
        let ms = b.time_ms(&mut || b.stream().memcpy_dtod(&src, &mut dst).map_err(err))?;
        if i >= 2 {
            samples.push(ms);
        }
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    // A device-to-device copy reads and writes every byte.
    Ok(2.0 * n as f64 / (samples[samples.len() / 2] * 1e-3) / 1e9)
}

/// Dense bf16 `y = x W^T` through `cublasGemmEx` at its best for the shape: every
/// `cublasGemmAlgo_t` (default, 0..23, the tensor-op ones) is screened with a short
/// measurement, those cuBLAS refuses are skipped, and the fastest is measured in full.
/// `calls` GEMVs per timed launch, outputs preallocated; two calls are the dense
/// gate/up, followed by the elementwise SwiGLU of their outputs
/// ([`crate::swiglu::SwiGlu`], bound before timing) as a framework runs it.
fn cublas(
    b: &CudaBackend,
    blas: &CudaBlas,
    o: &TuneOptions,
    rows: usize,
    cols: usize,
    m: usize,
    calls: usize,
) -> Result<Stats> {
    use cudarc::cublas::sys;
    use cudarc::driver::DevicePtr;
    let copies = o.working_set.div_ceil(rows * cols * 2 * calls).clamp(2, 8) * calls;
    let w: Vec<bf16> = (0..rows * cols)
        .map(|i| bf16::from_f32(((i * 7919 % 1000) as f32 - 500.0) * 1e-4))
        .collect();
    let ws = (0..copies)
        .map(|_| b.stream().clone_htod(&w).map_err(err))
        .collect::<Result<Vec<_>>>()?;
    let x: Vec<bf16> = (0..m * cols)
        .map(|i| bf16::from_f32(((i % 17) as f32 - 8.0) * 0.1))
        .collect();
    let x = b.stream().clone_htod(&x).map_err(err)?;
    // One output per call, as tensors of the backend so the SwiGLU kernel can read them.
    let y_spec = TensorSpec {
        name: "y",
        elem: Elem::Bf16,
        shape: vec![m * rows],
    };
    let ys = (0..calls)
        .map(|_| b.alloc(&y_spec))
        .collect::<Result<Vec<_>>>()?;
    let wp: Vec<u64> = ws.iter().map(|w| w.device_ptr(b.stream()).0).collect();
    let xp = x.device_ptr(b.stream()).0;
    let yp: Vec<u64> = ys.iter().map(|y| y.device_ptr(b.stream())).collect();
    let (one, zero) = (1.0f32, 0.0f32);
    // y[M, R] = x[M, C] W[R, C]^T, in column-major terms y^T = W^T(op) x^T; f32 compute.
    let gemm = |algo: sys::cublasGemmAlgo_t, i: usize| -> Result<()> {
        for c in 0..calls {
            // SAFETY: the pointers are the live buffers above, with these dimensions.
            let status = unsafe {
                sys::cublasGemmEx(
                    *blas.handle(),
                    sys::cublasOperation_t::CUBLAS_OP_T,
                    sys::cublasOperation_t::CUBLAS_OP_N,
                    rows as i32,
                    m as i32,
                    cols as i32,
                    &one as *const f32 as *const _,
                    wp[i * calls + c] as *const _,
                    sys::cudaDataType_t::CUDA_R_16BF,
                    cols as i32,
                    xp as *const _,
                    sys::cudaDataType_t::CUDA_R_16BF,
                    cols as i32,
                    &zero as *const f32 as *const _,
                    yp[c] as *mut _,
                    sys::cudaDataType_t::CUDA_R_16BF,
                    rows as i32,
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    algo,
                )
            };
            if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(err(status));
            }
        }
        Ok(())
    };
    let screen = TuneOptions {
        min_reps: 3,
        max_reps: 5,
        ..o.clone()
    };
    let mut best: Option<(f64, i32, sys::cublasGemmAlgo_t)> = None;
    for id in std::iter::once(-1).chain(0..=23).chain(99..=115) {
        // SAFETY: every id listed is a discriminant of `cublasGemmAlgo_t` (cublas_api.h).
        let algo: sys::cublasGemmAlgo_t = unsafe { std::mem::transmute::<i32, _>(id) };
        if let Ok(s) = measure(b, &screen, copies / calls, None, |i| gemm(algo, i)) {
            if best.is_none_or(|(t, _, _)| s.median < t) {
                best = Some((s.median, id, algo));
            }
        }
    }
    let (_, id, algo) = best.ok_or_else(|| err("no cublasGemmEx algorithm ran"))?;
    let tail = crate::swiglu::SwiGlu {
        n: m * rows,
        act: Elem::Bf16,
    };
    let launch = tail.launch_request()?;
    let mut mid = match calls {
        2 => Some(b.alloc(&launch.outputs[0])?),
        _ => None,
    };
    let mut mid = mid.as_mut().map(|m| [m]);
    let mut bound = match mid.as_mut() {
        Some(mid) => {
            let compiled = b.compile(&launch)?;
            Some(b.bind(&compiled, &launch, &[&ys[0], &ys[1]], mid)?)
        }
        None => None,
    };
    let stats = measure(b, o, copies / calls, None, |i| {
        gemm(algo, i)?;
        match bound.as_mut() {
            Some(bd) => b.run(bd),
            None => Ok(()),
        }
    })?;
    eprintln!(
        "cublas {rows}x{cols} M{m} x{calls}: algorithm {id}, {:.1} us",
        stats.median
    );
    Ok(stats)
}

/// The seed's reduce structure (`../shared/reference`), rendered from our templates: one
/// simdgroup per row, 8 per group, the 2^L value table in threadgroup memory, each lane's
/// run of x loaded as vectors straight into registers and its k+1 code words in
/// registers.
pub fn seed_structure() -> Variant {
    Variant {
        repr: Representation::SharedTable,
        m_strategy: MStrategy::SharedDecode,
        rows_per_group: 8,
        x_stage: XStage::Registers,
        tier: Tier::Exact,
        rows_per_simd: 1,
        max_registers: 0,
        scalar_words: false,
        prefetch_words: false,
        stream_words: false,
        interleaved_x: false,
    }
}

/// The x-in-registers candidates timed next to the table's choice (inline decode, 1, 2
/// or 4 rows per simdgroup, 4 or 8 simdgroups per group, and the tuner's tuned-size
/// candidates where it offers them: `ReduceProblem::tuned_size_candidates`): the best of
/// them shows what the table could hold where a key is missing.
fn register_candidates(p: &ReduceProblem) -> Vec<Variant> {
    let mut out = Vec::new();
    for rows_per_simd in ROWS_PER_SIMD {
        for rows_per_group in [4, 8] {
            out.push(trellis::families::catalog::inline_registers(
                Tier::Exact,
                rows_per_group,
                rows_per_simd,
                0,
            ));
        }
    }
    out.extend(p.tuned_size_candidates(Tier::Exact));
    out
}

fn list(var: &str, default: &[&str]) -> Vec<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect())
}

/// A list of numbers from environment variable `var` (or `default`): an item that does
/// not parse is an error naming the variable, not a silently shorter run.
fn numbers(var: &str, default: &[&str]) -> Result<Vec<u32>> {
    list(var, default)
        .iter()
        .map(|n| {
            n.parse()
                .map_err(|_| Error::invalid(var, n, "expected comma-separated whole numbers"))
        })
        .collect()
}

/// `RxC` shapes from environment variable `var` (empty when unset).
fn shape_list(var: &str) -> Result<Vec<(usize, usize)>> {
    list(var, &[])
        .iter()
        .map(|s| {
            crate::tune::rxc(s)
                .ok_or_else(|| Error::invalid(var, s, "expected comma-separated RxC shapes"))
        })
        .collect()
}

/// Run the benchmark and write the report.
pub fn run(out: &Path, table: Option<&Path>) -> Result<()> {
    // The table first: a bench of a table that cannot be read is an error, not a bench
    // of the embedded ones under a warning.
    let mut selector = Selector::from_env();
    if let Some(t) = table {
        selector.add_table(&t.display().to_string(), trellis::tune::read_table(t)?);
    }
    for w in &selector.warnings {
        eprintln!("warning: {w}");
    }
    let b = CudaBackend::new(0)?;
    let blas = CudaBlas::new(b.stream().clone()).map_err(err)?;
    let o = TuneOptions::for_backend("cuda", Tier::Exact);
    let copy = copy_bandwidth(&b)?;
    let info = b.info().clone();
    let ms = numbers("TRELLIS_BENCH_M", &["1", "2", "4", "8"])?;
    // One key's kernels alone (e.g. under ncu): TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1.
    let ks = numbers("TRELLIS_BENCH_K", &["2", "3", "4"])?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Trellis kernels vs dense bf16 cuBLAS on {} ({})\n",
        info.name, info.id
    );
    let _ = writeln!(s, "Measured by `cargo xtask bench --backend cuda` on {}. Device-to-device copy bandwidth in the same run: **{:.0} GB/s** (read + write).\n", harness::today(), copy);
    let _ = writeln!(s, "Times are medians (p10-p90 in brackets) of at least {} samples, each the mean time of {} back-to-back launches between two CUDA events (so the host's launch cost is hidden), repeated until the median is stable, rotating through copies of the weights totalling at least {} MB (L2 is about 60 MB). Every launch is bound before timing (no allocation or argument checks inside the timed region), for cuBLAS alike. Trellis: bf16 activations, T = 256, code 1mad, L = 12; exact rows run the SIMT families (`reduce`, `gate_up`), fast rows the matrix-unit families the fast tier runs (`reduce_mma`, `gate_up_mma`), each with the variant the tuning table selects; each result is verified against the reference before it is timed (exact: bit for bit; fast: SPEC 7 v2). A fast kernel reads x prescaled (each sample's power of two taken out, rounded to the operand type), so its time leaves out the prescale kernel a fast call runs before it (`templates/prescale.kernel`, one threadgroup a sample): each fast row is timed again with that kernel launched before each of its launches in the same stream, and the last two columns are what the prescale adds (the pair's median less the kernel's) and cuBLAS over the pair. cuBLAS: `cublasGemmEx` bf16 (f32 compute) on dense weights of the same shape, at its fastest algorithm for the shape (every `cublasGemmAlgo_t` screened, the best measured; the log names it).\n", o.min_reps, o.batch, o.working_set >> 20);
    let _ = writeln!(s, "Seed structure: the seed's reduce (one simdgroup per row, shared value table, x and code words in registers), rendered from our templates as `{}`; best registers: the fastest of the x-in-registers candidates (6, and the tuner's tuned-size ones for the shape, `ReduceProblem::tuned_size_candidates`: 3 rows per simdgroup, at M = 1 also under 40 registers, the 8-row probe, at M = 8 the 2 under the register budget, the scalar, prefetched and evict-first code-word twins, and lane-interleaved x at M = 2 and 4, where offered); both timed in the same run (exact rows only).\n", seed_structure());
    let _ = writeln!(s, "## reduce\n");
    let _ = writeln!(s, "| shape | k | M | tier | trellis us | T weights/s | seed structure us | best registers us | cuBLAS bf16 us | cuBLAS / trellis | check | variant | source | x prescale us | cuBLAS / (trellis + prescale) |");
    let _ = writeln!(
        s,
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|"
    );
    // One shape of a preset alone: TRELLIS_BENCH_SHAPES=5120x17408 (rows x cols).
    let only = shape_list("TRELLIS_BENCH_SHAPES")?;
    let presets = list("TRELLIS_BENCH_PRESETS", &["qwen3-14b", "llama-3-8b"]);
    for p_name in &presets {
        let shapes = preset(p_name)
            .ok_or_else(|| Error::invalid("preset", p_name, "qwen3-14b or llama-3-8b"))?;
        for shape in shapes {
            if !only.is_empty() && !only.contains(&(shape.rows, shape.cols)) {
                continue;
            }
            for &k in &ks {
                for &m in &ms {
                    let g = Geometry::new(shape.rows, shape.cols, 256, k, 12, Code::OneMad)?;
                    let p = ReduceProblem {
                        geometry: g,
                        scale: ScaleDType::F16,
                        act: DType::Bf16,
                        m,
                    };
                    let cs = cublas(&b, &blas, &o, shape.rows, shape.cols, m as usize, 1)?;
                    let rows = shape.rows * shape.cols;
                    let mut row = |tier: Tier,
                                   ts: Stats,
                                   seed: String,
                                   best: String,
                                   check: String,
                                   variant: String,
                                   source: String,
                                   pair: Option<Stats>| {
                        let _ = writeln!(
                            s,
                            "| {}x{} | {k} | {m} | {tier} | {:.1} [{:.1}-{:.1}] | {:.2} | {seed} | {best} | {:.1} | {:.2} | {check} | {variant} | {source} | {} |",
                            shape.rows, shape.cols, ts.median, ts.p10, ts.p90,
                            rows as f64 / (ts.median * 1e-6) / 1e12,
                            cs.median, cs.median / ts.median,
                            prescale_cells(pair, ts.median, cs.median),
                        );
                        eprintln!("reduce {}x{} k{k} M{m} {tier}: trellis {:.1} us (seed {seed}, best registers {best}), cublas {:.1} us{}", shape.rows, shape.cols, ts.median, cs.median, after_prescale(pair));
                    };
                    // Exact: the SIMT family, up to its MAX_M (larger M are fast rows only).
                    if m <= MAX_M {
                        let e = exact_reduce_row(&b, &o, &selector, &p)?;
                        row(
                            Tier::Exact,
                            e.stats,
                            format!("{:.1}", e.seed),
                            format!("{:.1}", e.best),
                            e.check,
                            e.variant,
                            e.source,
                            None,
                        );
                    }
                    // Fast: the matrix-unit family the facade's fast tier runs.
                    let sel = choose::<ReduceMmaFamily>(&selector, &b, &p, Tier::Fast);
                    let (ts, pair, check) =
                        as_called::<ReduceMmaFamily>(&b, &o, &p, sel.variant, 11)?
                            .map_err(|e| Error::backend("bench", format!("reduce_mma {p}: {e}")))?;
                    row(
                        Tier::Fast,
                        ts,
                        "-".into(),
                        "-".into(),
                        check,
                        format!("reduce_mma {}", sel.variant),
                        sel.source.to_string(),
                        Some(pair),
                    );
                }
            }
        }
    }
    // The fused gate/up at each preset's gate/up shape (the same filters as above).
    for p_name in &presets {
        let Some(shape) = preset(p_name)
            .into_iter()
            .flatten()
            .find(|sh| sh.gate_up && (only.is_empty() || only.contains(&(sh.rows, sh.cols))))
        else {
            continue;
        };
        let (rows, cols) = (shape.rows, shape.cols);
        let _ = writeln!(
            s,
            "\n## gate_up ({p_name} gate/up, {rows} x {cols} each) vs two cuBLAS GEMVs and the SwiGLU\n"
        );
        let _ = writeln!(s, "The dense baseline is two GEMVs followed by the elementwise SwiGLU of their outputs (`xtask/templates/swiglu.kernel`, one launch, bound before timing), as a framework runs it.\n");
        let _ = writeln!(
            s,
            "| kg/ku | M | tier | trellis us | dense (2 GEMVs + SwiGLU) us | ratio | check | variant | source | x prescale us | dense / (trellis + prescale) |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---|---|---|---:|---:|");
        for (kg, ku) in [(3u32, 3u32), (3, 4)] {
            for &m in &ms {
                let cs = cublas(&b, &blas, &o, rows, cols, m as usize, 2)?;
                for tier in [Tier::Exact, Tier::Fast] {
                    if tier == Tier::Exact && m > MAX_M {
                        continue; // the SIMT families take M up to MAX_M
                    }
                    let p = GateUpProblem {
                        gate: Geometry::new(rows, cols, 256, kg, 12, Code::OneMad)?,
                        up: Geometry::new(rows, cols, 256, ku, 12, Code::OneMad)?,
                        gate_scale: ScaleDType::F16,
                        up_scale: ScaleDType::F16,
                        act: DType::Bf16,
                        m,
                        tail: Tail::Exact,
                    };
                    let (ts, check, variant, source, pair) =
                        gate_up_row(&b, &o, &selector, &p, tier)?;
                    let _ = writeln!(
                        s,
                        "| {kg}/{ku} | {m} | {tier} | {:.1} [{:.1}-{:.1}] | {:.1} | {:.2} | {} | {} | {} | {} |",
                        ts.median, ts.p10, ts.p90, cs.median, cs.median / ts.median,
                        check, variant, source,
                        prescale_cells(pair, ts.median, cs.median),
                    );
                    eprintln!(
                        "gate_up {rows}x{cols} {kg}/{ku} M{m} {tier}: trellis {:.1} us, 2x cublas {:.1} us{}",
                        ts.median,
                        cs.median,
                        after_prescale(pair)
                    );
                }
            }
        }
    }
    // Printed first: a report path that cannot be written must not lose the run.
    println!("{s}");
    trellis::io::write_atomic(out, s.as_bytes())?;
    Ok(())
}

/// One exact `reduce` row: the selector's variant, verified and timed next to the seed's
/// structure and the best x-in-registers candidate (named in the log; it may be the
/// table's choice itself, timed a second time).
struct ExactRow {
    stats: Stats,
    check: String,
    seed: f64,
    best: f64,
    variant: String,
    source: String,
}

/// What the facade runs for `p` on `b`: the tables' choice, fitted to the shape and the
/// device (a winner of another bucket or M that does not fit gives way to its runner-up,
/// else the default).
fn choose<F: trellis::family::Family>(
    selector: &Selector,
    b: &CudaBackend,
    p: &F::Problem,
    tier: Tier,
) -> trellis::tune::Selection<F::Variant> {
    use trellis::kernel::Backend;
    let s = selector.select::<F>("cuda", &b.info().id, p, tier);
    trellis::tune::fit::<F>(s, p, tier, &b.limits())
}

fn exact_reduce_row(
    b: &CudaBackend,
    o: &TuneOptions,
    selector: &Selector,
    p: &ReduceProblem,
) -> Result<ExactRow> {
    let sel = choose::<ReduceFamily>(selector, b, p, Tier::Exact);
    let mut vs = vec![sel.variant, seed_structure()];
    vs.extend(register_candidates(p));
    // One result per variant, in order.
    let mut runs = harness::bench::<ReduceFamily, _>(b, o, p, &vs, 11)?.into_iter();
    let (stats, check) = runs
        .next()
        .expect("one result per variant")
        .map_err(|e| Error::backend("bench", format!("the table's choice for {p} failed: {e}")))?;
    let median =
        |r: std::result::Result<(Stats, String), String>| r.map_or(f64::NAN, |(st, _)| st.median);
    let seed = runs.next().map(median).unwrap_or(f64::NAN);
    let (best, best_variant) = runs.zip(&vs[2..]).map(|(r, v)| (median(r), v)).fold(
        (f64::INFINITY, None),
        |acc, (t, v)| {
            if t < acc.0 {
                (t, Some(v))
            } else {
                acc
            }
        },
    );
    if let Some(v) = best_variant {
        eprintln!("reduce {p}: best registers {best:.1} us is `{v}`");
    }
    Ok(ExactRow {
        stats,
        check,
        seed,
        best,
        variant: sel.variant.to_string(),
        source: sel.source.to_string(),
    })
}

/// One `gate_up` row: the selector's variant for `tier` (the SIMT family for exact, the
/// matrix-unit one for fast), verified and timed; its time, check, label, source and
/// (fast) its prescale's time.
#[allow(clippy::type_complexity)]
fn gate_up_row(
    b: &CudaBackend,
    o: &TuneOptions,
    selector: &Selector,
    p: &GateUpProblem,
    tier: Tier,
) -> Result<(Stats, String, String, String, Option<Stats>)> {
    if tier == Tier::Exact {
        let sel = choose::<GateUpFamily>(selector, b, p, tier);
        let (ts, check) = harness::bench::<GateUpFamily, _>(b, o, p, &[sel.variant], 13)?
            .remove(0)
            .map_err(|e| Error::backend("bench", format!("{p}: {e}")))?;
        Ok((
            ts,
            check,
            sel.variant.to_string(),
            sel.source.to_string(),
            None,
        ))
    } else {
        let sel = choose::<GateUpMmaFamily>(selector, b, p, tier);
        let (ts, pair, check) = as_called::<GateUpMmaFamily>(b, o, p, sel.variant, 13)?
            .map_err(|e| Error::backend("bench", format!("gate_up_mma {p}: {e}")))?;
        Ok((
            ts,
            check,
            format!("gate_up_mma {}", sel.variant),
            sel.source.to_string(),
            Some(pair),
        ))
    }
}

/// A fast row's measurement ([`harness::bench_after`]): variant `v` alone, then as a call
/// runs it (after the prescale kernel; a fused variant, [`MmaVariant::fused_x`],
/// prescales x itself, so alone is how a call runs it), and its check detail.
#[allow(clippy::type_complexity)]
fn as_called<F>(
    b: &CudaBackend,
    o: &TuneOptions,
    p: &F::Problem,
    v: MmaVariant,
    seed: u64,
) -> Result<std::result::Result<(Stats, Stats, String), String>>
where
    F: Family<Variant = MmaVariant>,
    F::Kernel: MmaLayout,
{
    if v.fused_x {
        let one = harness::bench::<F, _>(b, o, p, &[v], seed)?.pop();
        return Ok(one
            .unwrap_or_else(|| Err("no measurement".into()))
            .map(|(ts, check)| (ts, ts, check)));
    }
    // The prescale kernel bound once over a random x of its own, launched before each
    // launch of `v` in the same stream (the family's timing takes x prescaled by the
    // host), so the pair's time is what the two cost a stream.
    Prescale::of(&F::kernel(p, v))?
        .with_bound(b, |pre| harness::bench_after::<F, _>(b, o, p, v, seed, pre))
}

/// A log line's ending: the pair's median where the row has one (fast rows).
fn after_prescale(pair: Option<Stats>) -> String {
    pair.map_or(String::new(), |pr| {
        format!(", after the prescale {:.1} us", pr.median)
    })
}

/// A row's last two cells: what the prescale adds (the pair's median less the kernel's
/// `us`) and cuBLAS (`dense` us) over the pair; dashes where no prescale runs (exact).
fn prescale_cells(pair: Option<Stats>, us: f64, dense: f64) -> String {
    match pair {
        Some(pair) => format!("{:.1} | {:.2}", pair.median - us, dense / pair.median),
        None => "- | -".into(),
    }
}

/// Verify and time variants `vs` of problem `p` with the tuner's measurement: the
/// timed ones, and each variant's check detail (or why it failed).
#[allow(clippy::type_complexity)]
fn time_variants<F: trellis::family::Family>(
    b: &CudaBackend,
    o: &TuneOptions,
    p: &F::Problem,
    vs: &[F::Variant],
) -> Result<(Vec<(F::Variant, Stats)>, Vec<String>)> {
    let mut timed = Vec::new();
    let mut checks = Vec::new();
    for (&v, r) in vs.iter().zip(harness::bench::<F, _>(b, o, p, vs, 21)?) {
        match r {
            Ok((st, detail)) => {
                timed.push((v, st));
                checks.push(detail);
            }
            Err(e) => {
                eprintln!("{} {p} {v}: FAILED {e}", F::NAME);
                checks.push(format!("{v}: FAILED {e}"));
            }
        }
    }
    Ok((timed, checks))
}

/// One report row: the best variant against cuBLAS, every variant's median.
fn mma_row<V: std::fmt::Display + Copy>(
    label: &str,
    cb: f64,
    weights: usize,
    timed: &[(V, Stats)],
    checks: &[String],
) -> (String, String) {
    let all = timed
        .iter()
        .map(|(v, st)| format!("{v}: {:.1}", st.median))
        .collect::<Vec<_>>()
        .join("; ");
    let failed: Vec<&String> = checks.iter().filter(|c| c.contains("FAILED")).collect();
    let worst = checks
        .iter()
        .filter_map(|c| {
            c.split("worst ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .fold(0f64, f64::max);
    let check = if failed.is_empty() {
        format!(
            "all {} within SPEC 7 (worst {worst:.3} of the bound)",
            checks.len()
        )
    } else {
        format!("{} FAILED: {}", failed.len(), failed[0])
    };
    let Some((bv, bs)) = timed
        .iter()
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
        .copied()
    else {
        return (
            format!("| {label} | {cb:.1} | - | - | - | - | {check} | |"),
            format!("{label}: {check}"),
        );
    };
    (
        format!(
            "| {label} | {cb:.1} | {:.1} [{:.1}-{:.1}] | {:.2} | {:.2} | {bv} | {check} | {all} |",
            bs.median,
            bs.p10,
            bs.p90,
            cb / bs.median,
            weights as f64 / (bs.median * 1e-6) / 1e12
        ),
        format!(
            "{label}: best {:.1} us ({bv}), cublas {cb:.1} us, x{:.2}; {check}; {all}",
            bs.median,
            cb / bs.median
        ),
    )
}

/// `cargo xtask bench --family reduce_mma`: the fast tier on matrix units (`reduce_mma`
/// and `gate_up_mma`) against dense bf16 cuBLAS at the Qwen3-14B MLP shapes, k 2/3/4
/// (gate/up: 3/3 and 3/4), M 1/8/16, a few launch shapes per problem, each verified
/// at full size against SPEC 7 v2 before it is timed. `MMA_ONLY=<rows>x<cols>:<k>:<m>:<code>`
/// runs only those reduce problems and `MMA_VARIANT=<variant as displayed>` only those
/// variants (comma-separated lists; for profilers); `MMA_SHAPES=<rows>x<cols>,...` replaces
/// the two Qwen3-14B shapes (e.g. row counts that fill whole waves of threadgroups).
pub fn run_mma(out: &Path) -> Result<()> {
    use trellis::families::gate_up_mma::GateUpMmaProblem;
    use trellis::families::mma::{paired_windows_fit, register_budget, MmaOperands, MmaVariant};
    use trellis::families::reduce_mma::{
        add_batched_stage_twins, add_paired_twins, opt_in_where_needed, with_host_f16_x,
        ReduceMmaProblem,
    };
    use trellis::families::simt::Proj;
    let b = CudaBackend::new(0)?;
    let blas = CudaBlas::new(b.stream().clone()).map_err(err)?;
    let o = TuneOptions::for_backend("cuda", Tier::Fast);
    let list_of = |var: &str| {
        std::env::var(var)
            .ok()
            .map(|s| s.split(',').map(str::to_string).collect::<Vec<_>>())
    };
    let only = list_of("MMA_ONLY");
    let shapes_env = std::env::var_os("MMA_SHAPES");
    let info = b.info().clone();
    use trellis::families::mma::MmaXStage::{Global, Shared, SharedDup};
    let v = MmaVariant::unsplit;
    // Under the candidates' register budget, split or not.
    let budget = |k: u32, col_split, x_stage, k_split| MmaVariant {
        k_split,
        max_registers: register_budget(k),
        ..v(1, col_split, 16, x_stage)
    };
    // A few launch shapes per problem, x from device memory or staged; those that do not
    // fit the device (staged x of many samples) are left out.
    let only_variant = list_of("MMA_VARIANT");
    // Named by `MMA_VARIANT` (every variant when unset), as displayed after opting in.
    let named = |v: &MmaVariant| {
        only_variant
            .as_ref()
            .is_none_or(|o| o.contains(&v.to_string()))
    };
    let shapes = |m: u32, k: u32, pairs: bool| {
        let mut vs = Vec::new();
        for x in [Global, Shared, SharedDup] {
            vs.extend([
                v(1, 8, 16, x),
                v(1, 4, 16, x),
                v(2, 4, 16, x),
                v(1, 16, 16, x),
            ]);
            if m > 8 {
                vs.push(v(1, 4, 8, x));
            }
        }
        // bf16 operands (1mad: the problems where they do not apply leave them out).
        let bf16 = |v: MmaVariant| MmaVariant {
            operands: MmaOperands::Bf16,
            ..v
        };
        vs.extend([bf16(v(1, 8, 16, Global)), bf16(v(1, 4, 16, Global))]);
        // Budgets and split-K (reduce_mma only: gate_up_mma leaves splits out).
        if m <= 8 {
            vs.extend([
                budget(k, 8, Global, 1),
                budget(k, 8, Shared, 1),
                budget(k, 8, Global, 2),
                budget(k, 8, Shared, 2),
                budget(k, 4, Global, 4),
                budget(k, 8, Shared, 4),
            ]);
        } else {
            // Row tiles sharing a split's staged x (64 registers); 8 tiles in 17 splits
            // (8 steps of 128 columns each at 17408 columns) is the one shape whose staged
            // x fits 48 KB at 5120 x 17408.
            for (row_tiles, col_split, k_split) in [(2, 4, 8), (4, 2, 8), (8, 1, 8), (8, 1, 17)] {
                for x in [Shared, SharedDup] {
                    vs.push(MmaVariant {
                        row_tiles,
                        max_registers: 64,
                        ..budget(k, col_split, x, k_split)
                    });
                }
            }
            // One row tile under 64 registers: 4 groups of 8 warps per SM instead of 3
            // (78 registers unbounded; measured slower: it spills, so not a candidate).
            vs.push(MmaVariant {
                max_registers: 64,
                ..v(1, 8, 16, Global)
            });
        }
        // Each shape again with paired state windows where they save work.
        if pairs {
            add_paired_twins(&mut vs);
        }
        // x rounded to f16 by the host, as the tuned sizes offer it (bf16 activations);
        // from M = 4 the staged shapes again with batched staging, as they offer too.
        with_host_f16_x(&mut vs);
        if m >= 4 {
            add_batched_stage_twins(&mut vs);
        }
        vs
    };
    let limits = b.limits();
    let mut problems = Vec::new();
    let mut mats = vec![(17408usize, 5120usize), (5120, 17408)];
    if shapes_env.is_some() {
        mats = shape_list("MMA_SHAPES")?;
    }
    for (rows, cols) in mats {
        for (code, ks, ms) in [
            (Code::OneMad, &[2u32, 3, 4][..], &[1u32, 8, 16][..]),
            (Code::ThreeInst, &[2, 3][..], &[1, 8, 16][..]),
        ] {
            for &k in ks {
                for &m in ms {
                    if let Some(o) = &only {
                        if !o.contains(&format!("{rows}x{cols}:{k}:{m}:{code}")) {
                            continue;
                        }
                    }
                    let p = ReduceMmaProblem {
                        geometry: Geometry::new(rows, cols, 256, k, 12, code)?,
                        scale: ScaleDType::F16,
                        act: DType::Bf16,
                        m,
                    };
                    let mut vs = shapes(m, k, paired_windows_fit(Proj::of(&p.geometry)));
                    // Staged x past 48 KB opts in, as the tuned sizes do at M = 16.
                    if m > 8 {
                        opt_in_where_needed(&p, &mut vs);
                    }
                    vs.retain(|v| {
                        named(v)
                            && trellis::family::fits::<ReduceMmaFamily>(&p, *v, &limits).is_ok()
                    });
                    problems.push((p, vs));
                }
            }
        }
    }
    let mut gu = Vec::new();
    if only.is_none() {
        for (kg, ku) in [(3u32, 3u32), (3, 4)] {
            for m in [1u32, 8, 16] {
                let p = GateUpMmaProblem {
                    gate: Geometry::new(17408, 5120, 256, kg, 12, Code::OneMad)?,
                    up: Geometry::new(17408, 5120, 256, ku, 12, Code::OneMad)?,
                    gate_scale: ScaleDType::F16,
                    up_scale: ScaleDType::F16,
                    act: DType::Bf16,
                    m,
                    tail: Tail::Exact,
                };
                let vs: Vec<_> = shapes(m, ku, false)
                    .into_iter()
                    .filter(|v| v.max_registers == 0)
                    .filter(|v| named(v))
                    .filter(|v| trellis::family::fits::<GateUpMmaFamily>(&p, *v, &limits).is_ok())
                    .collect();
                gu.push((p, vs));
            }
        }
    }
    trellis::family::precompile::<ReduceMmaFamily, _>(&b, &problems)?;
    trellis::family::precompile::<GateUpMmaFamily, _>(&b, &gu)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Fast tier on matrix units (mma.sync m16n8k16) vs dense bf16 cuBLAS on {} ({}), {}\n",
        info.name,
        info.id,
        harness::today()
    );
    let _ = writeln!(s, "bf16 activations with outliers, T = 256, L = 12 (codes as labelled); medians of CUDA-event timings over rotating weight copies (>= {} MB), launches bound before timing. Each variant is verified at full size against SPEC 7 v2 before it is timed. cuBLAS: `cublasGemmEx` bf16 at its fastest algorithm for the shape (every `cublasGemmAlgo_t` screened) on dense weights of the same shape; gate_up: two GEMVs and the elementwise SwiGLU (`xtask/templates/swiglu.kernel`).\n", o.working_set >> 20);
    let _ = writeln!(s, "## reduce_mma\n\n| shape k M | cuBLAS us | best us | cuBLAS / best | T weights/s | best variant | check | all variants (us) |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|---|---|");
    let mut blas_cache: Vec<((usize, usize, u32, usize), f64)> = Vec::new();
    let mut cublas_us = |rows: usize, cols: usize, m: u32, calls: usize| -> Result<f64> {
        if let Some((_, t)) = blas_cache
            .iter()
            .find(|(k, _)| *k == (rows, cols, m, calls))
        {
            return Ok(*t);
        }
        let t = cublas(&b, &blas, &o, rows, cols, m as usize, calls)?.median;
        blas_cache.push(((rows, cols, m, calls), t));
        Ok(t)
    };
    for (p, vs) in &problems {
        let g = p.geometry;
        let cb = cublas_us(g.rows, g.cols, p.m, 1)?;
        let (timed, checks) = time_variants::<ReduceMmaFamily>(&b, &o, p, vs)?;
        let label = format!("{}x{} {} k{} M{}", g.rows, g.cols, g.code, g.k, p.m);
        let (row, line) = mma_row(&label, cb, g.rows * g.cols, &timed, &checks);
        let _ = writeln!(s, "{row}");
        eprintln!("reduce_mma {line}");
    }
    if !gu.is_empty() {
        let _ = writeln!(s, "\n## gate_up_mma (Qwen3-14B gate/up, 17408 x 5120 each, exact tail) vs two cuBLAS GEMVs and the SwiGLU\n\n| kg/ku M | dense us | best us | cuBLAS / best | T weights/s | best variant | check | all variants (us) |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---|---|---|");
    }
    for (p, vs) in &gu {
        let cb = cublas_us(17408, 5120, p.m, 2)?;
        let (timed, checks) = time_variants::<GateUpMmaFamily>(&b, &o, p, vs)?;
        let label = format!("{}/{} M{}", p.gate.k, p.up.k, p.m);
        let (row, line) = mma_row(&label, cb, 2 * 17408 * 5120, &timed, &checks);
        let _ = writeln!(s, "{row}");
        eprintln!("gate_up_mma {line}");
    }
    // Printed first: a report path that cannot be written must not lose the run.
    println!("{s}");
    trellis::io::write_atomic(out, s.as_bytes())?;
    Ok(())
}
