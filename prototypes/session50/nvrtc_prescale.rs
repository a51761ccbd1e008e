//! Every `Prescale::catalog()` unit compiled by NVRTC for sm_90 without a GPU (fiftieth
//! session): copy into `examples/` and run with
//! `LD_LIBRARY_PATH=target/nvrtc/nvidia/cu13/lib cargo run --release --example nvrtc_prescale`
//! (NVRTC installed as `docs/backends.md` says).
use trellis::backend::cuda::{compile_offline, offline_ready};
use trellis::kernel::{Dialect, KernelSpec};
fn main() {
    offline_ready("sm_90").unwrap();
    for k in trellis::families::reduce_mma::Prescale::catalog() {
        let text = k.unit(Dialect::Cuda).unwrap();
        match compile_offline(&k.symbol(), &text, "sm_90") {
            Ok(r) => println!("{} {} -> {}: ok, {} registers", k.symbol(), k.act, k.out, r.registers),
            Err(e) => println!("{} FAILED: {e}", k.symbol()),
        }
    }
}
