/* The fused scan pair of the camera branch (docs/math.md §8.4): the causal scan with (β', decay) plus the reverse scan
 * with (β'_r, decay_r) = (β', decay) zeroed at the chunk-start frames, summed, in one pass (units.h):
 *
 *   gram once             A_f, U_f of the causal gates (the reverse's are the same except 0 at masked frames)
 *   chain (pair form)     both chains in one launch, with phase B's tiles for 2·B·H chains (value blocks as
 *                         wide as the compute units need to hold one work-group each), each direction's
 *                         per-frame states into its own buffer (the backward reads them)
 *   sum                   states_c + states_r (B·H·F·D² floats: a few per cent of one scan's memory traffic)
 *   apply once            out_f = Q_f·(M_f + T_f), or with tensor cores y straight from the output transform
 *
 * instead of two scans (gram, chain, apply twice) and an add. The gram and the apply are the chunkwise scan's own
 * (its tiles for B·H chains, tensor cores where the device has them); each direction's states are bit-identical
 * to those of its own camdelta_scan_forward, the output differs from the sum of the two outputs by the rounding of
 * one product instead of two. The backward shares the gram W = Qᵀ·dO and the causal A, runs both gradient chains
 * in one launch, then each direction's frames and ddecay, and sums the two directions' gradients. Both have their
 * plans (kernels and workspace) kept in the context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/compose.h"
#include "scan/engine.h"

static const char OP[] = "cd_scan_pair_forward";

camdelta_status cd_scan_branch_algorithm(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH, size_t D,
                                         size_t F, size_t S, camdelta_scan_algorithm *run, int *pair) {
  camdelta_status st = CAMDELTA_OK;
  if (alg == CAMDELTA_SCAN_AUTO) st = cd_scan_decide(ctx, BH, D, F, S, &alg, NULL);
  *run = alg;
  *pair = !st && alg == CAMDELTA_SCAN_CHUNKWISE;
  return st;
}

/* ------------------------------------------------------------------------------------------- forward */

/* The forward pair's plan: the chunkwise program's gram and apply for B·H chains (the apply with the output
 * transform's epilogue form where the branch asks for it), the pair's chain with phase B's tiles for 2·B·H chains,
 * the state sum, and the workspace. Keyed by what the tiles depend on: D, the value blocks of B·H and of 2·B·H
 * chains, the token tile of S, and where the tensor-core path runs, the precision, row alignment and the storage of
 * the epilogue's y (the key's variant). */
typedef struct pair_plan {
  cd_units u; /* first: cd_units_destroy is the destructor */
  cd_chunk_cfg cc;
  int split;
  int cpu; /* the gram, the pair's chain and the apply in their CPU forms, from u.cpu_prog */
} pair_plan;
enum { PW_A, PW_U, PW_SC, PW_SR, PW_SUM };

typedef struct pair_request {
  size_t BH, D, S;
  camdelta_precision prec;
  int vec;
  camdelta_dtype ydt; /* the storage of y, where the output transform is fused */
} pair_request;

static camdelta_status pair_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)key;
  const pair_request *r = arg;
  pair_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  camdelta_status st = CAMDELTA_OK;
  if ((pl->cpu = cd_scan_cpu_forms(ctx, r->D)))
    st = cd_units_chunk_cpu(ctx, r->D, CD_CHAIN_CPU_STATES_PAIR, &pl->u);
  else
    st = cd_chunk_parts(ctx, r->BH, r->D, r->S, "", &pl->cc, &pl->u.gram, NULL, &pl->u.apply);
  if (!st && !pl->cpu && cd_tc_available(ctx)) {
    pl->split = r->prec != CAMDELTA_PRECISION_TF32;
    cd_gram_release(&pl->u.gram);
    cd_apply_release(&pl->u.apply);
    st = cd_gram_build_tc(ctx, r->D, pl->split, r->vec, "", &pl->u.gram);
    if (!st)
      st = cd_apply_build_tc(ctx, r->D, pl->split, r->vec, 1, r->ydt, "", &pl->u.apply);
  }
  if (!st && !pl->cpu) st = cd_chunk_pair_chain(ctx, 2 * r->BH, r->D, r->S, &pl->u.chain);
  if (!st) st = cd_pieces_build(ctx, &pl->u.pieces);
  return cd_units_done(pl, st, out);
}

