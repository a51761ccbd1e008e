//! Print the CUDA unit of one `reduce_mma` specialization, for reading its SASS without a
//! GPU (`prototypes/sass/`):
//!
//! ```text
//! cargo run --release --example mma_unit -- 17408 5120 2 1mad 16 1 1 8 16 shared > u.cu
//! ```
//!
//! Arguments (defaults in brackets): rows [17408], cols [5120], k [2], code [1mad], L [16],
//! M [1], row_tiles [1], col_split [8], m_tile [16], x_stage (global, shared, shared_dup)
//! [global], k_split [1], max_registers [0], operands (f16, bf16) [f16], paired_windows
//! (0, 1) [0], x_f16 (0, 1) [0], batch_stage (0, 1) [0], opt_in_shared (0, 1) [0],
//! early_words (0, 1) [0]. bf16 activations, f16 scales, T = 256.
use trellis::families::mma::{MmaOperands, MmaVariant, MmaXStage};
use trellis::families::reduce_mma::ReduceMma;
use trellis::families::simt::Proj;
use trellis::kernel::{Dialect, KernelSpec};
use trellis::{Code, DType, ScaleDType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let num = |i: usize, default: &str| arg(i, default).parse::<u32>();
    let code: Code = arg(3, "1mad").parse()?;
    let x_stage = match arg(9, "global").as_str() {
        "global" => MmaXStage::Global,
        "shared" => MmaXStage::Shared,
        "shared_dup" => MmaXStage::SharedDup,
        other => return Err(format!("x_stage `{other}`: global, shared or shared_dup").into()),
    };
    let kernel = ReduceMma {
        rows: num(0, "17408")? as usize,
        cols: num(1, "5120")? as usize,
        t: 256,
        proj: Proj {
            k: num(2, "2")?,
            l: num(4, "16")?,
            code,
        },
        m: num(5, "1")?,
        act: DType::Bf16,
        scale: ScaleDType::F16,
        variant: MmaVariant {
            row_tiles: num(6, "1")?,
            col_split: num(7, "8")?,
            m_tile: num(8, "16")?,
            x_stage,
            k_split: num(10, "1")?,
            max_registers: num(11, "0")?,
            operands: match arg(12, "f16").as_str() {
                "bf16" => MmaOperands::Bf16,
                _ => MmaOperands::F16,
            },
            paired_windows: num(13, "0")? == 1,
            x_f16: num(14, "0")? == 1,
            batch_stage: num(15, "0")? == 1,
            opt_in_shared: num(16, "0")? == 1,
            early_words: num(17, "0")? == 1,
            fused_x: num(18, "0")? == 1,
        },
    };
    kernel.validate()?;
    print!("{}", kernel.unit(Dialect::Cuda)?);
    Ok(())
}
