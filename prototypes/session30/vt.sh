#!/bin/bash
# Thirtieth session, call AG: the single-state value table (`../next/single-state-table.patch`): every
# `reduce_mma` candidate of the 1mad L 12 Qwen3-14B keys at M 1 / 4 / 8, k 2-4, tuned
# --fresh with TRELLIS_PROTO_VT = 0 (the shipped decode), 1, 2 and 3 (A registers of 4
# from the table), each with a trace of every candidate. Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
for VT in ${VTS:-0 1 2 3}; do
  TRELLIS_PROTO_VT=$VT timeout ${TUNE_S:-130} $D/xtask tune --fresh --backend cuda --tier fast --family reduce_mma \
    --shape qwen3-14b --l 12 --m ${M:-1,4,8} --k 2,3,4 --code 1mad --budget ${BUDGET:-120s} \
    --out "$OUT/vt$VT.toml" --trace "$OUT/vt$VT.tsv" > "$OUT/vt$VT.txt" 2>&1
  echo "vt=$VT rc=$? $(since)"; grep -E 'left|stopped|budget|error|rejected' "$OUT/vt$VT.txt" | tail -3
done
