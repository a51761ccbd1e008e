//! The downstream kernel runs on the CPU backend like trellis's own, with the same checks.

use trellis::backend::metal_sim::MetalSimBackend;
use trellis::backend::CpuBackend;
use trellis::kernel::{Backend, DeviceTensor, Dialect, Elem, Grid, KernelSpec};
use trellis::DType;
use trellis_downstream_example::ScaleRows;

#[test]
fn scale_rows_matches_plain_rust() {
    let b = CpuBackend::new().unwrap();
    let (rows, cols) = (5, 70);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| DType::Bf16.round((i as f32 - 150.0) / 37.0))
        .collect();
    let s: Vec<f32> = (0..rows).map(|r| 0.5 + r as f32 * 0.3).collect();
    let xt = b
        .upload(Elem::Bf16, &[rows, cols], &DType::Bf16.encode(&x))
        .unwrap();
    let st = b
        .upload(Elem::F32, &[rows], &DType::F32.encode(&s))
        .unwrap();
    let k = ScaleRows {
        rows,
        cols,
        act: Elem::Bf16,
        rows_per_group: 2,
    };
    let out = k.launch(&b, &xt, &st).unwrap();
    let got = DType::Bf16.decode(&b.download(&out.y).unwrap());
    let want: Vec<f32> = (0..rows * cols)
        .map(|i| DType::Bf16.round(x[i] * s[i / cols]))
        .collect();
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn wrong_shapes_and_dtypes_are_errors() {
    let b = CpuBackend::new().unwrap();
    let k = ScaleRows {
        rows: 4,
        cols: 64,
        act: Elem::F32,
        rows_per_group: 4,
    };
    let x = b.upload(Elem::F32, &[4, 63], &[0; 4 * 63 * 4]).unwrap();
    let s = b.upload(Elem::F32, &[4], &[0; 16]).unwrap();
    let msg = k.launch(&b, &x, &s).err().unwrap().to_string();
    assert!(
        msg.contains("scale_rows.x") && msg.contains("[4, 63]") && msg.contains("[4, 64]"),
        "{msg}"
    );
    let x16 = b.upload(Elem::F16, &[4, 64], &[0; 4 * 64 * 2]).unwrap();
    let msg = k.launch(&b, &x16, &s).err().unwrap().to_string();
    assert!(
        msg.contains("scale_rows.x") && msg.contains("f16") && msg.contains("f32"),
        "{msg}"
    );
    let bad = ScaleRows {
        rows_per_group: 0,
        ..k
    };
    let x = b.upload(Elem::F32, &[4, 64], &[0; 4 * 64 * 4]).unwrap();
    assert!(bad
        .launch(&b, &x, &s)
        .err()
        .unwrap()
        .to_string()
        .contains("rows_per_group = 0"));
    // Extents the template's 32-bit indices cannot reach are refused by name before
    // any shape is computed or buffer checked (they wrapped the grid, or never ended).
    for (bad, says) in [
        (ScaleRows { rows: 1 << 32, ..k }, "rows = 4294967296"),
        (
            ScaleRows {
                cols: (1 << 32) + 5,
                ..k
            },
            "cols = 4294967301",
        ),
    ] {
        let msg = bad.launch(&b, &x, &s).err().unwrap().to_string();
        assert!(msg.contains(says), "{msg}");
    }
}

#[test]
fn an_empty_problem_launches_nothing() {
    // No rows: no threadgroups. Every backend runs nothing (CUDA's driver and Metal
    // refuse an empty grid, so those backends skip the launch) and the output is empty.
    let k = ScaleRows {
        rows: 0,
        cols: 64,
        act: Elem::F32,
        rows_per_group: 2,
    };
    let cpu = CpuBackend::new().unwrap();
    let x = cpu.upload(Elem::F32, &[0, 64], &[]).unwrap();
    let s = cpu.upload(Elem::F32, &[0], &[]).unwrap();
    let out = k.launch(&cpu, &x, &s).unwrap();
    assert_eq!(out.y.shape(), vec![0, 64]);
    assert!(cpu.download(&out.y).unwrap().is_empty());
    let sim = MetalSimBackend::new().unwrap();
    let x = sim.upload(Elem::F32, &[0, 64], &[]).unwrap();
    let s = sim.upload(Elem::F32, &[0], &[]).unwrap();
    let out = k.launch(&sim, &x, &s).unwrap();
    assert!(sim.download(&out.y).unwrap().is_empty());
}

