//! Priors: variant choices known before anything is measured on a device, with where
//! they come from. `tuning/priors/apple-gpu.toml` holds the seed's per-architecture
//! choices for Apple GPUs (`qualifiedRepresentations`); the [`super::Selector`] uses a
//! matching rule for a key its device's own measured tables have no current entry for.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::family::ProblemSpec;
use serde::Deserialize;
use std::sync::OnceLock;

/// The prior files embedded at build time.
pub const EMBEDDED: &[(&str, &str)] = &[(
    "tuning/priors/apple-gpu.toml",
    include_str!("../../tuning/priors/apple-gpu.toml"),
)];

/// One prior file: rules for one backend's devices.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Priors {
    /// The backend whose devices the rules are for (`metal`).
    pub backend: String,
    /// The rules, first match wins.
    #[serde(rename = "rule", default)]
    pub rules: Vec<Rule>,
}

/// A rule: which problems on which devices (every named field must match), and the
/// variant fields it sets over the family's built-in default.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The rule's name (the seed's name for the choice).
    pub name: String,
    /// Why the seed made this choice, as `trellis select` reports it.
    pub why: String,
    /// Device ids it applies to (empty: every device).
    #[serde(default)]
    pub devices: Vec<String>,
    /// The lowest Apple GPU generation it applies to (`applegpu_g15d`: 15).
    pub min_generation: Option<u32>,
    /// Family label (`reduce`, `gate_up`).
    pub family: Option<String>,
    /// Only fused gate/up pairs whose two k differ (`true`) or agree (`false`).
    pub mixed: Option<bool>,
    /// Only this activation dtype.
    pub dtype: Option<String>,
    /// Only M at least this.
    pub m_min: Option<u32>,
    /// Only M at most this.
    pub m_max: Option<u32>,
    /// Only these k (empty: any).
    #[serde(default)]
    pub k: Vec<u32>,
    /// Only L at most this.
    pub l_max: Option<u32>,
    /// Variant fields set over the default (`repr`, `m_strategy`, `rows_per_group`,
    /// `x_stage`, ...: whatever the family's variant has).
    #[serde(default)]
    pub set: toml::Table,
}

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
    fn matches(&self, device: &str, families: &[&str], p: &ProblemSpec) -> bool {
        let dev = norm(device);
        let mixed = p.ku.is_some_and(|ku| ku != p.k);
        (self.devices.is_empty() || self.devices.iter().any(|d| norm(d) == dev))
            && self
                .min_generation
                .is_none_or(|g| apple_generation(device).is_some_and(|d| d >= g))
            && self.family.as_deref().is_none_or(|f| families.contains(&f))
            && self.mixed.is_none_or(|m| p.ku.is_some() && mixed == m)
            && self
                .dtype
                .as_deref()
                .is_none_or(|d| d.parse::<DType>().is_ok_and(|d| d == p.dtype))
            && self.m_min.is_none_or(|m| p.m >= m)
            && self.m_max.is_none_or(|m| p.m <= m)
            && (self.k.is_empty() || self.k.contains(&p.k))
            && self.l_max.is_none_or(|l| p.l <= l)
    }

    /// `default` (a variant as a table) with this rule's fields set.
    pub fn apply(&self, mut default: toml::Table) -> toml::Table {
        for (k, v) in &self.set {
            default.insert(k.clone(), v.clone());
        }
        default
    }
}

impl Priors {
    /// Parse a prior file (rules are checked against a family when they apply).
    pub fn parse(text: &str) -> Result<Self> {
        let p: Priors = toml::from_str(text)
            .map_err(|e| Error::invalid("prior file", "toml", e.to_string()))?;
        for r in &p.rules {
            if let Some(d) = &r.dtype {
                d.parse::<DType>()?;
            }
        }
        Ok(p)
    }
}

