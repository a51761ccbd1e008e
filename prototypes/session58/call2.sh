#!/bin/bash
# Fifty-eighth session, call 2. Carry [".device", ".vectors"]; the binaries built with
# `offer-fused.patch` applied (fused twins at M 1, the others timed after the prescale
# kernel). The GPU tests of the facade's fused path and `download_range`; then, on an
# H200, the re-tune of the 72 `reduce_mma` M 1 keys the patch stales, resuming the
# shipped table (a second call, carrying the table the first wrote, resumes it); on an H100, the same tune at four
# Qwen3-14B keys into a table of its own, as evidence only.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 150 $D/cuda_launch --ignored --test-threads 1 fused contract > $C/cuda_launch.txt 2>&1
echo "cuda_launch rc=$? $(since)"; grep -E "^test |test result|panicked" $C/cuda_launch.txt
SPACE="--family reduce_mma --tier fast --m 1"
ALL="--l 12,16 --k 2,3,4 --code 1mad,3inst,mcg"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=$(( ${CAP:-585} - ($(date +%s) - T0) ))
  timeout $L $D/xtask tune --backend cuda $SPACE $ALL --shape qwen3-14b,llama-3-8b \
    --budget $(( L - 20 ))s --out tuning/nvidia-h200.toml --trace $OUT/trace.tsv > $OUT/tune.log 2> $OUT/tune.err
  echo "tune rc=$? $(since)"; tail -3 $OUT/tune.err; cp tuning/nvidia-h200.toml $OUT/
else
  timeout 300 $D/xtask tune --backend cuda $SPACE --shape qwen3-14b --k 2 --code 1mad,3inst --l 12 \
    --out $OUT/h100-m1.toml --trace $OUT/trace.tsv > $OUT/tune.log 2> $OUT/tune.err
  echo "tune (H100, evidence) rc=$? $(since)"; tail -3 $OUT/tune.err
  $D/xtask tune --backend cuda $SPACE --shape qwen3-14b --k 2 --code 1mad,3inst --l 12 --out $OUT/h100-m1.toml --summary > $OUT/summary.txt 2>&1
  cat $OUT/summary.txt | head -30
fi
echo "done $(since)"
