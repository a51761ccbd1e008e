//! Trellis-coded (QTIP / EXL3) weights: the format of `SPEC.md`, its CPU reference, an
//! encoder, and generated kernels for CPU, CUDA and Metal with measured tuning tables.
//!
//! One concept, one module: [`geometry`] (SPEC 1), [`layout`] (SPEC 2), [`codes`]
//! (SPEC 3), [`reference`](mod@reference) (SPEC 4-6) with [`canonical`] (the SPEC 5 order), [`io`]
//! (SPEC 8).

extern crate self as trellis;

pub use askama;
pub use trellis_macros::kernel;

pub mod backend;
pub mod bounds;
pub mod canonical;
pub mod catalog;
pub mod codes;
pub mod dtype;
pub mod encode;
pub mod error;
pub mod geometry;
pub mod io;
pub mod kernel;
pub mod kernels;
pub mod layout;
pub mod matrix;
pub mod metal_source;
pub mod ops;
pub mod reference;
pub mod tune;
pub mod verify;

pub use codes::Code;
pub use dtype::{DType, ScaleDType};
pub use error::{Error, Result};
pub use geometry::Geometry;
pub use matrix::{Activations, QuantizedMatrix};
