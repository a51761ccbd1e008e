#!/usr/bin/env python3
"""M = 16 over M = 1 of the table's `reduce_mma` winners (tune medians, each key's own
entries), per shape, code, L and k. Usage: ratios.py [TABLE]"""
import sys, tomllib, re
t = tomllib.load(open(sys.argv[1] if len(sys.argv) > 1 else "tuning/nvidia-h200.toml", "rb"))
us = {}
for e in t["entry"]:
    if e["family"] != "reduce_mma": continue
    m = re.match(r"bf16 M=(\d+) k(\d) L(\d+) (\w+)", e["key"])
    M, k, L, code = int(m[1]), int(m[2]), int(m[3]), m[4]
    us[(e["shape"], code, L, k, M)] = e["stats"]["median_us"]
print("| shape | code | L | k 2 | k 3 | k 4 |\n|---|---|---|---|---|---|")
worst = []
for shape in ["17408x5120", "5120x17408", "14336x4096", "4096x14336"]:
    for code in ["1mad", "3inst", "mcg"]:
        for L in [12, 16]:
            cells = []
            for k in [2, 3, 4]:
                a, b = us.get((shape, code, L, k, 1)), us.get((shape, code, L, k, 16))
                if a and b:
                    cells.append(f"{b:.1f} / {a:.1f} = {'**' if b / a <= 1.5 else ''}{b / a:.2f}{'**' if b / a <= 1.5 else ''}")
                    worst.append((b / a, shape, code, L, k))
                else: cells.append("-")
            print(f"| {shape} | {code} | {L} | " + " | ".join(cells) + " |")
worst.sort()
print(f"\nat most 1.5: {sum(r <= 1.5 for r, *_ in worst)} of {len(worst)}; largest {worst[-1]}")
