#!/bin/bash
# The forty-eighth session's first device call, on the build of 202beaf (HEAD at the
# session's start): the GPU tests, the CUDA verify of the quick catalog and the vectors,
# random facade problems, the independent checker on cuda, then the goal key (17408 x
# 5120 k 3 M 1, both tiers' rows) against cuBLAS in the same run, as often as time
# allows. Outputs tarred into $OUT/checks.tgz (a call brings back few files).
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
verify_random $C ${N_RANDOM:-100} ${SEED:-20261448}
spec_check $C ${N_CHECK:-24} 48 120
tar czf "$OUT/checks.tgz" -C /tmp checks
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-560} - ($(date +%s) - T0) ))
  [ $LEFT -lt 50 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k3-$i.md" > /dev/null 2> "$OUT/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$OUT/bench-k3-$i.err" | head -4
done
