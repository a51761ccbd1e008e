//! Tuning: typed keys, the checked-in tables of `tuning/`, the runtime [`Selector`], and
//! the measuring harness ([`harness`]) behind `cargo xtask tune`. Generic over
//! [`Family`]: a downstream family is tuned the same way, and selected by a [`Selector`]
//! its crate adds its tables to ([`Selector::add_table`]; the process-wide selector's
//! files hold this crate's families only, [`check_table_frame`]).

pub mod harness;
pub mod prior;
pub mod table;

pub use crate::key::{Bucket, TuneKey};
pub use table::{DeviceRecord, Entry, StatsRecord, Table};

use crate::error::{Error, Result};
use crate::family::Family;
use crate::kernel::{Backend, Dialect, KernelSpec, Limits};
use crate::numerics::Tier;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a selection came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// The device's own table, exact key; `shape` is the `RxC` the entry was measured at
    /// (a bucket holds an entry per tuned shape).
    Table {
        /// The table's name (`embedded:nvidia-h200.toml`, or its path).
        table: String,
        /// The entry's key.
        key: String,
        /// The `RxC` the entry was measured at.
        shape: String,
    },
    /// An entry standing in for the key's own: another bucket's, another device's (a
    /// family member), another M's, or the runner-up where the winner does not fit; `why`
    /// says which.
    Nearest {
        /// The table's name.
        table: String,
        /// The entry's key (another bucket's, or another device's).
        key: String,
        /// The `RxC` the entry was measured at.
        shape: String,
        /// Why this entry stands in (`nearest bucket to ...`, a fallback to the runner-up).
        why: String,
    },
    /// No table had anything: the built-in default.
    Default {
        /// Why no table entry was taken.
        why: String,
    },
    /// No measured entry for the key in the device's own tables: a prior rule
    /// (`tuning/priors/`), with its source.
    Prior {
        /// The prior file.
        file: String,
        /// The rule's name.
        rule: String,
        /// The rule's reason.
        why: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Table { table, key, shape } => {
                write!(f, "table {table}, entry [{key}] measured at {shape}")
            }
            Source::Nearest {
                table,
                key,
                shape,
                why,
            } => {
                write!(
                    f,
                    "table {table}, entry [{key}] measured at {shape} ({why})"
                )
            }
            Source::Default { why } => write!(f, "built-in default ({why})"),
            Source::Prior { file, rule, why } => {
                write!(f, "prior {file}, rule {rule} (no measured entry; {why})")
            }
        }
    }
}

/// A chosen variant and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection<V> {
    /// The variant to run.
    pub variant: V,
    /// Where it came from (a table entry, a prior rule or the default, and why).
    pub source: Source,
    /// The table entry's runner-up, which [`fit`] takes where the winner does not fit
    /// the problem (an interleaved-x winner at columns that are not whole 1024-column
    /// slices, say) before it falls back to the default.
    pub runner_up: Option<V>,
}

/// Tables embedded at build time from `tuning/*.toml`.
const EMBEDDED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/embedded_tables.rs"));

/// Reads tuning tables and answers "which variant for this problem on this device".
#[derive(Clone)]
pub struct Selector {
    tables: Vec<(String, Table)>,
    /// Tables that were ignored, and why (printed by the CLI, never fatal).
    pub warnings: Vec<String>,
    /// Selections made over these tables, emptied when a table is added.
    memo: Memo,
}

/// Selections made before, by family, backend, device, tier and problem (its `Debug`
/// form, which must show everything a selection reads of it: [`Family::Problem`]). A
/// selection scans the tables' entries and names its source (about 4 us over the H200
/// table's thousand entries), a facade call's fixed cost on the host; a memoized one
/// about half a microsecond. Bounded: emptied when full (a tuner's sweep of shapes).
#[derive(Default)]
struct Memo(std::sync::RwLock<std::collections::HashMap<MemoKey, MemoValue>>);

type MemoKey = (std::any::TypeId, String, String, Tier, String);
type MemoValue = Box<dyn std::any::Any + Send + Sync>;

impl Memo {
    const MAX: usize = 4096;

    /// The memoized selection of `id`, if any (threads read at once).
    fn get<V: Clone + 'static>(&self, id: &MemoKey) -> Option<Selection<V>> {
        let memo = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memo.get(id)?.downcast_ref::<Selection<V>>().cloned()
    }

    fn insert<V: Send + Sync + 'static>(&self, id: MemoKey, s: Selection<V>) {
        let mut memo = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if memo.len() >= Memo::MAX {
            memo.clear();
        }
        memo.insert(id, Box::new(s));
    }

    fn clear(&self) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

