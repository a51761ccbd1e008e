#!/bin/bash
# The forty-ninth session's first device call: the build of the session's start (the
# forty-eighth's last code) with activations on the device (`Resident::matvec_device`,
# its GPU test in cuda_launch and its facade bench row) and two more facade bench parts:
# the GPU tests, the CUDA
# verify of the quick catalog and the vectors and 40 random facade problems (the
# staging's final form, never run on a GPU before), then the facade
# bench in full (its parts break the fast tier's cost down). Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
verify_random $C 40 20261449
facade_bench $C
tar czf "$OUT/checks.tgz" -C /tmp checks
