"""Argument checks of the NumPy operations: an array of the wrong kind, dtype, shape or layout raises the
error the library gives the same fault, naming the argument and what was expected, before anything runs."""
import numpy as np

from . import _structs as S
from .errors import InvalidArgumentError, ShapeError, UnsupportedError

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
U16 = np.dtype(np.uint16)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)

# NumPy dtype of each camdelta dtype's storage (NumPy has no bfloat16: its bits travel as uint16).
STORAGE = {"f32": F32, "f16": F16, "bf16": U16}


def ndarray(op, name, a, ndim, what):
    """`a` as an ndarray of `ndim` dimensions; returns its shape."""
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError("%s: argument '%s' is a %s, expected a NumPy array %s" %
                                   (op, name, type(a).__name__, what))
    if a.ndim != ndim:
        raise ShapeError("%s: argument '%s' has shape %s, expected %d dimensions %s" %
                         (op, name, a.shape, ndim, what))
    return a.shape


def array(op, name, a, shape, dtype, what):
    """Checks that `a` is a C-contiguous, aligned, native-order ndarray of `shape` and `dtype`; returns it."""
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError("%s: argument '%s' is a %s, expected a NumPy array %s" %
                                   (op, name, type(a).__name__, what))
    if a.shape != tuple(shape):
        raise ShapeError("%s: argument '%s' has shape %s, expected %s = %s" % (op, name, a.shape, what, tuple(shape)))
    if a.dtype != dtype:
        raise UnsupportedError("%s: argument '%s' has dtype %s, expected %s %s" % (op, name, a.dtype, dtype, what))
    if not a.flags.c_contiguous or not a.flags.aligned:
        raise InvalidArgumentError("%s: argument '%s' is not a C-contiguous, aligned array (strides %s); pass "
                                   "numpy.ascontiguousarray(%s), a copy" % (op, name, a.strides, name))
    return a


def optional(op, name, a, shape, dtype, what):
    return None if a is None else array(op, name, a, shape, dtype, what)


def activation_dtype(op, name, a, dtype):
    """The camdelta dtype name of activations given as `a` with the caller's `dtype` (None: from the array)."""
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError("%s: argument '%s' is a %s, expected a NumPy array" % (op, name, type(a).__name__))
    if dtype is None:
        if a.dtype == F32:
            return "f32"
        if a.dtype == F16:
            return "f16"
        if a.dtype == U16:
            raise UnsupportedError("%s: argument '%s' is uint16: pass dtype='bf16' for bfloat16 bits" % (op, name))
        raise UnsupportedError("%s: argument '%s' has dtype %s, expected float32, float16 or (with dtype='bf16') "
                               "uint16" % (op, name, a.dtype))
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
    except TypeError:
        t = ()
    if len(t) != n or any(x < 0 for x in t):
        raise InvalidArgumentError("%s: %s must be %d non-negative integers, got %r" % (op, name, n, value))
    return t


def same_context(op, ctx, saved, cls):
    if saved is None:
        return None
    if not isinstance(saved, cls):
        raise InvalidArgumentError("%s: 'saved' is a %s, expected camdelta.%s" % (op, type(saved).__name__,
                                                                                 cls.__name__))
    return saved.handle


def status_name(code):
    return S.STATUS_NAMES.get(code, "CAMDELTA_ERROR_UNKNOWN")
