//! The tuning tables shipped in `tuning/` are current: every entry's `source_hash` is
//! the hash of what its family compiles today on the table's dialect for its problem's
//! codes (`tune::source_hash_of`), and its `space_hash` the hash of the candidates its
//! problem is tuned over today, with their units at that problem (`tune::space_hash`).
//! Editing a family's template (or the prelude of a dialect) stales that family's entries
//! on that dialect; changing the candidates of a problem, or their units there, stales its
//! entries only. This test names
//! them; refresh them with `cargo xtask tune` (it re-measures exactly the stale entries
//! of the space it is given) on the device the table was measured on (README, "Tuning
//! tables"). Below them, the rules by which `cargo xtask tune --stamp` makes an entry
//! current without measuring.

use std::collections::HashMap;
use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::family::{Family, FamilyVisitor, Shape, TuneSpace};
use trellis::kernel::Dialect;
use trellis::numerics::Tier;
use trellis::tune::harness::{stamp, TuneOptions};
use trellis::tune::{source_hash, source_hash_of, space_hash, Selector, Table};
use trellis::{Code, DType};

struct Stale<'a> {
    table: &'a Table,
    dialect: Dialect,
    /// The problems whose candidate spaces are checked ([`tuned_space`] of the table's
    /// shapes).
    space: TuneSpace,
    checked: usize,
    stale: Vec<String>,
}

impl FamilyVisitor for Stale<'_> {
    fn visit<F: Family>(&mut self) {
        let problems = F::problems(&self.space).expect("the checked space is valid");
        let mut by_key = HashMap::new();
        for tier in [Tier::Exact, Tier::Fast] {
            for p in &problems {
                let (rows, cols) = F::shape(p);
                by_key.insert((F::key(p, tier).to_string(), format!("{rows}x{cols}")), p);
            }
        }
        for e in &self.table.entries {
            if !trellis::families::is::<F>(&e.family) {
                continue;
            }
            self.checked += 1;
            let name = format!("{} [{} {} {}]", e.family, e.key, e.tier, e.bucket);
            let key = e.key().expect("entry key").to_string();
            let Some(p) = by_key.get(&(key, e.shape.clone())) else {
                self.stale.push(format!(
                    "{name}: its problem ({}) is outside the space this test rebuilds",
                    e.shape
                ));
                continue;
            };
            if e.source_hash != trellis::tune::source_hash_of::<F>(self.dialect, p) {
                self.stale
                    .push(format!("{name}: its kernels' sources changed"));
                continue;
            }
            let tier: Tier = e.tier.parse().expect("entry tier");
            let quick = TuneOptions::for_backend(&self.table.device.backend, tier).quick;
            let space = trellis::tune::space_hash::<F>(p, tier, quick, self.dialect);
            match &e.space_hash {
                None => self.stale.push(format!(
                    "{name}: no space_hash (written before entries recorded it: `cargo xtask tune --stamp`)"
                )),
                Some(h) if *h != space => self.stale.push(format!(
                    "{name}: measured over other candidates than its problem has today"
                )),
                Some(_) => {}
            }
        }
    }
}

/// The problems whose candidate spaces are checked: `shapes` at the M, k, L, codes and
/// dtype below (widen these when a table goes past them).
fn tuned_space(shapes: Vec<Shape>) -> TuneSpace {
    TuneSpace {
        shapes,
        ms: vec![1, 2, 4, 8, 16],
        ks: vec![2, 3, 4],
        ls: vec![12, 16],
        codes: Code::ALL.to_vec(),
        dtype: DType::Bf16,
        t: 256,
    }
}

