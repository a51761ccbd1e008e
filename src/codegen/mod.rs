//! Dialect code generation: what each backend compiles, as text. A kernel's rendered
//! header and body (from its template) become a complete translation unit here: the
//! dialect shim and shared device functions ([`prelude`]), then an entry point written
//! for the dialect (a CUDA `__global__` function, a CPU `extern "C"` function, or the
//! signature MLX writes for Metal). Backends compile these units; `xtask render` writes
//! them on any build; tuning tables hash them to know when they are stale.

pub mod metal;
mod signature;

pub use signature::{tensor_bytes, Elem, Grid, TensorSpec};
use std::fmt;

/// Target source language of a rendered kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    /// Metal Shading Language, as the header and body `mlx_rs::fast::MetalKernel` takes.
    Metal,
    /// CUDA C++ for NVRTC.
    Cuda,
    /// C++ for the host compiler, 32 lanes emulated per row.
    Cpu,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 3] = [Dialect::Metal, Dialect::Cuda, Dialect::Cpu];

    /// Lower-case name, also the file extension stem used by `xtask render`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Metal => "metal",
            Dialect::Cuda => "cuda",
            Dialect::Cpu => "cpu",
        }
    }

    /// File extension of a rendered source.
    pub fn extension(self) -> &'static str {
        match self {
            Dialect::Metal => "metal",
            Dialect::Cuda => "cu",
            Dialect::Cpu => "cpp",
        }
    }

    /// True for Metal, for templates: `{% if dialect.is_metal() %}`.
    pub fn is_metal(&self) -> bool {
        *self == Dialect::Metal
    }
    /// True for CUDA.
    pub fn is_cuda(&self) -> bool {
        *self == Dialect::Cuda
    }
    /// True for the CPU dialect.
    pub fn is_cpu(&self) -> bool {
        *self == Dialect::Cpu
    }
    /// The threads that run a threadgroup launched with `launched`, as a compile-time
    /// count for a template (`GROUP_THREADS` is the launch's, known only at run time):
    /// the CPU dialect runs each group as one thread.
    pub fn threads_per_group(&self, launched: u32) -> u32 {
        match self {
            Dialect::Cpu => 1,
            Dialect::Metal | Dialect::Cuda => launched,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A kernel rendered for one dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The dialect the kernel was rendered for.
    pub dialect: Dialect,
    /// Device functions and constants (Metal: MLX's `header`).
    pub header: String,
    /// The kernel body (Metal: MLX's `source`; MLX writes the signature).
    pub body: String,
}

/// The dialect shim and the shared device functions (SPEC 3 codes, `exp_spec`, the
/// state window) that precede every kernel header.
pub fn prelude(dialect: Dialect) -> String {
    let shim = match dialect {
        Dialect::Metal => with_simt_emulated(&with_simt_gpu(include_str!(
            "../../templates/dialect/metal.h"
        ))),
        Dialect::Cuda => with_simt_gpu(include_str!("../../templates/dialect/cuda.h")),
        Dialect::Cpu => with_simt_emulated(include_str!("../../templates/dialect/cpu.h")),
    };
    shim_then(
        &shim,
        CommonHeader {
            c: crate::codes::CodeConstants::spec(),
        },
    )
}

/// A shim with its `#include "NAME"` line replaced by `text`, the shim part two dialects
/// share (`simt_gpu.h`: the row and lane vocabulary of CUDA and Metal, where a simdgroup
/// is the hardware's warp or SIMD group; `simt_emulated.h`: the portable forms of CUDA's
/// integer intrinsics, for the CPU and Metal; `mma_emulated.h`: the m16n8k16 fragment
/// layout the CPU and Metal emulate). Inlined here rather than left to the compilers so that a
/// unit is one self-contained text (MLX takes no include paths, and the tuning tables
/// hash the text).
fn inline_shared(shim: &str, name: &str, text: &str) -> String {
    let mark = format!("#include \"{name}\"");
    let start = shim.find(&mark).expect("the shim names the shared part");
    let end = start
        + shim[start..]
            .find('\n')
            .map_or(shim.len() - start, |i| i + 1);
    format!("{}{text}{}", &shim[..start], &shim[end..])
}

/// [`inline_shared`] of `simt_gpu.h`.
fn with_simt_gpu(shim: &str) -> String {
    inline_shared(
        shim,
        "simt_gpu.h",
        include_str!("../../templates/dialect/simt_gpu.h"),
    )
}

/// [`inline_shared`] of `simt_emulated.h`.
fn with_simt_emulated(shim: &str) -> String {
    inline_shared(
        shim,
        "simt_emulated.h",
        include_str!("../../templates/dialect/simt_emulated.h"),
    )
}

/// [`inline_shared`] of `mma_emulated.h`.
fn with_mma_emulated(shim: &str) -> String {
    inline_shared(
        shim,
        "mma_emulated.h",
        include_str!("../../templates/dialect/mma_emulated.h"),
    )
}

/// A dialect shim, then a header shared by every dialect rendered with the SPEC
/// constants (both are written once; the templates cannot render without them).
fn shim_then(shim: &str, header: impl askama::Template) -> String {
    let header = header.render().expect("shared header renders");
    format!("{shim}\n{header}\n")
}

/// Finish a rendered body for its dialect. Metal: MLX declares a thread attribute only
/// when its name appears in the body, so the body starts by binding the ones the dialect
/// shim's vocabulary (`GROUP_X`, `LANE_ID`, ...) reads. Other dialects bind them in
/// their entry points.
pub fn bind_body(dialect: Dialect, body: String) -> String {
    match dialect {
        Dialect::Metal => format!(
            "  const uint group_x_ = threadgroup_position_in_grid.x, group_y_ = threadgroup_position_in_grid.y;\n  \
             const uint thread_in_group_ = thread_position_in_threadgroup.x, group_threads_ = threads_per_threadgroup.x;\n  \
             const uint simdgroup_id_ = simdgroup_index_in_threadgroup, lane_id_ = thread_index_in_simdgroup;\n{body}"
        ),
        _ => body,
    }
}

#[derive(askama::Template)]
#[template(path = "common.h", escape = "none")]
struct CommonHeader {
    c: crate::codes::CodeConstants,
}

/// The fast tier's operand helpers (SPEC 3 codes as matrix-unit operands).
#[derive(askama::Template)]
#[template(path = "mma.h", escape = "none")]
struct MatrixUnitHeader {
    c: crate::codes::CodeConstants,
}

/// The matrix-unit vocabulary a fast-tier kernel adds to its header: the dialect's
/// matrix-unit shim (fragments, `mma`, fragment loads) and the shared operand helpers.
/// Kept out of [`prelude`] so the SIMT kernels' units (and the tuning entries hashed
/// from them) do not change when it does.
pub fn matrix_units(dialect: Dialect) -> String {
    let shim = match dialect {
        Dialect::Metal => with_mma_emulated(include_str!("../../templates/dialect/metal_mma.h")),
        Dialect::Cuda => include_str!("../../templates/dialect/cuda_mma.h").to_string(),
        Dialect::Cpu => with_mma_emulated(include_str!("../../templates/dialect/cpu_mma.h")),
    };
    shim_then(
        &shim,
        MatrixUnitHeader {
            c: crate::codes::CodeConstants::spec(),
        },
    )
}

/// The complete source a backend of `dialect` compiles for one kernel (for the CPU, one
/// part of a translation unit; several share a file).
pub fn unit(
    dialect: Dialect,
    symbol: &str,
    rendered: &Rendered,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> String {
    match dialect {
        Dialect::Cuda => cuda_unit(symbol, rendered, inputs, outputs),
        Dialect::Cpu => {
            let (includes, prelude) = cpu_prelude();
            includes + &cpu_unit_part(symbol, &prelude, rendered, inputs, outputs)
        }
        Dialect::Metal => metal::standalone(symbol, rendered, inputs, outputs),
    }
}

/// The full NVRTC source of a kernel: shim, shared functions, header, entry.
pub fn cuda_unit(
    symbol: &str,
    rendered: &Rendered,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> String {
    let mut params = Vec::new();
    for t in inputs {
        params.push(format!(
            "const {}* __restrict__ {}",
            t.elem.c_type(Dialect::Cuda),
            t.name
        ));
    }
    for t in outputs {
        params.push(format!(
            "{}* __restrict__ {}",
            t.elem.c_type(Dialect::Cuda),
            t.name
        ));
    }
    // A header that defines `KERNEL_ATTRS` (e.g. `MAX_REGISTERS(48)`) puts them on the
    // entry point; the others' units stay as they were (their tuning hashes with them).
    let attrs = if rendered.header.contains("#define KERNEL_ATTRS") {
        "KERNEL_ATTRS "
    } else {
        ""
    };
    format!(
        "{prelude}\n{header}\nextern \"C\" __global__ void {attrs}{symbol}({params}) {{\n{body}\n}}\n",
        prelude = prelude(Dialect::Cuda),
        header = rendered.header,
        params = params.join(", "),
        body = rendered.body,
    )
}

/// The CPU prelude split into its `#include` lines (which belong at file scope) and
/// the rest (which each kernel's namespace repeats).
pub fn cpu_prelude() -> (String, String) {
    let all = prelude(Dialect::Cpu);
    let (inc, rest): (Vec<&str>, Vec<&str>) = all.lines().partition(|l| l.starts_with("#include"));
    let join = |v: Vec<&str>| v.into_iter().map(|l| format!("{l}\n")).collect::<String>();
    (join(inc), join(rest))
}

/// One kernel of a CPU translation unit: its own namespace (so several specializations
/// share a file), an `extern "C"` entry binding the buffers by name, then the body.
pub fn cpu_unit_part(
    symbol: &str,
    prelude: &str,
    rendered: &Rendered,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> String {
    let mut bind = String::new();
    for (i, t) in inputs.iter().enumerate() {
        let ty = t.elem.c_type(Dialect::Cpu);
        bind.push_str(&format!(
            "  const {ty}* __restrict {} = (const {ty}*)bufs[{i}];\n",
            t.name
        ));
    }
    for (i, t) in outputs.iter().enumerate() {
        let ty = t.elem.c_type(Dialect::Cpu);
        bind.push_str(&format!(
            "  {ty}* __restrict {} = ({ty}*)bufs[{}];\n",
            t.name,
            inputs.len() + i
        ));
    }
    format!(
        "namespace ns_{symbol} {{\n{prelude}\n{header}\nextern \"C\" void {symbol}(void* const* bufs, uint32_t group_x_, uint32_t group_y_) {{\n{bind}{body}\n}}\n}}  // namespace ns_{symbol}\n",
        header = rendered.header,
        body = rendered.body,
    )
}
