//! What a tuned choice is keyed by ([`TuneKey`]) and its anchored size [`Bucket`]: part of
//! the family contract (a family names its problems' keys), read by the tables and the
//! selector in [`crate::tune`].

use crate::error::{Error, Result};
use crate::numerics::Tier;
use std::fmt;

/// Anchored size bucket: rows and cols each rounded to the nearest power of two (in log
/// space), so nearby shapes share a tuned entry and a table stays small. A table may hold
/// entries of several measured shapes in one bucket (each tuned shape keeps its own); the
/// selector then takes the one nearest the problem's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    /// Rows, rounded to a power of two.
    pub rows: u64,
    /// Columns, rounded to a power of two.
    pub cols: u64,
}

impl Bucket {
    /// The bucket of an `R x C` matrix (a size past 2^63 in the top bucket, 2^63).
    pub fn of(rows: usize, cols: usize) -> Self {
        let anchor =
            |n: usize| -> u64 { 1u64 << ((n.max(1) as f64).log2().round() as u32).min(63) };
        Bucket {
            rows: anchor(rows),
            cols: anchor(cols),
        }
    }
    /// Distance in powers of two.
    pub fn log_distance(&self, other: &Bucket) -> u32 {
        (self.rows.trailing_zeros() as i32 - other.rows.trailing_zeros() as i32).unsigned_abs()
            + (self.cols.trailing_zeros() as i32 - other.cols.trailing_zeros() as i32)
                .unsigned_abs()
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

impl std::str::FromStr for Bucket {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid("bucket", s, "expected ROWSxCOLS with powers of two");
        let (r, c) = s.split_once('x').ok_or_else(bad)?;
        let (r, c): (u64, u64) = (r.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?);
        if !r.is_power_of_two() || !c.is_power_of_two() {
            return Err(bad());
        }
        Ok(Bucket { rows: r, cols: c })
    }
}

/// What a tuned choice is keyed by: the family (its listing label), the family's own
/// key fields (dtype, M, coding, ... as the family words them), the tier and an
/// anchored size bucket.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TuneKey {
    /// The family's listing label (`reduce`, `gate_up_mixed`, ...).
    pub family: String,
    /// The family's own key fields (`bf16 M=1 k3 L12 1mad`).
    pub fields: String,
    /// The numerics tier.
    pub tier: Tier,
    /// The anchored size bucket.
    pub bucket: Bucket,
}

impl TuneKey {
    /// Whether two keys differ only in the bucket.
    pub(crate) fn same_but_bucket(&self, o: &TuneKey) -> bool {
        (&self.family, &self.fields, self.tier) == (&o.family, &o.fields, o.tier)
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            self.family, self.fields, self.tier, self.bucket
        )
    }
}
