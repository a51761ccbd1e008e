//! `cargo xtask tune --stamp` (`tune::harness::stamp`) brings a table entry's hashes up
//! to today's without measuring only where what the entry measured is provably the
//! same, and leaves every other entry stale. Checked on a shipped matrix-unit entry
//! (current, `tests/tables_current.rs`), with its hashes edited into each case.

use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::family::{Family, Shape, TuneSpace};
use trellis::numerics::Tier;
use trellis::tune::harness::{stamp, TuneOptions};
use trellis::tune::{source_hash, source_hash_of, space_hash, Selector, Table};
use trellis::{Code, DType};

type F = ReduceMmaFamily;

/// The shipped CUDA table holding only its first `reduce_mma` entry, that entry's
/// problem, and the options its tier is tuned with.
fn one_entry() -> (Table, <F as Family>::Problem, TuneOptions) {
    let (_, text) = Selector::embedded()
        .iter()
        .find(|(name, _)| name.starts_with("nvidia"))
        .expect("a shipped CUDA table");
    let mut t = Table::parse(text).expect("the shipped table parses");
    let i = t
        .entries
        .iter()
        .position(|e| trellis::families::is::<F>(&e.family))
        .expect("a reduce_mma entry");
    t.entries = vec![t.entries.swap_remove(i)];
    let e = &t.entries[0];
    let (rows, cols) = e.shape.split_once('x').expect("RxC shape");
    let space = TuneSpace {
        shapes: vec![Shape {
            rows: rows.parse().expect("rows"),
            cols: cols.parse().expect("cols"),
            gate_up: true,
        }],
        ms: vec![1, 2, 4, 8, 16],
        ks: vec![2, 3, 4],
        ls: vec![12, 16],
        codes: Code::ALL.to_vec(),
        dtype: DType::Bf16,
        t: 256,
    };
    let tier: Tier = e.tier.parse().expect("entry tier");
    let key = e.key().expect("entry key");
    let p = F::problems(&space)
        .expect("the space is valid")
        .into_iter()
        .find(|p| F::key(p, tier) == key)
        .expect("the entry's problem");
    (t, p, TuneOptions::for_backend("cuda", tier))
}

fn dialect(t: &Table) -> trellis::kernel::Dialect {
    t.device.dialect().expect("the table's dialect")
}

#[test]
fn a_current_entry_is_left_as_it_is() {
    let (mut t, p, o) = one_entry();
    let before = t.to_toml();
    assert_eq!(stamp::<F>(&o, dialect(&t), &[p], &mut t), 0);
    assert_eq!(t.to_toml(), before);
}

#[test]
fn a_stale_source_hash_over_the_measured_space_takes_todays() {
    // What a template change renders only in units no tuned problem has leaves: the
    // entry's space (every candidate's unit at its problem) is byte for byte the same.
    let (mut t, p, o) = one_entry();
    let d = dialect(&t);
    t.entries[0].source_hash = "0123456789abcdef".into();
    assert_eq!(stamp::<F>(&o, d, std::slice::from_ref(&p), &mut t), 1);
    assert_eq!(t.entries[0].source_hash, source_hash_of::<F>(d, &p));
}

#[test]
fn a_stale_source_hash_over_another_space_stays_stale() {
    // Candidates or their units changed at the entry's problem: only a re-tune tells.
    let (mut t, p, o) = one_entry();
    t.entries[0].source_hash = "0123456789abcdef".into();
    t.entries[0].space_hash = Some("fedcba9876543210".into());
    let before = t.to_toml();
    assert_eq!(stamp::<F>(&o, dialect(&t), &[p], &mut t), 0);
    assert_eq!(t.to_toml(), before);
}

#[test]
fn an_entry_without_a_space_hash_gets_it_only_over_current_sources() {
    let (mut t, p, o) = one_entry();
    let d = dialect(&t);
    let space = space_hash::<F>(&p, o.tier, o.quick, d);
    // Sources current: the space measured is today's.
    t.entries[0].space_hash = None;
    assert_eq!(stamp::<F>(&o, d, std::slice::from_ref(&p), &mut t), 1);
    assert_eq!(t.entries[0].space_hash.as_deref(), Some(space.as_str()));
    // Sources changed since: nothing says which space was measured.
    t.entries[0].space_hash = None;
    t.entries[0].source_hash = "0123456789abcdef".into();
    assert_eq!(stamp::<F>(&o, d, std::slice::from_ref(&p), &mut t), 0);
    assert_eq!(t.entries[0].space_hash, None);
}

#[test]
fn the_whole_family_hash_of_older_tables_becomes_the_slice_hash() {
    let (mut t, p, o) = one_entry();
    let d = dialect(&t);
    let (whole, slice) = (source_hash::<F>(d), source_hash_of::<F>(d, &p));
    assert_ne!(whole, slice, "the family's codes hash apart from the whole");
    t.entries[0].source_hash = whole;
    assert_eq!(stamp::<F>(&o, d, std::slice::from_ref(&p), &mut t), 1);
    assert_eq!(t.entries[0].source_hash, slice);
}
