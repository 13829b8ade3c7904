/* Scan backward (docs/math.md §4.1): argument checks and the composition of the units (units.h):
 *
 *   1. gram   (parallel over b, h, f): W_f = Q_fᵀ·dO_f, A_f = d_f·(I − K_fᵀβ_fK_f) (unless the saved object
 *             holds the chunkwise forward's A_f), and U_f = K_fᵀβ_fV_f when the forward's states must be
 *             recomputed (saved == NULL)
 *   2. chain  (parallel over b, h and column blocks of D; serial over frames): the state chain
 *             M_f = A_f·M_prev + U_f when recomputing, then the gradient chain G_f = dL/dM_f and dinit_state
 *   3. frames (parallel over b, h, f and token tiles): dq, dk, dv, dbeta and per-tile ddecay partials (with
 *             tensor cores dq apart: the apply, dq_f = dO_f·M_fᵀ)
 *   4. ddecay (parallel over b, h, f): ddecay = <G_f, M_prev> + the partials, in a fixed order
 *
 * Everything is f32 with fixed summation orders (no atomics), so two runs give bit-identical gradients.
 * Scratch: A, W, G (and U, Z when recomputing), each (B, H, F, D, D) f32, the plan's workspace.
 *
 * CAMDELTA_SCAN_BWD_TILES (tuning): a comma-separated list of KEY=N replacing the fields cd_sbwd_choose() picks:
 * grams RPT (rows and columns per item; a multiple of 4 dividing D) and TSG (tokens per chunk; a multiple of 8),
 * chain CB (columns per work-group; a multiple of 4 dividing D), frames DPT (value columns per item; a multiple of
 * 4 dividing D), TL (token lanes), TPT (tokens per lane), MC (contraction chunk; divides D), ddecay RL (a power of
 * two), e.g. "RPT=8,TSG=16,DPT=8,TL=32,TPT=2,MC=16". Fields not given keep their choice; a list that does not
 * parse, or tiles beyond these constraints, the local memory or the work-group limits, fail with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/compose.h"
#include "scan/engine.h"

static const char OP[] = "camdelta_scan_backward";

/* Everything a backward call runs (cd_bwd_units) and the workspace. Built once per (device, D, and where the
 * tensor-core path runs, precision and 16-byte token rows, variant) and kept in the context (src/runtime/plan.c). */
typedef cd_bwd_units bwd_plan;
enum { WS_A, WS_W, WS_G, WS_U, WS_Z, WS_PART };

/* The backward's CPU forms for head dim D: one program; the gram, the gradient chain (pair: both directions'),
 * the frames and ddecay from it. */
static camdelta_status cpu_parts(camdelta_context *ctx, size_t D, int pair, cd_cpu_scan *p, cd_gram *gram,
                                 cd_chain *chain, cd_frames *frames, cd_ddecay *ddecay) {
  camdelta_status st = cd_scan_cpu_program(ctx, D, p);
  if (!st) st = cd_gram_build_cpu(p, gram);
  if (!st) st = cd_chain_build_cpu(ctx, p, pair ? CD_CHAIN_CPU_GRADS_PAIR : CD_CHAIN_CPU_GRADS, chain);
  if (!st) st = cd_frames_build_cpu(p, frames);
  if (!st) st = cd_ddecay_build_cpu(p, ddecay);
  return st;
}

