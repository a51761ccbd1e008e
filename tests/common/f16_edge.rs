//! f16 sums at the edge of f16's range stay finite in the fast tier (SPEC 7: "f16
//! activations: up to their own range"): a row whose real sum is 65500 (in range: it
//! rounds to 65504) but whose f16 operands carry the f32 sum past 65520 is held at 65504
//! (`numerics::F16_HOLD_BELOW`), in `reduce_mma`, in `gate_up_mma`'s g before its tail,
//! and in a pair of two T (unfused); a sum past the hold is still infinity; and on the
//! fast tier's fallback (samples its f16 operands cannot hold), whose f32 sums may carry
//! one in range past 65520; and in the SIMT families' fast branches (`reduce`,
//! `gate_up`), whose f16-rounded weights may do the same. Run on each backend by its own
//! test file.

use trellis::check::{self, RealSums};
use trellis::families::gate_up::{GateUpDevice, GateUpFamily};
use trellis::families::reduce::{ReduceDevice, ReduceFamily};
use trellis::families::simt::Variant;
use trellis::family;
use trellis::kernel::Backend;
use trellis::numerics::{Tail, Tier};
use trellis::{ops, Activations, Code, DType, Geometry, QuantizedMatrix, ScaleDType};

/// 16 rows of 512 columns of one lut value at one f32 scale.
fn constant(t: usize, value: f32, scale: f32) -> QuantizedMatrix {
    let g = Geometry::new(16, 512, t, 1, 2, Code::Lut).unwrap();
    let codes = vec![0x9e37_79b9; g.codes_shape().iter().product()];
    QuantizedMatrix::new(
        g,
        codes,
        vec![scale; 16],
        ScaleDType::F32,
        Some(vec![value; 4]),
    )
    .unwrap()
}

pub fn holds_f16_sums_at_the_edge<B: Backend>(b: &B) {
    let name = b.name();
    // 1.0044 takes the f16 operand 1.0048828: 512 of them at this scale sum to 65531.8.
    let w = constant(256, 1.0044, 65500.0 / (512.0 * 1.0044));
    let x = Activations::from_f32(DType::F16, 1, 512, vec![1.0; 512]).unwrap();
    let real = RealSums::of(&w, &x).unwrap();
    assert!(
        real.y.iter().all(|&y| (y - 65500.0).abs() < 0.01),
        "{:?}",
        real.y
    );
    let y = ops::matvec(b, &w, &x, Tier::Fast).unwrap();
    assert!(y.data.iter().all(|&v| v == 65504.0), "{name}: {:?}", y.data);
    check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{name}: {e}"));
    let past = constant(256, 1.0, 65900.0 / 512.0);
    let y = ops::matvec(b, &past, &x, Tier::Fast).unwrap();
    assert!(
        y.data.iter().all(|v| v.is_infinite()),
        "{name}: past the hold {:?}",
        y.data
    );
    // The fallback: rows of scale 2^-61 send the sample there; row 0's f32 sum
    // 1 + 3 2^-24 rounds to 1 + 2^-22, which its scale carries past 65520 (y* is
    // 65519.99999714, in range).
    let mut edge = constant(256, 1.0, 2f32.powi(-61));
    edge.scales[0] = 65519.99; // the f32 65519.98828125
    let mut xs = vec![0.0; 512];
    xs[0] = 1.0;
    xs[2] = 3.0 * 2f32.powi(-24);
    let x1 = Activations::from_f32(DType::F16, 1, 512, xs).unwrap();
    let real1 = RealSums::of(&edge, &x1).unwrap();
    assert!(
        real1.y[0] < 65520.0 && real1.y[0] > 65519.99,
        "{}",
        real1.y[0]
    );
    let y = ops::matvec(b, &edge, &x1, Tier::Fast).unwrap();
    assert_eq!(y.data[0], 65504.0, "{name}: the fallback");
    check::fast_reduce(&y, &real1).unwrap_or_else(|e| panic!("{name}: the fallback: {e}"));
    for t in [256, 128] {
        let u = constant(t, 1.0, 0.5 / 512.0);
        let mid = ops::gate_up(b, &w, &u, &x, Tail::Exact, Tier::Fast).unwrap();
        // silu(65504) * 0.5, rounded to f16.
        assert!(
            mid.data.iter().all(|&v| v == 32752.0),
            "{name} up T {t}: {:?}",
            mid.data
        );
        let us = RealSums::of(&u, &x).unwrap();
        check::fast_gate_up(&mid, &real, &us, false).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The SIMT fast branches: weights of 128.07 round to the f16 128.125, so x of 511 ones and
/// a half sums to 65536 in f32 where y* = 65507.8 (in range): held at 65504, in `reduce`
/// and in `gate_up`'s g before the tail.
pub fn simt_fast_holds_f16_sums_at_the_edge<B: Backend>(b: &B) {
    let name = b.name();
    let w = constant(256, 1.0, 128.07);
    let mut xs = vec![1.0; 512];
    xs[511] = 0.5;
    let x = Activations::from_f32(DType::F16, 1, 512, xs).unwrap();
    let real = RealSums::of(&w, &x).unwrap();
    assert!(
        real.y.iter().all(|&y| y < 65520.0 && y > 65500.0),
        "{:?}",
        real.y
    );
    let fast = Variant {
        tier: Tier::Fast,
        ..Variant::default()
    };
    let p = ReduceFamily::problem_of(&w, &x).unwrap();
    family::precompile::<ReduceFamily, _>(b, &[(p, vec![fast])]).unwrap();
    let d = ReduceDevice::upload(b, &w, &x).unwrap();
    let y = family::run::<ReduceFamily, _>(b, &p, fast, &d)
        .unwrap()
        .remove(0);
    assert!(
        y.data.iter().all(|&v| v == 65504.0),
        "{name}: SIMT {:?}",
        y.data
    );
    check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{name}: SIMT: {e}"));
    let u = constant(256, 1.0, 0.5 / 511.5);
    let p = GateUpFamily::problem_of(&w, &u, &x, Tail::Exact).unwrap();
    family::precompile::<GateUpFamily, _>(b, &[(p, vec![fast])]).unwrap();
    let d = GateUpDevice::upload(b, &w, &u, &x).unwrap();
    let mid = family::run::<GateUpFamily, _>(b, &p, fast, &d)
        .unwrap()
        .remove(0);
    assert!(
        mid.data.iter().all(|&v| v == 32752.0),
        "{name}: SIMT gate_up {:?}",
        mid.data
    );
    let us = RealSums::of(&u, &x).unwrap();
    check::fast_gate_up(&mid, &real, &us, false)
        .unwrap_or_else(|e| panic!("{name}: SIMT gate_up: {e}"));
}
