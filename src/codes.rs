//! SPEC section 3: the five codes that map a trellis state to a weight value.
//!
//! Every constant of every code lives here; the CPU reference, the encoder and the
//! kernel templates (through [`CodeConstants`]) all read them from this module.

use crate::error::{Error, Result};
use half::f16;

/// A state -> value map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// QTIP's one multiply-add: byte sum of an LCG step, centred and scaled.
    OneMad,
    /// QTIP's three instructions: LCG step, mask, xor, sum of two halves.
    ThreeInst,
    /// EXL3's multiplicative congruential variant of `3inst`.
    Mcg,
    /// EXL3's one multiply: byte sum mapped through one f16 fma.
    Mul1,
    /// An explicit f32 table of `2^L` values.
    Lut,
}

impl Code {
    /// Every code, in SPEC order.
    pub const ALL: [Code; 5] = [
        Code::OneMad,
        Code::ThreeInst,
        Code::Mcg,
        Code::Mul1,
        Code::Lut,
    ];

    /// The SPEC name (`1mad`, `3inst`, `mcg`, `mul1`, `lut`).
    pub fn name(self) -> &'static str {
        match self {
            Code::OneMad => "1mad",
            Code::ThreeInst => "3inst",
            Code::Mcg => "mcg",
            Code::Mul1 => "mul1",
            Code::Lut => "lut",
        }
    }

    /// Identifier-safe name for kernel symbols.
    pub fn ident(self) -> &'static str {
        match self {
            Code::OneMad => "onemad",
            Code::ThreeInst => "threeinst",
            Code::Mcg => "mcg",
            Code::Mul1 => "mul1",
            Code::Lut => "lut",
        }
    }

    /// Whether this is the table code (`lut`): for templates.
    pub fn is_lut(&self) -> bool {
        *self == Code::Lut
    }

    /// Whether the value is one f16 rounding of exact arithmetic on f16 operands: the sum
    /// of a masked word's halves (`3inst`, `mcg`) or an fma of the byte sum (`mul1`).
    pub fn is_f16_valued(&self) -> bool {
        matches!(self, Code::ThreeInst | Code::Mcg | Code::Mul1)
    }

    /// Value of state `s` (only the low L bits are used by callers). `lut` is read for
    /// code `lut`: a missing table, or one without entry `s`, is an error naming it.
    pub fn value(self, s: u32, lut: Option<&[f32]>) -> Result<f32> {
        Ok(match self {
            Code::Lut => {
                let lut =
                    lut.ok_or_else(|| Error::invalid("lut", "missing", "code lut needs a table"))?;
                *lut.get(s as usize).ok_or_else(|| {
                    Error::invalid(
                        "state",
                        s,
                        format!("beyond the lut's {} entries", lut.len()),
                    )
                })?
            }
            Code::OneMad => {
                let y = bytesum(s.wrapping_mul(MAD_MUL).wrapping_add(MAD_ADD));
                (y as i32 - MAD_CENTER) as f32 / MAD_DIVISOR
            }
            Code::ThreeInst => half_pair(s.wrapping_mul(INST_MUL).wrapping_add(INST_ADD)),
            Code::Mcg => half_pair(s.wrapping_mul(MCG_MUL)),
            Code::Mul1 => {
                let y = bytesum(s.wrapping_mul(MUL1_MUL));
                // (1024 + y) * h(0x1EEE) + h(0xC931) is exact in f32 (at most 21
                // significant bits), so rounding the f32 fma to f16 is the one rounding.
                let v = ((MUL1_OFFSET + y) as f32).mul_add(
                    f16::from_bits(MUL1_SCALE_BITS).to_f32(),
                    f16::from_bits(MUL1_BIAS_BITS).to_f32(),
                );
                f16::from_f32(v).to_f32()
            }
        })
    }

    /// The value of every state for `l` state bits. Code `lut` returns a copy of `lut`
    /// after checking its length.
    pub fn table(self, l: u32, lut: Option<&[f32]>) -> Result<Vec<f32>> {
        check_l(l)?;
        let n = 1usize << l;
        if self == Code::Lut {
            let lut =
                lut.ok_or_else(|| Error::invalid("lut", "missing", "code lut needs a table"))?;
            if lut.len() != n {
                return Err(Error::invalid(
                    "lut length",
                    lut.len(),
                    format!("must be 2^L = {n}"),
                ));
            }
            return Ok(lut.to_vec());
        }
        Ok(self.computed_table(l)?.to_vec())
    }

    /// The table of a computed code at `l`, made once a process: 2^16 values take about
    /// half a millisecond on a laptop core, and every call of the facade reads the table
    /// (to check weights and operands, to upload it), some 20 times a GPU kernel's time.
    fn computed_table(self, l: u32) -> Result<std::sync::Arc<[f32]>> {
        use std::collections::HashMap;
        use std::sync::{Arc, Mutex, OnceLock, PoisonError};
        type Memo = Mutex<HashMap<(Code, u32), Arc<[f32]>>>;
        static MEMO: OnceLock<Memo> = OnceLock::new();
        let memo = MEMO.get_or_init(Default::default);
        if let Some(t) = memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(self, l))
        {
            return Ok(t.clone());
        }
        // Made outside the lock (two threads may both make it: the same values).
        let t: Vec<f32> = (0..1u32 << l)
            .map(|s| self.value(s, None))
            .collect::<Result<_>>()?;
        Ok(memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((self, l))
            .or_insert_with(|| t.into())
            .clone())
    }
}

