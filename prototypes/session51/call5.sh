#!/bin/bash
# The fifty-first session's fifth device call: the GPU tests of `cuda_launch` (CUDA's
# `download_later` dropped before its bytes are taken) and `cuda_threads` on the last
# build. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 120 cuda_launch cuda_threads
tar czf "$OUT/checks.tgz" -C /tmp checks
