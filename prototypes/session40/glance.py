#!/usr/bin/env python3
"""Compact tables of a bench report (`xtask bench` markdown) for the goals report: per
shape and tier, one row per k, one column per M, each cell `us (cuBLAS / ours)`; M over
M 1 ratios; the gate_up rows; and, where the report has them (fifty-sixth session on),
the fast rows with their prescale kernel: `us + prescale (cuBLAS / the pair)`.
Usage: glance.py BENCH.md"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_rows import table_rows  # noqa: E402

rows = defaultdict(dict)  # (shape, tier, k) -> {M: (us, x)}
pre = defaultdict(dict)  # (shape or preset/pair, k) -> {M: (us, prescale us, x of the pair)}
gate = defaultdict(dict)  # (preset, pair, tier) -> {M: (us, dense, x)}
for section, c in table_rows(sys.argv[1]):
    us = float(c[4 if section.startswith("reduce") else 3].split()[0])
    if section.startswith("reduce"):
        shape, k, m, tier = c[0], int(c[1]), int(c[2]), c[3]
        rows[(shape, tier, k)][m] = (us, float(c[9]))
        if len(c) >= 15 and c[13] != "-":
            pre[(shape, k)][m] = (us, float(c[13]), float(c[14]))
    elif section.startswith("gate_up"):
        preset = "Qwen3-14B" if "qwen" in section.lower() else "Llama-3-8B"
        pair, m, tier = c[0], int(c[1]), c[2]
        gate[(preset, pair, tier)][m] = (us, float(c[4]), float(c[5]))
        if len(c) >= 11 and c[9] != "-":
            pre[(f"gate_up {preset}", pair)][m] = (us, float(c[9]), float(c[10]))

ms = sorted({m for v in rows.values() for m in v})
shapes = list(dict.fromkeys(s for s, _, _ in rows))
for tier in ("exact", "fast"):
    print(f"\n{tier}: us (cuBLAS / ours)\n")
    print("| shape | k | " + " | ".join(f"M {m}" for m in ms) + " |")
    print("|---|---:|" + "---:|" * len(ms))
    for s in shapes:
        for k in sorted({k for (s2, t, k) in rows if s2 == s and t == tier}):
            r = rows[(s, tier, k)]
            cells = [f"{r[m][0]:.1f} ({r[m][1]:.2f}x)" if m in r else "-" for m in ms]
            print(f"| {s} | {k} | " + " | ".join(cells) + " |")
    print(f"\n{tier}: M over M 1\n")
    print("| shape | k | " + " | ".join(f"M {m}" for m in ms[1:]) + " |")
    print("|---|---:|" + "---:|" * (len(ms) - 1))
    for s in shapes:
        for k in sorted({k for (s2, t, k) in rows if s2 == s and t == tier}):
            r = rows[(s, tier, k)]
            cells = [f"{r[m][0] / r[1][0]:.2f}" if m in r else "-" for m in ms[1:]]
            print(f"| {s} | {k} | " + " | ".join(cells) + " |")
gms = sorted({m for v in gate.values() for m in v})
print("\ngate_up: us (two GEMVs + SwiGLU / ours)\n")
print("| preset | k gate/up | tier | " + " | ".join(f"M {m}" for m in gms) + " |")
print("|---|---|---|" + "---:|" * len(gms))
for (p, pair, tier), r in gate.items():
    cells = [f"{r[m][0]:.1f} ({r[m][2]:.2f}x)" if m in r else "-" for m in gms]
    print(f"| {p} | {pair} | {tier} | " + " | ".join(cells) + " |")
if pre:
    pms = sorted({m for v in pre.values() for m in v})
    print("\nfast after its prescale kernel: us + prescale us (dense / the pair)\n")
    print("| shape | k | " + " | ".join(f"M {m}" for m in pms) + " |")
    print("|---|---|" + "---:|" * len(pms))
    for (s, k), r in pre.items():
        cells = [f"{r[m][0]:.1f} + {r[m][1]:.1f} ({r[m][2]:.2f}x)" if m in r else "-" for m in pms]
        print(f"| {s} | {k} | " + " | ".join(cells) + " |")
