//! `cargo xtask bench --backend cuda`: tuned trellis kernels against dense bf16 cuBLAS
//! and the copy bandwidth, all measured in one run, written as a markdown report.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use half::bf16;
use std::fmt::Write;
use std::path::Path;
use trellis::backend::cuda::CudaBackend;
use trellis::catalog::AnyKernel;
use trellis::kernel::Backend;
use trellis::kernel::{Dialect, KernelSpec};
use trellis::kernels::Tail;
use trellis::kernels::{MStrategy, Representation, Tier, Variant, XStage, ROWS_PER_SIMD};
use trellis::ops::{self, DeviceMatrix};
use trellis::tune::harness::{self, Stats};
use trellis::tune::{Family, Selector, TuneKey};
use trellis::verify::{random_activations, random_matrix};
use trellis::{Code, DType, Error, Geometry, Result};

const WORKING_SET: usize = 256 << 20;
const REPS: usize = 100;

/// Launches per timed batch: the host enqueues a batch back to back and the device runs
/// it without gaps, so a launch's host cost (symbol, argument checks, cache lookup: about
/// 10-15 us in this framework today) stays out of the kernel's time as long as it is
/// shorter than the kernel. One launch between two events measures that host cost too.
const BATCH: usize = 10;

/// The median over `reps / BATCH` batches of the mean time per launch, in us, rotating
/// through `copies` weight copies.
fn time_batched(
    b: &CudaBackend,
    reps: usize,
    mut launch: impl FnMut(usize) -> Result<()>,
    copies: usize,
) -> Result<Stats> {
    for i in 0..3 {
        launch(i % copies)?;
    }
    b.synchronize()?;
    let mut it = 0usize;
    let mut v = Vec::new();
    for _ in 0..(reps / BATCH).max(5) {
        let ms = b.time_ms(&mut || {
            for _ in 0..BATCH {
                launch(it % copies)?;
                it += 1;
            }
            Ok(())
        })?;
        v.push(ms * 1e3 / BATCH as f64);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    Ok(Stats {
        median: q(0.5),
        p10: q(0.1),
        p90: q(0.9),
    })
}

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

fn cublas_gemv(
    b: &CudaBackend,
    blas: &CudaBlas,
    rows: usize,
    cols: usize,
    m: usize,
) -> Result<Stats> {
    let copies = WORKING_SET.div_ceil(rows * cols * 2).clamp(2, 8);
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
    let mut y = b.stream().alloc_zeros::<bf16>(m * rows).map_err(err)?;
    // y[M, R] = x[M, C] W[R, C]^T, in column-major terms y^T = W^T(op) x^T.
    let cfg = GemmConfig {
        transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T,
        transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        m: rows as i32,
        n: m as i32,
        k: cols as i32,
        alpha: bf16::ONE,
        lda: cols as i32,
        ldb: cols as i32,
        beta: bf16::ZERO,
        ldc: rows as i32,
    };
    time_batched(
        b,
        REPS,
        |i| {
            // SAFETY: dimensions match the buffers allocated above.
            unsafe { blas.gemm(cfg, &ws[i], &x, &mut y) }.map_err(err)
        },
        copies,
    )
}

/// One matrix, its rotating device copies and the activations, timed with any variant.
struct ReduceCase {
    g: Geometry,
    m: u32,
    ws: Vec<DeviceMatrix<CudaBackend>>,
    dx: <CudaBackend as Backend>::Tensor,
    scale: trellis::ScaleDType,
}

impl ReduceCase {
    fn new(b: &CudaBackend, g: Geometry, m: u32) -> Result<Self> {
        let w = random_matrix(g, 11);
        let x = random_activations(DType::Bf16, m as usize, g.cols, 12);
        let per_copy = w.codes.len() * 4;
        let copies = WORKING_SET.div_ceil(per_copy).clamp(1, 16);
        let ws = (0..copies)
            .map(|_| DeviceMatrix::upload(b, &w))
            .collect::<Result<Vec<_>>>()?;
        let dx = ops::upload_activations(b, &x)?;
        Ok(ReduceCase {
            g,
            m,
            ws,
            dx,
            scale: w.scale_dtype,
        })
    }
    fn spec(&self, v: Variant) -> trellis::kernels::Reduce {
        ops::reduce_spec(&self.g, self.scale, DType::Bf16, self.m, v)
    }
    fn time(&self, b: &CudaBackend, v: Variant) -> Result<Stats> {
        let spec = self.spec(v);
        let mut y = b.alloc(&spec.outputs()[0])?;
        time_batched(
            b,
            REPS,
            |i| {
                let d = &self.ws[i];
                spec.launch_into(b, &self.dx, &d.codes, &d.scales, d.table(v.repr), &mut y)
            },
            self.ws.len(),
        )
    }
}

/// The seed's reduce structure (`../shared/reference`), rendered from our templates: one
/// simdgroup per row, 8 per group, the 2^L value table in threadgroup memory, each lane's
/// run of x loaded as vectors straight into registers and its k+1 code words in
/// registers. (Its rounding is this project's packed convert; the seed's own kernel with
/// the single convert is timed in `prototypes/exact_reduce.cu`.)
pub fn seed_structure() -> Variant {
    Variant {
        repr: Representation::SharedTable,
        m_strategy: MStrategy::SharedDecode,
        rows_per_group: 8,
        x_stage: XStage::Registers,
        tier: Tier::Exact,
        rows_per_simd: 1,
    }
}

/// The x-in-registers candidates timed next to the table's choice (inline decode, 1, 2
/// or 4 rows per simdgroup, 4 or 8 simdgroups per group).
fn register_candidates() -> Vec<Variant> {
    let mut out = Vec::new();
    for rows_per_simd in ROWS_PER_SIMD {
        for rows_per_group in [4, 8] {
            out.push(Variant {
                repr: Representation::Inline,
                m_strategy: MStrategy::SharedDecode,
                rows_per_group,
                x_stage: XStage::Registers,
                tier: Tier::Exact,
                rows_per_simd,
            });
        }
    }
    out
}

fn g_bytes(g: &Geometry, m: u32) -> usize {
    g.rows * g.cols * g.k as usize / 8 + g.rows * 2 + (m as usize) * (g.cols + g.rows) * 2
}

/// Run the benchmark and write the report.
pub fn run(out: &Path, table: Option<&Path>) -> Result<()> {
    let b = CudaBackend::new(0)?;
    let blas = CudaBlas::new(b.stream().clone()).map_err(err)?;
    let mut selector = Selector::from_env();
    if let Some(t) = table {
        let text = std::fs::read_to_string(t).map_err(|e| Error::file(t, e))?;
        selector.add_text(&t.display().to_string(), &text);
    }
    for w in &selector.warnings {
        eprintln!("warning: {w}");
    }
    let copy = copy_bandwidth(&b)?;
    let info = b.info().clone();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Trellis reduce vs dense bf16 cuBLAS on {} ({})\n",
        info.name, info.id
    );
    let _ = writeln!(s, "Measured by `cargo xtask bench --backend cuda` on {}. Device-to-device copy bandwidth in the same run: **{:.0} GB/s** (read + write).", harness::today(), copy);
    let _ = writeln!(s, "Each time is the median over batches of {BATCH} back-to-back launches ({REPS} launches in all) of the mean time per launch, timed with CUDA events (host launch cost hidden behind the queued kernels), rotating through weight copies totalling at least {} MB (L2 is about 60 MB). Trellis: exact tier, bf16, L = 12, code 1mad, T = 256, the variant the tuning table selects (source in the last column). cuBLAS: `cublasGemmEx` bf16 on the dense weights of the same shape.\n", WORKING_SET >> 20);
    let _ = writeln!(s, "Seed structure: the seed's reduce (one simdgroup per row, shared value table, x and code words in registers), rendered from our templates as `{}`. Best registers candidate: the fastest of {} x-in-registers variants (inline decode, rows per simdgroup 1/2/4, 4 or 8 simdgroups per group), timed in the same run.\n", seed_structure(), register_candidates().len());
    let _ = writeln!(s, "| shape | k | M | trellis us | GB/s | seed structure us | best registers us | best registers variant | cuBLAS bf16 us | cuBLAS / best | variant | source |");
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|"
    );
    let mut goal = Vec::new();
    let ms: Vec<u32> = std::env::var("TRELLIS_BENCH_M")
        .ok()
        .map(|v| v.split(',').filter_map(|m| m.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    let presets: Vec<String> = std::env::var("TRELLIS_BENCH_PRESETS")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| vec!["qwen3-14b".into(), "llama-3-8b".into()]);
    for preset in &presets {
        let shapes = harness::preset(preset)
            .ok_or_else(|| Error::invalid("preset", preset, "qwen3-14b or llama-3-8b"))?;
        for shape in shapes {
            for k in [2u32, 3, 4] {
                for &m in &ms {
                    let g = Geometry::new(shape.rows, shape.cols, 256, k, 12, Code::OneMad)?;
                    let key = TuneKey::new(Family::Reduce, &g, None, DType::Bf16, m, Tier::Exact);
                    let sel = selector.select("cuda", &info.id, &key);
                    let case = ReduceCase::new(&b, g, m)?;
                    // Compile every kernel of this row in parallel first.
                    let mut vs = vec![sel.variant, seed_structure()];
                    vs.extend(register_candidates());
                    let specs: Vec<AnyKernel> = vs
                        .iter()
                        .map(|&v| AnyKernel::Reduce(case.spec(v)))
                        .filter(|k| k.validate().is_ok())
                        .collect();
                    let renders: Vec<_> = specs
                        .iter()
                        .map(|k| move |d: Dialect| k.render(d))
                        .collect();
                    let launches: Vec<_> = specs
                        .iter()
                        .zip(&renders)
                        .map(|(k, r)| k.launch_request(r))
                        .collect();
                    b.precompile(&launches)?;
                    let ts = case.time(&b, sel.variant)?;
                    let seed = case.time(&b, seed_structure())?;
                    let mut best: Option<(Variant, Stats)> = None;
                    for v in register_candidates() {
                        let st = case.time(&b, v)?;
                        eprintln!("  {v}: {:.1} us", st.median);
                        if best.as_ref().is_none_or(|(_, bs)| st.median < bs.median) {
                            best = Some((v, st));
                        }
                    }
                    let (bv, bs) = best.expect("candidates");
                    drop(case);
                    let cs = cublas_gemv(&b, &blas, shape.rows, shape.cols, m as usize)?;
                    let _ = writeln!(
                        s,
                        "| {}x{} | {k} | {m} | {:.1} | {:.0} | {:.1} | {:.1} | {bv} | {:.1} | {:.2} | {} | {} |",
                        shape.rows,
                        shape.cols,
                        ts.median,
                        g_bytes(&g, m) as f64 / (ts.median * 1e-6) / 1e9,
                        seed.median,
                        bs.median,
                        cs.median,
                        cs.median / bs.median,
                        sel.variant,
                        sel.source
                    );
                    if shape.rows == 17408 && k == 3 {
                        goal.push((m, bs.median, cs.median));
                    }
                    eprintln!(
                        "{}x{} k{k} M{m}: trellis {:.1} us, seed structure {:.1} us, best registers {:.1} us ({bv}), cublas {:.1} us",
                        shape.rows, shape.cols, ts.median, seed.median, bs.median, cs.median
                    );
                }
            }
        }
    }

    // gate_up at the Qwen3-14B gate/up shape: same k and mixed k, exact tail, against two
    // dense bf16 GEMVs (the SwiGLU elementwise kernel of the dense path is not timed,
    // which favours cuBLAS by its few microseconds).
    let _ = writeln!(
        s,
        "\n## gate_up, 17408 x 5120 (two projections, exact tail)\n"
    );
    let _ = writeln!(
        s,
        "| kg | ku | M | best registers us | variant | 2 x cuBLAS bf16 us | dense / trellis |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---|---:|---:|");
    for (kg, ku) in [(3u32, 3u32), (4, 3)] {
        for &m in ms.iter().filter(|&&m| m <= 4) {
            let gg = Geometry::new(17408, 5120, 256, kg, 12, Code::OneMad)?;
            let ug = Geometry::new(17408, 5120, 256, ku, 12, Code::OneMad)?;
            let (gw, uw) = (random_matrix(gg, 21), random_matrix(ug, 22));
            let x = random_activations(DType::Bf16, m as usize, 5120, 23);
            let copies = WORKING_SET
                .div_ceil((gw.codes.len() + uw.codes.len()) * 4)
                .clamp(1, 8);
            let gs = (0..copies)
                .map(|_| DeviceMatrix::upload(&b, &gw))
                .collect::<Result<Vec<_>>>()?;
            let us_ = (0..copies)
                .map(|_| DeviceMatrix::upload(&b, &uw))
                .collect::<Result<Vec<_>>>()?;
            let dx = ops::upload_activations(&b, &x)?;
            let spec = |v: Variant| {
                ops::gate_up_spec(
                    &gg,
                    &ug,
                    (gw.scale_dtype, uw.scale_dtype),
                    DType::Bf16,
                    m,
                    Tail::Exact,
                    v,
                )
            };
            let specs: Vec<AnyKernel> = register_candidates()
                .into_iter()
                .map(|v| AnyKernel::GateUp(spec(v)))
                .filter(|k| k.validate().is_ok())
                .collect();
            let renders: Vec<_> = specs
                .iter()
                .map(|k| move |d: Dialect| k.render(d))
                .collect();
            let launches: Vec<_> = specs
                .iter()
                .zip(&renders)
                .map(|(k, r)| k.launch_request(r))
                .collect();
            b.precompile(&launches)?;
            let mut best: Option<(Variant, Stats)> = None;
            for v in register_candidates() {
                let sp = spec(v);
                let mut mid = b.alloc(&sp.outputs()[0])?;
                let st = time_batched(
                    &b,
                    REPS,
                    |i| {
                        let (g, u) = (&gs[i], &us_[i]);
                        sp.launch_into(
                            &b,
                            &dx,
                            &g.codes,
                            &g.scales,
                            g.table(v.repr),
                            &u.codes,
                            &u.scales,
                            u.table(v.repr),
                            &mut mid,
                        )
                    },
                    copies,
                )?;
                eprintln!("  gate_up kg{kg} ku{ku} M{m} {v}: {:.1} us", st.median);
                if best.as_ref().is_none_or(|(_, bs)| st.median < bs.median) {
                    best = Some((v, st));
                }
            }
            drop((gs, us_));
            let (bv, bs) = best.expect("candidates");
            let cs = cublas_gemv(&b, &blas, 17408, 5120, m as usize)?;
            let dense = 2.0 * cs.median;
            let _ = writeln!(
                s,
                "| {kg} | {ku} | {m} | {:.1} | {bv} | {:.1} | {:.2} |",
                bs.median,
                dense,
                dense / bs.median
            );
        }
    }
    let _ = writeln!(
        s,
        "\n## Goals (exact tier, 17408 x 5120, k = 3, best registers candidate; issue 10)\n"
    );
    let find = |m: u32| goal.iter().find(|g| g.0 == m);
    if let Some(m1) = find(1) {
        let r = m1.2 / m1.1;
        let _ = writeln!(s, "- M = 1: {:.1} us (goal: 30 us or less), vs dense bf16 cuBLAS {:.1} us: {r:.2}x (goal: at least 1.6x): **{}**.", m1.1, m1.2, if r >= 1.6 && m1.1 <= 30.0 { "met" } else { "missed" });
        for (m, lim) in [(4u32, 1.4f64), (8, 2.0)] {
            if let Some(mm) = find(m) {
                let q = mm.1 / m1.1;
                let _ = writeln!(s, "- M = {m} vs M = 1: {:.1} us vs {:.1} us, {q:.2}x (goal: within {lim}x): **{}**.", mm.1, m1.1, if q <= lim { "met" } else { "missed" });
            }
        }
    }
    std::fs::write(out, &s).map_err(|e| Error::file(out, e))?;
    println!("{s}");
    Ok(())
}
