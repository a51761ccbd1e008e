// A declaration's fields are its kernel's identity (`KernelId` hashes them): a struct
// without `Hash` is told so at its name, with what to add.

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug)]
pub struct Unhashed {
    pub n: usize,
}

fn main() {}
