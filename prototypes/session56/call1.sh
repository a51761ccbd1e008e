#!/bin/bash
# Fifty-sixth session, call 1. Carry [".device", ".vectors"].
# The GPU tests (the build of this session's prescale kernel: one read of a sample into
# registers, two-level reductions; and the fifty-fifth session's last changes: the CUBIN
# cache owns the architecture's name, the backend's drop), the prescale kernel's designs
# in the stream (`prescale_bench.cu`: each checked bit for bit against the shipped one
# first), the facade bench rows for the fast device call's GPU part, the xtask bench's
# new prescale columns at one key, random facade problems, and the fast device call's
# timeline where nsys is.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "^test |test result|panicked" $C/lib.txt
gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
(cd prototypes/session56 && timeout 120 nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o /tmp/prescale_bench) \
  && timeout 60 /tmp/prescale_bench > $OUT/prescale-bench.txt 2>&1
echo "prescale bench rc=$? $(since)"; cat $OUT/prescale-bench.txt
TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/facade --bench 'fast/|exact/kernel|device-into|prescale' \
  --warm-up-time 1 --measurement-time 2 > $OUT/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
# The bench's new prescale columns, one key's rows (k 2, M 1 and 16, Qwen3-14B).
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_K=2 TRELLIS_BENCH_M=1,16 timeout 150 $D/xtask bench \
  --table tuning/nvidia-h200.toml --out $OUT/bench-prescale.md > $OUT/bench-prescale.log 2> $OUT/bench-prescale.err
echo "bench rc=$? $(since)"; grep "^| " $OUT/bench-prescale.md | cut -d'|' -f2-6,10,11,15,16
verify_random $C 30 20261556
ls /usr/local/cuda/bin 2>/dev/null | tr '\n' ' '; echo
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  for R in fast/resident-matvec-device-into exact/resident-matvec-device-into; do
    N=$(echo $R | tr / -)
    TRELLIS_BENCH_BACKEND=cuda timeout 60 $NSYS profile --trace=cuda -o /tmp/$N --force-overwrite true \
      $D/facade --bench "cuda/17408x5120/$R\$" --warm-up-time 0.2 --measurement-time 0.3 > /tmp/$N.log 2>&1
    echo "nsys $R rc=$? $(since)"
    timeout 60 $NSYS stats --report cuda_api_trace --report cuda_gpu_trace --format csv --output /tmp/$N /tmp/$N.nsys-rep > /dev/null 2>&1
    for f in /tmp/${N}_*.csv; do tail -400 $f > $OUT/$(basename $f); done
  done
  ls $OUT
fi
