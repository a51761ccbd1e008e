#!/bin/bash
# The forty-eighth session's second device call, on the build with the facade's one
# upload of x a launch and the selector's string filter: the GPU tests, random facade
# problems (the table's choices, interleaved-x winners among them), then the facade
# bench (`benches/facade.rs`: `Resident::matvec` against its kernel alone, both tiers, at
# the goal key). Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_random $C ${N_RANDOM:-100} ${SEED:-20261449}
facade_bench $C
tar czf "$OUT/checks.tgz" -C /tmp checks
