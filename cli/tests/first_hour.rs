//! What a new user runs into first (issue 9): no input is ever overwritten, every failure
//! is one `error:` line (no command, a misspelt flag, sizes over the limits, NaN
//! activations, a scale that overflows f16), and `random-dense` makes quantize's input.

use std::path::Path;
use std::process::{Command, Output};
use trellis::io::{self, Writer};
use trellis::{Activations, DType};

const BIN: &str = env!("CARGO_BIN_EXE_trellis");

fn trellis(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run the trellis binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = trellis(dir, args);
    assert!(
        out.status.success(),
        "trellis {args:?}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Exit status 1, nothing on stdout, exactly one stderr line `error: ...` that contains
/// every needle; returns the line.
fn one_error(dir: &Path, args: &[&str], needles: &[&str]) -> String {
    let out = trellis(dir, args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "trellis {args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "trellis {args:?}: one line expected: {stderr:?}"
    );
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
    for n in needles {
        assert!(lines[0].contains(n), "{:?} should mention {n:?}", lines[0]);
    }
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    lines[0].to_string()
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A 4 x 256 matrix `w.safetensors`, activations `x.safetensors` [2, 256] and a dense
/// `dense.safetensors` [4, 256] in `dir`.
fn inputs(dir: &Path) {
    ok(
        dir,
        &[
            "random",
            "--rows",
            "4",
            "--cols",
            "256",
            "--k",
            "2",
            "--l",
            "12",
            "--code",
            "1mad",
            "--out",
            "w.safetensors",
        ],
    );
    ok(
        dir,
        &[
            "random-x",
            "--m",
            "2",
            "--cols",
            "256",
            "--out",
            "x.safetensors",
        ],
    );
    ok(
        dir,
        &[
            "random-dense",
            "--rows",
            "4",
            "--cols",
            "256",
            "--out",
            "dense.safetensors",
        ],
    );
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    inputs(dir);
    std::fs::create_dir(dir.join("sub")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.join("w.safetensors"), dir.join("sub/link")).unwrap();
    std::fs::hard_link(dir.join("x.safetensors"), dir.join("hard.safetensors")).unwrap();
    let (w, x, d) = (
        bytes(&dir.join("w.safetensors")),
        bytes(&dir.join("x.safetensors")),
        bytes(&dir.join("dense.safetensors")),
    );
    fn mv(out: &str) -> Vec<&str> {
        vec![
            "matvec",
            "--weights",
            "w.safetensors",
            "--x",
            "x.safetensors",
            "--out",
            out,
        ]
    }
    for (out, flag) in [
        ("w.safetensors", "--weights"),
        ("./sub/../w.safetensors", "--weights"),
        ("x.safetensors", "--x"),
        ("hard.safetensors", "--x"),
    ] {
        one_error(dir, &mv(out), &[out, "same file", flag, "refusing"]);
    }
    #[cfg(unix)]
    one_error(
        dir,
        &mv("sub/link"),
        &["sub/link", "--weights w.safetensors"],
    );
    fn gu(out: &str) -> Vec<&str> {
        vec![
            "gate-up",
            "--gate",
            "w.safetensors",
            "--up",
            "w.safetensors",
            "--x",
            "x.safetensors",
            "--out",
            out,
        ]
    }
    one_error(dir, &gu("w.safetensors"), &["--gate"]);
    one_error(
        dir,
        &gu(&dir.join("x.safetensors").display().to_string()),
        &["--x"],
    );
    one_error(
        dir,
        &[
            "quantize",
            "--input",
            "dense.safetensors",
            "--tensor",
            "weight",
            "--k",
            "2",
            "--l",
            "12",
            "--code",
            "1mad",
            "--out",
            "dense.safetensors",
        ],
        &["--input"],
    );
    assert_eq!(bytes(&dir.join("w.safetensors")), w);
    assert_eq!(bytes(&dir.join("x.safetensors")), x);
    assert_eq!(bytes(&dir.join("dense.safetensors")), d);
    // A new output, and overwriting an output that is not an input, still work.
    ok(dir, &mv("y.safetensors"));
    ok(dir, &mv("y.safetensors"));
}

#[test]
fn no_command_and_misspellings_are_one_line_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_error(dir, &[], &["no command", "random-dense", "--help"]);
    one_error(dir, &["matvek"], &["matvek", "matvec"]);
    one_error(dir, &["random", "--rwos", "4"], &["--rwos", "--rows"]);
    // Help and version are not failures.
    let help = trellis(dir, &["--help"]);
    assert!(help.status.success() && text(&help.stdout).contains("random-dense"));
}

#[test]
fn sizes_are_checked_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("o.safetensors");
    one_error(
        dir,
        &[
            "random-x",
            "--m",
            "100000000",
            "--cols",
            "100000",
            "--out",
            "o.safetensors",
        ],
        &["--m", "--cols", "4294967296"],
    );
    one_error(
        dir,
        &[
            "random",
            "--rows",
            "4611686018427387904",
            "--cols",
            "256",
            "--k",
            "2",
            "--l",
            "12",
            "--code",
            "1mad",
            "--out",
            "o.safetensors",
        ],
        &["--rows", "4611686018427387904", "4294967296"],
    );
    one_error(
        dir,
        &[
            "random-dense",
            "--rows",
            "18446744073709551615",
            "--cols",
            "2",
            "--out",
            "o.safetensors",
        ],
        &["--rows", "--cols", "limit"],
    );
    assert!(!out.exists());
}

fn write_x(path: &Path, values: Vec<f32>, dtype: DType) {
    let x = Activations::from_f32(dtype, 2, 256, values).unwrap();
    let mut w = Writer::new();
    w.activations("x", &x);
    w.write(path).unwrap();
}

#[test]
fn non_finite_activations_are_rejected_like_non_finite_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    inputs(dir);
    for (bad, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            let mut v = vec![0.5f32; 512];
            v[256 + 7] = bad;
            write_x(&dir.join("bad.safetensors"), v, dtype);
            for cmd in [
                vec!["matvec", "--weights", "w.safetensors"],
                vec![
                    "gate-up",
                    "--gate",
                    "w.safetensors",
                    "--up",
                    "w.safetensors",
                ],
            ] {
                let mut args = cmd.clone();
                args.extend(["--x", "bad.safetensors", "--out", "y.safetensors"]);
                one_error(dir, &args, &["bad.safetensors", "x[1, 7]", shown, "finite"]);
                assert!(!dir.join("y.safetensors").exists());
            }
        }
    }
}