/// A clone's tables are the same, but it may add others: it starts its own memo.
impl Clone for Memo {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

/// Hash of everything family `F` compiles on `dialect`: the complete units (prelude,
/// entry point, header, body) of every candidate of every problem of its catalog, both
/// tiers. Computed once per process and family.
pub fn source_hash<F: Family>(dialect: Dialect) -> String {
    catalog_hash::<F>(dialect, None).unwrap_or_default()
}

/// The source hash a table entry for problem `p` records: that of the catalog problems
/// of `p`'s [`Family::source_slice`] (its codes), or of the whole family where the
/// family has no slices or the catalog has no problem of that slice (never a hash of
/// nothing, which no change would move). An entry whose hash differs from today's is
/// stale.
pub fn source_hash_of<F: Family>(dialect: Dialect, p: &F::Problem) -> String {
    F::source_slice(p)
        .and_then(|slice| catalog_hash::<F>(dialect, Some(&slice)))
        .unwrap_or_else(|| source_hash::<F>(dialect))
}

/// The hash of the catalog units of `slice` (every problem for `None`); `None` when no
/// catalog problem is of that slice. Memoized per family, dialect and slice.
fn catalog_hash<F: Family>(dialect: Dialect, slice: Option<&str>) -> Option<String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Memo = HashMap<(std::any::TypeId, Dialect, Option<String>), Option<String>>;
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    let id = (
        std::any::TypeId::of::<F>(),
        dialect,
        slice.map(str::to_string),
    );
    if let Some(h) = memo
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&id)
    {
        return h.clone();
    }
    let mut h = crate::kernel::Fnv1a::default();
    let mut any = false;
    for p in F::catalog(false) {
        if slice.is_some() && F::source_slice(&p).as_deref() != slice {
            continue;
        }
        any = true;
        for tier in [Tier::Exact, Tier::Fast] {
            for v in F::candidates(&p, tier, false) {
                hash_unit::<F>(&mut h, &p, v, dialect);
            }
        }
    }
    let hex = any.then(|| format!("{:016x}", std::hash::Hasher::finish(&h)));
    memo.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(id, hex.clone());
    hex
}

/// Add the complete unit of `v` at `p` on `dialect` to `h` (a render error's text in its
/// place); nothing for a variant that does not fit `p`.
fn hash_unit<F: Family>(
    h: &mut crate::kernel::Fnv1a,
    p: &F::Problem,
    v: F::Variant,
    dialect: Dialect,
) {
    let k = F::kernel(p, v);
    if k.validate().is_ok() {
        let unit = k.unit(dialect).unwrap_or_else(|e| e.to_string());
        std::hash::Hasher::write(h, unit.as_bytes());
    }
}

/// Hash of the candidate space a problem is tuned over, as `dialect` compiles it: the
/// built-in default and [`Family::candidates`] (before any device's limits), in order,
/// each with its complete unit at this problem. The family's [`source_hash`] covers its
/// catalog's small problems only, so a candidate offered only at a tuned shape (a split
/// that fits 17408 columns, say), or a template branch only such shapes take (the M = 8
/// register budget's loads), leaves it unchanged; an entry records this hash too, and one
/// measured over other candidates or other units is stale for `cargo xtask tune` and the
/// `tables_current` test though its sources are current.
pub fn space_hash<F: Family>(p: &F::Problem, tier: Tier, quick: bool, dialect: Dialect) -> String {
    let mut h = crate::kernel::Fnv1a::default();
    let default = F::default_variant(p, tier);
    for v in std::iter::once(default).chain(F::candidates(p, tier, quick)) {
        std::hash::Hasher::write(&mut h, format!("{v:?}\n").as_bytes());
        hash_unit::<F>(&mut h, p, v, dialect);
    }
    format!("{:016x}", std::hash::Hasher::finish(&h))
}

/// A table held by one tuning run: an advisory lock (`flock`), released when this is
/// dropped or the process ends, so two runs writing one table (which would each save
/// theirs over the other's after every key) cannot overlap. The lock file is
/// `.<table name>.lock` beside the table (its target's, where the table is a symlink),
/// so every run that can write the table meets it, whatever its user or cache directory;
/// it stays there, empty, like cargo's, and git ignores it.
#[derive(Debug)]
pub struct TableLock {
    _file: std::fs::File,
}

