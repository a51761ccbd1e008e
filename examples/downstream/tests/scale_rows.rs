//! The downstream kernel runs on the CPU backend like trellis's own, with the same checks.

use trellis::backend::CpuBackend;
use trellis::kernel::{Backend, Elem};
use trellis::DType;
use trellis_downstream_example::ScaleRows;

#[test]
fn scale_rows_matches_plain_rust() {
    let b = CpuBackend::new().unwrap();
    let (rows, cols) = (5, 70);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| DType::Bf16.round((i as f32 - 150.0) / 37.0))
        .collect();
    let s: Vec<f32> = (0..rows).map(|r| 0.5 + r as f32 * 0.3).collect();
    let xt = b
        .upload(Elem::Bf16, &[rows, cols], &DType::Bf16.encode(&x))
        .unwrap();
    let st = b
        .upload(Elem::F32, &[rows], &DType::F32.encode(&s))
        .unwrap();
    let k = ScaleRows {
        rows,
        cols,
        act: Elem::Bf16,
        rows_per_group: 2,
    };
    let out = k.launch(&b, &xt, &st).unwrap();
    let got = DType::Bf16.decode(&b.download(&out.y).unwrap());
    let want: Vec<f32> = (0..rows * cols)
        .map(|i| DType::Bf16.round(x[i] * s[i / cols]))
        .collect();
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn wrong_shapes_and_dtypes_are_errors() {
    let b = CpuBackend::new().unwrap();
    let k = ScaleRows {
        rows: 4,
        cols: 64,
        act: Elem::F32,
        rows_per_group: 4,
    };
    let x = b.upload(Elem::F32, &[4, 63], &[0; 4 * 63 * 4]).unwrap();
    let s = b.upload(Elem::F32, &[4], &[0; 16]).unwrap();
    let msg = k.launch(&b, &x, &s).err().unwrap().to_string();
    assert!(
        msg.contains("scale_rows.x") && msg.contains("[4, 63]") && msg.contains("[4, 64]"),
        "{msg}"
    );
    let x16 = b.upload(Elem::F16, &[4, 64], &[0; 4 * 64 * 2]).unwrap();
    let msg = k.launch(&b, &x16, &s).err().unwrap().to_string();
    assert!(
        msg.contains("scale_rows.x") && msg.contains("f16") && msg.contains("f32"),
        "{msg}"
    );
    let bad = ScaleRows {
        rows_per_group: 0,
        ..k
    };
    let x = b.upload(Elem::F32, &[4, 64], &[0; 4 * 64 * 4]).unwrap();
    assert!(bad
        .launch(&b, &x, &s)
        .err()
        .unwrap()
        .to_string()
        .contains("rows_per_group = 0"));
}