/// The shapes a table's entries were measured at, each once.
fn table_shapes(t: &Table) -> Vec<Shape> {
    let mut shapes: Vec<Shape> = Vec::new();
    for e in &t.entries {
        let (rows, cols) = e.shape.split_once('x').expect("RxC shape");
        let shape = Shape {
            rows: rows.parse().expect("rows"),
            cols: cols.parse().expect("cols"),
            gate_up: true,
        };
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    shapes
}

#[test]
fn shipped_tables_are_current() {
    let tables = Selector::embedded();
    assert!(!tables.is_empty(), "no table is shipped in tuning/");
    // The selector takes every shipped table (winners and runner-ups parse, of their
    // entries' tiers, in their backends' dialects).
    let s = Selector::shipped();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let mut failures = Vec::new();
    for (name, text) in tables {
        let t = Table::parse(text).unwrap_or_else(|e| panic!("tuning/{name}: {e}"));
        let shapes = table_shapes(&t);
        let mut v = Stale {
            table: &t,
            dialect: t.device.dialect().unwrap(),
            space: tuned_space(shapes),
            checked: 0,
            stale: Vec::new(),
        };
        trellis::families::for_each(&mut v);
        assert_eq!(
            v.checked,
            t.entries.len(),
            "tuning/{name}: entries of unknown families"
        );
        if !v.stale.is_empty() {
            failures.push(format!(
                "tuning/{name} ({} on {}): {} of {} entries are stale:\n  {}",
                t.device.id,
                t.device.dialect,
                v.stale.len(),
                t.entries.len(),
                v.stale.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An entry's source hash is that of its codes' part of the family's catalog: problems
/// of one code share it whatever their shape, M or k; another code's differs; a slice
/// the catalog has no problem of falls back to the whole family's hash.
#[test]
fn source_hashes_follow_the_codes_and_fall_back_to_the_family() {
    use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::numerics::Tail;
    use trellis::tune::{source_hash, source_hash_of};
    use trellis::{Geometry, ScaleDType};
    let d = Dialect::Cuda;
    let reduce = |rows, k, code, m| ReduceProblem {
        geometry: Geometry::new(rows, 5120, 256, k, 12, code).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m,
    };
    let onemad = source_hash_of::<ReduceFamily>(d, &reduce(17408, 3, Code::OneMad, 1));
    assert_eq!(
        onemad,
        source_hash_of::<ReduceFamily>(d, &reduce(64, 2, Code::OneMad, 8))
    );
    let threeinst = source_hash_of::<ReduceFamily>(d, &reduce(17408, 3, Code::ThreeInst, 1));
    assert_ne!(onemad, threeinst);
    let whole = source_hash::<ReduceFamily>(d);
    assert!(onemad != whole && threeinst != whole);

    let gate_up = |gate: Code, up: Code| GateUpProblem {
        gate: Geometry::new(64, 512, 256, 3, 12, gate).unwrap(),
        up: Geometry::new(64, 512, 256, 4, 12, up).unwrap(),
        gate_scale: ScaleDType::F16,
        up_scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
        tail: Tail::Exact,
    };
    let same = source_hash_of::<GateUpFamily>(d, &gate_up(Code::OneMad, Code::OneMad));
    assert_ne!(same, source_hash::<GateUpFamily>(d));
    // The catalog pairs no two codes: such a problem takes the family's hash.
    let mixed = gate_up(Code::OneMad, Code::ThreeInst);
    assert!(GateUpFamily::catalog(false)
        .iter()
        .all(|q| GateUpFamily::source_slice(q) != GateUpFamily::source_slice(&mixed)));
    assert_eq!(
        source_hash_of::<GateUpFamily>(d, &mixed),
        source_hash::<GateUpFamily>(d)
    );
}

/// Every candidate the tuner measures has a kernel id of its own, so the compile caches
/// (keyed by id on every backend) never hand one variant the kernel of another: over the
/// shipped table's shapes, both tiers, the default and every candidate of each problem.
/// (Until 2026-12-02 the id was the symbol's hash alone, which code-word twins such as
/// `prefetch_words` alone and `stream_words` alone share: the tuner timed one twin as the
/// other, and interleaved-x twins ran a plain-x kernel and were rejected.)
#[test]
fn every_tuned_candidate_has_a_kernel_of_its_own() {
    use trellis::kernel::KernelSpec;
    struct Distinct {
        space: TuneSpace,
        problems: usize,
        clashes: Vec<String>,
    }
    impl FamilyVisitor for Distinct {
        fn visit<F: Family>(&mut self) {
            for p in F::problems(&self.space).expect("the checked space is valid") {
                self.problems += 1;
                for tier in [Tier::Exact, Tier::Fast] {
                    let mut seen: HashMap<trellis::kernel::KernelId, String> = HashMap::new();
                    let default = F::default_variant(&p, tier);
                    for v in std::iter::once(default).chain(F::candidates(&p, tier, false)) {
                        let id = F::kernel(&p, v).id();
                        let name = format!("{v:?}");
                        match seen.get(&id) {
                            Some(other) if *other != name => self
                                .clashes
                                .push(format!("{} {p}: {other} and {name} share {id:?}", F::NAME)),
                            _ => {
                                seen.insert(id, name);
                            }
                        }
                    }
                }
            }
        }
    }
    let t = Table::parse(Selector::embedded()[0].1).expect("the shipped table parses");
    let shapes = table_shapes(&t);
    let mut d = Distinct {
        space: TuneSpace {
            shapes,
            ms: vec![1, 2, 4, 8, 16],
            ks: vec![2, 3, 4],
            ls: vec![12, 16],
            codes: vec![Code::OneMad, Code::ThreeInst, Code::Mcg],
            dtype: DType::Bf16,
            t: 256,
        },
        problems: 0,
        clashes: Vec::new(),
    };
    trellis::families::for_each(&mut d);
    assert!(d.problems > 500, "only {} problems checked", d.problems);
    assert!(d.clashes.is_empty(), "{}", d.clashes.join("\n"));
}

// `cargo xtask tune --stamp` (`tune::harness::stamp`) brings an entry's hashes up to
// today's without measuring only where what the entry measured is provably the same,
// and leaves every other entry stale. Checked on a shipped matrix-unit entry (current,
// above), with its hashes edited into each case.

type Mma = ReduceMmaFamily;

/// The shipped CUDA table holding only its first `reduce_mma` entry, with that entry's
/// problem, the options its tier is tuned with and the table's dialect.
struct OneEntry {
    table: Table,
    problem: <Mma as Family>::Problem,
    opts: TuneOptions,
    dialect: Dialect,
}

impl OneEntry {
    fn new() -> Self {
        let (_, text) = Selector::embedded()
            .iter()
            .find(|(name, _)| name.starts_with("nvidia"))
            .expect("a shipped CUDA table");
        let mut table = Table::parse(text).expect("the shipped table parses");
        let i = table
            .entries
            .iter()
            .position(|e| trellis::families::is::<Mma>(&e.family))
            .expect("a reduce_mma entry");
        table.entries = vec![table.entries.swap_remove(i)];
        let e = &table.entries[0];
        let (rows, cols) = e.shape.split_once('x').expect("RxC shape");
        let space = tuned_space(vec![Shape {
            rows: rows.parse().expect("rows"),
            cols: cols.parse().expect("cols"),
            gate_up: true,
        }]);
        let tier: Tier = e.tier.parse().expect("entry tier");
        let key = e.key().expect("entry key");
        let problem = Mma::problems(&space)
            .expect("the space is valid")
            .into_iter()
            .find(|p| Mma::key(p, tier) == key)
            .expect("the entry's problem");
        let opts = TuneOptions::for_backend(&table.device.backend, tier);
        let dialect = table.device.dialect().expect("the table's dialect");
        OneEntry {
            table,
            problem,
            opts,
            dialect,
        }
    }
    fn entry(&self) -> &trellis::tune::Entry {
        &self.table.entries[0]
    }
    fn entry_mut(&mut self) -> &mut trellis::tune::Entry {
        &mut self.table.entries[0]
    }
    /// `--stamp` over the entry's problem: how many entries it changed.
    fn stamp(&mut self) -> usize {
        let problems = std::slice::from_ref(&self.problem);
        stamp::<Mma>(&self.opts, self.dialect, problems, &mut self.table)
    }
}

#[test]
fn a_current_entry_is_left_as_it_is() {
    let mut c = OneEntry::new();
    let before = c.table.to_toml();
    assert_eq!(c.stamp(), 0);
    assert_eq!(c.table.to_toml(), before);
}

#[test]
fn a_stale_source_hash_over_the_measured_space_takes_todays() {
    // What a template change renders only in units no tuned problem has leaves: the
    // entry's space (every candidate's unit at its problem) is byte for byte the same.
    let mut c = OneEntry::new();
    c.entry_mut().source_hash = "0123456789abcdef".into();
    assert_eq!(c.stamp(), 1);
    assert_eq!(
        c.entry().source_hash,
        source_hash_of::<Mma>(c.dialect, &c.problem)
    );
}

#[test]
fn a_stale_source_hash_over_another_space_stays_stale() {
    // Candidates or their units changed at the entry's problem: only a re-tune tells.
    let mut c = OneEntry::new();
    c.entry_mut().source_hash = "0123456789abcdef".into();
    c.entry_mut().space_hash = Some("fedcba9876543210".into());
    let before = c.table.to_toml();
    assert_eq!(c.stamp(), 0);
    assert_eq!(c.table.to_toml(), before);
}

#[test]
fn an_entry_without_a_space_hash_gets_it_only_over_current_sources() {
    let mut c = OneEntry::new();
    let space = space_hash::<Mma>(&c.problem, c.opts.tier, c.opts.quick, c.dialect);
    // Sources current: the space measured is today's.
    c.entry_mut().space_hash = None;
    assert_eq!(c.stamp(), 1);
    assert_eq!(c.entry().space_hash.as_deref(), Some(space.as_str()));
    // Sources changed since: nothing says which space was measured.
    c.entry_mut().space_hash = None;
    c.entry_mut().source_hash = "0123456789abcdef".into();
    assert_eq!(c.stamp(), 0);
    assert_eq!(c.entry().space_hash, None);
}

#[test]
fn the_whole_family_hash_of_older_tables_becomes_the_slice_hash() {
    let mut c = OneEntry::new();
    let whole = source_hash::<Mma>(c.dialect);
    let slice = source_hash_of::<Mma>(c.dialect, &c.problem);
    assert_ne!(whole, slice, "the family's codes hash apart from the whole");
    c.entry_mut().source_hash = whole;
    assert_eq!(c.stamp(), 1);
    assert_eq!(c.entry().source_hash, slice);
}
