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
