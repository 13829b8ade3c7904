/* The gram unit (units.h): per (b, h, f), the D x D products of one frame's tokens
 *   A_f = d_f·(I − K_fᵀ·β_f·K_f),  U_f = K_fᵀ·β_f·V_f,  W_f = Q_fᵀ·dO_f
 * in four forms: three FMA kernels, each with the tiles of the program it belongs to (the chunkwise scan's phase A,
 * the backward's grams, the summaries' single products), and the tensor-core kernel. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scan/units.h"

static unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

cd_scan_geo cd_scan_geo_fixed(size_t B, size_t H, size_t D, size_t F, size_t S) {
  const cd_scan_geo g = {.D = D, .F = F, .S = S, .N = F * S, .BH = B * H, .BHF = B * H * F, .pk = NULL, .pk_h = 0};
  return g;
}

void cd_arg_tokens(cd_args *a, const cd_scan_geo *geo) {
  cd_arg_u64(a, geo->N);
  cd_arg_u32(a, (uint32_t)geo->S);
  cd_arg_u32(a, (uint32_t)geo->F);
}

void cd_arg_packed(cd_args *a, const cd_scan_geo *geo) {
  if (!geo->pk) return;
  cd_arg_mem(a, geo->pk);
  cd_arg_u32(a, geo->pk_h);
}

camdelta_status cd_gram_build_tiled(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, cd_gram *g) {
  *g = (cd_gram){.form = CD_GRAM_FMA_TILED, .w = c->a_w, .nr = c->a_nr, .nc = c->a_nc, .tokens = SIZE_MAX};
  /* under the driver's loop budget a frame's tokens are summed in launches of as many whole chunks as fit */
  const size_t budget = cd_loop_budget(ctx);
  size_t fixed, per_chunk;
  cd_chunk_a_loop_count(c, &fixed, &per_chunk);
  if (budget && fixed + per_chunk > budget)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "camdelta_scan_forward: the driver ends a work-item's loops after %zu iterations per launch (Mesa's "
                   "llvmpipe does, silently); the chunkwise phase A needs %zu for its first tokens",
                   budget, fixed + per_chunk);
  if (budget) g->tokens = (budget - fixed) / per_chunk * c->a_kc;
  return cd_kernel(ctx, "scan_chunkwise.cl", opts, "cd_scan_phase_a", &g->k);
}

camdelta_status cd_gram_build_modes(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c,
                                    cd_gram *g) {
  *g = (cd_gram){.form = CD_GRAM_FMA_MODES, .w = (unsigned)((D / c->rpt) * (D / c->rpt)), .tokens = SIZE_MAX};
  return cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_grams", &g->k);
}

camdelta_status cd_gram_build_single(camdelta_context *ctx, size_t D, cd_gram *g) {
  char opts[32];
  snprintf(opts, sizeof opts, "-DCD_D=%zu", D);
  *g = (cd_gram){.form = CD_GRAM_FMA_SINGLE, .w = 64};
  return cd_kernel(ctx, "scan_summary.cl", opts, "cd_summary_gram", &g->k);
}

camdelta_status cd_gram_build_tc(camdelta_context *ctx, size_t D, int split, int vec, const char *extra, cd_gram *g) {
  *g = (cd_gram){.form = CD_GRAM_TC};
  camdelta_status st = cd_tc_unit(ctx, CD_TC_GRAM, "cd_gram_tc", D, split, vec, extra, &g->t, &g->k, &g->w);
  /* a second kernel for calls of few frames where the device table has tiles for them that fit here */
  cd_tc_tiles t;
  size_t bhf = 0;
  if (st || !cd_tc_small_entry(ctx, CD_TC_GRAM, D, split, &t, &bhf)) return st;
  if (cd_tc_check(ctx, CD_TC_GRAM, D, split, &t)) {
    cd_clear_error();
    return CAMDELTA_OK;
  }
  if (!memcmp(&t, &g->t, sizeof t)) return CAMDELTA_OK;
  st = cd_tc_kernel(ctx, CD_TC_GRAM, "cd_gram_tc", D, split, vec, &t, extra, NULL, 0, &g->k_small);
  if (!st) g->t_small = t, g->w_small = cd_tc_wg(&t), g->small_bhf = bhf;
  return st;
}

camdelta_status cd_gram_build_cpu(const cd_cpu_scan *p, cd_gram *g) {
  *g = (cd_gram){.form = CD_GRAM_CPU, .w = 1, .cpu = p};
  return cd_cpu_retain(p->gram, "cd_cpu_gram", &g->k);
}

void cd_gram_release(cd_gram *g) {
  cd_kernel_drop(&g->k);
  cd_kernel_drop(&g->k_small);
  g->form = CD_GRAM_NONE;
}

/* ------------------------------------------------------------------------------------------ the forms */

