//! `cargo xtask tune`: measure every candidate per key and write `tuning/local/<device>.toml`
//! (or `--out`).

use std::path::{Path, PathBuf};
use std::time::Duration;
use trellis::kernel::Backend;
use trellis::kernels::Tier;
use trellis::tune::harness::{self, Shape, TuneOptions};
use trellis::tune::{Family, Table};
use trellis::{Code, DType, Error, Result};

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// cpu, cuda or metal (default: the best available).
    #[arg(long)]
    pub backend: Option<String>,
    /// Families, comma-separated: reduce, gate_up.
    #[arg(long, value_delimiter = ',', default_value = "reduce,gate_up")]
    pub family: Vec<String>,
    /// Shapes: presets (qwen3-14b, llama-3-8b) or RxC; comma-separated.
    /// Default: both presets on GPUs, 1024x4096 on the CPU.
    #[arg(long, value_delimiter = ',')]
    pub shape: Vec<String>,
    /// Sample counts (default: 1,2,4 on GPUs; 1,4 on the CPU).
    #[arg(long, value_delimiter = ',')]
    pub m: Vec<u32>,
    /// Bits per weight (default: 2,3,4 on GPUs; 2,3 on the CPU).
    #[arg(long, value_delimiter = ',')]
    pub k: Vec<u32>,
    /// State bits (default: 12,16 on GPUs; 12 on the CPU).
    #[arg(long, value_delimiter = ',')]
    pub l: Vec<u32>,
    /// Codes (default: 1mad,3inst on GPUs; 1mad on the CPU).
    #[arg(long, value_delimiter = ',')]
    pub code: Vec<String>,
    /// exact or fast.
    #[arg(long, default_value = "exact")]
    pub tier: String,
    /// Activation dtype.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Stop starting new keys after this long (e.g. 90s, 10m, 1h).
    #[arg(long, default_value = "30m")]
    pub budget: String,
    /// Timed repetitions per candidate (default: 50 on GPUs, 5 on the CPU).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Output table (default: tuning/local/DEVICE-ID.toml, which git ignores and the build
    /// does not embed; the selector reads it at run time). An existing table for the same
    /// device and templates is resumed, unless --fresh.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Re-measure every key: ignore (and replace) an existing table at --out.
    #[arg(long)]
    pub fresh: bool,
}

/// How a tune run ended (the process exit status: 0, or [`BUDGET_SPENT`]).
pub struct Outcome {
    pub budget_spent: bool,
}

/// Exit status of a run whose budget ran out before every key was tuned.
pub const BUDGET_SPENT: u8 = 3;

fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || {
        Error::invalid(
            "budget",
            s,
            "expected a number with s, m or h (e.g. 90s, 10m)",
        )
    };
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = n.parse().map_err(|_| bad())?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(60 * n)),
        "h" => Ok(Duration::from_secs(3600 * n)),
        _ => Err(bad()),
    }
}

fn parse_shapes(items: &[String]) -> Result<Vec<Shape>> {
    let mut out = Vec::new();
    for s in items {
        if let Some(p) = harness::preset(s) {
            out.extend(p);
            continue;
        }
        let bad = || Error::invalid("shape", s, "expected qwen3-14b, llama-3-8b or RxC");
        let (r, c) = s.split_once('x').ok_or_else(bad)?;
        out.push(Shape {
            rows: r.parse().map_err(|_| bad())?,
            cols: c.parse().map_err(|_| bad())?,
            gate_up: true,
        });
    }
    Ok(out)
}

