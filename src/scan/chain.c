/* The chain unit (units.h): the passes over frames that are serial per chain.
 *   states        cd_scan_phase_b, a work-group per (chain, block of value columns)
 *   states pair   cd_pair_phase_b, the causal and the masked reverse chain in one launch
 *   grads         cd_scan_bwd_chain, a work-group of D / CR items per (chain, block of CB columns), each item
 *                 owning CR rows (CR = 1 unless the compiled kernel allows fewer than D items): the recomputed
 *                 states, then the gradient chain
 *   grads pair    cd_pair_bwd_chain, both directions' gradient chains in one launch
 *   CPU forms     cd_cpu_chain, cd_cpu_pair_chain, cd_cpu_grad_chain, cd_cpu_pair_grad_chain (scan_cpu.cl): the
 *                 same arguments, groups and meaning with one work-item per group (w = 1), the span and carry
 *                 arguments included
 *   summary       cd_summary_apply, one D x D step for every chain per launch, in the frame order of the summary:
 *                   T  causal X ← A_f·X for f = 0 … F−1, reverse for f = F−1 … 0, from X = I
 *                   E  causal X ← A_f·X + U_f for f = 0 … F−1, reverse for f = F−1 … 0, from X = 0 (or init)
 *                   G  causal X ← A_f·(X + W_f) for f = F−1 … 0, from X = 0 (or gfinal)
 *                      reverse X ← A_f·(X + W_{f−1}) for f = 0 … F−1 (W_{−1} = 0), then G = X + W_{F−1}
 *                 (A_f is symmetric, so A_fᵀ = A_f in the gradient chains.) Steps that would multiply a zero state
 *                 are skipped; the chain ping-pongs between two scratch states and its last step writes the output.
 * Under the driver's loop budget (cd_loop_budget) the states, pair and grads chains run ch->per steps per launch,
 * their running state carried through a scratch buffer (the kernels' t0, t1 or u0, u1: this launch's steps;
 * 0xFFFFFFFF marks the last launch). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "scan/units.h"

static unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

camdelta_status cd_chain_build_states(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, int pair,
                                      cd_chain *ch) {
  *ch = (cd_chain){.form = pair ? CD_CHAIN_STATES_PAIR : CD_CHAIN_STATES, .w = c->b_w, .nj = c->b_nj, .cr = 1,
                   .per = SIZE_MAX};
  return cd_kernel(ctx, "scan_chunkwise.cl", opts, pair ? "cd_pair_phase_b" : "cd_scan_phase_b", &ch->k);
}

camdelta_status cd_chain_build_grads(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c, int pair,
                                     cd_chain *ch) {
  *ch = (cd_chain){.form = pair ? CD_CHAIN_GRADS_PAIR : CD_CHAIN_GRADS, .w = (unsigned)(D / c->cr),
                   .nj = (unsigned)(D / c->cb), .cr = (unsigned)c->cr, .per = SIZE_MAX};
  return cd_kernel(ctx, "scan_backward.cl", opts, pair ? "cd_pair_bwd_chain" : "cd_scan_bwd_chain", &ch->k);
}

camdelta_status cd_chain_build_summary(camdelta_context *ctx, size_t D, cd_chain *ch) {
  char opts[32];
  snprintf(opts, sizeof opts, "-DCD_D=%zu", D);
  *ch = (cd_chain){.form = CD_CHAIN_SUMMARY, .w = 64, .cr = 1, .per = SIZE_MAX};
  return cd_kernel(ctx, "scan_summary.cl", opts, "cd_summary_apply", &ch->k);
}

camdelta_status cd_chain_build_cpu(camdelta_context *ctx, const cd_cpu_scan *p, cd_chain_form form,
                                   cd_chain *ch) {
  *ch = (cd_chain){.form = form, .w = 1, .nj = (unsigned)(p->D / p->cb), .cr = 1, .per = SIZE_MAX};
  const cl_kernel k = form == CD_CHAIN_CPU_STATES        ? p->chain
                      : form == CD_CHAIN_CPU_STATES_PAIR ? p->pair_chain
                      : form == CD_CHAIN_CPU_GRADS       ? p->grad_chain
                                                         : p->pair_grad_chain;
  cd_cpu_loops n;
  cd_cpu_loop_count(p, &n);
  camdelta_status st = cd_chain_budget(ctx, ch, n.chain_fixed, n.chain_step, "scan (cpu): the chain");
  if (!st) st = cd_cpu_retain(k, "the CPU chain", &ch->k);
  return st;
}

static int cpu_form(const cd_chain *ch) { return ch->form >= CD_CHAIN_CPU_STATES; }

camdelta_status cd_chain_budget(camdelta_context *ctx, cd_chain *ch, size_t fixed, size_t per_step, const char *what) {
  const size_t budget = cd_loop_budget(ctx);
  ch->per = SIZE_MAX;
  if (!budget) return CAMDELTA_OK;
  if (fixed + per_step > budget)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); one step needs %zu: use a smaller head dim",
                   what, budget, fixed + per_step);
  ch->per = (budget - fixed) / per_step;
  return CAMDELTA_OK;
}

/* A scratch state per chain for the launches of a split walk (NULL where it runs in one launch). */
static camdelta_status carry_alloc(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo, size_t steps,
                                   size_t copies, cl_mem *carry) {
  *carry = NULL;
  if (ch->per >= steps) return CAMDELTA_OK;
  return cd_alloc(ctx, copies * geo->BH * geo->D * geo->D * sizeof(float), carry);
}

