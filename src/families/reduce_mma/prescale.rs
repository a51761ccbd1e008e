//! The host's side of the fast tier's range: a power of two out of each sample (and
//! lut table) so f16 operands hold any magnitude, and the samples they cannot hold.

use crate::codes::Code;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::families::mma::{MmaLayout, MmaVariant};
use crate::families::{upload_activations, DeviceMatrix};
use crate::kernel::{Backend, Dialect, Elem, Grid};
use crate::matrix::{Activations, QuantizedMatrix};
use std::sync::Arc;

/// The exponent `e` a set of magnitudes gives up to the operands: the largest of them
/// times `2^-e` lies in `[2^13, 2^14)`, well inside f16's range (|v| < 65520, and a
/// relative 2^-11 only above 2^-14). 0 for all zeros. Within +-126, so `2^e` and `2^-e`
/// are normal f32: a largest magnitude below 2^-113 stays below 2^13
/// ([`beyond_f16_operands`] sends such a sample to the exact kernels).
pub fn operand_exponent(values: &[f32]) -> i32 {
    exponent_of(max_abs(values))
}

/// The largest magnitude of `values` (0 for none).
fn max_abs(values: &[f32]) -> f32 {
    values.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// [`operand_exponent`] of a largest magnitude `max`.
fn exponent_of(max: f32) -> i32 {
    if max == 0.0 || !max.is_finite() {
        return 0;
    }
    // floor(log2(max)) from the bits (log2 can round up just below a power of two).
    let bits = max.to_bits();
    let exponent = match (bits >> 23) as i32 {
        0 => 31 - (bits & 0x7f_ffff).leading_zeros() as i32 - 149,
        biased => biased - 127,
    };
    (exponent - 13).clamp(-126, 126)
}

/// Whether a largest magnitude `max`, times `2^-exponent_of(max)`, falls short of 2^13:
/// the exponent's clamp took effect (a largest magnitude below 2^-113).
fn exponent_clamped(max: f32) -> bool {
    max != 0.0 && (max as f64) * 2f64.powi(-exponent_of(max)) < 8192.0
}

/// `2^e` as f32 (`e` within +-126: exact).
pub(crate) fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// A fused variant's own inputs ([`Prescaled::fused`]): x as the caller gave it, and the
/// projections' powers.
pub type FusedInputs<B> = (Arc<<B as Backend>::Tensor>, Arc<<B as Backend>::Tensor>);

/// The matrix-unit kernels' inputs that SPEC 7's range asks the host to prepare. Their
/// f16 operands hold |v| < 65520 to a relative 2^-11 only above 2^-14, where SPEC 7
/// promises activations up to 2^15 (bf16 and f32 ones reach 2^127) and a relative
/// bound at any magnitude. So the host takes a power of two out of each sample of x and
/// out of each value table (code `lut`), leaving its largest magnitude in
/// `[2^13, 2^14)` ([`operand_exponent`]): exact, as a power of two scales bf16 and f32
/// values without rounding. The kernel's epilogue multiplies each output back by the
/// same powers (`unscale`: `[M]` per sample, then one per projection), exactly as well,
/// after the row factor's one rounding. f16 activations are exact in f16 operands and
/// keep their values (a scale could push small ones below f16's normal range). What f16
/// cannot hold even then (values spanning more than 2^28 in a sample that a row weights
/// only at its tiny values, a table spanning that much, magnitudes past what f32's
/// exponent leaves the epilogue), the facade runs on its fallback, the exact kernels at
/// f32 with unit row scales ([`beyond_f16_operands`]).
pub struct Prescaled<B: Backend> {
    /// x with `2^-e_n` taken out of each sample n (the facade's, made by [`Prescale`]:
    /// in the element type its variant reads, f16 for an `x_f16` one).
    pub x: B::Tensor,
    /// The same rounded to f16 ([`MmaVariant::x_f16`]; bf16 and f32 activations only: a
    /// copy of M x C values, small beside the weights).
    pub x_f16: Option<B::Tensor>,
    /// f32 `[M + projections]`: `2^e_n` per sample, then `2^e_p` per projection.
    pub unscale: B::Tensor,
    /// Per projection: its value table with `2^-e_p` taken out (code `lut`); `None`
    /// where the kernel takes the matrix's own table argument. (Shared: a resident
    /// matrix's device path makes them once.)
    pub tables: Vec<Option<Arc<B::Tensor>>>,
    /// For a fused variant ([`MmaVariant::fused_x`]), which prescales x itself: x as the
    /// caller gave it, and f32 `[projections]` (the projections' powers alone); shared, as
    /// the facade's device path borrows the caller's x and the matrix's powers. `None`
    /// where they were not made (that path, for an unfused variant).
    pub fused: Option<FusedInputs<B>>,
}

impl<B: Backend> Prescaled<B> {
    /// Prepare and upload x and the tables of `ws` (the projections, in order), x in
    /// both forms (as prescaled, and its f16 copy), for any variant. (The facade's
    /// calls prescale on the device instead: [`Prescale`], the same bits.)
    pub fn upload(b: &B, x: &Activations, ws: &[&QuantizedMatrix]) -> Result<Self> {
        // Its fields are public: sized from them only once they agree.
        crate::reference::check_activations(x, x.cols)?;
        let mut xs = x.clone();
        let mut unscale = Vec::with_capacity(x.rows + ws.len());
        for row in xs.data.chunks_mut(x.cols.max(1)).take(x.rows) {
            let e = if x.dtype == DType::F16 {
                0
            } else {
                operand_exponent(row)
            };
            let down = pow2(-e);
            row.iter_mut().for_each(|v| *v *= down);
            unscale.push(pow2(e));
        }
        let TablePowers { tables, powers } = TablePowers::upload(b, ws)?;
        let fused = (
            Arc::new(upload_activations(b, x)?),
            Arc::new(
                b.upload(
                    Elem::F32,
                    &[powers.len()],
                    &powers
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect::<Vec<_>>(),
                )?,
            ),
        );
        unscale.extend(powers);
        let bytes: Vec<u8> = unscale.iter().flat_map(|v| v.to_le_bytes()).collect();
        // The f16 copy takes the prescaled values themselves (rounded by `from_f32`).
        let to_f16 = |xs: Activations| {
            upload_activations(
                b,
                &Activations::from_f32(DType::F16, xs.rows, xs.cols, xs.data)?,
            )
        };
        let (x_up, x_f16) = match x.dtype {
            DType::F16 => (upload_activations(b, &xs)?, None),
            _ => (upload_activations(b, &xs)?, Some(to_f16(xs)?)),
        };
        Ok(Prescaled {
            x: x_up,
            x_f16,
            unscale: b.upload(Elem::F32, &[unscale.len()], &bytes)?,
            tables,
            fused: Some(fused),
        })
    }

    /// The x and `unscale` inputs of variant `v`: the prescaled x (or its f16 copy) and
    /// the samples' and projections' powers, or for a fused variant the caller's x and
    /// the projections' powers alone (an error where they were not made).
    pub fn x_and_unscale(&self, v: &MmaVariant) -> Result<(&B::Tensor, &B::Tensor)> {
        if v.fused_x {
            let (x, powers) = self.fused.as_ref().ok_or_else(|| {
                Error::invalid(
                    "fused_x",
                    true,
                    "needs x as the caller gave it, which this path did not upload",
                )
            })?;
            Ok((&**x, &**powers))
        } else {
            Ok((self.x_for(v), &self.unscale))
        }
    }
    /// The x argument of variant `v`: the f16 copy where `v` reads one and there is one
    /// (an `x_f16` variant validates only for bf16 and f32 activations), else `x` (which
    /// the facade's upload makes the f16 copy itself; the launch's checks of x's dtype
    /// refuse a variant given the other form).
    pub fn x_for(&self, v: &MmaVariant) -> &B::Tensor {
        match (&self.x_f16, v.x_f16) {
            (Some(h), true) => h,
            _ => &self.x,
        }
    }

    /// Projection `i`'s table argument: the prescaled table, else the matrix's own.
    pub fn table<'d>(&'d self, i: usize, w: &'d DeviceMatrix<B>) -> &'d B::Tensor {
        match self.tables.get(i) {
            Some(Some(t)) => t,
            _ => w.table(crate::families::simt::Representation::Inline),
        }
    }
}

/// Each projection's value table with a power of two `2^-e_p` taken out (code `lut`;
/// `None` for the other codes, whose kernels take the matrix's own table argument), and
/// `2^e_p` (1 where none is taken out): what [`Prescaled`] reads of the matrices alone,
/// made once for a resident matrix's device path.
pub(crate) struct TablePowers<B: Backend> {
    pub tables: Vec<Option<Arc<B::Tensor>>>,
    pub powers: Vec<f32>,
}

impl<B: Backend> TablePowers<B> {
    /// The tables of `ws` uploaded to `b`, and their powers.
    pub(crate) fn upload(b: &B, ws: &[&QuantizedMatrix]) -> Result<Self> {
        let mut tables = Vec::with_capacity(ws.len());
        let mut powers = Vec::with_capacity(ws.len());
        for w in ws {
            match &w.lut {
                Some(lut) if w.geometry.code == Code::Lut => {
                    let e = operand_exponent(lut);
                    let down = pow2(-e);
                    let bytes: Vec<u8> =
                        lut.iter().flat_map(|v| (v * down).to_le_bytes()).collect();
                    tables.push(Some(Arc::new(b.upload(Elem::F32, &[lut.len()], &bytes)?)));
                    powers.push(pow2(e));
                }
                _ => {
                    tables.push(None);
                    powers.push(1.0);
                }
            }
        }
        Ok(TablePowers { tables, powers })
    }
}

/// [`Prescaled`]'s x made on the device from activations already there
/// (`templates/prescale.kernel`), one threadgroup a sample, with the host's bits: x with
/// each sample's power of two taken out (as [`operand_exponent`] finds it) in the type
/// the variant reads, `unscale` (the samples' powers, then the projections' from
/// `powers`), and a flag a sample where [`beyond_f16_operands_of`] must read it on the
/// host (a tiny value, or a clamped exponent; never for f16 activations).
#[crate::kernel(
    name = "prescale",
    template = "prescale.kernel",
    grid = Grid { groups: [self.m, 1, 1], threads: Self::THREADS },
    validate = self.check(),
    shared = Self::THREADS as usize * 8 + 256,
    inputs(x: act[self.m, self.cols], powers: f32[self.projections]),
    outputs(
        xs: out[self.m, self.cols],
        unscale: f32[self.m as usize + self.projections],
        flags: u32[self.m],
    ),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prescale {
    /// Samples M.
    pub m: u32,
    /// Columns C of x.
    pub cols: usize,
    /// Projections whose powers follow the samples' in `unscale`.
    pub projections: usize,
    /// The activations' dtype.
    pub act: DType,
    /// The dtype of the prescaled x: f16 for an `x_f16` variant, else `act`.
    pub out: DType,
}

impl Prescale {
    /// `f` given a launch of this kernel, bound once over a random x of its own and unit
    /// powers: the launch a fast call makes before its matrix kernel, to time the two in
    /// one stream (the tuner, where a fused variant competes; `xtask bench`'s pair).
    pub fn with_bound<B: Backend, T>(
        &self,
        b: &B,
        f: impl FnOnce(&mut dyn FnMut() -> Result<()>) -> Result<T>,
    ) -> Result<T> {
        use crate::kernel::KernelSpec;
        self.validate()?;
        let launch = self.launch_request()?;
        let compiled = b.compile(&launch)?;
        let x = crate::check::random_activations(self.act, self.m as usize, self.cols, 17);
        let x = upload_activations(b, &x)?;
        let ones: Vec<u8> = (0..self.projections)
            .flat_map(|_| 1f32.to_le_bytes())
            .collect();
        let powers = b.upload(Elem::F32, &[self.projections], &ones)?;
        let mut outs = crate::family::alloc_outputs(b, self)?;
        let mut refs: Vec<&mut _> = outs.iter_mut().collect();
        let mut bound = b.bind(&compiled, &launch, &[&x, &powers], &mut refs)?;
        f(&mut || b.run(&mut bound))
    }

    /// A multiple of 32 (the folds' first level takes 32 threads' shares).
    const THREADS: u32 = 512;
    /// At most 40 values a thread: 20480 columns in registers (the Qwen3-14B down
    /// projection's 17408 included).
    const MAX_PER_THREAD: u32 = 40;

    /// The prescale of matrix-unit kernel `k`'s x: its samples and columns, its
    /// projections' powers, x in the type `k` reads ([`MmaLayout::x_elem`]).
    pub fn of(k: &impl MmaLayout) -> Result<Self> {
        let (_, cols, _, m, _) = k.dims();
        Ok(Prescale {
            m,
            cols,
            projections: k.projs().len(),
            act: k.act(),
            out: DType::try_from(k.x_elem())?,
        })
    }

    /// One specialization of each activation dtype and output type (3 samples, 1024
    /// columns, two projections): what `cargo xtask render` and the Metal shim check
    /// compile beside the families' catalogs.
    pub fn catalog() -> Vec<Prescale> {
        let mut ks = Vec::new();
        for act in DType::ALL {
            for out in [act, DType::F16] {
                let k = Prescale {
                    m: 3,
                    cols: 1024,
                    projections: 2,
                    act,
                    out,
                };
                if !ks.contains(&k) {
                    ks.push(k);
                }
            }
        }
        ks
    }

    fn check(&self) -> Result<()> {
        if u32::try_from(self.cols).is_err() {
            return Err(Error::invalid(
                "prescale cols",
                self.cols,
                "must fit in 32 bits (the template indexes it with `uint`)",
            ));
        }
        if self.out != self.act && self.out != DType::F16 {
            return Err(Error::invalid(
                "prescale out",
                self.out,
                format!("must be f16 or the activations' {}", self.act),
            ));
        }
        Ok(())
    }
    // Template helpers.
    fn act_c(&self, d: &Dialect) -> &'static str {
        Elem::from(self.act).c_type(*d)
    }
    fn out_c(&self, d: &Dialect) -> &'static str {
        Elem::from(self.out).c_type(*d)
    }
    fn threads(&self) -> u32 {
        Self::THREADS
    }
    /// The threads a group runs on `d`, at compile time: the folds unroll and, where
    /// one span holds the sample, the second pass reads no x (a count known only at run
    /// time cost the kernel 1.2-2.9 us in front of a fast kernel on an H100).
    fn group_threads(&self, d: &Dialect) -> u32 {
        d.threads_per_group(Self::THREADS)
    }
    /// Values a thread holds in registers: the whole sample (one read of x, one round
    /// of memory latency) up to `THREADS * MAX_PER_THREAD` columns; past that, a
    /// second pass reads x again.
    fn per_thread(&self) -> u32 {
        (self.cols as u32)
            .div_ceil(Self::THREADS)
            .clamp(1, Self::MAX_PER_THREAD)
    }
    /// f16 activations keep their values.
    fn scaled(&self) -> bool {
        self.act != DType::F16
    }
}

