#!/usr/bin/env python3
"""Times camdelta's Python layer: its call overhead over the C call, the cost of large arrays (no copy on a
CPU device), and camdelta.torch beside the seed module's PyTorch fallback on the same cores.

    CAMDELTA_LIBRARY=build/libcamdelta.so PYTHONPATH=python python3 python/benchmarks/bench_torch.py
    ... --shape 1,20,112,3,1560 (B,H,D,F,S; default: the sana480 slice) --repeat 5 --threads 1,2

1. overhead: at small shapes, each NumPy operation and its camdelta.torch drop-in against the bare C call
   with its arguments built once (the same ctypes call and camdelta_finish, back to back); the Python layer's
   own work (the same call with the library's entry points stubbed); and the bare C call after a spin of that
   length (PoCL's worker threads fall asleep between calls: any host work between two calls, in C as in
   Python, makes the next one wait for them). Medians of interleaved runs.
2. large arrays: the prep forward at the chosen shape through camdelta.prep_forward (new output arrays, the
   inputs used in place) against the bare C call into arrays written before and into new arrays (whose pages
   the kernels touch first), and on a context that copies; wall and CPU time of the process.
3. side by side: prep -> beta discount -> causal + reverse scan, forward and backward with autograd, written
   once and run with camdelta.torch's drop-ins and with the seed's _torch_cam_prep_reference +
   _torch_cam_scan_reference (PyTorch with each of `--threads` thread counts; PoCL on the same cores); the
   ratio against the fallback's fastest.
"""
import argparse
import ctypes as C
import os
import statistics
import sys
import time

import numpy as np
import torch

import camdelta
import camdelta.torch as ct
from camdelta import _structs as S
from camdelta._lib import lib
from camdelta.context import _Stage

HERE = os.path.dirname(os.path.abspath(__file__))


def interleaved(fns, repeat, inner=1, cpu=False):
    """Median seconds per call of each function, the functions run in turn `repeat` times; with cpu=True
    pairs (wall, CPU seconds of the whole process, its PoCL threads included)."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for i, f in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(inner):
                f()
            times[i].append(((time.perf_counter() - t0) / inner, (time.process_time() - c0) / inner))
    wall = [statistics.median(w for w, _ in t) for t in times]
    if not cpu:
        return wall
    return [(w, statistics.median(c for _, c in t)) for w, t in zip(wall, times)]


def bare_scan(ctx, q, k, v, beta, decay, out):
    """The C call alone: buffers over the arrays made once, the argument struct built once."""
    st = _Stage(ctx)
    B, H, D, N = q.shape
    F, S_ = beta.shape[2], beta.shape[3]
    a = S.scan_args(B=B, H=H, D=D, F=F, S=S_, q=st.i(q), k=st.i(k), v=st.i(v), beta=st.i(beta),
                    decay=st.i(decay), out=st.o(out))
    h, ref = st.h, C.byref(a)

    def call():
        assert lib.camdelta_scan_forward(h, ref, None) == 0
        assert lib.camdelta_finish(h) == 0
    return call, st


def bare_prep(ctx, raw, kw, outs):
    st = _Stage(ctx)
    B, N, H, D = raw[0].shape
    a = S.prep_args(B=B, N=N, H=H, D=D, dtype=0, k_scale=kw["k_scale"], norm_eps=kw["norm_eps"],
                    q_raw=st.i(raw[0]), k_raw=st.i(raw[1]), v_raw=st.i(raw[2]),
                    q_norm_weight=st.i(kw["q_norm_weight"]), k_norm_weight=st.i(kw["k_norm_weight"]),
                    proj_q=st.i(kw["proj_q"]), proj_kv=st.i(kw["proj_kv"]), rope_cos=st.i(kw["rope_cos"]),
                    rope_sin=st.i(kw["rope_sin"]), q=st.o(outs[0]), k=st.o(outs[1]), v=st.o(outs[2]),
                    inflation_sq=st.o(outs[3]))
    h, ref = st.h, C.byref(a)

    def call():
        assert lib.camdelta_prep_forward(h, ref, None) == 0
        assert lib.camdelta_finish(h) == 0
    return call, st


def prep_problem(rng, B, N, H, D):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    raw = [f(B, N, H, D) for _ in range(3)]
    kw = dict(q_norm_weight=np.ones(H * D, np.float32), k_norm_weight=np.ones(H * D, np.float32),
              proj_q=f(B, N, 4, 4), proj_kv=f(B, N, 4, 4), rope_cos=f(N, D // 2), rope_sin=f(N, D // 2),
              k_scale=float(D ** -0.5), norm_eps=1e-6)
    return raw, kw


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _python_only(fns, names, repeat):
    """Median seconds of each function with the library's entry points `names` (and camdelta_finish) replaced
    by a stub returning CAMDELTA_OK: the Python layer's own work."""
    saved = {n: getattr(lib, n) for n in names + ("camdelta_finish",)}
    try:
        for n in saved:
            setattr(lib, n, lambda *a: 0)
        return interleaved(fns, repeat, inner=50)
    finally:
        for n, f in saved.items():
            setattr(lib, n, f)