/// SPEC 1's range of L (`k < L <= 16`, k at least 1), for what takes an L alone: a
/// table of 2^L values.
pub fn check_l(l: u32) -> Result<()> {
    if (2..=16).contains(&l) {
        Ok(())
    } else {
        Err(Error::invalid(
            "L",
            l,
            "must be in 2..=16 (SPEC 1: k < L <= 16)",
        ))
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Code {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Code::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| Error::invalid("code", s, "expected one of 1mad, 3inst, mcg, mul1, lut"))
    }
}

/// `1mad`: `x = s * MAD_MUL + MAD_ADD`.
pub const MAD_MUL: u32 = 34038481;
/// `1mad` additive constant.
pub const MAD_ADD: u32 = 76625530;
/// `1mad`: the byte sum is centred on 510 ...
pub const MAD_CENTER: i32 = 510;
/// ... and divided by this (exactly representable) f32.
#[allow(clippy::excessive_precision)]
pub const MAD_DIVISOR: f32 = 147.800537109375;
/// `3inst`: `x = s * INST_MUL + INST_ADD`.
pub const INST_MUL: u32 = 89226354;
/// `3inst` additive constant.
pub const INST_ADD: u32 = 64248484;
/// `mcg`: `x = s * MCG_MUL`.
pub const MCG_MUL: u32 = 0xCBAC1FED;
/// `3inst`/`mcg`: mask applied to `x`.
pub const HALF_PAIR_MASK: u32 = 0x8FFF8FFF;
/// `3inst`/`mcg`: xor applied after the mask.
pub const HALF_PAIR_XOR: u32 = 0x3B603B60;
/// `mul1`: `x = s * MUL1_MUL`.
pub const MUL1_MUL: u32 = 0x83DCD12D;
/// `mul1`: offset added to the byte sum.
pub const MUL1_OFFSET: u32 = 1024;
/// `mul1`: f16 bits of the multiplier.
pub const MUL1_SCALE_BITS: u16 = 0x1EEE;
/// `mul1`: f16 bits of the bias.
pub const MUL1_BIAS_BITS: u16 = 0xC931;

/// Sum of the four bytes of `x`.
pub fn bytesum(x: u32) -> u32 {
    x.to_le_bytes().iter().map(|&b| b as u32).sum()
}

/// `f16(h(r >> 16) + h(r & 0xFFFF))` with `r = (x & MASK) ^ XOR`. The f32 sum of two
/// f16 values rounded again to f16 equals the correctly rounded f16 sum (f32 has
/// 24 >= 2*11 + 2 significand bits), so every backend may add in f32.
fn half_pair(x: u32) -> f32 {
    let r = (x & HALF_PAIR_MASK) ^ HALF_PAIR_XOR;
    let hi = f16::from_bits((r >> 16) as u16).to_f32();
    let lo = f16::from_bits((r & 0xFFFF) as u16).to_f32();
    f16::from_f32(hi + lo).to_f32()
}