static camdelta_status pair_acquire(camdelta_context *ctx, const pair_request *r, cd_plan_entry **e) {
  cd_scan_limits lim;
  cd_scan_limits_from_info(&ctx->info, &lim);
  const cd_scan_class one = cd_scan_shape_class(&lim, r->BH, r->D, r->S), two = cd_scan_shape_class(&lim, 2 * r->BH,
                                                                                                    r->D, r->S);
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_PAIR_FORWARD;
  key.D = (unsigned)r->D;
  key.cls[0] = one.b_blocks, key.cls[1] = one.tokens, key.cls[2] = two.b_blocks;
  if (cd_tc_available(ctx))
    key.prec = (unsigned)r->prec, key.vec = (unsigned)(r->vec != 0), key.variant = (unsigned)r->ydt;
  return cd_plan_acquire(ctx, &key, pair_build, r, cd_units_destroy, e);
}

/* The saved object holds `bytes` of state_post (state_pre is not kept by the pair). */
static camdelta_status saved_post(camdelta_context *ctx, camdelta_scan_saved *s, size_t bytes) {
  if (s->state_post && s->bytes >= bytes && !s->state_pre) return CAMDELTA_OK;
  if (s->state_pre) clReleaseMemObject(s->state_pre);
  if (s->state_post) clReleaseMemObject(s->state_post);
  s->state_pre = s->state_post = NULL, s->bytes = 0;
  camdelta_status st = cd_alloc(ctx, bytes, &s->state_post);
  if (!st) s->bytes = bytes;
  return st;
}

