/* State summaries (SPEC section 9, include/camdelta_summary.h) on the device, composed of two units (units.h):
 *
 *   1. gram   (parallel over b, h, f; its single-product FMA form, cl/scan_summary.cl):
 *             A_f = decay_f·(I − K_fᵀβ_fK_f), and U_f = K_fᵀβ_fV_f (forward E) or W_f = Q_fᵀ·dO_f (gradient G)
 *   2. chain  (its summary form): one batched D x D launch per frame in the frame order of the summary (chain.c),
 *             from the per-frame matrices
 * The per-frame matrices and the chain's two ping-pong states are the plan's workspace. Everything is f32 with
 * fixed orders (bit-identical run to run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_summary.h"
#include "compose.h"

/* The summaries' plan for head dim D: the single-product gram, the summary step, and the workspace. */
typedef struct sm_plan {
  cd_gram gram;
  cd_chain chain;
  cd_workspace ws;
} sm_plan;
enum { SW_A, SW_UW, SW_X0, SW_X1 };

static void sm_destroy(void *p) {
  sm_plan *pl = p;
  cd_gram_release(&pl->gram);
  cd_chain_release(&pl->chain);
  cd_ws_free(&pl->ws);
  free(pl);
}

static camdelta_status sm_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)arg;
  sm_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "state summary: out of host memory");
  camdelta_status st = cd_gram_build_single(ctx, key->D, &pl->gram);
  if (!st) st = cd_chain_build_summary(ctx, key->D, &pl->chain);
  if (st) {
    sm_destroy(pl);
    return st;
  }
  *out = pl;
  return CAMDELTA_OK;
}

/* The context's summary plan for D, referenced and locked: sm_end() releases it. */
static camdelta_status sm_acquire(camdelta_context *ctx, size_t D, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SUMMARY;
  key.D = (unsigned)D;
  return cd_plan_acquire(ctx, &key, sm_build, NULL, sm_destroy, e);
}

/* One call's plan, the profile reset and the launch begun; *e is NULL on failure. */
static camdelta_status sm_begin(camdelta_context *ctx, size_t D, camdelta_profile *profile, cd_plan_entry **e,
                                cd_launch *l) {
  const camdelta_status st = sm_acquire(ctx, D, e);
  if (st) {
    *e = NULL;
    return st;
  }
  if (profile) profile->kernel_ms = 0, profile->kernels = 0;
  cd_launch_init(l, profile);
  return CAMDELTA_OK;
}

static camdelta_status sm_end(camdelta_context *ctx, cd_plan_entry *e, cd_launch *l, camdelta_status st) {
  if (!e) return st;
  cd_plan_release(ctx, e);
  return cd_launch_end(ctx, l, st);
}

/* The chains' two scratch states (BH, D, D). */
static camdelta_status sm_scratch(camdelta_context *ctx, sm_plan *pl, size_t BH, size_t D, cl_mem x[2]) {
  camdelta_buffer b0, b1;
  camdelta_status st = cd_ws_get(ctx, &pl->ws, SW_X0, BH * D * D * 4, &b0);
  if (!st) st = cd_ws_get(ctx, &pl->ws, SW_X1, BH * D * D * 4, &b1);
  x[0] = b0.mem, x[1] = b1.mem;
  return st;
}

/* The gram's A and the second matrix (SM_U, SM_W or none) into the workspace, then the chains into T, E or G. */
enum { SM_NONE, SM_U, SM_W };
static camdelta_status sm_run(camdelta_context *ctx, sm_plan *pl, const cd_scan_geo *geo, cd_gram_io *io, int second,
                              cd_chain_summary_io *cio, cd_launch *l) {
  const size_t bytes = geo->BHF * geo->D * geo->D * 4;
  camdelta_buffer A, UW = {NULL, 0};
  camdelta_status st = cd_ws_get(ctx, &pl->ws, SW_A, bytes, &A);
  if (!st && second != SM_NONE) st = cd_ws_get(ctx, &pl->ws, SW_UW, bytes, &UW);
  if (!st) st = sm_scratch(ctx, pl, geo->BH, geo->D, cio->scratch);
  if (st) return st;
  io->A = A, cio->A = A.mem;
  if (second == SM_U) io->U = UW, cio->U = UW.mem;
  if (second == SM_W) io->W = UW, cio->W = UW.mem;
  st = cd_gram_enqueue(ctx, &pl->gram, geo, io, l);
  if (!st) st = cd_chain_summaries(ctx, &pl->chain, geo->D, geo->BH, geo->F, cio, l);
  return st;
}

