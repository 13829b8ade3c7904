"""camdelta.torch against the seed module's own PyTorch references (loaded unchanged from
third_party/sana/fused_cam_ucpe_reference.py): every output and every gradient, on awkward shapes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import camdelta.torch as ct  # noqa: E402
import seed_loader  # noqa: E402
from conftest import rel_err  # noqa: E402

seed = seed_loader.load()

PREP_SHAPES = [(2, 7, 3, 8), (1, 10, 2, 24)]
SCAN_SHAPES = [(2, 3, 8, 5, 7), (1, 2, 24, 3, 4)]  # D = 24: the seed's BLOCK_D = 32 pads the states
PREP_TABLES = ("q_norm_weight", "k_norm_weight", "proj_q", "proj_kv", "rope_cos", "rope_sin")


def _t(a, dtype=torch.float32, grad=False):
    t = torch.from_numpy(np.asarray(a)).to(dtype).contiguous()
    return t.requires_grad_(grad)


def _prep_problem(inputs, B, N, H, D, dtype=torch.float32, grad=False):
    raw = [_t(inputs.normal(B, N, H, D), dtype, grad) for _ in range(3)]
    kw = inputs.prep(B, N, H, D)
    tables = {n: _t(kw[n], grad=grad) for n in PREP_TABLES}
    return raw, tables, dict(k_scale=kw["k_scale"], norm_eps=kw["norm_eps"])


@pytest.mark.parametrize("shape", PREP_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cam_prep_func(inputs, shape, dtype):
    raw, tables, scal = _prep_problem(inputs, *shape, dtype=dtype)
    got = ct.cam_prep_func(*raw, **tables, **scal)
    want = seed._torch_cam_prep_reference(*raw, **tables, **scal)
    # the seed's reference computes in f32 as camdelta does; 16-bit outputs may differ by one rounding
    bound = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape and not g.requires_grad, i
        assert rel_err(g.float().numpy(), w.float().numpy()) <= (1e-5 if i == 3 else bound), i


@pytest.mark.parametrize("shape", PREP_SHAPES)
def test_cam_prep_func_with_grad_every_gradient(inputs, shape):
    B, N, H, D = shape
    raw, tables, scal = _prep_problem(inputs, *shape, grad=True)
    ups = [_t(inputs.normal(B, H, D, N)) for _ in range(3)] + [_t(inputs.normal(B, H, N))]
    leaves = raw + [tables[n] for n in PREP_TABLES]
    got = ct.cam_prep_func_with_grad(*raw, **tables, **scal)
    gg = torch.autograd.grad(got, leaves, ups)
    # the seed's reference under autograd, in f64 (it widens to f32 inside; the gradient chain stays f64)
    raw64 = [r.detach().double().requires_grad_() for r in raw]
    tab64 = {n: tables[n].detach().double().requires_grad_() for n in PREP_TABLES}
    want = seed._torch_cam_prep_reference(*raw64, **tab64, **scal)
    wg = torch.autograd.grad(want, raw64 + [tab64[n] for n in PREP_TABLES], [u.double() for u in ups])
    for i, (g, w) in enumerate(zip(got, want)):
        assert rel_err(g.detach().numpy(), w.detach().numpy()) <= 1e-5, i
    names = ["q_raw", "k_raw", "v_raw"] + list(PREP_TABLES)
    for n, g, w in zip(names, gg, wg):
        assert g.dtype == torch.float32 and g.shape == w.shape, n
        assert rel_err(g.numpy(), w.numpy()) <= 1e-4, n


def test_cam_prep_func_with_grad_16bit_and_partial(inputs):
    """f16 activations give f16 gradients; only the inputs that require a gradient get one, and an unused
    output (no upstream gradient) is fine."""
    B, N, H, D = 1, 6, 2, 16
    raw, tables, scal = _prep_problem(inputs, B, N, H, D, dtype=torch.float16)
    raw[1].requires_grad_()
    tables["k_norm_weight"].requires_grad_()
    q, k, v, infl = ct.cam_prep_func_with_grad(*raw, **tables, **scal)
    (k.float().sum() + infl.sum()).backward()
    assert raw[0].grad is None and raw[1].grad.dtype == torch.float16 and tables["proj_q"].grad is None
    k64 = raw[1].detach().double().requires_grad_()
    kw64 = tables["k_norm_weight"].detach().double().requires_grad_()
    t64 = dict(tables, k_norm_weight=kw64)
    _, wk, _, winfl = seed._torch_cam_prep_reference(raw[0].double(), k64, raw[2].double(), **t64, **scal)
    (wk.sum() + winfl.sum()).backward()
    assert rel_err(raw[1].grad.float().numpy(), k64.grad.numpy()) <= 5e-3
    assert rel_err(tables["k_norm_weight"].grad.numpy(), kw64.grad.numpy()) <= 5e-3


def _scan_problem(inputs, shape, grad=False):
    return [_t(a, torch.float32, grad) for a in inputs.scan(*shape)]


@pytest.mark.parametrize("shape", SCAN_SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_cam_scan_func_and_gradients(inputs, shape, reverse):
    args = _scan_problem(inputs, shape, grad=True)
    out = ct.cam_scan_func(*args, reverse=reverse)
    assert not out.requires_grad
    a64 = [a.detach().double().requires_grad_() for a in args]
    want = seed._torch_cam_scan_reference(*a64, reverse=reverse)
    assert rel_err(out.numpy(), want.detach().numpy()) <= 1e-5
    out = ct.cam_scan_func_with_grad(*args, reverse=reverse)
    assert rel_err(out.detach().numpy(), want.detach().numpy()) <= 1e-5
    up = _t(inputs.normal(*out.shape))
    gg = torch.autograd.grad(out, args, up)
    wg = torch.autograd.grad(want, a64, up.double())
    for n, g, w in zip(("q", "k", "v", "beta", "decay"), gg, wg):
        assert rel_err(g.numpy(), w.numpy()) <= 1e-4, n


@pytest.mark.parametrize("shape", SCAN_SHAPES)
def test_cam_scan_func_states_in_the_seed_layout(inputs, shape):
    """init_state (B*H, BLOCK_D, BLOCK_D) with only the top-left D x D read, final_state in the same layout
    (zero outside), against the seed's single-chunk reference (whose state is (value, key): transposed)."""
    B, H, D, F, S = shape
    args = _scan_problem(inputs, shape)
    BD = 1 << (D - 1).bit_length()
    init = _t(inputs.normal(B * H, BD, BD, scale=0.3))
    if BD > D:
        init[:, D:, :] = 1e6  # never read
        init[:, :, D:] = 1e6
    out, fin = ct.cam_scan_func(*args, init_state=init, save_final_state=True)
    assert fin.shape == (B * H, BD, BD) and fin.dtype == torch.float32
    assert torch.count_nonzero(fin[:, D:, :]) == 0 and torch.count_nonzero(fin[:, :, D:]) == 0
    corner = init[:, :D, :D].double().view(B, H, D, D)
    wout, wfin = seed._torch_cam_scan_single_chunk(*[a.double() for a in args], init_state=corner.transpose(-1, -2),
                                                   return_final_state=True)
    assert rel_err(out.numpy(), wout.numpy()) <= 1e-5
    assert rel_err(fin[:, :D, :D].numpy(), wfin.transpose(-1, -2).reshape(B * H, D, D).numpy()) <= 1e-5
    out2 = ct.cam_scan_func(*args, save_final_state=False)
    assert isinstance(out2, torch.Tensor)


