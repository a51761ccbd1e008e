//! `cargo xtask tune`: measure every candidate of every registered family's problems
//! and write `tuning/local/<device>.toml` (git ignores it; move a table to `tuning/` to
//! ship it). A supervisor process runs the tuner as a child,
//! kills it when one candidate runs past its time limit, and resumes it without the
//! candidate that crashed or hung (the journal names it).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trellis::family::{preset, Family, FamilyVisitor, Shape, TuneSpace};
use trellis::kernel::Backend;
use trellis::numerics::Tier;
use trellis::tune::harness::{self, Event, Journal, TuneOptions};
use trellis::tune::Table;
use trellis::{Code, DType, Error, Result};

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// cpu, cuda, metal or metal-sim (the Metal kernels run on the CPU; default: the
    /// best available).
    #[arg(long)]
    pub backend: Option<String>,
    /// Families, comma-separated (default: every registered family with variants of the
    /// tier and problems in the space: reduce and gate_up exact, reduce_mma and
    /// gate_up_mma fast).
    #[arg(long, value_delimiter = ',')]
    pub family: Vec<String>,
    /// Shapes: presets (qwen3-14b, llama-3-8b) or RxC; comma-separated.
    /// Default: both presets on GPUs, 1024x4096 on the CPU and the Metal simulator.
    #[arg(long, value_delimiter = ',')]
    pub shape: Vec<String>,
    /// Sample counts (default: 1,2,4,8 on GPUs; 1,4 on the CPU and the Metal simulator).
    #[arg(long, value_delimiter = ',')]
    pub m: Vec<u32>,
    /// Bits per weight (default: 2,3,4 on GPUs; 2,3 on the CPU and the Metal simulator).
    /// The gate/up families also tune each mixed pair (k, k + 1) of them.
    #[arg(long, value_delimiter = ',')]
    pub k: Vec<u32>,
    /// State bits (default: 12,16 on GPUs; 12 on the CPU and the Metal simulator).
    #[arg(long, value_delimiter = ',')]
    pub l: Vec<u32>,
    /// Codes (default: 1mad,3inst on GPUs; 1mad on the CPU and the Metal simulator).
    #[arg(long, value_delimiter = ',')]
    pub code: Vec<String>,
    /// exact or fast.
    #[arg(long, default_value = "exact")]
    pub tier: String,
    /// Activation dtype.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Stop starting new problems after this long (e.g. 90s, 10m, 1h).
    #[arg(long, default_value = "30m")]
    pub budget: String,
    /// Fewest timed repetitions per candidate (more until the median is stable).
    #[arg(long)]
    pub reps: Option<usize>,
    /// A candidate whose verify launch runs this long is killed and rejected as timed
    /// out, as is one whose timing runs this long past what its rounds take at that
    /// launch's pace (e.g. 20s).
    #[arg(long)]
    pub candidate_timeout: Option<String>,
    /// Re-measure problems the table already has.
    #[arg(long)]
    pub fresh: bool,
    /// Stop timing a candidate after its first round when its median is over this many
    /// times the best so far (it cannot win); a large value times every one in full.
    #[arg(long, default_value_t = 1.3)]
    pub prune: f64,
    /// Append every candidate's outcome and time to this file, one tab-separated line each
    /// (the table keeps only the winner's, the runner-up's and the default's).
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Measure nothing: bring the --out table's entries for the problems of the space
    /// given up to today's hashes where what they measured is provably unchanged: the
    /// candidate-space hash where an entry lacks one and its sources are current, the
    /// per-code source hash where it records its family's whole one (older tables), and
    /// today's source hash where its candidate-space hash is current. Needs no device.
    #[arg(long, requires = "out", conflicts_with = "fresh")]
    pub stamp: bool,
    /// Measure nothing: print the end-of-run summary of the --out table (every entry's
    /// winner, times and runner-up: what a tune report's table is), as a tune run ends.
    #[arg(long, requires = "out", conflicts_with_all = ["fresh", "stamp"])]
    pub summary: bool,
    /// Measure nothing: print what a run over the space given would measure, resuming the
    /// --out table (per family: its problems, those with a current entry, and the
    /// candidates of the rest, each a unit to compile and time), to plan device time.
    /// With --fresh, every problem's; where --out does not exist yet, a first run's on
    /// --backend (needs no device).
    #[arg(long, requires = "out", conflicts_with_all = ["stamp", "summary"])]
    pub plan: bool,
    /// Output table (default: tuning/local/DEVICE-ID.toml, which git ignores and the build
    /// does not embed). An existing table for the same device is resumed: problems it has
    /// with current sources and the same candidates are kept (unless --fresh).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn parse_duration(field: &str, s: &str) -> Result<Duration> {
    let bad = || Error::invalid(field, s, "expected a number with s, m or h (e.g. 90s, 10m)");
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    // Digits past u64 are a number past the limit, not a malformed one.
    let n: u64 = match n.parse() {
        Ok(n) => n,
        Err(_) if !n.is_empty() => u64::MAX,
        Err(_) => return Err(bad()),
    };
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => return Err(bad()),
    };
    match secs {
        Some(secs) if secs <= MAX_DURATION_S => Ok(Duration::from_secs(secs)),
        _ => Err(Error::invalid(field, s, "must be at most 8760h (a year)")),
    }
}

