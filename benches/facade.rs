//! What a facade call costs beside its kernel: `Resident::matvec` (x checked and copied
//! to the device over the last call's tensor, the variant chosen, the launch into the
//! last call's y, y copied back; the fast tier prescales x on the device), the same for
//! the fused gate/up pair (`Resident::gate_up`), and, exact,
//! `Resident::matvec_device` (x and y stay on the device; the fast tier with bf16 x, which
//! reads its flags back, and with f16 x, which does not) against the same kernel bound
//! once and launched alone (then synchronized), in each tier, and the fast tier's GPU
//! part alone (its prescale kernel, then its matrix kernel, one synchronization), and the
//! fast call into y in a variant that prescales x itself (`fused_x`) beside its kernel, on the
//! backend `TRELLIS_BENCH_BACKEND` names (default `cpu`; `cuda` on a GPU). The shape is the
//! issues' goal key (17408 x 5120, k 3, M 1) on a GPU and 1024 x 4096 on the CPU.
//!
//! `cargo bench --bench facade`; on the device, the bench binary built here with
//! `cargo bench --bench facade --no-run` and run there with `--bench`.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use trellis::backend::{AnyBackend, Backend, BackendVisitor};
use trellis::families::mma::{MmaVariant, MmaXStage};
use trellis::families::reduce::{ReduceFamily, ReduceProblem};
use trellis::families::reduce_mma::{Prescale, ReduceMmaFamily};
use trellis::family::Family;
use trellis::kernel::{Elem, KernelSpec, TensorSpec};
use trellis::numerics::{Tail, Tier};
use trellis::tune::select_for;
use trellis::{ops, Code, DType, Geometry, ScaleDType};

/// The bound kernel of family `F`'s chosen variant at `p`, launched and synchronized.
fn bench_kernel<F: Family<Problem = ReduceProblem>, B: Backend>(
    c: &mut Criterion,
    name: &str,
    b: &B,
    p: &ReduceProblem,
    tier: Tier,
) {
    let v = select_for::<F, B>(b, p, tier).variant;
    common::with_bound_kernel::<F, B>(b, p, v, |launch| {
        c.bench_function(name, |bn| bn.iter(&mut *launch));
    });
}

/// The fast tier's prescale kernel for the x of `p`'s chosen variant, bound once:
/// launched and synchronized alone (`parts/prescale-kernel`), and launched before the
/// chosen matrix kernel with one synchronization (`fast/prescale-then-kernel`: what a
/// fast call on the device runs on the GPU, so the call's time less this is its host
/// side and its flags' wait).
fn bench_prescale<B: Backend>(
    c: &mut Criterion,
    at: &str,
    suffix: &str,
    b: &B,
    p: &ReduceProblem,
    xd: &ops::DeviceActivations<B>,
) {
    let v = select_for::<ReduceMmaFamily, B>(b, p, Tier::Fast).variant;
    let k = Prescale::of(&ReduceMmaFamily::kernel(p, v)).unwrap();
    let launch = k.launch_request().unwrap();
    let compiled = b.compile(&launch).unwrap();
    let mut outs = trellis::family::alloc_outputs(b, &k).unwrap();
    let powers = b.upload(Elem::F32, &[1], &1f32.to_le_bytes()).unwrap();
    let plain = xd.tensor().unwrap();
    let mut refs: Vec<_> = outs.iter_mut().collect();
    let mut bound = b
        .bind(&compiled, &launch, &[plain, &powers], &mut refs)
        .unwrap();
    c.bench_function(&format!("{at}/parts/prescale-kernel{suffix}"), |bn| {
        bn.iter(|| {
            b.run(black_box(&mut bound)).unwrap();
            b.synchronize().unwrap();
        })
    });
    common::with_bound_kernel::<ReduceMmaFamily, B>(b, p, v, |kernel| {
        c.bench_function(&format!("{at}/fast/prescale-then-kernel{suffix}"), |bn| {
            bn.iter(|| {
                b.run(black_box(&mut bound)).unwrap();
                kernel();
            })
        });
    });
}

struct Facade<'c>(&'c mut Criterion);

