//! End-to-end tests of the `trellis` binary: the happy paths against the in-process
//! reference, and every malformed input. A rejected input must exit non-zero with exactly
//! one stderr line `error: ...` naming the field and value, print no panic report, and
//! leave no output file (nor a temporary one) behind.

use safetensors::Dtype;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use trellis::io::{self, SafetensorsFile};
use trellis::{reference, Activations, Code, DType};

const BIN: &str = env!("CARGO_BIN_EXE_trellis");

fn trellis(args: &[&str]) -> Output {
    trellis_env(args, &[])
}

/// `trellis` with environment variables set.
fn trellis_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run the trellis binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run, require success, return stdout.
fn ok(args: &[&str]) -> String {
    let out = trellis(args);
    assert!(
        out.status.success(),
        "trellis {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Run, require a clean failure mentioning every needle, nothing on stdout, and no file
/// at `out_path`.
fn fails(args: &[&str], out_path: &Path, needles: &[&str]) -> String {
    fails_env(args, &[], out_path, needles)
}

/// [`fails`] with environment variables set.
fn fails_env(args: &[&str], env: &[(&str, &str)], out_path: &Path, needles: &[&str]) -> String {
    let out = trellis_env(args, env);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "trellis {args:?} should exit 1; stderr: {stderr}"
    );
    assert_eq!(text(&out.stdout), "", "trellis {args:?}: stdout on failure");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "trellis {args:?} panicked: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "trellis {args:?}: stderr must be one line: {stderr:?}"
    );
    assert!(
        !lines[0].chars().any(char::is_control),
        "trellis {args:?}: a control character on stderr: {stderr:?}"
    );
    assert!(
        lines[0].starts_with("error: "),
        "trellis {args:?}: stderr must start with `error: `: {stderr:?}"
    );
    for n in needles {
        assert!(
            lines[0].contains(n),
            "trellis {args:?}: error {:?} should mention {n:?}",
            lines[0]
        );
    }
    assert!(
        !out_path.exists(),
        "trellis {args:?} failed but left {}",
        out_path.display()
    );
    no_temp_files(out_path.parent().unwrap());
    lines[0].to_string()
}

/// No atomic-write leftovers (`.<name>.<pid>.<n>.tmp`) in `dir`.
fn no_temp_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "temporary file {name} left behind");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Self {
        Dir(tempfile::tempdir().unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// Write a safetensors file directly through the safetensors crate (no `trellis::io`),
/// so malformed files can be built.
fn write_raw(path: &Path, tensors: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>, meta: &[(&str, &str)]) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, shape, data)| {
            (
                n.to_string(),
                safetensors::tensor::TensorView::new(*d, shape.clone(), data).unwrap(),
            )
        })
        .collect();
    let meta: Option<HashMap<String, String>> = (!meta.is_empty()).then(|| {
        meta.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    });
    let bytes = safetensors::serialize(views, meta).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn u32_bytes(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .flat_map(|i| {
            (i.wrapping_add(seed))
                .wrapping_mul(0x9E37_79B9)
                .to_le_bytes()
        })
        .collect()
}

fn f16_bytes(values: &[f32]) -> Vec<u8> {
    DType::F16.encode(values)
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    DType::F32.encode(values)
}

const META_OK: &str = "code=1mad;k=2;L=12;T=256;rows=4;cols=512";

/// A quantized matrix `w` with the given metadata and tensor shapes.
fn weights_file(
    path: &Path,
    meta: Option<&str>,
    codes_shape: Vec<usize>,
    scales_shape: Vec<usize>,
) {
    let n: usize = codes_shape.iter().product();
    let r: usize = scales_shape.iter().product();
    let meta: Vec<(&str, &str)> = meta.map(|m| vec![("w.trellis", m)]).unwrap_or_default();
    write_raw(
        path,
        vec![
            ("w.codes", Dtype::U32, codes_shape, u32_bytes(n, 1)),
            (
                "w.scales",
                Dtype::F16,
                scales_shape,
                f16_bytes(&vec![0.02; r]),
            ),
        ],
        &meta,
    );
}

fn x_file(path: &Path, dtype: Dtype, shape: Vec<usize>) {
    let n: usize = shape.iter().product();
    let bytes = match dtype {
        Dtype::F32 => f32_bytes(&vec![0.5; n]),
        Dtype::BF16 => DType::Bf16.encode(&vec![0.5; n]),
        Dtype::F16 => f16_bytes(&vec![0.5; n]),
        Dtype::F64 => (0..n).flat_map(|_| 0.5f64.to_le_bytes()).collect(),
        Dtype::I32 => (0..n).flat_map(|_| 1i32.to_le_bytes()).collect(),
        other => panic!("no test data for {other}"),
    };
    write_raw(path, vec![("x", dtype, shape, bytes)], &[]);
}

fn read_bits(path: &Path, name: &str) -> Activations {
    io::read_activations(path, name).unwrap()
}

/// `y` (tensor `y` of `y_path`) is the reference's `W x` bit for bit, for the matrix of
/// prefix `w` in `w_path` and the activations `x` of `x_path`.
fn assert_reference_y(w_path: &Path, x_path: &Path, y_path: &Path) {
    let w = io::read_quantized(w_path, "w").unwrap();
    let x = read_bits(x_path, "x");
    let want = reference::reduce(&w, &x).unwrap();
    assert!(
        read_bits(y_path, "y").bits_eq(&want),
        "{}",
        y_path.display()
    );
}

fn assert_same_bits(what: &str, got: &Activations, want: &Activations) {
    assert_eq!(
        (got.dtype, got.rows, got.cols),
        (want.dtype, want.rows, want.cols),
        "{what}"
    );
    for (i, (a, b)) in got.data.iter().zip(&want.data).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: first mismatch at [{}, {}]: {a} vs {b}",
            i / got.cols,
            i % got.cols
        );
    }
}

// ---------------------------------------------------------------------------------------
// Happy paths

#[test]
fn random_then_matvec_matches_the_reference() {
    let d = Dir::new();
    let (w, x, y) = (
        d.path("w.safetensors"),
        d.path("x.safetensors"),
        d.path("y.safetensors"),
    );
    for (code, k, l, t, dtype) in [
        ("1mad", "2", "12", "256", "bf16"),
        ("3inst", "4", "16", "128", "f16"),
        ("mcg", "1", "8", "32", "f32"),
        ("mul1", "5", "13", "64", "bf16"),
        ("lut", "3", "10", "64", "f16"),
    ] {
        ok(&[
            "random",
            "--rows",
            "12",
            "--cols",
            "512",
            "--k",
            k,
            "--l",
            l,
            "--t",
            t,
            "--code",
            code,
            "--seed",
            "7",
            "--out",
            s(&w),
        ]);
        ok(&[
            "random-x",
            "--m",
            "3",
            "--cols",
            "512",
            "--dtype",
            dtype,
            "--seed",
            "9",
            "--out",
            s(&x),
        ]);
        let stdout = ok(&["matvec", "--weights", s(&w), "--x", s(&x), "--out", s(&y)]);
        assert!(stdout.contains("y:"), "{stdout}");

        let wm = io::read_quantized(&w, "w").unwrap();
        assert_eq!(wm.geometry.code, code.parse::<Code>().unwrap());
        assert!(
            wm.scales.iter().all(|&v| (0.009..0.051).contains(&v)),
            "{:?}",
            wm.scales
        );
        let xa = read_bits(&x, "x");
        assert_eq!(xa.dtype.name(), dtype);
        let want = reference::reduce(&wm, &xa).unwrap();
        let got = read_bits(&y, "y");
        assert_same_bits(&format!("matvec {code} {dtype}"), &got, &want);
        no_temp_files(d.0.path());
    }
}

