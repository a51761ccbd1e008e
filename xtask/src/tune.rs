//! `cargo xtask tune`: measure every candidate per key and write `tuning/<device>.toml`.

use std::path::PathBuf;
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
    /// Output table (default: tuning/DEVICE-ID.toml). An existing table for the same
    /// device and templates is resumed.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

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

/// Run the tuner on `b`; returns the path written.
pub fn run<B: Backend>(b: &B, a: &TuneArgs, description: String) -> Result<PathBuf> {
    let description = format!("{description}; timing: {}", b.time_source());
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
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("tuning/{}.toml", b.device_id())));
    let existing = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| Table::parse(&t).ok());
    if let Some(t) = &existing {
        eprintln!("resuming {} ({} entries)", out.display(), t.entries.len());
    }
    let bar = crate::progress_bar(0, "tune");
    let save = |t: &Table| -> Result<()> {
        let tmp = out.with_extension("toml.tmp");
        std::fs::write(&tmp, t.to_toml()).map_err(|e| Error::file(&tmp, e))?;
        std::fs::rename(&tmp, &out).map_err(|e| Error::file(&out, e))
    };
    let journal_path = out.with_extension("toml.journal");
    let journal = harness::Journal::open(&journal_path)?;
    let table = harness::tune(
        b,
        &opts,
        description,
        existing,
        Some(&journal),
        save,
        |i, n, msg| {
            bar.set_length(n as u64);
            bar.set_position(i as u64);
            if msg.contains("not tuned") || msg.contains("budget") {
                bar.println(msg);
            } else {
                bar.set_message(msg.to_string());
            }
        },
    )?;
    bar.finish_and_clear();
    let _ = std::fs::remove_file(&journal_path);
    println!("{}", summary(&table));
    println!("wrote {}", out.display());
    Ok(out)
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
            "| {k} | {} | {} {} rpg={} x={} | {:.1} | {:.1} | {:.2} | {:.0} | {} |\n",
            e.shape,
            w.repr,
            w.m_strategy,
            w.rows_per_group,
            w.x_stage,
            e.median_us,
            e.default_us,
            e.speedup,
            e.bandwidth_gbs,
            e.rejected.len()
        );
    }
    s
}

/// Environment variable marking the child process that does the tuning.
const WORKER_ENV: &str = "TRELLIS_TUNE_WORKER";

/// Run the tuner in a child process, resuming it (from the saved table and the journal,
/// which rejects the candidate in flight) whenever a candidate crashes it. Returns
/// `None` in the child itself, which then tunes.
pub fn supervise() -> Option<Result<()>> {
    if std::env::var_os(WORKER_ENV).is_some() {
        return None;
    }
    const ATTEMPTS: usize = 8;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return Some(Err(Error::backend(
                "tune",
                format!("cannot find this executable: {e}"),
            )))
        }
    };
    for attempt in 1..=ATTEMPTS {
        let status = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(WORKER_ENV, "1")
            .status();
        match status {
            Err(e) => return Some(Err(Error::backend("tune", format!("cannot start the tuner: {e}")))),
            Ok(s) if s.success() => return Some(Ok(())),
            // Status 1 is an ordinary error, already printed by the child.
            Ok(s) if s.code() == Some(1) => return Some(Err(Error::backend("tune", "the tuner failed (see above)"))),
            Ok(s) => eprintln!("tune: the tuner died ({s}) in attempt {attempt}/{ATTEMPTS}; resuming without the candidate it was running"),
        }
    }
    Some(Err(Error::backend(
        "tune",
        format!("the tuner crashed {ATTEMPTS} times; giving up"),
    )))
}
