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
 *    unless a profile is requested. Every operation first checks all of its
 *    arguments (handles, shapes, that every cl_mem belongs to the context's
 *    cl_context and is large enough, that outputs overlap nothing, that a
 *    profile request has a profiling queue) and builds its kernels; only then
 *    does it enqueue anything. Bad input is rejected with nothing enqueued and
 *    nothing written.
 *  - Waiting from another queue: camdelta_enqueue_marker() returns an event
 *    that completes when all work enqueued so far through the context has
 *    finished.
 *  - Argument structs are passed as `const T *`: the struct itself is never
 *    modified, but the device memory behind its output camdelta_buffers (and
 *    the optional `profile` / `used` pointers) is written through. A struct
 *    zero-initialised with its CAMDELTA_*_ARGS_INIT macro has every optional
 *    tensor absent, no profile, dtype CAMDELTA_F32, the causal direction and
 *    the automatic scan algorithm; the sizes, k_scale and norm_eps have no
 *    default (0 is rejected, or taken literally for norm_eps).
 *  - Thread safety: one camdelta_context may be used from several threads at
 *    once. Programs are built once per context under the context's lock.
 *    The scan operations and the camera branch keep a plan per shape class
 *    in the context (its kernels and scratch memory, made on the first call
 *    and reused): a call holds its plan's own lock while it sets the
 *    kernels' arguments and enqueues, so calls of one plan from several
 *    threads take turns on the host; the other operations create their
 *    kernel objects per call. A plan's scratch memory stays allocated, grown
 *    to the largest call, until the context is destroyed or
 *    camdelta_tune_set drops the plans. camdelta_tune_set may run beside
 *    calls: calls holding a plan finish with it, later calls plan anew. Work
 *    from several threads is ordered by the context's one in-order queue. A
 *    saved object and a profile belong to one call at a time;
 *    camdelta_last_message() is per thread.
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

/* Windows: the DLL exports its API; consumers of the DLL import it (define
 * CAMDELTA_STATIC when linking the static library instead; the CMake target
 * camdelta::camdelta_static does so). */
#if defined(_WIN32) && defined(CAMDELTA_SHARED_BUILD)
#define CAMDELTA_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(CAMDELTA_STATIC)
#define CAMDELTA_API __declspec(dllimport)
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

/** Run-time version: CAMDELTA_VERSION_NUMBER of the library actually linked
 *  (never fails). */
CAMDELTA_API unsigned camdelta_version_number(void);
/** "MAJOR.MINOR.PATCH" of the library actually linked (static storage; never fails). */
CAMDELTA_API const char *camdelta_version_string(void);

/* Head dims the operations accept: a multiple of CAMDELTA_HEAD_DIM_MULTIPLE
 * in [CAMDELTA_MIN_HEAD_DIM, CAMDELTA_MAX_HEAD_DIM]; anything else is
 * CAMDELTA_ERROR_UNSUPPORTED. */
#define CAMDELTA_MIN_HEAD_DIM 8
#define CAMDELTA_MAX_HEAD_DIM 128
#define CAMDELTA_HEAD_DIM_MULTIPLE 8

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

/** Name of a status, e.g. "CAMDELTA_ERROR_SHAPE" ("CAMDELTA_ERROR_UNKNOWN"
 *  for a value that is none; static storage; never fails). */
CAMDELTA_API const char *camdelta_status_name(camdelta_status status);
/** 1 when status is an error, 0 for CAMDELTA_OK. */
CAMDELTA_API int camdelta_is_error(camdelta_status status);
/** Detail of the last failure on this thread ("" when none). Valid until the
 *  next camdelta call on this thread. */
CAMDELTA_API const char *camdelta_last_message(void);
/** Name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES" (static storage;
 *  a generic name for an unknown code; never fails). */
CAMDELTA_API const char *camdelta_cl_error_name(cl_int err);

/* -------------------------------------------------------------------- types */
typedef enum camdelta_dtype {
  CAMDELTA_F32 = 0,
  CAMDELTA_F16 = 1,
  CAMDELTA_BF16 = 2 /* 16-bit storage, converted in the kernel */
} camdelta_dtype;

/** "f32", "f16", "bf16", or "unknown" (never fails). */
CAMDELTA_API const char *camdelta_dtype_name(camdelta_dtype dtype);
/** Bytes per element, 0 for an unknown dtype. */
CAMDELTA_API size_t camdelta_dtype_size(camdelta_dtype dtype);