camdelta_status cd_backward_units(camdelta_context *ctx, const cd_bwd_request *r, int pair, cd_bwd_units *pl) {
  camdelta_status st = CAMDELTA_OK;
  if (r->variant == 0 && cd_scan_cpu_forms(ctx, r->D)) { /* packed clips keep the FMA forms */
    pl->cpu = 1;
    st = cpu_parts(ctx, r->D, pair, &pl->u.cpu_prog, &pl->u.gram, &pl->u.chain, &pl->u.frames, &pl->u.ddecay);
    if (!st) snprintf(pl->opts, sizeof pl->opts, "%s", pl->u.cpu_prog.opts);
  } else if ((pl->tc = cd_tc_available(ctx))) {
    pl->split = r->prec != CAMDELTA_PRECISION_TF32;
    st = cd_gram_build_tc(ctx, r->D, pl->split, r->vec, r->extra, &pl->u.gram);
    if (!st) st = cd_frames_build_tc(ctx, r->D, pl->split, r->vec, r->extra, &pl->u.frames);
    if (!st) st = cd_apply_build_tc(ctx, r->D, pl->split, r->vec, 0, CAMDELTA_F32, r->extra, &pl->u.apply);
  }
  if (!st && !pl->cpu)
    st = cd_backward_parts(ctx, r->D, pl->tc, r->extra, pair, &pl->cfg, pl->opts, &pl->overridden,
                           pl->tc ? NULL : &pl->u.gram, &pl->u.chain, pl->tc ? NULL : &pl->u.frames, &pl->u.ddecay);
  return st;
}

static camdelta_status bwd_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)key;
  bwd_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  return cd_units_done(pl, cd_backward_units(ctx, arg, 0, pl), out);
}

camdelta_status cd_backward_acquire(camdelta_context *ctx, const cd_bwd_request *r, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SCAN_BACKWARD;
  key.D = (unsigned)r->D;
  key.variant = r->variant;
  if (cd_tc_available(ctx)) key.prec = (unsigned)r->prec, key.vec = (unsigned)(r->vec != 0);
  return cd_plan_acquire(ctx, &key, bwd_build, r, cd_units_destroy, e);
}

/* The fixed-shape request of a call: 16-byte token rows when S and every token tensor's offset allow them. */
cd_bwd_request cd_backward_request(const camdelta_scan_backward_args *a) {
  const size_t offs[8] = {a->q.offset,        a->k.offset,  a->v.offset,  a->beta.offset,
                          a->grad_out.offset, a->dq.offset, a->dk.offset, a->dv.offset};
  const cd_bwd_request r = {.D = a->D, .prec = a->precision, .vec = cd_tc_vec_ok(a->S, offs, 8), .extra = ""};
  return r;
}

camdelta_status cd_scan_backward_warm(camdelta_context *ctx, size_t D) {
  camdelta_status st = cd_check_head_dim(OP, D);
  /* both precisions, with and without 16-byte token rows (S % 4 == 0 and aligned offsets) */
  for (int v = 0; v < 4 && !st; v++) {
    const cd_bwd_request r = {.D = D, .prec = (camdelta_precision)(v & 1), .vec = v >> 1, .extra = ""};
    cd_plan_entry *e;
    if (!(st = cd_backward_acquire(ctx, &r, &e))) cd_plan_release(ctx, e);
  }
  return st;
}

static void tc_text(char *buf, size_t size, const char *what, const char *kernel, const cd_tc_tiles *t) {
  snprintf(buf, size, "; %s %s W=%u WM=%u WN=%u MR=%u NR=%u KC=%u", what, kernel, cd_tc_wg(t), t->wm, t->wn, t->mr,
           t->nr, t->kc);
}

/* Appends the launches the driver's loop budget splits the grams (gram_tokens a frame's tokens per launch) and the
 * chain (chain_per steps per launch) into: nothing where there is none. */
static void split_text(size_t gram_tokens, size_t chain_per, const camdelta_scan_backward_args *a, char *buf,
                       size_t size) {
  const size_t used = strlen(buf);
  const int split_g = gram_tokens < a->S;
  const size_t csteps = 2 * a->F; /* at most: the chain recomputes the states where no saved object holds them */
  if (split_g || chain_per < csteps)
    snprintf(buf + used, size - used, "; the driver's loop budget: grams %zu tokens per launch, chain %zu steps per "
             "launch", split_g ? gram_tokens : a->S, chain_per < csteps ? chain_per : csteps);
}

