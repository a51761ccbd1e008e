#!/bin/bash
# The forty-eighth session's fourth device call, on the build whose facade does less host
# work a call (x checked by bits, encode and decode vectorized, the fast tier's one form
# of x): the GPU tests, the CUDA verify of the quick catalog and the vectors, random
# facade problems, the independent checker through the CLI (its files go through the
# new encode and decode), then the facade bench. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
verify_random $C ${N_RANDOM:-100} ${SEED:-20261451}
spec_check $C ${N_CHECK:-16} 4848 100
facade_bench $C
tar czf "$OUT/checks.tgz" -C /tmp checks
