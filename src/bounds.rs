//! Whether a tuned winner sits at a bound of the candidate space it was chosen from
//! (issue 10): a winner at the largest (or smallest) offered value of an ordered choice
//! says the space may be too small there; widen it and tune again.

use crate::kernels::Variant;

/// The ordered choices of a [`Variant`]: name, value.
fn ordered(v: &Variant) -> [(&'static str, u32); 2] {
    [
        ("rows_per_group", v.rows_per_group),
        ("rows_per_simd", v.rows_per_simd),
    ]
}

/// `Some(why)` when `winner` takes the largest offered value of an ordered choice, or
/// the smallest when that is above 1, among the candidates of `space` that agree with
/// it in every other field; `None` when it is inside the space along every choice (or
/// the space offers one value only).
pub fn at_bound(winner: &Variant, space: &[Variant]) -> Option<String> {
    let mut why = Vec::new();
    for (d, (name, value)) in ordered(winner).into_iter().enumerate() {
        let mut line: Vec<u32> = space
            .iter()
            .filter(|c| {
                let (co, wo) = (ordered(c), ordered(winner));
                let others_agree = (0..co.len()).all(|i| i == d || co[i].1 == wo[i].1);
                let rest = Variant {
                    rows_per_group: winner.rows_per_group,
                    rows_per_simd: winner.rows_per_simd,
                    ..**c
                };
                others_agree && rest == *winner
            })
            .map(|c| ordered(c)[d].1)
            .collect();
        line.sort_unstable();
        line.dedup();
        if line.len() < 2 || !line.contains(&value) {
            continue;
        }
        let offered = line
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        if Some(&value) == line.last() {
            why.push(format!(
                "{name} = {value} is the largest offered ({offered})"
            ));
        } else if Some(&value) == line.first() && value > 1 {
            why.push(format!(
                "{name} = {value} is the smallest offered ({offered})"
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::variants;
    use crate::kernels::{Representation, Tier, XStage};

    #[test]
    fn reports_the_largest_offered_value() {
        let space = variants(Tier::Exact, 1, false);
        let w = Variant {
            rows_per_group: 16,
            x_stage: XStage::SharedF32,
            rows_per_simd: 1,
            ..Variant::default()
        };
        let why = at_bound(&w, &space).expect("16 is the edge");
        assert!(
            why.contains("rows_per_group = 16 is the largest offered (4, 16)"),
            "{why}"
        );
        let w = Variant {
            x_stage: XStage::Registers,
            rows_per_simd: 4,
            rows_per_group: 4,
            ..Variant::default()
        };
        let why = at_bound(&w, &space).expect("4 rows per simdgroup is the edge");
        assert!(
            why.contains("rows_per_simd = 4 is the largest offered (1, 2, 4)"),
            "{why}"
        );
        assert!(
            !why.contains("rows_per_group"),
            "4 is inside (2, 4, 8): {why}"
        );
        let w = Variant {
            rows_per_group: 2,
            ..w
        };
        let why = at_bound(&w, &space).unwrap();
        assert!(
            why.contains("rows_per_group = 2 is the smallest offered (2, 4, 8)"),
            "{why}"
        );
    }

    #[test]
    fn inside_the_space_is_not_a_bound() {
        let space = variants(Tier::Exact, 1, false);
        let w = Variant {
            repr: Representation::SharedTable,
            x_stage: XStage::Registers,
            rows_per_simd: 2,
            rows_per_group: 8,
            ..Variant::default()
        };
        // rows_per_group 8 is the largest of (2, 4, 8) for registers: a bound.
        assert!(at_bound(&w, &space).unwrap().contains("rows_per_group = 8"));
        let space: Vec<Variant> = [1, 2, 4]
            .iter()
            .map(|&r| Variant {
                rows_per_simd: r,
                ..w
            })
            .collect();
        assert_eq!(at_bound(&w, &space), None);
        // A space of one value along every choice has no bound.
        assert_eq!(at_bound(&w, &[w]), None);
    }
}
