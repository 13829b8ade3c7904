#!/usr/bin/env python3
"""The camera branch of one attention layer with camdelta.torch on the CPU: forward and backward, the errors
against camdelta's float64 reference, and the time beside the seed module's PyTorch fallback on the same
cores.

    CAMDELTA_LIBRARY=build/libcamdelta.so PYTHONPATH=python python3 examples/python/camera_branch.py
    ... --shape sana480   # one sana480 slice: B1 H20 D112, 3 frames of 1560 tokens (30 x 52)
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import camdelta
import camdelta.torch as ct

SHAPES = {  # B, H, D, T, Hs, Ws, chunk_size
    "small": (1, 2, 16, 4, 3, 4, 2),
    "medium": (1, 4, 64, 3, 12, 16, 2),
    "sana480": (1, 20, 112, 3, 30, 52, 2),
}
SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests")


def orbit(B, T, Hs, Ws):
    """camera_conditions (B, T, 20) of a camera circling the origin and looking at it."""
    cc = np.zeros((B, T, 20), np.float32)
    for t in range(T):
        a = 0.3 * t
        pos = np.array([3 * np.sin(a), 0.5, -3 * np.cos(a)])
        z = -pos / np.linalg.norm(pos)
        x = np.cross([0.0, 1.0, 0.0], z)
        x /= np.linalg.norm(x)
        c2w = np.eye(4)
        c2w[:3, :3] = np.stack([x, np.cross(z, x), z], axis=1)
        c2w[:3, 3] = pos
        cc[:, t, :16] = c2w.reshape(-1)
        cc[:, t, 16:] = (Ws, Ws, Ws / 2, Hs / 2)  # fx fy cx cy in pixels of a Ws x Hs image
    return cc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=SHAPES, default="small")
    ap.add_argument("--repeat", type=int, default=3)
    opt = ap.parse_args()
    B, H, D, T, Hs, Ws, cs = SHAPES[opt.shape]
    N, S, C = T * Hs * Ws, Hs * Ws, H * D
    torch.manual_seed(0)
    g = lambda *s, scale=1.0: (torch.randn(*s) * scale).requires_grad_()  # noqa: E731
    # what the layer's projections and parameters would hand over
    q_raw, k_raw, v_raw = g(B, N, H, D), g(B, N, H, D), g(B, N, H, D)
    conv_weight, qw, kw = g(C, 4, scale=0.5), (1 + 0.1 * torch.randn(C)).requires_grad_(), \
        (1 + 0.1 * torch.randn(C)).requires_grad_()
    beta = (0.1 + 0.8 * torch.rand(B, H, T, S)).requires_grad_()
    decay = (0.5 + 0.5 * torch.rand(B, H, T)).requires_grad_()
    cams = torch.from_numpy(orbit(B, T, Hs, Ws))
    grad_y = torch.randn(B, N, H, D)

    ctx = camdelta.default_context()
    torch.set_num_threads(ctx.device.compute_units)  # PyTorch on the cores PoCL runs on
    print("camdelta %s on %s (%s)" % (camdelta.__version__, ctx.device.device_name,
                                      "zero copy" if ctx.zero_copy else "copies"))
    # ---- the camera branch: one call forward, autograd backward --------------------------------------
    t0 = time.perf_counter()
    y = ct.cam_branch_func(q_raw, k_raw, v_raw, conv_weight=conv_weight, q_norm_weight=qw, k_norm_weight=kw,
                           camera_conditions=cams, beta=beta, decay=decay, grid=(T, Hs, Ws), chunk_size=cs)
    y.backward(grad_y)
    t_branch = time.perf_counter() - t0
    print("branch B%d H%d D%d T%d S%d (chunk %d): forward + backward %.1f ms (first call, kernels built or "
          "loaded)" % (B, H, D, T, S, cs, t_branch * 1e3))

    # ---- errors against the float64 reference --------------------------------------------------------
    x = dict(q_raw=q_raw, k_raw=k_raw, v_raw=v_raw, conv_weight=conv_weight, q_norm_weight=qw,
             k_norm_weight=kw, camera_conditions=cams, beta=beta, decay=decay)
    n = {k: v.detach().numpy() for k, v in x.items()}
    raw = [n.pop(k) for k in ("q_raw", "k_raw", "v_raw")]
    want = camdelta.ref.branch_forward(*raw, grid=(T, Hs, Ws), chunk_size=cs, **n)
    wg = camdelta.ref.branch_backward(*raw, grad_y=grad_y.numpy(), grid=(T, Hs, Ws), chunk_size=cs, **n)
    err = lambda a, r: float(np.abs(a - r).max() / max(np.abs(r).max(), 1e-30))  # noqa: E731
    worst = err(y.detach().numpy(), want)
    print("  y           %.1e" % worst)
    for name in ("q_raw", "k_raw", "v_raw", "conv_weight", "q_norm_weight", "k_norm_weight", "beta", "decay"):
        e = err(x[name].grad.numpy(), getattr(wg, "d" + name))
        worst = max(worst, e)
        print("  d%-13s %.1e" % (name, e))

    # ---- prep + scan pair beside the seed's PyTorch fallback ------------------------------------------
    sys.path.insert(0, SEED)
    try:
        import seed_loader
        seed = seed_loader.load()
    except (ImportError, OSError) as e:
        print("(the seed module is not here: %s; no timing beside it)" % e)
        return 0 if worst <= 1e-4 else 1
    proj_q, proj_kv, _, rope_cos, rope_sin = ct.cam_camera_func(cams, grid=(T, Hs, Ws), head_dim=D)
    k_scale = (D * S) ** -0.5

    def pair(prep, scan):
        """prep -> beta discount -> causal + reverse scan, forward and backward (the same lines for both)."""
        q, k, v, infl = prep(q_raw, k_raw, v_raw, q_norm_weight=qw, k_norm_weight=kw, proj_q=proj_q,
                             proj_kv=proj_kv, rope_cos=rope_cos, rope_sin=rope_sin, k_scale=k_scale, norm_eps=1e-6)
        b = beta / infl.view(B, H, T, S).mean(-1).clamp_min(1.0).unsqueeze(-1)
        out = scan(q, k, v, b, decay) + scan(q, k, v, b, decay, reverse=True)
        out.backward(torch.ones_like(out))

    def best(fn):
        fn()
        ts = []
        for _ in range(opt.repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    t_cd = best(lambda: pair(ct.cam_prep_func_with_grad, ct.cam_scan_func_with_grad))
    t_seed = best(lambda: pair(seed._torch_cam_prep_reference, seed._torch_cam_scan_reference))
    print("prep + scan pair, forward + backward on %d threads: camdelta %.1f ms, seed's PyTorch fallback "
          "%.1f ms (%.2fx)" % (torch.get_num_threads(), t_cd * 1e3, t_seed * 1e3, t_seed / t_cd))
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
