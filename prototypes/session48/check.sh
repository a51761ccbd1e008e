#!/bin/bash
# The forty-eighth session's first device call, on the build of 202beaf (HEAD at the
# session's start): the GPU tests, the CUDA verify of the quick catalog and the vectors,
# random facade problems, the independent checker on cuda, then the goal key (17408 x
# 5120 k 3 M 1, both tiers' rows) against cuBLAS in the same run, as often as time
# allows. Outputs tarred into $OUT/checks.tgz (a call brings back few files).
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out $C/verify.txt > /dev/null 2> $C/verify_err.txt
echo "verify rc=$? $(since)"; tail -1 $C/verify.txt
timeout 150 $D/xtask verify --backend cuda --random ${N_RANDOM:-100} --seed ${SEED:-20261448} \
  --out $C/random.txt > /dev/null 2> $C/random_err.txt
echo "random rc=$? $(since)"; tail -1 $C/random.txt; grep -m5 failed: $C/random.txt
timeout 120 python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_CHECK:-24} --seed 48 --workdir /tmp/sc > $C/spec_check.txt 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases" $C/spec_check.txt | tail -6
tar czf "$OUT/checks.tgz" -C /tmp checks
for i in 1 2 3; do
  LEFT=$(( ${CALL_S:-560} - ($(date +%s) - T0) ))
  [ $LEFT -lt 50 ] && break
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=1 \
    timeout $LEFT $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-k3-$i.md" > /dev/null 2> "$OUT/bench-k3-$i.err"
  echo "bench $i rc=$? $(since)"; grep -E "k3 M1" "$OUT/bench-k3-$i.err" | head -4
done
