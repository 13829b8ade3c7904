/* Plans kept per context: what a call of an operation runs for one (operation, device, shape class, precision,
 * algorithm), decided and built once and reused by later calls, which only set arguments and launch. Not
 * installed. */
#ifndef CAMDELTA_PLAN_H
#define CAMDELTA_PLAN_H
#include "internal.h"

enum { CD_PLAN_SCAN_FORWARD = 1, CD_PLAN_SCAN_BACKWARD = 2, CD_PLAN_PAIR_CHAIN = 3 };

/** Everything the plan depends on besides the context (direction-independent: reverse is not in it). */
typedef struct cd_plan_key {
  int op;
  unsigned D, alg, prec, vec; /* vec: 16-byte token rows (tensor-core path only) */
  unsigned cls[3];            /* the operation's shape class (e.g. value blocks, token tile) */
} cd_plan_key;

/** A cached plan. `use` is held by the one call that sets the kernels' arguments and enqueues them (OpenCL
 *  kernel objects are not safe for concurrent clSetKernelArg). */
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
 *  lock held: call cd_plan_release() once the launches are enqueued. */
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
#endif