/// Finite values and scales whose SPEC 4 weight `round_T(value * scale)` overflows T:
/// the exact tier would answer inf or NaN (SPEC 7 forbids it), so it refuses, naming the
/// weight, on every backend; the fast tier does not round weights to T and runs.
#[test]
fn weights_that_overflow_the_activation_dtype_are_refused_by_the_exact_tier() {
    use trellis::{Code, Geometry, QuantizedMatrix, ScaleDType};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let g = Geometry::new(4, 256, 256, 2, 12, Code::OneMad).unwrap();
    let codes = (0..g.codes_shape().iter().product::<usize>() as u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9))
        .collect();
    let scales = vec![1.0, 65504.0, 1.0, 1.0];
    let w = QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, None).unwrap();
    let mut f = Writer::new();
    f.quantized("w", &w);
    f.write(&dir.join("big.safetensors")).unwrap();
    write_x(
        &dir.join("x.safetensors"),
        vec![1.0 / 1024.0; 512],
        DType::F16,
    );
    let gate_up = [
        "gate-up",
        "--gate",
        "big.safetensors",
        "--up",
        "big.safetensors",
    ];
    for backend in ["cpu", "reference"] {
        for cmd in [
            &["matvec", "--weights", "big.safetensors"][..],
            &gate_up[..],
        ] {
            let mut args = cmd.to_vec();
            args.extend(["--x", "x.safetensors", "--out", "y.safetensors"]);
            args.extend(["--backend", backend]);
            one_error(
                dir,
                &args,
                &["weight w[1, ", "scales[1] 65504", "overflows f16"],
            );
            assert!(!dir.join("y.safetensors").exists());
        }
    }
    let mut args = vec![
        "matvec",
        "--weights",
        "big.safetensors",
        "--x",
        "x.safetensors",
    ];
    args.extend([
        "--out",
        "y.safetensors",
        "--backend",
        "cpu",
        "--tier",
        "fast",
    ]);
    ok(dir, &args);
    let y = io::read_activations(&dir.join("y.safetensors"), "y").unwrap();
    assert!(y.data.iter().all(|v| v.is_finite()), "{:?}", y.data);
    // ... and within SPEC 7 of the real sums (row 1's reach about 2^15 in f16).
    let x = io::read_activations(&dir.join("x.safetensors"), "x").unwrap();
    let real = trellis::check::RealSums::of(&w, &x).unwrap();
    trellis::check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("fast tier: {e}"));
}

