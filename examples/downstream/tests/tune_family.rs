//! The downstream family is verified, tuned and selected through trellis's library API
//! on the CPU backend, exactly as trellis's own families are; a planted wrong candidate
//! is rejected by the tuner with its reason and never chosen.

use trellis::backend::CpuBackend;
use trellis::family::Family;
use trellis::kernel::{Backend, Dialect, Grid, KernelId, KernelSpec, Rendered, TensorSpec};
use trellis::numerics::Tier;
use trellis::tune::harness::{self, TuneOptions};
use trellis::tune::{Selector, Source, Table};
use trellis::{Activations, DType, Result};
use trellis_downstream_example::family::{Device, Host, Problem, ScaleRowsFamily, Variant};

fn options() -> TuneOptions {
    let mut o = TuneOptions::for_backend("cpu", Tier::Exact);
    o.min_reps = 3;
    o.max_reps = 9;
    o.working_set = 1 << 20;
    o
}

fn tune<F: Family<Problem = Problem>>(b: &CpuBackend, p: Problem, o: &TuneOptions) -> Table {
    let mut table = Table {
        device: harness::header(b, "downstream test".into()),
        entries: Vec::new(),
    };
    harness::tune::<F, _>(b, o, &[p], &mut table, None, &mut |_| Ok(()), &mut |_| {}).unwrap();
    table
}

#[test]
fn the_downstream_family_verifies_tunes_and_is_selected() {
    let b = CpuBackend::new().unwrap();
    let outcomes =
        trellis::verify::verify_family::<ScaleRowsFamily, _>(&b, true, &mut |_, _| {}).unwrap();
    assert_eq!(outcomes.len(), 2 * 4, "{outcomes:?}");
    for o in &outcomes {
        assert_eq!(o.result.as_deref(), Ok("bit-exact"), "{o:?}");
    }

    let p = Problem {
        rows: 64,
        cols: 2048,
        act: DType::Bf16,
    };
    let table = tune::<ScaleRowsFamily>(&b, p, &options());
    assert_eq!(table.entries.len(), 1);
    let e = &table.entries[0];
    assert!(e.rejected.is_empty(), "{:?}", e.rejected);
    assert_eq!(e.family, "scale_rows");
    let winner: Variant = e.winner().unwrap();
    assert!([1, 2, 4, 8].contains(&winner.rows_per_group), "{winner}");
    assert!(e.stats.samples >= 3);
    assert!(e.stats.p10_us <= e.stats.median_us && e.stats.median_us <= e.stats.p90_us);
    // The bandwidth is the family's bytes over the median (the tables' GB/s column).
    let bytes = <ScaleRowsFamily as Family>::bytes(&p) as f64;
    let derived = e.bandwidth_gbs * 1e3 * e.stats.median_us;
    assert!(
        (derived / bytes - 1.0).abs() < 0.01,
        "{derived} of {bytes} bytes"
    );
    // The table round-trips, and the selector answers from it for this device.
    let table = Table::parse(&table.to_toml()).unwrap();
    let mut s = Selector::empty();
    s.add_table("api", table);
    let sel = s.select::<ScaleRowsFamily>("cpu", &b.device_id(), &p, Tier::Exact);
    assert_eq!(sel.variant, winner);
    assert!(matches!(sel.source, Source::Table { .. }), "{}", sel.source);
}

#[test]
fn shapes_sharing_a_bucket_are_each_tuned_and_resumed() {
    let b = CpuBackend::new().unwrap();
    let o = options();
    let p = |rows| Problem {
        rows,
        cols: 2048,
        act: DType::Bf16,
    };
    let (a, c) = (p(64), p(80));
    assert_eq!(
        ScaleRowsFamily::key(&a, Tier::Exact),
        ScaleRowsFamily::key(&c, Tier::Exact),
        "80 rows round to the 64-row bucket"
    );
    let mut table = Table {
        device: harness::header(&b, "downstream test".into()),
        entries: Vec::new(),
    };
    let run = |table: &mut Table| {
        let mut tuned = 0;
        harness::tune::<ScaleRowsFamily, _>(
            &b,
            &o,
            &[a, c],
            table,
            None,
            &mut |_| Ok(()),
            &mut |e| {
                tuned += usize::from(matches!(e, harness::Event::Done { .. }));
            },
        )
        .unwrap();
        tuned
    };
    assert_eq!(run(&mut table), 2, "each shape is measured");
    let mut shapes: Vec<&str> = table.entries.iter().map(|e| e.shape.as_str()).collect();
    shapes.sort();
    assert_eq!(shapes, ["64x2048", "80x2048"]);
    assert_eq!(run(&mut table), 0, "a resumed run keeps both");
    assert_eq!(table.entries.len(), 2);
}

