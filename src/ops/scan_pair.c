/* The fused scan pair of the camera branch (SPEC 8.4): the causal scan with (β', decay) plus the reverse scan
 * with (β'_r, decay_r) = (β', decay) zeroed at the chunk-start frames, summed, in one pass (cl/scan_pair.cl, and
 * cd_pair_phase_b in cl/scan_chunkwise.cl beside the phase B whose chain it shares):
 *
 *   phase A once          A_f, U_f of the causal gates (the reverse's are the same except 0 at masked frames)
 *   cd_pair_phase_b       both chains in one launch, with phase B's tiles for 2·B·H chains (value blocks as
 *                         wide as the compute units need to hold one work-group each), each direction's
 *                         per-frame states into its own buffer (the backward reads them)
 *   cd_pair_sum           states_c + states_r (B·H·F·D² floats: a few per cent of one scan's memory traffic)
 *   phase C once          out_f = Q_f·(M_f + T_f)
 *
 * instead of two scans (phases A, B, C twice) and an add. Phases A and C are the chunkwise scan's own
 * (src/ops/scan.c, tensor cores where its plan has them); each direction's states are bit-identical to those of
 * its own camdelta_scan_forward, the output differs from the sum of the two outputs by the rounding of one
 * product instead of two. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "plan.h"
#include "scan_pair.h"
#include "scan_tiles.h"
#include "scan_warm.h"
#include "tune.h"

static const char OP[] = "cd_scan_pair_forward";

int cd_scan_pair_wanted(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH, size_t D, size_t F,
                        size_t S) {
  if (alg == CAMDELTA_SCAN_AUTO) alg = cd_scan_auto_ctx(ctx, BH, D, F, S, NULL);
  return alg == CAMDELTA_SCAN_CHUNKWISE;
}

/* The pair's chain kernel, a plan kept in the context: its own phase-B tiles for the 2·BH chains (the compute units
 * each hold one work-group), work-groups halved until the compiled kernel holds them. Keyed by what the tiles
 * depend on: D, the value blocks of 2·BH chains and the token tile of S. */
typedef struct chain_plan {
  cl_kernel k;
  unsigned bw, nj;  /* work-group size, value-column blocks */
  size_t loops[2]; /* a work-item's loop iterations per launch and per frame (for the driver's loop budget) */
} chain_plan;
typedef struct chain_shape {
  size_t BH, D, S;
} chain_shape;

static void chain_destroy(void *plan) {
  chain_plan *p = plan;
  if (p->k) clReleaseKernel(p->k);
  free(p);
}

static camdelta_status chain_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)key;
  const chain_shape *sh = arg;
  chain_plan *p = calloc(1, sizeof *p);
  if (!p) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  for (unsigned cap = 256;; cap /= 2) {
    char opts[512];
    camdelta_status st = cd_scan_pair_chain_cfg(ctx, 2 * sh->BH, sh->D, sh->S, cap, opts, sizeof opts, &p->bw, &p->nj,
                                                 p->loops);
    if (!st) st = cd_kernel(ctx, "scan_chunkwise.cl", opts, "cd_pair_phase_b", &p->k);
    if (st) {
      free(p);
      return st;
    }
    const size_t have = cd_kernel_max_wg(ctx, p->k);
    if (have >= p->bw) {
      *out = p;
      return CAMDELTA_OK;
    }
    clReleaseKernel(p->k);
    p->k = NULL;
    if (cap <= 32) {
      const unsigned need = p->bw;
      free(p);
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the compiled pair chain allows work-groups of %zu items, needs %u",
                     OP, have, need);
    }
  }
}

static camdelta_status chain_acquire(camdelta_context *ctx, size_t BH, size_t D, size_t S, cd_plan_entry **e) {
  cd_scan_limits lim;
  cd_scan_limits_from_info(&ctx->info, &lim);
  const cd_scan_class cls = cd_scan_shape_class(&lim, 2 * BH, D, S);
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_PAIR_CHAIN;
  key.D = (unsigned)D;
  key.cls[0] = cls.b_blocks;
  key.cls[1] = cls.tokens;
  const chain_shape sh = {BH, D, S};
  return cd_plan_acquire(ctx, &key, chain_build, &sh, chain_destroy, e);
}