static void plan_text(const bwd_plan *pl, const camdelta_scan_backward_args *a, char *buf, size_t size) {
  const cd_sbwd_cfg *c = &pl->cfg;
  const size_t D = a->D;
  if (pl->cpu) {
    snprintf(buf, size, "backward; precision exact (fma)%s; cpu forms (gram, chain, frames, ddecay): %s",
             a->precision == CAMDELTA_PRECISION_TF32 ? "; tf32 requested, no tensor-core path on this device" : "",
             pl->opts);
    split_text(pl->u.cpu_prog.gram_tokens, pl->u.chain.per, a, buf, size);
    return;
  }
  const char *path = pl->tc ? (pl->split ? "exact (tensor cores, split-TF32)" : "tf32 (tensor cores)")
                     : a->precision == CAMDELTA_PRECISION_TF32
                         ? "exact (fma; tf32 requested, no tensor-core path on this device)"
                         : "exact (fma)";
  char g[160], f[160], dq[160];
  if (pl->tc) {
    tc_text(g, sizeof g, "grams", "gram_tc", &pl->u.gram.t);
    tc_text(f, sizeof f, "frames", "frames_tc", &pl->u.frames.t);
    tc_text(dq, sizeof dq, "dq", "apply_tc", &pl->u.apply.t);
  } else {
    snprintf(g, sizeof g, "; grams fma W=%zu RPT=%zu TSG=%zu", (D / c->rpt) * (D / c->rpt), c->rpt, c->tsg);
    snprintf(f, sizeof f, "; frames fma W=%zu DPT=%zu TL=%zu TPT=%zu MC=%zu", c->tl * (D / c->dpt), c->dpt, c->tl,
             c->tpt, c->mc);
    dq[0] = '\0';
  }
  /* the chain's smaller form, where its kernel allows fewer than D work-items */
  char rows[128] = "";
  if (c->cr > 1)
    snprintf(rows, sizeof rows, " CR=%zu (%zu rows per item: the kernel allows fewer than D items)", c->cr, c->cr);
  snprintf(buf, size, "backward; precision %s%s; chain fma W=%zu CB=%zu%s%s%s; ddecay fma RL=%zu%s", path, g,
           D / c->cr, c->cb, rows, f, dq, c->rl, pl->overridden ? " (tiles overridden)" : "");
  split_text(pl->u.gram.form == CD_GRAM_FMA_MODES ? pl->u.gram.tokens : SIZE_MAX, pl->u.chain.per, a, buf, size);
}

static camdelta_status check_describe(const camdelta_scan_backward_args *a) {
  static const char *const fn = "camdelta_scan_backward_plan_describe";
  camdelta_status st = cd_check_precision(fn, a->precision);
  if (!st) st = cd_check_head_dim(fn, a->D);
  if (st) return st;
  if (!a->B || !a->H || !a->F || !a->S || a->S > UINT32_MAX || a->F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu H=%zu F=%zu S=%zu: each must be in [1, 2^32)", fn, a->B, a->H,
                   a->F, a->S);
  return CAMDELTA_OK;
}

camdelta_status camdelta_scan_backward_plan_describe(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                                     char *buf, size_t size) {
  cd_clear_error();
  static const char *const fn = "camdelta_scan_backward_plan_describe";
  if (!ctx || !args || !buf)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", fn, !ctx ? "ctx" : !args ? "args" : "buf");
  camdelta_status st = check_describe(args);
  if (st) return st;
  cd_plan_entry *e;
  const cd_bwd_request r = cd_backward_request(args);
  if ((st = cd_backward_acquire(ctx, &r, &e))) return st;
  char text[1024];
  plan_text(e->plan, args, text, sizeof text);
  cd_plan_release(ctx, e);
  return cd_copy_text(fn, text, buf, size);
}

