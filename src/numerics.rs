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
/// than SPEC 7's relative bound (2^-8, the f16 operands' rounding), is written as
/// 65504, the largest f16 (and likewise below zero): SPEC 7 keeps sums in f16's own
/// range finite. Further out, infinity. `65520 (1 + 2^-8)`, rounded up to an integer.
pub const F16_HOLD_BELOW: f32 = 65776.0;