/// Run the tuner on `b`.
pub fn run<B: Backend>(b: &B, a: &TuneArgs, description: String) -> Result<Outcome> {
    let gpu = b.name() != "cpu";
    let pick = |given: &Vec<u32>, gpu_default: &[u32], cpu_default: &[u32]| -> Vec<u32> {
        if !given.is_empty() {
            given.clone()
        } else if gpu {
            gpu_default.to_vec()
        } else {
            cpu_default.to_vec()
        }
    };
    let shapes = if a.shape.is_empty() {
        if gpu {
            parse_shapes(&["qwen3-14b".into(), "llama-3-8b".into()])?
        } else {
            parse_shapes(&["1024x4096".into()])?
        }
    } else {
        parse_shapes(&a.shape)?
    };
    let codes: Vec<Code> = if a.code.is_empty() {
        if gpu {
            vec![Code::OneMad, Code::ThreeInst]
        } else {
            vec![Code::OneMad]
        }
    } else {
        a.code.iter().map(|c| c.parse()).collect::<Result<_>>()?
    };
    let opts = TuneOptions {
        families: a
            .family
            .iter()
            .map(|f| f.parse::<Family>())
            .collect::<Result<_>>()?,
        shapes,
        ms: pick(&a.m, &[1, 2, 4], &[1, 4]),
        ks: pick(&a.k, &[2, 3, 4], &[2, 3]),
        ls: pick(&a.l, &[12, 16], &[12]),
        codes,
        tier: a.tier.parse::<Tier>()?,
        dtype: a.dtype.parse::<DType>()?,
        t: 256,
        quick: !gpu,
        budget: parse_duration(&a.budget)?,
        working_set: if gpu { 256 << 20 } else { 64 << 20 },
        reps: a.reps.unwrap_or(if gpu { 50 } else { 5 }),
        candidate_timeout: Duration::from_secs(if gpu { 20 } else { 120 }),
    };
    let out = match &a.out {
        Some(p) => p.clone(),
        None => {
            let dir = trellis::tune::local_tables_dir();
            std::fs::create_dir_all(&dir).map_err(|e| Error::file(&dir, e))?;
            dir.join(format!("{}.toml", b.device_id()))
        }
    };
    let journal_path = journal_path(&out)?;
    // A supervised restart after a crash resumes even with --fresh: the first attempt
    // already started afresh.
    let restarted = std::env::var_os(RESTART_ENV).is_some();
    let existing = if a.fresh && !restarted {
        let _ = std::fs::remove_file(&journal_path);
        None
    } else {
        std::fs::read_to_string(&out)
            .ok()
            .and_then(|t| Table::parse(&t).ok())
    };
    match &existing {
        Some(t) => eprintln!(
            "tune: resuming {} ({} keys already measured; --fresh re-measures them)",
            out.display(),
            t.entries.len()
        ),
        None if a.fresh => eprintln!("tune: measuring every key afresh into {}", out.display()),
        None => eprintln!("tune: writing {}", out.display()),
    }
    let keys = harness::keys(&opts)?;
    let progress = Progress::new(keys.len());
    let save = |t: &Table| -> Result<()> {
        let tmp = out.with_extension("toml.tmp");
        std::fs::write(&tmp, t.to_toml()).map_err(|e| Error::file(&tmp, e))?;
        std::fs::rename(&tmp, &out).map_err(|e| Error::file(&out, e))
    };
    let journal = harness::Journal::open(&journal_path)?;
    let budget_spent = std::cell::Cell::new(false);
    let table = harness::tune(
        b,
        &opts,
        description,
        existing,
        Some(&journal),
        save,
        |i, n, msg| {
            if msg.starts_with("budget spent") {
                budget_spent.set(true);
            }
            progress.report(i, n, msg)
        },
    )?;
    progress.finish();
    let _ = std::fs::remove_file(&journal_path);
    println!("{}", summary(&table));
    println!("wrote {}", out.display());
    let untuned = keys
        .iter()
        .filter(|(k, ..)| {
            !table
                .entries
                .iter()
                .any(|e| e.key().ok().as_ref() == Some(k))
        })
        .count();
    let outcome = Outcome {
        budget_spent: budget_spent.get(),
    };
    if outcome.budget_spent {
        eprintln!(
            "tune: budget of {} spent: {untuned} of {} keys not tuned (they keep the built-in \
             default; raise --budget, or run again to resume)",
            a.budget,
            keys.len()
        );
    } else if untuned > 0 {
        eprintln!(
            "tune: {untuned} of {} keys not tuned: every candidate was rejected (see the \
             warnings above); they keep the built-in default",
            keys.len()
        );
    }
    Ok(outcome)
}

/// Progress of a tune run on stderr. On a terminal: a bar with the key in flight, its
/// elapsed time ticking while a key runs, and an ETA. Elsewhere (CI, a pipe, a log): one
/// line per key. Warnings (a key not tuned, the budget) are printed either way.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: std::time::Instant,
}

impl Progress {
    fn new(keys: usize) -> Self {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = crate::progress_bar(keys as u64, "tune");
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        Progress {
            bar,
            started: std::time::Instant::now(),
        }
    }

