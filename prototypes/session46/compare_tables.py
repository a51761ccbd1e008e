#!/usr/bin/env python3
"""Two bench reports of one device, taken on two tables (`xtask bench --table`): per key
(family section, shape or pair, k, M, tier), our time on each, and the ratio of the first
over the second; then the ratios' quantiles per tier. Usage: compare_tables.py A.md B.md"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_rows import table_rows  # noqa: E402


def times(path):
    out = {}
    for section, c in table_rows(path):
        if section.startswith("reduce"):
            key, us = (section.split()[0], c[0], c[1], c[2], c[3]), c[4]
        elif section.startswith("gate_up"):
            key, us = (section, c[0], "", c[1], c[2]), c[3]
        else:
            continue
        out[key] = float(us.split()[0])
    return out


a, b = times(sys.argv[1]), times(sys.argv[2])
ratios = {"exact": [], "fast": []}
print("| family | shape / pair | k | M | tier | A us | B us | A / B |")
print("|---|---|---:|---:|---|---:|---:|---:|")
for key in a:
    if key not in b:
        continue
    r = a[key] / b[key]
    ratios[key[4]].append(r)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {a[key]:.1f} | {b[key]:.1f} | {r:.3f} |")
for tier, rs in ratios.items():
    if rs:
        rs.sort()
        q = lambda f: rs[min(len(rs) - 1, int(f * len(rs)))]
        print(f"\n{tier}: {len(rs)} keys, A / B min {rs[0]:.3f}, median {q(0.5):.3f}, max {rs[-1]:.3f}")
