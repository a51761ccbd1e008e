//! Trellis-coded (QTIP / EXL3) weights: the format of `SPEC.md`, its CPU reference, an
//! encoder, and generated kernels for CPU, CUDA and Metal with measured tuning tables.
//!
//! # Where to start
//!
//! - **Calling kernels**: the facade [`ops`] ([`ops::matvec`], [`ops::gate_up`],
//!   [`ops::expand`]) on a backend you open once and keep (it holds the compiled
//!   kernels): [`backend::CpuBackend`], or any by name with [`backend::AnyBackend::open`]
//!   (whose `matvec` and `gate_up` run the facade on the backend it holds). An
//!   [`ops::Resident`] matrix stays on the device for any number of calls, and runs on
//!   activations kept there too ([`ops::Resident::matvec_device`]).
//!   The [`Tier`] picks the families: `Exact` (SPEC 5 bits) or `Fast` (the SPEC 7 bound,
//!   on matrix units); the tuning tables pick the variant ([`tune::Selector`]). Files are
//!   read and written by [`io`]; matrices are made by [`encode`]. `examples/facade.rs`
//!   runs all of it on the CPU (`cargo run --release --example facade`).
//! - **Kernels**: a kernel is a struct, an Askama template and the [`kernel`](macro@kernel)
//!   attribute; a *family* ([`family::Family`]) makes it verifiable, tunable and selectable.
//!   This crate's families are in [`families`] (`reduce`, `gate_up`, `expand`, and the fast
//!   tier's `reduce_mma`, `gate_up_mma`), one module beside each template of `templates/`.
//!   `docs/kernels.md` walks through writing one.
//! - **Backends**: the backends of [`backend`] (`cpu`, `cuda`, `metal`, `metal-sim`)
//!   implement [`kernel::Backend`]: compile, bind, launch, cache; [`codegen`] writes each
//!   dialect's translation unit. `docs/backends.md` says what each one does.
//!
//! ```no_run
//! use std::path::Path;
//! use trellis::backend::CpuBackend;
//! use trellis::{io, ops, Tier};
//!
//! fn main() -> trellis::Result<()> {
//!     let w = io::read_quantized(Path::new("w.safetensors"), "w")?;
//!     let x = io::read_activations(Path::new("x.safetensors"), "x")?;
//!     let b = CpuBackend::new()?; // open once: it keeps its compiled kernels
//!     let y = ops::matvec(&b, &w, &x, Tier::Exact)?; // y = W x: [M, R], SPEC 5 bits
//!     io::write_activations(Path::new("y.safetensors"), "y", &y)
//! }
//! ```
//!
//! # The modules
//!
//! One concept, one module: [`geometry`] (SPEC 1), [`layout`] (SPEC 2), [`codes`]
//! (SPEC 3), [`dtype`] (SPEC 4's `round_T`), [`matrix`] (the in-memory tensors),
//! [`reference`](mod@reference) (SPEC 4-6) with [`canonical`] (the SPEC 5 order),
//! [`check`] (SPEC 5 bits and the SPEC 7 bound), [`io`] (SPEC 8), [`encode`] (the
//! encoder), [`numerics`] (the tier and the SwiGLU tail a caller chooses), [`error`].
//!
//! Layers, bottom up: [`kernel`](mod@kernel) and [`backend`] (runtime: launch, memory, compile
//! cache, limits) beside [`codegen`] (each dialect's translation unit); [`family`] and
//! [`families`] (kernel families, one module each beside its template, and what they
//! share: [`families::simt`] and [`families::catalog`], the SIMT families' variant, verify
//! cases and candidate space; [`families::mma`], the matrix-unit families'); [`tune`] and
//! [`verify`] (generic over families); [`ops`], the user facade, on top. [`key`] (what a
//! tuned choice is keyed by) sits with the family contract.

#![warn(missing_docs)]

extern crate self as trellis;

pub use askama;
pub use trellis_macros::kernel;

/// `FromStr` (an error naming `$field` and the names it takes), `Display` and serde for
/// an enum by its `name()`: one spelling on the command line, in tables and in reports.
macro_rules! parse_by_name {
    ($ty:ty, $field:literal, [$($v:expr),*]) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::error::Result<Self> {
                [$($v),*].into_iter().find(|v| v.name() == s).ok_or_else(|| {
                    $crate::error::Error::invalid($field, s, format!("expected one of {}", [$($v.name()),*].join(", ")))
                })
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

pub mod backend;
pub mod canonical;
pub mod check;
pub mod codegen;
pub mod codes;
pub mod dtype;
pub mod encode;
pub mod error;
pub mod families;
pub mod family;
pub mod geometry;
pub mod io;
pub mod kernel;
pub mod key;
pub mod layout;
pub mod matrix;
pub mod numerics;
pub mod ops;
pub mod reference;
pub mod tune;
pub mod verify;

pub use codes::Code;
pub use dtype::{DType, ScaleDType};
pub use error::{Error, Result};
pub use geometry::Geometry;
pub use matrix::{Activations, QuantizedMatrix};
pub use numerics::{Tail, Tier};
