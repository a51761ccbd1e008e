#!/bin/bash
# The forty-eighth session's fourth device call, on the build whose facade does less host
# work a call (x checked by bits, encode and decode vectorized, the fast tier's one form
# of x): the GPU tests, the CUDA verify of the quick catalog and the vectors, random
# facade problems, the independent checker through the CLI (its files go through the
# new encode and decode), then the facade bench. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out $C/verify.txt > /dev/null 2> $C/verify_err.txt
echo "verify rc=$? $(since)"; tail -1 $C/verify.txt
timeout 150 $D/xtask verify --backend cuda --random ${N_RANDOM:-100} --seed ${SEED:-20261451} \
  --out $C/random.txt > /dev/null 2> $C/random_err.txt
echo "random rc=$? $(since)"; tail -1 $C/random.txt; grep -m5 failed: $C/random.txt
timeout 100 python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_CHECK:-16} --seed 4848 --workdir /tmp/sc > $C/spec_check.txt 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases" $C/spec_check.txt | tail -4
TRELLIS_BENCH_BACKEND=cuda timeout 200 $D/facade --bench > $C/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
