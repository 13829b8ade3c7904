/* Scan backward (SPEC section 4): argument checks and the four launches of cl/scan_backward.cl.
 *
 *   1. grams  (parallel over b, h, f): W_f = Q_fᵀ·dO_f, A_f = d_f·(I − K_fᵀβ_fK_f) (unless the saved object
 *             holds the chunkwise forward's A_f), and U_f = K_fᵀβ_fV_f when the forward's states must be
 *             recomputed (saved == NULL)
 *   2. chain  (parallel over b, h and column blocks of D; serial over frames): the state chain
 *             M_f = A_f·M_prev + U_f when recomputing, then the gradient chain G_f = dL/dM_f and dinit_state
 *   3. frames (parallel over b, h, f and token tiles): dq, dk, dv, dbeta and per-tile ddecay partials
 *   4. ddecay (parallel over b, h, f): ddecay = <G_f, M_prev> + the partials, in a fixed order
 *
 * Everything is f32 with fixed summation orders (no atomics), so two runs give bit-identical gradients.
 * Scratch: A, W, G (and U, Z when recomputing), each (B, H, F, D, D) f32, allocated per call.
 *
 * CAMDELTA_SCAN_BWD_TILES (tuning): a comma-separated list of KEY=N replacing the fields choose_config() picks:
 * grams RPT (rows and columns per item; a multiple of 4 dividing D) and TSG (tokens per chunk; a multiple of 8),
 * chain CB (columns per work-group; a multiple of 4 dividing D) and CR (rows per item, dividing D: the chain's
 * work-group is D / CR items; chosen above 1 only where the compiled chain allows fewer than D), frames DPT (value columns per item; a multiple of
 * 4 dividing D), TL (token lanes), TPT (tokens per lane), MC (contraction chunk; divides D), ddecay RL (a power of
 * two), e.g. "RPT=8,TSG=16,DPT=8,TL=32,TPT=2,MC=16". Fields not given keep their choice; a list that does not
 * parse, or tiles beyond these constraints, the local memory or the work-group limits, fail with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "internal.h"
#include "plan.h"
#include "scan_hook.h"
#include "scan_packed.h"
#include "scan_pair.h"
#include "scan_tiles.h"
#include "tune.h"

static const char OP[] = "camdelta_scan_backward";

/* The tile policy (parameters, constraints, local memory) lives in src/tune/scan_tiles.c. */
typedef cd_sbwd_cfg sb_config;

typedef struct sb_kernels {
  cl_kernel grams, chain, frames, ddecay;
} sb_kernels;

static void release_kernels(sb_kernels *k) {
  if (k->grams) clReleaseKernel(k->grams);
  if (k->chain) clReleaseKernel(k->chain);
  if (k->frames) clReleaseKernel(k->frames);
  if (k->ddecay) clReleaseKernel(k->ddecay);
  memset(k, 0, sizeof *k);
}

enum { T_COUNT = CD_SB_COUNT };

/* Builds the four kernels; shrinks the configuration when a kernel's own work-group limit (registers) is
 * below what the device reports. opts (256 bytes) receives their build options, *overridden whether the tiles
 * came from CAMDELTA_SCAN_BWD_TILES (as read at context creation) or camdelta_tune_set "backward". */
