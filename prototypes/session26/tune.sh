#!/bin/bash
# The twenty-sixth session's device calls: `../session25/tune.sh` over every M (the split
# arrival's fence by one thread changed every split-K unit, so all 360 `reduce_mma`
# entries were stale), run as `TUNE_S=575 BUDGET=545s`, `TUNE_S=560 BUDGET=530s`, then
# `TUNE_S=120 BUDGET=100s BENCH_BEFORE=200 BENCH_M=1,8,16 BENCH_S=330` (the bench alone).
# The tuner compiles each next key's candidates while it measures the current one.
M=${M:-16,8,4,2,1} exec bash "$(dirname "$0")/../session25/tune.sh"