typedef struct camdelta_buffer {
  cl_mem mem;    /* NULL = absent (for optional tensors) */
  size_t offset; /* in elements */
} camdelta_buffer;

/** Kernel time of one call, filled when a profile is requested: the call then
 *  waits for its kernels. Needs a queue with CL_QUEUE_PROFILING_ENABLE (a
 *  context created by camdelta has one). Where the driver gives no kernel
 *  times (its profiling timer has no resolution: Mesa's Rusticl), kernel_ms
 *  is NaN, never a made-up 0: time the call on the host around
 *  camdelta_finish instead (as `camdelta bench` and the demo then do). */
typedef struct camdelta_profile {
  double kernel_ms;  /* sum over the call's kernels and device copies (end - start), or NaN */
  unsigned kernels;  /* number of kernels enqueued                  */
} camdelta_profile;

/* ------------------------------------------------------------------ context */
typedef struct camdelta_context camdelta_context;

/** Create a context on the device chosen by `selector`; NULL means the
 *  environment variable CAMDELTA_DEVICE, else the first GPU, else the first
 *  device. Selector syntax: "P:D" (platform and device index), a device type
 *  ("gpu", "cpu", "accelerator"), or a case-insensitive substring of the
 *  platform name/vendor or device name/vendor.
 *  Returns CAMDELTA_OK and *out; INVALID_ARGUMENT (out NULL, malformed
 *  selector), DEVICE_NOT_FOUND (nothing matches: the message lists the
 *  devices), OPENCL or OUT_OF_MEMORY. *out is NULL on failure. */
CAMDELTA_API camdelta_status camdelta_context_create(camdelta_context **out, const char *selector);

/** Borrow an application's OpenCL context and in-order queue: camdelta
 *  enqueues its work there and releases nothing it did not retain.
 *  Returns CAMDELTA_OK and *out; INVALID_ARGUMENT (NULL handle, a queue of
 *  another context, an out-of-order queue), OPENCL or OUT_OF_MEMORY. A queue
 *  without CL_QUEUE_PROFILING_ENABLE works; only profile requests are then
 *  rejected. */
CAMDELTA_API camdelta_status camdelta_context_create_from_queue(camdelta_context **out,
                                                                cl_context context,
                                                                cl_command_queue queue);
/** Waits for the context's queue, then releases everything camdelta created
 *  or retained. NULL is a no-op. */
CAMDELTA_API void camdelta_context_destroy(camdelta_context *ctx);

/** The context's OpenCL objects (not retained for the caller; NULL for a NULL
 *  ctx). Buffers passed to the operations must belong to this cl_context. */
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
/** Copies the device's description. Returns CAMDELTA_OK, or INVALID_ARGUMENT
 *  for a NULL argument. */
CAMDELTA_API camdelta_status camdelta_context_info(const camdelta_context *ctx, camdelta_device_info *info);

/** Wait until all work enqueued through this context has finished.
 *  Returns CAMDELTA_OK, INVALID_ARGUMENT (NULL ctx) or OPENCL (an enqueued
 *  kernel failed). */
CAMDELTA_API camdelta_status camdelta_finish(camdelta_context *ctx);

/** An event that completes when every command enqueued so far through this
 *  context has finished (a marker on the context's in-order queue), so an
 *  application can wait on another queue (clEnqueueWaitForEvents, or an event
 *  wait list) or on the host (clWaitForEvents) without a camdelta_finish.
 *  The context's queue is flushed (OpenCL requires that before another queue
 *  waits on one of its events). The caller releases *event with clReleaseEvent.
 *  Returns CAMDELTA_OK and *event; INVALID_ARGUMENT (NULL argument) or OPENCL
 *  (*event is then NULL). */
CAMDELTA_API camdelta_status camdelta_enqueue_marker(camdelta_context *ctx, cl_event *event);

