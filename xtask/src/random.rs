//! `cargo xtask verify --random N`: random problems through the library facade
//! (`ops::matvec`, `ops::gate_up`, exact and fast), each with the variant the selector
//! picks on this backend (a tuned winner from the nearest bucket, or the default where
//! that does not fit), checked against the CPU reference: SPEC 5 bits for exact, the
//! SPEC 7 (v2) bound for fast. Random geometry over the SPEC ranges (every code, k 1-8,
//! L k+1..16, T, odd row counts), every activation and scale dtype, activations with
//! outliers up to 2^15, and a share of the tuned preset shapes so the table's winners run.
//! Half of the fast cases with bf16 or f32 activations scale each sample by its own power
//! of two in 2^-40..2^40 (the operands' prescaling, `reduce_mma::Prescaled`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt::Write;
use trellis::check::{self, RealSums};
use trellis::kernel::Backend;
use trellis::numerics::{Tail, Tier};
use trellis::{ops, reference, Code, DType, Geometry, QuantizedMatrix, ScaleDType};

/// `verify --random` on whichever backend was opened.
pub struct Job {
    pub n: usize,
    pub seed: u64,
}

impl trellis::backend::BackendVisitor for Job {
    type Out = (String, bool);
    fn visit<B: Backend>(self, b: &B) -> Self::Out {
        run(b, self.n, self.seed)
    }
}

/// One random case.
#[derive(Clone, Debug)]
pub struct Case {
    pub gate: Geometry,
    /// The up projection (`gate_up` only): same rows and cols; in 30 % of the cases off the
    /// presets a T of its own (SPEC 6 allows it; the facade runs such a pair unfused).
    pub up: Option<Geometry>,
    pub scale: ScaleDType,
    /// The up projection's scale dtype, drawn on its own.
    pub up_scale: ScaleDType,
    pub act: DType,
    pub m: usize,
    pub tier: Tier,
    pub tail: Tail,
    /// Each sample of x times its own power of two in 2^-40..2^40 (fast, bf16 / f32).
    pub magnitudes: bool,
    pub seed: u64,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = &self.gate;
        match &self.up {
            None => write!(f, "reduce {g}")?,
            Some(u) => write!(
                f,
                "gate_up {g} up{} k{} L{} {} scales {} tail {}",
                if u.t == g.t {
                    String::new()
                } else {
                    format!(" T{}", u.t)
                },
                u.k,
                u.l,
                u.code,
                self.up_scale,
                self.tail
            )?,
        }
        write!(
            f,
            " M={} {}{} scales {} {} seed {}",
            self.m,
            self.act,
            if self.magnitudes {
                " (scaled per sample)"
            } else {
                ""
            },
            self.scale,
            self.tier,
            self.seed
        )
    }
}

/// Shapes the H200 table was tuned at (Qwen3-14B and Llama-3-8B MLPs).
const PRESETS: [(usize, usize); 4] = [(17408, 5120), (5120, 17408), (14336, 4096), (4096, 14336)];

