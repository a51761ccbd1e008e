//! Conformance vectors of `shared/vectors` (made by an independent implementation of
//! SPEC.md): every file listed in `index.json` must be reproduced bit for bit by the CPU
//! reference, read through `trellis::io`.
//!
//! `w.dense` in the `matvec-*` files is the SPEC section 4 weight *rounded to the dtype of
//! that file's `x`* (`round_T` with `T` = x's dtype, stored as f32); the test checks that
//! it is not merely the unrounded f32 product (see `matvec_dense_is_rounded_to_x_dtype`).

use std::path::{Path, PathBuf};
use trellis::io::SafetensorsFile;
use trellis::{reference, Activations, Code, DType};

fn vectors_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/vectors"));
    assert!(
        dir.join("index.json").is_file(),
        "conformance vectors not found: expected {} (shared/vectors beside the checkout); \
         these tests must not pass without them",
        dir.display()
    );
    dir
}

#[derive(serde::Deserialize, Debug)]
struct Entry {
    file: String,
    kind: String,
    dtype: Option<String>,
    #[serde(rename = "M")]
    m: Option<usize>,
}

fn index() -> Vec<Entry> {
    let dir = vectors_dir();
    let text = std::fs::read_to_string(dir.join("index.json")).expect("read index.json");
    let entries: Vec<Entry> = serde_json::from_str(&text).expect("parse index.json");
    assert!(!entries.is_empty(), "index.json lists no vectors");
    entries
}

fn entries(kind: &str) -> Vec<(PathBuf, Entry)> {
    let dir = vectors_dir();
    let v: Vec<_> = index()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| (dir.join(&e.file), e))
        .collect();
    assert!(!v.is_empty(), "index.json lists no `{kind}` vectors");
    v
}

/// First index where the bits differ, as a message naming the tensor, the `[row, col]`
/// position and both values.
fn first_mismatch(what: &str, cols: usize, got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .collect();
    let &i = bad.first()?;
    Some(format!(
        "{what}: {} of {} values differ; first at [{}, {}]: got {:e} (0x{:08x}), expected {:e} (0x{:08x})",
        bad.len(),
        got.len(),
        i / cols,
        i % cols,
        got[i],
        got[i].to_bits(),
        want[i],
        want[i].to_bits()
    ))
}

fn check_activations(what: &str, got: &Activations, want: &Activations) -> Option<String> {
    if (got.dtype, got.rows, got.cols) != (want.dtype, want.rows, want.cols) {
        return Some(format!(
            "{what}: got {} [{}, {}], expected {} [{}, {}]",
            got.dtype, got.rows, got.cols, want.dtype, want.rows, want.cols
        ));
    }
    first_mismatch(what, got.cols, &got.data, &want.data)
}

fn check_entry_meta(path: &Path, e: &Entry, x: &Activations) {
    if let Some(d) = &e.dtype {
        assert_eq!(
            x.dtype.name(),
            d,
            "{}: x dtype vs index.json",
            path.display()
        );
    }
    if let Some(m) = e.m {
        assert_eq!(x.rows, m, "{}: x rows vs index.json M", path.display());
    }
}

fn finish(failures: Vec<String>, checked: usize) {
    assert!(
        failures.is_empty(),
        "{} of {checked} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked > 0, "no checks ran");
}

#[test]
fn matvec_vectors_are_reproduced_bit_for_bit() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (path, e) in entries("matvec") {
        let name = e.file.clone();
        let f = SafetensorsFile::open(&path).unwrap_or_else(|err| panic!("{err}"));
        let w = f
            .quantized("w")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let x = f
            .activations("x")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let y = f
            .activations("y")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        check_entry_meta(&path, &e, &x);
        let (dense, rows, cols) = f.dense("w.dense").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((rows, cols), (w.geometry.rows, w.geometry.cols), "{name}");

        let ours = reference::dequantize(&w, x.dtype).unwrap();
        checked += 1;
        if let Some(m) = first_mismatch(
            &format!("{name} w.dense (round_T = {})", x.dtype),
            cols,
            &ours,
            &dense,
        ) {
            failures.push(m);
        }
        let got = reference::reduce(&w, &x).unwrap();
        checked += 1;
        if let Some(m) = check_activations(&format!("{name} y"), &got, &y) {
            failures.push(m);
        }
        println!(
            "ok {name}: {} M={} {} (w.dense and y bit-exact)",
            w.geometry, x.rows, x.dtype
        );
    }
    finish(failures, checked);
}

