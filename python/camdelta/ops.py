"""Every operation of the C API on NumPy arrays.

Arrays are in the C API's layouts (docs/math.md §1) and must be C-contiguous, aligned and of the dtype the
operation takes: float32, and for the prep's activations also float16, or bfloat16 bits as uint16 with
dtype='bf16'. Anything else raises (camdelta.errors) naming the argument; nothing is converted silently.
Outputs are new arrays. On a zero-copy context (CPU devices) the device reads the inputs and writes the outputs
in place; see camdelta.context. Each call returns when its work has finished.

Every operation that runs on the device takes ctx= (a camdelta.Context; default: camdelta.default_context()).
"""
import ctypes as C
from collections import namedtuple

import numpy as np

from . import _check as K
from . import _structs as S
from ._lib import lib
from .context import BranchSaved, PrepSaved, ScanSaved, check, default_context
from .errors import InvalidArgumentError

PrepOutputs = namedtuple("PrepOutputs", "q k v inflation_sq")
PrepGrads = namedtuple("PrepGrads", "dq_raw dk_raw dv_raw dq_norm_weight dk_norm_weight dproj_q dproj_kv "
                                    "drope_cos drope_sin")
ScanOutputs = namedtuple("ScanOutputs", "out final_state algorithm")
PackedScanOutputs = namedtuple("PackedScanOutputs", "out final_state algorithm native")
ScanGrads = namedtuple("ScanGrads", "dq dk dv dbeta ddecay dinit_state")
Summary = namedtuple("Summary", "T E")
CameraOutputs = namedtuple("CameraOutputs", "proj_q proj_kv proj_o rope_cos rope_sin")
ConvGrads = namedtuple("ConvGrads", "dk_raw dconv_weight")
BranchGrads = namedtuple("BranchGrads", "dq_raw dk_raw dv_raw dconv_weight dq_norm_weight dk_norm_weight dbeta "
                                        "ddecay")

F32 = K.F32
_ALGORITHM_NAMES = {v: k for k, v in S.ALGORITHMS.items()}


def _empty(shape, dtype):
    """Allocates an output (the tests replace it to fill outputs with a poison value first)."""
    return np.empty(shape, dtype)


def _ctx(ctx):
    return default_context() if ctx is None else ctx


def _saved(op, saved, cls):
    if saved is None:
        return None
    if not isinstance(saved, cls):
        raise InvalidArgumentError("%s: 'saved' is a %s, expected camdelta.%s" %
                                   (op, type(saved).__name__, cls.__name__))
    return saved.handle


