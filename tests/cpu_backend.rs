//! The CPU backend runs the generated kernels and matches the reference bit for bit.

#[path = "common/facade.rs"]
mod facade;
#[path = "common/flagged.rs"]
mod flagged;
#[path = "common/host_prescaled.rs"]
mod host_prescaled;

use trellis::backend::CpuBackend;
use trellis::families::simt::{MStrategy, Representation, Variant, XStage};
use trellis::kernel::{Backend, DeviceTensor, Dialect, Elem};
use trellis::numerics::{Tail, Tier};
use trellis::{ops, reference, Activations, Code, DType, Geometry, QuantizedMatrix, ScaleDType};

fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn random_matrix(g: Geometry, seed: u64) -> QuantizedMatrix {
    let mut next = xorshift(seed);
    let codes = (0..g.codes_shape().iter().product::<usize>())
        .map(|_| next() as u32)
        .collect();
    let scales = (0..g.rows)
        .map(|_| half::f16::from_f32(0.005 + (next() % 1000) as f32 * 3e-5).to_f32())
        .collect();
    let lut = (g.code == Code::Lut).then(|| {
        (0..g.states())
            .map(|_| ((next() % 2001) as f32 - 1000.0) / 400.0)
            .collect()
    });
    QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, lut).unwrap()
}

fn random_x(dtype: DType, m: usize, cols: usize, seed: u64) -> Activations {
    let mut next = xorshift(seed);
    Activations::from_f32(
        dtype,
        m,
        cols,
        (0..m * cols)
            .map(|_| ((next() % 4001) as f32 - 2000.0) / 700.0)
            .collect(),
    )
    .unwrap()
}

/// `reduce` of `w` and `x` with variant `v` on the CPU and the Metal simulator, each bit
/// for bit against the reference.
fn assert_reduce_bits_cpu_and_sim(w: &QuantizedMatrix, x: &Activations, v: Variant) {
    let cpu = CpuBackend::new().unwrap();
    let sim = trellis::backend::metal_sim::MetalSimBackend::new().unwrap();
    let want = reference::reduce(w, x).unwrap();
    let g = w.geometry;
    assert!(
        ops::matvec_with(&cpu, w, x, v).unwrap().bits_eq(&want),
        "cpu {g} {v}"
    );
    assert!(
        ops::matvec_with(&sim, w, x, v).unwrap().bits_eq(&want),
        "sim {g} {v}"
    );
}

/// `gate_up` of a k 3 1mad gate (scalar code words anyway) and a k 4 3inst up (vector
/// loads unless the variant says otherwise), M = 2, with variant `v` on the CPU, bit for
/// bit against the reference.
fn assert_mixed_gate_up_bits_cpu(rows: usize, cols: usize, seed: u64, v: Variant) {
    let gate = random_matrix(
        Geometry::new(rows, cols, 256, 3, 12, Code::OneMad).unwrap(),
        seed,
    );
    let up = random_matrix(
        Geometry::new(rows, cols, 256, 4, 12, Code::ThreeInst).unwrap(),
        seed + 1,
    );
    let x = random_x(DType::Bf16, 2, cols, seed + 2);
    let want = reference::gate_up(&gate, &up, &x).unwrap();
    let cpu = CpuBackend::new().unwrap();
    let got = ops::gate_up_with(&cpu, &gate, &up, &x, Tail::Exact, v).unwrap();
    assert!(got.bits_eq(&want), "cpu gate_up {v}");
}

#[test]
fn reduce_matches_reference_bit_for_bit() {
    let b = CpuBackend::new().unwrap();
    for (code, k, l, t, dtype, m, repr, ms) in [
        (
            Code::OneMad,
            3,
            12,
            256,
            DType::Bf16,
            1,
            Representation::Inline,
            MStrategy::SharedDecode,
        ),
        (
            Code::ThreeInst,
            2,
            16,
            128,
            DType::F16,
            3,
            Representation::GlobalTable,
            MStrategy::PerSample,
        ),
        (
            Code::Mcg,
            1,
            8,
            32,
            DType::F32,
            2,
            Representation::SharedTable,
            MStrategy::SharedDecode,
        ),
        (
            Code::Mul1,
            5,
            13,
            64,
            DType::Bf16,
            8,
            Representation::Inline,
            MStrategy::PerSample,
        ),
        (
            Code::Lut,
            8,
            12,
            256,
            DType::Bf16,
            4,
            Representation::Inline,
            MStrategy::SharedDecode,
        ),
    ] {
        let g = Geometry::new(37, 1024, t, k, l, code).unwrap();
        let w = random_matrix(g, 7);
        let x = random_x(dtype, m, g.cols, 9);
        let variant = Variant {
            repr,
            m_strategy: ms,
            rows_per_group: 4,
            x_stage: XStage::Global,
            tier: Tier::Exact,
            rows_per_simd: 1,
            max_registers: 0,
            scalar_words: false,
            prefetch_words: false,
            stream_words: false,
            interleaved_x: false,
        };
        let got = ops::matvec_with(&b, &w, &x, variant).unwrap();
        let want = reference::reduce(&w, &x).unwrap();
        assert!(got.bits_eq(&want), "{g} {dtype} m={m} {variant}");
    }
}

#[test]
fn gate_up_matches_reference_bit_for_bit() {
    let b = CpuBackend::new().unwrap();
    let gate = random_matrix(Geometry::new(21, 512, 128, 2, 12, Code::OneMad).unwrap(), 1);
    let up = random_matrix(
        Geometry::new(21, 512, 128, 4, 12, Code::ThreeInst).unwrap(),
        2,
    );
    for dtype in DType::ALL {
        let x = random_x(dtype, 3, 512, 3);
        let variant = Variant {
            x_stage: XStage::SharedAct,
            ..Variant::default()
        };
        let got = ops::gate_up_with(&b, &gate, &up, &x, Tail::Exact, variant).unwrap();
        let want = reference::gate_up(&gate, &up, &x).unwrap();
        assert!(got.bits_eq(&want), "{dtype}");
    }
}

