#!/usr/bin/env python3
"""camdelta on a CPU beside the peers a CPU user has, in one run on the same cores and thread count.

    /usr/bin/python3 python/benchmarks/cpu_side_by_side.py --cli build/camdelta [--shape 1,20,112,3,1560]
        [--threads 1,2] [--reps 3] [--coretypes default,Haswell]

For each thread count n (POCL_MAX_PTHREAD_COUNT, LP_NUM_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and
torch.set_num_threads all n; each in a fresh process, since the libraries read them at start-up):

1. camdelta: `camdelta bench --json` on the default device (PoCL; --device to choose): prep forward/backward,
   scan forward (chunkwise, the plan AUTO takes with the CPU forms) and backward, branch forward/backward;
   kernel milliseconds (minimum of --reps), its GFLOP/s counted as bench counts them (scan forward 6·N·D² per
   (b, h), backward 14·N·D²), GB/s of the minimal bytes, and the device's measured peaks (fma, copy).
2. OpenBLAS sgemm through NumPy (python3-numpy links Debian's libblas.so.3, the OpenBLAS alternative where
   libopenblas0-pthread is installed: the script prints what NumPy reports) on the same products: per (b, h, f)
   the forward's K_fᵀ·[K_f | V_f] (D x S by S x 2D) and Q_f·M_f (S x D by D x D), 6·S·D² flops; the backward's
   products of those shapes, 14·S·D²; and a 1024 x 1024 product. Each OPENBLAS_CORETYPE of --coretypes
   runs in its own process ("default": unset).
3. The seed's PyTorch references (python/tests/third_party/sana/fused_cam_ucpe_reference.py, loaded with its GPU imports
   stubbed): _torch_cam_prep_reference forward, _torch_cam_scan_reference forward (causal, reverse) and the
   causal scan's backward through autograd.

Prints one table per thread count: milliseconds and rates of each, and camdelta's ratios (its rate over sgemm's
at the same products; the seed's time over camdelta's). A benchmark, not a test: nothing is asserted.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def best_ms(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


# the bench's operations timed here (its forced sequential scans are left out)
GROUPS = ("prep", "chunkwise", "scan-backward", "branch")


def camdelta_rows(cli, shape, reps, device):
    """One bench run per group of operations, merged into the first run's JSON."""
    data, text = None, ""
    with tempfile.TemporaryDirectory() as tmp:
        for g in GROUPS:
            path = os.path.join(tmp, "bench.json")
            cmd = [cli, "bench", "--shape", shape, "--reps", str(reps), "--warmup", "1", "--only", g, "--json", path]
            if device:
                cmd += ["--device", device]
            text += subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
            with open(path) as f:
                part = json.load(f)
            if data is None:
                data = part
            else:
                data["shapes"][0]["operations"] += part["shapes"][0]["operations"]
    return text, data


def sgemm_rows(shape, reps):
    import numpy as np
    B, H, D, F, S = shape
    rng = np.random.default_rng(0)
    n = B * H * F
    kT = rng.standard_normal((n, D, S), dtype=np.float32)
    kv = rng.standard_normal((n, S, 2 * D), dtype=np.float32)
    q = rng.standard_normal((n, S, D), dtype=np.float32)
    m = rng.standard_normal((n, D, D), dtype=np.float32)
    g = np.empty((n, D, 2 * D), np.float32)
    o = np.empty((n, S, D), np.float32)
    o2 = np.empty((n, D, D), np.float32)

    def fwd():
        np.matmul(kT, kv, out=g)
        np.matmul(q, m, out=o)

    def bwd():  # grams W, A and K_fᵀ·[K_f | V_f] (D x S by S x D, 2D); three S x D by D x D products: 14·S·D²
        np.matmul(kT, q, out=o2)
        np.matmul(kT, q, out=o2)
        np.matmul(kT, kv, out=g)
        np.matmul(q, m, out=o)
        np.matmul(q, m, out=o)
        np.matmul(q, m, out=o)

    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    c = np.empty((1024, 1024), np.float32)
    t_f, t_b = best_ms(fwd, reps), best_ms(bwd, reps)
    t_sq = best_ms(lambda: np.matmul(a, b, out=c), reps * 3)
    N = F * S
    return {"fwd_ms": t_f, "fwd_gflops": 6 * B * H * N * D * D / t_f / 1e6,
            "bwd_ms": t_b, "bwd_gflops": 14 * B * H * N * D * D / t_b / 1e6,
            "sq_gflops": 2 * 1024 ** 3 / t_sq / 1e6}


