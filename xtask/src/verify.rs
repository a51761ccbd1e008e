//! `cargo xtask verify`: every specialization against the reference, as a table.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use trellis::kernel::Backend;
use trellis::verify::{self, Outcome};

/// `verify` on whichever backend was opened.
pub struct Job<'a> {
    pub quick: bool,
    pub vectors: &'a Path,
}

impl trellis::backend::BackendVisitor for Job<'_> {
    type Out = trellis::Result<(String, bool)>;
    fn visit<B: Backend>(self, b: &B) -> Self::Out {
        run(b, self.quick, self.vectors)
    }
}

/// The catalog of the one registered family called `name`.
fn only<B: Backend>(
    b: &B,
    quick: bool,
    name: &str,
    progress: &mut dyn FnMut(usize, usize),
) -> trellis::Result<Vec<Outcome>> {
    struct One<'a, B: Backend> {
        b: &'a B,
        quick: bool,
        name: &'a str,
        progress: &'a mut dyn FnMut(usize, usize),
        out: trellis::Result<Vec<Outcome>>,
    }
    impl<B: Backend> trellis::family::FamilyVisitor for One<'_, B> {
        fn visit<F: trellis::family::Family>(&mut self) {
            if trellis::families::is::<F>(self.name) {
                self.out = verify::verify_family::<F, B>(self.b, self.quick, self.progress);
            }
        }
    }
    let mut one = One {
        b,
        quick,
        name,
        progress,
        out: Err(trellis::Error::invalid(
            "TRELLIS_VERIFY_ONLY",
            name,
            "no such family",
        )),
    };
    trellis::families::for_each(&mut one);
    one.out
}

/// Run and print; returns the report text and whether everything matched.
pub fn run<B: Backend>(b: &B, quick: bool, vectors: &Path) -> trellis::Result<(String, bool)> {
    let bar = crate::progress_bar(0, "verify");
    let started = std::time::Instant::now();
    let mut progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    // `TRELLIS_VERIFY_ONLY=<family>`: that family's catalog alone (and the vectors).
    let mut outcomes = match std::env::var("TRELLIS_VERIFY_ONLY") {
        Ok(name) => only(b, quick, &name, &mut progress)?,
        Err(_) => verify::verify_catalog(b, quick, &mut progress)?,
    };
    bar.finish_and_clear();
    if vectors.join("index.json").exists() {
        outcomes.extend(verify::verify_vectors(b, vectors)?);
    } else {
        outcomes.push(Outcome {
            family: "vectors",
            symbol: "index.json".into(),
            case: vectors.display().to_string(),
            variant: Default::default(),
            tier: trellis::numerics::Tier::Exact,
            result: Err(format!(
                "conformance vectors not found at {}",
                vectors.display()
            )),
        });
    }
    Ok(report(b, &outcomes, started.elapsed()))
}

fn report<B: Backend>(b: &B, outcomes: &[Outcome], took: std::time::Duration) -> (String, bool) {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# cargo xtask verify --backend {} ({})",
        b.name(),
        b.device_id()
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "| family | tier | specializations | matched | failed |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|");
    let mut by: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let tier = if o.symbol.starts_with("vector") {
            "exact (vectors)".to_string()
        } else {
            o.tier.to_string()
        };
        let e = by.entry((o.family.to_string(), tier)).or_default();
        e.0 += 1;
        e.1 += o.result.is_ok() as usize;
    }
    for ((fam, tier), (n, ok)) in &by {
        let _ = writeln!(s, "| {fam} | {tier} | {n} | {ok} | {} |", n - ok);
    }
    let total = outcomes.len();
    let ok = outcomes.iter().filter(|o| o.result.is_ok()).count();
    let _ = writeln!(s, "| **all** | | {total} | {ok} | {} |", total - ok);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{total} specializations and vector runs, {ok} matched, {} failed ({:.1} s)",
        total - ok,
        took.as_secs_f64()
    );
    for f in outcomes
        .iter()
        .filter(|o| o.result.is_err())
        .skip(1)
        .take(20)
    {
        let _ = writeln!(
            s,
            "also failed: {} {} [{}] {}: {}",
            f.family,
            f.symbol,
            f.case,
            f.variant,
            f.result.as_ref().unwrap_err()
        );
    }
    if let Some(f) = outcomes.iter().find(|o| o.result.is_err()) {
        let _ = writeln!(s, "\nfirst failure:\n  family:  {}\n  symbol:  {}\n  case:    {}\n  variant: {}\n  detail:  {}", f.family, f.symbol, f.case, f.variant, f.result.as_ref().unwrap_err());
    }
    (s, ok == total)
}
