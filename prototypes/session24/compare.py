#!/usr/bin/env python3
"""Old against new winners of the re-tuned `reduce_mma` keys (KEYS, a key prefix: "bf16 M=16 "), and within the new
run's trace each batched twin against its plain twin (same run, same key).
Usage: compare.py OLD.toml NEW.toml TRACE.tsv [TRACE.tsv ...]"""
import sys, tomllib, statistics, collections
import os
PREFIX = os.environ.get("KEYS", "bf16 M=16 ")
old, new, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
def entries(p):
    t = tomllib.load(open(p, "rb"))
    return {(e["key"], e["shape"]): e for e in t["entry"] if e["family"] == "reduce_mma" and e["key"].startswith(PREFIX)}
o, n = entries(old), entries(new)
def name(w):
    s = f"rt={w['row_tiles']} cs={w['col_split']} ks={w.get('k_split', 1)} x={w.get('x_stage', 'global')}"
    return s + (" bs" if w.get("batch_stage") else "")
ratios, by_shape, bs_wins = [], collections.defaultdict(list), 0
print("| key | shape | old us | new us | new/old | new winner |\n|---|---|---:|---:|---:|---|")
for k in sorted(n):
    if k not in o: continue
    a, b = o[k]["stats"]["median_us"], n[k]["stats"]["median_us"]
    if n[k]["source_hash"] == o[k]["source_hash"] and n[k].get("space_hash") == o[k].get("space_hash"): continue
    ratios.append(b / a); by_shape[k[1]].append(b / a)
    bs_wins += bool(n[k]["winner"].get("batch_stage"))
    print(f"| {k[0]} | {k[1]} | {a:.2f} | {b:.2f} | {b / a:.3f} | {name(n[k]['winner'])} |")
print(f"\nre-tuned {len(ratios)}, median new/old {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); batched winners {bs_wins}")
for s, r in sorted(by_shape.items()): print(f"  {s}: median {statistics.median(r):.3f}")
# Twins in the trace: the batched form against the plain one, same key and run.
pairs = []
for tr in traces:
    t = {}
    for line in open(tr):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4 or f[2] != "timed": continue
        t[(f[0], f[1])] = float(f[3])
    for (key, v), us in t.items():
        if v.endswith(" bs"):
            plain = t.get((key, v[:-3]))
            if plain: pairs.append((us / plain, key, v))
pairs.sort()
if pairs:
    r = [p[0] for p in pairs]
    print(f"\nbatched / plain over {len(r)} pairs: median {statistics.median(r):.3f}, range {r[0]:.3f}-{r[-1]:.3f}, faster in {sum(x < 1 for x in r)}")