def _overhead_row(label, call, entry, ops_fn, torch_fn, repeat):
    py_ops, py_torch = _python_only([ops_fn, torch_fn], (entry,), repeat)
    c, c_gap_ops, c_gap_torch, p, t = interleaved(
        [call, lambda: (_spin(py_ops), call()), lambda: (_spin(py_torch), call()), ops_fn, torch_fn],
        repeat, inner=20)
    # the gap calls include the spin itself: what remains is the C call after that much host work
    c_gap_ops -= py_ops
    c_gap_torch -= py_torch
    print("   %s: C call back to back %.1f us" % (label, c * 1e6))
    for name, full, py, gap in (("NumPy", p, py_ops, c_gap_ops), ("torch", t, py_torch, c_gap_torch)):
        print("     %-5s %7.1f us: +%5.1f over back-to-back C calls; Python layer's own work %5.1f; the C call "
              "after %4.1f us of host work %5.1f (PoCL's workers wake up)" %
              (name, full * 1e6, (full - c) * 1e6, py * 1e6, py * 1e6, gap * 1e6))


def overhead(ctx, rng, repeat):
    print("1. call overhead over the C call (medians of %d interleaved runs)" % repeat)
    B, H, D, F, S_ = 1, 2, 16, 2, 8
    q, k, v = (rng.standard_normal((B, H, D, F * S_)).astype(np.float32) for _ in range(3))
    beta = rng.uniform(0.1, 0.5, (B, H, F, S_)).astype(np.float32)
    decay = rng.uniform(0.5, 1.0, (B, H, F)).astype(np.float32)
    out = np.empty_like(q)
    call, st = bare_scan(ctx, q, k, v, beta, decay, out)
    tq = [torch.from_numpy(a) for a in (q, k, v, beta, decay)]
    with st:
        _overhead_row("scan forward B%d H%d D%d F%d S%d (camdelta.scan_forward, cam_scan_func)" % (B, H, D, F, S_),
                      call, "camdelta_scan_forward", lambda: camdelta.scan_forward(q, k, v, beta, decay),
                      lambda: ct.cam_scan_func(*tq), repeat)
    raw, kw = prep_problem(rng, 1, 16, 2, 16)
    outs = [np.empty((1, 2, 16, 16), np.float32) for _ in range(3)] + [np.empty((1, 2, 16), np.float32)]
    call, st = bare_prep(ctx, raw, kw, outs)
    traw = [torch.from_numpy(a) for a in raw]
    tkw = {n: (torch.from_numpy(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    with st:
        _overhead_row("prep forward B1 N16 H2 D16 (camdelta.prep_forward, cam_prep_func)", call,
                      "camdelta_prep_forward", lambda: camdelta.prep_forward(*raw, **kw),
                      lambda: ct.cam_prep_func(*traw, **tkw), repeat)


def large(ctx, rng, shape, repeat):
    B, H, D, F, S_ = shape
    N = F * S_
    raw, kw = prep_problem(rng, B, N, H, D)
    mb = sum(a.nbytes for a in raw) / 2**20 * 2
    print("2. large arrays: prep forward B%d N%d H%d D%d (%.0f MiB in and out), medians of %d (%% against the C "
          "call into new arrays)" % (B, N, H, D, mb, repeat))
    shapes = [(B, H, D, N)] * 3 + [(B, H, N)]
    outs = [np.empty(s_, np.float32) for s_ in shapes]
    call, st = bare_prep(ctx, raw, kw, outs)

    def fresh():
        """The C call writing into newly allocated arrays, as every call that returns new arrays does (their
        pages are first touched by the kernels)."""
        o = [np.empty(s_, np.float32) for s_ in shapes]
        c2, st2 = bare_prep(ctx, raw, kw, o)
        with st2:
            c2()

    with st, camdelta.Context(zero_copy=False) as copying:
        res = interleaved([call, fresh, lambda: camdelta.prep_forward(*raw, **kw),
                           lambda: camdelta.prep_forward(*raw, ctx=copying, **kw)], repeat, cpu=True)
    for name, (w, c) in zip(("the C call into arrays written before", "the C call into new arrays",
                             "camdelta.prep_forward (new arrays)", "camdelta.prep_forward, a context that copies"),
                            res):
        print("   %-46s wall %7.1f ms (%+6.1f%%), CPU %7.1f ms (%+6.1f%%)" %
              (name, w * 1e3, (w / res[1][0] - 1) * 100, c * 1e3, (c / res[1][1] - 1) * 100))


def side_by_side(shape, repeat, seed, threads):
    B, H, D, F, S_ = shape
    N = F * S_
    torch.manual_seed(0)
    leaf = lambda *s, scale=1.0: (torch.randn(*s) * scale).requires_grad_()  # noqa: E731
    q_raw, k_raw, v_raw = leaf(B, N, H, D), leaf(B, N, H, D), leaf(B, N, H, D)
    qw, kw = (1 + 0.1 * torch.randn(H * D)).requires_grad_(), (1 + 0.1 * torch.randn(H * D)).requires_grad_()
    proj_q, proj_kv = torch.randn(B, N, 4, 4) * 0.5, torch.randn(B, N, 4, 4) * 0.5
    ang = torch.rand(N, D // 4) * 6.28
    rope_cos = torch.cos(ang).repeat_interleave(2, -1).contiguous()
    rope_sin = torch.stack([-torch.sin(ang), torch.sin(ang)], -1).reshape(N, D // 2).contiguous()
    beta = (0.1 + 0.8 * torch.rand(B, H, F, S_)).requires_grad_()
    decay = (0.5 + 0.5 * torch.rand(B, H, F)).requires_grad_()
    up = torch.randn(B, H, D, N)

    def pair(prep, scan):
        q, k, v, infl = prep(q_raw, k_raw, v_raw, q_norm_weight=qw, k_norm_weight=kw, proj_q=proj_q,
                             proj_kv=proj_kv, rope_cos=rope_cos, rope_sin=rope_sin, k_scale=(D * S_) ** -0.5,
                             norm_eps=1e-6)
        b = beta / infl.view(B, H, F, S_).mean(-1).clamp_min(1.0).unsqueeze(-1)
        out = scan(q, k, v, b, decay) + scan(q, k, v, b, decay, reverse=True)
        out.backward(up)
        return out

    dev = camdelta.default_context().device
    print("3. prep -> discount -> causal + reverse scan, forward + backward, B%d H%d D%d F%d S%d; camdelta on %s "
          "(%d compute units); medians of %d (wall ms; CPU ms of the process)" % (B, H, D, F, S_, dev.device_name, dev.compute_units,
                                                          repeat))
    best = None
    for n in threads:
        torch.set_num_threads(n)
        (t_cd, c_cd), (t_seed, c_seed) = interleaved(
            [lambda: pair(ct.cam_prep_func_with_grad, ct.cam_scan_func_with_grad),
             lambda: pair(seed._torch_cam_prep_reference, seed._torch_cam_scan_reference)], repeat, cpu=True)
        print("   PyTorch on %d thread(s): camdelta.torch %.1f (CPU %.1f), the seed's PyTorch fallback %.1f (CPU "
              "%.1f): %.2fx" % (n, t_cd * 1e3, c_cd * 1e3, t_seed * 1e3, c_seed * 1e3, t_seed / t_cd))
        best = (t_seed / t_cd) if best is None else min(best, t_seed / t_cd)
    print("   camdelta against the fallback's best thread count: %.2fx" % best)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,20,112,3,1560", help="B,H,D,F,S (default: the sana480 slice)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", default="", help="PyTorch thread counts for the side-by-side runs, e.g. 1,2 "
                    "(default: the device's compute units)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: overhead,large,pair")
    opt = ap.parse_args()
    shape = tuple(int(x) for x in opt.shape.split(","))
    ctx = camdelta.default_context()
    threads = [int(x) for x in opt.threads.split(",") if x] or [ctx.device.compute_units]
    torch.set_num_threads(threads[-1])
    print("camdelta %s, %s on %s, %s; PyTorch %s" % (camdelta.__version__, ctx.device.device_name,
                                                    ctx.device.platform_name, "zero copy" if ctx.zero_copy
                                                    else "copies", torch.__version__))
    rng = np.random.default_rng(0)
    skip = set(opt.skip.split(","))
    if "overhead" not in skip:
        overhead(ctx, rng, max(opt.repeat, 21))
    if "large" not in skip:
        large(ctx, rng, shape, opt.repeat)
    if "pair" not in skip:
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        import seed_loader
        side_by_side(shape, opt.repeat, seed_loader.load(), threads)


if __name__ == "__main__":
    main()