/// `1 / MAD_DIVISOR` split in two f32: `hi = RN(1/c)`, `lo = RN(1/c - hi)` (bits
/// `0x3bddb447` and `0xaf7486be`), computed in f64 where the split is exact enough.
pub fn onemad_recip_split() -> (f32, f32) {
    let inv = 1.0f64 / MAD_DIVISOR as f64;
    let hi = inv as f32;
    (hi, (inv - hi as f64) as f32)
}

/// `a / MAD_DIVISOR` the way kernels compute it: `fma(a, hi, a * lo)` with the split
/// reciprocal of [`onemad_recip_split`], one multiply and one fma instead of a division
/// (cheaper on GPUs, and MSL promises no correctly rounded `/`). A test proves it equals
/// IEEE division for every `1mad` byte sum, exhaustively.
pub fn onemad_quotient(a: f32) -> f32 {
    let (hi, lo) = onemad_recip_split();
    a.mul_add(hi, a * lo)
}

/// The f32 2^23: the bits of `2^23 + n` are this value's bits plus `n` for every integer
/// `0 <= n < 2^23`, so a byte sum added onto them (`dp4a`'s accumulator) spells an exact
/// f32 without a conversion instruction.
pub const F32_INT_BASE: f32 = 8388608.0;
/// The f16 bits of 1024; likewise `F16_INT_BASE_BITS + n` are the f16 bits of `1024 + n`
/// for `0 <= n < 1024` (f16's spacing at 1024..2047 is 1).
pub const F16_INT_BASE_BITS: u16 = 0x6400;

/// `1mad`'s byte sum as the kernels read it: `dp4a` adds the four bytes onto the bits of
/// `MAD_BIAS - MAD_CENTER`, so the f32 they spell is `MAD_BIAS + y` for the centred sum
/// `y`, exactly (one binade, ulp 1, for every `y` in -510..=510).
pub const MAD_BIAS: f32 = 12582912.0;
/// [`MAD_BIAS`]'s bits (the kernels spell the f32 from them).
pub const MAD_BIAS_BITS: u32 = MAD_BIAS.to_bits();
/// What `dp4a` adds `1mad`'s byte sum onto: the bits of `MAD_BIAS - MAD_CENTER`.
pub const MAD_BIAS_ACC: u32 = MAD_BIAS_BITS - MAD_CENTER as u32;

/// `1mad` with the row scale folded into the division, for bf16 weights (`round_T` to
/// bf16) and a finite f16 row scale `s`: an f32 `S` near `s / c` such that
///
/// - `round_bf16(RN(y * S))` is SPEC 4's `round_bf16(RN(RN(y / c) * s))` for every centred
///   byte sum `y`, and
/// - `MAD_BIAS * S` is exact in f32,
///
/// so a kernel takes the weight from the biased byte sum `D = MAD_BIAS + y` in one fma,
/// `round_bf16(fma(D, S, -(MAD_BIAS * S)))`, where the SPEC order spends a centring add,
/// the division's multiply and fma and the scale's multiply. `S` is the first of `RN(s /
/// c)`, its f32 neighbours one ulp below and above, two below and above, ... that meets
/// both; the exhaustive test below checks all 65536 f16 bit patterns against all 1021
/// byte sums (every one lies within 3 ulps). Normal scales share `S`'s significand per
/// 10-bit mantissa (powers of two commute with every rounding here), so the search runs
/// once per mantissa and per subnormal, 2047 in all, on first use. (f16 weights: 60
/// scales have no `S` even without the second condition; f32 weights keep every bit; f32
/// scales are not tabulated; non-finite scales are rejected by `QuantizedMatrix::new`.)
pub fn onemad_folded_scale(s: f16) -> f32 {
    use std::sync::OnceLock;
    static CLASSES: OnceLock<Vec<f32>> = OnceLock::new();
    if !s.is_finite() {
        return s.to_f32() / MAD_DIVISOR;
    }
    let classes = CLASSES.get_or_init(|| {
        // 0..1024: normal mantissas at exponent 15 (1.m); 1024..2048: subnormals (and 0).
        (0..2048u16)
            .map(|i| {
                let bits = if i < 1024 { 0x3C00 | i } else { i - 1024 };
                fold_search(f16::from_bits(bits).to_f32())
            })
            .collect()
    });
    let (exponent, mantissa) = (((s.to_bits() >> 10) & 0x1F) as i32, s.to_bits() & 0x3FF);
    let magnitude = if exponent == 0 {
        classes[1024 + mantissa as usize]
    } else {
        classes[mantissa as usize] * 2f32.powi(exponent - 15)
    };
    if s.is_sign_negative() {
        -magnitude
    } else {
        magnitude
    }
}

