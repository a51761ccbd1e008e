//! The measuring harness behind `cargo xtask tune`: for each [`TuneKey`], verify every
//! candidate against the reference, time the survivors (warm-up, rotating weight copies
//! larger than the last-level cache, device timers, median and p10/p90), and keep a
//! winner only where it beats the default by more than the noise.

use super::table::{DeviceRecord, Entry, Table, VariantRecord};
use super::{Family, TuneKey};
use crate::catalog::{self, AnyKernel};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{Backend, Dialect};
use crate::kernels::{Tail, Tier, Variant};
use crate::matrix::Activations;
use crate::ops::{self, DeviceMatrix};
use crate::verify::{
    check_fast_bound, first_mismatch, random_activations, random_matrix, within_fast_tolerance,
};
use crate::{reference, Code, Geometry};

/// What to tune.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub families: Vec<Family>,
    /// Matrix shapes; `gate_up` keys are made only for shapes marked `gate_up`.
    pub shapes: Vec<Shape>,
    pub ms: Vec<u32>,
    pub ks: Vec<u32>,
    pub ls: Vec<u32>,
    pub codes: Vec<Code>,
    pub tier: Tier,
    pub dtype: DType,
    pub t: usize,
    /// Restrict launch shapes to a small set (CPU default: compiling is the cost).
    pub quick: bool,
    /// Stop starting new keys after this long.
    pub budget: std::time::Duration,
    /// Bytes the rotating weight copies must exceed (several times the last-level cache).
    pub working_set: usize,
    /// Timed repetitions per candidate.
    pub reps: usize,
    /// A candidate whose verification launch takes longer than this is rejected as timed
    /// out (a pathological launch shape must not stall the run).
    pub candidate_timeout: std::time::Duration,
}

/// One matrix shape to tune, `R x C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub rows: usize,
    pub cols: usize,
    /// Also tune the fused gate/up kernel on it (an MLP's gate/up projection shape).
    pub gate_up: bool,
}

/// Shapes of the MLP presets: Qwen3-14B and Llama-3-8B (gate/up, then down).
pub fn preset(name: &str) -> Option<Vec<Shape>> {
    let mlp = |inter: usize, hidden: usize| {
        vec![
            Shape {
                rows: inter,
                cols: hidden,
                gate_up: true,
            },
            Shape {
                rows: hidden,
                cols: inter,
                gate_up: false,
            },
        ]
    };
    match name {
        "qwen3-14b" => Some(mlp(17408, 5120)),
        "llama-3-8b" => Some(mlp(14336, 4096)),
        _ => None,
    }
}

/// Crash recovery for the tuner. Each candidate is written to the journal before it runs
/// and cleared after, so when a candidate kills the process (a kernel that crashes it),
/// the resumed run finds it still in flight and rejects it instead of running it again.
/// `cargo xtask tune` runs the tuner in a child process and resumes it after a crash.
pub struct Journal {
    path: std::path::PathBuf,
    crashed: Vec<String>,
}

impl Journal {
    /// Open (or start) the journal at `path`; a candidate left in flight becomes crashed.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let crashed = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("crashed ")
                    .or_else(|| l.strip_prefix("running "))
            })
            .map(str::to_string)
            .collect();
        let j = Journal {
            path: path.to_path_buf(),
            crashed,
        };
        j.write(None)?;
        Ok(j)
    }

    /// Whether a candidate crashed an earlier attempt.
    pub fn crashed(&self, id: &str) -> bool {
        self.crashed.iter().any(|c| c == id)
    }

    fn write(&self, running: Option<&str>) -> Result<()> {
        use std::io::Write;
        let mut text: String = self
            .crashed
            .iter()
            .map(|c| format!("crashed {c}\n"))
            .collect();
        if let Some(r) = running {
            text += &format!("running {r}\n");
        }
        let mut f = std::fs::File::create(&self.path).map_err(|e| Error::file(&self.path, e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| Error::file(&self.path, e))
    }

    fn begin(&self, id: &str) -> Result<()> {
        self.write(Some(id))
    }

    fn end(&self) -> Result<()> {
        self.write(None)
    }
}

/// Fault injection for the crash-recovery test: a candidate whose id contains this
/// variable's value aborts the process when it is about to run.
pub const FAULT_ENV: &str = "TRELLIS_TUNE_FAULT";

/// Statistics of one candidate's samples, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Stats {
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
        }
    }
    /// Relative spread.
    pub fn noise(&self) -> f64 {
        (self.p90 - self.p10) / self.median
    }
}

