//! The measuring harness behind `cargo xtask tune`, generic over [`Family`]. For each
//! problem: prepare random data, its reference result and rotating device copies of it
//! (several times the last-level cache); verify every candidate against the reference
//! before timing it (mismatches, compile failures, hangs and crashes are rejected with
//! their reason); time survivors with everything prepared ahead (outputs allocated,
//! arguments bound and checked: the timed region only enqueues the kernel), after a
//! warm-up when the device sat idle, until the median is stable (one over `prune` times
//! the best so far stops after its first round); keep the fastest unless it is within the
//! default's spread.

use super::table::{DeviceRecord, Entry, StatsRecord, Table};
use super::TuneKey;
use crate::error::{Error, Result};
use crate::family::{self, Family};
use crate::kernel::{Backend, Dialect, KernelSpec};
use crate::numerics::Tier;
use std::fmt;
use std::time::{Duration, Instant};

/// How to tune.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The numerics tier whose candidates are measured.
    pub tier: Tier,
    /// Restrict launch shapes to a small set (CPU default: compiling is the cost).
    pub quick: bool,
    /// Stop starting new problems after this long.
    pub budget: Duration,
    /// Bytes the rotating weight copies must exceed (several times the last-level cache).
    pub working_set: usize,
    /// Timed repetitions per candidate: at least `min_reps`, more until the median is
    /// stable, at most `max_reps` or `time_cap` of measuring.
    pub min_reps: usize,
    /// Most samples per candidate.
    pub max_reps: usize,
    /// Measuring time after which a candidate's timing ends (checked after each round).
    pub time_cap: Duration,
    /// Launches per timed sample: on an asynchronous device, back-to-back launches hide
    /// the host's launch cost that a single launch between two events would include.
    pub batch: usize,
    /// A candidate whose verification launch runs longer is rejected as timed out (the
    /// supervisor of `cargo xtask tune` kills a launch that never returns).
    pub candidate_timeout: Duration,
    /// Re-measure problems the table already has.
    pub fresh: bool,
    /// A candidate whose first round of samples has a median over `prune` times the best
    /// median so far stops there: it cannot win, and the tuner's time goes to the close
    /// ones (the default is always measured in full: the winner must beat its spread).
    pub prune: f64,
    /// Append one tab-separated line per candidate to this file ([`Trace`]): every
    /// candidate's time, where a table entry keeps only the winner's, the runner-up's and
    /// the default's.
    pub trace: Option<std::path::PathBuf>,
    /// Launches before a candidate's first sample when the device sat idle (nothing
    /// measured in the last second, see [`measure`]): an idle GPU starts at a low clock,
    /// so the first candidate of a run would time the clock's ramp.
    pub warm_up: Duration,
}

impl TuneOptions {
    /// Defaults for a backend: GPUs measure many short launches, the CPU (and the Metal
    /// simulator on it) few long ones.
    pub fn for_backend(name: &str, tier: Tier) -> Self {
        let gpu = crate::backend::runs_on_gpu(name);
        TuneOptions {
            tier,
            quick: !gpu,
            budget: Duration::from_secs(30 * 60),
            working_set: if gpu { 256 << 20 } else { 64 << 20 },
            min_reps: if gpu { 10 } else { 7 },
            max_reps: if gpu { 200 } else { 40 },
            time_cap: Duration::from_secs(if gpu { 1 } else { 4 }),
            batch: if gpu { 10 } else { 1 },
            candidate_timeout: Duration::from_secs(if gpu { 20 } else { 120 }),
            fresh: false,
            prune: 1.3,
            trace: None,
            warm_up: Duration::from_millis(if gpu { 200 } else { 20 }),
        }
    }
}

/// Crash and hang recovery for the tuner. Each candidate is written to the journal
/// (with the deadline its work should end by) before it runs and cleared after; when a
/// candidate kills the process the resumed run finds it in flight and rejects it as
/// crashed, and when the supervisor kills a run that stays in one candidate past its
/// deadline it marks the candidate timed out ([`Journal::mark_timed_out`]). The verify
/// launch gets `candidate_timeout`; the timing, once the verify launch has shown how
/// long one takes, as long as its rounds can take at that pace plus `candidate_timeout`
/// ([`timing_allowance`]), so a slow candidate is not killed for being timed at length
/// and one hung in a launch is.
///
/// It also lists the problems this run has measured and saved, so a worker restarted
/// under `--fresh` keeps them rather than measuring every one again.
pub struct Journal {
    path: std::path::PathBuf,
    crashed: Vec<String>,
    timed_out: Vec<String>,
    measured: std::sync::Mutex<Vec<String>>,
}

impl Journal {
    /// Open (or start) the journal at `path`; a candidate left in flight becomes crashed.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut j = Journal {
            path: path.to_path_buf(),
            crashed: Vec::new(),
            timed_out: Vec::new(),
            measured: Default::default(),
        };
        for line in text.lines() {
            if let Some(id) = line.strip_prefix("measured ") {
                j.measured
                    .get_mut()
                    .expect("not shared yet")
                    .push(id.to_string());
            } else if let Some(id) = line.strip_prefix("timedout ") {
                j.timed_out.push(id.to_string());
            } else if let Some(id) = line.strip_prefix("crashed ") {
                j.crashed.push(id.to_string());
            } else if let Some((_, id)) = Self::running(line) {
                j.crashed.push(id);
            }
        }
        j.write(None)?;
        Ok(j)
    }

    /// The candidate in flight in the journal at `path` and the deadline its current
    /// step should end by (ms since the epoch): what a supervisor watches.
    pub fn in_flight(path: &std::path::Path) -> Option<(u128, String)> {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines().find_map(Self::running)
    }

    /// A `running <deadline ms> <id>` line's parts.
    fn running(line: &str) -> Option<(u128, String)> {
        let (ms, id) = line.strip_prefix("running ")?.split_once(' ')?;
        Some((ms.parse().ok()?, id.to_string()))
    }

    /// Supervisor side: the candidate in flight ran past its limit and was killed.
    pub fn mark_timed_out(path: &std::path::Path, id: &str) -> Result<()> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut out: String = text
            .lines()
            .filter(|l| !l.starts_with("running "))
            .map(|l| format!("{l}\n"))
            .collect();
        out += &format!("timedout {id}\n");
        std::fs::write(path, out).map_err(|e| Error::file(path, e))
    }

    /// Why an earlier attempt disqualified a candidate, if it did.
    pub fn disqualified(&self, id: &str) -> Option<&'static str> {
        if self.timed_out.iter().any(|c| c == id) {
            Some("timed out: killed by the supervisor at its time limit in an earlier attempt")
        } else if self.crashed.iter().any(|c| c == id) {
            Some("crashed the tuning process in an earlier attempt")
        } else {
            None
        }
    }

    /// Problem `id` (its key and shape) was measured and saved by this run.
    pub fn record_measured(&self, id: &str) -> Result<()> {
        self.measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id.to_string());
        self.write(None)
    }

    /// Whether this run (an earlier worker of it) measured and saved problem `id`.
    pub fn was_measured(&self, id: &str) -> bool {
        let measured = self.measured.lock().unwrap_or_else(|e| e.into_inner());
        measured.iter().any(|m| m == id)
    }

    fn write(&self, running: Option<(&str, Duration)>) -> Result<()> {
        use std::io::Write;
        let mut text: String = self
            .crashed
            .iter()
            .map(|c| format!("crashed {c}\n"))
            .collect();
        text += &self
            .measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| format!("measured {c}\n"))
            .collect::<String>();
        text += &self
            .timed_out
            .iter()
            .map(|c| format!("timedout {c}\n"))
            .collect::<String>();
        if let Some((id, allow)) = running {
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
                + allow.as_millis();
            text += &format!("running {deadline} {id}\n");
        }
        let mut f = std::fs::File::create(&self.path).map_err(|e| Error::file(&self.path, e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| Error::file(&self.path, e))
    }

    /// Candidate `id` runs a step that should end within `allow`.
    fn begin(&self, id: &str, allow: Duration) -> Result<()> {
        self.write(Some((id, allow)))
    }

    fn end(&self) -> Result<()> {
        self.write(None)
    }
}

