#!/bin/bash
# The forty-second session's third call, on the build with the tightened SPEC 7 overflow
# rule, random f32 row scales of both signs and full precision, and the no-flush-to-zero
# test (cuda_launch's the_backend_contract_holds): the GPU tests, the checks of
# `../session31/checks.sh` with seed 20261552, and the one bench row that moved in the
# second call (17408 x 5120 k 4 fast M 1), three times.
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
for t in gate_up_parts cuda_launch cuda_threads; do
  timeout 150 $D/$t --ignored --test-threads 1 > "$OUT/checks/$t.txt" 2>&1
  echo "$t rc=$? $(since)"; grep -E "test result|panicked" "$OUT/checks/$t.txt" | head -4
done
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=20261552 CALL_S=${CHECK_S:-300} N_CHECK=${N_CHECK:-30} \
  bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-585} - ($(date +%s) - T0) ))
  [ $LEFT -lt 40 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=4 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k4-$i.md" > /dev/null 2> "$OUT/bench-k4-$i.err"
  echo "bench $i rc=$? $(since)"; grep "k4 M1 fast" "$OUT/bench-k4-$i.err"
done
(cd "$OUT" && tar czf all.tgz checks bench-* 2>/dev/null; rm -rf checks)
