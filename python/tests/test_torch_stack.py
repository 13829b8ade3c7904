"""Autograd through a model-like stack built from camdelta.torch's pieces (cameras -> short conv -> prep ->
beta discount -> causal + chunk-masked reverse scan -> output transform, the discount and the masks in plain
PyTorch), and cam_branch_func, both against the library's f64 reference of the whole branch (docs/math.md §8.6)."""
import pytest

torch = pytest.importorskip("torch")

import camdelta  # noqa: E402
import camdelta.torch as ct  # noqa: E402
from camdelta import ref  # noqa: E402
from conftest import rel_err  # noqa: E402
from test_branch import branch_problem  # noqa: E402

INPUTS = ("q_raw", "k_raw", "v_raw", "conv_weight", "q_norm_weight", "k_norm_weight", "camera_conditions",
          "beta", "decay")
CASES = [
    (2, 7, 3, 2, 2, 8, dict(chunk_size=3, chunk_strategy="first_chunk_plus_one")),
    (1, 4, 2, 3, 2, 16, dict(chunk_size=2)),
    (1, 3, 2, 2, 1, 24, dict()),
]


def reverse_mask(T, chunking):
    """1 where the reverse scan keeps a frame, 0 at interior chunk starts and one-frame chunks (docs/math.md §8.4)."""
    b = camdelta.chunk_bounds(T, **chunking)
    m = torch.ones(T)
    for s, e in zip(b[:-1], b[1:]):
        if 0 < s < T or e - s == 1:
            m[s] = 0.0
    return m


def stack(x, grid, chunking, k_scale=None, norm_eps=1e-6):
    T, Hs, Ws = grid
    S = Hs * Ws
    B, N, H, D = x["q_raw"].shape
    k_scale = (D * S) ** -0.5 if k_scale is None else k_scale
    proj_q, proj_kv, proj_o, rope_cos, rope_sin = ct.cam_camera_func(x["camera_conditions"], grid=grid,
                                                                     head_dim=D)
    k_conv = ct.cam_short_conv_func(x["k_raw"], x["conv_weight"], frames=T, **chunking)
    q, k, v, infl = ct.cam_prep_func_with_grad(x["q_raw"], k_conv, x["v_raw"], q_norm_weight=x["q_norm_weight"],
                                               k_norm_weight=x["k_norm_weight"], proj_q=proj_q, proj_kv=proj_kv,
                                               rope_cos=rope_cos, rope_sin=rope_sin, k_scale=k_scale,
                                               norm_eps=norm_eps)
    iota = infl.view(B, H, T, S).mean(-1)
    beta = x["beta"] / iota.clamp_min(1.0).unsqueeze(-1)
    m = reverse_mask(T, chunking)
    out = ct.cam_scan_func_with_grad(q, k, v, beta, x["decay"]) + \
        ct.cam_scan_func_with_grad(q, k, v, beta * m.view(1, 1, T, 1), x["decay"] * m, reverse=True)
    return ct.cam_output_transform_func(out, proj_o, rope_cos, rope_sin)


def _problem(inputs, case):
    B, T, Hs, Ws, H, D, ch = case
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)
    x = {n: torch.from_numpy(p[n]).requires_grad_(n != "camera_conditions") for n in INPUTS}
    gy = inputs.normal(*p["q_raw"].shape)
    want_y = ref.branch_forward(p["q_raw"], p["k_raw"], p["v_raw"], grid=(T, Hs, Ws),
                                **{n: p[n] for n in INPUTS[3:]}, **ch)
    want_g = ref.branch_backward(p["q_raw"], p["k_raw"], p["v_raw"], grad_y=gy, grid=(T, Hs, Ws),
                                 **{n: p[n] for n in INPUTS[3:]}, **ch)
    return x, torch.from_numpy(gy), want_y, want_g, (T, Hs, Ws), ch


def _check(x, y, gy, want_y, want_g):
    assert rel_err(y.detach().numpy(), want_y) <= 1e-5
    grads = torch.autograd.grad(y, [x[n] for n in INPUTS if n != "camera_conditions"], gy)
    names = [n for n in INPUTS if n != "camera_conditions"]
    for n, g in zip(names, grads):
        assert rel_err(g.numpy(), getattr(want_g, "d" + n)) <= 1e-4, n


