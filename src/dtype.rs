//! Activation and scale dtypes and the `round_T` of SPEC section 4.

use crate::error::{Error, Result};
use half::{bf16, f16};

/// Activation dtype `T`: inputs `x`, outputs `y`/`mid`, and the rounding of weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// bfloat16 (`bf16`).
    Bf16,
    /// IEEE binary16 (`f16`).
    F16,
    /// IEEE binary32 (`f32`); `round_T` is the identity.
    F32,
}

impl DType {
    /// Every activation dtype.
    pub const ALL: [DType; 3] = [DType::Bf16, DType::F16, DType::F32];

    /// Name as in the file names and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            _ => 2,
        }
    }

    /// Explicit mantissa bits (bf16 7, f16 10, f32 23).
    pub fn mantissa_bits(self) -> i32 {
        match self {
            DType::Bf16 => 7,
            DType::F16 => 10,
            DType::F32 => 23,
        }
    }

    /// Exponent range of the normal numbers: (smallest, largest), e.g. f16 (-14, 15).
    pub fn normal_exponents(self) -> (i32, i32) {
        match self {
            DType::Bf16 | DType::F32 => (-126, 127),
            DType::F16 => (-14, 15),
        }
    }

    /// `round_T`: nearest-even to the dtype, returned as the (exact) f32 value.
    pub fn round(self, v: f32) -> f32 {
        match self {
            DType::Bf16 => bf16::from_f32(v).to_f32(),
            DType::F16 => f16::from_f32(v).to_f32(),
            DType::F32 => v,
        }
    }

    /// `round_T` of an f64, nearest-even in one rounding (subnormals of T included; past
    /// T's largest finite value, infinity), returned as the (exact) f32 value. For results
    /// computed in f64, where rounding to f32 first could round twice.
    pub fn round_f64(self, v: f64) -> f32 {
        if v == 0.0 || !v.is_finite() {
            return v as f32;
        }
        let (emin, emax) = self.normal_exponents();
        let p = self.mantissa_bits();
        // The spacing of T's values in v's binade (f64's exponent field: v is normal in
        // f64 here, far inside its range), at least T's subnormal spacing.
        let e = (((v.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
        let spacing = 2f64.powi(e - p);
        let r = (v / spacing).round_ties_even() * spacing; // exact: powers of two
        let largest = (2.0 - 2f64.powi(-p)) * 2f64.powi(emax);
        if r.abs() > largest {
            return f32::INFINITY.copysign(v as f32);
        }
        r as f32
    }

    /// Encode f32 values (already representable) as little-endian bytes of the dtype.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * self.size());
        self.encode_into(values, &mut out);
        out
    }

    /// [`Self::encode`] into memory reserved first: an error naming `what` where a huge
    /// tensor's bytes cannot be had (never an allocation abort).
    pub fn try_encode(self, values: &[f32], what: &str) -> Result<Vec<u8>> {
        let n = values.len().saturating_mul(self.size());
        let mut out = crate::error::reserve(n, what, format!("{} values", values.len()))?;
        self.encode_into(values, &mut out);
        Ok(out)
    }

    fn encode_into(self, values: &[f32], out: &mut Vec<u8>) {
        match self {
            DType::Bf16 => out.extend(values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes())),
            DType::F16 => out.extend(values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes())),
            DType::F32 => out.extend(values.iter().flat_map(|&v| v.to_le_bytes())),
        }
    }

    /// Decode little-endian bytes of the dtype to f32 values (exact).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::with_capacity(bytes.len() / self.size());
        self.decode_into(bytes, &mut out);
        out
    }

    /// [`Self::decode`] into memory reserved first (see [`Self::try_encode`]).
    pub fn try_decode(self, bytes: &[u8], what: &str) -> Result<Vec<f32>> {
        let n = bytes.len() / self.size();
        let mut out = crate::error::reserve(n, what, format!("{n} values"))?;
        self.decode_into(bytes, &mut out);
        Ok(out)
    }

    fn decode_into(self, bytes: &[u8], out: &mut Vec<f32>) {
        match self {
            DType::Bf16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
            ),
            DType::F16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
            ),
            DType::F32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| Error::invalid("dtype", s, "expected one of bf16, f16, f32"))
    }
}

/// Dtype of the per-row `scales` tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleDType {
    /// IEEE binary16 scales.
    F16,
    /// IEEE binary32 scales.
    F32,
}

impl ScaleDType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ScaleDType::F16 => 2,
            ScaleDType::F32 => 4,
        }
    }
    /// Name as in the files.
    pub fn name(self) -> &'static str {
        match self {
            ScaleDType::F16 => "f16",
            ScaleDType::F32 => "f32",
        }
    }
}

impl std::fmt::Display for ScaleDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::DType;

    #[test]
    fn round_f64_rounds_once() {
        // Values an f32 holds: the same as round_T of that f32.
        for dt in DType::ALL {
            for v in [1.0f32, -2.7182817, 1.0e-30, 6.0e-8, 65519.0, 1.0e20] {
                assert_eq!(
                    dt.round_f64(v as f64).to_bits(),
                    dt.round(v).to_bits(),
                    "{dt:?} {v}"
                );
            }
        }
        // Just above a bf16 tie by less than f32 keeps: once 1 + 2^-7, through f32 1.0.
        let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(DType::Bf16.round_f64(v), 1.0078125);
        assert_eq!(DType::Bf16.round(v as f32), 1.0);
        // f16's subnormals and its end: 2^-25 ties to 0, 1.5 * 2^-25 rounds up, 65520
        // rounds to 65536: infinity.
        assert_eq!(DType::F16.round_f64(2f64.powi(-25)), 0.0);
        assert_eq!(DType::F16.round_f64(1.5 * 2f64.powi(-25)), 2f32.powi(-24));
        assert_eq!(DType::F16.round_f64(-65520.0), f32::NEG_INFINITY);
        assert_eq!(DType::F16.round_f64(65519.0), 65504.0);
        // bf16 and f32 subnormals.
        assert_eq!(
            DType::Bf16.round_f64(1.4 * 2f64.powi(-133)),
            2f32.powi(-133)
        );
        assert_eq!(
            DType::F32.round_f64(2.6 * 2f64.powi(-149)),
            3.0 * 2f32.powi(-149)
        );
        assert_eq!(DType::F32.round_f64(-0.0).to_bits(), (-0.0f32).to_bits());
    }
}
