/* Prep backward, two-pass form (cl/prep_backward_fused.cl): the kernels, the launch shape and the launches.
 *
 * Used on GPUs and accelerators for calls without dproj_q/dproj_kv/drope_cos/drope_sin (those, and every call on
 * a CPU, take the three-kernel form of prep_backward.c, which PoCL runs faster); option "prep_backward" FORM forces
 * either form. The keys named below are that family's (src/options/table.c has their defaults).
 *
 * Shape: pass 1 (cd_prep_bwd_sums, or cd_prep_bwd_sums_out[4] when the call gives the forward's outputs q, k,
 * inflation_sq with a saved object in f32: cd_pbf_pass1_of) runs one work-item per (b, n, h) (sums_out4: per 4
 * tokens, where N and the offsets are multiples of 4: the same bytes read along the tokens only), TS tokens per
 * work-group, heads fastest in the grid.
 * Pass 2 (cd_prep_bwd_grads) runs, per head, J groups of NU work-groups, each work-group covering D/4/NU of the
 * head's 4-channel units over tiles of TT tokens: TT * D/4/NU work-items (TT 16: a gradient row read covers 64
 * bytes in f32); TT is halved while the device or the built kernel (its registers) cannot take the work-group.
 * J = WPC * compute units / H: J rows of norm-weight partials.
 * Pass 2 writes all three tensors per work-group (cd_prep_bwd_grads, TW 3) or one (cd_prep_bwd_grads_kind, TW 1:
 * three times the work-groups, each holding one camera matrix and one input row, fewer registers: 16-bit storage's
 * default).
 * Pass 2 reads the camera matrices and the RoPE coefficients from planar copies that cd_prep_bwd_ssum writes: the
 * matrices as 8 rows of B N float4 (row r of proj_q, then of proj_kv, across the tokens), the tables as D/8 rows of
 * N float4 each (a 4-channel unit across the tokens), so that a warp's tokens read contiguous bytes where the
 * tensors' own layouts put them 64 and 224 bytes apart.
 *
 * Scratch: the per-(b, h, n) shares of S_q, S_k (2, B, H, N), S (2, B, N), dpost/dpre (2, B, H, N) with
 * grad_inflation_sq, the norm-weight partials (J, 2 C), the inverse RMS values (2, B, N) when none were saved, the
 * planar camera matrices (8, B N, 4), then the planar RoPE tables (2, D/8, N, 4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/prep_backward_fused.h"
#include "ops/prep_common.h"

enum { PBF_GQ = 1, PBF_GK = 2, PBF_GV = 4, PBF_GI = 8, PBF_ALIGNED = 16 };

static const char *const GRADS_NAMES[2] = {"cd_prep_bwd_grads", "cd_prep_bwd_grads_kind"};
static const char *const PASS1_NAMES[3] = {"cd_prep_bwd_sums", "cd_prep_bwd_sums_out", "cd_prep_bwd_sums_out4"};

cd_pbf_pass1 cd_pbf_pass1_of(const camdelta_prep_backward_args *a, const camdelta_prep_saved *saved,
                             const camdelta_buffer *g2) {
  if (!saved || !a->q.mem || a->dtype != CAMDELTA_F32) return CD_PBF_P1_RAW; /* k, inflation_sq come with q */
  const int four = a->N % 4 == 0 && a->q.offset % 4 == 0 && a->k.offset % 4 == 0 && a->grad_q.offset % 4 == 0 &&
                   a->grad_k.offset % 4 == 0 && (!g2 || g2[0].offset % 4 == 0);
  return four ? CD_PBF_P1_OUT4 : CD_PBF_P1_OUT;
}

void cd_pbf_release(cd_pbf_plan *p) {
  cl_kernel *k[4] = {&p->sums, &p->ssum, &p->grads, &p->reduce};
  for (int i = 0; i < 4; i++) {
    if (*k[i]) clReleaseKernel(*k[i]);
    *k[i] = NULL;
  }
}

