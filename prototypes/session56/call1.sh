#!/bin/bash
# Fifty-sixth session, call 1. Carry [".device", ".vectors"].
# The GPU tests owed by the fifty-fifth session's last build (the CUBIN cache owns the
# architecture's name; the backend's drop), the facade bench rows that session wrote for
# the fast device call's GPU part, and the prescale kernel's designs in the stream
# (`prescale_bench.cu`: each checked bit for bit against the shipped kernel first).
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "^test |test result|panicked" $C/lib.txt
gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
verify_random $C 30 20261556
(cd prototypes/session56 && timeout 120 nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o /tmp/prescale_bench) \
  && timeout 60 /tmp/prescale_bench > $OUT/prescale-bench.txt 2>&1
echo "prescale bench rc=$? $(since)"; cat $OUT/prescale-bench.txt
TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/facade --bench 'fast/|exact/kernel|device-into|prescale' \
  --warm-up-time 1 --measurement-time 2 > $OUT/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:|Benchmarking .*: Analyzing" $OUT/facade-bench.txt | grep -v Analyzing
