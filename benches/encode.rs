//! Encoder throughput in trellis edges per second.
//!
//! An edge is one (predecessor state, successor state) pair of one trellis step:
//! `2^L * 2^k` per step. The Viterbi step does O(2^L) work for them (a predecessor group
//! is shared by 2^k successors), so edges/s = state-steps/s * 2^k.
//!
//! * `encode/block`: one block of T = 256 through both passes of the tail-biting scheme
//!   (`tail_biting_path`), one thread; counted: 2 passes * T * 2^L * 2^k edges.
//! * `encode/quantize`: `quantize` of a 64 x 4096 Gaussian matrix, all threads;
//!   counted: blocks * 2 passes * T * 2^L * 2^k edges. Not counted (but timed): the
//!   scale-multiplier search (single passes over ~32 sampled blocks per grid point,
//!   ~12% of the work at this size, ~0.2% for 4096 x 4096), packing and the MSE.
//!
//! `TRELLIS_ENCODE_FULL=12,16 cargo bench --bench encode` instead quantizes a 4096 x 4096
//! unit Gaussian matrix (k = 2, 1mad, T = 256) at each listed L once and prints the
//! wall time and MSE.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use std::hint::black_box;
use std::time::{Duration, Instant};
use trellis::encode::{quantize, tail_biting_path, EncodeOptions};
use trellis::Code;

const T: usize = 256;
const K: u32 = 2;

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect()
}

fn options(l: u32, progress: bool) -> EncodeOptions {
    EncodeOptions {
        t: T,
        k: K,
        l,
        code: Code::OneMad,
        lut: None,
        progress,
    }
}

/// Edges of both passes over `blocks` blocks.
fn edges(blocks: usize, l: u32) -> u64 {
    blocks as u64 * 2 * T as u64 * (1u64 << l) * (1u64 << K)
}

fn block(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode/block");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for l in [12u32, 16] {
        let values = Code::OneMad.table(l, None).unwrap();
        let x = gaussian(T, 1);
        g.throughput(Throughput::Elements(edges(1, l)));
        g.bench_with_input(BenchmarkId::new("1mad_k2", format!("L{l}")), &l, |b, &l| {
            b.iter(|| tail_biting_path(black_box(&values), K, l, black_box(&x)).unwrap())
        });
    }
    g.finish();
}

fn matrix(c: &mut Criterion) {
    let (rows, cols) = (64, 4096);
    let w = gaussian(rows * cols, 2);
    let mut g = c.benchmark_group("encode/quantize");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    let l = 12;
    g.throughput(Throughput::Elements(edges(rows * cols / T, l)));
    g.bench_function(BenchmarkId::new("1mad_k2_64x4096", format!("L{l}")), |b| {
        b.iter(|| quantize(black_box(&w), rows, cols, &options(l, false)).unwrap())
    });
    g.finish();
}

/// CPU time (user + system) of this process in seconds, where Linux tells it.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and
    // 13th of them, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// One full 4096 x 4096 quantization per listed L: wall time, and CPU time (so that a
/// run on a busy machine still tells what an idle one would take: CPU time / cores).
fn full(ls: &str) {
    let n = 4096;
    let w = gaussian(n * n, 3);
    for l in ls.split(',').filter_map(|s| s.trim().parse::<u32>().ok()) {
        let (t0, c0) = (Instant::now(), cpu_seconds());
        let e = quantize(&w, n, n, &options(l, true)).unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let cpu = match (c0, cpu_seconds()) {
            (Some(a), Some(b)) => format!("{:.1} s", b - a),
            _ => "unknown".into(),
        };
        println!(
            "4096x4096 1mad k={K} L={l} T={T}: wall {secs:.1} s on {} threads (cpu {cpu}), \
             mse {:.5}, {:.2} G edges/s",
            rayon::current_num_threads(),
            e.mse,
            edges(n * n / T, l) as f64 / secs / 1e9
        );
    }
}

criterion_group!(benches, block, matrix);

fn main() {
    if let Ok(ls) = std::env::var("TRELLIS_ENCODE_FULL") {
        full(&ls);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