# ------------------------------------------------------------------------------------------------ prep
def _prep_inputs(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                 dtype):
    dt = K.activation_dtype(op, "q_raw", q_raw, dtype)
    st = K.STORAGE[dt]
    B, N, H, D = K.ndarray(op, "q_raw", q_raw, 4, "(B, N, H, D)")
    for name, a in (("q_raw", q_raw), ("k_raw", k_raw), ("v_raw", v_raw)):
        K.array(op, name, a, (B, N, H, D), st, "(B, N, H, D)")
    K.array(op, "q_norm_weight", q_norm_weight, (H * D,), F32, "(C,) = (H*D,)")
    K.array(op, "k_norm_weight", k_norm_weight, (H * D,), F32, "(C,) = (H*D,)")
    K.array(op, "proj_q", proj_q, (B, N, 4, 4), F32, "(B, N, 4, 4)")
    K.array(op, "proj_kv", proj_kv, (B, N, 4, 4), F32, "(B, N, 4, 4)")
    K.array(op, "rope_cos", rope_cos, (N, D // 2), F32, "(N, D/2)")
    K.array(op, "rope_sin", rope_sin, (N, D // 2), F32, "(N, D/2)")
    return dt, st, (B, N, H, D)


def prep_forward(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                 k_scale, norm_eps, dtype=None, saved=None, ctx=None):
    """Prep forward (docs/math.md §2): q_raw, k_raw, v_raw (B, N, H, D) -> q, k, v (B, H, D, N) in the input's
    dtype and inflation_sq (B, H, N) float32. `saved` (a PrepSaved) keeps what prep_backward reuses."""
    op = "camdelta.prep_forward"
    dt, st, (B, N, H, D) = _prep_inputs(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv,
                                        rope_cos, rope_sin, dtype)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, PrepSaved)
    q, k, v = (_empty((B, H, D, N), st) for _ in range(3))
    infl = _empty((B, H, N), F32)
    with ctx._stage() as s:
        a = S.prep_args(B=B, N=N, H=H, D=D, dtype=S.DTYPES[dt], k_scale=k_scale, norm_eps=norm_eps,
                        q_raw=s.i(q_raw), k_raw=s.i(k_raw), v_raw=s.i(v_raw), q_norm_weight=s.i(q_norm_weight),
                        k_norm_weight=s.i(k_norm_weight), proj_q=s.i(proj_q), proj_kv=s.i(proj_kv),
                        rope_cos=s.i(rope_cos), rope_sin=s.i(rope_sin), q=s.o(q), k=s.o(k), v=s.o(v),
                        inflation_sq=s.o(infl))
        s.run(lib.camdelta_prep_forward, C.byref(a), hs)
    return PrepOutputs(q, k, v, infl)


def prep_backward(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                  k_scale, norm_eps, grad_q=None, grad_k=None, grad_v=None, grad_inflation_sq=None, dtype=None,
                  all_grads=False, forward_outputs=None, saved=None, ctx=None):
    """Prep backward (docs/math.md §4). Upstream gradients grad_q, grad_k, grad_v (B, H, D, N, the activations'
    dtype) and grad_inflation_sq (B, H, N) float32, each optional (None = zero). Returns PrepGrads: dq_raw,
    dk_raw, dv_raw (B, N, H, D) in the activations' dtype, dq_norm_weight, dk_norm_weight (C,) float32, and
    with all_grads=True also dproj_q, dproj_kv (B, N, 4, 4) and drope_cos, drope_sin (N, D/2) (else None).
    forward_outputs: optionally the matching forward's (q, k, inflation_sq), unchanged (the GPUs' two-pass
    form then reads the RMSNorm sums from them). `saved`: the PrepSaved of the matching forward, or None."""
    op = "camdelta.prep_backward"
    dt, st, (B, N, H, D) = _prep_inputs(op, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv,
                                        rope_cos, rope_sin, dtype)
    for name, g in (("grad_q", grad_q), ("grad_k", grad_k), ("grad_v", grad_v)):
        K.optional(op, name, g, (B, H, D, N), st, "(B, H, D, N)")
    K.optional(op, "grad_inflation_sq", grad_inflation_sq, (B, H, N), F32, "(B, H, N)")
    fq = fk = finf = None
    if forward_outputs is not None:
        if len(forward_outputs) != 3:
            raise InvalidArgumentError("%s: forward_outputs must be (q, k, inflation_sq)" % op)
        fq, fk, finf = forward_outputs
        K.array(op, "q", fq, (B, H, D, N), st, "(B, H, D, N)")
        K.array(op, "k", fk, (B, H, D, N), st, "(B, H, D, N)")
        K.array(op, "inflation_sq", finf, (B, H, N), F32, "(B, H, N)")
    ctx = _ctx(ctx)
    hs = _saved(op, saved, PrepSaved)
    dq, dk, dv = (_empty((B, N, H, D), st) for _ in range(3))
    dqw, dkw = _empty((H * D,), F32), _empty((H * D,), F32)
    dpq = dpkv = drc = drs = None
    if all_grads:
        dpq, dpkv = _empty((B, N, 4, 4), F32), _empty((B, N, 4, 4), F32)
        drc, drs = _empty((N, D // 2), F32), _empty((N, D // 2), F32)
    with ctx._stage() as s:
        a = S.prep_backward_args(
            B=B, N=N, H=H, D=D, dtype=S.DTYPES[dt], k_scale=k_scale, norm_eps=norm_eps,
            q_raw=s.i(q_raw), k_raw=s.i(k_raw), v_raw=s.i(v_raw), q_norm_weight=s.i(q_norm_weight),
            k_norm_weight=s.i(k_norm_weight), proj_q=s.i(proj_q), proj_kv=s.i(proj_kv), rope_cos=s.i(rope_cos),
            rope_sin=s.i(rope_sin), grad_q=s.i(grad_q), grad_k=s.i(grad_k), grad_v=s.i(grad_v),
            grad_inflation_sq=s.i(grad_inflation_sq), dq_raw=s.o(dq), dk_raw=s.o(dk), dv_raw=s.o(dv),
            dq_norm_weight=s.o(dqw), dk_norm_weight=s.o(dkw), dproj_q=s.o(dpq), dproj_kv=s.o(dpkv),
            drope_cos=s.o(drc), drope_sin=s.o(drs), q=s.i(fq), k=s.i(fk), inflation_sq=s.i(finf))
        s.run(lib.camdelta_prep_backward, C.byref(a), hs)
    return PrepGrads(dq, dk, dv, dqw, dkw, dpq, dpkv, drc, drs)


# ------------------------------------------------------------------------------------------------ scan
def _scan_shapes(op, q, beta):
    B, H, D, N = K.ndarray(op, "q", q, 4, "(B, H, D, N)")
    Bb, Hb, F, S_ = K.ndarray(op, "beta", beta, 4, "(B, H, F, S)")
    if (Bb, Hb, F * S_) != (B, H, N):
        raise K.ShapeError("%s: argument 'beta' has shape %s, expected (B, H, F, S) with B=%d, H=%d and "
                           "F*S = N = %d from 'q' %s" % (op, beta.shape, B, H, N, q.shape))
    return B, H, D, F, S_, N


def _scan_inputs(op, q, k, v, beta, decay, need_v=True):
    B, H, D, F, S_, N = _scan_shapes(op, q, beta)
    for name, a in (("q", q), ("k", k)) + ((("v", v),) if need_v else ()):
        K.array(op, name, a, (B, H, D, N), F32, "(B, H, D, N)")
    K.array(op, "beta", beta, (B, H, F, S_), F32, "(B, H, F, S)")
    K.array(op, "decay", decay, (B, H, F), F32, "(B, H, F)")
    return B, H, D, F, S_, N


def scan_forward(q, k, v, beta, decay, *, reverse=False, init_state=None, final_state=False, algorithm="auto",
                 precision="exact", saved=None, ctx=None):
    """Scan forward (docs/math.md §3): q, k, v (B, H, D, N), beta (B, H, F, S), decay (B, H, F), float32 ->
    ScanOutputs(out (B, H, D, N), final_state (B, H, D, D) when final_state=True else None, algorithm run).
    init_state (B, H, D, D) optional; states are (key, value) oriented. algorithm 'auto', 'sequential' or
    'chunkwise'; precision 'exact' or 'tf32'. `saved` (a ScanSaved) keeps the states scan_backward reuses."""
    op = "camdelta.scan_forward"
    B, H, D, F, S_, N = _scan_inputs(op, q, k, v, beta, decay)
    K.optional(op, "init_state", init_state, (B, H, D, D), F32, "(B, H, D, D)")
    alg = K.choice(op, "algorithm", algorithm, S.ALGORITHMS)
    prec = K.choice(op, "precision", precision, S.PRECISIONS)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, ScanSaved)
    out = _empty((B, H, D, N), F32)
    fin = _empty((B, H, D, D), F32) if final_state else None
    used = S.c_algorithm(0)
    with ctx._stage() as s:
        a = S.scan_args(B=B, H=H, D=D, F=F, S=S_, reverse=bool(reverse), algorithm=alg, q=s.i(q), k=s.i(k),
                        v=s.i(v), beta=s.i(beta), decay=s.i(decay), out=s.o(out), init_state=s.i(init_state),
                        final_state=s.o(fin), used=C.pointer(used), precision=prec)
        s.run(lib.camdelta_scan_forward, C.byref(a), hs)
    return ScanOutputs(out, fin, _ALGORITHM_NAMES.get(used.value, "unknown"))


def scan_backward(q, k, v, beta, decay, grad_out, *, reverse=False, init_state=None, grad_final_state=None,
                  precision="exact", saved=None, ctx=None):
    """Scan backward (docs/math.md §4): the forward's inputs and grad_out (B, H, D, N) (plus, optionally, the
    forward's init_state and a grad_final_state (B, H, D, D)) -> ScanGrads(dq, dk, dv (B, H, D, N),
    dbeta (B, H, F, S), ddecay (B, H, F), dinit_state (B, H, D, D) when init_state was given, else None).
    `saved`: the ScanSaved of the matching forward, or None to recompute its states."""
    op = "camdelta.scan_backward"
    B, H, D, F, S_, N = _scan_inputs(op, q, k, v, beta, decay)
    K.array(op, "grad_out", grad_out, (B, H, D, N), F32, "(B, H, D, N)")
    K.optional(op, "init_state", init_state, (B, H, D, D), F32, "(B, H, D, D)")
    K.optional(op, "grad_final_state", grad_final_state, (B, H, D, D), F32, "(B, H, D, D)")
    prec = K.choice(op, "precision", precision, S.PRECISIONS)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, ScanSaved)
    dq, dk, dv = (_empty((B, H, D, N), F32) for _ in range(3))
    dbeta, ddecay = _empty((B, H, F, S_), F32), _empty((B, H, F), F32)
    dinit = _empty((B, H, D, D), F32) if init_state is not None else None
    with ctx._stage() as s:
        a = S.scan_backward_args(B=B, H=H, D=D, F=F, S=S_, reverse=bool(reverse), q=s.i(q), k=s.i(k), v=s.i(v),
                                 beta=s.i(beta), decay=s.i(decay), init_state=s.i(init_state),
                                 grad_out=s.i(grad_out), grad_final_state=s.i(grad_final_state), dq=s.o(dq),
                                 dk=s.o(dk), dv=s.o(dv), dbeta=s.o(dbeta), ddecay=s.o(ddecay),
                                 dinit_state=s.o(dinit), precision=prec)
        s.run(lib.camdelta_scan_backward, C.byref(a), hs)
    return ScanGrads(dq, dk, dv, dbeta, ddecay, dinit)


def scan_plan(q_shape, F, *, reverse=False, algorithm="auto", precision="exact", backward=False, ctx=None):
    """What a scan forward (or backward) of q's shape (B, H, D, N) over F frames runs on this context, as the
    library describes it (algorithm, kernels, tiles, estimated costs)."""
    op = "camdelta.scan_plan"
    B, H, D, N = K.sizes(op, "q_shape", q_shape, 4)
    if F <= 0 or N % F:
        raise K.ShapeError("%s: N = %d is not a multiple of F = %d" % (op, N, F))
    ctx = _ctx(ctx)
    buf = C.create_string_buffer(4096)
    if backward:
        a = S.scan_backward_args(B=B, H=H, D=D, F=F, S=N // F, reverse=bool(reverse),
                                 precision=K.choice(op, "precision", precision, S.PRECISIONS))
        check(lib.camdelta_scan_backward_plan_describe(ctx.handle, C.byref(a), buf, len(buf)))
    else:
        a = S.scan_args(B=B, H=H, D=D, F=F, S=N // F, reverse=bool(reverse),
                        algorithm=K.choice(op, "algorithm", algorithm, S.ALGORITHMS),
                        precision=K.choice(op, "precision", precision, S.PRECISIONS))
        check(lib.camdelta_scan_plan_describe(ctx.handle, C.byref(a), buf, len(buf)))
    return buf.value.decode()


# ------------------------------------------------------------------------------------------ packed clips
def _offsets(op, name, a):
    if not isinstance(a, np.ndarray):
        a = np.asarray(a, dtype=np.int64)  # a list of Python ints: the offsets are small host arrays
    K.ndarray(op, name, a, 1, "(count + 1,) int64")
    return K.array(op, name, a, a.shape, K.I64, "(count + 1,) int64")


def _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets, need_v=True):
    fo = _offsets(op, "frame_offsets", frame_offsets)
    co = _offsets(op, "clip_offsets", clip_offsets)
    one, H, D, N = K.ndarray(op, "q", q, 4, "(1, H, D, N)")
    F = max(fo.shape[0] - 1, 0)
    clips = max(co.shape[0] - 1, 0)
    for name, a in (("q", q), ("k", k)) + ((("v", v),) if need_v else ()):
        K.array(op, name, a, (1, H, D, N), F32, "(1, H, D, N)")
    K.array(op, "beta", beta, (1, H, N), F32, "(1, H, N) per token")
    K.array(op, "decay", decay, (1, H, F), F32, "(1, H, F) per frame")
    clips_s = S.packed_clips(frame_offsets=fo.ctypes.data_as(S.c_i64p), clip_offsets=co.ctypes.data_as(S.c_i64p),
                             clips=clips, tokens=N)
    return H, D, F, N, clips, clips_s, (fo, co)


def scan_forward_packed(q, k, v, beta, decay, *, frame_offsets, clip_offsets, reverse=False, init_state=None,
                        final_state=False, algorithm="auto", precision="exact", saved=None, ctx=None):
    """Scan forward over packed clips (docs/math.md §9): q, k, v (1, H, D, N), beta (1, H, N) per token, decay
    (1, H, F) per frame; frame_offsets (F + 1) token offsets and clip_offsets (clips + 1) frame offsets, int64;
    init_state / final_state (clips, H, D, D). Returns PackedScanOutputs(out, final_state, algorithm, native)."""
    op = "camdelta.scan_forward_packed"
    H, D, F, N, clips, cs, keep = _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets)
    K.optional(op, "init_state", init_state, (clips, H, D, D), F32, "(clips, H, D, D)")
    alg = K.choice(op, "algorithm", algorithm, S.ALGORITHMS)
    prec = K.choice(op, "precision", precision, S.PRECISIONS)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, ScanSaved)
    out = _empty((1, H, D, N), F32)
    fin = _empty((clips, H, D, D), F32) if final_state else None
    used, native = S.c_algorithm(0), C.c_int(0)
    cs.native = C.pointer(native)
    with ctx._stage() as s:
        a = S.scan_args(B=1, H=H, D=D, F=F, S=0, reverse=bool(reverse), algorithm=alg, q=s.i(q), k=s.i(k),
                        v=s.i(v), beta=s.i(beta), decay=s.i(decay), out=s.o(out), init_state=s.i(init_state),
                        final_state=s.o(fin), used=C.pointer(used), precision=prec)
        s.run(lib.camdelta_scan_forward_packed, C.byref(a), C.byref(cs), hs)
    del keep
    return PackedScanOutputs(out, fin, _ALGORITHM_NAMES.get(used.value, "unknown"), bool(native.value))


