//! The shipped H200 table's choices, run on the CPU at shapes the table was not measured
//! at: the selector picks an entry by bucket, so a winner tuned at 17408 x 5120 (3 rows
//! per simdgroup, one simdgroup per group, a register budget, folded 1mad scales) runs on
//! whatever shape of its key comes. The CPU dialect renders the same kernel body as CUDA,
//! so each choice must fit (or give way to the default) and keep SPEC 5's bits (exact) or
//! meet SPEC 7 (fast, the last test).

use trellis::backend::{Backend, CpuBackend};
use trellis::families::gate_up::GateUpFamily;
use trellis::families::reduce::ReduceFamily;
use trellis::family::Family;
use trellis::numerics::{Tail, Tier};
use trellis::tune::{fit, Selection, Selector, Source};
use trellis::{check, ops, reference, Activations, Code, DType, Geometry, QuantizedMatrix};

/// (rows, cols, k, L, code, M).
type Case = (usize, usize, u32, u32, Code, usize);

/// A case's random weights (from `seed`) and bf16 activations with outliers (`seed` + 100).
fn case_data(&(rows, cols, k, l, code, m): &Case, seed: u64) -> (QuantizedMatrix, Activations) {
    let g = Geometry::new(rows, cols, 256, k, l, code).unwrap();
    let x = check::random_activations_with_outliers(DType::Bf16, m, cols, seed + 100);
    (check::random_matrix(g, seed), x)
}

/// The shipped H200 table's choice for `p`, fitted to the CPU's limits.
fn h200_choice<F: Family>(
    selector: &Selector,
    cpu: &CpuBackend,
    p: &F::Problem,
    tier: Tier,
) -> Selection<F::Variant> {
    let s = selector.select::<F>("cuda", "nvidia-h200", p, tier);
    fit::<F>(s, p, tier, &cpu.limits())
}

/// (rows, cols, k, L, code, M): row counts that leave partial row sets for 2, 3 and 4 rows
/// per simdgroup, both codes and L of the table, every M it holds, and M 3, 5 and 7, which
/// it does not (they take the nearest M's entry). Small shapes take the
/// entries of the 4096 x 16384 bucket; tall ones (8195 x 256) those of 16384 x 4096, and
/// in it the entries measured at 14336 x 4096 (the nearer of its two tuned shapes), where
/// 3inst M 8 keeps 3 rows per simdgroup in groups of 4 (8195 rows: a partial group and a
/// partial row set).
const CASES: [Case; 12] = [
    (37, 512, 3, 12, Code::OneMad, 1),
    (130, 768, 2, 16, Code::OneMad, 2),
    (259, 512, 4, 12, Code::ThreeInst, 4),
    (100, 1024, 3, 16, Code::ThreeInst, 1),
    (41, 256, 3, 12, Code::OneMad, 8),
    (67, 1024, 2, 12, Code::OneMad, 4), // whole 1024-column slices: its interleaved-x winner runs
    (8195, 256, 3, 12, Code::OneMad, 1),
    (8194, 256, 2, 16, Code::ThreeInst, 2),
    (8195, 256, 3, 12, Code::ThreeInst, 8),
    (67, 512, 3, 12, Code::OneMad, 3),
    (130, 768, 2, 12, Code::OneMad, 5),
    (8195, 256, 4, 16, Code::ThreeInst, 7),
];