static camdelta_status build_kernels(camdelta_context *ctx, size_t D, int skip_dq, const char *extra, sb_config *cfg,
                                     sb_kernels *k, char *opts, int *overridden_out) {
  size_t dev_wg, local;
  cd_sbwd_limits(&ctx->info, &dev_wg, &local);
  /* GPUs: the chain step unrolled over D, its A column in registers (PoCL would compile that for long) */
  const int gpu = cd_device_gpu_like(&ctx->info);
  size_t wg_grams = dev_wg, wg_frames = dev_wg, wg_chain = dev_wg, wg_rl = dev_wg;
  memset(k, 0, sizeof *k);
  unsigned ov[T_COUNT];
  int overridden = 0;
  char env[512], var[64]; /* the override and its source (the variable or camdelta_tune_set) */
  cd_tune_fma_text(ctx, CD_FMA_BACKWARD, env, sizeof env, var, sizeof var);
  if (env[0]) {
    camdelta_status st = cd_sbwd_parse(var, env, ov, &overridden);
    if (st) return st;
  }
  *overridden_out = overridden;
  for (int attempt = 0; attempt < 8; attempt++) {
    camdelta_status st = cd_sbwd_choose(D, local, wg_grams, wg_frames, wg_chain, wg_rl, cfg);
    if (!st && overridden) st = cd_sbwd_override(D, local, dev_wg, ov, var, cfg);
    if (st) return st;
    char rows[48] = "";
    if (cfg->cr > 1) snprintf(rows, sizeof rows, " -DCD_CHAIN_R=%zu", cfg->cr);
    snprintf(opts, 256,
             "-DCD_D=%zu -DCD_RPT=%zu -DCD_TSG=%zu -DCD_CB=%zu -DCD_DPT=%zu -DCD_TL=%zu -DCD_TPT=%zu -DCD_MC=%zu "
             "-DCD_RL=%zu%s%s%s%s",
             D, cfg->rpt, cfg->tsg, cfg->cb, cfg->dpt, cfg->tl, cfg->tpt, cfg->mc, cfg->rl, rows,
             skip_dq ? " -DCD_SKIP_DQ=1" : "", gpu ? " -DCD_CHAIN_UNROLL=1" : "", extra);
    if ((st = cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_grams", &k->grams)) ||
        (st = cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_chain", &k->chain)) ||
        (st = cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_frames", &k->frames)) ||
        (st = cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_ddecay", &k->ddecay))) {
      release_kernels(k);
      return st;
    }
    const size_t need_g = (D / cfg->rpt) * (D / cfg->rpt), need_f = cfg->tl * (D / cfg->dpt);
    const size_t have_g = cd_kernel_max_wg(ctx, k->grams), have_f = cd_kernel_max_wg(ctx, k->frames);
    const size_t have_c = cd_kernel_max_wg(ctx, k->chain), have_r = cd_kernel_max_wg(ctx, k->ddecay);
    const size_t need_c = D / cfg->cr;
    if (need_g <= have_g && need_f <= have_f && need_c <= have_c && cfg->rl <= have_r) return CAMDELTA_OK;
    release_kernels(k);
    if (overridden)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: the compiled kernels allow work-groups of %zu (grams), %zu (frames), %zu (chain), %zu "
                     "(ddecay) items; the tiles need %zu, %zu, %zu, %zu",
                     OP, var, have_g, have_f, have_c, have_r, need_g, need_f, need_c, cfg->rl);
    if (need_g > have_g) wg_grams = have_g;
    if (need_f > have_f) wg_frames = have_f;
    if (need_c > have_c) wg_chain = have_c;
    if (cfg->rl > have_r) wg_rl = have_r;
  }
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: no kernel configuration for D=%zu fits this device", OP, D);
}

/* Everything a backward call runs, built once per (device, D, and where the tensor-core path runs, precision and
 * 16-byte token rows) and kept in the context (src/tune/plan.c). */
typedef struct bwd_plan {
  sb_config cfg;
  sb_kernels k;
  cd_tc_set tc;
  char opts[256];
  int overridden;
} bwd_plan;

static void bwd_destroy(void *p) {
  bwd_plan *pl = p;
  release_kernels(&pl->k);
  cd_tc_release(&pl->tc);
  free(pl);
}

/* A plan for D and precision with 16-byte token rows or not (vec); extra: the packed variant's build options. */
static camdelta_status bwd_build_opts(camdelta_context *ctx, const camdelta_scan_backward_args *a, int vec,
                                      const char *extra, bwd_plan **out) {
  bwd_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  camdelta_status st = cd_tc_build_opts(ctx, a->D, a->precision, vec, CD_TC_WITH_FRAMES, extra, &pl->tc);
  if (!st) st = build_kernels(ctx, a->D, pl->tc.on, extra, &pl->cfg, &pl->k, pl->opts, &pl->overridden);
  if (st) {
    bwd_destroy(pl);
    return st;
  }
  *out = pl;
  return CAMDELTA_OK;
}

static camdelta_status bwd_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  bwd_plan *pl = NULL;
  camdelta_status st = bwd_build_opts(ctx, arg, (int)key->vec, "", &pl);
  *out = pl;
  return st;
}

/* The context's plan for `a`, referenced and locked for this call (cd_plan_release() after the launches). */
static camdelta_status plan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *a, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SCAN_BACKWARD;
  key.D = (unsigned)a->D;
  if (cd_tc_available(ctx)) {
    const size_t offs[6] = {a->q.offset, a->k.offset, a->v.offset, a->beta.offset, a->grad_out.offset, a->dq.offset};
    const size_t offs2[4] = {a->dk.offset, a->dv.offset, 0, 0};
    key.prec = (unsigned)a->precision;
    key.vec = (unsigned)(cd_tc_vec_ok(a->S, offs, 6) && cd_tc_vec_ok(a->S, offs2, 4));
  }
  return cd_plan_acquire(ctx, &key, bwd_build, a, bwd_destroy, e);
}

camdelta_status cd_scan_backward_warm(camdelta_context *ctx, size_t D) {
  camdelta_status st = cd_check_head_dim(OP, D);
  /* both precisions, with and without 16-byte token rows (S % 4 == 0 and aligned offsets) */
  for (int v = 0; v < 4 && !st; v++) {
    camdelta_scan_backward_args a = CAMDELTA_SCAN_BACKWARD_ARGS_INIT;
    a.B = a.H = a.F = 1, a.D = D, a.S = v >> 1 ? 4 : 1, a.precision = (camdelta_precision)(v & 1);
    cd_plan_entry *e;
    if (!(st = plan_backward(ctx, &a, &e))) cd_plan_release(ctx, e);
  }
  return st;
}

static void tc_text(char *buf, size_t size, const char *what, const char *kernel, const cd_tc_tiles *t) {
  snprintf(buf, size, "; %s %s W=%u WM=%u WN=%u MR=%u NR=%u KC=%u", what, kernel, cd_tc_wg(t), t->wm, t->wn, t->mr,
           t->nr, t->kc);
}

static void plan_text(const bwd_plan *pl, const camdelta_scan_backward_args *a, char *buf, size_t size) {
  const cd_tc_set *tc = &pl->tc;
  const sb_config *c = &pl->cfg;
  const size_t D = a->D;
  const char *path = tc->on ? (tc->split ? "exact (tensor cores, split-TF32)" : "tf32 (tensor cores)")
                     : a->precision == CAMDELTA_PRECISION_TF32
                         ? "exact (fma; tf32 requested, no tensor-core path on this device)"
                         : "exact (fma)";
  char g[160], f[160], dq[160];
  if (tc->on) {
    tc_text(g, sizeof g, "grams", "gram_tc", &tc->g);
    tc_text(f, sizeof f, "frames", "frames_tc", &tc->fr);
    tc_text(dq, sizeof dq, "dq", "apply_tc", &tc->a);
  } else {
    snprintf(g, sizeof g, "; grams fma W=%zu RPT=%zu TSG=%zu", (D / c->rpt) * (D / c->rpt), c->rpt, c->tsg);
    snprintf(f, sizeof f, "; frames fma W=%zu DPT=%zu TL=%zu TPT=%zu MC=%zu", c->tl * (D / c->dpt), c->dpt, c->tl,
             c->tpt, c->mc);
    dq[0] = '\0';
  }
  char rows[128] = "";
  if (c->cr > 1)
    snprintf(rows, sizeof rows, " CR=%zu (%zu rows per item: the kernel allows fewer than D items)", c->cr, c->cr);
  snprintf(buf, size, "backward; precision %s%s; chain fma W=%zu CB=%zu%s%s%s; ddecay fma RL=%zu%s", path, g,
           D / c->cr, c->cb, rows, f, dq, c->rl, pl->overridden ? " (tiles overridden)" : "");
}

static camdelta_status check_describe(const camdelta_scan_backward_args *a) {
  static const char *const fn = "camdelta_scan_backward_plan_describe";
  if (a->precision != CAMDELTA_PRECISION_EXACT && a->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: precision %d unknown", fn, (int)a->precision);
  camdelta_status st = cd_check_head_dim(fn, a->D);
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
  if ((st = plan_backward(ctx, args, &e))) return st;
  char text[1024];
  plan_text(e->plan, args, text, sizeof text);
  cd_plan_release(ctx, e);
  return cd_copy_text(fn, text, buf, size);
}

static camdelta_status check_args(const camdelta_scan_backward_args *a, const camdelta_scan_saved *saved,
                                  size_t *N_out) {
  const size_t B = a->B, H = a->H, D = a->D, F = a->F, S = a->S;
  if (a->precision != CAMDELTA_PRECISION_EXACT && a->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: precision %d unknown (expected CAMDELTA_PRECISION_EXACT or CAMDELTA_PRECISION_TF32)", OP,
                   (int)a->precision);
  camdelta_status st = cd_check_head_dim(OP, D);
  if (st) return st;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", OP, B, H, F, S);
  size_t N, elems, gates, states;
  const size_t f1[] = {B, H, D, F, S}, f2[] = {B, H, F, S}, f3[] = {B, H, F, D, D};
  if (!cd_mul(&N, F, S) || !cd_prod(&elems, 5, f1) || !cd_prod(&gates, 4, f2) || !cd_prod(&states, 5, f3) ||
      elems > SIZE_MAX / 8 || states > SIZE_MAX / 32)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B=%zu H=%zu D=%zu F=%zu S=%zu: sizes overflow size_t", OP, B, H, D, F,
                   S);
  if (S > UINT32_MAX || F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu and S=%zu must each be below 2^32", OP, F, S);
  const size_t BHF = B * H * F, BHDD = B * H * D * D;
  const cd_tensor_arg in[] = {{"q", a->q, elems, 4},
                              {"k", a->k, elems, 4},
                              {"v", a->v, elems, 4},
                              {"beta", a->beta, gates, 4},
                              {"decay", a->decay, BHF, 4},
                              {"grad_out", a->grad_out, elems, 4},
                              {"init_state", a->init_state, BHDD, 4},
                              {"grad_final_state", a->grad_final_state, BHDD, 4}};
  const cd_tensor_arg out[] = {{"dq", a->dq, elems, 4},       {"dk", a->dk, elems, 4},   {"dv", a->dv, elems, 4},
                               {"dbeta", a->dbeta, gates, 4}, {"ddecay", a->ddecay, BHF, 4},
                               {"dinit_state", a->dinit_state, BHDD, 4}};
  const size_t nin = sizeof in / sizeof in[0], nout = sizeof out / sizeof out[0];
  for (size_t i = 0; i < nin; i++)
    if ((st = cd_check_buffer(OP, in[i].name, in[i].b, in[i].elems, 4, i >= 6))) return st;
  for (size_t i = 0; i < nout; i++)
    if ((st = cd_check_buffer(OP, out[i].name, out[i].b, out[i].elems, 4, i == nout - 1))) return st;
  if ((st = cd_check_no_overlap(OP, out, nout, in, nin))) return st;
  if (saved) {
    if (!saved->valid || !saved->state_post)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                     "%s: 'saved' holds no states (pass it to camdelta_scan_forward first, or pass NULL)", OP);
    if (saved->B != B || saved->H != H || saved->D != D || saved->F != F || saved->S != S)
      return cd_fail(CAMDELTA_ERROR_SHAPE,
                     "%s: 'saved' is from a forward with B=%zu H=%zu D=%zu F=%zu S=%zu, this call has B=%zu H=%zu "
                     "D=%zu F=%zu S=%zu",
                     OP, saved->B, saved->H, saved->D, saved->F, saved->S, B, H, D, F, S);
    if ((saved->reverse != 0) != (a->reverse != 0))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a %s forward, this call has reverse=%d", OP,
                     saved->reverse ? "reverse" : "causal", a->reverse != 0);
    if ((saved->has_init != 0) != (a->init_state.mem != NULL))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                     "%s: 'saved' is from a forward %s an init_state, this call %s one (pass the same init_state)", OP,
                     saved->has_init ? "with" : "without", a->init_state.mem ? "has" : "has no");
    camdelta_buffer sp = {saved->state_post, 0};
    if ((st = cd_check_buffer(OP, "saved->state_post", sp, states, 4, 0))) return st;
  }
  *N_out = N;
  return CAMDELTA_OK;
}

