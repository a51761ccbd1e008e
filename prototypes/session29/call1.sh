#!/bin/bash
# The twenty-ninth session's first device call: a full bench of both presets on the
# final table (M 1 / 2 / 4 / 8, and M 16 fast rows; cuBLAS in the same run), for a fresh
# `tuning/reports/nvidia-h200-bench.md`, then the independent checker through the CLI on
# cuda with what is left of CALL_S. Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
for P in qwen3-14b llama-3-8b; do
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout ${BENCH_S:-250} $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -5
done
LEFT=$(( ${CALL_S:-570} - ($(date +%s) - T0) ))
timeout $LEFT python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n 60 --seed 20261429 --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8