/** Build (or load from the disk cache) the programs that depend only on the
 *  head dim — prep forward and backward in every dtype, scan backward — for
 *  D = 8, 16, ..., 128. The scan forward's tiles also depend on B*H and S:
 *  camdelta_warm_shape builds everything a given shape uses, so that calls
 *  with that shape never compile (e.g. in a deployment image).
 *  Return CAMDELTA_OK; INVALID_ARGUMENT (NULL ctx), UNSUPPORTED (head dim),
 *  SHAPE (a zero size), OVERFLOW, BUILD (with the log), OPENCL, IO (a kernel
 *  file from CAMDELTA_KERNEL_DIR missing). */
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
/** Returns CAMDELTA_OK, or INVALID_ARGUMENT for a NULL argument. */
CAMDELTA_API camdelta_status camdelta_context_build_stats(const camdelta_context *ctx, camdelta_build_stats *stats);

/** The disk cache folder ("" when caching is off): CAMDELTA_CACHE_DIR, else
 *  $XDG_CACHE_HOME/camdelta, else ~/.cache/camdelta. The library uses it only
 *  when it is a real folder owned by the user and not writable by group or
 *  others, whose parents are owned by root or the user and not writable by
 *  group or others (sticky folders such as /tmp excepted); a missing one is
 *  created 0700. camdelta changes the mode of no folder: a shared folder with
 *  the sticky bit (such as /tmp itself), owned by root or the user, is used
 *  through its private subfolder camdelta-<uid> (and this call names that
 *  subfolder). Otherwise every call runs uncached and one warning (control
 *  bytes escaped) goes to stderr.
 *  Returns CAMDELTA_OK, or INVALID_ARGUMENT (buf NULL or too small). */
CAMDELTA_API camdelta_status camdelta_cache_dir(char *buf, size_t size);

/** One file of the cache folder, as camdelta_cache_list() found it. */
typedef enum camdelta_cache_state {
  CAMDELTA_CACHE_ENTRY_OK = 0,      /* verifies: it would be loaded          */
  CAMDELTA_CACHE_ENTRY_CORRUPT = 1, /* would be discarded and rebuilt         */
  CAMDELTA_CACHE_ENTRY_PARTIAL = 2  /* a temporary file of an unfinished write */
} camdelta_cache_state;
typedef struct camdelta_cache_entry {
  char file[96];      /* file name inside the folder                       */
  char device[65];    /* device it was built for ("" unless state is OK)    */
  uint64_t bytes;     /* file size                                         */
  int64_t mtime;      /* modification time, seconds since the Unix epoch   */
  camdelta_cache_state state;
} camdelta_cache_entry;
/** The cache's files (only camdelta's own: <key>.clbin and their temporary
 *  files), newest first, each fully verified as a load would. *entries is
 *  malloc'd (free with camdelta_cache_list_free); none when caching is off or
 *  the folder does not exist yet. Returns CAMDELTA_OK; INVALID_ARGUMENT (NULL
 *  argument), IO (the folder is refused as unsafe, or cannot be read; the
 *  message says why) or OUT_OF_MEMORY. */
CAMDELTA_API camdelta_status camdelta_cache_list(camdelta_cache_entry **entries, size_t *count);
CAMDELTA_API void camdelta_cache_list_free(camdelta_cache_entry *entries);
/** Removes camdelta's own files from the cache folder (nothing else).
 *  removed / bytes (each optional) count them. Returns CAMDELTA_OK or IO. */
CAMDELTA_API camdelta_status camdelta_cache_clear(size_t *removed, uint64_t *bytes);

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
/** All-zero initialiser: see the conventions at the top of this file. */
#define CAMDELTA_PREP_ARGS_INIT {0}

/** What a prep backward needs from its forward (inverse RMS values, norm
 *  sums). Owned by the caller; device memory inside is released by destroy.
 *  create returns CAMDELTA_OK, INVALID_ARGUMENT (NULL argument) or
 *  OUT_OF_MEMORY; destroy of NULL is a no-op. */
typedef struct camdelta_prep_saved camdelta_prep_saved;
CAMDELTA_API camdelta_status camdelta_prep_saved_create(camdelta_context *ctx, camdelta_prep_saved **out);
CAMDELTA_API void camdelta_prep_saved_destroy(camdelta_prep_saved *saved);

