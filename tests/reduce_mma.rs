//! `reduce_mma` (fast tier on matrix units) on the CPU backend: the same template body
//! the GPUs run, with the mma emulated over the PTX fragment layouts, checked against
//! SPEC 7 (v2) for random geometry, every code, every activation dtype, M in {1, 8, 16}
//! and activations with outliers up to 2^15.

#[path = "common/f16_edge.rs"]
mod f16_edge;
#[path = "common/flagged.rs"]
mod flagged;
#[path = "common/fused.rs"]
mod fused;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trellis::backend::metal_sim::{MetalSimBackend, Schedule};
use trellis::backend::CpuBackend;
use trellis::check::{self, RealSums};
use trellis::families::mma::{MmaOperands, MmaVariant, MmaXStage};
use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::family::{self, Family};
use trellis::kernel::{Backend as _, KernelSpec as _};
use trellis::numerics::Tier;
use trellis::{Activations, Code, DType, Geometry, QuantizedMatrix, ScaleDType};

/// Unit-scale activations with one column in 37 set to +-2^15 (f16: +-2^10).
fn outliers(dtype: DType, m: usize, cols: usize, rng: &mut ChaCha8Rng) -> Activations {
    let big = if dtype == DType::F16 { 1024.0 } else { 32768.0 };
    let data = (0..m * cols)
        .map(|i| {
            let v: f32 = rng.random_range(-2.0..2.0);
            if i % 37 == 5 {
                v.signum() * big
            } else {
                v
            }
        })
        .collect();
    Activations::from_f32(dtype, m, cols, data).unwrap()
}

/// `reduce_mma` variants `a` and `b` of `p` on backend `be`, on one upload: their outputs.
fn run_twins<B: trellis::kernel::Backend>(
    be: &B,
    p: &trellis::families::reduce_mma::ReduceMmaProblem,
    host: &trellis::families::reduce_mma::ReduceMmaHost,
    a: MmaVariant,
    b: MmaVariant,
) -> (Vec<Activations>, Vec<Activations>) {
    let d = ReduceMmaFamily::upload(be, p, host).unwrap();
    let run = |v| family::run::<ReduceMmaFamily, _>(be, p, v, &d).unwrap();
    (run(a), run(b))
}

/// A staged-x case: 40 rows of `cols` columns (k 2, L 12, `code`), `m` samples of bf16 x
/// with outliers, and the launch shape of `rt` row tiles, `cs` column splits and `ks`
/// splits of K reading x from `x_stage`.
fn split_case(
    rng: &mut ChaCha8Rng,
    (code, m, cols, x_stage, rt, cs, ks): (Code, usize, usize, MmaXStage, u32, u32, u32),
) -> (Geometry, QuantizedMatrix, Activations, MmaVariant) {
    let g = Geometry::new(40, cols, 256, 2, 12, code).unwrap();
    let w = check::random_matrix(g, rng.random());
    let x = outliers(DType::Bf16, m, cols, rng);
    let v = MmaVariant {
        k_split: ks,
        ..MmaVariant::unsplit(rt, cs, 16, x_stage)
    };
    (g, w, x, v)
}

/// Why `v` does not validate at a small problem (40 x 768 1mad, M 2; matrix seed `seed`).
fn refusal(v: MmaVariant, seed: u64, rng: &mut ChaCha8Rng) -> String {
    use trellis::kernel::KernelSpec as _;
    let g = Geometry::new(40, 768, 256, 2, 12, Code::OneMad).unwrap();
    let w = check::random_matrix(g, seed);
    let x = outliers(DType::Bf16, 2, 768, rng);
    let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
    ReduceMmaFamily::kernel(&p, v)
        .validate()
        .unwrap_err()
        .to_string()
}

/// A tuned-size problem: `rows` x 5120, k 2, L 12, `code`, bf16 x, f16 scales.
fn tuned_problem(
    rows: usize,
    code: Code,
    m: u32,
) -> trellis::families::reduce_mma::ReduceMmaProblem {
    trellis::families::reduce_mma::ReduceMmaProblem {
        geometry: Geometry::new(rows, 5120, 256, 2, 12, code).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m,
    }
}

/// `reduce_mma` of `w` and `x` with variants `a` and `b` on the CPU and the Metal simulator:
/// `b`'s results must be `a`'s bit for bit and meet SPEC 7 (`what` names the case). The
/// problem, for further checks.
fn assert_twins_agree(
    (cpu, sim): (&CpuBackend, &trellis::backend::metal_sim::MetalSimBackend),
    w: QuantizedMatrix,
    x: Activations,
    a: MmaVariant,
    b: MmaVariant,
    what: &str,
) -> trellis::families::reduce_mma::ReduceMmaProblem {
    let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
    let real = RealSums::of(&w, &x).unwrap();
    let host = trellis::families::reduce_mma::ReduceMmaHost { w, x };
    for (name, (want, got)) in [
        ("cpu", run_twins(cpu, &p, &host, a, b)),
        ("metal-sim", run_twins(sim, &p, &host, a, b)),
    ] {
        assert!(
            got[0].bits_eq(&want[0]),
            "{name} {what}: {b} differs from {a}"
        );
        check::fast_reduce(&got[0], &real).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
    }
    p
}

/// `gate_up_mma` of `gate`, `up` and `x` (exact tail) with variants `a` and `b` on the CPU,
/// on one upload: `b`'s results must be `a`'s bit for bit, and `a`'s meet SPEC 7 (so a
/// fault they shared would not pass; `what` names the case). The problem, for further
/// checks.
fn assert_gate_up_twins_agree(
    gate: QuantizedMatrix,
    up: QuantizedMatrix,
    x: Activations,
    a: MmaVariant,
    b: MmaVariant,
    what: &str,
) -> trellis::families::gate_up_mma::GateUpMmaProblem {
    use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaHost};
    let cpu = CpuBackend::new().expect("cpu backend");
    let p = GateUpMmaFamily::problem_of(&gate, &up, &x, trellis::numerics::Tail::Exact).unwrap();
    let host = GateUpMmaHost { gate, up, x };
    let d = GateUpMmaFamily::upload(&cpu, &p, &host).unwrap();
    let run = |v| family::run::<GateUpMmaFamily, _>(&cpu, &p, v, &d).unwrap();
    let (want, got) = (run(a), run(b));
    assert!(
        got[0].bits_eq(&want[0]),
        "gate_up_mma: {what}: {b} differs from {a}"
    );
    check_fast_gate_up(&host.gate, &host.up, &host.x, want[0].clone(), what);
    p
}

/// `mid`, the fast `gate_up` of `w`, `u` and `x` (exact tail), against SPEC 7 through the
/// family's own check.
fn check_fast_gate_up(
    w: &QuantizedMatrix,
    u: &QuantizedMatrix,
    x: &Activations,
    mid: Activations,
    what: &str,
) {
    use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaHost};
    use trellis::numerics::Tail;
    let p = GateUpMmaFamily::problem_of(w, u, x, Tail::Exact).unwrap();
    let host = GateUpMmaHost {
        gate: w.clone(),
        up: u.clone(),
        x: x.clone(),
    };
    let want = GateUpMmaFamily::expected(&p, &host).unwrap();
    GateUpMmaFamily::check(
        &p,
        &GateUpMmaFamily::default_variant(&p, Tier::Fast),
        &host,
        &want,
        &[mid],
    )
    .unwrap_or_else(|e| panic!("{what} gate_up: {e}"));
}

#[test]
fn reduce_mma_meets_spec7_on_cpu_for_random_geometry() {
    let b = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(0x114d_4d41);
    let dtypes = [DType::Bf16, DType::F16, DType::F32];
    let (mut n, mut bf16_runs) = (0, 0);
    for (ci, code) in Code::ALL.into_iter().enumerate() {
        for (mi, m) in [1u32, 8, 16].into_iter().enumerate() {
            let k = rng.random_range(1..=8u32);
            let l = rng.random_range((k + 1).max(8)..=16u32);
            let t = 32 * rng.random_range(1..=4usize);
            let blocks = rng.random_range(1..=4usize);
            let cols = t * blocks;
            let rows = rng.random_range(1..=40usize);
            let g = Geometry::new(rows, cols, t, k, l, code).unwrap();
            let act = dtypes[(ci + mi) % 3];
            let mut w = check::random_matrix(g, rng.random());
            if mi == 1 {
                w.scale_dtype = ScaleDType::F32;
            }
            let x = outliers(act, m as usize, cols, &mut rng);
            let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
            let real = RealSums::of(&w, &x).unwrap();
            let v = MmaVariant {
                row_tiles: [1, 2][mi % 2],
                col_split: [1, 2, 4][(ci + mi) % 3],
                m_tile: if mi == 2 && ci % 2 == 0 { 8 } else { 16 },
                x_stage: match (ci + mi) % 3 {
                    0 => MmaXStage::Global,
                    1 => MmaXStage::Shared,
                    _ if matches!(code, Code::ThreeInst | Code::Mcg) => MmaXStage::SharedDup,
                    _ => MmaXStage::Shared,
                },
                // Split-K where the row has the steps for it (the last split may be short).
                k_split: if ci % 2 == 1 {
                    ((cols / 128) as u32).clamp(1, 3)
                } else {
                    1
                },
                // A register budget renders (CUDA) and changes nothing elsewhere.
                max_registers: if ci % 2 == 1 { 48 } else { 0 },
                // bf16 operands where they apply (bf16 x from device memory, one k-slot
                // per weight), but not every time: the f16 path runs there too.
                operands: if act == DType::Bf16
                    && (ci + mi) % 3 == 0
                    && !matches!(code, Code::ThreeInst | Code::Mcg)
                    && mi != 1
                {
                    MmaOperands::Bf16
                } else {
                    MmaOperands::F16
                },
                // Paired state windows for codes of one k-slot, at every k and L.
                paired_windows: !matches!(code, Code::ThreeInst | Code::Mcg) && ci % 3 != 1,
                x_f16: false,
                // Batched staging of staged x, split or not (the clamped last round too).
                batch_stage: (ci + mi) % 3 != 0 && mi % 2 == 1,
                opt_in_shared: false,
                // The first words before the staging, where x is staged (not always).
                early_words: (ci + mi) % 3 != 0 && ci % 2 == 0,
                fused_x: false,
            };
            let dev = ReduceMmaFamily::upload(
                &b,
                &p,
                &trellis::families::reduce_mma::ReduceMmaHost {
                    w: w.clone(),
                    x: x.clone(),
                },
            )
            .unwrap();
            let got = family::run::<ReduceMmaFamily, _>(&b, &p, v, &dev).unwrap();
            let y = &got[0];
            assert_eq!((y.rows, y.cols, y.dtype), (m as usize, rows, act));
            match check::fast_reduce(y, &real) {
                Ok(_) => n += 1,
                Err(e) => panic!("{p} {v}: {e}"),
            }
            bf16_runs += usize::from(v.operands == MmaOperands::Bf16);
            // Not vacuous: the result is not all zeros where y* is not.
            assert!(
                y.data
                    .iter()
                    .zip(&real.y)
                    .any(|(a, b)| *b != 0.0 && *a != 0.0),
                "{p} {v}: output is zero"
            );
        }
    }
    assert_eq!(n, Code::ALL.len() * 3);
    assert!(bf16_runs >= 2, "bf16 operands ran {bf16_runs} times");
}

