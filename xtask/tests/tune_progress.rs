//! What a user sees of `cargo xtask tune` off a terminal (CI, a pipe, a log): one line per
//! key, warnings, a summary with real GB/s, a clear line and status 3 when the budget runs
//! out; `--fresh` re-measures where a plain rerun resumes; `--plan` says which without
//! measuring; nothing is left beside the table.

use std::path::Path;
use std::process::{Command, Output};

/// `cargo xtask tune` with `args` alone, then `--out out`.
fn xtask_tune(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("tune")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// `cargo xtask tune` on the CPU over one small key (M 1, k 2, L 9, 1mad, one rep per
/// round), writing `out`, with `args` added.
fn tune_with(args: &[&str], out: &Path) -> Output {
    let mut all = vec!["--backend", "cpu"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--m", "1", "--k", "2", "--l", "9", "--code", "1mad", "--reps", "1",
    ]);
    xtask_tune(&all, out)
}

/// [`tune_with`] of the `reduce` family at 64 x 256, then `extra`.
fn tune(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["--family", "reduce", "--shape", "64x256"];
    args.extend_from_slice(extra);
    tune_with(&args, out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A median no measurement gives: planted in a table, it shows whether a rerun kept the
/// entry or measured it again.
const MARKER_US: f64 = 987654.0;

/// `table` (the text of the table at `out`) with its first entry's times replaced by the marker.
fn with_marker(table: &str, out: &Path) -> String {
    assert!(median_us(out) > 0.0);
    let mut t = trellis::tune::Table::parse(table).unwrap();
    let s = &mut t.entries[0].stats;
    (s.median_us, s.p10_us, s.p90_us) = (MARKER_US, MARKER_US, MARKER_US);
    t.to_toml()
}

fn median_us(out: &Path) -> f64 {
    let t = trellis::tune::Table::parse(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert_eq!(t.entries.len(), 1);
    t.entries[0].stats.median_us
}

#[test]
fn per_key_lines_resume_fresh_and_real_bandwidth() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let first = tune(&out, &[]);
    let (stdout, stderr) = (text(&first.stdout), text(&first.stderr));
    assert!(first.status.success(), "{stderr}");
    assert!(
        stderr.contains("tune reduce 1/1") && stderr.contains("[reduce bf16 M=1 k2 L9 1mad exact"),
        "{stderr}"
    );
    // The summary's GB/s column is the table's bandwidth (three significant digits),
    // and that is the problem's bytes over the median: the 64 x 256 k 2 code words
    // (4096 bytes), bf16 x and y (2 x 320) and f16 scales (2 x 64).
    let row = stdout.lines().find(|l| l.starts_with("| reduce")).unwrap();
    let gbs: f64 = row.split('|').nth(9).unwrap().trim().parse().unwrap();
    let t = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let e = &t.entries[0];
    assert!(e.stats.median_us > 0.0 && e.bandwidth_gbs > 0.0, "{row}");
    assert!(
        (gbs / e.bandwidth_gbs - 1.0).abs() < 0.01,
        "{row}: {}",
        e.bandwidth_gbs
    );
    let bytes = e.bandwidth_gbs * 1e3 * e.stats.median_us;
    assert!((bytes / 4864.0 - 1.0).abs() < 0.01, "{bytes} bytes");
    // Only the table and its lock are left there (the journal is elsewhere).
    let mut beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, [".t.toml.lock", "t.toml"]);

    // Plant a marker time: a rerun resumes (keeps it), --fresh measures again.
    let text_before = std::fs::read_to_string(&out).unwrap();
    let planted = with_marker(&text_before, &out);
    assert_ne!(planted, text_before);
    std::fs::write(&out, planted).unwrap();
    let resumed = tune(&out, &[]);
    assert!(resumed.status.success());
    assert!(
        text(&resumed.stderr).contains("resuming"),
        "{}",
        text(&resumed.stderr)
    );
    assert_eq!(median_us(&out), MARKER_US);
    let fresh = tune(&out, &["--fresh"]);
    assert!(fresh.status.success(), "{}", text(&fresh.stderr));
    assert!(
        text(&fresh.stderr).contains("afresh"),
        "{}",
        text(&fresh.stderr)
    );
    assert_ne!(median_us(&out), MARKER_US);
}

#[test]
fn plan_of_a_first_run_counts_every_problem_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new.toml");
    let run = tune(&out, &["--plan"]);
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(stdout.contains("a first `tune` on cpu"), "{stdout}");
    assert!(stdout.contains("1 of 1 problems to measure"), "{stdout}");
    assert!(!out.exists(), "--plan wrote {}", out.display());
    // Without --backend the dialect, and so the candidates, are unknown: an error naming
    // the file and the flag.
    let run = xtask_tune(&["--family", "reduce", "--shape", "64x256", "--plan"], &out);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("new.toml") && stderr.contains("give --backend"),
        "{stderr}"
    );
}

