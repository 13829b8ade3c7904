/* State summaries (docs/math.md §9.2, include/camdelta_summary.h) on the device, composed of two units (units.h):
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
#include "scan/compose.h"

/* The summaries' plan for head dim D: the single-product gram, the summary step, and the workspace. */
typedef struct sm_plan {
  cd_units u; /* first: cd_units_destroy is the destructor */

} sm_plan;
enum { SW_A, SW_UW, SW_X0, SW_X1 };

static camdelta_status sm_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)arg;
  sm_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "state summary: out of host memory");
  camdelta_status st = cd_gram_build_single(ctx, key->D, &pl->u.gram);
  if (!st) st = cd_chain_build_summary(ctx, key->D, &pl->u.chain);
  return cd_units_done(pl, st, out);
}

camdelta_status cd_summary_acquire(camdelta_context *ctx, size_t D, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SUMMARY;
  key.D = (unsigned)D;
  return cd_plan_acquire(ctx, &key, sm_build, NULL, cd_units_destroy, e);
}

/* The chains' two scratch states (BH, D, D). */
static camdelta_status sm_scratch(camdelta_context *ctx, sm_plan *pl, size_t BH, size_t D, cl_mem x[2]) {
  camdelta_buffer b0, b1;
  camdelta_status st = cd_ws_get(ctx, &pl->u.ws, SW_X0, BH * D * D * 4, &b0);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, SW_X1, BH * D * D * 4, &b1);
  x[0] = b0.mem, x[1] = b1.mem;
  return st;
}

/* The gram's A and the second matrix (SM_U, SM_W or none) into the workspace, then the chains into T, E or G. */
enum { SM_NONE, SM_U, SM_W };
static camdelta_status sm_run(camdelta_context *ctx, sm_plan *pl, const cd_scan_geo *geo, cd_gram_io *io, int second,
                              cd_chain_summary_io *cio, cd_launch *l) {
  const size_t bytes = geo->BHF * geo->D * geo->D * 4;
  camdelta_buffer A, UW = {NULL, 0};
  camdelta_status st = cd_ws_get(ctx, &pl->u.ws, SW_A, bytes, &A);
  if (!st && second != SM_NONE) st = cd_ws_get(ctx, &pl->u.ws, SW_UW, bytes, &UW);
  if (!st) st = sm_scratch(ctx, pl, geo->BH, geo->D, cio->scratch);
  if (st) return st;
  io->A = A, cio->A = A.mem;
  if (second == SM_U) io->U = UW, cio->U = UW.mem;
  if (second == SM_W) io->W = UW, cio->W = UW.mem;
  st = cd_gram_enqueue(ctx, &pl->u.gram, geo, io, l);
  if (!st) st = cd_chain_summaries(ctx, &pl->u.chain, geo->D, geo->BH, geo->F, cio, l);
  return st;
}

/* ------------------------------------------------------------------------------------------ checks */

/* One call of an entry (the steps of src/runtime/driver.c): the head dim its check step found, and the summaries'
 * plan for it, held from the plan step to the end step. */
typedef struct sm_call {
  size_t D;
  cd_plan_entry *e;
} sm_call;

/* The sizes of a summary's tensors (elements) from its shape (cd_fwd_sizes' meaning); keeps D for the plan step. */
static camdelta_status check_shape(cd_call *c, size_t B, size_t H, size_t D, size_t F, size_t S, cd_fwd_sizes *z) {
  const char *op = c->entry->op;
  ((sm_call *)c->op)->D = D;
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", op, B, H, F, S);
  size_t N, frames;
  const size_t fst[4] = {B, H, D, D}, ffr[5] = {B, H, F, D, D}, fbhf[3] = {B, H, F};
  if (!cd_mul(&N, F, S)) return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: N = F*S overflows size_t", op);
  const size_t ftok[4] = {B, H, D, N};
  if (!cd_prod(&z->tok, 4, ftok) || z->tok > SIZE_MAX / 4 || !cd_prod(&z->state, 4, fst) ||
      !cd_prod(&frames, 5, ffr) || frames > SIZE_MAX / 4 || !cd_prod(&z->frames, 3, fbhf) ||
      z->frames > SIZE_MAX / 256)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t (B=%zu H=%zu D=%zu F=%zu S=%zu)", op, B, H, D, F,
                   S);
  if (F > UINT32_MAX || S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu or S=%zu exceeds 2^32-1", op, F, S);
  z->beta = z->frames * S;
  return CAMDELTA_OK;
}

