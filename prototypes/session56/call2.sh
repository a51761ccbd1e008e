#!/bin/bash
# Fifty-sixth session, call 2 (cut to the device time left). Carry [".device", ".vectors"].
# Apply `prototypes/next/prescale-v3.patch` and rebuild first. The prescale kernel with its
# group size at compile time (v3) on
# the GPU tests; its designs again, now also as what each adds to a stream before a
# 20 us kernel (`prescale_bench.cu`); the bench with the prescale timed before each fast
# launch (`harness::bench_after`) at Qwen3-14B M 16 and M 1 (k 2, 3); the facade's
# fast rows and the gate/up parts test where time is left.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
left() { echo $(( ${CAP:-240} - ($(date +%s) - T0) )); }
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "test result|panicked" $C/lib.txt
gpu_tests $C 60 cuda_launch cuda_threads
(cd prototypes/session56 && timeout 60 nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o /tmp/prescale_bench) \
  && timeout 40 /tmp/prescale_bench > $OUT/prescale-bench.txt 2>&1
echo "prescale bench rc=$? $(since)"; grep -E "DIFFER|in-stream|added" $OUT/prescale-bench.txt
for MK in "16 2,3,4" "1 2,3"; do
  set -- $MK; L=$(left)
  [ $L -lt 40 ] && { echo "bench M $1 skipped: $L s left"; continue; }
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=$1 TRELLIS_BENCH_K=$2 timeout $L $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-m$1.md" > "$OUT/bench-m$1.log" 2> "$OUT/bench-m$1.err"
  echo "bench M $1 rc=$? $(since)"; grep -E "error" "$OUT/bench-m$1.err" | tail -3
  grep -E "fast" "$OUT/bench-m$1.err"
done
L=$(left)
if [ $L -gt 45 ]; then
  TRELLIS_BENCH_BACKEND=cuda timeout $((L - 20)) $D/facade --bench "prescale-then|fast/kernel|device-into" \
    --warm-up-time 0.5 --measurement-time 1.5 > $OUT/facade-bench.txt 2>&1
  echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
fi
[ $(left) -gt 20 ] && gpu_tests $C 20 gate_up_parts
