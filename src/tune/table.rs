//! The tuning table file: `tuning/<device-id>.toml`, human-readable and diff-friendly.
//! Unknown fields are errors (a typo must not silently change a choice). Each entry
//! records the hash of what its family compiles on the table's dialect for its codes
//! ([`super::source_hash_of`]), so editing one family's template stales only its entries,
//! and of those only the codes whose kernels changed, and the hash of its problem's
//! candidates with their units at that problem ([`super::space_hash`]), so widening the
//! space at some shapes, or a template branch only they take, stales only theirs.

use super::{Bucket, TuneKey};
use crate::error::{Error, Result};
use crate::kernel::Dialect;
use serde::{Deserialize, Serialize};

/// Who measured, where, with what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRecord {
    /// Stable device id (`nvidia-h200`).
    pub id: String,
    /// Backend name (`cuda`, `metal`, `cpu`).
    pub backend: String,
    /// Dialect the backend compiles (`cuda`, `metal`, `cpu`): what entries' hashes cover.
    pub dialect: String,
    /// Human-readable device description.
    pub description: String,
    /// `trellis` version that measured.
    pub tool_version: String,
    /// How times were taken (`device events`, `wall clock`).
    pub timer: String,
    /// UTC date of the run.
    pub date: String,
}

impl DeviceRecord {
    /// The dialect entries were measured with.
    pub fn dialect(&self) -> Result<Dialect> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == self.dialect)
            .ok_or_else(|| {
                Error::invalid(
                    "device.dialect",
                    &self.dialect,
                    "expected metal, cuda or cpu",
                )
            })
    }
}

/// Timing statistics of one candidate, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsRecord {
    /// Median sample.
    pub median_us: f64,
    /// 10th percentile (interpolated; the nearest rank in older tables).
    pub p10_us: f64,
    /// 90th percentile (interpolated; the nearest rank in older tables).
    pub p90_us: f64,
    /// Timed repetitions.
    pub samples: usize,
}

/// One tuned key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Family label (`reduce`, `gate_up`, `gate_up_mixed`, ...).
    pub family: String,
    /// The family's key fields (dtype, M, coding, ...).
    pub key: String,
    /// Numerics tier name (`exact`, `fast`).
    pub tier: String,
    /// Anchored size bucket, `ROWSxCOLS` in powers of two.
    pub bucket: String,
    /// The shape measured (a representative of the bucket).
    pub shape: String,
    /// Hash of the family's compiled sources for the problem's codes on the table's
    /// dialect when measured ([`super::source_hash_of`]).
    pub source_hash: String,
    /// Hash of the candidates measured and their units ([`super::space_hash`]); absent in tables
    /// written before it was recorded (`cargo xtask tune --stamp` adds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_hash: Option<String>,
    /// The chosen variant, in the family's own fields.
    pub winner: toml::Table,
    /// The winner's statistics, as a call runs it: after the launch its family's calls
    /// make before it, where the tuner counts one ([`crate::family::Family::with_call_prelude`]).
    pub stats: StatsRecord,
    /// The built-in default's statistics, timed as `stats` is (absent when it could not
    /// run).
    pub default: Option<StatsRecord>,
    /// Default median over winner median (absent where the default could not run:
    /// rejected, or over the device's limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Bytes a launch must move, over the median time.
    pub bandwidth_gbs: f64,
    /// The fastest timed candidate other than the winner (absent when none).
    pub runner_up: Option<toml::Table>,
    /// The runner-up's statistics.
    pub runner_up_stats: Option<StatsRecord>,
    /// Where the winner sits at the edge of the candidate space (widen it and re-tune).
    #[serde(default)]
    pub at_bound: Vec<String>,
    /// `variant: reason` for every candidate that failed verification, compilation,
    /// ran past its time limit or crashed.
    #[serde(default)]
    pub rejected: Vec<String>,
}

impl Entry {
    /// The typed key.
    pub fn key(&self) -> Result<TuneKey> {
        Ok(TuneKey {
            family: self.family.clone(),
            fields: self.key.clone(),
            tier: self.tier.parse()?,
            bucket: self.bucket.parse::<Bucket>()?,
        })
    }
    /// The winner as a family's variant type.
    pub fn winner<V: serde::de::DeserializeOwned>(&self) -> Result<V> {
        variant("winner", &self.winner)
    }
    /// The runner-up as a variant, where the entry records one.
    pub fn runner_up<V: serde::de::DeserializeOwned>(&self) -> Result<Option<V>> {
        self.runner_up
            .as_ref()
            .map(|t| variant("runner_up", t))
            .transpose()
    }
}

/// Field `field` of an entry (a variant's table) as a family's variant type.
fn variant<V: serde::de::DeserializeOwned>(field: &str, t: &toml::Table) -> Result<V> {
    toml::Value::Table(t.clone())
        .try_into()
        .map_err(|e| Error::invalid(field, toml_line(t), e.to_string()))
}

fn toml_line(t: &toml::Table) -> String {
    toml::to_string(t).unwrap_or_default().replace('\n', " ")
}

