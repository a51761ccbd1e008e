//! The complete Metal source of a kernel, assembled the way MLX's `fast::metal_kernel`
//! assembles it (`write_signature` in MLX's `custom_kernel.cpp`): the header, then a
//! `[[kernel]]` function whose signature MLX writes from the input and output names,
//! then the body. `xtask render` writes these files, and `tests/metal_shim.rs` compiles
//! them with the host C++ compiler against `templates/dialect/msl_shim/metal_stdlib`.
//!
//! MLX also prepends its own `utils.h` (which defines `bfloat16_t`) when it builds the
//! library; that part is not reproduced here (the shim provides `bfloat16_t`).

use super::{prelude, Dialect, Rendered};
use crate::kernel::TensorSpec;

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

/// The full kernel source MLX compiles for `rendered` (a Metal rendering): the Metal
/// prelude and the kernel's header, the `[[kernel]] void <symbol>(...)` signature with
/// one `[[buffer(i)]]` per input and output (plus the `<name>_shape`, `_strides` and
/// `_ndim` buffers MLX adds when the body mentions them) and the thread attributes the
/// body names, then the body.
///
/// MLX names the function `custom_kernel_<name>_<dtypes>`; here it is `symbol`, and
/// element types are spelled with [`crate::kernel::Elem::c_type`] (`half` where MLX
/// writes its alias `float16_t`).
pub fn standalone(
    symbol: &str,
    rendered: &Rendered,
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
) -> String {
    debug_assert_eq!(rendered.dialect, Dialect::Metal);
    let body = &rendered.body;
    let mut params = Vec::new();
    let mut index = 0usize;
    let mut buffer = |decl: String, params: &mut Vec<String>| {
        params.push(format!("  {decl} [[buffer({index})]]"));
        index += 1;
    };
    for t in inputs {
        let ty = t.elem.c_type(Dialect::Metal);
        let location = if t.len() < MAX_CONSTANT_ARRAY_SIZE {
            "constant"
        } else {
            "device"
        };
        let reference = if t.shape.is_empty() { "&" } else { "*" };
        buffer(
            format!("const {location} {ty}{reference} {}", t.name),
            &mut params,
        );
        if !t.shape.is_empty() {
            let name = t.name;
            if body.contains(&format!("{name}_shape")) {
                buffer(format!("const constant int* {name}_shape"), &mut params);
            }
            if body.contains(&format!("{name}_strides")) {
                buffer(
                    format!("const constant int64_t* {name}_strides"),
                    &mut params,
                );
            }
            if body.contains(&format!("{name}_ndim")) {
                buffer(format!("const constant int& {name}_ndim"), &mut params);
            }
        }
    }
    for t in outputs {
        buffer(
            format!("device {}* {}", t.elem.c_type(Dialect::Metal), t.name),
            &mut params,
        );
    }
    for (attr, ty) in THREAD_ATTRIBUTES {
        if body.contains(attr) {
            params.push(format!("  {ty} {attr} [[{attr}]]"));
        }
    }
    format!(
        "{prelude}{header}[[kernel]] void {symbol}(\n{params}) {{\n{body}\n}}\n",
        prelude = prelude(Dialect::Metal),
        header = rendered.header,
        params = params.join(",\n"),
    )
}
