/* Per-context plan cache (plan.h): a list guarded by the context's lock, like its program table; each entry is
 * reference-counted so that camdelta_tune_set can drop the plans while another thread still launches one. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int same_key(const cd_plan_key *a, const cd_plan_key *b) {
  return a->op == b->op && a->D == b->D && a->alg == b->alg && a->prec == b->prec && a->vec == b->vec &&
         a->cls[0] == b->cls[0] && a->cls[1] == b->cls[1] && a->cls[2] == b->cls[2];
}

static void free_entry(cd_plan_entry *e) {
  if (e->plan) e->destroy(e->plan);
  mtx_destroy(&e->use);
  free(e);
}

/* With the context's lock held: the live entry for `key`, referenced, or NULL. */
static cd_plan_entry *find(camdelta_context *ctx, const cd_plan_key *key) {
  for (cd_plan_entry *e = ctx->plans; e; e = e->next)
    if (same_key(&e->key, key)) {
      e->refs++;
      return e;
    }
  return NULL;
}

camdelta_status cd_plan_acquire(camdelta_context *ctx, const cd_plan_key *key, cd_plan_build_fn build,
                                const void *arg, void (*destroy)(void *plan), cd_plan_entry **out) {
  *out = NULL;
  mtx_lock(&ctx->lock);
  cd_plan_entry *e = find(ctx, key);
  const unsigned gen = ctx->plan_gen;
  mtx_unlock(&ctx->lock);
  if (!e) {
    /* built outside the lock (building takes it for the program table); a plan another thread inserted
     * meanwhile wins and ours is dropped */
    void *plan = NULL;
    camdelta_status st = build(ctx, key, arg, &plan);
    if (st) return st;
    cd_plan_entry *mine = calloc(1, sizeof *mine);
    if (!mine || mtx_init(&mine->use, mtx_plain) != thrd_success) {
      free(mine);
      destroy(plan);
      return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory keeping a plan");
    }
    mine->key = *key;
    mine->plan = plan;
    mine->destroy = destroy;
    mine->refs = 1;
    mtx_lock(&ctx->lock);
    e = find(ctx, key);
    if (!e && ctx->plan_gen != gen) {
      /* the tiles changed while this plan was built (camdelta_tune_set): used for this call only */
      mine->retired = 1;
      e = mine, mine = NULL;
    } else if (!e) {
      mine->next = ctx->plans;
      ctx->plans = mine;
      ctx->release_plans = cd_plan_free_all;
      e = mine, mine = NULL;
    }
    mtx_unlock(&ctx->lock);
    if (mine) free_entry(mine);
  }
  mtx_lock(&e->use);
  *out = e;
  return CAMDELTA_OK;
}

void cd_plan_release(camdelta_context *ctx, cd_plan_entry *e) {
  if (!e) return;
  mtx_unlock(&e->use);
  mtx_lock(&ctx->lock);
  const int last = --e->refs == 0 && e->retired;
  mtx_unlock(&ctx->lock);
  if (last) free_entry(e);
}

void cd_plan_invalidate(camdelta_context *ctx) {
  mtx_lock(&ctx->lock);
  cd_plan_entry *e = ctx->plans, *idle = NULL;
  ctx->plans = NULL;
  ctx->plan_gen++;
  while (e) {
    cd_plan_entry *next = e->next;
    e->retired = 1;
    if (e->refs == 0) e->next = idle, idle = e;
    e = next;
  }
  mtx_unlock(&ctx->lock);
  while (idle) {
    cd_plan_entry *next = idle->next;
    free_entry(idle);
    idle = next;
  }
}

void cd_plan_free_all(camdelta_context *ctx) {
  cd_plan_entry *e = ctx->plans;
  ctx->plans = NULL;
  while (e) {
    cd_plan_entry *next = e->next;
    free_entry(e);
    e = next;
  }
}

unsigned cd_plan_count(camdelta_context *ctx) {
  unsigned n = 0;
  mtx_lock(&ctx->lock);
  for (cd_plan_entry *e = ctx->plans; e; e = e->next) n++;
  mtx_unlock(&ctx->lock);
  return n;
}
