//! Tuning: typed keys, the checked-in tables of `tuning/`, the runtime [`Selector`], and
//! the measuring harness ([`harness`]) behind `cargo xtask tune`.

pub mod harness;
pub mod prior;
pub mod table;

pub use table::{Entry, Table, VariantRecord};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::kernel::Backend;
use crate::kernels::{Tier, Variant};
use crate::matrix::Activations;
use crate::Code;
use std::fmt;
use std::path::{Path, PathBuf};

/// Kernel family a key belongs to (`gate_up` covers the mixed-k form: its key carries both k).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Reduce,
    GateUp,
}

impl Family {
    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Family::Reduce => "reduce",
            Family::GateUp => "gate_up",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Family {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "reduce" => Ok(Family::Reduce),
            "gate_up" | "gate_up_mixed" => Ok(Family::GateUp),
            _ => Err(Error::invalid("family", s, "expected reduce or gate_up")),
        }
    }
}

/// Anchored size bucket: rows and cols each rounded to the nearest power of two (in log
/// space), so nearby shapes share a tuned entry and a table stays small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    pub rows: u64,
    pub cols: u64,
}

impl Bucket {
    /// The bucket of an `R x C` matrix.
    pub fn of(rows: usize, cols: usize) -> Self {
        let anchor = |n: usize| -> u64 { 1u64 << ((n.max(1) as f64).log2().round() as u32) };
        Bucket {
            rows: anchor(rows),
            cols: anchor(cols),
        }
    }
    fn log_distance(&self, other: &Bucket) -> u32 {
        (self.rows.trailing_zeros() as i32 - other.rows.trailing_zeros() as i32).unsigned_abs()
            + (self.cols.trailing_zeros() as i32 - other.cols.trailing_zeros() as i32)
                .unsigned_abs()
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

impl std::str::FromStr for Bucket {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid("bucket", s, "expected ROWSxCOLS with powers of two");
        let (r, c) = s.split_once('x').ok_or_else(bad)?;
        let (r, c): (u64, u64) = (r.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?);
        if !r.is_power_of_two() || !c.is_power_of_two() {
            return Err(bad());
        }
        Ok(Bucket { rows: r, cols: c })
    }
}

/// What a tuned choice is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TuneKey {
    pub family: Family,
    pub dtype: DType,
    pub m: u32,
    /// k of the matrix (gate's for `gate_up`).
    pub k: u32,
    /// k of the up matrix for `gate_up` (equal to `k` unless mixed).
    pub ku: u32,
    pub l: u32,
    pub code: Code,
    pub tier: Tier,
    pub bucket: Bucket,
}

impl TuneKey {
    /// The key of a launch.
    pub fn new(
        family: Family,
        g: &Geometry,
        up: Option<&Geometry>,
        dtype: DType,
        m: u32,
        tier: Tier,
    ) -> Self {
        TuneKey {
            family,
            dtype,
            m,
            k: g.k,
            ku: up.map_or(g.k, |u| u.k),
            l: g.l,
            code: g.code,
            tier,
            bucket: Bucket::of(g.rows, g.cols),
        }
    }

    /// Whether two keys differ only in the bucket.
    fn same_but_bucket(&self, o: &TuneKey) -> bool {
        TuneKey {
            bucket: o.bucket,
            ..*self
        } == *o
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = if self.family == Family::GateUp {
            format!("kg{}ku{}", self.k, self.ku)
        } else {
            format!("k{}", self.k)
        };
        write!(
            f,
            "{} {} M={} {k} L={} {} {} {}",
            self.family, self.dtype, self.m, self.l, self.code, self.tier, self.bucket
        )
    }
}

/// Where a selection came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// The device's own table, exact key.
    Table { table: String, key: String },
    /// The device's own table (or a family member's), nearest bucket or nearest device.
    Nearest {
        table: String,
        key: String,
        why: String,
    },
    /// No table had anything: the built-in default.
    Default { why: String },
    /// No measured table for the device: a prior rule (`tuning/priors/`), with its source.
    Prior {
        file: String,
        rule: String,
        why: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Table { table, key } => write!(f, "table {table}, entry [{key}]"),
            Source::Nearest { table, key, why } => {
                write!(f, "table {table}, entry [{key}] ({why})")
            }
            Source::Default { why } => write!(f, "built-in default ({why})"),
            Source::Prior { file, rule, why } => {
                write!(f, "prior {file}, rule {rule} (no measured table; {why})")
            }
        }
    }
}

