#!/bin/bash
# Fifty-seventh session, call 4. Carry [".device", ".vectors"]. The full bench of both
# presets on the shipped table, with the fast rows also timed after their prescale kernel
# (the report's last two columns): on an H200 the shipped report's run, on an H100 a
# report of its own.
. prototypes/device.sh
left() { echo $(( ${CAP:-585} - ($(date +%s) - T0) )); }
for P in qwen3-14b llama-3-8b; do
  L=$(left); [ $L -lt 60 ] && { echo "bench $P skipped: $L s left"; continue; }
  TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout $L $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
  echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -3
done
echo "done $(since)"
