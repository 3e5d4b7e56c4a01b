#!/usr/bin/env python3
"""Summarises `ncu --metrics gpu__time_duration.sum --csv` of a diskformer run, kernels grouped by
name with count, total and mean time: of its last complete decode step (between the last two
argmax_finish_kernel launches), or with --all of every kernel (e.g. a prefill)."""
import csv
import re
import sys
from collections import defaultdict

rows = []
whole = "--all" in sys.argv[1:]
path = [a for a in sys.argv[1:] if a != "--all"][0]
with open(path, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "ns")
    v = float(r["Metric Value"].replace(",", ""))
    us = v / 1000 if unit == "ns" else v if unit in ("us", "usecond") else v * 1000 if unit in ("ms", "msecond") else v / 1000
    rows.append((int(r["ID"]), r["Kernel Name"], us))
rows.sort()
if whole:
    step = rows
else:
    ends = [i for i, (_, n, _) in enumerate(rows) if "argmax_finish_kernel" in n]
    if len(ends) < 2:
        sys.exit(f"need two decode steps, found {len(ends)} argmax launches")
    step = rows[ends[-2] + 1 : ends[-1] + 1]
agg = defaultdict(lambda: [0, 0.0])
for _, name, us in step:
    short = re.sub(r"\([^()]*\)$", "", name)  # the parameter list
    short = re.sub(r"^void |df::cuda::|\(anonymous namespace\)::", "", short)
    agg[short][0] += 1
    agg[short][1] += us
total = sum(v[1] for v in agg.values())
print(f"{len(step)} kernels, {total:.0f} us of kernel time" + ("" if whole else " in one decode step"))
for name, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{us:9.1f} us {100 * us / total:5.1f} %  {n:4d} x {us / n:7.2f} us  {name[:110]}")
