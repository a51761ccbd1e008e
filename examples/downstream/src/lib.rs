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
        Ok(())
    }
    fn act_c(&self, d: &Dialect) -> &'static str {
        self.act.c_type(*d)
    }
}