/// A chosen variant and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub variant: Variant,
    pub source: Source,
}

/// Tables embedded at build time from `tuning/*.toml`.
const EMBEDDED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/embedded_tables.rs"));

/// Reads tuning tables and answers "which variant for this key on this device".
pub struct Selector {
    tables: Vec<(String, Table)>,
    /// Tables that were ignored, and why (printed by the CLI, never fatal).
    pub warnings: Vec<String>,
}

/// The hash of the kernel templates a table was measured with: tables from other
/// templates are stale and ignored.
pub fn template_hash() -> String {
    format!(
        "{:016x}",
        crate::kernel::fnv1a(include!(concat!(env!("OUT_DIR"), "/template_sources.rs")).as_bytes())
    )
}

/// Environment variable naming a directory of `*.toml` tables that override the embedded ones.
pub const TUNING_DIR_ENV: &str = "TRELLIS_TUNING_DIR";

impl Selector {
    /// Embedded tables, overridden per device by `$TRELLIS_TUNING_DIR/*.toml`.
    pub fn from_env() -> Self {
        let mut s = Selector::empty();
        for (name, text) in EMBEDDED {
            s.add_text(&format!("embedded:{name}"), text);
        }
        if let Some(dir) = std::env::var_os(TUNING_DIR_ENV) {
            s.add_dir(Path::new(&dir));
        }
        s
    }