/// Every key the options describe (one per bucket: shapes that share a bucket are
/// measured once, at the first shape).
pub fn keys(o: &TuneOptions) -> Result<Vec<(TuneKey, usize, usize)>> {
    let mut out: Vec<(TuneKey, usize, usize)> = Vec::new();
    for &family in &o.families {
        for &Shape {
            rows,
            cols,
            gate_up,
        } in &o.shapes
        {
            if family == Family::GateUp && !gate_up {
                continue;
            }
            for &m in &o.ms {
                for &k in &o.ks {
                    for &l in &o.ls {
                        for &code in &o.codes {
                            let g = Geometry::new(rows, cols, o.t, k, l, code)?;
                            let key = TuneKey::new(family, &g, None, o.dtype, m, o.tier);
                            if !out.iter().any(|(k2, ..)| *k2 == key) {
                                out.push((key, rows, cols));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Warm up, then time `reps` launches, launch `i` on weight copy `i % copies`.
pub fn time_candidate<B: Backend>(
    b: &B,
    reps: usize,
    mut launch: impl FnMut(usize) -> Result<()>,
    copies: usize,
) -> Result<Stats> {
    for i in 0..3 {
        launch(i % copies)?;
    }
    b.synchronize()?;
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps {
        let ms = b.time_ms(&mut || launch(i % copies))?;
        samples.push(ms * 1e3);
    }
    Ok(Stats::of(samples))
}

/// Tune one key on `b`.
pub fn tune_key<B: Backend>(
    b: &B,
    o: &TuneOptions,
    journal: Option<&Journal>,
    key: &TuneKey,
    rows: usize,
    cols: usize,
    seed: u64,
) -> Result<Entry> {
    let g = Geometry::new(rows, cols, o.t, key.k, key.l, key.code)?;
    let gate = random_matrix(g, seed);
    let up = random_matrix(
        Geometry::new(rows, cols, o.t, key.ku, key.l, key.code)?,
        seed + 1,
    );
    let x = random_activations(key.dtype, key.m as usize, cols, seed + 2);
    let (want, dense) = match key.family {
        Family::Reduce => (
            reference::reduce(&gate, &x)?,
            Some(reference::dequantize(&gate, key.dtype)),
        ),
        Family::GateUp => (reference::gate_up(&gate, &up, &x)?, None),
    };
    // Rotate through enough copies that the weights cannot stay in cache.
    let per_copy = gate.codes.len() * 4
        + if key.family == Family::GateUp {
            up.codes.len() * 4
        } else {
            0
        };
    let copies = o.working_set.div_ceil(per_copy.max(1)).clamp(1, 16);
    let gates: Vec<DeviceMatrix<B>> = (0..copies)
        .map(|_| DeviceMatrix::upload(b, &gate))
        .collect::<Result<_>>()?;
    let ups: Vec<DeviceMatrix<B>> = if key.family == Family::GateUp {
        (0..copies)
            .map(|_| DeviceMatrix::upload(b, &up))
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let dx = ops::upload_activations(b, &x)?;

    let mut candidates: Vec<Variant> = catalog::variants(o.tier, key.m, o.quick);
    let default = super::default_variant(key);
    if !candidates.contains(&default) {
        candidates.insert(0, default);
    }
    let mut rejected = Vec::new();
    let mut timed: Vec<(Variant, Stats)> = Vec::new();
    let reduce = |v: Variant| ops::reduce_spec(&g, gate.scale_dtype, key.dtype, key.m, v);
    let gate_up = |v: Variant| {
        ops::gate_up_spec(
            &g,
            &up.geometry,
            (gate.scale_dtype, up.scale_dtype),
            key.dtype,
            key.m,
            Tail::Exact,
            v,
        )
    };
    // Compile every candidate of this key's family up front.
    {
        let specs: Vec<AnyKernel> = candidates
            .iter()
            .map(|&v| match key.family {
                Family::Reduce => AnyKernel::Reduce(reduce(v)),
                Family::GateUp => AnyKernel::GateUp(gate_up(v)),
            })
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
    }
    let fault = std::env::var(FAULT_ENV).ok().filter(|f| !f.is_empty());
    for v in candidates {
        let id = format!("[{key}] {v}");
        if journal.is_some_and(|j| j.crashed(&id)) {
            rejected.push(format!(
                "{v}: crashed the tuning process in an earlier attempt"
            ));
            continue;
        }
        if let Some(j) = journal {
            j.begin(&id)?;
        }
        if fault.as_deref().is_some_and(|f| id.contains(f)) {
            std::process::abort();
        }
        let run = |i: usize| -> Result<B::Tensor> {
            match key.family {
                Family::Reduce => {
                    let s = reduce(v);
                    let w = &gates[i];
                    Ok(s.launch(b, &dx, &w.codes, &w.scales, w.table(v.repr))?.y)
                }
                Family::GateUp => {
                    let s = gate_up(v);
                    let (gw, uw) = (&gates[i], &ups[i]);
                    Ok(s.launch(
                        b,
                        &dx,
                        &gw.codes,
                        &gw.scales,
                        gw.table(v.repr),
                        &uw.codes,
                        &uw.scales,
                        uw.table(v.repr),
                    )?
                    .mid)
                }
            }
        };
        // Verify before timing: a candidate that fails to compile or mismatches is
        // recorded with its reason and never chosen.
        // The first launch includes compilation, so only a hang-like run is cut off here.
        let started = std::time::Instant::now();
        let checked = run(0)
            .and_then(|t| ops::download_activations(b, &t, key.dtype, key.m as usize, rows))
            .map_err(|e| e.to_string())
            .and_then(|got: Activations| match (o.tier, &dense) {
                (Tier::Exact, _) => first_mismatch(&got, &want).map_or(Ok(()), Err),
                (Tier::Fast, Some(d)) => check_fast_bound(d, cols, &x, &got),
                (Tier::Fast, None) => within_fast_tolerance(&got, &want).map(drop),
            })
            .and_then(|()| {
                let took = started.elapsed();
                if took > o.candidate_timeout {
                    Err(format!(
                        "timed out: one launch took {:.1} s (limit {:.1} s)",
                        took.as_secs_f64(),
                        o.candidate_timeout.as_secs_f64()
                    ))
                } else {
                    Ok(())
                }
            });
        match checked {
            Err(why) => rejected.push(format!("{v}: {}", why.lines().next().unwrap_or_default())),
            Ok(()) => match time_candidate(b, o.reps, |i| run(i).map(drop), copies) {
                Ok(stats) => timed.push((v, stats)),
                Err(e) => rejected.push(format!("{v}: timing failed: {e}")),
            },
        }
        if let Some(j) = journal {
            j.end()?;
        }
    }
    let default_stats = timed.iter().find(|(v, _)| *v == default).map(|(_, s)| *s);
    timed.sort_by(|a, b| a.1.median.total_cmp(&b.1.median));
    let (best, best_stats) = *timed.first().ok_or_else(|| {
        Error::backend(
            b.name(),
            format!(
                "every candidate for [{key}] was rejected: {}",
                rejected.join("; ")
            ),
        )
    })?;
    // Keep the default unless the best beats it by more than the measured noise.
    let (winner, wstats) = match default_stats {
        Some(ds)
            if (ds.median - best_stats.median) / ds.median
                <= best_stats.noise().max(ds.noise()).max(0.01) =>
        {
            (default, ds)
        }
        _ => (best, best_stats),
    };
    let runner = timed.iter().find(|(v, _)| *v != winner);
    let bytes = per_copy
        + x.data.len() * key.dtype.size()
        + key.m as usize * rows * key.dtype.size()
        + rows * 2;
    let entry = Entry {
        family: key.family.name().into(),
        dtype: key.dtype.name().into(),
        m: key.m,
        k: key.k,
        ku: key.ku,
        l: key.l,
        code: key.code.name().into(),
        tier: key.tier.name().into(),
        bucket: key.bucket.to_string(),
        shape: format!("{rows}x{cols}"),
        winner: VariantRecord::of(&winner),
        median_us: round3(wstats.median),
        default_us: round3(default_stats.map_or(f64::NAN, |s| s.median)),
        speedup: round3(default_stats.map_or(f64::NAN, |s| s.median / wstats.median)),
        bandwidth_gbs: round3(bytes as f64 / (wstats.median * 1e-6) / 1e9),
        noise: round3(wstats.noise()),
        runner_up: runner.map(|(v, _)| VariantRecord::of(v)),
        runner_up_us: runner.map(|(_, s)| round3(s.median)),
        rejected,
    };
    Ok(entry)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A fresh table header for `b`.
pub fn header<B: Backend>(b: &B, description: String) -> DeviceRecord {
    DeviceRecord {
        id: b.device_id(),
        backend: b.name().into(),
        description,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        template_hash: super::template_hash(),
        date: today(),
    }
}

/// UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86400)
        .unwrap_or(0) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

/// Tune every key, resuming from `existing` (same device and templates), calling
/// `save` after each key so an interrupted run loses at most one key.
pub fn tune<B: Backend>(
    b: &B,
    o: &TuneOptions,
    description: String,
    existing: Option<Table>,
    journal: Option<&Journal>,
    mut save: impl FnMut(&Table) -> Result<()>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Table> {
    let mut table = match existing {
        Some(t)
            if t.device.id == b.device_id()
                && t.device.backend == b.name()
                && t.device.template_hash == super::template_hash() =>
        {
            t
        }
        _ => Table {
            device: header(b, description.clone()),
            entries: Vec::new(),
        },
    };
    table.device = DeviceRecord {
        date: today(),
        ..table.device
    };
    let keys = keys(o)?;
    let start = std::time::Instant::now();
    for (i, (key, rows, cols)) in keys.iter().enumerate() {
        progress(i, keys.len(), &key.to_string());
        if table
            .entries
            .iter()
            .any(|e| e.key().ok().as_ref() == Some(key))
        {
            continue;
        }
        if start.elapsed() > o.budget {
            progress(i, keys.len(), "budget spent: remaining keys not tuned");
            break;
        }
        match tune_key(b, o, journal, key, *rows, *cols, 7 + i as u64) {
            Ok(entry) => {
                table.entries.push(entry);
                save(&table)?;
            }
            // A key whose every candidate failed keeps the built-in default; say so.
            Err(e) => progress(i, keys.len(), &format!("[{key}] not tuned: {e}")),
        }
    }
    progress(keys.len(), keys.len(), "done");
    Ok(table)
}
