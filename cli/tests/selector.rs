//! The tuning-table selector, through the library API and through `trellis select`:
//! exact key, nearest bucket, nearest device family, unknown device, and every kind of
//! bad table (stale templates, unknown field, TOML syntax, unknown representation), which
//! must become a warning and a default choice, never a panic or a failure; and the
//! layering of a device's tables against a model of its rule.

use std::path::Path;
use std::process::{Command, Output};
use trellis::families::reduce::{ReduceFamily, ReduceProblem};
use trellis::families::simt::{MStrategy, Representation, Variant};
use trellis::family::Family;
use trellis::kernel::Dialect;
use trellis::numerics::Tier;
use trellis::tune::table::DeviceRecord;
use trellis::tune::{
    Bucket, Entry, Selector, Source, StatsRecord, Table, TuneKey, LOCAL_TABLES_ENV, TUNING_DIR_ENV,
};
use trellis::{Code, DType, Geometry, ScaleDType};

const BIN: &str = env!("CARGO_BIN_EXE_trellis");

/// The tuned winner of the test tables (not the built-in default).
fn winner() -> Variant {
    Variant {
        repr: Representation::SharedTable,
        m_strategy: MStrategy::PerSample,
        rows_per_group: 8,
        x_stage: trellis::families::simt::XStage::SharedF32,
        tier: Tier::Exact,
        rows_per_simd: 1,
        max_registers: 0,
        scalar_words: false,
        prefetch_words: false,
        stream_words: false,
        interleaved_x: false,
    }
}

fn dialect_of(backend: &str) -> Dialect {
    match backend {
        "cuda" => Dialect::Cuda,
        "metal" => Dialect::Metal,
        _ => Dialect::Cpu,
    }
}

fn device(id: &str, backend: &str) -> DeviceRecord {
    DeviceRecord {
        id: id.into(),
        backend: backend.into(),
        dialect: dialect_of(backend).name().into(),
        description: format!("test table for {id}"),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        timer: "wall clock".into(),
        date: "2025-01-01".into(),
    }
}

fn record(v: &Variant) -> toml::Table {
    toml::Table::try_from(v).unwrap()
}

fn stats(us: f64) -> StatsRecord {
    StatsRecord {
        median_us: us,
        p10_us: us * 0.98,
        p90_us: us * 1.02,
        samples: 30,
    }
}

/// The reduce problem of the test keys: bf16, M=1, k=2, L=12, 1mad.
fn problem(rows: usize, cols: usize) -> ReduceProblem {
    ReduceProblem {
        geometry: Geometry::new(rows, cols, 256, 2, 12, Code::OneMad).unwrap(),
        scale: ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    }
}

/// The test problem at k 3, a key no test table holds at any M.
fn problem_k3(rows: usize, cols: usize) -> ReduceProblem {
    ReduceProblem {
        geometry: Geometry::new(rows, cols, 256, 3, 12, Code::OneMad).unwrap(),
        ..problem(rows, cols)
    }
}

/// A reduce entry for the test problem, bucket `rows x cols`, current for CUDA.
fn entry(rows: u64, cols: u64, v: &Variant) -> Entry {
    Entry {
        family: "reduce".into(),
        key: ReduceFamily::key_fields(&problem(4096, 4096)),
        tier: "exact".into(),
        bucket: format!("{rows}x{cols}"),
        shape: format!("{rows}x{cols}"),
        source_hash: trellis::tune::source_hash_of::<ReduceFamily>(
            Dialect::Cuda,
            &problem(4096, 4096),
        ),
        space_hash: None,
        winner: record(v),
        stats: stats(10.0),
        default: Some(stats(12.0)),
        speedup: Some(1.2),
        bandwidth_gbs: 1000.0,
        runner_up: Some(record(&Variant::default())),
        runner_up_stats: Some(stats(12.0)),
        at_bound: Vec::new(),
        rejected: Vec::new(),
    }
}

/// A current CUDA entry of the test problem at `m` samples, bucket 4096x4096, whose
/// winner has `rows_per_group` (which tells the entries apart).
fn entry_at_m(m: u32, rows_per_group: u32) -> Entry {
    let p = ReduceProblem {
        m,
        ..problem(4096, 4096)
    };
    let mut e = entry(
        4096,
        4096,
        &Variant {
            rows_per_group,
            ..winner()
        },
    );
    e.key = ReduceFamily::key_fields(&p);
    e.source_hash = trellis::tune::source_hash_of::<ReduceFamily>(Dialect::Cuda, &p);
    e
}

/// A current table for `id` with one entry, bucket 4096x4096.
fn table(id: &str, backend: &str) -> Table {
    let mut e = entry(4096, 4096, &winner());
    e.source_hash =
        trellis::tune::source_hash_of::<ReduceFamily>(dialect_of(backend), &problem(4096, 4096));
    Table {
        device: device(id, backend),
        entries: vec![e],
    }
}

fn key(rows: usize, cols: usize) -> TuneKey {
    ReduceFamily::key(&problem(rows, cols), Tier::Exact)
}

/// A fresh directory holding `files` (name, text).
fn dir_with(files: &[(&str, String)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).unwrap();
    }
    d
}

/// A selector over `dir` only (no embedded tables, no environment).
fn selector_of(dir: &Path) -> Selector {
    let mut s = Selector::empty();
    s.add_dir(dir);
    s
}

/// `text` with `line` inserted right after the `[device]` header.
fn with_device_line(text: &str, line: &str) -> String {
    assert!(
        text.contains("[device]\n"),
        "unexpected table layout:\n{text}"
    );
    text.replacen("[device]\n", &format!("[device]\n{line}\n"), 1)
}

// ---------------------------------------------------------------------------------------
// Library API.

#[test]
fn table_round_trips_through_toml() {
    let t = table("nvidia-h200", "cuda");
    let text = t.to_toml();
    assert_eq!(Table::parse(&text).unwrap(), t);
    assert_eq!(t.entries[0].key().unwrap(), key(4096, 4096));
    assert_eq!(Bucket::of(4096, 4096).to_string(), "4096x4096");
}

#[test]
fn exact_key_comes_from_the_table() {
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant, winner());
    match &sel.source {
        Source::Table {
            table,
            key: k,
            shape,
        } => {
            assert!(table.ends_with("nvidia-h200.toml"), "{table}");
            assert_eq!(k, &key(4096, 4096).to_string());
            assert_eq!(shape, "4096x4096");
        }
        other => panic!("expected Source::Table, got {other:?}"),
    }
    assert!(
        sel.source.to_string().starts_with("table "),
        "{}",
        sel.source
    );
}

#[test]
fn nearby_shape_takes_the_nearest_bucket() {
    // 5120 x 3072 is bucket 4096x4096 too (log-space rounding), so use a farther shape.
    assert_eq!(key(5120, 3072).bucket, key(4096, 4096).bucket);
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let s = selector_of(d.path());
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(8192, 2048), Tier::Exact);
    assert_eq!(sel.variant, winner());
    match &sel.source {
        Source::Nearest { key: k, why, .. } => {
            assert!(k.contains("4096x4096"), "{k}");
            assert!(why.contains("nearest bucket"), "{why}");
        }
        other => panic!("expected Source::Nearest, got {other:?}"),
    }
}

#[test]
fn nearest_bucket_prefers_the_closest() {
    let mut t = table("nvidia-h200", "cuda");
    let other = Variant {
        rows_per_group: 2,
        ..winner()
    };
    t.entries.push(entry(1024, 1024, &other));
    let d = dir_with(&[("nvidia-h200.toml", t.to_toml())]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(512, 1024), Tier::Exact)
            .variant,
        other
    );
    assert_eq!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(8192, 8192), Tier::Exact)
            .variant,
        winner()
    );
}