#[test]
fn an_entry_of_another_candidate_space_is_measured_again_and_stamp_fills_old_tables() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    assert!(tune(&out, &[]).status.success());
    let tuned = std::fs::read_to_string(&out).unwrap();
    let line = tuned
        .lines()
        .find(|l| l.starts_with("space_hash = "))
        .expect("a tuned entry records its candidate space")
        .to_string();
    let marked = with_marker(&tuned, &out);
    // --plan measures nothing and says what a run would: here nothing, with --fresh all.
    let planned = |extra: &[&str]| {
        let mut args = vec!["--plan"];
        args.extend_from_slice(extra);
        let run = tune(&out, &args);
        assert!(run.status.success(), "{}", text(&run.stderr));
        text(&run.stdout)
    };
    let plan = planned(&[]);
    assert!(plan.contains("| reduce | 1 | 1 | 0 | 0 |"), "{plan}");
    assert!(plan.contains("0 of 1 problems to measure"), "{plan}");
    let plan = planned(&["--fresh"]);
    assert!(plan.contains("1 of 1 problems to measure"), "{plan}");
    // Candidates changed since (another space hash): measured again, sources alike.
    std::fs::write(
        &out,
        marked.replace(&line, "space_hash = \"0000000000000000\""),
    )
    .unwrap();
    let plan = planned(&[]);
    let candidates: usize = plan
        .lines()
        .find(|l| l.starts_with("| reduce |"))
        .and_then(|l| l.split('|').nth(5)?.trim().parse().ok())
        .expect("a row for reduce");
    assert!(
        plan.contains("| reduce | 1 | 0 | 1 |") && candidates > 1,
        "{plan}"
    );
    assert_eq!(median_us(&out), MARKER_US, "--plan measured");
    assert!(tune(&out, &[]).status.success());
    assert_ne!(median_us(&out), MARKER_US);
    // A table from before entries recorded it: --stamp adds it without measuring.
    std::fs::write(&out, marked.replace(&format!("{line}\n"), "")).unwrap();
    let stamped = tune(&out, &["--stamp"]);
    assert!(stamped.status.success(), "{}", text(&stamped.stderr));
    assert!(
        text(&stamped.stderr).contains("stamped 1 entries"),
        "{}",
        text(&stamped.stderr)
    );
    assert_eq!(median_us(&out), MARKER_US);
    assert!(std::fs::read_to_string(&out).unwrap().contains(&line));
    // Stamping again has nothing to stamp and leaves the file alone; while a tuning run
    // holds the table, --stamp is refused (each would write over the other's table).
    // The table is written by rename (a new file): the same inode and bytes after is
    // no write at all, whatever the file system's clock resolution.
    use std::os::unix::fs::MetadataExt;
    let file = || {
        let ino = std::fs::metadata(&out).unwrap().ino();
        (ino, std::fs::read(&out).unwrap())
    };
    let before = file();
    let again = tune(&out, &["--stamp"]);
    assert!(
        text(&again.stderr).contains("stamped 0 entries"),
        "{}",
        text(&again.stderr)
    );
    assert!(
        file() == before,
        "--stamp with nothing to stamp wrote the table"
    );
    let held = trellis::tune::TableLock::take(&out).unwrap();
    let refused = tune(&out, &["--stamp"]);
    assert!(
        !refused.status.success()
            && text(&refused.stderr).contains("another tuning run is writing this table"),
        "{}",
        text(&refused.stderr)
    );
    drop(held);
    // --summary prints the table as a run ends (the planted median shows it measured
    // nothing) and leaves the file as it was.
    let before = std::fs::read_to_string(&out).unwrap();
    let shown = tune(&out, &["--summary"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    let stdout = text(&shown.stdout);
    assert!(
        stdout.contains("1 tuned entries (key and measured shape) on "),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("| {MARKER_US:.2} |")), "{stdout}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
}

#[test]
fn a_spent_budget_is_a_clear_line_and_status_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let run = tune(&out, &["--budget", "0s"]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("warning: budget spent"), "{stderr}");
    assert!(
        stderr.contains("budget of 0s spent: 1 of 1 keys not tuned"),
        "{stderr}"
    );
    // Printed once, by the worker: the supervisor adds no second copy.
    assert_eq!(stderr.matches("budget of 0s spent").count(), 1, "{stderr}");
    // Keys the table holds already are not counted among those the budget left.
    assert!(tune(&out, &[]).status.success());
    let run = tune_with(
        &[
            "--family",
            "reduce",
            "--shape",
            "64x256,64x512",
            "--budget",
            "0s",
        ],
        &out,
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("budget of 0s spent: 1 of 2 keys not tuned"),
        "{stderr}"
    );
}

