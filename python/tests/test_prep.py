"""camdelta.prep_forward / prep_backward against the library's f64 references (docs/math.md §2, §4, §5)."""
import numpy as np
import pytest

import camdelta
from camdelta import ref
from conftest import rel_err

# awkward shapes: odd token counts, one head, B > 1; head dims 8, 16 and 24 (not a power of two)
SHAPES = [(2, 7, 3, 8), (1, 13, 1, 16), (1, 5, 2, 24)]


def _raw(inputs, B, N, H, D):
    return inputs.normal(B, N, H, D), inputs.normal(B, N, H, D), inputs.normal(B, N, H, D)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_f32(inputs, shape):
    raw, kw = _raw(inputs, *shape), inputs.prep(*shape)
    got = camdelta.prep_forward(*raw, **kw)
    want = ref.prep_forward(*raw, **kw)
    for name, g, w in zip(got._fields, got, want):
        assert g.dtype == np.float32
        assert rel_err(g, w) <= 1e-6, name


@pytest.mark.parametrize("dtype,bound", [("f16", 2e-3), ("bf16", 1.6e-2)])
def test_forward_16bit(inputs, dtype, bound):
    """16-bit activations: computed in f32 from the rounded inputs, outputs rounded to the same dtype."""
    B, N, H, D = 2, 7, 3, 16
    raw32, kw = _raw(inputs, B, N, H, D), inputs.prep(B, N, H, D)
    if dtype == "f16":
        raw = [r.astype(np.float16) for r in raw32]
        back = [r.astype(np.float32) for r in raw]
        got = camdelta.prep_forward(*raw, **kw)
        assert got.q.dtype == np.float16
        widen = lambda a: a.astype(np.float32)  # noqa: E731
    else:
        raw = [camdelta.to_bf16(r) for r in raw32]
        back = [camdelta.from_bf16(r) for r in raw]
        got = camdelta.prep_forward(*raw, dtype="bf16", **kw)
        assert got.q.dtype == np.uint16
        widen = camdelta.from_bf16
    want = ref.prep_forward(*back, **kw)
    for name, g, w in zip(got._fields[:3], got[:3], want[:3]):
        assert rel_err(widen(g), w) <= bound, name
    assert got.inflation_sq.dtype == np.float32
    assert rel_err(got.inflation_sq, want.inflation_sq) <= 1e-5


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_every_gradient(inputs, shape):
    B, N, H, D = shape
    raw, kw = _raw(inputs, *shape), inputs.prep(*shape)
    grads = dict(grad_q=inputs.normal(B, H, D, N), grad_k=inputs.normal(B, H, D, N),
                 grad_v=inputs.normal(B, H, D, N), grad_inflation_sq=inputs.normal(B, H, N))
    saved = camdelta.PrepSaved()
    fwd = camdelta.prep_forward(*raw, saved=saved, **kw)
    got = camdelta.prep_backward(*raw, all_grads=True, saved=saved,
                                 forward_outputs=(fwd.q, fwd.k, fwd.inflation_sq), **grads, **kw)
    want = ref.prep_backward(*raw, all_grads=True, **grads, **kw)
    for name, g, w in zip(got._fields, got, want):
        assert rel_err(g, w) <= 1e-4, name
    # without the saved object, and with some upstream gradients absent (zero)
    got = camdelta.prep_backward(*raw, grad_k=grads["grad_k"], **kw)
    want = ref.prep_backward(*raw, grad_k=grads["grad_k"], **kw)
    for name, g, w in zip(got._fields[:5], got[:5], want[:5]):
        assert rel_err(g, w) <= 1e-4, name
    assert got.dproj_q is None and got.drope_sin is None


def test_backward_16bit_gradients_in_the_activation_dtype(inputs):
    B, N, H, D = 1, 6, 2, 16
    raw = [r.astype(np.float16) for r in _raw(inputs, B, N, H, D)]
    kw = inputs.prep(B, N, H, D)
    gq = inputs.normal(B, H, D, N).astype(np.float16)
    got = camdelta.prep_backward(*raw, grad_q=gq, **kw)
    assert got.dq_raw.dtype == np.float16 and got.dq_norm_weight.dtype == np.float32
    want = ref.prep_backward(*[r.astype(np.float32) for r in raw], grad_q=gq.astype(np.float32), **kw)
    assert rel_err(got.dq_raw.astype(np.float32), want.dq_raw) <= 4e-3
    assert rel_err(got.dq_norm_weight, want.dq_norm_weight) <= 1e-3