#[test]
fn random_is_deterministic_per_seed() {
    let d = Dir::new();
    let (a, b, c) = (d.path("a"), d.path("b"), d.path("c"));
    let args = |seed: &str, out: &Path| {
        ok(&[
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
            "lut",
            "--seed",
            seed,
            "--out",
            s(out),
        ]);
    };
    args("1", &a);
    args("1", &b);
    args("2", &c);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&c).unwrap());
    let w = io::read_quantized(&a, "w").unwrap();
    assert_eq!(w.lut.as_ref().map(Vec::len), Some(4096));
}

#[test]
fn gate_up_matches_the_reference() {
    let d = Dir::new();
    let (g, u, x, mid) = (
        d.path("g.safetensors"),
        d.path("u.safetensors"),
        d.path("x.safetensors"),
        d.path("mid.safetensors"),
    );
    ok(&[
        "random",
        "--rows",
        "24",
        "--cols",
        "768",
        "--k",
        "2",
        "--l",
        "12",
        "--code",
        "1mad",
        "--seed",
        "1",
        "--out",
        s(&g),
        "--prefix",
        "gate",
    ]);
    ok(&[
        "random",
        "--rows",
        "24",
        "--cols",
        "768",
        "--k",
        "4",
        "--l",
        "16",
        "--code",
        "mul1",
        "--seed",
        "2",
        "--out",
        s(&u),
        "--prefix",
        "up",
    ]);
    // And an up matrix of its own block size T (SPEC 6 lets each matrix have its own;
    // the fused kernels take one T, so the facade runs this pair unfused).
    let u128 = d.path("u128.safetensors");
    ok(&[
        "random",
        "--rows",
        "24",
        "--cols",
        "768",
        "--t",
        "128",
        "--k",
        "3",
        "--l",
        "12",
        "--code",
        "3inst",
        "--seed",
        "3",
        "--out",
        s(&u128),
        "--prefix",
        "up",
    ]);
    for (dtype, u) in [
        ("bf16", &u),
        ("f16", &u),
        ("f32", &u),
        ("bf16", &u128),
        ("f32", &u128),
    ] {
        ok(&[
            "random-x",
            "--m",
            "2",
            "--cols",
            "768",
            "--dtype",
            dtype,
            "--out",
            s(&x),
        ]);
        let gate_up = |extra: &[&str]| {
            let mut args = vec![
                "gate-up",
                "--gate",
                s(&g),
                "--up",
                s(u),
                "--x",
                s(&x),
                "--out",
                s(&mid),
                "--gate-prefix",
                "gate",
                "--up-prefix",
                "up",
            ];
            args.extend_from_slice(extra);
            ok(&args)
        };
        gate_up(&["--tail", "exact"]);
        let gm = io::read_quantized(&g, "gate").unwrap();
        let um = io::read_quantized(u, "up").unwrap();
        let xs = read_bits(&x, "x");
        let want = reference::gate_up(&gm, &um, &xs).unwrap();
        assert_same_bits(&format!("gate-up {dtype}"), &read_bits(&mid, "mid"), &want);
        // The cpu backend's native tail (the host's exp): within SPEC 6's tolerance.
        gate_up(&["--tail", "native", "--backend", "cpu"]);
        let (gp, up) = (
            reference::reduce(&gm, &xs).unwrap(),
            reference::reduce(&um, &xs).unwrap(),
        );
        trellis::check::native_gate_up(&read_bits(&mid, "mid"), &want, &gp, &up)
            .unwrap_or_else(|e| panic!("gate-up --tail native {dtype}: {e}"));
        if u == &u128 {
            // The fast tier, on the cpu and the reference backend: SPEC 7's bound.
            let sums = |m| trellis::check::RealSums::of(m, &xs).unwrap();
            for backend in ["cpu", "reference"] {
                gate_up(&["--tier", "fast", "--backend", backend]);
                trellis::check::fast_gate_up(
                    &read_bits(&mid, "mid"),
                    &sums(&gm),
                    &sums(&um),
                    false,
                )
                .unwrap_or_else(|e| panic!("gate-up --tier fast {dtype} {backend}: {e}"));
            }
        }
    }
}

#[test]
fn cli_reproduces_the_conformance_vectors() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors"));
    assert!(
        dir.is_dir(),
        "conformance vectors missing at {}",
        dir.display()
    );
    let d = Dir::new();
    let out = d.path("out.safetensors");
    let mv = dir.join("matvec-1mad-k2-L12-bf16-m4.safetensors");
    ok(&[
        "matvec",
        "--weights",
        s(&mv),
        "--x",
        s(&mv),
        "--out",
        s(&out),
    ]);
    assert_same_bits("matvec vector", &read_bits(&out, "y"), &read_bits(&mv, "y"));
    let mv = dir.join("matvec-lut-k8-L12-bf16-m8.safetensors");
    ok(&[
        "matvec",
        "--weights",
        s(&mv),
        "--x",
        s(&mv),
        "--out",
        s(&out),
    ]);
    assert_same_bits(
        "matvec lut vector",
        &read_bits(&out, "y"),
        &read_bits(&mv, "y"),
    );
    let gu = dir.join("gateup-1mad-k2k4-L12-bf16-m4.safetensors");
    ok(&[
        "gate-up",
        "--gate",
        s(&gu),
        "--up",
        s(&gu),
        "--x",
        s(&gu),
        "--out",
        s(&out),
        "--gate-prefix",
        "gate",
        "--up-prefix",
        "up",
    ]);
    assert_same_bits(
        "gate-up vector",
        &read_bits(&out, "mid"),
        &read_bits(&gu, "mid"),
    );
    let info = ok(&["info", s(&gu)]);
    assert!(
        info.contains("gate: code=1mad k=2 L=12 T=256 rows=35 cols=2048 scales=f16"),
        "{info}"
    );
    assert!(
        info.contains("up: code=1mad k=4 L=12 T=256 rows=35 cols=2048 scales=f16"),
        "{info}"
    );
}

