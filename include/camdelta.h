/*
 * camdelta — the camera branch of a video diffusion model's linear attention
 * (UCPE single-path delta rule) on any OpenCL device.
 *
 * Conventions
 *  - Every function that can fail returns a camdelta_status. CAMDELTA_OK is 0.
 *    camdelta_status_name() names a status; camdelta_last_message() gives the
 *    human-readable detail of the last failure *on the calling thread*
 *    (which argument, what was expected, the OpenCL error name, the build log).
 *  - Handles are opaque. A camdelta_context owns (or borrows) one OpenCL
 *    context, device and in-order command queue.
 *  - Device buffers are passed as camdelta_buffer: a cl_mem plus an element
 *    offset (in elements of the tensor's dtype, not bytes). A buffer whose
 *    mem is NULL means "absent" for optional tensors.
 *  - Calls enqueue work on the context's queue and return without waiting,
 *    unless a profile is requested. Bad input is rejected before anything is
 *    enqueued: nothing is written.
 *  - Thread safety: one camdelta_context may be used from several threads at
 *    once. Programs are built once per context under a lock; each call
 *    creates its own cl_kernel objects, so no kernel argument is shared
 *    between threads. Work from several threads is serialised by the
 *    context's in-order queue.
 */
#ifndef CAMDELTA_H
#define CAMDELTA_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(CAMDELTA_SHARED_BUILD)
#define CAMDELTA_API __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define CAMDELTA_API __attribute__((visibility("default")))
#else
#define CAMDELTA_API
#endif

/* ------------------------------------------------------------------ version */
#define CAMDELTA_VERSION_MAJOR 0
#define CAMDELTA_VERSION_MINOR 1
#define CAMDELTA_VERSION_PATCH 0
#define CAMDELTA_VERSION_NUMBER \
  (CAMDELTA_VERSION_MAJOR * 10000 + CAMDELTA_VERSION_MINOR * 100 + CAMDELTA_VERSION_PATCH)
#define CAMDELTA_STR_(x) #x
#define CAMDELTA_STR(x) CAMDELTA_STR_(x)
#define CAMDELTA_VERSION_STRING \
  CAMDELTA_STR(CAMDELTA_VERSION_MAJOR) "." CAMDELTA_STR(CAMDELTA_VERSION_MINOR) "." CAMDELTA_STR(CAMDELTA_VERSION_PATCH)

/** Run-time version: CAMDELTA_VERSION_NUMBER of the library actually linked. */
CAMDELTA_API unsigned camdelta_version_number(void);
CAMDELTA_API const char *camdelta_version_string(void);

/* ------------------------------------------------------------------- status */
typedef enum camdelta_status {
  CAMDELTA_OK = 0,
  CAMDELTA_ERROR_INVALID_ARGUMENT = 1, /* NULL handle/buffer, bad value      */
  CAMDELTA_ERROR_SHAPE = 2,            /* shapes that do not fit together    */
  CAMDELTA_ERROR_UNSUPPORTED = 3,      /* dtype, D out of range, ...         */
  CAMDELTA_ERROR_BUFFER_TOO_SMALL = 4, /* cl_mem smaller than shape+offset   */
  CAMDELTA_ERROR_OVERFLOW = 5,         /* sizes overflow size_t              */
  CAMDELTA_ERROR_OUT_OF_MEMORY = 6,
  CAMDELTA_ERROR_DEVICE_NOT_FOUND = 7,
  CAMDELTA_ERROR_OPENCL = 8,           /* an OpenCL call failed              */
  CAMDELTA_ERROR_BUILD = 9,            /* kernel build failed (log in msg)   */
  CAMDELTA_ERROR_IO = 10,              /* file could not be read/written     */
  CAMDELTA_ERROR_FORMAT = 11           /* malformed file (e.g. .npy header)  */
} camdelta_status;

CAMDELTA_API const char *camdelta_status_name(camdelta_status status);
/** 1 when status is an error. */
CAMDELTA_API int camdelta_is_error(camdelta_status status);
/** Detail of the last failure on this thread ("" when none). Valid until the
 *  next camdelta call on this thread. */
CAMDELTA_API const char *camdelta_last_message(void);
/** Name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
CAMDELTA_API const char *camdelta_cl_error_name(cl_int err);

/* -------------------------------------------------------------------- types */
typedef enum camdelta_dtype {
  CAMDELTA_F32 = 0,
  CAMDELTA_F16 = 1,
  CAMDELTA_BF16 = 2 /* 16-bit storage, converted in the kernel */
} camdelta_dtype;