def scan_backward_packed(q, k, v, beta, decay, grad_out, *, frame_offsets, clip_offsets, reverse=False,
                         init_state=None, grad_final_state=None, precision="exact", saved=None, ctx=None):
    """Scan backward over packed clips: layouts as scan_forward_packed; grad_out (1, H, D, N),
    grad_final_state (clips, H, D, D) optional. Returns ScanGrads (dbeta (1, H, N), ddecay (1, H, F),
    dinit_state (clips, H, D, D) when init_state was given)."""
    op = "camdelta.scan_backward_packed"
    H, D, F, N, clips, cs, keep = _packed(op, q, k, v, beta, decay, frame_offsets, clip_offsets)
    K.array(op, "grad_out", grad_out, (1, H, D, N), F32, "(1, H, D, N)")
    K.optional(op, "init_state", init_state, (clips, H, D, D), F32, "(clips, H, D, D)")
    K.optional(op, "grad_final_state", grad_final_state, (clips, H, D, D), F32, "(clips, H, D, D)")
    prec = K.choice(op, "precision", precision, S.PRECISIONS)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, ScanSaved)
    dq, dk, dv = (_empty((1, H, D, N), F32) for _ in range(3))
    dbeta, ddecay = _empty((1, H, N), F32), _empty((1, H, F), F32)
    dinit = _empty((clips, H, D, D), F32) if init_state is not None else None
    with ctx._stage() as s:
        a = S.scan_backward_args(B=1, H=H, D=D, F=F, S=0, reverse=bool(reverse), q=s.i(q), k=s.i(k), v=s.i(v),
                                 beta=s.i(beta), decay=s.i(decay), init_state=s.i(init_state),
                                 grad_out=s.i(grad_out), grad_final_state=s.i(grad_final_state), dq=s.o(dq),
                                 dk=s.o(dk), dv=s.o(dv), dbeta=s.o(dbeta), ddecay=s.o(ddecay),
                                 dinit_state=s.o(dinit), precision=prec)
        s.run(lib.camdelta_scan_backward_packed, C.byref(a), C.byref(cs), hs)
    del keep
    return ScanGrads(dq, dk, dv, dbeta, ddecay, dinit)