#[test]
fn info_prints_every_matrix() {
    let d = Dir::new();
    let w = d.path("w.safetensors");
    ok(&[
        "random",
        "--rows",
        "8",
        "--cols",
        "512",
        "--k",
        "3",
        "--l",
        "12",
        "--t",
        "128",
        "--code",
        "lut",
        "--out",
        s(&w),
        "--prefix",
        "layer0.mlp",
    ]);
    let stdout = ok(&["info", s(&w)]);
    assert!(
        stdout.contains("layer0.mlp: code=lut k=3 L=12 T=128 rows=8 cols=512 scales=f16"),
        "{stdout}"
    );
    // Tensors of the matrix are not listed again as loose tensors.
    assert!(!stdout.contains("layer0.mlp.codes"), "{stdout}");
    let x = d.path("x.safetensors");
    ok(&["random-x", "--m", "2", "--cols", "64", "--out", s(&x)]);
    let stdout = ok(&["info", s(&x)]);
    assert!(stdout.contains("no quantized matrices"), "{stdout}");
    assert!(stdout.contains("x: bf16 [2, 64]"), "{stdout}");
}

/// A weight shard of 8 GiB (sparse: a hole costs no disk) holding one small matrix and
/// one activation after the hole: `info` lists it from its header, and `matvec` reads
/// the matrix and `x` from it, not the rest.
#[cfg(target_pointer_width = "64")]
#[test]
fn info_and_matvec_read_a_large_file_by_the_tensors_used() {
    use std::io::Write;
    let d = Dir::new();
    let (big_path, y) = (d.path("shard.safetensors"), d.path("y.safetensors"));
    let big = 8u64 << 30;
    let codes = u32_bytes(4 * 2 * 16, 1);
    let scales = f16_bytes(&[0.02, 0.03, 0.04, 0.05]);
    let x = DType::Bf16.encode(&(0..512).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>());
    let (codes_at, scales_at, x_at) = (
        big,
        big + codes.len() as u64,
        big + (codes.len() + scales.len()) as u64,
    );
    let end = x_at + x.len() as u64;
    let header = format!(
        "{{\"__metadata__\":{{\"w.trellis\":\"{META_OK}\"}},\
         \"big\":{{\"dtype\":\"U8\",\"shape\":[{big}],\"data_offsets\":[0,{big}]}},\
         \"w.codes\":{{\"dtype\":\"U32\",\"shape\":[4,2,16],\"data_offsets\":[{codes_at},{scales_at}]}},\
         \"w.scales\":{{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[{scales_at},{x_at}]}},\
         \"x\":{{\"dtype\":\"BF16\",\"shape\":[1,512],\"data_offsets\":[{x_at},{end}]}}}}"
    );
    let mut f = std::fs::File::create(&big_path).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.set_len(8 + header.len() as u64 + big).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&big_path)
        .unwrap();
    for part in [&codes, &scales, &x] {
        f.write_all(part).unwrap();
    }
    drop(f);
    assert_eq!(
        std::fs::metadata(&big_path).unwrap().len(),
        8 + header.len() as u64 + end
    );

    let stdout = ok(&["info", s(&big_path)]);
    assert!(
        stdout.contains("w: code=1mad k=2 L=12 T=256 rows=4 cols=512 scales=f16")
            && stdout.contains(&format!("big: u8 [{big}]"))
            && stdout.contains("x: bf16 [1, 512]"),
        "{stdout}"
    );
    ok(&[
        "matvec",
        "--weights",
        s(&big_path),
        "--prefix",
        "w",
        "--x",
        s(&big_path),
        "--out",
        s(&y),
    ]);
    let w = io::read_quantized(&big_path, "w").unwrap();
    let want = reference::reduce(&w, &read_bits(&big_path, "x")).unwrap();
    assert_same_bits("matvec from a large file", &read_bits(&y, "y"), &want);
}

/// A small Gaussian dense matrix: the MSE is printed, matches the written codes, and is
/// well below the signal power (a trellis code at 2 bits keeps ~90% of it).
/// The `relative mse:` line of `stdout` is `want` (to the printed digits), never a 0 for
/// a small error.
fn assert_printed_relative(stdout: &str, want: f64) {
    let printed: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("relative mse: "))
        .unwrap_or_else(|| panic!("no `relative mse: ` line in {stdout:?}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        (printed - want).abs() <= 1e-6 * want,
        "printed relative mse {printed}, want {want}"
    );
}

/// A matrix the encoder nearly hits (every weight 0.5) has a tiny relative error, printed
/// as such (a fixed six places printed 0, which the docs keep for an all-zero matrix).
#[test]
fn a_tiny_relative_error_is_printed_as_itself() {
    let d = Dir::new();
    let (dense, w) = (d.path("dense.safetensors"), d.path("w.safetensors"));
    write_raw(
        &dense,
        vec![("w", Dtype::F32, vec![8, 256], f32_bytes(&[0.5; 8 * 256]))],
        &[],
    );
    let stdout = ok(&[
        "quantize",
        "--input",
        s(&dense),
        "--tensor",
        "w",
        "--k",
        "2",
        "--l",
        "12",
        "--code",
        "1mad",
        "--out",
        s(&w),
    ]);
    let mse: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("mse: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(mse > 0.0 && mse / 0.25 < 5e-7, "{stdout}");
    assert_printed_relative(&stdout, mse / 0.25);
}

#[test]
fn quantize_prints_a_plausible_mse() {
    use rand::SeedableRng;
    let d = Dir::new();
    let (dense_path, w) = (d.path("dense.safetensors"), d.path("w.safetensors"));
    let (rows, cols) = (8usize, 512usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let dense: Vec<f32> = (0..rows * cols)
        .map(|_| 0.02 * rand::Rng::sample::<f32, _>(&mut rng, rand_distr::StandardNormal))
        .collect();
    write_raw(
        &dense_path,
        vec![(
            "layer.weight",
            Dtype::F32,
            vec![rows, cols],
            f32_bytes(&dense),
        )],
        &[],
    );
    let power = dense.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dense.len() as f64;
    for (code, k) in [("1mad", "2"), ("mul1", "3"), ("lut", "2")] {
        let stdout = ok(&[
            "quantize",
            "--input",
            s(&dense_path),
            "--tensor",
            "layer.weight",
            "--k",
            k,
            "--l",
            "10",
            "--t",
            "128",
            "--code",
            code,
            "--out",
            s(&w),
        ]);
        let mse: f64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("mse: "))
            .unwrap_or_else(|| panic!("no `mse: ` line in {stdout:?}"))
            .trim()
            .parse()
            .unwrap();
        // Above the Gaussian rate-distortion bound 2^-2k (less a sampling slack: 4096
        // weights), and within 1.6x of it, where a trellis code at L 10 lands.
        let rel = mse / power;
        let bound = 2f64.powi(-2 * k.parse::<i32>().unwrap());
        assert!(
            (0.9 * bound..1.6 * bound).contains(&rel),
            "{code} k={k}: relative mse {rel}, bound {bound}"
        );
        assert_printed_relative(&stdout, rel);
        let m = io::read_quantized(&w, "w").unwrap();
        let deq = reference::dequantize(&m, DType::F32).unwrap();
        let ours = deq
            .iter()
            .zip(&dense)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum::<f64>()
            / dense.len() as f64;
        assert!(
            (ours - mse).abs() <= 1e-6 * mse,
            "{code}: printed {mse}, file gives {ours}"
        );
    }
    // An explicit table from a file, found under the name `lut`.
    let lut_path = d.path("lut.safetensors");
    let table = trellis::encode::gaussian_lut(10, 5).unwrap();
    write_raw(
        &lut_path,
        vec![("lut", Dtype::F32, vec![1024], f32_bytes(&table))],
        &[],
    );
    ok(&[
        "quantize",
        "--input",
        s(&dense_path),
        "--tensor",
        "layer.weight",
        "--k",
        "2",
        "--l",
        "10",
        "--t",
        "128",
        "--code",
        "lut",
        "--lut",
        s(&lut_path),
        "--out",
        s(&w),
    ]);
    assert_eq!(io::read_quantized(&w, "w").unwrap().lut, Some(table));
}

// ---------------------------------------------------------------------------------------
// Rejected inputs

fn random_args<'a>(
    out: &'a str,
    rows: &'a str,
    cols: &'a str,
    k: &'a str,
    l: &'a str,
    t: &'a str,
) -> Vec<&'a str> {
    vec![
        "random", "--rows", rows, "--cols", cols, "--k", k, "--l", l, "--t", t, "--code", "1mad",
        "--out", out,
    ]
}

