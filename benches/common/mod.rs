//! What the benches share: a kernel bound once, so the timed loop only launches.

use trellis::family::{self, Family};
use trellis::kernel::{Backend, KernelSpec};

/// Variant `v` of problem `p` on random data, bound once (outputs allocated, arguments
/// checked); `time` gets one launch, synchronized (a no-op on the CPU), to time.
pub fn with_bound_kernel<F: Family, B: Backend>(
    b: &B,
    p: &F::Problem,
    v: F::Variant,
    time: impl FnOnce(&mut dyn FnMut()),
) {
    let host = F::random_host(p, 1).expect("random data");
    let dev = F::upload(b, p, &host).expect("upload");
    let k = F::kernel(p, v);
    let launch = k.launch_request().expect("valid");
    let compiled = b.compile(&launch).expect("compiles");
    let mut outs = family::alloc_outputs(b, &k).expect("outputs");
    let inputs = F::inputs(&dev, &v).expect("inputs");
    let mut refs: Vec<_> = outs.iter_mut().collect();
    let mut bound = b
        .bind(&compiled, &launch, &inputs, &mut refs)
        .expect("binds");
    time(&mut || {
        b.run(std::hint::black_box(&mut bound)).unwrap();
        b.synchronize().unwrap();
    });
}
