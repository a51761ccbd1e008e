// A field the templates' wrappers hold themselves (`dialect`, `spec`) would be shadowed
// in the template: refused at the field.
use trellis::kernel::Dialect;

#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = trellis::kernel::Grid { groups: [1, 1, 1], threads: 32 },
    inputs(x: f32[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shadowed {
    pub n: usize,
    pub dialect: Dialect,
}

fn main() {}