#[test]
fn generators_and_quantize_refuse_degenerate_data() {
    let d = Dir::new();
    let out = d.path("x.safetensors");
    let o = s(&out);
    /// A 4 x 256 `random-dense` matrix of `dtype` and `std`, written to `to`.
    fn dense_args<'a>(dtype: &'a str, std: &'a str, to: &'a str) -> Vec<&'a str> {
        vec![
            "random-dense",
            "--rows",
            "4",
            "--cols",
            "256",
            "--dtype",
            dtype,
            "--std",
            std,
            "--out",
            to,
        ]
    }
    // Draws past the dtype's range would be infinities.
    fails(&dense_args("f16", "1e5", o), &out, &["std", "f16 range"]);
    // Past f32's range: named as typed (it would read as `inf` in f32).
    fails(
        &dense_args("f32", "1e39", o),
        &out,
        &["std = 1e39", "f32's range"],
    );
    // The safetensors header's own key is not a tensor name.
    for cmd in ["random-x", "random-dense"] {
        let mut args = vec![cmd, "--cols", "256", "--name", "__metadata__", "--out", o];
        args.extend(match cmd {
            "random-dense" => ["--rows", "4"],
            _ => ["--m", "1"],
        });
        fails(&args, &out, &["__metadata__", "reserved"]);
    }
    // Rows whose scale falls below f16's normal range decode as zeros: said, not silent.
    let dense = d.path("dense.safetensors");
    ok(&dense_args("f32", "1e-8", s(&dense)));
    let w = d.path("w.safetensors");
    let (dense_s, w_s) = (s(&dense), s(&w));
    let quantize = |code: &[&str]| {
        let mut args = vec![
            "quantize", "--input", dense_s, "--tensor", "weight", "--k", "2",
        ];
        args.extend(["--l", "8", "--t", "128", "--out", w_s]);
        args.extend(code);
        ok(&args)
    };
    let stdout = quantize(&["--code", "1mad"]);
    assert!(
        stdout.contains("warning: 4 rows have scales below f16's normal range (first: row 0"),
        "{stdout}"
    );
    assert!(!stdout.contains("--lut"), "{stdout}");
    // With a table of huge values the scales are tiny too: the table is named as a cause.
    ok(&dense_args("f32", "1e-3", s(&dense)));
    let lut = d.path("lut.safetensors");
    let table: Vec<f32> = trellis::encode::gaussian_lut(8, 3)
        .unwrap()
        .iter()
        .map(|v| v * 1e5)
        .collect();
    write_raw(
        &lut,
        vec![("lut", Dtype::F32, vec![256], f32_bytes(&table))],
        &[],
    );
    let stdout = quantize(&["--code", "lut", "--lut", s(&lut)]);
    assert!(
        stdout.contains("below f16's normal range")
            && stdout.contains("or give a --lut table of smaller values"),
        "{stdout}"
    );
}

#[test]
fn random_rejects_bad_geometry() {
    let d = Dir::new();
    let out = d.path("w.safetensors");
    let o = s(&out);
    for (args, needles) in [
        (
            random_args(o, "4", "300", "2", "12", "256"),
            vec!["cols = 300", "T = 256"],
        ),
        (random_args(o, "4", "480", "2", "12", "48"), vec!["T = 48"]),
        (random_args(o, "4", "512", "2", "12", "0"), vec!["T = 0"]),
        (random_args(o, "4", "512", "0", "12", "256"), vec!["k = 0"]),
        (random_args(o, "4", "512", "9", "12", "256"), vec!["k = 9"]),
        (
            random_args(o, "4", "512", "-1", "12", "256"),
            vec!["--k", "-1"],
        ),
        (random_args(o, "4", "512", "4", "4", "256"), vec!["L = 4"]),
        (random_args(o, "4", "512", "2", "2", "256"), vec!["L = 2"]),
        (random_args(o, "4", "512", "2", "17", "256"), vec!["L = 17"]),
        (
            random_args(o, "0", "512", "2", "12", "256"),
            vec!["rows = 0"],
        ),
    ] {
        fails(&args, &out, &needles);
    }
    fails(
        &[
            "random", "--rows", "4", "--cols", "512", "--k", "2", "--l", "12", "--code", "2mad",
            "--out", o,
        ],
        &out,
        &["code", "2mad"],
    );
    fails(
        &["random", "--rows", "4", "--cols", "512", "--out", o],
        &out,
        &["--k"],
    );
    fails(
        &["random-x", "--m", "0", "--cols", "512", "--out", o],
        &out,
        &["m = 0"],
    );
    fails(
        &[
            "random-x", "--m", "1", "--cols", "512", "--dtype", "f64", "--out", o,
        ],
        &out,
        &["dtype = f64"],
    );
}

/// A valid `x` for a 4 x 512 matrix, a valid weights file, and the matvec command line.
struct Case {
    d: Dir,
    w: PathBuf,
    x: PathBuf,
    out: PathBuf,
}

impl Case {
    fn new() -> Self {
        let d = Dir::new();
        let (w, x, out) = (
            d.path("w.safetensors"),
            d.path("x.safetensors"),
            d.path("y.safetensors"),
        );
        weights_file(&w, Some(META_OK), vec![4, 2, 16], vec![4]);
        x_file(&x, Dtype::BF16, vec![2, 512]);
        Case { d, w, x, out }
    }
    fn matvec(&self, needles: &[&str]) -> String {
        fails(
            &[
                "matvec",
                "--weights",
                s(&self.w),
                "--x",
                s(&self.x),
                "--out",
                s(&self.out),
            ],
            &self.out,
            needles,
        )
    }
}