#[test]
fn the_h200_tables_exact_choices_keep_the_bits_on_the_cpu() {
    let cpu = CpuBackend::new().unwrap();
    let selector = Selector::shipped(); // the embedded tables alone, whatever the machine holds
    let mut from_table = 0;
    let mut elsewhere = Vec::new();
    let mut variants = std::collections::BTreeSet::new();
    for (i, case) in CASES.iter().enumerate() {
        let (w, x) = case_data(case, 100 + i as u64);
        let p = ops::reduce_problem(&w, &x).unwrap();
        let s = h200_choice::<ReduceFamily>(&selector, &cpu, &p, Tier::Exact);
        variants.insert(s.variant);
        if matches!(s.source, Source::Nearest { .. }) {
            from_table += 1;
        } else {
            elsewhere.push(format!("reduce {p}: {}", s.source));
        }
        let got = ops::matvec_with(&cpu, &w, &x, s.variant).unwrap();
        let want = reference::reduce(&w, &x).unwrap();
        assert!(
            got.bits_eq(&want),
            "reduce {p}: {} ({})",
            s.variant,
            s.source
        );

        let u = check::random_matrix(w.geometry, 300 + i as u64);
        let p = ops::gate_up_problem(&w, &u, &x, Tail::Exact).unwrap();
        let s = h200_choice::<GateUpFamily>(&selector, &cpu, &p, Tier::Exact);
        variants.insert(s.variant);
        if matches!(s.source, Source::Nearest { .. }) {
            from_table += 1;
        } else {
            elsewhere.push(format!("gate_up {p}: {}", s.source));
        }
        let got = ops::gate_up_with(&cpu, &w, &u, &x, Tail::Exact, s.variant).unwrap();
        let want = reference::gate_up(&w, &u, &x).unwrap();
        assert!(
            got.bits_eq(&want),
            "gate_up {p}: {} ({})",
            s.variant,
            s.source
        );
    }
    // Every case has a key the table holds (at another bucket), and its choice fits.
    assert_eq!(from_table, 2 * CASES.len(), "{elsewhere:#?}");
    let three_rows = variants.iter().filter(|v| v.rows_per_simd == 3).count();
    assert!(variants.len() >= 4 && three_rows >= 1, "{variants:?}");
}

/// Fast cases (rows, cols, k, L, code, M): every code the fast table holds, M 1-16 (3, 6
/// and 12 from the nearest larger M's entries: 4, 8 and 16).
const FAST_CASES: [Case; 9] = [
    (37, 768, 2, 12, Code::OneMad, 1),
    (130, 512, 3, 16, Code::ThreeInst, 4),
    (67, 1024, 4, 12, Code::Mcg, 2),
    (8195, 256, 2, 12, Code::OneMad, 8),
    // 8 steps of 128 columns: room for the M = 16 winners' 8 splits of K.
    (41, 1024, 2, 16, Code::OneMad, 16),
    (100, 1024, 3, 12, Code::ThreeInst, 16),
    (37, 768, 3, 12, Code::OneMad, 3),
    (130, 512, 2, 16, Code::Mcg, 6),
    (67, 1024, 3, 12, Code::OneMad, 12),
];

/// The shipped table's fast (`reduce_mma`) choices, run on the CPU at shapes it was not
/// measured at: nearly all of them take x rounded to f16 by the host (`MmaVariant::x_f16`),
/// the M = 16 ones early code words (`MmaVariant::early_words`), and each must fit (the
/// cases leave room for the table's splits of K), meet SPEC 7 and give the bits of the
/// same variant converting x itself.
#[test]
fn the_h200_tables_fast_choices_meet_spec7_on_the_cpu() {
    use trellis::families::mma::MmaVariant;
    use trellis::families::reduce_mma::{ReduceMmaFamily, ReduceMmaHost};
    use trellis::family;
    let cpu = CpuBackend::new().unwrap();
    let selector = Selector::shipped(); // the embedded tables alone, whatever the machine holds
    let (mut host_f16, mut early) = (0, 0);
    for (i, case) in FAST_CASES.iter().enumerate() {
        let (w, x) = case_data(case, 400 + i as u64);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let s = h200_choice::<ReduceMmaFamily>(&selector, &cpu, &p, Tier::Fast);
        assert!(
            matches!(s.source, Source::Nearest { .. }),
            "{p}: {}",
            s.source
        );
        let host = ReduceMmaHost { w, x };
        let d = ReduceMmaFamily::upload(&cpu, &p, &host).unwrap();
        let got = family::run::<ReduceMmaFamily, _>(&cpu, &p, s.variant, &d).unwrap();
        let real = check::RealSums::of(&host.w, &host.x).unwrap();
        check::fast_reduce(&got[0], &real)
            .unwrap_or_else(|e| panic!("{p}: {} ({}): {e}", s.variant, s.source));
        early += usize::from(s.variant.early_words);
        if s.variant.x_f16 {
            host_f16 += 1;
            let converting = MmaVariant {
                x_f16: false,
                ..s.variant
            };
            let want = family::run::<ReduceMmaFamily, _>(&cpu, &p, converting, &d).unwrap();
            assert!(got[0].bits_eq(&want[0]), "{p}: {}", s.variant);
        }
    }
    assert!(
        host_f16 >= FAST_CASES.len() - 1,
        "{host_f16} of {}",
        FAST_CASES.len()
    );
    // The M = 16 choices load their first code words before the staging.
    assert!(early >= 1, "no choice took early words");
}

