//! The numerics a caller chooses: the tier (SPEC 5's canonical order bit for bit, or SPEC
//! 7's bound) and the SwiGLU tail's arithmetic (SPEC 6). Every family takes them.

/// Numerics tier: `exact` reproduces the SPEC 5 order bit for bit, `fast` may reorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Bit-identical to the SPEC 5 canonical order on every backend.
    Exact,
    /// Any order and precision within the SPEC 7 bound.
    Fast,
}

impl Tier {
    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::Fast => "fast",
        }
    }
    /// For templates.
    pub fn is_exact(&self) -> bool {
        *self == Tier::Exact
    }
}

/// SwiGLU tail arithmetic (SPEC 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tail {
    /// `exp_spec`, bit-reproducible everywhere.
    Exact,
    /// The backend's own exp (GPU dialects); compared within a tolerance.
    Native,
}

impl Tail {
    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Tail::Exact => "exact",
            Tail::Native => "native",
        }
    }
    /// For templates.
    pub fn is_exact(&self) -> bool {
        *self == Tail::Exact
    }
}

parse_by_name!(Tier, "tier", [Tier::Exact, Tier::Fast]);
parse_by_name!(Tail, "tail", [Tail::Exact, Tail::Native]);

/// The fast tier's hold at f16's edge: an f32 result in `[65520, F16_HOLD_BELOW)`, which
/// rounds to infinity in f16 though it passes 65520 (the overflow threshold) by less
/// than SPEC 7's relative term 2^-8 (bf16's unit roundoff; the fast kernels' own error is
/// about f16's, 2^-11, so the window covers it with room), is written as 65504, the
/// largest f16 (and likewise below zero): SPEC 7 keeps sums in f16's own range finite.
/// Further out, infinity. `65520 (1 + 2^-8)`, rounded up to an integer. The kernels'
/// `f16_hold` (`templates/reduce_mma.kernel`) and [`f16_hold`] on the host.
pub const F16_HOLD_BELOW: f32 = 65776.0;

/// [`F16_HOLD_BELOW`] as a C literal, for the kernels' `f16_hold` (`templates/decode.inc`).
pub fn f16_hold_below_c() -> String {
    format!("{:.1}f", F16_HOLD_BELOW)
}

/// The hold ([`F16_HOLD_BELOW`]) of a result headed for f16: ±65504 where it lies in
/// `[65520, F16_HOLD_BELOW)` (or the negative of it), else `v` itself.
pub fn f16_hold(v: f64) -> f64 {
    if (65520.0..F16_HOLD_BELOW as f64).contains(&v.abs()) {
        65504f64.copysign(v)
    } else {
        v
    }
}
