"""The camera branch's pieces and the whole branch on NumPy arrays against the library's f64 references
(docs/math.md §8), and the host helpers against the seed's PyTorch versions."""
import numpy as np
import pytest

import camdelta
from camdelta import ref
from camdelta._lib import lib
from conftest import HALF, from_half, rel_err, to_half

# (B, T, Hs, Ws, H, D, chunking)
BRANCH = [
    (2, 7, 3, 2, 2, 8, dict(chunk_size=3, chunk_strategy="first_chunk_plus_one")),
    (1, 5, 2, 3, 1, 16, dict(chunk_size=2, chunk_strategy="first_frame")),
    (1, 4, 2, 2, 3, 8, dict(chunk_index=[0, 1, 3])),
    (1, 3, 3, 1, 2, 24, dict()),
]


def test_chunk_bounds_of_the_spec():
    assert camdelta.chunk_bounds(10, chunk_size=4) == [0, 4, 10]
    assert camdelta.chunk_bounds(21, chunk_size=3, chunk_strategy="first_chunk_plus_one") == \
        [0, 4, 7, 10, 13, 16, 21]
    assert camdelta.chunk_bounds(7, chunk_size=3, chunk_strategy="first_frame") == [0, 1, 4, 7]
    assert camdelta.chunk_bounds(5) == [0, 5]
    assert camdelta.chunk_bounds(6, chunk_index=[0, 2, 5]) == [0, 2, 5, 6]
    # the conv's segments: uniform when T % cs == 0 whatever the strategy; bidirectional with an index alone
    assert camdelta.conv_bounds(8, chunk_size=4, chunk_strategy="first_frame") == [0, 4, 8]
    assert camdelta.conv_bounds(6, chunk_index=[0, 2]) == [0, 6]
    with pytest.raises(camdelta.errors.InvalidArgumentError):
        camdelta.chunk_bounds(6, chunk_index=[1, 2])


def test_camera_forward(inputs):
    B, T, Hs, Ws, D = 2, 3, 4, 5, 16
    cc = inputs.cameras(B, T, Hs * 2, Ws * 2)  # intrinsics of an image twice the grid: patch (1, 2, 2)
    got = camdelta.camera_forward(cc, grid=(T, Hs, Ws), head_dim=D, patch=(1, 2, 2))
    want = ref.camera_forward(cc, grid=(T, Hs, Ws), head_dim=D, patch=(1, 2, 2))
    for name, g, w in zip(got._fields, got, want):
        assert g.shape == w.shape and rel_err(g, w) <= 1e-5, name


@pytest.mark.parametrize("case", BRANCH[:3])
def test_short_conv(inputs, case):
    B, T, Hs, Ws, H, D, ch = case
    N, Cc = T * Hs * Ws, H * D
    x, w, gy = inputs.normal(B, N, H, D), inputs.normal(Cc, 4, scale=0.5), inputs.normal(B, N, H, D)
    y = camdelta.short_conv_forward(x, w, frames=T, **ch)
    assert y.shape == x.shape and rel_err(y, ref.short_conv_forward(x, w, frames=T, **ch)) <= 1e-6
    g = camdelta.short_conv_backward(x, w, gy, frames=T, **ch)
    r = ref.short_conv_backward(x, w, gy, frames=T, **ch)
    assert rel_err(g.dk_raw, r.dk_raw) <= 1e-5 and rel_err(g.dconv_weight, r.dconv_weight) <= 1e-5
    # FLA's (C, 1, 4) weight, and one gradient only
    g1 = camdelta.short_conv_backward(x, w.reshape(Cc, 1, 4), gy, frames=T, dk_raw=False, **ch)
    assert g1.dk_raw is None and g1.dconv_weight.shape == (Cc, 1, 4)
    assert rel_err(g1.dconv_weight.reshape(Cc, 4), r.dconv_weight) <= 1e-5


def test_output_transform(inputs):
    B, N, H, D = 2, 9, 3, 16
    out, out2, gy = inputs.normal(B, H, D, N), inputs.normal(B, H, D, N), inputs.normal(B, N, H, D)
    po, rc, rs = inputs.normal(B, N, 4, 4), inputs.uniform(-1, 1, N, D // 2), inputs.uniform(-1, 1, N, D // 2)
    y = camdelta.output_transform_forward(out, po, rc, rs, out2=out2)
    assert rel_err(y, ref.output_transform_forward(out, po, rc, rs, out2=out2)) <= 1e-6
    go = camdelta.output_transform_backward(gy, po, rc, rs)
    assert rel_err(go, ref.output_transform_backward(gy, po, rc, rs)) <= 1e-6


def branch_problem(inputs, B, T, Hs, Ws, H, D):
    N, S, Cc = T * Hs * Ws, Hs * Ws, H * D
    return dict(q_raw=inputs.normal(B, N, H, D), k_raw=inputs.normal(B, N, H, D), v_raw=inputs.normal(B, N, H, D),
                conv_weight=inputs.normal(Cc, 4, scale=0.5), q_norm_weight=inputs.uniform(0.5, 1.5, Cc),
                k_norm_weight=inputs.uniform(0.5, 1.5, Cc), camera_conditions=inputs.cameras(B, T, Hs, Ws),
                beta=inputs.uniform(0.1, 0.9, B, H, T, S), decay=inputs.uniform(0.5, 1.0, B, H, T))


@pytest.mark.parametrize("case", BRANCH)
def test_branch_forward_backward(inputs, case):
    B, T, Hs, Ws, H, D, ch = case
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)
    raw = [p.pop(n) for n in ("q_raw", "k_raw", "v_raw")]
    gy = inputs.normal(*raw[0].shape)
    saved = camdelta.BranchSaved()
    y = camdelta.branch_forward(*raw, grid=(T, Hs, Ws), saved=saved, **p, **ch)
    assert rel_err(y, ref.branch_forward(*raw, grid=(T, Hs, Ws), **p, **ch)) <= 1e-5
    g = camdelta.branch_backward(*raw, grad_y=gy, grid=(T, Hs, Ws), saved=saved, **p, **ch)
    w = ref.branch_backward(*raw, grad_y=gy, grid=(T, Hs, Ws), **p, **ch)
    for name, a, b in zip(g._fields, g, w):
        assert rel_err(a, b) <= 1e-4, name