/* The elements of a (B, H, D, D) state; keeps D for the plan step. */
static camdelta_status check_states(cd_call *c, size_t B, size_t H, size_t D, size_t *n_state) {
  const char *op = c->entry->op;
  ((sm_call *)c->op)->D = D;
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  if (!B || !H) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu: each must be at least 1", op, B, H);
  const size_t fst[4] = {B, H, D, D};
  if (!cd_prod(n_state, 4, fst) || *n_state > SIZE_MAX / 4)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  return CAMDELTA_OK;
}

/* Slot i of a call: `need` elements of f32. */
static void use(cd_call *c, int i, cd_need need, size_t elems) {
  c->use[i] = (cd_use){.need = need, .elems = elems, .es = 4};
}

/* The plan step of every entry. */
static camdelta_status sm_plan_step(cd_call *c) {
  sm_call *s = c->op;
  return cd_summary_acquire(c->ctx, s->D, &s->e);
}

static camdelta_status sm_end_step(cd_call *c, camdelta_status st) {
  sm_call *s = c->op;
  if (s->e) cd_plan_release(c->ctx, s->e);
  return st;
}

static camdelta_status run(const cd_entry *entry, camdelta_context *ctx, const void *args) {
  sm_call s = {.D = 0, .e = NULL};
  cd_call c = {.entry = entry, .ctx = ctx, .args = args, .op = &s};
  return cd_run_entry(&c);
}

static sm_plan *plan_of(const cd_call *c) { return ((const sm_call *)c->op)->e->plan; }

/* -------------------------------------------------------------------------------------- forward */

#define SS(f, role) CD_SLOT(camdelta_scan_summary_args, f, role)
static const cd_slot SUMMARY_SLOTS[] = {SS(k, CD_IN),          SS(v, CD_IN),     SS(beta, CD_IN), SS(decay, CD_IN),
                                        SS(init_state, CD_IN), SS(T, CD_OUT),    SS(E, CD_OUT)};
#undef SS

static camdelta_status summary_check(cd_call *c) {
  const camdelta_scan_summary_args *p = c->args;
  cd_fwd_sizes z;
  const camdelta_status st = check_shape(c, p->B, p->H, p->D, p->F, p->S, &z);
  if (st) return st;
  if (!p->T.mem && !p->E.mem)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: neither output 'T' nor 'E' is given", c->entry->op);
  use(c, 0, CD_REQUIRED, z.tok);
  use(c, 1, p->E.mem ? CD_REQUIRED : CD_UNUSED, z.tok); /* v only for E */
  use(c, 2, CD_REQUIRED, z.beta);
  use(c, 3, CD_REQUIRED, z.frames);
  for (int i = 4; i < 7; i++) use(c, i, CD_OPTIONAL, z.state);
  return CAMDELTA_OK;
}

static camdelta_status summary_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_scan_summary_args *p = c->args;
  const cd_scan_geo geo = cd_scan_geo_fixed(p->B, p->H, p->D, p->F, p->S);
  cd_gram_io io = {.k = p->k, .v = p->v, .beta = p->beta, .decay = p->decay};
  cd_chain_summary_io cio = {.init = p->init_state, .T = p->T, .E = p->E, .reverse = p->reverse != 0};
  return sm_run(c->ctx, plan_of(c), &geo, &io, p->E.mem ? SM_U : SM_NONE, &cio, l);
}

