#!/bin/bash
# The fiftieth session's first device call: the CUDA backend's uploads through its
# page-locked staging (the slack zeroed there, one asynchronous copy) and cudarc's
# per-buffer events off, and the selector's memo: the GPU tests and the CUDA verify
# (every input through the new upload), then the facade bench of the build before
# (`facade-old`, 7fb09f5) and after, on the same machine; the fast tier on the device
# (prescale kernel) in cuda_launch and the facade bench.
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
verify_random $C 40 20261450
for b in facade-old facade; do
  TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/$b --bench --warm-up-time 1 --measurement-time 2 > $C/$b-bench.txt 2>&1
  echo "$b rc=$? $(since)"; grep -E "^cuda|time:" $C/$b-bench.txt
  cp $C/$b-bench.txt $C/$b-bench-$(date +%s).txt
done
tar czf "$OUT/checks.tgz" -C /tmp checks