def seed_rows(shape, reps, threads):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import seed_loader
    seed = seed_loader.load()
    torch.set_num_threads(threads)
    B, H, D, F, S = shape
    N = F * S
    torch.manual_seed(0)
    raw = [torch.randn(B, N, H, D) for _ in range(3)]
    ang = torch.rand(N, D // 4) * 6.28
    kw = dict(q_norm_weight=1 + 0.1 * torch.randn(H * D), k_norm_weight=1 + 0.1 * torch.randn(H * D),
              proj_q=torch.randn(B, N, 4, 4) * 0.5, proj_kv=torch.randn(B, N, 4, 4) * 0.5,
              rope_cos=torch.cos(ang).repeat_interleave(2, -1).contiguous(),
              rope_sin=torch.stack([-torch.sin(ang), torch.sin(ang)], -1).reshape(N, D // 2).contiguous(),
              k_scale=(D * S) ** -0.5, norm_eps=1e-6)
    q = torch.randn(B, H, D, N)
    k = torch.randn(B, H, D, N) * (D * S) ** -0.5
    v = torch.randn(B, H, D, N)
    beta = 0.1 + 0.8 * torch.rand(B, H, F, S)
    decay = 0.5 + 0.5 * torch.rand(B, H, F)
    up = torch.randn(B, H, D, N)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, beta, decay)]

    def bwd():
        out = seed._torch_cam_scan_reference(*leaves)
        out.backward(up)

    with torch.no_grad():
        prep = best_ms(lambda: seed._torch_cam_prep_reference(*raw, **kw), reps)
        fwd_c = best_ms(lambda: seed._torch_cam_scan_reference(q, k, v, beta, decay), reps)
        fwd_r = best_ms(lambda: seed._torch_cam_scan_reference(q, k, v, beta, decay, reverse=True), reps)
    t0 = time.perf_counter()
    bwd()
    fwd_bwd = best_ms(bwd, reps)
    return {"prep_ms": prep, "fwd_causal_ms": fwd_c, "fwd_reverse_ms": fwd_r, "fwd_bwd_causal_ms": fwd_bwd,
            "bwd_causal_ms": fwd_bwd - fwd_c, "_first_s": time.perf_counter() - t0}


def worker(opt):
    shape = tuple(int(x) for x in opt.shape.split(","))
    res = {"threads": opt.threads_one, "coretype": os.environ.get("OPENBLAS_CORETYPE", "default")}
    if opt.part == "sgemm":
        import numpy as np
        res["numpy"] = np.__version__
        with open("/proc/self/maps") as f:  # the BLAS NumPy loaded (libblas.so.3 is an alternative)
            libs = {os.path.realpath(ln.split()[-1]) for ln in f if "blas" in ln and "/" in ln}
        res["blas"] = ", ".join(sorted(libs))
        res["sgemm"] = sgemm_rows(shape, opt.reps)
    else:
        res["camdelta_text"], res["camdelta"] = camdelta_rows(opt.cli, opt.shape, opt.reps, opt.device)
        res["seed"] = seed_rows(shape, opt.reps, opt.threads_one)
    json.dump(res, sys.stdout)


def run_worker(opt, n, part, coretype=None):
    env = dict(os.environ)
    for var in ("POCL_MAX_PTHREAD_COUNT", "LP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        env[var] = str(n)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype and coretype != "default":
        env["OPENBLAS_CORETYPE"] = coretype
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--part", part, "--threads-one", str(n),
           "--shape", opt.shape, "--reps", str(opt.reps), "--cli", opt.cli] + (["--device", opt.device] if opt.device
                                                                              else [])
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, env=env, universal_newlines=True).stdout
    return json.loads(out)


def op(data, name):
    for s in data["shapes"]:
        for o in s["operations"]:
            if o["name"] == name and "min_ms" in o:
                return o
    return None