camdelta_status cd_scan_pair_forward(camdelta_context *ctx, const cd_scan_pair_args *a, camdelta_scan_saved *saved_c,
                                     camdelta_scan_saved *saved_r) {
  if (!ctx || !a) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", OP, ctx ? "args" : "ctx");
  if (!saved_c != !saved_r)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: pass both saved objects or neither", OP);
  if ((saved_c && saved_c->ctx != ctx) || (saved_r && saved_r->ctx != ctx))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: a saved object was created for another context", OP);
  if (!a->mask) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'mask' is NULL", OP);
  /* the shapes and the causal scan's buffers as camdelta_scan_forward checks them */
  const camdelta_scan_args sa = {.B = a->B, .H = a->H, .D = a->D, .F = a->F, .S = a->S,
                                 .algorithm = CAMDELTA_SCAN_CHUNKWISE, .q = a->q, .k = a->k, .v = a->v,
                                 .beta = a->beta, .decay = a->decay, .out = a->out, .init_state = a->init_c,
                                 .final_state = a->final_c, .profile = a->profile, .precision = a->precision};
  camdelta_status st = cd_forward_check("camdelta_scan_forward", &sa);
  if (st) return st;
  const size_t BH = a->B * a->H, D = a->D, BHDD = BH * D * D;
  if (!st) st = cd_check_buffer(OP, "init_r", a->init_r, BHDD, 4, 1);
  if (!st) st = cd_check_buffer(OP, "final_r", a->final_r, BHDD, 4, 1);
  if (!st && a->final_r.mem && a->final_r.mem == a->final_c.mem && a->final_r.offset < a->final_c.offset + BHDD &&
      a->final_c.offset < a->final_r.offset + BHDD)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'final_c' and 'final_r' overlap", OP);
  size_t mask_bytes = 0;
  if (!st && (clGetMemObjectInfo(a->mask, CL_MEM_SIZE, sizeof mask_bytes, &mask_bytes, NULL) != CL_SUCCESS ||
              mask_bytes < a->F * sizeof(uint32_t)))
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'mask' holds %zu bytes, F=%zu frames need %zu", OP, mask_bytes,
                 a->F, a->F * sizeof(uint32_t));
  if (st) return st;
  /* build everything before enqueuing anything */
  const size_t offs[5] = {a->q.offset, a->k.offset, a->v.offset, a->beta.offset, a->out.offset};
  const pair_request r = {.BH = BH, .D = D, .S = a->S, .prec = a->precision, .vec = cd_tc_vec_ok(a->S, offs, 5),
                          .ydt = a->ot ? a->ot->dtype : CAMDELTA_F32};
  cd_plan_entry *e;
  if ((st = pair_acquire(ctx, &r, &e))) return st;
  pair_plan *pl = e->plan;
  if (pl->cpu && cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32))
    fprintf(stderr, "camdelta scan pair: chunkwise; precision exact (fma); cpu forms (gram, pair chain, apply): %s\n",
            pl->u.cpu_prog.opts);
  else if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    cd_chunk_text(&pl->cc, &pl->u.gram, &pl->u.apply, pl->split, a->precision, text, sizeof text);
    fprintf(stderr, "camdelta scan pair: %s; the pair's chains in %u value blocks of work-groups of %u\n", text,
            pl->u.chain.nj, pl->u.chain.w);
  }
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, D, a->F, a->S);
  const size_t fbytes = geo.BHF * D * D * sizeof(float);
  camdelta_buffer A, U, sc = {NULL, 0}, sr = {NULL, 0}, sum;
  /* with saved objects the causal A_f goes into the causal one: the pair's backward reads it */
  if (saved_c) {
    saved_c->has_a = saved_r->has_a = 0;
    st = cd_ensure_buffer(ctx, &saved_c->a_mat, &saved_c->a_bytes, fbytes);
    A = (camdelta_buffer){saved_c->a_mat, 0};
  } else
    st = cd_ws_get(ctx, &pl->u.ws, PW_A, fbytes, &A);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PW_U, fbytes, &U);
  if (!st && saved_c) {
    saved_c->valid = saved_r->valid = 0;
    st = saved_post(ctx, saved_c, fbytes);
    if (!st) st = saved_post(ctx, saved_r, fbytes);
    if (!st) sc = (camdelta_buffer){saved_c->state_post, 0}, sr = (camdelta_buffer){saved_r->state_post, 0};
  }
  if (!st && !sc.mem) st = cd_ws_get(ctx, &pl->u.ws, PW_SC, fbytes, &sc);
  if (!st && !sr.mem) st = cd_ws_get(ctx, &pl->u.ws, PW_SR, fbytes, &sr);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PW_SUM, fbytes, &sum);
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);
  const cd_gram_io gio = {.k = a->k, .v = a->v, .beta = a->beta, .decay = a->decay, .A = A, .U = U};
  if (!st) st = cd_gram_enqueue(ctx, &pl->u.gram, &geo, &gio, &l);
  const cd_chain_pair_io cio = {.A = A, .U = U, .mask = a->mask, .init_c = a->init_c, .init_r = a->init_r,
                                .post_c = sc, .post_r = sr, .final_c = a->final_c, .final_r = a->final_r};
  if (!st) st = cd_chain_states_pair(ctx, &pl->u.chain, &geo, &cio, &l);
  if (!st) st = cd_pieces_sum(ctx, &pl->u.pieces, sc.mem, sr.mem, sum.mem, geo.BHF * D * D, &l); /* D % 8 == 0 */
  int fused = 0;
  if (!st && a->ot) {
    a->ot->done = 0;
    const cd_apply_ot_io oio = {.q = a->q, .states = sum, .proj_o = a->ot->proj_o, .rope_cos = a->ot->rope_cos,
                                .rope_sin = a->ot->rope_sin, .y = a->ot->y, .H = a->H};
    st = cd_apply_out_transform(ctx, &pl->u.apply, &geo, &oio, &fused, &l);
  }
  if (!st && !fused) st = cd_apply_out(ctx, &pl->u.apply, &geo, a->q, sum, a->out, &l);
  cd_plan_release(ctx, e);
  st = cd_launch_end(ctx, &l, st);
  if (!st && a->ot) a->ot->done = fused;
  if (!st && saved_c) {
    camdelta_scan_saved *s[2] = {saved_c, saved_r};
    for (int i = 0; i < 2; i++) {
      s[i]->B = a->B, s[i]->H = a->H, s[i]->D = D, s[i]->F = a->F, s[i]->S = a->S;
      s[i]->reverse = i;
      s[i]->has_init = (i ? a->init_r.mem : a->init_c.mem) != NULL;
      s[i]->has_a = i == 0; /* the reverse's A_f (0 at masked frames) is not kept */
      s[i]->valid = 1;
    }
  }
  return st;
}

