#!/bin/bash
# The twenty-eighth session's first device call: a bench of the Qwen3-14B keys at M 1 / 8 /
# 16 on the shipped table (cuBLAS in the same run), then the early-words probe below M 16
# (`../next/early_words_probe.sh`'s tune, with the rest of the call's time).
# Carry [".device"]; .device/ew/xtask is built with `../next/early-words-below-16.patch`.
D=.device/main
chmod +x $D/xtask $D/trellis .device/ew/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,8,16 timeout ${BENCH_S:-330} $D/xtask bench \
  --table tuning/nvidia-h200.toml --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
LEFT=$(( ${CALL_S:-575} - ($(date +%s) - T0) ))
timeout $LEFT .device/ew/xtask tune --fresh --backend cuda --tier fast --family reduce_mma \
  --shape qwen3-14b --l 12 --m 1,4,8 --k 2,3 --code 1mad,3inst --out /tmp/ew.toml \
  --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "probe rc=$? $(since)"
cp /tmp/ew.toml "$OUT/ew.toml" 2>/dev/null
