//! Backends: where kernels run. `cpu` is always available; `cuda` when built with the
//! `cuda` feature and a driver is found at run time; `metal` on macOS.

pub mod cpu;

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
