//! The facade's promises on any backend, for the test files of backends CI cannot run
//! (CUDA, Metal) and, so that the checks themselves run in CI, on the CPU backends.

use trellis::check::{fast_gate_up, fast_reduce, random_activations, random_matrix, RealSums};
use trellis::kernel::Backend;
use trellis::numerics::{Tail, Tier};
use trellis::{ops, reference, Code, DType, Geometry};

/// A batch larger than one launch (exact 8 samples, fast 16) through the facade: the
/// matrices uploaded once serve every launch; exact bit for bit with the reference, fast
/// within SPEC 7, `matvec` and `gate_up`; resident matrices give the same bits.
pub fn a_batch_larger_than_a_launch_runs_as_several<B: Backend>(b: &B) {
    let name = b.name();
    let g = Geometry::new(96, 1024, 256, 3, 12, Code::OneMad).unwrap();
    let (w, u) = (random_matrix(g, 41), random_matrix(g, 42));
    let x = random_activations(DType::Bf16, 20, 1024, 43); // 8 + 8 + 4
    let y = ops::matvec(b, &w, &x, Tier::Exact).unwrap();
    assert!(y.bits_eq(&reference::reduce(&w, &x).unwrap()), "{name}");
    let mid = ops::gate_up(b, &w, &u, &x, Tail::Exact, Tier::Exact).unwrap();
    assert!(
        mid.bits_eq(&reference::gate_up(&w, &u, &x).unwrap()),
        "{name}"
    );
    let x40 = random_activations(DType::Bf16, 40, 1024, 44); // 16 + 16 + 8
    let (rw, ru) = (
        RealSums::of(&w, &x40).unwrap(),
        RealSums::of(&u, &x40).unwrap(),
    );
    fast_reduce(&ops::matvec(b, &w, &x40, Tier::Fast).unwrap(), &rw)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mf = ops::gate_up(b, &w, &u, &x40, Tail::Exact, Tier::Fast).unwrap();
    fast_gate_up(&mf, &rw, &ru, false).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Resident matrices give the same bits as the plain calls.
    let (dw, du) = (
        ops::Resident::new(b, &w).unwrap(),
        ops::Resident::new(b, &u).unwrap(),
    );
    assert!(dw.matvec(&x, Tier::Exact).unwrap().bits_eq(&y), "{name}");
    let resident_mid = ops::gate_up_resident(&dw, &du, &x40, Tail::Exact, Tier::Fast).unwrap();
    assert!(resident_mid.bits_eq(&mf), "{name}");
}
