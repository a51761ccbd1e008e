//! Print the CUDA unit of one exact `gate_up` specialization (x in registers, inline
//! decode, the exact tail), for reading its SASS without a GPU (`prototypes/sass/`), as
//! `reduce_unit` does for `reduce`:
//!
//! ```text
//! cargo run --release --example gate_up_unit -- 17408 5120 3 4 1mad 12 1 4 3 > u.cu
//! ```
//!
//! Arguments (defaults in brackets): rows [17408], cols [5120], gate k [3], up k [4], code
//! [1mad], L [12], M [1], rows_per_group [4], rows_per_simd [3], max_registers [0], scalar
//! code words (0, 1) [0], next run's code words prefetched (0, 1) [0], evict-first code
//! words (0, 1) [0]. bf16 activations, f16 scales folded where `RowScales::of` folds,
//! T = 256, shared decode of the M samples.
use trellis::families::catalog::inline_registers;
use trellis::families::gate_up::GateUp;
use trellis::families::simt::{Proj, Representation, RowScales, Variant};
use trellis::kernel::{Dialect, KernelSpec};
use trellis::numerics::{Tail, Tier};
use trellis::{Code, DType, ScaleDType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let num = |i: usize, default: &str| arg(i, default).parse::<u32>();
    let code = arg(4, "1mad").parse::<Code>()?;
    let l = num(5, "12")?;
    let scale = RowScales::of(
        code,
        ScaleDType::F16,
        DType::Bf16.into(),
        Representation::Inline,
    );
    let kernel = GateUp {
        rows: num(0, "17408")? as usize,
        cols: num(1, "5120")? as usize,
        t: 256,
        gate: Proj {
            k: num(2, "3")?,
            l,
            code,
        },
        up: Proj {
            k: num(3, "4")?,
            l,
            code,
        },
        m: num(6, "1")?,
        act: DType::Bf16,
        gate_scale: scale,
        up_scale: scale,
        tail: Tail::Exact,
        variant: Variant {
            scalar_words: num(10, "0")? == 1,
            prefetch_words: num(11, "0")? == 1,
            stream_words: num(12, "0")? == 1,
            ..inline_registers(Tier::Exact, num(7, "4")?, num(8, "3")?, num(9, "0")?)
        },
    };
    kernel.validate()?;
    print!("{}", kernel.unit(Dialect::Cuda)?);
    Ok(())
}