impl TableLock {
    /// Hold the table at `path` (which need not exist yet); an error naming it when
    /// another run holds it.
    pub fn take(path: &Path) -> Result<TableLock> {
        let abs = std::path::absolute(path).map_err(|e| Error::file(path, e))?;
        // One lock for one table however it is named: the file resolved where it exists
        // (a symlink's target is what `io::write_atomic` replaces), else its directory.
        let abs = match (std::fs::canonicalize(&abs), abs.parent(), abs.file_name()) {
            (Ok(file), _, _) => file,
            (Err(_), Some(dir), Some(name)) => std::fs::canonicalize(dir)
                .map(|d| d.join(name))
                .unwrap_or(abs),
            _ => abs,
        };
        let (Some(dir), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(Error::file(path, "not a file's path"));
        };
        let mut lock_name = std::ffi::OsString::from(".");
        lock_name.push(name);
        lock_name.push(".lock");
        let lock = dir.join(lock_name);
        let mut open = std::fs::OpenOptions::new();
        open.create(true).truncate(false).write(true);
        // Never through a symlink planted at the lock's name (nothing is written to the
        // file, but it is opened for writing).
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, libc::O_NOFOLLOW);
        let file = open
            .open(&lock)
            .map_err(|e| Error::file(&lock, format!("cannot open the table's lock: {e}")))?;
        match file.try_lock() {
            Ok(()) => Ok(TableLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::file(
                path,
                format!(
                    "another tuning run is writing this table (it holds {}): wait for it \
                     to end, or give another --out",
                    lock.display()
                ),
            )),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::file(&lock, format!("cannot lock the table: {e}")))
            }
        }
    }
}

/// The block length T every table entry is measured at (`cargo xtask tune`): the keys
/// carry no T, so a problem of another T takes the choice made at this one where it fits
/// ([`fit`], as every choice is checked; only its speed may differ).
pub const TUNED_T: usize = 256;

/// The largest tuning table read (the H200's, every key of both tiers, is about 6 MB): a
/// larger `*.toml` in a tables directory is ignored with a warning, unread.
pub const MAX_TABLE_BYTES: u64 = 64 << 20;

/// The table in the file at `path` as the selector takes one: a regular file of at most
/// [`MAX_TABLE_BYTES`], parsed, passing [`check_table`]; else an error naming the file.
pub fn read_table(path: &Path) -> Result<Table> {
    let text = crate::io::read_text(path, MAX_TABLE_BYTES)?;
    Table::parse(&text)
        .and_then(|t| check_table(&t).map(|()| t))
        .map_err(|e| Error::file(path, e))
}

/// Environment variable naming a directory of `*.toml` tables layered over the embedded
/// ones and `tuning/local/` (their entry is taken on a tie: the same nearest bucket and
/// measured shape; [`Selector::add_table`]).
pub const TUNING_DIR_ENV: &str = "TRELLIS_TUNING_DIR";

/// Where `cargo xtask tune` writes the tables it measures on this machine by default:
/// `tuning/local/` of the checkout. Git ignores it and the build does not embed it (so a
/// tune run never triggers a rebuild); the selector reads it at run time. To ship a
/// table, move it to `tuning/` and commit it.
pub fn local_tables_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tuning")
        .join("local")
}

/// Environment variable that, set to `0`, leaves this checkout's `tuning/local/` unread
/// (what the shipped tables alone select, on a machine that has tuned; the CLI's tests
/// set it). Unset, empty or `1`: read.
pub const LOCAL_TABLES_ENV: &str = "TRELLIS_LOCAL_TABLES";

impl Selector {
    /// Embedded tables, with this checkout's own tables ([`local_tables_dir`], when it
    /// exists and [`LOCAL_TABLES_ENV`] is not `0`) and then `$TRELLIS_TUNING_DIR/*.toml`
    /// layered over them per device.
    pub fn from_env() -> Self {
        Selector::layered(
            &local_tables_dir(),
            std::env::var_os(LOCAL_TABLES_ENV),
            std::env::var_os(TUNING_DIR_ENV),
        )
    }

    /// [`Selector::from_env`] over a given local directory and variables' values.
    fn layered(
        local: &Path,
        local_var: Option<std::ffi::OsString>,
        tuning_dir: Option<std::ffi::OsString>,
    ) -> Self {
        let mut s = Selector::shipped();
        let read_local = match local_var {
            None => true,
            Some(v) if v.is_empty() || v == "1" => true,
            Some(v) if v == "0" => false,
            Some(v) => {
                s.warn(format!(
                    "${LOCAL_TABLES_ENV} = {v:?}: expected 0 (leave tuning/local/ unread) or 1; reading it"
                ));
                true
            }
        };
        if read_local && local.is_dir() {
            s.add_dir(local);
        }
        // Set but empty reads as unset, as `$TRELLIS_CACHE_DIR` does.
        if let Some(dir) = tuning_dir.filter(|d| !d.is_empty()) {
            s.add_dir(Path::new(&dir));
        }
        s
    }