#[test]
fn expand_matches_reference_dequantize() {
    let b = CpuBackend::new().unwrap();
    let w = random_matrix(Geometry::new(9, 512, 64, 3, 10, Code::Mul1).unwrap(), 5);
    let got = ops::expand(&b, &w, DType::Bf16, Variant::default()).unwrap();
    let want = reference::dequantize(&w, DType::Bf16).unwrap();
    assert_eq!(
        got.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

/// x loaded per run into registers, several rows per simdgroup (issue 10): bit for bit,
/// with row counts that leave the last simdgroup's row set partly outside the matrix (37),
/// or not (40), or fill no whole set (2, 4), k that makes the code words vector-aligned
/// (2, 4, 8) and not (3, 5), every dtype, one to eight simdgroups per group.
#[test]
fn registers_and_rows_per_simd_match_reference_bit_for_bit() {
    let b = CpuBackend::new().unwrap();
    let (sd, ps) = (MStrategy::SharedDecode, MStrategy::PerSample);
    #[rustfmt::skip]
    let cases = [
        // rows k  L   code              T    dtype        M  rps rpg  strategy
        (40,   3, 12, Code::OneMad,    256, DType::Bf16, 1, 4,  4,   sd),
        (37,   2, 12, Code::OneMad,    128, DType::Bf16, 4, 2,  8,   sd),
        (37,   4, 16, Code::ThreeInst, 64,  DType::F16,  3, 4,  2,   ps),
        (37,   5, 13, Code::Mul1,      160, DType::F32,  2, 1,  1,   sd),
        (40,   8, 12, Code::Lut,       256, DType::Bf16, 8, 2,  4,   sd),
        // 3 rows per simdgroup (`catalog::three_row_variants`): 40 and 37 rows leave the
        // last set short by 2 and 1.
        (40,   3, 12, Code::OneMad,    256, DType::Bf16, 2, 3,  4,   sd),
        (37,   4, 16, Code::ThreeInst, 64,  DType::F16,  1, 3,  1,   sd),
        (37,   2, 12, Code::Mcg,       128, DType::F32,  3, 3,  2,   sd),
        // Wide row sets (up to `MAX_ROWS_PER_SIMD`; the Metal simulator runs 16): 37 rows
        // are 3 sets of 11 and 4 rows, or 7 sets of 5 and 2.
        (37,   3, 12, Code::OneMad,    256, DType::Bf16, 1, 11, 1,   sd),
        (37,   2, 12, Code::OneMad,    128, DType::F32,  2, 5,  4,   sd),
        // Fewer rows than one set (reads clamped to the last row; a short last set of
        // more rows is moved back to end at the last row instead): 2 rows in a set of 3,
        // 4 in a set of 5.
        (2,    3, 12, Code::OneMad,    256, DType::Bf16, 1, 3,  1,   sd),
        (4,    2, 12, Code::OneMad,    128, DType::F32,  2, 5,  2,   sd),
    ];
    for (rows, k, l, code, t, dtype, m, rps, rpg, ms) in cases {
        let g = Geometry::new(rows, 1280, t, k, l, code).unwrap();
        let w = random_matrix(g, 17 + k as u64);
        let x = random_x(dtype, m, g.cols, 19);
        for repr in Representation::ALL {
            if repr == Representation::SharedTable && l > 13 {
                continue; // a 2^L table does not fit threadgroup memory
            }
            if rps > 4 && repr != Representation::Inline {
                continue; // wide sets are a shape of the inline decode (and slow to build)
            }
            let variant = Variant {
                repr,
                m_strategy: ms,
                rows_per_group: rpg,
                x_stage: XStage::Registers,
                tier: Tier::Exact,
                rows_per_simd: rps,
                max_registers: 0,
                scalar_words: false,
                prefetch_words: false,
                stream_words: false,
                interleaved_x: false,
            };
            let got = ops::matvec_with(&b, &w, &x, variant).unwrap();
            let want = reference::reduce(&w, &x).unwrap();
            assert!(got.bits_eq(&want), "{g} {dtype} m={m} {variant}");
        }
        if rps > 8 {
            continue; // `gate_up`'s wide sets: the 5-row case (a build of 11 x 2 rows is slow)
        }
        let up = random_matrix(
            Geometry::new(rows, 1280, t, 3, 12, Code::OneMad).unwrap(),
            5,
        );
        let variant = Variant {
            x_stage: XStage::Registers,
            rows_per_simd: rps,
            rows_per_group: rpg,
            m_strategy: ms,
            ..Variant::default()
        };
        let got = ops::gate_up_with(&b, &w, &up, &x, Tail::Exact, variant).unwrap();
        let want = reference::gate_up(&w, &up, &x).unwrap();
        assert!(got.bits_eq(&want), "gate_up {g} {dtype} m={m} {variant}");
    }
}

/// `rows_per_simd` outside 1..=`MAX_ROWS_PER_SIMD` is an error that names the field and
/// the value, before anything is rendered.
#[test]
fn rows_per_simd_out_of_range_is_an_error() {
    let b = CpuBackend::new().unwrap();
    let g = Geometry::new(40, 256, 256, 2, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 3);
    let x = random_x(DType::Bf16, 1, g.cols, 4);
    for rps in [0, trellis::families::simt::MAX_ROWS_PER_SIMD + 1] {
        let variant = Variant {
            x_stage: XStage::Registers,
            rows_per_simd: rps,
            ..Variant::default()
        };
        let e = ops::matvec_with(&b, &w, &x, variant)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rows_per_simd") && e.contains(&rps.to_string()),
            "{e}"
        );
    }
}

/// The register budget of the M = 8 candidates (`catalog::budget_variants`): offered from
/// 4096 rows only (the catalog's small matrices keep their space), bit for bit on the CPU
/// and the Metal simulator (which ignore it as such), and on CUDA a `__maxnreg__` on the
/// entry point; in every dialect, code words loaded one at a time keep a wrap test per
/// word under it (`decode::load_runs`; `gate_up` below has k 3). The kernel symbol of a
/// variant without a budget is what it was before the field existed, and the budget gives
/// another.
#[test]
fn register_budget_is_offered_at_m8_and_keeps_the_bits() {
    use trellis::backend::metal_sim::MetalSimBackend;
    use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::family::Family;
    use trellis::kernel::{Dialect, KernelSpec};
    let g = Geometry::new(4096, 256, 256, 2, 12, Code::OneMad).unwrap();
    let problem = |m, rows| ReduceProblem {
        geometry: Geometry::new(rows, 256, 256, 2, 12, Code::OneMad).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m,
    };
    let budgeted = |p: &ReduceProblem| -> Vec<Variant> {
        ReduceFamily::candidates(p, Tier::Exact, false)
            .into_iter()
            .filter(|v| v.max_registers > 0 && !v.scalar_words)
            .filter(|v| !v.prefetch_words && !v.stream_words)
            .collect()
    };
    // `budget_variants(.., &[4])`: groups of 2 and 4 simdgroups at 4 rows each.
    assert_eq!(budgeted(&problem(8, 4096)).len(), 2);
    assert!(budgeted(&problem(4, 4096)).is_empty());
    assert!(budgeted(&problem(8, 130)).is_empty());
    let variant = budgeted(&problem(8, 4096))[0];
    assert_eq!(
        variant.to_string(),
        "inline shared_decode rpg=2 x=registers rps=4 regs=168 exact"
    );

    let w = random_matrix(g, 31);
    let x = random_x(DType::Bf16, 8, 256, 32);
    let want = reference::reduce(&w, &x).unwrap();
    let got = ops::matvec_with(&CpuBackend::new().unwrap(), &w, &x, variant).unwrap();
    assert!(got.bits_eq(&want), "cpu {variant}");
    let got = ops::matvec_with(&MetalSimBackend::new().unwrap(), &w, &x, variant).unwrap();
    assert!(got.bits_eq(&want), "metal-sim {variant}");
    let up = random_matrix(
        Geometry::new(4096, 256, 256, 3, 12, Code::OneMad).unwrap(),
        33,
    );
    // `gate_up` holds two projections per row, so it also takes the budget at 2 rows per
    // simdgroup.
    let gate_up_problem = GateUpProblem {
        gate: problem(8, 4096).geometry,
        up: up.geometry,
        gate_scale: ScaleDType::F16,
        up_scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 8,
        tail: Tail::Exact,
    };
    let gate_up_budgeted: Vec<Variant> =
        GateUpFamily::candidates(&gate_up_problem, Tier::Exact, false)
            .into_iter()
            .filter(|v| v.max_registers > 0)
            .collect();
    assert_eq!(
        gate_up_budgeted
            .iter()
            .map(|v| v.rows_per_simd)
            .collect::<Vec<_>>(),
        [4, 4, 2, 2]
    );
    let mid = reference::gate_up(&w, &up, &x).unwrap();
    for v in [variant, gate_up_budgeted[2]] {
        let got =
            ops::gate_up_with(&CpuBackend::new().unwrap(), &w, &up, &x, Tail::Exact, v).unwrap();
        assert!(got.bits_eq(&mid), "cpu gate_up {v}");
        let got = ops::gate_up_with(
            &MetalSimBackend::new().unwrap(),
            &w,
            &up,
            &x,
            Tail::Exact,
            v,
        )
        .unwrap();
        assert!(got.bits_eq(&mid), "metal-sim gate_up {v}");
    }

    let kernel = |v: Variant| ReduceFamily::kernel(&problem(8, 4096), v);
    let unbudgeted = Variant {
        max_registers: 0,
        ..variant
    };
    let cuda = kernel(variant).unit(Dialect::Cuda).unwrap();
    assert!(cuda.contains("__maxnreg__(168)"), "{cuda}");
    for d in [Dialect::Cpu, Dialect::Metal] {
        assert!(!kernel(variant).unit(d).unwrap().contains("maxnreg"));
    }
    assert!(!kernel(unbudgeted)
        .unit(Dialect::Cuda)
        .unwrap()
        .contains("maxnreg"));
    assert_ne!(kernel(variant).id(), kernel(unbudgeted).id());
}

/// `1mad` with f16 scales and bf16 weights reads its row scales folded with the divisor
/// (`RowScales::FoldedOneMad`, `codes::onemad_folded_scale`) and takes each weight in one
/// fma of the biased byte sum: bit for bit on the CPU and the Metal simulator, for rows
/// with scales of several exponents and both signs, zeros (whose zero weights may carry
/// the other sign, which no sum shows) and a subnormal; other codes, dtypes and
/// representations read the scales as stored.
#[test]
fn folded_onemad_scales_match_reference_bit_for_bit() {
    use trellis::backend::metal_sim::MetalSimBackend;
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::families::simt::RowScales;
    use trellis::family::Family;
    let g = Geometry::new(40, 1280, 256, 3, 12, Code::OneMad).unwrap();
    let mut w = random_matrix(g, 41);
    let special: [u16; 12] = [
        0x1C2F, 0x2179, 0x2311, 0x9C2F, 0xA179, 0xA311, 0x042F, 0x7511, 0x0000, 0x8000, 0x0001,
        0x3C00,
    ];
    for (r, s) in w.scales.iter_mut().enumerate().step_by(3) {
        *s = half::f16::from_bits(special[(r / 3) % special.len()]).to_f32();
    }
    let up = random_matrix(
        Geometry::new(40, 1280, 256, 4, 12, Code::OneMad).unwrap(),
        42,
    );
    let cpu = CpuBackend::new().unwrap();
    let sim = MetalSimBackend::new().unwrap();
    let registers = |rows_per_simd| Variant {
        x_stage: XStage::Registers,
        rows_per_simd,
        ..Variant::default()
    };
    for (dtype, m) in [(DType::Bf16, 1), (DType::Bf16, 3), (DType::F16, 2)] {
        let x = random_x(dtype, m, g.cols, 43);
        let want = reference::reduce(&w, &x).unwrap();
        let want_gate_up = reference::gate_up(&w, &up, &x).unwrap();
        for variant in [
            registers(4),
            registers(1),
            Variant::default(),
            Variant {
                repr: Representation::GlobalTable,
                ..Variant::default()
            },
        ] {
            let p = ReduceProblem {
                geometry: g,
                scale: ScaleDType::F16,
                act: dtype,
                m: m as u32,
            };
            let folded = ReduceFamily::kernel(&p, variant).scale == RowScales::FoldedOneMad;
            assert_eq!(
                folded,
                dtype == DType::Bf16 && variant.repr == Representation::Inline,
                "{dtype} {variant}"
            );
            let got = ops::matvec_with(&cpu, &w, &x, variant).unwrap();
            assert!(got.bits_eq(&want), "cpu {dtype} m={m} {variant}");
            let got = ops::matvec_with(&sim, &w, &x, variant).unwrap();
            assert!(got.bits_eq(&want), "metal-sim {dtype} m={m} {variant}");
            let got = ops::gate_up_with(&cpu, &w, &up, &x, Tail::Exact, variant).unwrap();
            assert!(
                got.bits_eq(&want_gate_up),
                "gate_up cpu {dtype} m={m} {variant}"
            );
        }
    }
    // Other codes and f32 scales read the scales as stored.
    let stored = |code, scale| {
        RowScales::of(
            code,
            scale,
            trellis::kernel::Elem::Bf16,
            Representation::Inline,
        )
    };
    assert_eq!(
        stored(Code::ThreeInst, ScaleDType::F16),
        RowScales::Stored(ScaleDType::F16)
    );
    assert_eq!(
        stored(Code::OneMad, ScaleDType::F32),
        RowScales::Stored(ScaleDType::F32)
    );
}

/// 3 rows per simdgroup is offered from `catalog::BALANCE_ROWS` rows only, the 8-row probe
/// from `catalog::TUNED_ROWS` (the verify catalog's matrices are smaller, so the families'
/// source hashes stay as they were).
#[test]
fn three_and_eight_rows_per_simdgroup_are_offered_at_the_tuned_sizes_only() {
    use trellis::families::catalog::{
        edge_probe_variants, one_wave_variants, three_row_variants, BALANCE_ROWS, TUNED_ROWS,
    };
    assert!(three_row_variants(Tier::Exact, 1, BALANCE_ROWS - 1).is_empty());
    assert!(edge_probe_variants(Tier::Exact, TUNED_ROWS - 1).is_empty());
    let probe = edge_probe_variants(Tier::Exact, TUNED_ROWS);
    assert!(probe.len() == 1 && probe[0].rows_per_simd == 8);
    let offered = three_row_variants(Tier::Exact, 4, 17408);
    assert_eq!(offered.len(), 3, "groups of 1, 2 and 4 simdgroups");
    let one_wave = one_wave_variants(Tier::Exact, 1, 17408);
    assert!(one_wave.len() == 1 && one_wave[0].max_registers == 40);
    assert_eq!(
        one_wave[0].rows_per_group, 2,
        "one wave needs groups of 2 or more"
    );
    assert!(one_wave_variants(Tier::Exact, 2, 17408).is_empty());
    assert!(one_wave_variants(Tier::Exact, 1, BALANCE_ROWS - 1).is_empty());
    assert!(three_row_variants(Tier::Exact, 8, 17408).is_empty());
    assert!(offered
        .iter()
        .all(|v| v.rows_per_simd == 3 && v.x_stage == XStage::Registers));
    let max = trellis::families::catalog::verify_cases(false)
        .iter()
        .map(|c| c.rows)
        .max()
        .unwrap();
    assert!(max < TUNED_ROWS, "a verify case of {max} rows");
}

/// `scalar_words` loads a run's code words one at a time where k allows vector loads (k 2
/// and 4 here; a `gate_up` with one such projection): bit for bit on the CPU and the Metal
/// simulator at M 1, 2 and 8, and in the CUDA unit no vector load of code words is left.
/// Where the words load one at a time anyway (odd k, x not in registers) it is an error
/// naming the field. At its default the field is left out of the tables and of the
/// variant's `Debug` (so of every existing kernel symbol).
#[test]
fn scalar_code_words_keep_the_bits_where_they_change_the_loads() {
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::family::Family;
    use trellis::kernel::{Dialect, KernelSpec};
    let cpu = CpuBackend::new().unwrap();
    let scalar = |rps, m: u32| Variant {
        x_stage: XStage::Registers,
        rows_per_group: 2,
        rows_per_simd: rps,
        scalar_words: true,
        max_registers: if m == 8 { 168 } else { 0 },
        ..Variant::default()
    };
    for (k, m, rps) in [(2, 1, 3), (4, 2, 3), (4, 8, 4), (2, 8, 4), (2, 8, 3)] {
        let g = Geometry::new(101, 512, 256, k, 12, Code::OneMad).unwrap();
        let w = random_matrix(g, 41 + k as u64);
        let x = random_x(DType::Bf16, m, 512, 43);
        assert_reduce_bits_cpu_and_sim(&w, &x, scalar(rps, m as u32));
    }
    assert_mixed_gate_up_bits_cpu(67, 512, 45, scalar(2, 2));

    let problem = |k| ReduceProblem {
        geometry: Geometry::new(4096, 256, 256, k, 12, Code::OneMad).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let vector = Variant {
        scalar_words: false,
        ..scalar(3, 1)
    };
    let unit = |v| {
        ReduceFamily::kernel(&problem(4), v)
            .unit(Dialect::Cuda)
            .unwrap()
    };
    assert!(unit(vector).contains("load_words<4u>(&w[r]"));
    assert!(!unit(scalar(3, 1)).contains("load_words<4u>(&w[r]"));
    assert_eq!(
        scalar(3, 1).to_string(),
        "inline shared_decode rpg=2 x=registers rps=3 words=1 exact"
    );
    assert!(!format!("{vector:?}").contains("scalar_words"));
    assert!(format!("{:?}", scalar(3, 1)).contains("scalar_words: true"));
    assert!(!toml::to_string(&vector).unwrap().contains("scalar_words"));
    let read: Variant = toml::from_str(&toml::to_string(&scalar(3, 1)).unwrap()).unwrap();
    assert_eq!(read, scalar(3, 1));

    // Offered at the tuned sizes where k allows vector loads: M 1 / 2 with the 3-row sets,
    // M 8 with the budgets and the 3-row sets; not at M 4 (same registers) nor for odd k.
    use trellis::families::catalog::{scalar_word_variants as offered, BALANCE_ROWS, TUNED_ROWS};
    // 3 rows per simdgroup in groups of 2 and 4 at M 1, of 1, 2 and 4 at M 2; at M 8 the
    // 4-row sets (groups of 2 and 4, unbudgeted and at 168 registers: 4) and the 3-row
    // sets (groups of 1, 2 and 4: 3).
    assert_eq!(offered(Tier::Exact, 1, BALANCE_ROWS, true).len(), 2);
    assert_eq!(offered(Tier::Exact, 2, BALANCE_ROWS, true).len(), 3);
    let m8 = offered(Tier::Exact, 8, TUNED_ROWS, true);
    assert_eq!(m8.len(), 4 + 3);
    assert_eq!(m8.iter().filter(|v| v.rows_per_simd == 3).count(), 3);
    assert!(offered(Tier::Exact, 1, BALANCE_ROWS - 1, true).is_empty());
    assert!(offered(Tier::Exact, 4, BALANCE_ROWS, true).is_empty());
    assert!(offered(Tier::Exact, 1, BALANCE_ROWS, false).is_empty());
    let odd = ReduceFamily::candidates(&problem(3), Tier::Exact, false);
    assert!(odd.iter().all(|v| !v.scalar_words));
    // gate_up: where either projection loads vectors, at M 1 and 2 (not at M 8).
    use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
    let pair = |gk, uk, m| GateUpProblem {
        gate: Geometry::new(BALANCE_ROWS, 256, 256, gk, 12, Code::OneMad).unwrap(),
        up: Geometry::new(BALANCE_ROWS, 256, 256, uk, 12, Code::OneMad).unwrap(),
        gate_scale: ScaleDType::F16,
        up_scale: ScaleDType::F16,
        act: DType::Bf16,
        m,
        tail: Tail::Exact,
    };
    let scalar_count = |gk, uk, m| {
        GateUpFamily::candidates(&pair(gk, uk, m), Tier::Exact, false)
            .iter()
            .filter(|v| v.scalar_words)
            .count()
    };
    // The `reduce` shapes of M 1 (2) and M 2 (3); none where neither k loads vectors (k 3).
    assert_eq!(scalar_count(3, 4, 1), 2);
    assert_eq!(scalar_count(4, 4, 2), 3);
    assert_eq!(scalar_count(3, 3, 1), 0);
    assert_eq!(scalar_count(3, 4, 8), 0);

    // Where nothing would change: an error naming the field, before anything renders.
    let g3 = Geometry::new(40, 256, 256, 3, 12, Code::OneMad).unwrap();
    let g2 = Geometry::new(40, 256, 256, 2, 12, Code::OneMad).unwrap();
    let global = Variant {
        x_stage: XStage::Global,
        rows_per_simd: 1,
        ..scalar(1, 1)
    };
    for (g, v) in [(g3, scalar(3, 1)), (g2, global)] {
        let w = random_matrix(g, 48);
        let x = random_x(DType::Bf16, 1, 256, 49);
        let e = ops::matvec_with(&cpu, &w, &x, v).unwrap_err().to_string();
        assert!(e.contains("scalar_words") && e.contains("true"), "{e}");
    }
}

/// `prefetch_words` and `stream_words` change only the CUDA unit's code-word loads (an L2
/// prefetch of the next run's words, evict-first loads): the CPU and Metal units are the
/// plain variant's, text for text, and compute its bits (CPU and the Metal simulator,
/// `reduce` at k 2 and 3, `gate_up` mixed). The CUDA unit carries each only when asked,
/// with the prefetch address one run on (32 k words where T divides 1024, the block
/// arithmetic otherwise). At their defaults the fields are left out of the tables and of
/// `Debug` (so of every existing kernel symbol).
#[test]
fn prefetched_and_streamed_code_words_change_only_the_cuda_loads() {
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::family::Family;
    use trellis::kernel::{Dialect, KernelSpec};
    let plain = |rps| Variant {
        x_stage: XStage::Registers,
        rows_per_group: 2,
        rows_per_simd: rps,
        ..Variant::default()
    };
    let loads = |v: Variant, prefetch_words, stream_words| Variant {
        prefetch_words,
        stream_words,
        ..v
    };
    for (k, m, rps) in [(2, 1, 2), (3, 4, 3), (2, 8, 3)] {
        let g = Geometry::new(77, 1536, 256, k, 12, Code::OneMad).unwrap();
        let w = random_matrix(g, 51 + k as u64);
        let x = random_x(DType::Bf16, m, 1536, 53);
        for (p, st) in [(true, false), (false, true), (true, true)] {
            assert_reduce_bits_cpu_and_sim(&w, &x, loads(plain(rps), p, st));
        }
    }
    assert_mixed_gate_up_bits_cpu(45, 1024, 55, loads(plain(2), true, true));

    let unit = |k, t, v, d| {
        let problem = ReduceProblem {
            geometry: Geometry::new(4096, 3072, t, k, 12, Code::OneMad).unwrap(),
            scale: ScaleDType::F16,
            act: DType::Bf16,
            m: 1,
        };
        let kernel = ReduceFamily::kernel(&problem, v);
        // The symbol hashes the variant; the text around it is what must not change.
        kernel.unit(d).unwrap().replace(&kernel.symbol(), "reduce")
    };
    for d in [Dialect::Cpu, Dialect::Metal] {
        for k in [3, 4] {
            assert_eq!(
                unit(k, 256, loads(plain(2), true, true), d),
                unit(k, 256, plain(2), d)
            );
        }
    }
    let cuda = |k, t, p, st| unit(k, t, loads(plain(2), p, st), Dialect::Cuda);
    assert!(!cuda(3, 256, false, false).contains("prefetch"));
    assert!(!cuda(3, 256, false, false).contains("__ldcs"));
    assert!(cuda(3, 256, true, false).contains("prefetch_l2(w_blk + w_0 + 96u)"));
    assert!(cuda(3, 96, true, false).contains("(bn - blk) * 9u"));
    assert!(cuda(3, 256, false, true).contains("= __ldcs(&w_blk[w_0 + i]);"));
    assert!(cuda(4, 256, false, true).contains("load_words_cs<4u>(&w[r]"));
    assert!(!cuda(4, 256, true, false).contains("load_words_cs"));

    let both = loads(plain(2), true, true);
    assert_eq!(
        both.to_string(),
        "inline shared_decode rpg=2 x=registers rps=2 prefetch stream exact"
    );
    assert!(!format!("{:?}", plain(2)).contains("words"));
    assert!(format!("{both:?}").contains("prefetch_words: true, stream_words: true"));
    assert!(!toml::to_string(&plain(2)).unwrap().contains("words"));
    let read: Variant = toml::from_str(&toml::to_string(&both).unwrap()).unwrap();
    assert_eq!(read, both);

    // Offered as three twins each of 2-row sets from TUNED_ROWS to BALANCE_ROWS at M 1, 2
    // and 4, of the 3-row sets from BALANCE_ROWS at M 4, and at M 8 below BALANCE_ROWS of
    // the 3-row sets and the 4-row budgets.
    use trellis::families::catalog::{code_load_variants as offered, BALANCE_ROWS, TUNED_ROWS};
    for m in [1, 2, 4] {
        let v = offered(Tier::Exact, m, TUNED_ROWS);
        // Row sets (1, 2 and 4 simdgroups a group, at widths 2 / 3 / 4 for M 4, else 2)
        // times the three twins: prefetch, evict-first, both.
        assert_eq!(v.len(), if m == 4 { 3 * 3 * 3 } else { 3 * 3 });
        assert!(v.iter().all(|v| v.prefetch_words || v.stream_words));
        assert!(v.iter().all(|v| v.rows_per_simd == 2 || m == 4));
    }
    assert_eq!(
        offered(Tier::Exact, 4, BALANCE_ROWS).len(),
        3 * 3,
        "3-row sets x twins"
    );
    assert!(offered(Tier::Exact, 1, BALANCE_ROWS).is_empty());
    let m8 = offered(Tier::Exact, 8, TUNED_ROWS);
    // (3 three-row sets + 2 four-row budgets) x 3 twins; the budgets' twins: 2 x 3.
    assert_eq!(m8.len(), (3 + 2) * 3);
    assert_eq!(m8.iter().filter(|v| v.max_registers == 168).count(), 2 * 3);
    assert!(m8.iter().all(|v| v.rows_per_simd >= 3));
    assert!(offered(Tier::Exact, 8, BALANCE_ROWS).is_empty());
    assert!(offered(Tier::Exact, 1, TUNED_ROWS - 1).is_empty());
}

/// The CUDA `reduce` and `gate_up` units tell ptxas their simdgroup id is warp-uniform
/// (`cuda::uniform_simdgroup`, `templates/dialect/cuda.inc`): 0 in groups of one simdgroup, lane 0's by shuffle in
/// larger ones; the CPU and Metal units keep their shims' id. The bits are the other
/// tests' (the CPU runs every group size).
#[test]
fn cuda_units_define_a_uniform_simdgroup_id() {
    use trellis::families::gate_up::{GateUpFamily, GateUpProblem};
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::family::Family;
    use trellis::kernel::{Dialect, KernelSpec};
    let g = Geometry::new(4096, 256, 256, 2, 12, Code::OneMad).unwrap();
    let reduce = ReduceProblem {
        geometry: g,
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let gate_up = GateUpProblem {
        gate: g,
        up: g,
        gate_scale: ScaleDType::F16,
        up_scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
        tail: Tail::Exact,
    };
    let zero = "#define SIMDGROUP_ID 0u";
    let shuffle = "#define SIMDGROUP_ID __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0)";
    for rpg in [1, 2, 4] {
        let v = Variant {
            rows_per_group: rpg,
            ..Variant::default()
        };
        let (r, g) = (
            ReduceFamily::kernel(&reduce, v),
            GateUpFamily::kernel(&gate_up, v),
        );
        let units = [
            (r.unit(Dialect::Cuda), r.unit(Dialect::Metal)),
            (g.unit(Dialect::Cuda), g.unit(Dialect::Cpu)),
        ];
        for (cuda, other) in units {
            let (cuda, other) = (cuda.unwrap(), other.unwrap());
            let (want, not) = if rpg == 1 {
                (zero, shuffle)
            } else {
                (shuffle, zero)
            };
            assert!(
                cuda.contains(want) && !cuda.contains(not),
                "rpg {rpg}:\n{cuda}"
            );
            assert!(
                !other.contains(zero) && !other.contains(shuffle),
                "rpg {rpg}:\n{other}"
            );
        }
    }
}

/// Hand-built inputs (the data types' fields are public) and raw uploads are checked
/// before anything is sized from them: an error naming what is wrong, never a panic, an
/// allocation abort or a buffer smaller than its shape.
#[test]
fn hand_built_inputs_and_raw_uploads_are_checked() {
    use trellis::families::reduce::{ReduceFamily, ReduceProblem};
    use trellis::family;
    use trellis::kernel::{Backend, Elem};
    let cpu = CpuBackend::new().unwrap();
    // Shapes whose size overflows, or does not match the bytes: no allocation first.
    let e = cpu
        .upload(Elem::F32, &[1 << 62, 8], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor shape") && e.contains("overflows"), "{e}");
    let e = cpu
        .upload(Elem::F32, &[1 << 40], &[0; 8])
        .unwrap_err()
        .to_string();
    assert!(e.contains("upload bytes = 8"), "{e}");
    // A write into a tensor made before: its bytes exactly, in place on the CPU and the
    // simulator; any other length named.
    let sim = trellis::backend::metal_sim::MetalSimBackend::new().unwrap();
    let bytes: Vec<u8> = (1..=12).collect();
    let mut t = cpu.upload(Elem::F16, &[2, 3], &[0; 12]).unwrap();
    cpu.write(&mut t, &bytes).unwrap();
    assert_eq!(cpu.download(&t).unwrap(), bytes);
    let mut t = sim.upload(Elem::F16, &[2, 3], &[0; 12]).unwrap();
    sim.write(&mut t, &bytes).unwrap();
    assert_eq!(sim.download(&t).unwrap(), bytes);
    for len in [11, 13] {
        let e = sim.write(&mut t, &vec![0; len]).unwrap_err();
        assert!(
            e.to_string().contains(&format!("write bytes = {len}")),
            "{e}"
        );
    }

    let g = Geometry::new(8, 256, 256, 2, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 71);
    let x = random_x(DType::Bf16, 1, 256, 72);
    // A matrix edited by hand after construction.
    let mut lut_less = w.clone();
    lut_less.geometry.code = Code::Lut;
    let e = ops::matvec_with(&cpu, &lut_less, &x, Variant::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("lut") && e.contains("missing"), "{e}");
    let mut short = w.clone();
    short.codes.pop();
    let e = ops::matvec(&cpu, &short, &x, Tier::Exact)
        .unwrap_err()
        .to_string();
    // 8 rows x 256 columns at k 2 are 128 words; the matrix holds 127.
    assert!(e.contains("codes") && e.contains("127"), "{e}");
    // Activations whose data does not hold M x C values.
    let mut ragged = x.clone();
    ragged.data.pop();
    let e = ops::matvec(&cpu, &w, &ragged, Tier::Exact)
        .unwrap_err()
        .to_string();
    assert!(e.contains("x data"), "{e}");
    // A forced variant outside its ranges, run through the family directly.
    let p = ReduceProblem {
        geometry: g,
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let d = trellis::families::reduce::ReduceDevice::upload(&cpu, &w, &x).unwrap();
    let bad = Variant {
        rows_per_group: 0,
        ..Variant::default()
    };
    family::precompile::<ReduceFamily, _>(&cpu, &[(p, vec![bad])]).unwrap();
    let e = family::run::<ReduceFamily, _>(&cpu, &p, bad, &d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rows_per_group = 0"), "{e}");
}

/// `interleaved_x` reads x from its lane-interleaved copy (`Activations::lane_interleaved`):
/// the same sums, so the same bits, on the CPU and the Metal simulator for every
/// activation dtype, at 1-4 rows per simdgroup and M 1-4, in `reduce` and `gate_up`; where
/// the columns are not whole 1024-column slices, or x is not in registers, it is an error
/// naming the field. Offered only at M = 2 and 4 below `BALANCE_ROWS` rows with whole
/// slices; at its default it is left out of the tables and of every kernel symbol.
#[test]
fn interleaved_x_keeps_the_bits_and_is_offered_where_x_bounds_the_l1() {
    use trellis::families::catalog::{interleaved_x_variants, BALANCE_ROWS, TUNED_ROWS};
    let xi = |rps, prefetch_words| Variant {
        x_stage: XStage::Registers,
        rows_per_group: 2,
        rows_per_simd: rps,
        prefetch_words,
        interleaved_x: true,
        ..Variant::default()
    };
    for (i, (act, m, rps, k)) in [
        (DType::Bf16, 4, 2, 3),
        (DType::F16, 2, 3, 2),
        (DType::F32, 3, 4, 4),
        (DType::Bf16, 1, 1, 3),
    ]
    .into_iter()
    .enumerate()
    {
        let g = Geometry::new(37, 2048, 256, k, 12, Code::OneMad).unwrap();
        let w = random_matrix(g, 90 + i as u64);
        let x = random_x(act, m, 2048, 95 + i as u64);
        assert_reduce_bits_cpu_and_sim(&w, &x, xi(rps, i % 2 == 0));
    }
    assert_mixed_gate_up_bits_cpu(29, 1024, 97, xi(3, false));

    // Ragged columns, or x not in registers: errors naming the field.
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(16, 1536, 256, 2, 12, Code::OneMad).unwrap();
    let (w, x) = (random_matrix(g, 98), random_x(DType::Bf16, 1, 1536, 99));
    let e = ops::matvec_with(&cpu, &w, &x, xi(2, false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("interleaved_x") && e.contains("1536"), "{e}");
    let staged = Variant {
        x_stage: XStage::SharedAct,
        rows_per_simd: 1,
        ..xi(1, false)
    };
    let g = Geometry::new(16, 1024, 256, 2, 12, Code::OneMad).unwrap();
    let (w, x) = (random_matrix(g, 98), random_x(DType::Bf16, 1, 1024, 99));
    let e = ops::matvec_with(&cpu, &w, &x, staged)
        .unwrap_err()
        .to_string();
    assert!(e.contains("interleaved_x"), "{e}");

    // Offered at M 2 / 4 from TUNED_ROWS below BALANCE_ROWS with whole slices only.
    let offered = interleaved_x_variants(Tier::Exact, 4, 5120, 17408);
    // M 4's 9 row sets of `code_load_variants` and their 27 twins.
    assert_eq!(offered.len(), 9 + 27);
    assert!(offered.iter().all(|v| v.interleaved_x));
    assert_eq!(
        interleaved_x_variants(Tier::Exact, 2, 5120, 17408).len(),
        12
    );
    for (m, rows, cols) in [
        (1, 5120, 17408),
        (8, 5120, 17408),
        (4, BALANCE_ROWS, 5120),
        (4, TUNED_ROWS - 1, 17408),
        (4, 5120, 17408 - 512),
    ] {
        assert!(
            interleaved_x_variants(Tier::Exact, m, rows, cols).is_empty(),
            "{m} {rows} {cols}"
        );
    }
    let plain = Variant::default();
    assert!(!format!("{plain:?}").contains("interleaved_x"));
    assert!(!toml::to_string(&plain).unwrap().contains("interleaved_x"));
    let read: Variant = toml::from_str(&toml::to_string(&xi(2, false)).unwrap()).unwrap();
    assert_eq!(read, xi(2, false));
    assert!(xi(2, false).to_string().ends_with(" xi exact"));
}

/// A kernel the host compiler rejects: the CPU backend's error names the backend, the
/// kernel and the compiler's message; a batch that holds it (`precompile`) leaves the
/// others to compile and run, and the bad one fails again at its own launch.
#[test]
fn a_kernel_that_fails_to_compile_is_a_clear_error_and_spares_the_others() {
    use trellis::families::reduce::Reduce;
    use trellis::families::simt::{Proj, RowScales};
    use trellis::kernel::{Backend, Dialect, KernelSpec};
    use trellis::ops::DeviceMatrix;
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(8, 256, 256, 2, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 75);
    let x = random_x(DType::F32, 1, 256, 76);
    let spec = Reduce {
        rows: g.rows,
        cols: g.cols,
        t: g.t,
        proj: Proj::of(&g),
        m: 1,
        act: DType::F32,
        scale: RowScales::Stored(ScaleDType::F16),
        variant: Variant::default(),
    };
    let mut bad = spec.render(Dialect::Cpu).unwrap();
    bad.body.push_str("\n  no_such_function_in_the_shim();\n");
    // Ids of their own, so neither is served from the other's (or an earlier run's) cache.
    let salt = std::process::id() as u64 ^ 0x5eed_c0de;
    let salted = |salt: u64, body: Option<trellis::kernel::Rendered>| {
        let mut parts = spec.launch_request().unwrap().into_parts();
        parts.id.params ^= salt;
        if let Some(body) = body {
            parts.render = Box::new(move |_| Ok(body.clone()));
        }
        // SAFETY: the declaration's own body, or one that does not compile (it never
        // runs), each under an id of its own.
        unsafe { trellis::kernel::Launch::from_parts(parts) }
    };
    let good_launch = salted(salt, None);
    let bad_launch = salted(salt.rotate_left(17), Some(bad));
    let dw = DeviceMatrix::upload(&cpu, &w).unwrap();
    let dx = ops::upload_activations(&cpu, &x).unwrap();
    let inputs = [&dx, &dw.codes, &dw.scales, dw.table(spec.variant.repr)];

    let launches = [bad_launch, good_launch];
    cpu.precompile(&launches)
        .expect("a batch that does not compile is not an error of precompile");
    let [bad_launch, good_launch] = &launches;
    let out = cpu.launch(good_launch, &inputs).unwrap();
    let got = trellis::family::download(&cpu, &out[0]).unwrap();
    assert!(got.bits_eq(&reference::reduce(&w, &x).unwrap()));
    let e = cpu.launch(bad_launch, &inputs).unwrap_err().to_string();
    assert!(
        e.contains("cpu")
            && e.contains(&bad_launch.id.to_string())
            && e.contains("no_such_function_in_the_shim"),
        "{e}"
    );
}

/// A batch larger than one launch takes (exact 8 samples, fast 16) runs as several: exact
/// bit for bit with the reference, fast within SPEC 7, `matvec` and `gate_up`; a NaN in a
/// later chunk of a batch is refused before any kernel runs, named by its row in x.
#[test]
fn a_batch_larger_than_a_launch_runs_as_several() {
    use trellis::check::{fast_gate_up, fast_reduce, RealSums};
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(24, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 81), random_matrix(g, 82));
    let x = random_x(DType::Bf16, 20, 512, 83);
    let y = ops::matvec(&cpu, &w, &x, Tier::Exact).unwrap();
    assert_eq!(y.rows, 20);
    assert!(y.bits_eq(&reference::reduce(&w, &x).unwrap()));
    let mid = ops::gate_up(&cpu, &w, &u, &x, Tail::Exact, Tier::Exact).unwrap();
    assert!(mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()));
    // Fast: 40 samples are launches of 16, 16 and 8.
    let x40 = random_x(DType::F32, 40, 512, 84);
    let (rw, ru) = (
        RealSums::of(&w, &x40).unwrap(),
        RealSums::of(&u, &x40).unwrap(),
    );
    let yf = ops::matvec(&cpu, &w, &x40, Tier::Fast).unwrap();
    assert_eq!(yf.rows, 40);
    fast_reduce(&yf, &rw).unwrap();
    let mf = ops::gate_up(&cpu, &w, &u, &x40, Tail::Exact, Tier::Fast).unwrap();
    fast_gate_up(&mf, &rw, &ru, false).unwrap();
    let mut bad = x40.clone();
    bad.data[33 * 512 + 5] = f32::NAN;
    let e = ops::matvec(&cpu, &w, &bad, Tier::Fast)
        .unwrap_err()
        .to_string();
    assert!(e.contains("x[33, 5]"), "{e}");
    let mut bad = x.clone();
    bad.data[17 * 512 + 3] = f32::NAN;
    for e in [
        ops::matvec(&cpu, &w, &bad, Tier::Exact).unwrap_err(),
        ops::gate_up(&cpu, &w, &u, &bad, Tail::Exact, Tier::Exact).unwrap_err(),
    ] {
        assert!(e.to_string().contains("x[17, 3]"), "{e}");
    }
    // The GPU test files' form of it (`common/facade.rs`), here so that CI runs it.
    facade::a_batch_larger_than_a_launch_runs_as_several(&cpu);
}

/// The CPU backend, counting the code words it is given to upload (`codes`), and every
/// tensor (`all`).
struct CountingUploads<'b> {
    cpu: &'b CpuBackend,
    codes_shape: Vec<usize>,
    codes: std::cell::Cell<usize>,
    /// Copies to the device: uploads, and writes over a tensor made before.
    all: std::cell::Cell<usize>,
    /// Tensors made: uploads and allocations.
    made: std::cell::Cell<usize>,
    /// The backend name and device id it gives instead of the CPU's (so the selector
    /// reads that device's tables).
    posing_as: Option<(&'static str, &'static str)>,
}

impl<'b> CountingUploads<'b> {
    /// `cpu`, counting uploads of code words of geometry `g`'s shape.
    fn new(cpu: &'b CpuBackend, g: &Geometry) -> Self {
        CountingUploads {
            cpu,
            codes_shape: g.codes_shape().to_vec(),
            codes: Default::default(),
            all: Default::default(),
            made: Default::default(),
            posing_as: None,
        }
    }
}

impl Backend for CountingUploads<'_> {
    type Tensor = <CpuBackend as Backend>::Tensor;
    type Compiled = <CpuBackend as Backend>::Compiled;
    type Bound<'a> = <CpuBackend as Backend>::Bound<'a>;
    fn name(&self) -> &'static str {
        self.posing_as.map_or(self.cpu.name(), |(name, _)| name)
    }
    fn dialect(&self) -> Dialect {
        self.cpu.dialect()
    }
    fn device_id(&self) -> String {
        self.posing_as
            .map_or(self.cpu.device_id(), |(_, id)| id.into())
    }
    fn alloc(&self, spec: &trellis::kernel::TensorSpec) -> trellis::Result<Self::Tensor> {
        self.made.set(self.made.get() + 1);
        self.cpu.alloc(spec)
    }
    fn upload(&self, e: Elem, shape: &[usize], bytes: &[u8]) -> trellis::Result<Self::Tensor> {
        if e == Elem::U32 && shape == self.codes_shape {
            self.codes.set(self.codes.get() + 1);
        }
        self.all.set(self.all.get() + 1);
        self.made.set(self.made.get() + 1);
        self.cpu.upload(e, shape, bytes)
    }
    fn write(&self, t: &mut Self::Tensor, bytes: &[u8]) -> trellis::Result<()> {
        self.all.set(self.all.get() + 1);
        self.cpu.write(t, bytes)
    }
    fn download(&self, t: &Self::Tensor) -> trellis::Result<Vec<u8>> {
        self.cpu.download(t)
    }
    fn limits(&self) -> trellis::kernel::Limits {
        self.cpu.limits()
    }
    fn compile(&self, l: &trellis::kernel::Launch<'_>) -> trellis::Result<Self::Compiled> {
        self.cpu.compile(l)
    }
    fn bind<'a>(
        &self,
        c: &Self::Compiled,
        l: &trellis::kernel::Launch<'_>,
        inputs: &[&'a Self::Tensor],
        outputs: &'a mut [&mut Self::Tensor],
    ) -> trellis::Result<Self::Bound<'a>> {
        self.cpu.bind(c, l, inputs, outputs)
    }
    fn run(&self, bound: &mut Self::Bound<'_>) -> trellis::Result<()> {
        self.cpu.run(bound)
    }
}

/// A batch of several launches copies each matrix to the device once, not once a launch,
/// on both tiers, with the bits of one launch a chunk.
#[test]
fn a_batch_uploads_each_matrix_once() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(24, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 85), random_matrix(g, 86));
    let b = CountingUploads::new(&cpu, &g);
    let uploads = |f: &dyn Fn() -> Activations| {
        b.codes.set(0);
        let y = f();
        (y, b.codes.get())
    };
    // Exact: 20 samples are launches of 8, 8 and 4.
    let x = random_x(DType::Bf16, 20, 512, 87);
    let (y, n) = uploads(&|| ops::matvec(&b, &w, &x, Tier::Exact).unwrap());
    assert!(y.bits_eq(&reference::reduce(&w, &x).unwrap()));
    assert_eq!(n, 1, "matvec, exact: code uploads");
    let (mid, n) = uploads(&|| ops::gate_up(&b, &w, &u, &x, Tail::Exact, Tier::Exact).unwrap());
    assert!(mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()));
    assert_eq!(n, 2, "gate_up, exact: code uploads");
    // Fast: 40 samples are launches of 16, 16 and 8; each chunk's bits are its own launch's.
    let x40 = random_x(DType::F32, 40, 512, 88);
    let (yf, n) = uploads(&|| ops::matvec(&b, &w, &x40, Tier::Fast).unwrap());
    assert_eq!(n, 1, "matvec, fast: code uploads");
    let (mf, n) = uploads(&|| ops::gate_up(&b, &w, &u, &x40, Tail::Exact, Tier::Fast).unwrap());
    assert_eq!(n, 2, "gate_up, fast: code uploads");
    for (lo, hi) in [(0, 16), (16, 32), (32, 40)] {
        let part = Activations {
            data: x40.data[lo * 512..hi * 512].to_vec(),
            rows: hi - lo,
            ..x40.clone()
        };
        let (ys, ms) = (
            ops::matvec(&cpu, &w, &part, Tier::Fast).unwrap(),
            ops::gate_up(&cpu, &w, &u, &part, Tail::Exact, Tier::Fast).unwrap(),
        );
        let n = g.rows;
        assert_eq!(ys.data, yf.data[lo * n..hi * n], "matvec rows {lo}..{hi}");
        assert_eq!(ms.data, mf.data[lo * n..hi * n], "gate_up rows {lo}..{hi}");
    }
}