int cd_pbf_kernels(camdelta_context *ctx, camdelta_dtype dtype, size_t D, int g2, cd_pbf_pass1 p1, cd_pbf_plan *p,
                   camdelta_status *st) {
  memset(p, 0, sizeof *p);
  p->p1 = p1;
  *st = CAMDELTA_OK;
  if (cd_option(ctx, CD_OPT_PREP_BWD_FORM, dtype) != 1) return 0;
  p->tt = cd_option(ctx, CD_OPT_PREP_BWD_TT, dtype);
  /* work-groups per (tile, head) of pass 2: a count that does not divide D/4 falls back to 1 */
  p->nu = cd_option(ctx, CD_OPT_PREP_BWD_NU, dtype);
  if ((D / 4) % p->nu) p->nu = 1;
  p->wpc = cd_option(ctx, CD_OPT_PREP_BWD_WPC, dtype);
  p->tw = cd_option(ctx, CD_OPT_PREP_BWD_TW, dtype);
  const size_t uw = D / 4 / p->nu;
  /* a work-group of pass 2 needs tt * uw work-items: a smaller tile where the device or the kernel (its
   * registers) cannot take that many */
  for (;;) {
    if (p->tt * uw <= ctx->info.max_work_group_size) {
      char opts[200], dt[40];
      snprintf(opts, sizeof opts, "%s -DCD_D=%zu -DCD_TT=%u -DCD_G2=%d -DCD_UW=%zu", cd_dtype_opts(dtype, dt), D, p->tt,
               g2 != 0, uw);
      const char *const names[4] = {PASS1_NAMES[p1], "cd_prep_bwd_ssum", GRADS_NAMES[p->tw == 1],
                                    "cd_prep_bwd_fused_reduce"};
      cl_kernel *k[4] = {&p->sums, &p->ssum, &p->grads, &p->reduce};
      for (int i = 0; i < 4 && !*st; i++) *st = cd_kernel(ctx, "prep_backward_fused.cl", opts, names[i], k[i]);
      if (*st) {
        cd_pbf_release(p);
        return 0;
      }
      if (p->tt * uw <= cd_kernel_max_wg(ctx, p->grads)) break;
      cd_pbf_release(p);
    }
    if (p->tt <= 4) return 0;
    p->tt /= 2;
  }
  p->ts = cd_option(ctx, CD_OPT_PREP_BWD_TS, dtype);
  const size_t smax = cd_kernel_max_wg(ctx, p->sums);
  while (p->ts > 1 && p->ts > smax) p->ts /= 2;
  return 1;
}

void cd_pbf_shape(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, cd_pbf_plan *p) {
  const size_t n1 = p->p1 == CD_PBF_P1_OUT4 ? N / 4 : N; /* pass 1's work-items per (b, h) */
  p->groups1 = B * ((n1 + p->ts - 1) / p->ts) * H;
  p->lws2 = p->tt * (D / 4 / p->nu);
  const size_t tiles = B * ((N + p->tt - 1) / p->tt), cu = ctx->info.compute_units ? ctx->info.compute_units : 1;
  p->rows = (cu * p->wpc + H - 1) / H;
  if (p->rows > tiles) p->rows = tiles;
  p->groups2 = (3 / p->tw) * p->rows * H * p->nu;
}

/* The arguments the two passes share, in their order: the forward's inputs and the saved inverse RMS values. */
static void args_inputs(cd_args *g, const camdelta_prep_backward_args *a, cl_mem inv) {
  CD_ARG_BUFS(g, a->q_raw, a->k_raw, a->q_norm_weight, a->k_norm_weight, a->proj_q, a->proj_kv, a->rope_cos,
              a->rope_sin);
  cd_arg_mem(g, inv);
  cd_arg_u64(g, 0);
}