#[test]
fn the_valid_case_is_valid() {
    let c = Case::new();
    ok(&[
        "matvec",
        "--weights",
        s(&c.w),
        "--x",
        s(&c.x),
        "--out",
        s(&c.out),
    ]);
    assert_reference_y(&c.w, &c.x, &c.out);
}

#[test]
fn metadata_ranges_are_checked() {
    let c = Case::new();
    for (meta, codes, needles) in [
        (
            "code=1mad;k=2;L=12;T=256;rows=4;cols=300",
            vec![4, 1, 16],
            vec!["w.trellis", "cols = 300"],
        ),
        (
            "code=1mad;k=2;L=12;T=48;rows=4;cols=480",
            vec![4, 10, 3],
            vec!["w.trellis", "T = 48"],
        ),
        (
            "code=1mad;k=0;L=12;T=256;rows=4;cols=512",
            vec![4, 2, 16],
            vec!["w.trellis", "k = 0"],
        ),
        (
            "code=1mad;k=9;L=12;T=256;rows=4;cols=512",
            vec![4, 2, 16],
            vec!["w.trellis", "k = 9"],
        ),
        (
            "code=1mad;k=2;L=2;T=256;rows=4;cols=512",
            vec![4, 2, 16],
            vec!["w.trellis", "L = 2"],
        ),
        (
            "code=1mad;k=2;L=17;T=256;rows=4;cols=512",
            vec![4, 2, 16],
            vec!["w.trellis", "L = 17"],
        ),
    ] {
        weights_file(&c.w, Some(meta), codes, vec![4]);
        c.matvec(&needles);
    }
}

#[test]
fn missing_and_malformed_metadata_are_rejected() {
    let c = Case::new();
    weights_file(&c.w, None, vec![4, 2, 16], vec![4]);
    c.matvec(&["w.trellis", "w.safetensors"]);
    for (meta, needles) in [
        ("garbage", vec!["w.trellis", "garbage"]),
        (
            "code=1mad;k=two;L=12;T=256;rows=4;cols=512",
            vec!["w.trellis", "k = two"],
        ),
        (
            "code=2mad;k=2;L=12;T=256;rows=4;cols=512",
            vec!["code = 2mad"],
        ),
        ("code=1mad;k=2;L=12;T=256;rows=4", vec!["cols", "missing"]),
        (
            "code=1mad;k=2;L=12;T=256;rows=4;cols=512;bits=3",
            vec!["bits"],
        ),
        ("", vec!["w.trellis", "code"]),
        // A terminal's escape (clear, red) read from the file: printed escaped.
        (
            "code=\x1b[2J\x1b[31mX;k=2;L=12;T=256;rows=4;cols=512",
            vec!["code = \\u{1b}[2J\\u{1b}[31mX"],
        ),
    ] {
        weights_file(&c.w, Some(meta), vec![4, 2, 16], vec![4]);
        c.matvec(&needles);
    }
}

#[test]
fn tensor_shapes_and_dtypes_must_match_the_metadata() {
    let c = Case::new();
    // codes shape.
    for (shape, needle) in [
        (vec![4, 2, 15], "[4, 2, 15]"),
        (vec![4, 1, 16], "[4, 1, 16]"),
        (vec![5, 2, 16], "[5, 2, 16]"),
        (vec![128], "[128]"),
    ] {
        weights_file(&c.w, Some(META_OK), shape, vec![4]);
        c.matvec(&["w.codes", needle, "[4, 2, 16]"]);
    }
    // scales shape.
    weights_file(&c.w, Some(META_OK), vec![4, 2, 16], vec![5]);
    c.matvec(&["w.scales", "[5]", "[4]"]);
    weights_file(&c.w, Some(META_OK), vec![4, 2, 16], vec![4, 1]);
    c.matvec(&["w.scales", "[4, 1]"]);
    // dtypes.
    let meta = [("w.trellis", META_OK)];
    write_raw(
        &c.w,
        vec![
            ("w.codes", Dtype::I32, vec![4, 2, 16], u32_bytes(128, 0)),
            ("w.scales", Dtype::F16, vec![4], f16_bytes(&[0.02; 4])),
        ],
        &meta,
    );
    c.matvec(&["w.codes", "i32", "u32"]);
    write_raw(
        &c.w,
        vec![
            ("w.codes", Dtype::U32, vec![4, 2, 16], u32_bytes(128, 0)),
            (
                "w.scales",
                Dtype::BF16,
                vec![4],
                DType::Bf16.encode(&[0.02; 4]),
            ),
        ],
        &meta,
    );
    c.matvec(&["w.scales", "bf16"]);
    // A missing tensor.
    write_raw(
        &c.w,
        vec![("w.codes", Dtype::U32, vec![4, 2, 16], u32_bytes(128, 0))],
        &meta,
    );
    c.matvec(&["w.scales"]);
}

#[test]
fn lut_must_have_two_to_the_l_f32_entries() {
    let c = Case::new();
    let meta = [("w.trellis", "code=lut;k=2;L=10;T=256;rows=4;cols=512")];
    let base = |lut: Option<(Dtype, Vec<usize>, Vec<u8>)>| {
        let mut t = vec![
            ("w.codes", Dtype::U32, vec![4, 2, 16], u32_bytes(128, 0)),
            ("w.scales", Dtype::F16, vec![4], f16_bytes(&[0.02; 4])),
        ];
        if let Some((d, shape, bytes)) = lut {
            t.push(("w.lut", d, shape, bytes));
        }
        write_raw(&c.w, t, &meta);
    };
    base(Some((Dtype::F32, vec![100], f32_bytes(&[0.5; 100]))));
    c.matvec(&["w.lut shape = [100]", "[1024]"]);
    base(Some((Dtype::F32, vec![2048], f32_bytes(&[0.5; 2048]))));
    c.matvec(&["w.lut shape = [2048]", "[1024]"]);
    base(Some((Dtype::F32, vec![32, 32], f32_bytes(&[0.5; 1024]))));
    // Of 2^L values, but not one axis: named as a shape, not a length.
    c.matvec(&["w.lut shape = [32, 32]", "[2^L] = [1024]"]);
    base(Some((Dtype::F16, vec![1024], f16_bytes(&[0.5; 1024]))));
    c.matvec(&["w.lut", "f16", "f32"]);
    base(None);
    c.matvec(&["w.lut"]);
    let mut nan = vec![0.5f32; 1024];
    nan[9] = f32::NAN;
    base(Some((Dtype::F32, vec![1024], f32_bytes(&nan))));
    c.matvec(&["lut[9]", "finite"]);
    // `info` reads no code word but checks the table and the scales as `matvec` does.
    fails(&["info", s(&c.w)], &c.out, &["lut[9]", "finite"]);
    let mut t = vec![
        ("w.codes", Dtype::U32, vec![4, 2, 16], u32_bytes(128, 0)),
        (
            "w.scales",
            Dtype::F16,
            vec![4],
            f16_bytes(&[0.02, 0.02, f32::NAN, 0.02]),
        ),
        ("w.lut", Dtype::F32, vec![1024], f32_bytes(&[0.5; 1024])),
    ];
    write_raw(&c.w, t.clone(), &meta);
    fails(&["info", s(&c.w)], &c.out, &["scales[2] = NaN", "finite"]);
    c.matvec(&["scales[2] = NaN", "finite"]);
    t[1].3 = f16_bytes(&[0.02; 4]);
    write_raw(&c.w, t, &meta);
    let stdout = ok(&["info", s(&c.w)]);
    assert!(stdout.contains("w: code=lut k=2 L=10"), "{stdout}");
    base(Some((Dtype::F32, vec![1024], f32_bytes(&[0.5; 1024]))));
    ok(&[
        "matvec",
        "--weights",
        s(&c.w),
        "--x",
        s(&c.x),
        "--out",
        s(&c.out),
    ]);
}