camdelta_status cd_backward_shape(const char *op, const camdelta_scan_backward_args *a, cd_fwd_sizes *z) {
  const size_t B = a->B, H = a->H, D = a->D, F = a->F, S = a->S;
  camdelta_status st = cd_check_precision(op, a->precision);
  if (!st) st = cd_check_head_dim(op, D);
  if (st) return st;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", op, B, H, F, S);
  size_t N, states;
  const size_t f1[] = {B, H, D, F, S}, f2[] = {B, H, F, S}, f3[] = {B, H, F, D, D}, f4[] = {B, H, F},
               f5[] = {B, H, D, D};
  if (!cd_mul(&N, F, S) || !cd_prod(&z->tok, 5, f1) || !cd_prod(&z->beta, 4, f2) || !cd_prod(&states, 5, f3) ||
      z->tok > SIZE_MAX / 8 || states > SIZE_MAX / 32)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B=%zu H=%zu D=%zu F=%zu S=%zu: sizes overflow size_t", op, B, H, D, F,
                   S);
  if (S > UINT32_MAX || F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu and S=%zu must each be below 2^32", op, F, S);
  cd_prod(&z->frames, 3, f4); /* each divides `states`, which did not overflow */
  cd_prod(&z->state, 4, f5);
  return CAMDELTA_OK;
}

camdelta_status cd_saved_matches(const char *op, const camdelta_scan_saved *saved, int reverse, int has_init) {
  if ((saved->reverse != 0) != (reverse != 0))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a %s forward, this call has reverse=%d", op,
                   saved->reverse ? "reverse" : "causal", reverse != 0);
  if ((saved->has_init != 0) != (has_init != 0))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'saved' is from a forward %s an init_state, this call %s one (pass the same init_state)", op,
                   saved->has_init ? "with" : "without", has_init ? "has" : "has no");
  return CAMDELTA_OK;
}

camdelta_status cd_backward_saved_check(const char *op, const camdelta_scan_backward_args *a,
                                        const camdelta_scan_saved *saved) {
  const size_t B = a->B, H = a->H, D = a->D, F = a->F, S = a->S;
  if (!saved->valid || !saved->state_post)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'saved' holds no states (pass it to camdelta_scan_forward first, or pass NULL)", op);
  if (saved->B != B || saved->H != H || saved->D != D || saved->F != F || saved->S != S)
    return cd_fail(CAMDELTA_ERROR_SHAPE,
                   "%s: 'saved' is from a forward with B=%zu H=%zu D=%zu F=%zu S=%zu, this call has B=%zu H=%zu "
                   "D=%zu F=%zu S=%zu",
                   op, saved->B, saved->H, saved->D, saved->F, saved->S, B, H, D, F, S);
  camdelta_status st = cd_saved_matches(op, saved, a->reverse, a->init_state.mem != NULL);
  if (st) return st;
  const camdelta_buffer sp = {saved->state_post, 0};
  return cd_check_buffer(op, "saved->state_post", sp, B * H * F * D * D, 4, 0);
}

#define BSLOT(f, role) CD_SLOT(camdelta_scan_backward_args, f, role)
const cd_slot cd_backward_slots[CD_BWD_NSLOTS] = {
    BSLOT(q, CD_IN),          BSLOT(k, CD_IN),          BSLOT(v, CD_IN),
    BSLOT(beta, CD_IN),       BSLOT(decay, CD_IN),      BSLOT(grad_out, CD_IN),
    BSLOT(init_state, CD_IN), BSLOT(grad_final_state, CD_IN), BSLOT(dq, CD_OUT),
    BSLOT(dk, CD_OUT),        BSLOT(dv, CD_OUT),        BSLOT(dbeta, CD_OUT),
    BSLOT(ddecay, CD_OUT),    BSLOT(dinit_state, CD_OUT)};
#undef BSLOT

