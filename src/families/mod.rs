//! This crate's kernel families, each one module beside its template in `templates/`:
//! [`reduce`] (`y = W x`), [`gate_up`] (fused SwiGLU; listed as `gate_up_mixed` when
//! the two k differ) and [`expand`] (dequantize) on the SIMT body, and the fast tier's
//! [`reduce_mma`] and [`gate_up_mma`] on matrix units. [`for_each`] is the registration:
//! the one place that lists them.

pub mod expand;
pub mod gate_up;
pub mod gate_up_mma;
pub mod reduce;
pub mod reduce_mma;

// What the families share: the SIMT families' vocabulary and their verify cases and
// candidate spaces, and the matrix-unit families' vocabulary.
pub mod catalog;
pub mod mma;
pub mod simt;

use crate::dtype::{DType, ScaleDType};
use crate::error::Result;
use crate::families::simt::{Proj, Representation, RowScales, Variant};
use crate::family::{Family, FamilyVisitor};
use crate::geometry::Geometry;
use crate::kernel::DeviceTensor;
use crate::kernel::{Backend, Elem};
use crate::matrix::{Activations, QuantizedMatrix};
use std::sync::Arc;

/// Visit every registered family. Adding a family is its module, its template, and
/// one line here.
pub fn for_each(v: &mut impl FamilyVisitor) {
    v.visit::<reduce::ReduceFamily>();
    v.visit::<gate_up::GateUpFamily>();
    v.visit::<expand::ExpandFamily>();
    v.visit::<reduce_mma::ReduceMmaFamily>();
    v.visit::<gate_up_mma::GateUpMmaFamily>();
}

/// Every registered family's name and aliases.
pub fn names() -> Vec<&'static str> {
    struct Names(Vec<&'static str>);
    impl FamilyVisitor for Names {
        fn visit<F: Family>(&mut self) {
            self.0.push(F::NAME);
            self.0.extend(F::ALIASES);
        }
    }
    let mut n = Names(Vec::new());
    for_each(&mut n);
    n.0
}

/// Whether `name` names family `F` (its name or an alias).
pub fn is<F: Family>(name: &str) -> bool {
    F::NAME == name || F::ALIASES.contains(&name)
}

/// A quantized matrix uploaded to a backend, with its value table (for table
/// representations) and a one-element placeholder (for inline ones).
pub struct DeviceMatrix<B: Backend> {
    /// The matrix's geometry (SPEC 1).
    pub geometry: Geometry,
    /// The stored dtype of `scales`.
    pub scale_dtype: ScaleDType,
    /// `codes` as u32, `[R, C/T, T*k/32]` (SPEC 2).
    pub codes: B::Tensor,
    /// The row scales `[R]` in `scale_dtype`.
    pub scales: B::Tensor,
    /// `1mad` with f16 scales: the scales folded with the divisor (f32,
    /// [`crate::families::simt::RowScales::FoldedOneMad`]).
    folded: Option<B::Tensor>,
    table: B::Tensor,
    placeholder: B::Tensor,
}

impl<B: Backend> DeviceMatrix<B> {
    /// Upload codes, scales and the value table.
    pub fn upload(b: &B, w: &QuantizedMatrix) -> Result<Self> {
        // Its fields are public: checked again here, so a hand-edited matrix is an error
        // naming the field, not a panic or a kernel reading past its codes.
        w.validate()?;
        let g = w.geometry;
        let codes = crate::error::collect_reserved(
            w.codes.len() * 4,
            w.codes.iter().flat_map(|c| c.to_le_bytes()),
            "codes",
            format!("{} words", w.codes.len()),
        )?;
        let scales = match w.scale_dtype {
            ScaleDType::F16 => DType::F16.encode(&w.scales),
            ScaleDType::F32 => DType::F32.encode(&w.scales),
        };
        let table: Vec<u8> = w
            .value_table()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let folded = if RowScales::foldable(g.code, w.scale_dtype) {
            let folded: Vec<u8> = w
                .scales
                .iter()
                .flat_map(|&s| {
                    crate::codes::onemad_folded_scale(half::f16::from_f32(s)).to_le_bytes()
                })
                .collect();
            Some(b.upload(Elem::F32, &[g.rows], &folded)?)
        } else {
            None
        };
        Ok(DeviceMatrix {
            geometry: g,
            scale_dtype: w.scale_dtype,
            codes: b.upload(Elem::U32, &g.codes_shape(), &codes)?,
            scales: b.upload(w.scale_dtype.into(), &[g.rows], &scales)?,
            folded,
            table: b.upload(Elem::F32, &[g.states()], &table)?,
            placeholder: b.upload(Elem::F32, &[1], &[0; 4])?,
        })
    }

