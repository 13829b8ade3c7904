"""Exceptions carrying the library's status: every failure of a camdelta call, and every argument the package
rejects before calling the library (with the status the library gives the same fault), raises a subclass of
CamdeltaError whose `status_name` is the C status name ("CAMDELTA_ERROR_SHAPE", ...) and whose `message` says
which argument and what was expected. Nothing is written when an error is raised."""
from . import _structs as S


class CamdeltaError(Exception):
    """A camdelta failure: `status` (the C camdelta_status value), `status_name`, `message`."""

    status = None

    def __init__(self, message, status=None):
        if status is not None:
            self.status = status
        self.status_name = S.STATUS_NAMES.get(self.status, "CAMDELTA_ERROR_UNKNOWN")
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


class InvalidArgumentError(CamdeltaError, ValueError):
    status = 1


class ShapeError(CamdeltaError, ValueError):
    status = 2


class UnsupportedError(CamdeltaError, ValueError):
    status = 3


class BufferTooSmallError(CamdeltaError, ValueError):
    status = 4


class CamdeltaOverflowError(CamdeltaError, OverflowError):
    status = 5


class OutOfMemoryError(CamdeltaError, MemoryError):
    status = 6


class DeviceNotFoundError(CamdeltaError, LookupError):
    status = 7


class OpenCLError(CamdeltaError, RuntimeError):
    status = 8


class BuildError(CamdeltaError, RuntimeError):
    status = 9


class CamdeltaIOError(CamdeltaError, OSError):
    status = 10


class FormatError(CamdeltaError, ValueError):
    status = 11


_BY_STATUS = {c.status: c for c in (InvalidArgumentError, ShapeError, UnsupportedError, BufferTooSmallError,
                                    CamdeltaOverflowError, OutOfMemoryError, DeviceNotFoundError, OpenCLError, BuildError,
                                    CamdeltaIOError, FormatError)}


def error_for(status, message):
    """The exception for a C status and its message."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return CamdeltaError(message, status)
    return cls(message)
