"""camdelta.torch: drop-ins for the public functions of the seed module (NVlabs Sana,
diffusion/model/ops/fused_cam_ucpe.py) on any OpenCL device, and the whole camera branch with autograd.

A model switches with one import line:

    from camdelta.torch import cam_prep_func_with_grad, cam_scan_func_with_grad

Same names, keyword arguments, shapes, dtypes and return conventions as the seed:
cam_prep_func, cam_prep_func_with_grad, cam_scan_func (reverse, init_state as (B*H, BLOCK_D, BLOCK_D) with
BLOCK_D = next_pow2(D) and only the top-left D x D read, save_final_state), cam_scan_func_with_grad, and the
autograd Functions CamPrepFunction and CamScanFunction. Backward runs camdelta's exact backward (all
gradients, proj_q, proj_kv, rope_cos and rope_sin included), never a PyTorch recomputation. Beyond the seed:
the reverse direction takes init_state / save_final_state too (docs/math.md §3), cam_scan_func_with_grad takes
init_state and save_final_state (with their gradients), and cam_branch_func runs the whole branch (short conv,
cameras, prep, beta discount, scan pair, output transform) with autograd; cam_short_conv_func,
cam_output_transform_func and cam_camera_func are its pieces.

Tensors live on the CPU (the OpenCL device, a CPU through PoCL or a GPU, gets them through host memory; on
CPU devices without a copy) and must be contiguous, as the seed asserts; a CUDA tensor, a non-contiguous one
or one of the wrong dtype raises camdelta.errors (ValueError subclasses) naming the argument. Upstream
gradients in backward are made contiguous first (a copy only when autograd hands over a strided one). Calls run
on camdelta.default_context() (camdelta.set_default_context chooses another).
"""
import numpy as np
import torch

from . import _check as K
from . import ops
from .context import BranchSaved, PrepSaved, ScanSaved
from .errors import InvalidArgumentError, ShapeError, UnsupportedError

# the operations take CPU tensors as they take NumPy arrays: by their data pointer, without a copy
K.tensor_type = torch.Tensor
K.tensor_dtypes = {torch.float32: K.F32, torch.float16: K.F16, torch.bfloat16: K.U16, torch.float64: K.F64,
                   torch.int64: K.I64}
K.tensor_bf16 = torch.bfloat16

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _t(a, dtype=torch.float32):
    """A NumPy result as a tensor over the same memory."""
    if a is None:
        return None
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _grad(g, dtype):
    """An upstream gradient as a contiguous tensor of `dtype` (None stays None)."""
    if g is None:
        return None
    return g.to(dtype).contiguous()


def _next_pow2(n):
    return 1 << (int(n) - 1).bit_length()


# ----------------------------------------------------------------------------------------------------- prep
_PREP_TABLES = ("q_norm_weight", "k_norm_weight", "proj_q", "proj_kv", "rope_cos", "rope_sin")


def _prep_args(op, q_raw, k_raw, v_raw, tables):
    """The activations' dtype, and the tables as keyword arguments (norm weights of any shape of H*D
    elements, as the seed reads them, viewed flat)."""
    if not isinstance(q_raw, torch.Tensor):
        raise InvalidArgumentError("%s: argument 'q_raw' is a %s, expected a torch.Tensor" %
                                   (op, type(q_raw).__name__))
    dt = q_raw.dtype
    if dt not in _DTYPES:
        raise UnsupportedError("%s: argument 'q_raw' has dtype %s, expected torch.float32, float16 or bfloat16" %
                               (op, dt))
    kw = dict(zip(_PREP_TABLES, tables))
    for name in ("q_norm_weight", "k_norm_weight"):
        t = kw[name]
        if isinstance(t, torch.Tensor) and t.dim() != 1 and t.is_contiguous():
            kw[name] = t.view(-1)
    return dt, kw


def cam_prep_func(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                  k_scale, norm_eps):
    """Fused RMSNorm + ReLU + (K-scale on K) + UCPE 4x4 + RoPE for the camera branch (no autograd).

    q_raw, k_raw, v_raw (B, N, H, D) contiguous, float32, float16 or bfloat16 (K with the short convolution
    applied); q_norm_weight, k_norm_weight (H*D,) float32; proj_q, proj_kv (B, N, 4, 4) float32; rope_cos,
    rope_sin (N, D//2) float32. Returns q, k, v (B, H, D, N) in q_raw's dtype and inflation_sq (B, H, N)
    float32."""
    op = "camdelta.torch.cam_prep_func"
    dt, kw = _prep_args(op, q_raw, k_raw, v_raw, (q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                                                  rope_sin))
    r = ops.prep_forward(q_raw, k_raw, v_raw, k_scale=k_scale, norm_eps=norm_eps, dtype=_DTYPES[dt], **kw)
    return _t(r.q, dt), _t(r.k, dt), _t(r.v, dt), _t(r.inflation_sq)


