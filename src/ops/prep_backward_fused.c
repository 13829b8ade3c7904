/* Prep backward, fused form (cl/prep_backward_fused.cl): the kernels, the launch shape and the launches.
 *
 * Used on GPUs and accelerators for calls without dproj_q/dproj_kv/drope_cos/drope_sin (those, and every call on
 * a CPU, take the three-kernel form of prep_backward.c, which PoCL runs faster); CAMDELTA_PREP_BWD_FUSED=0|1,
 * read at context creation, forces either form.
 *
 * Shape: a tile is TT consecutive tokens of one batch row, all heads; a step covers HB heads, one work-item per
 * (head of the step, 4-channel unit, token): local size HB * TT * D/4 <= 32 TT. HB is the most heads that fit
 * (32 / (D/4)), evened out over the steps (H = 20, D = 8: two steps of 10, not 16 + 4). TT = 4 in f32 (a
 * gradient row read covers 16 bytes, half a sector, but half the tile rows wait in the L2 cache between the two
 * phases: faster on the H200, see PBF_DEFAULT_TT), 16 for 16-bit storage (32 bytes), halved while the device or
 * the built kernel (its registers) cannot take TT * D/4 work-items. The work-groups walk the tiles persistently,
 * WPC per compute unit (default 4, the fastest of the H200 sweep at PBF_DEFAULT_TT): fewer keep more of the tile
 * rows phase 1 read in the L2 cache until phase 2 reads them again, more keep more loads in flight.
 * CAMDELTA_PREP_BWD_TILES (tuning, read at context creation): "TT=n,WPC=n,PF=n", TT in {4, 8, 16} (32 would need
 * more than 48 KiB of local memory), WPC >= 1, PF 1 (the default: each step loads its inputs itself) or 2 (loaded
 * one step ahead, during the previous step's barriers).
 *
 * Scratch: dpost/dpre (2, B, H, N) with grad_inflation_sq; the norm-weight partials, one row of 2 C floats per
 * work-group (accumulated in local memory when 2 C floats fit in 24 KiB next to the kernel's own local memory)
 * or else per tile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep_backward_fused.h"
#include "prep_common.h"

enum { PBF_GQ = 1, PBF_GK = 2, PBF_GV = 4, PBF_GI = 8, PBF_ALIGNED = 16, PBF_WLOCAL = 32 };
/* H200, sana480, 8-token tiles (ci/gpu-test.sh prep-ab, 2026-12-02): loads one step ahead (PF=2)
 * 1.913 ms, without (PF=1) 1.594 ms; WPC 1/2/4/8 1.885/1.896/1.913/1.937 ms (within 3%). */
enum { PBF_DEFAULT_WPC = 4, PBF_DEFAULT_PF = 0, PBF_WLOCAL_MAX = 24576 };
/* Tokens per tile in f32: H200, sana480, ms (two rounds, one call, 2026-12-03): TT=8 1.585/1.589, TT=4 1.479/1.482
 * (sana720 3.60 at TT=8, 3.45 at TT=4 with WPC=8); TT=4 by WPC 2/4/6/8/12/16/24/32: 2.30/1.48/1.79/1.51/1.55/1.56/
 * 1.63/1.68; TT=8 by WPC 1/2/3/4/6/8/16: 2.38/1.57/1.97/1.59/1.61/1.61/1.67. */
enum { PBF_DEFAULT_TT = 4, PBF_DEFAULT_TT_16BIT = 16 };

static const char TILES_ENV[] = "CAMDELTA_PREP_BWD_TILES";

camdelta_status cd_prep_bwd_tiles_env(unsigned tiles[3]) {
  static const char *const keys[3] = {"TT", "WPC", "PF"};
  camdelta_status st = cd_prep_tiles_parse_env(TILES_ENV, keys, 3, tiles);
  if (!st && tiles[2] > 2)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: PF must be 1 (off) or 2 (on) (value: '%s')", TILES_ENV,
                   getenv(TILES_ENV));
  return st;
}