/* cd_scan_phase_a: columns [0, 2D) of K_fᵀ·β_f·[K_f | V_f], the first D giving A (its upper triangle, mirrored),
 * the others U. Under the driver's loop budget a frame's tokens are summed g->tokens per launch (part bit 0: continue
 * the raw sums the previous launch left in the outputs; bit 1: leave them for the next one), in the order of one
 * launch. */
static camdelta_status tiled(camdelta_context *ctx, const cd_gram *g, const cd_scan_geo *geo, const cd_gram_io *io,
                             cd_launch *l) {
  if (!io->A.mem || !io->U.mem || io->W.mem)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_scan_phase_a computes A and U together, not W");
  camdelta_status st = CAMDELTA_OK;
  for (size_t s0 = 0; !st; s0 += g->tokens) { /* S: the longest frame where clips are packed */
    const int last = g->tokens >= geo->S - s0;
    cd_args a = {g->k, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, io->k, io->v, io->beta, io->decay, io->A, io->U);
    cd_arg_tokens(&a, geo);
    cd_arg_u32(&a, 0);
    cd_arg_u32(&a, (uint32_t)(2 * geo->D));
    cd_arg_u32(&a, g->nc);
    cd_arg_u32(&a, (uint32_t)s0);
    cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(s0 + g->tokens));
    cd_arg_u32(&a, (s0 ? 1u : 0u) | (last ? 0u : 2u));
    cd_arg_packed(&a, geo);
    if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_scan_phase_a: setting arguments");
    const size_t lws[2] = {g->w, 1}, gws[2] = {(size_t)g->w * geo->BHF, (size_t)g->nr * g->nc};
    st = cd_enqueue(ctx, g->k, 2, gws, lws, l, "cd_scan_phase_a");
    if (last) break;
  }
  return st;
}

/* cd_scan_bwd_grams: a work-group per (b, h, f, mode), modes W, A, U in that order, the first `modes` of them.
 * Under the driver's loop budget a frame's tokens are summed g->tokens per launch (part bit 0: continue the sums
 * the previous launch left in the outputs; bit 1: leave them for the next one), in the order of one launch. */
static camdelta_status modes(camdelta_context *ctx, const cd_gram *g, const cd_scan_geo *geo, const cd_gram_io *io,
                             cd_launch *l) {
  const uint32_t n = io->U.mem ? 3 : io->A.mem ? 2 : 1;
  if (!io->W.mem || (n == 3 && !io->A.mem))
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_scan_bwd_grams computes W, then A, then U");
  /* an absent slot is bound to a present buffer: the kernel touches only the modes it runs */
  const camdelta_buffer A = io->A.mem ? io->A : io->W, U = io->U.mem ? io->U : A;
  camdelta_status st = CAMDELTA_OK;
  for (size_t s0 = 0; !st; s0 += g->tokens) { /* S: the longest frame where clips are packed */
    const int last = g->tokens >= geo->S - s0;
    cd_args a = {g->k, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, io->q, io->k, io->v, io->dout, io->beta, io->decay, io->W, A, U);
    cd_arg_tokens(&a, geo);
    cd_arg_u32(&a, n);
    cd_arg_u32(&a, (uint32_t)s0);
    cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(s0 + g->tokens));
    cd_arg_u32(&a, (s0 ? 1u : 0u) | (last ? 0u : 2u));
    cd_arg_packed(&a, geo);
    if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_scan_bwd_grams: setting arguments");
    const size_t lws = g->w, gws = geo->BHF * n * lws;
    st = cd_enqueue(ctx, g->k, 1, &gws, &lws, l, "cd_scan_bwd_grams");
    if (last) break;
  }
  return st;
}

/* cd_summary_gram: out_f = g_f·(diag·I + sgn·X_fᵀ·diag(w_f)·Y_f), 32 x 32 tiles of 8 x 8 items; X = Y (the A gram)
 * computes the upper triangle of tiles and mirrors it. */
static camdelta_status single(camdelta_context *ctx, const cd_gram *g, const cd_scan_geo *geo, camdelta_buffer X,
                              camdelta_buffer Y, camdelta_buffer w, camdelta_buffer gate, camdelta_buffer out,
                              int diag, float sgn, const char *what, cd_launch *l) {
  const int sym = X.mem == Y.mem && X.offset == Y.offset;
  cd_args a = {g->k, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, X, Y, w, gate, out);
  cd_arg_tokens(&a, geo);
  cd_arg_i32(&a, w.mem != NULL);
  cd_arg_i32(&a, gate.mem != NULL);
  cd_arg_i32(&a, diag);
  cd_arg_f32(&a, sgn);
  cd_arg_i32(&a, sym);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_summary_gram: setting arguments");
  const size_t t = ceil_div(geo->D, 32), lws[3] = {8, 8, 1}, gws[3] = {8 * t, 8 * t, geo->BHF};
  return cd_enqueue(ctx, g->k, 3, gws, lws, l, what);
}

