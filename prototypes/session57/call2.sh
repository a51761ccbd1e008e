#!/bin/bash
# Fifty-seventh session, calls 2 and 3. Carry [".device", ".vectors"]. The fused prescale's
# prototype (`fused/`: the prescale kernel then the shipped kernel, against the fused
# forms, at 17408 x 5120 and 5120 x 17408 k 2 M 1); then, on an H200, the full bench of
# both presets (the shipped report's run, with the prescale columns).
. prototypes/device.sh
left() { echo $(( ${CAP:-585} - ($(date +%s) - T0) )); }
cd prototypes/session57/fused
python3 fused_gen.py > /dev/null
g++ -O2 -std=c++17 fused_bench.cpp -ldl -o /tmp/fused_bench 2> $OUT/fused-build.txt || cp ../../../.device/fused_bench /tmp/fused_bench
timeout 120 /tmp/fused_bench > $OUT/fused-bench.txt 2>&1
echo "fused bench rc=$? $(since)"; cat $OUT/fused-bench.txt
cd ../../..
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for P in qwen3-14b llama-3-8b; do
    L=$(left); [ $L -lt 60 ] && { echo "bench $P skipped: $L s left"; continue; }
    TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout $L $D/xtask bench \
      --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
    echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -3
  done
fi
echo "done $(since)"
