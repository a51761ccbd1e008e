//! The fast tier's kernels run as the tuner runs them: x prescaled on the host
//! (`Prescaled::upload`) and the tables' variant launched on it. The facade prescales x
//! on the device instead (the prescale kernel); its results must be these bits.

use trellis::backend::Backend;
use trellis::families::gate_up_mma::{GateUpMmaDevice, GateUpMmaFamily};
use trellis::families::reduce_mma::{ReduceMmaDevice, ReduceMmaFamily};
use trellis::numerics::{Tail, Tier};
use trellis::tune::select_for;
use trellis::{Activations, QuantizedMatrix};

/// `y = W x`, fast, with x prescaled on the host.
pub fn matvec<B: Backend>(b: &B, w: &QuantizedMatrix, x: &Activations) -> Activations {
    let p = ReduceMmaFamily::problem_of(w, x).unwrap();
    let v = select_for::<ReduceMmaFamily, B>(b, &p, Tier::Fast).variant;
    let d = ReduceMmaDevice::upload(b, w, x).unwrap();
    trellis::family::run::<ReduceMmaFamily, B>(b, &p, v, &d)
        .unwrap()
        .swap_remove(0)
}

/// The fused pair, fast, with x prescaled on the host.
pub fn gate_up<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
) -> Activations {
    let p = GateUpMmaFamily::problem_of(gate, up, x, tail).unwrap();
    let v = select_for::<GateUpMmaFamily, B>(b, &p, Tier::Fast).variant;
    let d = GateUpMmaDevice::upload(b, gate, up, x).unwrap();
    trellis::family::run::<GateUpMmaFamily, B>(b, &p, v, &d)
        .unwrap()
        .swap_remove(0)
}

/// The prescale kernel (`Prescale`, as the facade runs it) against the host's
/// `Prescaled` at `cols` columns, in every activation dtype and both output types: the
/// bits of x prescaled and of `unscale`, and the flags. x has five samples: an ordinary
/// one, one with a value below 2^-28 of its largest (near its end, so a kernel that reads
/// a long sample in two spans meets it in the second), one whose largest is below
/// 2^-113, one of zeros and one past 2^14.
pub fn prescale_kernel_matches<B: Backend>(b: &B, cols: usize) {
    use trellis::families::reduce_mma::{Prescale, Prescaled};
    use trellis::kernel::{Elem, KernelSpec};
    use trellis::{Code, DType, Geometry};
    for dtype in [DType::Bf16, DType::F16, DType::F32] {
        let mut data = Vec::new();
        for (n, scale) in [
            (0, 1.0f32),
            (1, 1.0),
            (2, 2f32.powi(-120)),
            (3, 0.0),
            (4, 3e4),
        ] {
            for c in 0..cols {
                let v = ((c * 37 + n * 11) % 29) as f32 / 7.0 - 2.0;
                data.push(if n == 1 && c == cols - 5 {
                    2f32.powi(-40)
                } else {
                    v * scale
                });
            }
        }
        let x = Activations::from_f32(dtype, 5, cols, data).unwrap();
        let w = trellis::check::random_matrix(
            Geometry::new(32, cols, 32, 2, 12, Code::OneMad).unwrap(),
            131,
        );
        let host = Prescaled::upload(b, &x, &[&w]).unwrap();
        let xd = trellis::ops::upload_activations(b, &x).unwrap();
        let powers = b.upload(Elem::F32, &[1], &1.0f32.to_le_bytes()).unwrap();
        for out in [dtype, DType::F16] {
            let k = Prescale {
                m: 5,
                cols,
                projections: 1,
                act: dtype,
                out,
            };
            let mut outs = trellis::family::alloc_outputs(b, &k).unwrap();
            let mut refs: Vec<_> = outs.iter_mut().collect();
            b.launch_into(&k.launch_request().unwrap(), &[&xd, &powers], &mut refs)
                .unwrap();
            let want = match (out == dtype, &host.x_f16) {
                (true, _) | (false, None) => &host.x,
                (false, Some(h)) => h,
            };
            assert_eq!(
                b.download(&outs[0]).unwrap(),
                b.download(want).unwrap(),
                "{dtype} -> {out}, {cols} columns"
            );
            assert_eq!(
                b.download(&outs[1]).unwrap(),
                b.download(&host.unscale).unwrap(),
                "{dtype} -> {out}, {cols} columns"
            );
            let flags: Vec<u8> = b.download(&outs[2]).unwrap();
            let flagged: Vec<bool> = flags.chunks(4).map(|f| f != [0; 4]).collect();
            let want = match dtype {
                DType::F16 => vec![false; 5],
                _ => vec![false, true, true, false, false],
            };
            assert_eq!(flagged, want, "{dtype} -> {out}, {cols} columns");
        }
    }
}
