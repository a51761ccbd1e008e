#!/bin/bash
# The fifty-second session's device call, on its build (a resident's calls on host data
# keep their device tensors; the fast tier's host calls prescale on the device), with
# the fifty-first session's facade bench (d98abc0) as `facade_old`: the GPU tests, the
# CUDA verify and random facade problems, the goal key (17408 x 5120 k 3 M 1, both
# tiers, against cuBLAS in the same run) three times, then the facade bench, old and new
# interleaved on the host-data rows. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; rm -rf $C; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
verify_random $C 40 20261452
for i in 1 2 3; do
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout 100 $D/xtask bench --table tuning/nvidia-h200.toml --out "$C/bench-k3-$i.md" > /dev/null 2> "$C/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$C/bench-k3-$i.err" | head -4
done
F='resident-matvec$|resident-gate-up|/kernel$'
TRELLIS_BENCH_BACKEND=cuda timeout 120 $D/facade --bench --warm-up-time 1 --measurement-time 2 > $C/facade-bench.txt 2>&1
echo "facade rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
for r in 1 2; do
  for which in facade_old facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 60 $D/$which --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/$which-$r.txt 2>&1
    echo "$which $r rc=$? $(since)"; grep -E "^cuda|time:" $C/$which-$r.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
