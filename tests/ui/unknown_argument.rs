// A misspelt argument is named, with the arguments there are.

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    input(x: f32[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Misspelt {
    pub n: usize,
}

fn main() {
    // The struct is still declared: its uses add no errors of their own.
    let _ = Misspelt { n: 1 };
}
