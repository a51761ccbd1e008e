#!/usr/bin/env python3
"""Which parts of the `reduce_mma` candidate space never come close: from a full re-tune's
traces (every candidate's median per key), group the candidates by M class and structural
fields (x staging, split K or not, row tiles, column split, operands, host-f16 x, paired
windows, batched staging) and print each group whose best time over the key's best, at
any key, is above THRESHOLD (default 1.10), with how many measurements it cost.
Usage: space.py TRACE.tsv... [--threshold 1.10] [--family reduce_mma]"""
import csv, collections, re, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
thr = float(sys.argv[sys.argv.index("--threshold") + 1]) if "--threshold" in sys.argv else 1.10
fam = sys.argv[sys.argv.index("--family") + 1] if "--family" in sys.argv else "reduce_mma"
args = [a for a in args if a != str(thr) and a != fam]
rows = []
for f in args:
    rows += [x for x in list(csv.reader(open(f), delimiter="\t"))[1:] if x[0] != "key"]
# A trace key is a bucket that two measured shapes share: a new group starts where a
# variant repeats within the current one.
groups = []
for k, v, o, med, *_ in rows:
    if k.split()[0] != fam:
        continue
    if not groups or groups[-1][0] != k or v in groups[-1][2]:
        groups.append((k, [], set()))
    groups[-1][2].add(v)
    if o in ("timed", "pruned"):
        groups[-1][1].append((v, float(med)))
def fields(v):
    d = {}
    for t in v.split()[1:]:
        a, _, b = t.partition("=")
        d[a] = b or True
    return d
stat = collections.defaultdict(list)
for k, vs, _ in groups:
    if not vs:
        continue
    best = min(m for _, m in vs)
    m = int(re.search(r"M=(\d+)", k).group(1))
    for v, t in vs:
        f = fields(v)
        g = ("M 16" if m > 8 else "M 1-2" if m <= 2 else "M 4-8", "x=" + str(f.get("x", "global")),
             "split" if int(f.get("ks", 1)) > 1 else "unsplit", "rt=" + f["rt"], "cs=" + f["cs"],
             "bf16 ops" if f.get("ops") == "bf16" else "f16 ops", "xf16" if "xf16" in f else "",
             "pw" if "pw" in f else "", "bs" if "bs" in f else "")
        stat[g].append(t / best)
never = sorted((min(r), g, len(r)) for g, r in stat.items() if min(r) > thr)
total = sum(len(r) for r in stat.values())
print(f"{len(groups)} keys, {total} measurements; never within {thr:.2f}x of a key's best: "
      f"{len(never)} groups, {sum(n for _, _, n in never)} measurements")
for best, g, n in never:
    print(f"{best:.3f} {n:5d} " + " ".join(x for x in g if x))