class CamPrepFunction(torch.autograd.Function):
    """Autograd Function of the prep: forward as cam_prep_func, backward camdelta's exact prep backward (every
    input's gradient, proj_q, proj_kv, rope_cos and rope_sin included when they require one)."""

    @staticmethod
    def forward(ctx, q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin,
                k_scale, norm_eps):
        op = "camdelta.torch.CamPrepFunction"
        ctx.set_materialize_grads(False)
        dt, kw = _prep_args(op, q_raw, k_raw, v_raw, (q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                                                      rope_sin))
        saved = PrepSaved()
        r = ops.prep_forward(q_raw, k_raw, v_raw, k_scale=k_scale, norm_eps=norm_eps, dtype=_DTYPES[dt],
                             saved=saved, **kw)
        q, k, v, infl = _t(r.q, dt), _t(r.k, dt), _t(r.v, dt), _t(r.inflation_sq)
        ctx.cd = (saved, float(k_scale), float(norm_eps), dt, q_norm_weight.shape, k_norm_weight.shape)
        ctx.save_for_backward(q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                              rope_sin, q, k, infl)
        return q, k, v, infl

    @staticmethod
    def backward(ctx, grad_q, grad_k, grad_v, grad_inflation_sq):
        op = "camdelta.torch.CamPrepFunction.backward"
        if grad_q is None and grad_k is None and grad_v is None and grad_inflation_sq is None:
            return (None,) * 11
        saved, k_scale, norm_eps, dt, qw_shape, kw_shape = ctx.cd
        (q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin, q, k,
         infl) = ctx.saved_tensors
        needs = ctx.needs_input_grad
        _, kw = _prep_args(op, q_raw, k_raw, v_raw, (q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                                                     rope_sin))
        g = ops.prep_backward(q_raw, k_raw, v_raw, k_scale=k_scale, norm_eps=norm_eps, dtype=_DTYPES[dt],
                              grad_q=_grad(grad_q, dt), grad_k=_grad(grad_k, dt), grad_v=_grad(grad_v, dt),
                              grad_inflation_sq=_grad(grad_inflation_sq, torch.float32),
                              all_grads=any(needs[5:9]), forward_outputs=(q, k, infl), saved=saved, **kw)
        out = [_t(g.dq_raw, dt), _t(g.dk_raw, dt), _t(g.dv_raw, dt), _t(g.dq_norm_weight).view(qw_shape),
               _t(g.dk_norm_weight).view(kw_shape), _t(g.dproj_q), _t(g.dproj_kv), _t(g.drope_cos),
               _t(g.drope_sin)]
        return tuple(o if n else None for o, n in zip(out, needs[:9])) + (None, None)


def cam_prep_func_with_grad(q_raw, k_raw, v_raw, *, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                            rope_sin, k_scale, norm_eps):
    """cam_prep_func with autograd (CamPrepFunction): gradients from camdelta's exact prep backward."""
    return CamPrepFunction.apply(q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos,
                                 rope_sin, k_scale, norm_eps)


# ----------------------------------------------------------------------------------------------------- scan
def _init_state(op, init_state, q):
    """The seed's (B*H, BLOCK_D, BLOCK_D) init_state as camdelta's (B, H, D, D): its top-left D x D (a view
    when BLOCK_D == D, else a copy of that corner)."""
    if init_state is None:
        return None
    B, H, D = q.shape[0], q.shape[1], q.shape[2]
    BD = _next_pow2(D)
    want = (B * H, BD, BD)
    if not isinstance(init_state, torch.Tensor) or tuple(init_state.shape) != want:
        raise ShapeError("%s: argument 'init_state' has shape %s, expected (B*H, BLOCK_D, BLOCK_D) = %s "
                         "(BLOCK_D = next_pow2(D) = %d)" % (op, tuple(getattr(init_state, "shape", ())), want, BD))
    K.array(op, "init_state", init_state, want, K.F32, "(B*H, BLOCK_D, BLOCK_D)")
    return init_state.detach()[:, :D, :D].contiguous().view(B, H, D, D)