/// The embedded priors that parse (each does: `the_embedded_priors_parse` checks it in
/// CI, so a file left out here cannot ship).
pub fn embedded() -> &'static [(&'static str, Priors)] {
    static P: OnceLock<Vec<(&'static str, Priors)>> = OnceLock::new();
    P.get_or_init(|| {
        EMBEDDED
            .iter()
            .filter_map(|(name, text)| Priors::parse(text).ok().map(|p| (*name, p)))
            .collect()
    })
}

/// The first rule for `backend` that matches a problem on `device` of any of `families`
/// (the problem's family and its label: `gate_up` and `gate_up_mixed` for a mixed pair).
pub fn lookup(
    backend: &str,
    device: &str,
    families: &[&str],
    p: &ProblemSpec,
) -> Option<(&'static str, &'static Rule)> {
    embedded()
        .iter()
        .filter(|(_, pr)| pr.backend == backend)
        .flat_map(|(name, pr)| pr.rules.iter().map(move |r| (*name, r)))
        .find(|(_, r)| r.matches(device, families, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::gate_up::GateUpFamily;
    use crate::families::reduce::ReduceFamily;
    use crate::families::simt::{MStrategy, Representation, Variant};
    use crate::numerics::Tier;
    use crate::tune::{Selector, Source};
    use crate::Code;

    /// Every prior file in `tuning/priors/` is embedded (the list above is by hand: a new
    /// file left out of it would be silently ignored).
    #[test]
    fn every_prior_file_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/priors");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .map(|n| format!("tuning/priors/{n}"))
            .collect();
        files.sort();
        let mut embedded: Vec<String> = EMBEDDED.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert!(!files.is_empty());
        assert_eq!(files, embedded);
    }

    fn spec(k: u32, ku: Option<u32>, m: u32) -> ProblemSpec {
        ProblemSpec {
            rows: 17408,
            cols: 5120,
            t: 256,
            k,
            ku,
            l: 12,
            code: Code::OneMad,
            dtype: DType::Bf16,
            m,
        }
    }

    fn pick<F: crate::family::Family<Variant = Variant>>(
        device: &str,
        s: &ProblemSpec,
    ) -> (String, Variant) {
        let p = F::problem(s).unwrap();
        let sel = Selector::empty().select::<F>("metal", device, &p, Tier::Exact);
        let rule = match &sel.source {
            Source::Prior { rule, .. } => rule.clone(),
            _ => String::new(),
        };
        (rule, sel.variant)
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
        let (r, v) = pick::<GateUpFamily>("applegpu_g13s", &spec(3, Some(3), 1));
        assert_eq!(
            (r.as_str(), v.repr),
            ("gateUpCodebook", Representation::SharedTable)
        );
        let (r, v) = pick::<GateUpFamily>("applegpu-g13s", &spec(2, Some(4), 1));
        assert_eq!(
            (r.as_str(), v.repr),
            ("mixedExactBits", Representation::Inline)
        );
        let (r, _) = pick::<ReduceFamily>("applegpu_g13s", &spec(3, None, 1));
        assert_eq!(r, "scatter.bits+genericBits");
        let (r, v) = pick::<ReduceFamily>("applegpu_g13s", &spec(5, None, 1));
        assert_eq!(
            (r.as_str(), v.repr),
            ("scatter.floatCodebook", Representation::SharedTable)
        );
        // Only g13s has the single-row choices; wide prefill from generation 15.
        assert_eq!(
            pick::<GateUpFamily>("applegpu_g14s", &spec(3, Some(3), 1)).0,
            ""
        );
        let (r, v) = pick::<ReduceFamily>("applegpu_g15d", &spec(3, None, 6));
        assert_eq!(
            (r.as_str(), v.m_strategy),
            ("widePrefill", MStrategy::SharedDecode)
        );
        assert_eq!(
            pick::<ReduceFamily>("applegpu_g14d", &spec(3, None, 6)).0,
            ""
        );
        assert!(lookup("cuda", "applegpu_g13s", &["gate_up"], &spec(3, Some(3), 1)).is_none());
        assert_eq!(apple_generation("applegpu_g16p"), Some(16));
        assert_eq!(apple_generation("nvidia-h200"), None);
    }
}
