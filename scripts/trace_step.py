#!/usr/bin/env python3
"""One replayed decode step from a DF_CUDA_TRACE file (a -DDF_CUDA_TRACE=ON build, trace.h).

Every kernel's block 0 stamped when it started (S) and when it was past pdl_wait (W, i.e. when
its predecessor had completed). In launch order, for each kernel of the last captured graph's
last replay: S and W relative to the step's first W, how long before W the block was resident
(W - S: the PDL overlap), and the time to the next kernel's W (what the kernel added to the
chain), and the kernel's phase stamps (trace_phase) after W. Then those times summed per kernel name.

usage: trace_step.py TRACE [--all]
"""
import bisect
import re
import sys
from collections import defaultdict


def short(name):
    """The kernel's own identifier from its mangled name (past df::cuda and an anonymous namespace)."""
    pos = len("_ZN2df4cuda")
    if not name.startswith("_ZN2df4cuda"):
        return name[:40]
    while True:
        m = re.match(r"\d+", name[pos:])
        if not m:
            return name[:40]
        n, pos = int(m.group(0)), pos + m.end()
        ident = name[pos:pos + n]
        pos += n
        if not ident.startswith("_GLOBAL__N"):
            return ident


def read_trace(path):
    """The last captured graph's launches ((grid x, y, z, block), name), block 0's events
    (t, kind, signature) sorted by time, and the every-block records
    (t, kind, signature, (bx, by, bz), sm) of DF_CUDA_TRACE_BLOCKS=1 runs."""
    launches, events, segments, blocks = [], [], [], []
    for line in open(path):
        f = line.split()
        if f[0] == "L":
            launches.append(((int(f[1]), int(f[2]), int(f[3]), int(f[4])), f[5]))
        elif f[0] == "M":
            segments.append((f[1], len(launches)))
        elif f[0] == "E":
            t, kind, block, gx, gy, gz = map(int, f[1:7])
            events.append((t, kind, (gx, gy, gz, block)))
        elif f[0] == "B":
            t, kind, block, gx, gy, gz, bx, by, bz, sm = map(int, f[1:11])
            blocks.append((t, kind, (gx, gy, gz, block), (bx, by, bz), sm))
    caps = [i for i, (what, _) in enumerate(segments) if what == "capture"]
    if not caps:
        sys.exit("no captured graph in the trace")
    c = caps[-1]
    lo = segments[c][1]
    hi = segments[c + 1][1] if c + 1 < len(segments) else len(launches)
    events.sort()
    return launches[lo:hi], events, blocks


KIND_END = 15  # trace.h kTraceEnd: a block's end (trace_block_end)


def block_ends(b0, blocks):
    """Every-block end records grouped by launch: {(signature, block 0's release): [(t, (bx, by,
    bz), sm)]}. An end belongs to the launch of its shape released last before it (the next
    launch of that shape may have blocks resident already, but is released only after it)."""
    rel = defaultdict(list)
    for t, kind, sig in b0:
        if kind == 1:
            rel[sig].append(t)
    ends = defaultdict(list)
    for t, kind, sig, where, sm in blocks:
        if kind != KIND_END or sig not in rel:
            continue
        i = bisect.bisect_right(rel[sig], t) - 1  # b0 is sorted by time
        if i >= 0:
            ends[(sig, rel[sig][i])].append((t, where, sm))
    return ends


def main():
    graph, events, _ = read_trace(sys.argv[1])
    K = len(graph)
    starts = [e for e in events if e[1] == 0][-K:]
    first = starts[0][0] if starts else 0
    waits = [e for e in events if e[1] == 1 and e[0] >= first]
    # Match the replay's starts to the graph's launches by signature, in order (side streams may
    # reorder neighbours).
    used = [False] * K
    rows = [None] * K
    for t, _, sig in starts:
        for j in range(K):
            if not used[j] and graph[j][0] == sig:
                used[j] = True
                rows[j] = [t, None]
                break
    taken = set()
    for j in range(K):
        if rows[j] is None:
            continue
        t0, sig = rows[j][0], graph[j][0]
        for k, (t, _, s) in enumerate(waits):
            if k not in taken and s == sig and t >= t0:
                taken.add(k)
                rows[j][1] = t
                break
    # Phase stamps (kind 2 + k, trace_phase): to the kernel of the same shape released last before them.
    phases = defaultdict(list)
    for t, kind, sig in events:
        if kind < 2 or kind == KIND_END or t < first:
            continue
        best = None
        for j in range(K):
            r = rows[j]
            if r and r[1] is not None and graph[j][0] == sig and r[1] <= t and (best is None or rows[best][1] < r[1]):
                best = j
        if best is not None:
            phases[best].append((t, kind - 2))
    w0 = min(r[1] for r in rows if r and r[1] is not None)
    order = sorted((r[1], j) for j, r in enumerate(rows) if r and r[1] is not None)
    nxt = {}
    for (w, j), (w2, _) in zip(order, order[1:]):
        nxt[j] = w2 - w
    per = defaultdict(lambda: [0, 0.0, 0.0])
    show = "--all" in sys.argv
    if show:
        print(f"{'#':>4} {'kernel':<28} {'grid':>14} {'S us':>9} {'W us':>9} {'W-S':>7} {'->next':>7}")
    for j, ((sig, name), r) in enumerate(zip(graph, rows)):
        if not r or r[1] is None:
            continue
        s, w = (r[0] - w0) / 1e3, (r[1] - w0) / 1e3
        d = nxt.get(j, 0) / 1e3
        n = short(name)
        per[n][0] += 1
        per[n][1] += d
        per[n][2] += w - s
        if show:
            ph = "".join(f"  p{k} +{(t - r[1]) / 1e3:.2f}" for t, k in sorted(phases.get(j, [])))
            print(f"{j:>4} {n:<28} {str(sig[:3]):>14} {s:9.2f} {w:9.2f} {w - s:7.2f} {d:7.2f}{ph}")
    span = (order[-1][0] - order[0][0]) / 1e3
    print(f"step: {K} kernels, first to last release {span:.1f} us")
    print(f"{'kernel':<28} {'n':>5} {'sum ->next us':>14} {'share':>6} {'mean W-S us':>12}")
    for n, (cnt, d, lead) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:<28} {cnt:>5} {d:14.1f} {100 * d / span:5.1f}% {lead / cnt:12.2f}")


if __name__ == "__main__":
    main()
