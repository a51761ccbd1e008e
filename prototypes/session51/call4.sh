#!/bin/bash
# The fifty-first session's fourth device call: the fast device call's flags read back
# while the matrix kernel is queued behind them (`Backend::download_later`). The GPU
# tests (the fast device path and CUDA's `download_later` in `cuda_launch`; four
# threads in `cuda_threads`), then the facade bench's device rows of the build before
# (`facade-old`, 8d18b7c) and after, twice each, alternating, on this machine.
# Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
for i in 1 2; do
  for b in facade-old facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 100 $D/$b --bench --warm-up-time 1 --measurement-time 2 'device|kernel|prescale' > $C/$b-bench-$i.txt 2>&1
    echo "$b $i rc=$? $(since)"; grep -E "^cuda|time:" $C/$b-bench-$i.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