/* Every operation below returns CAMDELTA_OK once its kernels are enqueued
 * (finished, when a profile is requested), or, with nothing enqueued:
 * INVALID_ARGUMENT (NULL ctx/args, a required buffer absent, a cl_mem that is
 * not valid or belongs to another cl_context, overlapping outputs, a `saved`
 * object of another context, a profile request on a queue without
 * profiling, a non-finite scalar), SHAPE (zero or inconsistent sizes),
 * UNSUPPORTED (dtype, head dim outside CAMDELTA_MIN/MAX_HEAD_DIM, sizes past
 * the kernels' limits), BUFFER_TOO_SMALL, OVERFLOW (sizes overflow size_t),
 * BUILD (kernel build, with the log), IO (CAMDELTA_KERNEL_DIR file missing);
 * or, from the device: OPENCL / OUT_OF_MEMORY. */

/** Prep forward (docs/math.md §2). `saved` may be NULL (inference). */
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
  /* optional inputs, all three or none: the matching forward's outputs,
   * unchanged since it wrote them. With `saved`, f32 storage and the
   * two-pass form (GPUs), the RMSNorm sums are read from them along the
   * tokens instead of being recomputed from q_raw and k_raw across the
   * channels (faster; the same results within f32 rounding, except that a
   * head's pre-transform sum of squares within 1e-6 relative above the
   * 1e-12 clamp counts as clamped); otherwise they are not read. */
  camdelta_buffer q, k;         /* (B, H, D, N) dtype */
  camdelta_buffer inflation_sq; /* (B, H, N) f32      */
} camdelta_prep_backward_args;
#define CAMDELTA_PREP_BACKWARD_ARGS_INIT {0}

/** Prep backward (docs/math.md §4). `saved` from the matching forward, or
 *  NULL to recompute what is needed. Deterministic. */
CAMDELTA_API camdelta_status camdelta_prep_backward(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                                    const camdelta_prep_saved *saved);

/* ------------------------------------------------------------- scan forward */
typedef enum camdelta_scan_algorithm {
  CAMDELTA_SCAN_AUTO = 0,
  CAMDELTA_SCAN_SEQUENTIAL = 1,
  CAMDELTA_SCAN_CHUNKWISE = 2
} camdelta_scan_algorithm;

/** "auto", "sequential", "chunkwise", or "unknown" (never fails). */
CAMDELTA_API const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm);

/** Arithmetic of the scan and its backward (docs/math.md §10). */
typedef enum camdelta_precision {
  CAMDELTA_PRECISION_EXACT = 0, /* default: the f32 bounds of docs/math.md §5 (FMA, or split-TF32 tensor cores) */
  CAMDELTA_PRECISION_TF32 = 1   /* opt-in: one TF32 product on tensor cores (about 1e-3); as exact elsewhere */
} camdelta_precision;
/** "exact", "tf32", or "unknown" (static storage; never fails). */
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
#define CAMDELTA_SCAN_ARGS_INIT {0}

/** Per-frame states (state_pre / state_post, (B, H, F, D, D)) kept by a
 *  forward for its backward; a chunkwise forward also keeps its per-frame
 *  A_f = d_f·(I − K_fᵀβ_fK_f) (one more (B, H, F, D, D) f32 buffer), which
 *  the backward then reads instead of computing it again. create returns CAMDELTA_OK, INVALID_ARGUMENT or
 *  OUT_OF_MEMORY; destroy of NULL is a no-op; states returns CAMDELTA_OK, or
 *  INVALID_ARGUMENT when `saved` is NULL or holds nothing yet. */
typedef struct camdelta_scan_saved camdelta_scan_saved;
CAMDELTA_API camdelta_status camdelta_scan_saved_create(camdelta_context *ctx, camdelta_scan_saved **out);
CAMDELTA_API void camdelta_scan_saved_destroy(camdelta_scan_saved *saved);
/** The saved (B, H, F, D, D) buffers (valid after a forward with this object). */
CAMDELTA_API camdelta_status camdelta_scan_saved_states(const camdelta_scan_saved *saved, cl_mem *state_pre,
                                                        cl_mem *state_post);

/** Scan forward (docs/math.md §3). `saved` may be NULL. */
CAMDELTA_API camdelta_status camdelta_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                                   camdelta_scan_saved *saved);

