#!/bin/bash
# The device checks a reader re-runs (the thirtieth session's call AF, the thirty-first's
# AG-AJ, each its own SEED), on the build of the shipped table: the CUDA verify of the
# quick catalog and the vectors, random problems through the facade, the independent
# checker through the CLI (exact and fast), and a bench of the Qwen3-14B keys at M 1
# (cuBLAS and the seed's structure in the same run).
# Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
timeout ${VERIFY_S:-120} $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -2 "$OUT/verify.txt"
timeout ${RANDOM_S:-110} $D/xtask verify --backend cuda --random ${N_RANDOM:-80} --seed ${SEED:-20261531} \
  --out "$OUT/random.txt" > /dev/null 2> "$OUT/random_err.txt"
echo "random rc=$? $(since)"; tail -2 "$OUT/random.txt"
if [ -z "$NO_BENCH" ]; then  # NO_BENCH=1: the caller benches on its own
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1 timeout ${BENCH_S:-120} $D/xtask bench \
  --table tuning/nvidia-h200.toml --out "$OUT/bench-qwen3-14b-m1.md" > "$OUT/bench.log" 2> "$OUT/bench.err"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench.err" | tail -5
fi
LEFT=$(( ${CALL_S:-560} - ($(date +%s) - T0) ))
timeout $LEFT python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_CHECK:-40} --seed ${SEED:-20261531} --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -6
