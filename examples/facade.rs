//! The facade end to end on the CPU backend (the embedded default; no GPU needed):
//! encode a dense matrix, write and read it back, run `matvec` in both tiers, `gate_up`,
//! matrices kept resident for many calls (on host activations and on activations kept on
//! the device), and a backend chosen by name at run time.
//!
//! `cargo run --release --example facade` (`cargo test` runs it too).

use trellis::backend::{AnyBackend, Backend, BackendVisitor, CpuBackend};
use trellis::check::{fast_reduce, RealSums};
use trellis::encode::{quantize, EncodeOptions};
use trellis::{io, ops, reference, Activations, Code, DType, QuantizedMatrix, Tail, Tier};

#[cfg_attr(test, allow(dead_code))]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (rows, cols) = (256, 1024);
    // Any dense f32 [rows, cols] matrix; here a smooth one (roughly Gaussian rows).
    let dense = |phase: f32| -> Vec<f32> {
        (0..rows * cols)
            .map(|i| 0.02 * ((i as f32 * 0.618 + phase).sin() + (i as f32 * 0.017).cos()))
            .collect()
    };
    let opts = EncodeOptions {
        t: 256,
        k: 2,
        l: 12,
        code: Code::OneMad,
        lut: None,
        progress: false,
    };
    let gate = quantize(&dense(0.0), rows, cols, &opts)?;
    let up = quantize(&dense(1.0), rows, cols, &opts)?;
    println!("quantized 2 x {rows}x{cols} at k 2: mse {:.3e}", gate.mse);

    // Files: one matrix under a prefix, read back as written.
    let dir = std::env::temp_dir().join(format!("trellis-facade-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("gate.safetensors");
    io::write_quantized(&path, "gate", &gate.matrix)?;
    let w = io::read_quantized(&path, "gate")?;
    assert_eq!(w, gate.matrix);

    // x is [M, C] in the activation dtype; y = W x is [M, R] in the same dtype.
    let m = 3;
    let xs: Vec<f32> = (0..m * cols)
        .map(|i| ((i % 7) as f32 - 3.0) * 0.25)
        .collect();
    let x = Activations::from_f32(DType::Bf16, m, cols, xs)?;
    let b = CpuBackend::new()?; // open once: it keeps its compiled kernels

    // Exact: SPEC 5's bits, equal to the CPU reference's.
    let y = ops::matvec(&b, &w, &x, Tier::Exact)?;
    assert!(y.bits_eq(&reference::reduce(&w, &x)?));
    // Fast: within SPEC 7's bound of the real sums.
    let yf = ops::matvec(&b, &w, &x, Tier::Fast)?;
    let verdict = fast_reduce(&yf, &RealSums::of(&w, &x)?)?;
    println!(
        "matvec y [{}, {}]: exact = reference; fast {verdict}",
        y.rows, y.cols
    );

    // SwiGLU: mid = silu(G x) * (U x), the exact tail.
    let mid = ops::gate_up(&b, &w, &up.matrix, &x, Tail::Exact, Tier::Exact)?;
    assert!(mid.bits_eq(&reference::gate_up(&w, &up.matrix, &x)?));

    // Resident: uploaded once, any number of calls, the same results.
    let (rg, ru) = (
        ops::Resident::new(&b, &w)?,
        ops::Resident::new(&b, &up.matrix)?,
    );
    for _ in 0..3 {
        assert!(rg.matvec(&x, Tier::Exact)?.bits_eq(&y));
        assert!(ops::gate_up_resident(&rg, &ru, &x, Tail::Exact, Tier::Exact)?.bits_eq(&mid));
    }
    // Its calls on host data keep their device tensors (x, y) for the next; a server
    // short of device memory gives them back.
    println!("kept beside the matrix: {} bytes", rg.kept_bytes());
    rg.release_kept();
    assert_eq!(rg.kept_bytes(), 0);

    // Activations on the device: uploaded once (or a previous kernel's output), the
    // exact tier's results left there for the next layer, read back when wanted.
    let xd = ops::DeviceActivations::upload(&b, &x)?;
    let yd = rg.matvec_device(&xd, Tier::Exact)?;
    assert!(yd.download(&b)?.bits_eq(&y));
    let midd = rg.gate_up_device(&ru, &xd, Tail::Exact, Tier::Exact)?;
    assert!(midd.download(&b)?.bits_eq(&mid));
    // The fast tier too: x prescaled on the device, the host facade's bits.
    let yf = rg.matvec_device(&xd, Tier::Fast)?;
    assert!(yf.download(&b)?.bits_eq(&rg.matvec(&x, Tier::Fast)?));
    // An inference loop's form: y made once (`[M, R]` in x's element type) and written
    // by each call, in either tier.
    let mut y_out = b.alloc(&trellis::kernel::TensorSpec {
        name: "y",
        elem: xd.elem(),
        shape: vec![xd.samples(), w.geometry.rows],
    })?;
    for tier in [Tier::Exact, Tier::Fast] {
        rg.matvec_device_into(&xd, &mut y_out, tier)?;
        let got = trellis::family::download(&b, &y_out)?;
        assert!(got.bits_eq(&rg.matvec(&x, tier)?));
    }

    // A backend chosen by name at run time (from a command line, say): the facade's calls
    // are `AnyBackend`'s methods, and resident matrices are made inside a visit, whose
    // code is generic over the backend the `AnyBackend` holds.
    let any = AnyBackend::open("cpu")?;
    assert!(any.matvec(&w, &x, Tier::Exact)?.bits_eq(&y));
    struct Serve<'a> {
        gate: &'a QuantizedMatrix,
        up: &'a QuantizedMatrix,
        x: &'a Activations,
    }
    impl BackendVisitor for Serve<'_> {
        type Out = trellis::Result<Vec<Activations>>;
        fn visit<B: Backend>(self, b: &B) -> Self::Out {
            let (g, u) = (
                ops::Resident::new(b, self.gate)?,
                ops::Resident::new(b, self.up)?,
            );
            (0..3)
                .map(|_| g.gate_up(&u, self.x, Tail::Exact, Tier::Exact))
                .collect()
        }
    }
    let served = any.visit(Serve {
        gate: &w,
        up: &up.matrix,
        x: &x,
    })?;
    assert!(served.iter().all(|s| s.bits_eq(&mid)));
    io::write_activations(&dir.join("mid.safetensors"), "mid", &mid)?;
    println!(
        "gate_up mid [{}, {}], 6 resident calls and 3 on a backend chosen by name: as the reference",
        mid.rows, mid.cols
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn the_facade_example_runs() {
    main().unwrap();
}
