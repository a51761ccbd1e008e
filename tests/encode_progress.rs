//! `encode::quantize_with_progress` reports every finished row once, in order (the CLI's
//! bar), and gives the same result as `quantize`.

use std::sync::Mutex;
use trellis::encode::{quantize, quantize_with_progress, EncodeOptions};
use trellis::Code;

#[test]
fn progress_counts_every_row_in_order() {
    let (rows, cols) = (12, 256);
    let dense: Vec<f32> = (0..rows * cols)
        .map(|i| (i as f32 * 0.37).sin() * 0.8)
        .collect();
    let opts = EncodeOptions {
        t: 256,
        k: 2,
        l: 8,
        code: Code::OneMad,
        lut: None,
        progress: false,
    };
    let seen = Mutex::new(Vec::new());
    let got = quantize_with_progress(&dense, rows, cols, &opts, &|n| seen.lock().unwrap().push(n))
        .unwrap();
    assert_eq!(seen.into_inner().unwrap(), (1..=rows).collect::<Vec<_>>());
    assert_eq!(got, quantize(&dense, rows, cols, &opts).unwrap());
}