/// `n` cases from `seed`; `native_tail`: whether fast `gate_up` may ask for the
/// backend's own SwiGLU arithmetic (`run` asks it of every backend but `cpu` and the
/// reference: the GPUs and the Metal simulator).
pub fn cases(n: usize, seed: u64, native_tail: bool) -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let code = Code::ALL[rng.random_range(0..Code::ALL.len())];
            let k = rng.random_range(1..=8u32);
            let l = rng.random_range(k + 1..=16u32);
            let (rows, cols, t) = if i % 4 == 3 {
                let (r, c) = PRESETS[rng.random_range(0..PRESETS.len())];
                (r, c, 256)
            } else {
                let t = 32 * rng.random_range(1..=8usize);
                let cols = t * rng.random_range(1..=(6144 / t));
                (rng.random_range(1..=700usize), cols, t)
            };
            let gate = Geometry::new(rows, cols, t, k, l, code).expect("in SPEC ranges");
            let up = rng.random_bool(0.4).then(|| {
                let ku = (k + rng.random_range(0..=2u32)).clamp(2, 9) - 1; // k - 1 ..= k + 1
                let lu = rng.random_range(ku + 1..=16u32);
                let cu = Code::ALL[rng.random_range(0..Code::ALL.len())];
                let others: Vec<usize> = (1..=8)
                    .map(|j| 32 * j)
                    .filter(|&tu| cols % tu == 0 && tu != t)
                    .collect();
                let tu = if i % 4 != 3 && !others.is_empty() && rng.random_bool(0.3) {
                    others[rng.random_range(0..others.len())]
                } else {
                    t
                };
                Geometry::new(rows, cols, tu, ku, lu, cu).expect("in SPEC ranges")
            });
            let tier = if rng.random_bool(0.5) {
                Tier::Exact
            } else {
                Tier::Fast
            };
            let launch = if tier == Tier::Fast { 16 } else { 8 };
            // One case in ten past one launch (the facade's chunks).
            let ms = if rng.random_bool(0.1) {
                launch + 1..=launch + 4
            } else {
                1..=launch
            };
            let tail = if tier == Tier::Fast && native_tail && rng.random_bool(0.3) {
                Tail::Native
            } else {
                Tail::Exact
            };
            let act = [DType::Bf16, DType::F16, DType::F32][rng.random_range(0..3)];
            Case {
                gate,
                up,
                scale: [ScaleDType::F16, ScaleDType::F32][rng.random_range(0..2)],
                up_scale: [ScaleDType::F16, ScaleDType::F32][rng.random_range(0..2)],
                act,
                m: rng.random_range(ms),
                tier,
                tail,
                magnitudes: tier == Tier::Fast && act != DType::F16 && rng.random_bool(0.5),
                seed: rng.random(),
            }
        })
        .collect()
}

fn matrix(g: Geometry, scale: ScaleDType, seed: u64) -> QuantizedMatrix {
    check::random_matrix_scaled(g, scale, seed)
}

/// Run one case on `b`: `Ok` with what was checked, `Err` with what went wrong.
pub fn run_case<B: Backend>(b: &B, c: &Case) -> Result<String, String> {
    let e = |e: trellis::Error| e.to_string();
    let w = matrix(c.gate, c.scale, c.seed);
    let mut x = check::random_activations_with_outliers(c.act, c.m, c.gate.cols, c.seed + 1);
    if c.magnitudes {
        // Exact: a power of two scales bf16 and f32 values (here within 2^-60..2^55).
        let mut rng = ChaCha8Rng::seed_from_u64(c.seed + 3);
        for sample in x.data.chunks_mut(c.gate.cols) {
            let f = 2f32.powi(rng.random_range(-40..=40));
            sample.iter_mut().for_each(|v| *v *= f);
        }
    }
    match (c.up, c.tier) {
        (None, Tier::Exact) => {
            let y = ops::matvec(b, &w, &x, Tier::Exact).map_err(e)?;
            check::bits(&y, &reference::reduce(&w, &x).map_err(e)?)
        }
        (None, Tier::Fast) => {
            let y = ops::matvec(b, &w, &x, Tier::Fast).map_err(e)?;
            check::fast_reduce(&y, &RealSums::of(&w, &x).map_err(e)?)
        }
        (Some(ug), tier) => {
            let u = matrix(ug, c.up_scale, c.seed + 2);
            let mid = ops::gate_up(b, &w, &u, &x, c.tail, tier).map_err(e)?;
            if tier == Tier::Exact {
                check::bits(&mid, &reference::gate_up(&w, &u, &x).map_err(e)?)
            } else {
                let (gs, us) = (
                    RealSums::of(&w, &x).map_err(e)?,
                    RealSums::of(&u, &x).map_err(e)?,
                );
                check::fast_gate_up(&mid, &gs, &us, c.tail == Tail::Native)
            }
        }
    }
}

