#!/bin/bash
# One device call (from the repository root of the device copy): build xf32.cu with the
# units rendered by units.sh (carried: git ignores them), run it, then ncu's instruction
# and issue counts of the M 1 and M 4 winners and their f32 twins. Results under $OUT.
cd prototypes/xf32
ls units.h > /dev/null || { echo "render the units first: prototypes/xf32/units.sh (here), and carry prototypes/xf32"; exit 1; }
nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -o xf32 xf32.cu u_*.cu > $OUT/ptxas.txt 2>&1 || { tail -30 $OUT/ptxas.txt; exit 1; }
./xf32 | tee $OUT/xf32.md
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active,launch__registers_per_thread -k 'regex:_(m1_17408_r3|m4_17408_r3|m8_17408_r4)_[pf]$' -c 6 ./xf32 > $OUT/ncu.txt 2>&1
grep -E "^\s+reduce_|duration|inst_executed|issue_active|pipe_|l1tex|registers" $OUT/ncu.txt