    /// No tables: every selection is the built-in default.
    pub fn empty() -> Self {
        Selector {
            tables: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Add every `*.toml` of a directory (later tables for the same device win).
    pub fn add_dir(&mut self, dir: &Path) {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect(),
            Err(e) => {
                self.warnings.push(format!(
                    "{}: cannot read tuning directory: {e}",
                    dir.display()
                ));
                return;
            }
        };
        paths.sort();
        for p in paths {
            match std::fs::read_to_string(&p) {
                Ok(text) => self.add_text(&p.display().to_string(), &text),
                Err(e) => self.warnings.push(format!("{}: {e}", p.display())),
            }
        }
    }

    /// Parse and add one table; a bad or stale table becomes a warning.
    pub fn add_text(&mut self, name: &str, text: &str) {
        match Table::parse(text) {
            Err(e) => self.warnings.push(format!("{name}: ignored: {e}")),
            Ok(t) if t.device.template_hash != template_hash() => self.warnings.push(format!(
                "{name}: ignored: measured with templates {} but these are {} (re-run `cargo xtask tune`)",
                t.device.template_hash,
                template_hash()
            )),
            Ok(t) => {
                self.tables.retain(|(_, o)| !(o.device.id == t.device.id && o.device.backend == t.device.backend));
                self.tables.push((name.to_string(), t));
            }
        }
    }

    /// Add a parsed table (API override).
    pub fn add_table(&mut self, name: &str, table: Table) {
        self.tables.retain(|(_, o)| {
            !(o.device.id == table.device.id && o.device.backend == table.device.backend)
        });
        self.tables.push((name.to_string(), table));
    }

    /// The choice for `key` on `device` of `backend`.
    pub fn select(&self, backend: &str, device: &str, key: &TuneKey) -> Selection {
        let mine: Vec<&(String, Table)> = self
            .tables
            .iter()
            .filter(|(_, t)| t.device.backend == backend)
            .collect();
        let own = mine.iter().find(|(_, t)| t.device.id == device);
        // Nearest family: the table whose device id shares the longest prefix.
        let family = || {
            mine.iter()
                .map(|e| (common_prefix(&e.1.device.id, device), e))
                .filter(|(n, _)| *n >= 3)
                .max_by_key(|(n, _)| *n)
                .map(|(_, e)| *e)
        };
        let prior = || {
            prior::lookup(backend, device, key).map(|(file, rule, variant)| Selection {
                variant,
                source: Source::Prior {
                    file: file.to_string(),
                    rule: rule.name.clone(),
                    why: rule.why.clone(),
                },
            })
        };
        let (table, via_family) = match own {
            Some(t) => (*t, false),
            // Until the device has its own measured table, a prior for it wins.
            None if prior().is_some() => return prior().expect("checked"),
            None => match family() {
                Some(t) => (t, true),
                None => {
                    return Selection {
                        variant: default_variant(key),
                        source: Source::Default {
                            why: format!("no {backend} table for device {device}"),
                        },
                    }
                }
            },
        };
        let (name, t) = (&table.0, &table.1);
        let exact = t
            .entries
            .iter()
            .find(|e| e.key().ok().as_ref() == Some(key));
        let nearest = || {
            t.entries
                .iter()
                .filter_map(|e| e.key().ok().map(|k| (k, e)))
                .filter(|(k, _)| k.same_but_bucket(key))
                .min_by_key(|(k, _)| k.bucket.log_distance(&key.bucket))
                .map(|(_, e)| e)
        };
        match (exact, via_family) {
            (Some(e), false) => Selection {
                variant: e.winner.to_variant(key.tier),
                source: Source::Table {
                    table: name.clone(),
                    key: key.to_string(),
                },
            },
            (Some(e), true) => Selection {
                variant: e.winner.to_variant(key.tier),
                source: Source::Nearest {
                    table: name.clone(),
                    key: key.to_string(),
                    why: format!("nearest device {} for {device}", t.device.id),
                },
            },
            (None, _) => match nearest() {
                Some(e) => Selection {
                    variant: e.winner.to_variant(key.tier),
                    source: Source::Nearest {
                        table: name.clone(),
                        key: e.key().map(|k| k.to_string()).unwrap_or_default(),
                        why: format!("nearest bucket to {}", key.bucket),
                    },
                },
                None => Selection {
                    variant: default_variant(key),
                    source: Source::Default {
                        why: format!("table {name} has no entry for [{key}]"),
                    },
                },
            },
        }
    }
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// The built-in default for a key.
pub fn default_variant(key: &TuneKey) -> Variant {
    Variant {
        tier: key.tier,
        ..Variant::default()
    }
}

/// Select the exact-tier variant for a launch on backend `b`, printing ignored-table
/// warnings to stderr once per process.
pub fn select_for<B: Backend>(
    b: &B,
    family: Family,
    g: &Geometry,
    up: Option<&Geometry>,
    x: &Activations,
) -> Result<Selection> {
    use std::sync::OnceLock;
    static SELECTOR: OnceLock<Selector> = OnceLock::new();
    let sel = SELECTOR.get_or_init(|| {
        let s = Selector::from_env();
        for w in &s.warnings {
            eprintln!("warning: {w}");
        }
        s
    });
    let m = u32::try_from(x.rows).unwrap_or(u32::MAX);
    let key = TuneKey::new(family, g, up, x.dtype, m, Tier::Exact);
    Ok(fit(
        sel.select(b.name(), &b.device_id(), &key),
        family,
        g,
        up,
        x.dtype,
        m,
    ))
}

/// A table entry is chosen by bucket, so its variant may not fit this exact shape (x
/// staged in threadgroup memory for many more columns than were measured). Such a choice
/// gives way to the built-in default, and the source says why.
pub fn fit(
    s: Selection,
    family: Family,
    g: &Geometry,
    up: Option<&Geometry>,
    act: DType,
    m: u32,
) -> Selection {
    use crate::kernel::KernelSpec;
    use crate::ScaleDType;
    // The scale dtype does not affect what fits; any will do for the check.
    let check = |v: Variant| match family {
        Family::Reduce => crate::ops::reduce_spec(g, ScaleDType::F16, act, m, v).validate(),
        Family::GateUp => {
            let up = up.unwrap_or(g);
            crate::ops::gate_up_spec(
                g,
                up,
                (ScaleDType::F16, ScaleDType::F16),
                act,
                m,
                crate::kernels::Tail::Exact,
                v,
            )
            .validate()
        }
    };
    match check(s.variant) {
        Ok(()) => s,
        Err(e) => Selection {
            variant: Variant {
                tier: s.variant.tier,
                ..Variant::default()
            },
            source: Source::Default {
                why: format!(
                    "{} chose `{}`, which does not fit this shape: {e}",
                    s.source, s.variant
                ),
            },
        },
    }
}