void cd_pbf_release(cd_pbf_plan *p) {
  if (p->fused) clReleaseKernel(p->fused);
  if (p->reduce) clReleaseKernel(p->reduce);
  p->fused = p->reduce = NULL;
}

int cd_pbf_kernels(camdelta_context *ctx, camdelta_dtype dtype, size_t D, int g2, cd_pbf_plan *p,
                   camdelta_status *st) {
  memset(p, 0, sizeof *p);
  *st = CAMDELTA_OK;
  int want = ctx->prep_bwd_fused;
  if (want < 0) want = cd_device_gpu_like(&ctx->info);
  if (!want) return 0;
  const unsigned tt_default = dtype == CAMDELTA_F32 ? PBF_DEFAULT_TT : PBF_DEFAULT_TT_16BIT;
  p->tt = ctx->prep_bwd_tiles[0] ? ctx->prep_bwd_tiles[0] : tt_default;
  const int pf = ctx->prep_bwd_tiles[2] ? ctx->prep_bwd_tiles[2] == 2 : PBF_DEFAULT_PF;
  /* one step of one head needs tt * D/4 work-items: a smaller tile where the device or the kernel (its registers)
   * cannot take that many */
  for (;;) {
    if (p->tt * (D / 4) <= ctx->info.max_work_group_size) {
      char opts[160];
      snprintf(opts, sizeof opts, "-DCD_DTYPE=%d -DCD_D=%zu -DCD_TT=%u -DCD_PF=%d -DCD_G2=%d", (int)dtype, D, p->tt, pf,
               g2 != 0);
      if ((*st = cd_kernel(ctx, "prep_backward_fused.cl", opts, "cd_prep_bwd_fused", &p->fused)) ||
          (*st = cd_kernel(ctx, "prep_backward_fused.cl", opts, "cd_prep_bwd_fused_reduce", &p->reduce))) {
        cd_pbf_release(p);
        return 0;
      }
      if (p->tt * (D / 4) <= cd_kernel_max_wg(ctx, p->fused)) return 1;
      cd_pbf_release(p);
    }
    if (p->tt <= 4) return 0;
    p->tt /= 2;
  }
}

int cd_pbf_shape(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, cd_pbf_plan *p) {
  const size_t g4 = D / 4, lmax = cd_kernel_max_wg(ctx, p->fused);
  if (p->tt * g4 > lmax) {
    cd_pbf_release(p);
    return 0;
  }
  p->hb = cd_prep_heads_per_step(H, g4, p->tt, lmax);
  p->lws = p->hb * p->tt * g4;
  p->tiles = B * ((N + p->tt - 1) / p->tt);
  p->groups = cd_prep_tile_groups(ctx, p->tiles, ctx->prep_bwd_tiles[1] ? ctx->prep_bwd_tiles[1] : PBF_DEFAULT_WPC);
  cl_ulong static_local = 0;
  if (clGetKernelWorkGroupInfo(p->fused, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof static_local, &static_local,
                               NULL) != CL_SUCCESS)
    static_local = ctx->info.local_mem_bytes;
  const size_t wbytes = 2 * H * D * sizeof(float);
  p->wlocal = wbytes <= PBF_WLOCAL_MAX && static_local + wbytes <= ctx->info.local_mem_bytes;
  return 1;
}