/// `w.dense` is `round_T(value * scale)` with `T` = the dtype of the file's `x`, not the
/// plain f32 product: for every bf16/f16 file the f32 product differs somewhere.
#[test]
fn matvec_dense_is_rounded_to_x_dtype() {
    for (path, e) in entries("matvec") {
        let f = SafetensorsFile::open(&path).unwrap();
        let w = f.quantized("w").unwrap();
        let x = f.activations("x").unwrap();
        let (dense, _, _) = f.dense("w.dense").unwrap();
        let f32_product = reference::dequantize(&w, DType::F32).unwrap();
        let same = f32_product
            .iter()
            .zip(&dense)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert_eq!(
            same,
            x.dtype == DType::F32,
            "{}: w.dense should equal the unrounded f32 product only for f32 x",
            e.file
        );
    }
}

#[test]
fn gate_up_vectors_are_reproduced_bit_for_bit() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (path, e) in entries("gate_up") {
        let name = e.file.clone();
        let f = SafetensorsFile::open(&path).unwrap_or_else(|err| panic!("{err}"));
        let gate = f
            .quantized("gate")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let up = f
            .quantized("up")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let x = f
            .activations("x")
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        check_entry_meta(&path, &e, &x);
        for (t, got) in [
            ("g", reference::reduce(&gate, &x).unwrap()),
            ("u", reference::reduce(&up, &x).unwrap()),
            ("mid", reference::gate_up(&gate, &up, &x).unwrap()),
        ] {
            let want = f
                .activations(t)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            checked += 1;
            if let Some(m) = check_activations(&format!("{name} {t}"), &got, &want) {
                failures.push(m);
            }
        }
        println!(
            "ok {name}: gate {} / up k={} {} M={} (g, u, mid bit-exact)",
            gate.geometry, up.geometry.k, x.dtype, x.rows
        );
    }
    finish(failures, checked);
}

#[test]
fn function_vectors_are_reproduced_bit_for_bit() {
    let entries = entries("functions");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (path, e) in entries {
        let f = SafetensorsFile::open(&path).unwrap_or_else(|err| panic!("{err}"));
        let x = f.tensor("exp_spec.x").unwrap().to_f32().unwrap();
        let y = f.tensor("exp_spec.y").unwrap().to_f32().unwrap();
        let ours: Vec<f32> = x.iter().map(|&v| reference::exp_spec(v)).collect();
        checked += 1;
        match first_mismatch(&format!("{} exp_spec", e.file), 1, &ours, &y) {
            Some(m) => failures.push(format!("{m} (x = {:?})", x.first())),
            None => println!("ok exp_spec: {} values", x.len()),
        }

        // Every `code.<code>.L<L>` tensor of the file ...
        let mut seen = std::collections::BTreeSet::new();
        for name in f.names().into_iter().filter(|n| n.starts_with("code.")) {
            let parsed = name
                .strip_prefix("code.")
                .and_then(|r| r.rsplit_once(".L"))
                .and_then(|(c, l)| Some((c.parse::<Code>().ok()?, l.parse::<u32>().ok()?)));
            let Some((code, l)) = parsed else {
                failures.push(format!("{}: cannot parse tensor name {name}", e.file));
                continue;
            };
            let want = f.tensor(&name).unwrap().to_f32().unwrap();
            // Code lut's values are its table: compare with the table another vector file
            // defines for this L (`w.lut` of a lut matvec file), never with `want` itself.
            let lut = if code == Code::Lut {
                match lut_of_matvec_vectors(l) {
                    Some(t) => Some(t),
                    None => {
                        failures.push(format!(
                            "{}: {name} has no lut matvec file at L={l} to compare with",
                            e.file
                        ));
                        continue;
                    }
                }
            } else {
                None
            };
            let ours = code.table(l, lut.as_deref()).unwrap();
            checked += 1;
            match first_mismatch(&format!("{} {name}", e.file), 1, &ours, &want) {
                Some(m) => failures.push(m),
                None => println!("ok {name}: {} states", want.len()),
            }
            seen.insert((code, l));
        }
        // ... and the README's promise: every code at L = 12 and 16.
        for code in Code::ALL {
            for l in [12u32, 16] {
                if seen.contains(&(code, l)) {
                    continue;
                }
                if code == Code::Lut {
                    // A table is data, not a function of the state: nothing to compare.
                    println!(
                        "skipped code.lut.L{l}: not in {} (code lut has no fixed values); not counted",
                        e.file
                    );
                } else {
                    failures.push(format!("{}: missing tensor code.{code}.L{l}", e.file));
                }
            }
        }
    }
    finish(failures, checked);
}