    /// The coding of this matrix.
    pub fn proj(&self) -> Proj {
        Proj::of(&self.geometry)
    }

    /// The row scales a kernel of activation dtype `act` and representation `repr`
    /// reads ([`RowScales::of`]).
    pub fn row_scales(&self, act: Elem, repr: Representation) -> &B::Tensor {
        match (
            RowScales::of(self.geometry.code, self.scale_dtype, act, repr),
            &self.folded,
        ) {
            (RowScales::FoldedOneMad, Some(folded)) => folded,
            _ => &self.scales,
        }
    }

    /// The table argument a kernel in representation `repr` expects.
    pub fn table(&self, repr: Representation) -> &B::Tensor {
        if self.proj().table_arg_len(repr) == 1 {
            &self.placeholder
        } else {
            &self.table
        }
    }
}

/// Upload activations `[M, C]`.
pub fn upload_activations<B: Backend>(b: &B, x: &Activations) -> Result<B::Tensor> {
    let bytes = x.dtype.try_encode(&x.data, "activations x")?;
    b.upload(x.dtype.into(), &[x.rows, x.cols], &bytes)
}

/// Activations on the device for the SIMT families, `[M, C]`: as they are and, where the
/// columns allow, lane-interleaved ([`Activations::lane_interleaved`], for
/// [`Variant::interleaved_x`]; a copy of M x C values, small beside the weights). Uploaded
/// from the host, or made on the device ([`DeviceActivations::from_tensor`]: a previous
/// kernel's output, which [`crate::ops::Resident::matvec_device`] returns). Cloning
/// shares the tensors.
pub struct DeviceActivations<B: Backend> {
    /// x as it is (absent where uploaded for an interleaved variant alone).
    x: Option<Arc<B::Tensor>>,
    interleaved: Option<Arc<B::Tensor>>,
    dtype: DType,
    /// `[M, C]`.
    shape: [usize; 2],
}

impl<B: Backend> Clone for DeviceActivations<B> {
    fn clone(&self) -> Self {
        DeviceActivations {
            x: self.x.clone(),
            interleaved: self.interleaved.clone(),
            ..*self
        }
    }
}

