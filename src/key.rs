//! What a tuned choice is keyed by ([`TuneKey`]) and its anchored size [`Bucket`]: part of
//! the family contract (a family names its problems' keys), read by the tables and the
//! selector in [`crate::tune`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::families::simt::Proj;
use crate::numerics::{Tail, Tier};
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

/// The key fields of this crate's families, typed: the one place their spelling lives
/// (`bf16 M=1 k3 L12 1mad`, `bf16 M=4 gate=k3 L12 1mad up=k4 L12 1mad tail=exact`).
/// A family writes its key through [`fmt::Display`] and checks a table's through
/// [`KeyFields::check`], so a hand-edited or garbled key is an error naming it, not an
/// entry that silently never matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFields {
    /// Activation dtype.
    pub act: DType,
    /// Samples M (absent for a family without samples).
    pub m: Option<u32>,
    /// Each projection's coding, with its label (`gate`, `up`) where a family has several.
    pub projs: Vec<(Option<&'static str>, Proj)>,
    /// The SwiGLU tail, where the family keys on it.
    pub tail: Option<Tail>,
}

/// The words a family's key holds: whether it has an M, its projections' labels, and
/// whether it has a tail.
#[derive(Clone, Copy, Debug)]
pub struct KeyForm {
    /// `M=` present.
    pub m: bool,
    /// One entry a projection: its label, or `None` for a lone unlabelled one.
    pub labels: &'static [Option<&'static str>],
    /// `tail=` present.
    pub tail: bool,
}

impl KeyForm {
    /// One matrix and M (`reduce`, `reduce_mma`).
    pub const MATVEC: KeyForm = KeyForm {
        m: true,
        labels: &[None],
        tail: false,
    };
    /// Gate and up with M and the SwiGLU tail (`gate_up_mma`; `gate_up` has no tail).
    pub const GATE_UP: KeyForm = KeyForm {
        m: true,
        labels: &[Some("gate"), Some("up")],
        tail: true,
    };
}

/// Labels a projection may carry.
const LABELS: [&str; 2] = ["gate", "up"];

impl fmt::Display for KeyFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.act)?;
        if let Some(m) = self.m {
            write!(f, " M={m}")?;
        }
        for (label, p) in &self.projs {
            match label {
                Some(label) => write!(f, " {label}={p}")?,
                None => write!(f, " {p}")?,
            }
        }
        if let Some(tail) = self.tail {
            write!(f, " tail={tail}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for KeyFields {
    type Err = Error;
    /// Parse the words [`fmt::Display`] writes, each value in its SPEC range.
    fn from_str(s: &str) -> Result<Self> {
        let mut words = s.split(' ').peekable();
        let act: DType = words.next().unwrap_or_default().parse()?;
        let number = |field: &str, w: &str, min: u32, max: u32| -> Result<u32> {
            w.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n) && n.to_string() == w)
                .ok_or_else(|| Error::invalid(field, w, format!("expected {min}..={max}")))
        };
        let m = match words.peek().and_then(|w| w.strip_prefix("M=")) {
            Some(w) => {
                words.next();
                Some(number("M", w, 1, u32::MAX)?)
            }
            None => None,
        };
        let mut projs = Vec::new();
        let mut tail = None;
        while let Some(w) = words.next() {
            if let Some(t) = w.strip_prefix("tail=") {
                tail = Some(t.parse()?);
                break;
            }
            let (label, k) = match w.split_once('=') {
                Some((label, k)) => match LABELS.iter().find(|l| **l == label) {
                    Some(l) => (Some(*l), k),
                    None => {
                        return Err(Error::invalid(
                            "label",
                            label,
                            format!("expected one of {}", LABELS.join(", ")),
                        ))
                    }
                },
                None => (None, w),
            };
            let k = k
                .strip_prefix('k')
                .ok_or_else(|| Error::invalid("k", k, "expected k<bits>"))?;
            let k = number("k", k, 1, 8)?;
            let l = words.next().unwrap_or_default();
            let l = l
                .strip_prefix('L')
                .ok_or_else(|| Error::invalid("L", l, "expected L<state bits>"))?;
            let l = number("L", l, k + 1, 16)?;
            let code = words.next().unwrap_or_default().parse()?;
            projs.push((label, Proj { k, l, code }));
        }
        if let Some(w) = words.next() {
            return Err(Error::invalid("key", w, "nothing may follow the tail"));
        }
        Ok(KeyFields {
            act,
            m,
            projs,
            tail,
        })
    }
}