/* A kernel's arguments did not set: the message names the kernel (built only on that path). */
static camdelta_status args_failed(cl_int err, const char *kernel) {
  char what[64];
  snprintf(what, sizeof what, "%s: setting arguments", kernel);
  return cd_cl_fail(err, what);
}

/* The trailing arguments of every kernel but the reduction: N, H, B[, k_scale, flags]. */
static void args_shape(cd_args *g, const camdelta_prep_backward_args *a, int scale_flags, unsigned flags) {
  cd_arg_u64(g, a->N);
  cd_arg_u32(g, (uint32_t)a->H);
  cd_arg_u64(g, a->B);
  if (!scale_flags) return;
  cd_arg_f32(g, a->k_scale);
  cd_arg_u32(g, flags);
}

camdelta_status cd_pbf_run(camdelta_context *ctx, const camdelta_prep_backward_args *a,
                           const camdelta_prep_saved *saved, const camdelta_buffer *g2, const cd_pbf_plan *p,
                           cd_launch *l) {
  const size_t B = a->B, N = a->N, H = a->H, D = a->D, C = H * D;
  cl_mem inv = saved ? saved->inv_rms : NULL;
  const int has_gi = a->grad_inflation_sq.mem != NULL;
  const camdelta_buffer vec[] = {a->q_raw,  a->k_raw,    a->q_norm_weight, a->k_norm_weight, a->proj_q,
                                 a->proj_kv, a->rope_cos, a->rope_sin,      a->dq_raw,        a->dk_raw,
                                 a->dv_raw};
  const int al = cd_buffers_aligned4(vec, sizeof vec / sizeof vec[0]);
  const unsigned flags = (a->grad_q.mem ? PBF_GQ : 0) | (a->grad_k.mem ? PBF_GK : 0) | (a->grad_v.mem ? PBF_GV : 0) |
                         (has_gi ? PBF_GI : 0) | (al ? PBF_ALIGNED : 0);

  /* scratch: norm-weight partials, S shares, S, dpost/dpre, inverse RMS (when not saved) */
  enum { PW, PART, S, DGI, INV, PM, NSCR };
  const size_t bytes[NSCR] = {p->rows * 2 * C * sizeof(float), 2 * B * H * N * sizeof(float),
                              2 * B * N * sizeof(float),        has_gi ? 2 * B * H * N * sizeof(float) : 0,
                              inv ? 0 : 2 * B * N * sizeof(float),
                              (8 * B * N + N * (D / 4)) * 4 * sizeof(float)};
  cl_mem scr[NSCR] = {NULL};
  camdelta_status st = CAMDELTA_OK;
  for (int i = 0; i < NSCR && !st; i++)
    if (bytes[i]) st = cd_alloc(ctx, bytes[i], &scr[i]);
  if (!st && !inv) {
    inv = scr[INV];
    st = cd_prep_inv_rms(ctx, B, N, H, D, a->dtype, a->norm_eps, a->q_raw, a->k_raw, inv, l);
  }
  /* absent optional tensors: a valid buffer that is never read */
  const camdelta_buffer dummy = {scr[PW], 0};
  const cl_mem dgi = scr[DGI] ? scr[DGI] : scr[PW], pm = scr[PM];
#define OPT(x) ((x).mem ? (x) : dummy)
  if (!st) {
    cd_args g = {p->sums, 0, CL_SUCCESS};
    if (p->p1 == CD_PBF_P1_RAW) {
      args_inputs(&g, a, inv);
    } else {
      cd_arg_mem(&g, inv);
      cd_arg_u64(&g, 0);
      cd_arg_buf(&g, a->q);
      cd_arg_buf(&g, a->k);
    }
    CD_ARG_BUFS(&g, OPT(a->grad_q), OPT(a->grad_k), g2 ? OPT(g2[0]) : dummy);
    if (p->p1 != CD_PBF_P1_RAW) cd_arg_buf(&g, a->inflation_sq);
    cd_arg_buf(&g, OPT(a->grad_inflation_sq));
    cd_arg_mem(&g, dgi);
    cd_arg_mem(&g, scr[PART]);
    args_shape(&g, a, p->p1 == CD_PBF_P1_RAW, flags);
    if (p->p1 != CD_PBF_P1_RAW) cd_arg_u32(&g, flags); /* its trailing flags come without k_scale */
    if (g.err != CL_SUCCESS) st = args_failed(g.err, PASS1_NAMES[p->p1]);
    const size_t lws = p->ts, gws = p->groups1 * lws;
    if (!st) st = cd_enqueue(ctx, p->sums, 1, &gws, &lws, l, PASS1_NAMES[p->p1]);
  }
  if (!st) {
    cd_args g = {p->ssum, 0, CL_SUCCESS};
    cd_arg_mem(&g, scr[PART]);
    cd_arg_mem(&g, scr[S]);
    CD_ARG_BUFS(&g, a->proj_q, a->proj_kv, a->rope_cos, a->rope_sin);
    cd_arg_mem(&g, pm);
    cd_arg_u32(&g, (uint32_t)al);
    args_shape(&g, a, 0, 0);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_ssum: setting arguments");
    const size_t items = N * (D / 8) > B * N ? N * (D / 8) : B * N; /* cd_prep_bwd_ssum's */
    const size_t lws = p->ts, gws = (items + lws - 1) / lws * lws;
    if (!st) st = cd_enqueue(ctx, p->ssum, 1, &gws, &lws, l, "cd_prep_bwd_ssum");
  }
  if (!st) {
    cd_args g = {p->grads, 0, CL_SUCCESS};
    args_inputs(&g, a, inv);
    CD_ARG_BUFS(&g, OPT(a->grad_q), OPT(a->grad_k), OPT(a->grad_v), g2 ? OPT(g2[0]) : dummy, g2 ? OPT(g2[1]) : dummy);
    cd_arg_mem(&g, dgi);
    cd_arg_mem(&g, scr[S]);
    cd_arg_mem(&g, pm);
    CD_ARG_BUFS(&g, a->dq_raw, a->dk_raw, a->dv_raw);
    cd_arg_mem(&g, scr[PW]);
    args_shape(&g, a, 1, flags);
    if (g.err != CL_SUCCESS) st = args_failed(g.err, GRADS_NAMES[p->tw == 1]);
    const size_t lws = p->lws2, gws = p->groups2 * lws;
    if (!st) st = cd_enqueue(ctx, p->grads, 1, &gws, &lws, l, GRADS_NAMES[p->tw == 1]);
  }
#undef OPT
  if (!st) {
    /* local (W, R): W columns by R lanes, powers of two up to 32 each within the kernel's limit */
    const size_t lmax = cd_kernel_max_wg(ctx, p->reduce);
    size_t lws[2] = {1, 1};
    while (lws[0] * 2 <= 32 && lws[0] * 2 <= lmax) lws[0] *= 2;
    while (lws[1] * 2 <= 32 && lws[0] * lws[1] * 2 <= lmax) lws[1] *= 2;
    cd_args g = {p->reduce, 0, CL_SUCCESS};
    cd_arg_mem(&g, scr[PW]);
    cd_arg_u64(&g, p->rows);
    cd_arg_u32(&g, (uint32_t)C);
    cd_arg_buf(&g, a->dq_norm_weight);
    cd_arg_buf(&g, a->dk_norm_weight);
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_prep_bwd_fused_reduce: setting arguments");
    const size_t gws[2] = {(2 * C + lws[0] - 1) / lws[0] * lws[0], lws[1]};
    if (!st) st = cd_enqueue(ctx, p->reduce, 2, gws, lws, l, "cd_prep_bwd_fused_reduce");
  }
  /* Released buffers live on until the enqueued kernels that use them have finished. */
  for (int i = 0; i < NSCR; i++)
    if (scr[i]) clReleaseMemObject(scr[i]);
  return st;
}
