#!/bin/bash
# Fifty-eighth session, call 3 (an H100 again, as evidence: the shipped table is the
# H200's). Carry [".device", ".vectors"]; xtask built with `offer-fused.patch` applied.
# The facade's fast call into y in a fused_x variant beside the prescale pipeline's (the
# goal key, 17408 x 5120 k 3 M 1), then the tuner with fused twins at every Qwen3-14B M 1
# key at L 12 (k 2-4, 1mad / 3inst / mcg) into a table of its own.
# On an H200 it runs call 2's H200 branch instead: the re-tune the patch asks for.
. prototypes/device.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=$(( 570 - ($(date +%s) - T0) ))
  timeout $L $D/xtask tune --backend cuda --family reduce_mma --tier fast --m 1 --l 12,16 --k 2,3,4 \
    --code 1mad,3inst,mcg --shape qwen3-14b,llama-3-8b --budget $(( L - 20 ))s \
    --out tuning/nvidia-h200.toml --trace $OUT/trace.tsv > $OUT/tune.log 2> $OUT/tune.err
  echo "tune rc=$? $(since)"; tail -3 $OUT/tune.err; cp tuning/nvidia-h200.toml $OUT/
  exit 0
fi
TRELLIS_BENCH_BACKEND=cuda timeout 200 $D/facade --bench "fast/(resident-matvec-device-into|kernel|prescale-then-kernel)" > $OUT/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
L=$(( 420 - ($(date +%s) - T0) ))
timeout $L $D/xtask tune --backend cuda --family reduce_mma --tier fast --m 1 --shape qwen3-14b \
  --l 12 --k 2,3,4 --code 1mad,3inst,mcg --budget $(( L - 30 ))s \
  --out $OUT/h100-m1.toml --trace $OUT/trace.tsv > $OUT/tune.log 2> $OUT/tune.err
echo "tune rc=$? $(since)"; tail -2 $OUT/tune.err
$D/xtask tune --backend cuda --family reduce_mma --tier fast --m 1 --shape qwen3-14b \
  --l 12 --k 2,3,4 --code 1mad,3inst,mcg --out $OUT/h100-m1.toml --summary > $OUT/summary.txt 2>&1
echo "done $(since)"