/// A whole table file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// The header: who measured, where.
    pub device: DeviceRecord,
    /// One per tuned key and measured shape (`[[entry]]` in the file).
    #[serde(default, rename = "entry")]
    pub entries: Vec<Entry>,
}

/// The most characters of a table's source line an error quotes.
const MAX_QUOTED: usize = 160;

impl Table {
    /// Parse and validate the header and every entry's key (winners are checked
    /// against their family when the table is added to a [`super::Selector`]).
    pub fn parse(text: &str) -> Result<Self> {
        let mut t: Table = toml::from_str(text).map_err(|e| {
            // One line, and the quoted source clipped: a table of one long line was
            // echoed whole into every warning that names it.
            let clip = |l: &str| match l.char_indices().nth(MAX_QUOTED) {
                Some((i, _)) => format!("{}...", &l[..i]),
                None => l.to_string(),
            };
            let msg: Vec<String> = e.to_string().trim().lines().map(clip).collect();
            Error::invalid("tuning table", "toml", msg.join(" "))
        })?;
        t.device.dialect()?;
        if t.device.id.trim().is_empty() {
            return Err(Error::invalid(
                "device.id",
                &t.device.id,
                "must name the device",
            ));
        }
        let mut seen = std::collections::HashMap::new();
        for (i, e) in t.entries.iter_mut().enumerate() {
            // Tuners before the speedup was optional wrote `nan` where the default did
            // not run.
            if e.default.is_none() && e.speedup.is_some_and(f64::is_nan) {
                e.speedup = None;
            }
            let key = e
                .key()
                .map_err(|err| Error::invalid(format!("entry[{i}]"), "key", err.to_string()))?;
            // Positive, in digits as the tuner writes them: no sign (`parse` takes a
            // leading `+`) and no leading zero, so one shape has one spelling (entries
            // are matched by it).
            let extent = |n: &str| -> Option<usize> {
                n.parse::<usize>()
                    .ok()
                    .filter(|&v| v > 0 && v.to_string() == n)
            };
            let shape = e
                .shape
                .split_once('x')
                .and_then(|(r, c)| Some((extent(r)?, extent(c)?)))
                .ok_or_else(|| {
                    Error::invalid(
                        format!("entry[{i}].shape"),
                        &e.shape,
                        "expected ROWSxCOLS, both positive, in digits without leading zeros",
                    )
                })?;
            // The bucket is the shape's: another would serve the shape's choice to keys
            // it was not measured near.
            let of_shape = Bucket::of(shape.0, shape.1);
            if key.bucket != of_shape {
                return Err(Error::invalid(
                    format!("entry[{i}].bucket"),
                    &e.bucket,
                    format!("shape {} is in bucket {of_shape}", e.shape),
                ));
            }
            let stats = [
                ("stats", Some(&e.stats)),
                ("default", e.default.as_ref()),
                ("runner_up_stats", e.runner_up_stats.as_ref()),
            ];
            for (field, s) in stats {
                if let Some(s) = s {
                    check_stats(&format!("entry[{i}].{field}"), s)?;
                }
            }
            let numbers = [
                ("speedup", e.speedup),
                ("bandwidth_gbs", Some(e.bandwidth_gbs)),
            ];
            for (field, v) in numbers {
                let Some(v) = v else { continue };
                if !(v.is_finite() && v >= 0.0) {
                    return Err(Error::invalid(
                        format!("entry[{i}].{field}"),
                        v,
                        "must be finite and not negative",
                    ));
                }
            }
            // Two entries for one key and shape: which one a selection took would be
            // an accident of order (the tuner writes one).
            if let Some(j) = seen.insert((key, e.shape.clone()), i) {
                return Err(Error::invalid(
                    format!("entry[{i}]"),
                    format!("{} at {}", e.key, e.shape),
                    format!("repeats entry[{j}]'s key, bucket and shape"),
                ));
            }
        }
        Ok(t)
    }

    /// Serialize.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("tables serialize")
    }
}

/// Measured times are finite and positive, and at least one repetition was timed: a
/// median of NaN or below zero would win (or lose) every comparison it entered.
fn check_stats(field: &str, s: &StatsRecord) -> Result<()> {
    for (name, v) in [
        ("median_us", s.median_us),
        ("p10_us", s.p10_us),
        ("p90_us", s.p90_us),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(Error::invalid(
                format!("{field}.{name}"),
                format!("{v:?}"),
                "a time must be finite and positive",
            ));
        }
    }
    // The tuner's quantiles are ordered; a table whose are not was edited by hand.
    if !(s.p10_us <= s.median_us && s.median_us <= s.p90_us) {
        return Err(Error::invalid(
            format!("{field}.median_us"),
            format!("{:?}", s.median_us),
            format!(
                "must lie between p10_us = {:?} and p90_us = {:?}",
                s.p10_us, s.p90_us
            ),
        ));
    }
    if s.samples == 0 {
        return Err(Error::invalid(
            format!("{field}.samples"),
            0,
            "at least one timed repetition",
        ));
    }
    Ok(())
}
