#!/bin/bash
# The fifty-fourth session's call2.sh, owed: no start after its first call was lent.
# The GPU tests the fifty-fourth session strengthened (SPEC 7 on the fast device path) and the checks a
# reader re-runs on its build, and where the card is an H200 (none
# came since the fortieth session) the full bench of both presets on the shipped table
# (`../session40/final.sh`'s runs). Carry [".device", ".vectors"].
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
# The CUDA backend's own GPU tests (the staging, the side stream, the backend's drop).
timeout 60 $D/trellis_lib --ignored --test-threads 1 backend::cuda > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "^test |test result|panicked" $C/lib.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
  verify_random $C 40 20261555
  for P in qwen3-14b llama-3-8b; do
    LEFT=$(( ${CAP:-585} - ($(date +%s) - T0) ))
    [ $LEFT -lt 60 ] && { echo "bench $P skipped: $LEFT s left"; continue; }
    TRELLIS_BENCH_PRESETS=$P TRELLIS_BENCH_M=1,2,4,8,16 timeout $LEFT $D/xtask bench \
      --table tuning/nvidia-h200.toml --out "$OUT/bench-$P.md" > "$OUT/bench-$P.log" 2> "$OUT/bench-$P.err"
    echo "bench $P rc=$? $(since)"; grep -E "error" "$OUT/bench-$P.err" | tail -5
  done
else
  gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
  verify_random $C 60 20261555
  spec_check $C 30 20261555 150
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1 timeout 120 $D/xtask bench \
    --table tuning/nvidia-h200.toml --out "$OUT/bench-qwen3-14b-m1.md" > "$OUT/bench.log" 2> "$OUT/bench.err"
  echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench.err" | tail -5
fi