/* ------------------------------------------------------------------------------------------ backward */

static const char BOP[] = "cd_scan_pair_backward";

/* The backward pair's plan: the backward program's parts with its tiles for D (the frames kernel leaving dq to the
 * tensor-core apply where the device has one), the pair's gradient chain, the tensor-core gram, frames and apply,
 * the elementwise pieces, and the workspace. */
typedef cd_bwd_units pair_bwd_plan;
enum { PB_A, PB_W, PB_GC, PB_GR, PB_PART, PB_SUM, PB_DQ, PB_DK, PB_DV };

/* The backward's units with the pair's gradient chain, and the elementwise pieces. */
static camdelta_status pair_bwd_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)key;
  pair_bwd_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", BOP);
  camdelta_status st = cd_backward_units(ctx, arg, 1, pl);
  if (!st) st = cd_pieces_build(ctx, &pl->u.pieces);
  return cd_units_done(pl, st, out);
}

static camdelta_status pair_bwd_acquire(camdelta_context *ctx, const cd_bwd_request *r, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_PAIR_BACKWARD;
  key.D = (unsigned)r->D;
  if (cd_tc_available(ctx)) key.prec = (unsigned)r->prec, key.vec = (unsigned)(r->vec != 0);
  return cd_plan_acquire(ctx, &key, pair_bwd_build, r, cd_units_destroy, e);
}


static camdelta_status check_saved(const camdelta_scan_saved *s, int reverse, const cd_scan_pair_bwd_args *a,
                                   camdelta_buffer init) {
  if (!s || !s->valid || !s->state_post)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the %s saved object holds no states", BOP,
                   reverse ? "reverse" : "causal");
  if (s->B != a->B || s->H != a->H || s->D != a->D || s->F != a->F || s->S != a->S || (s->reverse != 0) != reverse)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: the %s saved object is from another shape or direction", BOP,
                   reverse ? "reverse" : "causal");
  if ((s->has_init != 0) != (init.mem != NULL))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the %s saved object is from a forward %s an init state", BOP,
                   reverse ? "reverse" : "causal", s->has_init ? "with" : "without");
  return CAMDELTA_OK;
}

