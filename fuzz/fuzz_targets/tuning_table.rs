//! Any text as a tuning table: it is refused with a reason, or every choice the selector
//! makes from it, alone and layered over the shipped tables (fitted to its device's limits, as the facade fits it: Metal's 32 KB,
//! else CUDA's opt-in, which the CPU enforces too) keeps the key's tier and renders for
//! the table's dialect and for the CPU. A table the tuner never wrote (stale, edited, corrupt) must
//! never become a panic or a kernel that cannot run.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trellis::family::{Family, FamilyVisitor, ProblemSpec};
use trellis::kernel::{Dialect, KernelSpec, Limits};
use trellis::numerics::Tier;
use trellis::tune::table::Table;
use trellis::tune::{check_table, fit, Selector};
use trellis::{Code, DType};

/// A small problem with an entry's key fields (`bf16 M=2 k3 L12 1mad`, or a gate/up's
/// `bf16 M=1 gate=k3 L12 1mad up=k4 L12 1mad tail=exact`), so the entry is chosen by its
/// nearest bucket; `None` where the fields say something a flag cannot.
fn spec_of(fields: &str) -> Option<ProblemSpec> {
    let mut words = fields.split(' ');
    let dtype: DType = words.next()?.parse().ok()?;
    let m = words.next()?.strip_prefix("M=")?.parse().ok()?;
    let mut projections = Vec::new();
    let rest: Vec<&str> = words.collect();
    for part in rest.chunks(3) {
        let [k, l, code] = part else { break };
        let k = k.trim_start_matches("gate=").trim_start_matches("up=");
        let k: u32 = k.strip_prefix('k')?.parse().ok()?;
        let l: u32 = l.strip_prefix('L')?.parse().ok()?;
        projections.push((k, l, code.parse::<Code>().ok()?));
    }
    let (k, l, code) = *projections.first()?;
    let ku = match projections.get(1) {
        Some(&(ku, lu, cu)) if (lu, cu) == (l, code) => Some(ku),
        Some(_) => return None,
        None => None,
    };
    Some(ProblemSpec {
        rows: 64,
        cols: 512,
        t: 256,
        k,
        ku,
        l,
        code,
        dtype,
        m,
    })
}

/// Each registered family whose problem the entry's key describes: the selector's
/// choice, fitted, renders for the table's dialect and the CPU at the key's tier.
struct Choose<'a> {
    selector: &'a Selector,
    dialect: Dialect,
    backend: &'a str,
    device: &'a str,
    label: &'a str,
    fields: &'a str,
    tier: Tier,
    spec: &'a ProblemSpec,
}

impl FamilyVisitor for Choose<'_> {
    fn visit<F: Family>(&mut self) {
        let Ok(p) = F::problem(self.spec) else { return };
        let key = F::key(&p, self.tier);
        if (key.family.as_str(), key.fields.as_str()) != (self.label, self.fields) {
            return;
        }
        let s = self
            .selector
            .select::<F>(self.backend, self.device, &p, self.tier);
        let limits = match self.dialect {
            Dialect::Metal => Limits::METAL,
            Dialect::Cuda | Dialect::Cpu => Limits::CUDA_OPT_IN,
        };
        let s = fit::<F>(s, &p, self.tier, &limits);
        let (v, source) = (s.variant, &s.source);
        assert_eq!(F::tier(&v), self.tier, "{p}: {v} ({source})");
        for d in [self.dialect, Dialect::Cpu] {
            if let Err(e) = F::kernel(&p, v).unit(d) {
                panic!("{p}: the choice {v} ({source}) does not render for {d:?}: {e}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(table) = Table::parse(text) else {
        return;
    };
    // What `Selector::add_text` adds; a refused table is a warning, and the default rules.
    if check_table(&table).is_err() {
        let mut s = Selector::empty();
        s.add_text("fuzz.toml", text);
        assert_eq!(s.tables().count(), 0, "a refused table was added");
        return;
    }
    let dialect = table
        .device
        .dialect()
        .expect("a checked table names its dialect");
    // Alone, and layered over the shipped tables (an H200 table's keys then fall through
    // to the shipped entries, another device of the family takes them for its misses).
    let mut alone = Selector::empty();
    alone.add_table("fuzz.toml", table.clone());
    let mut layered = shipped().clone();
    layered.add_table("fuzz.toml", table.clone());
    for selector in [&alone, &layered] {
        choose_all(selector, &table, dialect);
    }
});

/// The shipped tables, parsed once.
fn shipped() -> &'static Selector {
    static SHIPPED: std::sync::OnceLock<Selector> = std::sync::OnceLock::new();
    SHIPPED.get_or_init(|| {
        let s = Selector::shipped();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        s
    })
}

/// Every entry's key of `table`, chosen by `selector` and checked ([`Choose`]).
fn choose_all(selector: &Selector, table: &Table, dialect: Dialect) {
    let (backend, device) = (&table.device.backend, &table.device.id);
    for e in &table.entries {
        let Ok(key) = e.key() else { continue };
        let Some(spec) = spec_of(&key.fields) else {
            continue;
        };
        trellis::families::for_each(&mut Choose {
            selector,
            dialect,
            backend,
            device,
            label: &key.family,
            fields: &key.fields,
            tier: key.tier,
            spec: &spec,
        });
    }
}
