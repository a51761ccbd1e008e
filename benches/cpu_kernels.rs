//! CPU paths: the reference oracle and the generated kernels on the CPU backend (the
//! tuned variant from the selector, and the built-in default), for `reduce` and
//! `gate_up` on one MLP-like shape. Throughput is in weights per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use trellis::backend::CpuBackend;
use trellis::kernels::{Tail, Variant};
use trellis::ops::{self, DeviceMatrix};
use trellis::tune::{select_for, Family};
use trellis::verify::{random_activations, random_matrix};
use trellis::{reference, Code, DType, Geometry};

fn bench(c: &mut Criterion) {
    let b = CpuBackend::new().expect("cpu backend");
    let g = Geometry::new(1024, 4096, 256, 3, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 1);
    let u = random_matrix(g, 2);
    let mut group = c.benchmark_group("cpu");
    group.sample_size(10);
    group.throughput(Throughput::Elements((g.rows * g.cols) as u64));
    for m in [1usize, 4] {
        let x = random_activations(DType::Bf16, m, g.cols, 3);
        let tuned = select_for(&b, Family::Reduce, &g, None, &x)
            .unwrap()
            .variant;
        let dw = DeviceMatrix::upload(&b, &w).unwrap();
        let du = DeviceMatrix::upload(&b, &u).unwrap();
        let dx = ops::upload_activations(&b, &x).unwrap();
        group.bench_function(format!("reference/reduce/m{m}"), |bn| {
            bn.iter(|| reference::reduce(black_box(&w), &x).unwrap())
        });
        for (name, v) in [("tuned", tuned), ("default", Variant::default())] {
            let spec = ops::reduce_spec(&g, w.scale_dtype, DType::Bf16, m as u32, v);
            group.bench_function(format!("kernel-{name}/reduce/m{m}"), |bn| {
                bn.iter(|| {
                    spec.launch(&b, &dx, &dw.codes, &dw.scales, dw.table(v.repr))
                        .unwrap()
                })
            });
        }
        let gv = select_for(&b, Family::GateUp, &g, Some(&g), &x)
            .unwrap()
            .variant;
        let spec = ops::gate_up_spec(
            &g,
            &g,
            (w.scale_dtype, u.scale_dtype),
            DType::Bf16,
            m as u32,
            Tail::Exact,
            gv,
        );
        group.bench_function(format!("kernel-tuned/gate_up/m{m}"), |bn| {
            bn.iter(|| {
                spec.launch(
                    &b,
                    &dx,
                    &dw.codes,
                    &dw.scales,
                    dw.table(gv.repr),
                    &du.codes,
                    &du.scales,
                    du.table(gv.repr),
                )
                .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
