//! CPU paths: the reference oracle and the generated kernels on the CPU backend (the
//! tuned variant from the selector, and the built-in default), for `reduce` and
//! `gate_up` on one MLP-like shape. Throughput is in weights per second. Kernels are
//! bound before timing (outputs allocated, arguments checked), so an iteration is the
//! launch alone. Also the selector's answer at the shipped H200 table (host time every
//! facade call spends before its launch: 48 us before the forty-eighth session, 3 after).

mod common;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use std::hint::black_box;
use trellis::backend::CpuBackend;
use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
use trellis::families::reduce::{ReduceFamily, ReduceProblem};
use trellis::family::Family;
use trellis::numerics::{Tail, Tier};
use trellis::tune::{select_for, Selector};
use trellis::{reference, Code, DType, Geometry, ScaleDType};

/// Time variant `v` of problem `p`: everything prepared, the timed loop only launches.
fn bench_family<F: Family>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: String,
    b: &CpuBackend,
    p: &F::Problem,
    v: F::Variant,
) {
    common::with_bound_kernel::<F, _>(b, p, v, |launch| {
        group.bench_function(name, |bn| bn.iter(&mut *launch));
    });
}

fn bench(c: &mut Criterion) {
    let b = CpuBackend::new().expect("cpu backend");
    let g = Geometry::new(1024, 4096, 256, 3, 12, Code::OneMad).unwrap();
    let w = trellis::check::random_matrix(g, 1);
    let mut group = c.benchmark_group("cpu");
    group.sample_size(10);
    group.throughput(Throughput::Elements((g.rows * g.cols) as u64));
    for m in [1u32, 4] {
        let x = trellis::check::random_activations(DType::Bf16, m as usize, g.cols, 3);
        group.bench_function(format!("reference/reduce/m{m}"), |bn| {
            bn.iter(|| reference::reduce(black_box(&w), &x).unwrap())
        });
        let p = ReduceProblem {
            geometry: g,
            scale: ScaleDType::F16,
            act: DType::Bf16,
            m,
        };
        let tuned = select_for::<ReduceFamily, _>(&b, &p, Tier::Exact).variant;
        let default = ReduceFamily::default_variant(&p, Tier::Exact);
        for (name, v) in [("tuned", tuned), ("default", default)] {
            bench_family::<ReduceFamily>(
                &mut group,
                format!("kernel-{name}/reduce/m{m}"),
                &b,
                &p,
                v,
            );
        }
        let p = GateUpProblem {
            gate: g,
            up: g,
            gate_scale: ScaleDType::F16,
            up_scale: ScaleDType::F16,
            act: DType::Bf16,
            m,
            tail: Tail::Exact,
        };
        let gv = select_for::<GateUpFamily, _>(&b, &p, Tier::Exact).variant;
        bench_family::<GateUpFamily>(&mut group, format!("kernel-tuned/gate_up/m{m}"), &b, &p, gv);
    }
    group.finish();
}

/// One choice of the shipped H200 table for the goal key, in each tier (as
/// `ops::matvec` makes one a call on that GPU).
fn selection(c: &mut Criterion) {
    let s = Selector::shipped();
    let g = Geometry::new(17408, 5120, 256, 3, 12, Code::OneMad).unwrap();
    let p = ReduceProblem {
        geometry: g,
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let mut group = c.benchmark_group("selector");
    group.bench_function("nvidia-h200/reduce/exact", |bn| {
        bn.iter(|| s.select::<ReduceFamily>("cuda", "nvidia-h200", black_box(&p), Tier::Exact))
    });
    group.bench_function("nvidia-h200/reduce_mma/fast", |bn| {
        bn.iter(|| {
            s.select::<trellis::families::reduce_mma::ReduceMmaFamily>(
                "cuda",
                "nvidia-h200",
                black_box(&p),
                Tier::Fast,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench, selection);
criterion_main!(benches);