    /// The tables embedded at build time alone (`embedded:<file>`), without this
    /// checkout's or the environment's.
    pub fn shipped() -> Self {
        let mut s = Selector::empty();
        for (name, text) in EMBEDDED {
            s.add_text(&format!("embedded:{name}"), text);
        }
        s
    }

    /// No tables: every selection is the built-in default.
    pub fn empty() -> Self {
        Selector {
            tables: Vec::new(),
            warnings: Vec::new(),
            memo: Memo::default(),
        }
    }

    /// The tables embedded at build time, by file name.
    pub fn embedded() -> &'static [(&'static str, &'static str)] {
        EMBEDDED
    }

    /// Add every `*.toml` of a directory, in name order (each layers over the ones before:
    /// [`Selector::add_table`]).
    pub fn add_dir(&mut self, dir: &Path) {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect(),
            Err(e) => {
                self.warn(format!(
                    "{}: cannot read tuning directory: {e}",
                    dir.display()
                ));
                return;
            }
        };
        paths.sort();
        for p in paths {
            match read_table(&p) {
                Ok(t) => self.add_table(&p.display().to_string(), t),
                Err(Error::File { reason, .. }) => {
                    self.warn(format!("{}: ignored: {reason}", p.display()))
                }
                Err(e) => self.warn(format!("{}: ignored: {e}", p.display())),
            }
        }
    }

    /// Record a warning on one line (a TOML or serde error spans several: printed as they
    /// are, a caller's one-line stderr would break).
    fn warn(&mut self, w: String) {
        self.warnings.push(crate::error::one_line(&w));
    }

    /// Parse and add one table; a bad table (syntax, unknown fields, a key or winner
    /// a registered family cannot read) is ignored with a warning.
    pub fn add_text(&mut self, name: &str, text: &str) {
        match Table::parse(text).and_then(|t| check_table(&t).map(|()| t)) {
            Err(e) => self.warn(format!("{name}: ignored: {e}")),
            Ok(t) => self.add_table(name, t),
        }
    }

    /// Add a parsed table (API override). It layers over the tables added before it for
    /// the same device: where both hold an entry for a key at the same bucket and
    /// shape, this one's is taken; a key it lacks falls through to them, so a table
    /// tuned over part of the space keeps the rest of the shipped choices.
    pub fn add_table(&mut self, name: &str, table: Table) {
        self.tables.push((name.to_string(), table));
        self.memo.clear();
    }

    /// The tables of `device` of `backend`, latest added first.
    fn tables_of<'s>(&'s self, backend: &'s str, device: &'s str) -> Vec<&'s (String, Table)> {
        self.tables
            .iter()
            .rev()
            .filter(|(_, t)| t.device.backend == backend && t.device.id == device)
            .collect()
    }

    /// The family members of `device`: the other devices of `backend` whose ids share at
    /// least 3 leading characters with it, nearest (longest shared prefix) first, the
    /// latest added first on a tie. A loose rule on purpose: every `nvidia-*` GPU is a
    /// member of the H200's family (a tuned choice, fitted to the device's own limits by
    /// [`fit`], beats the untuned default there too), and a `cpu-*` id of another CPU's.
    fn family_members(&self, backend: &str, device: &str) -> Vec<&str> {
        let mut members: Vec<(usize, &str)> = Vec::new();
        for (_, t) in self.tables.iter().rev() {
            let id = t.device.id.as_str();
            if t.device.backend != backend || id == device || members.iter().any(|m| m.1 == id) {
                continue;
            }
            let n = common_prefix(id, device);
            if n >= 3 {
                members.push((n, id));
            }
        }
        members.sort_by_key(|m| std::cmp::Reverse(m.0));
        members.into_iter().map(|m| m.1).collect()
    }

    /// The choice for problem `p` of family `F` in `tier` on `device` of `backend`:
    /// the device's own tables' entry for the key at the nearest bucket (and, in it, the
    /// nearest measured shape; the latest table on a tie), else a prior rule for the
    /// device, else the entry of the nearest family member that has one, the same way;
    /// else, where no table has the problem's M, the entry of the nearest larger M tuned
    /// (or, where none is larger, the nearest smaller), the device's own tables first,
    /// then its members'; else the default.
    pub fn select<F: Family>(
        &self,
        backend: &str,
        device: &str,
        p: &F::Problem,
        tier: Tier,
    ) -> Selection<F::Variant> {
        let id = (
            std::any::TypeId::of::<F>(),
            backend.to_string(),
            device.to_string(),
            tier,
            format!("{p:?}"),
        );
        if let Some(s) = self.memo.get::<F::Variant>(&id) {
            return s;
        }
        let s = self.select_from_tables::<F>(backend, device, p, tier);
        self.memo.insert(id, s.clone());
        s
    }

    /// [`Selector::select`] made from the tables, not memoized.
    fn select_from_tables<F: Family>(
        &self,
        backend: &str,
        device: &str,
        p: &F::Problem,
        tier: Tier,
    ) -> Selection<F::Variant> {
        let key = F::key(p, tier);
        let default = |why: String| Selection {
            variant: F::default_variant(p, tier),
            source: Source::Default { why },
            runner_up: None,
        };
        let own = self.tables_of(backend, device);
        let mut own_miss = None;
        // Where the entry is another M's: the M it was tuned at.
        let mut other_m = None;
        let ((name, t), k, e) = match nearest_entry::<F>(&own, &key, p) {
            Ok(hit) => hit,
            Err(miss) => {
                if let Some(s) = prior_for::<F>(backend, device, p, tier) {
                    return s;
                }
                // The nearest member with an entry for the key stands in: a nearer
                // member's partial table leaves the keys it lacks to the next.
                let members = self.family_members(backend, device);
                let mut first_miss = None;
                // The nearest member's miss with stale entries for the key (the nearest
                // miss may have none where a farther member's are stale).
                let mut stale_miss = None;
                let hit = members.iter().find_map(|m| {
                    nearest_entry::<F>(&self.tables_of(backend, m), &key, p)
                        .map_err(|e| {
                            if e.stale > 0 && stale_miss.is_none() {
                                stale_miss = Some(e.clone());
                            }
                            first_miss.get_or_insert(e)
                        })
                        .ok()
                });
                // No table has this M (3, say, between the tuned 2 and 4): the nearest M
                // tuned, the device's own tables first, then its members'.
                let hit = hit.or_else(|| {
                    let near = nearest_m_entry::<F>(&own, p, tier).or_else(|| {
                        members.iter().find_map(|m| {
                            nearest_m_entry::<F>(&self.tables_of(backend, m), p, tier)
                        })
                    });
                    near.map(|(hit, m)| {
                        other_m = Some(m);
                        hit
                    })
                });
                match (hit, first_miss) {
                    (Some(hit), _) => {
                        // Where the key's own M has entries, stale ones, that says why
                        // another M stands in: the device's own, else a member's.
                        own_miss = if !own.is_empty() && (other_m.is_none() || miss.stale > 0) {
                            Some(("its own", miss))
                        } else {
                            stale_miss
                                .filter(|_| other_m.is_some())
                                .map(|t| ("a member's", t))
                        };
                        hit
                    }
                    (None, None) if own.is_empty() => {
                        return default(format!("no {backend} table for device {device}"))
                    }
                    // The device's own tables say why first: a member's only stands in.
                    (None, Some(theirs)) if own.is_empty() => {
                        return default(theirs.why(&key, F::NAME))
                    }
                    (None, _) => return default(miss.why(&key, F::NAME)),
                }
            }
        };
        let variant = match e.winner::<F::Variant>() {
            Ok(v) if F::tier(&v) == tier => v,
            // Tables of registered families are checked when added; a downstream
            // family's are not, so the tier is checked here too.
            Ok(v) => {
                return default(format!(
                    "table {name}, entry [{k}]: its winner's tier is {}, the key's {tier}",
                    F::tier(&v)
                ))
            }
            Err(err) => return default(format!("table {name}, entry [{k}]: {err}")),
        };
        let measured_at = e.shape.clone();
        // Each way the entry stands in for the key is named (another device of the
        // family, another bucket, or both).
        let why: Vec<String> = [
            (t.device.id != device).then(|| format!("nearest device {} for {device}", t.device.id)),
            other_m.map(|m| match &own_miss {
                Some(_) => format!("nearest tuned M = {m}"),
                None => format!("nearest tuned M = {m} (no table has this M)"),
            }),
            own_miss.map(|(whose, m)| format!("{whose}: {}", m.why(&key, F::NAME))),
            (k.bucket != key.bucket).then(|| format!("nearest bucket to {}", key.bucket)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let source = if why.is_empty() {
            Source::Table {
                table: name.clone(),
                key: k.to_string(),
                shape: measured_at,
            }
        } else {
            Source::Nearest {
                table: name.clone(),
                key: k.to_string(),
                shape: measured_at,
                why: why.join(", "),
            }
        };
        let runner_up = e
            .runner_up::<F::Variant>()
            .ok()
            .flatten()
            .filter(|v| F::tier(v) == tier);
        Selection {
            variant,
            source,
            runner_up,
        }
    }

    /// Every table, by name.
    pub fn tables(&self) -> impl Iterator<Item = (&str, &Table)> {
        self.tables.iter().map(|(n, t)| (n.as_str(), t))
    }
}

/// How far an entry's measured shape (`RxC`) is from `(rows, cols)`, in powers of two
/// (infinite for a shape that does not parse: such an entry is the last choice).
fn shape_distance(entry_shape: &str, (rows, cols): (usize, usize)) -> f64 {
    let log_ratio = |a: &str, b: usize| -> Option<f64> {
        let a: usize = a.parse().ok().filter(|&a| a > 0)?;
        Some((a as f64 / b.max(1) as f64).log2().abs())
    };
    entry_shape
        .split_once('x')
        .and_then(|(r, c)| Some(log_ratio(r, rows)? + log_ratio(c, cols)?))
        .unwrap_or(f64::INFINITY)
}

/// A table entry a selection takes: its table (name and table), key and entry.
type Hit<'t> = (&'t (String, Table), TuneKey, &'t Entry);

/// Why a layer of tables had no current entry for a key.
#[derive(Clone)]
struct Miss {
    tables: Vec<String>,
    stale: usize,
}

impl Miss {
    fn why(&self, key: &TuneKey, family: &str) -> String {
        let tables = self.tables.join(", ");
        if self.stale > 0 {
            format!(
                "table {tables}: {} entries for [{key}] are stale ({family} sources changed since; re-run `cargo xtask tune`)",
                self.stale
            )
        } else {
            format!("table {tables} has no entry for [{key}]")
        }
    }
}

/// The current entry of `tables` (latest first) for `key` at the nearest bucket, and in
/// it the one measured at the shape nearest `p`'s (a bucket holds several where several
/// shapes were tuned, the presets' 17408 and 14336 rows, and each shape's own entry is
/// its best choice); on a tie the latest table's, then the first in it.
fn nearest_entry<'t, F: Family>(
    tables: &[&'t (String, Table)],
    key: &TuneKey,
    p: &F::Problem,
) -> std::result::Result<Hit<'t>, Miss> {
    let (mut fresh, mut stale) = (Vec::new(), 0usize);
    for named in tables {
        let current = named
            .1
            .device
            .dialect()
            .map(|d| source_hash_of::<F>(d, p))
            .unwrap_or_default();
        for e in &named.1.entries {
            // The fields' strings first: parsing every entry's key (allocating) made a
            // selection cost 48 us at the H200 table's 1012 entries, more than the kernel.
            if e.family != key.family || e.key != key.fields {
                continue;
            }
            let Some(k) = e.key().ok().filter(|k| k.same_but_bucket(key)) else {
                continue;
            };
            if e.source_hash == current {
                fresh.push((*named, k, e));
            } else {
                stale += 1;
            }
        }
    }
    // `min_by` keeps the first of equals: the tables come latest first.
    let shape = F::shape(p);
    fresh
        .into_iter()
        .min_by(|(_, a, ea), (_, b, eb)| {
            let da = a.bucket.log_distance(&key.bucket);
            let db = b.bucket.log_distance(&key.bucket);
            da.cmp(&db)
                .then(shape_distance(&ea.shape, shape).total_cmp(&shape_distance(&eb.shape, shape)))
        })
        .ok_or_else(|| Miss {
            tables: tables.iter().map(|(n, _)| n.clone()).collect(),
            stale,
        })
}

