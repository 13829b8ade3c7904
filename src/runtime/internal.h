/* Internal interfaces shared by the host runtime and the operations.
 * Not installed. */
#ifndef CAMDELTA_INTERNAL_H
#define CAMDELTA_INTERNAL_H

#include "camdelta.h"
#include "camdelta_helpers.h"
#include "camdelta_npy.h"
#include "camdelta_ref.h"
#include "options/options.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdatomic.h>
#include <threads.h>

#if defined(__GNUC__)
#define CD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CD_PRINTF(a, b)
#endif

/* ------------------------------------------------------------ errors (error.c) */
/** Record a message for this thread and return `st`. */
camdelta_status cd_fail(camdelta_status st, const char *fmt, ...) CD_PRINTF(2, 3);
/** Record "<what>: <CL error name> (<code>)" and return CAMDELTA_ERROR_OPENCL
 *  (or OUT_OF_MEMORY for the allocation failures). */
camdelta_status cd_cl_fail(cl_int err, const char *what);
/** Clear this thread's message (called at the start of public entry points). */
void cd_clear_error(void);
/** `in` (n bytes, or up to its NUL when n == (size_t)-1) into out (cap >= 1 bytes) with every byte outside
 *  printable ASCII, and the backslash, written as \xNN: text from a file, a path or the environment never reaches
 *  a terminal raw. Truncates to fit; returns out. */
const char *cd_escape(const char *in, size_t n, char *out, size_t cap);

/** The body of a public creator of a host object that belongs to a context (its field `ctx`), e.g.
 *  camdelta_scan_saved_create(ctx, &out): clears the error, refuses a NULL ctx or out (naming op), allocates the
 *  object zeroed into *out and records ctx in it. */
#define CD_CREATE_OBJECT(op, ctx, out)                                                                      \
  do {                                                                                                      \
    cd_clear_error();                                                                                       \
    if (!(ctx) || !(out))                                                                                   \
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, op ": '%s' is NULL", (ctx) ? "out" : "ctx");          \
    *(out) = calloc(1, sizeof **(out));                                                                     \
    if (!*(out)) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, op ": out of host memory");                   \
    (*(out))->ctx = (ctx);                                                                                  \
    return CAMDELTA_OK;                                                                                     \
  } while (0)

/* ---------------------------------------------------------- sizes (check.c) */
/* The size rule (check.c): every product and sum of sizes from a caller goes through these in the entry's check. */
/** *out = a*b; 0 on overflow. */
int cd_mul(size_t *out, size_t a, size_t b);
/** *out = a+b; 0 on overflow. */
int cd_add(size_t *out, size_t a, size_t b);
/** Product of n factors with overflow check; 0 on overflow. */
int cd_prod(size_t *out, int n, const size_t *factors);
/** cd_prod of the listed factors: CD_PROD(&n, B, H, D, N). */
#define CD_PROD(out, ...) \
  cd_prod((out), (int)(sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t)), (const size_t[]){__VA_ARGS__})
/** malloc of n elements of `size` bytes (at least 1 byte); NULL when n*size overflows or memory is short. */
void *cd_malloc_array(size_t n, size_t size);
/** Check that `b` refers to at least `elems` elements of `elem_size` bytes
 *  past its offset. name: the argument's name for the message. When
 *  `optional` and b.mem == NULL, succeeds. */
camdelta_status cd_check_buffer(const char *op, const char *name, camdelta_buffer b, size_t elems,
                                size_t elem_size, int optional);
/** A named tensor argument, for checks across arguments. */
typedef struct cd_tensor_arg {
  const char *name;
  camdelta_buffer b;
  size_t elems, es;
} cd_tensor_arg;
/** Fails when an output overlaps an input or another output in the same
 *  cl_mem (absent buffers are skipped). */
camdelta_status cd_check_no_overlap(const char *op, const cd_tensor_arg *outs, size_t nout, const cd_tensor_arg *ins,
                                    size_t nin);