static camdelta_status run_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                    const camdelta_scan_saved *saved, size_t N, const cd_packed_run *pr,
                                    const cd_scan_hook *hook);

camdelta_status camdelta_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                       const camdelta_scan_saved *saved) {
  return camdelta_scan_sp_backward_hooked(ctx, args, saved, NULL);
}

camdelta_status camdelta_scan_sp_backward_hooked(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                        const camdelta_scan_saved *saved, const cd_scan_hook *hook) {
  cd_clear_error();
  { const camdelta_status pst = cd_prologue_scan_backward(ctx, args, saved); if (pst) return pst; }
  if (!ctx || !args) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", OP, ctx ? "args" : "ctx");
  if (saved && saved->ctx != ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' was created for another context", OP);
  size_t N = 0;
  camdelta_status st = check_args(args, saved, &N);
  if (st) return st;
  return run_backward(ctx, args, saved, N, NULL, hook);
}

/* The launches; pr != NULL: packed clips (scan_packed.c), args with B = 1, F = all frames, S = the longest frame,
 * the kernels' packed variant and one chain per (clip, head); hook != NULL: the MPI summaries (scan_hook.h). */
static camdelta_status run_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                    const camdelta_scan_saved *saved, size_t N, const cd_packed_run *pr,
                                    const cd_scan_hook *hook) {
  camdelta_status st = CAMDELTA_OK;
  const size_t B = args->B, H = args->H, D = args->D, F = args->F, S = args->S;
  const int reverse = args->reverse != 0, recompute = saved == NULL;
  const int need_u = recompute || (hook && hook->want_u); /* U_f: the state chain's, or the hook's */
  /* A_f as the chunkwise forward computed it, kept in the saved object: no second A gram */
  const int reuse_a = saved && saved->has_a && !need_u;
  const int has_init = args->init_state.mem != NULL, has_gfinal = args->grad_final_state.mem != NULL;
  const int has_dinit = args->dinit_state.mem != NULL;

  /* Build everything before enqueuing anything: the context's plan (built on the first call of its class); packed
   * clips build their own (the kernels' packed variant, not kept). */
  cd_plan_entry *pe = NULL;
  bwd_plan *own = NULL;
  if (pr) {
    const size_t offs[6] = {args->q.offset,    args->k.offset,  args->v.offset, args->beta.offset,
                            args->grad_out.offset, args->dq.offset};
    const size_t offs2[4] = {args->dk.offset, args->dv.offset, 0, 0};
    const int vec = cd_tc_vec_ok(pr->vec ? 4 : 1, offs, 6) && cd_tc_vec_ok(4, offs2, 4);
    if ((st = bwd_build_opts(ctx, args, vec, cd_packed_opts(pr), &own))) return st;
  } else if ((st = plan_backward(ctx, args, &pe)))
    return st;
  const bwd_plan *pl = pe ? pe->plan : own;
  const sb_config cfg = pl->cfg;
  const sb_kernels k = pl->k;
  const cd_tc_set tc = pl->tc;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    fprintf(stderr, "camdelta scan backward%s: grams W=%zu, frames W=%zu tokens=%zu%s: %s\n",
            pr ? " (packed clips, native)" : "", (D / cfg.rpt) * (D / cfg.rpt), cfg.tl * (D / cfg.dpt),
            cfg.tl * cfg.tpt, pl->overridden ? " (tiles overridden)" : "", pl->opts);
    if (tc.on)
      fprintf(stderr, "camdelta scan backward: tensor cores (%s): grams %s, dq %s\n", tc.split ? "exact" : "tf32",
              tc.gopts, tc.aopts);
  }
  const size_t ts = tc.on ? cd_tc_tm(&tc.fr) : cfg.tl * cfg.tpt, ntiles = (S + ts - 1) / ts;
  const size_t BH = pr ? pr->clips * H : B * H, BHF = B * H * F, sbytes = BHF * D * D * sizeof(float);
  /* Under the driver's loop budget (cd_loop_budget) the grams sum a frame's tokens over several launches and the
   * chains run in launches of as many steps as fit, x carried through a scratch buffer. */
  const size_t chain_steps = (recompute ? F : 0) + F; /* at least every chain's */
  size_t g_tokens = SIZE_MAX, c_per = chain_steps;
  const size_t budget = cd_loop_budget(ctx);
  if (budget) {
    size_t gf, gc, cf, cs;
    cd_sbwd_loop_count(D, &cfg, &gf, &gc, &cf, &cs);
    if (!tc.on) g_tokens = gf + gc <= budget ? (budget - gf) / gc * cfg.tsg : 0;
    c_per = cf + cs <= budget ? (budget - cf) / cs : 0;
    if (!g_tokens || !c_per)
      st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); the %s at D=%zu needs %zu", OP, budget, !g_tokens ? "grams kernel" : "chain", D,
                   !g_tokens ? gf + gc : cf + cs);
  }
  cl_mem scratch[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL}; /* A W G U Z part carry */
  const size_t sizes[7] = {reuse_a ? 0 : sbytes, sbytes, sbytes, need_u ? sbytes : 0, recompute ? sbytes : 0,
                           BHF * ntiles * sizeof(float), c_per < chain_steps ? BH * D * D * sizeof(float) : 0};
  for (int i = 0; i < 7 && !st; i++)
    if (sizes[i]) st = cd_alloc(ctx, sizes[i], &scratch[i]);
  if (st) {
    for (int i = 0; i < 7; i++)
      if (scratch[i]) clReleaseMemObject(scratch[i]);
    if (pe) cd_plan_release(ctx, pe);
    else bwd_destroy(own);
    return st;
  }
  const camdelta_buffer bA = {reuse_a ? saved->a_mat : scratch[0], 0}, bW = {scratch[1], 0}, bG = {scratch[2], 0};
  const camdelta_buffer bU = need_u ? (camdelta_buffer){scratch[3], 0} : bA;
  const camdelta_buffer bstates =
      recompute ? (camdelta_buffer){scratch[4], 0} : (camdelta_buffer){saved->state_post, 0};
  const camdelta_buffer bpart = {scratch[5], 0};
  /* absent optional tensors: a valid buffer that is never read or written */
  const camdelta_buffer binit = has_init ? args->init_state : bA;
  const camdelta_buffer bgf = has_gfinal ? args->grad_final_state : bA;
  const camdelta_buffer bdinit = has_dinit ? args->dinit_state : bG;

  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);

  /* 1. grams */
  if (tc.on) {
    const unsigned nc = (unsigned)((D + cd_tc_tn(&tc.g) - 1) / cd_tc_tn(&tc.g));
    const unsigned nr = (unsigned)((D + cd_tc_tm(&tc.g) - 1) / cd_tc_tm(&tc.g));
    for (int pass = 0; pass < (reuse_a ? 1 : 2) && !st; pass++) {
      /* pass 0: W = Qᵀ·dO; pass 1 (unless the forward's A_f is kept): A = d·(I − Kᵀ·β·K) and, when recomputing,
       * U = Kᵀ·β·V */
      const unsigned n1 = pass == 1 && need_u ? nc : 0;
      cd_args a = {tc.gram, 0, CL_SUCCESS};
      cd_arg_buf(&a, pass ? args->k : args->q);
      cd_arg_buf(&a, pass ? args->k : args->grad_out);
      cd_arg_buf(&a, pass ? args->v : args->grad_out);
      cd_arg_buf(&a, args->beta);
      cd_arg_buf(&a, args->decay);
      cd_arg_buf(&a, pass ? bA : bW);
      cd_arg_buf(&a, pass ? bU : bW);
      cd_arg_u64(&a, N);
      cd_arg_u32(&a, (uint32_t)S);
      cd_arg_u32(&a, (uint32_t)F);
      cd_arg_u32(&a, nc);
      cd_arg_u32(&a, n1);
      cd_arg_i32(&a, pass);
      cd_arg_i32(&a, pass);
      if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
      if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_gram_tc: setting arguments");
      const size_t w = cd_tc_wg(&tc.g), lws[2] = {w, 1}, gws[2] = {w * nr * (nc + n1), BHF};
      if (!st) st = cd_enqueue(ctx, tc.gram, 2, gws, lws, &l, pass ? "cd_gram_tc (A, U)" : "cd_gram_tc (W)");
    }
  } else {
    const uint32_t modes = need_u ? 3 : reuse_a ? 1 : 2; /* W; A; U */
    for (size_t s0 = 0; (s0 < S || !s0) && !st; s0 += g_tokens) { /* S: the longest frame where clips are packed */
      const int first = s0 == 0, last = g_tokens >= S - s0;
      cd_args a = {k.grams, 0, CL_SUCCESS};
      cd_arg_buf(&a, args->q);
      cd_arg_buf(&a, args->k);
      cd_arg_buf(&a, args->v);
      cd_arg_buf(&a, args->grad_out);
      cd_arg_buf(&a, args->beta);
      cd_arg_buf(&a, args->decay);
      cd_arg_buf(&a, bW);
      cd_arg_buf(&a, bA);
      cd_arg_buf(&a, bU);
      cd_arg_u64(&a, N);
      cd_arg_u32(&a, (uint32_t)S);
      cd_arg_u32(&a, (uint32_t)F);
      cd_arg_u32(&a, modes);
      cd_arg_u32(&a, (uint32_t)s0);
      cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(s0 + g_tokens));
      cd_arg_u32(&a, (first ? 0u : 1u) | (last ? 0u : 2u));
      if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
      if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_bwd_grams: setting arguments");
      const size_t lws = (D / cfg.rpt) * (D / cfg.rpt), gws = BHF * modes * lws;
      if (!st) st = cd_enqueue(ctx, k.grams, 1, &gws, &lws, &l, "cd_scan_bwd_grams");
      if (last) break;
    }
  }
  if (!st && hook) st = hook->fn(hook->user, bA.mem, need_u ? bU.mem : NULL, bW.mem); /* scan_hook.h */
  /* 2. chain */
  for (size_t u0 = 0; u0 < chain_steps && !st; u0 += c_per) {
    const int last = c_per >= chain_steps - u0;
    cd_args a = {k.chain, 0, CL_SUCCESS};
    cd_arg_buf(&a, bA);
    cd_arg_buf(&a, bW);
    cd_arg_buf(&a, bU);
    cd_arg_buf(&a, recompute ? bstates : bG);
    cd_arg_buf(&a, binit);
    cd_arg_buf(&a, bgf);
    cd_arg_buf(&a, bG);
    cd_arg_buf(&a, bdinit);
    cd_arg_u32(&a, (uint32_t)F);
    cd_arg_i32(&a, reverse);
    cd_arg_i32(&a, recompute);
    cd_arg_i32(&a, has_init);
    cd_arg_i32(&a, has_gfinal);
    cd_arg_i32(&a, has_dinit);
    cd_arg_u32(&a, (uint32_t)u0);
    cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(u0 + c_per));
    cd_arg_mem(&a, scratch[6] ? scratch[6] : bA.mem); /* the carry (a launch that leaves no steps never uses it) */
    if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_bwd_chain: setting arguments");
    const size_t lws = D / cfg.cr, gws = BH * (D / cfg.cb) * lws;
    if (!st) st = cd_enqueue(ctx, k.chain, 1, &gws, &lws, &l, "cd_scan_bwd_chain");
  }
  /* 3. frames: the tensor-core kernel takes the FMA kernel's arguments less grad_out and dq (dq has its own
   * apply launch on that path) */
  if (!st) {
    const char *name = tc.on ? "cd_frames_tc" : "cd_scan_bwd_frames";
    cd_args a = {tc.on ? tc.frames : k.frames, 0, CL_SUCCESS};
    cd_arg_buf(&a, args->k);
    cd_arg_buf(&a, args->v);
    cd_arg_buf(&a, args->beta);
    cd_arg_buf(&a, args->decay);
    if (!tc.on) cd_arg_buf(&a, args->grad_out);
    cd_arg_buf(&a, bstates);
    cd_arg_buf(&a, binit);
    cd_arg_buf(&a, bG);
    if (!tc.on) cd_arg_buf(&a, args->dq);
    cd_arg_buf(&a, args->dk);
    cd_arg_buf(&a, args->dv);
    cd_arg_buf(&a, args->dbeta);
    cd_arg_buf(&a, bpart);
    cd_arg_u64(&a, N);
    cd_arg_u32(&a, (uint32_t)S);
    cd_arg_u32(&a, (uint32_t)F);
    cd_arg_u32(&a, (uint32_t)ntiles);
    cd_arg_i32(&a, reverse);
    cd_arg_i32(&a, has_init);
    if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
    if (a.err != CL_SUCCESS)
      st = cd_cl_fail(a.err, tc.on ? "cd_frames_tc: setting arguments" : "cd_scan_bwd_frames: setting arguments");
    const size_t w = tc.on ? cd_tc_wg(&tc.fr) : cfg.tl * (D / cfg.dpt);
    const size_t lws[2] = {w, 1}, gws[2] = {tc.on ? w * ntiles : BHF * ntiles * w, tc.on ? BHF : 1};
    if (!st) st = cd_enqueue(ctx, a.kernel, 2, gws, lws, &l, name);
  }
  /* 3b. with tensor cores, dq apart from the frames kernel: dq[k][s] = Σ_v M[k][v]·dO[v][s] */
  if (!st && tc.on) {
    const unsigned ns = (unsigned)((S + cd_tc_tn(&tc.a) - 1) / cd_tc_tn(&tc.a));
    const unsigned nr = (unsigned)((D + cd_tc_tm(&tc.a) - 1) / cd_tc_tm(&tc.a));
    cd_args a = {tc.apply, 0, CL_SUCCESS};
    cd_arg_buf(&a, args->grad_out);
    cd_arg_buf(&a, bstates);
    cd_arg_buf(&a, binit);
    cd_arg_buf(&a, args->dq);
    cd_arg_u64(&a, N);
    cd_arg_u32(&a, (uint32_t)S);
    cd_arg_u32(&a, (uint32_t)F);
    cd_arg_u32(&a, nr);
    cd_arg_i32(&a, 0);
    cd_arg_i32(&a, reverse);
    cd_arg_i32(&a, has_init);
    if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_apply_tc: setting arguments");
    const size_t w = cd_tc_wg(&tc.a), lws[2] = {w, 1}, gws[2] = {w * nr * ns, BHF};
    if (!st) st = cd_enqueue(ctx, tc.apply, 2, gws, lws, &l, "cd_apply_tc (dq)");
  }
  /* 4. ddecay */
  if (!st) {
    cd_args a = {k.ddecay, 0, CL_SUCCESS};
    cd_arg_buf(&a, bstates);
    cd_arg_buf(&a, binit);
    cd_arg_buf(&a, bG);
    cd_arg_buf(&a, bpart);
    cd_arg_buf(&a, args->ddecay);
    cd_arg_u32(&a, (uint32_t)F);
    cd_arg_u32(&a, (uint32_t)ntiles);
    cd_arg_i32(&a, reverse);
    cd_arg_i32(&a, has_init);
    if (pr) cd_arg_mem(&a, pr->pk), cd_arg_u32(&a, (uint32_t)H);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_bwd_ddecay: setting arguments");
    const size_t lws = cfg.rl, gws = BHF * lws;
    if (!st) st = cd_enqueue(ctx, k.ddecay, 1, &gws, &lws, &l, "cd_scan_bwd_ddecay");
  }
  /* Released buffers live on until the enqueued kernels that use them have finished. */
  for (int i = 0; i < 7; i++)
    if (scratch[i]) clReleaseMemObject(scratch[i]);
  if (pe) cd_plan_release(ctx, pe);
  else bwd_destroy(own);
  return cd_launch_end(ctx, &l, st);
}

