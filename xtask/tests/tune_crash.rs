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
        .env("TRELLIS_TUNE_FAULT", "shared_table")
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
    let space = trellis::catalog::variants(trellis::kernels::Tier::Exact, 1, true);
    let shared = space
        .iter()
        .filter(|v| v.repr == trellis::kernels::Representation::SharedTable)
        .count();
    assert_eq!(crashed.len(), shared, "{:?}", e.rejected);
    assert!(
        crashed.iter().all(|r| r.starts_with("shared_table")),
        "{crashed:?}"
    );
    assert_ne!(e.winner.repr, "shared_table");
    assert!(!out.with_extension("toml.journal").exists());
}
