#!/bin/bash
# The forty-seventh session's device call: the GPU tests CI cannot run, then the checks a
# reader re-runs (`../session31/checks.sh`: the CUDA verify of the quick catalog and the
# vectors, whose random matrices' f16 scales now take both signs; random facade problems;
# the independent checker through the CLI on cuda, both tiers, whose gate/up cases now
# draw up's block size T on their own in 30 %, which the facade runs unfused), then the
# goal key (17408 x 5120 k 3 M 1) against cuBLAS while time is left.
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
gpu_tests "$OUT/checks" 150 cuda_threads cuda_launch gate_up_parts
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=${SEED:-20261247} CALL_S=${CHECK_S:-330} N_CHECK=${N_CHECK:-60} N_RANDOM=${N_RANDOM:-120} \
  RANDOM_S=150 bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-560} - ($(date +%s) - T0) ))
  [ $LEFT -lt 45 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k3-$i.md" > /dev/null 2> "$OUT/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$OUT/bench-k3-$i.err" | head -4
done
