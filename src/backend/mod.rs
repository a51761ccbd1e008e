//! Backends: where kernels run (launch, memory, compile cache, device id, limits), and
//! the one registry that opens them by name ([`AnyBackend`]). `cpu` is always
//! available, and `metal-sim` (the Metal dialect's kernels run on the CPU through the
//! shim); `cuda` when built with the `cuda` feature and a driver is found at run time;
//! `metal` on macOS. (`reference` names the plain SPEC implementation, which the CLI
//! runs without a backend.) Nothing here knows about families, tuning or the facade.
//!
//! **The on-disk kernel cache** ([`cache`]) is `$TRELLIS_CACHE_DIR` when set, else the
//! user's own cache directory (`$XDG_CACHE_HOME/trellis` or `~/.cache/trellis`;
//! `~/Library/Caches/trellis` on macOS), else `<temp>/trellis-kernel-cache-<uid>`, with a
//! subdirectory per backend (`cpu`, `metal-sim`, `cuda`). The root and each backend's
//! directory must be owned by this user (or root) and not writable by group or others,
//! since what is in them is loaded as code: one that is not (or is a
//! file, a dangling symlink, cannot be created) is an error naming it and where it came
//! from (`TRELLIS_CACHE_DIR` or the default). Processes and threads share
//! it safely (every file is written under its own name and renamed into place), and a
//! cached library that is damaged (its recorded SHA-256 does not match), does not load or
//! lacks a symbol is built again. The cache keys hold the compiler (the file it resolves
//! to, its size and modification time: [`host_cxx::HostCxx::identity`]), its flags and
//! the host's CPU (`-march=native`), so hosts sharing a home directory keep apart.
//!
//! `cpu`, `metal-sim` and `cuda` are `Send + Sync` (their compiled-kernel caches are
//! behind mutexes; a test asserts it), so one backend serves many threads; `metal` (MLX)
//! is neither, by type.

pub mod cache;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod host;
pub mod host_cxx;
#[cfg(target_os = "macos")]
pub mod metal;
pub mod metal_sim;

pub use crate::kernel::Backend;

/// Bytes every backend that owns its allocations (`cpu`, `cuda`, `metal-sim`) allocates
/// past a tensor's elements: a margin, so that a kernel's load a little past a buffer's
/// end stays inside its allocation. No kernel of this crate needs it: the one such load
/// found (a matrix-unit simdgroup with no step to run loading its first code words, up
/// to about 2 KB past the codes; AddressSanitizer on the cpu backend,
/// `TRELLIS_CPU_CXXFLAGS`) is clamped in the template on every dialect, and the quick
/// catalog runs clean under AddressSanitizer with this set to 0 (docs/backends.md).
/// `metal-sim` also checks an output's slack for writes past it, and poisons an
/// input's.
pub const READ_SLACK_BYTES: usize = 4096;
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

/// What this crate knows of a kernel backend before one is opened: one row of [`KINDS`]
/// each, read by the tuner, the tables' checks and `trellis select`.
#[derive(Clone, Copy, Debug)]
pub struct BackendKind {
    /// Its `--backend` name.
    pub name: &'static str,
    /// How the ids of its devices begin (`nvidia` for `nvidia-h200`): which backend's
    /// tables a device id given alone belongs to.
    pub device_ids: &'static str,
    /// The dialect it compiles (a tuning table's entries are hashed in it, so a table
    /// must name its backend's own).
    pub dialect: crate::kernel::Dialect,
    /// Whether it runs its kernels on a GPU (`cuda`, `metal`), not on this machine's CPU
    /// (`cpu`, and `metal-sim`, which runs the Metal kernels there): what the tuner's
    /// defaults (candidate space, repetitions, working set) follow.
    pub on_gpu: bool,
    /// The limits its devices allow, for `trellis select` without a device at hand:
    /// Metal's for MLX and the simulator, CUDA's with opt-in (sm_90's) otherwise (the
    /// CPU backend's own, which keeps its specializations portable).
    pub nominal_limits: crate::kernel::Limits,
}