/// Fault injection for the recovery tests: a candidate whose id contains this
/// variable's value aborts the process (`crash:<text>`) or never returns
/// (`hang:<text>`) when it is about to run.
pub const FAULT_ENV: &str = "TRELLIS_TUNE_FAULT";

fn inject_fault(id: &str) {
    let Ok(f) = std::env::var(FAULT_ENV) else {
        return;
    };
    if let Some(t) = f
        .strip_prefix("crash:")
        .filter(|t| !t.is_empty() && id.contains(*t))
    {
        eprintln!("{FAULT_ENV}: crashing at {id} ({t})");
        std::process::abort();
    }
    if f.strip_prefix("hang:")
        .is_some_and(|t| !t.is_empty() && id.contains(t))
    {
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// Robust statistics of one candidate's samples, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median sample (the mean of the middle two of an even count), in microseconds.
    pub median: f64,
    /// 10th percentile (interpolated), in microseconds.
    pub p10: f64,
    /// 90th percentile (interpolated), in microseconds.
    pub p90: f64,
    /// Number of samples.
    pub samples: usize,
}

impl Stats {
    /// Quantiles of the samples, interpolated linearly between the two nearest ranks
    /// (numpy's default; the nearest rank alone took the upper of the middle two of an
    /// even count, so a median of 10 samples was the 6th, and of 2 the larger); NaN for
    /// no samples.
    pub fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| {
            let Some(last) = v.len().checked_sub(1) else {
                return f64::NAN;
            };
            let at = last as f64 * p;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
        };
        Stats {
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
            samples: v.len(),
        }
    }
    /// Relative spread `(p90 - p10) / median`.
    pub fn spread(&self) -> f64 {
        (self.p90 - self.p10) / self.median
    }
    fn record(&self) -> StatsRecord {
        StatsRecord {
            median_us: round3(self.median),
            p10_us: round3(self.p10),
            p90_us: round3(self.p90),
            samples: self.samples,
        }
    }
}

/// Bring `table`'s entries for the problems given up to the hashes entries record today,
/// without measuring, where what they were measured on is provably unchanged:
///
/// - an entry that records its family's whole source hash ([`super::source_hash`], what
///   entries recorded before families had source slices) while that hash is current
///   gets its problem's slice hash ([`super::source_hash_of`]);
/// - an entry without a candidate-space hash ([`super::space_hash`], tables written
///   before entries recorded it) whose sources are current gets it (its space is then
///   the one measured, as long as no candidate or unit changed since: stamp before
///   changing any);
/// - an entry whose candidate-space hash is current (the default and every candidate,
///   each with its complete unit at the entry's problem, are byte for byte what was
///   measured) while its source hash is not gets today's source hash: the source hash
///   covers the catalog's small problems, so a template change that renders differently
///   only there (a guard for shapes no tuned problem has) leaves every measured unit as
///   it was.
///
/// Returns how many entries changed.
pub fn stamp<F: Family>(
    o: &TuneOptions,
    dialect: Dialect,
    problems: &[F::Problem],
    table: &mut Table,
) -> usize {
    let whole = super::source_hash::<F>(dialect);
    let mut stamped = 0;
    for p in problems {
        let hash = super::source_hash_of::<F>(dialect, p);
        let key = F::key(p, o.tier);
        let (rows, cols) = F::shape(p);
        let shape = format!("{rows}x{cols}");
        for e in &mut table.entries {
            if e.shape != shape || e.key().ok().as_ref() != Some(&key) {
                continue;
            }
            let mut changed = false;
            if e.source_hash == whole && whole != hash {
                e.source_hash = hash.clone();
                changed = true;
            }
            if e.space_hash.is_none() && e.source_hash == hash {
                e.space_hash = Some(super::space_hash::<F>(p, o.tier, o.quick, dialect));
                changed = true;
            }
            if e.source_hash != hash
                && e.space_hash.as_deref()
                    == Some(super::space_hash::<F>(p, o.tier, o.quick, dialect).as_str())
            {
                e.source_hash = hash.clone();
                changed = true;
            }
            stamped += usize::from(changed);
        }
    }
    stamped
}

