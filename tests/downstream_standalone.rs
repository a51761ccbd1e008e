//! `examples/downstream` builds as is once copied out of the tree: a copy in a temporary
//! directory, its `trellis` dependency pointed at this checkout, builds offline (sharing
//! this workspace's target directory and lock file, so only the example itself compiles).

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            if e.file_name() != "target" {
                copy_dir(&src, &dst);
            }
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn the_downstream_example_builds_outside_the_workspace() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("downstream");
    copy_dir(&root.join("examples/downstream"), &copy);
    let manifest = copy.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        !text.contains(".workspace"),
        "inherits from the workspace:\n{text}"
    );
    // The one edit a user makes: where trellis is.
    let pointed = text.replace(
        r#"trellis = { path = "../.." }"#,
        &format!("trellis = {{ path = {:?} }}", root.display().to_string()),
    );
    assert_ne!(
        pointed, text,
        "the trellis dependency line changed:\n{text}"
    );
    std::fs::write(&manifest, pointed).unwrap();
    std::fs::copy(root.join("Cargo.lock"), copy.join("Cargo.lock")).unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--offline", "--release", "--all-targets"])
        .current_dir(&copy)
        .env("CARGO_TARGET_DIR", &target)
        // The workspace's release profile, so the shared dependencies are reused.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "line-tables-only")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build of the copied example failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
