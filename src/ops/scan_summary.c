/* State summaries (SPEC section 9, include/camdelta_summary.h) on the device, with cl/scan_summary.cl:
 *
 *   1. grams  (parallel over b, h, f): A_f = decay_f·(I − K_fᵀβ_fK_f), and U_f = K_fᵀβ_fV_f (forward E) or
 *             W_f = Q_fᵀ·dO_f (gradient G), each (B, H, F, D, D) scratch
 *   2. chain  one batched D x D launch per frame (parallel over b, h and 32 x 32 tiles), in the frame order of
 *             the summary:
 *               T  causal X ← A_f·X for f = 0 … F−1, reverse for f = F−1 … 0, from X = I
 *               E  causal X ← A_f·X + U_f for f = 0 … F−1, reverse for f = F−1 … 0, from X = 0 (or init_state)
 *               G  causal X ← A_f·(X + W_f) for f = F−1 … 0, from X = 0 (or grad_final_state)
 *                  reverse X ← A_f·(X + W_{f−1}) for f = 0 … F−1 (W_{−1} = 0), then G = X + W_{F−1}
 *             (A_f is symmetric, so A_fᵀ = A_f in the gradient chains.) Steps that would multiply a zero state are
 *             skipped; the chain ping-pongs between two (B, H, D, D) scratch buffers and its last step writes the
 *             caller's output.
 * Everything is f32 with fixed orders (bit-identical run to run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_summary.h"
#include "internal.h"
#include "scan_hook.h"

#define SM_TILE 32

/* A D x D matrix per (b, h): element offset and stride between consecutive (b, h); mem NULL = absent. */
typedef struct sm_mat {
  cl_mem mem;
  size_t off, stride;
} sm_mat;

static const sm_mat SM_NONE = {NULL, 0, 0};

typedef struct sm_job {
  camdelta_context *ctx;
  cl_kernel gram, apply;
  size_t BH, D, F, S, N;
  cd_launch l;
} sm_job;

static camdelta_status sm_build(camdelta_context *ctx, size_t D, sm_job *j) {
  char opts[64];
  snprintf(opts, sizeof opts, "-DCD_D=%zu", D);
  j->gram = j->apply = NULL;
  camdelta_status st = cd_kernel(ctx, "scan_summary.cl", opts, "cd_summary_gram", &j->gram);
  if (!st) st = cd_kernel(ctx, "scan_summary.cl", opts, "cd_summary_apply", &j->apply);
  return st;
}

static void sm_release(sm_job *j) {
  if (j->gram) clReleaseKernel(j->gram);
  if (j->apply) clReleaseKernel(j->apply);
  j->gram = j->apply = NULL;
}

static size_t sm_tiles(size_t D) { return (D + SM_TILE - 1) / SM_TILE; }

/* out_f = g_f·(diag·I + sgn·X_fᵀ·diag(w_f)·Y_f) for every (b, h, f) into out (B, H, F, D, D). */
static camdelta_status sm_gram(sm_job *j, camdelta_buffer X, camdelta_buffer Y, camdelta_buffer w, camdelta_buffer g,
                               cl_mem out, int diag, float sgn, const char *what) {
  /* X = Y (the A_f gram): compute the upper triangle of tiles and mirror it */
  const int sym = X.mem == Y.mem && X.offset == Y.offset;
  cd_args a = {j->gram, 0, CL_SUCCESS};
  cd_arg_buf(&a, X);
  cd_arg_buf(&a, Y);
  cd_arg_buf(&a, w);
  cd_arg_buf(&a, g);
  cd_arg_buf(&a, (camdelta_buffer){out, 0});
  cd_arg_u64(&a, j->N);
  cd_arg_u32(&a, (uint32_t)j->S);
  cd_arg_u32(&a, (uint32_t)j->F);
  cd_arg_i32(&a, w.mem != NULL);
  cd_arg_i32(&a, g.mem != NULL);
  cd_arg_i32(&a, diag);
  cd_arg_f32(&a, sgn);
  cd_arg_i32(&a, sym);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_summary_gram: setting arguments");
  const size_t t = sm_tiles(j->D), lws[3] = {8, 8, 1}, gws[3] = {8 * t, 8 * t, j->BH * j->F};
  return cd_enqueue(j->ctx, j->gram, 3, gws, lws, &j->l, what);
}

