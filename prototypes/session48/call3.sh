#!/bin/bash
# The forty-eighth session's third device call: the fast tier's facade uploads only the
# form of x its variant reads (on top of call2's changes): the GPU tests, random facade
# problems, then the facade bench (`benches/facade.rs`: `Resident::matvec` against its
# kernel alone, both tiers, at the goal key, and the backend's own steps: upload x,
# allocate y, download y). Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --random ${N_RANDOM:-100} --seed ${SEED:-20261450} \
  --out $C/random.txt > /dev/null 2> $C/random_err.txt
echo "random rc=$? $(since)"; tail -1 $C/random.txt; grep -m5 failed: $C/random.txt
TRELLIS_BENCH_BACKEND=cuda timeout 240 $D/facade --bench > $C/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
