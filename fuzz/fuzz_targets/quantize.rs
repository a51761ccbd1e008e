//! The encoder on any options and values: `encode::quantize` returns a matrix or an error
//! naming the field, never a panic; what it returns is a valid matrix of the asked
//! geometry whose reported MSE is the one SPEC 4's f32 weights have against the input.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use trellis::encode::{quantize, EncodeOptions};
use trellis::{reference, Code, DType};

#[derive(Arbitrary, Debug)]
struct Input {
    rows: u8,
    /// Blocks per row (the columns are `blocks * t`, unless `cols` says otherwise).
    blocks: u8,
    /// T, k and L in SPEC 1's ranges (`32 * (1 + t % 8)`, `1 + k % 8`, `k < L <= 16`),
    /// or as given when `raw` (to reach the checks).
    t: u16,
    k: u8,
    l: u8,
    raw: bool,
    code: u8,
    /// Columns other than `blocks * t`, to reach the geometry's checks.
    cols: Option<u16>,
    /// The `lut` table as given (any length), else a Gaussian one of the right length.
    lut: Option<Vec<f32>>,
    /// The weights, repeated to fill `rows * cols` (or given as they are when `exact_len`).
    values: Vec<f32>,
    exact_len: bool,
}

fuzz_target!(|input: Input| {
    let rows = usize::from(input.rows % 4);
    let (t, k, l) = if input.raw {
        (usize::from(input.t), u32::from(input.k), u32::from(input.l))
    } else {
        let k = 1 + u32::from(input.k % 8);
        let l = k + 1 + u32::from(input.l) % (16 - k);
        (32 * (1 + usize::from(input.t % 8)), k, l)
    };
    let cols = match input.cols {
        Some(c) => usize::from(c) % 1025,
        None => usize::from(input.blocks % 3) * t,
    };
    // The Viterbi pass is 2^L states a weight: keep the executions short.
    if rows * cols * (1usize << l.min(16)) > 1 << 22 || cols > 1024 {
        return;
    }
    let code = Code::ALL[usize::from(input.code) % Code::ALL.len()];
    let lut = match (code, input.lut) {
        (Code::Lut, Some(given)) => Some(given),
        (Code::Lut, None) if (2..=16).contains(&l) => trellis::encode::gaussian_lut(l, 1).ok(),
        (_, given) => given,
    };
    let values = input.values;
    let dense: Vec<f32> = if input.exact_len || values.is_empty() {
        values
    } else {
        values.iter().copied().cycle().take(rows * cols).collect()
    };
    let opts = EncodeOptions {
        t,
        k,
        l,
        code,
        lut,
        progress: false,
    };
    let Ok(e) = quantize(&dense, rows, cols, &opts) else {
        return;
    };
    let g = e.matrix.geometry;
    assert_eq!(
        (g.rows, g.cols, g.t, g.k, g.l, g.code),
        (rows, cols, t, k, l, code)
    );
    e.matrix.validate().expect("the encoder's matrix is valid");
    let w = reference::dequantize(&e.matrix, DType::F32).expect("it dequantizes");
    let sum: f64 = w
        .iter()
        .zip(&dense)
        .map(|(&q, &d)| (f64::from(q) - f64::from(d)).powi(2))
        .sum();
    let mse = if w.is_empty() {
        0.0
    } else {
        sum / w.len() as f64
    };
    assert!(
        (mse - e.mse).abs() <= 1e-9 * mse.max(1e-30) + f64::MIN_POSITIVE,
        "reported MSE {} against {mse} ({rows} x {cols}, {opts:?})",
        e.mse
    );
});