/// The samples (rows of x) for which the fast kernels' f16 operands or their f32
/// epilogue might miss SPEC 7's bound even after [`Prescaled`] puts each sample's
/// largest magnitude in `[2^13, 2^14)`; the facade runs them on its fallback (the exact
/// kernels at f32 with unit row scales, the scales applied in f64: no weight rounded, so
/// SPEC 7 holds even where T's weights would be subnormal). None with bf16 operands (exact for bf16 x; bf16's
/// range holds any table).
///
/// - **Tiny values.** A value below 2^-28 of its sample's largest may land below 2^-15,
///   where f16 keeps only an absolute 2^-25 (at most `max * 2^-38` unscaled) instead of
///   a relative 2^-10; every other value keeps 2^-10, which with the weights' own
///   rounding stays inside the bound's 2^-8 with half of it to spare. So a sample with
///   `n` tiny values is carried where, in every row of every matrix of `ws`, their worst
///   error `n * max * 2^-38 * max |value|` is at most 2^-10 of `sum |w x|` over the
///   sample's 8 largest values (a lower bound of the row's sum): true unless a row
///   weights the large values at zero. f16 activations are exact in f16 operands.
/// - **Every sample**, where a lut table spans more than 2^28 (values rounded below
///   f16's normal range), or where the epilogue's f32 products could leave f32's range:
///   the row factor times a sum of up to `C` products of at most 2^14 times the largest
///   value, times the table's power of two, past 2^126, or a nonzero row scale below
///   2^-60 or a table's power below 2^-60 (a product then near f32's subnormals).
/// - **Clamped exponents.** A sample (or table: then every sample) whose largest
///   magnitude is below 2^-113, which [`operand_exponent`] cannot lift to 2^13.
pub fn beyond_f16_operands(
    x: &Activations,
    ws: &[&QuantizedMatrix],
    v: &MmaVariant,
) -> Result<Vec<usize>> {
    crate::reference::check_activations(x, x.cols)?;
    for w in ws {
        w.validate()?;
        crate::reference::check_activations(x, w.geometry.cols)?;
    }
    if !v.operands.is_f16() {
        return Ok(Vec::new());
    }
    let facts = ws
        .iter()
        .map(|w| OperandFacts::of(w))
        .collect::<Result<Vec<_>>>()?;
    let facts: Vec<&OperandFacts> = facts.iter().collect();
    beyond_f16_operands_of(x, ws, &facts)
}