/// Time `run` (which enqueues one launch on copy `i`) until the median is stable: at
/// least `min_reps` samples, then rounds of `min_reps` more until the median of all
/// samples moves by under 1% in a round, `max_reps` samples or `time_cap`; or after the
/// first round when its median is over `cutoff` (µs). A sample is the mean time per
/// launch of `o.batch` back-to-back launches on rotating copies.
pub fn measure<B: Backend>(
    b: &B,
    o: &TuneOptions,
    copies: usize,
    cutoff: Option<f64>,
    mut run: impl FnMut(usize) -> Result<()>,
) -> Result<Stats> {
    let warm_up = warm_up_for(o, LAST_MEASURED.with(|t| t.get()).map(|t| t.elapsed()));
    let warming = Instant::now();
    let mut launches = 0;
    loop {
        for _ in 0..3 {
            run(launches % copies)?;
            launches += 1;
        }
        b.synchronize()?;
        if warming.elapsed() >= warm_up {
            break;
        }
    }
    let stats = time_samples(b, o, copies, cutoff, &mut run);
    LAST_MEASURED.with(|t| t.set(Some(Instant::now())));
    stats
}

thread_local! {
    /// When this thread's last [`measure`] ended: how long the device has sat idle since.
    static LAST_MEASURED: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// How long [`measure`] launches before its first sample (at least 3 launches whatever it
/// says): `o.warm_up` when nothing was measured in the last second or ever (the bench's
/// first row read 24.1 us [22.9-24.3] cold for a kernel that took 23.0 us warm), else
/// nothing more, since the device is still at its clock.
fn warm_up_for(o: &TuneOptions, idle: Option<Duration>) -> Duration {
    match idle {
        Some(idle) if idle < Duration::from_secs(1) => Duration::ZERO,
        _ => o.warm_up,
    }
}

/// [`measure`]'s samples, on a warm device.
fn time_samples<B: Backend>(
    b: &B,
    o: &TuneOptions,
    copies: usize,
    cutoff: Option<f64>,
    run: &mut impl FnMut(usize) -> Result<()>,
) -> Result<Stats> {
    let started = Instant::now();
    let mut samples = Vec::with_capacity(o.max_reps);
    let mut last_median = f64::NAN;
    loop {
        for _ in 0..o.min_reps {
            let first = samples.len() * o.batch;
            let ms =
                b.time_ms(&mut || (first..first + o.batch).try_for_each(|i| run(i % copies)))?;
            samples.push(ms * 1e3 / o.batch as f64);
        }
        let median = Stats::of(samples.clone()).median;
        if round_ends_timing(
            o,
            median,
            last_median,
            samples.len(),
            started.elapsed(),
            cutoff,
        ) {
            return Ok(Stats::of(samples));
        }
        last_median = median;
    }
}

/// [`measure`]'s stopping rule after a round: the median moved by under 1 %, the samples
/// or the time are spent, or the median is past the cutoff.
fn round_ends_timing(
    o: &TuneOptions,
    median: f64,
    last_median: f64,
    samples: usize,
    elapsed: Duration,
    cutoff: Option<f64>,
) -> bool {
    let stable = ((median - last_median) / median).abs() < 0.01;
    let hopeless = cutoff.is_some_and(|c| median > c);
    stable || hopeless || samples >= o.max_reps || elapsed > o.time_cap
}

/// One problem's data on the device, `copies` times, with its reference result.
struct Instance<F: Family, B: Backend> {
    host: F::Host,
    want: F::Expected,
    devices: Vec<F::Device<B>>,
}

impl<F: Family, B: Backend> Instance<F, B> {
    fn prepare(b: &B, p: &F::Problem, o: &TuneOptions, seed: u64) -> Result<Self> {
        let host = F::random_host(p, seed)?;
        let want = F::expected(p, &host)?;
        // Enough copies to rotate through the working set (several times the last-level
        // cache), so a small problem is not timed from cache: at most 16 left any problem
        // under 1/16 of it there (the Llama-3-8B k 2 matrix rotated through 235 MB).
        let copies = o.working_set.div_ceil(F::bytes(p).max(1)).clamp(1, 256);
        let devices = (0..copies)
            .map(|_| F::upload(b, p, &host))
            .collect::<Result<_>>()?;
        Ok(Instance {
            host,
            want,
            devices,
        })
    }
}

/// The candidates of a problem: the default first, then the space; invalid ones and
/// those over the device's limits are rejected with the reason.
fn candidates<F: Family>(
    p: &F::Problem,
    o: &TuneOptions,
    limits: &crate::kernel::Limits,
) -> (Vec<F::Variant>, Vec<String>) {
    let default = F::default_variant(p, o.tier);
    let mut all = vec![default];
    all.extend(
        F::candidates(p, o.tier, o.quick)
            .into_iter()
            .filter(|v| *v != default),
    );
    let mut rejected = Vec::new();
    all.retain(|v| match family::fits::<F>(p, *v, limits) {
        Ok(()) => true,
        Err(e) => {
            rejected.push(format!("{v}: {e}"));
            false
        }
    });
    (all, rejected)
}

/// Run a candidate once and check it against the reference; a launch over the time
/// limit is rejected as timed out. The launch's time (with its output's download): what
/// the timing's allowance is reckoned from.
fn verify_candidate<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    inst: &Instance<F, B>,
    limit: Duration,
) -> std::result::Result<Duration, String> {
    let started = Instant::now();
    let got = family::run::<F, B>(b, p, v, &inst.devices[0]).map_err(|e| e.to_string())?;
    let took = started.elapsed();
    if took > limit {
        return Err(format!(
            "timed out: one launch took {:.1} s (limit {:.1} s)",
            took.as_secs_f64(),
            limit.as_secs_f64()
        ));
    }
    F::check(p, &v, &inst.host, &inst.want, &got)?;
    Ok(took)
}

/// How long [`measure`] may take for a candidate whose launch takes `launch`: its
/// warm-up, then rounds until `time_cap` and the round that passes it (every launch at
/// that pace), plus `candidate_timeout` for one launch that runs long. A launch hung
/// past that is the supervisor's to kill.
pub fn timing_allowance(o: &TuneOptions, launch: Duration) -> Duration {
    let round =
        u32::try_from(o.min_reps.saturating_mul(o.batch).saturating_add(3)).unwrap_or(u32::MAX);
    // Saturating: the options are the caller's (a timeout of u64::MAX seconds overflowed).
    [
        o.time_cap,
        launch.saturating_mul(round),
        o.candidate_timeout,
    ]
    .into_iter()
    .fold(o.warm_up, Duration::saturating_add)
}

/// Time a verified candidate: outputs allocated and arguments bound per copy before
/// the timed region, which only enqueues. `cutoff`: see [`measure`].
fn time_candidate<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    p: &F::Problem,
    v: F::Variant,
    inst: &Instance<F, B>,
    cutoff: Option<f64>,
) -> Result<Stats> {
    time_candidate_after::<F, B>(b, o, p, v, inst, cutoff, &mut || Ok(()))
}

