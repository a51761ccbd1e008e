//! In-memory tensors of SPEC section 2: a quantized matrix and activations.

use crate::codes::Code;
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::layout;

/// A trellis-coded matrix: geometry, packed codes, per-row scales and (code `lut`) its table.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedMatrix {
    /// Shape and coding: R, C, T, k, L, code (SPEC 1).
    pub geometry: Geometry,
    /// `[R, C/T, T*k/32]`, row-major.
    pub codes: Vec<u32>,
    /// `[R]`, exact values of the stored dtype.
    pub scales: Vec<f32>,
    /// How `scales` is stored in files and passed to kernels.
    pub scale_dtype: ScaleDType,
    /// `[2^L]` for code `lut`, `None` otherwise.
    pub lut: Option<Vec<f32>>,
}

impl QuantizedMatrix {
    /// Assemble and check every length against the geometry ([`QuantizedMatrix::validate`]).
    pub fn new(
        geometry: Geometry,
        codes: Vec<u32>,
        scales: Vec<f32>,
        scale_dtype: ScaleDType,
        lut: Option<Vec<f32>>,
    ) -> Result<Self> {
        let w = QuantizedMatrix {
            geometry,
            codes,
            scales,
            scale_dtype,
            lut,
        };
        w.validate()?;
        Ok(w)
    }

    /// What [`QuantizedMatrix::new`] checks, for a matrix whose public fields were set
    /// or changed by hand (the facade checks again before it uploads one): the geometry,
    /// every length against it, finite scales (f16 values where they are stored as f16)
    /// and the table of code `lut`.
    pub fn validate(&self) -> Result<()> {
        let (geometry, codes, scales, lut) = (&self.geometry, &self.codes, &self.scales, &self.lut);
        geometry.validate()?;
        let want = geometry.codes_shape().iter().product::<usize>();
        if codes.len() != want {
            return Err(Error::Shape {
                name: "codes".into(),
                actual: vec![codes.len()],
                expected: geometry.codes_shape().to_vec(),
            });
        }
        Self::check_scales_and_lut(geometry, scales, self.scale_dtype, lut.as_deref())
    }

