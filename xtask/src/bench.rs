//! `cargo xtask bench --backend cuda`: tuned trellis kernels against dense bf16 cuBLAS
//! and the copy bandwidth, all measured in one run, written as a markdown report.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use half::bf16;
use std::fmt::Write;
use std::path::Path;
use trellis::backend::cuda::CudaBackend;
use trellis::kernel::Backend;
use trellis::kernels::{Tier, Variant};
use trellis::ops::{self, DeviceMatrix};
use trellis::tune::harness::{self, time_candidate, Stats};
use trellis::tune::{Family, Selector, TuneKey};
use trellis::verify::{random_activations, random_matrix};
use trellis::{Code, DType, Error, Geometry, Result};

const WORKING_SET: usize = 256 << 20;
const REPS: usize = 100;

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
    time_candidate(
        b,
        REPS,
        |i| {
            // SAFETY: dimensions match the buffers allocated above.
            unsafe { blas.gemm(cfg, &ws[i], &x, &mut y) }.map_err(err)
        },
        copies,
    )
}

fn trellis_reduce(b: &CudaBackend, g: Geometry, m: u32, v: Variant) -> Result<(Stats, usize)> {
    let w = random_matrix(g, 11);
    let x = random_activations(DType::Bf16, m as usize, g.cols, 12);
    let per_copy = w.codes.len() * 4;
    let copies = WORKING_SET.div_ceil(per_copy).clamp(1, 16);
    let ws = (0..copies)
        .map(|_| DeviceMatrix::upload(b, &w))
        .collect::<Result<Vec<_>>>()?;
    let dx = ops::upload_activations(b, &x)?;
    let spec = ops::reduce_spec(&g, w.scale_dtype, DType::Bf16, m, v);
    let stats = time_candidate(
        b,
        REPS,
        |i| {
            let d = &ws[i];
            spec.launch(b, &dx, &d.codes, &d.scales, d.table(v.repr))
                .map(drop)
        },
        copies,
    )?;
    let bytes = per_copy + g.rows * 2 + (m as usize) * (g.cols + g.rows) * 2;
    Ok((stats, bytes))
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
    let _ = writeln!(s, "Each time is the median of {REPS} launches timed with CUDA events, rotating through weight copies totalling at least {} MB (L2 is about 60 MB). Trellis: exact tier, bf16, L = 12, code 1mad, T = 256, the variant the tuning table selects (source in the last column). cuBLAS: `cublasGemmEx` bf16 on the dense weights of the same shape.\n", WORKING_SET >> 20);
    let _ = writeln!(s, "| shape | k | M | trellis us | GB/s | cuBLAS bf16 us | cuBLAS / trellis | variant | source |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---|---|");
    let mut goal = Vec::new();
    for preset in ["qwen3-14b", "llama-3-8b"] {
        for shape in harness::preset(preset).expect("known preset") {
            for k in [2u32, 3, 4] {
                for m in [1u32, 2, 4] {
                    let g = Geometry::new(shape.rows, shape.cols, 256, k, 12, Code::OneMad)?;
                    let key = TuneKey::new(Family::Reduce, &g, None, DType::Bf16, m, Tier::Exact);
                    let sel = selector.select("cuda", &info.id, &key);
                    let (ts, bytes) = trellis_reduce(&b, g, m, sel.variant)?;
                    let cs = cublas_gemv(&b, &blas, shape.rows, shape.cols, m as usize)?;
                    let _ = writeln!(
                        s,
                        "| {}x{} | {k} | {m} | {:.1} | {:.0} | {:.1} | {:.2} | {} | {} |",
                        shape.rows,
                        shape.cols,
                        ts.median,
                        bytes as f64 / (ts.median * 1e-6) / 1e9,
                        cs.median,
                        cs.median / ts.median,
                        sel.variant,
                        sel.source
                    );
                    if shape.rows == 17408 && k == 3 {
                        goal.push((m, ts.median, cs.median));
                    }
                    eprintln!(
                        "{}x{} k{k} M{m}: trellis {:.1} us, cublas {:.1} us",
                        shape.rows, shape.cols, ts.median, cs.median
                    );
                }
            }
        }
    }
    let _ = writeln!(s, "\n## Goals (exact tier, 17408 x 5120, k = 3)\n");
    if let (Some(m1), Some(m4)) = (
        goal.iter().find(|g| g.0 == 1),
        goal.iter().find(|g| g.0 == 4),
    ) {
        let r = m1.2 / m1.1;
        let _ = writeln!(s, "- M = 1 vs dense bf16 cuBLAS: {:.1} us vs {:.1} us, {r:.2}x (goal: at least 2x): **{}**.", m1.1, m1.2, if r >= 2.0 { "met" } else { "missed" });
        let q = m4.1 / m1.1;
        let _ = writeln!(
            s,
            "- M = 4 vs M = 1: {:.1} us vs {:.1} us, {q:.2}x (goal: within 1.3x): **{}**.",
            m4.1,
            m1.1,
            if q <= 1.3 { "met" } else { "missed" }
        );
    }
    std::fs::write(out, &s).map_err(|e| Error::file(out, e))?;
    println!("{s}");
    Ok(())
}