/// Split-K: any number of splits meets SPEC 7; a split's result does not depend on which
/// threadgroup arrives last, and every launch leaves the arrival counters at zero, so
/// bound outputs stay valid launch after launch.
#[test]
fn reduce_mma_split_k_is_deterministic_and_resets_its_counters() {
    let b = CpuBackend::new().expect("cpu backend");
    // 20 steps of 128 columns: 17 splits are uneven (some take 2 steps, most 1).
    let g = Geometry::new(40, 2560, 256, 3, 12, Code::OneMad).unwrap();
    let w = check::random_matrix(g, 11);
    let x = outliers(DType::Bf16, 3, 2560, &mut ChaCha8Rng::seed_from_u64(12));
    let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
    let real = RealSums::of(&w, &x).unwrap();
    let host = trellis::families::reduce_mma::ReduceMmaHost { w, x };
    let dev = ReduceMmaFamily::upload(&b, &p, &host).unwrap();
    let v = |k_split, x_stage| MmaVariant {
        row_tiles: 2,
        col_split: 2,
        m_tile: 16,
        x_stage,
        k_split,
        max_registers: 48,
        operands: MmaOperands::F16,
        paired_windows: false,
        x_f16: false,
        batch_stage: false,
        opt_in_shared: false,
        early_words: false,
        fused_x: false,
    };
    // Outside the family: a clear error, not a launch.
    for (bad, field) in [
        (v(33, MmaXStage::Shared), "k_split = 33"),
        (
            MmaVariant {
                max_registers: 50,
                ..v(2, MmaXStage::Shared)
            },
            "max_registers = 50",
        ),
    ] {
        let e = family::run::<ReduceMmaFamily, _>(&b, &p, bad, &dev).unwrap_err();
        assert!(e.to_string().contains(field), "{e}");
    }
    for v in [
        v(2, MmaXStage::Shared),
        v(3, MmaXStage::Global),
        v(17, MmaXStage::Shared),
    ] {
        let kernel = ReduceMmaFamily::kernel(&p, v);
        let mut outs = family::alloc_outputs(&b, &kernel).unwrap();
        let mut ys = Vec::new();
        for _ in 0..3 {
            let mut refs: Vec<_> = outs.iter_mut().collect();
            family::launch_into::<ReduceMmaFamily, _>(&b, &p, v, &dev, &mut refs).unwrap();
            let y = family::download(&b, &outs[0]).unwrap();
            check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{v}: {e}"));
            ys.push(y.data);
            // The arrival counters (after the parts) are back at zero.
            let ws = b.download(&outs[1]).unwrap();
            let parts = v.k_split as usize * 3 * 40 * 4;
            assert!(
                ws[parts..].iter().all(|&byte| byte == 0),
                "{v}: counters left set"
            );
        }
        assert!(
            ys.windows(2).all(|w| w[0] == w[1]),
            "{v}: results differ between launches"
        );
        // Which threadgroup arrives last: the Metal simulator runs them first to last and
        // last to first; both give the CPU's bits.
        for schedule in [Schedule::InOrder, Schedule::Reversed] {
            let sim = MetalSimBackend::new().unwrap().with_schedule(schedule);
            let sdev = ReduceMmaFamily::upload(&sim, &p, &host).unwrap();
            let y = family::run::<ReduceMmaFamily, _>(&sim, &p, v, &sdev).unwrap();
            assert_eq!(y[0].data, ys[0], "{v}: {schedule:?} arrivals");
        }
    }
}

#[test]
fn reduce_mma_rejects_a_wrong_result_and_has_no_exact_tier() {
    let g = Geometry::new(20, 256, 128, 2, 12, Code::OneMad).unwrap();
    let w = check::random_matrix(g, 5);
    let x = check::random_activations_with_outliers(DType::Bf16, 3, 256, 6);
    let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
    assert!(ReduceMmaFamily::candidates(&p, Tier::Exact, false).is_empty());
    assert!(!ReduceMmaFamily::candidates(&p, Tier::Fast, true).is_empty());
    let b = CpuBackend::new().unwrap();
    let host = trellis::families::reduce_mma::ReduceMmaHost { w, x };
    let dev = ReduceMmaFamily::upload(&b, &p, &host).unwrap();
    let v = ReduceMmaFamily::default_variant(&p, Tier::Fast);
    let mut got = family::run::<ReduceMmaFamily, _>(&b, &p, v, &dev).unwrap();
    let want = ReduceMmaFamily::expected(&p, &host).unwrap();
    assert!(ReduceMmaFamily::check(&p, &v, &host, &want, &got).is_ok());
    got[0].data[7] = got[0].data[7] * 1.01 + 0.5;
    let e = ReduceMmaFamily::check(&p, &v, &host, &want, &got).unwrap_err();
    let (m, r) = (7 / got[0].cols, 7 % got[0].cols);
    assert!(e.starts_with(&format!("y[{m}, {r}] = ")), "{e}");
    // M = 17 is outside the family.
    let x17 = check::random_activations(DType::Bf16, 17, 256, 7);
    let e = ReduceMmaFamily::problem_of(&host.w, &x17)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "invalid M = 17: x must have 1..=16 rows");
}

#[test]
fn gate_up_mma_meets_spec7_on_cpu_same_and_mixed_k() {
    use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaHost};
    use trellis::numerics::Tail;
    let b = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(0x006a_7e11);
    let codes = Code::ALL;
    let mut n = 0;
    for (i, m) in [1u32, 8, 16, 5, 12].into_iter().enumerate() {
        let (gc, uc) = (codes[i % 5], codes[(i + 2) % 5]);
        let kg = rng.random_range(1..=6u32);
        let ku = if i % 2 == 0 { kg } else { kg + 1 };
        let l = rng.random_range((ku + 1).max(9)..=16u32);
        let t = 32 * rng.random_range(1..=3usize);
        let cols = t * rng.random_range(1..=4usize);
        let rows = rng.random_range(1..=37usize);
        let gate = check::random_matrix(
            Geometry::new(rows, cols, t, kg, l, gc).unwrap(),
            rng.random(),
        );
        let up = check::random_matrix(
            Geometry::new(rows, cols, t, ku, l, uc).unwrap(),
            rng.random(),
        );
        let act = [DType::Bf16, DType::F16, DType::F32][i % 3];
        let x = outliers(act, m as usize, cols, &mut rng);
        let tail = if i % 2 == 0 {
            Tail::Exact
        } else {
            Tail::Native
        };
        let p = GateUpMmaFamily::problem_of(&gate, &up, &x, tail).unwrap();
        let v = MmaVariant {
            row_tiles: [1, 2][i % 2],
            col_split: [2, 1, 4][i % 3],
            m_tile: if i == 2 { 8 } else { 16 },
            x_stage: [MmaXStage::Shared, MmaXStage::Global][i % 2],
            k_split: 1,
            max_registers: 0,
            operands: MmaOperands::F16,
            paired_windows: false,
            x_f16: false,
            batch_stage: false,
            opt_in_shared: false,
            early_words: false,
            fused_x: false,
        };
        let host = GateUpMmaHost { gate, up, x };
        let want = GateUpMmaFamily::expected(&p, &host).unwrap();
        let dev = GateUpMmaFamily::upload(&b, &p, &host).unwrap();
        let got = family::run::<GateUpMmaFamily, _>(&b, &p, v, &dev).unwrap();
        assert_eq!(
            (got[0].rows, got[0].cols, got[0].dtype),
            (m as usize, rows, act)
        );
        if let Err(e) = GateUpMmaFamily::check(&p, &v, &host, &want, &got) {
            panic!("{p} {v}: {e}");
        }
        assert!(
            got[0].data.iter().any(|v| *v != 0.0),
            "{p} {v}: output is zero"
        );
        n += 1;
    }
    assert_eq!(n, 5);
}

