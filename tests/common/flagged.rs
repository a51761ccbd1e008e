//! Activations with a sample the fast tier's prescale flags on the device: the fast device
//! paths' tests (`cpu_backend.rs`, `cuda_launch.rs`) run both kinds.

use trellis::Activations;

/// `x` (at least two samples) with its second made one the prescale flags: `held`,
/// scaled by 2^-120 (its largest below 2^-113: the host's operand check holds it, so
/// the call runs on the host); else one value of 2^-60 beside the others (tiny: flagged
/// and read on the host, not held).
pub fn with_flagged_sample(x: Activations, held: bool) -> Activations {
    let (dtype, rows, cols, mut data) = (x.dtype, x.rows, x.cols, x.data);
    let second = &mut data[cols..2 * cols];
    if held {
        second.iter_mut().for_each(|v| *v *= 2f32.powi(-120));
    } else {
        second[7] = 2f32.powi(-60);
    }
    Activations::from_f32(dtype, rows, cols, data).unwrap()
}
