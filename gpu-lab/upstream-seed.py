#!/usr/bin/env python3
"""The peer on the GPU: the seed module's Triton kernels (fused_cam_ucpe_reference.py) timed at a camdelta bench
shape on the same card, so that `camdelta bench` figures have their upstream counterpart from the same run.

    python3 gpu-lab/upstream-seed.py SEED_FILE [--shape B,H,D,F,S] [--grid Hs,Ws] [--json FILE]

Rows: prep forward (cam_prep_func), prep backward (cam_prep_func_with_grad's Triton backward), scan forward causal
and reverse (cam_scan_func), scan backward (cam_scan_func_with_grad), and the camera branch forward as the upstream
module composes it (short conv and output transform in PyTorch, prep and the two scans in Triton; chunk size 3,
first_chunk_plus_one). Median of triton.testing.do_bench, ms. The seed's own imports of the SANA repository
(diffusion.*) are stubbed: only its kernels and autograd functions run. The scans run the seed's own Triton scan
kernels (FUSED_GDN_FORCE_LEGACY=1): the upstream chunkwise module it dispatches to by default
(diffusion.model.ops.fused_gdn_chunkwise) is not part of the seed."""
import argparse
import importlib.util
import json
import math
import os
import sys
import types

import torch
import triton.testing


def load_seed(path):
    os.environ["FUSED_GDN_FORCE_LEGACY"] = "1"
    for name in ("diffusion", "diffusion.model", "diffusion.model.nets", "diffusion.model.ops"):
        sys.modules.setdefault(name, types.ModuleType(name))
    blocks = types.ModuleType("diffusion.model.nets.sana_camctrl_blocks")
    for fn in ("compute_fov_from_fx_xi", "ucm_unproject_grid_fov", "world_to_ray_mats"):
        setattr(blocks, fn, None)
    sys.modules["diffusion.model.nets.sana_camctrl_blocks"] = blocks
    chunk = types.ModuleType("diffusion.model.ops.fused_gdn_chunkwise")
    chunk.cam_scan_chunkwise = None
    sys.modules["diffusion.model.ops.fused_gdn_chunkwise"] = chunk
    spec = importlib.util.spec_from_file_location("seed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bounds_fcp1(T, cs):
    b = [0]
    while b[-1] + (cs + 1 if len(b) == 1 else cs) < T:
        b.append(b[-1] + (cs + 1 if len(b) == 1 else cs))
    return b + [T]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed")
    ap.add_argument("--shape", default="1,20,112,21,1560")
    ap.add_argument("--grid", default="30,52")
    ap.add_argument("--json")
    a = ap.parse_args()
    B, H, D, F, S = map(int, a.shape.split(","))
    Hs, Ws = map(int, a.grid.split(","))
    assert Hs * Ws == S
    N, C, dev = F * S, H * D, "cuda"
    seed = load_seed(a.seed)
    g = torch.Generator(device=dev).manual_seed(1)
    rnd = lambda *s: torch.randn(*s, device=dev, generator=g)
    q_raw, k_raw, v_raw = (rnd(B, N, H, D) for _ in range(3))
    qw, kw = 1 + 0.1 * rnd(C), 1 + 0.1 * rnd(C)
    rot = torch.linalg.qr(rnd(B, N, 4, 4))[0]
    proj_q, proj_kv = rot.transpose(-1, -2).contiguous(), rot.contiguous()
    ang = rnd(N, D // 4)
    rope_cos = torch.cos(ang).repeat_interleave(2, -1).contiguous()
    rope_sin = (torch.sin(ang).repeat_interleave(2, -1) * torch.tensor([-1.0, 1.0], device=dev).repeat(D // 4)).contiguous()
    k_scale, eps = D ** -0.5 * S ** -0.5, 1e-6
    beta = torch.rand(B, H, F, S, device=dev, generator=g) * 0.5
    decay = 0.9 + 0.1 * torch.rand(B, H, F, device=dev, generator=g)
    kw_args = dict(q_norm_weight=qw, k_norm_weight=kw, proj_q=proj_q, proj_kv=proj_kv, rope_cos=rope_cos,
                   rope_sin=rope_sin, k_scale=k_scale, norm_eps=eps)
    rows = {}

    def bench(name, fn):
        fn()
        torch.cuda.synchronize()
        rows[name] = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
        print(f"{name:40s} {rows[name]:9.3f} ms", flush=True)

    bench("prep forward", lambda: seed.cam_prep_func(q_raw, k_raw, v_raw, **kw_args))
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q_raw, k_raw, v_raw))
    outs = seed.cam_prep_func_with_grad(qr, kr, vr, **kw_args)
    grads = [torch.randn_like(o) for o in outs]
    bench("prep backward", lambda: torch.autograd.grad(outs, (qr, kr, vr), grads, retain_graph=True))
    q, k, v, infl = seed.cam_prep_func(q_raw, k_raw, v_raw, **kw_args)
    q, k, v = (t.float().contiguous() for t in (q, k, v))
    bench("scan forward causal", lambda: seed.cam_scan_func(q, k, v, beta, decay))
    bench("scan forward reverse", lambda: seed.cam_scan_func(q, k, v, beta, decay, reverse=True))
    qs, ks, vs, bs, ds = (t.clone().requires_grad_(True) for t in (q, k, v, beta, decay))
    out = seed.cam_scan_func_with_grad(qs, ks, vs, bs, ds)
    go = torch.randn_like(out)
    bench("scan backward causal", lambda: torch.autograd.grad(out, (qs, ks, vs, bs, ds), go, retain_graph=True))

    # The branch forward as the upstream module composes it (docs/math.md §8).
    cw = 0.3 * rnd(C, 4)
    b = bounds_fcp1(F, 3)
    seg_end = torch.empty(F, dtype=torch.long, device=dev)
    for s0, e0 in zip(b[:-1], b[1:]):
        seg_end[s0:e0] = e0
    rmask = torch.ones(F, device=dev)
    for s0, e0 in zip(b[:-1], b[1:]):
        if s0 > 0 or e0 - s0 == 1:
            rmask[s0] = 0
    tt = torch.arange(F, device=dev)
    proj_o = rot.transpose(-1, -2).contiguous()

    def conv(x):  # (B, N, C) along frames: symmetric 7 taps, look-ahead cut at the segment end
        xf = x.view(B, F, S * C)
        y = torch.zeros_like(xf)
        for j in range(4):
            w = cw[:, j].repeat(S)
            back = torch.roll(xf, 3 - j, 1)
            back[:, : 3 - j] = 0
            y += w * back
            if j < 3:
                ahead = torch.roll(xf, -(3 - j), 1)
                ok = (tt + 3 - j < seg_end).float().view(1, F, 1)
                y += w * ahead * ok
        return y.view(B, N, C)

    def branch():
        kc = conv(k_raw.view(B, N, C)).view(B, N, H, D)
        q2, k2, v2, inf = seed.cam_prep_func(q_raw, kc, v_raw, **kw_args)
        iota = inf.view(B, H, F, S).mean(-1).clamp_min(1.0)
        bd = beta / iota.unsqueeze(-1)
        q2, k2, v2 = (t.float().contiguous() for t in (q2, k2, v2))
        o = seed.cam_scan_func(q2, k2, v2, bd.contiguous(), decay)
        o = o + seed.cam_scan_func(q2, k2, v2, (bd * rmask.view(1, 1, F, 1)).contiguous(),
                                   (decay * rmask).contiguous(), reverse=True)
        first = o[:, :, : D // 2].reshape(B, H, D // 8, 4, N)
        first = torch.einsum("bnij,bhgjn->bhgin", proj_o, first).reshape(B, H, D // 2, N)
        sec = o[:, :, D // 2 :]
        swap = sec.view(B, H, D // 4, 2, N).flip(3).reshape(B, H, D // 2, N)
        sec = sec * rope_cos.t() - swap * rope_sin.t()
        return torch.cat([first, sec], 2).permute(0, 3, 1, 2).contiguous()

    bench("branch forward (upstream composition)", branch)
    print(f"card {torch.cuda.get_device_name()} shape {a.shape} grid {a.grid}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"card": torch.cuda.get_device_name(), "shape": a.shape, "ms": rows}, f, indent=1)


if __name__ == "__main__":
    main()
