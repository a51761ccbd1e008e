#!/bin/bash
# The thirty-third session's device call: the thirty-first session's checks (CUDA verify,
# random problems, bench of the Qwen3-14B keys at M 1, the independent checker) on this
# session's build (Backend::bind's borrow, Grid::check, empty grids), then the GPU tests
# that CI cannot run: tests/cuda_launch.rs (empty grids, a kernel NVRTC refuses) and
# tests/cuda_threads.rs. Carry [".device", ".vectors"].
D=.device/main
# At most 8 files come back from $OUT: run with OUT_TAR=1 to pack them into one.
chmod +x $D/*
CALL_S=${CALL_S:-440} bash prototypes/session31/checks.sh
exec > >(tee -a "$OUT/log.txt") 2>&1
for t in cuda_launch cuda_threads; do
  timeout 60 $D/$t --ignored --test-threads 1 > "$OUT/$t.txt" 2>&1
  echo "$t rc=$?"; grep -E "^test |test result" "$OUT/$t.txt"
done
if [ -n "$OUT_TAR" ]; then
  (cd "$OUT" && tar czf /tmp/results.tgz --exclude results.tgz . && rm -rf ./* && mv /tmp/results.tgz .)
fi