void cd_backward_set_uses(cd_call *c, const cd_fwd_sizes *z) {
  const size_t n[CD_BWD_NSLOTS] = {z->tok,   z->tok, z->tok, z->beta, z->frames, z->tok,    z->state,
                                   z->state, z->tok, z->tok, z->tok,  z->beta,   z->frames, z->state};
  for (int i = 0; i < CD_BWD_NSLOTS; i++) {
    const int optional = i == 6 || i == 7 || i == 13; /* init_state, grad_final_state, dinit_state */
    c->use[i] = (cd_use){.need = optional ? CD_OPTIONAL : CD_REQUIRED, .elems = n[i], .es = 4};
  }
}

camdelta_status cd_backward_uses(cd_call *c) {
  const camdelta_scan_backward_args *a = c->args;
  cd_fwd_sizes z;
  camdelta_status st = cd_backward_shape(c->entry->op, a, &z);
  if (!st && c->saved) st = cd_backward_saved_check(c->entry->op, a, c->saved);
  if (!st) cd_backward_set_uses(c, &z);
  return st;
}

/* ------------------------------------------------------------------------------------- composition */

camdelta_status cd_backward_gram(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                 const camdelta_scan_backward_args *p, camdelta_buffer A, int A_given,
                                 camdelta_buffer U, int need_u, camdelta_buffer W, cd_launch *l) {
  const bwd_plan *pl = e->plan;
  const camdelta_buffer none = {NULL, 0};
  const cd_gram_io io = {.q = p->q, .k = p->k, .v = p->v, .dout = p->grad_out, .beta = p->beta, .decay = p->decay,
                         .A = A_given ? none : A, .U = need_u ? U : none, .W = W};
  return cd_gram_enqueue(ctx, &pl->u.gram, geo, &io, l);
}

camdelta_status cd_backward_rest(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                 const camdelta_scan_backward_args *p, camdelta_buffer states, camdelta_buffer A,
                                 camdelta_buffer U, camdelta_buffer W, cd_launch *l) {
  bwd_plan *pl = e->plan;
  const size_t D = geo->D, fbytes = geo->BHF * D * D * sizeof(float), ntiles = cd_frames_tiles(&pl->u.frames, geo->S);
  const int recompute = states.mem == NULL, has_init = p->init_state.mem != NULL;
  camdelta_buffer G, part;
  camdelta_status st = cd_ws_get(ctx, &pl->u.ws, WS_G, fbytes, &G);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, WS_PART, geo->BHF * ntiles * sizeof(float), &part);
  if (!st && recompute) st = cd_ws_get(ctx, &pl->u.ws, WS_Z, fbytes, &states);
  if (st) return st;
  /* the state chain when the forward's states are not given, then the gradient chain */
  const cd_chain_grads_io cio = {.A = A, .W = W, .U = U, .states = states, .init = p->init_state,
                                 .gfinal = p->grad_final_state, .G = G, .dinit = p->dinit_state,
                                 .reverse = p->reverse, .recompute = recompute};
  st = cd_chain_grads(ctx, &pl->u.chain, geo, &cio, l);
  const cd_frames_io fio = {.k = p->k, .v = p->v, .beta = p->beta, .decay = p->decay, .dout = p->grad_out,
                            .states = states, .init = p->init_state, .G = G, .dq = p->dq, .dk = p->dk, .dv = p->dv,
                            .dbeta = p->dbeta, .part = part, .reverse = p->reverse, .has_init = has_init};
  if (!st) st = cd_frames_enqueue(ctx, &pl->u.frames, geo, &fio, l);
  /* with tensor cores, dq apart from the frames kernel: dq[k][s] = Σ_v M[k][v]·dO[v][s] */
  if (!st && pl->tc)
    st = cd_apply_dq(ctx, &pl->u.apply, geo, p->grad_out, states, p->init_state, p->dq, p->reverse, has_init, l);
  if (!st)
    st = cd_ddecay_enqueue(ctx, &pl->u.ddecay, geo, states, p->init_state, G, part, p->ddecay, ntiles, p->reverse,
                           has_init, l);
  return st;
}

