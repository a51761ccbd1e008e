// `grid` must be a `Grid` and `validate` a `trellis::Result<()>`: each is blamed at its
// expression.
#[trellis::kernel(
    name = "ui",
    template = "ui.kernel",
    grid = [1u32, 1, 1],
    validate = self.n > 0,
    inputs(x: f32[self.n]),
    outputs(y: f32[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrongExprs {
    pub n: usize,
}

fn main() {}