/// Planted defects: the `rpg=2` candidate binds a doubled scale (its output is wrong
/// while every other candidate is right), or its unit does not compile.
const WRONG_OUTPUT: u8 = 0;
const NO_COMPILE: u8 = 1;

/// `scale_rows` with the planted defect `D` in its `rpg=2` candidate.
struct Planted<const D: u8>;

/// `scale_rows`, or (`broken`) the same kernel under another id whose body the host
/// compiler rejects.
#[derive(Debug)]
struct PlantedKernel {
    inner: trellis_downstream_example::ScaleRows,
    broken: bool,
}

// SAFETY: `scale_rows`'s own declaration and body, or (broken) a body that does not
// compile, which never runs, under an id of its own.
unsafe impl KernelSpec for PlantedKernel {
    const NAME: &'static str = "scale_rows";
    fn id(&self) -> KernelId {
        if self.broken {
            // Its own compile-cache entry, not the good kernel's.
            KernelId::of("scale_rows_broken", &self.inner)
        } else {
            self.inner.id()
        }
    }
    fn inputs(&self) -> Vec<TensorSpec> {
        self.inner.inputs()
    }
    fn outputs(&self) -> Vec<TensorSpec> {
        self.inner.outputs()
    }
    fn grid(&self) -> Grid {
        self.inner.grid()
    }
    fn validate(&self) -> Result<()> {
        self.inner.validate()
    }
    fn render(&self, dialect: Dialect) -> Result<Rendered> {
        let mut r = self.inner.render(dialect)?;
        if self.broken {
            r.body.push_str("\n  planted_undeclared_identifier += 1;\n");
        }
        Ok(r)
    }
}

struct PlantedDevice<B: Backend> {
    inner: Device<B>,
    doubled: B::Tensor,
}

impl<const D: u8> Family for Planted<D> {
    const NAME: &'static str = "scale_rows";
    type Problem = Problem;
    type Variant = Variant;
    type Kernel = PlantedKernel;
    type Host = Host;
    type Expected = Activations;
    type Device<B: Backend> = PlantedDevice<B>;

    fn kernel(p: &Problem, v: Variant) -> Self::Kernel {
        PlantedKernel {
            inner: ScaleRowsFamily::kernel(p, v),
            broken: D == NO_COMPILE && v.rows_per_group == 2,
        }
    }
    fn tier(v: &Variant) -> Tier {
        ScaleRowsFamily::tier(v)
    }
    fn default_variant(p: &Problem, t: Tier) -> Variant {
        ScaleRowsFamily::default_variant(p, t)
    }
    fn candidates(p: &Problem, t: Tier, q: bool) -> Vec<Variant> {
        ScaleRowsFamily::candidates(p, t, q)
    }
    fn key_fields(p: &Problem) -> String {
        ScaleRowsFamily::key_fields(p)
    }
    fn shape(p: &Problem) -> (usize, usize) {
        ScaleRowsFamily::shape(p)
    }
    fn catalog(q: bool) -> Vec<Problem> {
        ScaleRowsFamily::catalog(q)
    }
    fn random_host(p: &Problem, seed: u64) -> Result<Host> {
        ScaleRowsFamily::random_host(p, seed)
    }
    fn expected(p: &Problem, h: &Host) -> Result<Activations> {
        ScaleRowsFamily::expected(p, h)
    }
    fn check(
        p: &Problem,
        v: &Variant,
        h: &Host,
        w: &Activations,
        g: &[Activations],
    ) -> std::result::Result<String, String> {
        ScaleRowsFamily::check(p, v, h, w, g)
    }
    fn upload<B: Backend>(b: &B, p: &Problem, h: &Host) -> Result<PlantedDevice<B>> {
        let doubled: Vec<f32> = h.s.iter().map(|s| 2.0 * s).collect();
        Ok(PlantedDevice {
            inner: ScaleRowsFamily::upload(b, p, h)?,
            doubled: b.upload(
                trellis::kernel::Elem::F32,
                &[p.rows],
                &DType::F32.encode(&doubled),
            )?,
        })
    }
    fn inputs<'d, B: Backend>(d: &'d PlantedDevice<B>, v: &Variant) -> Result<Vec<&'d B::Tensor>> {
        let s = if D == WRONG_OUTPUT && v.rows_per_group == 2 {
            &d.doubled
        } else {
            &d.inner.s
        };
        Ok(vec![&d.inner.x, s])
    }
    fn bytes(p: &Problem) -> usize {
        ScaleRowsFamily::bytes(p)
    }
}