#[test]
fn reduce_mma_split_k_stages_only_its_share_of_x() {
    use trellis::families::reduce_mma::ReduceMmaProblem;
    use trellis::kernel::KernelSpec as _;
    // 17408 columns of staged x are 35 KB and more per sample: with the column-split
    // sums and Metal's fragment staging over the 48 KB a group may take; a quarter fits.
    let p = ReduceMmaProblem {
        geometry: Geometry::new(5120, 17408, 256, 2, 12, Code::OneMad).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let v = |k_split| MmaVariant {
        row_tiles: 1,
        col_split: 8,
        m_tile: 16,
        x_stage: MmaXStage::Shared,
        k_split,
        max_registers: 48,
        operands: MmaOperands::F16,
        paired_windows: false,
        x_f16: false,
        batch_stage: false,
        opt_in_shared: false,
        early_words: false,
        fused_x: false,
    };
    let e = ReduceMmaFamily::kernel(&p, v(1)).validate().unwrap_err();
    assert!(e.to_string().contains("threadgroup memory"), "{e}");
    let quarter = ReduceMmaFamily::kernel(&p, v(4));
    quarter.validate().unwrap();
    assert!(quarter.shared_bytes() < 48 * 1024);
}

/// Paired state windows (`MmaVariant::paired_windows`) cut the same states as single ones:
/// the kernels' results are bit for bit those of the unpaired variant on the CPU and the
/// Metal simulator, at the k and L where they save work and elsewhere; they are offered
/// at the tuned sizes only where they save work, and 3inst/mcg reject them.
#[test]
fn paired_windows_keep_the_bits_and_are_offered_where_they_save_work() {
    use trellis::backend::metal_sim::MetalSimBackend;
    use trellis::families::mma::paired_windows_fit;
    use trellis::families::reduce_mma::ReduceMmaProblem;
    use trellis::families::simt::Proj;
    use trellis::kernel::{Dialect, KernelSpec as _};
    let cpu = CpuBackend::new().expect("cpu backend");
    let sim = MetalSimBackend::new().expect("metal-sim backend");
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let base = MmaVariant {
        k_split: 2,
        ..MmaVariant::unsplit(1, 2, 16, MmaXStage::Shared)
    };
    let paired = MmaVariant {
        paired_windows: true,
        ..base
    };
    assert_eq!(paired.to_string(), "mma rt=1 cs=2 mt=16 x=shared ks=2 pw");
    for (k, l, code, m) in [
        (2, 16, Code::OneMad, 1),
        (4, 12, Code::OneMad, 5),
        (2, 12, Code::Mul1, 16),
        (4, 16, Code::Lut, 3),
        (3, 16, Code::OneMad, 2), // no pairs at k 3: correct all the same
        (1, 16, Code::Mul1, 8),
    ] {
        let g = Geometry::new(48, 768, 256, k, l, code).unwrap();
        assert_eq!(paired_windows_fit(Proj::of(&g)), k != 3, "{g}");
        let w = check::random_matrix(g, rng.random());
        let x = outliers(DType::Bf16, m, 768, &mut rng);
        let p = assert_twins_agree((&cpu, &sim), w, x, base, paired, &format!("{g} M={m}"));
        let cuda = ReduceMmaFamily::kernel(&p, paired)
            .unit(Dialect::Cuda)
            .unwrap();
        assert!(cuda.contains("TRELLIS_STATE_PAIRED(LANE("), "{g}");
        let plain = ReduceMmaFamily::kernel(&p, base)
            .unit(Dialect::Cuda)
            .unwrap();
        assert!(!plain.contains("TRELLIS_STATE_PAIRED"), "{g}");
    }
    // Offered at the tuned sizes where they save work (each candidate twice), not at the
    // verify catalog's small sizes, not for 3inst.
    let problem = |rows, k, code| ReduceMmaProblem {
        geometry: Geometry::new(rows, 5120, 256, k, 16, code).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let offered = |p: &ReduceMmaProblem| {
        let all = ReduceMmaFamily::candidates(p, Tier::Fast, false);
        let n = all.iter().filter(|v| v.paired_windows).count();
        (n, all.len())
    };
    let (n, all) = offered(&problem(4096, 2, Code::OneMad));
    assert!(n > 0 && 2 * n == all, "{n} of {all}");
    assert_eq!(offered(&problem(4096, 3, Code::OneMad)).0, 0);
    assert_eq!(offered(&problem(4096, 2, Code::ThreeInst)).0, 0);
    assert_eq!(offered(&problem(256, 2, Code::OneMad)).0, 0);
    let p3 = problem(256, 2, Code::ThreeInst);
    let e = ReduceMmaFamily::kernel(&p3, paired)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("paired_windows = true") && e.contains("one k-slot"),
        "{e}"
    );

    // gate_up_mma: the same bits with pairs (here only the up projection's k 4 pairs);
    // offered where either projection pairs.
    use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaProblem};
    let geometry = |rows, k| Geometry::new(rows, 768, 256, k, 12, Code::OneMad).unwrap();
    let gate = check::random_matrix(geometry(40, 3), 91);
    let up = check::random_matrix(geometry(40, 4), 92);
    let x = outliers(DType::Bf16, 3, 768, &mut rng);
    let plain = MmaVariant::unsplit(1, 2, 16, MmaXStage::Shared);
    let paired = MmaVariant {
        paired_windows: true,
        ..plain
    };
    let p = assert_gate_up_twins_agree(gate, up, x, plain, paired, "paired windows");
    let offered = |kg, ku| {
        let q = GateUpMmaProblem {
            gate: Geometry::new(4096, 5120, 256, kg, 16, Code::OneMad).unwrap(),
            up: Geometry::new(4096, 5120, 256, ku, 16, Code::OneMad).unwrap(),
            ..p
        };
        GateUpMmaFamily::candidates(&q, Tier::Fast, false)
            .iter()
            .filter(|v| v.paired_windows)
            .count()
    };
    assert!(offered(2, 2) > 0 && offered(4, 4) > 0);
    assert!(offered(3, 4) > 0, "the k 4 projection pairs");
    assert_eq!(offered(3, 3), 0, "no projection pairs");
}

#[test]
fn reduce_mma_bf16_operands_are_checked() {
    use trellis::families::reduce_mma::ReduceMmaProblem;
    use trellis::kernel::KernelSpec as _;
    let p = |code, act| ReduceMmaProblem {
        geometry: Geometry::new(64, 512, 256, 2, 12, code).unwrap(),
        scale: ScaleDType::F16,
        act,
        m: 1,
    };
    let v = |x_stage| MmaVariant {
        row_tiles: 1,
        col_split: 2,
        m_tile: 16,
        x_stage,
        k_split: 1,
        max_registers: 0,
        operands: MmaOperands::Bf16,
        paired_windows: false,
        x_f16: false,
        batch_stage: false,
        opt_in_shared: false,
        early_words: false,
        fused_x: false,
    };
    ReduceMmaFamily::kernel(&p(Code::OneMad, DType::Bf16), v(MmaXStage::Global))
        .validate()
        .unwrap();
    for (problem, x_stage, why) in [
        (
            p(Code::OneMad, DType::F16),
            MmaXStage::Global,
            "takes bf16 activations",
        ),
        (
            p(Code::ThreeInst, DType::Bf16),
            MmaXStage::Global,
            "one k-slot per weight",
        ),
        (
            p(Code::OneMad, DType::Bf16),
            MmaXStage::Shared,
            "x_stage = global",
        ),
    ] {
        let e = ReduceMmaFamily::kernel(&problem, v(x_stage))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("operands = bf16") && e.contains(why), "{e}");
    }
}

/// SPEC 7: activations of magnitude up to 2^15 and sums past 2^20 stay finite in bf16 and
/// f32 (every x at +-2^15, not one column in 37, and row scales of 1: the real sums reach
/// about 2^24), for the fast tier's every operand path (1mad's f16 and bf16 operands,
/// 3inst/mcg's f16 halves, x staged or not), `reduce` and `gate_up` (whose product of two
/// such sums reaches about 2^48), through the facade's default variants and forced ones.
#[test]
fn fast_tier_stays_finite_with_every_activation_at_2_15() {
    use trellis::numerics::Tail;
    use trellis::ops;
    let b = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(0x2f15);
    for (i, code) in [Code::OneMad, Code::ThreeInst, Code::Mcg]
        .into_iter()
        .enumerate()
    {
        let g = Geometry::new(16, 1024, 256, 2 + i as u32, 12, code).unwrap();
        let mut w = check::random_matrix(g, 40 + i as u64);
        w.scales.iter_mut().for_each(|s| *s = 1.0);
        let mut u = check::random_matrix(g, 50 + i as u64);
        u.scales.iter_mut().for_each(|s| *s = 1.0);
        for act in [DType::Bf16, DType::F32] {
            let data = (0..3 * 1024)
                .map(|_| {
                    if rng.random_bool(0.5) {
                        32768.0
                    } else {
                        -32768.0
                    }
                })
                .collect();
            let x = Activations::from_f32(act, 3, 1024, data).unwrap();
            let real = RealSums::of(&w, &x).unwrap();
            assert!(
                real.y.iter().any(|y| y.abs() > 2f64.powi(20)),
                "{code} {act}: the sums do not reach 2^20"
            );
            let y = ops::matvec(&b, &w, &x, Tier::Fast).unwrap();
            check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{code} {act}: {e}"));
            // Forced: x staged, and (1mad, bf16 x) bf16 operands.
            let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
            let host = trellis::families::reduce_mma::ReduceMmaHost {
                w: w.clone(),
                x: x.clone(),
            };
            let dev = ReduceMmaFamily::upload(&b, &p, &host).unwrap();
            let mut forced = vec![MmaVariant::unsplit(1, 4, 16, MmaXStage::Shared)];
            if code == Code::OneMad && act == DType::Bf16 {
                forced.push(MmaVariant {
                    operands: MmaOperands::Bf16,
                    paired_windows: false,
                    ..MmaVariant::unsplit(1, 4, 16, MmaXStage::Global)
                });
            }
            for v in forced {
                let y = &family::run::<ReduceMmaFamily, _>(&b, &p, v, &dev).unwrap()[0];
                check::fast_reduce(y, &real).unwrap_or_else(|e| panic!("{code} {act} {v}: {e}"));
            }
            let mid = ops::gate_up(&b, &w, &u, &x, Tail::Exact, Tier::Fast).unwrap();
            assert!(
                mid.data.iter().all(|v| v.is_finite()),
                "{code} {act}: gate_up"
            );
            check_fast_gate_up(&w, &u, &x, mid, &format!("{code} {act}"));
        }
    }
}

