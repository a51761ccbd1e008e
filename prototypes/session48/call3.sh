#!/bin/bash
# The forty-eighth session's third device call: the fast tier's facade uploads only the
# form of x its variant reads (on top of call2's changes): the GPU tests, random facade
# problems, then the facade bench (`benches/facade.rs`: `Resident::matvec` against its
# kernel alone, both tiers, at the goal key, and the backend's own steps: upload x,
# allocate y, download y). Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_random $C ${N_RANDOM:-100} ${SEED:-20261450}
facade_bench $C
tar czf "$OUT/checks.tgz" -C /tmp checks