# ------------------------------------------------------------------------------------------ state summaries
def scan_summary(k, v, beta, decay, *, reverse=False, init_state=None, T=True, E=True, ctx=None):
    """The forward summary of a segment (camdelta_summary.h): M_out = T·M_in + E per (b, h). k, v (B, H, D, N),
    beta (B, H, F, S), decay (B, H, F); with init_state (B, H, D, D), E receives T·init_state + E. T and E
    say which to compute (at least one). Returns Summary(T, E), (B, H, D, D) each or None."""
    op = "camdelta.scan_summary"
    B, H, D, F, S_, N = _scan_shapes(op, k, beta)
    K.array(op, "k", k, (B, H, D, N), F32, "(B, H, D, N)")
    if E:
        K.array(op, "v", v, (B, H, D, N), F32, "(B, H, D, N)")
    else:
        K.optional(op, "v", v, (B, H, D, N), F32, "(B, H, D, N)")
    K.array(op, "beta", beta, (B, H, F, S_), F32, "(B, H, F, S)")
    K.array(op, "decay", decay, (B, H, F), F32, "(B, H, F)")
    K.optional(op, "init_state", init_state, (B, H, D, D), F32, "(B, H, D, D)")
    ctx = _ctx(ctx)
    t = _empty((B, H, D, D), F32) if T else None
    e = _empty((B, H, D, D), F32) if E else None
    with ctx._stage() as s:
        a = S.scan_summary_args(B=B, H=H, D=D, F=F, S=S_, reverse=bool(reverse), k=s.i(k), v=s.i(v),
                                beta=s.i(beta), decay=s.i(decay), init_state=s.i(init_state), T=s.o(t), E=s.o(e))
        s.run(lib.camdelta_scan_summary, C.byref(a))
    return Summary(t, e)


