//! The tuning tables shipped in `tuning/` are current: every entry's `source_hash` is
//! the hash of what its family compiles today on the table's dialect. Editing a family's
//! template (or the prelude of a dialect) stales that family's entries on that dialect,
//! and this test names them; refresh the table with `cargo xtask tune --fresh` on the
//! device it was measured on (README, "Tuning tables").

use trellis::family::{Family, FamilyVisitor};
use trellis::kernel::Dialect;
use trellis::tune::{Selector, Table};

struct Stale<'a> {
    table: &'a Table,
    dialect: Dialect,
    checked: usize,
    stale: Vec<String>,
}

impl FamilyVisitor for Stale<'_> {
    fn visit<F: Family>(&mut self) {
        let current = trellis::tune::source_hash::<F>(self.dialect);
        for e in &self.table.entries {
            if trellis::families::is::<F>(&e.family) {
                self.checked += 1;
                if e.source_hash != current {
                    self.stale
                        .push(format!("{} [{} {} {}]", e.family, e.key, e.tier, e.bucket));
                }
            }
        }
    }
}

#[test]
fn shipped_tables_are_current() {
    let tables = Selector::embedded();
    assert!(!tables.is_empty(), "no table is shipped in tuning/");
    let mut failures = Vec::new();
    for (name, text) in tables {
        let t = Table::parse(text).unwrap_or_else(|e| panic!("tuning/{name}: {e}"));
        let mut v = Stale {
            table: &t,
            dialect: t.device.dialect().unwrap(),
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
                "tuning/{name} ({} on {}): {} of {} entries are stale (their family's {} sources changed): {}",
                t.device.id,
                t.device.dialect,
                v.stale.len(),
                t.entries.len(),
                t.device.dialect,
                v.stale.join(", ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
