/* Prep backward, register-resident form (cl/prep_bwd_regs.cl): the kernels, the launch shape and the launches.
 *
 * A tile is TT consecutive tokens of one batch row, all heads (TT: CAMDELTA_PREP_BWD_TILES's TT, default 4);
 * HS head slots of TT * D/4 work-items, each work-item keeping the raw q, k units and u of up to HPI = 5 heads in
 * registers (16 floats per head). HS is the most slots within CD_PBR_WG_MAX work-items (so that the registers
 * need not spill; H = 20, D = 112: HS = 4, 448 work-items). The program depends on (dtype, D) only (warmed with
 * the other prep backward programs); shapes with H > HS * HPI take the other forms. The
 * work-groups walk the tiles persistently, WPC per compute unit (CAMDELTA_PREP_BWD_TILES's WPC, default 1; its HS
 * and HPI set the slots and heads per slot, e.g. TT=4,HS=2,HPI=10: 224 work-items with twice the registers), and
 * sum their norm-weight terms in local memory (2 C floats); shapes whose local memory or registers do not fit
 * take the other forms. Used for calls without dproj/drope (like the fused form). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep_bwd_regs.h"
#include "prep_common.h"

/* GPU default: 1 the register-resident form where it fits, 0 the fused form (CAMDELTA_PREP_BWD_FUSED=2 forces it on
 * any device, 1 and 0 the older forms) */
#ifndef CD_PBR_DEFAULT
#define CD_PBR_DEFAULT 0 /* until measured on the H200 (see prep_regs.c) */
#endif
enum { CD_PBR_WG_MAX = 512, CD_PBR_HPI = 5, CD_PBR_DEFAULT_TT = 4, CD_PBR_DEFAULT_WPC = 1 };

void cd_pbr_release(cd_pbr_plan *p) {
  if (p->kernel) clReleaseKernel(p->kernel);
  if (p->reduce) clReleaseKernel(p->reduce);
  p->kernel = p->reduce = NULL;
}

static int aligned4(camdelta_buffer b) { return !b.mem || b.offset % 4 == 0; }

/* The kernels for (dtype, D): TT tokens, HS = the most slots within CD_PBR_WG_MAX work-items, HPI = CD_PBR_HPI
 * (any H <= HS * HPI). 1 when the context uses the form and the device takes the work-group. */
static int pbr_program(camdelta_context *ctx, camdelta_dtype dtype, size_t D, cd_pbr_plan *p, camdelta_status *st) {
  memset(p, 0, sizeof *p);
  *st = CAMDELTA_OK;
  const int gpu = (ctx->info.type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
  if (!(ctx->prep_bwd_fused == 2 || (ctx->prep_bwd_fused < 0 && gpu && CD_PBR_DEFAULT))) return 0;
  const size_t g4 = D / 4;
  const size_t limit = ctx->info.max_work_group_size < CD_PBR_WG_MAX ? ctx->info.max_work_group_size : CD_PBR_WG_MAX;
  const size_t tt = ctx->prep_bwd_tiles[0] ? ctx->prep_bwd_tiles[0] : CD_PBR_DEFAULT_TT;
  size_t hs = ctx->prep_bwd_tiles[3] ? ctx->prep_bwd_tiles[3] : limit / (tt * g4);
  const size_t hpi = ctx->prep_bwd_tiles[4] ? ctx->prep_bwd_tiles[4] : CD_PBR_HPI;
  /* the kernel's own local memory within 3/4 of the device's (the rest for the norm-weight sums, 2 C floats) */
  const size_t bk = 32 / tt < 4 ? 4 : 32 / tt, gstr = D + (bk - D % 32 + 32) % 32;
#define PBR_LOCAL(hs) ((3 * (hs) * tt * gstr + 2 * (hs) * tt * (g4 + 1) + 2 * (hs) * tt + 2 * tt + 32 * tt) * 4)
  while (!ctx->prep_bwd_tiles[3] && hs > 1 && PBR_LOCAL(hs) > ctx->info.local_mem_bytes / 4 * 3) hs--;
  if (hs < 1 || hs * tt * g4 > ctx->info.max_work_group_size || PBR_LOCAL(hs) > ctx->info.local_mem_bytes) return 0;
#undef PBR_LOCAL
  char opts[192];
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d -DCD_D=%zu -DCD_TT=%zu -DCD_HS=%zu -DCD_HPI=%zu", (int)dtype, D, tt, hs,
           hpi);
  if ((*st = cd_kernel(ctx, "prep_bwd_regs.cl", opts, "cd_prep_bwd_regs", &p->kernel)) ||
      (*st = cd_kernel(ctx, "prep_bwd_regs.cl", opts, "cd_prep_bwd_regs_reduce", &p->reduce))) {
    cd_pbr_release(p);
    return 0;
  }
  p->tt = tt, p->hs = hs, p->hpi = hpi, p->wg = tt * g4 * hs;
  if (!cd_prep_regs_wg_ok(ctx, p->kernel, p->wg)) {
    cd_pbr_release(p);
    return 0;
  }
  return 1;
}

camdelta_status cd_pbr_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D) {
  cd_pbr_plan p;
  camdelta_status st;
  if (pbr_program(ctx, dtype, D, &p, &st)) cd_pbr_release(&p);
  return st;
}

