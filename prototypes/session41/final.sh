#!/bin/bash
# The forty-first session's device call, on the build of this session's sources (no
# kernel or table changed; the facade now uploads each matrix once a call, and the GPU
# test a_batch_larger_than_a_launch_runs_as_several is new): the GPU tests CI cannot run
# (`gate_up_parts`, `cuda_launch`, `cuda_threads`), the checks a reader re-runs
# (`../session31/checks.sh`: CUDA verify of the quick catalog and the vectors, random
# facade problems, the independent checker through the CLI; seed 20261541), then a full
# bench of both presets on the shipped table (as `../session40/final.sh`).
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
for t in gate_up_parts cuda_launch cuda_threads; do
  timeout 120 $D/$t --ignored --test-threads 1 > "$OUT/checks/$t.txt" 2>&1
  echo "$t rc=$? $(since)"; grep -E "test result|panicked" "$OUT/checks/$t.txt" | head -4
done
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=20261541 CALL_S=${CHECK_S:-230} N_CHECK=${N_CHECK:-30} \
  bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
for P in qwen3-14b llama-3-8b; do
  LEFT=$(( ${CALL_S:-585} - ($(date +%s) - T0) ))
  [ $LEFT -lt 60 ] && { echo "bench $P skipped: $LEFT s left"; continue; }
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout $LEFT $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -5
done
# run returns only a few files: everything in one archive beside the log.
(cd "$OUT" && tar czf all.tgz checks bench-* && rm -rf checks bench-*)