/// The space widened past the H200 winners' edges (`widen_edges`): 2 simdgroups per tile
/// at the tuned sizes up to M = 8, 8 splits of K where 16-row tiles are few or from M = 4
/// (16 too at M = 8); the
/// verify catalog's small problems keep their space. (The kernels of both shapes are
/// checked against SPEC 7 above: `col_split = 2` with up to 17 splits.)
#[test]
fn reduce_mma_space_widens_past_the_tuned_edges_at_the_tuned_sizes() {
    let count = |rows, m, f: fn(&MmaVariant) -> bool| {
        ReduceMmaFamily::candidates(&tuned_problem(rows, Code::OneMad, m), Tier::Fast, false)
            .iter()
            .filter(|v| f(v))
            .count()
    };
    let two_simdgroups: fn(&MmaVariant) -> bool = |v| v.row_tiles == 1 && v.col_split == 2;
    let eight_splits: fn(&MmaVariant) -> bool = |v| v.k_split == 8;
    // 5120 rows: 320 tiles, few; 17408 rows: 1088.
    assert!(count(5120, 1, two_simdgroups) > 0 && count(5120, 8, eight_splits) > 0);
    assert!(count(17408, 4, two_simdgroups) > 0);
    // Many tiles: 8 splits from M = 4, 16 too at M = 8, none below M = 4.
    let sixteen_splits: fn(&MmaVariant) -> bool = |v| v.k_split == 16;
    assert!(count(17408, 4, eight_splits) > 0 && count(17408, 8, sixteen_splits) > 0);
    assert_eq!(
        count(17408, 4, sixteen_splits),
        0,
        "many tiles, M 4: 8 splits only"
    );
    assert_eq!(
        count(17408, 2, eight_splits),
        0,
        "many tiles below M 4: no 8 splits"
    );
    assert_eq!(count(256, 1, two_simdgroups), 0, "below the tuned sizes");
    assert_eq!(count(256, 1, eight_splits), 0, "below the tuned sizes");
    // Each twin is its own candidate: no duplicates.
    let all = ReduceMmaFamily::candidates(&tuned_problem(5120, Code::OneMad, 2), Tier::Fast, false);
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len());
}

/// The host takes a power of two out of each sample of x and out of each lut table
/// (`reduce_mma::Prescaled`), so the f16 operands hold activations and table values of
/// any magnitude: samples far below f16's normal range (where they kept only an absolute
/// 2^-25 and missed SPEC 7's relative bound) and far above its 65504 (where they were
/// inf) both meet the bound, in `matvec` and `gate_up`, for every operand type and with
/// x staged or not. One sample per magnitude, so each sample takes its own power.
#[test]
fn fast_tier_meets_spec7_at_every_activation_and_table_magnitude() {
    use trellis::families::reduce_mma::{operand_exponent, ReduceMmaHost};
    use trellis::numerics::Tail;
    use trellis::ops;
    let b = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5ca1e);
    let powers = [-60, -30, -18, 0, 17, 40];
    for (i, code) in [Code::OneMad, Code::ThreeInst, Code::Lut]
        .into_iter()
        .enumerate()
    {
        let g = Geometry::new(16, 512, 256, 2 + i as u32, 12, code).unwrap();
        let mut w = check::random_matrix(g, 70 + i as u64);
        let mut u = check::random_matrix(g, 80 + i as u64);
        if let (Some(a), Some(c)) = (w.lut.as_mut(), u.lut.as_mut()) {
            // Tables past f16's range and below its normal range.
            a.iter_mut().for_each(|v| *v *= 1.0e6);
            c.iter_mut().for_each(|v| *v *= 1.0e-7);
            assert!(operand_exponent(a) > 0 && operand_exponent(c) < -20);
        }
        for act in [DType::Bf16, DType::F32] {
            let data = (0..powers.len() * 512)
                .map(|j| {
                    let v: f32 = rng.random_range(-2.0..2.0);
                    v * 2f32.powi(powers[j / 512])
                })
                .collect();
            let x = Activations::from_f32(act, powers.len(), 512, data).unwrap();
            let real = RealSums::of(&w, &x).unwrap();
            let y = ops::matvec(&b, &w, &x, Tier::Fast).unwrap();
            check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{code} {act}: {e}"));
            let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
            let host = ReduceMmaHost {
                w: w.clone(),
                x: x.clone(),
            };
            let dev = ReduceMmaFamily::upload(&b, &p, &host).unwrap();
            let mut forced = vec![
                MmaVariant::unsplit(1, 4, 16, MmaXStage::Shared),
                MmaVariant {
                    k_split: 2,
                    ..MmaVariant::unsplit(1, 1, 8, MmaXStage::Global)
                },
            ];
            if code != Code::ThreeInst && act == DType::Bf16 {
                forced.push(MmaVariant {
                    operands: MmaOperands::Bf16,
                    ..MmaVariant::unsplit(1, 4, 16, MmaXStage::Global)
                });
            }
            for v in forced {
                let y = &family::run::<ReduceMmaFamily, _>(&b, &p, v, &dev).unwrap()[0];
                check::fast_reduce(y, &real).unwrap_or_else(|e| panic!("{code} {act} {v}: {e}"));
            }
            let mid = ops::gate_up(&b, &w, &u, &x, Tail::Exact, Tier::Fast).unwrap();
            check_fast_gate_up(&w, &u, &x, mid, &format!("{code} {act}"));
        }
    }
}

/// The exponent leaves a set's largest magnitude in [2^13, 2^14) (exactly: from the bits,
/// also just below a power of two), and 0 for zeros; it stops at -126 (so both powers of
/// two are normal f32).
#[test]
fn operand_exponent_puts_the_largest_magnitude_below_2_14() {
    use trellis::families::reduce_mma::operand_exponent;
    assert_eq!(operand_exponent(&[0.0, -0.0]), 0);
    // Clamped at -126 (2^126 is the largest normal power of two); the largest f32 needs 114.
    assert_eq!(operand_exponent(&[1.0e-38]), -126);
    assert_eq!(operand_exponent(&[1.0e-44]), -126);
    assert_eq!(operand_exponent(&[f32::MAX]), 114);
    for v in [
        1.0e-25f32,
        3.0e-5,
        0.75,
        1.0,
        8191.9,
        8192.0,
        16383.999,
        0.999_999_94,
        16384.0,
        65504.0,
        3.0e20,
        2.5e30,
    ] {
        let scaled = (v * 2f32.powi(-operand_exponent(&[0.5 * v, -v]))) as f64;
        assert!((8192.0..16384.0).contains(&scaled), "{v}: {scaled}");
    }
}

/// The fast tier's fallback for sample `m` of `x` as `ops` documents it, derived from the
/// oracle: the reference's SPEC 5 sums (which the exact kernels match bit for bit) of `w`
/// with unit row scales over the sample at f32, each times its row's scale in f64. (The
/// fallback also takes a power of two out of x and the lut table; that is exact, and
/// left out here, where no value nears the ends of f32's range.)
fn fallback_sums(w: &QuantizedMatrix, x: &Activations, m: usize) -> Vec<f64> {
    let unit = QuantizedMatrix {
        scales: vec![1.0; w.geometry.rows],
        scale_dtype: ScaleDType::F32,
        ..w.clone()
    };
    let xm = Activations::from_f32(DType::F32, 1, x.cols, x.row(m).to_vec()).unwrap();
    let y = trellis::reference::reduce(&unit, &xm).unwrap();
    y.data
        .iter()
        .zip(&w.scales)
        .map(|(&v, &s)| v as f64 * s as f64)
        .collect()
}

/// Sample `m` of a fast `matvec` result is the fallback's: [`fallback_sums`] rounded to T
/// once, bit for bit.
fn assert_fallback_matvec(y: &Activations, w: &QuantizedMatrix, x: &Activations, m: usize) {
    for (r, (&got, want)) in y.row(m).iter().zip(fallback_sums(w, x, m)).enumerate() {
        let want = x.dtype.round_f64(want);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "y[{m}, {r}] = {got:e}, the fallback's {want:e}"
        );
    }
}