/// [`beyond_f16_operands`] for f16 operands, over facts made before ([`OperandFacts::of`]
/// of each matrix of `ws`, in order): a resident matrix makes its facts once.
pub fn beyond_f16_operands_of(
    x: &Activations,
    ws: &[&QuantizedMatrix],
    facts: &[&OperandFacts],
) -> Result<Vec<usize>> {
    const LARGEST: usize = 8;
    for w in ws {
        crate::reference::check_activations(x, w.geometry.cols)?;
    }
    if facts.len() != ws.len() {
        return Err(crate::error::Error::invalid(
            "operand facts",
            facts.len(),
            format!("one per matrix: {}", ws.len()),
        ));
    }
    if facts.iter().any(|f| f.every_sample) {
        return Ok((0..x.rows).collect());
    }
    if x.dtype == DType::F16 {
        return Ok(Vec::new());
    }
    // Whether sample m's f16 operands carry it within the bound.
    let fits = |m: usize| {
        let row = x.row(m);
        let max = max_abs(row);
        if exponent_clamped(max) {
            return false;
        }
        let n = tiny(row, max);
        if n == 0 {
            return true;
        }
        let mut largest: Vec<usize> = (0..row.len()).collect();
        largest.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()));
        largest.truncate(LARGEST);
        let worst = n as f64 * max as f64 * 2f64.powi(-38);
        ws.iter().zip(facts).all(|(w, f)| {
            let value = |r, c| f.table[w.state(r, c) as usize].abs();
            (0..w.geometry.rows).all(|r| {
                let sum: f64 = largest
                    .iter()
                    .map(|&c| value(r, c) as f64 * row[c].abs() as f64)
                    .sum();
                worst * f.largest as f64 <= sum * 2f64.powi(-10)
            })
        })
    };
    Ok((0..x.rows).filter(|&m| !fits(m)).collect())
}

