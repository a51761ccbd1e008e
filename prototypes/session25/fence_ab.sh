#!/bin/bash
# The split arrival's fence by one thread (prototypes/next/fence-once.patch, built into
# .device/fence/xtask) against every thread's (.device/main/xtask), alternated twice, on
# three split-K kernels of the table's kind: 3inst and 1mad at M = 16 (8 splits), 1mad
# at M = 1 (4 splits at 5120 x 17408). Carry [".device"].
T0=$(date +%s)
chmod +x .device/*/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
export MMA_ONLY=17408x5120:2:16:3inst,17408x5120:2:16:1mad,5120x17408:2:1:1mad
export MMA_VARIANT="mma rt=8 cs=1 mt=16 x=shared_dup ks=8 regs=64 xf16 bs optin,mma rt=4 cs=2 mt=16 x=shared ks=8 regs=64 pw xf16 bs,mma rt=1 cs=4 mt=16 ks=4 regs=48 xf16"
for round in 1 2; do
  for b in main fence; do
    timeout 200 .device/$b/xtask bench --family reduce_mma --out "$OUT/$b-$round.md" > "$OUT/$b-$round.log" 2>&1
    echo "$b $round rc=$? $(( $(date +%s) - T0 )) s"
    grep -E "^\| (17408|5120)" "$OUT/$b-$round.md" | cut -c1-160
  done
done
