#!/usr/bin/env python3
"""Which blocks of the large launches end late, from a DF_CUDA_TRACE file written with
DF_CUDA_TRACE_BLOCKS=1 by a trace build (kernels that call trace_block_end: the imma matvecs).
For every launch of at least --min-blocks blocks (all replays in the file), each block's end
minus the launch's median end ("lateness"); then per SM and per block index (in tenths of the
grid): the mean lateness, and whether the same SMs are late in both halves of the launches
(the correlation of their per-SM means). A per-SM pattern that repeats says the hardware, not
the work split, sets the tail.

usage: trace_ends.py TRACE [--min-blocks N]
"""
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, __import__("os").path.dirname(__file__))
from trace_step import block_ends, read_trace  # noqa: E402


def pearson(a, b):
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return num / den if den else 0.0


def main():
    path = sys.argv[1]
    min_blocks = int(sys.argv[sys.argv.index("--min-blocks") + 1]) if "--min-blocks" in sys.argv else 200
    _, b0, blocks = read_trace(path)
    # Per launch (in release order): (end - release, block x, sm) of each block.
    launches = [[(t - rel, where[0], sm) for t, where, sm in v]
                for (_, rel), v in sorted(block_ends(b0, blocks).items(), key=lambda kv: kv[0][1]) if len(v) >= min_blocks]
    if not launches:
        sys.exit("no launch with block ends (a trace build, DF_CUDA_TRACE_BLOCKS=1?)")
    half = len(launches) // 2
    by_sm, halves, by_pos = defaultdict(list), (defaultdict(list), defaultdict(list)), defaultdict(list)
    spread = []
    for k, v in enumerate(launches):
        es = sorted(e for e, _, _ in v)
        med = statistics.median(es)
        spread.append(((es[-1] - med) / 1e3, (es[-1] - es[0]) / 1e3))
        nb = max(bx for _, bx, _ in v) + 1
        for e, bx, sm in v:
            d = (e - med) / 1e3
            by_sm[sm].append(d)
            halves[k >= half][sm].append(d)
            by_pos[10 * bx // nb].append(d)
    print(f"{len(launches)} launches of >= {min_blocks} blocks; last block after the median "
          f"{statistics.median(s[0] for s in spread):.2f} us, last after first {statistics.median(s[1] for s in spread):.2f} us (medians)")
    sms = sorted(by_sm, key=lambda s: statistics.fmean(by_sm[s]))
    both = [s for s in sms if halves[0][s] and halves[1][s]]
    r = pearson([statistics.fmean(halves[0][s]) for s in both], [statistics.fmean(halves[1][s]) for s in both])
    print(f"per-SM mean lateness, first half of the launches vs second: correlation {r:.2f} over {len(both)} SMs")
    fmt = lambda ss: "  ".join(f"{s}:{statistics.fmean(by_sm[s]):+.2f}" for s in ss)
    print("earliest SMs (sm:us)", fmt(sms[:10]))
    print("latest SMs   (sm:us)", fmt(sms[-10:]))
    print("by block position (tenths of the grid):",
          "  ".join(f"{p}:{statistics.fmean(by_pos[p]):+.2f}" for p in sorted(by_pos)))


if __name__ == "__main__":
    main()
