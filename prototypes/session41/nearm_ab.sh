#!/bin/bash
# The forty-first session's last device call: which tuned M should stand in for an M no
# table has. `.device/new.txz` (A): the nearest in octaves, the larger on a tie (exact M 5
# takes M 4's entry, fast M 10 and 12 M 8's); `.device/b.txz` (B): the nearest larger M
# (exact M 5 takes M 8's, fast M 10 and 12 M 16's, or the default where neither its
# winner nor its runner-up is valid there). The Qwen3-14B bench at M 5, 10, 12 with A
# then B, same lease. Carry [".device"].
. prototypes/device.sh
for a in new b; do tar xJf .device/$a.txz -C .device; done
chmod +x .device/new/* .device/b/*
for build in new b; do
  LEFT=$(( ${CALL_S:-400} - ($(date +%s) - T0) ))
  [ $LEFT -lt 60 ] && { echo "bench $build skipped: $LEFT s left"; continue; }
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=5,10,12 timeout $LEFT .device/$build/xtask bench \
    --out "$OUT/bench-$build.md" > "$OUT/bench-$build.log" 2> "$OUT/bench-$build.err"
  echo "bench $build rc=$? $(since)"; grep -E "error" "$OUT/bench-$build.err" | tail -3
done