/// A field of a winner, edited: set to a number (in range or not) or another type, or
/// removed.
#[derive(Clone, Debug)]
enum Edit {
    Number(i64),
    Text,
    Removed,
}

fn edit() -> impl proptest::strategy::Strategy<Value = Edit> {
    use proptest::prelude::*;
    prop_oneof![
        (0i64..=40).prop_map(Edit::Number),
        prop::sample::select(vec![-1, 255, 1 << 20, i64::MAX]).prop_map(Edit::Number),
        Just(Edit::Text),
        Just(Edit::Removed),
    ]
}

/// Edit one field of a winner (`field` picks which).
fn apply(winner: &mut toml::Table, field: proptest::sample::Index, edit: Edit) {
    let name = field
        .get(&winner.keys().cloned().collect::<Vec<_>>())
        .clone();
    match edit {
        Edit::Number(n) => winner.insert(name, toml::Value::Integer(n)),
        Edit::Text => winner.insert(name, toml::Value::String("edited".into())),
        Edit::Removed => winner.remove(&name),
    };
}

/// The shipped H200 table's choice for `p`, with the winner it chooses edited by `edit`,
/// fitted to the CPU's limits. A winner the family cannot read refuses the edited table,
/// with a warning naming it.
fn edited_choice<F: Family>(
    cpu: &CpuBackend,
    p: &F::Problem,
    tier: Tier,
    edit: impl FnOnce(&mut toml::Table),
) -> Selection<F::Variant> {
    use trellis::tune::Table;
    let (_, text) = Selector::embedded()
        .iter()
        .find(|(name, _)| *name == "nvidia-h200.toml")
        .expect("the H200 table is embedded");
    let mut table = Table::parse(text).unwrap();
    let mut shipped = Selector::empty();
    shipped.add_table("nvidia-h200.toml", table.clone());
    let Source::Nearest { key, shape, .. } =
        shipped.select::<F>("cuda", "nvidia-h200", p, tier).source
    else {
        panic!("{p}: every case has a table entry")
    };
    let entry = table
        .entries
        .iter_mut()
        .find(|e| e.family == F::NAME && e.key().unwrap().to_string() == key && e.shape == shape)
        .expect("the chosen entry is in the table");
    edit(&mut entry.winner);
    let mut edited = Selector::empty();
    edited.add_text("edited.toml", &table.to_toml());
    for w in &edited.warnings {
        assert!(w.starts_with("edited.toml: ignored: "), "{w}");
    }
    h200_choice::<F>(&edited, cpu, p, tier)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

    /// The shipped H200 table with one field of the exact winner chosen for a case
    /// edited (a corrupt or hand-edited table): the selector refuses the table with a
    /// warning, gives way to the default or the runner-up with a reason, or takes the
    /// edited winner; whatever it hands out fits (`fit`), so it runs, and on the CPU
    /// gives SPEC 5's bits. Never a panic, never other bits.
    #[test]
    fn an_edited_winner_keeps_the_bits_or_is_refused(
        case in proptest::sample::select(CASES.to_vec()),
        field in proptest::prelude::any::<proptest::sample::Index>(),
        edit in edit(),
    ) {
        let cpu = CpuBackend::new().unwrap();
        let (w, x) = case_data(&case, 7);
        let p = ops::reduce_problem(&w, &x).unwrap();
        let s = edited_choice::<ReduceFamily>(&cpu, &p, Tier::Exact, |w| apply(w, field, edit));
        let got = ops::matvec_with(&cpu, &w, &x, s.variant)
            .unwrap_or_else(|e| panic!("{p}: {} ({}): {e}", s.variant, s.source));
        proptest::prop_assert!(
            got.bits_eq(&reference::reduce(&w, &x).unwrap()),
            "{}: {} ({})", p, s.variant, s.source
        );
    }

    /// The same for the fast tier's matrix-unit winners (more fields, more ways not to
    /// fit): what the selector hands out runs and meets SPEC 7.
    #[test]
    fn an_edited_fast_winner_meets_spec7_or_is_refused(
        case in proptest::sample::select(FAST_CASES.to_vec()),
        field in proptest::prelude::any::<proptest::sample::Index>(),
        edit in edit(),
    ) {
        use trellis::families::reduce_mma::{ReduceMmaFamily, ReduceMmaHost};
        use trellis::family;
        let cpu = CpuBackend::new().unwrap();
        let (w, x) = case_data(&case, 9);
        let p = ReduceMmaFamily::problem_of(&w, &x).unwrap();
        let s = edited_choice::<ReduceMmaFamily>(&cpu, &p, Tier::Fast, |w| apply(w, field, edit));
        let host = ReduceMmaHost { w, x };
        let d = ReduceMmaFamily::upload(&cpu, &p, &host).unwrap();
        let got = family::run::<ReduceMmaFamily, _>(&cpu, &p, s.variant, &d)
            .unwrap_or_else(|e| panic!("{p}: {} ({}): {e}", s.variant, s.source));
        let real = check::RealSums::of(&host.w, &host.x).unwrap();
        let checked = check::fast_reduce(&got[0], &real);
        proptest::prop_assert!(checked.is_ok(), "{}: {} ({}): {:?}", p, s.variant, s.source, checked);
    }
}