CAMDELTA_API const char *camdelta_dtype_name(camdelta_dtype dtype);
/** Bytes per element, 0 for an unknown dtype. */
CAMDELTA_API size_t camdelta_dtype_size(camdelta_dtype dtype);

typedef struct camdelta_buffer {
  cl_mem mem;    /* NULL = absent (for optional tensors) */
  size_t offset; /* in elements */
} camdelta_buffer;

/** Kernel time of one call, filled when a profile is requested: the call then
 *  waits for its kernels. Needs a queue with CL_QUEUE_PROFILING_ENABLE (a
 *  context created by camdelta has one). */
typedef struct camdelta_profile {
  double kernel_ms;  /* sum over the call's kernels (end - start)   */
  unsigned kernels;  /* number of kernels enqueued                  */
} camdelta_profile;

/* ------------------------------------------------------------------ context */
typedef struct camdelta_context camdelta_context;

/** Create a context on the device chosen by `selector`; NULL means the
 *  environment variable CAMDELTA_DEVICE, else the first GPU, else the first
 *  device. Selector syntax: "P:D" (platform and device index), a device type
 *  ("gpu", "cpu", "accelerator"), or a case-insensitive substring of the
 *  platform name/vendor or device name/vendor. */
CAMDELTA_API camdelta_status camdelta_context_create(camdelta_context **out, const char *selector);

/** Borrow an application's OpenCL context and in-order queue: camdelta
 *  enqueues its work there and releases nothing it did not retain. */
CAMDELTA_API camdelta_status camdelta_context_create_from_queue(camdelta_context **out,
                                                                cl_context context,
                                                                cl_command_queue queue);
CAMDELTA_API void camdelta_context_destroy(camdelta_context *ctx);

CAMDELTA_API cl_context camdelta_context_cl_context(const camdelta_context *ctx);
CAMDELTA_API cl_command_queue camdelta_context_queue(const camdelta_context *ctx);
CAMDELTA_API cl_device_id camdelta_context_device(const camdelta_context *ctx);

typedef struct camdelta_device_info {
  char platform_name[128];
  char platform_version[128];
  char device_name[128];
  char device_vendor[128];
  char device_version[128];
  char driver_version[128];
  cl_device_type type;
  size_t max_work_group_size;
  uint64_t local_mem_bytes;
  uint64_t global_mem_bytes;
  unsigned compute_units;
  int nvidia_ptx; /* 1 when NVIDIA inline-PTX fast paths are available */
} camdelta_device_info;
CAMDELTA_API camdelta_status camdelta_context_info(const camdelta_context *ctx, camdelta_device_info *info);

/** Wait until all work enqueued through this context has finished. */
CAMDELTA_API camdelta_status camdelta_finish(camdelta_context *ctx);

/** Build (or load from the disk cache) the programs that depend only on the
 *  head dim — prep forward and backward in every dtype, scan backward — for
 *  D = 8, 16, ..., 128. The scan forward's tiles also depend on B*H and S:
 *  camdelta_warm_shape builds everything a given shape uses, so that calls
 *  with that shape never compile (e.g. in a deployment image). */
CAMDELTA_API camdelta_status camdelta_warm(camdelta_context *ctx);
CAMDELTA_API camdelta_status camdelta_warm_shape(camdelta_context *ctx, size_t B, size_t H, size_t D, size_t S);

/** Statistics of program builds in this context. */
typedef struct camdelta_build_stats {
  unsigned programs;         /* programs obtained so far                    */
  unsigned from_disk;        /* of which loaded from the disk cache         */
  unsigned compiled;         /* of which compiled from source               */
  int last_from_disk;        /* 1 when the most recent one came from disk   */
  double last_setup_ms;      /* wall time of the most recent build or load  */
} camdelta_build_stats;
CAMDELTA_API camdelta_status camdelta_context_build_stats(const camdelta_context *ctx, camdelta_build_stats *stats);

/** The disk cache folder in use ("" when caching is off). */
CAMDELTA_API camdelta_status camdelta_cache_dir(char *buf, size_t size);

