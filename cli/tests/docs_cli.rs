//! `docs/cli.md` is one script that runs top to bottom on a fresh clone: this test runs
//! exactly its `sh` blocks, in order, with `bash -eu -o pipefail`, in an empty directory
//! where `target/release/trellis` is this build's binary and `cargo build --release`
//! (already done by the test harness) is a no-op.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_trellis");

/// The fenced ```sh blocks of a markdown text, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            _ => {}
        }
    }
    assert!(current.is_none(), "unclosed code block");
    blocks
}

#[test]
fn docs_cli_runs_top_to_bottom() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    let blocks = sh_blocks(&std::fs::read_to_string(&doc).unwrap());
    assert!(
        blocks.len() >= 2,
        "docs/cli.md has {} sh blocks",
        blocks.len()
    );
    let script = blocks.concat();
    assert!(script.starts_with("cargo build --release"), "{script}");

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("checkout");
    std::fs::create_dir_all(root.join("target/release")).unwrap();
    std::os::unix::fs::symlink(BIN, root.join("target/release/trellis")).unwrap();
    // `cargo` on PATH: only the documented build, which the harness has done.
    let stub = tmp.path().join("bin");
    std::fs::create_dir(&stub).unwrap();
    let cargo = stub.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n[ \"$*\" = \"build --release\" ] || { echo \"unexpected: cargo $*\" >&2; exit 1; }\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-eu", "-o", "pipefail", "-c", &script])
        .current_dir(&root)
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "docs/cli.md failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for want in [
        "w: 4096x4096 code=1mad k=2 L=16 T=256 -> target/demo/w.safetensors",
        "x: bf16 [4, 4096] -> target/demo/x.safetensors",
        "y: bf16 [4, 4096]",
        "mid: bf16 [4, 4096]",
        "layers.0.mlp.up_proj.weight: bf16 [256, 4096] -> target/demo/model.safetensors",
        "w: code=1mad k=2 L=16 T=256 rows=4096 cols=4096 scales=f16",
        "w: code=1mad k=2 L=12 T=256 rows=256 cols=4096 scales=f16",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{stdout}"))
    };
    // A Gaussian matrix at k 2, L 12: above the rate-distortion bound 2^-4, near the
    // encoder's 0.075 (docs/encoder.md).
    let rel: f64 = value("relative mse: ").parse().unwrap();
    assert!((0.0625..0.09).contains(&rel), "relative mse {rel}");
    // The H200 table's exact choice for the key; the default backend of this machine.
    assert!(value("variant: ").ends_with(" exact"), "{stdout}");
    assert!(
        ["cpu", "cuda", "metal"].contains(&value("default: ")),
        "{stdout}"
    );
    for f in ["w", "x", "y", "g", "u", "mid", "model", "up"] {
        assert!(
            root.join(format!("target/demo/{f}.safetensors")).is_file(),
            "{f}.safetensors"
        );
    }
    // What the walkthrough computed: exact y and mid the reference's bits, fast y within
    // SPEC 7 of the real sums.
    use trellis::{check, io, reference};
    let demo = |f: &str| root.join(format!("target/demo/{f}.safetensors"));
    let matrix = |f: &str| io::read_quantized(&demo(f), "w").unwrap();
    let act = |f: &str, name: &str| io::read_activations(&demo(f), name).unwrap();
    let (w, x) = (matrix("w"), act("x", "x"));
    assert!(act("y", "y").bits_eq(&reference::reduce(&w, &x).unwrap()));
    check::fast_reduce(&act("y-fast", "y"), &check::RealSums::of(&w, &x).unwrap()).unwrap();
    let (g, u) = (matrix("g"), matrix("u"));
    assert!(act("mid", "mid").bits_eq(&reference::gate_up(&g, &u, &x).unwrap()));
}

#[test]
fn blocks_are_extracted_in_order() {
    let md = "a\n```sh\none\n```\ntext\n```rust\nno\n```\n```sh\ntwo\nthree\n```\n";
    assert_eq!(sh_blocks(md), vec!["one\n", "two\nthree\n"]);
}