/// The longest `--budget` or `--candidate-timeout`: a year, far past any run, and far
/// from the clock arithmetic's limits.
const MAX_DURATION_S: u64 = 8760 * 3600;

/// `RxC` as (rows, cols).
pub(crate) fn rxc(s: &str) -> Option<(usize, usize)> {
    let (r, c) = s.split_once('x')?;
    Some((r.parse().ok()?, c.parse().ok()?))
}

fn parse_shapes(items: &[String]) -> Result<Vec<Shape>> {
    let mut out = Vec::new();
    for s in items {
        if let Some(p) = preset(s) {
            out.extend(p);
            continue;
        }
        let (rows, cols) = rxc(s)
            .ok_or_else(|| Error::invalid("shape", s, "expected qwen3-14b, llama-3-8b or RxC"))?;
        out.push(Shape {
            rows,
            cols,
            gate_up: true,
        });
    }
    Ok(out)
}

fn space(a: &TuneArgs, gpu: bool) -> Result<TuneSpace> {
    let pick = |given: &Vec<u32>, gpu_default: &[u32], cpu_default: &[u32]| -> Vec<u32> {
        if !given.is_empty() {
            given.clone()
        } else if gpu {
            gpu_default.to_vec()
        } else {
            cpu_default.to_vec()
        }
    };
    let shapes = match (a.shape.is_empty(), gpu) {
        (true, true) => parse_shapes(&["qwen3-14b".into(), "llama-3-8b".into()])?,
        (true, false) => parse_shapes(&["1024x4096".into()])?,
        (false, _) => parse_shapes(&a.shape)?,
    };
    let codes: Vec<Code> = match (a.code.is_empty(), gpu) {
        (true, true) => vec![Code::OneMad, Code::ThreeInst],
        (true, false) => vec![Code::OneMad],
        (false, _) => a.code.iter().map(|c| c.parse()).collect::<Result<_>>()?,
    };
    // The tier's families take M up to its launch limit (exact 8, fast 16): an M past it
    // would be skipped by every family of the tier, without a word.
    let tier = a.tier.parse::<Tier>()?;
    let max_m = trellis::ops::max_samples(tier);
    if let Some(&m) = a.m.iter().find(|&&m| !(1..=max_m).contains(&m)) {
        return Err(Error::invalid(
            "m",
            m,
            format!("the {tier} tier's families take 1..={max_m}"),
        ));
    }
    Ok(TuneSpace {
        shapes,
        ms: pick(&a.m, &[1, 2, 4, 8], &[1, 4]),
        ks: pick(&a.k, &[2, 3, 4], &[2, 3]),
        ls: pick(&a.l, &[12, 16], &[12]),
        codes,
        dtype: a.dtype.parse::<DType>()?,
        t: trellis::tune::TUNED_T,
    })
}

/// The most timed repetitions `--reps` may ask for per candidate.
const MAX_REPS: usize = 10_000;

fn options(a: &TuneArgs, backend: &str) -> Result<TuneOptions> {
    let mut o = TuneOptions::for_backend(backend, a.tier.parse::<Tier>()?);
    o.budget = parse_duration("budget", &a.budget)?;
    // A worker the supervisor restarted gets what the run's earlier workers left.
    if let Some(since) = std::env::var(RUN_STARTED_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let spent = epoch_ms().saturating_sub(since);
        o.budget = o.budget.saturating_sub(Duration::from_millis(spent));
    }
    if let Some(r) = a.reps {
        // Every repetition is timed and kept: a few thousand is already hours of device.
        if !(1..=MAX_REPS).contains(&r) {
            return Err(Error::invalid(
                "reps",
                r,
                format!("expected 1..={MAX_REPS}"),
            ));
        }
        o.min_reps = r;
        o.max_reps = o.max_reps.max(o.min_reps);
    }
    if let Some(t) = &a.candidate_timeout {
        o.candidate_timeout = parse_duration("candidate-timeout", t)?;
        if o.candidate_timeout.is_zero() {
            return Err(Error::invalid(
                "candidate-timeout",
                t,
                "must be more than 0 (every candidate would be killed)",
            ));
        }
    }
    o.fresh = a.fresh;
    if a.prune.is_nan() || a.prune < 1.0 {
        return Err(Error::invalid(
            "prune",
            a.prune,
            "expected a ratio of at least 1 (a candidate slower than the best by that much stops)",
        ));
    }
    o.prune = a.prune;
    o.trace = a.trace.clone();
    Ok(o)
}

