//! A candidate that kills the tuning process is rejected on resume, and the run still
//! finishes with a table: `cargo xtask tune` supervises its worker and the journal names
//! the candidate that was running.

use std::process::Command;

#[test]
fn a_crashing_candidate_is_rejected_and_tuning_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "tune",
            "--backend",
            "cpu",
            "--family",
            "reduce",
            "--shape",
            "64x256",
            "--m",
            "1",
            "--k",
            "2",
            "--l",
            "9",
        ])
        .args(["--code", "1mad", "--reps", "1", "--budget", "5m", "--out"])
        .arg(&out)
        // Every shared_table candidate aborts the process when it starts.
        .env("TRELLIS_TUNE_FAULT", "crash:shared_table")
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(table.entries.len(), 1);
    let e = &table.entries[0];
    let crashed: Vec<_> = e
        .rejected
        .iter()
        .filter(|r| r.contains("crashed the tuning process"))
        .collect();
    // Every shared_table candidate of the space this run tunes over (the CPU backend
    // tunes the quick space).
    let space = trellis::families::catalog::variants(trellis::numerics::Tier::Exact, 1, true);
    let shared = space
        .iter()
        .filter(|v| v.repr == trellis::families::simt::Representation::SharedTable)
        .count();
    assert_eq!(crashed.len(), shared, "{:?}", e.rejected);
    assert!(
        crashed.iter().all(|r| r.starts_with("shared_table")),
        "{crashed:?}"
    );
    assert_ne!(e.winner["repr"].as_str(), Some("shared_table"));
    // The journal is not beside the table (only the table and its lock are there).
    let mut beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, [".t.toml.lock", "t.toml"]);
}

/// A candidate that never returns is killed by the supervisor at its time limit and
/// recorded as rejected (timed out); the run still finishes with a table.
#[test]
fn a_hanging_candidate_is_killed_and_rejected_as_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "tune",
            "--backend",
            "cpu",
            "--family",
            "reduce",
            "--shape",
            "64x256",
            "--m",
            "1",
            "--k",
            "2",
            "--l",
            "9",
            "--code",
            "1mad",
            "--reps",
            "1",
            "--budget",
            "5m",
            "--candidate-timeout",
            "3s",
            "--out",
        ])
        .arg(&out)
        // The one global_table candidate with x staged as f32 never returns.
        .env(
            "TRELLIS_TUNE_FAULT",
            "hang:global_table shared_decode rpg=4 x=shared_f32",
        )
        .status()
        .unwrap();
    // (Had the supervisor not killed it, the run would never end: the rejection below is
    // the check, not a clock.)
    assert!(status.success(), "{status}");
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let e = &table.entries[0];
    let timed_out: Vec<_> = e
        .rejected
        .iter()
        .filter(|r| r.contains("timed out"))
        .collect();
    assert_eq!(timed_out.len(), 1, "{:?}", e.rejected);
    assert!(
        timed_out[0].starts_with("global_table shared_decode rpg=4 x=shared_f32"),
        "{timed_out:?}"
    );
    assert!(
        !(e.winner["repr"].as_str() == Some("global_table")
            && e.winner["x_stage"].as_str() == Some("shared_f32")),
        "{:?}",
        e.winner
    );
}

/// `cargo xtask tune` of reduce on the CPU over three small keys into `out`, with
/// `extra` flags and the fault `fault` injected: its output.
fn tune_three_keys(out: &std::path::Path, extra: &[&str], fault: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["tune", "--backend", "cpu", "--family", "reduce"])
        .args(["--shape", "64x256,64x512,128x256", "--m", "1", "--k", "2"])
        .args(["--l", "9", "--code", "1mad", "--reps", "1"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .env("TRELLIS_TUNE_FAULT", fault)
        .output()
        .unwrap()
}

/// The supervisor gives up only on deaths that disqualify no new candidate: a run over
/// three keys whose every shared_table candidate crashes (more crashes than the eight
/// restarts it allows in a row) still finishes with all three entries.
#[test]
fn many_crashing_candidates_over_several_keys_still_finish() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let o = tune_three_keys(&out, &["--budget", "5m"], "crash:shared_table");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", o.status);
    assert!(err.matches("the tuner died").count() > 8, "{err}");
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(table.entries.len(), 3);
}

/// `--budget` is the whole run's: a worker restarted after a kill gets what the earlier
/// ones left, not a fresh budget (with one, this run tuned all three keys and exited 0).
#[test]
fn the_budget_spans_the_workers_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    // One candidate of every key never returns: each costs 2 s before its kill.
    let o = tune_three_keys(
        &out,
        &["--budget", "3s", "--candidate-timeout", "2s"],
        "hang:global_table shared_decode rpg=4 x=shared_f32",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("keys not tuned"), "{err}");
    // A worker was killed and restarted (else the budget ran out in the first worker and
    // this run would say nothing of what a restarted one gets).
    assert!(err.contains("ran past its time limit; killed"), "{err}");
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(table.entries.len() < 3, "{err}");
}

