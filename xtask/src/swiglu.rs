//! The elementwise SwiGLU of the dense `gate_up` baseline, declared like any kernel of a
//! crate outside trellis (`templates/swiglu.kernel`): the bench times it after the two
//! cuBLAS GEMVs, as a framework would run it.

use trellis::kernel::{Dialect, Elem, Grid};

/// `mid[i] = round_T(round_T(silu(g[i])) * u[i])` for `n` values (the backend's exp).
#[trellis::kernel(
    name = "swiglu",
    template = "swiglu.kernel",
    grid = Grid { groups: [self.n.div_ceil(256) as u32, 1, 1], threads: 256 },
    inputs(g: act[self.n], u: act[self.n]),
    outputs(mid: act[self.n]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SwiGlu {
    pub n: usize,
    pub act: Elem,
}

impl SwiGlu {
    fn act_c(&self, d: &Dialect) -> &'static str {
        self.act.c_type(*d)
    }
}

#[cfg(test)]
mod tests {
    use super::SwiGlu;
    use trellis::backend::CpuBackend;
    use trellis::kernel::{Backend, Elem};
    use trellis::DType;

    #[test]
    fn swiglu_is_silu_times_up_on_the_cpu() {
        let b = CpuBackend::new().expect("cpu backend");
        let n = 1000; // not a multiple of the 256 per group
        let g: Vec<f32> = (0..n).map(|i| (i as f32 - 500.0) * 0.013).collect();
        let u: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.05)
            .collect();
        let up = |v: &[f32]| b.upload(Elem::Bf16, &[n], &DType::Bf16.encode(v)).unwrap();
        let (gt, ut) = (up(&g), up(&u));
        let k = SwiGlu { n, act: Elem::Bf16 };
        let mid = k.launch(&b, &gt, &ut).unwrap().mid;
        let got = DType::Bf16.decode(&b.download(&mid).unwrap());
        assert_eq!(got.len(), n);
        for i in 0..n {
            let (gi, ui) = (DType::Bf16.round(g[i]), DType::Bf16.round(u[i]));
            let want = gi / (1.0 + (-gi).exp()) * ui;
            // Two bf16 roundings and the backend's exp: a few bf16 ulps.
            let tol = 3.0 * 2f32.powi(-8) * want.abs() + 1e-30;
            assert!((got[i] - want).abs() <= tol, "{i}: {} vs {want}", got[i]);
        }
        assert!(got.iter().any(|v| *v != 0.0));
    }
}