/* ------------------------------------------------------------- prep forward */
typedef struct camdelta_prep_args {
  size_t B, N, H, D;
  camdelta_dtype dtype; /* of q_raw, k_raw, v_raw and of q, k, v */
  float k_scale;        /* typically D^-0.5 * S^-0.5 */
  float norm_eps;       /* typically 1e-6 */
  /* inputs */
  camdelta_buffer q_raw, k_raw, v_raw;     /* (B, N, H, D) dtype */
  camdelta_buffer q_norm_weight;           /* (C,) f32, C = H*D  */
  camdelta_buffer k_norm_weight;           /* (C,) f32           */
  camdelta_buffer proj_q, proj_kv;         /* (B, N, 4, 4) f32   */
  camdelta_buffer rope_cos, rope_sin;      /* (N, D/2) f32       */
  /* outputs */
  camdelta_buffer q, k, v;                 /* (B, H, D, N) dtype */
  camdelta_buffer inflation_sq;            /* (B, H, N) f32      */
  camdelta_profile *profile;               /* optional           */
} camdelta_prep_args;

/** What a prep backward needs from its forward (inverse RMS values, norm
 *  sums). Owned by the caller; device memory inside is released by destroy. */
typedef struct camdelta_prep_saved camdelta_prep_saved;
CAMDELTA_API camdelta_status camdelta_prep_saved_create(camdelta_context *ctx, camdelta_prep_saved **out);
CAMDELTA_API void camdelta_prep_saved_destroy(camdelta_prep_saved *saved);

/** Prep forward (SPEC section 2). `saved` may be NULL (inference). */
CAMDELTA_API camdelta_status camdelta_prep_forward(camdelta_context *ctx, const camdelta_prep_args *args,
                                                   camdelta_prep_saved *saved);

/* ------------------------------------------------------------ prep backward */
typedef struct camdelta_prep_backward_args {
  size_t B, N, H, D;
  camdelta_dtype dtype;
  float k_scale, norm_eps;
  /* forward inputs */
  camdelta_buffer q_raw, k_raw, v_raw, q_norm_weight, k_norm_weight, proj_q, proj_kv, rope_cos, rope_sin;
  /* upstream gradients, each optional (absent = zero) */
  camdelta_buffer grad_q, grad_k, grad_v; /* (B, H, D, N) dtype */
  camdelta_buffer grad_inflation_sq;      /* (B, H, N) f32      */
  /* outputs */
  camdelta_buffer dq_raw, dk_raw, dv_raw;        /* (B, N, H, D) dtype */
  camdelta_buffer dq_norm_weight, dk_norm_weight; /* (C,) f32          */
  /* optional outputs */
  camdelta_buffer dproj_q, dproj_kv;   /* (B, N, 4, 4) f32 */
  camdelta_buffer drope_cos, drope_sin; /* (N, D/2) f32     */
  camdelta_profile *profile;
} camdelta_prep_backward_args;

/** Prep backward (SPEC section 4). `saved` from the matching forward, or
 *  NULL to recompute what is needed. Deterministic. */
CAMDELTA_API camdelta_status camdelta_prep_backward(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                                    const camdelta_prep_saved *saved);

/* ------------------------------------------------------------- scan forward */
typedef enum camdelta_scan_algorithm {
  CAMDELTA_SCAN_AUTO = 0,
  CAMDELTA_SCAN_SEQUENTIAL = 1,
  CAMDELTA_SCAN_CHUNKWISE = 2
} camdelta_scan_algorithm;

CAMDELTA_API const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm);

/** Arithmetic of the scan and its backward (SPEC section 10). */
typedef enum camdelta_precision {
  CAMDELTA_PRECISION_EXACT = 0, /* default: the f32 bounds of SPEC section 5 (FMA, or split-TF32 tensor cores) */
  CAMDELTA_PRECISION_TF32 = 1   /* opt-in: one TF32 product on tensor cores (about 1e-3); as exact elsewhere */
} camdelta_precision;
CAMDELTA_API const char *camdelta_precision_name(camdelta_precision precision);

typedef struct camdelta_scan_args {
  size_t B, H, D, F, S; /* N = F * S */
  int reverse;
  camdelta_scan_algorithm algorithm;
  camdelta_buffer q, k, v;     /* (B, H, D, N) f32 */
  camdelta_buffer beta;        /* (B, H, F, S) f32 */
  camdelta_buffer decay;       /* (B, H, F) f32    */
  camdelta_buffer out;         /* (B, H, D, N) f32 */
  camdelta_buffer init_state;  /* optional (B, H, D, D) f32 */
  camdelta_buffer final_state; /* optional (B, H, D, D) f32 */
  camdelta_profile *profile;
  camdelta_scan_algorithm *used; /* optional: receives the algorithm run */
  camdelta_precision precision;  /* 0 = CAMDELTA_PRECISION_EXACT */
} camdelta_scan_args;

