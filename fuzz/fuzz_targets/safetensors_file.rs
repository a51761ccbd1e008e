//! Any bytes as a safetensors file (SPEC 8): every reader returns what it read or an error
//! that names the file, never a panic, an abort or an allocation the file's length does
//! not justify; a quantized matrix it accepts multiplies through the reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trellis::io::{read_lut_file, SafetensorsFile};
use trellis::{reference, Activations, DType, Error};

/// Largest matrix the target multiplies (weights): enough for every code and L, small
/// enough to keep the executions fast.
const MAX_WEIGHTS: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    // One scratch file per process: libFuzzer runs one input at a time.
    let path =
        std::env::temp_dir().join(format!("trellis-fuzz-{}.safetensors", std::process::id()));
    std::fs::write(&path, data).expect("scratch file");
    let shown = path.display().to_string();
    let named = |e: Error| {
        let text = e.to_string();
        assert!(
            text.contains(&shown),
            "an error without the file's name: {text}"
        );
    };
    if let Err(e) = read_lut_file(&path) {
        named(e);
    }
    let f = match SafetensorsFile::open(&path) {
        Ok(f) => f,
        Err(e) => return named(e),
    };
    for name in f.names() {
        match f.tensor(&name) {
            Ok(t) => {
                let _ = (t.to_f32(), t.to_u32(), t.matrix_shape());
            }
            Err(e) => named(e),
        }
        if let Err(e) = f.activations(&name) {
            named(e);
        }
        if let Err(e) = f.dense(&name) {
            named(e);
        }
    }
    for prefix in f.quantized_prefixes() {
        let w = match f.quantized(&prefix) {
            Ok(w) => w,
            Err(e) => {
                named(e);
                continue;
            }
        };
        let g = w.geometry;
        if g.rows.saturating_mul(g.cols) > MAX_WEIGHTS {
            continue;
        }
        // What the file accepted goes through the reference: ones as x (f32,
        // so no activation rounds) give each row's sum of weights.
        let x = Activations::from_f32(DType::F32, 1, g.cols, vec![1.0; g.cols]).unwrap();
        // (It may still refuse them: weights that overflow f32, say, by name.)
        if let Ok(y) = reference::reduce(&w, &x) {
            assert_eq!((y.rows, y.cols), (1, g.rows));
        }
    }
});
