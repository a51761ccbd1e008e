//! The matrix-unit vocabulary (`templates/mma.h`, `templates/dialect/*_mma.h`) reaches the
//! fast-tier kernels only: a SIMT kernel's unit, whose hash keys its tuning entries, must
//! not change when that vocabulary does.

use trellis::codegen::{matrix_units, Dialect};
use trellis::family::{Family, FamilyVisitor};
use trellis::kernel::KernelSpec;

/// Every specialization of the quick catalog, of every registered family, on every
/// dialect: the matrix-unit families' units (those some family names its `FAST` twin)
/// hold the whole vocabulary, every other unit none of it.
#[test]
fn only_matrix_unit_kernels_include_the_matrix_unit_vocabulary() {
    struct FastTwins(Vec<&'static str>);
    impl FamilyVisitor for FastTwins {
        fn visit<F: Family>(&mut self) {
            self.0.extend(F::FAST);
        }
    }
    let mut twins = FastTwins(Vec::new());
    trellis::families::for_each(&mut twins);
    assert!(!twins.0.is_empty(), "no family has a matrix-unit twin");

    struct Check {
        twins: Vec<&'static str>,
        units: [usize; 2],
    }
    impl FamilyVisitor for Check {
        fn visit<F: Family>(&mut self) {
            let mma = self.twins.contains(&F::NAME);
            let limits = trellis::backend::nominal_limits("cuda");
            for d in Dialect::ALL {
                let vocabulary = matrix_units(d);
                // A line every dialect's matrix-unit shim defines, and nothing else does.
                let marker = "#define WARP_MMA_F16";
                assert!(
                    vocabulary.contains(marker),
                    "{d}: {marker} not in the vocabulary"
                );
                for (p, vs) in trellis::verify::specializations::<F>(true, &limits) {
                    for v in vs {
                        let unit = F::kernel(&p, v).unit(d).unwrap();
                        let what = format!("{d} {} {p} [{v:?}]", F::NAME);
                        if mma {
                            assert!(unit.contains(&vocabulary), "{what} lacks the vocabulary");
                        } else {
                            assert!(!unit.contains(marker), "{what} has the matrix-unit shim");
                            assert!(!unit.contains("trellis_f16x2_onemad"), "{what} has mma.h");
                        }
                        self.units[mma as usize] += 1;
                    }
                }
            }
        }
    }
    let mut check = Check {
        twins: twins.0,
        units: [0, 0],
    };
    trellis::families::for_each(&mut check);
    eprintln!("units checked (SIMT, matrix-unit): {:?}", check.units);
    assert!(
        check.units.iter().all(|&n| n > 0),
        "units checked (SIMT, matrix-unit): {:?}",
        check.units
    );
}