impl<B: Backend> DeviceActivations<B> {
    /// Upload `x` in both layouts (the interleaved one where `cols` allows it).
    pub fn upload(b: &B, x: &Activations) -> Result<Self> {
        Self::upload_layouts(x, true, x.lane_interleaved(), |elem, shape, bytes| {
            b.upload(elem, shape, bytes)
        })
    }
    /// Upload `x` for one launch of variant `v` (the facade's) in the one layout `v`
    /// reads, where [`DeviceActivations::upload`] makes both for every variant a tuner
    /// may try (a host pass and a second copy to the device each call).
    pub fn upload_for(b: &B, x: &Activations, v: &Variant) -> Result<Self> {
        Self::upload_layout(x, v.interleaved_x, |elem, shape, bytes| {
            b.upload(elem, shape, bytes)
        })
    }
    /// x in one layout (lane-interleaved, where the columns allow, or as it is) through
    /// `upload` (element type, shape, bytes: a tensor made or reused by the caller,
    /// which [`DeviceActivations::into_tensors`] gives back).
    pub(crate) fn upload_layout(
        x: &Activations,
        interleaved_x: bool,
        upload: impl Fn(Elem, &[usize], &[u8]) -> Result<B::Tensor>,
    ) -> Result<Self> {
        let interleaved = match interleaved_x {
            true => x.lane_interleaved(),
            false => None,
        };
        Self::upload_layouts(x, interleaved.is_none(), interleaved, upload)
    }
    /// The tensors these activations hold alone (a clone's shared ones dropped).
    pub(crate) fn into_tensors(self) -> impl Iterator<Item = B::Tensor> {
        [self.x, self.interleaved]
            .into_iter()
            .flatten()
            .filter_map(|t| Arc::try_unwrap(t).ok())
    }
    fn upload_layouts(
        x: &Activations,
        plain: bool,
        interleaved: Option<Activations>,
        upload: impl Fn(Elem, &[usize], &[u8]) -> Result<B::Tensor>,
    ) -> Result<Self> {
        let up = |x: &Activations| {
            let bytes = x.dtype.try_encode(&x.data, "activations x")?;
            upload(x.dtype.into(), &[x.rows, x.cols], &bytes).map(Arc::new)
        };
        Ok(DeviceActivations {
            x: plain.then(|| up(x)).transpose()?,
            interleaved: interleaved.map(|xi| up(&xi)).transpose()?,
            dtype: x.dtype,
            shape: [x.rows, x.cols],
        })
    }
    /// Activations made on the device: `x` is `[M, C]` of a float element type, laid out
    /// as x is (row-major, sample by sample).
    pub fn from_tensor(x: B::Tensor) -> Result<Self> {
        let dtype = DType::try_from(x.elem()).map_err(|e| e.of("activations x"))?;
        let shape = match x.shape()[..] {
            [m, c] => [m, c],
            ref s => {
                return Err(crate::Error::invalid(
                    "activations x shape",
                    format!("{s:?}"),
                    "must be [M, C]",
                ))
            }
        };
        Ok(DeviceActivations {
            x: Some(Arc::new(x)),
            interleaved: None,
            dtype,
            shape,
        })
    }
    /// The layout variant `v` reads; an error naming `interleaved_x` where that layout
    /// was not uploaded (an interleaved variant validates only where the columns allow
    /// the interleaved copy, `simt::check_common`, which `upload` then makes).
    pub fn for_variant(&self, v: &Variant) -> Result<&B::Tensor> {
        let (t, layout) = match v.interleaved_x {
            true => (&self.interleaved, "their lane-interleaved copy"),
            false => (&self.x, "x as it is"),
        };
        t.as_deref().ok_or_else(|| {
            crate::Error::invalid(
                "interleaved_x",
                v.interleaved_x,
                format!("these activations were uploaded without {layout}"),
            )
        })
    }
    /// x as it is, `[M, C]` (absent where only the interleaved copy was uploaded): to
    /// hand a kernel of one's own (a residual add, a norm) what a family left here.
    pub fn tensor(&self) -> Option<&B::Tensor> {
        self.x.as_deref()
    }
    /// x as it is, shared: a kernel input held beside the call's own (the fused prescale
    /// reads the caller's x).
    pub(crate) fn shared_tensor(&self) -> Option<&Arc<B::Tensor>> {
        self.x.as_ref()
    }
    /// Whether the lane-interleaved copy is here (an `interleaved_x` variant reads it).
    pub fn has_interleaved(&self) -> bool {
        self.interleaved.is_some()
    }
    /// The activations' element type.
    pub fn elem(&self) -> Elem {
        self.dtype.into()
    }
    /// Their dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// M, the samples.
    pub fn samples(&self) -> usize {
        self.shape[0]
    }
    /// C, the columns.
    pub fn cols(&self) -> usize {
        self.shape[1]
    }
    /// Copy x back to the host (synchronizing with the backend's queued work), as it is
    /// (from the interleaved copy where only that was uploaded).
    pub fn download(&self, b: &B) -> Result<Activations> {
        match (&self.x, &self.interleaved) {
            (None, Some(xi)) => crate::family::download(b, xi)?
                .lane_deinterleaved()
                .ok_or_else(|| {
                    crate::Error::invalid("activations x columns", self.cols(), "not interleaved")
                }),
            // The default variant reads x as it is.
            _ => crate::family::download(b, self.for_variant(&Variant::default())?),
        }
    }
}

/// M of activations of `rows` rows, which must be in `1..=max` (the family's limit).
pub(crate) fn samples_of(rows: usize, max: u32) -> Result<u32> {
    u32::try_from(rows)
        .ok()
        .filter(|m| (1..=max).contains(m))
        .ok_or_else(|| crate::Error::invalid("M", rows, format!("x must have 1..={max} rows")))
}

fn check_m(m: u32, max: u32) -> Result<()> {
    if (1..=max).contains(&m) {
        Ok(())
    } else {
        Err(crate::Error::invalid(
            "m",
            m,
            format!("must be in 1..={max}"),
        ))
    }
}
