//! Backends: where kernels run. `cpu` is always available; `cuda` when built with the
//! `cuda` feature and a driver is found at run time; `metal` on macOS.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(target_os = "macos")]
pub mod metal;
pub mod metal_sim;

pub use crate::kernel::Backend;
pub use cpu::{CpuBackend, CpuTensor};

/// Lower-case, dash-separated id from a device name (`NVIDIA H200` -> `nvidia-h200`).
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

use crate::error::{Error, Result};
use crate::kernels::{Tail, Variant};
use crate::matrix::{Activations, QuantizedMatrix};

/// Names `--backend` accepts.
pub const NAMES: [&str; 5] = ["reference", "cpu", "cuda", "metal", "metal-sim"];

/// The best backend available here: `cuda` when a driver and device are found,
/// `metal` on macOS, else `cpu`.
pub fn default_name() -> &'static str {
    #[cfg(feature = "cuda")]
    if cuda::probe().is_ok() {
        return "cuda";
    }
    if cfg!(target_os = "macos") {
        return "metal";
    }
    "cpu"
}

/// Every backend with a one-line description, or why it is unavailable.
pub fn devices() -> Vec<(&'static str, std::result::Result<String, String>)> {
    let cpu = CpuBackend::new().map(|_| {
        format!(
            "{} (C++ via $CXX or c++, {} threads)",
            CpuBackend::cpu_model_id(),
            rayon::current_num_threads()
        )
    });
    let mut out = vec![
        (
            "reference",
            Ok("plain Rust SPEC reference (oracle)".to_string()),
        ),
        ("cpu", cpu.map_err(|e| e.to_string())),
    ];
    #[cfg(feature = "cuda")]
    out.push((
        "cuda",
        cuda::CudaBackend::new(0)
            .map(|b| {
                let i = b.info();
                format!(
                    "{} ({}, sm_{}{}, {} SMs, {:.1} GiB)",
                    i.id,
                    i.name,
                    i.compute_capability.0,
                    i.compute_capability.1,
                    i.sm_count,
                    i.memory_bytes as f64 / (1u64 << 30) as f64
                )
            })
            .map_err(|e| e.to_string()),
    ));
    #[cfg(not(feature = "cuda"))]
    out.push((
        "cuda",
        Err("not built in (enable the `cuda` feature)".into()),
    ));
    out.push(("metal", metal_status()));
    out.push((
        "metal-sim",
        metal_sim::MetalSimBackend::new()
            .map(|b| {
                format!(
                    "Metal kernels as MLX builds them, run on the CPU (C++ via `{}`)",
                    b.compiler()
                )
            })
            .map_err(|e| e.to_string()),
    ));
    out
}

#[cfg(target_os = "macos")]
fn metal_status() -> std::result::Result<String, String> {
    metal::MetalBackend::new()
        .map(|b| b.device_id())
        .map_err(|e| e.to_string())
}

#[cfg(not(target_os = "macos"))]
fn metal_status() -> std::result::Result<String, String> {
    Err("Metal runs on macOS only".into())
}

fn unknown(name: &str) -> Error {
    Error::invalid(
        "backend",
        name,
        format!("expected one of {}", NAMES.join(", ")),
    )
}

fn unavailable(name: &str, reason: &str) -> Error {
    Error::Unavailable {
        backend: name.into(),
        reason: reason.into(),
    }
}

/// Run `$body` with `$b` bound to the backend called `$name`; `reference` is handled by
/// the caller.
macro_rules! with_backend {
    ($name:expr, |$b:ident| $body:expr) => {
        match $name {
            "cpu" => {
                let $b = CpuBackend::new()?;
                $body
            }
            #[cfg(feature = "cuda")]
            "cuda" => {
                let $b = cuda::CudaBackend::new(0)?;
                $body
            }
            #[cfg(not(feature = "cuda"))]
            "cuda" => Err(unavailable(
                "cuda",
                "not built in (enable the `cuda` feature)",
            )),
            #[cfg(target_os = "macos")]
            "metal" => {
                let $b = metal::MetalBackend::new()?;
                $body
            }
            #[cfg(not(target_os = "macos"))]
            "metal" => Err(unavailable("metal", "Metal runs on macOS only")),
            "metal-sim" => {
                let $b = metal_sim::MetalSimBackend::new()?;
                $body
            }
            other => Err(unknown(other)),
        }
    };
}

/// `y = W x` on the named backend; `variant: None` asks the tuning tables.
pub fn matvec(
    name: &str,
    w: &QuantizedMatrix,
    x: &Activations,
    variant: Option<Variant>,
) -> Result<Activations> {
    if name == "reference" {
        return crate::reference::reduce(w, x);
    }
    with_backend!(name, |b| {
        let v = match variant {
            Some(v) => v,
            None => {
                crate::tune::select_for(&b, crate::tune::Family::Reduce, &w.geometry, None, x)?
                    .variant
            }
        };
        crate::ops::matvec(&b, w, x, v)
    })
}

/// `mid = silu(G x) * (U x)` on the named backend; `variant: None` asks the tuning tables.
pub fn gate_up(
    name: &str,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    variant: Option<Variant>,
) -> Result<Activations> {
    if name == "reference" {
        if tail != Tail::Exact {
            return Err(Error::invalid(
                "tail",
                tail,
                "the reference implements tail = exact only",
            ));
        }
        return crate::reference::gate_up(gate, up, x);
    }
    if name == "cpu" && tail != Tail::Exact {
        return Err(Error::invalid(
            "tail",
            tail,
            "the cpu backend implements tail = exact only (native is for GPU dialects)",
        ));
    }
    with_backend!(name, |b| {
        let v = match variant {
            Some(v) => v,
            None => {
                crate::tune::select_for(
                    &b,
                    crate::tune::Family::GateUp,
                    &gate.geometry,
                    Some(&up.geometry),
                    x,
                )?
                .variant
            }
        };
        crate::ops::gate_up(&b, gate, up, x, tail, v)
    })
}
