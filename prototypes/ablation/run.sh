#!/bin/bash
# One device call (from the repository root of the device copy; carry prototypes/ablation
# with the units units.py rendered): build the harness, time every twin, then ncu's counts
# of the 17408-row twins (or those NCU_UNITS, a grep -E pattern, names). Results under $OUT.
cd prototypes/ablation
ls u_17408_full.cu > /dev/null || { echo "render the units first: prototypes/ablation/units.py (here)"; exit 1; }
CUDA=$(dirname "$(dirname "$(which nvcc)")")
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
g++ -O2 -std=c++17 ablation.cpp -I$CUDA/include -L$CUDA/lib64 -lcuda -lnvrtc -o ablation 2> $OUT/build.txt || { cat $OUT/build.txt; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu.txt
./ablation units.txt | tee $OUT/ablation.md
grep -E "${NCU_UNITS:-u_17408_}" units.txt > u17408.txt
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__warps_active.avg.per_cycle_active,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio ./ablation u17408.txt once > $OUT/ncu.txt 2>&1
grep -E "reduce_mma|duration|inst_executed|issue_active|pipe_|dram|cycles|warps_active|registers|stalled" $OUT/ncu.txt | head -120
