#!/usr/bin/env python3
"""The structures `far` (then `drop_far_structures`) removes at M <= 8 (src/families/reduce_mma/space.rs), checked
against full re-tune traces: per rule, how many measurements it removes and the closest any
came to its key's best. Usage: far.py TRACE.tsv..."""
import csv, collections, re, sys
def load(f):
    rows=[x for x in list(csv.reader(open(f), delimiter="\t"))[1:] if x[0]!="key"]
    groups=[]
    for k,v,o,med,*_ in rows:
        if not groups or groups[-1][0]!=k or v in groups[-1][2]:
            groups.append((k,[],set()))
        groups[-1][2].add(v)
        if o in ("timed","pruned"): groups[-1][1].append((v,float(med)))
    return groups
def fields(v):
    d={}
    for t in v.split()[1:]:
        a,_,b=t.partition("="); d[a]=b or True
    return d
def rule(m,f):
    rt=int(f["rt"]); cs=int(f["cs"]); ks=int(f.get("ks",1)); x=f.get("x","global")
    staged = x.startswith("shared")
    if m>8: return None
    if rt==1 and ks==1 and cs==1: return "unsplit cs1"
    if rt==1 and ks==1 and cs==2 and not (m>=4 and not staged): return "unsplit cs2"
    if 4<=m<=8 and ks>1 and cs==1 and staged: return "staged split cs1"
    if 4<=m<=8 and ks>1 and cs==8 and x=="shared_dup": return "dup split cs8"
    return None
stat=collections.defaultdict(list); total=0
for fn in sys.argv[1:]:
    for k,vs,_ in load(fn):
        if "reduce_mma" not in k or not vs: continue
        best=min(t for _,t in vs); m=int(re.search(r"M=(\d+)",k).group(1))
        for v,t in vs:
            if m<=8: total+=1
            r=rule(m,fields(v))
            if r: stat[r].append((t/best,k,v))
for r,l in stat.items():
    mn=min(l)
    print(f"{r}: {len(l)} meas, min ratio {mn[0]:.3f} at {mn[1]} | {mn[2]}")
print("total M<=8 measurements", total)