/// Run `n` cases from `seed` on `b`; the report and whether every case passed.
pub fn run<B: Backend>(b: &B, n: usize, seed: u64) -> (String, bool) {
    let started = std::time::Instant::now();
    let native = b.name() != "cpu" && b.name() != "reference";
    let cases = cases(n, seed, native);
    let bar = crate::progress_bar(cases.len() as u64, "verify --random");
    let mut failed = Vec::new();
    let mut by = std::collections::BTreeMap::<String, (usize, usize)>::new();
    for c in &cases {
        let r = run_case(b, c);
        let kind = format!(
            "{} {}",
            if c.up.is_some() { "gate_up" } else { "reduce" },
            c.tier
        );
        let e = by.entry(kind).or_default();
        e.0 += 1;
        e.1 += usize::from(r.is_ok());
        if let Err(why) = r {
            failed.push(format!("{c}: {why}"));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# cargo xtask verify --random {n} --seed {seed} --backend {} ({})\n",
        b.name(),
        b.device_id()
    );
    let _ = writeln!(s, "| facade call | tier | cases | passed | failed |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|");
    for (kind, (n, ok)) in &by {
        let (call, tier) = kind.split_once(' ').unwrap_or((kind, ""));
        let _ = writeln!(s, "| {call} | {tier} | {n} | {ok} | {} |", n - ok);
    }
    let _ = writeln!(
        s,
        "\n{} cases, {} failed ({:.1} s)",
        cases.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    for f in &failed {
        let _ = writeln!(s, "failed: {f}");
    }
    (s, failed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_in_spec_ranges_deterministic_and_cover_the_space() {
        let a = cases(400, 7, true);
        let b = cases(400, 7, true);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        for c in &a {
            c.gate.validate().unwrap();
            if let Some(u) = c.up {
                u.validate().unwrap();
                assert_eq!((u.rows, u.cols), (c.gate.rows, c.gate.cols));
            }
            assert!(c.m >= 1 && c.m <= if c.tier == Tier::Fast { 20 } else { 12 });
            assert!(c.tail == Tail::Exact || c.tier == Tier::Fast);
            assert!(!c.magnitudes || (c.tier == Tier::Fast && c.act != DType::F16));
        }
        for code in Code::ALL {
            assert!(a.iter().any(|c| c.gate.code == code), "{code}");
        }
        assert!(a.iter().any(|c| c.up.is_some() && c.tier == Tier::Fast));
        for tier in [Tier::Exact, Tier::Fast] {
            let two_ts = |c: &&Case| c.tier == tier && c.up.is_some_and(|u| u.t != c.gate.t);
            assert!(a.iter().any(|c| two_ts(&c)), "{tier}: no pair of two T");
        }
        assert!(a.iter().any(|c| c.gate.rows == 17408));
        assert!(a.iter().any(|c| c.m > 8));
        assert!(a
            .iter()
            .any(|c| c.tier == Tier::Exact && c.m > 8 && c.up.is_some()));
        assert!(a.iter().any(|c| c.up.is_some_and(|u| u.k < c.gate.k)));
        assert!(a.iter().any(|c| c.up.is_some() && c.up_scale != c.scale));
        assert!(a.iter().any(|c| c.magnitudes));
        assert!(cases(50, 7, false).iter().all(|c| c.tail == Tail::Exact));
    }

    /// A few small cases on the CPU backend, end to end (the GPU runs are device calls).
    #[test]
    fn small_cases_pass_on_the_cpu() {
        let b = trellis::backend::CpuBackend::new().unwrap();
        let all = cases(1000, 3, false);
        let small = |c: &&Case| c.gate.rows * c.gate.cols <= 64 * 1024;
        let small: Vec<&Case> = (all.iter().filter(small).take(4))
            .chain(all.iter().filter(small).filter(|c| c.magnitudes).take(3))
            .collect();
        assert_eq!(small.len(), 7);
        for c in &small {
            run_case(&b, c).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
    }
}