/// [`time_candidate`] as a call runs `v`: after the launch its family says a call makes
/// before it ([`Family::with_call_prelude`]), where there is one.
fn time_as_called<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    p: &F::Problem,
    v: F::Variant,
    inst: &Instance<F, B>,
    cutoff: Option<f64>,
) -> Result<Stats> {
    F::with_call_prelude(b, p, &v, |prelude| match prelude {
        Some(before) => time_candidate_after::<F, B>(b, o, p, v, inst, cutoff, before),
        None => time_candidate::<F, B>(b, o, p, v, inst, cutoff),
    })
}

/// [`time_candidate`], each launch after `before` (another launch in the same stream).
fn time_candidate_after<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    p: &F::Problem,
    v: F::Variant,
    inst: &Instance<F, B>,
    cutoff: Option<f64>,
    before: &mut dyn FnMut() -> Result<()>,
) -> Result<Stats> {
    let k = F::kernel(p, v);
    let launch = k.launch_request()?;
    let compiled = b.compile(&launch)?;
    let mut outs: Vec<Vec<B::Tensor>> = inst
        .devices
        .iter()
        .map(|_| family::alloc_outputs(b, &k))
        .collect::<Result<_>>()?;
    let mut refs: Vec<Vec<&mut B::Tensor>> =
        outs.iter_mut().map(|o| o.iter_mut().collect()).collect();
    let mut bound = Vec::with_capacity(refs.len());
    for (d, out) in inst.devices.iter().zip(refs.iter_mut()) {
        bound.push(b.bind(&compiled, &launch, &F::inputs(d, &v)?, out)?);
    }
    measure(b, o, bound.len(), cutoff, |i| {
        before()?;
        b.run(&mut bound[i])
    })
}

/// The most of its median a default's noise may shelter it by: a default timed with a
/// wide spread (a busy CPU: p10 at 0.6 of the median) must not keep a choice that is
/// plainly faster. (On the GPUs the spread is about 1 %: the p10 decides.)
const DEFAULT_SHELTER: f64 = 0.1;

/// The winner: the fastest by median, unless its median is within the default's
/// noise (at or above the default's p10, and within [`DEFAULT_SHELTER`] of its
/// median), when the default stays.
fn choose<V: Copy + PartialEq>(default: V, timed: &[(V, Stats)]) -> Option<(V, Stats)> {
    let best = *timed
        .iter()
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median))?;
    match timed.iter().find(|(v, _)| *v == default) {
        Some(&(dv, ds)) if best.1.median >= ds.p10.max(ds.median * (1.0 - DEFAULT_SHELTER)) => {
            Some((dv, ds))
        }
        _ => Some(best),
    }
}

/// Fields of the winner at the edge of the candidate space that the space could widen
/// past: a numeric field whose value is the largest (smallest) offered, of at least two,
/// while the winner with that field doubled (halved) is still `valid` (the kernel takes
/// it, and the family did not leave it out as measured far). An edge the kernel cannot
/// pass (one row tile, 16 samples per slice) says nothing about the space and is not
/// named. Read through serde, so any family's variant type is covered.
pub fn at_bound<V: serde::Serialize + serde::de::DeserializeOwned>(
    winner: &V,
    space: &[V],
    valid: impl Fn(&V) -> bool,
) -> Vec<String> {
    let table = |v: &V| toml::Table::try_from(v).unwrap_or_default();
    let w = table(winner);
    let all: Vec<toml::Table> = space.iter().map(table).collect();
    // The winner with `field` set to `y`, if that is a variant the kernel takes.
    let runs = |field: &str, y: i64| {
        let mut t = w.clone();
        t.insert(field.to_string(), toml::Value::Integer(y));
        t.try_into::<V>().is_ok_and(|v| valid(&v))
    };
    let mut out = Vec::new();
    for (field, value) in &w {
        let Some(x) = value.as_integer() else {
            continue;
        };
        let offered: Vec<i64> = all
            .iter()
            .filter_map(|t| t.get(field)?.as_integer())
            .collect();
        let (lo, hi) = (offered.iter().min(), offered.iter().max());
        if lo == hi {
            continue;
        }
        // A field some candidates leave out (serde skips it at its default, e.g. k_split
        // = 1) is offered at that default too: below the written values, so no lower edge.
        let absent_somewhere = all.iter().any(|t| !t.contains_key(field));
        if Some(&x) == hi && runs(field, 2 * x) {
            out.push(format!(
                "{field} = {x} is the largest offered ({} also runs)",
                2 * x
            ));
        } else if Some(&x) == lo && !absent_somewhere && x % 2 == 0 && runs(field, x / 2) {
            out.push(format!(
                "{field} = {x} is the smallest offered ({} also runs)",
                x / 2
            ));
        }
    }
    out
}

/// Verify and time variants of one problem (the bench's measurement, the same as the
/// tuner's): random data, its reference and rotating copies prepared once, then each
/// variant checked (`Err`: why it failed, and it is not timed) and timed with bound
/// launches.
pub fn bench<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    p: &F::Problem,
    variants: &[F::Variant],
    seed: u64,
) -> Result<Vec<std::result::Result<(Stats, String), String>>> {
    let inst = Instance::<F, B>::prepare(b, p, o, seed)?;
    family::precompile::<F, B>(b, &[(p.clone(), variants.to_vec())])?;
    variants
        .iter()
        .map(|&v| {
            Ok(match check_once::<F, B>(b, p, v, &inst) {
                Ok(detail) => Ok((time_candidate::<F, B>(b, o, p, v, &inst, None)?, detail)),
                Err(why) => Err(why),
            })
        })
        .collect()
}

/// One run of `v` on the instance's first copy, checked against its reference: the
/// check's detail, or why the run or the check failed.
fn check_once<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    inst: &Instance<F, B>,
) -> std::result::Result<String, String> {
    family::run::<F, B>(b, p, v, &inst.devices[0])
        .map_err(|e| e.to_string())
        .and_then(|got| F::check(p, &v, &inst.host, &inst.want, &got))
}

