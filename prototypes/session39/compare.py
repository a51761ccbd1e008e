#!/usr/bin/env python3
"""Pair the rows of two `xtask bench` reports (same section, shape, k, M, tier) and print
each trellis time in both, the change, and whether the variant differs.
Usage: compare.py A.md B.md"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_rows import table_rows  # noqa: E402


def rows(path):
    out = {}
    for section, cells in table_rows(path):
        if section == "reduce" and len(cells) > 11:
            key = (section, cells[0], cells[1], cells[2], cells[3])
            us, variant = cells[4], cells[11]
        elif section.startswith("gate_up") and len(cells) > 7:
            key = (section.split(",")[0].replace("(", ""), cells[0], cells[1], cells[2])
            us, variant = cells[3], cells[7]
        else:
            continue
        out[key] = (float(us.split()[0]), variant)
    return out


a, b = rows(sys.argv[1]), rows(sys.argv[2])
print("| row | A us | B us | B / A - 1 | variant |\n|---|---:|---:|---:|---|")
for key in a:
    if key in b:
        (ta, va), (tb, vb) = a[key], b[key]
        same = "same" if va == vb else f"{va} -> {vb}"
        print(f"| {' '.join(key)} | {ta:.1f} | {tb:.1f} | {100 * (tb / ta - 1):+.1f} % | {same} |")
