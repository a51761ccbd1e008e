#!/bin/bash
# The fiftieth session's second device call: uploads back on the pageable path (call1
# measured the page-locked slots slower: 12.1 against 8.4 us for x), and the fast device
# path reusing its prescale's outputs: the GPU tests of cuda_launch and cuda_threads,
# then the facade bench before the session (`facade-old`, 7fb09f5) and now.
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
for b in facade-old facade; do
  TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/$b --bench --warm-up-time 1 --measurement-time 2 > $C/$b-bench.txt 2>&1
  echo "$b rc=$? $(since)"; grep -E "^cuda|time:" $C/$b-bench.txt
done
tar czf "$OUT/checks.tgz" -C /tmp checks