/// The entry in `tables` of the nearest larger M than `p`'s that they hold, or where they
/// hold no larger one the nearest smaller, and that M: what stands in where no table has
/// `p`'s own M, if its winner or runner-up is valid at `p` (else nothing: the default).
/// Larger first: a kernel tuned for more samples takes fewer with the structure it was
/// tuned with, while one tuned for fewer may not extend (measured: fast M 10 and 12 on
/// M 8's winners ran up to 28 % slower than the built-in default, M 12 and 14 on M 16's up
/// to 27 % faster). Every M the family takes is tried ([`Family::spec`] names `p`'s,
/// [`Family::with_m`] the others).
fn nearest_m_entry<'t, F: Family>(
    tables: &[&'t (String, Table)],
    p: &F::Problem,
    tier: Tier,
) -> Option<(Hit<'t>, u32)> {
    let m = F::spec(p)?.m;
    let tuned = |n: u32| {
        let q = F::with_m(p, n)?;
        let hit = nearest_entry::<F>(tables, &F::key(&q, tier), &q).ok()?;
        Some((hit, n))
    };
    let (hit, n) = (m + 1..=64)
        .find_map(tuned)
        .or_else(|| (1..m).rev().find_map(tuned))?;
    // A winner and runner-up both invalid at `p`'s own M (an opt-in of shared memory that
    // M no longer needs, say) leave the key to the default.
    let usable = |v: Option<F::Variant>| v.is_some_and(|v| F::kernel(p, v).validate().is_ok());
    let e = hit.2;
    (usable(e.winner().ok()) || usable(e.runner_up().ok().flatten())).then_some((hit, n))
}