/// A sample whose values span more than 2^28 is beyond what f16 operands hold, even
/// prescaled, only where some row weights its large values at zero (the tiny ones then
/// carry the row, and f16 keeps them to an absolute 2^-25): the facade runs such a sample
/// on its fallback (the exact kernels at f32 with unit row scales, the scales applied in
/// f64), and the result meets SPEC 7. The same span where every row weights the large
/// value is held, and the fast result meets the bound. A lut table spanning more than
/// 2^28 sends every sample to the fallback. bf16 operands and f16 activations have no
/// such samples.
#[test]
fn samples_beyond_f16_operands_run_on_the_fallback() {
    use trellis::families::reduce_mma::beyond_f16_operands;
    use trellis::numerics::Tail;
    use trellis::ops;
    let b = CpuBackend::new().expect("cpu backend");
    let g = Geometry::new(24, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (check::random_matrix(g, 101), check::random_matrix(g, 102));
    let value = |r: usize, c: usize| g.code.value(w.state(r, c), None).unwrap();
    // A column some row weights at zero (1mad: byte sum 510), and one every row weights.
    let zero_col = (0..512)
        .find(|&c| (0..24).any(|r| value(r, c) == 0.0))
        .expect("a zero weight");
    let full_col = (0..512)
        .find(|&c| (0..24).all(|r| value(r, c) != 0.0))
        .expect("a column without zeros");
    // Sample 0 ordinary; samples 1 and 2: one value at 1, the rest 2^-31 of it.
    let mut rng = ChaCha8Rng::seed_from_u64(103);
    let mut data: Vec<f32> = (0..3 * 512).map(|_| rng.random_range(-2.0..2.0)).collect();
    for (m, col) in [(1, zero_col), (2, full_col)] {
        let sample = &mut data[m * 512..(m + 1) * 512];
        sample
            .iter_mut()
            .for_each(|v| *v = v.signum() * 2f32.powi(-31));
        sample[col] = 1.0;
    }
    let x = Activations::from_f32(DType::F32, 3, 512, data).unwrap();
    let f16_ops = MmaVariant::default();
    assert_eq!(beyond_f16_operands(&x, &[&w], &f16_ops).unwrap(), vec![1]);
    let bf16_ops = MmaVariant {
        operands: MmaOperands::Bf16,
        ..f16_ops
    };
    assert!(beyond_f16_operands(&x, &[&w], &bf16_ops)
        .unwrap()
        .is_empty());
    let xh = Activations::from_f32(DType::F16, 3, 512, x.data.clone()).unwrap();
    assert!(beyond_f16_operands(&xh, &[&w], &f16_ops)
        .unwrap()
        .is_empty());

    let fast = ops::matvec(&b, &w, &x, Tier::Fast).unwrap();
    check::fast_reduce(&fast, &RealSums::of(&w, &x).unwrap()).unwrap();
    // Sample 1 ran on the fallback (its bits are the fallback's), not the matrix units.
    assert_fallback_matvec(&fast, &w, &x, 1);
    // A resident matrix (its operand facts made once) holds the same samples, every call.
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    for _ in 0..2 {
        assert!(rw.matvec(&x, Tier::Fast).unwrap().bits_eq(&fast));
    }
    let both = beyond_f16_operands(&x, &[&w, &u], &f16_ops).unwrap();
    assert!(both.contains(&1), "{both:?}");
    let fast = ops::gate_up(&b, &w, &u, &x, Tail::Exact, Tier::Fast).unwrap();
    // The held samples' mid is the fallback's: silu(g) u of its sums in f64, rounded once.
    for &m in &both {
        let (g, up) = (fallback_sums(&w, &x, m), fallback_sums(&u, &x, m));
        for (r, &got) in fast.row(m).iter().enumerate() {
            let want = x
                .dtype
                .round_f64(trellis::reference::silu_f64(g[r]) * up[r]);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "mid[{m}, {r}] = {got:e}, the fallback's {want:e}"
            );
        }
    }
    for _ in 0..2 {
        let resident = rw.gate_up(&ru, &x, Tail::Exact, Tier::Fast).unwrap();
        assert!(resident.bits_eq(&fast));
    }
    // Every sample, those on the matrix units too, meets SPEC 7.
    check_fast_gate_up(&w, &u, &x, fast, "gate_up, samples beyond f16 operands");

    // A lut table spanning 2^30: every sample runs on the fallback (M 11: two exact
    // launches).
    let gl = Geometry::new(24, 512, 256, 2, 10, Code::Lut).unwrap();
    let mut wl = check::random_matrix(gl, 104);
    let t = wl.lut.as_mut().expect("code lut has its table");
    t[3] = t.iter().fold(0.0f32, |m, v| m.max(v.abs())) * 2f32.powi(-30);
    let x11 = Activations::from_f32(
        DType::Bf16,
        11,
        512,
        (0..11 * 512).map(|_| rng.random_range(-2.0..2.0)).collect(),
    )
    .unwrap();
    assert_eq!(
        beyond_f16_operands(&x11, &[&wl], &f16_ops).unwrap().len(),
        11
    );
    let x11h = Activations::from_f32(DType::F16, 11, 512, x11.data.clone()).unwrap();
    assert_eq!(
        beyond_f16_operands(&x11h, &[&wl], &f16_ops).unwrap().len(),
        11,
        "f16 x too"
    );
    // Magnitudes at the ends of f32's range: x past 2^116 is held (its power of two is
    // taken out whole) and meets the bound; x below 2^-113, a table below 2^-113, or row
    // scales of 2^110 (the epilogue's product would pass f32's range before the sample's
    // power of two brings it back) go to the fallback, and meet it there.
    let wf = {
        let mut wf = w.clone();
        wf.scale_dtype = ScaleDType::F32;
        wf
    };
    let at = |p: i32| {
        let data = (0..2 * 512)
            .map(|i| if i % 7 == 0 { 0.0 } else { 1.5 * 2f32.powi(p) })
            .collect();
        Activations::from_f32(DType::F32, 2, 512, data).unwrap()
    };
    for (w, p, beyond) in [(&wf, 118, false), (&wf, -118, true)] {
        let x = at(p);
        let none = beyond_f16_operands(&x, &[w], &f16_ops).unwrap().is_empty();
        assert_eq!(none, !beyond, "2^{p}");
        let y = ops::matvec(&b, w, &x, Tier::Fast).unwrap();
        check::fast_reduce(&y, &RealSums::of(w, &x).unwrap())
            .unwrap_or_else(|e| panic!("2^{p}: {e}"));
    }
    let mut big = wf.clone();
    big.scales.iter_mut().for_each(|s| *s = 2f32.powi(110));
    let x = at(-60);
    assert_eq!(
        beyond_f16_operands(&x, &[&big], &f16_ops).unwrap(),
        vec![0, 1]
    );
    let y = ops::matvec(&b, &big, &x, Tier::Fast).unwrap();
    check::fast_reduce(&y, &RealSums::of(&big, &x).unwrap()).unwrap();
    let mut faint = wl.clone();
    faint
        .lut
        .as_mut()
        .unwrap()
        .iter_mut()
        .for_each(|v| *v *= 2f32.powi(-124));
    assert_eq!(
        beyond_f16_operands(&x11, &[&faint], &f16_ops)
            .unwrap()
            .len(),
        11
    );

    // A hand-edited table of the wrong length is an error naming it, not a panic.
    let mut short = wl.clone();
    short.lut.as_mut().unwrap().pop();
    let e = beyond_f16_operands(&x11, &[&short], &f16_ops).unwrap_err();
    assert!(e.to_string().contains("lut"), "{e}");
    let fast = ops::matvec(&b, &wl, &x11, Tier::Fast).unwrap();
    check::fast_reduce(&fast, &RealSums::of(&wl, &x11).unwrap())
        .unwrap_or_else(|e| panic!("lut spanning 2^30, M 11: {e}"));
    for m in 0..11 {
        assert_fallback_matvec(&fast, &wl, &x11, m);
    }
}

/// Row scales of 2^-136 with bf16 x (f32 scales below 2^-60 send every sample to the
/// fallback): the exact tier rounds each weight to a bf16 subnormal (spacing 2^-133),
/// which SPEC 7's 2^-8 does not cover, and misses the bound; the fast tier's fallback
/// rounds no weight and meets it. Found by `tests/independent/spec_check.py`.
#[test]
fn fast_fallback_meets_spec7_where_exact_weights_are_subnormal() {
    use trellis::ops;
    let b = CpuBackend::new().expect("cpu backend");
    let g = Geometry::new(16, 2048, 256, 2, 12, Code::OneMad).unwrap();
    let mut w = check::random_matrix(g, 131);
    w.scale_dtype = ScaleDType::F32;
    for (r, s) in w.scales.iter_mut().enumerate() {
        *s = if r % 2 == 1 {
            2f32.powi(-136)
        } else {
            2f32.powi(-4)
        };
    }
    let x = check::random_activations(DType::Bf16, 2, 2048, 132);
    let real = RealSums::of(&w, &x).unwrap();
    let exact = ops::matvec(&b, &w, &x, Tier::Exact).unwrap();
    let e = check::fast_reduce(&exact, &real)
        .expect_err("the exact tier's subnormal weights should miss SPEC 7 here");
    // ... in a row of scale 2^-136 (e is "y[m, r] = ...").
    let row: usize = e
        .split_once(", ")
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(r, _)| r.parse().ok())
        .unwrap_or_else(|| panic!("no output named: {e}"));
    assert_eq!(row % 2, 1, "{e}");
    let fast = ops::matvec(&b, &w, &x, Tier::Fast).unwrap();
    check::fast_reduce(&fast, &real).unwrap();
    // The reference's fast tier (`trellis matvec --backend reference --tier fast`): SPEC
    // 7's own reference, rounded once.
    let by_reference = trellis::reference::reduce_fast(&w, &x).unwrap();
    check::fast_reduce(&by_reference, &real).unwrap();
    // Every sample ran on the fallback (scales below 2^-60), whose bits these are.
    for m in 0..2 {
        assert_fallback_matvec(&fast, &w, &x, m);
    }
    let u = check::random_matrix(
        Geometry::new(16, 2048, 256, 3, 12, Code::OneMad).unwrap(),
        133,
    );
    let fast = ops::gate_up(&b, &w, &u, &x, trellis::numerics::Tail::Exact, Tier::Fast).unwrap();
    check_fast_gate_up(&w, &u, &x, fast, "gate_up, subnormal exact weights");
    let by_reference = trellis::reference::gate_up_fast(&w, &u, &x).unwrap();
    check_fast_gate_up(&w, &u, &x, by_reference, "reference::gate_up_fast");
}

