#!/bin/bash
# Second device call for issue 10: the byte-sum-table design (k = 3 only) next to the
# first call's best, xtask bench with batched timing (reduce and gate_up), ncu.
P=.device/exact
LOG=$OUT/log.txt
exec > >(tee -a $LOG) 2>&1
cd $P
chmod +x xtask
T0=$(date +%s)
( for m in 1 4 8; do
    nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -DKSEL=3 -DMSEL=$m -c exact_reduce.cu -o k3m${m}.o > ptx_k3m${m}.txt 2>&1 &
  done
  nvcc -O3 -arch=sm_90 -std=c++17 -DDRIVER -c exact_reduce.cu -o drv.o > ptx_drv.txt 2>&1 &
  wait ) &
BUILD=$!
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,4,8 timeout 100 ./xtask bench --out $OUT/bench.md > /dev/null 2> bench_err.txt
echo "bench rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "trellis|error" bench_err.txt | tail -8
wait $BUILD
nvcc -arch=sm_90 k3m*.o drv.o -lcublas -lcublasLt -o proto || cat ptx_*.txt | grep -i error | head
cat ptx_*.txt | grep -E "error|spill|Used|Compiling entry" > $OUT/ptxas.txt
echo "build done ($(( $(date +%s) - T0 )) s)"
PROTO_K=3 timeout 40 ./proto > $OUT/proto.txt 2>&1
echo "proto rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "SUMMARY|MISMATCH|dense|bytesum" $OUT/proto.txt | head -60
M=smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
for cfg in "4 32 3" "4 8 3"; do
  timeout 25 ncu --clock-control none --metrics $M -k regex:reduce_bytesum -c 1 ./proto only 17408 5120 3 1 $cfg >> $OUT/ncu.txt 2>&1
done
echo "ncu done ($(( $(date +%s) - T0 )) s)"; grep -E "reduce_|inst_executed.sum|issue_active|duration|conflicts|stalled" $OUT/ncu.txt | head -30