#[test]
fn a_wrong_candidate_is_rejected_and_never_chosen() {
    let b = CpuBackend::new().unwrap();
    let p = Problem {
        rows: 16,
        cols: 512,
        act: DType::F32,
    };
    // With a trace: one line per candidate, the wrong one rejected with its reason.
    let trace = std::env::temp_dir().join(format!("trellis-trace-{}.tsv", std::process::id()));
    let _ = std::fs::remove_file(&trace);
    let o = TuneOptions {
        trace: Some(trace.clone()),
        ..options()
    };
    let table = tune::<Planted<WRONG_OUTPUT>>(&b, p, &o);
    let text = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines[0][..3], ["key", "variant", "outcome"]);
    let candidates = Planted::<WRONG_OUTPUT>::candidates(&p, Tier::Exact, false);
    assert_eq!(lines.len(), 1 + candidates.len(), "{text}");
    for (line, v) in lines[1..].iter().zip(&candidates) {
        assert_eq!(line.len(), 7, "{line:?}");
        assert_eq!(line[1], v.to_string());
        if v.rows_per_group == 2 {
            assert!(
                line[2].starts_with("rejected: ") && line[3].is_empty(),
                "{line:?}"
            );
        } else {
            assert!(["timed", "pruned"].contains(&line[2]), "{line:?}");
            let median: f64 = line[3].parse().unwrap();
            assert!(median > 0.0, "{line:?}");
        }
    }
    let e = &table.entries[0];
    assert_eq!(e.rejected.len(), 1, "{:?}", e.rejected);
    assert!(e.rejected[0].starts_with("rpg=2:"), "{:?}", e.rejected);
    assert!(
        e.rejected[0].contains("got") && e.rejected[0].contains("want"),
        "{:?}",
        e.rejected
    );
    assert_ne!(e.winner::<Variant>().unwrap().rows_per_group, 2);
}

/// A candidate whose unit the host compiler rejects is disqualified with the compiler's
/// reason, the others are timed, and the table never chooses it; the broken unit's
/// compile error does not take its batch's good kernels with it.
#[test]
fn a_candidate_that_does_not_compile_is_rejected_and_never_chosen() {
    let b = CpuBackend::new().unwrap();
    let p = Problem {
        rows: 16,
        cols: 512,
        act: DType::F32,
    };
    let table = tune::<Planted<NO_COMPILE>>(&b, p, &options());
    let e = &table.entries[0];
    assert_eq!(e.rejected.len(), 1, "{:?}", e.rejected);
    assert!(e.rejected[0].starts_with("rpg=2:"), "{:?}", e.rejected);
    // What failed and the compiler's first error, on one line.
    assert!(
        e.rejected[0].contains("failed to compile on cpu")
            && e.rejected[0].contains("error")
            && e.rejected[0].contains("planted_undeclared_identifier")
            && !e.rejected[0].contains('\n'),
        "{:?}",
        e.rejected
    );
    let winner = e.winner::<Variant>().unwrap();
    assert_ne!(winner.rows_per_group, 2);
    assert!(e.stats.samples >= 3 && e.stats.median_us > 0.0);
}

