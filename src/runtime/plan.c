/* Per-context plan cache (declared in internal.h): a list guarded by the context's lock, like its program table; each entry is
 * reference-counted so that camdelta_tune_set can drop the plans while another thread still launches one. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static int same_key(const cd_plan_key *a, const cd_plan_key *b) {
  return a->op == b->op && a->D == b->D && a->alg == b->alg && a->prec == b->prec && a->vec == b->vec &&
         a->cls[0] == b->cls[0] && a->cls[1] == b->cls[1] && a->cls[2] == b->cls[2] && a->variant == b->variant &&
         a->exact[0] == b->exact[0] && a->exact[1] == b->exact[1] && a->exact[2] == b->exact[2];
}

static int is_exact(const cd_plan_key *k) { return k->exact[0] || k->exact[1] || k->exact[2]; }

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

/* With the context's lock held: unlinks and returns the oldest idle entry of an exact shape when there are more than
 * CD_PLAN_MAX_EXACT of them (new entries go first, so the oldest is the last), else NULL. */
static cd_plan_entry *trim_exact(camdelta_context *ctx) {
  unsigned n = 0;
  cd_plan_entry **oldest = NULL;
  for (cd_plan_entry **p = &ctx->plans; *p; p = &(*p)->next)
    if (is_exact(&(*p)->key)) {
      n++;
      if ((*p)->refs == 0) oldest = p;
    }
  if (n <= CD_PLAN_MAX_EXACT || !oldest) return NULL;
  cd_plan_entry *e = *oldest;
  *oldest = e->next;
  return e;
}

camdelta_status cd_plan_acquire(camdelta_context *ctx, const cd_plan_key *key, cd_plan_build_fn build,
                                const void *arg, void (*destroy)(void *plan), cd_plan_entry **out) {
  *out = NULL;
  mtx_lock(&ctx->lock);
  cd_plan_entry *e = find(ctx, key), *drop = NULL;
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
      if (is_exact(key)) drop = trim_exact(ctx);
    }
    mtx_unlock(&ctx->lock);
    if (mine) free_entry(mine);
    if (drop) free_entry(drop);
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

camdelta_status cd_ws_get(camdelta_context *ctx, cd_workspace *ws, int slot, size_t bytes, camdelta_buffer *out) {
  const camdelta_status st = cd_ensure_buffer(ctx, &ws->mem[slot], &ws->bytes[slot], bytes);
  *out = (camdelta_buffer){ws->mem[slot], 0};
  return st;
}

void cd_ws_free(cd_workspace *ws) {
  for (int i = 0; i < CD_WS_SLOTS; i++) {
    if (ws->mem[i]) clReleaseMemObject(ws->mem[i]); /* enqueued kernels keep their buffers alive */
    ws->mem[i] = NULL, ws->bytes[i] = 0;
  }
}
