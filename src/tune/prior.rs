//! Priors: variant choices known before anything is measured on a device, with where
//! they come from. `tuning/priors/apple-gpu.toml` holds the seed's per-architecture
//! choices for Apple GPUs (`qualifiedRepresentations`); the [`super::Selector`] uses a
//! matching rule for a device that has no measured table of its own.

use super::{Family, TuneKey};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{MStrategy, Representation, Variant, XStage};
use serde::Deserialize;
use std::sync::OnceLock;

/// The embedded prior files: (name, text).
pub const EMBEDDED: &[(&str, &str)] = &[(
    "tuning/priors/apple-gpu.toml",
    include_str!("../../tuning/priors/apple-gpu.toml"),
)];

/// One prior file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Priors {
    /// The backend whose devices the rules are for.
    pub backend: String,
    #[serde(rename = "rule", default)]
    pub rules: Vec<Rule>,
}

/// A rule: conditions on the device and key, and the variant fields it sets.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub why: String,
    #[serde(default)]
    pub devices: Vec<String>,
    pub min_generation: Option<u32>,
    pub family: Option<Family>,
    pub mixed: Option<bool>,
    pub dtype: Option<String>,
    pub m_min: Option<u32>,
    pub m_max: Option<u32>,
    #[serde(default)]
    pub k: Vec<u32>,
    pub l_max: Option<u32>,
    pub repr: Option<String>,
    pub m_strategy: Option<String>,
    pub rows_per_group: Option<u32>,
    pub x_stage: Option<String>,
}

/// `_` and `-` alike, lower case.
fn norm(id: &str) -> String {
    id.trim().to_ascii_lowercase().replace('-', "_")
}