/// The `_with` forms take any M too (they ran one launch and refused M past 8), with
/// the bits of the table-chosen calls; `Resident::gate_up` is `gate_up_resident`; an
/// `AnyBackend` runs the facade.
#[test]
fn forced_variants_and_resident_gate_up_take_any_m() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(16, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 101), random_matrix(g, 102));
    let x = random_x(DType::Bf16, 20, 512, 103);
    let v = ops::Variant::default();
    assert!(ops::matvec_with(&cpu, &w, &x, v)
        .unwrap()
        .bits_eq(&reference::reduce(&w, &x).unwrap()));
    let mid = ops::gate_up_with(&cpu, &w, &u, &x, Tail::Exact, v).unwrap();
    assert!(mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()));
    let (rw, ru) = (
        ops::Resident::new(&cpu, &w).unwrap(),
        ops::Resident::new(&cpu, &u).unwrap(),
    );
    assert!(rw
        .gate_up(&ru, &x, Tail::Exact, Tier::Exact)
        .unwrap()
        .bits_eq(&mid));
    // A resident matrix remembers the dtypes its weights were found finite in, and
    // only those: weights of 1e38 are f32's and bf16's, not f16's.
    let g = Geometry::new(2, 256, 256, 2, 6, Code::Lut).unwrap();
    let mut lut = vec![1.0f32; 64];
    lut[63] = 1e38; // state 63: all ones
    let n = g.codes_shape().iter().product::<usize>();
    let big = QuantizedMatrix::new(
        g,
        vec![u32::MAX; n],
        vec![1.0, 1.0],
        ScaleDType::F32,
        Some(lut),
    )
    .unwrap();
    let r = ops::Resident::new(&cpu, &big).unwrap();
    for dtype in [DType::F32, DType::F32, DType::Bf16, DType::F16, DType::F16] {
        let x = random_x(dtype, 1, 256, 105);
        let got = r.matvec(&x, Tier::Exact);
        if dtype == DType::F16 {
            let e = got.unwrap_err().to_string();
            assert!(e.contains("w[0, 0]") && e.contains("overflows f16"), "{e}");
        } else {
            got.unwrap();
        }
    }
    // A backend chosen by name at run time runs the facade as its own type does.
    for name in ["cpu", "metal-sim"] {
        let any = trellis::backend::AnyBackend::open(name).unwrap();
        let x2 = random_x(DType::Bf16, 2, 512, 104);
        let y = any.matvec(&w, &x2, Tier::Exact).unwrap();
        assert!(y.bits_eq(&reference::reduce(&w, &x2).unwrap()), "{name}");
        let m = any.gate_up(&w, &u, &x2, Tail::Exact, Tier::Exact).unwrap();
        assert!(
            m.bits_eq(&reference::gate_up(&w, &u, &x2).unwrap()),
            "{name}"
        );
    }
}