/// `--family` names only registered families.
fn check_families(a: &TuneArgs) -> Result<()> {
    match a
        .family
        .iter()
        .find(|f| !trellis::families::names().contains(&f.as_str()))
    {
        Some(f) => Err(Error::invalid(
            "family",
            f,
            format!("expected one of {}", trellis::families::names().join(", ")),
        )),
        None => Ok(()),
    }
}

/// Whether `--family` (empty: all) names family `F`.
fn wanted<F: Family>(a: &TuneArgs) -> bool {
    a.family.is_empty() || a.family.iter().any(|f| trellis::families::is::<F>(f))
}

/// Whether `F` is tuned at `o`'s tier over `problems`. A family without variants in this
/// tier (the matrix-unit families are the fast tier's, `expand` is exact) has nothing to
/// tune there: an error when named, skipped otherwise. A family whose fast tier runs on a
/// twin (`Family::FAST`: the SIMT `reduce` on `reduce_mma`) is tuned there, not here,
/// unless named: the facade and the CLI never select its own fast variants.
fn tuned_at_tier<F: Family>(
    a: &TuneArgs,
    o: &TuneOptions,
    problems: &[F::Problem],
) -> Result<bool> {
    if o.tier == Tier::Fast && F::FAST.is_some() && a.family.is_empty() {
        return Ok(false);
    }
    match problems.first() {
        Some(p) if F::candidates(p, o.tier, o.quick).is_empty() => {
            if a.family.is_empty() {
                Ok(false)
            } else {
                Err(Error::invalid(
                    "family",
                    F::NAME,
                    format!("has no {} variants (see --tier)", o.tier),
                ))
            }
        }
        Some(_) => Ok(true),
        None if a.family.is_empty() => Ok(false),
        None if untuned::<F>() => Err(Error::invalid(
            "family",
            F::NAME,
            "is not tuned (it offers no tuning problems in any space; its kernels run their \
             built-in variant)",
        )),
        None => Err(Error::invalid(
            "family",
            F::NAME,
            "has no problems in this space (see --shape, --m, --k, --l, --code)",
        )),
    }
}

/// Whether `F` offers no tuning problems at all (`Family::problems`' default, `expand`):
/// none even in a space with a gate/up shape, every k and both tiers' M.
fn untuned<F: Family>() -> bool {
    let probe = trellis::family::TuneSpace {
        shapes: trellis::family::preset("qwen3-14b").unwrap_or_default(),
        ms: vec![1, 16],
        ks: (1..=8).collect(),
        ls: vec![12, 16],
        codes: vec![trellis::Code::OneMad],
        dtype: trellis::DType::Bf16,
        t: trellis::tune::TUNED_T,
    };
    F::problems(&probe).map_or(true, |p| p.is_empty())
}

/// `tune --summary`: the --out table's end-of-run summary, without a device.
pub fn print_summary(a: &TuneArgs) -> Result<()> {
    let (_, table) = read_out(a)?;
    println!("{}", summary(&table));
    Ok(())
}

/// The --out table of a mode that measures nothing (clap requires --out there).
fn read_out(a: &TuneArgs) -> Result<(&Path, Table)> {
    let out = a.out.as_deref().expect("clap requires --out here");
    let text = read_table_text(out)?.ok_or_else(|| Error::file(out, "no such file"))?;
    Ok((out, parse_out(out, &text)?))
}

/// The text of the --out table `out`, parsed; an error names the file.
fn parse_out(out: &Path, text: &str) -> Result<Table> {
    parse_table(text).map_err(|e| Error::file(out, e))
}