/** Tuning of one family of knobs on this context (CLBlast's OverrideParameters as the model). docs/tuning.md lists
 *  the families of the option registry with their keys, allowed values and defaults (e.g. "conv": "SB=4"): params
 *  "KEY=V,KEY=V" replaces the family's values for this context, over the environment's (keys not given return to
 *  their defaults; NULL or "" restores every default); a key or value outside the declared ones fails naming the
 *  family and the key, and changes nothing.
 *  Tile parameters of the scan's tensor-core kernel families: family "gram" (phase A; the backward's W, A, U),
 *  "apply" (phase C; the backward's dq) or "frames" (the backward's per-token kernel); params "WM=2,WN=2,MR=2,NR=4,KC=32" (warps along rows and
 *  columns, 16-row and 8-column mma tiles per warp, reduction chunk), keys not given keep their default;
 *  NULL or "" restores the defaults (the device table, a `camdelta tune --save` entry, or the heuristics).
 *  Later calls plan with them; camdelta_scan_plan_describe shows them. Checked against each kernel's
 *  constraints and the device's limits when a call builds its kernels.
 *  The FMA kernels have three more families, with the keys and meaning of the environment variables they
 *  replace for this context: "chunkwise" (CAMDELTA_SCAN_TILES: A_WR A_RM A_WC A_RN A_KC B_J B_WR B_RM B_WC B_RN
 *  B_KC B_PF C_WR C_RM C_WC C_RN C_KC), "backward" (CAMDELTA_SCAN_BWD_TILES: RPT TSG CB DPT TL TPT MC RL CR) and
 *  "sequential" (CAMDELTA_SEQ_TILES: J value columns per work-group, TS tokens per tile, W items); NULL or
 *  "" there restores the heuristics (also over the environment's value). Any change drops the plans the
 *  context keeps, so the next call plans anew. Returns CAMDELTA_OK; INVALID_ARGUMENT (ctx NULL, unknown family,
 *  params that do not parse). */
CAMDELTA_API camdelta_status camdelta_tune_set(camdelta_context *ctx, const char *family, const char *params);
/** The values a family of the option registry uses on this context, as "KEY=V KEY=V ...", each value set by the
 *  environment or camdelta_tune_set followed by its source in parentheses (e.g. "SB=3 (camdelta_tune_set)"), a
 *  default that differs by storage as "8 (16-bit: 16)", and "auto" where the operation decides per call.
 *  The tiles a scan `family` uses on this context for head dim D, as "WM=.. WN=.. MR=.. NR=.. KC=.." plus where they
 *  come from (override, saved, table or heuristic). The tensor-core families report the `exact` precision's tiles
 *  (the device table may hold a `tf32` entry of its own; camdelta_scan_plan_describe shows the tiles of either).
 *  "backward": "RPT=.. TSG=.. CB=.. DPT=.. TL=.. TPT=.. MC=.. RL=.. (override|heuristic)" (before any shrinking
 *  for a compiled kernel's own work-group limit); "chunkwise" and "sequential": the override and its source, or a
 *  note that the heuristic tiles follow B*H and S (camdelta_scan_plan_describe shows them). */
CAMDELTA_API camdelta_status camdelta_tune_get(camdelta_context *ctx, const char *family, size_t D, char *buf,
                                               size_t size);

/** Stores the tiles the three families use now for head dim D (overrides included) as this device's entry for
 *  D in the cache folder (`camdelta tune --save`); contexts created afterwards pick it up, in both precisions.
 *  The file (tune-<device>.txt) is read and written under the cache folder's rules (camdelta_cache_dir): a
 *  regular file owned by the user, never through a link, replaced atomically; a file that breaks a rule or does
 *  not parse is ignored by readers (one warning on stderr) and replaced by the next save. *path (optional)
 *  receives the file's name. Returns CAMDELTA_OK; INVALID_ARGUMENT, UNSUPPORTED (head dim) or IO (caching off,
 *  the folder refused, the file not written; the message says why). */
CAMDELTA_API camdelta_status camdelta_tune_save(camdelta_context *ctx, size_t D, char *path, size_t path_size);

/** What camdelta_scan_forward would run for `args` (only the shape, direction, algorithm and precision
 *  fields are read; buffers may be absent): one line naming the algorithm, each kernel with its path
 *  (fma or tensor-core exact/tf32) and tiles, e.g. "chunkwise; precision exact (tensor cores); phase_a
 *  gram_tc WM=2 ...", ending with both algorithms' estimated costs and the choice, e.g. "; auto: chunkwise
 *  (est. 2.3 ms) over sequential (est. 11.4 ms)" (or "... forced by the caller ..." when `algorithm` is
 *  given). Builds the kernels if needed. Fails when `size` is too small. */
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
#define CAMDELTA_SCAN_BACKWARD_ARGS_INIT {0}