camdelta_status cd_pbf_run(camdelta_context *ctx, const camdelta_prep_backward_args *a, cl_mem inv,
                           const camdelta_buffer *g2, const cd_pbf_plan *p, cd_launch *l) {
  const size_t B = a->B, N = a->N, H = a->H, D = a->D, C = H * D;
  const int has_gi = a->grad_inflation_sq.mem != NULL;
  const camdelta_buffer vec[] = {a->q_raw,  a->k_raw,    a->q_norm_weight, a->k_norm_weight, a->proj_q,
                                 a->proj_kv, a->rope_cos, a->rope_sin,      a->dq_raw,        a->dk_raw,
                                 a->dv_raw};
  const int al = cd_buffers_aligned4(vec, sizeof vec / sizeof vec[0]);
  const unsigned flags = (a->grad_q.mem ? PBF_GQ : 0) | (a->grad_k.mem ? PBF_GK : 0) | (a->grad_v.mem ? PBF_GV : 0) |
                         (has_gi ? PBF_GI : 0) | (al ? PBF_ALIGNED : 0) | (p->wlocal ? PBF_WLOCAL : 0);
  const size_t rows = p->wlocal ? p->groups : p->tiles;

  /* scratch: dpost/dpre, norm-weight partials, inverse RMS (when not saved) */
  cl_mem dgi = NULL, pw = NULL, own_inv = NULL;
  camdelta_status st = cd_alloc(ctx, rows * 2 * C * sizeof(float), &pw);
  if (!st && has_gi) st = cd_alloc(ctx, 2 * B * H * N * sizeof(float), &dgi);
  if (!st && !inv) st = cd_alloc(ctx, 2 * B * N * sizeof(float), &own_inv);
  if (!st && !inv) {
    inv = own_inv;
    st = cd_prep_inv_rms(ctx, B, N, H, D, a->dtype, a->norm_eps, a->q_raw, a->k_raw, inv, l);
  }
  const camdelta_buffer dummy = {pw, 0};
#define OPT(x) ((x).mem ? (x) : dummy)
  if (!st) {
    cd_args g = {p->fused, 0, CL_SUCCESS};
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
    cd_arg_buf(&g, g2 ? OPT(g2[0]) : dummy);
    cd_arg_buf(&g, g2 ? OPT(g2[1]) : dummy);
    cd_arg_buf(&g, OPT(a->grad_inflation_sq));
    cd_arg_buf(&g, a->dq_raw);
    cd_arg_buf(&g, a->dk_raw);
    cd_arg_buf(&g, a->dv_raw);
    cd_arg_mem(&g, dgi ? dgi : pw);
    cd_arg_mem(&g, pw);
    cd_arg_local(&g, p->wlocal ? 2 * C * sizeof(float) : sizeof(float));
    cd_arg_u64(&g, N);
    cd_arg_u32(&g, (uint32_t)H);
    cd_arg_u64(&g, B);
    cd_arg_u32(&g, p->hb);
    cd_arg_f32(&g, a->k_scale);
    cd_arg_u32(&g, flags);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_fused: setting arguments");
    const size_t lws = p->lws, gws = p->groups * lws;
    if (!st) st = cd_enqueue(ctx, p->fused, 1, &gws, &lws, l, "cd_prep_bwd_fused");
  }
#undef OPT
  if (!st) {
    /* local (W, R): W columns by R lanes, powers of two up to 32 each within the kernel's limit */
    const size_t lmax = cd_kernel_max_wg(ctx, p->reduce);
    size_t lws[2] = {1, 1};
    while (lws[0] * 2 <= 32 && lws[0] * 2 <= lmax) lws[0] *= 2;
    while (lws[1] * 2 <= 32 && lws[0] * lws[1] * 2 <= lmax) lws[1] *= 2;
    cd_args g = {p->reduce, 0, CL_SUCCESS};
    cd_arg_mem(&g, pw);
    cd_arg_u64(&g, rows);
    cd_arg_u32(&g, (uint32_t)C);
    cd_arg_buf(&g, a->dq_norm_weight);
    cd_arg_buf(&g, a->dk_norm_weight);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_fused_reduce: setting arguments");
    const size_t gws[2] = {(2 * C + lws[0] - 1) / lws[0] * lws[0], lws[1]};
    if (!st) st = cd_enqueue(ctx, p->reduce, 2, gws, lws, l, "cd_prep_bwd_fused_reduce");
  }
  /* Released buffers live on until the enqueued kernels that use them have finished. */
  if (pw) clReleaseMemObject(pw);
  if (dgi) clReleaseMemObject(dgi);
  if (own_inv) clReleaseMemObject(own_inv);
  return st;
}