#[test]
fn activations_are_checked() {
    let c = Case::new();
    x_file(&c.x, Dtype::BF16, vec![2, 256]);
    c.matvec(&["`x`", "[2, 256]", "[2, 512]"]);
    x_file(&c.x, Dtype::F32, vec![1, 1024]);
    c.matvec(&["`x`", "[1, 1024]"]);
    x_file(&c.x, Dtype::I32, vec![2, 512]);
    c.matvec(&["`x`", "i32"]);
    x_file(&c.x, Dtype::F64, vec![2, 512]);
    c.matvec(&["`x`", "f64"]);
    x_file(&c.x, Dtype::BF16, vec![512]);
    c.matvec(&["`x`", "[512]", "[1, 512]"]);
    x_file(&c.x, Dtype::BF16, vec![2, 2, 512]);
    c.matvec(&["`x`", "[2, 2, 512]"]);
    x_file(&c.x, Dtype::BF16, vec![0, 512]);
    c.matvec(&["M = 0"]);
    // The tensor must be called `x`.
    write_raw(
        &c.x,
        vec![(
            "input",
            Dtype::BF16,
            vec![2, 512],
            DType::Bf16.encode(&[0.5; 1024]),
        )],
        &[],
    );
    c.matvec(&["`x`", "input"]);
}

#[test]
fn truncated_garbage_and_missing_files_are_rejected() {
    let c = Case::new();
    let good = std::fs::read(&c.w).unwrap();
    // Cut inside the data, inside the header, and inside the length prefix.
    for cut in [good.len() - 7, 40, 5, 0] {
        std::fs::write(&c.w, &good[..cut]).unwrap();
        c.matvec(&["w.safetensors", "not a valid safetensors file"]);
    }
    // Trailing bytes are as wrong as missing ones.
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 8]);
    std::fs::write(&c.w, &longer).unwrap();
    c.matvec(&["w.safetensors", "not a valid safetensors file"]);
    for garbage in [
        b"this is not a safetensors file at all".to_vec(),
        {
            let mut v = 20u64.to_le_bytes().to_vec();
            v.extend_from_slice(b"{\"x\": not json!!!!}");
            v
        },
        vec![0xFF; 64],
    ] {
        std::fs::write(&c.w, &garbage).unwrap();
        c.matvec(&["w.safetensors", "not a valid safetensors file"]);
    }
    std::fs::write(&c.w, &good).unwrap();
    std::fs::remove_file(&c.x).unwrap();
    c.matvec(&["x.safetensors", "cannot read"]);
    // Truncated activations too.
    x_file(&c.x, Dtype::BF16, vec![2, 512]);
    let xb = std::fs::read(&c.x).unwrap();
    std::fs::write(&c.x, &xb[..xb.len() - 2]).unwrap();
    c.matvec(&["x.safetensors", "not a valid safetensors file"]);
}

#[test]
fn backend_tail_and_prefix_are_checked() {
    let c = Case::new();
    let (w, x, out) = (s(&c.w), s(&c.x), s(&c.out));
    fails(
        &[
            "matvec",
            "--weights",
            w,
            "--x",
            x,
            "--out",
            out,
            "--backend",
            "nope",
        ],
        &c.out,
        &["backend = nope"],
    );
    fails(
        &[
            "matvec",
            "--weights",
            w,
            "--x",
            x,
            "--out",
            out,
            "--prefix",
            "q",
        ],
        &c.out,
        &["q.trellis", "w"],
    );
    let gate_up = |extra: &[&str], needles: &[&str]| {
        let mut args = vec!["gate-up", "--gate", w, "--up", w, "--x", x, "--out", out];
        args.extend_from_slice(extra);
        fails(&args, &c.out, needles);
    };
    gate_up(
        &["--tail", "native", "--backend", "reference"],
        &["tail = native", "reference"],
    );
    gate_up(&["--tail", "fast"], &["tail = fast"]);
    gate_up(&["--backend", "metal"], &["backend `metal`"]);
    gate_up(&["--up-prefix", "up"], &["up.trellis"]);
    // Gate and up must agree on rows, cols and T.
    let up = c.d.path("up.safetensors");
    weights_file(
        &up,
        Some("code=1mad;k=3;L=12;T=256;rows=5;cols=512"),
        vec![5, 2, 24],
        vec![5],
    );
    fails(
        &[
            "gate-up",
            "--gate",
            w,
            "--up",
            s(&up),
            "--x",
            x,
            "--out",
            out,
        ],
        &c.out,
        &["up.rows = 5"],
    );
    x_file(&c.x, Dtype::F16, vec![1, 256]);
    gate_up(&[], &["`x`", "[1, 256]"]);
    // ... and with everything right it runs.
    x_file(&c.x, Dtype::F16, vec![1, 512]);
    ok(&["gate-up", "--gate", w, "--up", w, "--x", x, "--out", out]);
}

#[test]
fn info_rejects_broken_files() {
    let c = Case::new();
    let none = c.d.path("never-written");
    weights_file(&c.w, Some(META_OK), vec![4, 2, 15], vec![4]);
    fails(&["info", s(&c.w)], &none, &["w.codes", "[4, 2, 15]"]);
    std::fs::write(&c.w, b"garbage").unwrap();
    fails(&["info", s(&c.w)], &none, &["not a valid safetensors file"]);
}

