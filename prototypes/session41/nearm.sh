#!/bin/bash
# The forty-first session's second device call. `.device/bins.txz` is the build of the
# first call (the selector before the nearest-M rule: M 3, 5, 6, 7 took the built-in
# default); `.device/new.txz` this session's last build (they take the nearest tuned M's
# entry). On the new build: the GPU tests (the facade's batches and resident matrices on
# CUDA) and 80 random facade problems (seed 20261542; M 3, 5, 6, 7 among them now run
# nearest-M choices). Then the Qwen3-14B bench at M 3, 5, 6, 7 with both builds in turn:
# the built-in default against the nearest M's winner, same lease.
# Carry [".device", ".vectors"].
. prototypes/device.sh
tar xJf .device/new.txz -C .device && chmod +x .device/new/*
N=.device/new
mkdir -p "$OUT/r"
for t in gate_up_parts cuda_launch cuda_threads; do
  timeout 120 $N/$t --ignored --test-threads 1 > "$OUT/r/$t.txt" 2>&1
  echo "$t rc=$? $(since)"; grep -E "test result|panicked" "$OUT/r/$t.txt" | head -4
done
timeout 150 $N/xtask verify --backend cuda --random 80 --seed 20261542 --out "$OUT/r/random.txt" > /dev/null 2> "$OUT/r/random_err.txt"
echo "random rc=$? $(since)"; tail -2 "$OUT/r/random.txt"
for build in old new; do
  X=$D/xtask; [ $build = new ] && X=$N/xtask
  LEFT=$(( ${CALL_S:-585} - ($(date +%s) - T0) ))
  [ $LEFT -lt 60 ] && { echo "bench $build skipped: $LEFT s left"; continue; }
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=3,5,6,7 timeout $LEFT $X bench \
    --out "$OUT/r/bench-$build.md" > "$OUT/r/bench-$build.log" 2> "$OUT/r/bench-$build.err"
  echo "bench $build rc=$? $(since)"; grep -E "error" "$OUT/r/bench-$build.err" | tail -3
done
(cd "$OUT" && tar czf all.tgz r && rm -rf r)
