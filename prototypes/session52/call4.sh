#!/bin/bash
# The fifty-second session's last device call, on its final build (a review's mends:
# the host calls' kept tensors split into inputs and outputs, so a square matrix's x
# never comes back as a y; the fast flagged-not-held bits checked against the host's
# prescale): the GPU tests, random facade problems, the CUDA verify, and the facade
# bench's host-data rows. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; rm -rf $C; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
verify_random $C 40 20261453
verify_quick $C
F='resident-matvec$|resident-gate-up|/kernel$'
TRELLIS_BENCH_BACKEND=cuda timeout 80 $D/facade --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/facade.txt 2>&1
echo "facade rc=$? $(since)"; grep -E "^cuda|time:" $C/facade.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