#[test]
fn a_bucket_keeps_each_tuned_shape_and_the_nearest_wins() {
    // 5120 x 4096 shares bucket 4096x4096 with 4096 x 4096; each has its own entry.
    assert_eq!(key(5120, 4096), key(4096, 4096));
    let mut t = table("nvidia-h200", "cuda");
    let other = Variant {
        rows_per_group: 2,
        ..winner()
    };
    let mut e = entry(4096, 4096, &other);
    e.shape = "5120x4096".into();
    t.entries.push(e);
    let d = dir_with(&[("nvidia-h200.toml", t.to_toml())]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let pick = |rows| {
        let sel =
            s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(rows, 4096), Tier::Exact);
        // The source names the shape of the entry taken, so `trellis select` tells which.
        let want = if sel.variant == other {
            "5120x4096"
        } else {
            "4096x4096"
        };
        assert!(
            matches!(&sel.source, Source::Table { shape, .. } if shape == want),
            "{:?}",
            sel.source
        );
        assert!(
            sel.source
                .to_string()
                .ends_with(&format!("measured at {want}")),
            "{}",
            sel.source
        );
        sel.variant
    };
    assert_eq!(pick(4096), winner());
    assert_eq!(pick(5120), other);
    // 4864 is nearer 5120 than 4096 in log space (0.07 against 0.25 octaves).
    assert_eq!(pick(4864), other);
    assert_eq!(pick(4352), winner());
}

#[test]
fn another_key_is_not_a_nearest_bucket() {
    // Same bucket, different k: the table has nothing for it (at any M).
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let s = selector_of(d.path());
    let p = problem_k3(4096, 4096);
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact);
    assert_eq!(sel.variant, Variant::default());
    assert!(
        matches!(sel.source, Source::Default { .. }),
        "{:?}",
        sel.source
    );
}

/// An M no table holds (3, 5, 6, 7 between the tuned 1, 2, 4 and 8) takes the entry of
/// the nearest larger M tuned (else the nearest smaller), not the built-in default.
#[test]
fn a_missing_m_takes_the_nearest_tuned_m() {
    // M 4's entry is stale (its sources changed since): another M stands in, and the
    // reason says this M's entries are stale, not that no table has it.
    let mut stale4 = entry_at_m(4, 4);
    stale4.source_hash = "0000000000000000".into();
    let t = Table {
        entries: vec![entry_at_m(1, 1), entry_at_m(2, 2), entry_at_m(8, 8), stale4],
        ..table("nvidia-h200", "cuda")
    };
    let d = dir_with(&[("nvidia-h200.toml", t.to_toml())]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // 3, 4, 6: the next larger tuned is 8; 2 is its own entry.
    for (m, want) in [(3, 8), (4, 8), (6, 8), (2, 2)] {
        let p = ReduceProblem {
            m,
            ..problem(4096, 4096)
        };
        let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact);
        assert_eq!(sel.variant.rows_per_group, want, "M {m}: {}", sel.source);
        let note = format!("nearest tuned M = {want}");
        match &sel.source {
            Source::Nearest { why, .. } if m == 4 => assert!(
                why.contains(&note)
                    && why.contains("1 entries for [")
                    && why.contains("are stale")
                    && !why.contains("no table has this M"),
                "{why}"
            ),
            Source::Nearest { why, .. } if m != want => assert!(
                why.contains(&format!("{note} (no table has this M)")),
                "{why}"
            ),
            Source::Table { .. } if m == want => {}
            other => panic!("M {m}: {other:?}"),
        }
    }
}