/// `scale_rows`'s template under a grid of the caller's choosing.
#[trellis::kernel(
    name = "scale_rows_grid",
    template = "scale_rows.kernel",
    grid = Grid { groups: [self.rows as u32, 1, self.z], threads: self.threads },
    inputs(x: act[self.rows, self.cols], scale: f32[self.rows]),
    outputs(y: act[self.rows, self.cols]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct AnyGrid {
    rows: usize,
    cols: usize,
    act: Elem,
    rows_per_group: u32,
    z: u32,
    threads: u32,
}

impl AnyGrid {
    fn act_c(&self, d: &Dialect) -> &'static str {
        self.act.c_type(*d)
    }
}

#[test]
fn a_grid_the_backends_would_run_differently_is_an_error() {
    // A partial simdgroup (a GPU's shuffles would miss lanes the CPU emulates) and
    // groups along z (a GPU would run each group z times, the CPU once) are refused
    // by name and value on every backend, before anything runs.
    let ok = AnyGrid {
        rows: 2,
        cols: 32,
        act: Elem::F32,
        rows_per_group: 1,
        z: 1,
        threads: 32,
    };
    let cpu = CpuBackend::new().unwrap();
    let sim = MetalSimBackend::new().unwrap();
    let xv: Vec<f32> = (0..2 * 32).map(|i| i as f32 - 20.0).collect();
    let sv = [2.0f32, -0.5];
    let (xb, sb) = (DType::F32.encode(&xv), DType::F32.encode(&sv));
    let (x, s) = (
        cpu.upload(Elem::F32, &[2, 32], &xb).unwrap(),
        cpu.upload(Elem::F32, &[2], &sb).unwrap(),
    );
    let (sx, ss) = (
        sim.upload(Elem::F32, &[2, 32], &xb).unwrap(),
        sim.upload(Elem::F32, &[2], &sb).unwrap(),
    );
    // The grid it declares runs, and writes every row (the simulator's outputs start
    // poisoned, so a row left unwritten would show).
    let want: Vec<f32> = (0..2 * 32).map(|i| xv[i] * sv[i / 32]).collect();
    let y = ok.launch(&cpu, &x, &s).unwrap().y;
    assert_eq!(DType::F32.decode(&cpu.download(&y).unwrap()), want);
    let y = ok.launch(&sim, &sx, &ss).unwrap().y;
    assert_eq!(DType::F32.decode(&sim.download(&y).unwrap()), want);
    for (bad, says) in [
        (
            AnyGrid { threads: 48, ..ok },
            "threads per threadgroup = 48",
        ),
        (AnyGrid { threads: 0, ..ok }, "threads per threadgroup = 0"),
        (AnyGrid { z: 2, ..ok }, "grid z = 2"),
    ] {
        for msg in [
            bad.launch(&cpu, &x, &s).err().unwrap().to_string(),
            bad.launch(&sim, &sx, &ss).err().unwrap().to_string(),
        ] {
            assert!(
                msg.contains("scale_rows_grid") && msg.contains(says),
                "{msg}"
            );
        }
    }
}

/// Declares `scale_rows` kernels whose element type and struct come from the caller, as
/// a crate with several kernels over one input list would (trellis's `gate_up_mma` and
/// its parts do): the generated methods must name their own `self`, not the caller's.
// Skipped: rustfmt re-indents an attribute inside a macro body on every run.
#[rustfmt::skip]
macro_rules! scale_rows_kernel {
    ($name:tt, $elem:ident, $item:item) => {
        #[trellis::kernel(
            name = $name,
            template = "scale_rows.kernel",
            grid = Grid { groups: [self.rows as u32, 1, 1], threads: 32 },
            inputs(x: $elem[self.rows, self.cols], scale: f32[self.rows]),
            outputs(y: $elem[self.rows, self.cols]),
        )]
        $item
    };
}

scale_rows_kernel! {
    "scale_rows_by_macro",
    act,
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct ByMacro {
        rows: usize,
        cols: usize,
        act: Elem,
        rows_per_group: u32,
    }
}

impl ByMacro {
    fn act_c(&self, d: &Dialect) -> &'static str {
        self.act.c_type(*d)
    }
}

#[test]
fn a_kernel_declared_through_macro_rules_launches_as_written() {
    let b = CpuBackend::new().unwrap();
    let (rows, cols) = (3, 40);
    let x: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.25 - 7.0).collect();
    let s: Vec<f32> = (0..rows).map(|r| 1.5 - r as f32).collect();
    let xt = b
        .upload(Elem::F32, &[rows, cols], &DType::F32.encode(&x))
        .unwrap();
    let st = b
        .upload(Elem::F32, &[rows], &DType::F32.encode(&s))
        .unwrap();
    let k = ByMacro {
        rows,
        cols,
        act: Elem::F32,
        rows_per_group: 1,
    };
    let out = k.launch(&b, &xt, &st).unwrap();
    let got = DType::F32.decode(&b.download(&out.y).unwrap());
    let want: Vec<f32> = (0..rows * cols).map(|i| x[i] * s[i / cols]).collect();
    assert_eq!(got, want);
    // The element type the caller named is checked like a written one.
    let wrong = b
        .upload(Elem::Bf16, &[rows, cols], &vec![0; rows * cols * 2])
        .unwrap();
    let msg = k.launch(&b, &wrong, &st).err().unwrap().to_string();
    assert!(
        msg.contains("scale_rows_by_macro.x") && msg.contains("bf16") && msg.contains("f32"),
        "{msg}"
    );
}