#[test]
fn quantize_rejects_bad_inputs() {
    let d = Dir::new();
    let (dense, out, lut) = (
        d.path("dense.safetensors"),
        d.path("w.safetensors"),
        d.path("lut.safetensors"),
    );
    let vals: Vec<f32> = (0..4 * 512)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
        .collect();
    write_raw(
        &dense,
        vec![("w", Dtype::F32, vec![4, 512], f32_bytes(&vals))],
        &[],
    );
    let q = |extra: &[&str], needles: &[&str]| {
        let mut args = vec![
            "quantize",
            "--input",
            s(&dense),
            "--tensor",
            "w",
            "--out",
            s(&out),
        ];
        args.extend_from_slice(extra);
        fails(&args, &out, needles);
    };
    let base = ["--k", "2", "--l", "10", "--t", "128", "--code", "1mad"];
    q(
        &["--k", "2", "--l", "10", "--t", "96", "--code", "1mad"],
        &["T = 96"],
    );
    q(
        &["--k", "2", "--l", "10", "--t", "1024", "--code", "1mad"],
        &["cols = 512", "T = 1024"],
    );
    q(
        &["--k", "0", "--l", "10", "--t", "128", "--code", "1mad"],
        &["k = 0"],
    );
    q(
        &["--k", "2", "--l", "2", "--t", "128", "--code", "1mad"],
        &["L = 2"],
    );
    q(
        &[
            "--k",
            "2",
            "--l",
            "10",
            "--t",
            "128",
            "--code",
            "1mad",
            "--lut",
            s(&lut),
        ],
        &["--lut", "code = 1mad"],
    );
    // A block whose Viterbi tables outgrow the encoder's memory is the flags' error,
    // named by T before any encoding, not blamed on the input file.
    let long = d.path("long.safetensors");
    write_raw(
        &long,
        vec![(
            "w",
            Dtype::F32,
            vec![1, 1 << 18],
            f32_bytes(&vec![0.5; 1 << 18]),
        )],
        &[],
    );
    let args = [
        "quantize",
        "--input",
        s(&long),
        "--tensor",
        "w",
        "--out",
        s(&out),
        "--k",
        "1",
        "--l",
        "16",
        "--t",
        "262144",
        "--code",
        "1mad",
    ];
    let e = fails(&args, &out, &["T = 262144", "RAYON_NUM_THREADS"]);
    assert!(
        !e.contains("long.safetensors") && !e.contains("tensor `w`"),
        "{e}"
    );
    let mut wrong_tensor = base.to_vec();
    wrong_tensor.extend(["--tensor", "nope"]);
    let args: Vec<&str> = ["quantize", "--input", s(&dense), "--out", s(&out)]
        .into_iter()
        .chain(wrong_tensor)
        .collect();
    fails(&args, &out, &["nope"]);
    // A table of the wrong length, and one that is not f32.
    let with_lut = [
        "--k",
        "2",
        "--l",
        "10",
        "--t",
        "128",
        "--code",
        "lut",
        "--lut",
        s(&lut),
    ];
    write_raw(
        &lut,
        vec![("lut", Dtype::F32, vec![100], f32_bytes(&[0.1; 100]))],
        &[],
    );
    q(&with_lut, &["lut length = 100", "1024"]);
    write_raw(
        &lut,
        vec![("table", Dtype::F16, vec![1024], f16_bytes(&[0.1; 1024]))],
        &[],
    );
    q(&with_lut, &["no f32 tensor"]);
    // A value past the encoder's bound is the table file's error, naming its entry.
    let mut big = vec![0.1f32; 1024];
    big[3] = 2e6;
    write_raw(
        &lut,
        vec![("lut", Dtype::F32, vec![1024], f32_bytes(&big))],
        &[],
    );
    q(&with_lut, &[s(&lut), "lut[3]", "2000000", "magnitude"]);
    // A table of one value (all zeros) codes no weight but that one: the table's error,
    // not a quantized constant matrix with a warning about the weights' scales.
    write_raw(
        &lut,
        vec![("lut", Dtype::F32, vec![1024], f32_bytes(&[0.0; 1024]))],
        &[],
    );
    q(&with_lut, &[s(&lut), "lut = 1024 x 0", "all equal"]);
    // Non-finite weights, and an unsupported dense dtype.
    let mut bad = vals.clone();
    bad[513] = f32::NAN;
    write_raw(
        &dense,
        vec![("w", Dtype::F32, vec![4, 512], f32_bytes(&bad))],
        &[],
    );
    q(&base, &["w[1, 1]", "NaN"]);
    write_raw(
        &dense,
        vec![("w", Dtype::I32, vec![4, 512], u32_bytes(2048, 0))],
        &[],
    );
    q(&base, &["`w`", "i32"]);
}

#[test]
fn a_failed_command_leaves_an_existing_output_untouched() {
    let c = Case::new();
    std::fs::write(&c.out, b"previous").unwrap();
    x_file(&c.x, Dtype::BF16, vec![2, 100]);
    let out = trellis(&[
        "matvec",
        "--weights",
        s(&c.w),
        "--x",
        s(&c.x),
        "--out",
        s(&c.out),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read(&c.out).unwrap(), b"previous");
    no_temp_files(c.d.0.path());
}

/// `trellis args`, killed and failed if it runs past 60 s (a read that blocks).
#[cfg(unix)]
fn trellis_within_a_minute(args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the trellis binary");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("trellis {args:?} still running after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A pipe given as an input is refused without opening it (opening waits for a writer);
/// an output path that is a pipe or a device is refused, and left as it was.
#[cfg(unix)]
#[test]
fn pipes_and_devices_are_refused_without_blocking() {
    use std::os::unix::fs::FileTypeExt;
    let c = Case::new();
    let pipe = c.d.path("p.safetensors");
    assert!(Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .unwrap()
        .success());
    for args in [
        vec!["info", s(&pipe)],
        vec![
            "matvec",
            "--weights",
            s(&c.w),
            "--x",
            s(&pipe),
            "--out",
            s(&c.out),
        ],
        vec![
            "matvec",
            "--weights",
            s(&pipe),
            "--x",
            s(&c.x),
            "--out",
            s(&c.out),
        ],
    ] {
        let out = trellis_within_a_minute(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: not a regular file", pipe.display())),
            "{args:?}: {stderr}"
        );
    }
    assert!(!c.out.exists());
    let args = ["random-x", "--m", "1", "--cols", "256", "--out", s(&pipe)];
    let out = trellis_within_a_minute(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: --out: not a regular file", pipe.display())),
        "{stderr}"
    );
    assert!(std::fs::metadata(&pipe).unwrap().file_type().is_fifo());
    no_temp_files(c.d.0.path());
}

/// A new output gets the permissions of a file this process creates (the umask's, not a
/// temporary file's 0600); a replaced one keeps its own.
#[cfg(unix)]
#[test]
fn outputs_get_the_usual_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let d = Dir::new();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let made = d.path("made");
    std::fs::File::create(&made).unwrap();
    let new = d.path("new.safetensors");
    ok(&["random-x", "--m", "1", "--cols", "256", "--out", s(&new)]);
    assert_eq!(mode(&new), mode(&made));
    let old = d.path("old.safetensors");
    std::fs::write(&old, b"previous").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
    ok(&["random-x", "--m", "1", "--cols", "256", "--out", s(&old)]);
    assert_eq!(mode(&old), 0o640);
    // Replaced by the new activations, read back whole.
    let x = io::read_activations(&old, "x").unwrap();
    assert_eq!((x.rows, x.cols, x.data.len()), (1, 256, 256));
}

#[test]
fn file_reader_lists_matrices() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vectors"));
    let f = SafetensorsFile::open(dir.join("gateup-3inst-k4k3-L16-f16-m2.safetensors")).unwrap();
    assert_eq!(
        f.quantized_prefixes(),
        vec!["gate".to_string(), "up".to_string()]
    );
    let listed = io::list_quantized(&dir.join("gateup-3inst-k4k3-L16-f16-m2.safetensors")).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].1.k, 3);
}