/** Scan backward (docs/math.md §4). `saved` from the matching forward, or NULL
 *  to recompute the forward states first. */
CAMDELTA_API camdelta_status camdelta_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                                    const camdelta_scan_saved *saved);

/** What camdelta_scan_backward would run for `args` (only B, H, D, F, S, precision and the buffers' offsets are
 *  read; buffers may be absent), as one line: "backward; precision <path>" then each kernel with its path (fma,
 *  or gram_tc / frames_tc / apply_tc on the tensor-core path), work-group size and tiles, e.g. "backward;
 *  precision exact (fma); grams fma W=196 RPT=8 TSG=32; chain fma W=112 CB=8; frames fma W=224 DPT=16 TL=32
 *  TPT=2 MC=16; ddecay fma RL=256", with " (tiles overridden)" when CAMDELTA_SCAN_BWD_TILES or camdelta_tune_set
 *  "backward" gave them. Builds the plan (and its kernels) if this context has none for the shape yet; the call
 *  then runs exactly that plan. Returns CAMDELTA_OK; INVALID_ARGUMENT (ctx, args or buf NULL, an unknown
 *  precision, `size` too small for the line, or a tile override that does not parse); UNSUPPORTED (head dim,
 *  tiles beyond the kernels' constraints or the device's limits); SHAPE (B, H, F or S zero or F, S >= 2^32);
 *  BUILD, OPENCL or OUT_OF_MEMORY from building the kernels. */
CAMDELTA_API camdelta_status camdelta_scan_backward_plan_describe(camdelta_context *ctx,
                                                                  const camdelta_scan_backward_args *args, char *buf,
                                                                  size_t size);

/* ------------------------------------------------ camera branch (docs/math.md §8) */
/* The pieces around prep and scan, on the device: cameras -> per-token
 * matrices and RoPE tables (§8.1), the short convolution on raw K (§8.2), the
 * beta discount (§8.3), the chunk-causal scan pair (§8.4), the output transform
 * (§8.5) and the whole branch forward and backward (§8.6). All tensors f32. */

/** Chunk bounds of a sequence of T frames (docs/math.md §8.4, upstream normalize_chunk_index). */
typedef enum camdelta_chunk_strategy {
  CAMDELTA_CHUNK_UNIFORM = 0,             /* [0, cs, 2cs, ...], short remainder merged into the last chunk */
  CAMDELTA_CHUNK_FIRST_FRAME = 1,         /* [0, 1, 1+cs, ...] */
  CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE = 2 /* [0, cs+1, 2cs+1, ...] */
} camdelta_chunk_strategy;

/** "uniform", "first_frame", "first_chunk_plus_one", or "unknown" (static storage; never fails). */
CAMDELTA_API const char *camdelta_chunk_strategy_name(camdelta_chunk_strategy strategy);

/** How the frames are chunked. All zero = one chunk (bidirectional conv, one reverse segment). */
typedef struct camdelta_chunking {
  size_t chunk_size;                /* 0 = none */
  camdelta_chunk_strategy strategy; /* with chunk_size */
  const int64_t *chunk_index;       /* optional host array of frame starts: first 0, strictly increasing, < T; */
  size_t chunk_index_count;         /* overrides chunk_size + strategy for the scan's chunks */
} camdelta_chunking;

/** The scan's chunk bounds: bounds[0] = 0 < ... < bounds[*count - 1] = T. `cap` entries are available
 *  (T + 1 always suffice). Fails on a bad chunking, writing nothing: SHAPE (T = 0), UNSUPPORTED (T >= 2^32, the
 *  operations' limit), INVALID_ARGUMENT, BUFFER_TOO_SMALL. */
CAMDELTA_API camdelta_status camdelta_chunk_bounds(size_t T, const camdelta_chunking *chunking, size_t *bounds,
                                                   size_t cap, size_t *count);
/** The short conv's segment bounds (docs/math.md §8.2): one segment [0, T) without a chunk_size or when
 *  chunk_size >= T; else the uniform bounds when T % chunk_size == 0 (whatever the strategy or chunk_index, as
 *  upstream), else the scan's chunk bounds. */
