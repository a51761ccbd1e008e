#!/bin/bash
# One device call for issue 10 (run from the repository root of the device copy):
# prototypes (nvcc, in the background) || xtask verify --backend cuda --quick, then the
# prototype timings, xtask bench (qwen3-14b shapes, M 1/4/8) and ncu on two prototypes.
P=.device/exact
LOG=$OUT/log.txt
exec > >(tee -a $LOG) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv
nvcc --version | tail -2
cd $P
chmod +x xtask
( for k in 2 3 4; do for m in 1 4 8; do
    nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -DKSEL=$k -DMSEL=$m -c exact_reduce.cu -o k${k}m${m}.o > ptx_k${k}m${m}.txt 2>&1 &
  done; done
  nvcc -O3 -arch=sm_90 -std=c++17 -DDRIVER -c exact_reduce.cu -o drv.o > ptx_drv.txt 2>&1 &
  wait ) &
BUILD=$!
T0=$(date +%s)
timeout 100 ./xtask verify --backend cuda --quick --vectors vectors --out $OUT/verify.txt > /dev/null 2> verify_err.txt
echo "verify rc=$? ($(( $(date +%s) - T0 )) s)"; tail -5 verify_err.txt; head -30 $OUT/verify.txt
wait $BUILD
nvcc -arch=sm_90 *.o -lcublas -lcublasLt -o proto || cat ptx_*.txt | grep -i error | head
cat ptx_*.txt | grep -E "error|spill|Used|Compiling entry" > $OUT/ptxas.txt
echo "build done ($(( $(date +%s) - T0 )) s)"
timeout 80 ./proto > $OUT/proto.txt 2>&1
echo "proto rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "r_hi|fma|SUMMARY|MISMATCH|dense" $OUT/proto.txt
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,4,8 timeout 90 ./xtask bench --out $OUT/bench.md > /dev/null 2> bench_err.txt
echo "bench rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "trellis|error" bench_err.txt | tail -12
M=smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__cycles_active.avg,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
for cfg in "4 0 0" "1 0 1"; do
  timeout 40 ncu --clock-control none --metrics $M -k regex:reduce_proto -c 1 ./proto only 17408 5120 3 1 $cfg >> $OUT/ncu.txt 2>&1
done
echo "ncu done ($(( $(date +%s) - T0 )) s)"; grep -E "reduce_proto|inst_executed.sum|issue_active|duration|dram__|pipe|stalled" $OUT/ncu.txt | head -30
cuobjdump -sass k3m1.o > $OUT/sass_k3m1.txt 2>/dev/null; wc -l $OUT/sass_k3m1.txt