/// This crate's kernel backends ([`AnyBackend::open`] opens each by name).
pub const KINDS: [BackendKind; 4] = {
    use crate::kernel::{Dialect, Limits};
    [
        BackendKind {
            name: "cpu",
            device_ids: "cpu",
            dialect: Dialect::Cpu,
            on_gpu: false,
            nominal_limits: Limits::CUDA_OPT_IN,
        },
        BackendKind {
            name: "cuda",
            device_ids: "nvidia",
            dialect: Dialect::Cuda,
            on_gpu: true,
            nominal_limits: Limits::CUDA_OPT_IN,
        },
        BackendKind {
            name: "metal",
            device_ids: "applegpu",
            dialect: Dialect::Metal,
            on_gpu: true,
            nominal_limits: Limits::METAL,
        },
        BackendKind {
            name: "metal-sim",
            device_ids: "metal-sim",
            dialect: Dialect::Metal,
            on_gpu: false,
            nominal_limits: Limits::METAL,
        },
    ]
};

/// The kernel backend called `name` (`None`: not one of this crate's).
pub fn kind(name: &str) -> Option<&'static BackendKind> {
    KINDS.iter().find(|k| k.name == name)
}

/// The backend a device id given alone belongs to (`nvidia-*`: cuda, `applegpu*`: metal,
/// `metal-sim`; anything else: cpu).
pub fn kind_of_device(id: &str) -> &'static BackendKind {
    KINDS
        .iter()
        .find(|k| id.starts_with(k.device_ids))
        .unwrap_or(&KINDS[0])
}

/// Names `--backend` accepts: `reference`, the plain SPEC implementation (not a kernel
/// backend: the facade's callers handle it), then [`KINDS`]'.
pub const NAMES: [&str; 5] = [
    "reference",
    KINDS[0].name,
    KINDS[1].name,
    KINDS[2].name,
    KINDS[3].name,
];

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

/// [`BackendKind::nominal_limits`] of `name` (CUDA's with opt-in for a name of no kernel
/// backend).
pub fn nominal_limits(name: &str) -> crate::kernel::Limits {
    kind(name).map_or(crate::kernel::Limits::CUDA_OPT_IN, |k| k.nominal_limits)
}

/// [`BackendKind::on_gpu`] of `name` (false for a name of no kernel backend).
pub fn runs_on_gpu(name: &str) -> bool {
    kind(name).is_some_and(|k| k.on_gpu)
}

/// [`BackendKind::dialect`] of `name` (`None`: not one of this crate's backends).
pub fn dialect_of(name: &str) -> Option<crate::kernel::Dialect> {
    kind(name).map(|k| k.dialect)
}

/// Generic code to run on whichever backend an [`AnyBackend`] holds.
pub trait BackendVisitor {
    /// What the visit returns.
    type Out;
    /// Run on backend `b`, whatever its type.
    fn visit<B: Backend>(self, b: &B) -> Self::Out;
}

/// A backend chosen by name at run time: the one registry of backends. Open it once
/// and keep it; it holds the compiled-kernel cache.
pub enum AnyBackend {
    /// `cpu`: C++ built by the host compiler, run on the CPU.
    Cpu(CpuBackend),
    /// `metal-sim`: Metal kernels simulated on the CPU.
    MetalSim(metal_sim::MetalSimBackend),
    /// `cuda`: an NVIDIA GPU (with the `cuda` feature).
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaBackend),
    /// `metal`: the Apple GPU through MLX (macOS only).
    #[cfg(target_os = "macos")]
    Metal(metal::MetalBackend),
}

impl AnyBackend {
    /// Open the backend called `name` (`cpu`, `metal-sim`, `cuda`, `metal`; `reference`
    /// is an error: it is no kernel backend).
    pub fn open(name: &str) -> Result<Self> {
        match name {
            "cpu" => Ok(AnyBackend::Cpu(CpuBackend::new()?)),
            "metal-sim" => Ok(AnyBackend::MetalSim(metal_sim::MetalSimBackend::new()?)),
            #[cfg(feature = "cuda")]
            "cuda" => Ok(AnyBackend::Cuda(cuda::CudaBackend::new(0)?)),
            #[cfg(not(feature = "cuda"))]
            "cuda" => Err(unavailable(
                "cuda",
                "not built in (enable the `cuda` feature)",
            )),
            #[cfg(target_os = "macos")]
            "metal" => Ok(AnyBackend::Metal(metal::MetalBackend::new()?)),
            #[cfg(not(target_os = "macos"))]
            "metal" => Err(unavailable("metal", "Metal runs on macOS only")),
            "reference" => Err(Error::invalid(
                "backend",
                name,
                "the reference is not a kernel backend (use cpu, cuda or metal)",
            )),
            other => Err(Error::invalid(
                "backend",
                other,
                format!("expected one of {}", NAMES.join(", ")),
            )),
        }
    }

