//! The `metal-sim` backend: Metal's execution model on the CPU (attributes and partial
//! threadgroups of `dispatchThreads`, barriers, lockstep simdgroups, simdgroup matrices,
//! threadgroup memory per group and uninitialized, address spaces as distinct types), and
//! planted defects in copies of rendered kernels that verification must catch.
//! The whole quick catalog runs in CI as `cargo xtask verify --backend metal-sim --quick`.

use trellis::backend::metal_sim::{MetalSimBackend, Schedule, SimTensor};
use trellis::codegen::metal::MlxDispatch;
use trellis::families::reduce::Reduce;
use trellis::families::simt::{MStrategy, Proj, Representation, Variant, XStage};
use trellis::family::{self, Family, FamilyVisitor};
use trellis::kernel::{
    Backend, Dialect, Elem, Grid, KernelSpec, Launch, LaunchParts, Rendered, TensorSpec,
};
use trellis::numerics::Tier;
use trellis::ops::{self, DeviceMatrix};
use trellis::{reference, verify, Code, DType, Error, Geometry, ScaleDType};

fn backend() -> MetalSimBackend {
    MetalSimBackend::new().expect("metal-sim backend")
}

fn spec(name: &'static str, elem: Elem, len: usize) -> TensorSpec {
    TensorSpec {
        name,
        elem,
        shape: vec![len],
    }
}

fn u32s(b: &MetalSimBackend, t: &SimTensor) -> Vec<u32> {
    b.download(t)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32s(b: &MetalSimBackend, t: &SimTensor) -> Vec<f32> {
    u32s(b, t).into_iter().map(f32::from_bits).collect()
}

fn upload_f32(b: &MetalSimBackend, v: &[f32]) -> SimTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    b.upload(Elem::F32, &[v.len()], &bytes).unwrap()
}

