#!/bin/bash
# The forty-first session's third device call: `.device/bins.txz` the first call's build
# (fast M 9-15 took the built-in default), `.device/new.txz` the last (the nearest tuned
# M's entry whose winner or runner-up is valid at the problem's M). 80 random facade
# problems on the new build (seed 20261543), then the Qwen3-14B bench at fast M 10, 12,
# 14 with each build in turn (exact rows stop at M 8), same lease.
# Carry [".device"].
. prototypes/device.sh
tar xJf .device/new.txz -C .device && chmod +x .device/new/*
N=.device/new
mkdir -p "$OUT/r"
timeout 150 $N/xtask verify --backend cuda --random 80 --seed 20261543 --out "$OUT/r/random.txt" > /dev/null 2> "$OUT/r/random_err.txt"
echo "random rc=$? $(since)"; tail -2 "$OUT/r/random.txt"
for build in old new; do
  X=$D/xtask; [ $build = new ] && X=$N/xtask
  LEFT=$(( ${CALL_S:-420} - ($(date +%s) - T0) ))
  [ $LEFT -lt 60 ] && { echo "bench $build skipped: $LEFT s left"; continue; }
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=10,12,14 timeout $LEFT $X bench \
    --out "$OUT/r/bench-$build.md" > "$OUT/r/bench-$build.log" 2> "$OUT/r/bench-$build.err"
  echo "bench $build rc=$? $(since)"; grep -E "error" "$OUT/r/bench-$build.err" | tail -3
done
(cd "$OUT" && tar czf all.tgz r && rm -rf r)