/// A member device's stale entries at the key's M are named too where another M of its
/// stands in (the device's own tables have none at this M, or none at all), also where a
/// nearer member has none at this M.
#[test]
fn a_members_stale_m_is_named() {
    let mut stale4 = entry_at_m(4, 4);
    stale4.source_hash = "0000000000000000".into();
    let h200 = Table {
        entries: vec![entry_at_m(8, 8), stale4],
        ..table("nvidia-h200", "cuda")
    };
    // The H100's own table holds only another k's entry.
    let mut k3 = entry_at_m(1, 1);
    k3.key = ReduceFamily::key_fields(&problem_k3(4096, 4096));
    let h100 = Table {
        entries: vec![k3.clone()],
        ..table("nvidia-h100", "cuda")
    };
    // A nearer member (a longer prefix shared with the H100) with no entry at this M:
    // the farther member's stale ones are still named.
    let pcie = Table {
        entries: vec![k3],
        ..table("nvidia-h100-pcie", "cuda")
    };
    let p = ReduceProblem {
        m: 4,
        ..problem(4096, 4096)
    };
    for files in [
        vec![("nvidia-h200.toml", h200.to_toml())],
        vec![
            ("nvidia-h200.toml", h200.to_toml()),
            ("nvidia-h100.toml", h100.to_toml()),
        ],
        vec![
            ("nvidia-h200.toml", h200.to_toml()),
            ("nvidia-h100-pcie.toml", pcie.to_toml()),
        ],
    ] {
        let d = dir_with(&files);
        let s = selector_of(d.path());
        let sel = s.select::<ReduceFamily>("cuda", "nvidia-h100", &p, Tier::Exact);
        assert_eq!(sel.variant.rows_per_group, 8, "{}", sel.source);
        match &sel.source {
            Source::Nearest { why, .. } => assert!(
                why.contains("nearest tuned M = 8")
                    && why.contains("a member's: table ")
                    && why.contains("nvidia-h200.toml: 1 entries for [")
                    && !why.contains("no table has this M"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn family_member_takes_the_nearest_device() {
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let s = selector_of(d.path());
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h100", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant, winner());
    match &sel.source {
        Source::Nearest { why, .. } => {
            assert!(
                why.contains("nvidia-h200") && why.contains("nvidia-h100"),
                "{why}"
            )
        }
        other => panic!("expected Source::Nearest, got {other:?}"),
    }
}

#[test]
fn unknown_device_gets_the_default() {
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let s = selector_of(d.path());
    for (backend, dev) in [
        ("cuda", "zz-unknown-gpu"),
        ("metal", "nvidia-h200"),
        ("cpu", "nvidia-h200"),
    ] {
        let sel = s.select::<ReduceFamily>(backend, dev, &problem(4096, 4096), Tier::Exact);
        assert_eq!(sel.variant, Variant::default(), "{backend} {dev}");
        match &sel.source {
            Source::Default { why } => assert!(why.contains(dev), "{why}"),
            other => panic!("{backend} {dev}: expected Source::Default, got {other:?}"),
        }
    }
    // And with no tables at all.
    let sel = Selector::empty().select::<ReduceFamily>(
        "cuda",
        "nvidia-h200",
        &problem(4096, 4096),
        Tier::Exact,
    );
    assert!(matches!(sel.source, Source::Default { .. }));
    // The default keeps the key's tier.
    assert_eq!(
        Selector::empty()
            .select::<ReduceFamily>("cpu", "x", &problem(4096, 4096), Tier::Fast)
            .variant
            .tier,
        Tier::Fast
    );
}

#[test]
fn a_stale_entry_gives_the_default_and_says_so() {
    let mut t = table("nvidia-h200", "cuda");
    t.entries[0].source_hash = "0123456789abcdef".into();
    let d = dir_with(&[("nvidia-h200.toml", t.to_toml())]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant, Variant::default());
    match &sel.source {
        Source::Default { why } => {
            assert!(why.contains("stale") && why.contains("reduce"), "{why}")
        }
        other => panic!("expected Source::Default, got {other:?}"),
    }
}

/// Staleness is per family and per dialect: a CUDA entry is current only against what
/// the family compiles for CUDA.
#[test]
fn source_hashes_differ_by_family_and_dialect() {
    use trellis::families::gate_up::GateUpFamily;
    let r = trellis::tune::source_hash::<ReduceFamily>(Dialect::Cuda);
    assert_eq!(r, trellis::tune::source_hash::<ReduceFamily>(Dialect::Cuda));
    assert_ne!(r, trellis::tune::source_hash::<ReduceFamily>(Dialect::Cpu));
    assert_ne!(r, trellis::tune::source_hash::<GateUpFamily>(Dialect::Cuda));
}

/// A problem's candidate-space hash follows its candidates and their units at the
/// problem, as the dialect compiles them: the quick space and another M (other
/// candidates) hash differently, and so do the same candidates on another dialect or at
/// an M whose candidate list is the same but whose units are not. So a template branch
/// that only tuned shapes take (the M = 8 register budget's loads, say) stales the
/// entries it changes, which the catalog's source hash cannot see.
#[test]
fn space_hashes_follow_the_candidates_and_their_units() {
    let at = |m| ReduceProblem {
        m,
        ..problem(4096, 4096)
    };
    let h = |p: &ReduceProblem, quick, d| {
        trellis::tune::space_hash::<ReduceFamily>(p, Tier::Exact, quick, d)
    };
    let cuda = Dialect::Cuda;
    assert_eq!(h(&at(1), false, cuda), h(&at(1), false, cuda));
    assert_ne!(h(&at(1), false, cuda), h(&at(1), true, cuda));
    assert_ne!(h(&at(1), false, cuda), h(&at(8), false, cuda));
    assert_ne!(h(&at(1), false, cuda), h(&at(1), false, Dialect::Cpu));
    let list = |m| {
        ReduceFamily::candidates(&at(m), Tier::Exact, false)
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(list(3), list(5));
    assert_ne!(h(&at(3), false, cuda), h(&at(5), false, cuda));
}

#[test]
fn unknown_field_is_a_warning() {
    let text = with_device_line(&table("nvidia-h200", "cuda").to_toml(), "colour = \"blue\"");
    let d = dir_with(&[("nvidia-h200.toml", text)]);
    let s = selector_of(d.path());
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(s.warnings[0].contains("colour"), "{}", s.warnings[0]);
    assert!(matches!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
            .source,
        Source::Default { .. }
    ));
    // An unknown field in an entry's winner, too.
    let text = table("nvidia-h200", "cuda").to_toml().replacen(
        "x_stage = \"shared_f32\"",
        "x_stage = \"shared_f32\"\nunroll = 4",
        1,
    );
    assert!(text.contains("unroll"), "{text}");
    let s = selector_of(dir_with(&[("t.toml", text)]).path());
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(s.warnings[0].contains("unroll"), "{}", s.warnings[0]);
}

#[test]
fn bad_toml_syntax_is_a_warning() {
    let good = table("nvidia-h200", "cuda").to_toml();
    let bad = format!("{}\n[[entry\nfamily = ", &good[..good.len() / 2]);
    let d = dir_with(&[("nvidia-h200.toml", bad), ("empty.toml", String::new())]);
    let s = selector_of(d.path());
    // Both are ignored: the truncated one, and the empty one (no [device]).
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(
        s.warnings.iter().any(|w| w.contains("nvidia-h200.toml")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings.iter().any(|w| w.contains("empty.toml")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings.iter().all(|w| w.contains("ignored")),
        "{:?}",
        s.warnings
    );
    assert!(matches!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
            .source,
        Source::Default { .. }
    ));
    // Garbage bytes and text that is not a table at all.
    let mut s = Selector::empty();
    s.add_text("garbage", "\u{0}\u{1}\u{ff}");
    s.add_text("list", "[1, 2, 3]");
    s.add_text(
        "wrong types",
        &good.replacen("samples = 30", "samples = \"thirty\"", 1),
    );
    assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
    // Each names its input, in order; the wrong type names its field.
    for (w, name) in s.warnings.iter().zip(["garbage", "list", "wrong types"]) {
        assert!(w.starts_with(&format!("{name}: ignored: ")), "{w}");
    }
    assert!(s.warnings[2].contains("samples"), "{}", s.warnings[2]);
}

#[test]
fn unknown_representation_is_a_warning() {
    let mut t = table("nvidia-h200", "cuda");
    t.entries[0]
        .winner
        .insert("repr".into(), toml::Value::String("texture_table".into()));
    let d = dir_with(&[("nvidia-h200.toml", t.to_toml())]);
    let s = selector_of(d.path());
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = &s.warnings[0];
    assert!(w.contains("texture_table") && w.contains("winner"), "{w}");
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant, Variant::default());
    assert!(matches!(sel.source, Source::Default { .. }));
}

#[test]
fn a_variant_of_the_other_tier_is_a_warning() {
    // An exact key never hands out a fast variant (SPEC 7: the tiers are never mixed up).
    for what in ["winner", "runner_up"] {
        let mut t = table("nvidia-h200", "cuda");
        let e = &mut t.entries[0];
        let v = match what {
            "winner" => &mut e.winner,
            _ => e.runner_up.as_mut().unwrap(),
        };
        v.insert("tier".into(), toml::Value::String("fast".into()));
        let s = selector_of(dir_with(&[("t.toml", t.to_toml())]).path());
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        let w = &s.warnings[0];
        assert!(
            w.contains(&format!("entry[0].{what}.tier")) && w.contains("keyed exact"),
            "{w}"
        );
        let sel =
            s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
        assert_eq!(sel.variant.tier, Tier::Exact);
        assert!(matches!(sel.source, Source::Default { .. }));
    }
    // A table added already parsed is not checked on the way in: the selection still is.
    let mut t = table("nvidia-h200", "cuda");
    t.entries[0]
        .winner
        .insert("tier".into(), toml::Value::String("fast".into()));
    let mut s = Selector::empty();
    s.add_table("api", t);
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant.tier, Tier::Exact);
    match sel.source {
        Source::Default { why } => assert!(why.contains("tier is fast, the key's exact"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_table_in_another_backends_dialect_is_a_warning() {
    // Its hashes are another dialect's: copied hashes would pass the staleness check.
    let mut t = table("cpu-test", "cpu");
    t.device.dialect = "cuda".into();
    let s = selector_of(dir_with(&[("t.toml", t.to_toml())]).path());
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = &s.warnings[0];
    assert!(
        w.contains("device.dialect") && w.contains("backend cpu compiles the cpu dialect"),
        "{w}"
    );
}

#[test]
fn bad_keys_are_warnings() {
    for (field, from, to) in [
        ("family", "family = \"reduce\"", "family = \"attention\""),
        ("bucket", "bucket = \"4096x4096\"", "bucket = \"4000x4096\""),
        ("tier", "tier = \"exact\"", "tier = \"turbo\""),
        (
            "m_strategy",
            "m_strategy = \"per_sample\"",
            "m_strategy = \"sideways\"",
        ),
        // A garbled key would never match: it is named, not silently passed over.
        ("entry[0].key", "M=1 k2 L12", "M=1 k2 L2"),
        ("entry[0].key", "M=1 k2 L12", "M=01 k2 L12"),
        (
            "entry[0].key",
            "M=1 k2 L12 1mad",
            "M=1 k2 L12 1mad tail=exact",
        ),
        ("entry[0].key", "M=1 k2 L12 1mad", "M=1 k2 L12 1mad "),
        ("entry[0].key", "M=1 k2 L12 1mad", "M=1 gate=k2 L12 1mad"),
        ("entry[0].key", "bf16 M=1", "bf16 k2 L12 1mad M=1"),
    ] {
        let text = table("nvidia-h200", "cuda").to_toml();
        assert!(text.contains(from), "{field}: {text}");
        let mut s = Selector::empty();
        s.add_text("t", &text.replacen(from, to, 1));
        assert_eq!(s.warnings.len(), 1, "{field}: {:?}", s.warnings);
        assert!(s.warnings[0].contains(field), "{field}: {}", s.warnings[0]);
        assert!(
            matches!(
                s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
                    .source,
                Source::Default { .. }
            ),
            "{field}"
        );
    }
}

#[test]
fn missing_directory_is_a_warning() {
    let d = tempfile::tempdir().unwrap();
    let s = selector_of(&d.path().join("does-not-exist"));
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("does-not-exist"),
        "{}",
        s.warnings[0]
    );
}

#[test]
fn good_and_bad_tables_side_by_side() {
    let mut stale = table("nvidia-h100", "cuda");
    stale.entries[0].source_hash = "ffffffffffffffff".into();
    let d = dir_with(&[
        ("a-nvidia-h100.toml", stale.to_toml()),
        ("b-nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml()),
        ("c-broken.toml", "[device".into()),
        ("notes.txt", "not a table".into()),
    ]);
    let s = selector_of(d.path());
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(matches!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
            .source,
        Source::Table { .. }
    ));
    // The h100 table's only entry is stale: the family member's stands in, saying so.
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h100", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant, winner());
    assert_stood_in(
        &sel.source,
        "b-nvidia-h200.toml",
        &[
            "nearest device nvidia-h200 for nvidia-h100",
            "a-nvidia-h100.toml: 1 entries for",
            "are stale",
        ],
    );
    // With no member to stand in, the default, saying so.
    let d = dir_with(&[("a-nvidia-h100.toml", stale.to_toml())]);
    let sel = selector_of(d.path()).select::<ReduceFamily>(
        "cuda",
        "nvidia-h100",
        &problem(4096, 4096),
        Tier::Exact,
    );
    assert_eq!(sel.variant, Variant::default());
    match &sel.source {
        Source::Default { why } => assert!(why.contains("are stale"), "{why}"),
        other => panic!("expected Source::Default, got {other:?}"),
    }
}

/// `source` is an entry of a table whose name ends with `table`, standing in for the
/// asked key with a reason that says each of `why`.
fn assert_stood_in(source: &Source, table: &str, why: &[&str]) {
    match source {
        Source::Nearest {
            table: name,
            why: reason,
            ..
        } => {
            assert!(name.ends_with(table), "{name}");
            for w in why {
                assert!(reason.contains(w), "{reason} lacks {w:?}");
            }
        }
        other => panic!("expected Source::Nearest, got {other:?}"),
    }
}

/// A device's tables layer: a later one (this checkout's `tuning/local/`,
/// `$TRELLIS_TUNING_DIR`, the API) wins the keys it holds, at the same bucket and shape,
/// and every key it lacks falls through to the earlier ones (the shipped table), so a
/// tune over part of the space keeps the rest of the shipped choices.
#[test]
fn a_later_table_layers_over_an_earlier_one() {
    let m4 = ReduceProblem {
        m: 4,
        ..problem(4096, 4096)
    };
    let at_m4 = |v: &Variant| {
        let mut e = entry(4096, 4096, v);
        e.key = ReduceFamily::key_fields(&m4);
        e
    };
    let later_winner = Variant {
        rows_per_group: 2,
        ..winner()
    };
    // The earlier table: M 1 and M 4 at 4096x4096, and M 1 at 1024x1024 too.
    let mut shipped = table("nvidia-h200", "cuda");
    shipped.entries.push(at_m4(&winner()));
    // The later one: M 1 only, at 4096x4096 and at 1024x1024.
    let mut local = table("nvidia-h200", "cuda");
    local.entries[0].winner = record(&later_winner);
    let small = Variant {
        rows_per_group: 4,
        ..winner()
    };
    local.entries.push(entry(1024, 1024, &small));
    let mut s = Selector::empty();
    s.add_table("shipped", shipped.clone());
    s.add_table("local", local);
    let pick = |s: &Selector, p: &ReduceProblem| {
        let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", p, Tier::Exact);
        let Source::Table { table, .. } = &sel.source else {
            panic!("{p}: expected Source::Table, got {:?}", sel.source)
        };
        (sel.variant, table.clone())
    };
    assert_eq!(
        pick(&s, &problem(4096, 4096)),
        (later_winner, "local".into())
    );
    assert_eq!(pick(&s, &problem(1024, 1024)), (small, "local".into()));
    assert_eq!(pick(&s, &m4), (winner(), "shipped".into()));
    // Between layers the nearest bucket still comes first: at 2048 x 1024 the later
    // table's 1024x1024 entry is one octave away and the earlier's 4096x4096 two.
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(2048, 1024), Tier::Exact);
    assert_eq!(sel.variant, small, "{}", sel.source);
    // And a nearer bucket of an earlier table beats a farther one of a later table.
    let mut s = Selector::empty();
    let mut far = table("nvidia-h200", "cuda");
    far.entries[0] = entry(1024, 1024, &small);
    s.add_table("shipped", shipped);
    s.add_table("local", far);
    assert_eq!(pick(&s, &problem(4096, 4096)), (winner(), "shipped".into()));
}

/// The selector of two tables: `own`'s, with the M 1 key alone (the default variant), and
/// the H200's, with the M 4 key alone (`winner()`); and that M 4 problem.
fn partial_table_beside_h200(own: &str) -> (Selector, ReduceProblem) {
    let m4 = ReduceProblem {
        m: 4,
        ..problem(4096, 4096)
    };
    let mut h200 = table("nvidia-h200", "cuda");
    h200.entries[0].key = ReduceFamily::key_fields(&m4);
    let partial = Table {
        entries: vec![entry(4096, 4096, &Variant::default())],
        ..table(own, "cuda")
    };
    let d = dir_with(&[
        (&format!("{own}.toml"), partial.to_toml()),
        ("nvidia-h200.toml", h200.to_toml()),
    ]);
    let s = selector_of(d.path());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    (s, m4)
}

/// A key the device's own tables lack is taken from the nearest family member's, as
/// where the device has no table: an H100 table tuned over the M 1 keys leaves the
/// other keys to the H200's entries, not to the built-in default.
#[test]
fn a_key_the_own_table_lacks_falls_to_the_family_member() {
    let (s, m4) = partial_table_beside_h200("nvidia-h100");
    let own = s.select::<ReduceFamily>("cuda", "nvidia-h100", &problem(4096, 4096), Tier::Exact);
    assert!(
        matches!(own.source, Source::Table { .. }),
        "{:?}",
        own.source
    );
    assert_eq!(own.variant, Variant::default());
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h100", &m4, Tier::Exact);
    assert_eq!(sel.variant, winner());
    assert_stood_in(
        &sel.source,
        "nvidia-h200.toml",
        &[
            "nearest device nvidia-h200 for nvidia-h100",
            "nvidia-h100.toml has no entry for",
        ],
    );
    // M 2, which no table has: the nearest M tuned, the device's own tables first (its
    // M 1 entry, as near in octaves as the H200's M 4).
    let m2 = ReduceProblem {
        m: 2,
        ..problem(4096, 4096)
    };
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h100", &m2, Tier::Exact);
    assert_eq!(sel.variant, Variant::default());
    assert_stood_in(&sel.source, "nvidia-h100.toml", &["nearest tuned M = 1"]);
    // Neither has the key at any M: the default names the device's own table.
    match s
        .select::<ReduceFamily>("cuda", "nvidia-h100", &problem_k3(4096, 4096), Tier::Exact)
        .source
    {
        Source::Default { why } => {
            assert!(why.contains("nvidia-h100.toml has no entry for"), "{why}")
        }
        other => panic!("expected Source::Default, got {other:?}"),
    }
}

/// Family members are tried nearest first, and a nearer member's partial table leaves
/// the keys it lacks to the next: another H100 takes the H100 table's entries where it
/// has them and the H200's for the rest, not the built-in default.
#[test]
fn a_nearer_members_partial_table_leaves_its_missing_keys_to_the_next() {
    let (s, m4) = partial_table_beside_h200("nvidia-h100-80gb-hbm3");
    let pcie = "nvidia-h100-pcie";
    let m1 = s.select::<ReduceFamily>("cuda", pcie, &problem(4096, 4096), Tier::Exact);
    assert_eq!(m1.variant, Variant::default());
    assert_stood_in(
        &m1.source,
        "nvidia-h100-80gb-hbm3.toml",
        &["nearest device nvidia-h100-80gb-hbm3 for nvidia-h100-pcie"],
    );
    let sel = s.select::<ReduceFamily>("cuda", pcie, &m4, Tier::Exact);
    assert_eq!(sel.variant, winner());
    assert_stood_in(
        &sel.source,
        "nvidia-h200.toml",
        &["nearest device nvidia-h200 for nvidia-h100-pcie"],
    );
    // M 2, which no member has: the nearest M tuned, the nearest member first.
    let m2 = ReduceProblem {
        m: 2,
        ..problem(4096, 4096)
    };
    let sel = s.select::<ReduceFamily>("cuda", pcie, &m2, Tier::Exact);
    assert_eq!(sel.variant, Variant::default());
    assert_stood_in(
        &sel.source,
        "nvidia-h100-80gb-hbm3.toml",
        &["nearest tuned M = 1"],
    );
    // No member has the key at any M: the default names the nearest member's miss.
    match s
        .select::<ReduceFamily>("cuda", pcie, &problem_k3(4096, 4096), Tier::Exact)
        .source
    {
        Source::Default { why } => assert!(
            why.contains("nvidia-h100-80gb-hbm3.toml has no entry for"),
            "{why}"
        ),
        other => panic!("expected Source::Default, got {other:?}"),
    }
}

/// A `*.toml` that is a pipe, a device or too large is ignored with a warning, unread
/// (reading a pipe would wait for a writer; `/dev/zero` never ends).
#[cfg(unix)]
#[test]
fn odd_files_in_a_tables_directory_are_warnings_not_reads() {
    let d = dir_with(&[("b-nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    let status = Command::new("mkfifo")
        .arg(d.path().join("a-pipe.toml"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    std::os::unix::fs::symlink("/dev/zero", d.path().join("c-zero.toml")).unwrap();
    let huge = std::fs::File::create(d.path().join("d-huge.toml")).unwrap();
    huge.set_len(trellis::tune::MAX_TABLE_BYTES + 1).unwrap();
    let s = selector_of(d.path());
    assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
    let files = ["a-pipe.toml", "c-zero.toml", "d-huge.toml"];
    for ((w, what), file) in s
        .warnings
        .iter()
        .zip(["pipe", "device", "more than"])
        .zip(files)
    {
        assert!(
            w.contains(&format!("{file}: ignored")) && w.contains(what),
            "{w}"
        );
    }
    assert!(matches!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
            .source,
        Source::Table { .. }
    ));
}

#[test]
fn later_table_for_a_device_wins() {
    let mut newer = table("nvidia-h200", "cuda");
    newer.entries[0].winner = record(&Variant {
        rows_per_group: 16,
        ..Variant::default()
    });
    let d = dir_with(&[
        ("a.toml", table("nvidia-h200", "cuda").to_toml()),
        ("b.toml", newer.to_toml()),
    ]);
    let s = selector_of(d.path());
    let sel = s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact);
    assert_eq!(sel.variant.rows_per_group, 16);
    match sel.source {
        Source::Table { table, .. } => assert!(table.ends_with("b.toml"), "{table}"),
        other => panic!("{other:?}"),
    }
}

/// One table entry of the layered-selection model: its key's M, bucket, measured shape
/// (the bucket's, or a quarter more rows), whether it is stale, and its winner.
#[derive(Clone, Debug)]
struct Spec {
    m: u32,
    bucket: (u64, u64),
    stretched: bool,
    stale: bool,
    rows_per_group: u32,
}

fn spec() -> impl proptest::strategy::Strategy<Value = Spec> {
    use proptest::prelude::*;
    let pow = proptest::sample::select(vec![1024u64, 4096, 16384]);
    (
        1u32..=4,
        (pow.clone(), pow),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::sample::select(vec![1u32, 2, 4, 8, 16]),
    )
        .prop_map(|(m, bucket, stretched, stale, rows_per_group)| Spec {
            m,
            bucket,
            stretched,
            stale,
            rows_per_group,
        })
}

impl Spec {
    fn problem(&self) -> ReduceProblem {
        ReduceProblem {
            m: self.m,
            ..problem(4096, 4096)
        }
    }
    fn shape(&self) -> (u64, u64) {
        let (r, c) = self.bucket;
        (if self.stretched { r + r / 4 } else { r }, c)
    }
    fn variant(&self) -> Variant {
        Variant {
            rows_per_group: self.rows_per_group,
            ..winner()
        }
    }
    fn entry(&self) -> Entry {
        let (r, c) = self.bucket;
        let mut e = entry(r, c, &self.variant());
        e.key = ReduceFamily::key_fields(&self.problem());
        e.shape = format!("{}x{}", self.shape().0, self.shape().1);
        e.source_hash = if self.stale {
            "0123456789abcdef".into()
        } else {
            trellis::tune::source_hash_of::<ReduceFamily>(Dialect::Cuda, &self.problem())
        };
        e
    }
}

/// The layered rule, written out: among the current entries of `layers` (earliest
/// first) for the key, the nearest bucket, then the nearest measured shape, then the
/// latest layer, then the first in it. Returns the layer's index and the entry.
fn model_pick(
    layers: &[Vec<Spec>],
    m: u32,
    (rows, cols): (usize, usize),
) -> Option<(usize, &Spec)> {
    let want = trellis::tune::Bucket::of(rows, cols);
    let octaves = |a: u64, b: usize| (a as f64 / b as f64).log2().abs();
    // (bucket octaves, shape octaves, layers after this one, place in the layer)
    type Rank = (u32, f64, usize, usize);
    let mut best: Option<(Rank, (usize, &Spec))> = None;
    for (li, layer) in layers.iter().enumerate() {
        for (ei, s) in layer.iter().enumerate() {
            if s.stale || s.m != m {
                continue;
            }
            let b = trellis::tune::Bucket {
                rows: s.bucket.0,
                cols: s.bucket.1,
            };
            let (sr, sc) = s.shape();
            let rank = (
                b.log_distance(&want),
                octaves(sr, rows) + octaves(sc, cols),
                layers.len() - 1 - li,
                ei,
            );
            let nearer = best.as_ref().is_none_or(|(r, _)| {
                rank.0
                    .cmp(&r.0)
                    .then(rank.1.total_cmp(&r.1))
                    .then((rank.2, rank.3).cmp(&(r.2, r.3)))
                    .is_lt()
            });
            if nearer {
                best = Some((rank, (li, s)));
            }
        }
    }
    best.map(|(_, hit)| hit)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

    /// Random layers of tables for a device (`gpu-a`) and a family member (`gpu-b`),
    /// added interleaved: the selector takes what the layered rule says, from the
    /// device's own layers first, then the member's, then the default.
    #[test]
    fn layered_selection_follows_its_rule(
        own in proptest::collection::vec(proptest::collection::vec(spec(), 0..4), 0..3),
        theirs in proptest::collection::vec(proptest::collection::vec(spec(), 0..4), 0..3),
        m in 1u32..=4,
        rows in proptest::sample::select(vec![1024usize, 1280, 2048, 4096, 5120, 17408]),
        cols in proptest::sample::select(vec![1024usize, 4096, 5120, 14336]),
    ) {
        let name = |dev: &str, i: usize| format!("{dev}-{i}.toml");
        let table_of = |dev: &str, specs: &[Spec]| Table {
            device: device(dev, "cuda"),
            entries: specs.iter().map(Spec::entry).collect(),
        };
        let mut s = Selector::empty();
        for i in 0..own.len().max(theirs.len()) {
            if let Some(l) = theirs.get(i) {
                s.add_table(&name("gpu-b", i), table_of("gpu-b", l));
            }
            if let Some(l) = own.get(i) {
                s.add_table(&name("gpu-a", i), table_of("gpu-a", l));
            }
        }
        let p = ReduceProblem { m, ..problem(rows, cols) };
        let sel = s.select::<ReduceFamily>("cuda", "gpu-a", &p, Tier::Exact);
        // M as asked in the device's own layers, then the member's; then the nearest
        // larger M (else the nearest smaller) in its own, then the member's.
        let others: Vec<u32> = (m + 1..=8).chain((1..m).rev()).collect();
        let pick = |layers, dev, ms: &[u32]| {
            ms.iter().find_map(|&n| model_pick(layers, n, (rows, cols)).map(|(i, s)| (dev, i, s)))
        };
        let want = pick(&own, "gpu-a", &[m])
            .or_else(|| pick(&theirs, "gpu-b", &[m]))
            .or_else(|| pick(&own, "gpu-a", &others))
            .or_else(|| pick(&theirs, "gpu-b", &others));
        match (want, &sel.source) {
            (None, Source::Default { .. }) => {
                proptest::prop_assert_eq!(sel.variant, Variant::default())
            }
            (
                Some((dev, i, spec)),
                Source::Table { table, shape, .. } | Source::Nearest { table, shape, .. },
            ) => {
                proptest::prop_assert_eq!(table, &name(dev, i));
                proptest::prop_assert_eq!(shape, &format!("{}x{}", spec.shape().0, spec.shape().1));
                proptest::prop_assert_eq!(sel.variant, spec.variant());
                let exact = dev == "gpu-a" && spec.m == m && spec.bucket == {
                    let b = trellis::tune::Bucket::of(rows, cols);
                    (b.rows, b.cols)
                };
                proptest::prop_assert_eq!(matches!(sel.source, Source::Table { .. }), exact);
            }
            (want, got) => proptest::prop_assert!(false, "model {want:?}, selector {got}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Through the binary.

/// `trellis args`, with no `$TRELLIS_TUNING_DIR` from the caller's environment and this
/// checkout's `tuning/local/` unread (what a tune run here left must not move the
/// shipped tables' answers these tests expect).
fn trellis(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove(TUNING_DIR_ENV)
        .env(LOCAL_TABLES_ENV, "0")
        .output()
        .expect("run the trellis binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run, require exit 0 and no panic; (stdout, stderr).
fn ok(args: &[&str]) -> (String, String) {
    let out = trellis(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "trellis {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, stderr)
}

/// Run, require exit 1 with exactly one `error:` line containing every needle, and
/// nothing on stdout.
fn fails(args: &[&str], needles: &[&str]) {
    let out = trellis(args);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "trellis {args:?} should exit 1; stderr: {stderr}"
    );
    assert_eq!(text(&out.stdout), "", "trellis {args:?}: stdout on failure");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "trellis {args:?}: stderr must be one line: {stderr:?}"
    );
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    for n in needles {
        assert!(
            lines[0].contains(n),
            "trellis {args:?}: {:?} does not mention {n:?}",
            lines[0]
        );
    }
}

/// The value of the `name: ` line of `stdout`.
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}: ");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no `{name}:` line in {stdout:?}"))
}

fn select_args<'a>(device: &'a str, tables: Option<&'a str>, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "select", "--device", device, "--family", "reduce", "--rows", "4096", "--cols", "4096",
        "--k", "2", "--m", "1",
    ];
    if let Some(t) = tables {
        v.extend(["--tables", t]);
    }
    v.extend_from_slice(extra);
    v
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn cli_select_reads_tables() {
    // A device id no shipped table has: its entries layer over nothing (the H200's own
    // would win nearer buckets at 8192 x 2048).
    let d = dir_with(&[("nvidia-test.toml", table("nvidia-test", "cuda").to_toml())]);
    let dir = path_str(d.path());
    let want = format!("variant: {}", winner());

    // Exact: --backend defaults to cuda for nvidia-*.
    let (out, _) = ok(&select_args("nvidia-test", Some(dir), &[]));
    assert!(out.contains(&want), "{out}");
    let source = line(&out, "source");
    assert!(
        source.starts_with("table ") && source.contains("nvidia-test.toml"),
        "{out}"
    );
    assert!(source.contains(&key(4096, 4096).to_string()), "{out}");
    assert!(!source.contains('('), "exact, not nearest: {out}");

    // Nearest bucket.
    let mut args = select_args("nvidia-test", Some(dir), &[]);
    args[6] = "8192"; // --rows
    args[8] = "2048"; // --cols
    let (out, _) = ok(&args);
    assert!(out.contains(&want), "{out}");
    assert!(line(&out, "source").contains("nearest bucket"), "{out}");

    // Nearest device (an id no checked-in table will have, so only ours is near).
    let (out, _) = ok(&select_args("nvidia-test-zz", Some(dir), &[]));
    assert!(out.contains(&want), "{out}");
    assert!(
        line(&out, "source").contains("nearest device nvidia-test for nvidia-test-zz"),
        "{out}"
    );
    // Both at once: each named.
    let mut args = select_args("nvidia-test-zz", Some(dir), &[]);
    args[6] = "8192"; // --rows
    args[8] = "2048"; // --cols
    let (out, _) = ok(&args);
    let source = line(&out, "source");
    assert!(
        source.contains("nearest device nvidia-test for nvidia-test-zz")
            && source.contains("nearest bucket"),
        "{out}"
    );

    // Same device id on another backend's tables: the default.
    let (out, _) = ok(&select_args(
        "nvidia-test",
        Some(dir),
        &["--backend", "cpu"],
    ));
    assert!(
        line(&out, "source").starts_with("built-in default"),
        "{out}"
    );
    assert_eq!(
        line(&out, "variant"),
        Variant::default().to_string(),
        "{out}"
    );
}

#[test]
fn cli_select_corrupted_table_warns_and_defaults() {
    let good = table("zztest-gpu1", "cuda").to_toml();
    let cases = [
        (
            "truncated",
            format!("{}\n[[entry\n", &good[..good.len() / 2]),
        ),
        (
            "unknown field",
            with_device_line(&good, "colour = \"blue\""),
        ),
        (
            "bad repr",
            good.replacen("repr = \"shared_table\"", "repr = \"texture_table\"", 1),
        ),
        (
            "no shape",
            good.replacen("shape = \"4096x4096\"", "shape = \"0x4096\"", 1),
        ),
        (
            "no device id",
            good.replacen("id = \"zztest-gpu1\"", "id = \" \"", 1),
        ),
        (
            "a repeated entry",
            format!("{good}\n{}", &good[good.find("[[entry]]").unwrap()..]),
        ),
        // One long line that is no TOML: quoted clipped, not whole.
        ("one long line", format!("{good}\n{}", "x".repeat(200_000))),
    ];
    for (what, text) in cases {
        assert_ne!(text, good, "{what}");
        let d = dir_with(&[("zztest-gpu1.toml", text)]);
        let (out, err) = ok(&select_args(
            "zztest-gpu1",
            Some(path_str(d.path())),
            &["--backend", "cuda"],
        ));
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("zztest-gpu1.toml"))
            .collect();
        assert_eq!(ours.len(), 1, "{what}: {err}");
        assert!(ours[0].starts_with("warning: "), "{what}: {err}");
        assert!(ours[0].len() < 2000, "{what}: {} characters", ours[0].len());
        assert!(
            err.lines().all(|l| l.starts_with("warning: ")),
            "{what}: {err}"
        );
        assert!(
            line(&out, "source").starts_with("built-in default"),
            "{what}: {out}"
        );
        assert_eq!(
            line(&out, "variant"),
            Variant::default().to_string(),
            "{what}: {out}"
        );
    }
}

#[test]
fn cli_select_unknown_device_is_the_default() {
    let d = dir_with(&[("nvidia-h200.toml", table("nvidia-h200", "cuda").to_toml())]);
    for tables in [None, Some(path_str(d.path()))] {
        let (out, _) = ok(&select_args("zz-unknown-device", tables, &[]));
        assert!(line(&out, "device").contains("(cpu)"), "{out}");
        let source = line(&out, "source");
        assert!(
            source.starts_with("built-in default") && source.contains("zz-unknown-device"),
            "{out}"
        );
        assert_eq!(
            line(&out, "variant"),
            "inline shared_decode rpg=4 x=registers rps=2 exact",
            "{out}"
        );
    }
    // Backend from the device id; the fast tier of reduce is the matrix-unit family's.
    let (out, _) = ok(&select_args("applegpu-g15s", None, &["--tier", "fast"]));
    assert!(line(&out, "device").contains("(metal)"), "{out}");
    assert_eq!(
        line(&out, "family"),
        "reduce_mma (what the fast tier of reduce runs)",
        "{out}"
    );
    assert!(line(&out, "key").starts_with("reduce_mma "), "{out}");
    assert!(line(&out, "variant").starts_with("mma "), "{out}");
}

/// `$TRELLIS_TUNING_DIR` set but empty reads as unset (as `$TRELLIS_CACHE_DIR` does): no
/// warning about a directory "".
#[test]
fn an_empty_tuning_dir_variable_is_unset() {
    let out = Command::new(BIN)
        .args(select_args("nvidia-h200", None, &[]))
        .env(TUNING_DIR_ENV, "")
        .env(LOCAL_TABLES_ENV, "0")
        .output()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let out = text(&out.stdout);
    assert!(
        line(&out, "source").starts_with("table embedded:nvidia-h200.toml, entry [reduce "),
        "{out}"
    );
}

#[test]
fn cli_select_gate_up_keys() {
    let (out, _) = ok(&[
        "select",
        "--device",
        "zz-x",
        "--family",
        "gate_up_mixed",
        "--rows",
        "4096",
        "--cols",
        "4096",
        "--k",
        "2",
        "--ku",
        "3",
        "--m",
        "2",
        "--l",
        "16",
        "--code",
        "3inst",
        "--dtype",
        "f16",
    ]);
    assert_eq!(
        line(&out, "key"),
        "gate_up_mixed f16 M=2 gate=k2 L16 3inst up=k3 L16 3inst exact 4096x4096",
        "{out}"
    );
}

#[test]
fn cli_select_rejects_bad_values() {
    let base = |field: &str, value: &str| -> Vec<String> {
        let mut v: Vec<String> = select_args("nvidia-h200", None, &[])
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(i) = v.iter().position(|a| a == field) {
            v[i + 1] = value.to_string();
        } else {
            v.extend([field.to_string(), value.to_string()]);
        }
        v
    };
    let cases: &[(&str, &str, &[&str])] = &[
        ("--family", "attention", &["family", "attention"]),
        ("--rows", "0", &["rows", "0"]),
        ("--rows", "-3", &["--rows", "-3"]),
        ("--cols", "300", &["cols", "300"]),
        ("--k", "9", &["k", "9"]),
        ("--k", "two", &["--k", "two"]),
        ("--m", "0", &["m = 0", "at least 1"]),
        ("--l", "40", &["L", "40"]),
        ("--t", "100", &["T", "100"]),
        ("--code", "2mad", &["code", "2mad"]),
        ("--dtype", "f64", &["dtype", "f64"]),
        ("--tier", "turbo", &["tier", "turbo"]),
        ("--backend", "vulkan", &["backend", "vulkan"]),
        ("--ku", "3", &["ku", "3"]),
        ("--device", "", &["device", "empty"]),
    ];
    for (flag, value, needles) in cases {
        let args = base(flag, value);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails(&args, needles);
    }
    // ku out of range for gate_up names ku.
    let mut args = base("--ku", "12");
    let f = args.iter().position(|a| a == "--family").unwrap();
    args[f + 1] = "gate_up".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(&args, &["ku", "12"]);
    fails(&["select", "--device", "nvidia-h200"], &["--family"]);
    // A --tables that is no directory is named (it was a warning, then the embedded
    // tables' answer).
    let d = dir_with(&[]);
    let file = d.path().join("t.toml");
    std::fs::write(&file, "").unwrap();
    for p in [d.path().join("missing"), file] {
        let args = select_args("nvidia-h200", Some(path_str(&p)), &[]);
        fails(&args, &[path_str(&p), "cannot read the tables' directory"]);
    }
    // A family answers only for the tiers it has variants in.
    let mut args = base("--tier", "exact");
    let f = args.iter().position(|a| a == "--family").unwrap();
    args[f + 1] = "reduce_mma".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(&args, &["tier = exact", "reduce_mma has no exact variants"]);
    // An alias names its kind of problem: gate_up_mixed without a second k is refused.
    let mut args = base("--tier", "exact");
    let f = args.iter().position(|a| a == "--family").unwrap();
    args[f + 1] = "gate_up_mixed".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(
        &args,
        &["gate_up_mixed", "describe a gate_up problem", "--ku"],
    );
    // Also where the fast tier maps it to the matrix-unit family.
    let mut args = base("--tier", "fast");
    let f = args.iter().position(|a| a == "--family").unwrap();
    args[f + 1] = "gate_up_mixed".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(
        &args,
        &[
            "family = gate_up_mixed",
            "describe a gate_up_mma problem",
            "--ku",
        ],
    );
    // A family without tuned choices says so in words.
    let mut args = base("--tier", "exact");
    let f = args.iter().position(|a| a == "--family").unwrap();
    args[f + 1] = "expand".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(&args, &["expand", "no tuned choice"]);
}

#[test]
fn cli_info_devices() {
    let (out, _) = ok(&["info", "--devices"]);
    let lines: Vec<&str> = out.lines().collect();
    for name in trellis::backend::NAMES {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{name}: "))),
            "{name} missing: {out}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("reference: ") && !l.contains("unavailable")),
        "{out}"
    );
    let default = line(&out, "default");
    assert!(trellis::backend::NAMES.contains(&default), "{out}");
    // Without a file or --devices: one error line.
    fails(&["info"], &["FILE"]);
}

/// Without a CUDA driver (CI, this machine), `--backend cuda` is a one-line error that
/// says why, and the default backend is the CPU; with one, cuda is the default.
#[test]
fn cuda_is_the_default_only_with_a_driver() {
    let (out, _) = ok(&["info", "--devices"]);
    let default = line(&out, "default");
    #[cfg(feature = "cuda")]
    let cuda_ok = trellis::backend::cuda::probe().is_ok();
    #[cfg(not(feature = "cuda"))]
    let cuda_ok = false;
    if cuda_ok {
        assert_eq!(default, "cuda", "{out}");
        return;
    }
    assert_eq!(
        default,
        if cfg!(target_os = "macos") {
            "metal"
        } else {
            "cpu"
        },
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("cuda: unavailable")),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w.safetensors");
    let x = dir.path().join("x.safetensors");
    let y = dir.path().join("y.safetensors");
    let w_s = w.to_str().unwrap();
    let x_s = x.to_str().unwrap();
    ok(&[
        "random", "--rows", "4", "--cols", "256", "--k", "2", "--l", "12", "--code", "1mad",
        "--out", w_s,
    ]);
    ok(&["random-x", "--m", "1", "--cols", "256", "--out", x_s]);
    fails(
        &[
            "matvec",
            "--weights",
            w_s,
            "--x",
            x_s,
            "--out",
            y.to_str().unwrap(),
            "--backend",
            "cuda",
        ],
        &["cuda", "unavailable"],
    );
    assert!(!y.exists());
}

/// A bucket's winner that stages x in threadgroup memory cannot serve a much wider matrix
/// of the same key: the selection takes the entry's runner-up where it fits, else falls
/// back to the default, and says why; the product on the CPU backend still matches the
/// reference.
#[test]
fn a_winner_that_does_not_fit_the_shape_gives_way_to_the_runner_up_or_the_default() {
    use trellis::families::simt::XStage;
    use trellis::tune::{fit, Selection};
    let limits = trellis::backend::nominal_limits("cuda");
    let wide = ReduceProblem {
        geometry: Geometry::new(8, 16384, 256, 3, 12, Code::OneMad).unwrap(),
        ..problem(8, 1024)
    };
    let staged = Variant {
        x_stage: XStage::SharedF32,
        ..Variant::default()
    };
    let chosen = || Selection {
        variant: staged,
        source: Source::Default { why: "test".into() },
        runner_up: None,
    };
    let s = fit::<ReduceFamily>(chosen(), &wide, Tier::Exact, &limits);
    assert_eq!(s.variant, Variant::default());
    assert!(
        s.source.to_string().contains("does not fit"),
        "{}",
        s.source
    );
    // A shape it fits keeps it.
    let small = ReduceProblem {
        geometry: Geometry::new(8, 1024, 256, 3, 12, Code::OneMad).unwrap(),
        ..problem(8, 1024)
    };
    assert_eq!(
        fit::<ReduceFamily>(chosen(), &small, Tier::Exact, &limits).variant,
        staged
    );
    // Metal's 32 KB: a variant that fits CUDA's 48 KB may not.
    let mid = ReduceProblem {
        geometry: Geometry::new(8, 9216, 256, 3, 12, Code::OneMad).unwrap(),
        ..problem(8, 1024)
    };
    assert_eq!(
        fit::<ReduceFamily>(chosen(), &mid, Tier::Exact, &limits).variant,
        staged
    );
    let metal = trellis::backend::nominal_limits("metal");
    assert_eq!(
        fit::<ReduceFamily>(chosen(), &mid, Tier::Exact, &metal).variant,
        Variant::default()
    );
    // A table entry's runner-up that fits is taken before the default, and says so; one
    // that does not fit either gives way to the default.
    let registers = Variant {
        x_stage: XStage::Registers,
        rows_per_simd: 2,
        ..Variant::default()
    };
    let from_table = |runner_up| Selection {
        variant: staged,
        source: Source::Table {
            table: "t".into(),
            key: "k".into(),
            shape: "8x1024".into(),
        },
        runner_up,
    };
    let s = fit::<ReduceFamily>(from_table(Some(registers)), &wide, Tier::Exact, &limits);
    assert_eq!(s.variant, registers);
    let why = s.source.to_string();
    assert!(
        matches!(s.source, Source::Nearest { .. })
            && why.contains("runner-up")
            && why.contains("does not fit"),
        "{why}"
    );
    let s = fit::<ReduceFamily>(from_table(Some(staged)), &wide, Tier::Exact, &limits);
    assert_eq!(s.variant, Variant::default());
    // End to end through the facade, on a backend held once.
    let b = trellis::backend::CpuBackend::new().unwrap();
    let w = trellis::check::random_matrix(wide.geometry, 3);
    let x = trellis::check::random_activations(DType::Bf16, 1, 16384, 4);
    let got = trellis::ops::matvec(&b, &w, &x, Tier::Exact).unwrap();
    assert!(got.bits_eq(&trellis::reference::reduce(&w, &x).unwrap()));
}

/// `select` answers for an M beyond one launch the way `matvec` runs it: one answer per
/// launch size (8 and the rest exact, 16 and the rest fast); M = 0 stays an error.
#[test]
fn select_answers_an_m_beyond_one_launch_per_launch_size() {
    let mut args = select_args("cpu", None, &[]);
    args[12] = "19"; // --m
    let (out, _) = ok(&args);
    assert!(
        out.starts_with("M = 19 runs as launches of at most 8 samples: 2 of M = 8, 1 of M = 3"),
        "{out}"
    );
    let keys: Vec<&str> = out.lines().filter(|l| l.starts_with("key: ")).collect();
    assert_eq!(keys.len(), 2, "{out}");
    assert!(
        keys[0].contains(" M=8 ") && keys[1].contains(" M=3 "),
        "{out}"
    );
    args.extend(["--tier", "fast"]);
    args[12] = "32";
    let (out, _) = ok(&args);
    assert!(
        out.contains("M = 32 runs as launches of at most 16 samples: 2 of M = 16 ("),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("key: ")).count(),
        1,
        "{out}"
    );
    args[12] = "0";
    fails(&args, &["m = 0", "at least 1"]);
}

/// An edited entry whose numbers do not add up is named and ignored: a bucket that is not
/// its shape's (it would serve the shape's choice to keys far from it), a shape with a
/// sign, times that are not finite and positive, no timed repetitions, a negative
/// speedup.
#[test]
fn entries_whose_numbers_do_not_add_up_are_warnings() {
    let good = table("nvidia-h200", "cuda").to_toml();
    let cases = [
        (
            good.replacen("bucket = \"4096x4096\"", "bucket = \"16384x4096\"", 1),
            "entry[0].bucket",
        ),
        (
            good.replacen("shape = \"4096x4096\"", "shape = \"+4096x4096\"", 1),
            "entry[0].shape",
        ),
        (
            good.replacen("median_us = 10.0", "median_us = nan", 1),
            "entry[0].stats.median_us",
        ),
        (
            good.replacen("median_us = 10.0", "median_us = -209.0", 1),
            "entry[0].stats.median_us",
        ),
        (
            good.replacen("p90_us = 12.24", "p90_us = inf", 1),
            "entry[0].default.p90_us",
        ),
        (
            good.replacen("samples = 30", "samples = 0", 1),
            "entry[0].stats.samples",
        ),
        (
            good.replacen("speedup = 1.2", "speedup = -1.2", 1),
            "entry[0].speedup",
        ),
        // One shape, one spelling: entries are matched by it.
        (
            good.replacen("shape = \"4096x4096\"", "shape = \"4096x04096\"", 1),
            "entry[0].shape",
        ),
        // Quantiles out of order (a hand edit: the tuner's are ordered).
        (
            good.replacen("median_us = 10.0", "median_us = 100.0", 1),
            "entry[0].stats.median_us",
        ),
        // A speedup of NaN with a default that ran.
        (
            good.replacen("speedup = 1.2", "speedup = nan", 1),
            "entry[0].speedup",
        ),
    ];
    for (text, field) in cases {
        assert_ne!(text, good, "{field}: the edit must apply");
        let mut s = Selector::empty();
        s.add_text("edited", &text);
        assert_eq!(s.warnings.len(), 1, "{field}: {:?}", s.warnings);
        assert!(
            s.warnings[0].starts_with("edited: ignored: ") && s.warnings[0].contains(field),
            "{field}: {}",
            s.warnings[0]
        );
        assert!(matches!(
            s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
                .source,
            Source::Default { .. }
        ));
    }
}

/// An entry whose default did not run (rejected, or over the device's limits) has no
/// speedup: it is written without one and read back, and an older tuner's `nan` there
/// reads as none.
#[test]
fn an_entry_without_a_default_has_no_speedup() {
    let mut t = table("nvidia-h200", "cuda");
    t.entries[0].default = None;
    t.entries[0].speedup = None;
    let text = t.to_toml();
    assert!(!text.contains("speedup"), "{text}");
    let older = text.replacen("bandwidth_gbs", "speedup = nan\nbandwidth_gbs", 1);
    for text in [text, older] {
        let back = Table::parse(&text).unwrap();
        assert_eq!(back.entries[0].speedup, None);
        let mut s = Selector::empty();
        s.add_text("t", &text);
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert!(matches!(
            s.select::<ReduceFamily>("cuda", "nvidia-h200", &problem(4096, 4096), Tier::Exact)
                .source,
            Source::Table { .. }
        ));
    }
}

/// A table that is ignored warns in one line wherever the selector is read, `matvec`
/// too (serde's message for a winner missing a field spans lines: it left an empty line
/// on stderr).
#[test]
fn an_ignored_tables_warning_is_one_line_in_matvec() {
    let good = table("nvidia-h200", "cuda").to_toml();
    let edited = good.replacen("repr = \"shared_table\"\n", "", 1);
    assert_ne!(edited, good);
    let d = dir_with(&[("t.toml", edited)]);
    let (w, x, y) = (
        d.path().join("w.st"),
        d.path().join("x.st"),
        d.path().join("y.st"),
    );
    ok(&[
        "random",
        "--rows",
        "8",
        "--cols",
        "256",
        "--k",
        "2",
        "--l",
        "8",
        "--t",
        "64",
        "--code",
        "1mad",
        "--out",
        path_str(&w),
    ]);
    ok(&[
        "random-x",
        "--m",
        "1",
        "--cols",
        "256",
        "--out",
        path_str(&x),
    ]);
    let out = Command::new(BIN)
        .args(["matvec", "--weights", path_str(&w), "--x", path_str(&x)])
        .args(["--out", path_str(&y), "--backend", "cpu"])
        .env(LOCAL_TABLES_ENV, "0")
        .env("TRELLIS_TUNING_DIR", d.path())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr:?}");
    assert!(
        lines[0].starts_with("warning: ")
            && lines[0].contains("t.toml")
            && lines[0].contains("repr"),
        "{stderr:?}"
    );
}

/// The tables' keys carry no T: `select` at another T than the tables were measured at
/// says so (and at theirs says nothing).
#[test]
fn select_at_another_t_says_the_tables_are_measured_at_theirs() {
    let (out, _) = ok(&select_args("nvidia-h200", None, &["--t", "64"]));
    let note = line(&out, "note");
    assert!(
        note.contains(&format!("T = {}", trellis::tune::TUNED_T)) && note.contains("T = 64"),
        "{out}"
    );
    let (out, _) = ok(&select_args("nvidia-h200", None, &[]));
    assert!(!out.contains("note:"), "{out}");
}