/* The elementwise kernels' local size: the largest power of two up to 256 that the compiled kernel takes. */
static size_t elementwise_local(camdelta_context *ctx, cl_kernel k) {
  size_t lws = 1;
  while (lws < 256 && lws * 2 <= cd_kernel_max_wg(ctx, k)) lws *= 2;
  return lws;
}

/* cd_pair_sum: sum = a + b over n4 float4s (the two directions' states) */
static camdelta_status pair_sum_enqueue(camdelta_context *ctx, cl_kernel k, cl_mem a, cl_mem b, cl_mem sum, uint64_t n4,
                                        cd_launch *l) {
  cd_args ar = {k, 0, CL_SUCCESS};
  cd_arg_mem(&ar, a);
  cd_arg_mem(&ar, b);
  cd_arg_mem(&ar, sum);
  cd_arg_u64(&ar, n4);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_pair_sum: setting arguments");
  const size_t lws = elementwise_local(ctx, k), gws = (n4 + lws - 1) / lws * lws;
  return cd_enqueue(ctx, k, 1, &gws, &lws, l, "cd_pair_sum");
}

camdelta_status cd_pair_add_enqueue(camdelta_context *ctx, cl_kernel k, camdelta_buffer a, camdelta_buffer b,
                                    uint64_t n, cd_launch *l, const char *what) {
  cd_args ar = {k, 0, CL_SUCCESS};
  cd_arg_buf(&ar, a);
  cd_arg_buf(&ar, b);
  cd_arg_u64(&ar, n);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_pair_add: setting arguments");
  const size_t lws = elementwise_local(ctx, k), gws = (n + lws - 1) / lws * lws;
  return cd_enqueue(ctx, k, 1, &gws, &lws, l, what);
}