/// [`bench()`] of one variant, timed alone and then with each launch after `before`
/// (another kernel launched in the same stream: the bench times the fast tier's
/// prescale kernel before its matrix kernel so): the variant's time, the pair's and its
/// check detail, or why the check failed.
#[allow(clippy::type_complexity)]
pub fn bench_after<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    p: &F::Problem,
    v: F::Variant,
    seed: u64,
    mut before: impl FnMut() -> Result<()>,
) -> Result<std::result::Result<(Stats, Stats, String), String>> {
    let inst = Instance::<F, B>::prepare(b, p, o, seed)?;
    family::precompile::<F, B>(b, &[(p.clone(), vec![v])])?;
    Ok(match check_once::<F, B>(b, p, v, &inst) {
        Ok(detail) => {
            let alone = time_candidate::<F, B>(b, o, p, v, &inst, None)?;
            let after = time_candidate_after::<F, B>(b, o, p, v, &inst, None, &mut before)?;
            Ok((alone, after, detail))
        }
        Err(why) => Err(why),
    })
}

/// `--trace`: one tab-separated line per candidate (key, variant, outcome, median, p10 and
/// p90 in us, samples), appended, under a header line when the file starts empty. A pruned
/// candidate's times are those of its first round.
pub struct Trace {
    path: std::path::PathBuf,
}

impl Trace {
    fn open(path: &std::path::Path) -> Result<Trace> {
        let empty = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        let t = Trace {
            path: path.to_path_buf(),
        };
        if empty {
            t.append("key\tvariant\toutcome\tmedian_us\tp10_us\tp90_us\tsamples\n")?;
        }
        Ok(t)
    }

    fn line(
        &self,
        key: &TuneKey,
        v: &impl fmt::Display,
        outcome: &str,
        s: Option<&Stats>,
    ) -> Result<()> {
        let times = s.map_or_else(
            || "\t\t\t".to_string(),
            |s| format!("{:.3}\t{:.3}\t{:.3}\t{}", s.median, s.p10, s.p90, s.samples),
        );
        self.append(&format!("{key}\t{v}\t{outcome}\t{times}\n"))
    }

    fn append(&self, text: &str) -> Result<()> {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| Error::file(&self.path, e))
    }
}

/// Tune one problem of family `F` on `b`.
pub fn tune_problem<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    journal: Option<&Journal>,
    p: &F::Problem,
    seed: u64,
) -> Result<(Entry, Phases)> {
    let key = F::key(p, o.tier);
    let started = Instant::now();
    let inst = Instance::<F, B>::prepare(b, p, o, seed)?;
    let prepared = Instant::now();
    let default = F::default_variant(p, o.tier);
    let (cands, mut rejected) = candidates::<F>(p, o, &b.limits());
    family::precompile::<F, B>(b, &[(p.clone(), cands.clone())])?;
    let compiled = Instant::now();
    let trace = o.trace.as_deref().map(Trace::open).transpose()?;
    let mut timed = Vec::new();
    for &v in &cands {
        let id = format!("[{key}] {v}");
        if let Some(why) = journal.and_then(|j| j.disqualified(&id)) {
            if let Some(t) = &trace {
                t.line(&key, &v, &format!("rejected: {why}"), None)?;
            }
            rejected.push(format!("{v}: {why}"));
            continue;
        }
        if let Some(j) = journal {
            j.begin(&id, o.candidate_timeout)?;
        }
        inject_fault(&id);
        let best = timed
            .iter()
            .map(|(_, s): &(F::Variant, Stats)| s.median)
            .min_by(f64::total_cmp);
        let cutoff = best.filter(|_| v != default).map(|m| m * o.prune);
        let outcome =
            verify_candidate::<F, B>(b, p, v, &inst, o.candidate_timeout).and_then(|launch| {
                if let Some(j) = journal {
                    j.begin(&id, timing_allowance(o, launch))
                        .map_err(|e| e.to_string())?;
                }
                time_as_called::<F, B>(b, o, p, v, &inst, cutoff)
                    .map_err(|e| format!("timing failed: {e}"))
            });
        if let Some(j) = journal {
            j.end()?;
        }
        if let Some(t) = &trace {
            match &outcome {
                Ok(s) if cutoff.is_some_and(|c| s.median > c) => {
                    t.line(&key, &v, "pruned", Some(s))
                }
                Ok(s) => t.line(&key, &v, "timed", Some(s)),
                // The whole reason (a compiler's log runs over many lines) on one line.
                Err(why) => {
                    let why = why.lines().collect::<Vec<_>>().join(" | ");
                    t.line(
                        &key,
                        &v,
                        &format!("rejected: {}", why.replace('\t', " ")),
                        None,
                    )
                }
            }?;
        }
        match outcome {
            Ok(stats) => timed.push((v, stats)),
            Err(why) => rejected.push(format!("{v}: {}", reason_line(&why))),
        }
    }
    // The reference is made lazily by some families (at the first check), so it counts
    // as measuring here.
    let phases = Phases {
        prepare: prepared - started,
        compile: compiled - prepared,
        measure: compiled.elapsed(),
    };
    let (winner, stats) = choose(default, &timed).ok_or_else(|| {
        Error::backend(
            b.name(),
            format!(
                "every candidate for [{key}] was rejected: {}",
                rejected.join("; ")
            ),
        )
    })?;
    let entry = entry::<F>(
        p,
        &key,
        (b.dialect(), o.quick),
        (winner, stats),
        default,
        &timed,
        &cands,
        rejected,
    );
    Ok((entry, phases))
}

