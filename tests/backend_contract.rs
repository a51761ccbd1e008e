//! What `Backend::bind` and `run` promise whoever holds a compiled kernel
//! (`common/contract.rs`), on the CPU backend; and a declaration's fields are validated
//! before its launch shape is computed.

#[path = "common/contract.rs"]
mod contract;

use trellis::backend::CpuBackend;
use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::family::{self, Family};
use trellis::kernel::{Backend, KernelSpec};

#[test]
fn outputs_a_kernel_needs_zeroed_are_zeroed_when_bound() {
    contract::zeroed_when_bound(&CpuBackend::new().unwrap());
}

#[test]
fn a_compiled_kernel_binds_only_to_its_own_launch() {
    contract::binds_only_its_own(&CpuBackend::new().unwrap());
}

#[test]
fn an_empty_grid_runs_nothing() {
    contract::empty_grid_runs_nothing(&CpuBackend::new().unwrap());
}

#[test]
fn subnormal_sums_keep_their_bits() {
    contract::subnormal_sums_keep_their_bits(&CpuBackend::new().unwrap());
}

#[test]
fn a_ranged_download_reads_its_bytes() {
    contract::download_range_reads_its_bytes(&CpuBackend::new().unwrap());
}

#[test]
fn dynamic_threadgroup_memory_is_part_of_the_declared() {
    contract::dynamic_within_declared(&CpuBackend::new().unwrap());
}

/// The CPU's bound kernel holds the library its entry lives in: it runs after the
/// backend that compiled it (and its cache) and the compiled handle are gone.
#[test]
fn a_bound_kernel_outlives_its_backend_and_compiled_handle() {
    let (p, host, v) = contract::split_k();
    let keep = CpuBackend::new().unwrap();
    let dev = ReduceMmaFamily::upload(&keep, &p, &host).unwrap();
    let want = family::run::<ReduceMmaFamily, _>(&keep, &p, v, &dev).unwrap();
    let k = ReduceMmaFamily::kernel(&p, v);
    let launch = k.launch_request().unwrap();
    let mut outs = family::alloc_outputs(&keep, &k).unwrap();
    let inputs = ReduceMmaFamily::inputs(&dev, &v).unwrap();
    {
        let mut refs: Vec<_> = outs.iter_mut().collect();
        let mut bound = {
            let b = CpuBackend::new().unwrap();
            let compiled = b.compile(&launch).unwrap();
            b.bind(&compiled, &launch, &inputs, &mut refs).unwrap()
        };
        keep.run(&mut bound).unwrap();
    }
    assert!(family::download(&keep, &outs[0]).unwrap().bits_eq(&want[0]));
}

#[test]
fn a_declaration_is_validated_before_its_launch_shape() {
    let (p, _, v) = contract::split_k();
    let mut k = ReduceMmaFamily::kernel(&p, v);
    k.t = 0; // `cols / t` in its shapes would divide by zero
    let e = k.launch_request().err().expect("t = 0").to_string();
    assert!(e.contains("T = 0"), "{e}");
    let mut k = ReduceMmaFamily::kernel(&p, v);
    k.variant.row_tiles = 0;
    let e = k.launch_request().err().expect("0 row tiles").to_string();
    assert!(e.contains("row_tiles"), "{e}");
}
