#!/usr/bin/env python3
"""Instruction mix of kernels in a cuobjdump -sass listing (scripts/device.sh run sass).

  scripts/sass_mix.py SASS.txt[.gz] [REGEX]    every function whose (mangled) name matches REGEX:
                                               its instructions by opcode and by issue pipe, for
                                               the whole function and, where it has MMAs, for
                                               one iteration's main path of the loop around them
                                               (the imma kernels' unit: from the loop head to
                                               the first branch after the last MMA, blocks that
                                               forward branches before the first MMA skip over
                                               20+ instructions left out, e.g. a tile change)

The pipe classes are Hopper's as ncu names them (alu: integer logic, shifts, PRMT, IADD3;
fma: FP32 and IMAD; lsu: shared/global memory; tensor: MMA/IMMA); an estimate from the opcode,
enough to see which pipe a loop leans on.
"""
import gzip
import re
import sys
from collections import Counter

PIPES = [
    ("tensor", re.compile(r"^(HMMA|IMMA|HGMMA|IGMMA|BMMA|DMMA)")),
    ("lsu", re.compile(r"^(LDS|STS|LDG|STG|LDGSTS|LDSM|LD|ST|ATOMS|ATOM|RED|LDGDEPBAR|DEPBAR|SHFL|MATCH)")),
    ("fma", re.compile(r"^(FFMA|FADD|FMUL|IMAD|FSEL|FSETP|FMNMX|HFMA2|HADD2|HMUL2|FCHK|IDP|IDP4A)")),
    ("alu", re.compile(r"^(IADD3|LOP3|SHF|PRMT|SEL|ISETP|LEA|IABS|IMNMX|FLO|POPC|BREV|PLOP3|P2R|R2P|SGXT|BMSK|VIADD|VIMNMX|MOV|CS2R|S2R|S2UR|ULDC|LDC)")),
    ("xu", re.compile(r"^(MUFU|I2F|F2I|F2F|I2FP|F2FP|FRND)")),
    ("branch", re.compile(r"^(BRA|BSYNC|BSSY|EXIT|RET|CALL|WARPSYNC|BAR|NOP|YIELD|ELECT|SYNCS|UCGABAR|ACQBULK|VOTE)")),
]

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?\s*([^;]*);")
FUNC = re.compile(r"^\s*Function : (\S+)")


def pipe_of(op):
    if op.startswith("U"):  # uniform datapath: its own pipe, off the vector ones
        return "uniform"
    for name, rx in PIPES:
        if rx.match(op):
            return name
    return "other"


def functions(lines):
    name, body = None, []
    for line in lines:
        m = FUNC.match(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            lm = LINE.search(line)
            if lm:
                body.append((int(lm.group(1), 16), lm.group(3), lm.group(4) or "", lm.group(5)))
    if name:
        yield name, body


def mma_path(body):
    """One iteration's main path of the largest loop holding the MMAs (see the docstring), or None."""
    is_mma = lambda op: PIPES[0][1].match(op) is not None
    best = None
    for addr, op, _, args in body:
        t = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
        if t and int(t.group(1), 16) < addr:
            head = int(t.group(1), 16)
            if any(head <= a <= addr and is_mma(o) for a, o, _, _ in body):
                if best is None or addr - head > best[1] - best[0]:
                    best = (head, addr)
    if best is None:
        return None
    loop = [i for i in body if best[0] <= i[0] <= best[1]]
    first = min(a for a, o, _, _ in loop if is_mma(o))
    last = max(a for a, o, _, _ in loop if is_mma(o))
    end = next((a for a, o, _, _ in loop if a > last and o == "BRA"), best[1])
    path = [i for i in loop if i[0] <= end]
    skip = set()
    for addr, op, _, args in path:
        t = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
        if t and addr < first:
            target = int(t.group(1), 16)
            if addr < target < first and (target - addr) // 16 > 20:
                skip.update(a for a, _, _, _ in path if addr < a < target)
    return [i for i in path if i[0] not in skip]


def report(title, insts):
    ops = Counter(op + mods for _, op, mods, _ in insts)
    pipes = Counter(pipe_of(op) for _, op, _, _ in insts)
    print(f"  {title}: {len(insts)} instructions; by pipe: " + ", ".join(f"{p} {n}" for p, n in pipes.most_common()))
    print("    " + ", ".join(f"{o} {n}" for o, n in ops.most_common(40)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path, rx = sys.argv[1], re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for name, body in functions(f):
            if not rx.search(name):
                continue
            print(name)
            report("whole", body)
            path = mma_path(body)
            if path:
                report(f"MMA loop's main path {path[0][0]:#x}..{path[-1][0]:#x}", path)


if __name__ == "__main__":
    main()
