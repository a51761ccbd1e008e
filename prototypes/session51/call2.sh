#!/bin/bash
# The fifty-first session's second device call: the GPU tests on the build after the
# review's mends and the split of `ops`, then the facade bench with the fast tier's
# f16-x rows (no flags read back) beside the bf16 ones, to measure what the flags'
# round trip costs. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/facade --bench --warm-up-time 1 --measurement-time 2 > $C/facade-bench.txt 2>&1
echo "facade rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
