//! What a backend promises whoever holds a compiled kernel (`bind` and `run`), and SPEC
//! 5's no flush-to-zero, as checks generic over the backend: `tests/backend_contract.rs`
//! runs them on the CPU, `tests/cuda_launch.rs` on a CUDA GPU.
#![allow(dead_code)] // each test file runs the checks its backend answers

use trellis::check;
use trellis::families::mma::{MmaVariant, MmaXStage};
use trellis::families::reduce_mma::{ReduceMmaFamily, ReduceMmaHost, ReduceMmaProblem};
use trellis::family::{self, Family};
use trellis::kernel::{Backend, KernelSpec, Launch};
use trellis::numerics::Tier;
use trellis::{Activations, Code, DType, Geometry, ScaleDType};

/// A split-K `reduce_mma` problem (its `ws` output holds the arrival counters, which
/// must start at zero), its host data and the variant.
pub fn split_k() -> (ReduceMmaProblem, ReduceMmaHost, MmaVariant) {
    let g = Geometry::new(40, 1024, 256, 2, 12, Code::OneMad).unwrap();
    let w = check::random_matrix(g, 5);
    let x = Activations::from_f32(
        DType::Bf16,
        2,
        1024,
        (0..2048)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect(),
    )
    .unwrap();
    let p = ReduceMmaProblem {
        geometry: g,
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 2,
    };
    let v = MmaVariant {
        k_split: 4,
        ..MmaVariant::unsplit(1, 2, 16, MmaXStage::Shared)
    };
    assert_eq!(ReduceMmaFamily::tier(&v), Tier::Fast);
    (p, ReduceMmaHost { w, x }, v)
}

/// Outputs a kernel needs zeroed are zeroed when bound, whatever they held, and one
/// binding serves every run (the kernel leaves its counters as it found them).
pub fn zeroed_when_bound<B: Backend>(b: &B) {
    let (p, host, v) = split_k();
    let dev = ReduceMmaFamily::upload(b, &p, &host).unwrap();
    let want = family::run::<ReduceMmaFamily, _>(b, &p, v, &dev).unwrap();
    // The fresh binding's result meets SPEC 7 (the runs below must give its bits).
    let real = check::RealSums::of(&host.w, &host.x).unwrap();
    check::fast_reduce(&want[0], &real).unwrap();
    let k = ReduceMmaFamily::kernel(&p, v);
    let launch = k.launch_request().unwrap();
    assert!(
        launch.zero_outputs,
        "a split-K kernel counts arrivals in `ws`"
    );
    // Outputs that held something else: every counter non-zero.
    let mut outs: Vec<_> = launch
        .outputs
        .iter()
        .map(|s| {
            let bytes = vec![0xA5u8; s.len() * s.elem.size()];
            b.upload(s.elem, &s.shape, &bytes).unwrap()
        })
        .collect();
    let inputs = ReduceMmaFamily::inputs(&dev, &v).unwrap();
    let mut refs: Vec<_> = outs.iter_mut().collect();
    b.launch_into(&launch, &inputs, &mut refs).unwrap();
    let got = family::download(b, &outs[0]).unwrap();
    assert!(
        got.bits_eq(&want[0]),
        "the split-K sums started from stale counters"
    );
    let compiled = b.compile(&launch).unwrap();
    let mut refs: Vec<_> = outs.iter_mut().collect();
    let mut bound = b.bind(&compiled, &launch, &inputs, &mut refs).unwrap();
    for _ in 0..3 {
        b.run(&mut bound).unwrap();
    }
    drop(bound);
    assert!(family::download(b, &outs[0]).unwrap().bits_eq(&want[0]));
}

/// A compiled kernel binds only to its own launch: another kernel's entry over this
/// launch's buffers is an error naming both.
pub fn binds_only_its_own<B: Backend>(b: &B) {
    let (p, host, v) = split_k();
    let dev = ReduceMmaFamily::upload(b, &p, &host).unwrap();
    let other = ReduceMmaFamily::kernel(&p, MmaVariant { k_split: 2, ..v });
    let k = ReduceMmaFamily::kernel(&p, v);
    let launch = k.launch_request().unwrap();
    let compiled_other = b.compile(&other.launch_request().unwrap()).unwrap();
    let mut outs = family::alloc_outputs(b, &k).unwrap();
    let mut refs: Vec<_> = outs.iter_mut().collect();
    let inputs = ReduceMmaFamily::inputs(&dev, &v).unwrap();
    let e = b
        .bind(&compiled_other, &launch, &inputs, &mut refs)
        .err()
        .expect("another kernel's entry over this launch's buffers")
        .to_string();
    assert!(
        e.contains("compiled kernel") && e.contains(&launch.id.to_string()),
        "{e}"
    );
}

