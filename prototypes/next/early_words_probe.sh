#!/bin/bash
# Does loading the first code words before the x staging (`MmaVariant::early_words`, offered
# at M = 16 since the twenty-seventh session) pay below M = 16? Build an xtask with
# `early-words-below-16.patch` applied into .device/ew/xtask (then revert), carry
# [".device"], and run this: a fresh tune of a few Qwen3-14B keys at M 1 / 4 / 8 times every
# staged candidate and its early-words twin in one run; the trace pairs them
# (`pairs.py` below prints each pair's ratio and the keys whose winner would change).
T0=$(date +%s)
chmod +x .device/ew/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
timeout 400 .device/ew/xtask tune --fresh --backend cuda --tier fast --family reduce_mma \
  --shape qwen3-14b --l 12 --m 1,4,8 --k 2,3 --code 1mad,3inst --out /tmp/ew.toml \
  --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? $(( $(date +%s) - T0 )) s"
python3 - "$OUT/trace.tsv" <<'PY' | tee "$OUT/pairs.txt"
import csv, sys, statistics, collections
rows = [r for r in csv.reader(open(sys.argv[1]), delimiter="\t") if r[0] != "key" and r[2] == "timed"]
by = collections.defaultdict(dict)
for k, v, _, med, *_ in rows:
    by[k][v] = float(med)
for k, vs in by.items():
    ratios = [vs[v] / vs[v[:-3]] for v in vs if v.endswith(" ew") and v[:-3] in vs]
    best, best_plain = min(vs.values()), min(t for v, t in vs.items() if not v.endswith(" ew"))
    if ratios:
        print(f"{k}: {len(ratios)} pairs, ew/plain median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}); best {best:.2f} us, best without ew {best_plain:.2f}")
PY