/// A resident matrix is copied to the device once for any number of calls, both tiers,
/// `matvec` and `gate_up`, and gives the plain calls' results.
#[test]
fn a_resident_matrix_is_uploaded_once_for_many_calls() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(24, 512, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 95), random_matrix(g, 96));
    let b = CountingUploads::new(&cpu, &g);
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    assert_eq!(b.codes.get(), 2);
    for (m, seed) in [(1, 97), (3, 98), (20, 99)] {
        let x = random_x(DType::Bf16, m, 512, seed);
        for tier in [Tier::Exact, Tier::Fast] {
            let y = rw.matvec(&x, tier).unwrap();
            let y_want = ops::matvec(&cpu, &w, &x, tier).unwrap();
            assert!(y.bits_eq(&y_want), "{tier:?} M {m}");
            let mid = ops::gate_up_resident(&rw, &ru, &x, Tail::Exact, tier).unwrap();
            let want = ops::gate_up(&cpu, &w, &u, &x, Tail::Exact, tier).unwrap();
            assert!(mid.bits_eq(&want), "{tier:?} M {m}");
            if tier == Tier::Exact {
                assert!(y.bits_eq(&reference::reduce(&w, &x).unwrap()), "M {m}");
                assert!(
                    mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()),
                    "M {m}"
                );
            }
        }
    }
    assert_eq!(b.codes.get(), 2, "code uploads after 12 calls");
    // Gate and up resident on two backends: an error naming `up`.
    let other = CountingUploads::new(&cpu, &Geometry::new(1, 32, 32, 1, 2, Code::OneMad).unwrap());
    let ru2 = ops::Resident::new(&other, &u).unwrap();
    let x = random_x(DType::Bf16, 1, 512, 100);
    let e = ops::gate_up_resident(&rw, &ru2, &x, Tail::Exact, Tier::Exact)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("up's backend") && e.contains("both must be resident on one backend"),
        "{e}"
    );
}