static const cd_entry SUMMARY = CD_ENTRY("camdelta_scan_summary", camdelta_scan_summary_args, SUMMARY_SLOTS,
                                         summary_check, sm_plan_step, summary_enqueue, sm_end_step);

camdelta_status camdelta_scan_summary(camdelta_context *ctx, const camdelta_scan_summary_args *p) {
  return run(&SUMMARY, ctx, p);
}

/* ------------------------------------------------------------------------------------- gradient */

#define SG(f, role) CD_SLOT(camdelta_scan_grad_summary_args, f, role)
static const cd_slot GRAD_SLOTS[] = {SG(q, CD_IN),        SG(k, CD_IN),
                                     SG(beta, CD_IN),     SG(decay, CD_IN),
                                     SG(grad_out, CD_IN), SG(grad_final_state, CD_IN),
                                     SG(G, CD_OUT)};
#undef SG

static camdelta_status grad_check(cd_call *c) {
  const camdelta_scan_grad_summary_args *p = c->args;
  cd_fwd_sizes z;
  const camdelta_status st = check_shape(c, p->B, p->H, p->D, p->F, p->S, &z);
  if (st) return st;
  use(c, 0, CD_REQUIRED, z.tok);
  use(c, 1, CD_REQUIRED, z.tok);
  use(c, 2, CD_REQUIRED, z.beta);
  use(c, 3, CD_REQUIRED, z.frames);
  use(c, 4, CD_REQUIRED, z.tok);
  use(c, 5, CD_OPTIONAL, z.state);
  use(c, 6, CD_REQUIRED, z.state);
  return CAMDELTA_OK;
}

static camdelta_status grad_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_scan_grad_summary_args *p = c->args;
  const cd_scan_geo geo = cd_scan_geo_fixed(p->B, p->H, p->D, p->F, p->S);
  cd_gram_io io = {.q = p->q, .k = p->k, .dout = p->grad_out, .beta = p->beta, .decay = p->decay};
  cd_chain_summary_io cio = {.gfinal = p->grad_final_state, .G = p->G, .reverse = p->reverse != 0};
  return sm_run(c->ctx, plan_of(c), &geo, &io, SM_W, &cio, l);
}

static const cd_entry GRAD_SUMMARY = CD_ENTRY("camdelta_scan_grad_summary", camdelta_scan_grad_summary_args,
                                              GRAD_SLOTS, grad_check, sm_plan_step, grad_enqueue, sm_end_step);

camdelta_status camdelta_scan_grad_summary(camdelta_context *ctx, const camdelta_scan_grad_summary_args *p) {
  return run(&GRAD_SUMMARY, ctx, p);
}

/* ------------------------------------------------------------------------------ apply and combine */

static cd_mat mat_of(camdelta_buffer b, size_t DD) { return b.mem ? (cd_mat){b.mem, b.offset, DD} : (cd_mat){0}; }

static const cd_slot APPLY_SLOTS[] = {
    CD_SLOT(camdelta_summary_apply_args, T, CD_IN), CD_SLOT(camdelta_summary_apply_args, E, CD_IN),
    CD_SLOT(camdelta_summary_apply_args, M_in, CD_IN), CD_SLOT(camdelta_summary_apply_args, M_out, CD_OUT)};

static camdelta_status apply_check(cd_call *c) {
  const camdelta_summary_apply_args *p = c->args;
  size_t ns;
  const camdelta_status st = check_states(c, p->B, p->H, p->D, &ns);
  if (st) return st;
  use(c, 0, CD_REQUIRED, ns);
  use(c, 1, CD_OPTIONAL, ns);
  use(c, 2, CD_OPTIONAL, ns);
  use(c, 3, CD_REQUIRED, ns);
  return CAMDELTA_OK;
}

