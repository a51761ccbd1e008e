//! The complete Metal source of a kernel, assembled the way MLX's `fast::metal_kernel`
//! assembles it (`write_signature` in MLX's `custom_kernel.cpp`): the header, then a
//! `[[kernel]]` function whose signature MLX writes from the input and output names,
//! then the body. `xtask render` writes these files, and `tests/metal_shim.rs` compiles
//! them with the host C++ compiler against `templates/dialect/msl_shim/metal_stdlib`.
//!
//! MLX also prepends its own `utils.h` (which defines `bfloat16_t`) when it builds the
//! library; that part is not reproduced here (the shim provides `bfloat16_t`).

use super::{prelude, Dialect, Grid, Rendered, TensorSpec};
use crate::error::{Error, Result};

/// Inputs with fewer elements than this are passed in the `constant` address space
/// (MLX's `max_constant_array_size`).
pub const MAX_CONSTANT_ARRAY_SIZE: usize = 8;

/// The thread attributes MLX declares when their name appears in the body, with the
/// types MLX gives them, in MLX's order.
pub const THREAD_ATTRIBUTES: [(&str, &str); 20] = [
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
];

/// One parameter of the `[[kernel]]` signature MLX writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// `[[buffer(index)]]`: an input, an output, or an input's `_shape`/`_strides`/`_ndim`.
    Buffer {
        /// The declaration, e.g. `const device float* x`.
        decl: String,
        /// The buffer slot `index` in `[[buffer(index)]]`, counted across all buffers.
        index: usize,
        /// What the buffer carries.
        what: BufferKind,
    },
    /// A thread attribute the body names, e.g. `uint3 thread_position_in_grid`.
    Attribute {
        /// The attribute's name, one of [`THREAD_ATTRIBUTES`].
        name: &'static str,
        /// Its MSL type as MLX declares it (`uint` or `uint3`).
        ty: &'static str,
    },
}

/// What a buffer parameter carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Input `i` (by pointer; `scalar`: a 0-d input, bound by reference).
    Input {
        /// Index of the input in the kernel's input list.
        i: usize,
        /// Whether the input is 0-d (bound by reference, not pointer).
        scalar: bool,
    },
    /// Output `i`.
    Output {
        /// Index of the output in the kernel's output list.
        i: usize,
    },
    /// `<input i>_shape` (`const constant int*`).
    Shape {
        /// Index of the input whose shape this is.
        i: usize,
    },
    /// `<input i>_strides` (`const constant int64_t*`).
    Strides {
        /// Index of the input whose strides these are.
        i: usize,
    },
    /// `<input i>_ndim` (`const constant int&`).
    Ndim {
        /// Index of the input whose rank this is.
        i: usize,
    },
}

/// The parameters MLX declares for a kernel with this body, inputs and outputs, in
/// order (MLX's `write_signature`): one `[[buffer(i)]]` per input, with the `_shape`,
/// `_strides` and `_ndim` buffers the body mentions right after it; then the outputs;
/// then the thread attributes the body names.
pub fn signature(body: &str, inputs: &[TensorSpec], outputs: &[TensorSpec]) -> Vec<Param> {
    let mut params = Vec::new();
    let mut index = 0usize;
    let mut buffer = |decl: String, what: BufferKind, params: &mut Vec<Param>| {
        params.push(Param::Buffer { decl, index, what });
        index += 1;
    };
    for (i, t) in inputs.iter().enumerate() {
        let ty = t.elem.c_type(Dialect::Metal);
        let location = if t.len() < MAX_CONSTANT_ARRAY_SIZE {
            "constant"
        } else {
            "device"
        };
        let scalar = t.shape.is_empty();
        let reference = if scalar { "&" } else { "*" };
        buffer(
            format!("const {location} {ty}{reference} {}", t.name),
            BufferKind::Input { i, scalar },
            &mut params,
        );
        if !scalar {
            let name = t.name;
            if body.contains(&format!("{name}_shape")) {
                buffer(
                    format!("const constant int* {name}_shape"),
                    BufferKind::Shape { i },
                    &mut params,
                );
            }
            if body.contains(&format!("{name}_strides")) {
                buffer(
                    format!("const constant int64_t* {name}_strides"),
                    BufferKind::Strides { i },
                    &mut params,
                );
            }
            if body.contains(&format!("{name}_ndim")) {
                buffer(
                    format!("const constant int& {name}_ndim"),
                    BufferKind::Ndim { i },
                    &mut params,
                );
            }
        }
    }
    for (i, t) in outputs.iter().enumerate() {
        buffer(
            format!("device {}* {}", t.elem.c_type(Dialect::Metal), t.name),
            BufferKind::Output { i },
            &mut params,
        );
    }
    for (name, ty) in THREAD_ATTRIBUTES {
        if body.contains(name) {
            params.push(Param::Attribute { name, ty });
        }
    }
    params
}

