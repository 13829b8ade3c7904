/* Prep forward, register-resident form (cl/prep_regs.cl): the launch shape and the kernel.
 *
 * Chosen with CAMDELTA_PREP_FUSED=2 on any device (1 and 0 the older forms; read at context creation); see
 * CD_PREP_REGS_DEFAULT for GPUs. A tile is TT consecutive tokens of one batch row, all heads; HS head slots of TT * D/4 work-items
 * each, every work-item holding the q and k units of up to HPI = CD_PREP_REGS_HPI heads in registers. HS is the
 * most slots within CD_PREP_REGS_WG_MAX work-items (TT = 4, D = 112: HS = 4, 448 work-items, H <= 20: 120
 * registers without spills on the H200, where 896 work-items spill). The program depends on (dtype, D) only, so
 * camdelta_warm builds it; shapes with H > HS * HPI use the other forms.
 * CAMDELTA_PREP_FWD_TILES (tuning, read at context creation): "TT=n,HS=n,HPI=n", TT in {4, 8, 16}, HPI <= 16 (e.g.
 * TT=4,HS=2,HPI=10: 224 work-items with twice the registers each). */
#include <stdio.h>
#include <stdlib.h>

#include "prep_common.h"

static const char TILES_ENV[] = "CAMDELTA_PREP_FWD_TILES";

/* the GPU default: 1 the register-resident form where it fits, 0 the fused form (prep.c). 0 until measured on the
 * H200: the driver reported a smaller work-group limit than the compiled size, so the one measurement ran the fused
 * form (ci/gpu-test.sh prep-regs measures both). */
#ifndef CD_PREP_REGS_DEFAULT
#define CD_PREP_REGS_DEFAULT 0
#endif

camdelta_status cd_prep_fwd_tiles_env(unsigned tiles[3]) {
  static const char *const keys[3] = {"TT", "HS", "HPI"};
  tiles[0] = tiles[1] = tiles[2] = 0;
  const char *env = getenv(TILES_ENV);
  if (!env || !*env) return CAMDELTA_OK;
  camdelta_status st = cd_parse_tiles(TILES_ENV, env, keys, 3, tiles);
  if (st) return st;
  if (tiles[0] && tiles[0] != 4 && tiles[0] != 8 && tiles[0] != 16)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: TT must be 4, 8 or 16 (value: '%s')", TILES_ENV, env);
  if (tiles[1] > 64 || tiles[2] > 16)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: HS must be at most 64 and HPI at most 16 (value: '%s')",
                   TILES_ENV, env);
  return CAMDELTA_OK;
}

int cd_prep_regs_wg_ok(camdelta_context *ctx, cl_kernel k, size_t wg) {
  if (cd_kernel_max_wg(ctx, k) >= wg) return 1;
  size_t c[3] = {0, 0, 0};
  return clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof c, c, NULL) == CL_SUCCESS &&
         c[0] == wg && c[1] == 1 && c[2] == 1;
}

/* The program: (dtype, D, TT, HS) with HS the most slots within CD_PREP_REGS_WG_MAX work-items (or the device's
 * limit), HPI = CD_PREP_REGS_HPI; it takes any H <= HS * HPI. Returns 1 and sets *p when the context uses the form
 * and the device takes the work-group; 0 otherwise (a build failure sets *st). */
static int regs_program(camdelta_context *ctx, camdelta_dtype dtype, size_t D, cd_prep_regs_plan *p,
                        camdelta_status *st) {
  *st = CAMDELTA_OK;
  p->kernel = NULL;
  const int gpu = (ctx->info.type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
  if (!(ctx->prep_fused == 2 || (ctx->prep_fused < 0 && gpu && CD_PREP_REGS_DEFAULT))) return 0;
  const size_t g4 = D / 4;
  const size_t limit = ctx->info.max_work_group_size < CD_PREP_REGS_WG_MAX ? ctx->info.max_work_group_size
                                                                           : CD_PREP_REGS_WG_MAX;
  const size_t tt = ctx->prep_fwd_tiles[0] ? ctx->prep_fwd_tiles[0] : CD_PREP_REGS_TT;
  size_t hs = ctx->prep_fwd_tiles[1] ? ctx->prep_fwd_tiles[1] : limit / (tt * g4);
#define REGS_LOCAL(hs) ((2 * (hs) * tt * (D + (36 - D % 32) % 32) + 2 * (hs) * tt * (g4 + 1) + 2 * tt + 32 * tt) * 4)
  /* fewer slots where the tiles would not fit local memory (small D: many slots) */
  while (!ctx->prep_fwd_tiles[1] && hs > 1 && REGS_LOCAL(hs) > ctx->info.local_mem_bytes) hs--;
  if (hs < 1 || hs * tt * g4 > ctx->info.max_work_group_size || REGS_LOCAL(hs) > ctx->info.local_mem_bytes) return 0;
#undef REGS_LOCAL
  const size_t wg = tt * g4 * hs;
  char opts[192];
  const size_t hpi = ctx->prep_fwd_tiles[2] ? ctx->prep_fwd_tiles[2] : CD_PREP_REGS_HPI;
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d -DCD_D=%zu -DCD_TT=%zu -DCD_HS=%zu -DCD_HPI=%zu", (int)dtype, D, tt, hs,
           hpi);
  cl_kernel k;
  if ((*st = cd_kernel(ctx, "prep_regs.cl", opts, "cd_prep_regs", &k))) return 0;
  if (!cd_prep_regs_wg_ok(ctx, k, wg)) {
    clReleaseKernel(k);
    return 0;
  }
  p->kernel = k;
  p->tt = tt, p->hs = hs, p->wg = wg, p->hpi = hpi;
  return 1;
}

int cd_prep_regs_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H, cd_prep_regs_plan *p,
                        camdelta_status *st) {
  if (!regs_program(ctx, dtype, D, p, st)) return 0;
  if (H > p->hs * p->hpi) {
    clReleaseKernel(p->kernel);
    p->kernel = NULL;
    return 0;
  }
  return 1;
}

camdelta_status cd_prep_regs_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D) {
  cd_prep_regs_plan p;
  camdelta_status st;
  if (regs_program(ctx, dtype, D, &p, &st)) clReleaseKernel(p.kernel);
  return st;
}
