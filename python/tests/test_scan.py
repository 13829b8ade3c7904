"""camdelta.scan_forward / scan_backward, packed clips and state summaries against the library's f64
references (docs/math.md §3, §4, §5, §9)."""
import numpy as np
import pytest

import camdelta
from camdelta import ref
from conftest import rel_err

# (B, H, D, F, S): one frame, odd token counts, several heads
SHAPES = [(2, 3, 8, 5, 7), (1, 2, 16, 1, 9), (1, 1, 24, 4, 3)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("algorithm", ["sequential", "chunkwise"])
def test_forward_with_states(inputs, shape, reverse, algorithm):
    B, H, D, F, S = shape
    q, k, v, beta, decay = inputs.scan(*shape)
    init = inputs.normal(B, H, D, D, scale=0.3)
    got = camdelta.scan_forward(q, k, v, beta, decay, reverse=reverse, init_state=init, final_state=True,
                                algorithm=algorithm)
    want = ref.scan_forward(q, k, v, beta, decay, reverse=reverse, init_state=init, final_state=True)
    assert got.algorithm == algorithm
    assert rel_err(got.out, want.out) <= 1e-5
    assert rel_err(got.final_state, want.final_state) <= 1e-5
    plain = camdelta.scan_forward(q, k, v, beta, decay, reverse=reverse)
    assert plain.final_state is None and plain.algorithm in ("sequential", "chunkwise")
    assert rel_err(plain.out, ref.scan_forward(q, k, v, beta, decay, reverse=reverse).out) <= 1e-5


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_backward_every_gradient(inputs, shape, reverse):
    B, H, D, F, S = shape
    q, k, v, beta, decay = inputs.scan(*shape)
    init = inputs.normal(B, H, D, D, scale=0.3)
    go, gf = inputs.normal(B, H, D, F * S), inputs.normal(B, H, D, D)
    saved = camdelta.ScanSaved()
    camdelta.scan_forward(q, k, v, beta, decay, reverse=reverse, init_state=init, saved=saved)
    got = camdelta.scan_backward(q, k, v, beta, decay, go, reverse=reverse, init_state=init, grad_final_state=gf,
                                 saved=saved)
    want = ref.scan_backward(q, k, v, beta, decay, go, reverse=reverse, init_state=init, grad_final_state=gf)
    for name, g, w in zip(got._fields, got, want):
        assert rel_err(g, w) <= 1e-4, name
    # recomputing the forward's states (no saved object), no states
    got = camdelta.scan_backward(q, k, v, beta, decay, go, reverse=reverse)
    want = ref.scan_backward(q, k, v, beta, decay, go, reverse=reverse)
    assert got.dinit_state is None
    for name, g, w in zip(got._fields[:5], got[:5], want[:5]):
        assert rel_err(g, w) <= 1e-4, name


def test_tf32_request_runs(inputs):
    """precision='tf32' is an opt-in for tensor cores; devices without them run the exact path."""
    q, k, v, beta, decay = inputs.scan(1, 2, 8, 3, 5)
    got = camdelta.scan_forward(q, k, v, beta, decay, precision="tf32")
    assert rel_err(got.out, ref.scan_forward(q, k, v, beta, decay).out) <= 2e-3


def test_plan_names_the_algorithm():
    plan = camdelta.scan_plan((1, 2, 16, 30), 3, algorithm="chunkwise")
    assert plan.startswith("chunkwise")
    assert camdelta.scan_plan((1, 2, 16, 30), 3, backward=True).startswith("backward")


def _packed_problem(inputs, H, D, frame_tokens, clip_frames):
    fo = np.concatenate([[0], np.cumsum(frame_tokens)]).astype(np.int64)
    co = np.concatenate([[0], np.cumsum(clip_frames)]).astype(np.int64)
    N, F, clips = int(fo[-1]), len(frame_tokens), len(clip_frames)
    q, k, v = inputs.normal(1, H, D, N), inputs.normal(1, H, D, N, scale=D ** -0.5), inputs.normal(1, H, D, N)
    beta, decay = inputs.uniform(0.02, 0.2, 1, H, N), inputs.uniform(0.5, 1.0, 1, H, F)
    init = inputs.normal(clips, H, D, D, scale=0.3)
    return (q, k, v, beta, decay), dict(frame_offsets=fo, clip_offsets=co), init, N, clips


@pytest.mark.parametrize("reverse", [False, True])
def test_packed_clips(inputs, reverse):
    """Three clips of 2, 1 and 3 frames of different token counts, against the packed f64 reference."""
    H, D = 2, 8
    args, off, init, N, clips = _packed_problem(inputs, H, D, [3, 5, 4, 2, 6, 1], [2, 1, 3])
    got = camdelta.scan_forward_packed(*args, reverse=reverse, init_state=init, final_state=True, **off)
    want = ref.scan_forward_packed(*args, reverse=reverse, init_state=init, final_state=True, **off)
    assert rel_err(got.out, want.out) <= 1e-5 and rel_err(got.final_state, want.final_state) <= 1e-5
    go, gf = inputs.normal(1, H, D, N), inputs.normal(clips, H, D, D)
    g = camdelta.scan_backward_packed(*args, go, reverse=reverse, init_state=init, grad_final_state=gf, **off)
    w = ref.scan_backward_packed(*args, go, reverse=reverse, init_state=init, grad_final_state=gf, **off)
    for name, a, b in zip(g._fields, g, w):
        assert rel_err(a, b) <= 1e-4, name


@pytest.mark.parametrize("reverse", [False, True])
def test_summaries_chain_segments(inputs, reverse):
    """T and E of two segments against the reference; combined and applied they give the whole sequence's
    final state; the gradient summary against the reference."""
    B, H, D, F, S = 1, 2, 8, 6, 4
    q, k, v, beta, decay = inputs.scan(B, H, D, F, S)
    init = inputs.normal(B, H, D, D, scale=0.3)
    cut = 2 * S  # frames [0, 2) and [2, 6)
    seg = [(x[..., :cut], x[..., cut:]) for x in (q, k, v)]
    segb, segd = (beta[:, :, :2], beta[:, :, 2:]), (decay[:, :, :2], decay[:, :, 2:])
    parts = []
    for i in range(2):
        kk, vv = np.ascontiguousarray(seg[1][i]), np.ascontiguousarray(seg[2][i])
        bb, dd = np.ascontiguousarray(segb[i]), np.ascontiguousarray(segd[i])
        s = camdelta.scan_summary(kk, vv, bb, dd, reverse=reverse)
        r = ref.scan_summary(kk, vv, bb, dd, reverse=reverse)
        assert rel_err(s.T, r.T) <= 1e-5 and rel_err(s.E, r.E) <= 1e-5
        parts.append(s)
    first, second = (parts[0], parts[1]) if not reverse else (parts[1], parts[0])
    both = camdelta.summary_combine(first.T, second.T, E1=first.E, E2=second.E)
    final = camdelta.summary_apply(both.T, E=both.E, M_in=init)
    whole = ref.scan_forward(q, k, v, beta, decay, reverse=reverse, init_state=init, final_state=True)
    assert rel_err(final, whole.final_state) <= 1e-5
    assert rel_err(both.T, np.matmul(second.T.astype(np.float64), first.T)) <= 1e-6
    assert rel_err(camdelta.summary_apply(both.T, M_in=init, transpose=True),
                   np.matmul(np.swapaxes(both.T, -1, -2).astype(np.float64), init)) <= 1e-6
    go, gf = inputs.normal(B, H, D, F * S), inputs.normal(B, H, D, D)
    g = camdelta.scan_grad_summary(q, k, beta, decay, go, reverse=reverse, grad_final_state=gf)
    assert rel_err(g, ref.scan_grad_summary(q, k, beta, decay, go, reverse=reverse, grad_final_state=gf)) <= 1e-4