impl BackendVisitor for Facade<'_> {
    type Out = ();
    fn visit<B: Backend>(self, b: &B) {
        let (rows, cols) = if trellis::backend::runs_on_gpu(b.name()) {
            (17408, 5120)
        } else {
            (1024, 4096)
        };
        let g = Geometry::new(rows, cols, 256, 3, 12, Code::OneMad).unwrap();
        let w = trellis::check::random_matrix(g, 1);
        let x = trellis::check::random_activations(DType::Bf16, 1, cols, 2);
        let p = ReduceProblem {
            geometry: g,
            scale: ScaleDType::F16,
            act: DType::Bf16,
            m: 1,
        };
        let r = ops::Resident::new(b, &w).expect("resident");
        let c = self.0;
        let at = format!("{}/{rows}x{cols}", b.name());
        // A call's own steps on the backend: x to the device, y allocated and brought back.
        let xb = x.to_bytes();
        c.bench_function(&format!("{at}/parts/upload-x"), |bn| {
            bn.iter(|| b.upload(Elem::Bf16, &[1, cols], black_box(&xb)).unwrap())
        });
        // The fast tier's per-sample powers: a tiny upload, so the driver's round trip.
        let unscale = [0u8; 8];
        c.bench_function(&format!("{at}/parts/upload-tiny"), |bn| {
            bn.iter(|| b.upload(Elem::F32, &[2], black_box(&unscale)).unwrap())
        });
        // x written over a tensor made before (a resident's call on host data does this
        // from its second call on).
        let mut x_dev = b.upload(Elem::Bf16, &[1, cols], &xb).unwrap();
        c.bench_function(&format!("{at}/parts/write-x"), |bn| {
            bn.iter(|| b.write(&mut x_dev, black_box(&xb)).unwrap())
        });
        // The variant's choice from the tables (memoized after the first).
        c.bench_function(&format!("{at}/parts/select"), |bn| {
            bn.iter(|| select_for::<ReduceFamily, B>(b, black_box(&p), Tier::Exact))
        });
        let y_spec = TensorSpec {
            name: "y",
            elem: Elem::Bf16,
            shape: vec![1, rows],
        };
        c.bench_function(&format!("{at}/parts/alloc-y"), |bn| {
            bn.iter(|| b.alloc(black_box(&y_spec)).unwrap())
        });
        let y = b.alloc(&y_spec).unwrap();
        c.bench_function(&format!("{at}/parts/download-y"), |bn| {
            bn.iter(|| b.download(black_box(&y)).unwrap())
        });
        // The exact tier on activations already on the device, y left there: the launch
        // (and its output's allocation) beside the kernel alone.
        let xd = ops::DeviceActivations::upload(b, &x).unwrap();
        c.bench_function(&format!("{at}/exact/resident-matvec-device"), |bn| {
            bn.iter(|| {
                let y = r.matvec_device(black_box(&xd), Tier::Exact).unwrap();
                b.synchronize().unwrap();
                y
            })
        });
        // The fast tier's prescale kernel alone, and followed by the matrix kernel (the
        // device's part of a fast call on the device, without the flags' read-back).
        bench_prescale::<B>(c, &at, "", b, &p, &xd);
        // The fast tier on the device: x prescaled there, its flags read back.
        c.bench_function(&format!("{at}/fast/resident-matvec-device"), |bn| {
            bn.iter(|| {
                let y = r.matvec_device(black_box(&xd), Tier::Fast).unwrap();
                b.synchronize().unwrap();
                y
            })
        });
        // The same into an output made once (no allocation a call).
        let mut y_out = b.alloc(&y_spec).unwrap();
        // f16 activations need no flags (f16 operands hold them): the fast call into y
        // without the flags' round trip, beside its own kernel.
        let x16 = trellis::Activations::from_f32(DType::F16, 1, cols, x.data.clone()).unwrap();
        let xd16 = ops::DeviceActivations::upload(b, &x16).unwrap();
        let mut y16 = b
            .alloc(&TensorSpec {
                elem: Elem::F16,
                ..y_spec.clone()
            })
            .unwrap();
        c.bench_function(
            &format!("{at}/fast/resident-matvec-device-into-f16x"),
            |bn| {
                bn.iter(|| {
                    r.matvec_device_into(black_box(&xd16), &mut y16, Tier::Fast)
                        .unwrap();
                    b.synchronize().unwrap();
                })
            },
        );
        let p16 = ReduceProblem {
            act: DType::F16,
            ..p
        };
        bench_prescale::<B>(c, &at, "-f16x", b, &p16, &xd16);
        bench_kernel::<ReduceMmaFamily, B>(
            c,
            &format!("{at}/fast/kernel-f16x"),
            b,
            &p16,
            Tier::Fast,
        );
        // The prescale fused into the matrix kernel (`fused_x`, forced: the space offers
        // it once the H200 table is re-measured): the call into y launches one kernel and
        // reads its flags from its `ws`; and that kernel bound and launched alone.
        let fused = MmaVariant {
            max_registers: 48,
            batch_stage: true,
            fused_x: true,
            ..MmaVariant::unsplit(1, 8, 16, MmaXStage::Shared)
        };
        c.bench_function(
            &format!("{at}/fast/resident-matvec-device-into-fused"),
            |bn| {
                bn.iter(|| {
                    r.matvec_device_with(black_box(&xd), &mut y_out, fused)
                        .unwrap();
                    b.synchronize().unwrap();
                })
            },
        );
        common::with_bound_kernel::<ReduceMmaFamily, B>(b, &p, fused, |kernel| {
            c.bench_function(&format!("{at}/fast/kernel-fused"), |bn| {
                bn.iter(&mut *kernel)
            });
        });
        for tier in [Tier::Exact, Tier::Fast] {
            c.bench_function(&format!("{at}/{tier}/resident-matvec-device-into"), |bn| {
                bn.iter(|| {
                    r.matvec_device_into(black_box(&xd), &mut y_out, tier)
                        .unwrap();
                    b.synchronize().unwrap();
                })
            });
        }
        // The fused pair on host data (its up matrix resident too).
        let u = trellis::check::random_matrix(g, 3);
        let ru = ops::Resident::new(b, &u).expect("resident up");
        for tier in [Tier::Exact, Tier::Fast] {
            c.bench_function(&format!("{at}/{tier}/resident-gate-up"), |bn| {
                bn.iter(|| r.gate_up(&ru, black_box(&x), Tail::Exact, tier).unwrap())
            });
        }
        for tier in [Tier::Exact, Tier::Fast] {
            c.bench_function(&format!("{at}/{tier}/resident-matvec"), |bn| {
                bn.iter(|| r.matvec(black_box(&x), tier).unwrap())
            });
            let kernel = format!("{at}/{tier}/kernel");
            match tier {
                Tier::Exact => bench_kernel::<ReduceFamily, B>(c, &kernel, b, &p, tier),
                Tier::Fast => bench_kernel::<ReduceMmaFamily, B>(c, &kernel, b, &p, tier),
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let name = std::env::var("TRELLIS_BENCH_BACKEND").unwrap_or_else(|_| "cpu".into());
    let b = AnyBackend::open(&name).expect("backend");
    b.visit(Facade(c));
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