/// x rounded to f16 by the host (`MmaVariant::x_f16`) is what the kernels' own conversion
/// makes of it: the results are bit for bit those of the converting variant, for bf16 and
/// f32 activations (tiny and outlying values included), x read from device memory,
/// staged, or staged duplicated, on the CPU and the Metal simulator, in `reduce_mma` and
/// `gate_up_mma`; the CUDA unit takes `const f16_t* x`. Rejected where it cannot apply.
#[test]
fn host_f16_x_keeps_the_bits() {
    use trellis::backend::metal_sim::MetalSimBackend;
    use trellis::kernel::{Dialect, KernelSpec as _};
    let cpu = CpuBackend::new().expect("cpu backend");
    let sim = MetalSimBackend::new().expect("metal-sim backend");
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    for (act, code, m, x_stage) in [
        (DType::Bf16, Code::OneMad, 1, MmaXStage::Global),
        (DType::Bf16, Code::OneMad, 16, MmaXStage::Shared),
        (DType::F32, Code::Mul1, 5, MmaXStage::Global),
        (DType::Bf16, Code::ThreeInst, 11, MmaXStage::SharedDup),
        (DType::F32, Code::Mcg, 3, MmaXStage::Shared),
        (DType::F32, Code::Lut, 16, MmaXStage::Global),
    ] {
        let g = Geometry::new(40, 512, 256, 3, 12, code).unwrap();
        let w = check::random_matrix(g, rng.random());
        let mut x = outliers(act, m, 512, &mut rng);
        // Values that f16 keeps only as subnormals or flushes, after the prescaling.
        for (i, v) in x.data.iter_mut().enumerate().filter(|(i, _)| i % 53 == 7) {
            *v = act.round(*v * 2f32.powi(-20 - (i % 9) as i32));
        }
        let base = MmaVariant::unsplit(1, 2, 16, x_stage);
        let f16x = MmaVariant {
            x_f16: true,
            ..base
        };
        let p = assert_twins_agree((&cpu, &sim), w, x, base, f16x, &format!("{g} {act} M={m}"));
        let unit = |v| ReduceMmaFamily::kernel(&p, v).unit(Dialect::Cuda).unwrap();
        assert!(unit(f16x).contains("const f16_t* __restrict__ x"), "{g}");
        assert!(!unit(base).contains("const f16_t* __restrict__ x"), "{g}");
    }
    assert_eq!(
        MmaVariant {
            x_f16: true,
            ..MmaVariant::unsplit(1, 8, 16, MmaXStage::Shared)
        }
        .to_string(),
        "mma rt=1 cs=8 mt=16 x=shared xf16"
    );

    // At the tuned sizes every f16-operand candidate of bf16 (and f32) activations takes
    // x from the host; not for f16 activations, nor at the verify catalog's sizes.
    use trellis::families::reduce_mma::ReduceMmaProblem;
    let space = |rows, act| {
        let p = ReduceMmaProblem {
            geometry: Geometry::new(rows, 5120, 256, 2, 12, Code::OneMad).unwrap(),
            scale: ScaleDType::F16,
            act,
            m: 4,
        };
        let all = ReduceMmaFamily::candidates(&p, Tier::Fast, false);
        let host = all.iter().filter(|v| v.x_f16).count();
        let f16_ops = all.iter().filter(|v| v.operands.is_f16()).count();
        (host, f16_ops, all.len())
    };
    let (host, f16_ops, all) = space(4096, DType::Bf16);
    assert!(
        host > 0 && host == f16_ops && f16_ops < all,
        "{host} {f16_ops} {all}"
    );
    let (host, f16_ops, _) = space(4096, DType::F32);
    assert!(host > 0 && host == f16_ops);
    assert_eq!(space(4096, DType::F16).0, 0);
    assert_eq!(space(256, DType::Bf16).0, 0);

    // Where it cannot apply: f16 activations (f16 already) and bf16 operands (x as it is).
    let g = Geometry::new(40, 768, 256, 2, 12, Code::OneMad).unwrap();
    let w = check::random_matrix(g, 5);
    for (act, operands, why) in [
        (DType::F16, MmaOperands::F16, "f16 ones are f16 already"),
        (
            DType::Bf16,
            MmaOperands::Bf16,
            "bf16 operands take x as it is",
        ),
    ] {
        let x = outliers(act, 2, 768, &mut rng);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let v = MmaVariant {
            x_f16: true,
            operands,
            ..MmaVariant::default()
        };
        let e = ReduceMmaFamily::kernel(&p, v)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("x_f16 = true") && e.contains(why), "{e}");
    }

    // gate_up_mma takes the same x.
    use trellis::families::gate_up_mma::GateUpMmaFamily;
    let geometry = |k, code| Geometry::new(40, 768, 256, k, 12, code).unwrap();
    let gate = check::random_matrix(geometry(3, Code::OneMad), 93);
    let up = check::random_matrix(geometry(2, Code::ThreeInst), 94);
    let x = outliers(DType::Bf16, 9, 768, &mut rng);
    let plain = MmaVariant::unsplit(1, 2, 16, MmaXStage::Global);
    let f16x = MmaVariant {
        x_f16: true,
        ..plain
    };
    let p = assert_gate_up_twins_agree(gate, up, x, plain, f16x, "f16 x");
    // ... and its tuned sizes offer it the same way.
    let q = trellis::families::gate_up_mma::GateUpMmaProblem {
        gate: Geometry::new(4096, 5120, 256, 3, 12, Code::OneMad).unwrap(),
        up: Geometry::new(4096, 5120, 256, 4, 12, Code::OneMad).unwrap(),
        ..p
    };
    let all = GateUpMmaFamily::candidates(&q, Tier::Fast, false);
    let f16_ops: Vec<_> = all.iter().filter(|v| v.operands.is_f16()).collect();
    assert!(!f16_ops.is_empty() && f16_ops.iter().all(|v| v.x_f16));
    assert!(GateUpMmaFamily::candidates(&p, Tier::Fast, false)
        .iter()
        .all(|v| !v.x_f16));
}

/// Batched staging ([`MmaVariant::batch_stage`]) stages the same x in a compile-time count
/// of chunks per thread: the results are bit for bit those of the plain staging, plain and
/// duplicated, split evenly, unevenly (the last split short) or not, with chunks that fill
/// the last round or not, on the CPU and the Metal simulator. The tuned sizes offer it as
/// a twin of every staged candidate from M = 4 up; it needs staged x.
#[test]
fn batched_stage_keeps_the_bits() {
    use trellis::backend::metal_sim::MetalSimBackend;
    let cpu = CpuBackend::new().expect("cpu backend");
    let sim = MetalSimBackend::new().expect("metal-sim backend");
    let mut rng = ChaCha8Rng::seed_from_u64(79);
    // (code, M, columns, stage, row tiles, col split, k split)
    for case @ (_, m, ..) in [
        (Code::OneMad, 16, 1280, MmaXStage::Shared, 2, 1, 2),
        (Code::OneMad, 5, 1536, MmaXStage::Shared, 1, 2, 4),
        (Code::ThreeInst, 16, 256, MmaXStage::SharedDup, 2, 2, 1),
        (Code::Mcg, 11, 1280, MmaXStage::SharedDup, 1, 1, 3),
    ] {
        let (g, w, x, plain) = split_case(&mut rng, case);
        let batched = MmaVariant {
            batch_stage: true,
            opt_in_shared: false,
            ..plain
        };
        assert_twins_agree((&cpu, &sim), w, x, plain, batched, &format!("{g} M={m}"));
    }
    assert_eq!(
        MmaVariant {
            batch_stage: true,
            opt_in_shared: false,
            k_split: 8,
            ..MmaVariant::unsplit(8, 1, 16, MmaXStage::Shared)
        }
        .to_string(),
        "mma rt=8 cs=1 mt=16 x=shared ks=8 bs"
    );

    // Offered at the tuned sizes from M = 4 up, as a twin of every staged candidate.
    let space = |rows, m| {
        let all =
            ReduceMmaFamily::candidates(&tuned_problem(rows, Code::OneMad, m), Tier::Fast, false);
        let batched = all.iter().filter(|v| v.batch_stage).count();
        let staged = all
            .iter()
            .filter(|v| v.x_stage.is_shared() && !v.batch_stage)
            .count();
        (batched, staged)
    };
    for m in [4, 8, 16] {
        let (batched, staged) = space(4096, m);
        assert!(
            batched > 0 && batched == staged,
            "M={m}: {batched} {staged}"
        );
    }
    assert_eq!(space(4096, 2).0, 0);
    assert_eq!(space(256, 16).0, 0);

    // It needs staged x.
    let v = MmaVariant {
        batch_stage: true,
        opt_in_shared: false,
        ..MmaVariant::default()
    };
    let e = refusal(v, 6, &mut rng);
    assert!(
        e.contains("batch_stage = true") && e.contains("x_stage = shared"),
        "{e}"
    );
}

