#!/bin/bash
# One device call (from the repository root of the device copy): build and run the
# balanced-row-set prototype, then ncu of the unit and the best balanced kernel.
cd prototypes/balanced
nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -o bal balanced.cu > $OUT/ptxas.txt 2>&1 || { cat $OUT/ptxas.txt; exit 1; }
./bal | tee $OUT/balanced.md
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
timeout 120 ncu --clock-control none --metrics $M -k 'regex:reduce_' -c 10 ./bal > $OUT/ncu.txt 2>&1
grep -E "^\s+reduce_|duration|inst_executed|issue_active|warps_active" $OUT/ncu.txt