/// The --out table for `--plan` and whether it exists; where there is none yet, an empty
/// table of `--backend`'s kind (a first run's plan: every problem to measure), and an
/// error naming the file and the flag where no backend is given (the dialect decides the
/// candidates).
fn read_out_or_fresh(a: &TuneArgs) -> Result<(&Path, Table, bool)> {
    let out = a.out.as_deref().expect("clap requires --out here");
    if let Some(text) = read_table_text(out)? {
        return Ok((out, parse_out(out, &text)?, true));
    }
    let backend = a.backend.as_deref().ok_or_else(|| {
        Error::file(
            out,
            "no such file: give --backend to plan a first run on that backend",
        )
    })?;
    let dialect = trellis::backend::dialect_of(backend).ok_or_else(|| {
        Error::invalid(
            "--backend",
            backend,
            "expected cpu, cuda, metal or metal-sim",
        )
    })?;
    let device = trellis::tune::DeviceRecord {
        id: String::new(),
        backend: backend.into(),
        dialect: dialect.name().into(),
        description: String::new(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        timer: String::new(),
        date: harness::today(),
    };
    let entries = Vec::new();
    Ok((out, Table { device, entries }, false))
}

/// The text of the table at `out` (`None`: there is none), read only if it is a regular
/// file of a table's size: a pipe would block, a device never end.
fn read_table_text(out: &Path) -> Result<Option<String>> {
    match std::fs::metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => trellis::io::read_text(out, trellis::tune::MAX_TABLE_BYTES).map(Some),
    }
}

/// A table to resume: parsed, and whole as the selector asks (`tune::check_table_frame`:
/// its backend's dialect, families of this crate). An entry the selector would refuse
/// (a winner or runner-up it cannot read, of another tier) is no current entry: it is
/// measured again where the run's space has it, and a warning says so.
fn parse_table(text: &str) -> Result<Table> {
    let t = Table::parse(text)?;
    trellis::tune::check_table_frame(&t)?;
    Ok(t)
}

/// The dialect, space and options of a run over the space given on `table`'s device.
fn space_on(
    a: &TuneArgs,
    table: &Table,
) -> Result<(trellis::kernel::Dialect, TuneSpace, TuneOptions)> {
    let backend = &table.device.backend;
    Ok((
        table.device.dialect()?,
        space(a, trellis::backend::runs_on_gpu(backend))?,
        options(a, backend)?,
    ))
}

/// `tune --plan`: what a run over the space would measure, without a device.
pub fn print_plan(a: &TuneArgs) -> Result<()> {
    check_families(a)?;
    let (out, table, resumed) = read_out_or_fresh(a)?;
    let (dialect, space, opts) = space_on(a, &table)?;
    // The most the table's kind of device gives: a candidate past it never runs there.
    let limits = trellis::backend::nominal_limits(&table.device.backend);
    let mut job = PlanJob {
        a,
        space: &space,
        opts: &opts,
        dialect,
        limits,
        table: &table,
        rows: Vec::new(),
        result: Ok(()),
    };
    trellis::families::for_each(&mut job);
    let rows = job.rows;
    job.result?;
    if resumed {
        println!(
            "What `tune` would measure of this space, resuming {} ({} on {}):\n",
            out.display(),
            table.device.backend,
            table.device.id
        );
    } else {
        println!(
            "What a first `tune` on {} would measure of this space, into {} (not there yet):\n",
            table.device.backend,
            out.display()
        );
    }
    println!("| family | problems | current | to measure | candidates to time |\n|---|---:|---:|---:|---:|");
    let mut total = harness::Plan::default();
    for (name, p) in &rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            p.problems,
            p.current,
            p.problems - p.current,
            p.candidates
        );
        total.problems += p.problems;
        total.current += p.current;
        total.candidates += p.candidates;
    }
    println!(
        "\n{} of {} problems to measure, {} candidates to compile, verify and time.",
        total.problems - total.current,
        total.problems,
        total.candidates
    );
    Ok(())
}

struct PlanJob<'a> {
    a: &'a TuneArgs,
    space: &'a TuneSpace,
    opts: &'a TuneOptions,
    dialect: trellis::kernel::Dialect,
    limits: trellis::kernel::Limits,
    table: &'a Table,
    rows: Vec<(&'static str, harness::Plan)>,
    result: Result<()>,
}

impl FamilyVisitor for PlanJob<'_> {
    fn visit<F: Family>(&mut self) {
        if !wanted::<F>(self.a) || self.result.is_err() {
            return;
        }
        let problems = F::problems(self.space);
        match problems.and_then(|ps| Ok((tuned_at_tier::<F>(self.a, self.opts, &ps)?, ps))) {
            Ok((true, problems)) => self.rows.push((
                F::NAME,
                harness::plan::<F>(self.opts, self.dialect, &self.limits, &problems, self.table),
            )),
            Ok((false, _)) => {}
            Err(e) => self.result = Err(e),
        }
    }
}