/// A resident's calls on host data keep their device tensors (x's layouts, y, the fast
/// tier's prescaled x and partials) for the next call: once a call of a kind has run,
/// another of the same kind (tier, M, dtype; matvec or the fused pair) makes no tensor,
/// and gives the bits a fresh call gives (exact: the reference's). Several kinds in turn
/// keep theirs, and a batch's chunks share one set. Each call copies x to the device
/// once, as it is (the fast tier prescales it there).
#[test]
fn a_residents_calls_on_host_data_reuse_their_device_tensors() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(24, 512, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 141), random_matrix(g, 142));
    let b = CountingUploads::new(&cpu, &g);
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    // Five shapes of x and of y (the tiers share them) and four keys of the fast
    // tier's buffers (two M, matvec and pair): within what a resident keeps.
    let kinds = [
        (Tier::Exact, DType::Bf16, 1),
        (Tier::Fast, DType::Bf16, 1),
        (Tier::Exact, DType::F32, 4),
        (Tier::Fast, DType::F16, 3),
        (Tier::Exact, DType::F16, 2),
        (Tier::Exact, DType::F32, 8),
    ];
    let call = |tier: Tier, x: &Activations, pair: bool| match pair {
        false => rw.matvec(x, tier).unwrap(),
        true => ops::gate_up_resident(&rw, &ru, x, Tail::Exact, tier).unwrap(),
    };
    for round in 0..2 {
        for (i, &(tier, dtype, m)) in kinds.iter().enumerate() {
            for pair in [false, true] {
                let x = random_x(dtype, m, 512, 143 + i as u64 + 10 * round);
                let (all, made) = (b.all.get(), b.made.get());
                let y = call(tier, &x, pair);
                let fresh = match pair {
                    false => ops::matvec(&cpu, &w, &x, tier).unwrap(),
                    true => ops::gate_up(&cpu, &w, &u, &x, Tail::Exact, tier).unwrap(),
                };
                assert!(y.bits_eq(&fresh), "{tier:?} {dtype} M {m} pair {pair}");
                if tier == Tier::Exact {
                    let want = match pair {
                        false => reference::reduce(&w, &x).unwrap(),
                        true => reference::gate_up(&w, &u, &x).unwrap(),
                    };
                    assert!(y.bits_eq(&want), "{dtype} M {m} pair {pair}: reference");
                }
                // The fast tier prescales x on the device: the bits of the kernels on x
                // prescaled by the host, as the tuner runs them.
                if tier == Tier::Fast {
                    let host = match pair {
                        false => host_prescaled::matvec(&cpu, &w, &x),
                        true => host_prescaled::gate_up(&cpu, &w, &u, &x, Tail::Exact),
                    };
                    assert!(
                        y.bits_eq(&host),
                        "{dtype} M {m} pair {pair}: host prescaled"
                    );
                }
                if round == 1 {
                    let counts = (b.all.get() - all, b.made.get() - made);
                    assert_eq!(
                        counts,
                        (1, 0),
                        "{tier:?} {dtype} M {m} pair {pair}: copies, made"
                    );
                }
            }
        }
    }
    // A batch of 20 samples (exact: 8, 8 and 4) makes one set for its two shapes of x.
    let x = random_x(DType::Bf16, 20, 512, 160);
    let y = rw.matvec(&x, Tier::Exact).unwrap();
    assert!(y.bits_eq(&reference::reduce(&w, &x).unwrap()));
    let (all, made) = (b.all.get(), b.made.get());
    let again = rw.matvec(&x, Tier::Exact).unwrap();
    assert!(again.bits_eq(&y));
    assert_eq!(
        (b.all.get() - all, b.made.get() - made),
        (3, 0),
        "copies (a chunk each), made"
    );
    // Released, the next call makes its tensors anew, with the same bits.
    assert!(rw.kept_bytes() > 0);
    rw.release_kept();
    assert_eq!(rw.kept_bytes(), 0);
    let made = b.made.get();
    assert!(rw.matvec(&x, Tier::Exact).unwrap().bits_eq(&y));
    assert!(b.made.get() > made, "made anew");
    // Two shapes of x (8 and 4 samples) and of y, bf16.
    assert_eq!(rw.kept_bytes(), 2 * (8 + 4) * (512 + 24), "kept again");
}

/// Activations on the device (uploaded once, or a previous call's output) run the exact
/// tier with no copy between host and device: `matvec_device` and `gate_up_device` give
/// the host facade's bits, chain layer to layer, and upload nothing a call; the one-layout
/// uploads work too, and what they cannot take is an error naming the field.
#[test]
fn device_activations_run_the_exact_tier_without_copies() {
    use trellis::ops::DeviceActivations;
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(32, 1024, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 111), random_matrix(g, 112));
    let b = CountingUploads::new(&cpu, &g);
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    for (dtype, m, seed) in [
        (DType::Bf16, 1, 113),
        (DType::F16, 3, 114),
        (DType::F32, 8, 115),
    ] {
        let x = random_x(dtype, m, 1024, seed);
        // Both layouts, x as it is alone, and its interleaved copy alone (the plain winner
        // here, the built-in default, then runs its interleaved twin).
        let interleaved = Variant {
            interleaved_x: true,
            ..Variant::default()
        };
        for xd in [
            DeviceActivations::upload(&b, &x).unwrap(),
            DeviceActivations::from_tensor(ops::upload_activations(&b, &x).unwrap()).unwrap(),
            DeviceActivations::upload_for(&b, &x, &interleaved).unwrap(),
        ] {
            b.all.set(0);
            let y = rw.matvec_device(&xd, Tier::Exact).unwrap();
            let mids = [Tail::Exact, Tail::Native]
                .map(|tail| rw.gate_up_device(&ru, &xd, tail, Tier::Exact).unwrap());
            assert_eq!(b.all.get(), 0, "uploads in three device calls");
            assert_eq!((y.samples(), y.cols(), y.dtype()), (m, 32, dtype));
            let t = y.tensor().unwrap();
            assert_eq!((t.shape(), t.elem()), (vec![m, 32], dtype.into()));
            let want = rw.matvec(&x, Tier::Exact).unwrap();
            assert!(y.download(&b).unwrap().bits_eq(&want), "{dtype} M {m}");
            assert!(y
                .download(&b)
                .unwrap()
                .bits_eq(&reference::reduce(&w, &x).unwrap()));
            for (mid, tail) in mids.iter().zip([Tail::Exact, Tail::Native]) {
                let want = ops::gate_up(&cpu, &w, &u, &x, tail, Tier::Exact).unwrap();
                assert!(
                    mid.download(&b).unwrap().bits_eq(&want),
                    "{tail:?}, {dtype} M {m}"
                );
            }
            // y is the next layer's x, still on the device.
            let down = random_matrix(Geometry::new(40, 32, 32, 2, 12, Code::OneMad).unwrap(), 116);
            let rd = ops::Resident::new(&b, &down).unwrap();
            let z = rd.matvec_device(&y, Tier::Exact).unwrap();
            let want = reference::reduce(&down, &reference::reduce(&w, &x).unwrap()).unwrap();
            assert!(
                z.download(&b).unwrap().bits_eq(&want),
                "chained, {dtype} M {m}"
            );
        }
    }
    // Into outputs made once: one y and one mid serve calls on two x with each one's
    // bits; an output of another shape or type is named.
    let spec = |elem, m| trellis::kernel::TensorSpec {
        name: "y",
        elem,
        shape: vec![m, 32],
    };
    let (mut y, mut mid) = (
        b.alloc(&spec(Elem::Bf16, 2)).unwrap(),
        b.alloc(&spec(Elem::Bf16, 2)).unwrap(),
    );
    for seed in [124, 125] {
        let x = random_x(DType::Bf16, 2, 1024, seed);
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        b.all.set(0);
        rw.matvec_device_into(&xd, &mut y, Tier::Exact).unwrap();
        rw.gate_up_device_into(&ru, &xd, &mut mid, Tail::Exact, Tier::Exact)
            .unwrap();
        assert_eq!(b.all.get(), 0, "uploads in two calls into outputs");
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(
            got.bits_eq(&reference::reduce(&w, &x).unwrap()),
            "seed {seed}"
        );
        let got = trellis::family::download(&b, &mid).unwrap();
        assert!(
            got.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()),
            "seed {seed}"
        );
    }
    let xd = DeviceActivations::upload(&b, &random_x(DType::Bf16, 2, 1024, 126)).unwrap();
    for (elem, m, needle) in [
        (Elem::Bf16, 3, "has shape [3, 32], expected [2, 32]"),
        (Elem::F32, 2, "has dtype f32, expected bf16"),
    ] {
        let mut wrong = b.alloc(&spec(elem, m)).unwrap();
        let e = rw
            .matvec_device_into(&xd, &mut wrong, Tier::Exact)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
    // A table winner that reads x lane-interleaved (the H200's at 64 x 14336, k 2, M 2,
    // chosen for a CPU backend posing as that device) runs as itself on both layouts and
    // as its plain twin on x as it is alone: the same bits.
    let g2 = Geometry::new(64, 14336, 256, 2, 12, Code::OneMad).unwrap();
    let posing = CountingUploads {
        posing_as: Some(("cuda", "nvidia-h200")),
        ..CountingUploads::new(&cpu, &g2)
    };
    let w2 = random_matrix(g2, 121);
    let p = trellis::families::reduce::ReduceProblem::of_samples(&w2, DType::Bf16, 2, 8).unwrap();
    let chosen = trellis::tune::select_for::<trellis::families::reduce::ReduceFamily, _>(
        &posing,
        &p,
        Tier::Exact,
    );
    assert!(chosen.variant.interleaved_x, "{}", chosen.variant);
    let r2 = ops::Resident::new(&posing, &w2).unwrap();
    let x2 = random_x(DType::Bf16, 2, 14336, 122);
    let want = reference::reduce(&w2, &x2).unwrap();
    for xd in [
        DeviceActivations::upload(&posing, &x2).unwrap(),
        DeviceActivations::from_tensor(ops::upload_activations(&posing, &x2).unwrap()).unwrap(),
    ] {
        let y = r2.matvec_device(&xd, Tier::Exact).unwrap();
        assert!(y.download(&posing).unwrap().bits_eq(&want));
    }
    // What the device path cannot take, each named.
    let x = random_x(DType::Bf16, 2, 1024, 117);
    let xd = DeviceActivations::upload(&b, &x).unwrap();
    let err = |r: trellis::Result<DeviceActivations<_>>| r.err().unwrap().to_string();
    let nine = DeviceActivations::upload(&b, &random_x(DType::Bf16, 9, 1024, 118)).unwrap();
    let e = err(rw.matvec_device(&nine, Tier::Exact));
    assert!(
        e.contains("M") && e.contains("9") && e.contains("1..=8"),
        "{e}"
    );
    let narrow = DeviceActivations::upload(&b, &random_x(DType::Bf16, 1, 512, 119)).unwrap();
    let e = err(rw.matvec_device(&narrow, Tier::Exact));
    assert!(
        e.contains("tensor `x` has shape [1, 512], expected [1, 1024]"),
        "{e}"
    );
    let none = DeviceActivations::from_tensor(
        b.alloc(&trellis::kernel::TensorSpec {
            name: "x",
            elem: Elem::Bf16,
            shape: vec![0, 1024],
        })
        .unwrap(),
    )
    .unwrap();
    let e = err(rw.matvec_device(&none, Tier::Exact));
    assert!(e.contains("M = 0"), "{e}");
    let g32 = Geometry::new(32, 1024, 32, 3, 12, Code::OneMad).unwrap();
    let up32 = random_matrix(g32, 120);
    let u32t = ops::Resident::new(&b, &up32).unwrap();
    let e = err(rw.gate_up_device(&u32t, &xd, Tail::Exact, Tier::Exact));
    assert!(e.contains("up.T") && e.contains("one T"), "{e}");
    // Gate and up resident on two backends.
    let other = CountingUploads::new(&cpu, &g);
    let u_elsewhere = ops::Resident::new(&other, &u).unwrap();
    let e = err(rw.gate_up_device(&u_elsewhere, &xd, Tail::Exact, Tier::Exact));
    assert!(e.contains("up's backend"), "{e}");
    // Weights past T's range: refused as the host facade refuses them.
    let gl = Geometry::new(2, 1024, 256, 2, 6, Code::Lut).unwrap();
    let mut lut = vec![1.0f32; 64];
    lut[63] = 1e38; // state 63: all ones
    let n = gl.codes_shape().iter().product::<usize>();
    let big = QuantizedMatrix::new(
        gl,
        vec![u32::MAX; n],
        vec![1.0; 2],
        ScaleDType::F32,
        Some(lut),
    )
    .unwrap();
    let rbig = ops::Resident::new(&b, &big).unwrap();
    let xh = DeviceActivations::upload(&b, &random_x(DType::F16, 1, 1024, 123)).unwrap();
    let e = err(rbig.matvec_device(&xh, Tier::Exact));
    assert!(e.contains("w[0, 0]") && e.contains("overflows f16"), "{e}");
    let words = b.upload(Elem::U32, &[2, 1024], &[0; 8192]).unwrap();
    let e = DeviceActivations::<CountingUploads>::from_tensor(words)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("activations x dtype") && e.contains("u32"),
        "{e}"
    );
    let flat = b.upload(Elem::F32, &[1024], &[0; 4096]).unwrap();
    let e = DeviceActivations::<CountingUploads>::from_tensor(flat)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("activations x shape") && e.contains("[M, C]"),
        "{e}"
    );
    // Uploaded for an interleaved variant alone: x as it is is read back through that
    // copy.
    let v = Variant {
        interleaved_x: true,
        ..Variant::default()
    };
    let only = DeviceActivations::upload_for(&b, &x, &v).unwrap();
    assert!(only.has_interleaved() && only.tensor().is_none());
    assert!(only.download(&b).unwrap().bits_eq(&x));
}

