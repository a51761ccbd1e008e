#!/bin/bash
# One device call on the final build and table: the bench of the Qwen3-14B goal keys
# (exact and fast against cuBLAS, M 1 / 4 / 8 / 16), then random fast and exact cases
# through the CLI checked by the independent checker. Carry [".device"].
D=.device/main
chmod +x $D/trellis $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=${BENCH_M:-1,4,8,16} timeout ${BENCH_S:-130} $D/xtask bench \
  --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
timeout ${SPEC_S:-90} python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_SPEC:-40} --seed ${SEED:-20261222} --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8