/** 1 when every present buffer of b[0..n) starts at a multiple of 4 elements (absent ones count as aligned): the
 *  kernels' 16-byte access paths. */
int cd_buffers_aligned4(const camdelta_buffer *b, size_t n);
/** 1 for a GPU or an accelerator (the device classes the kernels' GPU forms and tiles are for), 0 for a CPU. */
int cd_device_gpu_like(const camdelta_device_info *info);
/** Check the head dim: D % 8 == 0 and 8 <= D <= 128. */
camdelta_status cd_check_head_dim(const char *op, size_t D);
/** Copies the string text into the caller's buf of `size` bytes: INVALID_ARGUMENT naming op when it does not fit. */
camdelta_status cd_copy_text(const char *op, const char *text, char *buf, size_t size);
camdelta_status cd_check_dtype(const char *op, camdelta_dtype dtype);
/* Prep's storage code inside the library: a camdelta_dtype (the raw activations', (B, N, H, D)), with CD_SCAN_F32 set
 * where prep's (B, H, D, N) side (its outputs q, k, v, their gradients, the saved q and k) is f32 instead: the camera
 * branch on 16-bit activations (the scan is f32). Never taken from the API. */
#define CD_SCAN_F32 0x10
/** The raw activations' dtype of a storage code. */
/** The name of value v of a public enum whose values are 0 .. n-1 (names[v]), "unknown" for any other: the
 *  camdelta_*_name functions. CD_ENUM_NAME(NAMES, v) for a static array NAMES indexed by the enum's values. */
static inline const char *cd_enum_name(int v, const char *const *names, int n) {
  return v >= 0 && v < n && names[v] ? names[v] : "unknown";
}
#define CD_ENUM_NAME(names, v) cd_enum_name((int)(v), (names), (int)(sizeof(names) / sizeof((names)[0])))
static inline camdelta_dtype cd_raw_dtype(camdelta_dtype d) { return (camdelta_dtype)((int)d & ~CD_SCAN_F32); }
/** Bytes per element of prep's (B, H, D, N) side. */
static inline size_t cd_scan_es(camdelta_dtype d) {
  return ((int)d & CD_SCAN_F32) ? 4 : camdelta_dtype_size(d);
}
/** The storage code of prep on `dtype` activations, its (B, H, D, N) side in f32 when scan_f32 is set. */
static inline camdelta_dtype cd_store_code(camdelta_dtype dtype, int scan_f32) {
  return scan_f32 && dtype != CAMDELTA_F32 ? (camdelta_dtype)((int)dtype | CD_SCAN_F32) : dtype;
}
/** The kernels' build options of a storage code: "-DCD_DTYPE=r", plus " -DCD_SDTYPE=0" with CD_SCAN_F32 (common.cl);
 *  buf has room for 40 bytes. Returns buf. */
const char *cd_dtype_opts(camdelta_dtype d, char *buf);

/* -------------------------------------------------------- context (context.c) */
typedef struct cd_program_entry {
  char *key; /* source name + '\n' + options */
  cl_program program;
  int from_disk;     /* loaded from the disk cache (entry key below) */
  char cache_key[65];
  struct cd_program_entry *next;
} cd_program_entry;

