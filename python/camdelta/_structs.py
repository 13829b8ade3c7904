"""ctypes mirrors of the C API's types (include/camdelta.h, camdelta_packed.h, camdelta_summary.h, camdelta_ref.h,
camdelta_stream.h).

Every struct the package passes to the library is declared here and nowhere else, field for field in the
headers' order; python/tests/test_layout.py compares each one's size, alignment and field offsets with the
compiler's layout of the headers, and fails on a field added, removed or moved on either side.
"""
import ctypes as C

# ABI the structs below describe: the library's MAJOR.MINOR (its SOVERSION). Checked at load time against
# camdelta_version_number() and in the tests against the header's macros.
ABI_VERSION = (0, 1)

c_size = C.c_size_t
c_f64p = C.POINTER(C.c_double)
c_i64p = C.POINTER(C.c_int64)
c_sizep = C.POINTER(C.c_size_t)

# --- enums (C enums are int-sized on the platforms camdelta supports) --------------------------------------
c_status = C.c_int
c_dtype = C.c_int
c_algorithm = C.c_int
c_precision = C.c_int
c_chunk_strategy = C.c_int
c_cache_state = C.c_int

STATUS_NAMES = {
    0: "CAMDELTA_OK",
    1: "CAMDELTA_ERROR_INVALID_ARGUMENT",
    2: "CAMDELTA_ERROR_SHAPE",
    3: "CAMDELTA_ERROR_UNSUPPORTED",
    4: "CAMDELTA_ERROR_BUFFER_TOO_SMALL",
    5: "CAMDELTA_ERROR_OVERFLOW",
    6: "CAMDELTA_ERROR_OUT_OF_MEMORY",
    7: "CAMDELTA_ERROR_DEVICE_NOT_FOUND",
    8: "CAMDELTA_ERROR_OPENCL",
    9: "CAMDELTA_ERROR_BUILD",
    10: "CAMDELTA_ERROR_IO",
    11: "CAMDELTA_ERROR_FORMAT",
}
DTYPES = {"f32": 0, "f16": 1, "bf16": 2}
ALGORITHMS = {"auto": 0, "sequential": 1, "chunkwise": 2}
PRECISIONS = {"exact": 0, "tf32": 1}
CHUNK_STRATEGIES = {"uniform": 0, "first_frame": 1, "first_chunk_plus_one": 2}

# OpenCL handles are pointers.
cl_mem = C.c_void_p


class _Struct(C.Structure):
    """A C struct; fields not given are zero, as the C API's *_ARGS_INIT initialisers."""

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (f[0], getattr(self, f[0])) for f in self._fields_))


class buffer(_Struct):
    _fields_ = [("mem", cl_mem), ("offset", c_size)]


class profile(_Struct):
    _fields_ = [("kernel_ms", C.c_double), ("kernels", C.c_uint)]


c_profilep = C.POINTER(profile)


class device_info(_Struct):
    _fields_ = [
        ("platform_name", C.c_char * 128),
        ("platform_version", C.c_char * 128),
        ("device_name", C.c_char * 128),
        ("device_vendor", C.c_char * 128),
        ("device_version", C.c_char * 128),
        ("driver_version", C.c_char * 128),
        ("type", C.c_uint64),  # cl_device_type (cl_bitfield, cl_ulong)
        ("max_work_group_size", c_size),
        ("local_mem_bytes", C.c_uint64),
        ("global_mem_bytes", C.c_uint64),
        ("compute_units", C.c_uint),
        ("nvidia_ptx", C.c_int),
    ]


class build_stats(_Struct):
    _fields_ = [
        ("programs", C.c_uint),
        ("from_disk", C.c_uint),
        ("compiled", C.c_uint),
        ("last_from_disk", C.c_int),
        ("last_setup_ms", C.c_double),
    ]


class cache_entry(_Struct):
    _fields_ = [
        ("file", C.c_char * 96),
        ("device", C.c_char * 65),
        ("bytes", C.c_uint64),
        ("mtime", C.c_int64),
        ("state", c_cache_state),
    ]


# --- prep -------------------------------------------------------------------------------------------------
class prep_args(_Struct):
    _fields_ = [
        ("B", c_size), ("N", c_size), ("H", c_size), ("D", c_size),
        ("dtype", c_dtype),
        ("k_scale", C.c_float),
        ("norm_eps", C.c_float),
        ("q_raw", buffer), ("k_raw", buffer), ("v_raw", buffer),
        ("q_norm_weight", buffer),
        ("k_norm_weight", buffer),
        ("proj_q", buffer), ("proj_kv", buffer),
        ("rope_cos", buffer), ("rope_sin", buffer),
        ("q", buffer), ("k", buffer), ("v", buffer),
        ("inflation_sq", buffer),
        ("profile", c_profilep),
    ]