/// The `w.lut` table of the first lut matvec vector at state bits `l`.
fn lut_of_matvec_vectors(l: u32) -> Option<Vec<f32>> {
    entries("matvec").into_iter().find_map(|(path, _)| {
        let w = trellis::io::read_quantized(&path, "w").ok()?;
        (w.geometry.code == Code::Lut && w.geometry.l == l).then_some(w.lut?)
    })
}

/// The lut matvec vector decodes through the file's own table: every state's value is
/// `w.lut[s]` bit for bit, and the SPEC 4 weights built from it are the file's `w.dense`.
#[test]
fn lut_vector_decodes_through_its_own_table() {
    let mut checked = 0;
    for (path, e) in entries("matvec") {
        let w = trellis::io::read_quantized(&path, "w").unwrap();
        if w.geometry.code != Code::Lut {
            continue;
        }
        let f = SafetensorsFile::open(&path).unwrap();
        let file_lut = f.tensor("w.lut").unwrap().to_f32().unwrap();
        let values = w.value_table().unwrap();
        assert_eq!(values.len(), 1 << w.geometry.l, "{}", e.file);
        for (s, (a, b)) in values.iter().zip(&file_lut).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{} state {s}", e.file);
        }
        let x = trellis::io::read_activations(&path, "x").unwrap();
        let (dense, _, _) = f.dense("w.dense").unwrap();
        let ours = trellis::reference::dequantize(&w, x.dtype).unwrap();
        assert!(
            ours.iter()
                .zip(&dense)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}: dequantize through w.lut differs from w.dense",
            e.file
        );
        checked += 1;
    }
    assert!(checked > 0, "no lut matvec vector found");
}

/// Every file in the directory is listed in `index.json`, and every listed file exists.
#[test]
fn index_lists_every_vector_file() {
    let dir = vectors_dir();
    let listed: std::collections::BTreeSet<String> = index().into_iter().map(|e| e.file).collect();
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    assert_eq!(listed, present, "index.json vs files in {}", dir.display());
    for kind in ["matvec", "gate_up", "functions"] {
        assert!(!entries(kind).is_empty());
    }
}

/// A vectors folder whose index lists nothing, an entry of an unknown kind, or only the
/// functions' vectors (which these tests check, not the kernels) is an error naming it: a
/// verify that checked no vector must not pass.
#[test]
fn an_empty_or_unknown_index_is_an_error() {
    let b = trellis::backend::CpuBackend::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (index, needles) in [
        ("[]", &["lists no vectors"][..]),
        (
            r#"[{"file": "a.safetensors", "kind": "matvect"}]"#,
            &["entry[0] = ", "matvect"][..],
        ),
        (
            r#"[{"file": "f.safetensors", "kind": "functions"}]"#,
            &["lists no matvec or gate_up vector"][..],
        ),
    ] {
        std::fs::write(dir.path().join("index.json"), index).unwrap();
        let e = trellis::verify::verify_vectors(&b, dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("index.json"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{n}: {e}");
        }
    }
    // A listed vector that cannot be read is an error naming its file, not a pass.
    std::fs::write(
        dir.path().join("index.json"),
        r#"[{"file": "gone.safetensors", "kind": "matvec"}]"#,
    )
    .unwrap();
    let Err(e) = trellis::verify::verify_vectors(&b, dir.path()) else {
        panic!("a missing vector file is an error");
    };
    let e = e.to_string();
    assert!(e.contains("gone.safetensors"), "{e}");
}