/// The prior rule for a problem its device's own tables have no current entry for, if one applies
/// and sets fields the family's variant has.
fn prior_for<F: Family>(
    backend: &str,
    device: &str,
    p: &F::Problem,
    tier: Tier,
) -> Option<Selection<F::Variant>> {
    let spec = F::spec(p)?;
    let (file, rule) = prior::lookup(backend, device, &[F::NAME, F::label(p)], &spec)?;
    let default = toml::Table::try_from(F::default_variant(p, tier)).ok()?;
    let variant: F::Variant = toml::Value::Table(rule.apply(default)).try_into().ok()?;
    Some(Selection {
        variant,
        source: Source::Prior {
            file: file.to_string(),
            rule: rule.name.clone(),
            why: rule.why.clone(),
        },
        runner_up: None,
    })
}

/// What the selector asks of a table before it reads one (a table failing it is ignored
/// with a warning): [`check_table_frame`], and every entry of a registered family must
/// have a key it writes and name a winner (and runner-up) it can read, of the entry's
/// own tier: an exact key never hands out a fast variant.
pub fn check_table(t: &Table) -> Result<()> {
    check_table_frame(t)?;
    struct Check<'a>(&'a Table, Result<()>);
    impl crate::family::FamilyVisitor for Check<'_> {
        fn visit<F: Family>(&mut self) {
            for (i, e) in self.0.entries.iter().enumerate() {
                if self.1.is_ok() && crate::families::is::<F>(&e.family) {
                    self.1 = check_entry::<F>(i, e);
                }
            }
        }
    }
    let mut c = Check(t, Ok(()));
    crate::families::for_each(&mut c);
    c.1
}