#define CD_CONTEXT_EXT_SLOTS 4
struct camdelta_context {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  int owns; /* 1: created by camdelta, released on destroy */
  int profiling;
  int kernel_times; /* profiling events carry usable kernel times: the queue profiles and the device's timer has a
                       resolution (Mesa's Rusticl reports 0 and stamps 0, 1, 2, 3 ns); CAMDELTA_DEVICE_LIMITS
                       profiling=0 clears it. Where it is 0, a requested profile gives kernel_ms = NaN. */
  camdelta_device_info info;
  char device_extensions[4096];
  mtx_t lock; /* guards programs and stats */
  cd_program_entry *programs;
  camdelta_build_stats stats;
  cd_opt_values opts; /* the option registry's values (src/options/): the environment at creation, camdelta_tune_set */
  int loop_state;     /* loop budget (src/runtime/loops.c): 0 not measured yet, 1 known (loop_budget) */
  size_t loop_budget; /* loop iterations a work-item may run per launch; 0: no limit seen */
  size_t loop_limit;  /* CAMDELTA_DEVICE_LIMITS loops=N: a budget emulated for tests (0: none) */
  struct cd_plan_entry *plans; /* plans kept per shape class (src/runtime/plan.c), guarded by lock */
  void (*release_plans)(camdelta_context *ctx); /* set by the plan cache when it keeps a plan: frees them all with
                                                   the context (the runtime knows no plan) */
  unsigned plan_gen;           /* bumped when the plans are dropped (camdelta_tune_set) */
  /* What the device really is (platform, device and driver names for the disk cache's keys): `info` differs from
   * it only under CAMDELTA_DEVICE_LIMITS or cd_context_emulate (src/runtime/emulate.c). */
  camdelta_device_info real_info;
  size_t pref_multiple; /* 0: each kernel's CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE; else this value */
  int facts_emulated;   /* cd_context_emulate: `info` describes another device (plan golden tests) */
  int soft_fma;         /* the device has no fused multiply-add in hardware: programs built with CD_SOFT_FMA=1 */
  FILE *trace;          /* cd_trace_launches: every launch, fill and copy is written here */
  int dry_run;          /* with trace: nothing is enqueued */
  struct {
    const struct cd_context_ext_kind *kind;
    void *state;
  } ext[CD_CONTEXT_EXT_SLOTS]; /* state of the components above the runtime (cd_context_ext), guarded by lock */
};

/* ----------------------------------------------- a component's state per context (context.c)
 * A component above the runtime (an operation, the scan engine) that keeps state per context declares one static
 * const kind; the runtime allocates the state zeroed on first use and frees it with the context, knowing neither
 * its fields nor its owner. */
typedef struct cd_context_ext_kind {
  size_t size;                /* bytes of the state */
  void (*fini)(void *state);  /* releases what the state holds (before it is freed), or NULL */
} cd_context_ext_kind;
/** The context's state of `kind`, allocated zeroed on the first call; NULL when host memory is short or all
 *  CD_CONTEXT_EXT_SLOTS slots are taken by other kinds. Takes the context's lock: not to be called with it held. */
void *cd_context_ext(camdelta_context *ctx, const cd_context_ext_kind *kind);
/** The context's state of `kind` if it was created, else NULL (allocates nothing). Takes the context's lock. */
void *cd_context_ext_find(const camdelta_context *ctx, const cd_context_ext_kind *kind);
/** Finalises and frees every state (context destruction; contexts made by hand in tests). */
void cd_context_ext_free(camdelta_context *ctx);

/* ------------------------------------------- device limits, emulated facts, launch traces (emulate.c) */
/** Reads CAMDELTA_DEVICE_LIMITS ("local=BYTES,wg=ITEMS,cu=UNITS,loops=N,profiling=0", each optional) and lowers what the context
 *  reports (ctx->info and, through cd_kernel_max_wg, every kernel's work-group limit) to those values: a test mode
 *  for devices with less local memory, smaller work-group limits or fewer compute units than the one at hand, and
 *  (loops) for a driver that caps a work-item's loop iterations per launch (cd_loop_budget), (profiling=0) one that
 *  gives no kernel times.
 *  Values above the device's own are ignored; a value that does not parse fails naming the variable. Called once
 *  at context creation, after the device facts are read. */
camdelta_status cd_limits_env(camdelta_context *ctx);
/** The loop budget (src/runtime/loops.c): how many loop iterations, over all its loops, one work-item may run in
 *  a launch before the driver silently ends them (Mesa's gallivm: 65535), or 0 where no such limit was seen. Measured
 *  by a probe kernel on the first call per context (its answer cached on disk per device and driver), lowered by
 *  CAMDELTA_DEVICE_LIMITS loops=N. Plans whose work-items loop long split their launches to stay within it. */