/// A key whose built-in default is rejected (here: it crashes the process) gets an entry
/// without a speedup, and the table resumes and reads back (its speedup was NaN, which
/// the table's own check refused: the run could not resume and the selector dropped it).
#[test]
fn a_rejected_default_leaves_a_table_that_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let default = trellis::families::simt::Variant {
        tier: trellis::numerics::Tier::Exact,
        ..Default::default()
    };
    // Ids are `[key] variant`: the default, and any twin whose id extends it.
    let o = tune_three_keys(&out, &["--budget", "5m"], &format!("crash:] {default}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", o.status);
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(table.entries.len(), 3);
    for e in &table.entries {
        assert!(e.default.is_none() && e.speedup.is_none(), "{e:?}");
        assert!(
            e.rejected
                .iter()
                .any(|r| r.starts_with(&default.to_string())),
            "{:?}",
            e.rejected
        );
    }
    trellis::tune::check_table(&table).unwrap();
    // Run again: it resumes (every key current), measuring nothing.
    let again = tune_three_keys(&out, &["--budget", "5m"], "");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{}: {err}", again.status);
    assert!(err.contains("resuming"), "{err}");
    assert!(!err.contains(" -> "), "{err}");
}

/// Under `--fresh`, a worker restarted after a crash keeps what the run's earlier workers
/// measured: each key is measured once, not once a restart.
#[test]
fn a_fresh_run_measures_each_key_once_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    // The last key's shared_table candidates crash (several restarts, all after the
    // first two keys were measured).
    let o = tune_three_keys(
        &out,
        &["--budget", "5m", "--fresh"],
        "crash:128x256] shared_table",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", o.status);
    assert!(err.matches("the tuner died").count() > 1, "{err}");
    for i in 1..=3 {
        let done = format!("tune reduce {i}/3: ");
        assert_eq!(err.matches(&done).count(), 1, "{done}: {err}");
    }
    let table = trellis::tune::Table::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(table.entries.len(), 3);
}

/// A worker whose supervisor is killed alone (`kill PID`, a service manager that signals
/// only the main process) stops too, removing the journal's directory: left running, it
/// held the table's lock for ever (here its candidate hangs, and no supervisor is left to
/// kill it).
#[test]
fn the_worker_stops_when_its_supervisor_is_killed() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let temp = dir.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    let mut supervisor = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["tune", "--backend", "cpu", "--family", "reduce"])
        .args(["--shape", "64x256", "--m", "1", "--k", "2", "--l", "9"])
        .args(["--code", "1mad", "--candidate-timeout", "1h", "--out"])
        .arg(&out)
        .env("TRELLIS_TUNE_FAULT", "hang:]")
        // The journal's directory goes here, to see it removed.
        .env("TMPDIR", &temp)
        // (Not this test's pipes: a worker left running would hold them open.)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let held = |limit: Duration, want: bool| {
        let start = Instant::now();
        while start.elapsed() < limit {
            if trellis::tune::TableLock::take(&out).is_err() == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    assert!(held(Duration::from_secs(60), true), "no run took the table");
    // Past the supervisor's own start: the worker holds the lock from here on.
    std::thread::sleep(Duration::from_millis(500));
    supervisor.kill().unwrap();
    supervisor.wait().unwrap();
    assert!(
        held(Duration::from_secs(30), false),
        "the worker still holds the table after its supervisor died"
    );
    // And it removed the journal's directory, which the supervisor could not.
    let left: Vec<_> = std::fs::read_dir(&temp).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A valid shape whose random matrix the host has no room for (here: 4 GB of code words
/// under a 3 GB address-space limit) fails that problem by name, not the process with an
/// allocation abort, and the run ends with the error that says so.
#[cfg(target_os = "linux")]
#[test]
fn a_matrix_the_host_cannot_hold_fails_its_problem_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let o = Command::new("sh")
        .args(["-c", "ulimit -v 3000000 && exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_xtask"))
        .args(["tune", "--backend", "cpu", "--family", "reduce"])
        .args([
            "--shape",
            "131072x32768",
            "--m",
            "1",
            "--k",
            "8",
            "--l",
            "12",
        ])
        .args(["--code", "1mad", "--budget", "5m", "--out"])
        .arg(&out)
        // Two threads: each of rayon's thread stacks counts against the limit too.
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    for needle in [
        "not tuned: invalid codes = 1073741824 words (a random 131072x32768 matrix)",
        "cannot allocate",
        "1 of 1 keys: failed to tune",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out.exists(), "a table of nothing measured was written");
}