@pytest.mark.parametrize("case", CASES)
def test_stack_of_pieces(inputs, case):
    x, gy, want_y, want_g, grid, ch = _problem(inputs, case)
    _check(x, stack(x, grid, ch), gy, want_y, want_g)


@pytest.mark.parametrize("case", CASES)
def test_cam_branch_func(inputs, case):
    x, gy, want_y, want_g, grid, ch = _problem(inputs, case)
    y = ct.cam_branch_func(x["q_raw"], x["k_raw"], x["v_raw"], grid=grid,
                           **{n: x[n] for n in INPUTS[3:]}, **ch)
    assert y.shape == x["q_raw"].shape
    _check(x, y, gy, want_y, want_g)


def test_branch_in_a_module_trains(inputs):
    """A layer's camera branch as an nn.Module: one optimiser step on its norm weights lowers the loss."""
    B, T, Hs, Ws, H, D = 1, 4, 2, 2, 2, 8
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)

    class CameraBranch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_weight = torch.nn.Parameter(torch.from_numpy(p["conv_weight"]))
            self.q_norm_weight = torch.nn.Parameter(torch.from_numpy(p["q_norm_weight"]))
            self.k_norm_weight = torch.nn.Parameter(torch.from_numpy(p["k_norm_weight"]))

        def forward(self, q_raw, k_raw, v_raw, cams, beta, decay):
            return ct.cam_branch_func(q_raw, k_raw, v_raw, conv_weight=self.conv_weight,
                                      q_norm_weight=self.q_norm_weight, k_norm_weight=self.k_norm_weight,
                                      camera_conditions=cams, beta=beta, decay=decay, grid=(T, Hs, Ws), chunk_size=2)

    m = CameraBranch()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    args = [torch.from_numpy(p[n]) for n in ("q_raw", "k_raw", "v_raw", "camera_conditions", "beta", "decay")]
    target = torch.from_numpy(inputs.normal(B, T * Hs * Ws, H, D))
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = ((m(*args) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[1] < losses[0]


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_cam_branch_func_16bit(inputs, dt):
    """bf16 / f16 tensors through cam_branch_func: y and the activations' gradients in that dtype, within §12's
    bounds of the f64 reference fed the same rounded inputs; the weights' gradients float32."""
    bound = 2e-3 if dt == torch.float16 else 1.6e-2
    B, T, Hs, Ws, H, D, ch = CASES[1]
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)
    x = {n: torch.from_numpy(p[n]) for n in INPUTS}
    for n in INPUTS[:3]:
        x[n] = x[n].to(dt).requires_grad_(True)
    for n in ("conv_weight", "q_norm_weight", "k_norm_weight"):
        x[n].requires_grad_(True)
    y = ct.cam_branch_func(x["q_raw"], x["k_raw"], x["v_raw"], grid=(T, Hs, Ws),
                           **{n: x[n] for n in INPUTS[3:]}, **ch)
    assert y.dtype == dt and y.shape == x["q_raw"].shape
    gy = torch.from_numpy(inputs.normal(*y.shape)).to(dt)
    y.backward(gy)
    r = {n: x[n].detach().float().numpy() for n in INPUTS}
    want = ref.branch_forward(r["q_raw"], r["k_raw"], r["v_raw"], grid=(T, Hs, Ws),
                              **{n: r[n] for n in INPUTS[3:]}, **ch)
    assert rel_err(y.detach().float().numpy(), want) <= bound
    wg = ref.branch_backward(r["q_raw"], r["k_raw"], r["v_raw"], grad_y=gy.float().numpy(), grid=(T, Hs, Ws),
                             **{n: r[n] for n in INPUTS[3:]}, **ch)
    for n, w in (("q_raw", wg.dq_raw), ("k_raw", wg.dk_raw), ("v_raw", wg.dv_raw), ("conv_weight", wg.dconv_weight),
                 ("q_norm_weight", wg.dq_norm_weight), ("k_norm_weight", wg.dk_norm_weight)):
        assert x[n].grad.dtype == (dt if n in INPUTS[:3] else torch.float32), n
        assert rel_err(x[n].grad.float().numpy(), w) <= 2 * bound, n
