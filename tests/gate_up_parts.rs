//! SPEC 7 bounds a fast `gate_up`'s `g` and `u` as well as its `mid`; the fused kernels
//! return `mid` only. `GateUpMmaParts` is the same kernel (the same template, the same
//! inputs) storing `g` and `u` beside `mid`: here its `mid` is the plain kernel's, bit for
//! bit, and its `g` and `u` each meet the SPEC 7 bound against the real sums, over the
//! quick verify catalog's `gate_up_mma` problems (same-k and mixed-k, both tails, M up
//! to 16, outliers in x) and their quick candidates, on the CPU and the Metal simulator
//! (and, ignored without a GPU, on CUDA).

use trellis::check::{self, RealSums};
use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaParts};
use trellis::family::{self, Family};
use trellis::kernel::{Backend, KernelSpec};
use trellis::numerics::Tier;

/// The problems and variants checked: every quick-catalog problem, its default and its
/// valid quick candidates (about `per` of them, spread over the list).
fn cases(
    per: usize,
) -> Vec<(
    <GateUpMmaFamily as Family>::Problem,
    Vec<<GateUpMmaFamily as Family>::Variant>,
)> {
    GateUpMmaFamily::catalog(true)
        .into_iter()
        .map(|p| {
            // The candidates a tuner would time: those the kernel accepts for p.
            let mut all = GateUpMmaFamily::candidates(&p, Tier::Fast, true);
            all.retain(|v| GateUpMmaFamily::kernel(&p, *v).validate().is_ok());
            assert!(
                !all.is_empty(),
                "{p}: the kernel refuses every quick candidate"
            );
            let step = all.len().div_ceil(per).max(1);
            let mut vs: Vec<_> = all.into_iter().step_by(step).collect();
            let d = GateUpMmaFamily::default_variant(&p, Tier::Fast);
            if !vs.contains(&d) {
                vs.push(d);
            }
            (p, vs)
        })
        .collect()
}

/// Checks every case; returns how many variants ran, which the tests ask to be at least
/// two a problem on average (the defaults alone would be one).
fn check_parts<B: Backend>(b: &B, per: usize) -> usize {
    let cases = cases(per);
    family::precompile::<GateUpMmaFamily, B>(b, &cases).unwrap();
    let mut checked = 0;
    for (i, (p, vs)) in cases.iter().enumerate() {
        let host = GateUpMmaFamily::random_host(p, 0x5eed + i as u64).unwrap();
        let dev = GateUpMmaFamily::upload(b, p, &host).unwrap();
        let g_real = RealSums::of(&host.gate, &host.x).unwrap();
        let u_real = RealSums::of(&host.up, &host.x).unwrap();
        for &v in vs {
            let what = format!("{} {v}", GateUpMmaFamily::key_fields(p));
            let plain = family::run::<GateUpMmaFamily, B>(b, p, v, &dev).unwrap();
            let k = GateUpMmaParts {
                kernel: GateUpMmaFamily::kernel(p, v),
            };
            let outs = b
                .launch(
                    &k.launch_request().unwrap(),
                    &GateUpMmaFamily::inputs(&dev, &v).unwrap(),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got: Vec<_> = outs
                .iter()
                .map(|t| family::download(b, t).unwrap())
                .collect();
            assert!(
                got[0].bits_eq(&plain[0]),
                "{what}: mid differs from the plain kernel's"
            );
            check::fast_reduce(&got[1], &g_real).unwrap_or_else(|e| panic!("{what}: g: {e}"));
            check::fast_reduce(&got[2], &u_real).unwrap_or_else(|e| panic!("{what}: u: {e}"));
            // And mid against SPEC 7 from the stored parts' real sums, as verify checks it.
            check::fast_gate_up(&got[0], &g_real, &u_real, !p.tail.is_exact())
                .unwrap_or_else(|e| panic!("{what}: mid: {e}"));
            checked += 1;
        }
    }
    checked
}

#[test]
fn gate_and_up_meet_spec7_on_the_cpu() {
    let b = trellis::backend::CpuBackend::new().unwrap();
    assert!(check_parts(&b, 3) >= 2 * GateUpMmaFamily::catalog(true).len());
}

#[test]
fn gate_and_up_meet_spec7_on_the_metal_simulator() {
    let b = trellis::backend::metal_sim::MetalSimBackend::new().unwrap();
    assert!(check_parts(&b, 2) >= 2 * GateUpMmaFamily::catalog(true).len());
}

#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn gate_and_up_meet_spec7_on_cuda() {
    let b = trellis::backend::cuda::CudaBackend::new(0).unwrap();
    assert!(check_parts(&b, 8) >= 2 * GateUpMmaFamily::catalog(true).len());
}
