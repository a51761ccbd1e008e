//! `trellis matvec|gate-up --backend metal-sim`: the Metal rendering, run by the
//! simulator through the CLI, reproduces the conformance vectors bit for bit.

#[test]
fn cli_runs_metal_sim_bit_exact_on_the_vectors() {
    let vectors = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors");
    assert!(
        vectors.join("index.json").exists(),
        "the conformance vectors must be at {} (../shared beside the checkout)",
        vectors.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_trellis");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "trellis {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for (file, kind) in [
        ("matvec-1mad-k2-L12-bf16-m4.safetensors", "matvec"),
        ("gateup-3inst-k4k3-L16-f16-m2.safetensors", "gate-up"),
    ] {
        let f = vectors.join(file);
        let f = f.to_str().unwrap();
        let out = dir.path().join(format!("{kind}.safetensors"));
        let o = out.to_str().unwrap();
        if kind == "matvec" {
            run(&[
                "matvec",
                "--weights",
                f,
                "--x",
                f,
                "--out",
                o,
                "--backend",
                "metal-sim",
            ]);
            let got = trellis::io::read_activations(&out, "y").unwrap();
            let want = trellis::io::read_activations(std::path::Path::new(f), "y").unwrap();
            assert_eq!(trellis::check::first_mismatch(&got, &want), None, "{file}");
        } else {
            run(&[
                "gate-up",
                "--gate",
                f,
                "--up",
                f,
                "--gate-prefix",
                "gate",
                "--up-prefix",
                "up",
                "--x",
                f,
                "--out",
                o,
                "--backend",
                "metal-sim",
            ]);
            let got = trellis::io::read_activations(&out, "mid").unwrap();
            let want = trellis::io::read_activations(std::path::Path::new(f), "mid").unwrap();
            assert_eq!(trellis::check::first_mismatch(&got, &want), None, "{file}");
        }
    }
}
