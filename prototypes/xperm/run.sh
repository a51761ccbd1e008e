#!/bin/bash
# One device call (from the repository root of the device copy): build xperm.cu with the
# units rendered by units.sh (carried: git ignores them), run it, then ncu's L1 speed of
# light of the M 4 unit and its permuted twin. Results under $OUT.
cd prototypes/xperm
ls unit_m4_5120.cu perm_m4_5120.cu > /dev/null || { echo "render the units first: prototypes/xperm/units.sh (here), and carry prototypes/xperm"; exit 1; }
nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -o xperm xperm.cu unit_*.cu perm_*.cu > $OUT/ptxas.txt 2>&1 || { tail -30 $OUT/ptxas.txt; exit 1; }
./xperm | tee $OUT/xperm.md
timeout 120 ncu --clock-control none --section SpeedOfLight -k 'regex:^reduce_' -c 2 ./xperm > $OUT/ncu.txt 2>&1
grep -E "^\s+reduce_|L1/TEX Cache|Duration" $OUT/ncu.txt