camdelta_status cd_scan_pair_backward(camdelta_context *ctx, const cd_scan_pair_bwd_args *a,
                                      const camdelta_scan_saved *saved_c, const camdelta_scan_saved *saved_r) {
  if (!ctx || !a) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", BOP, ctx ? "args" : "ctx");
  camdelta_status st = cd_check_precision(BOP, a->precision);
  if (!st) st = cd_check_head_dim(BOP, a->D);
  if (st) return st;
  const size_t B = a->B, H = a->H, D = a->D, F = a->F, S = a->S;
  if (!B || !H || !F || !S || F > UINT32_MAX || S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu H=%zu F=%zu S=%zu: each must be in [1, 2^32)", BOP, B, H, F, S);
  size_t N, ntok;
  const size_t ft[5] = {B, H, D, F, S};
  if (!cd_mul(&N, F, S) || !cd_prod(&ntok, 5, ft) || ntok > SIZE_MAX / 8)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow", BOP);
  const size_t BH = B * H, BHF = BH * F, nbeta = BHF * S, BHDD = BH * D * D;
  const cd_tensor_arg in[] = {{"q", a->q, ntok, 4},           {"k", a->k, ntok, 4},
                              {"v", a->v, ntok, 4},           {"beta", a->beta, nbeta, 4},
                              {"decay", a->decay, BHF, 4},    {"beta_r", a->beta_r, nbeta, 4},
                              {"decay_r", a->decay_r, BHF, 4}, {"grad_out", a->grad_out, ntok, 4},
                              {"init_c", a->init_c, BHDD, 4}, {"init_r", a->init_r, BHDD, 4},
                              {"grad_final_c", a->grad_final_c, BHDD, 4}, {"grad_final_r", a->grad_final_r, BHDD, 4}};
  const cd_tensor_arg out[] = {{"dq", a->dq, ntok, 4},           {"dk", a->dk, ntok, 4},
                               {"dv", a->dv, ntok, 4},           {"dbeta_c", a->dbeta_c, nbeta, 4},
                               {"dbeta_r", a->dbeta_r, nbeta, 4}, {"ddecay_c", a->ddecay_c, BHF, 4},
                               {"ddecay_r", a->ddecay_r, BHF, 4}, {"dinit_c", a->dinit_c, BHDD, 4},
                               {"dinit_r", a->dinit_r, BHDD, 4},  {"scratch_dq", a->scratch_dq, ntok, 4},
                               {"scratch_dk", a->scratch_dk, ntok, 4}, {"scratch_dv", a->scratch_dv, ntok, 4}};
  const size_t nin = sizeof in / sizeof in[0], nout = sizeof out / sizeof out[0];
  for (size_t i = 0; i < nin && !st; i++) st = cd_check_buffer(BOP, in[i].name, in[i].b, in[i].elems, 4, i >= 8);
  for (size_t i = 0; i < nout && !st; i++) st = cd_check_buffer(BOP, out[i].name, out[i].b, out[i].elems, 4, i >= 7);
  if (!st) st = cd_check_no_overlap(BOP, out, nout, in, nin);
  if (!st && a->kv_apart && (!a->scratch_dk.mem || !a->scratch_dv.mem))
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: kv_apart needs scratch_dk and scratch_dv", BOP);
  if (!st) st = check_saved(saved_c, 0, a, a->init_c);
  if (!st) st = check_saved(saved_r, 1, a, a->init_r);
  size_t mask_bytes = 0;
  if (!st && (!a->mask ||
              clGetMemObjectInfo(a->mask, CL_MEM_SIZE, sizeof mask_bytes, &mask_bytes, NULL) != CL_SUCCESS ||
              mask_bytes < F * sizeof(uint32_t)))
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'mask' must hold F=%zu uint32 (%zu bytes)", BOP, F,
                 F * sizeof(uint32_t));
  if (st) return st;

  /* build everything before enqueuing anything */
  const size_t offs[9] = {a->q.offset,  a->k.offset,  a->v.offset,        a->beta.offset, a->dq.offset,
                          a->dk.offset, a->grad_out.offset, a->dv.offset, a->beta_r.offset};
  const cd_bwd_request r = {.D = D, .prec = a->precision, .vec = cd_tc_vec_ok(S, offs, 9), .variant = 0, .extra = ""};
  cd_plan_entry *e;
  if ((st = pair_bwd_acquire(ctx, &r, &e))) return st;
  pair_bwd_plan *pl = e->plan;
  const int tc = pl->tc;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32))
    fprintf(stderr, "camdelta scan pair backward: %s: %s\n",
            pl->cpu                               ? "cpu forms"
            : !tc                                 ? "fma"
            : r.prec == CAMDELTA_PRECISION_TF32 ? "tensor cores, tf32"
                                                  : "tensor cores, exact",
            pl->opts);
  const cd_scan_geo geo = cd_scan_geo_fixed(B, H, D, F, S);
  const size_t ntiles = cd_frames_tiles(&pl->u.frames, S), fbytes = BHF * D * D * sizeof(float);
  const int reuse_a = saved_c->has_a; /* the causal A_f as the forward's gram computed it */
  camdelta_buffer A = {saved_c->a_mat, 0}, W, Gc, Gr, part, sum = {NULL, 0};
  if (!reuse_a) st = cd_ws_get(ctx, &pl->u.ws, PB_A, fbytes, &A);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PB_W, fbytes, &W);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PB_GC, fbytes, &Gc);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PB_GR, fbytes, &Gr);
  if (!st) st = cd_ws_get(ctx, &pl->u.ws, PB_PART, BHF * ntiles * sizeof(float), &part);
  if (!st && tc) st = cd_ws_get(ctx, &pl->u.ws, PB_SUM, fbytes, &sum);
  /* the reverse direction's dq (FMA), dk, dv: the scratch given, else the workspace */
  camdelta_buffer xr[3] = {a->scratch_dq, a->scratch_dk, a->scratch_dv};
  for (int i = tc ? 1 : 0; i < 3 && !st; i++)
    if (!xr[i].mem) st = cd_ws_get(ctx, &pl->u.ws, PB_DQ + i, ntok * sizeof(float), &xr[i]);
  const camdelta_buffer sc = {saved_c->state_post, 0}, sr = {saved_r->state_post, 0};
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);

  /* 1. W = Qᵀ·dO and (unless the forward's is kept) the causal A = d·(I − Kᵀ·β·K), once for both directions */
  const camdelta_buffer none = {NULL, 0};
  const cd_gram_io gio = {.q = a->q, .k = a->k, .v = a->v, .dout = a->grad_out, .beta = a->beta, .decay = a->decay,
                          .A = reuse_a ? none : A, .W = W};
  if (!st) st = cd_gram_enqueue(ctx, &pl->u.gram, &geo, &gio, &l);
  /* 2. both G chains */
  const cd_chain_grads_pair_io cio = {.A = A, .W = W, .mask = a->mask, .gfinal_c = a->grad_final_c,
                                      .gfinal_r = a->grad_final_r, .G_c = Gc, .G_r = Gr, .dinit_c = a->dinit_c,
                                      .dinit_r = a->dinit_r};
  if (!st) st = cd_chain_grads_pair(ctx, &pl->u.chain, &geo, &cio, &l);
  /* 3. per direction: frames (the reverse's dq, dk, dv into the scratch), then ddecay (part is reused in order) */
  for (int rev = 0; rev < 2 && !st; rev++) {
    const camdelta_buffer states = rev ? sr : sc, init = rev ? a->init_r : a->init_c;
    const cd_frames_io fio = {.k = a->k, .v = a->v, .beta = rev ? a->beta_r : a->beta,
                              .decay = rev ? a->decay_r : a->decay, .dout = a->grad_out, .states = states,
                              .init = init, .G = rev ? Gr : Gc, .dq = rev ? xr[0] : a->dq, .dk = rev ? xr[1] : a->dk,
                              .dv = rev ? xr[2] : a->dv, .dbeta = rev ? a->dbeta_r : a->dbeta_c, .part = part,
                              .reverse = rev, .has_init = init.mem != NULL};
    st = cd_frames_enqueue(ctx, &pl->u.frames, &geo, &fio, &l);
    if (!st)
      st = cd_ddecay_enqueue(ctx, &pl->u.ddecay, &geo, states, init, rev ? Gr : Gc, part,
                             rev ? a->ddecay_r : a->ddecay_c, ntiles, rev, init.mem != NULL, &l);
  }
  /* 4. dq (FMA), dk, dv summed: causal + reverse, the same bits as cd_branch_add3 (dk, dv not with kv_apart) */
  for (int i = tc ? 1 : 0; i < (a->kv_apart ? 1 : 3) && !st; i++)
    st = cd_pair_add_enqueue(ctx, pl->u.pieces.add, i == 0 ? a->dq : i == 1 ? a->dk : a->dv, xr[i], ntok, &l,
                             "cd_pair_add");
  /* 5. tensor cores: dq = dO·(M_c + M_r)ᵀ once, from the summed states (the reverse slot F−1 holds init_r) */
  if (!st && tc) st = cd_pieces_sum(ctx, &pl->u.pieces, sc.mem, sr.mem, sum.mem, BHF * D * D, &l);
  if (!st && tc) st = cd_apply_dq(ctx, &pl->u.apply, &geo, a->grad_out, sum, sum, a->dq, 0, 0, &l);
  cd_plan_release(ctx, e);
  return cd_launch_end(ctx, &l, st);
}

camdelta_status cd_scan_pair_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S) {
  camdelta_status st = CAMDELTA_OK;
  for (int prec = CAMDELTA_PRECISION_EXACT; prec <= CAMDELTA_PRECISION_TF32 && !st; prec++) {
    const pair_request r = {.BH = BH, .D = D, .S = S, .prec = (camdelta_precision)prec, .vec = S % 4 == 0};
    const cd_bwd_request rb = {.D = D, .prec = (camdelta_precision)prec, .vec = S % 4 == 0, .variant = 0, .extra = ""};
    cd_plan_entry *e;
    if (!(st = pair_acquire(ctx, &r, &e))) cd_plan_release(ctx, e);
    if (!st && !(st = pair_bwd_acquire(ctx, &rb, &e))) cd_plan_release(ctx, e);
  }
  return st;
}