/// A grid with no groups along any axis runs nothing: the outputs keep what they held.
pub fn empty_grid_runs_nothing<B: Backend>(b: &B) {
    let (p, host, v) = split_k();
    let v = MmaVariant { k_split: 1, ..v };
    let dev = ReduceMmaFamily::upload(b, &p, &host).unwrap();
    let k = ReduceMmaFamily::kernel(&p, v);
    for axis in 0..3 {
        let mut parts = k.launch_request().unwrap().into_parts();
        parts.grid.groups[axis] = 0;
        // SAFETY: the declaration's own with fewer groups: no group runs.
        let launch = unsafe { Launch::from_parts(parts) };
        let y = &launch.outputs[0];
        let before = vec![0x3Cu8; y.len() * y.elem.size()];
        let mut out = [
            b.upload(y.elem, &y.shape, &before).unwrap(),
            b.alloc(&launch.outputs[1]).unwrap(),
        ];
        let mut refs: Vec<_> = out.iter_mut().collect();
        b.launch_into(
            &launch,
            &ReduceMmaFamily::inputs(&dev, &v).unwrap(),
            &mut refs,
        )
        .unwrap();
        assert_eq!(
            b.download(&out[0]).unwrap(),
            before,
            "grid axis {axis} empty"
        );
    }
}

/// Dynamic threadgroup memory is part of what a kernel declares in all: more is refused
/// by name at compile.
pub fn dynamic_within_declared<B: Backend>(b: &B) {
    let (p, _, v) = split_k();
    let k = ReduceMmaFamily::kernel(&p, v);
    let mut parts = k.launch_request().unwrap().into_parts();
    parts.dynamic_shared_bytes = parts.shared_bytes + 1;
    // SAFETY: the declaration's own, with more dynamic memory than in all: refused at
    // compile, it never runs.
    let launch = unsafe { Launch::from_parts(parts) };
    let e = b
        .compile(&launch)
        .err()
        .expect("more dynamic than in all")
        .to_string();
    assert!(e.contains("dynamic threadgroup memory"), "{e}");
}

/// SPEC 5: no flush-to-zero. Samples whose every activation is subnormal (f32 and bf16
/// share f32's exponent range) give subnormal products and sums: the exact tier keeps
/// their bits (a flushing kernel would write zeros), through the facade's selected
/// kernels and the seed's structure alike.
pub fn subnormal_sums_keep_their_bits<B: Backend>(b: &B) {
    use trellis::families::simt::Variant;
    use trellis::{ops, reference, ScaleDType};
    let g = Geometry::new(24, 512, 256, 3, 12, Code::OneMad).unwrap();
    let mut w = check::random_matrix_scaled(g, ScaleDType::F32, 9);
    w.scales.iter_mut().for_each(|s| *s = s.abs());
    for act in [DType::F32, DType::Bf16] {
        // 2^-130 .. 2^-127 times small integers: subnormal, exact in bf16 too.
        let data = (0..2 * 512)
            .map(|i| {
                f32::from_bits(((i * 7919 % 127) as u32 + 1) << 16)
                    * if i % 3 == 0 { -1.0 } else { 1.0 }
            })
            .collect();
        let x = Activations::from_f32(act, 2, 512, data).unwrap();
        assert!(x.data.iter().all(|v| v.is_subnormal()), "{act}");
        let want = reference::reduce(&w, &x).unwrap();
        assert!(
            want.data.iter().any(|v| v.is_subnormal()),
            "{act}: the reference's sums are subnormal"
        );
        for (what, got) in [
            ("selected", ops::matvec(b, &w, &x, Tier::Exact).unwrap()),
            (
                "default",
                ops::matvec_with(b, &w, &x, Variant::default()).unwrap(),
            ),
        ] {
            assert!(got.bits_eq(&want), "{act} {what}: flushed or changed");
        }
    }
}

/// `download_range` reads the bytes asked for, an empty range reads none, and a range
/// past the tensor's bytes (or reversed) is an error naming it.
pub fn download_range_reads_its_bytes<B: Backend>(b: &B) {
    use trellis::kernel::Elem;
    let bytes: Vec<u8> = (0..40u8).collect();
    let t = b.upload(Elem::U32, &[10], &bytes).unwrap();
    assert_eq!(b.download_range(&t, 12..20).unwrap(), bytes[12..20]);
    assert_eq!(b.download_range(&t, 36..40).unwrap(), bytes[36..40]);
    assert!(b.download_range(&t, 40..40).unwrap().is_empty());
    #[allow(clippy::reversed_empty_ranges)]
    for bad in [36..44, 41..41, 8..4] {
        let e = b.download_range(&t, bad.clone()).unwrap_err().to_string();
        assert!(
            e.contains("download range")
                && e.contains(&format!("{bad:?}"))
                && e.contains("40 bytes"),
            "{bad:?}: {e}"
        );
    }
}
