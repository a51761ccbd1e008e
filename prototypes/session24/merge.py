#!/usr/bin/env python3
"""Merge tables that device calls re-tuned from the same base: each entry from the first
table that changed it, in the base's order. Usage: merge.py BASE OUT T1 [T2 ...]"""
import re, sys
def blocks(p):
    parts = open(p).read().split("\n[[entry]]\n")
    def key(b):
        g = lambda f: re.search(rf'^{f} = "([^"]*)"', b, re.M).group(1)
        return (g("family"), g("key"), g("tier"), g("shape"))
    return parts[0], [(key(b), b) for b in parts[1:]]
head, base = blocks(sys.argv[1])
tables = [dict(blocks(p)[1]) for p in sys.argv[3:]]
out, changed = [], 0
for i, (k, b) in enumerate(base):
    nb = next((t[k] for t in tables if t[k].rstrip() != b.rstrip()), b)
    changed += nb is not b
    if i < len(base) - 1 and not nb.endswith("\n"): nb += "\n"
    out.append(nb)
open(sys.argv[2], "w").write(head + "".join("\n[[entry]]\n" + b for b in out))
print(f"{changed} entries changed")
