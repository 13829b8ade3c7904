/* camdelta_tune_set / camdelta_tune_get: a family's values through the option registry (src/options/); the scan's
 * tile families are shown with the tiles they resolve to for a head dim. */
#include <stdio.h>

#include "options/options.h"
#include "scan/tc.h"
#include "scan/tiles.h"

/* The backward's tiles for head dim D with the context's override, as camdelta_tune_get shows them. */
static camdelta_status backward_text(const camdelta_context *ctx, size_t D, char *out, size_t size) {
  size_t wg, local;
  cd_sbwd_limits(&ctx->info, &wg, &local);
  cd_sbwd_cfg c;
  unsigned v[CD_SB_COUNT];
  char var[64];
  const int any = cd_scan_tile_values(ctx, CD_OPT_BACKWARD, CD_SB_COUNT, v, var, sizeof var);
  camdelta_status st = cd_sbwd_choose(D, local, wg, wg, wg, wg, &c);
  if (!st && any) st = cd_sbwd_override(D, local, wg, v, var, &c);
  if (st) return st;
  snprintf(out, size, "RPT=%zu TSG=%zu CB=%zu DPT=%zu TL=%zu TPT=%zu MC=%zu RL=%zu (%s)", c.rpt, c.tsg, c.cb, c.dpt,
           c.tl, c.tpt, c.mc, c.rl, any ? "override" : "heuristic");
  return CAMDELTA_OK;
}

/* camdelta_tune_get's text for a tile family: its values and, for "backward" and the tensor-core families (whose
 * tiles follow D alone), the tiles a call with head dim D gets, or why it cannot take the override. */
static camdelta_status tiles_text(camdelta_context *ctx, cd_opt_family_id f, size_t D, char *buf, size_t size) {
  char values[1024], resolved[256];
  cd_opt_describe_family(&ctx->opts, f, cd_device_gpu_like(&ctx->info), values, sizeof values);
  camdelta_status st = CAMDELTA_OK;
  resolved[0] = '\0';
  if (f == CD_OPT_FAM_BACKWARD) {
    st = backward_text(ctx, D, resolved, sizeof resolved);
  } else if (f >= CD_OPT_FAM_TC_GRAM && f <= CD_OPT_FAM_TC_FRAMES) {
    cd_tc_tiles t;
    const char *from;
    st = cd_tc_resolve(ctx, (int)(f - CD_OPT_FAM_TC_GRAM), D, 1, &t, &from);
    if (!st) snprintf(resolved, sizeof resolved, "WM=%u WN=%u MR=%u NR=%u KC=%u (%s)", t.wm, t.wn, t.mr, t.nr, t.kc, from);
  }
  if (st) { /* an override these tiles cannot take: the calls fail with this message, the query says it */
    snprintf(resolved, sizeof resolved, "not usable: %s", camdelta_last_message());
    cd_clear_error();
  }
  /* the chunkwise and sequential tiles follow B*H and S too: camdelta_scan_plan_describe shows a call's */
  char out[1400];
  if (resolved[0]) snprintf(out, sizeof out, "%s; for D=%zu: %s", values, D, resolved);
  else snprintf(out, sizeof out, "%s", values);
  return cd_copy_text("camdelta_tune_get", out, buf, size);
}

/* A process-wide family's values as this process reads them, "KEY=V KEY=V". */
static camdelta_status process_text(cd_opt_family_id f, char *buf, size_t size) {
  char text[1024], msg[512];
  size_t len = 0;
  text[0] = '\0';
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    if (cd_opt_decls[i].family != f) continue;
    uint32_t v;
    if (cd_opt_process((cd_opt_id)i, &v, msg, sizeof msg)) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s", msg);
    const int n = snprintf(text + len, sizeof text - len, "%s%s=%u", len ? " " : "", cd_opt_decls[i].key, (unsigned)v);
    if (n > 0 && (size_t)n < sizeof text - len) len += (size_t)n;
  }
  return cd_copy_text("camdelta_tune_get", text, buf, size);
}

camdelta_status camdelta_tune_set(camdelta_context *ctx, const char *family, const char *params) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_set: 'ctx' is NULL");
  const int f = cd_opt_family_find(family);
  if (f >= 0 && cd_opt_families[f].process)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_tune_set: family '%s' is process-wide, set by its environment variable only", family);
  if (f >= 0) {
    char who[64], msg[512];
    snprintf(who, sizeof who, "camdelta_tune_set(%s)", family);
    mtx_lock(&ctx->lock); /* writers one at a time; calls read each value whole without the lock */
    const int bad = cd_opt_set_family(&ctx->opts, (cd_opt_family_id)f, params, CD_OPT_FROM_API, who, msg, sizeof msg);
    mtx_unlock(&ctx->lock);
    if (bad) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s", msg);
    cd_plan_invalidate(ctx); /* plans may hold what the old values chose */
    return CAMDELTA_OK;
  }
  char names[512];
  cd_opt_family_names(names, sizeof names);
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_set: unknown family '%s' (%s)",
                 family ? family : "(null)", names);
}

camdelta_status camdelta_tune_get(camdelta_context *ctx, const char *family, size_t D, char *buf, size_t size) {
  cd_clear_error();
  if (!ctx || !buf) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_get: '%s' is NULL", ctx ? "buf" : "ctx");
  const int f = cd_opt_family_find(family);
  if (f < 0) {
    char names[512];
    cd_opt_family_names(names, sizeof names);
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_get: unknown family '%s' (%s)",
                   family ? family : "(null)", names);
  }
  camdelta_status st = cd_check_head_dim("camdelta_tune_get", D);
  if (st) return st;
  if (cd_opt_families[f].process) return process_text((cd_opt_family_id)f, buf, size);
  if (f >= CD_OPT_FAM_CHUNKWISE && f <= CD_OPT_FAM_TC_FRAMES)
    return tiles_text(ctx, (cd_opt_family_id)f, D, buf, size);
  char text[1024];
  cd_opt_describe_family(&ctx->opts, (cd_opt_family_id)f, cd_device_gpu_like(&ctx->info), text, sizeof text);
  return cd_copy_text("camdelta_tune_get", text, buf, size);
}