CAMDELTA_API camdelta_status camdelta_conv_bounds(size_t T, const camdelta_chunking *chunking, size_t *bounds,
                                                  size_t cap, size_t *count);

/** Cameras -> matrices (§8.1). Token grid (T, Hs, Ws), n = (f*Hs + v)*Ws + u, N = T*Hs*Ws.
 *  Non-finite cameras: a NaN marks a frame without a camera (a NaN in R·d, i.e. in R or fx fy cx cy, gives the
 *  identity P for that frame's tokens; a NaN only in the translation t gives non-finite matrices, as the model's
 *  reference does). An infinity anywhere in camera_conditions is refused: INVALID_ARGUMENT naming [b, f, k], and
 *  nothing is enqueued. To check it, camdelta_camera_forward and the branch (forward, and backward) read
 *  camera_conditions (B*T*20 floats) back to the host, waiting for earlier work on the queue that writes them;
 *  the f64 references (camdelta_ref_camera_forward, camdelta_ref_branch_*) apply the same rule. */
typedef struct camdelta_camera_args {
  size_t B, T, Hs, Ws;
  size_t pt, ph, pw;                 /* patch (each >= 1); pt does not enter the math (T counts latent frames) */
  size_t D;                          /* head dim of the RoPE tables */
  camdelta_buffer camera_conditions; /* (B, T, 20) f32: c2w row-major (16), fx fy cx cy in image pixels */
  camdelta_buffer proj_q, proj_kv, proj_o; /* outputs (B, N, 4, 4) f32: P^T, P^-1, P; each optional */
  camdelta_buffer rope_cos, rope_sin;      /* outputs (N, D/2) f32; each optional */
  camdelta_profile *profile;
} camdelta_camera_args;
CAMDELTA_API camdelta_status camdelta_camera_forward(camdelta_context *ctx, const camdelta_camera_args *args);

/** Short convolution on raw K along frames (§8.2): k_raw (B, T*S, C) -> k_conv; conv_weight (C, 4). */
typedef struct camdelta_short_conv_args {
  size_t B, T, S, C;
  camdelta_chunking chunking;
  camdelta_buffer k_raw;       /* (B, T*S, C) f32 */
  camdelta_buffer conv_weight; /* (C, 4) f32 */
  camdelta_buffer k_conv;      /* output (B, T*S, C) f32 */
  /* backward (camdelta_short_conv_backward) */
  camdelta_buffer grad_k_conv;  /* (B, T*S, C) f32 */
  camdelta_buffer dk_raw;       /* output (B, T*S, C) f32, optional */
  camdelta_buffer dconv_weight; /* output (C, 4) f32, optional */
  camdelta_profile *profile;
} camdelta_short_conv_args;
CAMDELTA_API camdelta_status camdelta_short_conv_forward(camdelta_context *ctx, const camdelta_short_conv_args *args);
/** Reads k_raw, conv_weight, grad_k_conv; writes dk_raw and/or dconv_weight. Deterministic. */
CAMDELTA_API camdelta_status camdelta_short_conv_backward(camdelta_context *ctx,
                                                          const camdelta_short_conv_args *args);

/** Output transform (§8.5): (out [+ out2]) (B, H, D, N) -> y (B, N, H, D); first half P·x per 4-group, second
 *  half inverse RoPE. Backward: grad_y (B, N, H, D) -> grad_out (B, H, D, N). */
typedef struct camdelta_output_transform_args {
  size_t B, N, H, D;
  camdelta_buffer out;                /* (B, H, D, N) f32 */
  camdelta_buffer out2;               /* optional (B, H, D, N) f32, summed with out (the scan pair) */
  camdelta_buffer proj_o;             /* (B, N, 4, 4) f32 */
  camdelta_buffer rope_cos, rope_sin; /* (N, D/2) f32 */
  camdelta_buffer y;                  /* output of the forward (B, N, H, D) f32 */
  camdelta_buffer grad_y;             /* input of the backward (B, N, H, D) f32 */
  camdelta_buffer grad_out;           /* output of the backward (B, H, D, N) f32 */
  camdelta_profile *profile;
} camdelta_output_transform_args;
CAMDELTA_API camdelta_status camdelta_output_transform_forward(camdelta_context *ctx,
                                                               const camdelta_output_transform_args *args);