static void arg_mat(cd_args *a, sm_mat m) {
  cd_arg_mem(a, m.mem);
  cd_arg_u64(a, m.off);
  cd_arg_u64(a, m.stride);
}

/* Y = op(A)·(X + W) + U for every (b, h). */
static camdelta_status sm_apply(sm_job *j, sm_mat A, int trans, sm_mat X, sm_mat W, sm_mat U, sm_mat Y) {
  cd_args a = {j->apply, 0, CL_SUCCESS};
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
  const size_t t = sm_tiles(j->D), lws[3] = {8, 8, 1}, gws[3] = {8 * t, 8 * t, j->BH};
  return cd_enqueue(j->ctx, j->apply, 3, gws, lws, &j->l, "cd_summary_apply");
}

/* One step of a chain: X ← A_a·(X + W_w) + U_u (index −1: absent; a = −1 means the identity). */
typedef struct sm_step {
  long a, w, u;
} sm_step;

/* Runs `n` steps from `init` (mem NULL: zero; `identity`: the identity matrix) into `dst`, with the per-frame
 * matrices in A, W, U ((B, H, F, D, D) scratch). scratch: two (B, H, D, D) buffers. */
static camdelta_status sm_chain(sm_job *j, const sm_step *steps, size_t n, sm_mat init, int identity, cl_mem A,
                                cl_mem W, cl_mem U, cl_mem scratch[2], sm_mat dst) {
  const size_t DD = j->D * j->D, fstride = j->F * DD;
#define SM_FRAME(m, f) ((sm_mat){(m), (size_t)(f) * DD, fstride})
  /* the current state: none (zero), identity, or a matrix */
  sm_mat cur = init;
  int cur_id = identity;
  size_t placed = 0;
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < n && !st; i++) {
    const sm_step s = steps[i];
    sm_mat Am = s.a >= 0 ? SM_FRAME(A, s.a) : SM_NONE;
    sm_mat Wm = s.w >= 0 ? SM_FRAME(W, s.w) : SM_NONE;
    sm_mat Um = s.u >= 0 ? SM_FRAME(U, s.u) : SM_NONE;
    sm_mat X = cur;
    if (cur_id) { /* A·(I + W) + U is not needed by any chain here: the identity only meets A alone */
      X = Am, Am = SM_NONE;
    } else if (!cur.mem && !Wm.mem) {
      if (!Um.mem) continue; /* A·0 = 0 */
      Am = SM_NONE;          /* A·0 + U = U */
    }
    /* only leading steps are skipped, so the last step always writes */
    const int last = i + 1 == n;
    const sm_mat out = last ? dst : (sm_mat){scratch[placed % 2], 0, DD};
    st = sm_apply(j, Am, 0, X, Wm, Um, out);
    cur = out, cur_id = 0;
    placed++;
  }
#undef SM_FRAME
  if (st) return st;
  if (cur.mem != dst.mem || cur.off != dst.off) { /* nothing was written: the result is init (or zero) */
    if (cur_id) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "state summary: empty chain"); /* F >= 1 */
    return sm_apply(j, SM_NONE, 0, cur, SM_NONE, SM_NONE, dst);
  }
  return CAMDELTA_OK;
}

/* The T, E and G chains (each when its output's mem is set) over F frames from the per-frame matrices A, U, W
 * ((B, H, F, D, D); U for E, W for G), E from `init` and G from `gfinal` (mem NULL: zero). steps: room for F + 1;
 * scratch: two (B, H, D, D) buffers. */
