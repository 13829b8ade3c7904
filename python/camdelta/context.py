"""The device context, and how host arrays reach the device.

A Context owns one camdelta_context (one OpenCL device and in-order queue). An operation hands each array to
the device in one of two ways, fixed per context (`Context.zero_copy`):

- zero copy (CPU devices, and any device that reports CL_DEVICE_HOST_UNIFIED_MEMORY, e.g. PoCL and Rusticl on
  llvmpipe): a cl_mem created with CL_MEM_USE_HOST_PTR over the array's own memory. The kernels read the
  inputs where they are and write the outputs straight into the arrays the call returns. OpenCL asks for a
  map before the host reads such a buffer; the context checks once, when it is created, whether the device
  writes host memory itself (a fill of a small buffer over host memory is there without a map:
  `Context.direct`), and maps each output after a call only where it does not. A direct context keeps the
  cl_mem objects of the last VIEW_CACHE address ranges it was handed (a cl_mem over a range holds no memory of
  its own there, and stands for whichever array occupies the range when a call uses it), so that repeated calls
  on the same arrays make no new ones; close() releases them.
- copies (discrete GPUs): inputs are copied to device buffers (CL_MEM_COPY_HOST_PTR) and outputs read back
  after the call. `Context.transfers` counts the bytes each way, and the context says so once in the
  "camdelta" logger (level INFO) when it is created.

Every call waits for its work before it returns (the arrays may be freed as soon as the caller drops them).
"""
import atexit
import collections
import ctypes as C
import logging
import threading
import weakref

import numpy as np

from . import _structs as S
from ._lib import lib, cl
from . import _lib as L
from .errors import error_for, InvalidArgumentError, OpenCLError, OutOfMemoryError

log = logging.getLogger("camdelta")

DeviceInfo = collections.namedtuple("DeviceInfo", "platform_name platform_version device_name device_vendor device_version "
                                      "driver_version type max_work_group_size local_mem_bytes global_mem_bytes "
                                      "compute_units nvidia_ptx host_unified_memory")
BuildStats = collections.namedtuple("BuildStats", "programs from_disk compiled last_from_disk last_setup_ms")

_ABSENT = S.buffer()
_Buffer = S.buffer
VIEW_CACHE = 64  # cl_mems a direct context keeps, the oldest dropped first


def _raise_status(status):
    raise error_for(status, lib.camdelta_last_message().decode("utf-8", "replace"))


def check(status):
    """Raise the exception for a failed camdelta call (status != CAMDELTA_OK)."""
    if status:
        _raise_status(status)


