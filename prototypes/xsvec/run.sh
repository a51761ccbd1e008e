#!/bin/bash
# One device call (repository root of the device copy): build bench.cu with the units
# rendered by units.sh (carried), run it; results under $OUT.
cd prototypes/xsvec
ls unit_m1_base.cu > /dev/null || { echo "render the units first (units.sh) and carry prototypes/xsvec"; exit 1; }
nvcc -O3 -arch=sm_90 -fmad=false -std=c++17 -Xptxas -v -o bench bench.cu unit_*.cu > $OUT/xsvec-ptxas.txt 2>&1 || { tail -30 $OUT/xsvec-ptxas.txt; exit 1; }
grep -E "Compiling entry|registers|spill" $OUT/xsvec-ptxas.txt | paste - - - | sed 's/ptxas info    ://g' | cut -c1-200 > $OUT/xsvec-regs.txt
./bench | tee $OUT/xsvec.md
