#!/bin/bash
# The third call's new-build bench again, after the bench learnt to fit each choice
# (`../session41/nearm16.sh` failed there at fast k 4 M 12); the old build's half is
# that call's. Carry [".device"].
. prototypes/device.sh
tar xJf .device/new.txz -C .device && chmod +x .device/new/*
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=10,12,14 timeout 300 .device/new/xtask bench \
  --out "$OUT/bench-new.md" > "$OUT/bench-new.log" 2> "$OUT/bench-new.err"
echo "bench new rc=$? $(since)"; grep -E "error" "$OUT/bench-new.err" | tail -3