/// What of [`check_table`] is the table's as a whole (`cargo xtask tune` refuses to resume
/// a table failing it; an entry failing the rest it measures again): the table names its
/// backend's own dialect (its hashes are that dialect's), and every entry a family of
/// this crate.
pub fn check_table_frame(t: &Table) -> Result<()> {
    let dialect = t.device.dialect()?;
    if let Some(own) = crate::backend::dialect_of(&t.device.backend) {
        if own != dialect {
            return Err(Error::invalid(
                "device.dialect",
                &t.device.dialect,
                format!(
                    "backend {} compiles the {} dialect",
                    t.device.backend,
                    own.name()
                ),
            ));
        }
    }
    let names = crate::families::names();
    match t
        .entries
        .iter()
        .position(|e| !names.contains(&e.family.as_str()))
    {
        // A downstream crate adds tables of its own families with `add_table`.
        Some(i) => Err(Error::invalid(
            format!("entry[{i}].family"),
            &t.entries[i].family,
            format!("not a family of this crate ({})", names.join(", ")),
        )),
        None => Ok(()),
    }
}

/// Entry `i`'s key is one `F` writes, and its winner and runner-up parse as `F`'s
/// variants of the entry's tier.
pub fn check_entry<F: Family>(i: usize, e: &Entry) -> Result<()> {
    F::check_key_fields(&e.key)
        .map_err(|err| Error::invalid(format!("entry[{i}].key"), &e.key, err.to_string()))?;
    let of_tier = |what: &str, v: F::Variant| {
        let tier = F::tier(&v);
        if tier.name() == e.tier {
            Ok(())
        } else {
            Err(Error::invalid(
                format!("entry[{i}].{what}.tier"),
                tier,
                format!("the entry is keyed {}", e.tier),
            ))
        }
    };
    let winner = e
        .winner::<F::Variant>()
        .map_err(|err| Error::invalid(format!("entry[{i}].winner"), "variant", err.to_string()))?;
    of_tier("winner", winner)?;
    match e.runner_up::<F::Variant>() {
        Ok(Some(v)) => of_tier("runner_up", v),
        Ok(None) => Ok(()),
        Err(err) => Err(Error::invalid(
            format!("entry[{i}].runner_up"),
            "variant",
            err.to_string(),
        )),
    }
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// The process-wide selector (embedded tables, then this checkout's `tuning/local/` and
/// `$TRELLIS_TUNING_DIR`), printing
/// ignored-table warnings to stderr once.
pub fn global() -> &'static Selector {
    use std::sync::OnceLock;
    static SELECTOR: OnceLock<Selector> = OnceLock::new();
    SELECTOR.get_or_init(|| {
        let s = Selector::from_env();
        for w in &s.warnings {
            eprintln!("warning: {w}");
        }
        s
    })
}

