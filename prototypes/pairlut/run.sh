#!/bin/bash
# One device call (repository root of the device copy): build and run the pair-table
# microbenchmark; results under $OUT.
cd prototypes/pairlut
nvcc -O3 -arch=sm_90 -std=c++17 -Xptxas -v -o pairlut pairlut.cu > $OUT/ptxas.txt 2>&1 || { tail -30 $OUT/ptxas.txt; exit 1; }
grep -E "registers|spill" $OUT/ptxas.txt | tail -12
./pairlut "$@" | tee $OUT/pairlut.md
