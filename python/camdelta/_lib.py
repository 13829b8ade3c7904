"""Finding and loading libcamdelta (and the OpenCL ICD loader it links), with every prototype the package uses.

Where the library comes from, first match wins:
  1. the environment variable CAMDELTA_LIBRARY: a path to the shared library (a build tree's
     build/libcamdelta.so); when set, nothing else is tried;
  2. the path written into camdelta/_install.py when CMake installed this package beside the library
     (-DCAMDELTA_PYTHON=ON);
  3. the system's search (ctypes.util.find_library("camdelta"): ldconfig's cache, LD_LIBRARY_PATH).
"""
import ctypes as C
import ctypes.util
import os

from . import _structs as S


class LibraryNotFoundError(ImportError):
    """libcamdelta could not be loaded; the message lists what was tried."""


def _candidates():
    env = os.environ.get("CAMDELTA_LIBRARY")
    if env:
        return [("CAMDELTA_LIBRARY", env)]
    found = []
    try:
        from . import _install  # written by CMake's install step

        found.append(("the installed path (camdelta/_install.py)", _install.LIBRARY))
    except ImportError:
        pass
    name = ctypes.util.find_library("camdelta")
    if name:
        found.append(("the system's library search", name))
    return found


def _load():
    tried = []
    for how, path in _candidates():
        try:
            return C.CDLL(path), path
        except OSError as e:
            tried.append("%s: %s (%s)" % (how, path, e))
    if not tried:
        tried.append("CAMDELTA_LIBRARY is not set, the package was not installed by CMake, and the system's "
                     "library search found no libcamdelta")
    raise LibraryNotFoundError("camdelta: cannot load libcamdelta; tried:\n  " + "\n  ".join(tried) +
                               "\nSet CAMDELTA_LIBRARY to the library's path (e.g. build/libcamdelta.so), or "
                               "install with cmake -DCAMDELTA_PYTHON=ON.")


lib, library_path = _load()


def _load_opencl():
    # The ICD loader libcamdelta links; loading it again gives the same library, so cl_context and cl_mem
    # handles pass between the two.
    for name in ("libOpenCL.so.1", ctypes.util.find_library("OpenCL"), "OpenCL"):
        if not name:
            continue
        try:
            return C.CDLL(name)
        except OSError:
            continue
    raise LibraryNotFoundError("camdelta: cannot load the OpenCL ICD loader (libOpenCL.so.1, Debian package "
                               "ocl-icd-libopencl1)")


cl = _load_opencl()

