//! The matrix-unit vocabulary (`templates/mma.h`, `templates/dialect/*_mma.h`) reaches the
//! fast-tier kernels only: a SIMT kernel's unit, whose hash keys its tuning entries, must
//! not change when that vocabulary does.

use trellis::codegen::{matrix_units, Dialect};
use trellis::families::reduce::ReduceFamily;
use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::family::Family;
use trellis::kernel::KernelSpec;
use trellis::numerics::Tier;

#[test]
fn only_matrix_unit_kernels_include_the_matrix_unit_vocabulary() {
    let simt = ReduceFamily::catalog(true)[0];
    let mma = ReduceMmaFamily::catalog(true)[0];
    for d in Dialect::ALL {
        let vocabulary = matrix_units(d);
        // A line every dialect's matrix-unit shim defines, and nothing else does.
        let marker = "#define WARP_MMA_F16";
        assert!(
            vocabulary.contains(marker),
            "{d}: {marker} not in the vocabulary"
        );
        let s = ReduceFamily::kernel(&simt, ReduceFamily::default_variant(&simt, Tier::Exact));
        let unit = s.unit(d).unwrap();
        assert!(
            !unit.contains(marker),
            "{d}: a SIMT unit has the matrix-unit shim"
        );
        assert!(
            !unit.contains("trellis_f16x2_onemad"),
            "{d}: a SIMT unit has mma.h"
        );
        let f = ReduceMmaFamily::kernel(&mma, ReduceMmaFamily::default_variant(&mma, Tier::Fast));
        let unit = f.unit(d).unwrap();
        assert!(
            unit.contains(&vocabulary),
            "{d}: the mma unit lacks its vocabulary"
        );
    }
}
