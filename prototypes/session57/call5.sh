#!/bin/bash
# Fifty-seventh session, call 5. Carry [".device", ".vectors"]. On an H200: the full bench
# of both presets (call 4's, the shipped report's run). Otherwise: the prescale kernel's
# compile-time form under compute-sanitizer (racecheck and synccheck: its folds through
# group memory; memcheck: its bounds at widths the threads do not divide), through
# `cuda_launch`'s prescale and fast-tier tests.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash prototypes/session57/call4.sh
fi
. prototypes/device.sh
. prototypes/session33/san.sh
F="prescale fast_tier"
san racecheck 150 prescale-racecheck $D/cuda_launch --ignored --test-threads 1 $F
san synccheck 100 prescale-synccheck $D/cuda_launch --ignored --test-threads 1 $F
san memcheck 150 prescale-memcheck $D/cuda_launch --ignored --test-threads 1 $F
(cd /tmp/cs && tar czf "$OUT/sanitizer.tgz" .)
echo "done $(since)"