/// Where one problem's tuning time went (wall clock).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    /// Random data, its reference (where made eagerly) and the device copies.
    pub prepare: Duration,
    /// Compiling the candidates: waiting for their look-ahead compile, and what it
    /// left to do.
    pub compile: Duration,
    /// Verifying and timing the candidates.
    pub measure: Duration,
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prepare {:.1} s, compile {:.1} s, measure {:.1} s",
            self.prepare.as_secs_f64(),
            self.compile.as_secs_f64(),
            self.measure.as_secs_f64()
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn entry<F: Family>(
    p: &F::Problem,
    key: &TuneKey,
    (dialect, quick): (Dialect, bool),
    (winner, stats): (F::Variant, Stats),
    default: F::Variant,
    timed: &[(F::Variant, Stats)],
    space: &[F::Variant],
    rejected: Vec<String>,
) -> Entry {
    let record = |v: &F::Variant| toml::Table::try_from(v).unwrap_or_default();
    let default_stats = timed.iter().find(|(v, _)| *v == default).map(|(_, s)| *s);
    let runner = timed
        .iter()
        .filter(|(v, _)| *v != winner)
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median));
    let (rows, cols) = F::shape(p);
    Entry {
        family: key.family.clone(),
        key: key.fields.clone(),
        tier: key.tier.name().into(),
        bucket: key.bucket.to_string(),
        shape: format!("{rows}x{cols}"),
        source_hash: super::source_hash_of::<F>(dialect, p),
        space_hash: Some(super::space_hash::<F>(p, key.tier, quick, dialect)),
        winner: record(&winner),
        stats: stats.record(),
        default: default_stats.map(|s| s.record()),
        speedup: default_stats.map(|s| round3(s.median / stats.median)),
        bandwidth_gbs: round3(F::bytes(p) as f64 / (stats.median * 1e-6) / 1e9),
        runner_up: runner.map(|(v, _)| record(v)),
        runner_up_stats: runner.map(|(_, s)| s.record()),
        at_bound: at_bound(&winner, space, |v| {
            F::kernel(p, *v).validate().is_ok() && !F::measured_far(p, v)
        }),
        rejected,
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// What a table keeps of a rejection: its first line (what failed), and where that line
/// only announces a log (a compiler's), the log's first error, not the whole log.
fn reason_line(why: &str) -> String {
    let mut lines = why.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let log: Vec<&str> = lines.collect();
    let error = log.iter().find(|l| l.contains("error")).or(log.first());
    error.map_or(first.to_string(), |e| format!("{first} {e}"))
}

/// A fresh table header for `b`.
pub fn header<B: Backend>(b: &B, description: String) -> DeviceRecord {
    DeviceRecord {
        id: b.device_id(),
        backend: b.name().into(),
        dialect: b.dialect().name().into(),
        description,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        timer: b.timer().into(),
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

/// What the tuner reports as it goes.
pub enum Event<'a> {
    /// Problem `i` of `n` starts (or is already in the table).
    Start {
        /// Index of the problem, from 0.
        i: usize,
        /// Number of problems in the run.
        n: usize,
        /// The problem's tuning key.
        key: &'a TuneKey,
        /// Whether the table already has a current entry (the problem is skipped).
        cached: bool,
    },
    /// Problem `i` finished.
    Done {
        /// Index of the problem, from 0.
        i: usize,
        /// Number of problems in the run.
        n: usize,
        /// The entry now in the table.
        entry: &'a Entry,
        /// Where its time went.
        phases: Phases,
    },
    /// Something the user must see (a problem not tuned, the budget spent).
    Warn(String),
}

/// What a [`tune`] run left: problems the budget did not reach, and problems that
/// failed (every candidate rejected, or the problem could not be prepared; each was
/// reported as an [`Event::Warn`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Untuned {
    /// Problems not started because the time budget was spent.
    pub budget: usize,
    /// Problems that failed and keep the built-in default.
    pub failed: usize,
}

/// Whether `table` has a current entry for problem `p` on `dialect`: one of its key and
/// measured shape (shapes that share a bucket, the presets' 17408 and 14336 rows, are each
/// tuned, and the selector takes the nearest), measured on today's sources and candidate
/// space, whose winner and runner-up still read as variants of `F` of the entry's tier
/// (the selector refuses a table with one that does not, so such an entry is measured
/// again), whose winner is a valid kernel at `p` (a hand-edited `rows_per_group = 0` is
/// measured again too) and whose time is a time (samples, a finite positive median).
/// What [`tune`] keeps.
pub fn has_current_entry<F: Family>(
    o: &TuneOptions,
    dialect: Dialect,
    p: &F::Problem,
    table: &Table,
) -> bool {
    let key = F::key(p, o.tier);
    let (rows, cols) = F::shape(p);
    let shape = format!("{rows}x{cols}");
    let hash = super::source_hash_of::<F>(dialect, p);
    let space = super::space_hash::<F>(p, o.tier, o.quick, dialect);
    table.entries.iter().any(|e| {
        e.shape == shape
            && e.key().ok().as_ref() == Some(&key)
            && e.source_hash == hash
            && e.space_hash.as_ref() == Some(&space)
            && super::check_entry::<F>(0, e).is_ok()
            && e.stats.samples > 0
            && e.stats.median_us.is_finite()
            && e.stats.median_us > 0.0
            && e.winner::<F::Variant>()
                .is_ok_and(|v| F::kernel(p, v).validate().is_ok())
    })
}

/// What [`tune`] would measure of `problems` against `table`, found without a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Problems of the space.
    pub problems: usize,
    /// Those with a current entry (kept unless `o.fresh`).
    pub current: usize,
    /// Candidates of the others that fit `limits`: each one a unit to compile, verify
    /// and time (a device with less to give than `limits` drops a few more).
    pub candidates: usize,
}

/// [`Plan`] of `problems` on `dialect` under `limits`, resuming from `table`.
pub fn plan<F: Family>(
    o: &TuneOptions,
    dialect: Dialect,
    limits: &crate::kernel::Limits,
    problems: &[F::Problem],
    table: &Table,
) -> Plan {
    let mut plan = Plan {
        problems: problems.len(),
        ..Plan::default()
    };
    for p in problems {
        if !o.fresh && has_current_entry::<F>(o, dialect, p, table) {
            plan.current += 1;
        } else {
            plan.candidates += candidates::<F>(p, o, limits).0.len();
        }
    }
    plan
}

