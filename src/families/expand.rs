//! `expand`: dequantize to a dense `[R, C]` matrix in the activation dtype (SPEC 4),
//! template `templates/expand.kernel`.

use super::DeviceMatrix;
use crate::check;
use crate::dtype::{DType, ScaleDType};
use crate::error::Result;
use crate::families::simt::{
    check_common, grid, MStrategy, Proj, RowScales, Variant, XLayout, XStage,
};
use crate::family::Family;
use crate::kernel::Backend;
use crate::key::{KeyFields, KeyForm};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::Tier;
use crate::Geometry;
use std::fmt;

/// Dequantize to a dense `[R, C]` matrix in the activation dtype.
#[crate::kernel(
    name = "expand",
    template = "expand.kernel",
    grid = grid(self.rows, 1, &Variant { rows_per_simd: 1, ..self.variant }),
    validate = check_common(self.rows, self.cols, self.t, &[("", self.proj)], 1, &self.variant, self.shared()),
    shared = self.shared(),
    inputs(
        codes: u32[self.rows, self.cols / self.t, self.words_per_block()],
        scales: scale[self.rows],
        table: f32[self.proj.table_arg_len(self.variant.repr)],
    ),
    outputs(dense: act[self.rows, self.cols]),
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expand {
    /// Rows R of the matrix.
    pub rows: usize,
    /// Columns C of the matrix.
    pub cols: usize,
    /// Weights per block T.
    pub t: usize,
    /// The matrix's coding (k, L, code).
    pub proj: Proj,
    /// Dtype of the dense output (the activation dtype).
    pub act: DType,
    /// The row scales as stored (`expand` writes the weights: nothing to fold).
    pub scale: RowScales,
    /// The tuned variant this specialization renders.
    pub variant: Variant,
}

impl Expand {
    fn shared(&self) -> usize {
        if self.variant.repr.is_shared() {
            self.proj.table_bytes()
        } else {
            0
        }
    }
    // Template helpers: the projection's, at this kernel's shape.
    fn states(&self) -> usize {
        self.proj.states()
    }
    fn words_per_block(&self) -> usize {
        self.proj.words_per_block(self.t)
    }
    fn words_per_row(&self) -> usize {
        self.proj.words_per_row(self.cols, self.t)
    }
}

impl XLayout for Expand {
    fn act(&self) -> DType {
        self.act
    }
    fn samples(&self) -> u32 {
        1
    }
    fn tuned(&self) -> &Variant {
        &self.variant
    }
    fn x_cols(&self) -> usize {
        self.cols
    }
}

/// An `expand` problem: one matrix, its scale dtype and the output dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpandProblem {
    /// The matrix's geometry (SPEC 1).
    pub geometry: Geometry,
    /// The dtype of its row scales.
    pub scale: ScaleDType,
    /// Dtype of the dense output.
    pub act: DType,
}

impl fmt::Display for ExpandProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        write!(
            f,
            "{}x{} T={} {} {}",
            g.rows,
            g.cols,
            g.t,
            Proj::of(g),
            self.act
        )
    }
}

/// The `expand` family (exact only: a dequantize has no sums to reorder).
pub struct ExpandFamily;

impl Family for ExpandFamily {
    const NAME: &'static str = "expand";
    type Problem = ExpandProblem;
    type Variant = Variant;
    type Kernel = Expand;
    type Host = QuantizedMatrix;
    type Expected = Activations;
    type Device<B: Backend> = DeviceMatrix<B>;

    fn kernel(p: &ExpandProblem, variant: Variant) -> Expand {
        let g = &p.geometry;
        Expand {
            rows: g.rows,
            cols: g.cols,
            t: g.t,
            proj: Proj::of(g),
            act: p.act,
            scale: RowScales::Stored(p.scale),
            variant,
        }
    }
    fn tier(v: &Variant) -> Tier {
        v.tier
    }
    fn default_variant(_p: &ExpandProblem, _tier: Tier) -> Variant {
        Variant::default()
    }
    fn candidates(_p: &ExpandProblem, tier: Tier, quick: bool) -> Vec<Variant> {
        if tier == Tier::Fast {
            return Vec::new();
        }
        crate::families::catalog::variants(tier, 1, quick)
            .into_iter()
            .filter(|v| v.m_strategy == MStrategy::SharedDecode && v.x_stage == XStage::Global)
            .collect()
    }
    fn key_fields(p: &ExpandProblem) -> String {
        KeyFields {
            act: p.act,
            m: None,
            projs: vec![(None, Proj::of(&p.geometry))],
            tail: None,
        }
        .to_string()
    }
    fn check_key_fields(fields: &str) -> Result<()> {
        let form = KeyForm {
            m: false,
            labels: &[None],
            tail: false,
        };
        KeyFields::check(fields, form)
    }
    fn shape(p: &ExpandProblem) -> (usize, usize) {
        (p.geometry.rows, p.geometry.cols)
    }
    fn catalog(quick: bool) -> Vec<ExpandProblem> {
        crate::families::catalog::verify_cases(quick)
            .iter()
            .filter_map(|c| {
                Some(ExpandProblem {
                    geometry: c.gate_geometry().ok()?,
                    scale: ScaleDType::F16,
                    act: c.act,
                })
            })
            .collect()
    }
    fn random_host(p: &ExpandProblem, seed: u64) -> Result<QuantizedMatrix> {
        let w = check::try_random_matrix_scaled(p.geometry, p.scale, seed)?;
        Ok(w)
    }
    fn expected(p: &ExpandProblem, w: &QuantizedMatrix) -> Result<Activations> {
        let g = &p.geometry;
        Ok(Activations {
            dtype: p.act,
            rows: g.rows,
            cols: g.cols,
            data: crate::reference::dequantize(w, p.act)?,
        })
    }
    fn check(
        _p: &ExpandProblem,
        _v: &Variant,
        _host: &QuantizedMatrix,
        want: &Activations,
        got: &[Activations],
    ) -> std::result::Result<String, String> {
        check::bits(got.first().ok_or("no output")?, want)
    }
    fn upload<B: Backend>(
        b: &B,
        _p: &ExpandProblem,
        w: &QuantizedMatrix,
    ) -> Result<DeviceMatrix<B>> {
        DeviceMatrix::upload(b, w)
    }
    fn inputs<'d, B: Backend>(d: &'d DeviceMatrix<B>, v: &Variant) -> Result<Vec<&'d B::Tensor>> {
        Ok(vec![&d.codes, &d.scales, d.table(v.repr)])
    }
    fn bytes(p: &ExpandProblem) -> usize {
        let g = &p.geometry;
        g.code_bytes() + g.rows * g.cols * p.act.size() + g.rows * p.scale.size()
    }
}
