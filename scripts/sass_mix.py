#!/usr/bin/env python3
"""Instruction mix of kernels in a cuobjdump -sass listing (scripts/device.sh run sass).

  scripts/sass_mix.py SASS.txt[.gz] [REGEX]    every function whose (mangled) name matches REGEX:
                                               its instructions by opcode and by issue pipe,
                                               whole function and its hottest loop (the largest
                                               backward branch's body)

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


def hottest_loop(body):
    """The body of the longest backward branch (address range), or None."""
    best = None
    for addr, op, _, args in body:
        if op == "BRA":
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) < addr:
                span = (int(t.group(1), 16), addr)
                if best is None or span[1] - span[0] > best[1] - best[0]:
                    best = span
    if best is None:
        return None
    return [i for i in body if best[0] <= i[0] <= best[1]]


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
            loop = hottest_loop(body)
            if loop:
                report(f"loop {loop[0][0]:#x}..{loop[-1][0]:#x}", loop)


if __name__ == "__main__":
    main()