/// `tune --stamp`: bring the --out table's hashes up to date without a device
/// ([`harness::stamp`]'s rules).
pub fn stamp(a: &TuneArgs) -> Result<()> {
    check_families(a)?;
    // Held from the read to the write: a tuning run on this table saves it after every
    // key, and the two would write over each other.
    let _held = trellis::tune::TableLock::take(a.out.as_deref().expect("clap requires --out"))?;
    let (out, mut table) = read_out(a)?;
    let (dialect, space, opts) = space_on(a, &table)?;
    let mut job = StampJob {
        a,
        space: &space,
        opts: &opts,
        dialect,
        table: &mut table,
        stamped: 0,
        result: Ok(()),
    };
    trellis::families::for_each(&mut job);
    let stamped = job.stamped;
    job.result?;
    if stamped > 0 {
        trellis::io::write_atomic(out, table.to_toml().as_bytes())?;
    }
    let missing = table
        .entries
        .iter()
        .filter(|e| e.space_hash.is_none())
        .count();
    eprintln!(
        "stamped {stamped} entries of {}; {missing} still without a space hash",
        out.display()
    );
    Ok(())
}

struct StampJob<'a> {
    a: &'a TuneArgs,
    space: &'a TuneSpace,
    opts: &'a TuneOptions,
    dialect: trellis::kernel::Dialect,
    table: &'a mut Table,
    stamped: usize,
    result: Result<()>,
}

impl FamilyVisitor for StampJob<'_> {
    fn visit<F: Family>(&mut self) {
        if !wanted::<F>(self.a) || self.result.is_err() {
            return;
        }
        match F::problems(self.space) {
            Ok(problems) => {
                self.stamped += harness::stamp::<F>(self.opts, self.dialect, &problems, self.table)
            }
            Err(e) => self.result = Err(e),
        }
    }
}

/// `tune` on whichever backend was opened.
pub struct Job<'a> {
    pub args: &'a TuneArgs,
    pub description: String,
}

impl trellis::backend::BackendVisitor for Job<'_> {
    type Out = Result<Outcome>;
    fn visit<B: Backend>(self, b: &B) -> Result<Outcome> {
        run(b, self.args, self.description)
    }
}

/// How a tune run ended (the process exit status: 0, or [`BUDGET_SPENT`]).
pub struct Outcome {
    pub budget_spent: bool,
}

/// Exit status of a run whose budget ran out before every problem was tuned.
pub const BUDGET_SPENT: u8 = 3;

/// Tune every requested family on `b`.
pub fn run<B: Backend>(b: &B, a: &TuneArgs, description: String) -> Result<Outcome> {
    let space = space(a, trellis::backend::runs_on_gpu(b.name()))?;
    let opts = options(a, b.name())?;
    check_families(a)?;
    // By default the table goes to `tuning/local/`, which git ignores and the build does
    // not embed: move it to `tuning/` and commit it to ship it.
    let out = match &a.out {
        Some(o) => o.clone(),
        None => {
            let dir = trellis::tune::local_tables_dir();
            std::fs::create_dir_all(&dir).map_err(|e| Error::file(&dir, e))?;
            dir.join(format!("{}.toml", b.device_id()))
        }
    };
    // Before anything is measured (and before the lock beside it is made), as
    // `io::write_atomic` will ask it when it writes.
    trellis::io::check_output(&out).map_err(|e| match e {
        Error::File { path, reason } => Error::file(path, format!("--out: {reason}")),
        e => e,
    })?;
    // Held until this run ends, from before the table is read: another run saving the
    // same table after each of its keys would drop this one's entries (and this one its).
    let _held = trellis::tune::TableLock::take(&out)?;
    // An existing --out is resumed, never silently replaced: a table that does not parse
    // or that the selector would ignore (unless --fresh) or that belongs to another device
    // is an error naming it. Where it is to be written is checked before anything is
    // measured.
    let existing = match read_table_text(&out)? {
        Some(text) => match parse_table(&text) {
            Ok(t) => Some(t),
            Err(e) if a.fresh => {
                eprintln!("warning: {}: {e}; --fresh replaces it", out.display());
                None
            }
            Err(e) => {
                return Err(Error::file(
                    &out,
                    format!("{e}; cannot resume it (move it away, or pass --fresh to replace it)"),
                ))
            }
        },
        None => None,
    };
    if let Some(Err(e)) = existing.as_ref().map(trellis::tune::check_table) {
        eprintln!(
            "warning: {}: {}: the selector ignores this table until such entries are \
             measured again (this run does, where its space has them)",
            out.display(),
            trellis::error::one_line(&e.to_string())
        );
    }
    if let Some(trace) = &a.trace {
        check_trace(trace)?;
    }
    let mut table = match existing {
        Some(t) if t.device.id != b.device_id() || t.device.backend != b.name() => {
            return Err(Error::file(
                &out,
                format!(
                    "holds the table of {} on {}, and this run measures {} on {}: give another --out",
                    t.device.id,
                    t.device.backend,
                    b.device_id(),
                    b.name()
                ),
            ))
        }
        Some(t) => t,
        None => Table {
            device: harness::header(b, description.clone()),
            entries: Vec::new(),
        },
    };
    if a.fresh {
        eprintln!(
            "measuring afresh (--fresh): entries of {} are replaced",
            out.display()
        );
    } else if !table.entries.is_empty() {
        eprintln!(
            "resuming {} ({} entries)",
            out.display(),
            table.entries.len()
        );
    }
    table.device = harness::header(b, description);
    let journal = match std::env::var_os(JOURNAL_ENV) {
        Some(p) => Some(Journal::open(Path::new(&p))?),
        None => None,
    };
    let mut job = FamilyJob {
        b,
        a,
        space: &space,
        opts: &opts,
        out: &out,
        table: &mut table,
        journal: journal.as_ref(),
        progress: Progress::new(),
        result: Ok(()),
        total: 0,
        left: harness::Untuned::default(),
        saved: false,
    };
    trellis::families::for_each(&mut job);
    job.progress.finish();
    let result = std::mem::replace(&mut job.result, Ok(()));
    let (
        total,
        harness::Untuned {
            budget: untuned,
            failed,
        },
        saved,
    ) = (job.total, job.left, job.saved);
    println!("{}", summary(&table));
    if saved {
        println!("wrote {}", out.display());
    } else {
        println!("nothing measured: {} not written", out.display());
    }
    result?;
    if failed > 0 {
        return Err(Error::invalid(
            "tune",
            format!("{failed} of {total} keys"),
            "failed to tune (the warnings above say why); they keep what the table held for \
             them (an entry from an earlier run, or none: the built-in default)",
        ));
    }
    if untuned > 0 {
        eprintln!(
            "warning: budget of {} spent: {untuned} of {total} keys not tuned (run again{} to resume)",
            a.budget,
            if a.fresh { " without --fresh" } else { "" }
        );
    }
    Ok(Outcome {
        budget_spent: untuned > 0,
    })
}

