#!/bin/bash
# The thirty-sixth session's bench call (AR): a full bench of both presets on the shipped
# table (M 1 / 2 / 4 / 8, and M 16 fast rows; cuBLAS and the seed's structure in the same
# run), for a `tuning/reports/nvidia-h200-bench.md` of the table as it now stands (the
# thirty-fifth session re-tuned 216 `reduce_mma` entries after call AE).
# Carry [".device", ".vectors"].
. prototypes/device.sh
for P in qwen3-14b llama-3-8b; do
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout ${BENCH_S:-280} $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -5
done
