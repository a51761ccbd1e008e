#!/bin/bash
# Thirtieth session, call AH: 1mad's pack on the FMA pipe (`f16x2_pair_sub`: an f16x2 add
# and an f16x2 fma with a swizzled operand in place of the integer pack; the same bits)
# against the shipped decode, A B A B on one lease: every `reduce_mma` candidate of the
# 1mad L 12 Qwen3-14B keys at M (default 1 / 8 / 16), k 2-4, tuned --fresh by each build,
# with traces. Carry [".device", ".vectors"] (.device/base: the build of HEAD).
chmod +x .device/main/xtask .device/base/xtask
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
for R in 1 2; do
  for B in base main; do
    timeout ${TUNE_S:-150} .device/$B/xtask tune --fresh --backend cuda --tier fast --family reduce_mma \
      --shape qwen3-14b --l 12 --m ${M:-1,8,16} --k 2,3,4 --code 1mad --budget ${BUDGET:-140s} \
      --out "$OUT/$B$R.toml" --trace "$OUT/$B$R.tsv" > /tmp/$B$R.txt 2>&1
    echo "$B round $R rc=$? $(since)"; grep -E 'left|stopped|error' /tmp/$B$R.txt | tail -3
  done
done
