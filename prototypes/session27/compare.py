#!/usr/bin/env python3
"""Old against new winners of every fast entry this session re-tuned (`row-offset.patch`
changed every unit of both matrix-unit families), per family, M and shape: medians of
new/old, and how many winners take the early-words form (M = 16 `reduce_mma`).
Usage: compare.py OLD.toml NEW.toml"""
import sys, tomllib, statistics, collections
def entries(p):
    t = tomllib.load(open(p, "rb"))
    return {(e["family"], e["key"], e["shape"]): e for e in t["entry"] if "_mma" in e["family"]}
o, n = entries(sys.argv[1]), entries(sys.argv[2])
groups = collections.defaultdict(list)
for k, e in n.items():
    if k not in o or o[k]["source_hash"] == e["source_hash"] and o[k]["space_hash"] == e["space_hash"]:
        continue
    m = int(k[1].split()[1][2:])
    a, b = o[k]["stats"]["median_us"], e["stats"]["median_us"]
    groups[(k[0], m)].append((b / a, e["winner"].get("early_words", False)))
print("| family | M | entries | new/old median | min | max | early-words winners |\n|---|---:|---:|---:|---:|---:|---:|")
for (f, m), v in sorted(groups.items()):
    r = [x[0] for x in v]
    print(f"| {f} | {m} | {len(v)} | {statistics.median(r):.3f} | {min(r):.3f} | {max(r):.3f} | {sum(x[1] for x in v)} |")
for f in sorted({f for f, _ in groups}):
    r = [x[0] for (g, _), v in groups.items() if g == f for x in v]
    print(f"\n{f}: {len(r)} entries, new/old median {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})")