/// Two declarations of one kernel name and the same fields, in two modules, over two
/// templates: one multiplies, one adds.
mod twin_mul {
    use trellis::kernel::{Dialect, Elem, Grid};
    #[trellis::kernel(
        name = "twin_rows",
        template = "scale_rows.kernel",
        grid = Grid { groups: [self.rows as u32, 1, 1], threads: 32 },
        // A bare literal: a `usize` count (an `i32` alone, which no count is).
        shared = 0,
        inputs(x: f32[self.rows, self.cols], scale: f32[self.rows]),
        outputs(y: f32[self.rows, self.cols]),
    )]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Twin {
        pub rows: usize,
        pub cols: usize,
        pub rows_per_group: u32,
    }
    impl Twin {
        fn act_c(&self, d: &Dialect) -> &'static str {
            Elem::F32.c_type(*d)
        }
    }
}

/// (Declared through the crate under another name, as a renamed dependency is: the
/// generated code reaches it by `crate = "..."`.)
mod twin_add {
    use engine::kernel::{Dialect, Elem, Grid};
    use trellis as engine;
    #[engine::kernel(
        crate = "engine",
        name = "twin_rows",
        template = "offset_rows.kernel",
        grid = Grid { groups: [self.rows as u32, 1, 1], threads: 32 },
        inputs(x: f32[self.rows, self.cols], scale: f32[self.rows]),
        outputs(y: f32[self.rows, self.cols]),
    )]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Twin {
        pub rows: usize,
        pub cols: usize,
        pub rows_per_group: u32,
    }
    impl Twin {
        fn act_c(&self, d: &Dialect) -> &'static str {
            Elem::F32.c_type(*d)
        }
    }
}

/// Both twins on a fresh backend `b` (its caches hold nothing yet), the multiplying one
/// first or second: each returns its own template's result.
fn twins_on<B: Backend>(b: &B, mul_first: bool) {
    let (rows, cols) = (2, 40);
    let mul = twin_mul::Twin {
        rows,
        cols,
        rows_per_group: 1,
    };
    let add = twin_add::Twin {
        rows,
        cols,
        rows_per_group: 1,
    };
    let x: Vec<f32> = (0..rows * cols).map(|i| i as f32 - 30.0).collect();
    let s = [3.0f32, -0.5];
    let xt = b
        .upload(Elem::F32, &[rows, cols], &DType::F32.encode(&x))
        .unwrap();
    let st = b
        .upload(Elem::F32, &[rows], &DType::F32.encode(&s))
        .unwrap();
    let run = |adds: bool| {
        let y = if adds {
            add.launch(b, &xt, &st).unwrap().y
        } else {
            mul.launch(b, &xt, &st).unwrap().y
        };
        DType::F32.decode(&b.download(&y).unwrap())
    };
    let order = if mul_first {
        [false, true]
    } else {
        [true, false]
    };
    for adds in order {
        let want: Vec<f32> = (0..rows * cols)
            .map(|i| {
                if adds {
                    x[i] + s[i / cols]
                } else {
                    x[i] * s[i / cols]
                }
            })
            .collect();
        assert_eq!(
            run(adds),
            want,
            "adds {adds}, multiplying twin first {mul_first}"
        );
    }
}

#[test]
fn declarations_that_share_a_name_and_fields_run_their_own_code() {
    // The compiled-kernel caches key on the id; before it hashed the declaring type's
    // path, the second twin launched on a backend ran the first one's code.
    let twin = |rows_per_group| {
        (
            twin_mul::Twin {
                rows: 2,
                cols: 40,
                rows_per_group,
            }
            .id(),
            twin_add::Twin {
                rows: 2,
                cols: 40,
                rows_per_group,
            }
            .id(),
        )
    };
    let (mul, add) = twin(1);
    assert_eq!(mul.params, add.params, "the tables' hash is the fields'");
    assert_ne!(mul, add);
    assert_ne!(mul.unique_symbol(), add.unique_symbol());
    for mul_first in [true, false] {
        twins_on(&CpuBackend::new().unwrap(), mul_first);
        twins_on(&MetalSimBackend::new().unwrap(), mul_first);
    }
}
