// An element type named by a field whose type is no element type: the error is
// the field's, at its name in the declaration.
use trellis::kernel::Grid;

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: act[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrongElem {
    pub n: usize,
    pub act: u8,
}

fn main() {}