/// The first code words loaded before the staging ([`MmaVariant::early_words`]): the
/// same bits as the plain order, plain and duplicated x, split or not, batched or not,
/// tiles whole or not, on the CPU and the Metal simulator, and in `gate_up_mma`. The tuned sizes offer it at
/// M = 16 only, as a twin of every staged candidate (and stage x there only when split);
/// it needs staged x.
#[test]
fn early_words_keep_the_bits() {
    use trellis::backend::metal_sim::MetalSimBackend;
    let cpu = CpuBackend::new().expect("cpu backend");
    let sim = MetalSimBackend::new().expect("metal-sim backend");
    let mut rng = ChaCha8Rng::seed_from_u64(97);
    // (code, M, columns, stage, row tiles, col split, k split)
    for (i, case @ (_, m, ..)) in [
        (Code::OneMad, 16, 1280, MmaXStage::Shared, 2, 1, 2),
        (Code::OneMad, 3, 768, MmaXStage::Shared, 1, 2, 1),
        (Code::ThreeInst, 16, 256, MmaXStage::SharedDup, 2, 2, 1),
        (Code::Mcg, 11, 1280, MmaXStage::SharedDup, 1, 1, 3),
    ]
    .into_iter()
    .enumerate()
    {
        let (g, w, x, plain) = split_case(&mut rng, case);
        let plain = MmaVariant {
            batch_stage: i % 2 == 1,
            ..plain
        };
        let early = MmaVariant {
            early_words: true,
            fused_x: false,
            ..plain
        };
        assert_twins_agree((&cpu, &sim), w, x, plain, early, &format!("{g} M={m}"));
    }
    // Whole tiles (row g + 8's words a constant offset from row g's) and a short last tile.
    for rows in [32, 48, 40] {
        let g = Geometry::new(rows, 768, 256, 3, 12, Code::OneMad).unwrap();
        let w = check::random_matrix(g, rng.random());
        let x = outliers(DType::Bf16, 16, 768, &mut rng);
        let plain = MmaVariant {
            k_split: 2,
            ..MmaVariant::unsplit(2, 2, 16, MmaXStage::Shared)
        };
        let early = MmaVariant {
            early_words: true,
            fused_x: false,
            ..plain
        };
        assert_twins_agree((&cpu, &sim), w, x, plain, early, &format!("{g}"));
    }
    // gate_up_mma takes it too (not offered there: its tuned M = 16 shapes stage no x):
    // both projections' first words before the staging, mixed k, the same bits.
    let geometry = |k, code| Geometry::new(48, 768, 256, k, 12, code).unwrap();
    let gate = check::random_matrix(geometry(3, Code::ThreeInst), 93);
    let up = check::random_matrix(geometry(4, Code::Mcg), 94);
    let x = outliers(DType::Bf16, 9, 768, &mut rng);
    let plain = MmaVariant::unsplit(2, 2, 16, MmaXStage::SharedDup);
    let early = MmaVariant {
        early_words: true,
        fused_x: false,
        ..plain
    };
    assert_gate_up_twins_agree(gate, up, x, plain, early, "early words");

    assert_eq!(
        MmaVariant {
            early_words: true,
            fused_x: false,
            k_split: 8,
            ..MmaVariant::unsplit(8, 1, 16, MmaXStage::Shared)
        }
        .to_string(),
        "mma rt=8 cs=1 mt=16 x=shared ks=8 ew"
    );

    // Offered at the tuned sizes as a twin of every staged candidate; at M = 16 only split
    // candidates stage x.
    for code in [Code::OneMad, Code::ThreeInst] {
        let all = ReduceMmaFamily::candidates(&tuned_problem(4096, code, 16), Tier::Fast, false);
        let early = all.iter().filter(|v| v.early_words).count();
        let staged = all
            .iter()
            .filter(|v| v.x_stage.is_shared() && !v.early_words)
            .count();
        assert!(early > 0 && early == staged, "{code}: {early} {staged}");
        assert!(all.iter().all(|v| !v.x_stage.is_shared() || v.k_split > 1));
        assert!(all.iter().any(|v| !v.x_stage.is_shared() && v.k_split == 1));
    }
    for m in [1, 4, 8] {
        let all =
            ReduceMmaFamily::candidates(&tuned_problem(4096, Code::OneMad, m), Tier::Fast, false);
        let early = all.iter().filter(|v| v.early_words).count();
        let staged = all
            .iter()
            .filter(|v| v.x_stage.is_shared() && !v.early_words)
            .count();
        assert!(early > 0 && early == staged, "M={m}: {early} {staged}");
    }
    let verify =
        ReduceMmaFamily::candidates(&tuned_problem(1024, Code::OneMad, 4), Tier::Fast, false);
    assert!(verify.iter().all(|v| !v.early_words));

    // It needs staged x.
    let v = MmaVariant {
        early_words: true,
        fused_x: false,
        ..MmaVariant::default()
    };
    let e = refusal(v, 7, &mut rng);
    assert!(
        e.contains("early_words = true") && e.contains("x_stage = shared"),
        "{e}"
    );
}

/// The structures that never came close at M <= 8 are not offered at the tuned sizes
/// (`space::far`), and what stays still covers every launch shape the winners use.
#[test]
fn far_structures_are_not_offered() {
    for m in [1, 2, 4, 8] {
        for code in [Code::OneMad, Code::ThreeInst] {
            let all = ReduceMmaFamily::candidates(&tuned_problem(4096, code, m), Tier::Fast, false);
            let m4_8 = m >= 4;
            for v in &all {
                let unsplit_tile = v.row_tiles == 1 && v.k_split == 1;
                assert!(!(unsplit_tile && v.col_split == 1), "M={m} {v}");
                assert!(
                    !(unsplit_tile && v.col_split == 2 && (!m4_8 || v.x_stage.is_shared())),
                    "M={m} {v}"
                );
                assert!(
                    !(m4_8 && v.k_split > 1 && v.col_split == 1 && v.x_stage.is_shared()),
                    "M={m} {v}"
                );
                assert!(
                    !(m4_8 && v.k_split > 1 && v.col_split == 8 && v.x_stage.is_dup()),
                    "M={m} {v}"
                );
            }
            // Kept: each column split the winners take, staged and from device memory, split
            // and not.
            for cs in [4, 8] {
                for staged in [false, true] {
                    assert!(
                        all.iter().any(|v| v.col_split == cs
                            && v.x_stage.is_shared() == staged
                            && v.k_split == 1),
                        "M={m} cs={cs} staged={staged}"
                    );
                }
                assert!(
                    all.iter().any(|v| v.col_split == cs && v.k_split > 1),
                    "M={m} cs={cs}"
                );
            }
            assert_eq!(
                all.iter()
                    .any(|v| v.row_tiles == 1 && v.k_split == 1 && v.col_split == 2),
                m4_8,
                "M={m}"
            );
        }
    }
}

/// `gate_up_mma`'s far launch shapes are not offered at the tuned sizes (its `far`), and
/// the shapes its winners take stay: one tile of 4 or 8 simdgroups, staged and from device
/// memory, two tiles of 4, 2 simdgroups from M = 4 and 1 at M = 16. A winner next to a
/// shape left out as far is at no edge the tuner would ask to widen.
#[test]
fn gate_up_far_structures_are_not_offered() {
    use trellis::families::gate_up_mma::{GateUpMmaFamily, GateUpMmaProblem};
    for m in [1, 2, 4, 8, 16] {
        for (kg, ku) in [(3, 3), (3, 4)] {
            let g = |k| Geometry::new(17408, 5120, 256, k, 12, Code::OneMad).unwrap();
            let p = GateUpMmaProblem {
                gate: g(kg),
                up: g(ku),
                gate_scale: ScaleDType::F16,
                up_scale: ScaleDType::F16,
                act: DType::Bf16,
                m,
                tail: trellis::numerics::Tail::Exact,
            };
            let all = GateUpMmaFamily::candidates(&p, Tier::Fast, false);
            let what = format!("M={m} k {kg}/{ku}");
            for v in &all {
                assert!(!(v.row_tiles == 2 && v.col_split == 8), "{what} {v}");
                assert!(!(m > 8 && v.col_split == 16), "{what} {v}");
                assert!(!(m <= 2 && v.col_split <= 2), "{what} {v}");
                assert!(!(m <= 8 && v.col_split == 1), "{what} {v}");
            }
            let has = |rt, cs, staged| {
                all.iter().any(|v| {
                    v.row_tiles == rt && v.col_split == cs && v.x_stage.is_shared() == staged
                })
            };
            for staged in [false, true] {
                assert!(
                    has(1, 4, staged) && has(1, 8, staged),
                    "{what} staged={staged}"
                );
            }
            assert!(has(2, 4, false), "{what}");
            assert_eq!(has(1, 2, false), m >= 4, "{what}");
            assert_eq!(has(1, 1, false), m > 8, "{what}");
            // The smallest column split offered, where half as many simdgroups would run:
            // named as an edge only where those were not measured far (M 4: 1 never was).
            let lo = all.iter().map(|v| v.col_split).min().unwrap();
            let w = *all
                .iter()
                .find(|v| v.row_tiles == 1 && v.col_split == lo)
                .unwrap();
            let valid = |v: &MmaVariant| {
                GateUpMmaFamily::kernel(&p, *v).validate().is_ok()
                    && !GateUpMmaFamily::measured_far(&p, v)
            };
            let edges = trellis::tune::harness::at_bound(&w, &all, valid);
            assert_eq!(
                edges.iter().any(|e| e.starts_with("col_split")),
                m == 4,
                "{what} {edges:?}"
            );
            let unpruned = trellis::tune::harness::at_bound(&w, &all, |v: &MmaVariant| {
                GateUpMmaFamily::kernel(&p, *v).validate().is_ok()
            });
            assert_eq!(
                unpruned.iter().any(|e| e.starts_with("col_split")),
                m <= 8,
                "{what} {unpruned:?}"
            );
        }
    }
}

