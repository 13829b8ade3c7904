#!/usr/bin/env python3
"""Summarises an Nsight Compute source page (`ncu -i REP --page source --csv --print-source sass`): the share of
warp-stall samples by reason, and by SASS opcode with each opcode's executed instructions and top reasons.
Usage: ncu-stalls.py SOURCE.csv [TOP]"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    h, data = rows[head], rows[head + 1:]
    ix = {n: i for i, n in enumerate(h)}
    reasons = [n for n in h if n.startswith("stall_") and "Not Issued" not in n]
    total = {n: 0 for n in reasons}
    ops, samples = {}, 0

    def num(r, n):
        try:
            return int(r[ix[n]] or 0)
        except (ValueError, IndexError):
            return 0

    for r in data:
        s = num(r, "Warp Stall Sampling (All Samples)")
        words = r[1].split()
        op = (words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0] if words else "?")
        op = op.split(".")[0]
        o = ops.setdefault(op, [0, 0, {}])
        o[0] += s
        o[1] += num(r, "Instructions Executed")
        samples += s
        for n in reasons:
            v = num(r, n)
            total[n] += v
            o[2][n] = o[2].get(n, 0) + v
    if not samples:
        sys.exit("no stall samples in " + sys.argv[1])
    print(f"{samples} samples; by reason:")
    for n, v in sorted(total.items(), key=lambda x: -x[1])[:10]:
        print(f"  {n[6:]:20s} {100 * v / samples:5.1f}%")
    print("by opcode: share of samples, warp instructions executed, top reasons")
    for op, (s, e, d) in sorted(ops.items(), key=lambda x: -x[1][0])[:top]:
        best = sorted(d.items(), key=lambda x: -x[1])[:3]
        print(f"  {op:10s} {100 * s / samples:5.1f}% {e:>12d}  " +
              " ".join(f"{n[6:]}={100 * v / samples:.1f}" for n, v in best))


if __name__ == "__main__":
    main()
