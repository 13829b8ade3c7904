"""The library's float64 host references of every operation (camdelta_ref.h) on NumPy arrays: slow, exact to
f64, for tests and checks. Arguments as in camdelta.ops; inputs of any real dtype are converted to float64
(a copy); outputs are float64. No device is involved."""
import ctypes as C
from collections import namedtuple

import numpy as np

from . import _check as K
from . import _structs as S
from ._lib import lib
from .context import check
from .ops import BranchGrads, CameraOutputs, ConvGrads, PrepGrads, PrepOutputs, ScanGrads, Summary, chunking, conv_bounds

RefScanOutputs = namedtuple("RefScanOutputs", "out final_state state_pre state_post")
F64 = K.F64


def _d(op, name, a, shape=None):
    """`a` as a C-contiguous float64 array (of `shape` when given)."""
    if a is None:
        return None
    if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a):
        raise K.InvalidArgumentError("%s: argument '%s' must be a real NumPy array" % (op, name))
    x = np.ascontiguousarray(a, dtype=np.float64)
    if shape is not None and x.shape != tuple(shape):
        raise K.ShapeError("%s: argument '%s' has shape %s, expected %s" % (op, name, x.shape, tuple(shape)))
    return x


def _p(a):
    return None if a is None else a.ctypes.data_as(S.c_f64p)


def _z(shape, want=True):
    return np.empty(shape, np.float64) if want else None


def _named(names, arrays):
    """Struct fields by name: each array's float64 pointer (None: NULL)."""
    assert len(names) == len(arrays)
    return {n: _p(a) for n, a in zip(names, arrays)}


_PREP_INPUTS = ("q_raw", "k_raw", "v_raw", "q_norm_weight", "k_norm_weight", "proj_q", "proj_kv", "rope_cos",
                "rope_sin")
_PREP_GRADS = ("grad_q", "grad_k", "grad_v", "grad_inflation_sq") + PrepGrads._fields
_SCAN_GRADS = ("grad_out", "grad_final_state") + ScanGrads._fields
_BRANCH_INPUTS = ("q_raw", "k_raw", "v_raw", "conv_weight", "q_norm_weight", "k_norm_weight", "camera_conditions",
                  "beta", "decay")


