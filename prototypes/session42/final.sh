#!/bin/bash
# The forty-second session's device call, on the build of this session's sources (no
# kernel or table changed; the backends now zero the outputs a kernel needs zeroed when
# they bind them, check that a compiled kernel is its launch's, bind CUDA's context
# before a launch and key the CUBIN cache on NVRTC's version; tables' keys are parsed):
# the GPU tests CI cannot run (new: cuda_launch's the_backend_contract_holds and
# a_bound_kernel_runs_on_another_thread), the checks a reader re-runs
# (`../session31/checks.sh`: CUDA verify of the quick catalog and the vectors, random
# facade problems, the independent checker through the CLI; seed 20261551), then the
# Qwen3-14B rows of the bench at M 1 and 4 with the shipped table.
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
for t in gate_up_parts cuda_launch cuda_threads; do
  timeout 150 $D/$t --ignored --test-threads 1 > "$OUT/checks/$t.txt" 2>&1
  echo "$t rc=$? $(since)"; grep -E "test result|panicked" "$OUT/checks/$t.txt" | head -4
done
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=20261551 CALL_S=${CHECK_S:-300} N_CHECK=${N_CHECK:-30} \
  bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
LEFT=$(( ${CALL_S:-585} - ($(date +%s) - T0) ))
if [ $LEFT -gt 60 ]; then
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,4 timeout $LEFT $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-qwen3-14b.md" > "$OUT/bench.log" 2> "$OUT/bench.err"
  echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench.err" | tail -5
else
  echo "bench skipped: $LEFT s left"
fi
(cd "$OUT" && tar czf all.tgz checks bench-* 2>/dev/null; rm -rf checks)
