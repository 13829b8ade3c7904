/* camdelta_tune_set / camdelta_tune_get: a family's values through the option registry (src/options/), or the scan
 * families that keep tiles of their own (the tensor-core families in params.c, the FMA families in fma_tune.c). */
#include <stdio.h>

#include "options/options.h"
#include "plan.h"
#include "tiles.h"
#include "tc.h"

/* The families of either kind, for messages. */
static void all_families(char *buf, size_t size) {
  char reg[256];
  cd_opt_family_names(reg, sizeof reg);
  snprintf(buf, size, "%s, gram, apply, frames, chunkwise, backward, sequential", reg);
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
  if (cd_tune_fma_family(family) >= 0) return cd_tune_fma_set(ctx, cd_tune_fma_family(family), params);
  if (cd_tc_family(family) >= 0) return cd_tc_tune_set(ctx, cd_tc_family(family), params);
  char names[512];
  all_families(names, sizeof names);
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_set: unknown family '%s' (%s)",
                 family ? family : "(null)", names);
}

camdelta_status camdelta_tune_get(camdelta_context *ctx, const char *family, size_t D, char *buf, size_t size) {
  cd_clear_error();
  if (!ctx || !buf) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_get: '%s' is NULL", ctx ? "buf" : "ctx");
  const int f = cd_opt_family_find(family);
  if (f < 0 && cd_tune_fma_family(family) < 0 && cd_tc_family(family) < 0) {
    char names[512];
    all_families(names, sizeof names);
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_get: unknown family '%s' (%s)",
                   family ? family : "(null)", names);
  }
  camdelta_status st = cd_check_head_dim("camdelta_tune_get", D);
  if (st) return st;
  if (f >= 0) {
    char text[1024];
    if (cd_opt_families[f].process) return process_text((cd_opt_family_id)f, buf, size);
    cd_opt_describe_family(&ctx->opts, (cd_opt_family_id)f, cd_device_gpu_like(&ctx->info), text, sizeof text);
    return cd_copy_text("camdelta_tune_get", text, buf, size);
  }
  if (cd_tune_fma_family(family) >= 0) return cd_tune_fma_get(ctx, cd_tune_fma_family(family), D, buf, size);
  return cd_tc_tune_get(ctx, cd_tc_family(family), D, buf, size);
}
