"""Streams (include/camdelta_stream.h, docs/streaming.md): the camera branch over a video one block of frames at a
time, with a constant-memory state (the causal scan's state, the conv's look-back of three frames, the frame
index)."""
import ctypes as C

from . import _check as K
from . import _structs as S
from . import ops
from ._lib import lib
from .context import Closable, check, default_context
from .errors import InvalidArgumentError
from .ops import _conv_weight, default_k_scale

F32 = K.F32


class Stream(Closable):
    """A stream of the camera branch for B sequences in lockstep (H heads of head dim D, a Hs x Ws token grid per
    frame), its blocks those of chunk_size + chunk_strategy ('uniform': chunk_size frames each, 'first_frame': 1
    then chunk_size, 'first_chunk_plus_one': chunk_size + 1 then chunk_size). The weights are copied at creation.
    dtype: the activations' q_raw, k_raw, v_raw, y and the carried look-back: 'f32' (float32), 'f16' (float16) or
    'bf16' (bfloat16 bits in uint16, or torch.bfloat16 tensors); the state and the arithmetic stay f32
    (docs/math.md §8.7)."""

    def __init__(self, *, batch, heads, head_dim, grid, conv_weight, q_norm_weight, k_norm_weight, chunk_size,
                 chunk_strategy="uniform", patch=(1, 1, 1), k_scale=None, norm_eps=1e-6, dtype="f32",
                 algorithm="auto", precision="exact", ctx=None):
        op = "camdelta.Stream"
        Hs, Ws = K.sizes(op, "grid", grid, 2)
        pt, ph, pw = K.sizes(op, "patch", patch, 3)
        B, H, D = int(batch), int(heads), int(head_dim)
        Cc = H * D
        _conv_weight(op, conv_weight, Cc)
        K.array(op, "q_norm_weight", q_norm_weight, (Cc,), F32, "(C,)")
        K.array(op, "k_norm_weight", k_norm_weight, (Cc,), F32, "(C,)")
        self.ctx = default_context() if ctx is None else ctx
        self.B, self.H, self.D, self.Hs, self.Ws = B, H, D, Hs, Ws
        self.dtype = dtype
        args = S.stream_args(B=B, H=H, D=D, Hs=Hs, Ws=Ws, pt=pt, ph=ph, pw=pw, chunk_size=int(chunk_size),
                             strategy=K.choice(op, "chunk_strategy", chunk_strategy, S.CHUNK_STRATEGIES),
                             k_scale=default_k_scale(D, Hs * Ws) if k_scale is None else k_scale,
                             norm_eps=norm_eps, dtype=K.choice(op, "dtype", dtype, S.DTYPES),
                             algorithm=K.choice(op, "algorithm", algorithm, S.ALGORITHMS),
                             precision=K.choice(op, "precision", precision, S.PRECISIONS))
        h = C.c_void_p()
        with self.ctx._stage() as s:
            args.conv_weight, args.q_norm_weight, args.k_norm_weight = (s.i(conv_weight), s.i(q_norm_weight),
                                                                        s.i(k_norm_weight))
            s.run(lib.camdelta_stream_create, C.byref(args), C.byref(h))
        self._handle = h
        self.ctx._register(self)

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidArgumentError("camdelta: the stream is closed")
        return self._handle

    @property
    def frames(self):
        """The number of committed frames (the absolute index of the next block's first frame)."""
        return lib.camdelta_stream_frames(self.handle)

    @property
    def next_frames(self):
        """The frame count of the next block."""
        return lib.camdelta_stream_next_frames(self.handle)

    @property
    def device_bytes(self):
        """The device memory the stream holds (constant over its life)."""
        return lib.camdelta_stream_device_bytes(self.handle)

    def step(self, q_raw, k_raw, v_raw, *, camera_conditions, beta, decay, commit=True):
        """The branch on the next block of Tb = next_frames frames: q_raw, k_raw, v_raw (B, Tb*S, H, D) in the
        stream's dtype, camera_conditions (B, Tb, 20), beta (B, H, Tb, S), decay (B, H, Tb) float32 -> y
        (B, Tb*S, H, D) in the stream's dtype (bf16: uint16 bits). commit=False leaves the stream as it was (a
        denoising step)."""
        op = "camdelta.Stream.step"
        B, H, D, S_ = self.B, self.H, self.D, self.Hs * self.Ws
        Tb = self.next_frames
        shape, st = (B, Tb * S_, H, D), K.STORAGE[self.dtype]
        for name, a in (("q_raw", q_raw), ("k_raw", k_raw), ("v_raw", v_raw)):
            K.array(op, name, a, shape, st, "(B, Tb*S, H, D) with Tb = %d, the stream's next block" % Tb)
        K.array(op, "camera_conditions", camera_conditions, (B, Tb, 20), F32, "(B, Tb, 20)")
        K.array(op, "beta", beta, (B, H, Tb, S_), F32, "(B, H, Tb, S)")
        K.array(op, "decay", decay, (B, H, Tb), F32, "(B, H, Tb)")
        y = ops._empty(shape, st)
        args = S.stream_step_args(frames=Tb, commit=1 if commit else 0)
        with self.ctx._stage() as s:
            args.q_raw, args.k_raw, args.v_raw = s.i(q_raw), s.i(k_raw), s.i(v_raw)
            args.camera_conditions, args.beta, args.decay = s.i(camera_conditions), s.i(beta), s.i(decay)
            args.y = s.o(y)
            s.run(lib.camdelta_stream_step, self.handle, C.byref(args))
        return y

    def reset(self):
        """Back to frame 0 with a zero state."""
        check(lib.camdelta_stream_reset(self.handle))

    def save(self):
        """The stream's state as bytes (the versioned image of docs/streaming.md)."""
        n = lib.camdelta_stream_state_size(self.handle)
        buf = C.create_string_buffer(n)
        check(lib.camdelta_stream_save(self.handle, buf, n, None))
        return buf.raw

    def restore(self, image):
        """The state of `image` (bytes from save() of a stream of the same configuration)."""
        data = bytes(image)
        check(lib.camdelta_stream_restore(self.handle, data, len(data)))

    def save_file(self, path):
        check(lib.camdelta_stream_save_file(self.handle, str(path).encode()))

    def restore_file(self, path):
        check(lib.camdelta_stream_restore_file(self.handle, str(path).encode()))

    def close(self):
        h, self._handle = self._handle, None
        if h is not None:
            lib.camdelta_stream_destroy(h)