#[test]
fn a_scale_that_overflows_f16_names_the_file_and_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut w = Writer::new();
    w.f32("big", vec![2, 256], &vec![1e30f32; 512]);
    w.write(&dir.join("big.safetensors")).unwrap();
    one_error(
        dir,
        &[
            "quantize",
            "--input",
            "big.safetensors",
            "--tensor",
            "big",
            "--k",
            "2",
            "--l",
            "12",
            "--code",
            "1mad",
            "--out",
            "q.safetensors",
        ],
        &["big.safetensors", "`big`", "scale of row 0", "f16"],
    );
    assert!(!dir.join("q.safetensors").exists());
}

#[test]
fn random_dense_feeds_quantize_and_the_result_lines_stand_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let stdout = ok(
        dir,
        &[
            "random-dense",
            "--rows",
            "8",
            "--cols",
            "512",
            "--dtype",
            "f32",
            "--std",
            "0.02",
            "--seed",
            "3",
            "--name",
            "layers.0.mlp.up_proj.weight",
            "--out",
            "m.safetensors",
        ],
    );
    assert_eq!(
        stdout,
        format!("layers.0.mlp.up_proj.weight: f32 [8, 512] -> m.safetensors\n")
    );
    let (v, rows, cols) =
        io::read_dense(&dir.join("m.safetensors"), "layers.0.mlp.up_proj.weight").unwrap();
    assert_eq!((rows, cols), (8, 512));
    let mean_sq = v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / v.len() as f64;
    assert!(
        (mean_sq.sqrt() - 0.02).abs() < 0.002,
        "rms {}",
        mean_sq.sqrt()
    );
    // Same seed, same bytes.
    ok(
        dir,
        &[
            "random-dense",
            "--rows",
            "8",
            "--cols",
            "512",
            "--dtype",
            "f32",
            "--std",
            "0.02",
            "--seed",
            "3",
            "--name",
            "layers.0.mlp.up_proj.weight",
            "--out",
            "m2.safetensors",
        ],
    );
    assert_eq!(
        bytes(&dir.join("m.safetensors")),
        bytes(&dir.join("m2.safetensors"))
    );
    let out = trellis(
        dir,
        &[
            "quantize",
            "--input",
            "m.safetensors",
            "--tensor",
            "layers.0.mlp.up_proj.weight",
            "--k",
            "2",
            "--l",
            "12",
            "--code",
            "1mad",
            "--out",
            "q.safetensors",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Off a terminal there is no bar: stderr is empty, stdout holds whole result lines.
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stderr, "");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("mse: "), "{stdout:?}");
    assert!(lines[1].starts_with("relative mse: "), "{stdout:?}");
    let rel: f64 = lines[1]["relative mse: ".len()..].parse().unwrap();
    assert!((0.05..0.1).contains(&rel), "{rel}");
    one_error(
        dir,
        &[
            "random-dense",
            "--rows",
            "0",
            "--cols",
            "4",
            "--out",
            "z.safetensors",
        ],
        &["rows = 0"],
    );
    one_error(
        dir,
        &[
            "random-dense",
            "--rows",
            "2",
            "--cols",
            "4",
            "--std",
            "-1",
            "--out",
            "z.safetensors",
        ],
        &["std = -1"],
    );
}