/** Per-frame states (state_pre / state_post, (B, H, F, D, D)) kept by a
 *  forward for its backward. */
typedef struct camdelta_scan_saved camdelta_scan_saved;
CAMDELTA_API camdelta_status camdelta_scan_saved_create(camdelta_context *ctx, camdelta_scan_saved **out);
CAMDELTA_API void camdelta_scan_saved_destroy(camdelta_scan_saved *saved);
/** The saved (B, H, F, D, D) buffers (valid after a forward with this object). */
CAMDELTA_API camdelta_status camdelta_scan_saved_states(const camdelta_scan_saved *saved, cl_mem *state_pre,
                                                        cl_mem *state_post);

/** Scan forward (SPEC section 3). `saved` may be NULL. */
CAMDELTA_API camdelta_status camdelta_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                                   camdelta_scan_saved *saved);

/** Tile parameters of the scan's tensor-core kernel families on this context (CLBlast's OverrideParameters
 *  as the model): family "gram" (phase A; the backward's W, A, U), "apply" (phase C; the backward's dq) or
 *  "frames" (the backward's per-token kernel); params "WM=2,WN=2,MR=2,NR=4,KC=32" (warps along rows and
 *  columns, 16-row and 8-column mma tiles per warp, reduction chunk), keys not given keep their default;
 *  NULL or "" restores the defaults (the device table, a `camdelta tune --save` entry, or the heuristics).
 *  Later calls plan with them; camdelta_scan_plan_describe shows them. Checked against each kernel's
 *  constraints and the device's limits when a call builds its kernels. */
CAMDELTA_API camdelta_status camdelta_tune_set(camdelta_context *ctx, const char *family, const char *params);
/** The tiles `family` uses on this context for head dim D, as "WM=.. WN=.. MR=.. NR=.. KC=.." plus where they
 *  come from (override, saved, table or heuristic). */
CAMDELTA_API camdelta_status camdelta_tune_get(camdelta_context *ctx, const char *family, size_t D, char *buf,
                                               size_t size);

/** Stores the tiles the three families use now for head dim D (overrides included) as this device's entry for
 *  D in the cache folder (`camdelta tune --save`); contexts created afterwards pick it up. *path (optional)
 *  receives the file's name. */
CAMDELTA_API camdelta_status camdelta_tune_save(camdelta_context *ctx, size_t D, char *path, size_t path_size);

/** What camdelta_scan_forward would run for `args` (only the shape, direction, algorithm and precision
 *  fields are read; buffers may be absent): one line naming the algorithm, each kernel with its path
 *  (fma or tensor-core exact/tf32) and tiles, e.g. "chunkwise; precision exact (tensor cores); phase_a
 *  gram_tc WM=2 ...". Builds the kernels if needed. Fails when `size` is too small. */
CAMDELTA_API camdelta_status camdelta_scan_plan_describe(camdelta_context *ctx, const camdelta_scan_args *args,
                                                         char *buf, size_t size);

/* ------------------------------------------------------------ scan backward */
typedef struct camdelta_scan_backward_args {
  size_t B, H, D, F, S;
  int reverse;
  camdelta_buffer q, k, v, beta, decay;  /* forward inputs */
  camdelta_buffer init_state;            /* optional: as given to the forward */
  camdelta_buffer grad_out;              /* (B, H, D, N) f32 */
  camdelta_buffer grad_final_state;      /* optional (B, H, D, D) */
  camdelta_buffer dq, dk, dv;            /* (B, H, D, N) f32 */
  camdelta_buffer dbeta;                 /* (B, H, F, S) f32 */
  camdelta_buffer ddecay;                /* (B, H, F) f32    */
  camdelta_buffer dinit_state;           /* optional (B, H, D, D) */
  camdelta_profile *profile;
  camdelta_precision precision;          /* 0 = CAMDELTA_PRECISION_EXACT */
} camdelta_scan_backward_args;

/** Scan backward (SPEC section 4). `saved` from the matching forward, or NULL
 *  to recompute the forward states first. */
CAMDELTA_API camdelta_status camdelta_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                                    const camdelta_scan_saved *saved);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_H */