static camdelta_status sm_chains(sm_job *j, sm_step *steps, int reverse, cl_mem A, cl_mem U, cl_mem W,
                                 camdelta_buffer init, camdelta_buffer gfinal, camdelta_buffer T, camdelta_buffer E,
                                 camdelta_buffer G, cl_mem scratch[2]) {
  const size_t F = j->F, DD = j->D * j->D;
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < F; i++) {
    const long f = (long)(reverse ? F - 1 - i : i);
    steps[i] = (sm_step){f, -1, -1};
  }
  if (T.mem) st = sm_chain(j, steps, F, SM_NONE, 1, A, NULL, NULL, scratch, (sm_mat){T.mem, T.offset, DD});
  if (!st && E.mem) {
    for (size_t i = 0; i < F; i++) steps[i].u = steps[i].a;
    const sm_mat m0 = init.mem ? (sm_mat){init.mem, init.offset, DD} : SM_NONE;
    st = sm_chain(j, steps, F, m0, 0, A, NULL, U, scratch, (sm_mat){E.mem, E.offset, DD});
  }
  if (!st && G.mem) {
    size_t n = 0;
    if (!reverse) {
      for (size_t i = 0; i < F; i++) steps[n++] = (sm_step){(long)(F - 1 - i), (long)(F - 1 - i), -1};
    } else {
      for (size_t f = 0; f < F; f++) steps[n++] = (sm_step){(long)f, (long)f - 1, -1};
      steps[n++] = (sm_step){-1, (long)F - 1, -1};
    }
    const sm_mat m0 = gfinal.mem ? (sm_mat){gfinal.mem, gfinal.offset, DD} : SM_NONE;
    st = sm_chain(j, steps, n, m0, 0, A, W, NULL, scratch, (sm_mat){G.mem, G.offset, DD});
  }
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

/* A job with its kernels, the profile reset and the launch begun (*j is set even on failure; sm_release and
 * cd_launch_end after). */
static camdelta_status sm_open(camdelta_context *ctx, size_t BH, size_t D, size_t F, size_t S,
                               camdelta_profile *profile, sm_job *j) {
  *j = (sm_job){ctx, NULL, NULL, BH, D, F, S, F * S, {0}};
  camdelta_status st = sm_build(ctx, D, j);
  if (st) return st;
  if (profile) profile->kernel_ms = 0, profile->kernels = 0;
  cd_launch_init(&j->l, profile);
  return CAMDELTA_OK;
}

/* One summary's job (sm_open), room for `n_steps` chain steps, and the scratch mem = {A, U or W (only when
 * `second`), two (B, H, D, D) states}. *j, *steps and mem are set even on failure; sm_end releases them. */
static camdelta_status sm_start(camdelta_context *ctx, const char *op, size_t BH, size_t D, size_t F, size_t S,
                                camdelta_profile *profile, size_t n_steps, int second, sm_job *j, sm_step **steps,
                                cl_mem mem[4]) {
  *steps = NULL;
  for (int i = 0; i < 4; i++) mem[i] = NULL;
  camdelta_status st = sm_open(ctx, BH, D, F, S, profile, j);
  if (st) return st;
  if (!(*steps = cd_malloc_array(n_steps, sizeof **steps)))
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  const size_t frames_bytes = BH * F * D * D * 4, state_bytes = BH * D * D * 4;
  st = cd_alloc(ctx, frames_bytes, &mem[0]);
  if (!st && second) st = cd_alloc(ctx, frames_bytes, &mem[1]);
  if (!st) st = cd_alloc(ctx, state_bytes, &mem[2]);
  if (!st) st = cd_alloc(ctx, state_bytes, &mem[3]);
  return st;
}

