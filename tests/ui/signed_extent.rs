// An extent must be an unsigned integer (a signed one would wrap): blamed at the
// extent.
use trellis::kernel::Grid;

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n]),
    outputs(y: f32[self.rows]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SignedExtent {
    pub n: usize,
    pub rows: i64,
}

fn main() {}