static camdelta_status apply_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_summary_apply_args *p = c->args;
  const size_t DD = p->D * p->D, BH = p->B * p->H;
  /* without M_in: M_out = E (T·0 = 0) */
  const cd_mat A = p->M_in.mem ? mat_of(p->T, DD) : (cd_mat){0};
  return cd_chain_summary_step(c->ctx, &plan_of(c)->u.chain, p->D, BH, A, p->transpose != 0, mat_of(p->M_in, DD),
                               (cd_mat){0}, mat_of(p->E, DD), mat_of(p->M_out, DD), l);
}

static const cd_entry APPLY = CD_ENTRY("camdelta_summary_apply", camdelta_summary_apply_args, APPLY_SLOTS,
                                       apply_check, sm_plan_step, apply_enqueue, sm_end_step);

camdelta_status camdelta_summary_apply(camdelta_context *ctx, const camdelta_summary_apply_args *p) {
  return run(&APPLY, ctx, p);
}

#define SC(f, role) CD_SLOT(camdelta_summary_combine_args, f, role)
static const cd_slot COMBINE_SLOTS[] = {SC(T1, CD_IN), SC(E1, CD_IN), SC(T2, CD_IN),
                                        SC(E2, CD_IN), SC(T, CD_OUT), SC(E, CD_OUT)};
#undef SC

static camdelta_status combine_check(cd_call *c) {
  const camdelta_summary_combine_args *p = c->args;
  size_t ns;
  const camdelta_status st = check_states(c, p->B, p->H, p->D, &ns);
  if (st) return st;
  if (!p->T.mem && !p->E.mem)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: neither output 'T' nor 'E' is given", c->entry->op);
  use(c, 0, p->T.mem ? CD_REQUIRED : CD_OPTIONAL, ns);
  use(c, 1, CD_OPTIONAL, ns);
  use(c, 2, CD_REQUIRED, ns);
  for (int i = 3; i < 6; i++) use(c, i, CD_OPTIONAL, ns);
  return CAMDELTA_OK;
}

static camdelta_status combine_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_summary_combine_args *p = c->args;
  const sm_plan *pl = plan_of(c);
  const size_t DD = p->D * p->D, BH = p->B * p->H;
  const cd_mat none = {0};
  camdelta_status st = CAMDELTA_OK;
  if (p->T.mem)
    st = cd_chain_summary_step(c->ctx, &pl->u.chain, p->D, BH, mat_of(p->T2, DD), 0, mat_of(p->T1, DD), none, none,
                               mat_of(p->T, DD), l);
  if (!st && p->E.mem) {
    const cd_mat A = p->E1.mem ? mat_of(p->T2, DD) : none;
    st = cd_chain_summary_step(c->ctx, &pl->u.chain, p->D, BH, A, 0, mat_of(p->E1, DD), none, mat_of(p->E2, DD),
                               mat_of(p->E, DD), l);
  }
  return st;
}

static const cd_entry COMBINE = CD_ENTRY("camdelta_summary_combine", camdelta_summary_combine_args, COMBINE_SLOTS,
                                         combine_check, sm_plan_step, combine_enqueue, sm_end_step);

camdelta_status camdelta_summary_combine(camdelta_context *ctx, const camdelta_summary_combine_args *p) {
  return run(&COMBINE, ctx, p);
}

/* ------------------------------------------------------------------------- from a scan's own frames */

camdelta_status cd_summary_from_frames(camdelta_context *ctx, cd_plan_entry *e, size_t BH, size_t D, size_t F,
                                       int reverse, cl_mem A, cl_mem U, cl_mem W, camdelta_buffer init,
                                       camdelta_buffer gfinal, camdelta_buffer T, camdelta_buffer E,
                                       camdelta_buffer G, cd_launch *l) {
  sm_plan *pl = e->plan;
  cd_chain_summary_io cio = {.A = A, .U = U, .W = W, .init = init, .gfinal = gfinal, .T = T, .E = E, .G = G,
                             .reverse = reverse};
  const camdelta_status st = sm_scratch(ctx, pl, BH, D, cio.scratch);
  return st ? st : cd_chain_summaries(ctx, &pl->u.chain, D, BH, F, &cio, l);
}
