#!/usr/bin/env python3
"""The re-tune's new over old median per key, split by whether both winners split K (the
units the one-thread fence changed) or neither does (unchanged units: the control for the
lease-to-lease drift). Usage: fence_split.py OLD.toml NEW.toml"""
import sys, tomllib, statistics
def entries(p):
    t = tomllib.load(open(p, "rb"))
    return {(e["key"], e["shape"]): e for e in t["entry"] if e["family"] == "reduce_mma"}
o, n = entries(sys.argv[1]), entries(sys.argv[2])
groups = {"split K (fence changed)": [], "no split (unchanged)": [], "mixed": []}
for k, e in n.items():
    if k not in o:
        continue
    a, b = o[k]["stats"]["median_us"], e["stats"]["median_us"]
    so, sn = o[k]["winner"].get("k_split", 1) > 1, e["winner"].get("k_split", 1) > 1
    g = "split K (fence changed)" if so and sn else "no split (unchanged)" if not so and not sn else "mixed"
    groups[g].append(b / a)
for g, r in groups.items():
    if r:
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        print(f"{g}: {len(r)} keys, new/old median {statistics.median(r):.4f} (quartiles {q[0]:.3f}-{q[2]:.3f})")
