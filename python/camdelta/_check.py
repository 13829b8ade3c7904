"""Argument checks of the operations: an array of the wrong kind, dtype, shape or layout raises the error the
library gives the same fault, naming the argument and what was expected, before anything runs.

The operations take NumPy arrays, and torch tensors once camdelta.torch is imported (it registers the tensor
type here), both in host memory; a tensor's storage dtype is reported as the NumPy dtype of the same bits
(bfloat16 as uint16)."""
import numpy as np

from .errors import InvalidArgumentError, ShapeError, UnsupportedError

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
U16 = np.dtype(np.uint16)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)

# NumPy dtype of each camdelta dtype's storage (NumPy has no bfloat16: its bits travel as uint16).
STORAGE = {"f32": F32, "f16": F16, "bf16": U16}

# set by camdelta.torch: the tensor type, its dtypes' storage as NumPy dtypes, and its bfloat16 dtype
tensor_type = None
tensor_dtypes = {}
tensor_bf16 = None


def info(op, name, a, what=""):
    """(shape, storage dtype, C-contiguous and aligned) of a host array or CPU tensor."""
    if type(a) is np.ndarray or isinstance(a, np.ndarray):
        f = a.flags
        return a.shape, a.dtype, f.c_contiguous and f.aligned
    if tensor_type is not None and isinstance(a, tensor_type):
        if not a.is_cpu:
            raise InvalidArgumentError("%s: argument '%s' is on %s; camdelta takes tensors in host memory (the "
                                       "OpenCL device reads them there): pass %s.cpu()" % (op, name, a.device, name))
        dt = tensor_dtypes.get(a.dtype)
        if dt is None:
            raise UnsupportedError("%s: argument '%s' has dtype %s, expected %s" % (op, name, a.dtype, what or
                                                                                   "a dtype camdelta takes"))
        return a.shape, dt, a.is_contiguous()  # torch.Size: a tuple
    raise InvalidArgumentError("%s: argument '%s' is a %s, expected a NumPy array%s %s" %
                               (op, name, type(a).__name__, " or a torch tensor" if tensor_type else "", what))


def ndarray(op, name, a, ndim, what):
    """The shape of `a`, a host array of `ndim` dimensions."""
    shape = info(op, name, a, what)[0]
    if len(shape) != ndim:
        raise ShapeError("%s: argument '%s' has shape %s, expected %d dimensions %s" %
                         (op, name, tuple(shape), ndim, what))
    return shape


def _dtype_name(dt):
    return "bfloat16 bits (uint16)" if dt == U16 else str(dt)


def array(op, name, a, shape, dtype, what):
    """Checks that `a` is a C-contiguous, aligned host array of `shape` and storage `dtype`; returns it."""
    ashape, adt, contiguous = info(op, name, a, what)
    if ashape != tuple(shape):
        raise ShapeError("%s: argument '%s' has shape %s, expected %s = %s" %
                         (op, name, tuple(ashape), what, tuple(shape)))
    if adt != dtype:
        raise UnsupportedError("%s: argument '%s' has dtype %s, expected %s %s" % (op, name, adt, _dtype_name(dtype),
                                                                                  what))
    if not contiguous:
        raise InvalidArgumentError("%s: argument '%s' is not a C-contiguous, aligned array; pass a contiguous copy "
                                   "(numpy.ascontiguousarray(%s) or %s.contiguous())" % (op, name, name, name))
    return a


def optional(op, name, a, shape, dtype, what):
    return None if a is None else array(op, name, a, shape, dtype, what)


def activation_dtype(op, name, a, dtype):
    """The camdelta dtype name of activations given as `a` with the caller's `dtype` (None: from the array; a
    uint16 NumPy array holds bfloat16 bits only with dtype='bf16')."""
    dt = info(op, name, a)[1]
    if dtype is None:
        if dt == F32:
            return "f32"
        if dt == F16:
            return "f16"
        if dt == U16 and tensor_bf16 is not None and getattr(a, "dtype", None) == tensor_bf16:
            return "bf16"
        if dt == U16:
            raise UnsupportedError("%s: argument '%s' is uint16: pass dtype='bf16' for bfloat16 bits" % (op, name))
        raise UnsupportedError("%s: argument '%s' has dtype %s, expected float32, float16 or bfloat16 (bits in "
                               "uint16, with dtype='bf16')" % (op, name, dt))
    if dtype not in STORAGE:
        raise UnsupportedError("%s: dtype %r unsupported (expected 'f32', 'f16' or 'bf16')" % (op, dtype))
    return dtype


def choice(op, name, value, table):
    if value not in table:
        raise InvalidArgumentError("%s: %s %r unknown (expected one of %s)" % (op, name, value, ", ".join(table)))
    return table[value]


def sizes(op, name, value, n):
    try:
        t = tuple(int(x) for x in value)
    except (TypeError, ValueError):
        t = ()
    if len(t) != n or any(x < 0 for x in t):
        raise InvalidArgumentError("%s: %s must be %d non-negative integers, got %r" % (op, name, n, value))
    return t