camdelta_status cd_backward_enqueue(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                    const camdelta_scan_backward_args *p, const camdelta_scan_saved *saved,
                                    cd_launch *l) {
  bwd_plan *pl = e->plan;
  const size_t fbytes = geo->BHF * geo->D * geo->D * sizeof(float);
  const int recompute = saved == NULL;
  /* A_f as the chunkwise forward computed it, kept in the saved object: no second A gram */
  const int reuse_a = saved && saved->has_a;
  camdelta_buffer A = {reuse_a ? saved->a_mat : NULL, 0}, U = {NULL, 0}, W;
  camdelta_status st = reuse_a ? CAMDELTA_OK : cd_ws_get(ctx, &pl->u.ws, WS_A, fbytes, &A);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, WS_W, fbytes, &W);
  if (!st && recompute) st = cd_ws_get(ctx, &pl->u.ws, WS_U, fbytes, &U);
  if (!st) st = cd_backward_gram(ctx, e, geo, p, A, reuse_a, U, recompute, W, l);
  const camdelta_buffer states = {recompute ? NULL : saved->state_post, 0};
  if (!st) st = cd_backward_rest(ctx, e, geo, p, states, A, U, W, l);
  return st;
}

static void verbose(const bwd_plan *pl, size_t D, const char *what) {
  const cd_sbwd_cfg *c = &pl->cfg;
  if (pl->cpu) {
    fprintf(stderr, "camdelta scan backward%s: cpu forms (gram, chain, frames, ddecay): %s\n", what, pl->opts);
    return;
  }
  fprintf(stderr, "camdelta scan backward%s: grams W=%zu, frames W=%zu tokens=%zu%s: %s\n", what,
          (D / c->rpt) * (D / c->rpt), c->tl * (D / c->dpt), c->tl * c->tpt,
          pl->overridden ? " (tiles overridden)" : "", pl->opts);
  if (pl->tc)
    fprintf(stderr, "camdelta scan backward: tensor cores (%s): grams WM=%u WN=%u MR=%u NR=%u KC=%u\n",
            pl->split ? "exact" : "tf32", pl->u.gram.t.wm, pl->u.gram.t.wn, pl->u.gram.t.mr, pl->u.gram.t.nr, pl->u.gram.t.kc);
}

void cd_backward_verbose(camdelta_context *ctx, const cd_plan_entry *e, size_t D, const char *what) {
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) verbose(e->plan, D, what);
}

/* The entry (the steps of src/runtime/driver.c): the call's plan, held from the plan step to the end step. */
static camdelta_status bwd_plan_step(cd_call *c) {
  const camdelta_scan_backward_args *a = c->args;
  const cd_bwd_request r = cd_backward_request(a);
  cd_plan_entry **e = c->op;
  const camdelta_status st = cd_backward_acquire(c->ctx, &r, e);
  if (!st) cd_backward_verbose(c->ctx, *e, a->D, "");
  return st;
}

static camdelta_status bwd_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_scan_backward_args *a = c->args;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  return cd_backward_enqueue(c->ctx, *(cd_plan_entry **)c->op, &geo, a, c->saved, l);
}

static camdelta_status bwd_end(cd_call *c, camdelta_status st) {
  cd_plan_entry **e = c->op;
  if (*e) cd_plan_release(c->ctx, *e);
  return st;
}

static const cd_entry BACKWARD = CD_ENTRY(OP, camdelta_scan_backward_args, cd_backward_slots, cd_backward_uses,
                                          bwd_plan_step, bwd_enqueue, bwd_end);

camdelta_status camdelta_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                       const camdelta_scan_saved *saved) {
  cd_plan_entry *e = NULL;
  cd_call c = {.entry = &BACKWARD, .ctx = ctx, .args = args, .saved = saved, .saved_ctx = saved ? saved->ctx : NULL,
               .op = &e};
  return cd_run_entry(&c);
}