#[test]
fn an_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = tune(&dir.path().join("t.toml"), &["--budget", "soon"]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("invalid budget = soon"), "{stderr}");
}

/// An existing --out is resumed or refused, never silently replaced: one that does not
/// parse (unless --fresh) or holds another device's table is an error naming the file,
/// and the file is left as it was.
#[test]
fn a_corrupt_or_foreign_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    std::fs::write(&out, "garbage = [").unwrap();
    let run = tune(&out, &[]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot resume") && stderr.contains("--fresh"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "garbage = [");
    // --fresh replaces it, with a warning.
    let run = tune(&out, &["--fresh"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("--fresh replaces it"));
    // Another device's table.
    let theirs =
        std::fs::read_to_string(&out)
            .unwrap()
            .replacen("id = \"", "id = \"someone-else-", 1);
    std::fs::write(&out, &theirs).unwrap();
    let run = tune(&out, &["--fresh"]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("holds the table of someone-else-"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), theirs);
}

/// Flags outside what any family takes are errors naming them, not a run that does less.
#[test]
fn out_of_range_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    for (extra, needle) in [
        (&["--m", "0"][..], "invalid m = 0"),
        (
            &["--candidate-timeout", "0s"][..],
            "invalid candidate-timeout = 0s",
        ),
        (&["--budget", "99999999999999999h"][..], "invalid budget"),
        (&["--family", "reduce_mma"][..], "has no exact variants"),
    ] {
        let run = tune(&out, extra);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
    }
    // (`tune` passes --reps 1 itself.)
    let run = xtask_tune(&["--backend", "cpu", "--reps", "0"], &out);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid reps = 0: expected 1..=10000"),
        "{stderr}"
    );
}

/// An entry whose winner no longer reads as a variant (a hand edit, a removed field) makes
/// the selector refuse its table; a rerun measures it again instead of keeping it.
#[test]
fn an_unreadable_winner_is_measured_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    assert!(tune(&out, &[]).status.success());
    let text0 = std::fs::read_to_string(&out).unwrap();
    // An unknown field in the winner (variants deny them), put before its key at a line's
    // start (a note on a winner at the space's edge names the field mid-line, in a string).
    let broken = with_marker(&text0, &out).replacen(
        "\nrows_per_simd = ",
        "\nunroll = 4\nrows_per_simd = ",
        1,
    );
    std::fs::write(&out, &broken).unwrap();
    assert!(trellis::tune::Table::parse(&broken).unwrap().entries[0]
        .winner::<trellis::families::simt::Variant>()
        .is_err());
    let run = tune(&out, &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_ne!(median_us(&out), MARKER_US);
    let t = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(t.entries[0]
        .winner::<trellis::families::simt::Variant>()
        .is_ok());
}

