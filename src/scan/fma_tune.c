/* Overrides of the scan's FMA tiles per context: the environment read once at context creation
 * (CAMDELTA_SCAN_TILES, CAMDELTA_SCAN_BWD_TILES, CAMDELTA_SEQ_TILES), replaced by camdelta_tune_set families
 * "chunkwise", "backward" and "sequential". A change drops the context's plans, so the next call plans with the new tiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "tiles.h"

static const char *const FAMILY[CD_FMA_FAMILIES] = {"chunkwise", "backward", "sequential"};
static const char *const ENV[CD_FMA_FAMILIES] = {"CAMDELTA_SCAN_TILES", "CAMDELTA_SCAN_BWD_TILES",
                                                 "CAMDELTA_SEQ_TILES"};

int cd_tune_fma_family(const char *name) {
  for (int f = 0; f < CD_FMA_FAMILIES; f++)
    if (name && strcmp(name, FAMILY[f]) == 0) return f;
  return -1;
}

camdelta_status cd_tune_fma_env(camdelta_context *ctx) {
  for (int f = 0; f < CD_FMA_FAMILIES; f++) {
    const char *env = getenv(ENV[f]);
    ctx->fma_tiles[f] = NULL;
    snprintf(ctx->fma_var[f], sizeof ctx->fma_var[f], "%s", ENV[f]);
    if (env && *env && !(ctx->fma_tiles[f] = strdup(env))) {
      cd_tune_fma_free(ctx);
      return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory reading %s", ENV[f]);
    }
  }
  return CAMDELTA_OK;
}

void cd_tune_fma_free(camdelta_context *ctx) {
  for (int f = 0; f < CD_FMA_FAMILIES; f++) {
    free(ctx->fma_tiles[f]);
    ctx->fma_tiles[f] = NULL;
  }
}

void cd_tune_fma_text(camdelta_context *ctx, int family, char *text, size_t size, char *var, size_t var_size) {
  mtx_lock(&ctx->lock);
  const char *t = ctx->fma_tiles[family];
  if (t && strlen(t) >= size) t = "(too long)"; /* fails the parse, naming the source */
  snprintf(text, size, "%s", t ? t : "");
  snprintf(var, var_size, "%s", ctx->fma_var[family][0] ? ctx->fma_var[family] : ENV[family]);
  mtx_unlock(&ctx->lock);
}

camdelta_status cd_tune_fma_set(camdelta_context *ctx, int family, const char *params) {
  char var[48];
  snprintf(var, sizeof var, "camdelta_tune_set(%s)", FAMILY[family]);
  camdelta_status st;
  if (family == CD_FMA_CHUNKWISE) {
    cd_scan_override o;
    st = cd_scan_override_parse(var, params, &o);
  } else if (family == CD_FMA_SEQUENTIAL) {
    unsigned v[CD_SQ_COUNT];
    st = params && *params ? cd_parse_tiles(var, params, cd_seq_tile_keys, CD_SQ_COUNT, v) : CAMDELTA_OK;
  } else {
    unsigned v[CD_SB_COUNT];
    int any;
    st = params && *params ? cd_sbwd_parse(var, params, v, &any) : CAMDELTA_OK;
  }
  if (st) return st;
  char *copy = NULL;
  if (params && *params && !(copy = strdup(params)))
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_tune_set: out of host memory");
  mtx_lock(&ctx->lock);
  free(ctx->fma_tiles[family]);
  ctx->fma_tiles[family] = copy;
  snprintf(ctx->fma_var[family], sizeof ctx->fma_var[family], "%s", var);
  mtx_unlock(&ctx->lock);
  cd_plan_invalidate(ctx);
  return CAMDELTA_OK;
}

camdelta_status cd_tune_fma_get(camdelta_context *ctx, int family, size_t D, char *buf, size_t size) {
  char text[512], var[64], out[640];
  cd_tune_fma_text(ctx, family, text, sizeof text, var, sizeof var);
  camdelta_status st = CAMDELTA_OK;
  if (family != CD_FMA_BACKWARD) {
    /* the chunkwise and sequential tiles follow B*H and S too: only the override is a property of the context */
    if (text[0]) snprintf(out, sizeof out, "%s (override, %s)", text, var);
    else snprintf(out, sizeof out, "(heuristic, by B*H and S: see camdelta_scan_plan_describe)");
  } else {
    size_t wg, local;
    cd_sbwd_limits(&ctx->info, &wg, &local);
    cd_sbwd_cfg c;
    unsigned v[CD_SB_COUNT];
    int any = 0;
    st = cd_sbwd_choose(D, local, wg, wg, wg, wg, &c);
    if (!st && text[0]) st = cd_sbwd_parse(var, text, v, &any);
    if (!st && any) st = cd_sbwd_override(D, local, wg, v, var, &c);
    if (st) return st;
    snprintf(out, sizeof out, "RPT=%zu TSG=%zu CB=%zu DPT=%zu TL=%zu TPT=%zu MC=%zu RL=%zu (%s)", c.rpt, c.tsg, c.cb,
             c.dpt, c.tl, c.tpt, c.mc, c.rl, any ? "override" : "heuristic");
  }
  return cd_copy_text("camdelta_tune_get", out, buf, size);
}