class prep_backward_args(_Struct):
    _fields_ = [
        ("B", c_size), ("N", c_size), ("H", c_size), ("D", c_size),
        ("dtype", c_dtype),
        ("k_scale", C.c_float), ("norm_eps", C.c_float),
        ("q_raw", buffer), ("k_raw", buffer), ("v_raw", buffer), ("q_norm_weight", buffer),
        ("k_norm_weight", buffer), ("proj_q", buffer), ("proj_kv", buffer), ("rope_cos", buffer),
        ("rope_sin", buffer),
        ("grad_q", buffer), ("grad_k", buffer), ("grad_v", buffer),
        ("grad_inflation_sq", buffer),
        ("dq_raw", buffer), ("dk_raw", buffer), ("dv_raw", buffer),
        ("dq_norm_weight", buffer), ("dk_norm_weight", buffer),
        ("dproj_q", buffer), ("dproj_kv", buffer),
        ("drope_cos", buffer), ("drope_sin", buffer),
        ("profile", c_profilep),
        ("q", buffer), ("k", buffer),
        ("inflation_sq", buffer),
    ]


# --- scan -------------------------------------------------------------------------------------------------
class scan_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size), ("F", c_size), ("S", c_size),
        ("reverse", C.c_int),
        ("algorithm", c_algorithm),
        ("q", buffer), ("k", buffer), ("v", buffer),
        ("beta", buffer),
        ("decay", buffer),
        ("out", buffer),
        ("init_state", buffer),
        ("final_state", buffer),
        ("profile", c_profilep),
        ("used", C.POINTER(c_algorithm)),
        ("precision", c_precision),
    ]


class scan_backward_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size), ("F", c_size), ("S", c_size),
        ("reverse", C.c_int),
        ("q", buffer), ("k", buffer), ("v", buffer), ("beta", buffer), ("decay", buffer),
        ("init_state", buffer),
        ("grad_out", buffer),
        ("grad_final_state", buffer),
        ("dq", buffer), ("dk", buffer), ("dv", buffer),
        ("dbeta", buffer),
        ("ddecay", buffer),
        ("dinit_state", buffer),
        ("profile", c_profilep),
        ("precision", c_precision),
    ]


# --- camera branch (docs/math.md §8) -------------------------------------------------------------------------------
class chunking(_Struct):
    _fields_ = [
        ("chunk_size", c_size),
        ("strategy", c_chunk_strategy),
        ("chunk_index", c_i64p),
        ("chunk_index_count", c_size),
    ]


class camera_args(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("Hs", c_size), ("Ws", c_size),
        ("pt", c_size), ("ph", c_size), ("pw", c_size),
        ("D", c_size),
        ("camera_conditions", buffer),
        ("proj_q", buffer), ("proj_kv", buffer), ("proj_o", buffer),
        ("rope_cos", buffer), ("rope_sin", buffer),
        ("profile", c_profilep),
    ]


class short_conv_args(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("S", c_size), ("C", c_size),
        ("chunking", chunking),
        ("k_raw", buffer),
        ("conv_weight", buffer),
        ("k_conv", buffer),
        ("grad_k_conv", buffer),
        ("dk_raw", buffer),
        ("dconv_weight", buffer),
        ("profile", c_profilep),
    ]


class output_transform_args(_Struct):
    _fields_ = [
        ("B", c_size), ("N", c_size), ("H", c_size), ("D", c_size),
        ("out", buffer),
        ("out2", buffer),
        ("proj_o", buffer),
        ("rope_cos", buffer), ("rope_sin", buffer),
        ("y", buffer),
        ("grad_y", buffer),
        ("grad_out", buffer),
        ("profile", c_profilep),
    ]


class branch_args(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("Hs", c_size), ("Ws", c_size), ("H", c_size), ("D", c_size),
        ("pt", c_size), ("ph", c_size), ("pw", c_size),
        ("chunking", chunking),
        ("k_scale", C.c_float),
        ("norm_eps", C.c_float),
        ("algorithm", c_algorithm),
        ("q_raw", buffer), ("k_raw", buffer), ("v_raw", buffer),
        ("conv_weight", buffer),
        ("q_norm_weight", buffer), ("k_norm_weight", buffer),
        ("camera_conditions", buffer),
        ("beta", buffer),
        ("decay", buffer),
        ("y", buffer),
        ("profile", c_profilep),
        ("precision", c_precision),
        ("dtype", c_dtype),
    ]