/// The CPU backend with a detached compiler that only records what it is given: the
/// tuner's look-ahead, observable (the CPU backend itself offers none, since its kernels
/// time on every core).
struct LookAhead<'b> {
    cpu: &'b CpuBackend,
    seen: std::sync::Arc<Seen>,
}

#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<KernelId>>);

impl trellis::kernel::AheadCompiler for Seen {
    fn compile_ahead(&self, launches: &[trellis::kernel::Launch<'_>]) {
        self.0.lock().unwrap().extend(launches.iter().map(|l| l.id));
    }
}

impl Backend for LookAhead<'_> {
    type Tensor = <CpuBackend as Backend>::Tensor;
    type Compiled = <CpuBackend as Backend>::Compiled;
    type Bound<'a> = <CpuBackend as Backend>::Bound<'a>;
    fn name(&self) -> &'static str {
        self.cpu.name()
    }
    fn dialect(&self) -> Dialect {
        self.cpu.dialect()
    }
    fn device_id(&self) -> String {
        self.cpu.device_id()
    }
    fn alloc(&self, spec: &TensorSpec) -> Result<Self::Tensor> {
        self.cpu.alloc(spec)
    }
    fn upload(
        &self,
        e: trellis::kernel::Elem,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Self::Tensor> {
        self.cpu.upload(e, shape, bytes)
    }
    fn download(&self, t: &Self::Tensor) -> Result<Vec<u8>> {
        self.cpu.download(t)
    }
    fn limits(&self) -> trellis::kernel::Limits {
        self.cpu.limits()
    }
    fn compile(&self, l: &trellis::kernel::Launch<'_>) -> Result<Self::Compiled> {
        self.cpu.compile(l)
    }
    fn bind<'a>(
        &self,
        c: &Self::Compiled,
        l: &trellis::kernel::Launch<'_>,
        inputs: &[&'a Self::Tensor],
        outputs: &'a mut [&mut Self::Tensor],
    ) -> Result<Self::Bound<'a>> {
        self.cpu.bind(c, l, inputs, outputs)
    }
    fn run(&self, bound: &mut Self::Bound<'_>) -> Result<()> {
        self.cpu.run(bound)
    }
    fn ahead_compiler(&self) -> Option<std::sync::Arc<dyn trellis::kernel::AheadCompiler>> {
        Some(self.seen.clone())
    }
}

#[test]
fn the_next_problems_candidates_compile_while_one_is_measured() {
    let cpu = CpuBackend::new().unwrap();
    let b = LookAhead {
        cpu: &cpu,
        seen: Default::default(),
    };
    let o = options();
    let p = |rows| Problem {
        rows,
        cols: 2048,
        act: DType::Bf16,
    };
    let (first, second, third) = (p(64), p(80), p(96));
    let mut table = Table {
        device: harness::header(&cpu, "downstream test".into()),
        entries: Vec::new(),
    };
    let run = |problems: &[Problem], table: &mut Table| {
        harness::tune::<ScaleRowsFamily, _>(
            &b,
            &o,
            problems,
            table,
            None,
            &mut |_| Ok(()),
            &mut |_| {},
        )
        .unwrap();
    };
    run(&[first], &mut table);
    assert!(
        b.seen.0.lock().unwrap().is_empty(),
        "no problem after the only one"
    );
    // `first` is in the table: `second` is measured at once, `third` compiled meanwhile.
    run(&[first, second, third], &mut table);
    assert_eq!(table.entries.len(), 3);
    let ids = |q: &Problem| -> Vec<KernelId> {
        let mut v: Vec<KernelId> = ScaleRowsFamily::candidates(q, Tier::Exact, o.quick)
            .into_iter()
            .chain([ScaleRowsFamily::default_variant(q, Tier::Exact)])
            .map(|v| ScaleRowsFamily::kernel(q, v).id())
            .collect();
        v.sort_by_key(|id| id.to_string());
        v.dedup();
        v
    };
    let mut seen = b.seen.0.lock().unwrap().clone();
    seen.sort_by_key(|id| id.to_string());
    assert_eq!(
        seen,
        ids(&third),
        "the third problem's candidates, and only those"
    );
}
