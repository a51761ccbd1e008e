#!/bin/bash
# The thirty-sixth session's device call: the GPU tests CI cannot run on this build
# (gate_up_parts: a fast gate_up's g and u against SPEC 7 through the kernel declared by
# `gate_up_mma_kernel!`; cuda_launch; cuda_threads), then the thirty-first session's checks
# (CUDA verify of the quick catalog and the vectors, random facade problems, the
# independent checker through the CLI); the full bench is `bench.sh` (call AR).
# Carry [".device", ".vectors"].
D=.device/main
# The binaries travel as one xz archive (the checkout and five stripped binaries pass 64 MiB).
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
mkdir -p /tmp/r
for t in gate_up_parts cuda_launch cuda_threads; do
  S=$SECONDS; timeout 200 $D/$t --ignored --test-threads 1 > /tmp/r/$t.txt 2>&1
  echo "$t rc=$? ($((SECONDS - S)) s)"; grep -E "^test |test result|panicked" /tmp/r/$t.txt | head -12
done
OUT_SAVE=$OUT; OUT=/tmp/r
NO_BENCH=1 SEED=${SEED:-20261541} CALL_S=${CALL_S:-300} bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat /tmp/r/log.txt
(cd /tmp/r && tar czf "$OUT/results.tgz" .)
