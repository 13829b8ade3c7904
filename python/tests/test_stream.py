"""camdelta.Stream (docs/streaming.md): a sequence streamed block by block against the f64 stream reference and
the one-shot branch (f32, and f16 and bf16 activations), non-committing steps, save/restore (bytes and file), bad
input."""
import numpy as np
import pytest

import camdelta
from camdelta import ref
from conftest import HALF, from_half, rel_err, to_half


def _problem(inputs, B, T, Hs, Ws, H, D):
    S, Cc = Hs * Ws, H * D
    N = T * S
    return dict(q=inputs.normal(B, N, H, D), k=inputs.normal(B, N, H, D), v=inputs.normal(B, N, H, D),
                w=inputs.normal(Cc, 4, scale=0.5), qw=inputs.uniform(0.5, 1.5, Cc), kw=inputs.uniform(0.5, 1.5, Cc),
                cc=inputs.cameras(B, T, Hs, Ws), beta=inputs.uniform(0.1, 0.9, B, H, T, S),
                decay=inputs.uniform(0.5, 1.0, B, H, T))


def _block(p, f0, Tb, S):
    """Frames [f0, f0 + Tb) of the problem's tensors."""
    return dict(q=p["q"][:, f0 * S:(f0 + Tb) * S], k=p["k"][:, f0 * S:(f0 + Tb) * S],
                v=p["v"][:, f0 * S:(f0 + Tb) * S], cc=p["cc"][:, f0:f0 + Tb],
                beta=p["beta"][:, :, f0:f0 + Tb], decay=p["decay"][:, :, f0:f0 + Tb])


def _stream(p, B, Hs, Ws, H, D, cs, strategy, dtype="f32"):
    return camdelta.Stream(batch=B, heads=H, head_dim=D, grid=(Hs, Ws), conv_weight=p["w"], q_norm_weight=p["qw"],
                           k_norm_weight=p["kw"], chunk_size=cs, chunk_strategy=strategy, dtype=dtype)


def _run(st, p, T, S, repeat=0):
    ys = []
    while st.frames < T:
        f0, Tb = st.frames, st.next_frames
        b = {k: np.ascontiguousarray(v) for k, v in _block(p, f0, Tb, S).items()}
        kw = dict(camera_conditions=b["cc"], beta=b["beta"], decay=b["decay"])
        dry = [st.step(b["q"], b["k"], b["v"], commit=False, **kw) for _ in range(repeat)]
        y = st.step(b["q"], b["k"], b["v"], **kw)
        for d in dry:
            assert np.array_equal(d, y)
        assert st.frames == f0 + Tb
        ys.append(y)
    return np.concatenate(ys, axis=1)


# (B, T, Hs, Ws, H, D, chunk_size, strategy): whole blocks; the conv's segments are the blocks in the branch too
CASES = [(2, 9, 2, 3, 2, 8, 3, "uniform"), (1, 7, 3, 2, 1, 16, 2, "first_frame"),
         (1, 10, 2, 2, 2, 16, 3, "first_chunk_plus_one")]


@pytest.mark.parametrize("case", CASES)
def test_stream_equals_branch_and_reference(inputs, case):
    B, T, Hs, Ws, H, D, cs, strategy = case
    S = Hs * Ws
    p = _problem(inputs, B, T, Hs, Ws, H, D)
    with _stream(p, B, Hs, Ws, H, D, cs, strategy) as st:
        y = _run(st, p, T, S, repeat=1)
    kw = dict(conv_weight=p["w"], q_norm_weight=p["qw"], k_norm_weight=p["kw"], camera_conditions=p["cc"],
              beta=p["beta"], decay=p["decay"], grid=(T, Hs, Ws), chunk_size=cs, chunk_strategy=strategy)
    assert rel_err(y, ref.stream_forward(p["q"], p["k"], p["v"], **kw)) <= 1e-5
    assert rel_err(y, camdelta.branch_forward(p["q"], p["k"], p["v"], **kw)) <= 1e-5


