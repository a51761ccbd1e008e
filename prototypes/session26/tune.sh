#!/bin/bash
# One device call: re-tune the stale `reduce_mma` keys (every M by default: the split
# arrival's fence by one thread changed every split-K unit, so every entry is stale),
# resuming the shipped table (current keys are kept), with the tuner compiling the next
# problem's candidates while it measures this one's (`Backend::ahead_compiler`); then, if
# the tune left time (BENCH_BEFORE seconds into the call), bench the Qwen3-14B keys at
# BENCH_M on that table. The trace holds every candidate's time. Carry [".device"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
nproc
timeout ${TUNE_S:-570} $D/xtask tune --backend cuda --tier fast --family reduce_mma \
  --shape qwen3-14b,llama-3-8b --l 12,16 --m ${M:-16,8,4,2,1} --k 2,3,4 --code 1mad,3inst,mcg \
  --budget ${BUDGET:-540s} --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? $(since)"; grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
cp tuning/nvidia-h200.toml "$OUT/table.toml"
[ $(( $(date +%s) - T0 )) -lt ${BENCH_BEFORE:-0} ] || { echo "no bench $(since)"; exit 0; }
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=${BENCH_M:-1,16} timeout ${BENCH_S:-200} $D/xtask bench \
  --table tuning/nvidia-h200.toml --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