def test_helpers_match_the_seed(inputs):
    torch = pytest.importorskip("torch")
    import seed_loader
    seed = seed_loader.load()
    N, Dh = 5, 8
    freqs = torch.polar(torch.ones(N, Dh // 2, dtype=torch.float64),
                        torch.from_numpy(inputs.uniform(-3, 3, N, Dh // 2).astype(np.float64)))
    cos, sin = camdelta.rope_tables(freqs.numpy())
    scos, ssin = seed._prepare_ucpe_rope_tables(freqs.view(1, 1, N, Dh // 2), N, Dh, None)
    assert rel_err(cos, scos.numpy()) <= 1e-7 and rel_err(sin, ssin.numpy()) <= 1e-7
    m = np.ascontiguousarray(inputs.cameras(2, 3, 2, 2)[..., :16]).reshape(2, 3, 4, 4)
    assert rel_err(camdelta.invert_se3(m), seed._invert_SE3(torch.from_numpy(m)).numpy()) <= 1e-6


def test_bf16_conversions_are_the_librarys(inputs):
    x = np.concatenate([inputs.normal(1000, scale=100.0),
                        np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 3.0e38, 1e-40, 1.00390625, 1.01171875],
                                 np.float32)])
    mine = camdelta.to_bf16(x)
    theirs = np.array([lib.camdelta_f32_to_bf16(float(v)) for v in x], np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(mine[~nan], theirs[~nan])
    assert np.all(np.isnan(camdelta.from_bf16(mine[nan])))
    assert np.array_equal(camdelta.from_bf16(mine[~nan]),
                          np.array([lib.camdelta_bf16_to_f32(int(h)) for h in mine[~nan]], np.float32))


# 16-bit activations: conftest's HALF bounds (docs/math.md §8.7)
@pytest.mark.parametrize("dt", sorted(HALF))
@pytest.mark.parametrize("case", BRANCH[:2])
def test_branch_16bit(inputs, case, dt):
    B, T, Hs, Ws, H, D, ch = case
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)
    raw = [to_half(dt, p.pop(n)) for n in ("q_raw", "k_raw", "v_raw")]
    gy = to_half(dt, inputs.normal(*raw[0].shape))
    kw = dict(dtype="bf16") if dt == "bf16" else {}
    saved = camdelta.BranchSaved()
    y = camdelta.branch_forward(*raw, grid=(T, Hs, Ws), saved=saved, **p, **ch, **kw)
    assert y.dtype == raw[0].dtype and y.shape == raw[0].shape
    raw32 = [from_half(dt, a) for a in raw]
    assert rel_err(from_half(dt, y), ref.branch_forward(*raw32, grid=(T, Hs, Ws), **p, **ch)) <= HALF[dt]
    g = camdelta.branch_backward(*raw, grad_y=gy, grid=(T, Hs, Ws), saved=saved, **p, **ch, **kw)
    w = ref.branch_backward(*raw32, grad_y=from_half(dt, gy), grid=(T, Hs, Ws), **p, **ch)
    for name, a, b in zip(g._fields, g, w):
        if name in ("dq_raw", "dk_raw", "dv_raw"):
            assert a.dtype == raw[0].dtype
            a = from_half(dt, a)
        else:
            assert a.dtype == np.float32
        assert rel_err(a, b) <= 2 * HALF[dt], name


def test_branch_16bit_refuses_mixed_and_unknown(inputs):
    B, T, Hs, Ws, H, D, ch = BRANCH[0]
    p = branch_problem(inputs, B, T, Hs, Ws, H, D)
    q, k, v = (p.pop(n) for n in ("q_raw", "k_raw", "v_raw"))
    with pytest.raises(camdelta.errors.UnsupportedError):  # uint16 without dtype='bf16'
        camdelta.branch_forward(camdelta.to_bf16(q), camdelta.to_bf16(k), camdelta.to_bf16(v), grid=(T, Hs, Ws),
                                **p, **ch)
    with pytest.raises(camdelta.errors.UnsupportedError):
        camdelta.branch_forward(q, k, v, grid=(T, Hs, Ws), dtype="f8", **p, **ch)
    with pytest.raises(ValueError, match="k_raw"):  # one dtype for the three
        camdelta.branch_forward(q.astype(np.float16), k, v.astype(np.float16), grid=(T, Hs, Ws), **p, **ch)