@pytest.mark.parametrize("dt", sorted(HALF))
def test_stream_16bit(inputs, dt):
    B, T, Hs, Ws, H, D, cs, strategy = CASES[2]
    S = Hs * Ws
    p = _problem(inputs, B, T, Hs, Ws, H, D)
    for n in ("q", "k", "v"):
        p[n] = to_half(dt, p[n])
    st = _stream(p, B, Hs, Ws, H, D, cs, strategy, dtype=dt)
    y = _run(st, p, T, S, repeat=1)
    assert y.dtype == p["q"].dtype
    kw = dict(conv_weight=p["w"], q_norm_weight=p["qw"], k_norm_weight=p["kw"], camera_conditions=p["cc"],
              beta=p["beta"], decay=p["decay"], grid=(T, Hs, Ws), chunk_size=cs, chunk_strategy=strategy)
    wide = [from_half(dt, p[n]) for n in ("q", "k", "v")]
    assert rel_err(from_half(dt, y), ref.stream_forward(*wide, **kw)) <= HALF[dt]
    one = camdelta.branch_forward(p["q"], p["k"], p["v"], dtype=dt, **kw)
    assert rel_err(from_half(dt, y), from_half(dt, one)) <= HALF[dt]
    # its image names the dtype: an f32 stream refuses it; f32 activations are refused by the 16-bit stream
    with _stream(p, B, Hs, Ws, H, D, cs, strategy) as f32:
        with pytest.raises(camdelta.errors.InvalidArgumentError, match="dtype %s, this one f32" % dt):
            f32.restore(st.save())
        assert f32.frames == 0
    st.reset()
    b = {k: np.ascontiguousarray(v) for k, v in _block(p, 0, st.next_frames, S).items()}
    with pytest.raises(camdelta.errors.UnsupportedError, match="q_raw"):
        st.step(from_half(dt, b["q"]), b["k"], b["v"], camera_conditions=b["cc"], beta=b["beta"], decay=b["decay"])
    st.close()


def test_save_restore_and_noncommit(inputs, tmp_path):
    B, T, Hs, Ws, H, D, cs = 1, 10, 2, 2, 2, 8, 3
    S = Hs * Ws
    p = _problem(inputs, B, T, Hs, Ws, H, D)
    a = _stream(p, B, Hs, Ws, H, D, cs, "first_frame")
    y_all = _run(a, p, T, S)
    a.reset()
    assert a.frames == 0
    _run(a, p, 4, S)  # blocks 1, 3
    img = a.save()
    b = _block(p, 4, 3, S)
    a.step(np.ascontiguousarray(b["q"]), np.ascontiguousarray(b["k"]), np.ascontiguousarray(b["v"]),
           camera_conditions=np.ascontiguousarray(b["cc"]), beta=np.ascontiguousarray(b["beta"]),
           decay=np.ascontiguousarray(b["decay"]), commit=False)
    assert a.save() == img and a.frames == 4  # a non-committing step changes no bit
    path = tmp_path / "s.cds"
    a.save_file(path)
    c = _stream(p, B, Hs, Ws, H, D, cs, "first_frame")
    c.restore(img)
    assert c.frames == 4
    assert np.array_equal(_run(c, p, T, S), y_all[:, 4 * S:])
    c.restore_file(path)
    assert np.array_equal(_run(c, p, T, S), y_all[:, 4 * S:])
    # another configuration, a damaged image
    d = _stream(p, B, Hs, Ws, H, D, 2, "first_frame")
    with pytest.raises(camdelta.errors.InvalidArgumentError, match="chunk_size"):
        d.restore(img)
    bad = bytearray(img)
    bad[200] ^= 1
    with pytest.raises(camdelta.errors.FormatError, match="checksum"):
        c.restore(bytes(bad))
    for s in (a, c, d):
        s.close()


def test_bad_input(inputs):
    p = _problem(inputs, 1, 3, 2, 2, 1, 8)
    with pytest.raises(camdelta.errors.InvalidArgumentError, match="dtype"):
        camdelta.Stream(batch=1, heads=1, head_dim=8, grid=(2, 2), conv_weight=p["w"], q_norm_weight=p["qw"],
                        k_norm_weight=p["kw"], chunk_size=3, dtype="bf8")
    with _stream(p, 1, 2, 2, 1, 8, 3, "uniform") as st:
        b = _block(p, 0, 2, 4)  # two frames, the block has three
        with pytest.raises(camdelta.errors.ShapeError, match="next block"):
            st.step(b["q"], b["k"], b["v"], camera_conditions=b["cc"], beta=b["beta"], decay=b["decay"])
        assert st.frames == 0
