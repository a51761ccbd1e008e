#!/usr/bin/env bash
# Forty-second session: the SIMT body's fast tier (no weight rounding, one accumulator)
# against the exact winner it twins and the matrix-unit fast choice, in one run.
# Carried: .device/bins.txz (xtask with simt-fast.patch applied), .device/stamped.toml
# (the H200 table with its exact entries re-stamped for the patched template).
source prototypes/device.sh
export TRELLIS_BENCH_SIMT_FAST=1 TRELLIS_BENCH_M=1
TRELLIS_BENCH_PRESETS=qwen3-14b timeout 330 $D/xtask bench --table .device/stamped.toml --out $OUT/qwen.md 2> $OUT/qwen.err; echo "qwen rc=$? $(since)"
TRELLIS_BENCH_PRESETS=llama-3-8b timeout 200 $D/xtask bench --table .device/stamped.toml --out $OUT/llama.md 2> $OUT/llama.err; echo "llama rc=$? $(since)"
grep -h "SIMT" $OUT/*.err