/* ------------------------------------------------------------------------------------------ checks */

static camdelta_status check_shape(const char *op, size_t B, size_t H, size_t D, size_t F, size_t S, size_t *n_tok,
                                   size_t *n_state, size_t *n_frames) {
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", op, B, H, F, S);
  size_t N, frames;
  const size_t fst[4] = {B, H, D, D}, ffr[5] = {B, H, F, D, D}, fbhf[3] = {B, H, F};
  if (!cd_mul(&N, F, S)) return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: N = F*S overflows size_t", op);
  const size_t ftok[4] = {B, H, D, N};
  if (!cd_prod(n_tok, 4, ftok) || *n_tok > SIZE_MAX / 4 || !cd_prod(n_state, 4, fst) || !cd_prod(&frames, 5, ffr) ||
      frames > SIZE_MAX / 4 || !cd_prod(n_frames, 3, fbhf) || *n_frames > SIZE_MAX / 256)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t (B=%zu H=%zu D=%zu F=%zu S=%zu)", op, B, H, D, F,
                   S);
  if (F > UINT32_MAX || S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu or S=%zu exceeds 2^32-1", op, F, S);
  return CAMDELTA_OK;
}

/* -------------------------------------------------------------------------------------- forward */

camdelta_status camdelta_scan_summary(camdelta_context *ctx, const camdelta_scan_summary_args *p) {
  static const char op[] = "camdelta_scan_summary";
  cd_clear_error();
  if (!ctx || !p) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  size_t n_tok, n_state, n_frames;
  camdelta_status st = check_shape(op, p->B, p->H, p->D, p->F, p->S, &n_tok, &n_state, &n_frames);
  if (st) return st;
  if (!p->T.mem && !p->E.mem)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: neither output 'T' nor 'E' is given", op);
  const int want_e = p->E.mem != NULL;
  const size_t nbeta = n_frames * p->S;
  if ((st = cd_check_buffer(op, "k", p->k, n_tok, 4, 0)) || (st = cd_check_buffer(op, "v", p->v, n_tok, 4, !want_e)) ||
      (st = cd_check_buffer(op, "beta", p->beta, nbeta, 4, 0)) ||
      (st = cd_check_buffer(op, "decay", p->decay, n_frames, 4, 0)) ||
      (st = cd_check_buffer(op, "init_state", p->init_state, n_state, 4, 1)) ||
      (st = cd_check_buffer(op, "T", p->T, n_state, 4, 1)) || (st = cd_check_buffer(op, "E", p->E, n_state, 4, 1)))
    return st;
  const cd_tensor_arg outs[2] = {{"T", p->T, n_state, 4}, {"E", p->E, n_state, 4}};
  const cd_tensor_arg ins[5] = {{"k", p->k, n_tok, 4},
                                {"v", want_e ? p->v : (camdelta_buffer){NULL, 0}, n_tok, 4},
                                {"beta", p->beta, nbeta, 4},
                                {"decay", p->decay, n_frames, 4},
                                {"init_state", p->init_state, n_state, 4}};
  if ((st = cd_check_no_overlap(op, outs, 2, ins, 5))) return st;

  cd_plan_entry *e;
  cd_launch l;
  if ((st = sm_begin(ctx, p->D, p->profile, &e, &l))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(p->B, p->H, p->D, p->F, p->S);
  cd_gram_io io = {.k = p->k, .v = p->v, .beta = p->beta, .decay = p->decay};
  cd_chain_summary_io cio = {.init = p->init_state, .T = p->T, .E = p->E, .reverse = p->reverse != 0};
  st = sm_run(ctx, e->plan, &geo, &io, want_e ? SM_U : SM_NONE, &cio, &l);
  return sm_end(ctx, e, &l, st);
}

/* ------------------------------------------------------------------------------------- gradient */

camdelta_status camdelta_scan_grad_summary(camdelta_context *ctx, const camdelta_scan_grad_summary_args *p) {
  static const char op[] = "camdelta_scan_grad_summary";
  cd_clear_error();
  if (!ctx || !p) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  size_t n_tok, n_state, n_frames;
  camdelta_status st = check_shape(op, p->B, p->H, p->D, p->F, p->S, &n_tok, &n_state, &n_frames);
  if (st) return st;
  const size_t nbeta = n_frames * p->S;
  if ((st = cd_check_buffer(op, "q", p->q, n_tok, 4, 0)) || (st = cd_check_buffer(op, "k", p->k, n_tok, 4, 0)) ||
      (st = cd_check_buffer(op, "beta", p->beta, nbeta, 4, 0)) ||
      (st = cd_check_buffer(op, "decay", p->decay, n_frames, 4, 0)) ||
      (st = cd_check_buffer(op, "grad_out", p->grad_out, n_tok, 4, 0)) ||
      (st = cd_check_buffer(op, "grad_final_state", p->grad_final_state, n_state, 4, 1)) ||
      (st = cd_check_buffer(op, "G", p->G, n_state, 4, 0)))
    return st;
  const cd_tensor_arg outs[1] = {{"G", p->G, n_state, 4}};
  const cd_tensor_arg ins[6] = {{"q", p->q, n_tok, 4},         {"k", p->k, n_tok, 4},
                                {"beta", p->beta, nbeta, 4},    {"decay", p->decay, n_frames, 4},
                                {"grad_out", p->grad_out, n_tok, 4}, {"grad_final_state", p->grad_final_state, n_state, 4}};
  if ((st = cd_check_no_overlap(op, outs, 1, ins, 6))) return st;

  cd_plan_entry *e;
  cd_launch l;
  if ((st = sm_begin(ctx, p->D, p->profile, &e, &l))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(p->B, p->H, p->D, p->F, p->S);
  cd_gram_io io = {.q = p->q, .k = p->k, .dout = p->grad_out, .beta = p->beta, .decay = p->decay};
  cd_chain_summary_io cio = {.gfinal = p->grad_final_state, .G = p->G, .reverse = p->reverse != 0};
  st = sm_run(ctx, e->plan, &geo, &io, SM_W, &cio, &l);
  return sm_end(ctx, e, &l, st);
}

/* ------------------------------------------------------------------------------ apply and combine */

static camdelta_status check_states(const char *op, size_t B, size_t H, size_t D, size_t *n_state) {
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  if (!B || !H) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu: each must be at least 1", op, B, H);
  const size_t fst[4] = {B, H, D, D};
  if (!cd_prod(n_state, 4, fst) || *n_state > SIZE_MAX / 4)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  return CAMDELTA_OK;
}

static cd_mat mat_of(camdelta_buffer b, size_t DD) { return b.mem ? (cd_mat){b.mem, b.offset, DD} : (cd_mat){0}; }

camdelta_status camdelta_summary_apply(camdelta_context *ctx, const camdelta_summary_apply_args *p) {
  static const char op[] = "camdelta_summary_apply";
  cd_clear_error();
  if (!ctx || !p) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  size_t ns;
  camdelta_status st = check_states(op, p->B, p->H, p->D, &ns);
  if (st) return st;
  if ((st = cd_check_buffer(op, "T", p->T, ns, 4, 0)) || (st = cd_check_buffer(op, "E", p->E, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "M_in", p->M_in, ns, 4, 1)) || (st = cd_check_buffer(op, "M_out", p->M_out, ns, 4, 0)))
    return st;
  const cd_tensor_arg outs[1] = {{"M_out", p->M_out, ns, 4}};
  const cd_tensor_arg ins[3] = {{"T", p->T, ns, 4}, {"E", p->E, ns, 4}, {"M_in", p->M_in, ns, 4}};
  if ((st = cd_check_no_overlap(op, outs, 1, ins, 3))) return st;
  cd_plan_entry *e;
  cd_launch l;
  if ((st = sm_begin(ctx, p->D, p->profile, &e, &l))) return st;
  const sm_plan *pl = e->plan;
  const size_t DD = p->D * p->D, BH = p->B * p->H;
  /* without M_in: M_out = E (T·0 = 0) */
  const cd_mat A = p->M_in.mem ? mat_of(p->T, DD) : (cd_mat){0};
  st = cd_chain_summary_step(ctx, &pl->chain, p->D, BH, A, p->transpose != 0, mat_of(p->M_in, DD), (cd_mat){0},
                             mat_of(p->E, DD), mat_of(p->M_out, DD), &l);
  return sm_end(ctx, e, &l, st);
}

camdelta_status camdelta_summary_combine(camdelta_context *ctx, const camdelta_summary_combine_args *p) {
  static const char op[] = "camdelta_summary_combine";
  cd_clear_error();
  if (!ctx || !p) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  size_t ns;
  camdelta_status st = check_states(op, p->B, p->H, p->D, &ns);
  if (st) return st;
  if (!p->T.mem && !p->E.mem)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: neither output 'T' nor 'E' is given", op);
  if ((st = cd_check_buffer(op, "T1", p->T1, ns, 4, !p->T.mem)) || (st = cd_check_buffer(op, "E1", p->E1, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "T2", p->T2, ns, 4, 0)) || (st = cd_check_buffer(op, "E2", p->E2, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "T", p->T, ns, 4, 1)) || (st = cd_check_buffer(op, "E", p->E, ns, 4, 1)))
    return st;
  const cd_tensor_arg outs[2] = {{"T", p->T, ns, 4}, {"E", p->E, ns, 4}};
  const cd_tensor_arg ins[4] = {{"T1", p->T1, ns, 4}, {"E1", p->E1, ns, 4}, {"T2", p->T2, ns, 4}, {"E2", p->E2, ns, 4}};
  if ((st = cd_check_no_overlap(op, outs, 2, ins, 4))) return st;
  cd_plan_entry *e;
  cd_launch l;
  if ((st = sm_begin(ctx, p->D, p->profile, &e, &l))) return st;
  const sm_plan *pl = e->plan;
  const size_t DD = p->D * p->D, BH = p->B * p->H;
  const cd_mat none = {0};
  if (p->T.mem)
    st = cd_chain_summary_step(ctx, &pl->chain, p->D, BH, mat_of(p->T2, DD), 0, mat_of(p->T1, DD), none, none,
                               mat_of(p->T, DD), &l);
  if (!st && p->E.mem) {
    const cd_mat A = p->E1.mem ? mat_of(p->T2, DD) : none;
    st = cd_chain_summary_step(ctx, &pl->chain, p->D, BH, A, 0, mat_of(p->E1, DD), none, mat_of(p->E2, DD),
                               mat_of(p->E, DD), &l);
  }
  return sm_end(ctx, e, &l, st);
}

/* ------------------------------------------------------------------------- from a scan's own frames */

camdelta_status cd_summary_from_frames(camdelta_context *ctx, size_t BH, size_t D, size_t F, int reverse, cl_mem A,
                                       cl_mem U, cl_mem W, camdelta_buffer init, camdelta_buffer gfinal,
                                       camdelta_buffer T, camdelta_buffer E, camdelta_buffer G,
                                       camdelta_profile *profile) {
  cd_plan_entry *e;
  cd_launch l;
  camdelta_status st = sm_begin(ctx, D, profile, &e, &l);
  if (st) return st;
  cd_chain_summary_io cio = {.A = A, .U = U, .W = W, .init = init, .gfinal = gfinal, .T = T, .E = E, .G = G,
                             .reverse = reverse};
  st = sm_scratch(ctx, e->plan, BH, D, cio.scratch);
  if (!st) st = cd_chain_summaries(ctx, &((sm_plan *)e->plan)->chain, D, BH, F, &cio, &l);
  return sm_end(ctx, e, &l, st);
}
