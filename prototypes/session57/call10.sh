#!/bin/bash
# Fifty-seventh session, call 10. Carry [".device", ".vectors"]. The fused prescale as the
# template renders it (`MmaVariant::fused_x`): `cuda_launch` (its new
# `the_fused_prescale_matches_the_pipeline` with the rest), then the prototype harness
# with the template's fused and staged units beside the hand-made forms.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
gpu_tests $C 120 cuda_launch
grep -E "^test " $C/cuda_launch.txt
cd prototypes/session57/fused
python3 fused_gen.py > /dev/null
g++ -O2 -std=c++17 fused_bench.cpp -ldl -o /tmp/fused_bench 2> $OUT/fused-build.txt || cp ../../../.device/fused_bench /tmp/fused_bench
timeout 120 /tmp/fused_bench > $OUT/fused-bench.txt 2>&1
echo "fused bench rc=$? $(since)"; grep -vE "^compiled" $OUT/fused-bench.txt
