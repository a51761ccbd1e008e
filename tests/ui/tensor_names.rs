// A tensor declared twice, and a name the units reserve, are named at the token.

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n], threadgroup: f32[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reserved {
    pub n: usize,
}

#[trellis::kernel(
    name = "ui2",
    template = "ui.kernel",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n]),
    outputs(x: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Twice {
    pub n: usize,
}

fn main() {}
