#!/bin/bash
# The forty-sixth session's last call: the CUDA verify of the quick catalog and the
# vectors, and random facade problems, under the checks as the numerics audit left them
# (an infinity in T's top binade needs the result near the edge; gate_up beyond T's
# range takes the exact tail's; NaN matches NaN in the exact comparison). Carry
# [".device", ".vectors"].
. prototypes/device.sh
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -1 "$OUT/verify.txt"
timeout 120 $D/xtask verify --backend cuda --random ${N_RANDOM:-80} --seed ${SEED:-20261246} \
  --out "$OUT/random.txt" > /dev/null 2> "$OUT/random_err.txt"
echo "random rc=$? $(since)"; tail -1 "$OUT/random.txt"