camdelta_status cd_scan_pair_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S) {
  cd_scan_bwd_tiles t;
  cl_kernel k = NULL;
  cd_plan_entry *e = NULL;
  camdelta_status st = chain_acquire(ctx, BH, D, S, &e);
  if (!st) cd_plan_release(ctx, e);
  if (!st && !(st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_sum", &k))) clReleaseKernel(k);
  /* the backward's tiles as cd_scan_pair_backward picks them: dq apart where the tensor-core path runs */
  if (!st) st = cd_scan_bwd_tiles_for(ctx, D, cd_tc_available(ctx), &t);
  if (!st && !(st = cd_kernel(ctx, "scan_backward.cl", t.opts, "cd_pair_bwd_chain", &k))) clReleaseKernel(k);
  return st;
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
  /* the shapes and the causal scan's buffers are checked by the plan (as camdelta_scan_forward checks them) */
  const camdelta_scan_args sa = {a->B,    a->H,     a->D,       a->F,     a->S,        0,
                                 CAMDELTA_SCAN_CHUNKWISE, a->q, a->k, a->v, a->beta, a->decay,
                                 a->out,  a->init_c, a->final_c, a->profile, NULL, a->precision};
  cd_scan_chunk *plan = NULL;
  camdelta_status st = cd_scan_chunk_create(ctx, &sa, &plan);
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
  cd_plan_entry *ce = NULL;
  cl_kernel ks = NULL;
  if (!st) st = chain_acquire(ctx, BH, D, a->S, &ce);
  const chain_plan *cp = ce ? ce->plan : NULL;
  if (!st) st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_sum", &ks);
  if (!st && cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    cd_scan_chunk_describe(plan, text, sizeof text);
    fprintf(stderr, "camdelta scan pair: %s; the pair's chains in %u value blocks of work-groups of %u\n", text,
            cp->nj, cp->bw);
  }
  const size_t BHF = BH * a->F, fbytes = BHF * D * D * sizeof(float);
  cl_mem A = NULL, U = NULL, sc = NULL, sr = NULL, sum = NULL;
  /* with saved objects the causal A_f goes into the causal one: the pair's backward reads it */
  if (!st && saved_c) {
    saved_c->has_a = saved_r->has_a = 0;
    st = cd_ensure_buffer(ctx, &saved_c->a_mat, &saved_c->a_bytes, fbytes);
    A = saved_c->a_mat;
  } else if (!st)
    st = cd_alloc(ctx, fbytes, &A);
  if (!st) st = cd_alloc(ctx, fbytes, &U);
  if (!st && saved_c) {
    saved_c->valid = saved_r->valid = 0;
    st = saved_post(ctx, saved_c, fbytes);
    if (!st) st = saved_post(ctx, saved_r, fbytes);
    if (!st) sc = saved_c->state_post, sr = saved_r->state_post;
  }
  if (!st && !sc) st = cd_alloc(ctx, fbytes, &sc);
  if (!st && !sr) st = cd_alloc(ctx, fbytes, &sr);
  if (!st) st = cd_alloc(ctx, fbytes, &sum);
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);
  /* Under the driver's loop budget (cd_loop_budget) the chains run in launches of as many frames as fit, each
   * direction's state carried through a scratch buffer of its own. */
  const size_t budget = cd_loop_budget(ctx), steps = a->F; /* either chain's steps at most */
  size_t per = steps;
  if (!st && budget) {
    per = cp->loops[0] + cp->loops[1] <= budget ? (budget - cp->loops[0]) / cp->loops[1] : 0;
    if (!per)
      st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); one frame of the pair's chains at D=%zu needs %zu", OP, budget, D,
                   cp->loops[0] + cp->loops[1]);
  }
  cl_mem carry[2] = {NULL, NULL};
  for (int d = 0; d < 2 && !st && per < steps; d++) st = cd_alloc(ctx, BH * D * D * sizeof(float), &carry[d]);
  if (!st) st = cd_scan_chunk_phase_a(ctx, plan, A, U, &l);
  for (size_t t0 = 0; t0 < steps && !st; t0 += per) {
    const int last = t0 + per >= steps;
    const camdelta_buffer cc = {carry[0], 0}, cr = {carry[1], 0};
    cd_args ar = {cp->k, 0, CL_SUCCESS};
    cd_arg_buf(&ar, (camdelta_buffer){A, 0});
    cd_arg_buf(&ar, (camdelta_buffer){U, 0});
    cd_arg_mem(&ar, a->mask);
    cd_arg_buf(&ar, t0 ? cc : a->init_c);
    cd_arg_buf(&ar, t0 ? cr : a->init_r);
    cd_arg_buf(&ar, (camdelta_buffer){sc, 0});
    cd_arg_buf(&ar, (camdelta_buffer){sr, 0});
    cd_arg_buf(&ar, last ? a->final_c : cc);
    cd_arg_buf(&ar, last ? a->final_r : cr);
    cd_arg_u32(&ar, (uint32_t)a->F);
    cd_arg_u32(&ar, cp->nj);
    cd_arg_i32(&ar, t0 || a->init_c.mem != NULL);
    cd_arg_i32(&ar, t0 || a->init_r.mem != NULL);
    cd_arg_i32(&ar, a->final_c.mem != NULL);
    cd_arg_i32(&ar, a->final_r.mem != NULL);
    cd_arg_u32(&ar, (uint32_t)t0);
    cd_arg_u32(&ar, last ? UINT32_MAX : (uint32_t)(t0 + per));
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_pair_phase_b: setting arguments");
    const size_t lws[2] = {cp->bw, 1}, gws[2] = {(size_t)cp->bw * BH, 2 * (size_t)cp->nj};
    if (!st) st = cd_enqueue(ctx, cp->k, 2, gws, lws, &l, "cd_pair_phase_b");
  }
  for (int d = 0; d < 2; d++)
    if (carry[d]) clReleaseMemObject(carry[d]); /* in use until the launches have finished */
  if (!st) st = pair_sum_enqueue(ctx, ks, sc, sr, sum, BHF * D * D / 4, &l); /* D % 8 == 0 */
  int fused = 0;
  if (!st && a->ot) {
    a->ot->done = 0;
    st = cd_scan_chunk_phase_c_ot(ctx, plan, sum, a->ot, &fused, &l);
  }
  if (!st && !fused) st = cd_scan_chunk_phase_c(ctx, plan, sum, &l);
  /* released buffers live on until the enqueued kernels that use them have finished */
  cl_mem tmp[5] = {saved_c ? NULL : A, U, saved_c ? NULL : sc, saved_r ? NULL : sr, sum};
  for (int i = 0; i < 5; i++)
    if (tmp[i]) clReleaseMemObject(tmp[i]);
  if (ce) cd_plan_release(ctx, ce);
  if (ks) clReleaseKernel(ks);
  cd_scan_chunk_destroy(plan);
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
  if (a->precision != CAMDELTA_PRECISION_EXACT && a->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: precision %d unknown", BOP, (int)a->precision);
  camdelta_status st = cd_check_head_dim(BOP, a->D);
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
  cd_tc_set tc;
  const size_t offs[8] = {a->q.offset,  a->k.offset,  a->v.offset,      a->beta.offset,
                          a->dq.offset, a->dk.offset, a->grad_out.offset, a->dv.offset};
  const size_t offs2[1] = {a->beta_r.offset};
  const int vec = cd_tc_vec_ok(S, offs, 8) && cd_tc_vec_ok(S, offs2, 1);
  if ((st = cd_tc_build(ctx, D, a->precision, vec, CD_TC_WITH_FRAMES, &tc))) return st;
  cd_scan_bwd_tiles t;
  enum { KGRAMS, KCHAIN, KFR, KDDEC, KSUM, KADD, NK };
  cl_kernel k[NK] = {NULL};
  st = cd_scan_bwd_tiles_for(ctx, D, tc.on, &t);
  if (!st) st = cd_kernel(ctx, "scan_backward.cl", t.opts, "cd_pair_bwd_chain", &k[KCHAIN]);
  if (!st) st = cd_kernel(ctx, "scan_backward.cl", t.opts, "cd_scan_bwd_ddecay", &k[KDDEC]);
  if (!st && !tc.on) st = cd_kernel(ctx, "scan_backward.cl", t.opts, "cd_scan_bwd_grams", &k[KGRAMS]);
  if (!st && !tc.on) st = cd_kernel(ctx, "scan_backward.cl", t.opts, "cd_scan_bwd_frames", &k[KFR]);
  if (!st) st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_sum", &k[KSUM]);
  if (!st) st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_add", &k[KADD]);
  if (!st && cd_kernel_max_wg(ctx, k[KCHAIN]) < t.chain_wg)
    st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the compiled chain allows work-groups below its %zu items", BOP,
                 t.chain_wg);
  if (!st && cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32))
    fprintf(stderr, "camdelta scan pair backward: %s: %s\n", tc.on ? (tc.split ? "tensor cores, exact" : "tensor "
                    "cores, tf32") : "fma", tc.on ? tc.fopts : t.opts);
  const size_t ts = tc.on ? cd_tc_tm(&tc.fr) : t.frames_tokens, ntiles = (S + ts - 1) / ts;
  const size_t fbytes = BHF * D * D * sizeof(float);
  /* Under the driver's loop budget (cd_loop_budget) the grams sum a frame's tokens over several launches and the
   * chains run in launches of as many frames as fit, x carried through a scratch buffer. */
  size_t g_tokens = SIZE_MAX, c_per = F;
  const size_t budget = cd_loop_budget(ctx);
  if (!st && budget) {
    if (!tc.on) g_tokens = t.loops[0] + t.loops[1] <= budget ? (budget - t.loops[0]) / t.loops[1] * t.grams_tsg : 0;
    c_per = t.loops[2] + t.loops[3] <= budget ? (budget - t.loops[2]) / t.loops[3] : 0;
    if (!g_tokens || !c_per)
      st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); the %s at D=%zu needs %zu", BOP, budget, !g_tokens ? "grams kernel" : "chains", D,
                   !g_tokens ? t.loops[0] + t.loops[1] : t.loops[2] + t.loops[3]);
  }
  cl_mem A = NULL, W = NULL, Gc = NULL, Gr = NULL, part = NULL, sum = NULL, carry = NULL;
  if (!st && c_per < F) st = cd_alloc(ctx, 2 * BH * D * D * sizeof(float), &carry);
  const int reuse_a = !st && saved_c->has_a; /* the causal A_f as the forward's phase A computed it */
  if (!st && !reuse_a) st = cd_alloc(ctx, fbytes, &A);
  if (!st) st = cd_alloc(ctx, fbytes, &W);
  if (!st) st = cd_alloc(ctx, fbytes, &Gc);
  if (!st) st = cd_alloc(ctx, fbytes, &Gr);
  if (!st) st = cd_alloc(ctx, BHF * ntiles * sizeof(float), &part);
  if (!st && tc.on) st = cd_alloc(ctx, fbytes, &sum);
  /* the reverse direction's dq (FMA), dk, dv: the scratch given, else allocated here */
  cl_mem own[3] = {NULL, NULL, NULL};
  camdelta_buffer xr[3] = {a->scratch_dq, a->scratch_dk, a->scratch_dv};
  for (int i = tc.on ? 1 : 0; i < 3 && !st; i++)
    if (!xr[i].mem) {
      st = cd_alloc(ctx, ntok * sizeof(float), &own[i]);
      xr[i] = (camdelta_buffer){own[i], 0};
    }
  const camdelta_buffer bA = {reuse_a ? saved_c->a_mat : A, 0}, bW = {W, 0}, bpart = {part, 0}, none = {NULL, 0};
  const camdelta_buffer sc = {saved_c->state_post, 0}, sr = {saved_r->state_post, 0};
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);

  /* 1. W = Qᵀ·dO and (unless the forward's is kept) the causal A = d·(I − Kᵀ·β·K), once for both directions */
  if (!st && tc.on) {
    const unsigned nc = (unsigned)((D + cd_tc_tn(&tc.g) - 1) / cd_tc_tn(&tc.g));
    const unsigned nr = (unsigned)((D + cd_tc_tm(&tc.g) - 1) / cd_tc_tm(&tc.g));
    for (int pass = 0; pass < (reuse_a ? 1 : 2) && !st; pass++) {
      cd_args ar = {tc.gram, 0, CL_SUCCESS};
      cd_arg_buf(&ar, pass ? a->k : a->q);
      cd_arg_buf(&ar, pass ? a->k : a->grad_out);
      cd_arg_buf(&ar, pass ? a->v : a->grad_out);
      cd_arg_buf(&ar, a->beta);
      cd_arg_buf(&ar, a->decay);
      cd_arg_buf(&ar, pass ? bA : bW);
      cd_arg_buf(&ar, pass ? bA : bW);
      cd_arg_u64(&ar, N);
      cd_arg_u32(&ar, (uint32_t)S);
      cd_arg_u32(&ar, (uint32_t)F);
      cd_arg_u32(&ar, nc);
      cd_arg_u32(&ar, 0);
      cd_arg_i32(&ar, pass);
      cd_arg_i32(&ar, pass);
      if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_gram_tc: setting arguments");
      const size_t w = cd_tc_wg(&tc.g), lws[2] = {w, 1}, gws[2] = {w * nr * nc, BHF};
      if (!st) st = cd_enqueue(ctx, tc.gram, 2, gws, lws, &l, pass ? "cd_gram_tc (A)" : "cd_gram_tc (W)");
    }
  } else if (!st) {
    for (size_t s0 = 0; !st; s0 += g_tokens) {
      const int last = g_tokens >= S - s0;
      cd_args ar = {k[KGRAMS], 0, CL_SUCCESS};
      cd_arg_buf(&ar, a->q);
      cd_arg_buf(&ar, a->k);
      cd_arg_buf(&ar, a->v);
      cd_arg_buf(&ar, a->grad_out);
      cd_arg_buf(&ar, a->beta);
      cd_arg_buf(&ar, a->decay);
      cd_arg_buf(&ar, bW);
      cd_arg_buf(&ar, bA);
      cd_arg_buf(&ar, bA);
      cd_arg_u64(&ar, N);
      cd_arg_u32(&ar, (uint32_t)S);
      cd_arg_u32(&ar, (uint32_t)F);
      cd_arg_u32(&ar, reuse_a ? 1 : 2); /* W; A */
      cd_arg_u32(&ar, (uint32_t)s0);
      cd_arg_u32(&ar, last ? UINT32_MAX : (uint32_t)(s0 + g_tokens));
      cd_arg_u32(&ar, (s0 ? 1u : 0u) | (last ? 0u : 2u));
      if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_scan_bwd_grams: setting arguments");
      const size_t lws = t.grams_wg, gws = BHF * (reuse_a ? 1 : 2) * lws;
      if (!st) st = cd_enqueue(ctx, k[KGRAMS], 1, &gws, &lws, &l, "cd_scan_bwd_grams");
      if (last) break;
    }
  }
  /* 2. both G chains */
  for (size_t u0 = 0; u0 < F && !st; u0 += c_per) {
    const int last = c_per >= F - u0;
    cd_args ar = {k[KCHAIN], 0, CL_SUCCESS};
    cd_arg_buf(&ar, bA);
    cd_arg_buf(&ar, bW);
    cd_arg_mem(&ar, a->mask);
    cd_arg_buf(&ar, a->grad_final_c.mem ? a->grad_final_c : bA);
    cd_arg_buf(&ar, a->grad_final_r.mem ? a->grad_final_r : bA);
    cd_arg_buf(&ar, (camdelta_buffer){Gc, 0});
    cd_arg_buf(&ar, (camdelta_buffer){Gr, 0});
    cd_arg_buf(&ar, a->dinit_c.mem ? a->dinit_c : (camdelta_buffer){Gc, 0});
    cd_arg_buf(&ar, a->dinit_r.mem ? a->dinit_r : (camdelta_buffer){Gr, 0});
    cd_arg_u32(&ar, (uint32_t)F);
    cd_arg_i32(&ar, a->grad_final_c.mem != NULL);
    cd_arg_i32(&ar, a->grad_final_r.mem != NULL);
    cd_arg_i32(&ar, a->dinit_c.mem != NULL);
    cd_arg_i32(&ar, a->dinit_r.mem != NULL);
    cd_arg_u32(&ar, (uint32_t)u0);
    cd_arg_u32(&ar, last ? UINT32_MAX : (uint32_t)(u0 + c_per));
    cd_arg_mem(&ar, carry ? carry : bA.mem); /* the carry (a launch that leaves no steps never uses it) */
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_pair_bwd_chain: setting arguments");
    const size_t lws = t.chain_wg, gws = 2 * BH * (D / t.chain_cb) * lws;
    if (!st) st = cd_enqueue(ctx, k[KCHAIN], 1, &gws, &lws, &l, "cd_pair_bwd_chain");
  }
  /* 3. per direction: frames (the reverse's dq, dk, dv into the scratch), then ddecay (part is reused in order) */
  for (int rev = 0; rev < 2 && !st; rev++) {
    const camdelta_buffer states = rev ? sr : sc, init = rev ? a->init_r : a->init_c;
    const camdelta_buffer binit = init.mem ? init : bA;
    cl_kernel kf = tc.on ? tc.frames : k[KFR];
    cd_args ar = {kf, 0, CL_SUCCESS};
    cd_arg_buf(&ar, a->k);
    cd_arg_buf(&ar, a->v);
    cd_arg_buf(&ar, rev ? a->beta_r : a->beta);
    cd_arg_buf(&ar, rev ? a->decay_r : a->decay);
    if (!tc.on) cd_arg_buf(&ar, a->grad_out);
    cd_arg_buf(&ar, states);
    cd_arg_buf(&ar, binit);
    cd_arg_buf(&ar, (camdelta_buffer){rev ? Gr : Gc, 0});
    if (!tc.on) cd_arg_buf(&ar, rev ? xr[0] : a->dq);
    cd_arg_buf(&ar, rev ? xr[1] : a->dk);
    cd_arg_buf(&ar, rev ? xr[2] : a->dv);
    cd_arg_buf(&ar, rev ? a->dbeta_r : a->dbeta_c);
    cd_arg_buf(&ar, bpart);
    cd_arg_u64(&ar, N);
    cd_arg_u32(&ar, (uint32_t)S);
    cd_arg_u32(&ar, (uint32_t)F);
    cd_arg_u32(&ar, (uint32_t)ntiles);
    cd_arg_i32(&ar, rev);
    cd_arg_i32(&ar, init.mem != NULL);
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "the pair's frames kernel: setting arguments");
    const size_t w = tc.on ? cd_tc_wg(&tc.fr) : t.frames_wg;
    const size_t lws[2] = {w, 1}, gws[2] = {tc.on ? w * ntiles : BHF * ntiles * w, tc.on ? BHF : 1};
    if (!st) st = cd_enqueue(ctx, kf, 2, gws, lws, &l, tc.on ? "cd_frames_tc" : "cd_scan_bwd_frames");
    if (!st) {
      cd_args ad = {k[KDDEC], 0, CL_SUCCESS};
      cd_arg_buf(&ad, states);
      cd_arg_buf(&ad, binit);
      cd_arg_buf(&ad, (camdelta_buffer){rev ? Gr : Gc, 0});
      cd_arg_buf(&ad, bpart);
      cd_arg_buf(&ad, rev ? a->ddecay_r : a->ddecay_c);
      cd_arg_u32(&ad, (uint32_t)F);
      cd_arg_u32(&ad, (uint32_t)ntiles);
      cd_arg_i32(&ad, rev);
      cd_arg_i32(&ad, init.mem != NULL);
      if (ad.err != CL_SUCCESS) st = cd_cl_fail(ad.err, "cd_scan_bwd_ddecay: setting arguments");
      const size_t lws1 = t.rl, gws1 = BHF * lws1;
      if (!st) st = cd_enqueue(ctx, k[KDDEC], 1, &gws1, &lws1, &l, "cd_scan_bwd_ddecay");
    }
  }
  /* 4. dq (FMA), dk, dv summed: causal + reverse, the same bits as cd_branch_add3 (dk, dv not with kv_apart) */
  for (int i = tc.on ? 1 : 0; i < (a->kv_apart ? 1 : 3) && !st; i++)
    st = cd_pair_add_enqueue(ctx, k[KADD], i == 0 ? a->dq : i == 1 ? a->dk : a->dv, xr[i], ntok, &l, "cd_pair_add");
  /* 5. tensor cores: dq = dO·(M_c + M_r)ᵀ once, from the summed states (the reverse slot F−1 holds init_r) */
  if (!st && tc.on) st = pair_sum_enqueue(ctx, k[KSUM], sc.mem, sr.mem, sum, BHF * D * D / 4, &l);
  if (!st && tc.on) {
    const unsigned ns = (unsigned)((S + cd_tc_tn(&tc.a) - 1) / cd_tc_tn(&tc.a));
    const unsigned nr = (unsigned)((D + cd_tc_tm(&tc.a) - 1) / cd_tc_tm(&tc.a));
    cd_args ar = {tc.apply, 0, CL_SUCCESS};
    cd_arg_buf(&ar, a->grad_out);
    cd_arg_buf(&ar, (camdelta_buffer){sum, 0});
    cd_arg_buf(&ar, (camdelta_buffer){sum, 0});
    cd_arg_buf(&ar, a->dq);
    cd_arg_u64(&ar, N);
    cd_arg_u32(&ar, (uint32_t)S);
    cd_arg_u32(&ar, (uint32_t)F);
    cd_arg_u32(&ar, nr);
    cd_arg_i32(&ar, 0);
    cd_arg_i32(&ar, 0);
    cd_arg_i32(&ar, 0);
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_apply_tc: setting arguments");
    const size_t w = cd_tc_wg(&tc.a), lws[2] = {w, 1}, gws[2] = {w * nr * ns, BHF};
    if (!st) st = cd_enqueue(ctx, tc.apply, 2, gws, lws, &l, "cd_apply_tc (dq of both scans)");
  }
  (void)none;
  cl_mem tmp[10] = {A, W, Gc, Gr, part, sum, own[0], own[1], own[2], carry};
  for (int i = 0; i < 10; i++)
    if (tmp[i]) clReleaseMemObject(tmp[i]);
  for (int i = 0; i < NK; i++)
    if (k[i]) clReleaseKernel(k[i]);
  cd_tc_release(&tc);
  return cd_launch_end(ctx, &l, st);
}
