#!/bin/bash
# One device call (from the repository root of the device copy): build and run the
# balanced- and graded-row-set prototype, then ncu of the first 12 launches (the unit, the
# ninth session's kernels, graded_last).
# The unit is rendered on the host and carried (README.md): not kept in git.
cd prototypes/balanced
[ -f unit_k3_rps3.cu ] || { echo "unit_k3_rps3.cu missing: render it with examples/reduce_unit and carry it"; exit 1; }
UNIT=$(grep -o 'reduce_[0-9a-f]\{16\}' unit_k3_rps3.cu | head -1)
nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -DUNIT_KERNEL=$UNIT -o bal balanced.cu > $OUT/ptxas.txt 2>&1 || { cat $OUT/ptxas.txt; exit 1; }
./bal | tee $OUT/balanced.md
M=gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_active.avg,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active
timeout 120 ncu --clock-control none --metrics $M -k 'regex:reduce_' -c 12 ./bal > $OUT/ncu.txt 2>&1
grep -E "^\s+reduce_|duration|cycles|inst_executed|issue_active|warps_" $OUT/ncu.txt
