#!/bin/bash
# One device call of the twenty-seventh session: re-tune the stale fast entries
# (`row-offset.patch` changed every unit of both matrix-unit families; `reduce_mma` at
# M = 16 gained early-words twins and lost its unsplit staged candidates), resuming the
# shipped table (keys already current are kept), then, if the tune left time (BENCH_BEFORE
# seconds into the call), bench the Qwen3-14B keys at BENCH_M and run the checks on cuda.
# Carry [".device", ".vectors"]. Env: FAMILY, M, TUNE_S, BUDGET, BENCH_BEFORE, BENCH_M,
# BENCH_S, CHECKS (1: verify --quick and the independent checker after the bench).
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if [ "${TUNE_S:-560}" -gt 0 ]; then
  timeout ${TUNE_S:-560} $D/xtask tune --backend cuda --tier fast --family ${FAMILY:-reduce_mma,gate_up_mma} \
    --shape qwen3-14b,llama-3-8b --l 12,16 --m ${M:-16,8,4,2,1} --k 2,3,4 --code 1mad,3inst,mcg \
    --budget ${BUDGET:-520s} --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
  echo "tune rc=$? $(since)"; grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
  cp tuning/nvidia-h200.toml "$OUT/table.toml"
fi
[ $(( $(date +%s) - T0 )) -lt ${BENCH_BEFORE:-0} ] || { echo "no bench $(since)"; exit 0; }
if [ "${BENCH_M:-1,16}" != none ]; then
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=${BENCH_M:-1,16} timeout ${BENCH_S:-200} $D/xtask bench \
  --table tuning/nvidia-h200.toml --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
fi
[ "${CHECKS:-0}" = 1 ] || exit 0
timeout ${VERIFY_S:-150} $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" \
  > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -3 "$OUT/verify.txt"
timeout ${SPEC_S:-150} python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_SPEC:-40} --seed ${SEED:-20261327} --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8