def scan_grad_summary(q, k, beta, decay, grad_out, *, reverse=False, grad_final_state=None, ctx=None):
    """The gradient summary G of a segment: dM_in = Tᵀ·dM_out + G. With grad_final_state (B, H, D, D), G
    receives Tᵀ·grad_final_state + G (the segment's dinit_state). Returns G (B, H, D, D)."""
    op = "camdelta.scan_grad_summary"
    B, H, D, F, S_, N = _scan_inputs(op, q, k, None, beta, decay, need_v=False)
    K.array(op, "grad_out", grad_out, (B, H, D, N), F32, "(B, H, D, N)")
    K.optional(op, "grad_final_state", grad_final_state, (B, H, D, D), F32, "(B, H, D, D)")
    ctx = _ctx(ctx)
    g = _empty((B, H, D, D), F32)
    with ctx._stage() as s:
        a = S.scan_grad_summary_args(B=B, H=H, D=D, F=F, S=S_, reverse=bool(reverse), q=s.i(q), k=s.i(k),
                                     beta=s.i(beta), decay=s.i(decay), grad_out=s.i(grad_out),
                                     grad_final_state=s.i(grad_final_state), G=s.o(g))
        s.run(lib.camdelta_scan_grad_summary, C.byref(a))
    return g


def _states(op, name, a):
    B, H, D, D2 = K.ndarray(op, name, a, 4, "(B, H, D, D)")
    return K.array(op, name, a, (B, H, D, D), F32, "(B, H, D, D)").shape[:3]


def summary_apply(T, *, E=None, M_in=None, transpose=False, ctx=None):
    """M_out = T·M_in + E (transpose=True: Tᵀ·M_in + E, for gradients); E and M_in optional (zero).
    All (B, H, D, D). Returns M_out."""
    op = "camdelta.summary_apply"
    B, H, D = _states(op, "T", T)
    K.optional(op, "E", E, (B, H, D, D), F32, "(B, H, D, D)")
    K.optional(op, "M_in", M_in, (B, H, D, D), F32, "(B, H, D, D)")
    ctx = _ctx(ctx)
    m = _empty((B, H, D, D), F32)
    with ctx._stage() as s:
        a = S.summary_apply_args(B=B, H=H, D=D, transpose=bool(transpose), T=s.i(T), E=s.i(E), M_in=s.i(M_in),
                                 M_out=s.o(m))
        s.run(lib.camdelta_summary_apply, C.byref(a))
    return m


def summary_combine(T1, T2, *, E1=None, E2=None, T=True, E=True, ctx=None):
    """The summary of two chained segments (segment 1's M_out feeds segment 2's M_in): T = T2·T1,
    E = T2·E1 + E2 (E1, E2 optional: zero). Returns Summary(T, E)."""
    op = "camdelta.summary_combine"
    B, H, D = _states(op, "T1", T1)
    K.array(op, "T2", T2, (B, H, D, D), F32, "(B, H, D, D)")
    K.optional(op, "E1", E1, (B, H, D, D), F32, "(B, H, D, D)")
    K.optional(op, "E2", E2, (B, H, D, D), F32, "(B, H, D, D)")
    ctx = _ctx(ctx)
    t = _empty((B, H, D, D), F32) if T else None
    e = _empty((B, H, D, D), F32) if E else None
    with ctx._stage() as s:
        a = S.summary_combine_args(B=B, H=H, D=D, T1=s.i(T1), E1=s.i(E1), T2=s.i(T2), E2=s.i(E2), T=s.o(t),
                                   E=s.o(e))
        s.run(lib.camdelta_summary_combine, C.byref(a))
    return Summary(t, e)


# ------------------------------------------------------------------------------------------ camera branch
def chunking(op, chunk_size=None, chunk_strategy="uniform", chunk_index=None):
    """camdelta_chunking for the keyword arguments (and the index array it points into, to keep alive)."""
    ch = S.chunking(chunk_size=int(chunk_size or 0),
                    strategy=K.choice(op, "chunk_strategy", chunk_strategy, S.CHUNK_STRATEGIES))
    idx = None
    if chunk_index is not None:
        idx = np.ascontiguousarray(np.asarray(chunk_index), dtype=np.int64)  # a short host list of frame starts
        if idx.ndim != 1:
            raise K.ShapeError("%s: chunk_index must be one-dimensional (frame starts), got shape %s" %
                               (op, idx.shape))
        ch.chunk_index = idx.ctypes.data_as(S.c_i64p)
        ch.chunk_index_count = idx.shape[0]
    return ch, idx


def _bounds(fn, op, T, chunk_size, chunk_strategy, chunk_index):
    ch, keep = chunking(op, chunk_size, chunk_strategy, chunk_index)
    out = (C.c_size_t * (T + 1))()
    n = C.c_size_t(0)
    check(fn(T, C.byref(ch), out, T + 1, C.byref(n)))
    del keep
    return [int(out[i]) for i in range(n.value)]


def chunk_bounds(T, *, chunk_size=None, chunk_strategy="uniform", chunk_index=None):
    """The scan's chunk bounds of T frames (docs/math.md §8.4): [0, ..., T]."""
    return _bounds(lib.camdelta_chunk_bounds, "camdelta.chunk_bounds", int(T), chunk_size, chunk_strategy,
                   chunk_index)


def conv_bounds(T, *, chunk_size=None, chunk_strategy="uniform", chunk_index=None):
    """The short conv's segment bounds of T frames (docs/math.md §8.2): [0, ..., T]."""
    return _bounds(lib.camdelta_conv_bounds, "camdelta.conv_bounds", int(T), chunk_size, chunk_strategy,
                   chunk_index)


