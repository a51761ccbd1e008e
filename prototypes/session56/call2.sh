#!/bin/bash
# Fifty-sixth session, call 2. Carry [".device", ".vectors"].
# The prescale kernel's shipped form (the group's thread count at compile time, v3) on
# the GPU tests; its designs again, now also as what each adds to a stream before a
# 20 us kernel (`prescale_bench.cu`); the facade's fast rows; and the bench with the
# prescale timed before each fast launch (`harness::bench_after`), Qwen3-14B then, where
# time is left, Llama-3-8B.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "test result|panicked" $C/lib.txt
gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
(cd prototypes/session56 && timeout 120 nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o /tmp/prescale_bench) \
  && timeout 60 /tmp/prescale_bench > $OUT/prescale-bench.txt 2>&1
echo "prescale bench rc=$? $(since)"; grep -E "DIFFER|in-stream|added" $OUT/prescale-bench.txt
TRELLIS_BENCH_BACKEND=cuda timeout 100 $D/facade --bench "prescale-then|fast/kernel|device-into" \
  --warm-up-time 0.5 --measurement-time 1.5 > $OUT/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
for P in qwen3-14b llama-3-8b; do
  LEFT=$(( ${CAP:-470} - ($(date +%s) - T0) ))
  [ $LEFT -lt 100 ] && { echo "bench $P skipped: $LEFT s left"; continue; }
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout $LEFT $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -3
  grep "^| " "$OUT/bench-$P.md" | grep fast | cut -d'|' -f2-6,10,11,15,16 | head -70
done