/// Run a hand-written MLX kernel body (header + body, as `MetalKernel::new` takes them)
/// on `grid` threads in groups of `tg`, like `MetalKernel::apply`.
#[allow(clippy::too_many_arguments)]
fn run_body(
    b: &MetalSimBackend,
    name: &str,
    header: &str,
    body: &str,
    inputs: &[(&'static str, &SimTensor)],
    outputs: &[TensorSpec],
    grid: (i32, i32, i32),
    tg: (i32, i32, i32),
) -> trellis::Result<Vec<SimTensor>> {
    let rendered = Rendered {
        dialect: Dialect::Metal,
        header: header.to_string(),
        body: body.to_string(),
    };
    let render = move |_: Dialect| Ok(rendered.clone());
    // SAFETY: the simulator bounds-checks every output write (a write past one is its
    // error: the probes test it), and each probe's id hashes its name.
    let launch = unsafe {
        Launch::from_parts(LaunchParts {
            kernel: "probe",
            id: trellis::kernel::KernelId {
                name: "probe",
                params: trellis::kernel::fnv1a(name.as_bytes()),
                detail: 0,
            },
            grid: Grid {
                groups: [1, 1, 1],
                threads: 1,
            },
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            zero_outputs: false,
            inputs: inputs
                .iter()
                .map(|(n, t)| TensorSpec {
                    name: n,
                    elem: trellis::kernel::DeviceTensor::elem(*t),
                    shape: trellis::kernel::DeviceTensor::shape(*t),
                })
                .collect(),
            outputs: outputs.to_vec(),
            render: Box::new(render),
        })
    };
    let mut outs: Vec<SimTensor> = outputs.iter().map(|s| b.alloc(s).unwrap()).collect();
    let ins: Vec<&SimTensor> = inputs.iter().map(|(_, t)| *t).collect();
    let mut refs: Vec<&mut SimTensor> = outs.iter_mut().collect();
    b.launch_dispatch(
        &launch,
        MlxDispatch {
            grid,
            thread_group: tg,
        },
        &ins,
        &mut refs,
    )?;
    Ok(outs)
}

#[test]
fn attributes_and_partial_threadgroups_follow_dispatch_threads() {
    let b = backend();
    // 70 x 3 threads in groups of 32 x 2: the edge groups hold 6 and 1 columns/rows.
    let (gx, gy) = (70u32, 3u32);
    let n = (gx * gy) as usize;
    let dummy = upload_f32(&b, &[0.0; 8]);
    let body = "
  const uint i = thread_position_in_grid.y * grid_size.x + thread_position_in_grid.x;
  device uint* o = out + i * 12u;
  o[0] = threadgroup_position_in_grid.x; o[1] = threadgroup_position_in_grid.y;
  o[2] = thread_position_in_threadgroup.x; o[3] = thread_position_in_threadgroup.y;
  o[4] = threads_per_threadgroup.x; o[5] = threads_per_threadgroup.y;
  o[6] = thread_index_in_threadgroup; o[7] = simdgroup_index_in_threadgroup;
  o[8] = thread_index_in_simdgroup; o[9] = threadgroups_per_grid.x;
  o[10] = dispatch_threads_per_threadgroup.x + 1000u * simdgroups_per_threadgroup;
  o[11] = a[0] == 0.0f ? 7u : 0u;";
    let out = run_body(
        &b,
        "attrs",
        "",
        body,
        &[("a", &dummy)],
        &[spec("out", Elem::U32, n * 12)],
        (gx as i32, gy as i32, 1),
        (32, 2, 1),
    )
    .unwrap();
    let v = u32s(&b, &out[0]);
    for y in 0..gy {
        for x in 0..gx {
            let o = &v[((y * gx + x) * 12) as usize..][..12];
            let (tx, ty) = (x / 32, y / 2);
            let (lx, ly) = (x % 32, y % 2);
            let ax = if tx == 2 { 6 } else { 32 };
            let ay = if ty == 1 { 1 } else { 2 };
            let lid = lx + ly * ax;
            let sgs = (ax * ay).div_ceil(32);
            assert_eq!(
                o,
                &[
                    tx,
                    ty,
                    lx,
                    ly,
                    ax,
                    ay,
                    lid,
                    lid / 32,
                    lid % 32,
                    3,
                    32 + 1000 * sgs,
                    7
                ],
                "thread ({x}, {y})"
            );
        }
    }
}

#[test]
fn simd_functions_run_in_lockstep_and_inactive_lanes_are_poison() {
    let b = backend();
    let input: Vec<f32> = (0..40).map(|i| (i * i % 17) as f32 + 0.25).collect();
    let a = upload_f32(&b, &input);
    // 40 threads in one group: simdgroup 1 has 8 active lanes.
    let body = "
  const uint i = thread_position_in_grid.x;
  const float v = a[i];
  out[i * 6u + 0u] = simd_shuffle_xor(v, ushort(5));
  out[i * 6u + 1u] = simd_shuffle_down(v, ushort(3));
  out[i * 6u + 2u] = simd_shuffle_up(v, ushort(2));
  out[i * 6u + 3u] = simd_broadcast(v, ushort(1));
  out[i * 6u + 4u] = simd_sum(v);
  out[i * 6u + 5u] = simd_prefix_exclusive_sum(v);";
    let out = run_body(
        &b,
        "simd",
        "",
        body,
        &[("a", &a)],
        &[spec("out", Elem::F32, 40 * 6)],
        (40, 1, 1),
        (64, 1, 1),
    )
    .unwrap();
    let v = f32s(&b, &out[0]);
    for i in 0..40usize {
        let (sg, l) = (i / 32, i % 32);
        let active = if sg == 0 { 32 } else { 8 };
        let lane = |j: usize| -> Option<f32> { (j < active).then(|| input[sg * 32 + j]) };
        let o = &v[i * 6..][..6];
        let xor = lane(l ^ 5);
        match xor {
            Some(x) => assert_eq!(o[0], x, "xor at {i}"),
            None => assert!(
                o[0].is_nan(),
                "an inactive lane reads as poison, got {}",
                o[0]
            ),
        }
        let down = if l + 3 >= 32 { lane(l) } else { lane(l + 3) };
        match down {
            Some(d) => assert_eq!(o[1], d, "down at {i}"),
            None => assert!(
                o[1].is_nan(),
                "a shuffle down from an inactive lane reads as poison, got {}",
                o[1]
            ),
        }
        let up = if l < 2 { lane(l) } else { lane(l - 2) };
        assert_eq!(o[2], up.unwrap(), "up at {i}");
        assert_eq!(o[3], lane(1).unwrap(), "broadcast at {i}");
        // Active lanes, in lane order.
        let sum = (0..active).fold(None, |s: Option<f32>, j| {
            Some(s.map_or(lane(j).unwrap(), |s| s + lane(j).unwrap()))
        });
        assert_eq!(o[4].to_bits(), sum.unwrap().to_bits(), "sum at {i}");
        let pre = (0..l).fold(0.0f32, |s, j| {
            if j == 0 {
                lane(0).unwrap()
            } else {
                s + lane(j).unwrap()
            }
        });
        assert_eq!(o[5], if l == 0 { 0.0 } else { pre }, "prefix at {i}");
    }
}

#[test]
fn barriers_order_threadgroup_memory_and_it_starts_uninitialized() {
    let b = backend();
    let dummy = upload_f32(&b, &[0.0; 8]);
    // Each thread writes its slot, waits, reads its mirror's: correct only if every
    // thread wrote before any read. `late` is read before anything writes it: poison.
    let body = "
  threadgroup uint tile[256];
  threadgroup float late[4];
  const uint t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
  const float before = late[t & 3u];
  tile[t] = t * 3u + threadgroup_position_in_grid.x;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[thread_position_in_grid.x * 2u] = tile[n - 1u - t];
  out[thread_position_in_grid.x * 2u + 1u] = as_type<uint>(before) + (uint)a[0];";
    let out = run_body(
        &b,
        "barrier",
        "",
        body,
        &[("a", &dummy)],
        &[spec("out", Elem::U32, 2 * 512)],
        (512, 1, 1),
        (256, 1, 1),
    )
    .unwrap();
    let v = u32s(&b, &out[0]);
    for i in 0..512u32 {
        let (g, t) = (i / 256, i % 256);
        assert_eq!(v[2 * i as usize], (255 - t) * 3 + g, "thread {i}");
        assert_eq!(
            v[2 * i as usize + 1],
            u32::MAX,
            "uninitialized threadgroup memory at {i}"
        );
    }
}

#[test]
fn a_missing_barrier_shows_in_one_schedule_or_the_other() {
    // Each thread writes its slot and reads its mirror's with no barrier between: on a
    // GPU the result depends on timing. In order, lane by lane, a thread sees its
    // mirror's write only where the mirror ran first (the later half); reversed, only
    // the earlier half does: the two schedules disagree, so a kernel that passes in both
    // does not lean on an order.
    let dummy = upload_f32(&backend(), &[0.0; 8]);
    let body = "
  threadgroup uint tile[64];
  const uint t = thread_index_in_threadgroup;
  tile[t] = t + 1u + (uint)a[0];
  out[t] = tile[63u - t];";
    for schedule in [Schedule::InOrder, Schedule::Reversed] {
        let b = backend().with_schedule(schedule);
        assert_eq!(b.schedule(), schedule);
        let out = run_body(
            &b,
            "race",
            "",
            body,
            &[("a", &dummy)],
            &[spec("out", Elem::U32, 64)],
            (64, 1, 1),
            (64, 1, 1),
        )
        .unwrap();
        let v = u32s(&b, &out[0]);
        for t in 0..64u32 {
            let mirror_first = match schedule {
                Schedule::InOrder => t > 31,
                Schedule::Reversed => t < 32,
            };
            let want = if mirror_first { 64 - t } else { u32::MAX };
            assert_eq!(v[t as usize], want, "{schedule:?}, thread {t}");
        }
    }
}

#[test]
fn the_schedule_is_named_by_its_variable() {
    assert_eq!("reversed".parse::<Schedule>().unwrap(), Schedule::Reversed);
    assert_eq!("in-order".parse::<Schedule>().unwrap(), Schedule::InOrder);
    assert_eq!("".parse::<Schedule>().unwrap(), Schedule::InOrder);
    let e = "backwards".parse::<Schedule>().unwrap_err().to_string();
    assert!(
        e.contains(Schedule::ENV) && e.contains("backwards") && e.contains("reversed"),
        "{e}"
    );
}

/// Every specialization of the quick catalog gives the same bits, exact and fast, with
/// the simulator's schedule reversed (simdgroups, lanes and threadgroups last to first):
/// no result leans on one simdgroup or threadgroup running before another, which a GPU
/// runs at once. (`cargo xtask verify --backend metal-sim` checks them against the
/// reference in order; `TRELLIS_METAL_SIM_SCHEDULE=reversed` runs it reversed.)
#[test]
fn the_quick_catalog_gives_the_same_bits_in_either_schedule() {
    struct Both {
        in_order: MetalSimBackend,
        reversed: MetalSimBackend,
        runs: usize,
        differ: Vec<String>,
    }
    impl FamilyVisitor for Both {
        fn visit<F: Family>(&mut self) {
            let all = verify::specializations::<F>(true, &self.in_order.limits());
            family::precompile::<F, _>(&self.in_order, &all).expect("the catalog compiles");
            for (i, (p, vs)) in all.iter().enumerate() {
                let host = F::random_host(p, 3000 + i as u64).expect("host data");
                let dev = F::upload(&self.in_order, p, &host).expect("upload");
                for v in vs {
                    let a = family::run::<F, _>(&self.in_order, p, *v, &dev).expect("in order");
                    let b = family::run::<F, _>(&self.reversed, p, *v, &dev).expect("reversed");
                    self.runs += 1;
                    assert_eq!(a.len(), b.len());
                    for (x, y) in a.iter().zip(&b) {
                        if let Some(m) = verify::first_mismatch(y, x) {
                            self.differ.push(format!("{} {p} [{v}]: {m}", F::NAME));
                        }
                    }
                }
            }
        }
    }
    // Both schedules named (the backend's default follows TRELLIS_METAL_SIM_SCHEDULE,
    // which would make the two one).
    let mut both = Both {
        in_order: backend().with_schedule(Schedule::InOrder),
        reversed: backend().with_schedule(Schedule::Reversed),
        runs: 0,
        differ: Vec::new(),
    };
    assert_ne!(both.in_order.schedule(), both.reversed.schedule());
    trellis::families::for_each(&mut both);
    assert!(both.runs > 700, "only {} specializations ran", both.runs);
    assert!(
        both.differ.is_empty(),
        "{} of {} differ:\n{}",
        both.differ.len(),
        both.runs,
        both.differ.join("\n")
    );
}

#[test]
fn barrier_not_reached_by_all_threads_and_divergent_simd_calls_are_errors() {
    let b = backend();
    let a = upload_f32(&b, &[1.0; 64]);
    let early_return = "
  if (thread_index_in_threadgroup == 5u) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[thread_position_in_grid.x] = a[thread_position_in_grid.x];";
    let e = run_body(
        &b,
        "early_return",
        "",
        early_return,
        &[("a", &a)],
        &[spec("out", Elem::F32, 64)],
        (64, 1, 1),
        (64, 1, 1),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("threadgroup_barrier") && e.contains("63 of its 64"),
        "{e}"
    );

    let divergent = "
  float v = a[thread_position_in_grid.x];
  if (thread_index_in_simdgroup < 16u) v = simd_shuffle_xor(v, ushort(1));
  else threadgroup_barrier(mem_flags::mem_threadgroup);
  out[thread_position_in_grid.x] = v;";
    let e = run_body(
        &b,
        "divergent",
        "",
        divergent,
        &[("a", &a)],
        &[spec("out", Elem::F32, 64)],
        (64, 1, 1),
        (64, 1, 1),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("diverged"), "{e}");
}

#[test]
fn simdgroup_matrix_multiply_accumulate() {
    let b = backend();
    let a: Vec<f32> = (0..64).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let bm: Vec<f32> = (0..64).map(|i| ((i * 5) % 13) as f32 * 0.5).collect();
    let c: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let (ta, tb, tc) = (upload_f32(&b, &a), upload_f32(&b, &bm), upload_f32(&b, &c));
    // B goes through threadgroup memory; lane 3 then doubles its own two elements of
    // the product, and D is stored to a device pointer.
    let body = "
  threadgroup float bt[64];
  for (uint i = thread_index_in_simdgroup; i < 64u; i += 32u) bt[i] = b[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 ma, mb, mc, md;
  simdgroup_load(ma, a);
  simdgroup_load(mb, bt);
  simdgroup_load(mc, c);
  simdgroup_multiply_accumulate(md, ma, mb, mc);
  if (thread_index_in_simdgroup == 3u) md.thread_elements() *= 2.0f;
  simdgroup_store(md, d);";
    let out = run_body(
        &b,
        "mma",
        "",
        body,
        &[("a", &ta), ("b", &tb), ("c", &tc)],
        &[spec("d", Elem::F32, 64)],
        (32, 1, 1),
        (32, 1, 1),
    )
    .unwrap();
    let d = f32s(&b, &out[0]);
    // Lane 3 owns row (3/2)%4 = 1, columns 2*(3%2) = 2 and 3 (MLX's fragment layout).
    for r in 0..8 {
        for col in 0..8 {
            let mut want = c[r * 8 + col];
            for k in 0..8 {
                want = a[r * 8 + k].mul_add(bm[k * 8 + col], want);
            }
            if r == 1 && (col == 2 || col == 3) {
                want *= 2.0;
            }
            assert_eq!(d[r * 8 + col], want, "D[{r}][{col}]");
        }
    }
}

#[test]
fn a_threadgroup_pointer_where_a_device_pointer_is_expected_does_not_compile() {
    let b = backend();
    let a = upload_f32(&b, &[1.0; 64]);
    let header = "inline float first(const device float* p) { return p[0]; }\n";
    let good = "out[thread_position_in_grid.x] = first(a);";
    run_body(
        &b,
        "space_ok",
        header,
        good,
        &[("a", &a)],
        &[spec("out", Elem::F32, 32)],
        (32, 1, 1),
        (32, 1, 1),
    )
    .unwrap();
    let bad = "
  threadgroup float tile[32];
  tile[thread_index_in_threadgroup] = a[thread_position_in_grid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[thread_position_in_grid.x] = first(tile);";
    match run_body(
        &b,
        "space_bad",
        header,
        bad,
        &[("a", &a)],
        &[spec("out", Elem::F32, 32)],
        (32, 1, 1),
        (32, 1, 1),
    ) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("first"), "{log}"),
        other => panic!("expected a compile error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn metal_limits_are_enforced() {
    let b = backend();
    let a = upload_f32(&b, &[1.0; 8]);
    let e = run_body(
        &b,
        "big_group",
        "",
        "out[thread_position_in_grid.x] = a[0];",
        &[("a", &a)],
        &[spec("out", Elem::F32, 2048)],
        (2048, 1, 1),
        (2048, 1, 1),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("threads per threadgroup"), "{e}");
    // MLX clamps the threadgroup to the grid: 16 threads in a "group of 64" run.
    let out = run_body(
        &b,
        "clamped",
        "",
        "out[thread_position_in_grid.x] = float(threads_per_threadgroup.x);",
        &[("a", &a)],
        &[spec("out", Elem::F32, 16)],
        (16, 1, 1),
        (64, 1, 1),
    )
    .unwrap();
    assert_eq!(f32s(&b, &out[0]), vec![16.0; 16]);
}

#[test]
fn the_grid_is_in_threads() {
    let g = Grid {
        groups: [5, 3, 1],
        threads: 128,
    };
    let d = MlxDispatch::of("reduce", g).unwrap();
    assert_eq!(d.grid, (640, 3, 1));
    assert_eq!(d.thread_group, (128, 1, 1));
    assert_eq!(d.metal_threads(), ([640, 3, 1], [128, 1, 1]));
}

#[test]
fn a_write_past_an_output_is_caught() {
    // One thread writes one element past `out`: the padding after every output must stay
    // zero, so the launch is an error naming the output (and the next launch is checked
    // afresh); an in-bounds run of the same kernel passes.
    let b = backend();
    let dummy = upload_f32(&b, &[0.0; 8]);
    let run = |n: &str| {
        run_body(
            &b,
            &format!("past{n}"),
            "",
            &format!("  out[thread_position_in_grid.x + {n}u] = 1.0f;"),
            &[("a", &dummy)],
            &[spec("out", Elem::F32, 32)],
            (32, 1, 1),
            (32, 1, 1),
        )
    };
    assert_eq!(f32s(&b, &run("0").unwrap()[0]), vec![1.0; 32]);
    for _ in 0..2 {
        let msg = run("1").unwrap_err().to_string();
        assert!(
            msg.contains("wrote past the end of output `out` (32 elements): element 32"),
            "{msg}"
        );
    }
}

#[test]
fn a_read_past_an_input_shows_as_poison() {
    // An input's padding is 0xFF bytes (NaN as a float): a kernel reading one element past
    // `a` gets NaN, which a check sees, where zeros would have added nothing to a sum.
    let b = backend();
    let a = upload_f32(&b, &[2.0; 32]);
    let out = run_body(
        &b,
        "read_past",
        "",
        "  out[thread_position_in_grid.x] = a[thread_position_in_grid.x + 1u];",
        &[("a", &a)],
        &[spec("out", Elem::F32, 32)],
        (32, 1, 1),
        (32, 1, 1),
    )
    .unwrap();
    let v = f32s(&b, &out[0]);
    assert_eq!(v[..31], [2.0; 31]);
    assert!(v[31].is_nan(), "{}", v[31]);
}

// ---- Planted defects --------------------------------------------------------------------

struct Case {
    w: trellis::QuantizedMatrix,
    x: trellis::Activations,
    y: trellis::Activations,
}

fn case() -> Case {
    // f32 activations and 64 runs per row: a change of summation order shows in the bits
    // (bf16 outputs would round most of it away).
    let g = Geometry::new(37, 2048, 256, 3, 12, Code::OneMad).unwrap();
    let w = verify::random_matrix(g, 7);
    let x = verify::random_activations(DType::F32, 2, 2048, 8);
    let y = reference::reduce(&w, &x).unwrap();
    Case { w, x, y }
}

fn reduce_spec(c: &Case, repr: Representation, x_stage: XStage) -> Reduce {
    // (f32 x staged for 2 x 2048 columns is 16.5 KB, a 2^12 table 16 KB: under 32 KB
    // only without the table; the staged case uses the global table.)
    Reduce {
        rows: c.w.geometry.rows,
        cols: c.w.geometry.cols,
        t: c.w.geometry.t,
        proj: Proj::of(&c.w.geometry),
        m: 2,
        act: DType::F32,
        scale: trellis::families::simt::RowScales::Stored(ScaleDType::F16),
        variant: Variant {
            repr,
            m_strategy: MStrategy::SharedDecode,
            rows_per_group: 4,
            x_stage,
            tier: Tier::Exact,
            rows_per_simd: 1,
            max_registers: 0,
            scalar_words: false,
            prefetch_words: false,
            stream_words: false,
            interleaved_x: false,
        },
    }
}

/// Run `spec` with its rendered Metal body passed through `plant`; the result, or the
/// backend's error.
fn run_planted(
    b: &MetalSimBackend,
    c: &Case,
    spec: &Reduce,
    tag: &str,
    plant: &dyn Fn(&str) -> String,
) -> Result<trellis::Activations, String> {
    let mut rendered = spec.render(Dialect::Metal).unwrap();
    let planted = plant(&rendered.body);
    if !tag.is_empty() {
        assert_ne!(planted, rendered.body, "the defect `{tag}` was not planted");
    }
    rendered.body = planted;
    let mut parts = spec.launch_request().unwrap().into_parts();
    parts.render = Box::new(move |_: Dialect| Ok(rendered.clone()));
    parts.id.params ^= trellis::kernel::fnv1a(tag.as_bytes());
    // SAFETY: the simulator bounds-checks every output write, and the id is the
    // declaration's with the defect's tag hashed in.
    let launch = unsafe { trellis::kernel::Launch::from_parts(parts) };
    let dw = DeviceMatrix::upload(b, &c.w).unwrap();
    let dx = ops::upload_activations(b, &c.x).unwrap();
    let outs = b
        .launch(
            &launch,
            &[&dx, &dw.codes, &dw.scales, dw.table(spec.variant.repr)],
        )
        .map_err(|e| e.to_string())?;
    Ok(trellis::family::download(b, &outs[0]).unwrap())
}

#[test]
fn planted_defects_fail_verification() {
    let b = backend();
    let c = case();
    let staged = reduce_spec(&c, Representation::GlobalTable, XStage::SharedF32);
    let plain = reduce_spec(&c, Representation::Inline, XStage::Global);
    // Control: the kernels as rendered match the reference bit for bit.
    for s in [&staged, &plain] {
        let got = run_planted(&b, &c, s, "", &|body| body.to_string()).unwrap();
        assert_eq!(verify::first_mismatch(&got, &c.y), None);
    }
    type Plant<'a> = (&'a str, &'a Reduce, &'a dyn Fn(&str) -> String);
    let defects: [Plant; 5] = [
        // The barrier after staging the table and x into threadgroup memory.
        ("_no_barrier", &staged, &|body| {
            body.replacen("BARRIER();", "", 1)
        }),
        // (A lane index rotated or xor-ed by a constant is no defect: translations and
        // xor relabelings of the 32 lanes map the butterfly onto itself, same bits.)
        // Lanes 16..31 redo the runs of lanes 0..15.
        ("_lane_dup", &plain, &|body| {
            body.replacen(
                "lane_id_ = thread_index_in_simdgroup",
                "lane_id_ = (thread_index_in_simdgroup % 16u)",
                1,
            )
        }),
        // Rows of a group from the wrong simdgroup index: half of them never written
        // (outputs start as poison, as MLX leaves them uninitialized).
        ("_row", &plain, &|body| {
            body.replacen(
                "simdgroup_id_ = simdgroup_index_in_threadgroup",
                "simdgroup_id_ = simdgroup_index_in_threadgroup / 2u",
                1,
            )
        }),
        // The staged x indexed with the wrong run stride (a threadgroup array laid out
        // for another shape).
        ("_stride", &staged, &|body| {
            body.replacen("* 33u + j]", "* 32u + j]", 1)
        }),
        // One step of the butterfly left out (a reduction over half the lanes).
        ("_butterfly", &plain, &|body| {
            body.replacen(
                "const float v = BUTTERFLY(part, r * 2u + mi);",
                "const float v = part[0][r * 2u + mi] + simd_shuffle_xor(part[0][r * 2u + mi], ushort(16));",
                1,
            )
        }),
    ];
    // Each defect compiles and runs (a launch error would be some other failure, not the
    // defect caught), and its output differs from the reference.
    for (tag, spec, plant) in defects {
        let got = run_planted(&b, &c, spec, tag, plant)
            .unwrap_or_else(|e| panic!("planted defect `{tag}` failed at launch: {e}"));
        assert!(
            verify::first_mismatch(&got, &c.y).is_some(),
            "planted defect `{tag}` went unnoticed"
        );
    }
}

/// 3 rows per simdgroup (`catalog::three_row_variants`, offered only at the tuned sizes,
/// so the verify catalog never renders it) and wide row sets up to `MAX_ROWS_PER_SIMD`:
/// the Metal body runs bit for bit, 37 rows leaving the last row set short (by 2 of 3, 7
/// of 11, 11 of 16).
#[test]
fn three_and_wide_rows_per_simdgroup_run_bit_for_bit() {
    let b = backend();
    let c = case();
    for (rows_per_simd, rows_per_group) in [(3, 1), (3, 4), (11, 1), (16, 2)] {
        let mut s = reduce_spec(&c, Representation::Inline, XStage::Registers);
        s.variant.rows_per_simd = rows_per_simd;
        s.variant.rows_per_group = rows_per_group;
        let got = run_planted(&b, &c, &s, "", &|body| body.to_string()).unwrap();
        assert_eq!(verify::first_mismatch(&got, &c.y), None, "{}", s.variant);
    }
}