/// Select the variant of `tier` for problem `p` on backend `b`, fitted to its limits.
pub fn select_for<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    tier: Tier,
) -> Selection<F::Variant> {
    let s = global().select::<F>(b.name(), &b.device_id(), p, tier);
    fit::<F>(s, p, tier, &b.limits())
}

/// A table entry is chosen by bucket (and measured on one device), so its variant may
/// not fit this exact shape or this device's limits (x staged for many more columns
/// than were measured; Metal's 32 KB of threadgroup memory). Such a choice gives way to
/// the entry's runner-up where that fits, else to the built-in default, and the source
/// says why.
pub fn fit<F: Family>(
    s: Selection<F::Variant>,
    p: &F::Problem,
    tier: Tier,
    limits: &Limits,
) -> Selection<F::Variant> {
    let e = match crate::family::fits::<F>(p, s.variant, limits) {
        Ok(()) => return s,
        Err(e) => e,
    };
    let not_fit = format!("`{}`, which does not fit this shape: {e}", s.variant);
    // The entry's runner-up, where it fits, is the next best measured choice.
    if let (
        Some(ru),
        Source::Table { table, key, shape }
        | Source::Nearest {
            table, key, shape, ..
        },
    ) = (s.runner_up, &s.source)
    {
        if crate::family::fits::<F>(p, ru, limits).is_ok() {
            return Selection {
                variant: ru,
                source: Source::Nearest {
                    table: table.clone(),
                    key: key.clone(),
                    shape: shape.clone(),
                    why: format!("its runner-up: the winner is {not_fit}"),
                },
                runner_up: None,
            };
        }
    }
    Selection {
        variant: F::default_variant(p, tier),
        source: Source::Default {
            why: format!("{} chose {not_fit}", s.source),
        },
        runner_up: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run holds a table at a time, however its path is spelled; other tables and a
    /// released one are free.
    #[test]
    fn a_table_is_held_by_one_run() {
        let tmp = tempfile::tempdir().unwrap();
        let table = tmp.path().join("t.toml");
        let held = TableLock::take(&table).unwrap();
        for again in [table.clone(), tmp.path().join(".").join("t.toml")] {
            let e = TableLock::take(&again).unwrap_err().to_string();
            assert!(
                e.contains(&*again.to_string_lossy())
                    && e.contains("another tuning run is writing this table"),
                "{e}"
            );
        }
        // A symlink to the table names the same table (its target is what is written).
        std::fs::write(&table, "").unwrap();
        let link = tmp.path().join("link.toml");
        std::os::unix::fs::symlink(&table, &link).unwrap();
        let e = TableLock::take(&link).unwrap_err().to_string();
        assert!(
            e.contains("another tuning run is writing this table"),
            "{e}"
        );
        let other = TableLock::take(&tmp.path().join("u.toml")).unwrap();
        // The lock is beside the table (so runs of other users or cache directories meet
        // it), and a symlink planted at its name is not followed.
        assert!(tmp.path().join(".t.toml.lock").is_file());
        let planted = tmp.path().join(".v.toml.lock");
        std::os::unix::fs::symlink(tmp.path().join("victim"), &planted).unwrap();
        let e = TableLock::take(&tmp.path().join("v.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot open the table's lock"), "{e}");
        assert!(!tmp.path().join("victim").exists());
        drop(held);
        let again = TableLock::take(&table).unwrap();
        drop((other, again));
    }

    /// `TRELLIS_LOCAL_TABLES=0` leaves the local directory unread; unset, empty or `1`
    /// read it; another value reads it with a warning naming the variable and value. (A
    /// table the selector cannot parse there shows whether it was read: it is ignored
    /// with a warning naming its file.)
    #[test]
    fn the_local_tables_switch() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("bad.toml"), "not a table").unwrap();
        let read = |s: &Selector| s.warnings.iter().any(|w| w.contains("bad.toml: ignored"));
        let with = |v: Option<&str>| Selector::layered(tmp.path(), v.map(Into::into), None);
        for v in [None, Some(""), Some("1")] {
            let s = with(v);
            assert!(read(&s) && s.warnings.len() == 1, "{v:?}: {:?}", s.warnings);
        }
        let s = with(Some("0"));
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let s = with(Some("off"));
        assert!(
            read(&s)
                && s.warnings
                    .iter()
                    .any(|w| w.contains("$TRELLIS_LOCAL_TABLES = \"off\": expected 0")),
            "{:?}",
            s.warnings
        );
    }
}
