// A declaration without a required argument (here `template` and any output) is named
// at the attribute.
#[trellis::kernel(
    name = "ui",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Incomplete {
    pub n: usize,
}

fn main() {
    let _ = Incomplete { n: 1 };
}
