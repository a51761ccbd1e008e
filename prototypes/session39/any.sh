#!/bin/bash
# Whichever GPU comes: an H200 runs the QTIP-shape call (`qtip_shape.sh`); an H100 runs the
# H100 table's call (`h100.sh`) at the Qwen3-14B keys at M 4 and 8 (call 6 covered M 1).
# Carry [".device"].
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  TUNE_SHAPE=qwen3-14b TUNE_M=4,8 BENCH_M=4,8 TUNE_S=230 TUNE_BUDGET=220s BENCH_S=120 \
    exec bash prototypes/session39/h100.sh
fi
exec bash prototypes/session39/qtip_shape.sh
