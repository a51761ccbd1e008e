#!/bin/bash
# The one device call: build, run the full table, profile two kernels with ncu.
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
time ./build.sh || exit 1
grep -h "registers\|spill" obj/i_0_2_16.log obj/i_1_2_12.log | head -20 > $OUT/ptxas.txt
./proto 2>&1 | tee $OUT/proto.log
M="sm__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,gpu__time_duration.sum"
SHAPES=1 KONLY=2 LONLY=16 ONLY=rt2cs4q32d2ks1 CODEONLY=0 NOCUBLAS=1 NOTIME=1 timeout 100 ncu --clock-control none -k regex:fast_reduce -c 6 --metrics $M ./proto > $OUT/ncu.txt 2>&1
grep -E "fast_reduce|inst_executed|cycles|issue|dram|hmma|pipe|warps|duration" $OUT/ncu.txt | head -60
