//! The CUDA backend from several threads, on a GPU: one backend shared by threads and
//! backends of their own, exact and fast, each result checked against the reference (bit
//! for bit, or within SPEC 7). Ignored where there is no GPU (CI has none); on a GPU
//! machine: `cargo test --release --test cuda_threads -- --ignored` (or the built test
//! binary with `--ignored`, as the device checks run it).
#![cfg(feature = "cuda")]

use trellis::backend::cuda::CudaBackend;
use trellis::numerics::Tier;
use trellis::{check, ops, reference, Activations, Code, DType, Geometry, QuantizedMatrix};

/// A resident matrix may be shared by the threads (checked when this file compiles, as
/// clippy's `--features cuda` build does on any machine).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<ops::Resident<'static, CudaBackend>>();
};

/// A `reduce` problem of `rows` x 2048, k 2, L 12, 1mad, M samples of bf16 x.
fn problem(rows: usize, m: usize, seed: u64) -> (QuantizedMatrix, Activations) {
    let g = Geometry::new(rows, 2048, 256, 2, 12, Code::OneMad).unwrap();
    let x = check::random_activations(DType::Bf16, m, g.cols, seed + 1);
    (check::random_matrix(g, seed), x)
}

/// Each thread's problem through `b`, checked: exact bit for bit, fast within SPEC 7.
fn run_and_check(b: &CudaBackend, t: u64) {
    for (rows, m) in [(512, 1), (1024, 4), (768, 8)] {
        let (w, x) = problem(rows, m, 0x9e37_79b9_7f4a_7c15 ^ (t * 7919 + rows as u64));
        let want = reference::reduce(&w, &x).unwrap();
        let exact = ops::matvec(b, &w, &x, Tier::Exact).unwrap();
        assert_eq!(
            exact.to_bytes(),
            want.to_bytes(),
            "thread {t}: exact {rows} x M {m}"
        );
        let fast = ops::matvec(b, &w, &x, Tier::Fast).unwrap();
        let real = check::RealSums::of(&w, &x).unwrap();
        check::fast_reduce(&fast, &real)
            .unwrap_or_else(|e| panic!("thread {t}: fast {rows} x M {m}: {e}"));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn threads_share_a_cuda_backend_and_open_their_own() {
    let shared = CudaBackend::new(0).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let shared = &shared;
            s.spawn(move || run_and_check(shared, t));
        }
        for t in 4..6 {
            s.spawn(move || run_and_check(&CudaBackend::new(0).unwrap(), t));
        }
    });
}

/// A resident of a shared backend and matrix (`Resident::shared`, `'static`) serves
/// spawned threads on the GPU: one upload, each thread's samples checked against the
/// reference (exact bit for bit, fast within SPEC 7), and a `gate_up` pairing it with a
/// borrowed resident.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn a_shared_resident_serves_spawned_threads_on_cuda() {
    use std::sync::Arc;
    use trellis::numerics::Tail;
    let b = Arc::new(CudaBackend::new(0).unwrap());
    let (w, _) = problem(1024, 1, 0x5eed);
    let w = Arc::new(w);
    let r = Arc::new(ops::Resident::shared(b.clone(), w.clone()).unwrap());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let (r, w) = (r.clone(), w.clone());
            std::thread::spawn(move || {
                let m = [1, 3, 8, 20][t as usize];
                let x = check::random_activations(DType::Bf16, m, w.geometry.cols, 77 + t);
                let want = reference::reduce(&w, &x).unwrap();
                let exact = r.matvec(&x, Tier::Exact).unwrap();
                assert_eq!(exact.to_bytes(), want.to_bytes(), "thread {t}: exact M {m}");
                let fast = r.matvec(&x, Tier::Fast).unwrap();
                let real = check::RealSums::of(&w, &x).unwrap();
                check::fast_reduce(&fast, &real)
                    .unwrap_or_else(|e| panic!("thread {t}: fast M {m}: {e}"));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (u, x) = problem(1024, 4, 0x5eee);
    let ru = ops::Resident::new(&*b, &u).unwrap();
    let mid = r.gate_up(&ru, &x, Tail::Exact, Tier::Exact).unwrap();
    let want = reference::gate_up(&w, &u, &x).unwrap();
    assert_eq!(
        mid.to_bytes(),
        want.to_bytes(),
        "gate_up of a shared and a borrowed resident"
    );
}

/// The fast tier on the device from several threads at once, all of one key (M 2), on
/// one resident and one stream: each call takes buffers from the resident's pool and
/// puts them back once its kernels are queued, so a call's prescale never writes what
/// another's matrix kernel still reads. Every y is the host facade's bits.
#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
fn fast_device_calls_from_several_threads_keep_their_bits() {
    use trellis::numerics::Tail;
    use trellis::ops::DeviceActivations;
    let b = CudaBackend::new(0).unwrap();
    let (w, _) = problem(4096, 1, 0xfa57);
    let (u, _) = problem(4096, 1, 0xfa58);
    let (rw, ru) = (
        ops::Resident::new(&b, &w).unwrap(),
        ops::Resident::new(&b, &u).unwrap(),
    );
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (b, rw, ru, w, u) = (&b, &rw, &ru, &w, &u);
            s.spawn(move || {
                let x = check::random_activations(DType::Bf16, 2, 2048, 300 + t);
                let xd = DeviceActivations::upload(b, &x).unwrap();
                let want = rw.matvec(&x, Tier::Fast).unwrap();
                let want_mid = rw.gate_up(ru, &x, Tail::Exact, Tier::Fast).unwrap();
                // The bits every call must keep are SPEC 7's.
                let (gw, gu) = (
                    check::RealSums::of(w, &x).unwrap(),
                    check::RealSums::of(u, &x).unwrap(),
                );
                check::fast_reduce(&want, &gw).unwrap();
                check::fast_gate_up(&want_mid, &gw, &gu, false).unwrap();
                for i in 0..8 {
                    let y = rw.matvec_device(&xd, Tier::Fast).unwrap();
                    let mid = rw.gate_up_device(ru, &xd, Tail::Exact, Tier::Fast);
                    let y = y.download(b).unwrap();
                    assert!(y.bits_eq(&want), "thread {t}, call {i}: y");
                    let mid = mid.unwrap().download(b).unwrap();
                    assert!(mid.bits_eq(&want_mid), "thread {t}, call {i}: mid");
                }
            });
        }
    });
}
