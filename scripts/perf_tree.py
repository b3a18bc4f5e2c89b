#!/usr/bin/env python3
"""Call tree from `perf script` output (recorded with --call-graph dwarf), under one symbol.

    perf_tree.py PERF_SCRIPT_TXT [ROOT_SUBSTRING] [MAX_DEPTH] [MIN_PERCENT]

Percentages are inclusive and relative to all samples of the process, so they read as "share
of the server's CPU time". Inlined std/closure wrappers are folded away.
"""

import collections
import re
import sys

FOLDED = ("catch_unwind", "call_once", "AssertUnwindSafe", "do_call", "{{closure}}", "(inlined)")


def stacks(path):
    """Yields each sample's frames, leaf first."""
    frames = None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if frames is not None:
                    yield frames
                frames = None
            elif not line.startswith((" ", "\t")):
                frames = []
            elif frames is not None:
                parts = line.strip().split(None, 1)
                if len(parts) == 2:
                    sym = re.sub(r"\+0x[0-9a-f]+", "", parts[1])
                    sym = re.sub(r"\s*\((/[^)]*|\[[^)]*\])\)\s*$", "", sym)
                    frames.append(re.sub(r"::h[0-9a-f]{16}", "", sym))
    if frames:
        yield frames


def main():
    path = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else "RedisModuleCommandDispatcher"
    max_depth = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    min_pct = float(sys.argv[4]) if len(sys.argv) > 4 else 0.4
    counts = collections.Counter()
    total = 0
    for frames in stacks(path):
        total += 1
        st = list(reversed(frames))
        at = next((i for i, s in enumerate(st) if root in s), None)
        if at is None:
            continue
        tree_path = []
        for sym in st[at:]:
            if any(x in sym for x in FOLDED) and "redis_rl" not in sym:
                continue
            if len(tree_path) >= max_depth:
                break
            tree_path.append(sym)
            counts[tuple(tree_path)] += 1

    def show(prefix, depth):
        kids = [(p, c) for p, c in counts.items()
                if len(p) == len(prefix) + 1 and p[:len(prefix)] == prefix]
        for p, c in sorted(kids, key=lambda kv: -kv[1]):
            pct = 100.0 * c / max(total, 1)
            if pct >= min_pct:
                print("%s%5.1f%%  %s" % ("  " * depth, pct, p[-1][:120]))
                show(p, depth + 1)

    show((), 0)
    print("(%d samples of the whole process)" % total)


if __name__ == "__main__":
    main()