int cd_pbr_plan_make(camdelta_context *ctx, const camdelta_prep_backward_args *a, cd_pbr_plan *p,
                     camdelta_status *st) {
  const size_t B = a->B, N = a->N, H = a->H, D = a->D, C = H * D, g4 = D / 4;
  if (!pbr_program(ctx, a->dtype, D, p, st)) return 0;
  const size_t tt = p->tt, hs = p->hs, rows = hs * tt;
  const size_t bk = 32 / tt < 4 ? 4 : 32 / tt, gstr = D + (bk - D % 32 + 32) % 32;
  const size_t local = (3 * rows * gstr + 2 * rows * (g4 + 1) + 2 * rows + 2 * tt + 32 * tt + 2 * C) * 4;
  if (H > hs * p->hpi || local > ctx->info.local_mem_bytes) {
    cd_pbr_release(p);
    return 0;
  }
  const size_t tiles = B * ((N + tt - 1) / tt);
  const size_t wpc = ctx->prep_bwd_tiles[1] ? ctx->prep_bwd_tiles[1] : CD_PBR_DEFAULT_WPC;
  const size_t cu = ctx->info.compute_units ? ctx->info.compute_units : 1;
  p->groups = cu * wpc < tiles ? cu * wpc : tiles;
  return 1;
}

camdelta_status cd_pbr_run(camdelta_context *ctx, const camdelta_prep_backward_args *a, cl_mem inv,
                           const cd_pbr_plan *p, cd_launch *l, int *refused) {
  *refused = 0;
  const size_t B = a->B, N = a->N, H = a->H, D = a->D, C = H * D;
  const camdelta_buffer vec[] = {a->q_raw,  a->k_raw,    a->q_norm_weight, a->k_norm_weight, a->proj_q,
                                 a->proj_kv, a->rope_cos, a->rope_sin,      a->dq_raw,        a->dk_raw,
                                 a->dv_raw};
  int al = 1;
  for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) al = al && aligned4(vec[i]);
  const unsigned flags = (a->grad_q.mem ? 1u : 0) | (a->grad_k.mem ? 2u : 0) | (a->grad_v.mem ? 4u : 0) |
                         (a->grad_inflation_sq.mem ? 8u : 0) | (al ? 16u : 0);
  cl_mem pw = NULL, own_inv = NULL;
  camdelta_status st = cd_alloc(ctx, p->groups * 2 * C * sizeof(float), &pw);
  if (!st && !inv) st = cd_alloc(ctx, 2 * B * N * sizeof(float), &own_inv);
  if (!st && !inv) {
    inv = own_inv;
    st = cd_prep_inv_rms(ctx, B, N, H, D, a->dtype, a->norm_eps, a->q_raw, a->k_raw, inv, l);
  }
  const camdelta_buffer dummy = {pw, 0};
#define OPT(x) ((x).mem ? (x) : dummy)
  if (!st) {
    cd_args g = {p->kernel, 0, CL_SUCCESS};
    cd_arg_buf(&g, a->q_raw);
    cd_arg_buf(&g, a->k_raw);
    cd_arg_buf(&g, a->q_norm_weight);
    cd_arg_buf(&g, a->k_norm_weight);
    cd_arg_buf(&g, a->proj_q);
    cd_arg_buf(&g, a->proj_kv);
    cd_arg_buf(&g, a->rope_cos);
    cd_arg_buf(&g, a->rope_sin);
    cd_arg_mem(&g, inv);
    cd_arg_u64(&g, 0);
    cd_arg_buf(&g, OPT(a->grad_q));
    cd_arg_buf(&g, OPT(a->grad_k));
    cd_arg_buf(&g, OPT(a->grad_v));
    cd_arg_buf(&g, OPT(a->grad_inflation_sq));
    cd_arg_buf(&g, a->dq_raw);
    cd_arg_buf(&g, a->dk_raw);
    cd_arg_buf(&g, a->dv_raw);
    cd_arg_mem(&g, pw);
    cd_arg_local(&g, 2 * C * sizeof(float));
    cd_arg_u64(&g, N);
    cd_arg_u32(&g, (uint32_t)H);
    cd_arg_u64(&g, B);
    cd_arg_f32(&g, a->k_scale);
    cd_arg_u32(&g, flags);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_regs: setting arguments");
    const size_t lws = p->wg, gws = p->groups * lws;
    if (!st) {
      st = cd_enqueue(ctx, p->kernel, 1, &gws, &lws, l, "cd_prep_bwd_regs");
      *refused = st != CAMDELTA_OK;
    }
  }
#undef OPT
  if (!st && !*refused) {
    const size_t lmax = cd_kernel_max_wg(ctx, p->reduce);
    size_t lws[2] = {1, 1};
    while (lws[0] * 2 <= 32 && lws[0] * 2 <= lmax) lws[0] *= 2;
    while (lws[1] * 2 <= 32 && lws[0] * lws[1] * 2 <= lmax) lws[1] *= 2;
    cd_args g = {p->reduce, 0, CL_SUCCESS};
    cd_arg_mem(&g, pw);
    cd_arg_u64(&g, p->groups);
    cd_arg_u32(&g, (uint32_t)C);
    cd_arg_buf(&g, a->dq_norm_weight);
    cd_arg_buf(&g, a->dk_norm_weight);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_regs_reduce: setting arguments");
    const size_t gws[2] = {(2 * C + lws[0] - 1) / lws[0] * lws[0], lws[1]};
    if (!st) st = cd_enqueue(ctx, p->reduce, 2, gws, lws, l, "cd_prep_bwd_regs_reduce");
  }
  /* Released buffers live on until the enqueued kernels that use them have finished. */
  if (pw) clReleaseMemObject(pw);
  if (own_inv) clReleaseMemObject(own_inv);
  return st;
}
