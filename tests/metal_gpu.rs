//! The facade's promises on an Apple GPU through MLX (`common/facade.rs`, which CI runs
//! on the CPU backend). Ignored where there is no such GPU; on a Mac:
//! `cargo test --release --test metal_gpu -- --ignored`. `cargo xtask verify --backend
//! metal` checks every specialization of the catalog there.
#![cfg(target_os = "macos")]

#[path = "common/facade.rs"]
mod facade;

use trellis::backend::metal::MetalBackend;

#[test]
#[ignore = "needs an Apple GPU: run with --ignored on a Mac"]
fn a_batch_larger_than_a_launch_runs_as_several() {
    facade::a_batch_larger_than_a_launch_runs_as_several(&MetalBackend::new().unwrap());
}