/// The fast tier on activations on the device: a kernel prescales x as the host does
/// (`Prescale`: the same bits as `Prescaled`, subnormal samples included), and
/// `matvec_device` gives `Resident::matvec`'s bits with no upload a call; a sample the
/// host's operand check must read is flagged, brought to the host, and run there where
/// it is held. What the fast device path cannot take is named.
#[test]
fn device_activations_run_the_fast_tier() {
    use trellis::ops::DeviceActivations;
    let cpu = CpuBackend::new().unwrap();
    // The prescale kernel beside the host's, per dtype and output type (the CPU runs a
    // group as one thread: every width reads x in spans of its share).
    for cols in [32, 64, 5152] {
        host_prescaled::prescale_kernel_matches(&cpu, cols);
    }
    // The facade's fast tier on the device: the host facade's bits, no upload a call.
    for (code, l) in [(Code::OneMad, 12), (Code::Lut, 6)] {
        let g = Geometry::new(48, 1024, 256, 3, l, code).unwrap();
        let w = random_matrix(g, 132);
        let b = CountingUploads::new(&cpu, &g);
        let rw = ops::Resident::new(&b, &w).unwrap();
        for (dtype, m, seed) in [
            (DType::Bf16, 1, 133),
            (DType::F16, 5, 134),
            (DType::F32, 16, 135),
        ] {
            let x = random_x(dtype, m, 1024, seed);
            let xd = DeviceActivations::upload(&b, &x).unwrap();
            rw.matvec_device(&xd, Tier::Fast).unwrap(); // the matrix's table and power, once
            b.all.set(0);
            let y = rw.matvec_device(&xd, Tier::Fast).unwrap();
            assert_eq!(
                b.all.get(),
                0,
                "uploads in a fast device call, {code:?} {dtype} M {m}"
            );
            assert_eq!((y.samples(), y.cols(), y.dtype()), (m, 48, dtype));
            let want = rw.matvec(&x, Tier::Fast).unwrap();
            assert!(
                y.download(&b).unwrap().bits_eq(&want),
                "{code:?} {dtype} M {m}"
            );
            // A fused gate/up pair (up of another k: the mixed-k kernel), both tails.
            // Up's table 2^20 smaller than gate's (lut): the powers go in their order.
            let gu = Geometry::new(48, 1024, 256, 2, l, code).unwrap();
            let mut u = random_matrix(gu, seed + 50);
            if let Some(lut) = &mut u.lut {
                lut.iter_mut().for_each(|v| *v *= 2f32.powi(-20));
            }
            let ru = ops::Resident::new(&b, &u).unwrap();
            for tail in [Tail::Exact, Tail::Native] {
                let mid = rw.gate_up_device(&ru, &xd, tail, Tier::Fast).unwrap();
                let want = rw.gate_up(&ru, &x, tail, Tier::Fast).unwrap();
                assert!(
                    mid.download(&b).unwrap().bits_eq(&want),
                    "gate_up {tail:?} {code:?} {dtype} M {m}"
                );
            }
        }
    }
    // The H200's winners (chosen for a CPU backend posing as that device) take x in f16
    // (`x_f16`): the prescale writes that copy, with the host's rounding.
    let g = Geometry::new(48, 1024, 256, 3, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 142);
    let posing = CountingUploads {
        posing_as: Some(("cuda", "nvidia-h200")),
        ..CountingUploads::new(&cpu, &g)
    };
    let rw = ops::Resident::new(&posing, &w).unwrap();
    for (dtype, m, seed) in [
        (DType::Bf16, 1, 143),
        (DType::F32, 3, 144),
        (DType::Bf16, 16, 145),
    ] {
        let p = trellis::families::reduce::ReduceProblem::of_samples(&w, dtype, m, 16).unwrap();
        let chosen = trellis::tune::select_for::<trellis::families::reduce_mma::ReduceMmaFamily, _>(
            &posing,
            &p,
            Tier::Fast,
        );
        assert_eq!(
            chosen.variant.x_f16,
            dtype == DType::Bf16,
            "{dtype} M {m}: {}",
            chosen.variant
        );
        // M 16's winner splits the columns (split-K partials in the scratch).
        assert_eq!(chosen.variant.k_split > 1, m == 16, "{}", chosen.variant);
        // Two x of one shape back to back: the second call reuses the first's scratch,
        // and the first's y keeps its bits.
        let (x, x2) = (
            random_x(dtype, m, 1024, seed),
            random_x(dtype, m, 1024, seed + 9),
        );
        let (xd, xd2) = (
            DeviceActivations::upload(&posing, &x).unwrap(),
            DeviceActivations::upload(&posing, &x2).unwrap(),
        );
        let y = rw.matvec_device(&xd, Tier::Fast).unwrap();
        let y2 = rw.matvec_device(&xd2, Tier::Fast).unwrap();
        for (y, x) in [(y, &x), (y2, &x2)] {
            let want = rw.matvec(x, Tier::Fast).unwrap();
            assert!(y.download(&posing).unwrap().bits_eq(&want), "{dtype} M {m}");
        }
    }
    let g = Geometry::new(64, 1024, 256, 3, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 136);
    let b = CountingUploads::new(&cpu, &g);
    let rw = ops::Resident::new(&b, &w).unwrap();
    // A sample with a tiny value (flagged, read on the host, not held: the device runs
    // it) and one whose largest is below 2^-113 (held: the call runs on the host).
    for (held, dtype) in [
        (false, DType::Bf16),
        (true, DType::Bf16),
        (true, DType::F32),
    ] {
        let x = flagged::with_flagged_sample(random_x(dtype, 3, 1024, 137), held);
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        rw.matvec_device(&xd, Tier::Fast).unwrap();
        b.all.set(0);
        let y = rw.matvec_device(&xd, Tier::Fast).unwrap();
        // Held: y comes up from the host (both its layouts).
        assert_eq!(b.all.get() > 0, held, "uploads, held {held} {dtype}");
        let want = rw.matvec(&x, Tier::Fast).unwrap();
        assert!(
            y.download(&b).unwrap().bits_eq(&want),
            "held {held} {dtype}"
        );
        // Flagged and not held, the kernels run on x prescaled on the device (the host
        // facade's x as well): the bits of x prescaled by the host.
        if !held {
            let host = host_prescaled::matvec(&b, &w, &x);
            assert!(want.bits_eq(&host), "{dtype}: host prescaled");
        }
    }
    // A chain: the fast tier's y is the next layer's x.
    let x = random_x(DType::Bf16, 2, 1024, 138);
    let xd = DeviceActivations::upload(&b, &x).unwrap();
    let down = random_matrix(Geometry::new(40, 64, 32, 2, 12, Code::OneMad).unwrap(), 139);
    let rd = ops::Resident::new(&b, &down).unwrap();
    let z = rd
        .matvec_device(&rw.matvec_device(&xd, Tier::Fast).unwrap(), Tier::Fast)
        .unwrap();
    let want = rd
        .matvec(&rw.matvec(&x, Tier::Fast).unwrap(), Tier::Fast)
        .unwrap();
    assert!(z.download(&b).unwrap().bits_eq(&want));
    // A matrix whose every sample f16 operands cannot serve (a row scale below 2^-60):
    // f16 x too runs on the host, as the host facade runs it.
    let gt = Geometry::new(128, 4096, 256, 3, 12, Code::OneMad).unwrap();
    let wt = random_matrix(gt, 148);
    let mut scales = wt.scales.clone();
    scales[3] = 2f32.powi(-61);
    let tiny_scale = QuantizedMatrix::new(gt, wt.codes, scales, ScaleDType::F32, None).unwrap();
    let rt = ops::Resident::new(&b, &tiny_scale).unwrap();
    for dtype in [DType::F16, DType::Bf16] {
        let x = random_x(dtype, 16, 4096, 146);
        let y = rt.matvec_device(&DeviceActivations::upload(&b, &x).unwrap(), Tier::Fast);
        let want = rt.matvec(&x, Tier::Fast).unwrap();
        assert!(y.unwrap().download(&b).unwrap().bits_eq(&want), "{dtype}");
    }
    // The same matrix in a fused pair, as gate and as up.
    let plain = random_matrix(gt, 150);
    let rp = ops::Resident::new(&b, &plain).unwrap();
    let x = random_x(DType::F16, 16, 4096, 151);
    let xd = DeviceActivations::upload(&b, &x).unwrap();
    for (gate, up) in [(&rt, &rp), (&rp, &rt)] {
        let mid = gate
            .gate_up_device(up, &xd, Tail::Exact, Tier::Fast)
            .unwrap();
        let want = gate.gate_up(up, &x, Tail::Exact, Tier::Fast).unwrap();
        assert!(
            mid.download(&b).unwrap().bits_eq(&want),
            "a tiny scale in a pair"
        );
    }
    // Values not finite: a NaN (no flag) gives non-finite outputs, as the exact tier's
    // device path does; an infinity flags its sample, whose x the host reads and refuses.
    let mut data = random_x(DType::Bf16, 2, 1024, 147).data;
    data[1024 + 3] = f32::NAN;
    let x = Activations::from_f32(DType::Bf16, 2, 1024, data.clone()).unwrap();
    let y = rw
        .matvec_device(&DeviceActivations::upload(&b, &x).unwrap(), Tier::Fast)
        .unwrap()
        .download(&b)
        .unwrap();
    // Sample 0 within SPEC 7 of its real sums; the NaN reaches every row of sample 1.
    let x0 = Activations::from_f32(DType::Bf16, 1, 1024, data[..1024].to_vec()).unwrap();
    let y0 = Activations::from_f32(y.dtype, 1, y.cols, y.row(0).to_vec()).unwrap();
    trellis::check::fast_reduce(&y0, &trellis::check::RealSums::of(&w, &x0).unwrap()).unwrap();
    assert!(y.row(1).iter().all(|v| v.is_nan()), "{:?}", y.row(1));
    data[1024 + 3] = f32::INFINITY;
    let x = Activations::from_f32(DType::Bf16, 2, 1024, data).unwrap();
    let e = rw
        .matvec_device(&DeviceActivations::upload(&b, &x).unwrap(), Tier::Fast)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("x[1, 3]") && e.contains("finite"), "{e}");
    // Refused, named: M past one fast launch.
    let err = |r: trellis::Result<DeviceActivations<_>>| r.err().unwrap().to_string();
    let seventeen = DeviceActivations::upload(&b, &random_x(DType::Bf16, 17, 1024, 140)).unwrap();
    let e = err(rw.matvec_device(&seventeen, Tier::Fast));
    assert!(e.contains("17") && e.contains("1..=16"), "{e}");
    // Into outputs made once: the fast tier's bits in y and mid, for an ordinary x, a
    // flagged one and a held one (whose result the host computes and writes into y: a
    // copy to the device, counted); the fused
    // pair's scratch beside the matvec's (one resident alternating the two); an output
    // of another shape or type named.
    let u = random_matrix(g, 141);
    let ru = ops::Resident::new(&b, &u).unwrap();
    let out = |name, elem, m| {
        b.alloc(&trellis::kernel::TensorSpec {
            name,
            elem,
            shape: vec![m, 64],
        })
        .unwrap()
    };
    let (mut y, mut mid) = (out("y", Elem::Bf16, 3), out("mid", Elem::Bf16, 3));
    for (flagged, held, seed) in [(false, false, 152), (true, false, 153), (true, true, 154)] {
        let x = random_x(DType::Bf16, 3, 1024, seed);
        let x = match flagged {
            true => flagged::with_flagged_sample(x, held),
            false => x,
        };
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        for call in 0..2 {
            b.all.set(0);
            rw.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
            rw.gate_up_device_into(&ru, &xd, &mut mid, Tail::Native, Tier::Fast)
                .unwrap();
            // The second calls upload nothing, unless a sample is held (the host's
            // call, and its result written).
            if call == 1 {
                assert_eq!(b.all.get() > 0, held, "uploads, held {held}");
            }
        }
        let want = rw.matvec(&x, Tier::Fast).unwrap();
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(got.bits_eq(&want), "into y, flagged {flagged} held {held}");
        let want = rw.gate_up(&ru, &x, Tail::Native, Tier::Fast).unwrap();
        let got = trellis::family::download(&b, &mid).unwrap();
        assert!(
            got.bits_eq(&want),
            "into mid, flagged {flagged} held {held}"
        );
    }
    let xd = DeviceActivations::upload(&b, &random_x(DType::Bf16, 3, 1024, 155)).unwrap();
    for (mut wrong, needle) in [
        (
            out("y", Elem::Bf16, 2),
            "has shape [2, 64], expected [3, 64]",
        ),
        (out("y", Elem::F16, 3), "has dtype f16, expected bf16"),
    ] {
        let e = rw
            .matvec_device_into(&xd, &mut wrong, Tier::Fast)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
        let e = rw
            .gate_up_device_into(&ru, &xd, &mut wrong, Tail::Exact, Tier::Fast)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
    // x uploaded in its lane-interleaved layout alone (for a SIMT variant that reads
    // it): read back through that copy, the call runs as the host facade's.
    let x = random_x(DType::Bf16, 2, 1024, 156);
    let interleaved = ops::Variant {
        interleaved_x: true,
        ..ops::Variant::default()
    };
    let xi = DeviceActivations::upload_for(&b, &x, &interleaved).unwrap();
    assert!(xi.tensor().is_none() && xi.download(&b).unwrap().bits_eq(&x));
    let y = rw.matvec_device(&xi, Tier::Fast).unwrap();
    let want = rw.matvec(&x, Tier::Fast).unwrap();
    assert!(
        y.download(&b).unwrap().bits_eq(&want),
        "interleaved x alone"
    );
    let mut y = out("y", Elem::Bf16, 2);
    rw.matvec_device_into(&xi, &mut y, Tier::Fast).unwrap();
    let got = trellis::family::download(&b, &y).unwrap();
    assert!(got.bits_eq(&want), "interleaved x alone, into y");
    rw.gate_up_device_into(&ru, &xi, &mut y, Tail::Exact, Tier::Fast)
        .unwrap();
    let want = rw.gate_up(&ru, &x, Tail::Exact, Tier::Fast).unwrap();
    let got = trellis::family::download(&b, &y).unwrap();
    assert!(got.bits_eq(&want), "interleaved x alone, into mid");
    // A call refused (an infinity in x, read on the host; y's elements then
    // unspecified), and the next calls into y run as ever.
    let mut data = random_x(DType::Bf16, 2, 1024, 157).data;
    data[3] = f32::INFINITY;
    let x = Activations::from_f32(DType::Bf16, 2, 1024, data).unwrap();
    let xd = DeviceActivations::upload(&b, &x).unwrap();
    let e = rw.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap_err();
    assert!(e.to_string().contains("x[0, 3]"), "{e}");
    for seed in [158, 159] {
        let x = random_x(DType::Bf16, 2, 1024, seed);
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        rw.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(
            got.bits_eq(&rw.matvec(&x, Tier::Fast).unwrap()),
            "seed {seed}"
        );
    }
    // A matrix whose every sample f16 operands cannot serve, into y made once.
    for dtype in [DType::F16, DType::Bf16] {
        let x = random_x(dtype, 4, 4096, 160);
        let mut y = b
            .alloc(&trellis::kernel::TensorSpec {
                name: "y",
                elem: dtype.into(),
                shape: vec![4, 128],
            })
            .unwrap();
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        rt.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
        let got = trellis::family::download(&b, &y).unwrap();
        assert!(got.bits_eq(&rt.matvec(&x, Tier::Fast).unwrap()), "{dtype}");
    }
    // A flagged sample and a held one through the fused pair too.
    for held in [false, true] {
        let x = flagged::with_flagged_sample(random_x(DType::Bf16, 3, 1024, 149), held);
        let xd = DeviceActivations::upload(&b, &x).unwrap();
        rw.gate_up_device(&ru, &xd, Tail::Exact, Tier::Fast)
            .unwrap();
        b.all.set(0);
        let mid = rw
            .gate_up_device(&ru, &xd, Tail::Exact, Tier::Fast)
            .unwrap();
        // Held: mid comes up from the host; else nothing is uploaded.
        assert_eq!(b.all.get() > 0, held, "gate_up uploads, held {held}");
        let want = rw.gate_up(&ru, &x, Tail::Exact, Tier::Fast).unwrap();
        assert!(
            mid.download(&b).unwrap().bits_eq(&want),
            "gate_up held {held}"
        );
    }
}