_version = lib.camdelta_version_number
_version.restype = C.c_uint
_version.argtypes = []
version_number = _version()
if (version_number // 10000, version_number // 100 % 100) != S.ABI_VERSION:
    raise LibraryNotFoundError("camdelta: %s is version %d.%d, but this package was written for %d.%d" %
                               ((library_path, version_number // 10000, version_number // 100 % 100) +
                                S.ABI_VERSION))


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


P = C.c_void_p
ST = S.c_status
cp = C.c_char_p
sz = C.c_size_t
byref = C.POINTER

# errors, names, version
_proto("camdelta_status_name", cp, ST)
_proto("camdelta_last_message", cp)
_proto("camdelta_cl_error_name", cp, C.c_int32)
_proto("camdelta_dtype_name", cp, S.c_dtype)
_proto("camdelta_scan_algorithm_name", cp, S.c_algorithm)
_proto("camdelta_precision_name", cp, S.c_precision)
_proto("camdelta_chunk_strategy_name", cp, S.c_chunk_strategy)
# context
_proto("camdelta_context_create", ST, C.POINTER(P), cp)
_proto("camdelta_context_destroy", None, P)
_proto("camdelta_context_cl_context", P, P)
_proto("camdelta_context_queue", P, P)
_proto("camdelta_context_device", P, P)
_proto("camdelta_context_info", ST, P, byref(S.device_info))
_proto("camdelta_context_build_stats", ST, P, byref(S.build_stats))
_proto("camdelta_finish", ST, P)
_proto("camdelta_warm", ST, P)
_proto("camdelta_warm_shape", ST, P, sz, sz, sz, sz)
_proto("camdelta_scan_plan_describe", ST, P, byref(S.scan_args), cp, sz)
_proto("camdelta_scan_backward_plan_describe", ST, P, byref(S.scan_backward_args), cp, sz)
# saved objects
for what in ("prep", "scan", "branch"):
    _proto("camdelta_%s_saved_create" % what, ST, P, C.POINTER(P))
    _proto("camdelta_%s_saved_destroy" % what, None, P)
# operations
_proto("camdelta_prep_forward", ST, P, byref(S.prep_args), P)
_proto("camdelta_prep_backward", ST, P, byref(S.prep_backward_args), P)
_proto("camdelta_scan_forward", ST, P, byref(S.scan_args), P)
_proto("camdelta_scan_backward", ST, P, byref(S.scan_backward_args), P)
_proto("camdelta_chunk_bounds", ST, sz, byref(S.chunking), S.c_sizep, sz, S.c_sizep)
_proto("camdelta_conv_bounds", ST, sz, byref(S.chunking), S.c_sizep, sz, S.c_sizep)
_proto("camdelta_camera_forward", ST, P, byref(S.camera_args))
_proto("camdelta_short_conv_forward", ST, P, byref(S.short_conv_args))
_proto("camdelta_short_conv_backward", ST, P, byref(S.short_conv_args))
_proto("camdelta_output_transform_forward", ST, P, byref(S.output_transform_args))
_proto("camdelta_output_transform_backward", ST, P, byref(S.output_transform_args))
_proto("camdelta_branch_forward", ST, P, byref(S.branch_args), P)
_proto("camdelta_branch_backward", ST, P, byref(S.branch_args), byref(S.branch_grads), P)
_proto("camdelta_scan_forward_packed", ST, P, byref(S.scan_args), byref(S.packed_clips), P)
_proto("camdelta_scan_backward_packed", ST, P, byref(S.scan_backward_args), byref(S.packed_clips), P)
_proto("camdelta_scan_summary", ST, P, byref(S.scan_summary_args))
_proto("camdelta_scan_grad_summary", ST, P, byref(S.scan_grad_summary_args))
_proto("camdelta_summary_apply", ST, P, byref(S.summary_apply_args))
_proto("camdelta_summary_combine", ST, P, byref(S.summary_combine_args))
# helpers (camdelta_helpers.h)
F32P = C.POINTER(C.c_float)
_proto("camdelta_rope_tables", ST, sz, sz, F32P, F32P, F32P)
_proto("camdelta_invert_se3", ST, sz, F32P, F32P)
_proto("camdelta_f32_to_bf16", C.c_uint16, C.c_float)
_proto("camdelta_bf16_to_f32", C.c_float, C.c_uint16)
# f64 references (camdelta_ref.h)
_proto("camdelta_ref_prep_forward", ST, byref(S.ref_prep))
_proto("camdelta_ref_prep_backward", ST, byref(S.ref_prep), byref(S.ref_prep_grads))
_proto("camdelta_ref_scan_forward", ST, byref(S.ref_scan))
_proto("camdelta_ref_scan_backward", ST, byref(S.ref_scan), byref(S.ref_scan_grads))
_proto("camdelta_ref_scan_summary", ST, byref(S.ref_scan), S.c_f64p, S.c_f64p)
_proto("camdelta_ref_scan_grad_summary", ST, byref(S.ref_scan), S.c_f64p, S.c_f64p, S.c_f64p)
_proto("camdelta_ref_scan_packed_forward", ST, byref(S.ref_scan_packed))
_proto("camdelta_ref_scan_packed_backward", ST, byref(S.ref_scan_packed), byref(S.ref_scan_grads))
_proto("camdelta_ref_camera_forward", ST, byref(S.ref_camera))
_proto("camdelta_ref_short_conv_forward", ST, byref(S.ref_conv))
_proto("camdelta_ref_short_conv_backward", ST, byref(S.ref_conv))
_proto("camdelta_ref_output_transform", ST, sz, sz, sz, sz, S.c_f64p, S.c_f64p, S.c_f64p, S.c_f64p, S.c_f64p)
_proto("camdelta_ref_output_transform_backward", ST, sz, sz, sz, sz, S.c_f64p, S.c_f64p, S.c_f64p, S.c_f64p,
       S.c_f64p)
_proto("camdelta_ref_branch_forward", ST, byref(S.ref_branch))
_proto("camdelta_ref_branch_backward", ST, byref(S.ref_branch), byref(S.ref_branch_grads))
_proto("camdelta_ref_stream_forward", ST, byref(S.ref_branch))
# streams (camdelta_stream.h)
_proto("camdelta_stream_create", ST, P, byref(S.stream_args), C.POINTER(P))
_proto("camdelta_stream_destroy", None, P)
_proto("camdelta_stream_step", ST, P, P, byref(S.stream_step_args))
_proto("camdelta_stream_frames", sz, P)
_proto("camdelta_stream_next_frames", sz, P)
_proto("camdelta_stream_device_bytes", sz, P)
_proto("camdelta_stream_reset", ST, P)
_proto("camdelta_stream_state_size", sz, P)
_proto("camdelta_stream_save", ST, P, P, sz, C.POINTER(sz))
_proto("camdelta_stream_restore", ST, P, P, sz)
_proto("camdelta_stream_save_file", ST, P, cp)
_proto("camdelta_stream_restore_file", ST, P, cp)


# --- OpenCL (the few calls the package makes itself: buffers over host memory, maps, device queries) -------
CL_SUCCESS = 0
CL_MEM_READ_WRITE = 1 << 0
CL_MEM_READ_ONLY = 1 << 2
CL_MEM_USE_HOST_PTR = 1 << 3
CL_MEM_COPY_HOST_PTR = 1 << 5
CL_MAP_READ = 1 << 0
CL_DEVICE_TYPE_CPU = 1 << 1
CL_DEVICE_HOST_UNIFIED_MEMORY = 0x1035
CL_TRUE = 1


def _clproto(name, restype, *argtypes):
    f = getattr(cl, name)
    f.restype = restype
    f.argtypes = list(argtypes)


cl_int = C.c_int32
_clproto("clCreateBuffer", P, P, C.c_uint64, sz, P, C.POINTER(cl_int))
_clproto("clReleaseMemObject", cl_int, P)
_clproto("clRetainMemObject", cl_int, P)
_clproto("clEnqueueMapBuffer", P, P, P, C.c_uint32, C.c_uint64, sz, sz, C.c_uint32, P, P, C.POINTER(cl_int))
_clproto("clEnqueueUnmapMemObject", cl_int, P, P, P, C.c_uint32, P, P)
_clproto("clEnqueueReadBuffer", cl_int, P, P, C.c_uint32, sz, sz, P, C.c_uint32, P, P)
_clproto("clEnqueueFillBuffer", cl_int, P, P, P, sz, sz, sz, C.c_uint32, P, P)
_clproto("clFinish", cl_int, P)
_clproto("clGetDeviceInfo", cl_int, P, C.c_uint32, sz, P, C.POINTER(sz))
