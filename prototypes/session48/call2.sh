#!/bin/bash
# The forty-eighth session's second device call, on the build with the facade's one
# upload of x a launch and the selector's string filter: the GPU tests, random facade
# problems (the table's choices, interleaved-x winners among them), then the facade
# bench (`benches/facade.rs`: `Resident::matvec` against its kernel alone, both tiers, at
# the goal key). Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --random ${N_RANDOM:-100} --seed ${SEED:-20261449} \
  --out $C/random.txt > /dev/null 2> $C/random_err.txt
echo "random rc=$? $(since)"; tail -1 $C/random.txt; grep -m5 failed: $C/random.txt
TRELLIS_BENCH_BACKEND=cuda timeout 240 $D/facade --bench > $C/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