/// The GPU generation of an Apple architecture id (`applegpu_g13s` -> 13), as the seed
/// reads it (`applegpu_[a-z](\d{2})`).
pub fn apple_generation(device: &str) -> Option<u32> {
    let rest = norm(device).strip_prefix("applegpu_")?.to_string();
    let mut chars = rest.chars();
    chars.next().filter(|c| c.is_ascii_lowercase())?;
    let digits: String = chars.take(2).collect();
    (digits.len() == 2 && digits.chars().all(|c| c.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl Rule {
    fn matches(&self, device: &str, key: &TuneKey) -> bool {
        let dev = norm(device);
        (self.devices.is_empty() || self.devices.iter().any(|d| norm(d) == dev))
            && self
                .min_generation
                .is_none_or(|g| apple_generation(device).is_some_and(|d| d >= g))
            && self.family.is_none_or(|f| f == key.family)
            && self
                .mixed
                .is_none_or(|m| key.family == Family::GateUp && (key.k != key.ku) == m)
            && self
                .dtype
                .as_deref()
                .is_none_or(|d| d.parse::<DType>().is_ok_and(|d| d == key.dtype))
            && self.m_min.is_none_or(|m| key.m >= m)
            && self.m_max.is_none_or(|m| key.m <= m)
            && (self.k.is_empty() || self.k.contains(&key.k))
            && self.l_max.is_none_or(|l| key.l <= l)
    }

    /// The variant this rule chooses for a key (the default's fields where it names none).
    pub fn variant(&self, key: &TuneKey) -> Result<Variant> {
        let d = super::default_variant(key);
        Ok(Variant {
            repr: self
                .repr
                .as_deref()
                .map_or(Ok(d.repr), str::parse::<Representation>)?,
            m_strategy: self
                .m_strategy
                .as_deref()
                .map_or(Ok(d.m_strategy), str::parse::<MStrategy>)?,
            rows_per_group: self.rows_per_group.unwrap_or(d.rows_per_group),
            x_stage: self
                .x_stage
                .as_deref()
                .map_or(Ok(d.x_stage), str::parse::<XStage>)?,
            tier: key.tier,
        })
    }
}

impl Priors {
    /// Parse a prior file; every rule's variant fields must name real values.
    pub fn parse(text: &str) -> Result<Self> {
        let p: Priors = toml::from_str(text)
            .map_err(|e| Error::invalid("prior file", "toml", e.to_string()))?;
        for r in &p.rules {
            if let Some(d) = &r.dtype {
                d.parse::<DType>()?;
            }
            r.variant(&TuneKey::new(
                Family::Reduce,
                &crate::Geometry::new(32, 256, 256, 2, 12, crate::Code::OneMad)?,
                None,
                DType::Bf16,
                1,
                crate::kernels::Tier::Exact,
            ))?;
        }
        Ok(p)
    }
}

/// The embedded priors, parsed once (a bad file is a build-time mistake; the unit test
/// below parses it).
pub fn embedded() -> &'static [(&'static str, Priors)] {
    static P: OnceLock<Vec<(&'static str, Priors)>> = OnceLock::new();
    P.get_or_init(|| {
        EMBEDDED
            .iter()
            .filter_map(|(name, text)| Priors::parse(text).ok().map(|p| (*name, p)))
            .collect()
    })
}

/// The first prior rule for `key` on `device` of `backend`: (file, rule, variant).
pub fn lookup(
    backend: &str,
    device: &str,
    key: &TuneKey,
) -> Option<(&'static str, &'static Rule, Variant)> {
    embedded()
        .iter()
        .filter(|(_, p)| p.backend == backend)
        .flat_map(|(name, p)| p.rules.iter().map(move |r| (*name, r)))
        .find(|(_, r)| r.matches(device, key))
        .and_then(|(name, r)| r.variant(key).ok().map(|v| (name, r, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Tier;
    use crate::{Code, Geometry};

    fn key(family: Family, k: u32, ku: u32, m: u32) -> TuneKey {
        let g = Geometry::new(17408, 5120, 256, k, 12, Code::OneMad).unwrap();
        let u = Geometry::new(17408, 5120, 256, ku, 12, Code::OneMad).unwrap();
        let up = (family == Family::GateUp).then_some(&u);
        TuneKey::new(family, &g, up, DType::Bf16, m, Tier::Exact)
    }

    #[test]
    fn the_embedded_priors_parse() {
        for (name, text) in EMBEDDED {
            let p = Priors::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!p.rules.is_empty(), "{name}");
        }
        assert_eq!(embedded().len(), EMBEDDED.len());
    }

    #[test]
    fn seed_choices_map_onto_variants() {
        let (_, r, v) = lookup("metal", "applegpu_g13s", &key(Family::GateUp, 3, 3, 1)).unwrap();
        assert_eq!(
            (r.name.as_str(), v.repr),
            ("gateUpCodebook", Representation::SharedTable)
        );
        let (_, r, v) = lookup("metal", "applegpu-g13s", &key(Family::GateUp, 2, 4, 1)).unwrap();
        assert_eq!(
            (r.name.as_str(), v.repr),
            ("mixedExactBits", Representation::Inline)
        );
        let (_, r, _) = lookup("metal", "applegpu_g13s", &key(Family::Reduce, 3, 3, 1)).unwrap();
        assert_eq!(r.name, "scatter.bits+genericBits");
        let (_, r, v) = lookup("metal", "applegpu_g13s", &key(Family::Reduce, 5, 5, 1)).unwrap();
        assert_eq!(
            (r.name.as_str(), v.repr),
            ("scatter.floatCodebook", Representation::SharedTable)
        );
        // Only g13s has the single-row choices; wide prefill from generation 15.
        assert!(lookup("metal", "applegpu_g14s", &key(Family::GateUp, 3, 3, 1)).is_none());
        let (_, r, v) = lookup("metal", "applegpu_g15d", &key(Family::Reduce, 3, 3, 6)).unwrap();
        assert_eq!(
            (r.name.as_str(), v.m_strategy),
            ("widePrefill", MStrategy::SharedDecode)
        );
        assert!(lookup("metal", "applegpu_g14d", &key(Family::Reduce, 3, 3, 6)).is_none());
        assert!(lookup("cuda", "applegpu_g13s", &key(Family::GateUp, 3, 3, 1)).is_none());
        assert_eq!(apple_generation("applegpu_g16p"), Some(16));
        assert_eq!(apple_generation("nvidia-h200"), None);
    }
}