/// The search of [`onemad_folded_scale`] for one finite, non-negative scale. Every f16
/// has a candidate within 3 ulps (exhaustive test); the loop looks 16 ulps either way.
fn fold_search(s: f32) -> f32 {
    let near = (s / MAD_DIVISOR).to_bits() as i64;
    let spec = |y: i32| crate::dtype::DType::Bf16.round((y as f32 / MAD_DIVISOR) * s);
    (0..=32i64)
        .map(|i| near + if i % 2 == 1 { -(i + 1) / 2 } else { i / 2 })
        .map(|bits| f32::from_bits(bits as u32))
        .find(|&c| {
            (MAD_BIAS * c) as f64 == MAD_BIAS as f64 * c as f64
                && (-MAD_CENTER..=MAD_CENTER).all(|y| {
                    crate::dtype::DType::Bf16.round(y as f32 * c).to_bits() == spec(y).to_bits()
                })
        })
        .unwrap_or(s / MAD_DIVISOR)
}

/// The numeric constants a kernel template needs, as literal text for the dialects.
#[derive(Clone, Debug)]
pub struct CodeConstants {
    /// [`MAD_MUL`] (`1mad` multiplier).
    pub mad_mul: u32,
    /// [`MAD_ADD`] (`1mad` additive constant).
    pub mad_add: u32,
    /// [`MAD_CENTER`] (subtracted from `1mad`'s byte sum).
    pub mad_center: i32,
    /// `MAD_DIVISOR` as f32 bits.
    pub mad_divisor_bits: u32,
    /// f32 bits of `1 / MAD_DIVISOR` rounded to f32 (see [`onemad_quotient`]).
    pub mad_recip_bits: u32,
    /// f32 bits of the rest, `RN(1 / MAD_DIVISOR - hi)` (see [`onemad_recip_split`]).
    pub mad_recip_lo_bits: u32,
    /// [`INST_MUL`] (`3inst` multiplier).
    pub inst_mul: u32,
    /// [`INST_ADD`] (`3inst` additive constant).
    pub inst_add: u32,
    /// [`MCG_MUL`] (`mcg` multiplier).
    pub mcg_mul: u32,
    /// [`HALF_PAIR_MASK`] (`3inst`/`mcg` mask).
    pub half_pair_mask: u32,
    /// [`HALF_PAIR_XOR`] (`3inst`/`mcg` xor after the mask).
    pub half_pair_xor: u32,
    /// [`MUL1_MUL`] (`mul1` multiplier).
    pub mul1_mul: u32,
    /// [`MUL1_OFFSET`] (added to `mul1`'s byte sum).
    pub mul1_offset: u32,
    /// `h(MUL1_SCALE_BITS)` as f32 bits.
    pub mul1_scale_f32_bits: u32,
    /// `h(MUL1_BIAS_BITS)` as f32 bits.
    pub mul1_bias_f32_bits: u32,
    /// [`MAD_BIAS`] (the biased byte sum's offset).
    pub mad_bias: f32,
    /// [`MAD_BIAS_BITS`].
    pub mad_bias_bits: u32,
    /// [`F32_INT_BASE`].
    pub f32_int_base: f32,
    /// [`F32_INT_BASE`]'s bits.
    pub f32_int_base_bits: u32,
    /// [`F16_INT_BASE_BITS`].
    pub f16_int_base_bits: u32,
    /// The f16x2 bits of `1024 + MAD_CENTER` in both halves: subtracted from two packed
    /// `1024 + byte sum` (f16 `1mad` operands) it leaves both centred sums, exactly.
    pub mad_f16x2_centre: u32,
    /// The bits of the f32 `-(2^23 + MAD_CENTER)`, as the i32 the templates have always
    /// written (C's minus on the unsigned literal gives the same bits): added to `2^23 +
    /// byte sum` it leaves the centred sum, exactly (bf16 `1mad` operands).
    pub mad_f32_neg_centre_bits: i32,
}

