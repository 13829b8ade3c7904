/* Plans kept per context: what a call of an operation runs for one (operation, device, shape class, precision,
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
#ifndef CAMDELTA_PLAN_H
#define CAMDELTA_PLAN_H
#include "internal.h"

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
  unsigned variant;           /* the kernels' variant: 0 the fixed shape, else the packed clips' (packed.c) */
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