size_t cd_loop_budget(camdelta_context *ctx);
/** Replaces the context's device facts with those of a named device, for plan golden tests on any device:
 *  "h200" (NVIDIA H200, its tensor-core path emulated: CAMDELTA_TC=emulate kernels, costs as tensor cores), "h100"
 *  (the H100 80GB HBM3, the same way) or "pocl2" (PoCL on two CPU cores). The kernels are still built for and run
 *  on the real device; the disk cache keys keep the real device's identity. Call right after creating the context,
 *  before any operation. */
camdelta_status cd_context_emulate(camdelta_context *ctx, const char *device);
/** Writes one line per launch (kernel, its program's source and build options, global and local sizes, local
 *  memory), fill and copy enqueued through this context to `out` (NULL stops); with `dry`, none of them is
 *  enqueued, so operations build their plans and kernels without running them (and their outputs stay as they
 *  were). Plan golden tests only. */
void cd_trace_launches(camdelta_context *ctx, FILE *out, int dry);
/** Writes a line to the trace (when one is open). */
void cd_trace_note(camdelta_context *ctx, const char *fmt, ...) CD_PRINTF(2, 3);

/** The value of option `id` on this context for a call in `dtype` storage: the one set (environment at creation,
 *  camdelta_tune_set), else the declared default for the context's device class (ctx->info, so emulated facts
 *  count) and the storage; CD_OPT_AUTO where the operation decides per call. */
uint32_t cd_option(const camdelta_context *ctx, cd_opt_id id, camdelta_dtype dtype);

/** A built program for kernel source file `source` (e.g. "prep.cl") with
 *  extra build options (e.g. "-DCD_D=112"); built once per context, through
 *  the disk cache. The program is owned by the context. */
camdelta_status cd_program(camdelta_context *ctx, const char *source, const char *options, cl_program *out);
/** A fresh kernel object (caller releases) from cd_program(). */
/** Releases *k when it is set and clears it. */
void cd_kernel_drop(cl_kernel *k);
camdelta_status cd_kernel(camdelta_context *ctx, const char *source, const char *options, const char *name,
                          cl_kernel *out);
/** Allocate a device buffer of `bytes` (> 0) in the context. */
camdelta_status cd_alloc(camdelta_context *ctx, size_t bytes, cl_mem *out);

/* ---------------------------------------------------- kernel args (launch.c) */
typedef struct cd_args {
  cl_kernel kernel;
  cl_uint index;
  cl_int err;
} cd_args;
void cd_arg_mem(cd_args *a, cl_mem m); /* NULL allowed (absent optional) */
void cd_arg_buf(cd_args *a, camdelta_buffer b); /* mem + ulong offset (2 args) */
/** cd_arg_buf for each of b[0..n), in order. */
void cd_arg_bufs(cd_args *a, const camdelta_buffer *b, size_t n);
/** cd_arg_bufs of the listed buffers: CD_ARG_BUFS(&a, io->k, io->v, io->beta). */
#define CD_ARG_BUFS(a, ...)                                            \
  cd_arg_bufs((a), (const camdelta_buffer[]){__VA_ARGS__},             \
              sizeof((const camdelta_buffer[]){__VA_ARGS__}) / sizeof(camdelta_buffer))
void cd_arg_u64(cd_args *a, uint64_t v);
void cd_arg_u32(cd_args *a, uint32_t v);
void cd_arg_i32(cd_args *a, int32_t v);
void cd_arg_f32(cd_args *a, float v);
void cd_arg_local(cd_args *a, size_t bytes);

#define CD_MAX_EVENTS 256
/** One public call's enqueued work: events for profiling. */
typedef struct cd_launch {
  camdelta_profile *profile; /* NULL: no events kept */
  cl_event events[CD_MAX_EVENTS];
  const char *names[CD_MAX_EVENTS]; /* the `what` of each launch */
  unsigned n;
} cd_launch;
void cd_launch_init(cd_launch *l, camdelta_profile *profile);
/** Enqueue an ND-range; lws may be NULL. Records an event if profiling. */
camdelta_status cd_enqueue(camdelta_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws, const size_t *lws,
                           cd_launch *l, const char *what);