impl KeyFields {
    /// Parse `fields` and check it has `form`'s words: what a family asks of a table's
    /// key ([`crate::family::Family::check_key_fields`]).
    pub fn check(fields: &str, form: KeyForm) -> Result<()> {
        let k: KeyFields = fields.parse()?;
        let labels: Vec<_> = k.projs.iter().map(|p| p.0).collect();
        let want = |what: &str, expected: String| {
            Err(Error::invalid(
                what,
                fields,
                format!("this family's key has {expected}"),
            ))
        };
        if k.m.is_some() != form.m {
            return want("M", format!("{} M=", if form.m { "an" } else { "no" }));
        }
        if labels != form.labels {
            let names: Vec<_> = form.labels.iter().map(|l| l.unwrap_or("one")).collect();
            return want("projections", format!("the codings {}", names.join(", ")));
        }
        if k.tail.is_some() != form.tail {
            return want(
                "tail",
                format!("{} tail=", if form.tail { "a" } else { "no" }),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::{Family, FamilyVisitor};

    /// Every catalog problem's key, of every family, reads back as itself and passes its
    /// family's check: a key the families write is never one a table is refused for.
    #[test]
    fn every_familys_keys_read_back() {
        struct RoundTrip(usize);
        impl FamilyVisitor for RoundTrip {
            fn visit<F: Family>(&mut self) {
                for p in F::catalog(false) {
                    let fields = F::key_fields(&p);
                    F::check_key_fields(&fields).unwrap_or_else(|e| panic!("{fields}: {e}"));
                    let k: KeyFields = fields.parse().unwrap();
                    assert_eq!(k.to_string(), fields);
                    self.0 += 1;
                }
            }
        }
        let mut r = RoundTrip(0);
        crate::families::for_each(&mut r);
        assert!(r.0 >= 50, "{} problems", r.0);
    }

    #[test]
    fn malformed_words_name_their_field() {
        for (fields, field) in [
            ("", "dtype"),
            ("bf17 M=1 k2 L12 1mad", "dtype"),
            ("bf16 M=0 k2 L12 1mad", "M"),
            ("bf16 M=1 k9 L12 1mad", "k"),
            ("bf16 M=1 j2 L12 1mad", "k"),
            ("bf16 M=1 k4 L4 1mad", "L"),
            ("bf16 M=1 k4 L17 1mad", "L"),
            ("bf16 M=1 k4 12 1mad", "L"),
            ("bf16 M=1 k4 L12", "code"),
            ("bf16 M=1 k4 L12 2mad", "code"),
            ("bf16 M=1 down=k4 L12 1mad", "label"),
            ("bf16 M=1 k4 L12 1mad tail=slow", "tail"),
            ("bf16 M=1 k4 L12 1mad tail=exact x", "key"),
        ] {
            match fields.parse::<KeyFields>() {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{fields}"),
                other => panic!("{fields}: {other:?}"),
            }
        }
        // Well-formed words of another family's form.
        let e = KeyFields::check("bf16 k4 L12 1mad", KeyForm::MATVEC).unwrap_err();
        assert!(e.to_string().contains("an M="), "{e}");
        let e = KeyFields::check("bf16 M=2 k4 L12 1mad", KeyForm::GATE_UP).unwrap_err();
        assert!(e.to_string().contains("gate, up"), "{e}");
    }
}