/// The fast device path keeps its buffers for a few keys: one resident cycling through
/// more (M 1..6 and 16, as matvec, as gate in a pair, as up in the reversed pair) gets
/// its bits at each, twice round. And on the simulator, whose `write` is its own, a held
/// sample's result is written into y.
#[test]
fn fast_device_calls_through_more_keys_than_are_kept() {
    use trellis::ops::DeviceActivations;
    let spec = |m| trellis::kernel::TensorSpec {
        name: "y",
        elem: Elem::Bf16,
        shape: vec![m, 64],
    };
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(64, 1024, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 161), random_matrix(g, 162));
    let (rw, ru) = (
        ops::Resident::new(&cpu, &w).unwrap(),
        ops::Resident::new(&cpu, &u).unwrap(),
    );
    for round in 0..2 {
        for m in [1, 2, 3, 4, 5, 6, 16] {
            let x = random_x(DType::Bf16, m, 1024, 163 + m as u64 + 20 * round);
            let xd = DeviceActivations::upload(&cpu, &x).unwrap();
            let (mut y, mut mid) = (cpu.alloc(&spec(m)).unwrap(), cpu.alloc(&spec(m)).unwrap());
            rw.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
            let got = trellis::family::download(&cpu, &y).unwrap();
            assert!(got.bits_eq(&rw.matvec(&x, Tier::Fast).unwrap()), "M {m}");
            for (gate, up) in [(&rw, &ru), (&ru, &rw)] {
                gate.gate_up_device_into(up, &xd, &mut mid, Tail::Exact, Tier::Fast)
                    .unwrap();
                let want = gate.gate_up(up, &x, Tail::Exact, Tier::Fast).unwrap();
                let got = trellis::family::download(&cpu, &mid).unwrap();
                assert!(got.bits_eq(&want), "pair, M {m}");
            }
        }
    }
    let sim = trellis::backend::metal_sim::MetalSimBackend::new().unwrap();
    let rs = ops::Resident::new(&sim, &w).unwrap();
    let mut y = sim.alloc(&spec(3)).unwrap();
    for held in [false, true] {
        let x = flagged::with_flagged_sample(random_x(DType::Bf16, 3, 1024, 190), held);
        let xd = DeviceActivations::upload(&sim, &x).unwrap();
        rs.matvec_device_into(&xd, &mut y, Tier::Fast).unwrap();
        let got = trellis::family::download(&sim, &y).unwrap();
        assert!(
            got.bits_eq(&rs.matvec(&x, Tier::Fast).unwrap()),
            "held {held}"
        );
    }
}

/// Resident matrices serve calls from several threads at once (a server's workers share
/// one model's), each with the plain call's bits; they can live in a struct beside the
/// matrices' other users.
#[test]
fn resident_matrices_serve_several_threads() {
    struct Layer<'a> {
        gate: ops::Resident<'a, CpuBackend>,
        up: ops::Resident<'a, CpuBackend>,
    }
    fn shared<T: Send + Sync>() {}
    shared::<Layer<'static>>();
    shared::<ops::Resident<'static, trellis::backend::metal_sim::MetalSimBackend>>();
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(16, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 111), random_matrix(g, 112));
    let layer = Layer {
        gate: ops::Resident::new(&cpu, &w).unwrap(),
        up: ops::Resident::new(&cpu, &u).unwrap(),
    };
    let xs: Vec<_> = (0..4)
        .map(|i| random_x(DType::Bf16, 1 + i, 512, 113 + i as u64))
        .collect();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let layer = &layer;
                let tier = [Tier::Exact, Tier::Fast][i % 2];
                s.spawn(move || {
                    let y = layer.gate.matvec(x, tier).unwrap();
                    let mid = layer.gate.gate_up(&layer.up, x, Tail::Exact, tier).unwrap();
                    (tier, y, mid)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (x, (tier, y, mid)) in xs.iter().zip(results) {
        assert!(
            y.bits_eq(&ops::matvec(&cpu, &w, x, tier).unwrap()),
            "{tier:?}"
        );
        let want = ops::gate_up(&cpu, &w, &u, x, Tail::Exact, tier).unwrap();
        assert!(mid.bits_eq(&want), "{tier:?} M {}", x.rows);
    }
    // The fast tier on the device from several threads at once, all of one key (M 2):
    // the calls share the gate's scratch pool, each call with buffers of its own while
    // it runs.
    std::thread::scope(|s| {
        for seed in 117..121 {
            let (layer, cpu) = (&layer, &cpu);
            s.spawn(move || {
                let x = random_x(DType::Bf16, 2, 512, seed);
                let xd = ops::DeviceActivations::upload(cpu, &x).unwrap();
                let want = layer.gate.matvec(&x, Tier::Fast).unwrap();
                let (up, tail) = (&layer.up, Tail::Exact);
                let want_mid = layer.gate.gate_up(up, &x, tail, Tier::Fast).unwrap();
                for _ in 0..6 {
                    let y = layer.gate.matvec_device(&xd, Tier::Fast).unwrap();
                    assert!(y.download(cpu).unwrap().bits_eq(&want), "seed {seed}");
                    let mid = layer.gate.gate_up_device(up, &xd, tail, Tier::Fast);
                    let mid = mid.unwrap().download(cpu).unwrap();
                    assert!(mid.bits_eq(&want_mid), "seed {seed}");
                }
            });
        }
    });
    // A square matrix's calls on host data from several threads at once, on the Metal
    // simulator: x and y have one type and shape there, and the calls' kept tensors
    // come back in any order; an upload's slack (filled, to catch reads past the end)
    // must never come back as an output's (checked clear after every launch).
    let sim = trellis::backend::metal_sim::MetalSimBackend::new().unwrap();
    let sq = random_matrix(
        Geometry::new(256, 256, 256, 2, 12, Code::OneMad).unwrap(),
        121,
    );
    let rs = ops::Resident::new(&sim, &sq).unwrap();
    std::thread::scope(|s| {
        for seed in 122..126 {
            let (rs, sq) = (&rs, &sq);
            s.spawn(move || {
                let x = random_x(DType::Bf16, 1, 256, seed);
                let want = reference::reduce(sq, &x).unwrap();
                for round in 0..12 {
                    let y = rs.matvec(&x, Tier::Exact).unwrap();
                    assert!(y.bits_eq(&want), "seed {seed} round {round}");
                }
            });
        }
    });
}

/// A resident made of a shared backend and matrix borrows nothing: it lives in an `Arc`
/// that spawned threads (`'static`) share, with the plain calls' bits.
#[test]
fn a_shared_resident_serves_spawned_threads() {
    use std::sync::Arc;
    let cpu = Arc::new(CpuBackend::new().unwrap());
    let g = Geometry::new(16, 512, 256, 3, 12, Code::OneMad).unwrap();
    let w = Arc::new(random_matrix(g, 121));
    let r = Arc::new(ops::Resident::shared(cpu.clone(), w.clone()).unwrap());
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let r = r.clone();
            std::thread::spawn(move || {
                let x = random_x(DType::Bf16, 2 + i, 512, 122 + i as u64);
                let tier = [Tier::Exact, Tier::Fast][i % 2];
                let y = r.matvec(&x, tier).unwrap();
                (x, tier, y)
            })
        })
        .collect();
    for h in handles {
        let (x, tier, y) = h.join().unwrap();
        assert!(
            y.bits_eq(&ops::matvec(&*cpu, &w, &x, tier).unwrap()),
            "{tier:?}"
        );
    }
    // A shared resident and a borrowed one of the same backend pair for gate_up.
    let u = random_matrix(g, 125);
    let ru = ops::Resident::new(&*cpu, &u).unwrap();
    let x = random_x(DType::Bf16, 3, 512, 126);
    let mid = r.gate_up(&ru, &x, Tail::Exact, Tier::Exact).unwrap();
    let want = ops::gate_up(&*cpu, &w, &u, &x, Tail::Exact, Tier::Exact).unwrap();
    assert_eq!(mid.data, want.data);
    assert_eq!(r.matrix(), &*w);
}