def _final_state_t(fin, q):
    """camdelta's (B, H, D, D) final state in the seed's (B*H, BLOCK_D, BLOCK_D), zero outside the corner."""
    B, H, D = q.shape[0], q.shape[1], q.shape[2]
    BD = _next_pow2(D)
    t = _t(fin).view(B * H, D, D)
    if BD == D:
        return t
    full = torch.zeros(B * H, BD, BD, dtype=torch.float32)
    full[:, :D, :D] = t
    return full


def cam_scan_func(q, k, v, beta, decay, *, reverse=False, init_state=None, save_final_state=False):
    """The numerator-only single-path delta-rule scan of the camera branch (no autograd).

    q, k, v (B, H, D, N), beta (B, H, F, S), decay (B, H, F), float32 contiguous. init_state: optional
    (B*H, BLOCK_D, BLOCK_D) float32 (BLOCK_D = next_pow2(D); only the top-left D x D is read): the state after
    the previous segment's last update. Returns out (B, H, D, N) float32, or (out, final_state) with
    save_final_state=True, final_state (B*H, BLOCK_D, BLOCK_D) float32 (zero outside the top-left D x D).
    reverse=True runs the anti-causal scan; unlike the seed it takes init_state / save_final_state as well
    (docs/math.md §3: the contribution of the frames after the segment, and the state after frame 0)."""
    op = "camdelta.torch.cam_scan_func"
    st = _init_state(op, init_state, q)
    r = ops.scan_forward(q, k, v, beta, decay, reverse=reverse, init_state=st, final_state=save_final_state)
    out = _t(r.out)
    if save_final_state:
        return out, _final_state_t(r.final_state, q)
    return out


class CamScanFunction(torch.autograd.Function):
    """Autograd Function of the scan, as the seed's: apply(q, k, v, beta, decay, reverse). Forward keeps the
    per-frame states (camdelta_scan_saved); backward is camdelta's exact scan backward."""

    @staticmethod
    def forward(ctx, q, k, v, beta, decay, reverse):
        ctx.set_materialize_grads(False)
        saved = ScanSaved()
        r = ops.scan_forward(q, k, v, beta, decay, reverse=bool(reverse), saved=saved)
        ctx.cd = (saved, bool(reverse))
        ctx.save_for_backward(q, k, v, beta, decay)
        return _t(r.out)

    @staticmethod
    def backward(ctx, grad_out):
        if grad_out is None:
            return (None,) * 6
        saved, reverse = ctx.cd
        g = ops.scan_backward(*ctx.saved_tensors, _grad(grad_out, torch.float32), reverse=reverse, saved=saved)
        out = (_t(g.dq), _t(g.dk), _t(g.dv), _t(g.dbeta), _t(g.ddecay))
        return tuple(o if n else None for o, n in zip(out, ctx.needs_input_grad[:5])) + (None,)


class _CamScanStateFunction(torch.autograd.Function):
    """The scan with an incoming state and/or its final state, both with gradients (camdelta's
    d_init_state and grad_final_state); states in the seed's (B*H, BLOCK_D, BLOCK_D) layout."""

    @staticmethod
    def forward(ctx, q, k, v, beta, decay, init_state, reverse):
        op = "camdelta.torch.cam_scan_func_with_grad"
        ctx.set_materialize_grads(False)
        st = _init_state(op, init_state, q)
        saved = ScanSaved()
        r = ops.scan_forward(q, k, v, beta, decay, reverse=bool(reverse), init_state=st, final_state=True,
                             saved=saved)
        ctx.cd = (saved, bool(reverse))
        ctx.save_for_backward(q, k, v, beta, decay, init_state)
        return _t(r.out), _final_state_t(r.final_state, q)

    @staticmethod
    def backward(ctx, grad_out, grad_final):
        op = "camdelta.torch.cam_scan_func_with_grad.backward"
        if grad_out is None and grad_final is None:
            return (None,) * 7
        saved, reverse = ctx.cd
        q, k, v, beta, decay, init_state = ctx.saved_tensors
        st = _init_state(op, init_state, q)
        B, H, D, N = q.shape
        go = torch.zeros_like(q) if grad_out is None else _grad(grad_out, torch.float32)
        gf = None
        if grad_final is not None:
            gf = _grad(grad_final[:, :D, :D], torch.float32).view(B, H, D, D)
        g = ops.scan_backward(q, k, v, beta, decay, go, reverse=reverse, init_state=st, grad_final_state=gf,
                              saved=saved)
        dinit = None
        if g.dinit_state is not None and ctx.needs_input_grad[5]:
            BD = _next_pow2(D)
            dinit = torch.zeros(B * H, BD, BD, dtype=torch.float32)
            dinit[:, :D, :D] = _t(g.dinit_state).view(B * H, D, D)
        out = (_t(g.dq), _t(g.dk), _t(g.dv), _t(g.dbeta), _t(g.ddecay))
        return tuple(o if n else None for o, n in zip(out, ctx.needs_input_grad[:5])) + (dinit, None)