def report(opt, n, cd, blas):
    d = cd["camdelta"]
    seed = cd["seed"]
    gpk, bpk = d.get("measured_peak_gflops", 0), d.get("measured_peak_gbs", 0)
    fma = "mul+add" if d.get("measured_peak_soft_fma") else "fma"
    print("\n## %d thread(s): %s, %s; camdelta %s; device peaks measured: %.1f GFLOP/s %s (%s), %.1f GB/s copy (%s)" %
          (n, d["device"], d["platform"], d["camdelta"], gpk, fma, d.get("measured_peak_fma_shape", "?"), bpk,
           d.get("measured_peak_copy_shape", "?")))
    print("load (uptime) at the start: %s" % opt.load)
    print("\n| operation | camdelta min ms | GFLOP/s | GB/s | % peak fma | % peak copy | peer | peer ms | "
          "peer GFLOP/s | camdelta vs peer |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = [("prep-forward", "seed prep reference", seed["prep_ms"], None),
            ("prep-backward", None, None, None),
            ("scan-forward chunkwise causal", "seed scan reference (causal)", seed["fwd_causal_ms"], None),
            ("scan-forward chunkwise reverse", "seed scan reference (reverse)", seed["fwd_reverse_ms"], None),
            ("scan-backward causal", "seed scan backward (autograd)", seed["bwd_causal_ms"], None),
            ("scan-backward reverse", None, None, None),
            ("branch-forward", None, None, None),
            ("branch-backward", None, None, None)]
    for name, peer, peer_ms, _ in rows:
        o = op(d, name)
        if not o:
            continue
        ms = o["min_ms"]
        gf = o["flops"] / (ms * 1e-3) / 1e9 if o["flops"] else 0
        gb = o["bytes"] / (ms * 1e-3) / 1e9
        print("| %s | %.1f | %s | %.1f | %s | %.0f%% | %s | %s | | %s |" %
              (name, ms, "%.1f" % gf if gf else "-", gb, "%.0f%%" % (100 * gf / gpk) if gf and gpk else "-",
               100 * gb / bpk if bpk else 0, peer or "", "%.1f" % peer_ms if peer_ms else "",
               "%.2fx faster" % (peer_ms / ms) if peer_ms else ""))
        if name.startswith("scan-forward") or name.startswith("scan-backward"):
            for b in blas:
                s = b["sgemm"]
                key = "fwd" if name.startswith("scan-forward") else "bwd"
                print("| %s | | | | | | OpenBLAS sgemm, same products (OPENBLAS_CORETYPE=%s) | %.1f | %.1f | "
                      "%.0f%% of its rate |" % (name, b["coretype"], s[key + "_ms"], s[key + "_gflops"],
                                                 100 * gf / s[key + "_gflops"]))
    for b in blas:
        print("\nOpenBLAS sgemm 1024x1024 (OPENBLAS_CORETYPE=%s, NumPy %s, %s): %.1f GFLOP/s" %
              (b["coretype"], b["numpy"], b["blas"], b["sgemm"]["sq_gflops"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default="build/camdelta")
    ap.add_argument("--device", default="")
    ap.add_argument("--shape", default="1,20,112,3,1560")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--coretypes", default="default,Haswell")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--part", default="", help=argparse.SUPPRESS)
    ap.add_argument("--threads-one", type=int, default=0, help=argparse.SUPPRESS)
    opt = ap.parse_args()
    if opt.worker:
        worker(opt)
        return
    opt.cli = os.path.abspath(opt.cli)
    opt.load = subprocess.run(["uptime"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    print("# camdelta on the CPU beside OpenBLAS sgemm and the seed's PyTorch references, shape %s, %d cores" %
          (opt.shape, os.cpu_count()))
    results = {}
    for n in [int(x) for x in opt.threads.split(",") if x]:
        cd = run_worker(opt, n, "camdelta")
        blas = [run_worker(opt, n, "sgemm", c) for c in opt.coretypes.split(",") if c]
        results[n] = cd["camdelta"]
        report(opt, n, cd, blas)
    ns = sorted(results)
    if len(ns) > 1:
        print("\n## scaling from %d to %d thread(s) (camdelta kernel ms)\n" % (ns[0], ns[-1]))
        print("| operation | " + " | ".join("%d thread(s)" % n for n in ns) + " | speed-up |")
        print("|---|" + "---|" * (len(ns) + 1))
        for s in results[ns[0]]["shapes"][0]["operations"]:
            ms = [(op(results[n], s["name"]) or {}).get("min_ms") for n in ns]
            if all(ms):
                print("| %s | %s | %.2fx |" % (s["name"], " | ".join("%.1f" % m for m in ms), ms[0] / ms[-1]))
    print("\nload (uptime) at the end: %s" % subprocess.run(["uptime"], stdout=subprocess.PIPE,
                                                            universal_newlines=True).stdout.strip())


if __name__ == "__main__":
    main()