/// Public fields and free functions set by hand: each misfit is an error naming what is
/// wrong, before any kernel (a probe of the API found each of these a panic, a wrong
/// result or a file that would not read back).
#[test]
fn hand_set_fields_are_errors_not_panics_or_wrong_results() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(8, 512, 256, 2, 12, Code::OneMad).unwrap();
    let w = random_matrix(g, 91);
    let x = random_x(DType::Bf16, 2, 512, 92);
    // T = 0 on the fast tier (its layout divides by T before its check).
    let mut t0 = w.clone();
    t0.geometry.t = 0;
    for tier in [Tier::Exact, Tier::Fast] {
        let e = ops::matvec(&cpu, &t0, &x, tier).unwrap_err().to_string();
        assert!(e.contains("T = 0"), "{tier:?}: {e}");
    }
    // An f16-stored scale that is no f16 value (the kernels would read another number).
    let mut off = w.clone();
    off.scales[3] = 0.1;
    for e in [
        off.validate().unwrap_err(),
        ops::matvec(&cpu, &off, &x, Tier::Exact).unwrap_err(),
        reference::reduce(&off, &x).unwrap_err(),
    ] {
        assert!(e.to_string().contains("scales[3] = 0.1"), "{e}");
    }
    // An activation that is no value of its dtype (4097 lies between bf16's 4096 and
    // 4112), named with its value by the facade on both tiers and by the reference.
    let mut bad = x.clone();
    bad.data[5] = 4097.0;
    for tier in [Tier::Exact, Tier::Fast] {
        let e = ops::matvec(&cpu, &w, &bad, tier).unwrap_err().to_string();
        assert!(
            e.contains("x[0, 5] = 4097") && e.contains("not a bf16 value"),
            "{tier:?}: {e}"
        );
    }
    let e = reference::reduce(&w, &bad).unwrap_err().to_string();
    assert!(
        e.contains("x[0, 5] = 4097") && e.contains("not a bf16 value"),
        "{e}"
    );
    // A table of an L outside SPEC 1, and a lut of the wrong length through value_table.
    for (l, e) in [
        (64, Code::OneMad.table(64, None).unwrap_err()),
        (32, Code::OneMad.table(32, None).unwrap_err()),
        (40, trellis::encode::gaussian_lut(40, 1).unwrap_err()),
        (1, Code::Mcg.table(1, None).unwrap_err()),
    ] {
        let e = e.to_string();
        assert!(
            e.contains(&format!("L = {l}")) && e.contains("2..=16"),
            "{e}"
        );
    }
    let mut lut = random_matrix(Geometry::new(8, 512, 256, 2, 8, Code::Lut).unwrap(), 93);
    lut.lut.as_mut().unwrap().pop();
    let e = lut.value_table().unwrap_err().to_string();
    assert!(
        e.contains("lut length = 255") && e.contains("2^L = 256"),
        "{e}"
    );
    // The exact tail of mismatched projections: `u` named with its shape and g's.
    let y = reference::reduce(&w, &x).unwrap();
    let one = Activations::from_f32(DType::Bf16, 1, 8, vec![0.5; 8]).unwrap();
    let e = reference::swiglu_tail(&y, &one).unwrap_err().to_string();
    assert!(
        e.contains("u = [1, 8] bf16") && e.contains("must match g: [2, 8] bf16"),
        "{e}"
    );
    // A hand-set L far out of range through `expand` with a staged table: named as L
    // (the table's size came first and overflowed: a panic in a debug build).
    let shared = Variant {
        repr: Representation::SharedTable,
        ..Variant::default()
    };
    for l in [62, 64] {
        let mut big = w.clone();
        big.geometry.l = l;
        let e = ops::expand(&cpu, &big, DType::Bf16, shared)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("L = {l}")), "{e}");
    }
    // A hand-set geometry of no columns, at an M past one launch: named as such, not as M.
    let mut c0 = w.clone();
    c0.geometry.cols = 0;
    let x20 = random_x(DType::Bf16, 20, 512, 94);
    for tier in [Tier::Exact, Tier::Fast] {
        let e = ops::matvec(&cpu, &c0, &x20, tier).unwrap_err().to_string();
        assert!(e.contains("cols = 0"), "{tier:?}: {e}");
    }
    // A finite value past the dtype's range is refused where it is made, not turned into
    // an infinity the caller never wrote.
    let e = Activations::from_f32(DType::F16, 1, 2, vec![1.0, 1e5])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x[0, 1] = 100000") && e.contains("overflows f16"),
        "{e}"
    );
    // Activations whose values are none of their dtype's are not written rounded.
    let dir = tempfile::tempdir().unwrap();
    let mut off_y = y.clone();
    off_y.data[1] = 0.1;
    let e = trellis::io::write_activations(&dir.path().join("y.safetensors"), "y", &off_y)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tensor `y` [0, 1] = 0.1") && e.contains("is no bf16 value"),
        "{e}"
    );
    assert!(!dir.path().join("y.safetensors").exists());
    // Buckets of sizes past 2^63 stay in the top one.
    assert_eq!(trellis::tune::Bucket::of(usize::MAX, 1).rows, 1 << 63);
}

/// x given as `[C, M]` (transposed) is named as such, with its shape, by the facade on
/// both tiers (before any kernel; M = 512 would be chunked) and by the reference; an x
/// whose columns are simply wrong keeps the plain shape error.
#[test]
fn a_transposed_x_is_named() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(8, 512, 256, 2, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 95), random_matrix(g, 96));
    let xt = random_x(DType::Bf16, 512, 2, 97);
    let transposed = |e: trellis::Error| {
        let e = e.to_string();
        assert!(
            e.contains("x shape = [512, 2]") && e.contains("C = 512") && e.contains("transposed"),
            "{e}"
        );
    };
    for tier in [Tier::Exact, Tier::Fast] {
        transposed(ops::matvec(&cpu, &w, &xt, tier).unwrap_err());
        transposed(ops::gate_up(&cpu, &w, &u, &xt, Tail::Exact, tier).unwrap_err());
    }
    transposed(reference::reduce(&w, &xt).unwrap_err());
    let narrow = random_x(DType::Bf16, 2, 256, 98);
    let e = ops::matvec(&cpu, &w, &narrow, Tier::Exact)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`x` has shape [2, 256], expected [2, 512]") && !e.contains("transposed"),
        "{e}"
    );
}

/// The writer refuses a matrix that would not read back, and a tensor whose shape does not
/// hold its bytes, naming it; no file is left.
#[test]
fn the_writer_names_what_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let mut w = random_matrix(Geometry::new(8, 512, 256, 2, 12, Code::OneMad).unwrap(), 94);
    w.scales[1] = f32::NAN;
    let e = trellis::io::write_quantized(&path, "m", &w)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("w.safetensors") && e.contains("matrix `m`") && e.contains("scales[1] = NaN"),
        "{e}"
    );
    let mut out = trellis::io::Writer::new();
    out.f32("t", vec![3, 2], &[0.0; 5]);
    let e = out.write(&path).unwrap_err().to_string();
    assert!(
        e.contains("tensor `t` shape = [3, 2]") && e.contains("its 20 bytes"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// SPEC 6 gives gate and up their own geometry but rows and cols: a pair of different
/// block sizes T, which the fused kernels do not take (`GateUpProblem::of` says so, naming
/// `up.T`), runs through the facade as two `reduce` launches and the exact tail: the
/// reference's bits in the exact tier (a native tail within its tolerance, a `Resident`
/// pair and an M past one launch the same), SPEC 7's bound in the fast tier.
#[test]
fn gate_up_of_two_block_sizes_runs_unfused() {
    use trellis::check::{self, RealSums};
    use trellis::families::gate_up::GateUpFamily;
    let b = CpuBackend::new().unwrap();
    let gate = random_matrix(
        Geometry::new(40, 768, 256, 2, 12, Code::OneMad).unwrap(),
        91,
    );
    let up = random_matrix(
        Geometry::new(40, 768, 96, 3, 10, Code::ThreeInst).unwrap(),
        92,
    );
    let x = random_x(DType::Bf16, 3, 768, 93);
    let msg = GateUpFamily::problem_of(&gate, &up, &x, Tail::Exact)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("up.T = 96") && msg.contains("gate has 256"),
        "{msg}"
    );
    let want = reference::gate_up(&gate, &up, &x).unwrap();
    let got = ops::gate_up(&b, &gate, &up, &x, Tail::Exact, Tier::Exact).unwrap();
    assert!(got.bits_eq(&want), "exact tier, unfused");
    let (g, u) = (
        reference::reduce(&gate, &x).unwrap(),
        reference::reduce(&up, &x).unwrap(),
    );
    // The native tail runs on the host, with the host's exp (as the cpu backend's).
    let native = ops::gate_up(&b, &gate, &up, &x, Tail::Native, Tier::Exact).unwrap();
    check::native_gate_up(&native, &want, &g, &u).unwrap();
    let host: Vec<f32> = (g.data.iter().zip(&u.data))
        .map(|(&g, &u)| {
            let t = DType::Bf16;
            t.round(t.round(g * (1.0 / (1.0 + (-g).exp()))) * u)
        })
        .collect();
    assert_eq!(native.data, host, "the native tail, on the host");
    // A forced variant runs both projections as `reduce`s, and says so where it cannot.
    let scalar = Variant {
        scalar_words: true,
        ..Variant::default()
    };
    let msg = ops::gate_up_with(&b, &gate, &up, &x, Tail::Exact, scalar)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("up (a reduce: gate and up differ in T) scalar_words"),
        "{msg}"
    );
    // An up weight that overflows T is named as up's.
    let mut big = up.clone();
    big.scale_dtype = ScaleDType::F32;
    big.scales[5] = 1.0e6;
    let x16 = random_x(DType::F16, 1, 768, 96);
    let msg = ops::gate_up(&b, &gate, &big, &x16, Tail::Exact, Tier::Exact)
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("invalid up weight w[5, "), "{msg}");
    let (gr, ur) = (
        ops::Resident::new(&b, &gate).unwrap(),
        ops::Resident::new(&b, &up).unwrap(),
    );
    let x12 = random_x(DType::Bf16, 12, 768, 94);
    let got = ops::gate_up_resident(&gr, &ur, &x12, Tail::Exact, Tier::Exact).unwrap();
    assert!(
        got.bits_eq(&reference::gate_up(&gate, &up, &x12).unwrap()),
        "a resident pair, M = 12"
    );
    for (tier_x, what) in [(&x, "fast"), (&x12, "fast, resident")] {
        let got = if what == "fast" {
            ops::gate_up(&b, &gate, &up, tier_x, Tail::Exact, Tier::Fast).unwrap()
        } else {
            ops::gate_up_resident(&gr, &ur, tier_x, Tail::Exact, Tier::Fast).unwrap()
        };
        let sums = |w| RealSums::of(w, tier_x).unwrap();
        check::fast_gate_up(&got, &sums(&gate), &sums(&up), false)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    // Rows must still agree.
    let short = random_matrix(
        Geometry::new(39, 768, 96, 3, 10, Code::ThreeInst).unwrap(),
        95,
    );
    let msg = ops::gate_up(&b, &gate, &short, &x, Tail::Exact, Tier::Exact)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("up.rows = 39"), "{msg}");
}

/// A resident matrix's launch copies x to the device once, in the form its variant
/// reads: exact, the lane-interleaved copy or x (every call made and uploaded both where
/// the columns allowed, a host pass and a second copy a call); fast, x as it is. Device
/// data made for one layout and launched with a variant of the other is an error.
#[test]
fn a_launch_uploads_x_once_in_the_form_its_variant_reads() {
    let cpu = CpuBackend::new().unwrap();
    let g = Geometry::new(24, 2048, 256, 2, 12, Code::OneMad).unwrap();
    let b = CountingUploads::new(&cpu, &g);
    let (w, u) = (random_matrix(g, 131), random_matrix(g, 132));
    let x = random_x(DType::Bf16, 2, 2048, 133);
    let plain = Variant {
        x_stage: XStage::Registers,
        rows_per_group: 2,
        rows_per_simd: 2,
        ..Variant::default()
    };
    let interleaved = Variant {
        interleaved_x: true,
        ..plain
    };
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    let want = reference::reduce(&w, &x).unwrap();
    for v in [plain, interleaved] {
        b.all.set(0);
        let y = rw.matvec_with(&x, v).unwrap();
        assert_eq!(b.all.get(), 1, "{v}");
        assert!(y.bits_eq(&want), "{v}");
    }
    // Activations uploaded for one layout, launched with a variant that reads the
    // other: an error naming the field (both layouts have one shape and dtype, so no
    // tensor check would see it), not a sum over the wrong layout.
    let p = ops::reduce_problem(&w, &x).unwrap();
    let dm = std::sync::Arc::new(trellis::families::DeviceMatrix::upload(&cpu, &w).unwrap());
    for (made_for, launched) in [(plain, interleaved), (interleaved, plain)] {
        let d = trellis::families::reduce::ReduceDevice {
            w: dm.clone(),
            x: trellis::families::DeviceActivations::upload_for(&cpu, &x, &made_for).unwrap(),
        };
        let y = trellis::family::run::<trellis::families::reduce::ReduceFamily, _>(
            &cpu, &p, made_for, &d,
        )
        .unwrap();
        assert!(y[0].bits_eq(&want), "{made_for}");
        let e = trellis::family::run::<trellis::families::reduce::ReduceFamily, _>(
            &cpu, &p, launched, &d,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("interleaved_x") && e.contains("uploaded without"),
            "{e}"
        );
    }
    // The table's choice (the default on this machine's cpu), resident pairs too.
    b.all.set(0);
    let y = rw.matvec(&x, Tier::Exact).unwrap();
    assert!(y.bits_eq(&want));
    let mid = ops::gate_up_resident(&rw, &ru, &x, Tail::Exact, Tier::Exact).unwrap();
    assert!(mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()));
    assert_eq!(b.all.get(), 2, "x once for matvec, once for gate_up");
    // The fast tier: x as it is (prescaled on the device), and the prescale's powers
    // input (the matrix's, once).
    let real = trellis::check::RealSums::of(&w, &x).unwrap();
    for (call, copies) in [(1, 2), (2, 1)] {
        b.all.set(0);
        let y = rw.matvec(&x, Tier::Fast).unwrap();
        assert_eq!(b.all.get(), copies, "fast call {call}: x (and the powers)");
        let bound = trellis::check::fast_reduce(&y, &real);
        assert!(bound.is_ok(), "{bound:?}");
    }
}