/** Wait for and sum the recorded events (kernels, copies, fills) into l->profile (if any); releases
 *  the events. Always call once at the end of a public call (also on error). */
camdelta_status cd_launch_end(camdelta_context *ctx, cd_launch *l, camdelta_status st);

/** Copy `bytes` bytes between buffers on the context's queue (traced like launches; with l, its time joins the
 *  call's kernel_ms). l may be NULL. */
camdelta_status cd_copy(camdelta_context *ctx, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off, size_t bytes,
                        cd_launch *l);
/** Fill `bytes` bytes at byte offset `off` of `mem` with zero (as cd_copy). l may be NULL. */
camdelta_status cd_zero(camdelta_context *ctx, cl_mem mem, size_t off, size_t bytes, cd_launch *l);

/** Preferred work-group size multiple for a kernel on the context's device
 *  (32 on NVIDIA, typically 8..64 elsewhere). */
size_t cd_preferred_multiple(camdelta_context *ctx, cl_kernel k);
/** Max work-group size for a kernel on the context's device. */
size_t cd_kernel_max_wg(camdelta_context *ctx, cl_kernel k);

/* ------------------------------------------------------------------------------ the entry driver (driver.c)
 * Every public enqueuing entry runs the same steps, in this order, from a static descriptor (cd_entry):
 *   1. clear this thread's error message;
 *   2. the prologue: ctx and the argument structs non-NULL, a `saved` object of this context, a profile request
 *      only on a profiling queue, every camdelta_buffer field of the structs (cd_slot) absent or a valid cl_mem
 *      of the context's cl_context;
 *   3. the entry's check step: shapes and scalars, and how much of each slot this call uses (cd_use);
 *   4. every used slot present when required and large enough, no output overlapping an input or another output;
 *   5. the entry's plan step: kernels built, workspace allocated;
 *   6. the profile reset and the launch begun, the entry's enqueue step, the launch end;
 *   7. the entry's end step (whatever happened after the prologue): release what the call holds, commit what it
 *      filled (a saved object) on success.
 * Steps 1-5 enqueue nothing, so a call rejected by any of them has written nothing. */

/** What an entry does with one camdelta_buffer field of its argument structs. */
typedef enum cd_role {
  CD_IN,    /* read */
  CD_OUT,   /* written */
  CD_UNREAD /* a field of a struct shared with another entry, neither read nor written by this one (still a cl_mem
               the call was given: the prologue checks it) */
} cd_role;

/** One camdelta_buffer field of a public entry's argument structs. */
typedef struct cd_slot {
  const char *name;    /* the field's name, as messages give it */
  unsigned part;       /* 0: the args struct, 1: the entry's second struct (cd_entry.second) */
  size_t offset;       /* offsetof the field in its struct */
  cd_role role;
  const char *inplace; /* an output only: the input it may cover exactly (same cl_mem, offset and size), or NULL */
} cd_slot;
#define CD_SLOT(type, field, role_) {.name = #field, .part = 0, .offset = offsetof(type, field), .role = role_}
#define CD_SLOT2(type, field, role_) {.name = #field, .part = 1, .offset = offsetof(type, field), .role = role_}
#define CD_MAX_SLOTS 32

/** How one call uses a slot, set by the entry's check step (zero: not used by this call, so neither size- nor
 *  overlap-checked). */
typedef enum cd_need { CD_UNUSED = 0, CD_REQUIRED, CD_OPTIONAL } cd_need;
typedef struct cd_use {
  cd_need need;
  size_t elems; /* elements past the buffer's offset */
  size_t es;    /* bytes per element */
} cd_use;

typedef struct cd_call cd_call;

