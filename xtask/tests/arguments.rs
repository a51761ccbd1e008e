//! `cargo xtask` refuses, before it opens a backend, the arguments that would check or
//! measure nothing or something else than asked: `verify --random` outside 1..=100000
//! (0 passed having checked nothing), `bench` of a family it does not bench, a table
//! with `--family reduce_mma`, and a `--table` that is no table (named, and read before
//! the GPU is opened: these run on machines without one), and a report path that cannot
//! be written (before the run, not after it).

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A failure (status `code`) whose stderr has every needle, with nothing on stdout.
fn refused(args: &[&str], code: i32, needles: &[&str]) {
    let o = xtask(args);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: {n:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(text(&o.stdout), "", "{args:?}");
}

#[test]
fn verify_random_takes_1_to_100000() {
    for n in ["0", "100001"] {
        // clap's usage error (status 2) names the flag, the value and the range.
        refused(
            &["verify", "--backend", "cpu", "--random", n],
            2,
            &["--random", &format!("'{n}'"), "1..=100000"],
        );
    }
}

#[cfg(feature = "cuda")]
#[test]
fn bench_refuses_what_it_would_not_bench_before_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.md");
    let out = out.to_str().unwrap();
    refused(
        &["bench", "--family", "reduce", "--out", out],
        1,
        &["family = reduce", "reduce_mma only"],
    );
    let table = dir.path().join("t.toml");
    std::fs::write(&table, "this is = no [table").unwrap();
    let table = table.to_str().unwrap();
    refused(
        &[
            "bench",
            "--family",
            "reduce_mma",
            "--table",
            table,
            "--out",
            out,
        ],
        1,
        &["table = given", "every launch shape"],
    );
    // The corrupt table is named (not a bench of the embedded tables under a warning,
    // and not a missing-driver error: it is read before the GPU is opened).
    refused(
        &["bench", "--table", table, "--out", out],
        1,
        &[
            &format!("{table}: invalid tuning table"),
            "TOML parse error",
        ],
    );
    assert!(!dir.path().join("bench.md").exists());
}

/// A table another tuning run holds is refused before anything is measured (the two
/// runs would save their tables over each other after every key), naming the table; once
/// released, the same run goes ahead.
#[test]
fn a_table_another_run_holds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.toml");
    let args = [
        "tune",
        "--backend",
        "cpu",
        "--family",
        "reduce",
        "--shape",
        "256x1024",
        "--m",
        "1",
        "--k",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let held = trellis::tune::TableLock::take(&out).unwrap();
    refused(
        &args,
        1,
        &[
            out.to_str().unwrap(),
            "another tuning run is writing this table",
        ],
    );
    assert!(!out.exists());
    drop(held);
    let o = xtask(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(trellis::tune::read_table(&out).unwrap().entries.len() == 1);
}

/// `verify --out` and `bench --out` are checked before anything runs: a missing
/// directory, a directory and a pipe (a write to it would block for ever) are errors
/// naming the path, with no report on stdout (the checks did not run); a good path gets
/// the report whole.
#[cfg(unix)]
#[test]
fn report_paths_are_checked_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let missing = dir.path().join("no/such/dir/r.md");
    let here = dir.path().to_path_buf();
    for p in [&missing, &here, &fifo] {
        let p = p.to_str().unwrap();
        let verify = ["verify", "--backend", "cpu", "--random", "1", "--out", p];
        refused(&verify, 1, &[p]);
        #[cfg(feature = "cuda")]
        refused(&["bench", "--out", p], 1, &[p]);
    }
    let good = dir.path().join("r.md");
    let o = xtask(&[
        "verify",
        "--backend",
        "cpu",
        "--random",
        "1",
        "--out",
        good.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&good).unwrap(), text(&o.stdout));
}

/// `tune --m` past the tier's launch limit is refused by name (the exact tier's
/// families skipped M 9-16 without a word, and the run reported "nothing measured" as a
/// success); the fast tier takes it.
#[test]
fn tune_m_is_checked_against_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let out = out.to_str().unwrap();
    for tier in [&[][..], &["--tier", "exact"][..]] {
        let mut args = vec!["tune", "--backend", "cpu", "--m", "1,12", "--out", out];
        args.extend(tier);
        refused(&args, 1, &["m = 12", "exact tier", "1..=8"]);
    }
    refused(
        &[
            "tune",
            "--backend",
            "cpu",
            "--tier",
            "fast",
            "--m",
            "17",
            "--out",
            out,
        ],
        1,
        &["m = 17", "fast tier", "1..=16"],
    );
    let o = xtask(&[
        "tune",
        "--plan",
        "--backend",
        "cpu",
        "--tier",
        "fast",
        "--m",
        "12",
        "--out",
        out,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("problems to measure"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn tune_durations_are_bounded() {
    // A timeout of u64::MAX seconds overflowed the harness's clock arithmetic (a panic,
    // then every candidate blamed for a crash); past a year it is refused by name.
    for (flag, value) in [
        ("--candidate-timeout", "18446744073709551615s"),
        ("--budget", "8761h"),
        ("--budget", "99999999999999999999s"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.toml");
        let out = out.to_str().unwrap();
        refused(
            &[
                "tune",
                "--backend",
                "cpu",
                flag,
                value,
                "--plan",
                "--out",
                out,
            ],
            1,
            &[&flag[2..], value, "at most 8760h"],
        );
    }
}