/// `select --help` names every family the library answers for (a family added to the
/// library shows in the help, or this fails).
#[test]
fn select_help_names_every_family() {
    let help = ok(&["select", "--help"]);
    let words: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    for name in trellis::families::names() {
        assert!(
            words.contains(&name),
            "select --help does not name family {name}:\n{help}"
        );
    }
}

/// An `--out` that cannot be written is every writing command's first error, before any
/// input is read or any work done (a quantize of minutes used to end in it).
#[test]
fn an_unwritable_out_is_the_first_error() {
    let d = Dir::new();
    let missing = d.path("missing.safetensors");
    let m = s(&missing);
    // A missing directory, and a path that names a directory (`o.safetensors/`: its
    // file name reads as a file's, and the write failed only after the work).
    let no_dir = s(&d.path("no-such-dir/o.safetensors")).to_string();
    let slash = format!("{}/", s(&d.path("o.safetensors")));
    let dot = format!("{}/.", s(&d.path("o.safetensors")));
    for (o, reason) in [
        (no_dir.as_str(), "its directory does not exist"),
        (slash.as_str(), "names a directory, not a file"),
        (dot.as_str(), "names a directory, not a file"),
        (".", "names a directory, not a file"),
    ] {
        unwritable_out_first(o, m, reason);
    }
}

fn unwritable_out_first(o: &str, m: &str, reason: &str) {
    for args in [
        vec![
            "random", "--rows", "4", "--cols", "256", "--k", "2", "--l", "12", "--code", "1mad",
            "--out", o,
        ],
        vec!["random-x", "--m", "1", "--cols", "256", "--out", o],
        vec!["random-dense", "--rows", "4", "--cols", "256", "--out", o],
        vec![
            "quantize", "--input", m, "--tensor", "w", "--k", "2", "--l", "12", "--code", "1mad",
            "--out", o,
        ],
        vec!["matvec", "--weights", m, "--x", m, "--out", o],
        vec!["gate-up", "--gate", m, "--up", m, "--x", m, "--out", o],
    ] {
        let r = trellis(&args);
        let err = text(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("error: {o}: --out: {reason}"),
            "{args:?}"
        );
    }
}

/// Make an 8 x 256 matrix (k 2, L 8, T 64, 1mad) and one sample in `d`: the arguments of
/// a `matvec` of them on the cpu backend into `y.safetensors`.
fn small_cpu_matvec(d: &Dir) -> Vec<String> {
    let (w, x, y) = (
        d.path("w.safetensors"),
        d.path("x.safetensors"),
        d.path("y.safetensors"),
    );
    ok(&[
        "random",
        "--rows",
        "8",
        "--cols",
        "256",
        "--k",
        "2",
        "--l",
        "8",
        "--t",
        "64",
        "--code",
        "1mad",
        "--out",
        s(&w),
    ]);
    ok(&["random-x", "--m", "1", "--cols", "256", "--out", s(&x)]);
    [
        "matvec",
        "--weights",
        s(&w),
        "--x",
        s(&x),
        "--out",
        s(&y),
        "--backend",
        "cpu",
    ]
    .map(String::from)
    .to_vec()
}

/// A thread count past the machine's (rayon would start every thread, stall for minutes,
/// then abort) or not a number (rayon would quietly ignore it) is an error naming
/// `RAYON_NUM_THREADS`, before any pool is built: the CPU backend's, the reference's,
/// the Metal simulator's and the encoder's.
#[test]
fn thread_counts_rayon_cannot_run_are_errors() {
    let d = Dir::new();
    let (y, q) = (d.path("y.safetensors"), d.path("q.safetensors"));
    let matvec = small_cpu_matvec(&d);
    let matvec: Vec<&str> = matvec.iter().map(String::as_str).collect();
    let on = |backend: &'static str| {
        let mut a = matvec.clone();
        *a.last_mut().unwrap() = backend;
        a
    };
    let (reference, metal_sim) = (on("reference"), on("metal-sim"));
    let dense = d.path("dense.safetensors");
    write_raw(
        &dense,
        vec![("w", Dtype::F32, vec![2, 256], f32_bytes(&[0.25; 512]))],
        &[],
    );
    let quantize = [
        "quantize",
        "--input",
        s(&dense),
        "--tensor",
        "w",
        "--k",
        "2",
        "--l",
        "8",
        "--t",
        "64",
        "--code",
        "1mad",
        "--out",
        s(&q),
    ];
    for (value, reason) in [("100000", "at most"), ("lots", "thread count")] {
        let env = [("RAYON_NUM_THREADS", value)];
        for (args, out) in [
            (&matvec[..], &y),
            (&reference[..], &y),
            (&metal_sim[..], &y),
            (&quantize[..], &q),
        ] {
            fails_env(args, &env, out, &["RAYON_NUM_THREADS", value, reason]);
        }
    }
    // Within range the same commands run, with the reference's bits (the thread count
    // changes none), on the cpu, the reference and the simulator.
    let env = [("RAYON_NUM_THREADS", "3")];
    let (w, x) = (d.path("w.safetensors"), d.path("x.safetensors"));
    for args in [&matvec[..], &reference[..], &metal_sim[..]] {
        let o = trellis_env(args, &env);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert_reference_y(&w, &x, &y);
        std::fs::remove_file(&y).unwrap();
    }
    let o = trellis_env(&quantize, &env);
    assert!(o.status.success(), "quantize: {}", text(&o.stderr));
    let qm = io::read_quantized(&q, "w").unwrap();
    assert_eq!(
        (qm.geometry.rows, qm.geometry.cols, qm.geometry.k),
        (2, 256, 2)
    );
}

/// The compiler's variables: one that is not UTF-8 is an error naming it (it was read as
/// unset, so another compiler ran or the flags were dropped, silently); a relative `HOME`
/// puts no kernel cache under the working directory.
#[test]
fn compiler_variables_are_taken_as_written_or_refused() {
    use std::os::unix::ffi::OsStrExt;
    let d = Dir::new();
    let y = d.path("y.safetensors");
    let matvec = small_cpu_matvec(&d);
    let not_text = std::ffi::OsStr::from_bytes(b"c\xff++");
    for var in ["CXX", "TRELLIS_CPU_CXXFLAGS"] {
        let o = Command::new(BIN)
            .args(&matvec)
            .env(var, not_text)
            .env("TRELLIS_CACHE_DIR", d.path("cache"))
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{var}: {err}");
        assert!(
            err.contains(var) && err.contains("must be UTF-8"),
            "{var}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!y.exists());
    }
    let work = d.path("work");
    std::fs::create_dir(&work).unwrap();
    let o = Command::new(BIN)
        .args(&matvec)
        .current_dir(&work)
        .env_remove("TRELLIS_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", "relhome")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
    assert_reference_y(&d.path("w.safetensors"), &d.path("x.safetensors"), &y);
}
