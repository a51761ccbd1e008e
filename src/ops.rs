//! Matrices and activations on a backend, and the operations users call: `matvec`,
//! `gate_up`, `expand`. Each builds the kernel specialization for the given
//! [`Variant`] and launches it through its typed wrapper.

use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::kernel::{Backend, Elem};
use crate::kernels::{Expand, GateUp, Proj, Reduce, Representation, Tail, Variant};
use crate::matrix::{Activations, QuantizedMatrix};

/// A quantized matrix uploaded to a backend, with its value table (for table
/// representations) and a one-element placeholder (for inline ones).
pub struct DeviceMatrix<B: Backend> {
    pub geometry: Geometry,
    pub scale_dtype: ScaleDType,
    pub codes: B::Tensor,
    pub scales: B::Tensor,
    table: B::Tensor,
    placeholder: B::Tensor,
}

impl<B: Backend> DeviceMatrix<B> {
    /// Upload codes, scales and the value table.
    pub fn upload(b: &B, w: &QuantizedMatrix) -> Result<Self> {
        let g = w.geometry;
        let codes: Vec<u8> = w.codes.iter().flat_map(|c| c.to_le_bytes()).collect();
        let scales = match w.scale_dtype {
            ScaleDType::F16 => DType::F16.encode(&w.scales),
            ScaleDType::F32 => DType::F32.encode(&w.scales),
        };
        let table: Vec<u8> = w
            .value_table()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        Ok(DeviceMatrix {
            geometry: g,
            scale_dtype: w.scale_dtype,
            codes: b.upload(Elem::U32, &g.codes_shape(), &codes)?,
            scales: b.upload(w.scale_dtype.into(), &[g.rows], &scales)?,
            table: b.upload(Elem::F32, &[g.states()], &table)?,
            placeholder: b.upload(Elem::F32, &[1], &[0; 4])?,
        })
    }

    /// The coding of this matrix.
    pub fn proj(&self) -> Proj {
        Proj::of(&self.geometry)
    }

    /// The table argument a kernel in representation `repr` expects.
    pub fn table(&self, repr: Representation) -> &B::Tensor {
        if crate::kernels::table_len(self.proj(), repr) == 1 {
            &self.placeholder
        } else {
            &self.table
        }
    }
}

/// Upload activations `[M, C]`.
pub fn upload_activations<B: Backend>(b: &B, x: &Activations) -> Result<B::Tensor> {
    b.upload(x.dtype.into(), &[x.rows, x.cols], &x.to_bytes())
}

/// Download `[rows, cols]` activations of `dtype`.
pub fn download_activations<B: Backend>(
    b: &B,
    t: &B::Tensor,
    dtype: DType,
    rows: usize,
    cols: usize,
) -> Result<Activations> {
    let bytes = b.download(t)?;
    Ok(Activations {
        dtype,
        rows,
        cols,
        data: dtype.decode(&bytes),
    })
}

fn m_of(x: &Activations) -> Result<u32> {
    u32::try_from(x.rows)
        .ok()
        .filter(|m| (1..=crate::kernels::MAX_M).contains(m))
        .ok_or_else(|| {
            Error::invalid(
                "M",
                x.rows,
                format!("x must have 1..={} rows", crate::kernels::MAX_M),
            )
        })
}

/// The `reduce` specialization for a matrix, dtype and sample count.
pub fn reduce_spec(
    g: &Geometry,
    scale: ScaleDType,
    act: DType,
    m: u32,
    variant: Variant,
) -> Reduce {
    Reduce {
        rows: g.rows,
        cols: g.cols,
        t: g.t,
        proj: Proj::of(g),
        m,
        act,
        scale,
        variant,
    }
}

/// The `gate_up` specialization for a pair of matrices.
pub fn gate_up_spec(
    gate: &Geometry,
    up: &Geometry,
    scales: (ScaleDType, ScaleDType),
    act: DType,
    m: u32,
    tail: Tail,
    variant: Variant,
) -> GateUp {
    GateUp {
        rows: gate.rows,
        cols: gate.cols,
        t: gate.t,
        gate: Proj::of(gate),
        up: Proj::of(up),
        m,
        act,
        gate_scale: scales.0,
        up_scale: scales.1,
        tail,
        variant,
    }
}

/// `y = W x` on a backend, host data in and out.
pub fn matvec<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    variant: Variant,
) -> Result<Activations> {
    crate::reference::check_activations(x, w.geometry.cols)?;
    let m = m_of(x)?;
    let dw = DeviceMatrix::upload(b, w)?;
    let dx = upload_activations(b, x)?;
    let spec = reduce_spec(&w.geometry, w.scale_dtype, x.dtype, m, variant);
    let out = spec.launch(b, &dx, &dw.codes, &dw.scales, dw.table(variant.repr))?;
    download_activations(b, &out.y, x.dtype, x.rows, w.geometry.rows)
}

/// `mid = silu(G x) * (U x)` on a backend, host data in and out.
pub fn gate_up<B: Backend>(
    b: &B,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    variant: Variant,
) -> Result<Activations> {
    crate::reference::check_pair(gate, up)?;
    crate::reference::check_activations(x, gate.geometry.cols)?;
    let m = m_of(x)?;
    let (dg, du) = (DeviceMatrix::upload(b, gate)?, DeviceMatrix::upload(b, up)?);
    let dx = upload_activations(b, x)?;
    let spec = gate_up_spec(
        &gate.geometry,
        &up.geometry,
        (gate.scale_dtype, up.scale_dtype),
        x.dtype,
        m,
        tail,
        variant,
    );
    let out = spec.launch(
        b,
        &dx,
        &dg.codes,
        &dg.scales,
        dg.table(variant.repr),
        &du.codes,
        &du.scales,
        du.table(variant.repr),
    )?;
    download_activations(b, &out.mid, x.dtype, x.rows, gate.geometry.rows)
}

/// Dequantize to dense `[R, C]` values of `act` on a backend.
pub fn expand<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    act: DType,
    variant: Variant,
) -> Result<Activations> {
    let g = w.geometry;
    let dw = DeviceMatrix::upload(b, w)?;
    let spec = Expand {
        rows: g.rows,
        cols: g.cols,
        t: g.t,
        proj: Proj::of(&g),
        act,
        scale: w.scale_dtype,
        variant,
    };
    let out = spec.launch(b, &dw.codes, &dw.scales, dw.table(variant.repr))?;
    download_activations(b, &out.dense, act, g.rows, g.cols)
}
