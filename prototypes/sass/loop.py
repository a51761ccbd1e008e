#!/usr/bin/env python3
"""Opcode histogram of the SASS loop containing the most HMMA (LOOP_OP=IDP: the most IDP,
for the SIMT kernels). Usage: loop.py file.sass [weights_per_iter]"""
import os, re, sys, collections
KEY = os.environ.get("LOOP_OP", "HMMA")
lines = open(sys.argv[1]).read().splitlines()
ins = []  # (lineno, opcode, text)
for i, l in enumerate(lines):
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
    if not m: continue
    body = re.sub(r"^@!?U?P[T0-9]+\s+", "", m.group(2).strip())
    ins.append((int(m.group(1), 16), body.split()[0], body))
# loops: backward branches
best = None
for idx, (addr, op, body) in enumerate(ins):
    if op == "BRA":
        t = re.search(r"\.L_x_(\d+)", body)
        a = re.search(r"\b0x([0-9a-f]+)", body)  # cuobjdump -sass names the address
        if t:
            lab = ".L_x_%s:" % t.group(1)
            li = next((j for j, l in enumerate(lines) if l.strip() == lab), None)
            # address of first instruction after label
            for l in lines[li+1:]:
                m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", l)
                if m: start = int(m.group(1), 16); break
        elif a:
            start = int(a.group(1), 16)
        else:
            continue
        if start < addr:
            body_ins = [x for x in ins if start <= x[0] <= addr]
            h = sum(1 for x in body_ins if x[1].startswith(KEY))
            if best is None or h > best[0]: best = (h, body_ins)
h, body = best
c = collections.Counter(x[1].split(".")[0] for x in body)
w = float(sys.argv[2]) if len(sys.argv) > 2 else None
print(f"loop: {len(body)} instr, {h} {KEY}" + (f", {len(body)/w:.2f} instr/weight" if w else ""))
print(" ".join(f"{k}:{v}" for k, v in c.most_common()))