/// The property tests above pass whether an edit is taken or refused; here one that fits
/// is taken: the winner's rows per simdgroup set to 1 (every shape fits it) is what the
/// selector hands out, from the edited table, and it keeps SPEC 5's bits.
#[test]
fn an_edited_winner_that_fits_is_the_one_chosen() {
    let cpu = CpuBackend::new().unwrap();
    let (w, x) = case_data(&CASES[0], 7);
    let p = ops::reduce_problem(&w, &x).unwrap();
    let s = edited_choice::<ReduceFamily>(&cpu, &p, Tier::Exact, |w| {
        w.insert("rows_per_simd".into(), toml::Value::Integer(1));
    });
    assert_eq!(s.variant.rows_per_simd, 1, "{}", s.source);
    assert!(
        matches!(&s.source, Source::Nearest { table, .. } if table == "edited.toml"),
        "{}",
        s.source
    );
    let got = ops::matvec_with(&cpu, &w, &x, s.variant).unwrap();
    assert!(
        got.bits_eq(&reference::reduce(&w, &x).unwrap()),
        "{}",
        s.variant
    );
}

/// The selector memoizes its choices; a table added later is still read: the choice
/// made before it is not kept, and the memoized choice is the one the tables give.
#[test]
fn a_table_added_after_a_choice_is_read() {
    use trellis::families::reduce::ReduceProblem;
    let g = Geometry::new(17408, 5120, 256, 3, 12, Code::OneMad).unwrap();
    let p = ReduceProblem {
        geometry: g,
        scale: trellis::ScaleDType::F16,
        act: DType::Bf16,
        m: 1,
    };
    let mut s = Selector::empty();
    let before = s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact);
    assert!(
        matches!(before.source, Source::Default { .. }),
        "{before:?}"
    );
    assert_eq!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact),
        before
    );
    let (_, text) = Selector::embedded()
        .iter()
        .find(|(name, _)| *name == "nvidia-h200.toml")
        .expect("the H200 table is embedded");
    s.add_text("nvidia-h200.toml", text);
    let after = s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact);
    assert!(matches!(after.source, Source::Table { .. }), "{after:?}");
    assert_ne!(after.variant, before.variant);
    // Memoized, and a clone (which starts its own memo) chooses the same.
    assert_eq!(
        s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact),
        after
    );
    let clone = s.clone();
    assert_eq!(
        clone.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact),
        after
    );
    // Another device, tier or problem is its own choice.
    let fast = s.select::<trellis::families::reduce_mma::ReduceMmaFamily>(
        "cuda",
        "nvidia-h200",
        &p,
        Tier::Fast,
    );
    assert!(matches!(fast.source, Source::Table { .. }), "{fast:?}");
    let other = s.select::<ReduceFamily>("cuda", "amd-mi300", &p, Tier::Exact);
    assert!(matches!(other.source, Source::Default { .. }), "{other:?}");
}