    /// The checks of [`Self::validate`] that need no code word: one finite scale per row
    /// (an f16 value where `scale_dtype` is f16) and a finite table of 2^L values exactly
    /// where the code is `lut`. For a file's matrix without reading its codes (`trellis
    /// info`).
    pub fn check_scales_and_lut(
        geometry: &Geometry,
        scales: &[f32],
        scale_dtype: ScaleDType,
        lut: Option<&[f32]>,
    ) -> Result<()> {
        if scales.len() != geometry.rows {
            return Err(Error::Shape {
                name: "scales".into(),
                actual: vec![scales.len()],
                expected: vec![geometry.rows],
            });
        }
        // A non-finite scale makes every weight of its row inf or NaN: no decode of it is
        // meaningful (and the folded 1mad weights, `codes::onemad_folded_scale`, need
        // finite ones).
        if let Some(r) = scales.iter().position(|s| !s.is_finite()) {
            return Err(Error::invalid(
                format!("scales[{r}]"),
                scales[r],
                "row scales must be finite",
            ));
        }
        // Stored as f16, a scale must be an f16 value: the kernels read the stored one,
        // the reference this one, and they must be the same number.
        if scale_dtype == ScaleDType::F16 {
            if let Some(r) = scales
                .iter()
                .position(|&s| half::f16::from_f32(s).to_f32().to_bits() != s.to_bits())
            {
                return Err(Error::invalid(
                    format!("scales[{r}]"),
                    scales[r],
                    "not an f16 value (the scales' dtype is f16)",
                ));
            }
        }
        match (geometry.code, lut) {
            (Code::Lut, None) => {
                return Err(Error::invalid(
                    "lut",
                    "missing",
                    "code lut needs a table of 2^L f32",
                ))
            }
            (Code::Lut, Some(t)) if t.len() != geometry.states() => {
                return Err(Error::invalid(
                    "lut length",
                    t.len(),
                    format!("must be 2^L = {}", geometry.states()),
                ))
            }
            (c, Some(_)) if c != Code::Lut => {
                return Err(Error::invalid(
                    "lut",
                    "present",
                    format!("code {c} takes no table"),
                ))
            }
            _ => {}
        }
        // As with the scales: a non-finite table value makes every weight of its state
        // inf or NaN.
        let bad = lut
            .unwrap_or_default()
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite());
        if let Some((i, v)) = bad {
            return Err(Error::invalid(
                format!("lut[{i}]"),
                v,
                "table values must be finite",
            ));
        }
        Ok(())
    }

    /// Check that every SPEC 4 weight `round_T(value * scale)` is finite in `dtype`: finite
    /// values and scales can still overflow T (f16 scales near 65504, f32 scales near
    /// 2^127), and an infinite weight makes the exact tier's sums inf or NaN where the
    /// real sum is finite (SPEC 7 forbids that). One pass over the scales against the
    /// largest table value; only a row that could overflow is decoded.
    pub fn check_weights_finite(&self, dtype: DType) -> Result<()> {
        self.validate()?; // a hand-edited matrix: its table and lengths are read below
        let table = self.value_table()?;
        let largest = table.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (r, &s) in self.scales.iter().enumerate() {
            // Rounding is monotone, so no weight of the row exceeds this one.
            if dtype.round(largest * s.abs()).is_finite() {
                continue;
            }
            for c in 0..self.geometry.cols {
                let v = table[self.state(r, c) as usize];
                if !dtype.round(v * s).is_finite() {
                    let hold = if dtype == DType::F32 {
                        "the fast tier (no weight rounding) may hold it"
                    } else {
                        "the fast tier (no weight rounding) or f32 activations may hold it"
                    };
                    return Err(Error::invalid(
                        format!("weight w[{r}, {c}]"),
                        format!("value {v} * scales[{r}] {s}"),
                        format!(
                            "overflows {dtype}: exact weights are round_T(value * scale) \
                             (SPEC 4) and an infinite one makes the output inf or NaN; {hold}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The words of block `b` of row `r`.
    pub fn block(&self, r: usize, b: usize) -> &[u32] {
        let wpb = self.geometry.words_per_block();
        let start = (r * self.geometry.blocks_per_row() + b) * wpb;
        &self.codes[start..start + wpb]
    }

    /// The state of weight `(r, c)`.
    pub fn state(&self, r: usize, c: usize) -> u32 {
        let g = &self.geometry;
        layout::state(self.block(r, c / g.t), g.t, g.k, g.l, c % g.t)
    }

    /// The value table of this matrix's code (a copy of `lut` for code `lut`; an error
    /// where a hand-edited `lut` or L does not fit).
    pub fn value_table(&self) -> Result<Vec<f32>> {
        self.geometry
            .code
            .table(self.geometry.l, self.lut.as_deref())
    }
}

/// Columns per slice of [`Activations::lane_interleaved`]: 32 lanes times a run of 32.
pub const INTERLEAVE_COLS: usize = 1024;

/// Activations `x` (or outputs `y`, `mid`): `[M, C]` values exactly representable in `dtype`.
#[derive(Clone, Debug, PartialEq)]
pub struct Activations {
    /// The activation dtype `T` the values are representable in.
    pub dtype: DType,
    /// `M`.
    pub rows: usize,
    /// `C` (or `R` for outputs).
    pub cols: usize,
    /// Row-major values, each exactly representable in `dtype`.
    pub data: Vec<f32>,
}

impl Activations {
    /// Round arbitrary f32 values to `dtype` and wrap them. A finite value past the
    /// dtype's range is an error naming it (it would round to an infinity the caller
    /// never wrote, which the kernels then refuse under that name).
    pub fn from_f32(dtype: DType, rows: usize, cols: usize, data: Vec<f32>) -> Result<Self> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::Shape {
                name: "x".into(),
                actual: vec![data.len()],
                expected: vec![rows, cols],
            });
        }
        let mut data = data;
        if let Some((i, v)) = dtype.round_in_place(&mut data) {
            return Err(Error::invalid(
                format!("x[{}, {}]", i / cols, i % cols),
                v,
                format!("overflows {dtype}"),
            ));
        }
        Ok(Activations {
            dtype,
            rows,
            cols,
            data,
        })
    }

    /// Row `m`.
    pub fn row(&self, m: usize) -> &[f32] {
        &self.data[m * self.cols..(m + 1) * self.cols]
    }

    /// The lane-interleaved copy the SIMT kernels read with `Variant::interleaved_x`, or
    /// `None` where `cols` is not a whole number of [`INTERLEAVE_COLS`] slices (or the data
    /// does not hold `rows x cols` values: the fields are public). The
    /// canonical order gives lane l of a simdgroup run u = 32 i + l, columns 32 u ..
    /// 32 u + 31, which it loads as 16-byte chunks: the 32 lanes of one load then touch
    /// 32 sectors and use half of each (the L1 limit of the H200's 5120 x 17408 M 4
    /// kernels). Here, within each slice of 1024 columns, chunk q of lane l's run sits at
    /// chunk 32 q + l, so each load reads 512 contiguous bytes. Only where the bytes sit
    /// changes: the kernels' sums, and so their bits, stay.
    pub fn lane_interleaved(&self) -> Option<Activations> {
        self.interleave(|data, c, i| data[i] = c)
    }

    /// x as it is from its [`Activations::lane_interleaved`] copy (`self`), `None` where
    /// that copy could not have been made.
    pub fn lane_deinterleaved(&self) -> Option<Activations> {
        self.interleave(|data, c, i| data[c] = i)
    }

    /// A copy of the data moved by `place(moves, c, i)` for each column `c` of a slice
    /// and its position `i` in the interleaved slice (the two directions differ only in
    /// which index is the source).
    fn interleave(&self, place: impl Fn(&mut [usize], usize, usize)) -> Option<Activations> {
        if !self.cols.is_multiple_of(INTERLEAVE_COLS)
            || self.rows.checked_mul(self.cols) != Some(self.data.len())
        {
            return None;
        }
        // Values per 16-byte chunk; `from[d]`: the slice position destination d takes.
        let e = 16 / self.dtype.size();
        let mut from = vec![0usize; INTERLEAVE_COLS];
        for c in 0..INTERLEAVE_COLS {
            let (lane, j) = (c / 32, c % 32);
            place(&mut from, c, ((j / e) * 32 + lane) * e + j % e);
        }
        let data = self
            .data
            .chunks(INTERLEAVE_COLS)
            .flat_map(|src| from.iter().map(|&f| src[f]))
            .collect();
        Some(Activations { data, ..*self })
    }

    /// Little-endian bytes in `dtype`.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.dtype.encode(&self.data)
    }

    /// Whether two tensors hold the same bits (NaN payloads included).
    pub fn bits_eq(&self, other: &Activations) -> bool {
        self.dtype == other.dtype
            && self.rows == other.rows
            && self.cols == other.cols
            && self.to_bytes() == other.to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight that overflows T is found (and named) whether the scale or the table
    /// makes it large; rows the largest table value keeps finite pass untouched, and a
    /// row whose used states stay small passes though its table's largest would not.
    #[test]
    fn weights_infinite_in_t_are_named() {
        let g = Geometry::new(2, 64, 64, 2, 6, Code::Lut).unwrap();
        let n = g.codes_shape().iter().product::<usize>();
        let mut lut = vec![1.0f32; 64];
        lut[63] = 1e38; // state 63: all ones
        let w = QuantizedMatrix::new(g, vec![0; n], vec![1.0, 8.0], ScaleDType::F32, Some(lut))
            .unwrap();
        // Every state is 0 (value 1): the large table entry is never used.
        for t in [DType::Bf16, DType::F16, DType::F32] {
            w.check_weights_finite(t).unwrap();
        }
        let ones = QuantizedMatrix {
            codes: vec![u32::MAX; n],
            ..w.clone()
        };
        // f16: row 0 already (1e38 * 1); f32: only row 1 (1e38 * 8), named with both.
        let e = ones
            .check_weights_finite(DType::F16)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("w[0, 0] = value 1000")
                && e.contains("scales[0] 1:")
                && e.contains("overflows f16"),
            "{e}"
        );
        let e = ones
            .check_weights_finite(DType::F32)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("w[1, 0] = value 1000")
                && e.contains("scales[1] 8:")
                && e.contains("overflows f32"),
            "{e}"
        );
        let small = QuantizedMatrix {
            scales: vec![1.0, 1.0],
            ..ones.clone()
        };
        small.check_weights_finite(DType::F32).unwrap();
        let e = small
            .check_weights_finite(DType::F16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("w[0, 0]") && e.contains("overflows f16"), "{e}");
    }

    /// Lane l's chunk q (columns 32 l + e q .. + e - 1 of a slice, e values per 16 bytes)
    /// lands at chunk 32 q + l; a ragged width has no interleaved copy.
    #[test]
    fn lane_interleaving_moves_each_lanes_chunks_apart() {
        // f16 holds the column numbers exactly (bf16, of f16's size, would round them).
        for (dtype, e) in [(DType::F16, 8), (DType::F32, 4)] {
            let x = Activations::from_f32(
                dtype,
                2,
                2048,
                (0..4096).map(|i| (i % 2048) as f32).collect(),
            )
            .unwrap();
            let xi = x.lane_interleaved().unwrap();
            for (slice, base) in [(0usize, 0.0f32), (1, 1024.0)] {
                let at = |pos: usize| xi.data[2048 + slice * 1024 + pos];
                // Lane 0's first chunk, lane 1's first chunk, lane 0's second chunk.
                assert_eq!(at(0), base);
                assert_eq!(at(e), base + 32.0);
                assert_eq!(at(32 * e), base + e as f32);
                assert_eq!(at(31 * e + 1), base + 31.0 * 32.0 + 1.0);
            }
            let mut sorted = xi.data.clone();
            sorted.sort_by(f32::total_cmp);
            let mut want = x.data.clone();
            want.sort_by(f32::total_cmp);
            assert_eq!(sorted, want, "a permutation");
            // And back: x as it was.
            assert!(xi.lane_deinterleaved().unwrap().bits_eq(&x), "{dtype}");
        }
        let ragged = Activations::from_f32(DType::Bf16, 1, 1536, vec![0.0; 1536]).unwrap();
        assert!(ragged.lane_interleaved().is_none());
        // Hand-edited data shorter than rows x cols: no copy (and no panic).
        let mut short = Activations::from_f32(DType::Bf16, 1, 2048, vec![0.0; 2048]).unwrap();
        short.data.truncate(1500);
        assert!(short.lane_interleaved().is_none());
    }

    #[test]
    fn non_finite_scales_are_rejected_with_their_row() {
        let g = Geometry::new(3, 64, 32, 2, 6, Code::OneMad).unwrap();
        let codes = vec![0u32; g.codes_shape().iter().product()];
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let err = QuantizedMatrix::new(
                g,
                codes.clone(),
                vec![0.5, bad, 0.25],
                ScaleDType::F16,
                None,
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("scales[1]") && err.contains("finite"), "{err}");
        }
        assert!(
            QuantizedMatrix::new(g, codes, vec![0.5, -0.0, 0.25], ScaleDType::F16, None).is_ok()
        );
    }

    #[test]
    fn non_finite_lut_values_are_rejected_with_their_state() {
        let g = Geometry::new(3, 64, 32, 2, 6, Code::Lut).unwrap();
        let codes = vec![0u32; g.codes_shape().iter().product()];
        let scales = vec![0.5; 3];
        for bad in [f32::INFINITY, f32::NAN] {
            let mut lut = vec![0.25f32; g.states()];
            lut[17] = bad;
            let err =
                QuantizedMatrix::new(g, codes.clone(), scales.clone(), ScaleDType::F16, Some(lut))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains("lut[17]") && err.contains("finite"), "{err}");
        }
        let lut = vec![-0.0f32; g.states()];
        assert!(QuantizedMatrix::new(g, codes, scales, ScaleDType::F16, Some(lut)).is_ok());
    }
}