/** A public enqueuing entry: static data, one per entry. */
typedef struct cd_entry {
  const char *op;           /* the public function's name, which begins every message */
  const char *second;       /* the parameter name of the entry's second argument struct, or NULL */
  const char *saved_name;   /* the parameter name of the call's `saved` object in messages, or NULL: "saved" */
  const cd_slot *slots;     /* every camdelta_buffer field of the argument structs */
  size_t nslots;            /* <= CD_MAX_SLOTS */
  int profile_part;         /* the struct holding `camdelta_profile *profile` (0 args, 1 second), -1: none */
  size_t profile_offset;    /* offsetof the profile pointer in that struct */
  camdelta_status (*check)(cd_call *c);                  /* step 3 (sets c->use[]) */
  camdelta_status (*plan)(cd_call *c);                   /* step 5, or NULL */
  camdelta_status (*enqueue)(cd_call *c, cd_launch *l);  /* step 6 */
  camdelta_status (*end)(cd_call *c, camdelta_status st); /* step 7, or NULL: returns the call's status */
} cd_entry;

/** One call of an entry. The public function fills entry, ctx, args, second, saved, saved_ctx and op; the
 *  driver the rest. */
struct cd_call {
  const cd_entry *entry;
  camdelta_context *ctx;
  const void *args;                  /* the args struct */
  const void *second;                /* the second struct (cd_entry.second), else NULL */
  const void *saved;                 /* the caller's saved object, or NULL */
  const camdelta_context *saved_ctx; /* the context `saved` was created for */
  void *op;                          /* the entry's own state across its steps, zero-initialised by the caller */
  camdelta_profile *profile;         /* the profile request, read by the prologue */
  cd_use use[CD_MAX_SLOTS];          /* per slot, set by the check step */
};

/** The descriptor of an entry with one argument struct `type` holding its `profile` pointer. */
#define CD_ENTRY(op_, type, slots_, check_, plan_, enqueue_, end_)                                                \
  {                                                                                                               \
    .op = op_, .second = NULL, .slots = slots_, .nslots = sizeof(slots_) / sizeof((slots_)[0]), .profile_part = 0, \
    .profile_offset = offsetof(type, profile), .check = check_, .plan = plan_, .enqueue = enqueue_, .end = end_    \
  }

/** Runs the call's entry through steps 1-7 and returns its status. */
camdelta_status cd_run_entry(cd_call *c);
/** The buffer in slot i of the call's structs. */
camdelta_buffer cd_slot_buffer(const cd_call *c, size_t i);

/* ----------------------------------------------- embedded sources (generated) */
/** Source text of kernel file `name` (e.g. "prep.cl"): from CAMDELTA_KERNEL_DIR
 *  if set (malloc'd copy in *owned), else the embedded copy. */
camdelta_status cd_kernel_source(const char *name, const char **text, size_t *len, char **owned);
/** Embedded table (generated at build time). */
typedef struct cd_embedded_source {
  const char *name;
  const char *text;
  size_t len;
} cd_embedded_source;
extern const cd_embedded_source cd_embedded_sources[];
extern const size_t cd_embedded_source_count;

/* ---------------------------------------------------- disk cache (cache.c) */
#define CD_CACHE_MAX_PAYLOAD ((uint64_t)1 << 30) /* no program binary comes near 1 GiB */
#define CD_CACHE_STALE_SECONDS 600              /* temp files older than this are left by a dead writer */
/** Resolve the cache folder's path; returns 0 when caching is off. */
int cd_cache_folder(char *buf, size_t size);
/** cd_cache_folder, with the private subfolder camdelta-<uid> appended when the folder is a shared sticky one
 *  (cache.c: where the files are then); 0 when caching is off. */
int cd_cache_effective_folder(char *buf, size_t size);
/** Why the cache folder was last refused on this thread ("" when it was not). */
const char *cd_cache_refusal(void);
/** Largest buffer the entry reader has allocated in this process (for the tests). */
extern _Atomic size_t cd_cache_largest_alloc;
/** The cache folder's directory descriptor under the folder rules (cache.c): -1 when refused (the reason said
 *  once per process on stderr, see cd_cache_refusal), -2 when caching is off or the folder does not exist and
 *  !create. path (optional, `size` bytes) gets the folder's path. */