class branch_grads(_Struct):
    _fields_ = [
        ("grad_y", buffer),
        ("dq_raw", buffer), ("dk_raw", buffer), ("dv_raw", buffer),
        ("dconv_weight", buffer),
        ("dq_norm_weight", buffer), ("dk_norm_weight", buffer),
        ("dbeta", buffer),
        ("ddecay", buffer),
        ("profile", c_profilep),
    ]


# --- streams (camdelta_stream.h) -------------------------------------------------------------------------
class stream_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size),
        ("Hs", c_size), ("Ws", c_size),
        ("pt", c_size), ("ph", c_size), ("pw", c_size),
        ("chunk_size", c_size),
        ("strategy", c_chunk_strategy),
        ("k_scale", C.c_float),
        ("norm_eps", C.c_float),
        ("dtype", c_dtype),
        ("algorithm", c_algorithm),
        ("precision", c_precision),
        ("conv_weight", buffer),
        ("q_norm_weight", buffer),
        ("k_norm_weight", buffer),
    ]


class stream_step_args(_Struct):
    _fields_ = [
        ("frames", c_size),
        ("commit", C.c_int),
        ("q_raw", buffer), ("k_raw", buffer), ("v_raw", buffer),
        ("camera_conditions", buffer),
        ("beta", buffer),
        ("decay", buffer),
        ("y", buffer),
        ("profile", c_profilep),
    ]


# --- packed clips (camdelta_packed.h) ---------------------------------------------------------------------
class packed_clips(_Struct):
    _fields_ = [
        ("frame_offsets", c_i64p),
        ("clip_offsets", c_i64p),
        ("clips", c_size),
        ("tokens", c_size),
        ("native", C.POINTER(C.c_int)),
    ]


# --- state summaries (camdelta_summary.h) -----------------------------------------------------------------
class scan_summary_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size), ("F", c_size), ("S", c_size),
        ("reverse", C.c_int),
        ("k", buffer), ("v", buffer),
        ("beta", buffer),
        ("decay", buffer),
        ("init_state", buffer),
        ("T", buffer),
        ("E", buffer),
        ("profile", c_profilep),
    ]


class scan_grad_summary_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size), ("F", c_size), ("S", c_size),
        ("reverse", C.c_int),
        ("q", buffer), ("k", buffer),
        ("beta", buffer), ("decay", buffer),
        ("grad_out", buffer),
        ("grad_final_state", buffer),
        ("G", buffer),
        ("profile", c_profilep),
    ]


class summary_apply_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size),
        ("transpose", C.c_int),
        ("T", buffer),
        ("E", buffer),
        ("M_in", buffer),
        ("M_out", buffer),
        ("profile", c_profilep),
    ]


class summary_combine_args(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size),
        ("T1", buffer), ("E1", buffer),
        ("T2", buffer), ("E2", buffer),
        ("T", buffer), ("E", buffer),
        ("profile", c_profilep),
    ]


# --- f64 references (camdelta_ref.h) ----------------------------------------------------------------------
class ref_prep(_Struct):
    _fields_ = [
        ("B", c_size), ("N", c_size), ("H", c_size), ("D", c_size),
        ("k_scale", C.c_double), ("norm_eps", C.c_double),
        ("q_raw", c_f64p), ("k_raw", c_f64p), ("v_raw", c_f64p), ("q_norm_weight", c_f64p),
        ("k_norm_weight", c_f64p), ("proj_q", c_f64p), ("proj_kv", c_f64p), ("rope_cos", c_f64p),
        ("rope_sin", c_f64p),
        ("q", c_f64p), ("k", c_f64p), ("v", c_f64p), ("inflation_sq", c_f64p),
    ]


class ref_prep_grads(_Struct):
    _fields_ = [
        ("grad_q", c_f64p), ("grad_k", c_f64p), ("grad_v", c_f64p), ("grad_inflation_sq", c_f64p),
        ("dq_raw", c_f64p), ("dk_raw", c_f64p), ("dv_raw", c_f64p), ("dq_norm_weight", c_f64p),
        ("dk_norm_weight", c_f64p),
        ("dproj_q", c_f64p), ("dproj_kv", c_f64p), ("drope_cos", c_f64p), ("drope_sin", c_f64p),
    ]


class ref_scan(_Struct):
    _fields_ = [
        ("B", c_size), ("H", c_size), ("D", c_size), ("F", c_size), ("S", c_size),
        ("reverse", C.c_int),
        ("q", c_f64p), ("k", c_f64p), ("v", c_f64p), ("beta", c_f64p), ("decay", c_f64p),
        ("init_state", c_f64p),
        ("out", c_f64p),
        ("final_state", c_f64p),
        ("state_pre", c_f64p), ("state_post", c_f64p),
    ]