class Closable:
    """An owner of library handles: close() at the end of a `with` block and when collected (where a failure can
    no longer be reported, as at interpreter exit, it is dropped)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Transfers:
    """Bytes copied between host and device by a context that copies (always zero on a zero-copy context)."""

    __slots__ = ("to_device", "from_device")

    def __init__(self):
        self.to_device = 0
        self.from_device = 0

    def __repr__(self):
        return "Transfers(to_device=%d, from_device=%d)" % (self.to_device, self.from_device)


class Context(Closable):
    """One OpenCL device through camdelta.

    Context(device=None, zero_copy=None): `device` is a selector as CAMDELTA_DEVICE ("pocl", "cpu", "gpu",
    "P:D", a part of a platform or device name); None reads CAMDELTA_DEVICE, else the first GPU, else the first
    device. `zero_copy` None decides from the device (CPU type or host-unified memory); True or False forces it.
    Usable as a context manager; close() releases the device (later calls raise InvalidArgumentError).
    """

    def __init__(self, device=None, zero_copy=None):
        self._lock = threading.Lock()
        self._views_lock = threading.Lock()
        self._views = collections.OrderedDict()  # (address, bytes, writable) -> cl_mem, direct contexts only
        self._evicted = []
        self._busy = 0
        self._saved = weakref.WeakSet()
        self._handle = None
        h = C.c_void_p()
        check(lib.camdelta_context_create(C.byref(h), None if device is None else str(device).encode()))
        self._handle = h
        self._queue = lib.camdelta_context_queue(h)
        self._cl_context = lib.camdelta_context_cl_context(h)
        info = S.device_info()
        check(lib.camdelta_context_info(h, C.byref(info)))
        unified = C.c_uint32(0)
        err = cl.clGetDeviceInfo(lib.camdelta_context_device(h), L.CL_DEVICE_HOST_UNIFIED_MEMORY,
                                 C.sizeof(unified), C.byref(unified), None)
        host_unified = bool(unified.value) if err == L.CL_SUCCESS else False
        text = [getattr(info, f).decode("utf-8", "replace") for f in ("platform_name", "platform_version",
                                                                        "device_name", "device_vendor",
                                                                        "device_version", "driver_version")]
        self.device = DeviceInfo(*text, int(info.type), int(info.max_work_group_size), int(info.local_mem_bytes),
                                 int(info.global_mem_bytes), int(info.compute_units), bool(info.nvidia_ptx),
                                 host_unified)
        if zero_copy is None:
            zero_copy = bool(info.type & L.CL_DEVICE_TYPE_CPU) or host_unified
        self.zero_copy = bool(zero_copy)
        self.direct = self.zero_copy and self._probe_direct()
        self.transfers = Transfers()
        log.info("camdelta: %s on %s: %s", self.device.device_name, self.device.platform_name,
                 "arrays are used in place (zero copy)" if self.zero_copy
                 else "arrays are copied to the device and back (the device does not share host memory)")

    def _probe_direct(self):
        """Whether the device writes a CL_MEM_USE_HOST_PTR buffer's host memory itself (no map needed)."""
        host = (C.c_uint32 * 16)()
        err = L.cl_int(0)
        m = cl.clCreateBuffer(self._cl_context, L.CL_MEM_READ_WRITE | L.CL_MEM_USE_HOST_PTR, C.sizeof(host),
                              C.addressof(host), C.byref(err))
        if err.value != L.CL_SUCCESS or not m:
            return False
        try:
            pattern = C.c_uint32(0xC0DE1A7E)
            if cl.clEnqueueFillBuffer(self._queue, m, C.byref(pattern), 4, 0, C.sizeof(host), 0, None,
                                      None) != L.CL_SUCCESS or cl.clFinish(self._queue) != L.CL_SUCCESS:
                return False
            return all(x == pattern.value for x in host)
        finally:
            cl.clReleaseMemObject(m)

    # -- lifetime ------------------------------------------------------------------------------------------
    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Release the device. Saved objects of this context are released with it."""
        with self._lock:
            if self._handle is None:
                return
            for s in list(self._saved):
                s.close()
            with self._views_lock:
                for m in list(self._views.values()) + self._evicted:
                    cl.clReleaseMemObject(m)
                self._views.clear()
                self._evicted.clear()
            lib.camdelta_context_destroy(self._handle)
            self._handle = None

    def __repr__(self):
        if self.closed:
            return "<camdelta.Context closed>"
        return "<camdelta.Context %s (%s), %s>" % (self.device.device_name, self.device.platform_name,
                                                   "zero copy" if self.zero_copy else "copies")

    @property
    def handle(self):
        """The camdelta_context pointer (raises on a closed context)."""
        h = self._handle
        if h is None:
            raise InvalidArgumentError("camdelta: the context is closed")
        return h

    # -- queries -------------------------------------------------------------------------------------------
    def build_stats(self):
        st = S.build_stats()
        check(lib.camdelta_context_build_stats(self.handle, C.byref(st)))
        return BuildStats(st.programs, st.from_disk, st.compiled, bool(st.last_from_disk), st.last_setup_ms)

    def finish(self):
        check(lib.camdelta_finish(self.handle))

    def warm(self, shape=None):
        """Build (or load from the disk cache) the programs ahead of the calls: those that depend on the head
        dim only, or with shape=(B, H, D, S) everything a call of that shape uses."""
        if shape is None:
            check(lib.camdelta_warm(self.handle))
        else:
            B, H, D, S_ = shape
            check(lib.camdelta_warm_shape(self.handle, B, H, D, S_))

    def _view(self, ptr, nbytes, writable):
        """A CL_MEM_USE_HOST_PTR cl_mem over [ptr, ptr + nbytes) for a call in flight: on a direct context the
        one kept from an earlier call, else made and kept (the stage does not release it); on other contexts a
        new one the stage releases."""
        key = (ptr, nbytes, writable)
        views = self._views
        if self.direct:
            # a lock-free read: a cl_mem dropped from the cache meanwhile is released only once no call is in
            # flight, and this one is
            m = views.get(key)
            if m is not None:
                return m, False
        err = L.cl_int(0)
        flags = (L.CL_MEM_READ_WRITE if writable else L.CL_MEM_READ_ONLY) | L.CL_MEM_USE_HOST_PTR
        m = cl.clCreateBuffer(self._cl_context, flags, nbytes, ptr, C.byref(err))
        if err.value != L.CL_SUCCESS or not m:
            _create_failed(nbytes, err.value)
        if not self.direct:
            return m, True
        with self._views_lock:
            old = views.pop(key, None)  # another thread made one meanwhile
            views[key] = m
            if old is not None:
                self._evicted.append(old)
            if len(views) > VIEW_CACHE:
                self._evicted.append(views.popitem(last=False)[1])
        return m, False

    def _enter_call(self):
        with self._views_lock:
            self._busy += 1

    def _leave_call(self):
        # cl_mems dropped from the cache are released once no call that may use them is in flight
        with self._views_lock:
            self._busy -= 1
            if self._busy == 0 and self._evicted:
                for m in self._evicted:
                    cl.clReleaseMemObject(m)
                self._evicted.clear()

    def _register(self, saved):
        self._saved.add(saved)

    def _stage(self):
        return _Stage(self)


class _Stage:
    """The cl_mem objects of one call: created over (or copied from) the arrays, released when the call ends.
    Outputs are made visible to the host (mapped, or read back) after the call's work has finished."""

    __slots__ = ("ctx", "h", "mems", "outs", "direct", "views")

    def __init__(self, ctx):
        self.ctx = ctx
        self.h = ctx.handle
        self.direct = ctx.direct
        self.views = ctx._views
        self.mems = []  # the cl_mems this call releases
        self.outs = []
        ctx._enter_call()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for m in self.mems:
            cl.clReleaseMemObject(m)
        self.mems = []
        if self.ctx is not None:
            self.ctx._leave_call()
            self.ctx = None

    def _mem(self, a, writable):
        if type(a) is np.ndarray:
            ptr, nbytes = a.ctypes.data, a.nbytes
        else:  # a torch tensor (camdelta.torch): its data pointer and size
            ptr, nbytes = a.data_ptr(), a.numel() * a.element_size()
        err = L.cl_int(0)
        ctx = self.ctx
        if nbytes == 0:
            # An empty array has no memory to point at: a 4-byte device buffer stands in, so that the library
            # reports the zero size itself (CAMDELTA_ERROR_SHAPE) before it writes anything.
            m = cl.clCreateBuffer(ctx._cl_context, L.CL_MEM_READ_WRITE, 4, None, C.byref(err))
        elif ctx.zero_copy:
            m, own = ctx._view(ptr, nbytes, writable)
            if own:
                self.mems.append(m)
            if writable:
                self.outs.append((m, a))
            return m
        elif writable:
            m = cl.clCreateBuffer(ctx._cl_context, L.CL_MEM_READ_WRITE, nbytes, None, C.byref(err))
        else:
            m = cl.clCreateBuffer(ctx._cl_context, L.CL_MEM_READ_ONLY | L.CL_MEM_COPY_HOST_PTR, nbytes, ptr,
                                  C.byref(err))
            ctx.transfers.to_device += nbytes
        if err.value != L.CL_SUCCESS or not m:
            _create_failed(nbytes, err.value)
        self.mems.append(m)
        if writable and nbytes:
            self.outs.append((m, a))
        return m

    def i(self, a):
        """A camdelta_buffer reading array `a` (None: absent)."""
        if a is None:
            return _ABSENT
        if self.direct:  # the common case on CPU devices, kept short: a cl_mem kept from an earlier call
            m = self.views.get((a.ctypes.data, a.nbytes, False) if type(a) is np.ndarray else
                               (a.data_ptr(), a.numel() * a.element_size(), False))
            if m is not None:
                return _Buffer(m)
        return _Buffer(self._mem(a, False))

    def o(self, a):
        """A camdelta_buffer writing array `a` (None: absent)."""
        if a is None:
            return _ABSENT
        return _Buffer(self._mem(a, True))

    def run(self, fn, *args):
        """Call `fn(ctx, *args)`, wait for its work, and make the outputs visible on the host."""
        st = fn(self.h, *args)
        if st:
            _raise_status(st)
        self.sync()

    def sync(self):
        st = lib.camdelta_finish(self.h)
        if st:
            _raise_status(st)
        q = self.ctx._queue
        err = L.cl_int(0)
        if self.ctx.direct:
            return
        if self.ctx.zero_copy:
            for m, a in self.outs:
                p = cl.clEnqueueMapBuffer(q, m, L.CL_TRUE, L.CL_MAP_READ, 0, a.nbytes, 0, None, None,
                                          C.byref(err))
                if err.value != L.CL_SUCCESS:
                    raise OpenCLError("camdelta: clEnqueueMapBuffer failed (%s)" % _cl_name(err.value))
                cl.clEnqueueUnmapMemObject(q, m, p, 0, None, None)
        else:
            for m, a in self.outs:
                e = cl.clEnqueueReadBuffer(q, m, L.CL_TRUE, 0, a.nbytes, a.ctypes.data, 0, None, None)
                if e != L.CL_SUCCESS:
                    raise OpenCLError("camdelta: clEnqueueReadBuffer failed (%s)" % _cl_name(e))
                self.ctx.transfers.from_device += a.nbytes