# ----------------------------------------------------------------------------------------------- prep
def _prep(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin, k_scale,
          norm_eps):
    B, N, H, D = K.ndarray(op, "q_raw", q_raw, 4, "(B, N, H, D)")
    keep = [_d(op, "q_raw", q_raw), _d(op, "k_raw", k_raw, (B, N, H, D)), _d(op, "v_raw", v_raw, (B, N, H, D)),
            _d(op, "q_norm_weight", q_norm_weight, (H * D,)), _d(op, "k_norm_weight", k_norm_weight, (H * D,)),
            _d(op, "proj_q", proj_q, (B, N, 4, 4)), _d(op, "proj_kv", proj_kv, (B, N, 4, 4)),
            _d(op, "rope_cos", rope_cos, (N, D // 2)), _d(op, "rope_sin", rope_sin, (N, D // 2))]
    p = S.ref_prep(B=B, N=N, H=H, D=D, k_scale=k_scale, norm_eps=norm_eps, **_named(_PREP_INPUTS, keep))
    return p, keep, (B, N, H, D)


def prep_forward(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                 k_scale, norm_eps):
    op = "camdelta.ref.prep_forward"
    p, keep, (B, N, H, D) = _prep(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv,
                                  rope_cos, rope_sin, k_scale, norm_eps)
    q, k, v, infl = _z((B, H, D, N)), _z((B, H, D, N)), _z((B, H, D, N)), _z((B, H, N))
    p.q, p.k, p.v, p.inflation_sq = _p(q), _p(k), _p(v), _p(infl)
    check(lib.camdelta_ref_prep_forward(C.byref(p)))
    del keep
    return PrepOutputs(q, k, v, infl)


def prep_backward(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                  k_scale, norm_eps, grad_q=None, grad_k=None, grad_v=None, grad_inflation_sq=None,
                  all_grads=False):
    op = "camdelta.ref.prep_backward"
    p, keep, (B, N, H, D) = _prep(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv,
                                  rope_cos, rope_sin, k_scale, norm_eps)
    gin = [_d(op, "grad_q", grad_q, (B, H, D, N)), _d(op, "grad_k", grad_k, (B, H, D, N)),
           _d(op, "grad_v", grad_v, (B, H, D, N)), _d(op, "grad_inflation_sq", grad_inflation_sq, (B, H, N))]
    outs = [_z((B, N, H, D)), _z((B, N, H, D)), _z((B, N, H, D)), _z((H * D,)), _z((H * D,)),
            _z((B, N, 4, 4), all_grads), _z((B, N, 4, 4), all_grads), _z((N, D // 2), all_grads),
            _z((N, D // 2), all_grads)]
    g = S.ref_prep_grads(**_named(_PREP_GRADS, gin + outs))
    check(lib.camdelta_ref_prep_backward(C.byref(p), C.byref(g)))
    del keep, gin
    return PrepGrads(*outs)


# ----------------------------------------------------------------------------------------------- scan
def _scan(op, q, k, v, beta, decay, reverse, init_state):
    B, H, D, N = K.ndarray(op, "q", q, 4, "(B, H, D, N)")
    Bb, Hb, F, S_ = K.ndarray(op, "beta", beta, 4, "(B, H, F, S)")
    if (Bb, Hb, F * S_) != (B, H, N):
        raise K.ShapeError("%s: beta %s does not fit q %s" % (op, beta.shape, q.shape))
    keep = [_d(op, "q", q), _d(op, "k", k, (B, H, D, N)), _d(op, "v", v, (B, H, D, N)) if v is not None else None,
            _d(op, "beta", beta), _d(op, "decay", decay, (B, H, F)),
            _d(op, "init_state", init_state, (B, H, D, D))]
    p = S.ref_scan(B=B, H=H, D=D, F=F, S=S_, reverse=bool(reverse), q=_p(keep[0]), k=_p(keep[1]), v=_p(keep[2]),
                   beta=_p(keep[3]), decay=_p(keep[4]), init_state=_p(keep[5]))
    return p, keep, (B, H, D, F, S_, N)


def scan_forward(q, k, v, beta, decay, *, reverse=False, init_state=None, final_state=False, states=False):
    """Returns RefScanOutputs(out, final_state (or None), state_pre, state_post ((B, H, F, D, D), or None
    unless states=True))."""
    op = "camdelta.ref.scan_forward"
    p, keep, (B, H, D, F, S_, N) = _scan(op, q, k, v, beta, decay, reverse, init_state)
    out, fin = _z((B, H, D, N)), _z((B, H, D, D), final_state)
    pre, post = _z((B, H, F, D, D), states), _z((B, H, F, D, D), states)
    p.out, p.final_state, p.state_pre, p.state_post = _p(out), _p(fin), _p(pre), _p(post)
    check(lib.camdelta_ref_scan_forward(C.byref(p)))
    del keep
    return RefScanOutputs(out, fin, pre, post)


def scan_backward(q, k, v, beta, decay, grad_out, *, reverse=False, init_state=None, grad_final_state=None):
    op = "camdelta.ref.scan_backward"
    p, keep, (B, H, D, F, S_, N) = _scan(op, q, k, v, beta, decay, reverse, init_state)
    go = _d(op, "grad_out", grad_out, (B, H, D, N))
    gf = _d(op, "grad_final_state", grad_final_state, (B, H, D, D))
    outs = [_z((B, H, D, N)), _z((B, H, D, N)), _z((B, H, D, N)), _z((B, H, F, S_)), _z((B, H, F)),
            _z((B, H, D, D), init_state is not None)]
    g = S.ref_scan_grads(**_named(_SCAN_GRADS, [go, gf] + outs))
    check(lib.camdelta_ref_scan_backward(C.byref(p), C.byref(g)))
    del keep
    return ScanGrads(*outs)


def scan_summary(k, v, beta, decay, *, reverse=False, init_state=None):
    """Summary(T, E) of the segment, f64."""
    op = "camdelta.ref.scan_summary"
    p, keep, (B, H, D, F, S_, N) = _scan(op, k, k, v, beta, decay, reverse, init_state)
    t, e = _z((B, H, D, D)), _z((B, H, D, D))
    check(lib.camdelta_ref_scan_summary(C.byref(p), _p(t), _p(e)))
    del keep
    return Summary(t, e)


def scan_grad_summary(q, k, beta, decay, grad_out, *, reverse=False, grad_final_state=None):
    op = "camdelta.ref.scan_grad_summary"
    p, keep, (B, H, D, F, S_, N) = _scan(op, q, k, None, beta, decay, reverse, None)
    go = _d(op, "grad_out", grad_out, (B, H, D, N))
    gf = _d(op, "grad_final_state", grad_final_state, (B, H, D, D))
    g = _z((B, H, D, D))
    check(lib.camdelta_ref_scan_grad_summary(C.byref(p), _p(go), _p(gf), _p(g)))
    del keep
    return g


def _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets, reverse, init_state):
    fo = np.ascontiguousarray(frame_offsets, dtype=np.int64)
    co = np.ascontiguousarray(clip_offsets, dtype=np.int64)
    one, H, D, N = K.ndarray(op, "q", q, 4, "(1, H, D, N)")
    F, clips = fo.shape[0] - 1, co.shape[0] - 1
    keep = [fo, co, _d(op, "q", q, (1, H, D, N)), _d(op, "k", k, (1, H, D, N)), _d(op, "v", v, (1, H, D, N)),
            _d(op, "beta", beta, (1, H, N)), _d(op, "decay", decay, (1, H, F)),
            _d(op, "init_state", init_state, (clips, H, D, D))]
    p = S.ref_scan_packed(H=H, D=D, frames=F, clips=clips, frame_offsets=fo.ctypes.data_as(S.c_i64p),
                          clip_offsets=co.ctypes.data_as(S.c_i64p), reverse=bool(reverse),
                          q=_p(keep[2]), k=_p(keep[3]), v=_p(keep[4]), beta=_p(keep[5]), decay=_p(keep[6]),
                          init_state=_p(keep[7]))
    return p, keep, (H, D, F, N, clips)


def scan_forward_packed(q, k, v, beta, decay, *, frame_offsets, clip_offsets, reverse=False, init_state=None,
                        final_state=False):
    op = "camdelta.ref.scan_forward_packed"
    p, keep, (H, D, F, N, clips) = _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets, reverse,
                                           init_state)
    out, fin = _z((1, H, D, N)), _z((clips, H, D, D), final_state)
    p.out, p.final_state = _p(out), _p(fin)
    check(lib.camdelta_ref_scan_packed_forward(C.byref(p)))
    del keep
    return RefScanOutputs(out, fin, None, None)


def scan_backward_packed(q, k, v, beta, decay, grad_out, *, frame_offsets, clip_offsets, reverse=False,
                         init_state=None, grad_final_state=None):
    op = "camdelta.ref.scan_backward_packed"
    p, keep, (H, D, F, N, clips) = _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets, reverse,
                                           init_state)
    go = _d(op, "grad_out", grad_out, (1, H, D, N))
    gf = _d(op, "grad_final_state", grad_final_state, (clips, H, D, D))
    outs = [_z((1, H, D, N)), _z((1, H, D, N)), _z((1, H, D, N)), _z((1, H, N)), _z((1, H, F)),
            _z((clips, H, D, D), init_state is not None)]
    g = S.ref_scan_grads(**_named(_SCAN_GRADS, [go, gf] + outs))
    check(lib.camdelta_ref_scan_packed_backward(C.byref(p), C.byref(g)))
    del keep
    return ScanGrads(*outs)


# ------------------------------------------------------------------------------------------ camera branch
def camera_forward(camera_conditions, *, grid, head_dim, patch=(1, 1, 1)):
    op = "camdelta.ref.camera_forward"
    T, Hs, Ws = K.sizes(op, "grid", grid, 3)
    _pt, ph, pw = K.sizes(op, "patch", patch, 3)
    D = int(head_dim)
    B = K.ndarray(op, "camera_conditions", camera_conditions, 3, "(B, T, 20)")[0]
    cc = _d(op, "camera_conditions", camera_conditions, (B, T, 20))
    N = T * Hs * Ws
    outs = [_z((B, N, 4, 4)), _z((B, N, 4, 4)), _z((B, N, 4, 4)), _z((N, D // 2)), _z((N, D // 2))]
    p = S.ref_camera(B=B, T=T, Hs=Hs, Ws=Ws, ph=ph, pw=pw, D=D, camera_conditions=_p(cc),
                     **_named(CameraOutputs._fields, outs))
    check(lib.camdelta_ref_camera_forward(C.byref(p)))
    return CameraOutputs(*outs)


def _conv(op, k_raw, conv_weight, frames, chunk_size, chunk_strategy, chunk_index):
    x = _d(op, "k_raw", k_raw)
    if x.ndim not in (3, 4):
        raise K.ShapeError("%s: k_raw must be (B, N, C) or (B, N, H, D), got %s" % (op, x.shape))
    B, N, Cc, T = x.shape[0], x.shape[1], int(np.prod(x.shape[2:])), int(frames)
    if N % T:
        raise K.ShapeError("%s: N = %d is not a multiple of frames = %d" % (op, N, T))
    w = _d(op, "conv_weight", conv_weight).reshape(Cc, 4)
    bounds = np.asarray(conv_bounds(T, chunk_size=chunk_size, chunk_strategy=chunk_strategy,
                                    chunk_index=chunk_index), dtype=np.uintp)
    p = S.ref_conv(B=B, T=T, S=N // T, C=Cc, bounds=bounds.ctypes.data_as(S.c_sizep), nbounds=bounds.shape[0],
                   x=_p(x), w=_p(w))
    return p, [x, w, bounds]


def short_conv_forward(k_raw, conv_weight, *, frames, chunk_size=None, chunk_strategy="uniform",
                       chunk_index=None):
    p, keep = _conv("camdelta.ref.short_conv_forward", k_raw, conv_weight, frames, chunk_size, chunk_strategy,
                    chunk_index)
    y = _z(keep[0].shape)
    p.y = _p(y)
    check(lib.camdelta_ref_short_conv_forward(C.byref(p)))
    return y


def short_conv_backward(k_raw, conv_weight, grad_k_conv, *, frames, chunk_size=None, chunk_strategy="uniform",
                        chunk_index=None):
    op = "camdelta.ref.short_conv_backward"
    p, keep = _conv(op, k_raw, conv_weight, frames, chunk_size, chunk_strategy, chunk_index)
    dy = _d(op, "grad_k_conv", grad_k_conv, keep[0].shape)
    dx, dw = _z(keep[0].shape), _z(np.shape(conv_weight))
    p.dy, p.dx, p.dw = _p(dy), _p(dx), _p(dw)
    check(lib.camdelta_ref_short_conv_backward(C.byref(p)))
    return ConvGrads(dx, dw)


def output_transform_forward(out, proj_o, rope_cos, rope_sin, *, out2=None):
    op = "camdelta.ref.output_transform_forward"
    B, H, D, N = K.ndarray(op, "out", out, 4, "(B, H, D, N)")
    o = _d(op, "out", out)
    if out2 is not None:
        o = o + _d(op, "out2", out2, (B, H, D, N))
    keep = [o, _d(op, "proj_o", proj_o, (B, N, 4, 4)), _d(op, "rope_cos", rope_cos, (N, D // 2)),
            _d(op, "rope_sin", rope_sin, (N, D // 2))]
    y = _z((B, N, H, D))
    check(lib.camdelta_ref_output_transform(B, N, H, D, *[_p(a) for a in keep], _p(y)))
    return y


def output_transform_backward(grad_y, proj_o, rope_cos, rope_sin):
    op = "camdelta.ref.output_transform_backward"
    B, N, H, D = K.ndarray(op, "grad_y", grad_y, 4, "(B, N, H, D)")
    keep = [_d(op, "grad_y", grad_y), _d(op, "proj_o", proj_o, (B, N, 4, 4)),
            _d(op, "rope_cos", rope_cos, (N, D // 2)), _d(op, "rope_sin", rope_sin, (N, D // 2))]
    go = _z((B, H, D, N))
    check(lib.camdelta_ref_output_transform_backward(B, N, H, D, *[_p(a) for a in keep], _p(go)))
    return go


def _branch(op, q_raw, k_raw, v_raw, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta, decay,
            grid, patch, chunk_size, chunk_strategy, chunk_index, k_scale, norm_eps):
    T, Hs, Ws = K.sizes(op, "grid", grid, 3)
    _pt, ph, pw = K.sizes(op, "patch", patch, 3)
    B, N, H, D = K.ndarray(op, "q_raw", q_raw, 4, "(B, N, H, D)")
    S_, Cc = Hs * Ws, H * D
    keep = [_d(op, "q_raw", q_raw, (B, T * S_, H, D)), _d(op, "k_raw", k_raw, (B, N, H, D)),
            _d(op, "v_raw", v_raw, (B, N, H, D)), _d(op, "conv_weight", conv_weight).reshape(Cc, 4),
            _d(op, "q_norm_weight", q_norm_weight, (Cc,)), _d(op, "k_norm_weight", k_norm_weight, (Cc,)),
            _d(op, "camera_conditions", camera_conditions, (B, T, 20)), _d(op, "beta", beta, (B, H, T, S_)),
            _d(op, "decay", decay, (B, H, T))]
    ch, idx = chunking(op, chunk_size, chunk_strategy, chunk_index)
    p = S.ref_branch(B=B, T=T, Hs=Hs, Ws=Ws, ph=ph, pw=pw, H=H, D=D, chunking=ch,
                     k_scale=(D * S_) ** -0.5 if k_scale is None else k_scale, norm_eps=norm_eps,
                     **_named(_BRANCH_INPUTS, keep))
    return p, keep + [idx], (B, N, H, D, T, S_, Cc)


def _branch_y(entry, op, *branch_args):
    """y (B, N, H, D) from the reference forward `entry` on the arguments _branch checks (after op)."""
    p, keep, (B, N, H, D, _T, _S, _C) = _branch(op, *branch_args)
    y = _z((B, N, H, D))
    p.y = _p(y)
    check(entry(C.byref(p)))
    del keep
    return y


def branch_forward(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                   decay, grid, patch=(1, 1, 1), chunk_size=None, chunk_strategy="uniform", chunk_index=None,
                   k_scale=None, norm_eps=1e-6):
    return _branch_y(lib.camdelta_ref_branch_forward, "camdelta.ref.branch_forward", q_raw, k_raw, v_raw, conv_weight,
                     q_norm_weight, k_norm_weight, camera_conditions, beta, decay, grid, patch, chunk_size,
                     chunk_strategy, chunk_index, k_scale, norm_eps)


def stream_forward(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                   decay, grid, chunk_size, chunk_strategy="uniform", patch=(1, 1, 1), k_scale=None, norm_eps=1e-6):
    """A stream's committed blocks over the T frames of `grid` (camdelta_ref_stream_forward): the branch with the
    conv's segments at the blocks of chunk_size + chunk_strategy."""
    return _branch_y(lib.camdelta_ref_stream_forward, "camdelta.ref.stream_forward", q_raw, k_raw, v_raw, conv_weight,
                     q_norm_weight, k_norm_weight, camera_conditions, beta, decay, grid, patch, chunk_size,
                     chunk_strategy, None, k_scale, norm_eps)


def branch_backward(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                    decay, grad_y, grid, patch=(1, 1, 1), chunk_size=None, chunk_strategy="uniform",
                    chunk_index=None, k_scale=None, norm_eps=1e-6):
    op = "camdelta.ref.branch_backward"
    p, keep, (B, N, H, D, T, S_, Cc) = _branch(op, q_raw, k_raw, v_raw, conv_weight, q_norm_weight, k_norm_weight,
                                               camera_conditions, beta, decay, grid, patch, chunk_size,
                                               chunk_strategy, chunk_index, k_scale, norm_eps)
    gy = _d(op, "grad_y", grad_y, (B, N, H, D))
    outs = [_z((B, N, H, D)), _z((B, N, H, D)), _z((B, N, H, D)), _z(np.shape(conv_weight)), _z((Cc,)),
            _z((Cc,)), _z((B, H, T, S_)), _z((B, H, T))]
    g = S.ref_branch_grads(grad_y=_p(gy), **_named(BranchGrads._fields, outs))
    check(lib.camdelta_ref_branch_backward(C.byref(p), C.byref(g)))
    del keep
    return BranchGrads(*outs)
