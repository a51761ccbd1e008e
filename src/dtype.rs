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

/// Values a block for the slice conversions and checks below: large enough to
/// vectorize, small enough for a stack buffer.
const BLOCK: usize = 256;

/// Whether `v` is one of bf16's values (or a NaN of it): bf16 is f32's top half, so its
/// values are the f32s whose low 16 bits are zero.
#[inline]
fn bf16_holds(v: f32) -> bool {
    v.to_bits() & 0xFFFF == 0
}

/// `round_bf16(v)` on the bits, as `half` rounds (nearest even; a NaN kept, made quiet),
/// with no branch a compiler cannot turn into a select: a block of these vectorizes,
/// where `half`'s conversion goes a value at a time (`DType::round_in_place`).
#[inline]
fn bf16_round_bits(b: u32) -> u32 {
    let nan = (b & 0x7FFF_FFFF) > 0x7F80_0000;
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    if nan {
        (b & 0xFFFF_0000) | 0x0040_0000
    } else {
        rounded
    }
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

    /// `round_T` of every value in place, a block at a time so it vectorizes (f16's
    /// through the host's vector conversions where it has them, `half`'s slice API; bf16's
    /// on the bits: the facade rounds each call's x). Stops at the first finite value that
    /// rounds to infinity and gives its index and value (the slice then rounded only up to
    /// its block).
    pub fn round_in_place(self, values: &mut [f32]) -> Option<(usize, f32)> {
        use half::slice::HalfFloatSliceExt;
        if self == DType::F32 {
            return None;
        }
        let (mut h, mut was) = ([f16::ZERO; BLOCK], [0f32; BLOCK]);
        values.chunks_mut(BLOCK).enumerate().find_map(|(b, c)| {
            let was = &mut was[..c.len()];
            was.copy_from_slice(c);
            if self == DType::F16 {
                let h = &mut h[..c.len()];
                h.convert_from_f32_slice(c);
                h.convert_to_f32_slice(c);
            } else {
                c.iter_mut()
                    .for_each(|v| *v = f32::from_bits(bf16_round_bits(v.to_bits())));
            }
            let overflow = |v: &f32, r: &f32| v.is_finite() & !r.is_finite();
            // Any overflow in the block, without an early exit (so it vectorizes); then
            // where.
            let any = was
                .iter()
                .zip(c.iter())
                .fold(false, |a, (v, r)| a | overflow(v, r));
            any.then(|| {
                let i = was.iter().zip(c.iter()).position(|(v, r)| overflow(v, r))?;
                Some((b * BLOCK + i, was[i]))
            })
            .flatten()
        })
    }

    /// The index of the first of `values` that is not one of the dtype's ([`Self::holds`]),
    /// checked a block at a time so the check vectorizes (the facade checks each call's
    /// x; a value at a time took longer than the rest of the call's host work).
    pub fn first_foreign(self, values: &[f32]) -> Option<usize> {
        let mut rounded = [0f32; BLOCK];
        let mut block_holds = |c: &[f32]| match self {
            DType::F32 => true,
            DType::Bf16 => c
                .iter()
                .fold(true, |a, &v| a & (v.is_nan() | bf16_holds(v))),
            DType::F16 => {
                let r = &mut rounded[..c.len()];
                r.copy_from_slice(c);
                self.round_in_place(r);
                c.iter().zip(r.iter()).fold(true, |a, (v, r)| {
                    a & (v.is_nan() | (v.to_bits() == r.to_bits()))
                })
            }
        };
        let b = values.chunks(BLOCK).position(|c| !block_holds(c))?;
        let start = b * BLOCK;
        values[start..]
            .iter()
            .position(|&v| !self.holds(v))
            .map(|i| start + i)
    }

    /// Whether `v` is one of the dtype's values (`round(v)` is `v`), a NaN counting as the
    /// dtype's NaN. bf16's values are the f32s whose low 16 bits are zero: a test of bits,
    /// where `round` rounds in software (every facade call checks x this way, several
    /// thousand values).
    #[inline]
    pub fn holds(self, v: f32) -> bool {
        v.is_nan()
            || match self {
                DType::Bf16 => bf16_holds(v),
                DType::F16 => self.round(v).to_bits() == v.to_bits(),
                DType::F32 => true,
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

    // Written a block of fixed-size chunks at a time, so the loops vectorize: the facade
    // encodes each call's x and decodes its y (thousands of values; a value at a time
    // was most of a call's host work).
    fn encode_into(self, values: &[f32], out: &mut Vec<u8>) {
        use half::slice::HalfFloatSliceExt;
        let start = out.len();
        out.resize(start + values.len() * self.size(), 0);
        let dst = &mut out[start..];
        match self {
            // A bf16 value (what callers pass) is its f32's top half; others round.
            DType::Bf16 => {
                for (o, &v) in dst.as_chunks_mut::<2>().0.iter_mut().zip(values) {
                    let b = v.to_bits();
                    *o = if bf16_holds(v) && !v.is_nan() {
                        ((b >> 16) as u16).to_le_bytes()
                    } else {
                        bf16::from_f32(v).to_le_bytes()
                    };
                }
            }
            DType::F16 => {
                let mut h = [f16::ZERO; 256];
                for (src, o) in values.chunks(256).zip(dst.chunks_mut(512)) {
                    let h = &mut h[..src.len()];
                    h.convert_from_f32_slice(src);
                    for (o, v) in o.as_chunks_mut::<2>().0.iter_mut().zip(h.iter()) {
                        *o = v.to_le_bytes();
                    }
                }
            }
            DType::F32 => {
                for (o, v) in dst.as_chunks_mut::<4>().0.iter_mut().zip(values) {
                    *o = v.to_le_bytes();
                }
            }
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
            // bf16's bits are the f32's top half: a shift a value (a NaN made quiet, as
            // `half` does), where `half`'s conversion is a call a value.
            DType::Bf16 => {
                let start = out.len();
                out.resize(start + bytes.len() / 2, 0.0);
                let (pairs, _) = bytes.as_chunks::<2>();
                for (o, &b) in out[start..].iter_mut().zip(pairs) {
                    let h = u16::from_le_bytes(b);
                    let h = h | (u16::from(h & 0x7FFF > 0x7F80) << 6);
                    *o = f32::from_bits(u32::from(h) << 16);
                }
            }
            DType::F16 => {
                use half::slice::HalfFloatSliceExt;
                let start = out.len();
                out.resize(start + bytes.len() / 2, 0.0);
                let mut h = [f16::ZERO; 256];
                let (pairs, _) = bytes.as_chunks::<2>();
                for (src, o) in pairs.chunks(256).zip(out[start..].chunks_mut(256)) {
                    let h = &mut h[..src.len()];
                    for (h, &b) in h.iter_mut().zip(src) {
                        *h = f16::from_le_bytes(b);
                    }
                    h.convert_to_f32_slice(o);
                }
            }
            DType::F32 => {
                let (words, _) = bytes.as_chunks::<4>();
                out.extend(words.iter().map(|&b| f32::from_le_bytes(b)));
            }
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

    /// `holds` is `round(v) == v` (NaN aside), and decoding bf16 by its bits is half's
    /// conversion, over every bf16 bit pattern and f32s around them.
    #[test]
    fn holds_and_decode_agree_with_rounding() {
        for hi in 0..=u16::MAX {
            let b = u32::from(hi) << 16;
            for bits in [b, b | 1, b | 0x8000, b | 0xFFFF] {
                let v = f32::from_bits(bits);
                for dt in DType::ALL {
                    let want = v.is_nan() || dt.round(v).to_bits() == v.to_bits();
                    assert_eq!(dt.holds(v), want, "{dt:?} {bits:#010x}");
                }
            }
            let got = DType::Bf16.decode(&hi.to_le_bytes())[0];
            assert_eq!(got.to_bits(), half::bf16::from_bits(hi).to_f32().to_bits());
            let got = DType::F16.decode(&hi.to_le_bytes())[0];
            assert_eq!(got.to_bits(), half::f16::from_bits(hi).to_f32().to_bits());
        }
        // first_foreign finds the first value holds refuses, wherever it sits.
        for dt in [DType::Bf16, DType::F16] {
            let mut v = vec![1.0f32; 1000];
            assert_eq!(dt.first_foreign(&v), None);
            for at in [0, 255, 256, 999] {
                // A NaN beside it (held: NaN is the finiteness checks' to name).
                v[at ^ 1] = f32::NAN;
                v[at] = 1.0 + 2f32.powi(-20);
                assert_eq!(dt.first_foreign(&v), Some(at), "{dt:?} {at}");
                v[at] = 1.0;
                v[at ^ 1] = 1.0;
            }
        }
        // encode is half's conversion, value by value, for every dtype.
        let values: Vec<f32> = (0..70_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .collect();
        for dt in DType::ALL {
            let bytes = dt.encode(&values);
            let want: Vec<u8> = match dt {
                DType::Bf16 => values
                    .iter()
                    .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                    .collect(),
                DType::F16 => values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect(),
                DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            assert_eq!(bytes, want, "{dt:?}");
            // And decode gives the rounded values back, a long slice at once.
            for (v, d) in values.iter().zip(dt.decode(&bytes)) {
                let r = dt.round(*v);
                assert!(
                    r.to_bits() == d.to_bits() || (r.is_nan() && d.is_nan()),
                    "{dt:?} {v:e}"
                );
            }
        }
        // round_in_place is round, value by value (f16 through the vector conversions),
        // over the values that do not overflow the dtype; and it names the first finite
        // value that does (its index and value), wherever it sits in its block.
        let values: Vec<f32> = (0..70_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .chain([65519.0, 65504.0, -65519.0, 6.0e-8, f32::INFINITY, f32::NAN])
            .collect();
        for dt in DType::ALL {
            let fits: Vec<f32> = values
                .iter()
                .copied()
                .filter(|v| !v.is_finite() || dt.round(*v).is_finite())
                .collect();
            let mut all = fits.clone();
            assert_eq!(dt.round_in_place(&mut all), None, "{dt:?}");
            for (v, r) in fits.iter().zip(&all) {
                let want = dt.round(*v);
                assert!(
                    r.to_bits() == want.to_bits() || (r.is_nan() && want.is_nan()),
                    "{dt:?} {v:e}: {r:e} against {want:e}"
                );
            }
            if dt == DType::F32 {
                continue;
            }
            let big = if dt == DType::F16 { 65520.0 } else { f32::MAX };
            for at in [0, 300, 999] {
                let mut v = fits[..1000].to_vec();
                v[at] = -big;
                assert_eq!(dt.round_in_place(&mut v), Some((at, -big)), "{dt:?} {at}");
            }
        }
    }

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