/// `--tier fast` without `--family` tunes the families the fast tier runs on (the
/// matrix-unit ones), not the SIMT families' own fast variants, which the facade and the
/// CLI never select.
#[test]
fn the_fast_tier_is_tuned_on_the_matrix_unit_families() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let o = tune_with(&["--tier", "fast", "--shape", "32x256"], &out);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let families: std::collections::BTreeSet<&str> =
        t.entries.iter().map(|e| e.family.as_str()).collect();
    assert!(families.contains("reduce_mma"), "{families:?}");
    assert!(
        families
            .iter()
            .all(|f| f.ends_with("_mma") || f.contains("_mma_")),
        "{families:?}"
    );
}

/// A table the selector would ignore is no table to resume (refused, left as it was),
/// and a winner that is no valid kernel at its key is measured again; where the table and
/// the trace go is checked before anything is measured; a named family with nothing to
/// tune is an error, and no `wrote` line claims a file that was not written.
#[test]
fn tables_the_selector_ignores_are_not_resumed_and_outputs_are_checked_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    assert!(tune(&out, &[]).status.success());
    let good = std::fs::read_to_string(&out).unwrap();
    // A table naming another dialect than its backend's: the selector ignores it.
    let dialect = good.replacen("dialect = \"cpu\"", "dialect = \"metal\"", 1);
    assert_ne!(dialect, good);
    std::fs::write(&out, &dialect).unwrap();
    let run = tune(&out, &[]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("device.dialect") && stderr.contains("cannot resume"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), dialect);
    // A winner of rows_per_group = 0 reads as a variant but is no kernel: measured again.
    let rpg0 = {
        let at = good.find("rows_per_group = ").unwrap();
        let end = at + good[at..].find('\n').unwrap();
        format!("{}rows_per_group = 0{}", &good[..at], &good[end..])
    };
    std::fs::write(&out, with_marker(&rpg0, &out)).unwrap();
    let run = tune(&out, &["--plan"]);
    assert!(
        text(&run.stdout).contains("1 of 1 problems to measure"),
        "{}",
        text(&run.stdout)
    );
    // A median that is no time: no table (the selector ignores it), so it is refused too,
    // naming the field, and left as it was.
    let nan = {
        let at = good.find("median_us = ").unwrap();
        let end = at + good[at..].find('\n').unwrap();
        format!("{}median_us = nan{}", &good[..at], &good[end..])
    };
    assert!(nan.contains("median_us = nan"));
    std::fs::write(&out, &nan).unwrap();
    let run = tune(&out, &["--plan"]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stats.median_us = NaN") && stderr.contains("finite and positive"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), nan);
    // --out in a missing directory, and a --trace that is a directory: before measuring.
    let run = tune(&dir.path().join("nope/t.toml"), &[]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--out: its directory does not exist"),
        "{stderr}"
    );
    assert!(!stderr.contains("measure"), "{stderr}");
    let trace = dir.path().to_str().unwrap();
    let run = tune(&dir.path().join("u.toml"), &["--trace", trace]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--trace: not a regular file"), "{stderr}");
    // A named family the tuner does not tune (no problem in any space): named as such,
    // not sent to look for one with the space's flags.
    let run = tune_with(&["--family", "expand"], &dir.path().join("e.toml"));
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("family = expand: is not tuned"), "{stderr}");
    assert!(!stdout.contains("wrote"), "{stdout}");
    assert!(!dir.path().join("e.toml").exists());
}