static camdelta_status sm_end(sm_job *j, sm_step *steps, cl_mem mem[4], camdelta_status st) {
  free(steps);
  for (int i = 0; i < 4; i++) /* the runtime keeps them alive until the kernels finish */
    if (mem[i]) clReleaseMemObject(mem[i]);
  sm_release(j);
  return cd_launch_end(j->ctx, &j->l, st);
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

  const size_t F = p->F;
  sm_job j;
  sm_step *steps;
  cl_mem mem[4]; /* A, U, two states */
  st = sm_start(ctx, op, p->B * p->H, p->D, F, p->S, p->profile, F + 1, want_e, &j, &steps, mem);
  const camdelta_buffer none = {NULL, 0};
  if (!st) st = sm_gram(&j, p->k, p->k, p->beta, p->decay, mem[0], 1, -1.0f, "cd_summary_gram A");
  if (!st && want_e) st = sm_gram(&j, p->k, p->v, p->beta, none, mem[1], 0, 1.0f, "cd_summary_gram U");
  if (!st)
    st = sm_chains(&j, steps, p->reverse != 0, mem[0], mem[1], NULL, p->init_state, none, p->T, p->E, none, &mem[2]);
  return sm_end(&j, steps, mem, st);
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

  const size_t F = p->F;
  sm_job j;
  sm_step *steps;
  cl_mem mem[4]; /* A, W, two states */
  st = sm_start(ctx, op, p->B * p->H, p->D, F, p->S, p->profile, F + 1, 1, &j, &steps, mem);
  const camdelta_buffer none = {NULL, 0};
  if (!st) st = sm_gram(&j, p->k, p->k, p->beta, p->decay, mem[0], 1, -1.0f, "cd_summary_gram A");
  if (!st) st = sm_gram(&j, p->q, p->grad_out, none, none, mem[1], 0, 1.0f, "cd_summary_gram W");
  if (!st)
    st = sm_chains(&j, steps, p->reverse != 0, mem[0], NULL, mem[1], none, p->grad_final_state, none, none, p->G,
                   &mem[2]);
  return sm_end(&j, steps, mem, st);
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

static sm_mat mat_of(camdelta_buffer b, size_t DD) { return b.mem ? (sm_mat){b.mem, b.offset, DD} : SM_NONE; }

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
  sm_job j;
  st = sm_open(ctx, p->B * p->H, p->D, 1, 1, p->profile, &j);
  const size_t DD = p->D * p->D;
  /* without M_in: M_out = E (T·0 = 0) */
  const sm_mat A = p->M_in.mem ? mat_of(p->T, DD) : SM_NONE;
  if (!st)
    st = sm_apply(&j, A, p->transpose != 0, mat_of(p->M_in, DD), SM_NONE, mat_of(p->E, DD), mat_of(p->M_out, DD));
  sm_release(&j);
  return cd_launch_end(ctx, &j.l, st);
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
  sm_job j;
  st = sm_open(ctx, p->B * p->H, p->D, 1, 1, p->profile, &j);
  const size_t DD = p->D * p->D;
  if (!st && p->T.mem) st = sm_apply(&j, mat_of(p->T2, DD), 0, mat_of(p->T1, DD), SM_NONE, SM_NONE, mat_of(p->T, DD));
  if (!st && p->E.mem) {
    const sm_mat A = p->E1.mem ? mat_of(p->T2, DD) : SM_NONE;
    st = sm_apply(&j, A, 0, mat_of(p->E1, DD), SM_NONE, mat_of(p->E2, DD), mat_of(p->E, DD));
  }
  sm_release(&j);
  return cd_launch_end(ctx, &j.l, st);
}

/* ------------------------------------------------------------------------- from a scan's own frames */

camdelta_status camdelta_summary_sp_from_frames(camdelta_context *ctx, size_t BH, size_t D, size_t F, int reverse, cl_mem A,
                                       cl_mem U, cl_mem W, camdelta_buffer init, camdelta_buffer gfinal,
                                       camdelta_buffer T, camdelta_buffer E, camdelta_buffer G) {
  static const char op[] = "camdelta_summary_sp_from_frames";
  if (!ctx || !A || !BH || !F || (E.mem && !U) || (G.mem && !W))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: missing per-frame matrices or shape", op);
  size_t frames;
  camdelta_status cst = cd_check_head_dim(op, D);
  if (cst) return cst;
  if (!CD_PROD(&frames, BH, F, D, D, sizeof(float)) || F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: BH=%zu F=%zu D=%zu: sizes overflow", op, BH, F, D);
  if (!T.mem && !E.mem && !G.mem) return CAMDELTA_OK;
  sm_job j;
  sm_step *steps = NULL;
  cl_mem mem[4] = {NULL, NULL, NULL, NULL}; /* only the two states */
  camdelta_status st = sm_open(ctx, BH, D, F, 1, NULL, &j);
  if (!st && !(steps = cd_malloc_array(F + 1, sizeof *steps)))
    st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = cd_alloc(ctx, BH * D * D * 4, &mem[2]);
  if (!st) st = cd_alloc(ctx, BH * D * D * 4, &mem[3]);
  if (!st) st = sm_chains(&j, steps, reverse, A, U, W, init, gfinal, T, E, G, &mem[2]);
  return sm_end(&j, steps, mem, st);
}