/// x staged past 48 KB ([`MmaVariant::opt_in_shared`]): on the CPU the same bits as the
/// same launch shape reading x from device memory (the staged values are the fragments'
/// values, the mma order the same), plain and duplicated, split or not, and within SPEC
/// 7. The Metal simulator refuses it (32 KB); a variant that fits 48 KB, or stages no x,
/// may not opt in; the M = 16 tuned sizes opt in exactly where a candidate needs it.
#[test]
fn opt_in_shared_keeps_the_bits() {
    use trellis::backend::metal_sim::MetalSimBackend;
    use trellis::families::reduce_mma::ReduceMmaProblem;
    use trellis::kernel::KernelSpec as _;
    let cpu = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(83);
    // (code, M, columns, stage, row tiles, col split, k split)
    for case @ (_, m, _, x_stage, ..) in [
        (Code::ThreeInst, 16, 1024, MmaXStage::SharedDup, 1, 2, 1),
        (Code::OneMad, 16, 1792, MmaXStage::Shared, 2, 1, 1),
        (Code::Mcg, 11, 4096, MmaXStage::SharedDup, 1, 1, 3),
    ] {
        let (g, w, x, staged) = split_case(&mut rng, case);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let global = MmaVariant {
            x_stage: MmaXStage::Global,
            ..staged
        };
        let staged = MmaVariant {
            opt_in_shared: true,
            ..staged
        };
        assert!(x_stage.is_shared());
        let k = ReduceMmaFamily::kernel(&p, staged);
        k.validate().unwrap_or_else(|e| panic!("{g} M={m}: {e}"));
        assert!(k.shared_bytes() > 48 * 1024 && k.dynamic_shared_bytes() > 40 * 1024);
        let plain = ReduceMmaFamily::kernel(
            &p,
            MmaVariant {
                opt_in_shared: false,
                ..staged
            },
        );
        let e = plain.validate().unwrap_err().to_string();
        assert!(e.contains("threadgroup memory"), "{e}");

        let real = RealSums::of(&w, &x).unwrap();
        let host = trellis::families::reduce_mma::ReduceMmaHost { w, x };
        let (want, got) = run_twins(&cpu, &p, &host, global, staged);
        assert!(
            got[0].bits_eq(&want[0]),
            "{g} M={m}: {staged} differs from {global}"
        );
        check::fast_reduce(&got[0], &real).unwrap_or_else(|e| panic!("{g} M={m}: {e}"));

        let sim = MetalSimBackend::new().expect("metal-sim backend");
        let d = ReduceMmaFamily::upload(&sim, &p, &host).unwrap();
        let e = family::run::<ReduceMmaFamily, _>(&sim, &p, staged, &d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("threadgroup memory"), "{e}");
    }

    // Only past 48 KB, and only for staged x.
    for x_stage in [MmaXStage::Global, MmaXStage::Shared] {
        let v = MmaVariant {
            opt_in_shared: true,
            ..MmaVariant::unsplit(1, 8, 16, x_stage)
        };
        let e = refusal(v, 7, &mut rng);
        assert!(e.contains("opt_in_shared = true"), "{e}");
    }

    // The tuned sizes at M = 16: every staged candidate past 48 KB opts in, no other.
    let p = tuned_problem(17408, Code::ThreeInst, 16);
    let all = ReduceMmaFamily::candidates(&p, Tier::Fast, false);
    let opted: Vec<_> = all.iter().filter(|v| v.opt_in_shared).collect();
    assert!(opted
        .iter()
        .any(|v| v.k_split == 8 && v.row_tiles == 8 && v.x_stage.is_dup()));
    for v in &all {
        let big = ReduceMmaFamily::kernel(&p, *v).shared_bytes() > 48 * 1024;
        assert_eq!(v.opt_in_shared, v.x_stage.is_shared() && big, "{v}");
    }
    assert!(
        ReduceMmaFamily::candidates(&ReduceMmaProblem { m: 8, ..p }, Tier::Fast, false)
            .iter()
            .all(|v| !v.opt_in_shared)
    );
    assert_eq!(
        opted[0].to_string().split(' ').next_back(),
        Some("optin"),
        "{}",
        opted[0]
    );
}

/// SPEC 7's "f16 activations: up to their own range": f16 samples whose every 97th value
/// is +-65504 (the rest small), against weights scaled by 2^-4 so single products stay
/// in f16's range and the sums land on both sides of its edge. In range the results must
/// be finite and within the bound; beyond it, infinity of the real sum's sign.
#[test]
fn fast_tier_takes_f16_activations_up_to_their_range() {
    use trellis::numerics::Tail;
    use trellis::ops;
    let b = CpuBackend::new().expect("cpu backend");
    let mut rng = ChaCha8Rng::seed_from_u64(0xf16);
    for (i, code) in [Code::OneMad, Code::ThreeInst, Code::Mcg]
        .into_iter()
        .enumerate()
    {
        let g = Geometry::new(16, 1024, 256, 2 + i as u32, 12, code).unwrap();
        let scaled = |seed| {
            let mut w = check::random_matrix(g, seed);
            w.scales.iter_mut().for_each(|s| *s = 0.0625);
            w
        };
        let (w, u) = (scaled(60 + i as u64), scaled(70 + i as u64));
        let data = (0..3 * 1024)
            .map(|c| match (c % 97 == 0, rng.random_bool(0.5)) {
                (true, up) => {
                    if up {
                        65504.0
                    } else {
                        -65504.0
                    }
                }
                (false, _) => rng.random_range(-0.5..0.5),
            })
            .collect();
        let x = Activations::from_f32(DType::F16, 3, 1024, data).unwrap();
        let real = RealSums::of(&w, &x).unwrap();
        let edge = check::overflow_threshold(DType::F16);
        assert!(
            real.y.iter().any(|y| y.abs() > 16384.0 && y.abs() < edge),
            "{code}: no sum near the top of f16's range"
        );
        let y = ops::matvec(&b, &w, &x, Tier::Fast).unwrap();
        check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{code}: {e}"));
        let mid = ops::gate_up(&b, &w, &u, &x, Tail::Exact, Tier::Fast).unwrap();
        check_fast_gate_up(&w, &u, &x, mid, &format!("{code} f16"));
    }
}

/// f16 sums at the edge of f16's range stay finite in the fast tier, on the CPU and the
/// Metal simulator (`common/f16_edge.rs`; the CUDA run is in `cuda_launch.rs`).
#[test]
fn fast_tier_holds_f16_sums_at_the_edge() {
    f16_edge::holds_f16_sums_at_the_edge(&CpuBackend::new().expect("cpu backend"));
    f16_edge::holds_f16_sums_at_the_edge(&MetalSimBackend::new().expect("metal-sim backend"));
    f16_edge::simt_fast_holds_f16_sums_at_the_edge(&CpuBackend::new().expect("cpu backend"));
    f16_edge::simt_fast_holds_f16_sums_at_the_edge(&MetalSimBackend::new().expect("sim"));
}

/// The prescale fused into the staging (`fused_x`), on the CPU and the Metal simulator:
/// the prescale pipeline's bits where a threadgroup's columns are the whole sample,
/// SPEC 7 with split-K (each split its own power), the flags per split and sample
/// (`common/fused.rs`). What it is not for is refused by name.
#[test]
fn fused_prescale_keeps_the_bits_and_raises_the_flags() {
    let cpu = CpuBackend::new().expect("cpu backend");
    let sim = MetalSimBackend::new().expect("metal-sim backend");
    let mut rng = ChaCha8Rng::seed_from_u64(83);
    // (code, M, columns, stage, row tiles, col split, k split)
    for case @ (_, m, cols, ..) in [
        (Code::OneMad, 1, 1280, MmaXStage::Shared, 2, 2, 1),
        (Code::OneMad, 3, 1536, MmaXStage::Shared, 1, 2, 1),
        (Code::OneMad, 2, 1280, MmaXStage::Shared, 1, 2, 3),
    ] {
        let (g, w, clean, plain) = split_case(&mut rng, case);
        // A value tiny against its sample in the last sample, at column 7 (split 0).
        let mut data = clean.data.clone();
        data[(m - 1) * cols + 7] = 1e-12;
        let x = Activations::from_f32(DType::Bf16, m, cols, data).unwrap();
        assert_eq!(fused::tiny_flag(&x, m - 1, (0, 128)), 1);
        let plain = MmaVariant {
            batch_stage: true,
            ..plain
        };
        fused::fused_matches(&cpu, &w, &x, plain, &format!("cpu {g} M={m}"));
        fused::fused_matches(&sim, &w, &x, plain, &format!("metal-sim {g} M={m}"));
        fused::facade_fused_matches(&cpu, &w, &clean, plain, &format!("cpu facade {g} M={m}"));
    }
    // Refused by name: what the fused staging is not for.
    let base = MmaVariant {
        batch_stage: true,
        fused_x: true,
        ..MmaVariant::unsplit(1, 2, 16, MmaXStage::Shared)
    };
    for (bad, why) in [
        (
            MmaVariant {
                batch_stage: false,
                ..base
            },
            "batch_stage",
        ),
        (
            MmaVariant {
                x_stage: MmaXStage::Global,
                batch_stage: false,
                ..base
            },
            "x_stage = shared",
        ),
        (
            MmaVariant {
                x_f16: true,
                ..base
            },
            "x_f16",
        ),
    ] {
        let e = refusal(bad, 3, &mut rng);
        assert!(e.contains("fused_x") && e.contains(why), "{bad}: {e}");
    }
}