class ref_scan_grads(_Struct):
    _fields_ = [
        ("grad_out", c_f64p),
        ("grad_final_state", c_f64p),
        ("dq", c_f64p), ("dk", c_f64p), ("dv", c_f64p), ("dbeta", c_f64p), ("ddecay", c_f64p),
        ("dinit_state", c_f64p),
    ]


class ref_scan_packed(_Struct):
    _fields_ = [
        ("H", c_size), ("D", c_size), ("frames", c_size), ("clips", c_size),
        ("frame_offsets", c_i64p),
        ("clip_offsets", c_i64p),
        ("reverse", C.c_int),
        ("q", c_f64p), ("k", c_f64p), ("v", c_f64p), ("beta", c_f64p), ("decay", c_f64p),
        ("init_state", c_f64p),
        ("out", c_f64p),
        ("final_state", c_f64p),
    ]


class ref_camera(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("Hs", c_size), ("Ws", c_size), ("ph", c_size), ("pw", c_size),
        ("D", c_size),
        ("camera_conditions", c_f64p),
        ("proj_q", c_f64p), ("proj_kv", c_f64p), ("proj_o", c_f64p), ("rope_cos", c_f64p), ("rope_sin", c_f64p),
    ]


class ref_conv(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("S", c_size), ("C", c_size),
        ("bounds", c_sizep),
        ("nbounds", c_size),
        ("x", c_f64p), ("w", c_f64p),
        ("y", c_f64p),
        ("dy", c_f64p),
        ("dx", c_f64p), ("dw", c_f64p),
    ]


class ref_branch(_Struct):
    _fields_ = [
        ("B", c_size), ("T", c_size), ("Hs", c_size), ("Ws", c_size), ("ph", c_size), ("pw", c_size),
        ("H", c_size), ("D", c_size),
        ("chunking", chunking),
        ("k_scale", C.c_double), ("norm_eps", C.c_double),
        ("q_raw", c_f64p), ("k_raw", c_f64p), ("v_raw", c_f64p), ("conv_weight", c_f64p),
        ("q_norm_weight", c_f64p), ("k_norm_weight", c_f64p), ("camera_conditions", c_f64p), ("beta", c_f64p),
        ("decay", c_f64p),
        ("y", c_f64p),
    ]


class ref_branch_grads(_Struct):
    _fields_ = [
        ("grad_y", c_f64p),
        ("dq_raw", c_f64p), ("dk_raw", c_f64p), ("dv_raw", c_f64p), ("dconv_weight", c_f64p),
        ("dq_norm_weight", c_f64p), ("dk_norm_weight", c_f64p), ("dbeta", c_f64p), ("ddecay", c_f64p),
    ]


# C typedef name -> ctypes class, for the layout test (every struct typedef of the wrapped headers).
C_NAMES = {
    "camdelta_buffer": buffer,
    "camdelta_profile": profile,
    "camdelta_device_info": device_info,
    "camdelta_build_stats": build_stats,
    "camdelta_cache_entry": cache_entry,
    "camdelta_prep_args": prep_args,
    "camdelta_prep_backward_args": prep_backward_args,
    "camdelta_scan_args": scan_args,
    "camdelta_scan_backward_args": scan_backward_args,
    "camdelta_chunking": chunking,
    "camdelta_camera_args": camera_args,
    "camdelta_short_conv_args": short_conv_args,
    "camdelta_output_transform_args": output_transform_args,
    "camdelta_branch_args": branch_args,
    "camdelta_branch_grads": branch_grads,
    "camdelta_stream_args": stream_args,
    "camdelta_stream_step_args": stream_step_args,
    "camdelta_packed_clips": packed_clips,
    "camdelta_scan_summary_args": scan_summary_args,
    "camdelta_scan_grad_summary_args": scan_grad_summary_args,
    "camdelta_summary_apply_args": summary_apply_args,
    "camdelta_summary_combine_args": summary_combine_args,
    "camdelta_ref_prep": ref_prep,
    "camdelta_ref_prep_grads": ref_prep_grads,
    "camdelta_ref_scan": ref_scan,
    "camdelta_ref_scan_grads": ref_scan_grads,
    "camdelta_ref_scan_packed": ref_scan_packed,
    "camdelta_ref_camera": ref_camera,
    "camdelta_ref_conv": ref_conv,
    "camdelta_ref_branch": ref_branch,
    "camdelta_ref_branch_grads": ref_branch_grads,
}
# The headers whose struct typedefs C_NAMES covers (camdelta_npy.h and camdelta_mpi.h are not wrapped: NumPy
# reads .npy itself, and MPI belongs to the C applications).
HEADERS = ("camdelta.h", "camdelta_packed.h", "camdelta_summary.h", "camdelta_helpers.h", "camdelta_ref.h",
           "camdelta_stream.h")
