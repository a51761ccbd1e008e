#!/bin/bash
# Build the prototype on the device machine: one object per (code, k, L), in parallel.
set -e
cd "$(dirname "$0")"
mkdir -p obj
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Xptxas -v"
pids=()
for code in 0 1; do for k in 2 3 4; do for l in 12 16; do
  $NV -DCODEV=$code -DKB=$k -DLB=$l -c inst.cu -o obj/i_${code}_${k}_${l}.o > obj/i_${code}_${k}_${l}.log 2>&1 & pids+=($!)
done; done; done
$NV -DCODEV=3 -DKB=2 -DLB=16 -c inst.cu -o obj/i_3_2_16.o > obj/i_3_2_16.log 2>&1 & pids+=($!)
$NV -c main.cu -o obj/main.o > obj/main.log 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || { cat obj/*.log | grep -i error; exit 1; }; done
nvcc -gencode=arch=compute_90,code=sm_90 obj/*.o -lcublas -o proto