void cd_chain_release(cd_chain *ch) {
  if (ch->k) clReleaseKernel(ch->k);
  ch->k = NULL;
  ch->form = CD_CHAIN_NONE;
}

/* One launch's steps of a chain's walk: from t0, to t0 + ch->per or (last) to the walk's end, marked 0xFFFFFFFF;
 * then the scratch `carry` where the kernel takes one (NULL: it does not). */
static void arg_span(cd_args *a, const cd_chain *ch, size_t t0, int last, cl_mem carry) {
  cd_arg_u32(a, (uint32_t)t0);
  cd_arg_u32(a, last ? UINT32_MAX : (uint32_t)(t0 + ch->per));
  if (carry) cd_arg_mem(a, carry);
}

/* Sets a chain kernel's arguments for the launch of steps from t0 (last: to the end) with the scratch `carry`. */
typedef void (*walk_args)(cd_args *a, const cd_chain *ch, const cd_scan_geo *geo, const void *io, size_t t0,
                          int last, cl_mem carry);

/* A chain's walk of `steps` steps: ch->per steps per launch (one launch at least), `copies` running states per
 * chain carried between launches through a scratch buffer; each launch's arguments from `set`, its sizes gws x lws
 * (`dims` dimensions), `what` naming the kernel. */
static camdelta_status walk(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo, size_t steps,
                            size_t copies, walk_args set, const void *io, cl_uint dims, const size_t *gws,
                            const size_t *lws, const char *what, cd_launch *l) {
  char setting[64];
  snprintf(setting, sizeof setting, "%s: setting arguments", what);
  cl_mem carry;
  camdelta_status st = carry_alloc(ctx, ch, geo, steps, copies, &carry);
  for (size_t t0 = 0; (t0 < steps || !t0) && !st; t0 += ch->per) {
    const int last = steps - t0 <= ch->per;
    cd_args a = {ch->k, 0, CL_SUCCESS};
    set(&a, ch, geo, io, t0, last, carry);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, setting);
    if (!st) st = cd_enqueue(ctx, ch->k, dims, gws, lws, l, what);
    if (last) break;
  }
  if (carry) clReleaseMemObject(carry); /* in use until the launches have finished */
  return st;
}

/* ---------------------------------------------------------------------------------------- forward states */

static void states_args(cd_args *a, const cd_chain *ch, const cd_scan_geo *geo, const void *p, size_t t0, int last,
                        cl_mem carry) {
  const cd_chain_states_io *io = p;
  const camdelta_buffer in = t0 ? (camdelta_buffer){carry, 0} : io->init;
  const camdelta_buffer fin = last ? io->final : (camdelta_buffer){carry, 0};
  CD_ARG_BUFS(a, io->A, io->U, io->decay, in, io->post, io->pre, fin);
  cd_arg_u32(a, (uint32_t)geo->F);
  cd_arg_i32(a, io->reverse != 0);
  cd_arg_i32(a, in.mem != NULL);
  cd_arg_i32(a, io->pre.mem != NULL);
  cd_arg_i32(a, io->final.mem != NULL); /* the walk's length; a launch that leaves steps writes fin anyway */
  arg_span(a, ch, t0, last, NULL);
  cd_arg_packed(a, geo);
}

