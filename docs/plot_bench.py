#!/usr/bin/env python3
"""Plot kernel time against tokens per frame (S) from `camdelta bench --json` files, as an SVG, with plain
Python (no matplotlib needed).

    python3 docs/plot_bench.py -o docs/scan-time-vs-s.svg bench-*.json
    python3 docs/plot_bench.py --only scan -o out.svg a.json b.json

Every (operation, precision) pair found in the files becomes one line over the shapes' S (files of several
shapes, or several files of one shape each, all with the same B, H, D, F). The original Triton kernels'
figures (measured on the same H200 at sana480, S=1560; `--triton` to leave them out) are drawn as markers.
"""
import argparse
import json
import sys

# Seed Triton kernels on the H200, sana480 (B1 H20 D112 F21 S1560), ms: operation -> time.
TRITON = {
    "scan-forward chunkwise (Triton bf16)": (1560, 3.05),
    "scan-forward chunkwise (Triton tf32)": (1560, 3.63),
    "scan-forward chunkwise (Triton exact f32)": (1560, 5.26),
    "scan-backward (Triton)": (1560, 9.70),
    "scan-forward sequential (Triton)": (1560, 5.13),
}

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"]


def load(paths, only):
    series = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        prec = doc.get("precision", "exact")
        # the arithmetic path of the run: from any scan-forward plan in the file (the backward records none)
        plans = [op.get("plan", "") for sh in doc.get("shapes", []) for op in sh.get("operations", [])]
        plan = next((p for p in plans if p.startswith("chunkwise")), "")  # (a plan text may name the other in its AUTO estimate)
        for shape in doc.get("shapes", []):
            for op in shape.get("operations", []):
                if "median_ms" not in op or (only and only not in op["name"]):
                    continue
                path = prec
                if "(fma" in plan and prec == "exact":
                    path = "exact, fma"
                elif "tensor cores" in plan:
                    path = prec + ", tensor cores"
                key = "%s [%s]" % (op["name"], path)
                series.setdefault(key, {})[int(shape["S"])] = float(op["median_ms"])
    return series


def svg(series, triton, title):
    W, H, L, R, T, B = 900, 560, 70, 330, 40, 50
    xs = sorted({s for pts in series.values() for s in pts} | ({p[0] for p in triton.values()} if triton else set()))
    ys = [v for pts in series.values() for v in pts.values()] + ([p[1] for p in triton.values()] if triton else [])
    if not xs or not ys:
        sys.exit("plot_bench: nothing to plot")
    x0, x1 = 0, max(xs) * 1.05
    y0, y1 = 0, max(ys) * 1.1

    def px(x):
        return L + (W - L - R) * (x - x0) / (x1 - x0)

    def py(y):
        return H - B - (H - T - B) * (y - y0) / (y1 - y0)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (W, H), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15">%s</text>' % (L, title)]
    for i in range(6):  # grid and axes
        yv = y0 + (y1 - y0) * i / 5
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, py(yv), W - R, py(yv)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (L - 6, py(yv) + 4, yv))
    for x in xs:
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(x), H - B + 16, x))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">tokens per frame S</text>' % ((L + W - R) / 2, H - 12))
    out.append('<text x="16" y="%.1f" transform="rotate(-90 16 %.1f)" text-anchor="middle">median kernel ms</text>'
               % ((T + H - B) / 2, (T + H - B) / 2))
    ly = T + 10
    for i, (name, pts) in enumerate(sorted(series.items())):
        c = COLORS[i % len(COLORS)]
        coords = " ".join("%.1f,%.1f" % (px(s), py(v)) for s, v in sorted(pts.items()))
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (c, coords))
        for s, v in sorted(pts.items()):
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (px(s), py(v), c))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (W - R + 12, ly, W - R + 32,
                                                                                              ly, c))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 38, ly + 4, name))
        ly += 17
    for i, (name, (s, v)) in enumerate(sorted((triton or {}).items())):
        c = COLORS[(len(series) + i) % len(COLORS)]
        out.append('<rect x="%.1f" y="%.1f" width="8" height="8" fill="none" stroke="%s" stroke-width="2"/>'
                   % (px(s) - 4, py(v) - 4, c))
        out.append('<rect x="%d" y="%d" width="8" height="8" fill="none" stroke="%s" stroke-width="2"/>'
                   % (W - R + 18, ly - 4, c))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 38, ly + 4, name))
        ly += 17
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="camdelta bench --json outputs")
    ap.add_argument("-o", "--output", required=True, help="SVG file to write")
    ap.add_argument("--only", default="scan", help="operations whose name contains this (default: scan)")
    ap.add_argument("--triton", action="store_true", help="leave out the Triton markers")
    ap.add_argument("--title", default="camdelta scan on the H200 vs the original Triton kernels")
    a = ap.parse_args()
    series = load(a.json, a.only)
    kind = (a.only or "").split()[0] if a.only else ""
    triton = None if a.triton else {k: v for k, v in TRITON.items() if kind in k}
    with open(a.output, "w") as f:
        f.write(svg(series, triton, a.title))


if __name__ == "__main__":
    main()