def cam_scan_func_with_grad(q, k, v, beta, decay, *, reverse=False, init_state=None, save_final_state=False):
    """cam_scan_func with autograd: gradients of q, k, v, beta, decay from camdelta's exact scan backward.
    As the seed: returns out. Beyond the seed: with init_state (B*H, BLOCK_D, BLOCK_D) it receives a gradient
    too, and save_final_state=True returns (out, final_state), final_state differentiable."""
    if init_state is None and not save_final_state:
        return CamScanFunction.apply(q, k, v, beta, decay, reverse)
    out, fin = _CamScanStateFunction.apply(q, k, v, beta, decay, init_state, reverse)
    return (out, fin) if save_final_state else out


# ---------------------------------------------------------------------------------------- camera branch
def cam_camera_func(camera_conditions, *, grid, head_dim, patch=(1, 1, 1)):
    """Cameras -> (proj_q, proj_kv, proj_o (B, N, 4, 4), rope_cos, rope_sin (N, D/2)) float32 (docs/math.md §8.1) on
    the token grid (T, Hs, Ws) with patch (pt, ph, pw); no gradient (cameras are not trained)."""
    r = ops.camera_forward(camera_conditions, grid=grid, head_dim=head_dim, patch=patch)
    return tuple(_t(a) for a in r)


class _ShortConvFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, k_raw, conv_weight, frames, chunk_size, chunk_strategy, chunk_index):
        ctx.set_materialize_grads(False)
        ch = dict(frames=frames, chunk_size=chunk_size, chunk_strategy=chunk_strategy, chunk_index=chunk_index)
        y = ops.short_conv_forward(k_raw, conv_weight, **ch)
        ctx.cd = ch
        ctx.save_for_backward(k_raw, conv_weight)
        return _t(y)

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return (None,) * 6
        k_raw, w = ctx.saved_tensors
        n = ctx.needs_input_grad
        g = ops.short_conv_backward(k_raw, w, _grad(grad, torch.float32), dk_raw=n[0], dconv_weight=n[1], **ctx.cd)
        return _t(g.dk_raw), _t(g.dconv_weight), None, None, None, None


def cam_short_conv_func(k_raw, conv_weight, *, frames, chunk_size=None, chunk_strategy="uniform",
                        chunk_index=None):
    """The short convolution on raw K along frames (docs/math.md §8.2) with autograd: k_raw (B, N, C) or (B, N, H, D),
    conv_weight (C, 4) or (C, 1, 4); returns k_conv shaped as k_raw."""
    return _ShortConvFunction.apply(k_raw, conv_weight, frames, chunk_size, chunk_strategy, chunk_index)


class _OutputTransformFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out, out2, proj_o, rope_cos, rope_sin):
        ctx.set_materialize_grads(False)
        y = ops.output_transform_forward(out, proj_o, rope_cos, rope_sin, out2=out2)
        ctx.save_for_backward(proj_o, rope_cos, rope_sin)
        return _t(y)

    @staticmethod
    def backward(ctx, grad_y):
        if grad_y is None:
            return (None,) * 5
        go = _t(ops.output_transform_backward(_grad(grad_y, torch.float32), *ctx.saved_tensors))
        n = ctx.needs_input_grad
        return go if n[0] else None, go if n[1] else None, None, None, None


def cam_output_transform_func(out, proj_o, rope_cos, rope_sin, *, out2=None):
    """The output transform (docs/math.md §8.5) with autograd for out (and out2, summed with it): (B, H, D, N) ->
    y (B, N, H, D). proj_o, rope_cos, rope_sin get no gradient."""
    return _OutputTransformFunction.apply(out, out2, proj_o, rope_cos, rope_sin)