impl CodeConstants {
    /// The constants of SPEC section 3.
    pub fn spec() -> Self {
        CodeConstants {
            mad_mul: MAD_MUL,
            mad_add: MAD_ADD,
            mad_center: MAD_CENTER,
            mad_divisor_bits: MAD_DIVISOR.to_bits(),
            mad_recip_bits: onemad_recip_split().0.to_bits(),
            mad_recip_lo_bits: onemad_recip_split().1.to_bits(),
            inst_mul: INST_MUL,
            inst_add: INST_ADD,
            mcg_mul: MCG_MUL,
            half_pair_mask: HALF_PAIR_MASK,
            half_pair_xor: HALF_PAIR_XOR,
            mul1_mul: MUL1_MUL,
            mul1_offset: MUL1_OFFSET,
            mul1_scale_f32_bits: f16::from_bits(MUL1_SCALE_BITS).to_f32().to_bits(),
            mul1_bias_f32_bits: f16::from_bits(MUL1_BIAS_BITS).to_f32().to_bits(),
            mad_bias: MAD_BIAS,
            mad_bias_bits: MAD_BIAS_BITS,
            f32_int_base: F32_INT_BASE,
            f32_int_base_bits: F32_INT_BASE.to_bits(),
            f16_int_base_bits: F16_INT_BASE_BITS as u32,
            mad_f16x2_centre: (F16_INT_BASE_BITS as u32 + MAD_CENTER as u32) * 0x10001,
            mad_f32_neg_centre_bits: (-(F32_INT_BASE + MAD_CENTER as f32)).to_bits() as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code `lut` reads its table: a missing one, or a state past its end, is an error
    /// naming it (the other codes ignore the argument).
    #[test]
    fn lut_values_need_their_table() {
        let e = Code::Lut.value(3, None).unwrap_err().to_string();
        assert!(e.contains("lut") && e.contains("missing"), "{e}");
        let e = Code::Lut.value(4, Some(&[0.5; 4])).unwrap_err().to_string();
        assert!(e.contains("state = 4") && e.contains("4 entries"), "{e}");
        assert_eq!(
            Code::Lut.value(3, Some(&[0.0, 0.0, 0.0, 0.5])).unwrap(),
            0.5
        );
        assert_eq!(
            Code::OneMad.value(7, Some(&[0.5])).unwrap(),
            Code::OneMad.value(7, None).unwrap()
        );
    }

    #[test]
    fn integer_bases_spell_exact_sums() {
        // What the templates rely on when they add a byte sum onto these bits.
        for n in [0u32, 1, 510, 1020, 4095] {
            assert_eq!(
                f32::from_bits(F32_INT_BASE.to_bits() + n),
                F32_INT_BASE + n as f32
            );
        }
        for n in 0..1024u16 {
            assert_eq!(
                f16::from_bits(F16_INT_BASE_BITS + n).to_f32(),
                1024.0 + n as f32
            );
        }
        let c = CodeConstants::spec();
        let centre = f16::from_f32(1024.0 + MAD_CENTER as f32).to_bits() as u32;
        assert_eq!(c.mad_f16x2_centre, centre | (centre << 16));
        let neg = f32::from_bits(c.mad_f32_neg_centre_bits as u32);
        assert_eq!(neg, -(F32_INT_BASE + MAD_CENTER as f32));
        assert_eq!(f32::from_bits(c.mad_bias_bits), MAD_BIAS);
    }

    #[test]
    fn names_round_trip() {
        for c in Code::ALL {
            assert_eq!(c.name().parse::<Code>().unwrap(), c);
        }
        assert!("2mad"
            .parse::<Code>()
            .unwrap_err()
            .to_string()
            .contains("2mad"));
    }

    #[test]
    fn onemad_is_centred_unit_variance() {
        let t = Code::OneMad.table(16, None).unwrap();
        let mean = t.iter().map(|&v| v as f64).sum::<f64>() / t.len() as f64;
        let var = t.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / t.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!((var - 1.0).abs() < 0.1, "var {var}");
    }

    #[test]
    fn onemad_quotient_is_ieee_division_for_every_byte_sum() {
        let (hi, lo) = onemad_recip_split();
        assert_eq!(hi.to_bits(), 0x3bdd_b447);
        assert_eq!(lo.to_bits(), 0xaf74_86be);
        assert_eq!(hi, 1.0 / MAD_DIVISOR, "hi is the f32 reciprocal");
        // Every centred byte sum y in -510..=510 (all 1021 of them).
        let mut n = 0;
        for y in -MAD_CENTER..=MAD_CENTER {
            let a = y as f32;
            let want = a / MAD_DIVISOR;
            assert_eq!(onemad_quotient(a).to_bits(), want.to_bits(), "y = {y}");
            // As the kernels spell it: fma(y, hi, y * lo), separate multiply.
            let y_lo = a * f32::from_bits(0xaf74_86be);
            assert_eq!(
                a.mul_add(f32::from_bits(0x3bdd_b447), y_lo).to_bits(),
                want.to_bits(),
                "y = {y}"
            );
            n += 1;
        }
        assert_eq!(n, 1021);
        // The byte sum as the kernels form it: the bits of 1.5 * 2^23 - 510 plus the byte
        // sum, minus 1.5 * 2^23, is y exactly (one binade for every y).
        for s in 0..=1020u32 {
            let y = f32::from_bits(0x4B40_0000 - 510 + s) - 12_582_912.0;
            assert_eq!(y, s as f32 - 510.0);
        }
    }

    #[test]
    fn folded_scale_gives_the_spec_bf16_weight_for_every_f16_scale_and_byte_sum() {
        use crate::dtype::DType;
        let (mut moved, mut finite) = (0u32, 0u32);
        for bits in 0..=u16::MAX {
            let s = f16::from_bits(bits);
            if !s.is_finite() {
                continue;
            }
            finite += 1;
            let folded = onemad_folded_scale(s);
            let near = (s.to_f32() / MAD_DIVISOR).to_bits() as i64;
            let ulps = (folded.to_bits() as i64 - near).abs();
            assert!(ulps <= 3, "scale {bits:#06x}: {ulps} ulps from s / c");
            moved += (ulps != 0) as u32;
            // The bias product is exact, so the kernels' fma is RN(y * S).
            let bias = MAD_BIAS * folded;
            assert_eq!(
                bias as f64,
                MAD_BIAS as f64 * folded as f64,
                "scale {bits:#06x}"
            );
            for y in -MAD_CENTER..=MAD_CENTER {
                let spec = DType::Bf16.round((y as f32 / MAD_DIVISOR) * s.to_f32());
                let biased = MAD_BIAS + y as f32;
                let got = DType::Bf16.round(biased.mul_add(folded, -bias));
                // A zero weight may come out +0 where SPEC's is -0 (y = 0 under a negative
                // scale; a zero scale): no sum started at +0 can show a zero's sign, since
                // +0 + -0 is +0 and an exact cancellation gives +0.
                let same = got.to_bits() == spec.to_bits() || (got == 0.0 && spec == 0.0);
                assert!(same, "scale {bits:#06x}, y = {y}: {got:e} against {spec:e}");
            }
        }
        // Most scales need a neighbour of s / c (the bias product wants low zero bits), so
        // the search is not a formality.
        assert!(2 * moved > finite, "{moved} of {finite} scales moved");
    }

    #[test]
    fn lut_table_checks_length() {
        let err = Code::Lut
            .table(12, Some(&[0.0; 100]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lut length = 100"), "{err}");
    }
}
