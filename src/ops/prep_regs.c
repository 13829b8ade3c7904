/* Prep forward, register-resident form (cl/prep_regs.cl): the launch shape and the kernel.
 *
 * Chosen with CAMDELTA_PREP_FUSED=2 (read at context creation; see prep.c for the GPU default). A tile is TT
 * consecutive tokens of one batch row, all heads; HS head slots of TT * D/4 work-items each, every work-item
 * holding the q and k units of HPI = ceil(H / HS) heads in registers. HS is the most slots that fit the
 * work-group limit (1024 or the device's), evened out over H (H = 20, D = 112, TT = 8: HS = 4, HPI = 5).
 * Shapes that would need more than CD_PREP_REGS_MAX_HPI heads per work-item (registers) use the other forms.
 * CAMDELTA_PREP_FWD_TILES (tuning, read at context creation): "TT=n,HS=n", TT in {4, 8, 16}. */
#include <stdio.h>
#include <stdlib.h>

#include "prep_common.h"

static const char TILES_ENV[] = "CAMDELTA_PREP_FWD_TILES";

camdelta_status cd_prep_fwd_tiles_env(unsigned tiles[2]) {
  static const char *const keys[2] = {"TT", "HS"};
  tiles[0] = tiles[1] = 0;
  const char *env = getenv(TILES_ENV);
  if (!env || !*env) return CAMDELTA_OK;
  camdelta_status st = cd_parse_tiles(TILES_ENV, env, keys, 2, tiles);
  if (st) return st;
  if (tiles[0] && tiles[0] != 4 && tiles[0] != 8 && tiles[0] != 16)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: TT must be 4, 8 or 16 (value: '%s')", TILES_ENV, env);
  if (tiles[1] > 64)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: HS must be at most 64 (value: '%s')", TILES_ENV, env);
  return CAMDELTA_OK;
}

int cd_prep_regs_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H, int aligned,
                        cd_prep_regs_plan *p, camdelta_status *st) {
  *st = CAMDELTA_OK;
  p->kernel = NULL;
  const size_t g4 = D / 4;
  size_t limit = ctx->info.max_work_group_size < 1024 ? ctx->info.max_work_group_size : 1024;
  size_t tt = ctx->prep_fwd_tiles[0] ? ctx->prep_fwd_tiles[0] : CD_PREP_REGS_TT;
  while (tt > 1 && tt * g4 > limit) tt /= 2;
  if (tt * g4 > limit) return 0;
  for (;;) {
    size_t hs = ctx->prep_fwd_tiles[1] ? ctx->prep_fwd_tiles[1] : limit / (tt * g4);
    if (hs > H) hs = H;
    if (hs < 1) hs = 1;
    if (hs * tt * g4 > limit) return 0;
    const size_t hpi = (H + hs - 1) / hs;
    if (hpi > CD_PREP_REGS_MAX_HPI) return 0;
    hs = (H + hpi - 1) / hpi; /* even the slots out: H = 20 with room for 4 slots -> 4 x 5, not 4 x 5 + idle */
    const size_t wg = tt * g4 * hs;
    const size_t local = (2 * hs * tt * (D + (36 - D % 32) % 32) + 2 * hs * tt * (g4 + 1) + 2 * tt + 32 * tt) * 4;
    if (local > ctx->info.local_mem_bytes) return 0;
    char opts[192];
    snprintf(opts, sizeof opts, "-DCD_DTYPE=%d -DCD_D=%zu -DCD_TT=%zu -DCD_HS=%zu -DCD_HPI=%zu -DCD_AL=%d", (int)dtype,
             D, tt, hs, hpi, aligned != 0);
    cl_kernel k;
    if ((*st = cd_kernel(ctx, "prep_regs.cl", opts, "cd_prep_regs", &k))) return 0;
    if (cd_kernel_max_wg(ctx, k) >= wg) {
      p->kernel = k;
      p->tt = tt, p->hs = hs, p->wg = wg;
      return 1;
    }
    clReleaseKernel(k);
    /* the built kernel cannot take that many work-items (registers): fewer slots, unless fixed by the caller */
    if (ctx->prep_fwd_tiles[1] || hs == 1) return 0;
    limit = wg / 2;
    if (tt * g4 > limit) return 0;
  }
}