_BRANCH_INPUTS = ("q_raw", "k_raw", "v_raw", "conv_weight", "q_norm_weight", "k_norm_weight", "camera_conditions",
                  "beta", "decay")


class CamBranchFunction(torch.autograd.Function):
    """Autograd Function of the whole camera branch (camdelta_branch_forward / _backward)."""

    @staticmethod
    def forward(ctx, options, *inputs):
        ctx.set_materialize_grads(False)
        arrs = dict(zip(_BRANCH_INPUTS, inputs))
        q_raw, k_raw, v_raw = (arrs.pop(n) for n in _BRANCH_INPUTS[:3])
        if not isinstance(q_raw, torch.Tensor) or q_raw.dtype not in _DTYPES:
            raise UnsupportedError("cam_branch_func: argument 'q_raw' is %s, expected a torch.float32, float16 or "
                                   "bfloat16 tensor" % (getattr(q_raw, "dtype", type(q_raw).__name__),))
        saved = BranchSaved()
        y = ops.branch_forward(q_raw, k_raw, v_raw, saved=saved, **arrs, **options)
        ctx.cd = (saved, options, q_raw.dtype)
        ctx.save_for_backward(*inputs)
        return _t(y, q_raw.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        if grad_y is None:
            return (None,) * 10
        saved, options, dt = ctx.cd
        arrs = dict(zip(_BRANCH_INPUTS, ctx.saved_tensors))
        q_raw, k_raw, v_raw = (arrs.pop(n) for n in _BRANCH_INPUTS[:3])
        g = ops.branch_backward(q_raw, k_raw, v_raw, grad_y=_grad(grad_y, dt), saved=saved, **arrs, **options)
        grads = (g.dq_raw, g.dk_raw, g.dv_raw, g.dconv_weight, g.dq_norm_weight, g.dk_norm_weight, None, g.dbeta,
                 g.ddecay)
        dts = (dt,) * 3 + (torch.float32,) * 6
        n = ctx.needs_input_grad[1:]
        return (None,) + tuple(_t(a, d) if a is not None and need else None for a, d, need in zip(grads, dts, n))


def cam_branch_func(q_raw, k_raw, v_raw, *, conv_weight, q_norm_weight, k_norm_weight, camera_conditions, beta,
                    decay, grid, patch=(1, 1, 1), chunk_size=None, chunk_strategy="uniform", chunk_index=None,
                    k_scale=None, norm_eps=1e-6, algorithm="auto", precision="exact"):
    """The whole camera branch of one attention layer (docs/math.md §8.6) with autograd:
    k_raw -> short conv -> prep (matrices and RoPE from the cameras) -> beta discount -> causal + chunk-masked
    reverse scan -> output transform -> y.

    q_raw, k_raw, v_raw (B, N, H, D) (the outputs of the layer's Q, K, V projections), conv_weight (C, 4) or
    (C, 1, 4), q_norm_weight, k_norm_weight (C,), camera_conditions (B, T, 20), beta (B, H, T, S), decay
    (B, H, T); grid (T, Hs, Ws) with N = T·Hs·Ws, S = Hs·Ws; patch (pt, ph, pw); chunk_size + chunk_strategy
    ('uniform', 'first_frame', 'first_chunk_plus_one') or chunk_index (frame starts), none = one chunk; k_scale
    default D^-1/2·S^-1/2. Returns y (B, N, H, D); gradients flow to every input but camera_conditions.
    q_raw, k_raw, v_raw are torch.float32, float16 or bfloat16 (one dtype; docs/math.md §8.7): y and the
    activations' gradients come in that dtype; the other inputs and their gradients are float32."""
    options = dict(grid=tuple(grid), patch=tuple(patch), chunk_size=chunk_size, chunk_strategy=chunk_strategy,
                   chunk_index=chunk_index, k_scale=k_scale, norm_eps=norm_eps, algorithm=algorithm,
                   precision=precision)
    return CamBranchFunction.apply(options, q_raw, k_raw, v_raw, conv_weight, q_norm_weight, k_norm_weight,
                                   camera_conditions, beta, decay)


__all__ = ["CamBranchFunction", "CamPrepFunction", "CamScanFunction", "cam_branch_func", "cam_camera_func",
           "cam_output_transform_func", "cam_prep_func", "cam_prep_func_with_grad", "cam_scan_func",
           "cam_scan_func_with_grad", "cam_short_conv_func"]