def test_cam_scan_func_with_grad_through_states(inputs):
    """Beyond the seed: init_state and final_state with gradients, against the seed's reference under
    autograd in f64."""
    B, H, D, F, S = 1, 2, 24, 3, 4
    args = _scan_problem(inputs, (B, H, D, F, S), grad=True)
    BD = 32
    init = _t(inputs.normal(B * H, BD, BD, scale=0.3), grad=True)
    out, fin = ct.cam_scan_func_with_grad(*args, init_state=init, save_final_state=True)
    up, upf = _t(inputs.normal(*out.shape)), _t(inputs.normal(*fin.shape))
    gg = torch.autograd.grad((out, fin), args + [init], (up, upf))
    a64 = [a.detach().double().requires_grad_() for a in args]
    i64 = init.detach().double().requires_grad_()
    corner = i64[:, :D, :D].reshape(B, H, D, D).transpose(-1, -2)
    wout, wfin = seed._torch_cam_scan_single_chunk(*a64, init_state=corner, return_final_state=True)
    wfin_seed = torch.zeros(B * H, BD, BD, dtype=torch.float64)
    wfin_seed[:, :D, :D] = wfin.transpose(-1, -2).reshape(B * H, D, D)
    assert rel_err(out.detach().numpy(), wout.detach().numpy()) <= 1e-5
    assert rel_err(fin.detach().numpy(), wfin_seed.detach().numpy()) <= 1e-5
    wg = torch.autograd.grad((wout, wfin_seed), a64 + [i64], (up.double(), upf.double()))
    for n, g, w in zip(("q", "k", "v", "beta", "decay", "init_state"), gg, wg):
        assert g.shape == w.shape and rel_err(g.numpy(), w.numpy()) <= 1e-4, n


def test_scan_function_class_is_the_seeds_signature(inputs):
    args = _scan_problem(inputs, (1, 2, 8, 2, 3), grad=True)
    out = ct.CamScanFunction.apply(*args, True)
    out.sum().backward()  # an expanded (stride 0) upstream gradient
    want = seed._torch_cam_scan_reference(*[a.detach().double().requires_grad_() for a in args], reverse=True)
    assert rel_err(out.detach().numpy(), want.detach().numpy()) <= 1e-5
    assert all(a.grad is not None for a in args)