    fn report(&self, i: usize, n: usize, msg: &str) {
        let warning = msg.contains("not tuned") || msg.starts_with("budget");
        match &self.bar {
            Some(bar) => {
                bar.set_length(n as u64);
                bar.set_position(i as u64);
                if warning {
                    bar.suspend(|| eprintln!("warning: {msg}"));
                } else if msg != "done" {
                    bar.set_message(msg.to_string());
                }
            }
            None if warning => eprintln!("warning: {msg}"),
            None if msg == "done" => {}
            None => eprintln!(
                "tune [{}/{n}] {:>6.1}s {msg}",
                i + 1,
                self.started.elapsed().as_secs_f64()
            ),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Environment variable the supervisor sets on a worker it restarts after a crash.
const RESTART_ENV: &str = "TRELLIS_TUNE_RESTART";

/// Where the crash journal of a run writing `out` lives: under the target directory
/// (`$CARGO_TARGET_DIR`, else the workspace's `target/`), never beside the table, so a
/// run leaves nothing in `tuning/` and touches nothing the build watches.
pub fn journal_path(out: &Path) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("tune-journal");
    std::fs::create_dir_all(&dir).map_err(|e| Error::file(&dir, e))?;
    // One journal per output table: named by the table's absolute path.
    let abs = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    let hash = trellis::kernel::fnv1a(abs.to_string_lossy().as_bytes());
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(dir.join(format!("{stem}-{hash:016x}.journal")))
}

/// The end-of-run table.
pub fn summary(t: &Table) -> String {
    let mut s = format!(
        "tuned {} keys on {} ({})\n",
        t.entries.len(),
        t.device.id,
        t.device.backend
    );
    s += "| key | shape | winner | median us | default us | speedup | GB/s | rejected |\n|---|---|---|---:|---:|---:|---:|---:|\n";
    for e in &t.entries {
        let k = e.key().map(|k| k.to_string()).unwrap_or_default();
        let w = &e.winner;
        s += &format!(
            "| {k} | {} | {} {} rpg={} x={} | {:.1} | {:.1} | {:.2} | {} | {} |\n",
            e.shape,
            w.repr,
            w.m_strategy,
            w.rows_per_group,
            w.x_stage,
            e.median_us,
            e.default_us,
            e.speedup,
            gbs(e.bandwidth_gbs),
            e.rejected.len()
        );
    }
    s
}

/// GB/s with three significant digits (a CPU moves 0.05-0.3 GB/s through these kernels,
/// a GPU thousands).
pub fn gbs(v: f64) -> String {
    match v.abs() {
        v if v >= 100.0 || v == 0.0 || !v.is_finite() => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// Environment variable marking the child process that does the tuning.
const WORKER_ENV: &str = "TRELLIS_TUNE_WORKER";

/// Run the tuner in a child process, resuming it (from the saved table and the journal,
/// which rejects the candidate in flight) whenever a candidate crashes it. Returns
/// `None` in the child itself, which then tunes; else the exit status to end with. The
/// child has printed its own errors (once), so the supervisor adds nothing to them.
pub fn supervise() -> Option<std::process::ExitCode> {
    use std::process::ExitCode;
    if std::env::var_os(WORKER_ENV).is_some() {
        return None;
    }
    const ATTEMPTS: usize = 8;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: tune: cannot find this executable: {e}");
            return Some(ExitCode::FAILURE);
        }
    };
    for attempt in 1..=ATTEMPTS {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(std::env::args_os().skip(1)).env(WORKER_ENV, "1");
        if attempt > 1 {
            cmd.env(RESTART_ENV, "1");
        }
        match cmd.status() {
            Err(e) => {
                eprintln!("error: tune: cannot start the tuner: {e}");
                return Some(ExitCode::FAILURE);
            }
            Ok(s) if s.success() => return Some(ExitCode::SUCCESS),
            // 1: an ordinary error; BUDGET_SPENT: the budget ran out. Both already said.
            Ok(s) if s.code() == Some(1) => return Some(ExitCode::FAILURE),
            Ok(s) if s.code() == Some(BUDGET_SPENT as i32) => {
                return Some(ExitCode::from(BUDGET_SPENT))
            }
            Ok(s) => eprintln!(
                "tune: the tuner died ({s}) in attempt {attempt}/{ATTEMPTS}; resuming without \
                 the candidate it was running"
            ),
        }
    }
    eprintln!("error: tune: the tuner crashed {ATTEMPTS} times; giving up");
    Some(ExitCode::FAILURE)
}