struct FamilyJob<'a, B: Backend> {
    b: &'a B,
    a: &'a TuneArgs,
    space: &'a TuneSpace,
    opts: &'a TuneOptions,
    out: &'a Path,
    table: &'a mut Table,
    journal: Option<&'a Journal>,
    progress: Progress,
    result: Result<()>,
    total: usize,
    left: harness::Untuned,
    /// Whether the table was written.
    saved: bool,
}

/// `--trace` is a regular file or a new one in an existing directory, appended to: checked
/// before anything is measured (a pipe would block the run, a directory fail every key).
fn check_trace(trace: &Path) -> Result<()> {
    if let Ok(m) = std::fs::metadata(trace) {
        if !m.is_file() {
            return Err(Error::file(trace, "--trace: not a regular file"));
        }
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(trace)
        .map(drop)
        .map_err(|e| Error::file(trace, format!("--trace: cannot append to it: {e}")))
}

impl<B: Backend> FamilyVisitor for FamilyJob<'_, B> {
    fn visit<F: Family>(&mut self) {
        if !wanted::<F>(self.a) || self.result.is_err() {
            return;
        }
        let problems = match F::problems(self.space) {
            Ok(p) => p,
            Err(e) => {
                self.result = Err(e);
                return;
            }
        };
        match tuned_at_tier::<F>(self.a, self.opts, &problems) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                self.result = Err(e);
                return;
            }
        }
        let out = self.out;
        let saved = &mut self.saved;
        let mut save = |t: &Table| -> Result<()> {
            trellis::io::write_atomic(out, t.to_toml().as_bytes())?;
            *saved = true;
            Ok(())
        };
        // The budget is the whole run's: each family gets what the ones before it left.
        let opts = TuneOptions {
            budget: self
                .opts
                .budget
                .saturating_sub(self.progress.started.elapsed()),
            ..self.opts.clone()
        };
        let progress = &mut self.progress;
        self.total += problems.len();
        match harness::tune::<F, B>(
            self.b,
            &opts,
            &problems,
            self.table,
            self.journal,
            &mut save,
            &mut |e| progress.event(F::NAME, e),
        ) {
            Ok(left) => {
                self.left.budget += left.budget;
                self.left.failed += left.failed;
            }
            Err(e) => self.result = Err(e),
        }
    }
}

