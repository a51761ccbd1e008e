//! Launch edge cases on a CUDA GPU. Ignored where there is no GPU (CI has none); on a
//! GPU machine: `cargo test --release --test cuda_launch -- --ignored` (or the built
//! test binary with `--ignored`, as the device checks run it).
#![cfg(feature = "cuda")]

#[path = "common/contract.rs"]
mod contract;
#[path = "common/f16_edge.rs"]
mod f16_edge;
#[path = "common/facade.rs"]
mod facade;
#[path = "common/flagged.rs"]
mod flagged;
#[path = "common/fused.rs"]
mod fused;
#[path = "common/host_prescaled.rs"]
mod host_prescaled;

use trellis::backend::cuda::CudaBackend;
use trellis::codegen::Rendered;
use trellis::kernel::{
    fnv1a, Backend, Dialect, Elem, Grid, KernelId, Launch, LaunchParts, TensorSpec,
};

/// A kernel that writes 1 to `y[0]`, launched on `groups` threadgroups of 32 threads;
/// returns `y[0]` (outputs start zeroed).
fn write_one(b: &CudaBackend, groups: [u32; 3]) -> trellis::Result<f32> {
    run_body(
        b,
        "write_one",
        "  if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = 1.0f;\n",
        groups,
    )
}

/// `body` as kernel `name` with one output `y: f32[1]`; returns `y[0]`.
fn run_body(
    b: &CudaBackend,
    name: &'static str,
    body: &str,
    groups: [u32; 3],
) -> trellis::Result<f32> {
    let render = |d: Dialect| {
        Ok(Rendered {
            dialect: d,
            header: String::new(),
            body: body.to_string(),
        })
    };
    // SAFETY: the body writes `y[0]` alone, from thread 0 of group (0, 0), and its id
    // hashes the body.
    let launch = unsafe {
        Launch::from_parts(LaunchParts {
            kernel: name,
            id: KernelId {
                name,
                params: fnv1a(body.as_bytes()),
                detail: 0,
            },
            grid: Grid {
                groups,
                threads: 32,
            },
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            zero_outputs: false,
            inputs: vec![],
            outputs: vec![TensorSpec {
                name: "y",
                elem: Elem::F32,
                shape: vec![1],
            }],
            render: Box::new(render),
        })
    };
    let y = b.launch(&launch, &[])?;
    b.synchronize()?;
    let bytes = b.download(&y[0])?;
    Ok(f32::from_le_bytes(bytes[..4].try_into().unwrap()))
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn an_empty_grid_launches_nothing() {
    // The driver refuses a grid with a zero extent; the backend runs nothing instead,
    // as the CPU and Metal backends do, and the output keeps its zeros.
    let b = CudaBackend::new(0).unwrap();
    assert_eq!(write_one(&b, [1, 1, 1]).unwrap(), 1.0);
    for groups in [[0, 1, 1], [1, 0, 1], [1, 1, 0]] {
        assert_eq!(write_one(&b, groups).unwrap(), 0.0, "{groups:?}");
    }
    // And a grid the CPU would run differently is refused before the driver sees it.
    let msg = write_one(&b, [1, 1, 2]).unwrap_err().to_string();
    assert!(msg.contains("write_one grid z = 2"), "{msg}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn a_kernel_that_fails_to_compile_is_named_and_spares_the_backend() {
    let b = CudaBackend::new(0).unwrap();
    let err = run_body(&b, "broken", "  y[0] = undeclared_name;\n", [1, 1, 1]).unwrap_err();
    assert!(matches!(err, trellis::Error::Compile { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("broken") && text.contains("undeclared_name"),
        "{text}"
    );
    // Asked again, the same error (not a cached half-built kernel); the backend still runs
    // other kernels.
    let again = run_body(&b, "broken", "  y[0] = undeclared_name;\n", [1, 1, 1]).unwrap_err();
    assert_eq!(again.to_string(), text);
    assert_eq!(write_one(&b, [1, 1, 1]).unwrap(), 1.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn uploads_and_allocations_round_trip_their_elements_alone() {
    // Allocations carry `READ_SLACK_BYTES` past the elements; downloads give the
    // elements only, uploads put them first.
    let b = CudaBackend::new(0).unwrap();
    let bytes: Vec<u8> = (0..30).collect();
    let u = b.upload(Elem::F16, &[3, 5], &bytes).unwrap();
    assert_eq!(b.download(&u).unwrap(), bytes);
    let spec = TensorSpec {
        name: "t",
        elem: Elem::F16,
        shape: vec![3, 5],
    };
    assert_eq!(b.download(&b.alloc(&spec).unwrap()).unwrap(), vec![0; 30]);
    let empty = b.upload(Elem::F32, &[0, 4], &[]).unwrap();
    assert!(b.download(&empty).unwrap().is_empty());
}

/// A batch larger than one launch through the facade on the GPU (`common/facade.rs`).
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn a_batch_larger_than_a_launch_runs_as_several() {
    facade::a_batch_larger_than_a_launch_runs_as_several(&CudaBackend::new(0).unwrap());
}

/// Activations on the device run the exact tier with the host facade's bits and chain
/// layer to layer without copies: at a key whose H200 winner reads x lane-interleaved
/// (4096 x 14336, k 2, M 2), with x uploaded in both layouts and as it is alone (the
/// winner's plain twin), then y as the next layer's x; and the fused `gate_up`; and both
/// into outputs made once.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn device_activations_chain_without_copies() {
    use trellis::check::{random_activations, random_matrix};
    use trellis::numerics::{Tail, Tier};
    use trellis::ops::{upload_activations, DeviceActivations, Resident};
    use trellis::{reference, Code, DType, Geometry};
    let b = CudaBackend::new(0).unwrap();
    let g = Geometry::new(4096, 14336, 256, 2, 12, Code::OneMad).unwrap();
    let gd = Geometry::new(256, 4096, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u, down) = (
        random_matrix(g, 51),
        random_matrix(g, 52),
        random_matrix(gd, 53),
    );
    let (rw, ru, rd) = (
        Resident::new(&b, &w).unwrap(),
        Resident::new(&b, &u).unwrap(),
        Resident::new(&b, &down).unwrap(),
    );
    let x = random_activations(DType::Bf16, 2, 14336, 54);
    let y_want = reference::reduce(&w, &x).unwrap();
    let z_want = reference::reduce(&down, &y_want).unwrap();
    let mid_want = reference::gate_up(&w, &u, &x).unwrap();
    for (layouts, xd) in [
        ("both layouts", DeviceActivations::upload(&b, &x).unwrap()),
        (
            "x as it is",
            DeviceActivations::from_tensor(upload_activations(&b, &x).unwrap()).unwrap(),
        ),
    ] {
        let y = rw.matvec_device(&xd, Tier::Exact).unwrap();
        let z = rd.matvec_device(&y, Tier::Exact).unwrap();
        let mid = rw
            .gate_up_device(&ru, &xd, Tail::Exact, Tier::Exact)
            .unwrap();
        assert!(y.download(&b).unwrap().bits_eq(&y_want), "y, {layouts}");
        assert!(z.download(&b).unwrap().bits_eq(&z_want), "z, {layouts}");
        assert!(
            mid.download(&b).unwrap().bits_eq(&mid_want),
            "mid, {layouts}"
        );
        // Into outputs made once.
        let spec = TensorSpec {
            name: "y",
            elem: Elem::Bf16,
            shape: vec![2, 4096],
        };
        let (mut y, mut mid) = (b.alloc(&spec).unwrap(), b.alloc(&spec).unwrap());
        rw.matvec_device_into(&xd, &mut y, Tier::Exact).unwrap();
        rw.gate_up_device_into(&ru, &xd, &mut mid, Tail::Exact, Tier::Exact)
            .unwrap();
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(got.bits_eq(&y_want), "y into, {layouts}");
        let got = trellis::family::download(&b, &mid).unwrap();
        assert!(got.bits_eq(&mid_want), "mid into, {layouts}");
    }
}

/// The fast tier on activations on the device, on the tables' winners (x taken in f16
/// by the kernel: `x_f16`): `matvec_device` and `gate_up_device` give the host facade's
/// bits at M 1, 4 and 16, bf16 and f32, chained a layer on; a sample with a tiny value (flagged, read on
/// the host, run on the device) and one below 2^-113 (held: run on the host) too.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn device_activations_run_the_fast_tier() {
    use trellis::check::{fast_gate_up, fast_reduce, random_activations, random_matrix, RealSums};
    use trellis::numerics::Tier;
    use trellis::ops::{DeviceActivations, Resident};
    use trellis::{Code, DType, Geometry};
    let b = CudaBackend::new(0).unwrap();
    let g = Geometry::new(4096, 14336, 256, 2, 12, Code::OneMad).unwrap();
    let gd = Geometry::new(256, 4096, 256, 3, 12, Code::OneMad).unwrap();
    let (w, down, u) = (
        random_matrix(g, 61),
        random_matrix(gd, 62),
        random_matrix(g, 67),
    );
    let (rw, rd, ru) = (
        Resident::new(&b, &w).unwrap(),
        Resident::new(&b, &down).unwrap(),
        Resident::new(&b, &u).unwrap(),
    );
    for (dtype, m, seed) in [
        (DType::Bf16, 1, 63),
        (DType::F32, 4, 64),
        (DType::Bf16, 16, 65),
    ] {
        let x = random_activations(dtype, m, 14336, seed);
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        // After a call on another x of this shape, whose y keeps its bits: this call
        // reuses its scratch, in stream order.
        let x0 = random_activations(dtype, m, 14336, seed + 10);
        let y0 = rw
            .matvec_device(&DeviceActivations::upload(&b, &x0).unwrap(), Tier::Fast)
            .unwrap();
        let y = rw.matvec_device(&xd, Tier::Fast).unwrap();
        let y0_want = rw.matvec(&x0, Tier::Fast).unwrap();
        assert!(
            y0.download(&b).unwrap().bits_eq(&y0_want),
            "y0, {dtype} M {m}"
        );
        let z = rd.matvec_device(&y, Tier::Fast).unwrap();
        let y_want = rw.matvec(&x, Tier::Fast).unwrap();
        let z_want = rd.matvec(&y_want, Tier::Fast).unwrap();
        // The host facade's bits, which the device's must equal, are SPEC 7's: within
        // the bound of the real sums (the H200 table's winners at this shape).
        let (gw, gu) = (RealSums::of(&w, &x).unwrap(), RealSums::of(&u, &x).unwrap());
        fast_reduce(&y_want, &gw).unwrap_or_else(|e| panic!("y, {dtype} M {m}: {e}"));
        fast_reduce(&z_want, &RealSums::of(&down, &y_want).unwrap())
            .unwrap_or_else(|e| panic!("z, {dtype} M {m}: {e}"));
        assert!(y.download(&b).unwrap().bits_eq(&y_want), "y, {dtype} M {m}");
        // Both prescale x on the device: the bits of the kernel on x prescaled by the
        // host, as the tuner runs it.
        let host = host_prescaled::matvec(&b, &w, &x);
        assert!(y_want.bits_eq(&host), "y, {dtype} M {m}: host prescaled");
        assert!(z.download(&b).unwrap().bits_eq(&z_want), "z, {dtype} M {m}");
        let mid = rw
            .gate_up_device(&ru, &xd, trellis::numerics::Tail::Exact, Tier::Fast)
            .unwrap();
        let mid_want = rw
            .gate_up(&ru, &x, trellis::numerics::Tail::Exact, Tier::Fast)
            .unwrap();
        fast_gate_up(&mid_want, &gw, &gu, false)
            .unwrap_or_else(|e| panic!("mid, {dtype} M {m}: {e}"));
        assert!(
            mid.download(&b).unwrap().bits_eq(&mid_want),
            "mid, {dtype} M {m}"
        );
        let host = host_prescaled::gate_up(&b, &w, &u, &x, trellis::numerics::Tail::Exact);
        assert!(
            mid_want.bits_eq(&host),
            "mid, {dtype} M {m}: host prescaled"
        );
    }
    for held in [false, true] {
        let x = flagged::with_flagged_sample(random_activations(DType::Bf16, 3, 14336, 66), held);
        let y = rw
            .matvec_device(&DeviceActivations::upload(&b, &x).unwrap(), Tier::Fast)
            .unwrap();
        let want = rw.matvec(&x, Tier::Fast).unwrap();
        assert!(y.download(&b).unwrap().bits_eq(&want), "held {held}");
        // Flagged, not held: the prescale kernel's bits are the host's.
        if !held {
            let host = host_prescaled::matvec(&b, &w, &x);
            assert!(want.bits_eq(&host), "flagged: host prescaled");
        }
    }
    // Into outputs made once (a held sample's result written into y by
    // `CudaBackend::write`, in place), the fused pair's scratch beside the matvec's.
    let spec = |name, m| trellis::kernel::TensorSpec {
        name,
        elem: trellis::kernel::Elem::Bf16,
        shape: vec![m, 4096],
    };
    let (mut y, mut mid) = (
        b.alloc(&spec("y", 3)).unwrap(),
        b.alloc(&spec("mid", 3)).unwrap(),
    );
    for (flagged, held, seed) in [(false, false, 68), (true, true, 69), (false, false, 70)] {
        let x = random_activations(DType::Bf16, 3, 14336, seed);
        let x = match flagged {
            true => flagged::with_flagged_sample(x, held),
            false => x,
        };
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        rw.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
        rw.gate_up_device_into(
            &ru,
            &xd,
            &mut mid,
            trellis::numerics::Tail::Native,
            Tier::Fast,
        )
        .unwrap();
        let want = rw.matvec(&x, Tier::Fast).unwrap();
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(got.bits_eq(&want), "into y, held {held}");
        let want = rw
            .gate_up(&ru, &x, trellis::numerics::Tail::Native, Tier::Fast)
            .unwrap();
        let got = trellis::family::download(&b, &mid).unwrap();
        assert!(got.bits_eq(&want), "into mid, held {held}");
    }
    // The write itself: in place, its length checked.
    let bytes: Vec<u8> = (0..24).collect();
    let mut t = b
        .alloc(&trellis::kernel::TensorSpec {
            name: "t",
            elem: trellis::kernel::Elem::F32,
            shape: vec![2, 3],
        })
        .unwrap();
    b.write(&mut t, &bytes).unwrap();
    assert_eq!(b.download(&t).unwrap(), bytes);
    let e = b.write(&mut t, &bytes[..20]).unwrap_err().to_string();
    assert!(e.contains("write bytes = 20"), "{e}");
    // A read started before a write to another tensor queued after it (t itself stays
    // borrowed until the bytes are taken): both as written.
    let later = b.download_later(&t).unwrap();
    let other: Vec<u8> = (100..124).collect();
    let mut t2 = b
        .upload(trellis::kernel::Elem::F32, &[2, 3], &bytes)
        .unwrap();
    b.write(&mut t2, &other).unwrap();
    assert_eq!(later().unwrap(), bytes);
    assert_eq!(b.download(&t2).unwrap(), other);
    b.write(&mut t, &other).unwrap();
    // Dropped untaken, it lets the staging go (after its copy): the next read runs.
    drop(b.download_later(&t).unwrap());
    assert_eq!(b.download(&t).unwrap(), other);
}

/// The backend contract (`common/contract.rs`) on CUDA: outputs a kernel needs zeroed are
/// zeroed when bound (on the stream, before its launches), a compiled kernel binds only
/// to its own launch, every empty grid axis runs nothing, dynamic shared memory is part
/// of the declared, and subnormal sums keep their bits (no flush-to-zero).
/// The prescale kernel's bits against the host's at widths its threads do not divide
/// (32, 5152), past what one span of its registers holds (20512: a second span, read
/// again), and at 28672 columns.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn the_prescale_kernel_matches_the_host_at_any_width() {
    let b = CudaBackend::new(0).unwrap();
    for cols in [32, 5152, 20512, 28672] {
        host_prescaled::prescale_kernel_matches(&b, cols);
    }
}

/// The prescale fused into `reduce_mma`'s staging (`fused_x`) on the GPU, at the launch
/// shapes of the Qwen3-14B keys (a group over one sample's 5120 columns at 17408 x
/// 5120; 8 splits at 5120 x 17408) and at M 2: the pipeline's bits without split-K,
/// SPEC 7 and the flags per split and sample (`common/fused.rs`); then the same through
/// the facade's fast device call, flagged and held samples too.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn the_fused_prescale_matches_the_pipeline() {
    use trellis::families::mma::{MmaVariant, MmaXStage};
    use trellis::{check, Activations, Code, DType, Geometry};
    let b = CudaBackend::new(0).unwrap();
    // (rows, columns, M, row tiles, col split, k split)
    for (i, (rows, cols, m, rt, cs, ks)) in [
        (17408, 5120, 1, 1, 8, 1),
        (5120, 17408, 1, 1, 4, 8),
        (1024, 5120, 2, 1, 8, 1),
        (1024, 5120, 3, 2, 4, 4),
    ]
    .into_iter()
    .enumerate()
    {
        let g = Geometry::new(rows, cols, 256, 2, 12, Code::OneMad).unwrap();
        let w = check::random_matrix(g, 40 + i as u64);
        let clean = check::random_activations_with_outliers(DType::Bf16, m, cols, 50 + i as u64);
        // A value tiny against its sample in the last sample (split 0's columns).
        let mut data = clean.data.clone();
        data[(m - 1) * cols + 7] = 1e-12;
        let x = Activations::from_f32(DType::Bf16, m, cols, data).unwrap();
        let plain = MmaVariant {
            batch_stage: true,
            k_split: ks,
            ..MmaVariant::unsplit(rt, cs, 16, MmaXStage::Shared)
        };
        fused::fused_matches(&b, &w, &x, plain, &format!("cuda {g} M={m}"));
        fused::facade_fused_matches(&b, &w, &clean, plain, &format!("cuda facade {g} M={m}"));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn the_backend_contract_holds() {
    let b = CudaBackend::new(0).unwrap();
    contract::zeroed_when_bound(&b);
    contract::binds_only_its_own(&b);
    contract::empty_grid_runs_nothing(&b);
    contract::download_range_reads_its_bytes(&b);
    contract::dynamic_within_declared(&b);
    contract::subnormal_sums_keep_their_bits(&b);
}

/// A kernel bound on one thread runs on another, which has no CUDA context current until
/// the backend makes its own so: same bits as on the binding thread.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn a_bound_kernel_runs_on_another_thread() {
    use trellis::families::reduce_mma::ReduceMmaFamily;
    use trellis::family::{self, Family};
    use trellis::kernel::KernelSpec;
    let b = CudaBackend::new(0).unwrap();
    let (p, host, v) = contract::split_k();
    let dev = ReduceMmaFamily::upload(&b, &p, &host).unwrap();
    let want = family::run::<ReduceMmaFamily, _>(&b, &p, v, &dev).unwrap();
    // The result the other thread's runs must reproduce meets SPEC 7 itself.
    let real = trellis::check::RealSums::of(&host.w, &host.x).unwrap();
    trellis::check::fast_reduce(&want[0], &real).unwrap();
    let k = ReduceMmaFamily::kernel(&p, v);
    let launch = k.launch_request().unwrap();
    let compiled = b.compile(&launch).unwrap();
    let mut outs = family::alloc_outputs(&b, &k).unwrap();
    {
        let inputs = ReduceMmaFamily::inputs(&dev, &v).unwrap();
        let mut refs: Vec<_> = outs.iter_mut().collect();
        let mut bound = b.bind(&compiled, &launch, &inputs, &mut refs).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                b.run(&mut bound).unwrap();
                b.synchronize().unwrap();
            })
            .join()
            .unwrap();
        });
    }
    assert!(family::download(&b, &outs[0]).unwrap().bits_eq(&want[0]));
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn the_fast_tier_holds_f16_sums_at_the_edge() {
    let b = CudaBackend::new(0).unwrap();
    f16_edge::holds_f16_sums_at_the_edge(&b);
    f16_edge::simt_fast_holds_f16_sums_at_the_edge(&b);
}
