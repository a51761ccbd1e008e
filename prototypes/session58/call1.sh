#!/bin/bash
# Fifty-eighth session, call 1. Carry [".device", ".vectors"]. The reworked fused_x (lane
# folds by shuffle, the exponent from its bits on every thread, two barriers, the tiny
# flags read again by row group 0): `cuda_launch`'s fused and prescale tests, then the
# fused bench (`fused/fused_bench.cpp`) beside the fifty-seventh session's forms; on an
# H200 also the full bench owed since the fifty-seventh session (its call 4).
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 120 $D/cuda_launch --ignored --test-threads 1 fused prescale > $C/cuda_launch.txt 2>&1
echo "cuda_launch rc=$? $(since)"; grep -E "^test |test result" $C/cuda_launch.txt
(cd prototypes/session57/fused && python3 fused_gen.py > /dev/null)
cd prototypes/session58/fused
g++ -O2 -std=c++17 fused_bench.cpp -ldl -o /tmp/fused_bench 2> $OUT/fused-build.txt
timeout 150 /tmp/fused_bench > $OUT/fused-bench.txt 2>&1
echo "fused bench rc=$? $(since)"; grep -vE "^compiled" $OUT/fused-bench.txt; grep -E "^compiled" $OUT/fused-bench.txt | cut -c1-110
cd ../../..
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  CAP=$(( 570 - ($(date +%s) - T0) )) bash prototypes/session57/call4.sh
fi
echo "done $(since)"
