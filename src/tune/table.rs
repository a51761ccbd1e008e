//! The tuning table file: `tuning/<device-id>.toml`, human-readable and diff-friendly.
//! Unknown fields are errors (a typo must not silently change a choice).

use super::{Bucket, Family, TuneKey};
use crate::error::{Error, Result};
use crate::kernels::{MStrategy, Representation, Tier, Variant, XStage};
use serde::{Deserialize, Serialize};

/// Who measured, where, with what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRecord {
    /// Stable device id (`nvidia-h200`).
    pub id: String,
    /// Backend name (`cuda`, `metal`, `cpu`).
    pub backend: String,
    /// Human-readable device description.
    pub description: String,
    /// `trellis` version that measured.
    pub tool_version: String,
    /// [`super::template_hash`] of the templates measured.
    pub template_hash: String,
    /// UTC date of the run.
    pub date: String,
}

/// A variant as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantRecord {
    pub repr: String,
    pub m_strategy: String,
    pub rows_per_group: u32,
    pub x_stage: String,
    /// Absent in tables written before rows per simdgroup existed: 1.
    #[serde(default = "one")]
    pub rows_per_simd: u32,
}

fn one() -> u32 {
    1
}

impl VariantRecord {
    /// Store a variant.
    pub fn of(v: &Variant) -> Self {
        VariantRecord {
            repr: v.repr.name().into(),
            m_strategy: v.m_strategy.name().into(),
            rows_per_group: v.rows_per_group,
            x_stage: v.x_stage.name().into(),
            rows_per_simd: v.rows_per_simd,
        }
    }
    /// Parse back (validated when the table is parsed).
    pub fn try_variant(&self, tier: Tier) -> Result<Variant> {
        Ok(Variant {
            repr: self.repr.parse::<Representation>()?,
            m_strategy: self.m_strategy.parse::<MStrategy>()?,
            rows_per_group: self.rows_per_group,
            x_stage: self.x_stage.parse::<XStage>()?,
            tier,
            rows_per_simd: self.rows_per_simd,
        })
    }
    /// Parse back; the table parser has already rejected bad names.
    pub fn to_variant(&self, tier: Tier) -> Variant {
        self.try_variant(tier).unwrap_or(Variant {
            tier,
            ..Variant::default()
        })
    }
}

/// One tuned key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub family: String,
    pub dtype: String,
    pub m: u32,
    pub k: u32,
    pub ku: u32,
    pub l: u32,
    pub code: String,
    pub tier: String,
    pub bucket: String,
    /// The shape measured (a representative of the bucket).
    pub shape: String,
    pub winner: VariantRecord,
    pub median_us: f64,
    pub default_us: f64,
    pub speedup: f64,
    /// Bytes of codes + scales + x + y moved per call over the median time.
    pub bandwidth_gbs: f64,
    /// Relative spread (p90 - p10) / median of the winner's samples.
    pub noise: f64,
    pub runner_up: Option<VariantRecord>,
    pub runner_up_us: Option<f64>,
    /// `variant: reason` for every candidate that failed verification or compilation.
    #[serde(default)]
    pub rejected: Vec<String>,
}

impl Entry {
    /// The typed key.
    pub fn key(&self) -> Result<TuneKey> {
        Ok(TuneKey {
            family: self.family.parse::<Family>()?,
            dtype: self.dtype.parse()?,
            m: self.m,
            k: self.k,
            ku: self.ku,
            l: self.l,
            code: self.code.parse()?,
            tier: self.tier.parse()?,
            bucket: self.bucket.parse::<Bucket>()?,
        })
    }
}

/// A whole table file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub device: DeviceRecord,
    #[serde(default, rename = "entry")]
    pub entries: Vec<Entry>,
}

impl Table {
    /// Parse and validate every entry's key and winner.
    pub fn parse(text: &str) -> Result<Self> {
        let t: Table = toml::from_str(text).map_err(|e| {
            Error::invalid(
                "tuning table",
                "toml",
                e.to_string().trim().replace('\n', " "),
            )
        })?;
        for (i, e) in t.entries.iter().enumerate() {
            let key = e
                .key()
                .map_err(|err| Error::invalid(format!("entry[{i}]"), "key", err.to_string()))?;
            e.winner.try_variant(key.tier).map_err(|err| {
                Error::invalid(format!("entry[{i}].winner"), "variant", err.to_string())
            })?;
        }
        Ok(t)
    }

    /// Serialize.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("tables serialize")
    }
}