/// Values below 2^-28 of their set's largest magnitude `max`: where f16 operands lose
/// their relative precision ([`beyond_f16_operands`], "Tiny values").
const TINY: i32 = 28;

/// How many of `values` are tiny against `max` (nonzero, below `max * 2^-TINY`).
fn tiny(values: &[f32], max: f32) -> usize {
    let floor = max * pow2(-TINY);
    values
        .iter()
        .filter(|v| **v != 0.0 && v.abs() < floor)
        .count()
}

/// What [`beyond_f16_operands`] reads of one matrix alone: its value table and the
/// table's largest magnitude, and whether every sample is beyond f16 operands for it (a
/// lut spanning more than 2^28, a clamped table exponent, or products that could leave
/// f32's range). Made once a call per matrix, or once for a resident one (its matrix is
/// borrowed, so it stays as it was).
#[derive(Clone, Debug)]
pub struct OperandFacts {
    table: Vec<f32>,
    largest: f32,
    every_sample: bool,
}

impl OperandFacts {
    /// Whether every sample is beyond f16 operands for this matrix, whatever x is.
    pub fn every_sample(&self) -> bool {
        self.every_sample
    }

    /// The facts of `w` (validated first).
    pub fn of(w: &QuantizedMatrix) -> Result<Self> {
        w.validate()?;
        let table = w.value_table()?;
        let vmax = max_abs(&table);
        let (mut value_log2, mut table_e) = ((vmax as f64).log2(), 0);
        let facts = |every_sample| OperandFacts {
            largest: vmax,
            every_sample,
            table: Vec::new(),
        };
        if w.geometry.code == Code::Lut {
            if tiny(&table, vmax) > 0 || exponent_clamped(vmax) {
                return Ok(facts(true));
            }
            table_e = exponent_of(vmax);
            value_log2 = 14.0;
        }
        let scales = w.scales.iter().filter(|s| **s != 0.0);
        let (smin, smax) = scales.fold((f32::INFINITY, 0.0f32), |(lo, hi), s| {
            (lo.min(s.abs()), hi.max(s.abs()))
        });
        let product_log2 = 14.0
            + (w.geometry.cols as f64).log2()
            + value_log2
            + (smax as f64).log2().max(-200.0)
            + table_e.max(0) as f64;
        if product_log2 >= 126.0 || (smax > 0.0 && smin < pow2(-60)) || table_e < -60 {
            return Ok(facts(true));
        }
        Ok(OperandFacts {
            table,
            ..facts(false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Prescaled;
    use crate::backend::CpuBackend;
    use crate::families::mma::MmaVariant;
    use crate::families::reduce_mma::{ReduceMmaDevice, ReduceMmaFamily};
    use crate::families::DeviceMatrix;
    use crate::family::{self, Family};
    use crate::numerics::Tier;
    use crate::{check, Code, DType, Geometry};
    use std::sync::Arc;

    /// Device data holding the one form of x a variant reads (as the facade's device
    /// prescale makes it, `x_f16` none) runs that variant, and launched with a variant
    /// that reads the other form is refused (x's element type), not run on the wrong
    /// form.
    #[test]
    fn a_variant_reads_its_form_of_x_and_refuses_the_other() {
        let cpu = CpuBackend::new().unwrap();
        let g = Geometry::new(16, 512, 256, 2, 12, Code::OneMad).unwrap();
        let w = check::random_matrix(g, 1);
        let x = check::random_activations(DType::Bf16, 2, 512, 2);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let real = check::RealSums::of(&w, &x).unwrap();
        let dm = Arc::new(DeviceMatrix::upload(&cpu, &w).unwrap());
        let plain = MmaVariant {
            x_f16: false,
            ..ReduceMmaFamily::default_variant(&p, Tier::Fast)
        };
        let f16 = MmaVariant {
            x_f16: true,
            ..plain
        };
        assert!(Prescaled::upload(&cpu, &x, &[&w]).unwrap().x_f16.is_some());
        for (v, other) in [(plain, f16), (f16, plain)] {
            let both = Prescaled::upload(&cpu, &x, &[&w]).unwrap();
            let (xs, x16) = (both.x, both.x_f16.unwrap());
            let d = ReduceMmaDevice {
                w: dm.clone(),
                ops: Prescaled {
                    x: if v.x_f16 { x16 } else { xs },
                    x_f16: None,
                    ..both
                },
            };
            let y = family::run::<ReduceMmaFamily, _>(&cpu, &p, v, &d).unwrap();
            check::fast_reduce(&y[0], &real).unwrap();
            let e = family::run::<ReduceMmaFamily, _>(&cpu, &p, other, &d).unwrap_err();
            assert!(
                e.to_string().contains("reduce_mma.x") && e.to_string().contains("dtype"),
                "{other}: {e}"
            );
        }
    }

    /// `with_bound` hands its closure the prescale kernel bound once, which launches as
    /// often as it is called; the closure's result comes back.
    #[test]
    fn with_bound_hands_over_a_launch_of_the_kernel() {
        let cpu = CpuBackend::new().unwrap();
        let g = Geometry::new(16, 512, 256, 2, 12, Code::OneMad).unwrap();
        let w = check::random_matrix(g, 1);
        let x = check::random_activations(DType::Bf16, 2, 512, 2);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let k = ReduceMmaFamily::kernel(&p, ReduceMmaFamily::default_variant(&p, Tier::Fast));
        let mut runs = 0;
        let got = super::Prescale::of(&k)
            .unwrap()
            .with_bound(&cpu, |before| {
                for _ in 0..3 {
                    before()?;
                    runs += 1;
                }
                Ok(runs)
            })
            .unwrap();
        assert_eq!((got, runs), (3, 3));
    }
}
