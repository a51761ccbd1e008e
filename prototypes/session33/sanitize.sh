#!/bin/bash
# The thirty-third session's third device call: the CUDA kernels under NVIDIA's
# compute-sanitizer (never run on this project's kernels before). memcheck (out-of-bounds
# and misaligned global and shared accesses) over the quick verify catalog (every
# representation, both tiers, the vectors) and random problems through the facade (the
# tuned winners at random shapes); racecheck (shared-memory hazards) and synccheck
# (barrier misuse) over random problems; memcheck over the GPU tests. Each tool's summary
# line and the verify reports land in one archive. Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
. prototypes/session33/san.sh
san memcheck 240 quick-memcheck $D/xtask verify --backend cuda --quick --vectors .vectors --out /tmp/cs/quick.txt
san memcheck 100 random-memcheck $D/xtask verify --backend cuda --random ${N:-24} --seed 20261537 --out /tmp/cs/random.txt
san racecheck 120 random-racecheck $D/xtask verify --backend cuda --random ${N_RACE:-12} --seed 20261538
san synccheck 80 random-synccheck $D/xtask verify --backend cuda --random ${N_RACE:-12} --seed 20261539
for t in ${TESTS-cuda_launch gate_up_parts}; do
  san memcheck 60 $t-memcheck $D/$t --ignored --test-threads 1
done
(cd /tmp/cs && tar czf "$OUT/sanitizer.tgz" .)
