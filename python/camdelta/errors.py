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


def _error(name, base, status):
    """A CamdeltaError subclass for one C status, also a subclass of the builtin exception that fault is."""
    return type(name, (CamdeltaError, base), {"status": status, "__module__": __name__,
                                              "__doc__": "CamdeltaError of status %d (%s)." % (status, base.__name__)})


InvalidArgumentError = _error("InvalidArgumentError", ValueError, 1)
ShapeError = _error("ShapeError", ValueError, 2)
UnsupportedError = _error("UnsupportedError", ValueError, 3)
BufferTooSmallError = _error("BufferTooSmallError", ValueError, 4)
CamdeltaOverflowError = _error("CamdeltaOverflowError", OverflowError, 5)
OutOfMemoryError = _error("OutOfMemoryError", MemoryError, 6)
DeviceNotFoundError = _error("DeviceNotFoundError", LookupError, 7)
OpenCLError = _error("OpenCLError", RuntimeError, 8)
BuildError = _error("BuildError", RuntimeError, 9)
CamdeltaIOError = _error("CamdeltaIOError", OSError, 10)
FormatError = _error("FormatError", ValueError, 11)

_BY_STATUS = {c.status: c for c in (InvalidArgumentError, ShapeError, UnsupportedError, BufferTooSmallError,
                                    CamdeltaOverflowError, OutOfMemoryError, DeviceNotFoundError, OpenCLError,
                                    BuildError, CamdeltaIOError, FormatError)}


def error_for(status, message):
    """The exception for a C status and its message."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return CamdeltaError(message, status)
    return cls(message)