/// Tune family `F` on every problem, resuming from `table` (its current entries are kept
/// unless `o.fresh`: same key and shape, sources and space hashes current, a readable
/// winner of the key's tier, sane stats), calling `save` after each problem so an
/// interrupted run loses at most one. Returns the problems left untuned.
pub fn tune<F: Family, B: Backend>(
    b: &B,
    o: &TuneOptions,
    problems: &[F::Problem],
    table: &mut Table,
    journal: Option<&Journal>,
    save: &mut dyn FnMut(&Table) -> Result<()>,
    progress: &mut dyn FnMut(Event<'_>),
) -> Result<Untuned> {
    let started = Instant::now();
    // Each problem's key and shape (its entry is replaced by these), and whether the
    // table has a current entry for it.
    let ids: Vec<(TuneKey, String)> = problems
        .iter()
        .map(|p| {
            let (rows, cols) = F::shape(p);
            (F::key(p, o.tier), format!("{rows}x{cols}"))
        })
        .collect();
    let same =
        |i: usize, e: &Entry| e.shape == ids[i].1 && e.key().ok().as_ref() == Some(&ids[i].0);
    // A problem's id in the journal: its key and shape.
    let journal_id = |i: usize| format!("{} at {}", ids[i].0, ids[i].1);
    // Under --fresh, what an earlier worker of this run measured is kept.
    let fresh = |i: usize| o.fresh && !journal.is_some_and(|j| j.was_measured(&journal_id(i)));
    let cached: Vec<bool> = problems
        .iter()
        .enumerate()
        .map(|(i, p)| !fresh(i) && has_current_entry::<F>(o, b.dialect(), p, table))
        .collect();
    // While a problem is measured, the next one's candidates compile on the backend's
    // detached compiler (where it has one), so their compile costs the run nothing.
    let ahead = b.ahead_compiler();
    let limits = b.limits();
    std::thread::scope(|scope| {
        let compile_next = |after: usize| {
            let c = ahead.clone()?;
            let j = (after + 1..problems.len()).find(|&j| !cached[j])?;
            let p = &problems[j];
            Some(scope.spawn(move || {
                let (cands, _) = candidates::<F>(p, o, &limits);
                family::compile_ahead::<F>(c.as_ref(), &[(p.clone(), cands)]);
            }))
        };
        let mut compiling = None;
        let mut failed = 0;
        for (i, p) in problems.iter().enumerate() {
            progress(Event::Start {
                i,
                n: problems.len(),
                key: &ids[i].0,
                cached: cached[i],
            });
            if cached[i] {
                continue;
            }
            if started.elapsed() >= o.budget {
                // The problems from here on that this run would measure (not those the
                // table holds already).
                let left = (i..problems.len()).filter(|&j| !cached[j]).count();
                progress(Event::Warn(format!(
                    "budget spent: {left} of {} {} problems not tuned",
                    problems.len(),
                    F::NAME
                )));
                return Ok(Untuned {
                    budget: left,
                    failed,
                });
            }
            // This problem's look-ahead compile finishes first (its units are then in the
            // cache; the wait counts as compiling), then the next one's starts.
            let waiting = Instant::now();
            if let Some(h) = compiling.take() {
                let _ = std::thread::ScopedJoinHandle::join(h);
            }
            let waited = waiting.elapsed();
            compiling = compile_next(i);
            match tune_problem::<F, B>(b, o, journal, p, 7 + i as u64) {
                Ok((entry, mut phases)) => {
                    phases.compile += waited;
                    table.entries.retain(|e| !same(i, e));
                    table.entries.push(entry);
                    progress(Event::Done {
                        i,
                        n: problems.len(),
                        entry: table.entries.last().expect("pushed"),
                        phases,
                    });
                    save(table)?;
                    if let Some(j) = journal {
                        j.record_measured(&journal_id(i))?;
                    }
                }
                // A problem whose every candidate failed keeps what the table held for it
                // (an earlier entry, or none: the built-in default); say so.
                Err(e) => {
                    failed += 1;
                    progress(Event::Warn(format!("[{}] not tuned: {e}", ids[i].0)));
                }
            }
        }
        Ok(Untuned { budget: 0, failed })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::simt::{MStrategy, Representation, Variant, XStage};

    /// `bench_after` checks the variant, times it alone and after `before`, which runs
    /// once before each of the second timing's launches (the warm-up's included).
    #[test]
    fn bench_after_runs_its_launch_before_each_of_the_seconds() {
        use crate::families::reduce::{ReduceFamily, ReduceProblem};
        let b = crate::backend::cpu::CpuBackend::new().unwrap();
        let mut o = TuneOptions::for_backend("cpu", Tier::Exact);
        o.working_set = 0; // one copy
        o.time_cap = Duration::from_millis(1);
        let p = ReduceProblem {
            geometry: crate::Geometry::new(64, 256, 64, 2, 12, crate::Code::OneMad).unwrap(),
            scale: crate::ScaleDType::F16,
            act: crate::DType::Bf16,
            m: 1,
        };
        let v = ReduceFamily::default_variant(&p, Tier::Exact);
        let mut calls = 0usize;
        let (alone, after, detail) = bench_after::<ReduceFamily, _>(&b, &o, &p, v, 3, || {
            calls += 1;
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert!(alone.samples >= o.min_reps && after.samples >= o.min_reps);
        // Each sample a batch of launches, after at least 3 warm-up launches.
        assert!(calls >= after.samples * o.batch + 3, "{calls} calls");
        assert!(detail.contains("bit"), "{detail}");
        // A failing `before` fails the timing.
        let failed = bench_after::<ReduceFamily, _>(&b, &o, &p, v, 3, || {
            Err(crate::Error::backend("cpu", "before failed"))
        });
        assert!(failed.is_err());
    }

    fn stats(median: f64, p10: f64, p90: f64) -> Stats {
        Stats {
            median,
            p10,
            p90,
            samples: 10,
        }
    }

    /// The journal names the candidate in flight with the deadline of its step; a
    /// worker that died with one in flight leaves it crashed for the next; one the
    /// supervisor marks is timed out.
    #[test]
    fn the_journal_holds_each_steps_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        let j = Journal::open(&path).unwrap();
        assert_eq!(Journal::in_flight(&path), None);
        let before = now();
        j.begin("[k] a", Duration::from_secs(20)).unwrap();
        let (deadline, id) = Journal::in_flight(&path).unwrap();
        assert_eq!(id, "[k] a");
        assert!(
            (before + 20_000..=now() + 20_000).contains(&deadline),
            "{deadline}"
        );
        // A longer step (the timing) moves the deadline; the end clears it.
        j.begin("[k] a", Duration::from_secs(90)).unwrap();
        assert!(Journal::in_flight(&path).unwrap().0 >= before + 90_000);
        j.begin("[k] b", Duration::from_secs(1)).unwrap();
        let j = Journal::open(&path).unwrap(); // the worker died in b
        assert!(j.disqualified("[k] b").unwrap().contains("crashed"));
        assert_eq!(j.disqualified("[k] a"), None);
        j.begin("[k] c", Duration::ZERO).unwrap();
        Journal::mark_timed_out(&path, "[k] c").unwrap();
        let j = Journal::open(&path).unwrap();
        assert!(j.disqualified("[k] c").unwrap().contains("timed out"));
        assert_eq!(Journal::in_flight(&path), None);
    }

    /// The timing's allowance covers the warm-up, the time cap and one more round of
    /// launches at the verify launch's pace, plus the candidate timeout.
    #[test]
    fn the_timing_allowance_grows_with_the_launch() {
        let o = TuneOptions::for_backend("cpu", Tier::Exact);
        let fixed = o.warm_up + o.time_cap + o.candidate_timeout;
        assert_eq!(timing_allowance(&o, Duration::ZERO), fixed);
        let launch = Duration::from_millis(40);
        assert_eq!(
            timing_allowance(&o, launch),
            fixed + launch * (o.min_reps * o.batch + 3) as u32
        );
        // A timeout of any length is an allowance, not an overflow.
        let forever = TuneOptions {
            candidate_timeout: Duration::MAX,
            ..o
        };
        assert_eq!(timing_allowance(&forever, launch), Duration::MAX);
    }

    #[test]
    fn quantiles_are_interpolated() {
        let s = Stats::of((1..=11).rev().map(f64::from).collect());
        assert_eq!((s.p10, s.median, s.p90, s.samples), (2.0, 6.0, 10.0, 11));
        assert!((s.spread() - 8.0 / 6.0).abs() < 1e-12);
        // An even count: the median is the middle two's mean, not the upper one.
        let s = Stats::of((1..=10).map(f64::from).collect());
        assert_eq!((s.median, s.samples), (5.5, 10));
        assert!(
            (s.p10 - 1.9).abs() < 1e-12 && (s.p90 - 9.1).abs() < 1e-12,
            "{s:?}"
        );
        assert_eq!(Stats::of(vec![3.0, 1.0]).median, 2.0);
        assert!(Stats::of(Vec::new()).median.is_nan());
    }

    #[test]
    fn the_default_stays_unless_the_best_is_outside_its_spread() {
        // Best inside the default's spread (at or above its p10): the default stays.
        let timed = [(0, stats(10.0, 9.0, 11.0)), (1, stats(9.5, 9.4, 9.6))];
        assert_eq!(choose(0, &timed).unwrap().0, 0);
        // Best clearly faster: it wins.
        let timed = [(0, stats(10.0, 9.0, 11.0)), (1, stats(6.5, 6.4, 6.6))];
        assert_eq!(choose(0, &timed).unwrap().0, 1);
        // A noisy default shelters the best only within 10 % of its median.
        let timed = [
            (0, stats(300.0, 180.0, 310.0)),
            (1, stats(250.0, 248.0, 252.0)),
        ];
        assert_eq!(choose(0, &timed).unwrap().0, 1);
        let timed = [
            (0, stats(300.0, 180.0, 310.0)),
            (1, stats(295.0, 293.0, 297.0)),
        ];
        assert_eq!(choose(0, &timed).unwrap().0, 0);
        // No default measured: the fastest.
        let timed = [(1, stats(7.0, 6.9, 7.1)), (2, stats(6.0, 5.9, 6.1))];
        assert_eq!(choose(0, &timed).unwrap().0, 2);
        assert!(choose::<u32>(0, &[]).is_none());
    }

    #[test]
    fn warm_up_only_after_the_device_sat_idle() {
        let o = TuneOptions::for_backend("cuda", Tier::Exact);
        assert_eq!(warm_up_for(&o, None), o.warm_up);
        assert_eq!(warm_up_for(&o, Some(Duration::from_secs(5))), o.warm_up);
        assert_eq!(
            warm_up_for(&o, Some(Duration::from_millis(50))),
            Duration::ZERO
        );
    }

    #[test]
    fn timing_stops_when_stable_spent_or_hopeless() {
        let o = TuneOptions::for_backend("cuda", Tier::Fast);
        let t = Duration::from_millis(10);
        // First round (no previous median): goes on, unless past the cutoff.
        assert!(!round_ends_timing(&o, 10.0, f64::NAN, 10, t, None));
        assert!(!round_ends_timing(&o, 10.0, f64::NAN, 10, t, Some(13.0)));
        assert!(round_ends_timing(&o, 14.0, f64::NAN, 10, t, Some(13.0)));
        // Stable to 1 %, or samples or time spent.
        assert!(round_ends_timing(&o, 10.0, 10.05, 20, t, None));
        assert!(!round_ends_timing(&o, 10.0, 10.5, 20, t, None));
        assert!(round_ends_timing(&o, 10.0, 10.5, o.max_reps, t, None));
        assert!(round_ends_timing(&o, 10.0, 10.5, 20, o.time_cap * 2, None));
    }

    #[test]
    fn at_bound_names_edges_the_space_could_widen_past() {
        let v = |rows_per_group, rows_per_simd| Variant {
            repr: Representation::Inline,
            m_strategy: MStrategy::SharedDecode,
            rows_per_group,
            x_stage: XStage::Registers,
            tier: Tier::Exact,
            rows_per_simd,
            max_registers: 0,
            scalar_words: false,
            prefetch_words: false,
            stream_words: false,
            interleaved_x: false,
        };
        let space = [v(2, 1), v(4, 2), v(8, 4)];
        // The kernel takes rows_per_simd up to 8 and rows_per_group down to 2.
        let valid = |c: &Variant| c.rows_per_simd <= 8 && c.rows_per_group >= 2;
        assert_eq!(
            at_bound(&v(4, 4), &space, valid),
            vec!["rows_per_simd = 4 is the largest offered (8 also runs)".to_string()]
        );
        // rows_per_group = 2 is the smallest offered, but 1 does not run: nothing to widen.
        assert!(at_bound(&v(2, 2), &space, valid).is_empty());
        assert_eq!(
            at_bound(&v(2, 2), &space, |_: &Variant| true),
            vec!["rows_per_group = 2 is the smallest offered (1 also runs)".to_string()]
        );
        assert!(at_bound(&v(4, 2), &space, |_: &Variant| true).is_empty());
        // Only rows_per_simd is at the edge: rows_per_simd = 8 does not run either.
        assert!(at_bound(&v(4, 4), &space, |c: &Variant| c.rows_per_simd <= 4).is_empty());
    }

    #[test]
    fn at_bound_counts_a_field_left_at_its_default_as_offered() {
        use crate::families::mma::MmaVariant;
        // k_split = 1 is not written (serde skips it), yet offered: 2 is no lower edge.
        let unsplit = MmaVariant::default();
        let split = |k_split| MmaVariant { k_split, ..unsplit };
        let space = [unsplit, split(2), split(4)];
        assert!(at_bound(&split(2), &space, |_: &MmaVariant| true).is_empty());
        assert_eq!(
            at_bound(&split(4), &space, |_: &MmaVariant| true),
            vec!["k_split = 4 is the largest offered (8 also runs)".to_string()]
        );
    }
}
