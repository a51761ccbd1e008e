#!/bin/bash
# Fifty-seventh session, call 1: the fifty-sixth session's call2.sh, owed (its starts were
# refused). Carry [".device", ".vectors"]. The build of the prescale kernel's
# compile-time group size (`prescale-v3.patch`, applied). The GPU tests first (the new
# any-width prescale test in `cuda_launch`); the prescale designs (`../session56/
# prescale_bench.cu`: alone, and what each adds before a 20 us kernel); then, on an H200,
# the full bench of both presets with the fast rows also timed after their prescale
# kernel (`harness::bench_after`): the shipped report's run. On an H100 only Qwen3-14B at
# M 1 and 16. The facade's fast rows and the gate/up parts test where time is left.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
left() { echo $(( ${CAP:-585} - ($(date +%s) - T0) )); }
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "test result|panicked" $C/lib.txt
gpu_tests $C 60 cuda_launch cuda_threads
(cd prototypes/session56 && timeout 60 nvcc -O3 -arch=sm_90 -std=c++17 prescale_bench.cu -o /tmp/prescale_bench) \
  && timeout 40 /tmp/prescale_bench > $OUT/prescale-bench.txt 2>&1
echo "prescale bench rc=$? $(since)"; grep -E "DIFFER|in-stream|added" $OUT/prescale-bench.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  RUNS="qwen3-14b:1,2,4,8,16 llama-3-8b:1,2,4,8,16"
else
  RUNS="qwen3-14b:1,16"
fi
for R in $RUNS; do
  P=${R%%:*}; M=${R#*:}; L=$(left)
  [ $L -lt 60 ] && { echo "bench $P skipped: $L s left"; continue; }
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=$M timeout $L $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -3
done
L=$(left)
if [ $L -gt 60 ]; then
  TRELLIS_BENCH_BACKEND=cuda timeout $((L - 25)) $D/facade --bench "prescale-then|fast/kernel|device-into" \
    --warm-up-time 0.5 --measurement-time 1.5 > $OUT/facade-bench.txt 2>&1
  echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
fi
[ $(left) -gt 20 ] && gpu_tests $C 20 gate_up_parts
echo "done $(since)"
