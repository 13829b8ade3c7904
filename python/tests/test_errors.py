"""Bad inputs raise camdelta.errors carrying the library's status name and a message naming the argument;
nothing is written (the inputs are untouched and no output is returned)."""
import numpy as np
import pytest

import camdelta
from camdelta import errors as E

B, N, H, D = 1, 6, 2, 8


@pytest.fixture
def prep(inputs):
    raw = [inputs.normal(B, N, H, D) for _ in range(3)]
    return raw, inputs.prep(B, N, H, D)


def _snapshot(arrays):
    return [a.copy() for a in arrays if isinstance(a, np.ndarray)]


def _untouched(arrays, before):
    return all(np.array_equal(a, b, equal_nan=True)
               for a, b in zip([a for a in arrays if isinstance(a, np.ndarray)], before))


def _raises(cls, status_name, words, fn, *args, **kw):
    arrays = list(args) + list(kw.values())
    before = _snapshot(arrays)
    with pytest.raises(cls) as info:
        fn(*args, **kw)
    e = info.value
    assert isinstance(e, E.CamdeltaError) and e.status_name == status_name
    assert str(e).startswith(status_name + ": ")
    for w in words:
        assert w in e.message, (w, e.message)
    assert _untouched(arrays, before)
    return e


def test_wrong_shape_dtype_layout_kind(prep, inputs):
    raw, kw = prep
    bad = inputs.normal(B, N, H, D + 8)
    _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["'k_raw'", "(B, N, H, D)"], camdelta.prep_forward,
            raw[0], bad, raw[2], **kw)
    _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["'rope_cos'", "(N, D/2)"], camdelta.prep_forward,
            *raw, **dict(kw, rope_cos=kw["rope_cos"][:, :2].copy()))
    _raises(E.UnsupportedError, "CAMDELTA_ERROR_UNSUPPORTED", ["'proj_q'", "float64"], camdelta.prep_forward,
            *raw, **dict(kw, proj_q=kw["proj_q"].astype(np.float64)))
    _raises(E.UnsupportedError, "CAMDELTA_ERROR_UNSUPPORTED", ["'q_raw'", "dtype='bf16'"],
            camdelta.prep_forward, *[r.view(np.uint16)[..., ::2].copy() for r in raw], **kw)
    _raises(E.UnsupportedError, "CAMDELTA_ERROR_UNSUPPORTED", ["'v_raw'", "float16"], camdelta.prep_forward,
            raw[0].astype(np.float16), raw[1].astype(np.float16), raw[2], **kw)
    strided = inputs.normal(B, N, H, 2 * D)[..., ::2]
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["'q_raw'", "C-contiguous"],
            camdelta.prep_forward, strided, raw[1], raw[2], **kw)
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["'k_norm_weight'", "list"],
            camdelta.prep_forward, *raw, **dict(kw, k_norm_weight=list(kw["k_norm_weight"])))
    q, k, v, beta, decay = inputs.scan(1, 2, 8, 3, 4)
    _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["'beta'", "F*S"], camdelta.scan_forward, q, k, v,
            np.ascontiguousarray(beta[..., :3]), decay)
    _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["'init_state'"], camdelta.scan_forward, q, k, v, beta, decay,
            init_state=np.zeros((1, 2, 8, 9), np.float32))
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["algorithm", "'fast'"],
            camdelta.scan_forward, q, k, v, beta, decay, algorithm="fast")


def test_errors_from_the_library_carry_its_message(prep, inputs):
    raw, kw = prep
    # a head dim the kernels do not take: the library's own check and message
    raw12 = [inputs.normal(B, N, H, 12) for _ in range(3)]
    kw12 = inputs.prep(B, N, H, 12)
    _raises(E.UnsupportedError, "CAMDELTA_ERROR_UNSUPPORTED", ["camdelta_prep_forward", "D=12"],
            camdelta.prep_forward, *raw12, **kw12)
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["camdelta_prep_forward"],
            camdelta.prep_forward, *raw, **dict(kw, k_scale=float("nan")))
    empty = [np.zeros((B, 0, H, D), np.float32) for _ in range(3)]
    kw0 = inputs.prep(B, 0, H, D)
    _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["camdelta_prep_forward"], camdelta.prep_forward, *empty, **kw0)
    with pytest.raises(E.InvalidArgumentError) as info:
        camdelta.chunk_bounds(6, chunk_index=[0, 3, 2])
    assert "chunk_index" in info.value.message


def test_bad_device_and_closed_context(prep, inputs):
    with pytest.raises(E.DeviceNotFoundError) as info:
        camdelta.Context("no-such-device-anywhere")
    assert "no-such-device-anywhere" in info.value.message and info.value.status_name == \
        "CAMDELTA_ERROR_DEVICE_NOT_FOUND"
    raw, kw = prep
    c = camdelta.Context()
    saved = camdelta.PrepSaved(c)
    camdelta.prep_forward(*raw, saved=saved, ctx=c, **kw)
    c.close()
    assert c.closed and saved._handle is None  # the context released its saved objects
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["closed"], camdelta.prep_forward, *raw,
            ctx=c, **kw)
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["closed"], camdelta.prep_backward, *raw,
            saved=saved, **kw)
    with pytest.raises(E.InvalidArgumentError):
        c.finish()
    c.close()  # twice is fine


def test_saved_objects_of_another_context_or_kind(prep, inputs):
    raw, kw = prep
    other = camdelta.Context()
    try:
        s = camdelta.PrepSaved(other)
        _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["another context"],
                camdelta.prep_forward, *raw, saved=s, **kw)
    finally:
        other.close()
    _raises(E.InvalidArgumentError, "CAMDELTA_ERROR_INVALID_ARGUMENT", ["ScanSaved", "PrepSaved"],
            camdelta.prep_forward, *raw, saved=camdelta.ScanSaved(), **kw)
    # a scan saved object filled by a forward of another shape
    a = inputs.scan(1, 2, 8, 3, 4)
    b = inputs.scan(1, 2, 8, 2, 4)
    s = camdelta.ScanSaved()
    camdelta.scan_forward(*a, saved=s)
    e = _raises(E.ShapeError, "CAMDELTA_ERROR_SHAPE", ["'saved' is from a forward"], camdelta.scan_backward, *b,
                np.zeros_like(b[0]), saved=s)
    assert "camdelta_scan_backward" in e.message


def test_torch_inputs(inputs):
    torch = pytest.importorskip("torch")
    import camdelta.torch as ct
    q, k, v, beta, decay = (torch.from_numpy(a) for a in inputs.scan(1, 2, 8, 3, 4))
    with pytest.raises(E.UnsupportedError) as info:
        ct.cam_scan_func(q.half(), k, v, beta, decay)
    assert "'q'" in info.value.message
    with pytest.raises(E.InvalidArgumentError) as info:
        ct.cam_scan_func(q.transpose(2, 3).contiguous().transpose(2, 3), k, v, beta, decay)
    assert "contiguous" in info.value.message
    with pytest.raises(ValueError) as info:  # the seed raises ValueError for a state of the wrong shape too
        ct.cam_scan_func(q, k, v, beta, decay, init_state=torch.zeros(2, 9, 9))
    assert "BLOCK_D" in str(info.value)
    with pytest.raises(E.InvalidArgumentError):
        ct.cam_scan_func(q.tolist(), k, v, beta, decay)
    before = q.clone()
    with pytest.raises(E.ShapeError):
        ct.cam_scan_func(q, k, v, beta[..., :2].contiguous(), decay)
    assert torch.equal(q, before)
