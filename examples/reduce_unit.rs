//! Print the CUDA unit of one exact `reduce` specialization (x in registers, inline
//! decode), for reading its SASS without a GPU (`prototypes/sass/`):
//!
//! ```text
//! cargo run --release --example reduce_unit -- 17408 5120 3 1mad 12 1 1 4 > u.cu
//! ```
//!
//! Arguments (defaults in brackets): rows [17408], cols [5120], k [3], code [1mad], L [12],
//! M [1], rows_per_group [1], rows_per_simd [4], max_registers [0], folded scales (0, 1)
//! [1: where `RowScales::of` folds], scalar code words (0, 1) [0], next run's code words
//! prefetched (0, 1) [0], evict-first code words (0, 1) [0], lane-interleaved x (0, 1)
//! [0]. bf16 activations, f16 scales,
//! T = 256, shared decode of the M samples.
use trellis::families::catalog::inline_registers;
use trellis::families::reduce::Reduce;
use trellis::families::simt::{Proj, Representation, RowScales, Variant};
use trellis::kernel::{Dialect, KernelSpec};
use trellis::numerics::Tier;
use trellis::{Code, DType, ScaleDType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let num = |i: usize, default: &str| arg(i, default).parse::<u32>();
    let code = arg(3, "1mad").parse::<Code>()?;
    // f16 scales, folded with 1mad's divisor where `RowScales::of` folds (unless arg 9 is 0).
    let scale = if num(9, "1")? == 1 {
        RowScales::of(
            code,
            ScaleDType::F16,
            DType::Bf16.into(),
            Representation::Inline,
        )
    } else {
        RowScales::Stored(ScaleDType::F16)
    };
    let kernel = Reduce {
        rows: num(0, "17408")? as usize,
        cols: num(1, "5120")? as usize,
        t: 256,
        proj: Proj {
            k: num(2, "3")?,
            l: num(4, "12")?,
            code,
        },
        m: num(5, "1")?,
        act: DType::Bf16,
        scale,
        variant: Variant {
            scalar_words: num(10, "0")? == 1,
            prefetch_words: num(11, "0")? == 1,
            stream_words: num(12, "0")? == 1,
            interleaved_x: num(13, "0")? == 1,
            ..inline_registers(Tier::Exact, num(6, "1")?, num(7, "4")?, num(8, "0")?)
        },
    };
    kernel.validate()?;
    print!("{}", kernel.unit(Dialect::Cuda)?);
    Ok(())
}