int cd_cache_open_dir(int create, char *path, size_t size);
/** Opens file `name` of the folder `dfd` for reading: O_NOFOLLOW | O_NONBLOCK (a link is never followed, a FIFO
 *  never blocks), a regular file owned by the user, at most `max` bytes (*size). A descriptor, or -1 with *why
 *  NULL (no such file) or a static reason ("it is not a regular file", ...). */
int cd_cache_open_file(int dfd, const char *name, uint64_t max, uint64_t *size, const char **why);
/** Reads exactly `size` bytes from fd into buf; 0 on a short read or when the file grew meanwhile. */
int cd_cache_read_all(int fd, unsigned char *buf, size_t size);
/** Writes parts[0..n) as file `name` of the folder `dfd`, atomically: a new temporary file with a random name
 *  (O_CREAT | O_EXCL | O_NOFOLLOW, 0600), fsync, renamed over `name`; removed again on any failure. Stale temporary
 *  files of dead writers are removed first. 1 on success, 0 (errno set) otherwise. */
int cd_cache_write_file(int dfd, const char *name, const unsigned char *const *parts, const size_t *sizes, int n);
/** Hex key of (device identity, library version, options, source). */
void cd_cache_key(camdelta_context *ctx, const char *options, const char *src, size_t src_len, char key_hex[65]);
/** Verify an entry image of `size` bytes for `key_hex` (NULL: any key): magic, key, length = size - header,
 *  length <= CD_CACHE_MAX_PAYLOAD, hash over header and payload. 1 and *payload_len (payload at byte 184) when
 *  it verifies, else 0. device (optional, 65 bytes) gets the printable device name. */
int cd_cache_parse_entry(const unsigned char *bytes, size_t size, const char *key_hex, size_t *payload_len,
                         char device[65]);
/** Recompute the hash of an entry image in place (tests: forge an entry the way a writer would). */
void cd_cache_entry_seal(unsigned char *image, size_t size);
/** Load a binary for `key`; returns malloc'd bytes or NULL if absent/corrupt
 *  (a corrupt entry is removed). */
unsigned char *cd_cache_load(const char *key_hex, size_t *len);
/** Remove the entry for `key` (a binary that loaded but proved unusable). */
void cd_cache_discard(const char *key_hex);
/** Store atomically; failures are silent (cost speed, not correctness). */
void cd_cache_store(const char *key_hex, const unsigned char *bin, size_t len, const char *device_name);

/* --------------------------------------------------------- saved objects */
struct camdelta_prep_saved {
  camdelta_context *ctx;
  cl_mem inv_rms; /* (2, B, N) f32: q then k */
  size_t bytes;
  size_t B, N, H, D;
  int valid;
};

struct camdelta_scan_saved {
  camdelta_context *ctx;
  cl_mem state_pre, state_post; /* (B, H, F, D, D) f32 */
  size_t bytes;
  cl_mem a_mat;   /* the chunkwise forward's A_f = d_f·(I − K_fᵀβ_fK_f), (B, H, F, D, D) f32: the backward reuses it */
  size_t a_bytes;
  int has_a;      /* a_mat holds this forward's A_f (chunkwise; the sequential kernel has no phase A) */
  size_t B, H, D, F, S;
  int reverse;
  int has_init;
  int valid;
};

/** (Re)allocate a buffer held in a saved object so it holds >= bytes. */
camdelta_status cd_ensure_buffer(camdelta_context *ctx, cl_mem *mem, size_t *have, size_t bytes);