camdelta_status cd_chain_states(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                const cd_chain_states_io *io, cd_launch *l) {
  if (ch->form != CD_CHAIN_STATES && ch->form != CD_CHAIN_CPU_STATES)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no state chain");
  /* the chain's steps (packed clips: at least every clip's); steps may be 0 */
  const size_t steps = geo->pk ? geo->F + 1 : io->reverse ? geo->F - 1 + (io->final.mem != NULL) : geo->F;
  const size_t lws[2] = {ch->w, 1}, gws[2] = {(size_t)ch->w * geo->BH, ch->nj};
  return walk(ctx, ch, geo, steps, 1, states_args, io, 2, gws, lws, cpu_form(ch) ? "cd_cpu_chain" : "cd_scan_phase_b",
              l);
}

static void states_pair_args(cd_args *a, const cd_chain *ch, const cd_scan_geo *geo, const void *p, size_t t0,
                             int last, cl_mem carry) {
  const cd_chain_pair_io *io = p;
  /* each direction's state carried in its own half of the scratch */
  const camdelta_buffer cc = {carry, 0}, cr = {carry, geo->BH * geo->D * geo->D};
  CD_ARG_BUFS(a, io->A, io->U);
  cd_arg_mem(a, io->mask);
  CD_ARG_BUFS(a, t0 ? cc : io->init_c, t0 ? cr : io->init_r, io->post_c, io->post_r, last ? io->final_c : cc,
              last ? io->final_r : cr);
  cd_arg_u32(a, (uint32_t)geo->F);
  cd_arg_u32(a, ch->nj);
  cd_arg_i32(a, t0 || io->init_c.mem != NULL);
  cd_arg_i32(a, t0 || io->init_r.mem != NULL);
  cd_arg_i32(a, io->final_c.mem != NULL);
  cd_arg_i32(a, io->final_r.mem != NULL);
  arg_span(a, ch, t0, last, NULL);
}

camdelta_status cd_chain_states_pair(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                     const cd_chain_pair_io *io, cd_launch *l) {
  if (ch->form != CD_CHAIN_STATES_PAIR && ch->form != CD_CHAIN_CPU_STATES_PAIR)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no pair chain");
  /* either chain's steps at most */
  const size_t lws[2] = {ch->w, 1}, gws[2] = {(size_t)ch->w * geo->BH, 2 * (size_t)ch->nj};
  return walk(ctx, ch, geo, geo->F, 2, states_pair_args, io, 2, gws, lws,
              cpu_form(ch) ? "cd_cpu_pair_chain" : "cd_pair_phase_b", l);
}

/* ------------------------------------------------------------------------------------------- gradients */

static void grads_args(cd_args *a, const cd_chain *ch, const cd_scan_geo *geo, const void *p, size_t u0, int last,
                       cl_mem carry) {
  const cd_chain_grads_io *io = p;
  /* absent optional tensors: a valid buffer that is never read or written */
  const camdelta_buffer init = io->init.mem ? io->init : io->A, gf = io->gfinal.mem ? io->gfinal : io->A;
  const camdelta_buffer dinit = io->dinit.mem ? io->dinit : io->G;
  CD_ARG_BUFS(a, io->A, io->W, io->U.mem ? io->U : io->A, io->recompute ? io->states : io->G, init, gf, io->G,
              dinit);
  cd_arg_u32(a, (uint32_t)geo->F);
  cd_arg_i32(a, io->reverse != 0);
  cd_arg_i32(a, io->recompute != 0);
  cd_arg_i32(a, io->init.mem != NULL);
  cd_arg_i32(a, io->gfinal.mem != NULL);
  cd_arg_i32(a, io->dinit.mem != NULL);
  arg_span(a, ch, u0, last, carry ? carry : io->A.mem); /* the carry (a launch that leaves no steps never uses it) */
  cd_arg_packed(a, geo);
}