CAMDELTA_API camdelta_status camdelta_output_transform_backward(camdelta_context *ctx,
                                                                const camdelta_output_transform_args *args);

/** Whole branch (§8.6): k_raw -> short conv -> prep (matrices from the cameras) -> beta discount -> scan pair
 *  (causal + chunk-masked reverse) -> output transform -> y. N = T*Hs*Ws, S = Hs*Ws, C = H*D.
 *  16-bit activations (docs/math.md §8.7): with dtype CAMDELTA_F16 or CAMDELTA_BF16, q_raw, k_raw, v_raw and y (and
 *  the backward's grad_y, dq_raw, dk_raw, dv_raw) are in that dtype; the weights, cameras, beta, decay and their
 *  gradients stay f32, and so do the arithmetic and the scan's states (the conv's output k_conv is kept in the
 *  activations' dtype, as the model's conv writes it). docs/branch.md gives the measured accuracy per dtype. A dtype
 *  that is none of the three is UNSUPPORTED; a part of a sequence (camdelta_mpi) takes f32 only. */
typedef struct camdelta_branch_args {
  size_t B, T, Hs, Ws, H, D;
  size_t pt, ph, pw; /* patch, each >= 1 */
  camdelta_chunking chunking;
  float k_scale;  /* typically D^-0.5 * S^-0.5 */
  float norm_eps; /* typically 1e-6 */
  camdelta_scan_algorithm algorithm;
  camdelta_buffer q_raw, k_raw, v_raw;            /* (B, N, H, D) dtype */
  camdelta_buffer conv_weight;                    /* (C, 4) f32 */
  camdelta_buffer q_norm_weight, k_norm_weight;   /* (C,) f32 */
  camdelta_buffer camera_conditions;              /* (B, T, 20) f32 */
  camdelta_buffer beta;                           /* (B, H, T, S) f32 */
  camdelta_buffer decay;                          /* (B, H, T) f32 */
  camdelta_buffer y;                              /* output (B, N, H, D) dtype */
  camdelta_profile *profile;
  camdelta_precision precision; /* of the two scans and their backward; zero = exact */
  camdelta_dtype dtype; /* of q_raw, k_raw, v_raw, y and of the grads' grad_y, dq_raw, dk_raw, dv_raw; zero = f32 */
} camdelta_branch_args;

/** Gradients of the branch. grad_y in; every output optional (absent = not written). */
typedef struct camdelta_branch_grads {
  camdelta_buffer grad_y;                         /* (B, N, H, D) args->dtype */
  camdelta_buffer dq_raw, dk_raw, dv_raw;         /* (B, N, H, D) args->dtype */
  camdelta_buffer dconv_weight;                   /* (C, 4) f32 */
  camdelta_buffer dq_norm_weight, dk_norm_weight; /* (C,) f32 */
  camdelta_buffer dbeta;                          /* (B, H, T, S) f32 */
  camdelta_buffer ddecay;                         /* (B, H, T) f32 */
  camdelta_profile *profile;
} camdelta_branch_grads;

/** What a branch backward needs from its forward (matrices, conv output, prep outputs, discounted gates, scan
 *  states). Owned by the caller; device memory inside is released by destroy. create returns CAMDELTA_OK,
 *  INVALID_ARGUMENT (NULL argument) or OUT_OF_MEMORY; destroy of NULL is a no-op. */
typedef struct camdelta_branch_saved camdelta_branch_saved;
CAMDELTA_API camdelta_status camdelta_branch_saved_create(camdelta_context *ctx, camdelta_branch_saved **out);
CAMDELTA_API void camdelta_branch_saved_destroy(camdelta_branch_saved *saved);

/** Branch forward. `saved` may be NULL (inference). camera_conditions follow camdelta_camera_forward's rule for
 *  non-finite values (a NaN frame has identity matrices; an infinity is INVALID_ARGUMENT before anything is
 *  enqueued; checked on the host). */
CAMDELTA_API camdelta_status camdelta_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                     camdelta_branch_saved *saved);
/** Branch backward: `args` as given to the forward (its y is not read), `saved` from that forward or NULL to
 *  recompute it. Deterministic. */
CAMDELTA_API camdelta_status camdelta_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                      const camdelta_branch_grads *grads,
                                                      const camdelta_branch_saved *saved);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_H */
