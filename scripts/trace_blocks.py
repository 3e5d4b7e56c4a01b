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
    # Each block event goes to the launch of its signature whose block 0 started last before it
    # (blocks of one launch may start before block 0 does: allow 50 us).
    per = defaultdict(lambda: {0: {}, 1: {}, KIND_END: {}})
    by_sig = defaultdict(list)
    for j in range(K):
        if s0[j] is not None:
            by_sig[graph[j][0]].append((s0[j], j))
    for v in by_sig.values():
        v.sort()
    for t, kind, sig, where, sm in blocks:
        if t < first - 50_000 or kind == KIND_END:
            continue
        cands = [j for s, j in by_sig.get(sig, []) if s - 50_000 <= t]
        if not cands:
            continue
        j = cands[-1]
        per[j][kind][where] = (t, sm)
    ends = block_ends(b0, blocks)
    for j in range(K):
        w = per[j][1].get((0, 0, 0))
        if w is not None:
            per[j][KIND_END] = {where: (t, sm) for t, where, sm in ends.get((graph[j][0], w[0]), [])}
    print(f"{'#':>4} {'kernel':<26} {'blocks':>6} {'SMs':>4} {'max/SM':>6} {'S-W0 min/med/max us':>22} "
          f"{'late':>5} {'W-W0 med/max us':>16}")
    rows = []
    for j in range(K):
        if s0[j] is None or not per[j][1]:
            continue
        w0 = per[j][1].get((0, 0, 0), (None,))[0]
        if w0 is None:
            continue
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