/// Progress on a terminal (a bar with ETA) or in a log (one line per problem).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
}

impl Progress {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = crate::progress_bar(0, "tune");
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        Progress {
            bar,
            started: Instant::now(),
        }
    }
    fn event(&mut self, family: &str, e: Event<'_>) {
        match (e, &self.bar) {
            (Event::Start { i, n, key, cached }, Some(bar)) => {
                bar.set_length(n as u64);
                bar.set_position(i as u64);
                bar.set_message(format!(
                    "{family}: {key}{}",
                    if cached { " (in table)" } else { "" }
                ));
            }
            (Event::Start { i, n, key, cached }, None) => eprintln!(
                "tune {family} {}/{n} [{key}]{} ({:.0} s)",
                i + 1,
                if cached { " already in the table" } else { "" },
                self.started.elapsed().as_secs_f64()
            ),
            (
                Event::Done {
                    i,
                    n,
                    entry,
                    phases,
                },
                bar,
            ) => {
                let line = format!(
                    "tune {family} {}/{n}: {} {} -> {} us (default {} us; {phases})",
                    i + 1,
                    entry.key,
                    toml_line(&entry.winner),
                    entry.stats.median_us,
                    entry
                        .default
                        .map_or("n/a".into(), |d| d.median_us.to_string())
                );
                match bar {
                    Some(bar) => bar.set_position(i as u64 + 1),
                    None => eprintln!("{line}"),
                }
            }
            (Event::Warn(w), Some(bar)) => bar.suspend(|| eprintln!("warning: {w}")),
            (Event::Warn(w), None) => eprintln!("warning: {w}"),
        }
    }
    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn toml_line(t: &toml::Table) -> String {
    t.iter()
        .map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"')))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The end-of-run table: winner, its median and spread, the default and the runner-up.
pub fn summary(t: &Table) -> String {
    let mut s = format!(
        "{} tuned entries (key and measured shape) on {} ({}, {})\n",
        t.entries.len(),
        t.device.id,
        t.device.backend,
        t.device.timer
    );
    s += "| key | shape | winner | median us | p10-p90 us | default us | speedup | runner-up us | GB/s | at bound | rejected |\n|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n";
    for e in &t.entries {
        let k = e.key().map(|k| k.to_string()).unwrap_or_default();
        s += &format!(
            "| {k} | {} | {} | {:.2} | {:.2}-{:.2} | {} | {} | {} | {} | {} | {} |\n",
            e.shape,
            toml_line(&e.winner),
            e.stats.median_us,
            e.stats.p10_us,
            e.stats.p90_us,
            e.default
                .map_or("-".into(), |d| format!("{:.2}", d.median_us)),
            e.speedup.map_or("-".into(), |x| format!("{x:.2}")),
            e.runner_up_stats
                .map_or("-".into(), |r| format!("{:.2}", r.median_us)),
            gbs(e.bandwidth_gbs),
            e.at_bound.join("; "),
            e.rejected.len()
        );
    }
    s
}

/// Bandwidth with three significant digits (a CPU's 0.05 GB/s must not read 0).
pub fn gbs(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        return "-".into();
    }
    let digits = (2 - v.log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// Environment variable marking the child process that does the tuning, and naming
/// its journal.
const JOURNAL_ENV: &str = "TRELLIS_TUNE_JOURNAL";

/// Environment variable with the time (ms since the epoch) the supervised run started:
/// `--budget` is the run's, however many workers it takes.
const RUN_STARTED_ENV: &str = "TRELLIS_TUNE_RUN_STARTED";

/// Now, in ms since the epoch.
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Run the tuner in a child process. Resume it (from the saved table and the journal)
/// whenever a candidate crashes it, and kill it when one candidate runs past the
/// deadline the worker journaled for its step (the journal then marks that candidate
/// timed out). Returns `None` in the child itself, which then tunes.
pub fn supervise() -> Option<std::process::ExitCode> {
    use std::process::ExitCode;
    if std::env::var_os(JOURNAL_ENV).is_some() {
        watch_supervisor();
        return None;
    }
    // The worker prints its own errors and warnings; the supervisor only relays.
    Some(match supervise_child() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", trellis::error::one_line(&e.to_string()));
            ExitCode::FAILURE
        }
    })
}

/// Environment variable with the supervisor's process id, which the worker watches.
const SUPERVISOR_ENV: &str = "TRELLIS_TUNE_SUPERVISOR";

