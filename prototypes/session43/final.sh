#!/bin/bash
# The forty-third session's device call, on the build of this session's sources (no
# kernel unit or table changed; KernelSpec is an unsafe trait, a Launch is read through
# Deref and launch_request renders the declaration's own body, the kernel id hashes the
# declaring type's path; the facade caches its per-matrix checks): the GPU tests CI
# cannot run (cuda_launch's contract and other-thread tests now check their split-K
# expectation against SPEC 7), then the checks a reader re-runs
# (`../session31/checks.sh`: CUDA verify of the quick catalog and the vectors, random
# facade problems, the independent checker through the CLI; seed 20261561).
# Carry [".device", ".vectors"].
. prototypes/device.sh
mkdir -p "$OUT/checks"
gpu_tests "$OUT/checks" 150 gate_up_parts cuda_launch cuda_threads
OUT_SAVE=$OUT; OUT=$OUT_SAVE/checks
NO_BENCH=1 SEED=20261561 CALL_S=${CHECK_S:-330} N_CHECK=${N_CHECK:-30} \
  bash prototypes/session31/checks.sh > /dev/null 2>&1
OUT=$OUT_SAVE
cat "$OUT/checks/log.txt"; echo "checks done $(since)"
(cd "$OUT" && tar czf all.tgz checks 2>/dev/null; rm -rf checks)
