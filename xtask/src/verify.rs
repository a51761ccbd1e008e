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

/// Run and print; returns the report text and whether everything matched.
pub fn run<B: Backend>(b: &B, quick: bool, vectors: &Path) -> trellis::Result<(String, bool)> {
    let bar = crate::progress_bar(0, "verify");
    let started = std::time::Instant::now();
    let mut outcomes = verify::verify_catalog(b, quick, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if vectors.join("index.json").exists() {
        outcomes.extend(verify::verify_vectors(b, vectors)?);
    } else {
        outcomes.push(Outcome {
            family: "vectors",
            symbol: "index.json".into(),
            case: vectors.display().to_string(),
            variant: Default::default(),
            tier: trellis::kernels::Tier::Exact,
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
