#!/bin/bash
# The fast tier at QTIP's shape, 28672 x 8192 (where the issue measured QTIP's kernel at
# 50-57 us, 4.1-4.7 T weights/s), on today's kernels: `reduce_mma` tuned at that shape
# (M 1, k 2-4, L 12, 1mad) into `qtip.toml`, then the matrix-unit bench at that shape
# (its own launch shapes, cuBLAS in the same run). Carry [".device"].
. prototypes/device.sh
R=/tmp/q; mkdir -p $R
trap '(cd $R && tar czf "$OUT/qtip.tgz" .)' EXIT
timeout 150 $D/xtask tune --backend cuda --tier fast --family reduce_mma --shape 28672x8192 --m 1 \
  --k 2,3,4 --l 12 --code 1mad --out $R/qtip.toml --budget 140s --trace $R/trace.tsv > $R/tune.log 2>&1
echo "tune rc=$? $(since)"; grep -E "^\| reduce_mma" $R/tune.log
MMA_SHAPES=28672x8192 MMA_ONLY=28672x8192:2:1:1mad,28672x8192:3:1:1mad,28672x8192:4:1:1mad \
  timeout 150 $D/xtask bench --family reduce_mma --out $R/bench.md > $R/bench.log 2>&1
echo "bench rc=$? $(since)"; grep -E "^\| 28672" $R/bench.md | cut -c1-200
# On an H200, one more run of the exact goal key beside cuBLAS (the Qwen3-14B keys at M 1).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1 timeout 90 $D/xtask bench --out $R/bench-qwen-m1.md \
    > $R/bench-qwen-m1.log 2>&1
  echo "bench qwen3-14b M 1 rc=$? $(since)"; grep -E "^\| 17408x5120 \| 3 \| 1 \| exact" $R/bench-qwen-m1.md | cut -c1-120
fi