/// Worker side: end this process when its supervisor is gone (killed alone, by a
/// `kill PID` or a service manager that signals only the main process). Left running,
/// the worker would go on holding the table's lock with no one to kill a hung candidate.
fn watch_supervisor() {
    let Some(supervisor) = std::env::var(SUPERVISOR_ENV)
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return;
    };
    #[cfg(unix)]
    std::thread::spawn(move || loop {
        // Re-parented (to init or a subreaper) once the supervisor has died.
        if std::os::unix::process::parent_id() != supervisor {
            eprintln!("tune: the supervising process ended; stopping");
            // The journal's directory is the supervisor's to remove, and it cannot now.
            let journal = std::env::var_os(JOURNAL_ENV).map(PathBuf::from);
            if let Some(dir) = journal.as_deref().and_then(Path::parent) {
                if dir
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("trellis-tune-"))
                {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    });
}

/// The worker's exit status (0, 1 for an error it printed, [`BUDGET_SPENT`]).
fn supervise_child() -> Result<u8> {
    const ATTEMPTS: usize = 8;
    let exe = std::env::current_exe()
        .map_err(|e| Error::backend("tune", format!("cannot find this executable: {e}")))?;
    // In a directory of this run's own (0700, an unguessable name, removed at the end): a
    // journal at a name others can predict in the shared temp directory could be a
    // symlink planted there, and the journal's writes would land in its target.
    let journal_dir = tempfile::Builder::new()
        .prefix("trellis-tune-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|e| {
            Error::backend(
                "tune",
                format!("cannot create the journal's directory: {e}"),
            )
        })?;
    let journal = journal_dir.path().join("journal");
    let run_started = epoch_ms();
    let result = (|| {
        // Worker deaths in a row that disqualified no new candidate: a run whose every
        // restart leaves one more crashing candidate behind goes on (the candidates are
        // finite), one that dies the same way again and again gives up.
        let mut fruitless = 0;
        let mut disqualified = std::collections::HashSet::new();
        while fruitless < ATTEMPTS {
            let mut child = std::process::Command::new(&exe)
                .args(std::env::args_os().skip(1))
                .env(JOURNAL_ENV, &journal)
                .env(RUN_STARTED_ENV, run_started.to_string())
                .env(SUPERVISOR_ENV, std::process::id().to_string())
                .spawn()
                .map_err(|e| Error::backend("tune", format!("cannot start the tuner: {e}")))?;
            let status = loop {
                if let Some(s) = child.try_wait().map_err(|e| Error::backend("tune", e))? {
                    break Some(Ok(s));
                }
                // The worker writes each step's deadline: the verify launch's is
                // --candidate-timeout, the timing's reckoned from that launch's time.
                if let Some((deadline, id)) = Journal::in_flight(&journal) {
                    if u128::from(epoch_ms()) > deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        Journal::mark_timed_out(&journal, &id)?;
                        eprintln!(
                            "tune: {id} ran past its time limit; killed, resuming without it"
                        );
                        break Some(Err(id));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let lost = match status {
                Some(Ok(s)) if s.success() => return Ok(0),
                // 1: an ordinary error; BUDGET_SPENT: the budget ran out. Both already said.
                Some(Ok(s)) if s.code() == Some(1) => return Ok(1),
                Some(Ok(s)) if s.code() == Some(BUDGET_SPENT as i32) => return Ok(BUDGET_SPENT),
                Some(Ok(s)) => {
                    eprintln!(
                        "tune: the tuner died ({s}); resuming without the candidate it was running"
                    );
                    Journal::in_flight(&journal).map(|(_, id)| id)
                }
                Some(Err(timed_out)) => Some(timed_out),
                None => None,
            };
            if lost.is_some_and(|id| disqualified.insert(id)) {
                fruitless = 0;
            } else {
                fruitless += 1;
            }
        }
        Err(Error::backend(
            "tune",
            format!(
                "the tuner crashed or hung {ATTEMPTS} times in a row without disqualifying \
                 another candidate; giving up"
            ),
        ))
    })();
    drop(journal_dir);
    result
}

#[cfg(test)]
mod tests {
    /// The probe finds problems for every family the tuner tunes, so `--family` of one
    /// over an empty space is told to widen the space, not that the family is untuned;
    /// `expand` alone offers none.
    #[test]
    fn only_expand_is_untuned() {
        struct Probe(Vec<(&'static str, bool)>);
        impl trellis::family::FamilyVisitor for Probe {
            fn visit<F: trellis::family::Family>(&mut self) {
                self.0.push((F::NAME, super::untuned::<F>()));
            }
        }
        let mut p = Probe(Vec::new());
        trellis::families::for_each(&mut p);
        assert_eq!(p.0.len(), 5);
        for (name, untuned) in p.0 {
            assert_eq!(untuned, name == "expand", "{name}");
        }
    }
}
