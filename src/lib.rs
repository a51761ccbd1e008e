//! Trellis-coded (QTIP / EXL3) weights: the format of `SPEC.md`, its CPU reference, an
//! encoder, and generated kernels for CPU, CUDA and Metal with measured tuning tables.
//!
//! One concept, one module: [`geometry`] (SPEC 1), [`layout`] (SPEC 2), [`codes`]
//! (SPEC 3), [`reference`](mod@reference) (SPEC 4-6) with [`canonical`] (the SPEC 5 order),
//! [`check`] (SPEC 5 bits and the SPEC 7 bound), [`io`] (SPEC 8).
//!
//! Layers, bottom up: [`kernel`](mod@kernel) and [`backend`] (runtime: launch, memory, compile
//! cache, limits) beside [`codegen`] (each dialect's translation unit); [`family`] and
//! [`families`] (kernel families, one module each beside its template); [`tune`] and
//! [`verify`] (generic over families); [`ops`], the user facade, on top. [`key`] (what a
//! tuned choice is keyed by) sits with the family contract.

#![warn(missing_docs)]

extern crate self as trellis;

pub use askama;
pub use trellis_macros::kernel;

pub mod backend;
pub mod canonical;
pub mod catalog;
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
pub mod simt;
pub mod tune;
pub mod verify;

pub use codes::Code;
pub use dtype::{DType, ScaleDType};
pub use error::{Error, Result};
pub use geometry::Geometry;
pub use matrix::{Activations, QuantizedMatrix};
pub use numerics::{Tail, Tier};