/* ---------------------------------------------------------- plans (plan.c)
 * Plans kept per context: what a call of an operation runs for one (operation, device, shape class, precision,
 * algorithm), decided and built once and reused by later calls, which only set arguments and launch; and the
 * device scratch those calls use (the plan's workspace), grown when a call needs more and reused after. The
 * runtime keeps them (like the programs) and frees them with the context; the operations define what a plan is
 * (its key, builder and destructor).
 *
 * Thread safety: the plans of a context are a list guarded by the context's lock. A call acquires its plan's
 * entry, which holds the entry's `use` lock until cd_plan_release: one call at a time sets the plan's kernel
 * arguments (OpenCL kernel objects are not safe for concurrent clSetKernelArg) and enqueues its launches on the
 * workspace, so that two calls' launches on the context's in-order queue never interleave their use of it. Not
 * installed. */
enum {
  CD_PLAN_SCAN_FORWARD = 1,
  CD_PLAN_SCAN_BACKWARD = 2,
  CD_PLAN_PAIR_FORWARD = 3,
  CD_PLAN_PAIR_BACKWARD = 4,
  CD_PLAN_SUMMARY = 5,
  CD_PLAN_BRANCH = 6,
  CD_PLAN_AUTO = 7 /* the AUTO choice for one exact shape (forward.c) */
};

/** Everything the plan depends on besides the context (direction-independent: reverse is not in it). */
typedef struct cd_plan_key {
  int op;
  unsigned D, alg, prec, vec; /* vec: 16-byte token rows (tensor-core path only) */
  unsigned cls[3];            /* the operation's shape class (e.g. value blocks, token tile) */
  unsigned variant; /* the kernels' variant: the scan's packed clips (packed.c; 0 the fixed shape), the branch's and the
                       pair's activations' dtype (y's storage) */
  size_t exact[3];            /* an exact shape, for entries kept per shape (AUTO); 0 for plans */
} cd_plan_key;

/** A cached plan. `use` is held by the one call that sets the kernels' arguments and enqueues them. */
typedef struct cd_plan_entry {
  cd_plan_key key;
  void *plan;
  void (*destroy)(void *plan);
  int refs, retired;
  mtx_t use;
  struct cd_plan_entry *next;
} cd_plan_entry;

/** Builds a plan for `key` (called without the context's lock held; it may build programs). */
typedef camdelta_status (*cd_plan_build_fn)(camdelta_context *ctx, const cd_plan_key *key, const void *arg,
                                            void **plan);

/** The entry for `key`, built with build(ctx, key, arg) on the first call; returned referenced and with its `use`
 *  lock held: call cd_plan_release() once the launches are enqueued. A context keeps at most CD_PLAN_MAX_EXACT
 *  entries of exact shapes: the oldest idle one goes when another comes. */
#define CD_PLAN_MAX_EXACT 64
camdelta_status cd_plan_acquire(camdelta_context *ctx, const cd_plan_key *key, cd_plan_build_fn build,
                                const void *arg, void (*destroy)(void *plan), cd_plan_entry **out);
void cd_plan_release(camdelta_context *ctx, cd_plan_entry *e);
/** Drops every plan (camdelta_tune_set: later calls plan with the new tiles); plans in use are freed by their
 *  last release. */
void cd_plan_invalidate(camdelta_context *ctx);
/** Frees every plan (context destruction). */
void cd_plan_free_all(camdelta_context *ctx);
/** Number of plans held (tests). */
unsigned cd_plan_count(camdelta_context *ctx);

/** A plan's device scratch: slot i holds at least the bytes a call last asked of it (grown, never shrunk, until the
 *  plan is freed). Used under the plan's `use` lock. */
#define CD_WS_SLOTS 24
typedef struct cd_workspace {
  cl_mem mem[CD_WS_SLOTS];
  size_t bytes[CD_WS_SLOTS];
} cd_workspace;
/** Slot `slot` with at least `bytes` (> 0), as a buffer at offset 0. */
camdelta_status cd_ws_get(camdelta_context *ctx, cd_workspace *ws, int slot, size_t bytes, camdelta_buffer *out);
void cd_ws_free(cd_workspace *ws);

#endif