/* The TC form's kernel for one call: the small-work one for calls of at most small_bhf (b, h, f) frames. */
typedef struct tc_kernel {
  cl_kernel k;
  const cd_tc_tiles *t;
  unsigned w;
} tc_kernel;

static tc_kernel tc_for(const cd_gram *g, const cd_scan_geo *geo) {
  if (g->k_small && geo->BHF <= g->small_bhf) return (tc_kernel){.k = g->k_small, .t = &g->t_small, .w = g->w_small};
  return (tc_kernel){.k = g->k, .t = &g->t, .w = g->w};
}

/* cd_gram_tc: x_fᵀ·[y0_f | y1_f] (n_c0 and n_c1 column tiles) into out0, out1; with use_beta (and the A form) the
 * β weights and the decay. */
static camdelta_status tc(camdelta_context *ctx, const tc_kernel *tk, const cd_scan_geo *geo, camdelta_buffer x,
                          camdelta_buffer y0, camdelta_buffer y1, const cd_gram_io *io, camdelta_buffer out0,
                          camdelta_buffer out1, unsigned n1, int a_form, const char *what, cd_launch *l) {
  const unsigned nr = ceil_div(geo->D, cd_tc_tm(tk->t)), nc = ceil_div(geo->D, cd_tc_tn(tk->t)), w = tk->w;
  cd_args a = {tk->k, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, x, y0, y1, io->beta, io->decay, out0, out1);
  cd_arg_tokens(&a, geo);
  cd_arg_u32(&a, nc);
  cd_arg_u32(&a, n1);
  cd_arg_i32(&a, a_form);
  cd_arg_i32(&a, a_form);
  cd_arg_packed(&a, geo);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_gram_tc: setting arguments");
  const size_t lws[2] = {w, 1}, gws[2] = {(size_t)w * nr * (nc + n1), geo->BHF};
  return cd_enqueue(ctx, tk->k, 2, gws, lws, l, what);
}

camdelta_status cd_gram_enqueue(camdelta_context *ctx, const cd_gram *g, const cd_scan_geo *geo, const cd_gram_io *io,
                                cd_launch *l) {
  camdelta_status st = CAMDELTA_OK;
  const camdelta_buffer none = {NULL, 0};
  switch (g->form) {
    case CD_GRAM_FMA_TILED: return tiled(ctx, g, geo, io, l);
    case CD_GRAM_FMA_MODES: return modes(ctx, g, geo, io, l);
    case CD_GRAM_FMA_SINGLE:
      if (io->A.mem)
        st = single(ctx, g, geo, io->k, io->k, io->beta, io->decay, io->A, 1, -1.0f, "cd_summary_gram A", l);
      if (!st && io->U.mem)
        st = single(ctx, g, geo, io->k, io->v, io->beta, none, io->U, 0, 1.0f, "cd_summary_gram U", l);
      if (!st && io->W.mem)
        st = single(ctx, g, geo, io->q, io->dout, none, none, io->W, 0, 1.0f, "cd_summary_gram W", l);
      return st;
    case CD_GRAM_TC: {
      /* W = Qᵀ·dO first, then A = d·(I − Kᵀ·β·K) with U = Kᵀ·β·V beside it where asked */
      const tc_kernel tk = tc_for(g, geo);
      const unsigned nc = ceil_div(geo->D, cd_tc_tn(tk.t));
      if (io->W.mem) st = tc(ctx, &tk, geo, io->q, io->dout, io->dout, io, io->W, io->W, 0, 0, "cd_gram_tc (W)", l);
      if (!st && io->A.mem)
        st = tc(ctx, &tk, geo, io->k, io->k, io->v, io, io->A, io->U.mem ? io->U : io->A, io->U.mem ? nc : 0, 1,
                !io->W.mem ? "cd_gram_tc (phase A)" : io->U.mem ? "cd_gram_tc (A, U)" : "cd_gram_tc (A)", l);
      else if (!st && io->U.mem)
        return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_gram_tc computes U beside A only");
      return st;
    }
    case CD_GRAM_CPU: {
      /* W = Qᵀ·dO in one launch; A, U, or both in another */
      if (geo->pk) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_cpu_gram runs the fixed shape only");
      const cd_cpu_geo cg = {.BH = geo->BH, .F = geo->F, .S = geo->S, .N = geo->N};
      if (io->W.mem)
        st = cd_cpu_gram(ctx, g->cpu, &cg, CD_CPU_GRAM_W, io->q, io->dout, none, none, none, io->W, none, l);
      if (!st && (io->A.mem || io->U.mem)) {
        const cd_cpu_gram_mode m = !io->A.mem ? CD_CPU_GRAM_U : io->U.mem ? CD_CPU_GRAM_AU : CD_CPU_GRAM_A;
        st = cd_cpu_gram(ctx, g->cpu, &cg, m, io->k, io->k, io->v, io->beta, io->decay, io->A, io->U, l);
      }
      return st;
    }
    case CD_GRAM_NONE: break;
  }
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no gram");
}