camdelta_status cd_chain_grads(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                               const cd_chain_grads_io *io, cd_launch *l) {
  if (ch->form != CD_CHAIN_GRADS && ch->form != CD_CHAIN_CPU_GRADS)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no gradient chain");
  const size_t steps = (io->recompute ? geo->F : 0) + geo->F; /* at least every chain's */
  const size_t lws = ch->w, gws = geo->BH * ch->nj * lws;
  return walk(ctx, ch, geo, steps, 1, grads_args, io, 1, &gws, &lws,
              cpu_form(ch) ? "cd_cpu_grad_chain" : "cd_scan_bwd_chain", l);
}

static void grads_pair_args(cd_args *a, const cd_chain *ch, const cd_scan_geo *geo, const void *p, size_t u0,
                            int last, cl_mem carry) {
  const cd_chain_grads_pair_io *io = p;
  CD_ARG_BUFS(a, io->A, io->W);
  cd_arg_mem(a, io->mask);
  CD_ARG_BUFS(a, io->gfinal_c.mem ? io->gfinal_c : io->A, io->gfinal_r.mem ? io->gfinal_r : io->A, io->G_c, io->G_r,
              io->dinit_c.mem ? io->dinit_c : io->G_c, io->dinit_r.mem ? io->dinit_r : io->G_r);
  cd_arg_u32(a, (uint32_t)geo->F);
  cd_arg_i32(a, io->gfinal_c.mem != NULL);
  cd_arg_i32(a, io->gfinal_r.mem != NULL);
  cd_arg_i32(a, io->dinit_c.mem != NULL);
  cd_arg_i32(a, io->dinit_r.mem != NULL);
  arg_span(a, ch, u0, last, carry ? carry : io->A.mem); /* the carry (a launch that leaves no steps never uses it) */
}

camdelta_status cd_chain_grads_pair(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                    const cd_chain_grads_pair_io *io, cd_launch *l) {
  if (ch->form != CD_CHAIN_GRADS_PAIR && ch->form != CD_CHAIN_CPU_GRADS_PAIR)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no pair gradient chain");
  const size_t lws = ch->w, gws = 2 * geo->BH * ch->nj * lws;
  return walk(ctx, ch, geo, geo->F, 2, grads_pair_args, io, 1, &gws, &lws,
              cpu_form(ch) ? "cd_cpu_pair_grad_chain" : "cd_pair_bwd_chain", l);
}

/* ------------------------------------------------------------------------------------------- summaries */

static const cd_mat NONE = {NULL, 0, 0};

static void arg_mat(cd_args *a, cd_mat m) {
  cd_arg_mem(a, m.mem);
  cd_arg_u64(a, m.off);
  cd_arg_u64(a, m.stride);
}

camdelta_status cd_chain_summary_step(camdelta_context *ctx, const cd_chain *ch, size_t D, size_t BH, cd_mat A,
                                      int trans, cd_mat X, cd_mat W, cd_mat U, cd_mat Y, cd_launch *l) {
  if (ch->form != CD_CHAIN_SUMMARY) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no summary step");
  cd_args a = {ch->k, 0, CL_SUCCESS};
  arg_mat(&a, A);
  arg_mat(&a, X);
  arg_mat(&a, W);
  arg_mat(&a, U);
  arg_mat(&a, Y);
  cd_arg_i32(&a, A.mem != NULL);
  cd_arg_i32(&a, trans);
  cd_arg_i32(&a, X.mem != NULL);
  cd_arg_i32(&a, W.mem != NULL);
  cd_arg_i32(&a, U.mem != NULL);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_summary_apply: setting arguments");
  const size_t t = ceil_div(D, 32), lws[3] = {8, 8, 1}, gws[3] = {8 * t, 8 * t, BH};
  return cd_enqueue(ctx, ch->k, 3, gws, lws, l, "cd_summary_apply");
}

/* One step of a summary chain: X ← A_a·(X + W_w) + U_u (index −1: absent; a = −1: the identity). */
typedef struct step {
  long a, w, u;
} step;

/* Runs `n` steps from `init` (mem NULL: zero; `identity`: the identity matrix) into `dst`, with the per-frame
 * matrices in A, W, U ((BH, F, D, D)). */
