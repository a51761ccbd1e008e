#!/bin/bash
# The forty-fifth session's device call, on the build of 3aab71b (the CUDA test of a
# shared resident (no kernel unit or table changed since the thirty-fifth session): the
# GPU tests CI cannot run (cuda_threads now includes `Resident::shared` from spawned
# threads), the checks a reader re-runs (`../session31/checks.sh`: CUDA verify of the
# quick catalog and the vectors, random facade problems, the independent checker; seed
# 20261206), then the goal key (17408 x 5120 k 3 M 1) against cuBLAS while time is left.
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
gpu_tests "$OUT/checks" 150 cuda_threads cuda_launch gate_up_parts
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=20261206 CALL_S=${CHECK_S:-240} N_CHECK=${N_CHECK:-20} \
  bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-540} - ($(date +%s) - T0) ))
  [ $LEFT -lt 45 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k3-$i.md" > /dev/null 2> "$OUT/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$OUT/bench-k3-$i.err" | head -4
done