    /// Run `v` on the held backend.
    pub fn visit<V: BackendVisitor>(&self, v: V) -> V::Out {
        match self {
            AnyBackend::Cpu(b) => v.visit(b),
            AnyBackend::MetalSim(b) => v.visit(b),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => v.visit(b),
            #[cfg(target_os = "macos")]
            AnyBackend::Metal(b) => v.visit(b),
        }
    }

    /// One line about the device.
    pub fn describe(&self) -> String {
        struct Describe;
        impl BackendVisitor for Describe {
            type Out = String;
            fn visit<B: Backend>(self, b: &B) -> String {
                format!("{} ({})", b.device_id(), b.timer())
            }
        }
        match self {
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => {
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
            }
            AnyBackend::Cpu(_) => format!(
                "{} (C++ via $CXX or c++, {} threads)",
                CpuBackend::cpu_model_id(),
                rayon::current_num_threads()
            ),
            AnyBackend::MetalSim(b) => format!(
                "Metal kernels as MLX builds them, run on the CPU (C++ via `{}`)",
                b.compiler()
            ),
            #[allow(unreachable_patterns)]
            other => other.visit(Describe),
        }
    }
}

/// Every backend name with a one-line description, or why it is unavailable.
pub fn devices() -> Vec<(&'static str, std::result::Result<String, String>)> {
    NAMES
        .iter()
        .map(|&name| {
            let status = if name == "reference" {
                Ok("plain Rust SPEC reference (oracle)".to_string())
            } else {
                AnyBackend::open(name)
                    .map(|b| b.describe())
                    .map_err(|e| e.to_string())
            };
            (name, status)
        })
        .collect()
}

#[allow(dead_code)]
fn unavailable(name: &str, reason: &str) -> Error {
    Error::Unavailable {
        backend: name.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of [`KINDS`] opens as a backend of that name and dialect, or is
    /// unavailable here (no GPU, not macOS); no other name opens.
    #[test]
    fn each_kind_opens_as_itself() {
        struct Facts;
        impl BackendVisitor for Facts {
            type Out = (&'static str, crate::kernel::Dialect);
            fn visit<B: Backend>(self, b: &B) -> Self::Out {
                (b.name(), b.dialect())
            }
        }
        for k in KINDS {
            match AnyBackend::open(k.name) {
                Ok(b) => assert_eq!(b.visit(Facts), (k.name, k.dialect)),
                Err(Error::Unavailable { backend, .. }) => assert_eq!(backend, k.name),
                Err(e) => panic!("{}: {e}", k.name),
            }
        }
        assert_eq!(NAMES[1..], KINDS.map(|k| k.name));
        for (id, name) in [
            ("nvidia-h200", "cuda"),
            ("applegpu_g13s", "metal"),
            ("metal-sim", "metal-sim"),
            ("cpu-intel-xeon-processor", "cpu"),
            ("zz-unknown", "cpu"),
        ] {
            assert_eq!(kind_of_device(id).name, name, "{id}");
        }
        for other in ["reference", "vulkan", ""] {
            assert!(AnyBackend::open(other).is_err(), "{other}");
        }
    }

    #[test]
    fn nominal_limits_are_the_backends_own() {
        // `trellis select --backend metal-sim` must not pick what the simulator rejects.
        let sim = metal_sim::MetalSimBackend::new().unwrap().limits();
        assert_eq!(nominal_limits("metal-sim"), sim);
        assert_eq!(nominal_limits("metal"), sim);
        assert_eq!(
            nominal_limits("cpu"),
            cpu::CpuBackend::new().unwrap().limits()
        );
        assert_eq!(nominal_limits("cuda"), crate::kernel::Limits::CUDA_OPT_IN);
    }
}