static camdelta_status run_chain(camdelta_context *ctx, const cd_chain *ch, size_t D, size_t BH, size_t F,
                                 const step *steps, size_t n, cd_mat init, int identity, cl_mem A, cl_mem W, cl_mem U,
                                 const cl_mem scratch[2], cd_mat dst, cd_launch *l) {
  const size_t DD = D * D, fstride = F * DD;
#define FRAME(m, f) ((cd_mat){(m), (size_t)(f) * DD, fstride})
  /* the current state: none (zero), identity, or a matrix */
  cd_mat cur = init;
  int cur_id = identity;
  size_t placed = 0;
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < n && !st; i++) {
    const step s = steps[i];
    cd_mat Am = s.a >= 0 ? FRAME(A, s.a) : NONE;
    cd_mat Wm = s.w >= 0 ? FRAME(W, s.w) : NONE;
    cd_mat Um = s.u >= 0 ? FRAME(U, s.u) : NONE;
    cd_mat X = cur;
    if (cur_id) { /* A·(I + W) + U is not needed by any chain here: the identity only meets A alone */
      X = Am, Am = NONE;
    } else if (!cur.mem && !Wm.mem) {
      if (!Um.mem) continue; /* A·0 = 0 */
      Am = NONE;             /* A·0 + U = U */
    }
    /* only leading steps are skipped, so the last step always writes */
    const int last = i + 1 == n;
    const cd_mat out = last ? dst : (cd_mat){scratch[placed % 2], 0, DD};
    st = cd_chain_summary_step(ctx, ch, D, BH, Am, 0, X, Wm, Um, out, l);
    cur = out, cur_id = 0;
    placed++;
  }
#undef FRAME
  if (st) return st;
  if (cur.mem != dst.mem || cur.off != dst.off) { /* nothing was written: the result is init (or zero) */
    if (cur_id) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "state summary: empty chain"); /* F >= 1 */
    return cd_chain_summary_step(ctx, ch, D, BH, NONE, 0, cur, NONE, NONE, dst, l);
  }
  return CAMDELTA_OK;
}

camdelta_status cd_chain_summaries(camdelta_context *ctx, const cd_chain *ch, size_t D, size_t BH, size_t F,
                                   const cd_chain_summary_io *io, cd_launch *l) {
  const size_t DD = D * D;
  step *steps = cd_malloc_array(F + 1, sizeof *steps);
  if (!steps) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "state summary: out of host memory");
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < F; i++) {
    const long f = (long)(io->reverse ? F - 1 - i : i);
    steps[i] = (step){f, -1, -1};
  }
  if (io->T.mem)
    st = run_chain(ctx, ch, D, BH, F, steps, F, NONE, 1, io->A, NULL, NULL, io->scratch,
                   (cd_mat){io->T.mem, io->T.offset, DD}, l);
  if (!st && io->E.mem) {
    for (size_t i = 0; i < F; i++) steps[i].u = steps[i].a;
    const cd_mat m0 = io->init.mem ? (cd_mat){io->init.mem, io->init.offset, DD} : NONE;
    st = run_chain(ctx, ch, D, BH, F, steps, F, m0, 0, io->A, NULL, io->U, io->scratch,
                   (cd_mat){io->E.mem, io->E.offset, DD}, l);
  }
  if (!st && io->G.mem) {
    size_t n = 0;
    if (!io->reverse) {
      for (size_t i = 0; i < F; i++) steps[n++] = (step){(long)(F - 1 - i), (long)(F - 1 - i), -1};
    } else {
      for (size_t f = 0; f < F; f++) steps[n++] = (step){(long)f, (long)f - 1, -1};
      steps[n++] = (step){-1, (long)F - 1, -1};
    }
    const cd_mat m0 = io->gfinal.mem ? (cd_mat){io->gfinal.mem, io->gfinal.offset, DD} : NONE;
    st = run_chain(ctx, ch, D, BH, F, steps, n, m0, 0, io->A, io->W, NULL, io->scratch,
                   (cd_mat){io->G.mem, io->G.offset, DD}, l);
  }
  free(steps);
  return st;
}
