#!/bin/bash
# The forty-fourth session's bench call: the goal key (17408 x 5120 k 3 M 1, both tiers'
# rows of that shape, k and M) three times on this session's build, against cuBLAS in the
# same run: a regression check of the launch-path changes (nothing in a kernel changed)
# and three more runs for the goal key's table. Carry [".device"].
. prototypes/device.sh
# First the GPU tests of the facade's upload (borrowed or shared since 3b7b98f).
gpu_tests "$OUT" 100 cuda_launch cuda_threads
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-150} - ($(date +%s) - T0) ))
  [ $LEFT -lt 40 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k3-$i.md" > /dev/null 2> "$OUT/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$OUT/bench-k3-$i.err" | head -4
done
