#!/bin/bash
# Device call: time the exact M 1 winners against their unrounded twins (simt_fast.py),
# then ncu's instruction and issue counts of the 17408 x 5120 k 3 pair. Carry
# ["prototypes/session32/simt"] (rendered here by simt_fast.py).
cd prototypes/session32/simt
CUDA=$(dirname "$(dirname "$(which nvcc)")")
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
g++ -O2 -std=c++17 ../../ablation/ablation.cpp -I$CUDA/include -L$CUDA/lib64 -lcuda -lnvrtc -o ablation 2> $OUT/build.txt || { cat $OUT/build.txt; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
./ablation units.txt | tee $OUT/simt_fast.md
grep -E "u_17408_k3-" units.txt > k3.txt
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,launch__registers_per_thread ./ablation k3.txt once > $OUT/ncu.txt 2>&1
grep -E "reduce_|duration|inst_executed|issue_active|pipe_|dram|per_second|registers" $OUT/ncu.txt | head -40