/// The `header` the Metal backend gives MLX: the Metal prelude, then the kernel's header.
pub fn mlx_header(rendered: &Rendered) -> String {
    format!("{}{}", prelude(Dialect::Metal), rendered.header)
}

/// The full kernel source MLX compiles for `rendered` (a Metal rendering): the Metal
/// prelude and the kernel's header ([`mlx_header`]), the `[[kernel]] void <symbol>(...)`
/// signature ([`signature`]), then the body.
///
/// MLX names the function `custom_kernel_<name>_<dtypes>`; here it is `symbol`, and
/// element types are spelled with [`Elem::c_type`](super::Elem::c_type) (`half` where MLX
/// writes its alias `float16_t`).
pub fn standalone(
    symbol: &str,
    rendered: &Rendered,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> String {
    debug_assert_eq!(rendered.dialect, Dialect::Metal);
    let params: Vec<String> = signature(&rendered.body, inputs, outputs)
        .into_iter()
        .map(|p| match p {
            Param::Buffer { decl, index, .. } => format!("  {decl} [[buffer({index})]]"),
            Param::Attribute { name, ty } => format!("  {ty} {name} [[{name}]]"),
        })
        .collect();
    format!(
        "{header}[[kernel]] void {symbol}(\n{params}) {{\n{body}\n}}\n",
        header = mlx_header(rendered),
        params = params.join(",\n"),
        body = rendered.body,
    )
}

/// Threadgroup memory a kernel may declare on Apple GPUs (MLX's 32 KB).
pub const MAX_THREADGROUP_MEMORY: usize = 32 * 1024;

/// Threads per threadgroup Apple GPUs allow (`maxTotalThreadsPerThreadgroup` is at most
/// this, and lower for kernels that use many registers).
pub const MAX_THREADS_PER_THREADGROUP: u64 = 1024;

/// The `grid` and `thread_group` the Metal backend passes to `MetalKernel::apply`.
/// MLX dispatches threads, not groups (`dispatchThreads`): the grid counts threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlxDispatch {
    /// Threads along x, y, z: x is groups times threads per group, y and z are groups.
    pub grid: (i32, i32, i32),
    /// Threads per threadgroup: `(grid.threads, 1, 1)`.
    pub thread_group: (i32, i32, i32),
}

impl MlxDispatch {
    /// The dispatch of a launch of `grid` (groups of `grid.threads` threads along x).
    pub fn of(kernel: &str, grid: Grid) -> Result<Self> {
        let dim = |v: u64, what: &str| {
            i32::try_from(v).map_err(|_| {
                Error::invalid(format!("{kernel} {what}"), v, "exceeds MLX's i32 grid")
            })
        };
        let threads = dim(grid.threads as u64, "threads per group")?;
        Ok(MlxDispatch {
            grid: (
                dim(grid.groups[0] as u64 * grid.threads as u64, "grid x")?,
                dim(grid.groups[1] as u64, "grid y")?,
                dim(grid.groups[2] as u64, "grid z")?,
            ),
            thread_group: (threads, 1, 1),
        })
    }

    /// What Metal runs for this dispatch: MLX clamps each threadgroup dimension to the
    /// grid's (`MTL::Size(min(tx, gx), ...)` in its custom kernel's `eval_gpu`), then
    /// calls `dispatchThreads(grid, group)`, whose edge groups are partial.
    pub fn metal_threads(&self) -> ([u32; 3], [u32; 3]) {
        let (g, t) = (self.grid, self.thread_group);
        let grid = [g.0.max(0) as u32, g.1.max(0) as u32, g.2.max(0) as u32];
        let tg = [
            (t.0.max(1) as u32).min(grid[0].max(1)),
            (t.1.max(1) as u32).min(grid[1].max(1)),
            (t.2.max(1) as u32).min(grid[2].max(1)),
        ];
        (grid, tg)
    }
}