def _cl_name(err):
    return lib.camdelta_cl_error_name(err).decode()


def _create_failed(nbytes, err):
    cls = OutOfMemoryError if err in (-4, -5, -6, -61) else OpenCLError
    raise cls("camdelta: clCreateBuffer of %d bytes failed (%s)" % (nbytes, _cl_name(err)))


class Saved(Closable):
    """A forward's saved state for its backward (camdelta_prep_saved, _scan_saved, _branch_saved): device
    memory owned by the context, released by close() or when the object is collected."""

    _kind = None

    def __init__(self, ctx=None):
        self.ctx = ctx if ctx is not None else default_context()
        h = C.c_void_p()
        check(getattr(lib, "camdelta_%s_saved_create" % self._kind)(self.ctx.handle, C.byref(h)))
        self._handle = h
        self.ctx._register(self)

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidArgumentError("camdelta: the %s saved object is closed" % self._kind)
        return self._handle

    def close(self):
        h, self._handle = self._handle, None
        if h is not None:
            getattr(lib, "camdelta_%s_saved_destroy" % self._kind)(h)


class PrepSaved(Saved):
    """camdelta_prep_saved: what a prep backward reuses from its forward (inverse RMS values)."""
    _kind = "prep"


class ScanSaved(Saved):
    """camdelta_scan_saved: the per-frame states a scan backward reuses from its forward."""
    _kind = "scan"


class BranchSaved(Saved):
    """camdelta_branch_saved: what a branch backward reuses from its forward."""
    _kind = "branch"


_default = None
_default_lock = threading.Lock()


def default_context():
    """The context operations use when none is given: created on first use on the device CAMDELTA_DEVICE
    names (else the first GPU, else the first device), closed at exit."""
    global _default
    c = _default
    if c is None or c.closed:
        with _default_lock:
            if _default is None or _default.closed:
                _default = Context()
            c = _default
    return c


def set_default_context(ctx):
    """Make `ctx` the context of calls that name none (None: create one on the next call)."""
    global _default
    with _default_lock:
        _default = ctx


@atexit.register
def _close_default():
    c = _default
    if c is not None:
        c.close()