def camera_forward(camera_conditions, *, grid, head_dim, patch=(1, 1, 1), ctx=None):
    """Cameras -> per-token matrices and RoPE tables (docs/math.md §8.1): camera_conditions (B, T, 20) float32 (c2w
    row-major, then fx fy cx cy in image pixels) on the token grid `grid` = (T, Hs, Ws) with `patch` =
    (pt, ph, pw). Returns CameraOutputs(proj_q, proj_kv, proj_o (B, N, 4, 4), rope_cos, rope_sin (N, D/2))."""
    op = "camdelta.camera_forward"
    T, Hs, Ws = K.sizes(op, "grid", grid, 3)
    pt, ph, pw = K.sizes(op, "patch", patch, 3)
    D = int(head_dim)
    B = K.ndarray(op, "camera_conditions", camera_conditions, 3, "(B, T, 20)")[0]
    K.array(op, "camera_conditions", camera_conditions, (B, T, 20), F32, "(B, T, 20)")
    N = T * Hs * Ws
    ctx = _ctx(ctx)
    pq, pkv, po = (_empty((B, N, 4, 4), F32) for _ in range(3))
    rc, rs = _empty((N, D // 2), F32), _empty((N, D // 2), F32)
    with ctx._stage() as s:
        a = S.camera_args(B=B, T=T, Hs=Hs, Ws=Ws, pt=pt, ph=ph, pw=pw, D=D,
                          camera_conditions=s.i(camera_conditions), proj_q=s.o(pq), proj_kv=s.o(pkv),
                          proj_o=s.o(po), rope_cos=s.o(rc), rope_sin=s.o(rs))
        s.run(lib.camdelta_camera_forward, C.byref(a))
    return CameraOutputs(pq, pkv, po, rc, rs)


def _conv_weight(op, conv_weight, Cc):
    """conv_weight as (C, 4) or FLA's (C, 1, 4); returns its shape."""
    shape = K.info(op, "conv_weight", conv_weight, "(C, 4) or (C, 1, 4)")[0]
    K.array(op, "conv_weight", conv_weight, shape if shape in ((Cc, 4), (Cc, 1, 4)) else (Cc, 4), F32,
            "(C, 4) or (C, 1, 4)")
    return shape


def _conv_shapes(op, k_raw, conv_weight, frames):
    shape = K.info(op, "k_raw", k_raw, "(B, N, C) or (B, N, H, D)")[0]
    if len(shape) not in (3, 4):
        K.ndarray(op, "k_raw", k_raw, 3, "(B, N, C) or (B, N, H, D)")
    B, N = shape[0], shape[1]
    Cc = int(np.prod(shape[2:]))
    T = int(frames)
    if T <= 0 or N % T:
        raise K.ShapeError("%s: k_raw has N = %d tokens, not a multiple of frames = %d" % (op, N, T))
    K.array(op, "k_raw", k_raw, shape, F32, "(B, N, C) or (B, N, H, D)")
    return B, T, N // T, Cc, shape, _conv_weight(op, conv_weight, Cc)


def short_conv_forward(k_raw, conv_weight, *, frames, chunk_size=None, chunk_strategy="uniform",
                       chunk_index=None, ctx=None):
    """The short convolution on raw K along frames (docs/math.md §8.2): k_raw (B, N, C) or (B, N, H, D) with N =
    frames·S, conv_weight (C, 4) (or FLA's (C, 1, 4)). Returns k_conv, shaped as k_raw."""
    op = "camdelta.short_conv_forward"
    B, T, S_, Cc, shape, _ = _conv_shapes(op, k_raw, conv_weight, frames)
    ch, keep = chunking(op, chunk_size, chunk_strategy, chunk_index)
    ctx = _ctx(ctx)
    y = _empty(shape, F32)
    with ctx._stage() as s:
        a = S.short_conv_args(B=B, T=T, S=S_, C=Cc, chunking=ch, k_raw=s.i(k_raw), conv_weight=s.i(conv_weight),
                              k_conv=s.o(y))
        s.run(lib.camdelta_short_conv_forward, C.byref(a))
    del keep
    return y


def short_conv_backward(k_raw, conv_weight, grad_k_conv, *, frames, chunk_size=None, chunk_strategy="uniform",
                        chunk_index=None, dk_raw=True, dconv_weight=True, ctx=None):
    """Backward of short_conv_forward: grad_k_conv shaped as k_raw -> ConvGrads(dk_raw shaped as k_raw,
    dconv_weight shaped as conv_weight); dk_raw=False or dconv_weight=False skips one (None)."""
    op = "camdelta.short_conv_backward"
    B, T, S_, Cc, shape, wshape = _conv_shapes(op, k_raw, conv_weight, frames)
    K.array(op, "grad_k_conv", grad_k_conv, shape, F32, "shaped as k_raw")
    ch, keep = chunking(op, chunk_size, chunk_strategy, chunk_index)
    ctx = _ctx(ctx)
    dx = _empty(shape, F32) if dk_raw else None
    dw = _empty(wshape, F32) if dconv_weight else None
    with ctx._stage() as s:
        a = S.short_conv_args(B=B, T=T, S=S_, C=Cc, chunking=ch, k_raw=s.i(k_raw), conv_weight=s.i(conv_weight),
                              grad_k_conv=s.i(grad_k_conv), dk_raw=s.o(dx), dconv_weight=s.o(dw))
        s.run(lib.camdelta_short_conv_backward, C.byref(a))
    del keep
    return ConvGrads(dx, dw)


def _ot_tables(op, N, D, proj_o, rope_cos, rope_sin, B):
    K.array(op, "proj_o", proj_o, (B, N, 4, 4), F32, "(B, N, 4, 4)")
    K.array(op, "rope_cos", rope_cos, (N, D // 2), F32, "(N, D/2)")
    K.array(op, "rope_sin", rope_sin, (N, D // 2), F32, "(N, D/2)")


def output_transform_forward(out, proj_o, rope_cos, rope_sin, *, out2=None, ctx=None):
    """The output transform (docs/math.md §8.5): out (+ out2) (B, H, D, N) -> y (B, N, H, D): proj_o (B, N, 4, 4) on
    each 4-group of the first half, the inverse RoPE (rope_cos, rope_sin (N, D/2)) on the second."""
    op = "camdelta.output_transform_forward"
    B, H, D, N = K.ndarray(op, "out", out, 4, "(B, H, D, N)")
    K.array(op, "out", out, (B, H, D, N), F32, "(B, H, D, N)")
    K.optional(op, "out2", out2, (B, H, D, N), F32, "(B, H, D, N)")
    _ot_tables(op, N, D, proj_o, rope_cos, rope_sin, B)
    ctx = _ctx(ctx)
    y = _empty((B, N, H, D), F32)
    with ctx._stage() as s:
        a = S.output_transform_args(B=B, N=N, H=H, D=D, out=s.i(out), out2=s.i(out2), proj_o=s.i(proj_o),
                                    rope_cos=s.i(rope_cos), rope_sin=s.i(rope_sin), y=s.o(y))
        s.run(lib.camdelta_output_transform_forward, C.byref(a))
    return y


def output_transform_backward(grad_y, proj_o, rope_cos, rope_sin, *, ctx=None):
    """Backward of the output transform: grad_y (B, N, H, D) -> grad_out (B, H, D, N)."""
    op = "camdelta.output_transform_backward"
    B, N, H, D = K.ndarray(op, "grad_y", grad_y, 4, "(B, N, H, D)")
    K.array(op, "grad_y", grad_y, (B, N, H, D), F32, "(B, N, H, D)")
    _ot_tables(op, N, D, proj_o, rope_cos, rope_sin, B)
    ctx = _ctx(ctx)
    go = _empty((B, H, D, N), F32)
    with ctx._stage() as s:
        a = S.output_transform_args(B=B, N=N, H=H, D=D, proj_o=s.i(proj_o), rope_cos=s.i(rope_cos),
                                    rope_sin=s.i(rope_sin), grad_y=s.i(grad_y), grad_out=s.o(go))
        s.run(lib.camdelta_output_transform_backward, C.byref(a))
    return go


def default_k_scale(D, S):
    """The branch's default k_scale, D^-1/2 · S^-1/2 (S tokens per frame)."""
    return float((D * S) ** -0.5)


def _branch(op, q_raw, k_raw, v_raw, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta, decay,
            grid, patch, chunk_size, chunk_strategy, chunk_index, k_scale, norm_eps, algorithm, precision, dtype):
    T, Hs, Ws = K.sizes(op, "grid", grid, 3)
    pt, ph, pw = K.sizes(op, "patch", patch, 3)
    B, N, H, D = K.ndarray(op, "q_raw", q_raw, 4, "(B, N, H, D)")
    if N != T * Hs * Ws:
        raise K.ShapeError("%s: q_raw has N = %d tokens, but the grid (T, Hs, Ws) = %s has %d" %
                           (op, N, (T, Hs, Ws), T * Hs * Ws))
    S_, Cc = Hs * Ws, H * D
    dt = K.activation_dtype(op, "q_raw", q_raw, dtype)
    st = K.STORAGE[dt]
    for name, a in (("q_raw", q_raw), ("k_raw", k_raw), ("v_raw", v_raw)):
        K.array(op, name, a, (B, N, H, D), st, "(B, N, H, D)")
    wshape = _conv_weight(op, conv_weight, Cc)
    K.array(op, "q_norm_weight", q_norm_weight, (Cc,), F32, "(C,)")
    K.array(op, "k_norm_weight", k_norm_weight, (Cc,), F32, "(C,)")
    K.array(op, "camera_conditions", camera_conditions, (B, T, 20), F32, "(B, T, 20)")
    K.array(op, "beta", beta, (B, H, T, S_), F32, "(B, H, T, S)")
    K.array(op, "decay", decay, (B, H, T), F32, "(B, H, T)")
    ch, keep = chunking(op, chunk_size, chunk_strategy, chunk_index)
    args = S.branch_args(B=B, T=T, Hs=Hs, Ws=Ws, H=H, D=D, pt=pt, ph=ph, pw=pw, chunking=ch,
                         k_scale=default_k_scale(D, S_) if k_scale is None else k_scale, norm_eps=norm_eps,
                         algorithm=K.choice(op, "algorithm", algorithm, S.ALGORITHMS),
                         precision=K.choice(op, "precision", precision, S.PRECISIONS), dtype=S.DTYPES[dt])
    return args, keep, (B, N, H, D, T, S_, Cc, wshape, st)


def branch_forward(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                   decay, grid, patch=(1, 1, 1), chunk_size=None, chunk_strategy="uniform", chunk_index=None,
                   k_scale=None, norm_eps=1e-6, algorithm="auto", precision="exact", dtype=None, saved=None,
                   ctx=None):
    """The whole camera branch forward (docs/math.md §8.6): q_raw, k_raw, v_raw (B, N, H, D) -> y (B, N, H, D).
    The activations q_raw, k_raw, v_raw and y are float32, float16, or bfloat16 (bits in uint16 with
    dtype='bf16'; docs/math.md §8.7), all three inputs alike; everything else is float32.
    conv_weight (C, 4), norm weights (C,), camera_conditions (B, T, 20), beta (B, H, T, S), decay (B, H, T);
    grid (T, Hs, Ws), patch (pt, ph, pw); chunking by chunk_size + chunk_strategy ('uniform', 'first_frame',
    'first_chunk_plus_one') or chunk_index (frame starts), none = one chunk; k_scale default D^-1/2·S^-1/2.
    `saved` (a BranchSaved) keeps what branch_backward reuses."""
    op = "camdelta.branch_forward"
    args, keep, (B, N, H, D, T, S_, Cc, wshape, st) = _branch(op, q_raw, k_raw, v_raw, conv_weight, q_norm_weight,
                                                      k_norm_weight, camera_conditions, beta, decay, grid, patch,
                                                      chunk_size, chunk_strategy, chunk_index, k_scale, norm_eps,
                                                      algorithm, precision, dtype)
    ctx = _ctx(ctx)
    hs = _saved(op, saved, BranchSaved)
    y = _empty((B, N, H, D), st)
    with ctx._stage() as s:
        args.q_raw, args.k_raw, args.v_raw = s.i(q_raw), s.i(k_raw), s.i(v_raw)
        args.conv_weight, args.q_norm_weight, args.k_norm_weight = (s.i(conv_weight), s.i(q_norm_weight),
                                                                    s.i(k_norm_weight))
        args.camera_conditions, args.beta, args.decay = s.i(camera_conditions), s.i(beta), s.i(decay)
        args.y = s.o(y)
        s.run(lib.camdelta_branch_forward, C.byref(args), hs)
    del keep
    return y


def branch_backward(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                    decay, grad_y, grid, patch=(1, 1, 1), chunk_size=None, chunk_strategy="uniform",
                    chunk_index=None, k_scale=None, norm_eps=1e-6, algorithm="auto", precision="exact",
                    dtype=None, saved=None, ctx=None):
    """The whole camera branch backward: the forward's arguments and grad_y (B, N, H, D) -> BranchGrads
    (dq_raw, dk_raw, dv_raw, dconv_weight (shaped as conv_weight), dq_norm_weight, dk_norm_weight, dbeta,
    ddecay). Cameras get no gradient. `saved`: the BranchSaved of the matching forward, or None. grad_y, dq_raw,
    dk_raw, dv_raw are in the activations' dtype; the other gradients float32."""
    op = "camdelta.branch_backward"
    args, keep, (B, N, H, D, T, S_, Cc, wshape, st) = _branch(op, q_raw, k_raw, v_raw, conv_weight, q_norm_weight,
                                                      k_norm_weight, camera_conditions, beta, decay, grid, patch,
                                                      chunk_size, chunk_strategy, chunk_index, k_scale, norm_eps,
                                                      algorithm, precision, dtype)
    K.array(op, "grad_y", grad_y, (B, N, H, D), st, "(B, N, H, D)")
    ctx = _ctx(ctx)
    hs = _saved(op, saved, BranchSaved)
    dq, dk, dv = (_empty((B, N, H, D), st) for _ in range(3))
    dw = _empty(wshape, F32)
    dqw, dkw = _empty((Cc,), F32), _empty((Cc,), F32)
    dbeta, ddecay = _empty((B, H, T, S_), F32), _empty((B, H, T), F32)
    with ctx._stage() as s:
        args.q_raw, args.k_raw, args.v_raw = s.i(q_raw), s.i(k_raw), s.i(v_raw)
        args.conv_weight, args.q_norm_weight, args.k_norm_weight = (s.i(conv_weight), s.i(q_norm_weight),
                                                                    s.i(k_norm_weight))
        args.camera_conditions, args.beta, args.decay = s.i(camera_conditions), s.i(beta), s.i(decay)
        g = S.branch_grads(grad_y=s.i(grad_y), dq_raw=s.o(dq), dk_raw=s.o(dk), dv_raw=s.o(dv),
                           dconv_weight=s.o(dw), dq_norm_weight=s.o(dqw), dk_norm_weight=s.o(dkw),
                           dbeta=s.o(dbeta), ddecay=s.o(ddecay))
        s.run(lib.camdelta_branch_backward, C.byref(args), C.byref(g), hs)
    del keep
    return BranchGrads(dq, dk, dv, dw, dqw, dkw, dbeta, ddecay)


# ------------------------------------------------------------------------------------------ host helpers
def rope_tables(freqs):
    """Complex RoPE frequencies (N, Dh/2) (complex, or float32 (N, Dh/2, 2) as (re, im) pairs) -> the
    interleaved-pair tables rope_cos, rope_sin (N, Dh) float32 (docs/math.md §2; the seed's
    _prepare_ucpe_rope_tables)."""
    op = "camdelta.rope_tables"
    if isinstance(freqs, np.ndarray) and np.iscomplexobj(freqs):
        f = np.ascontiguousarray(np.stack([freqs.real, freqs.imag], axis=-1), dtype=np.float32)
    else:
        K.ndarray(op, "freqs", freqs, 3, "(N, Dh/2, 2)")
        f = K.array(op, "freqs", freqs, freqs.shape[:2] + (2,), F32, "(N, Dh/2, 2)")
    if f.ndim != 3:
        raise K.ShapeError("%s: freqs must be (N, Dh/2) complex or (N, Dh/2, 2), got %s" % (op, freqs.shape))
    N, Dh = f.shape[0], 2 * f.shape[1]
    cos, sin = np.empty((N, Dh), np.float32), np.empty((N, Dh), np.float32)
    fp = C.POINTER(C.c_float)
    check(lib.camdelta_rope_tables(N, Dh, f.ctypes.data_as(fp), cos.ctypes.data_as(fp), sin.ctypes.data_as(fp)))
    return cos, sin


def invert_se3(m):
    """Closed-form inverse of a batch of 4x4 SE(3) matrices (..., 4, 4) float32."""
    op = "camdelta.invert_se3"
    if not isinstance(m, np.ndarray) or m.shape[-2:] != (4, 4):
        raise K.ShapeError("%s: expected (..., 4, 4), got %s" % (op, getattr(m, "shape", type(m).__name__)))
    K.array(op, "m", m, m.shape, F32, "(..., 4, 4)")
    out = np.empty_like(m)
    fp = C.POINTER(C.c_float)
    check(lib.camdelta_invert_se3(m.size // 16, m.ctypes.data_as(fp), out.ctypes.data_as(fp)))
    return out


def to_bf16(x):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (NaN stays NaN), as the library's
    camdelta_f32_to_bf16."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((b >> 16) | 0x40).astype(np.uint16), rounded)


def from_bf16(h):
    """bfloat16 bits (uint16) -> float32 (exact)."""
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
