//! A crate outside `trellis` that declares its own kernel with `#[trellis::kernel]` and a
//! template of its own (`templates/scale_rows.kernel`); it launches on any backend.

use trellis::kernel::{Dialect, Elem, Grid};

/// `y[r, c] = round_T(x[r, c] * scale[r])`.
#[trellis::kernel(
    name = "scale_rows",
    template = "scale_rows.kernel",
    grid = Grid { groups: [self.rows.div_ceil(self.rows_per_group as usize) as u32, 1, 1], threads: 32 * self.rows_per_group },
    validate = self.check(),
    inputs(x: act[self.rows, self.cols], scale: f32[self.rows]),
    outputs(y: act[self.rows, self.cols]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScaleRows {
    pub rows: usize,
    pub cols: usize,
    pub act: Elem,
    pub rows_per_group: u32,
}

impl ScaleRows {
    fn check(&self) -> trellis::Result<()> {
        if !(1..=32).contains(&self.rows_per_group) {
            return Err(trellis::Error::invalid(
                "rows_per_group",
                self.rows_per_group,
                "must be in 1..=32",
            ));
        }
        // The template counts rows and columns in 32-bit `uint`s (a larger extent would
        // wrap the grid or never end a loop): refuse what it cannot index.
        for (what, n) in [("rows", self.rows), ("cols", self.cols)] {
            if u32::try_from(n).is_err() {
                return Err(trellis::Error::invalid(
                    what,
                    n,
                    "must fit in 32 bits (the template indexes it with `uint`)",
                ));
            }
        }
        Ok(())
    }
    fn act_c(&self, d: &Dialect) -> &'static str {
        self.act.c_type(*d)
    }
}

/// `scale_rows` as a kernel family: the same contract as trellis's own families, so
/// trellis's verifier, tuner and selector work on it unchanged.
pub mod family {
    use super::ScaleRows;
    use trellis::family::Family;
    use trellis::kernel::{Backend, Elem};
    use trellis::numerics::Tier;
    use trellis::{Activations, DType, Result};

    /// One `scale_rows` problem.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Problem {
        pub rows: usize,
        pub cols: usize,
        pub act: DType,
    }

    impl std::fmt::Display for Problem {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}x{} {}", self.rows, self.cols, self.act)
        }
    }

    /// The tunable part: rows (simdgroups) per threadgroup.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Variant {
        pub rows_per_group: u32,
    }

    impl std::fmt::Display for Variant {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "rpg={}", self.rows_per_group)
        }
    }

    /// Host data: `x [rows, cols]` and one f32 scale per row.
    pub struct Host {
        pub x: Activations,
        pub s: Vec<f32>,
    }

    /// Uploaded data.
    pub struct Device<B: Backend> {
        pub x: B::Tensor,
        pub s: B::Tensor,
    }

    /// The family.
    pub struct ScaleRowsFamily;

    impl Family for ScaleRowsFamily {
        const NAME: &'static str = "scale_rows";
        type Problem = Problem;
        type Variant = Variant;
        type Kernel = ScaleRows;
        type Host = Host;
        type Expected = Activations;
        type Device<B: Backend> = Device<B>;

        fn kernel(p: &Problem, v: Variant) -> ScaleRows {
            ScaleRows {
                rows: p.rows,
                cols: p.cols,
                act: p.act.into(),
                rows_per_group: v.rows_per_group,
            }
        }
        fn tier(_v: &Variant) -> Tier {
            // A row scale has no sum to reorder: every variant is exact.
            Tier::Exact
        }
        fn default_variant(_p: &Problem, _tier: Tier) -> Variant {
            Variant { rows_per_group: 1 }
        }
        fn candidates(_p: &Problem, tier: Tier, _quick: bool) -> Vec<Variant> {
            if tier == Tier::Fast {
                return Vec::new();
            }
            [1, 2, 4, 8]
                .map(|rows_per_group| Variant { rows_per_group })
                .to_vec()
        }
        fn key_fields(p: &Problem) -> String {
            p.act.to_string()
        }
        fn shape(p: &Problem) -> (usize, usize) {
            (p.rows, p.cols)
        }
        fn catalog(_quick: bool) -> Vec<Problem> {
            vec![
                Problem {
                    rows: 5,
                    cols: 70,
                    act: DType::Bf16,
                },
                Problem {
                    rows: 33,
                    cols: 256,
                    act: DType::F32,
                },
            ]
        }
        fn random_host(p: &Problem, seed: u64) -> Result<Host> {
            let x = trellis::check::random_activations(p.act, p.rows, p.cols, seed);
            let s = (0..p.rows)
                .map(|r| 0.5 + ((r as u64 * 7 + seed) % 13) as f32 * 0.1)
                .collect();
            Ok(Host { x, s })
        }
        fn expected(p: &Problem, h: &Host) -> Result<Activations> {
            let data = (0..p.rows * p.cols)
                .map(|i| p.act.round(h.x.data[i] * h.s[i / p.cols]))
                .collect();
            Activations::from_f32(p.act, p.rows, p.cols, data)
        }
        fn check(
            _p: &Problem,
            _v: &Variant,
            _h: &Host,
            want: &Activations,
            got: &[Activations],
        ) -> std::result::Result<String, String> {
            trellis::check::bits(got.first().ok_or("no output")?, want)
        }
        fn upload<B: Backend>(b: &B, p: &Problem, h: &Host) -> Result<Device<B>> {
            Ok(Device {
                x: b.upload(p.act.into(), &[p.rows, p.cols], &h.x.to_bytes())?,
                s: b.upload(Elem::F32, &[p.rows], &DType::F32.encode(&h.s))?,
            })
        }
        fn inputs<'d, B: Backend>(d: &'d Device<B>, _v: &Variant) -> Result<Vec<&'d B::Tensor>> {
            Ok(vec![&d.x, &d.s])
        }
        fn bytes(p: &Problem) -> usize {
            2 * p.rows * p.cols * p.act.size() + 4 * p.rows
        }
    }
}
