#!/usr/bin/env python3
"""Old against new winners of the `reduce_mma` entries this session re-tuned (M 4 / 8 / 16),
per M and shape: medians of new/old, how many winners opt in (staged x past 48 KB) or
take a split that the widening added, and the largest gains.
Usage: compare.py OLD.toml NEW.toml"""
import sys, tomllib, statistics, collections
def entries(p):
    t = tomllib.load(open(p, "rb"))
    return {(e["key"], e["shape"]): e for e in t["entry"] if e["family"] == "reduce_mma"}
o, n = entries(sys.argv[1]), entries(sys.argv[2])
groups = collections.defaultdict(list)
rows = []
for k, e in n.items():
    if k not in o or o[k]["space_hash"] == e["space_hash"]:
        continue
    m = int(k[0].split()[1][2:])
    a, b = o[k]["stats"]["median_us"], e["stats"]["median_us"]
    w, ow = e["winner"], o[k]["winner"]
    groups[(m, k[1])].append((b / a, w.get("opt_in_shared", False), w.get("k_split", 1), ow.get("k_split", 1)))
    rows.append((b / a, k[1], k[0], a, b, w))
print("| M | shape | keys | new/old median | min | opt-in winners | winners at a new split |\n|---|---|---:|---:|---:|---:|---:|")
for (m, shape), v in sorted(groups.items()):
    r = [x[0] for x in v]
    newsplit = sum(1 for x in v if x[2] != x[3] and x[2] in (8, 16, 32) and m <= 8)
    print(f"| {m} | {shape} | {len(v)} | {statistics.median(r):.3f} | {min(r):.3f} | {sum(x[1] for x in v)} | {newsplit} |")
allr = [x[0] for x in rows]
print(f"\n{len(rows)} keys: median {statistics.median(allr):.3f}, range {min(allr):.3f}-{max(allr):.3f}")
rows.sort()
for r in rows[:8]:
    w = r[5]
    print(f"{r[1]} {r[2]}: {r[3]:.1f} -> {r[4]:.1f} us ({r[0]:.3f}) rt={w['row_tiles']} cs={w['col_split']} ks={w.get('k_split',1)} x={w.get('x_stage','global')}{' optin' if w.get('opt_in_shared') else ''}")
