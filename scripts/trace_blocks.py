#!/usr/bin/env python3
"""Every block of one replayed decode step, from a DF_CUDA_TRACE file written with
DF_CUDA_TRACE_BLOCKS=1 (trace.h): for each kernel of the last replay (as scripts/trace_step.py
finds it), when its blocks became resident (S) and got past pdl_wait (W), relative to block 0's
W (the kernel's release), and how they sat on the SMs. Blocks resident only after the release
start their weight loads late; a wide spread of W means the release reached blocks unevenly.
Kernels that stamp their blocks' ends (trace_block_end: the imma matvecs) also get E - W0
(min / median / max): how unevenly their blocks finish.

usage: trace_blocks.py TRACE [--top N]
"""
import bisect
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, __import__("os").path.dirname(__file__))
from trace_step import KIND_END, block_ends, read_trace, short  # noqa: E402


def main():
    path = sys.argv[1]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    graph, b0, blocks = read_trace(path)
    K = len(graph)
    starts = [e for e in b0 if e[1] == 0][-K:]
    if len(starts) < K:
        sys.exit("the trace holds no complete replay")
    first = starts[0][0]
    # Block 0's start of each launch of the replay, in launch order (by signature, in order).
    used, s0 = [False] * K, [None] * K
    for t, _, sig in starts:
        for j in range(K):
            if not used[j] and graph[j][0] == sig:
                used[j], s0[j] = True, t
                break
    # Block 0's release (W0) of each launch: the first release stamp of its shape after its start
    # that no earlier launch took (as trace_step.py pairs them).
    w0s = [None] * K
    rel = defaultdict(list)
    for t, kind, sig in b0:
        if kind == 1:
            rel[sig].append(t)
    taken = defaultdict(int)  # per shape: releases before this index are taken
    for j in sorted((j for j in range(K) if s0[j] is not None), key=lambda j: s0[j]):
        sig = graph[j][0]
        ts = rel.get(sig, [])
        i = max(bisect.bisect_left(ts, s0[j]), taken[sig])
        if i < len(ts):
            w0s[j] = ts[i]
            taken[sig] = i + 1
    # A block's release stamp goes to the launch of its shape released last before it (no block
    # passes pdl_wait much before block 0 does: 2 us allowed), and its start stamp is the same
    # block's last start before that release. Launches of one shape (o_proj and down share
    # theirs) are told apart by their releases, not by when their blocks became resident: a
    # launch's blocks may become resident while the previous launch of its shape still runs.
    slack = 2_000
    events = defaultdict(lambda: {0: [], 1: []})  # (sig, where) -> kind -> sorted [(t, sm)]
    for t, kind, sig, where, sm in blocks:
        if kind in (0, 1) and t >= first - 100_000:
            events[(sig, where)][kind].append((t, sm))
    for ev in events.values():
        ev[0].sort()
        ev[1].sort()
    per = defaultdict(lambda: {0: {}, 1: {}, KIND_END: {}})
    by_sig = defaultdict(list)
    for j in range(K):
        if w0s[j] is not None:
            by_sig[graph[j][0]].append((w0s[j], j))
    for v in by_sig.values():
        v.sort()
    for (sig, where), ev in events.items():
        launches = by_sig.get(sig, [])
        s_times, w_times = [t for t, _ in ev[0]], [t for t, _ in ev[1]]
        for k, (w0, j) in enumerate(launches):
            hi = launches[k + 1][0] - slack if k + 1 < len(launches) else float("inf")
            i = bisect.bisect_left(w_times, w0 - slack)
            if i == len(w_times) or w_times[i] >= hi:
                continue
            per[j][1][where] = ev[1][i]
            i = bisect.bisect_right(s_times, w_times[i]) - 1
            if i >= 0:
                per[j][0][where] = ev[0][i]
    ends = block_ends(b0, blocks)
    for j in range(K):
        if w0s[j] is not None:
            per[j][KIND_END] = {where: (t, sm) for t, where, sm in ends.get((graph[j][0], w0s[j]), [])}
    print(f"{'#':>4} {'kernel':<26} {'blocks':>6} {'SMs':>4} {'max/SM':>6} {'S-W0 min/med/max us':>22} "
          f"{'late':>5} {'W-W0 med/max us':>16}")
    rows = []
    for j in range(K):
        if s0[j] is None or not per[j][1]:
            continue
        w0 = w0s[j]
        ss = [t - w0 for t, _ in per[j][0].values()]
        ws = [t - w0 for t, _ in per[j][1].values()]
        sms = defaultdict(int)
        for _, sm in per[j][0].values():
            sms[sm] += 1
        late = sum(1 for s in ss if s > 0)
        es = sorted(t - w0 for t, _ in per[j][KIND_END].values())
        ends = f"  E-W0 {es[0] / 1e3:6.2f} {statistics.median(es) / 1e3:6.2f} {es[-1] / 1e3:6.2f}" if es else ""
        rows.append((j, short(graph[j][1]), len(ss), len(sms), max(sms.values()), min(ss) / 1e3,
                     statistics.median(ss) / 1e3, max(ss) / 1e3, late, statistics.median(ws) / 1e3, max(ws) / 1e3, ends))
    for r in rows[:top]:
        print(f"{r[0]:>4} {r[1]:<26} {r[2]:>6} {r[3]:>4} {r[4]:>6} {r[5]:7.2f} {r[6]:6.2f} {r[7]:7.2f} {r[8]:>5} "
              f"{r[9]:7.2f} {r[10]:7.2f}{r[11]}")
    # Per kernel name: how many blocks became resident after the release, and how late.
    agg = defaultdict(lambda: [0, 0, 0, 0.0])
    for r in rows:
        a = agg[r[1]]
        a[0] += 1
        a[1] += r[2]
        a[2] += r[8]
        a[3] += max(r[7], 0.0)
    print(f"{'kernel':<26} {'launches':>8} {'blocks':>8} {'late blocks':>11} {'mean last S after W us':>23}")
    for n, (cnt, nb, late, last) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
        print(f"{n:<26} {cnt:>8} {nb:>8} {late:>11} {last / cnt:23.2f}")


if __name__ == "__main__":
    main()