camdelta_status cd_scan_backward_native(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                        const cd_packed_run *pr, const camdelta_scan_saved *saved) {
  return run_backward(ctx, args, saved, pr->N, pr, NULL);
}

camdelta_status cd_scan_bwd_tiles_for(camdelta_context *ctx, size_t D, int skip_dq, cd_scan_bwd_tiles *t) {
  sb_config cfg;
  sb_kernels k;
  char opts[256];
  int overridden;
  memset(&cfg, 0, sizeof cfg);
  camdelta_status st = build_kernels(ctx, D, skip_dq, "", &cfg, &k, opts, &overridden);
  if (st) return st;
  release_kernels(&k);
  snprintf(t->opts, sizeof t->opts, "%s", opts);
  t->grams_wg = (D / cfg.rpt) * (D / cfg.rpt), t->frames_wg = cfg.tl * (D / cfg.dpt);
  t->frames_tokens = cfg.tl * cfg.tpt, t->chain_cb = cfg.cb, t->chain_wg = D / cfg.cr, t->rl = cfg.rl;
  t->grams_tsg = cfg.tsg;
  cd_sbwd_loop_count(D, &cfg, &t->loops[0], &t->loops[1], &t->loops[2], &t->loops[3]);
  return CAMDELTA_OK;
}
