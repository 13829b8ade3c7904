/* The scan's phases as an API (include/camdelta_phases.h, explicitly unstable): the forward and the backward split
 * after their gram, the same compositions as camdelta_scan_forward / camdelta_scan_backward (compose.h) with the
 * per-frame matrices in a camdelta_scan_frames object instead of the plan's workspace, and the state summaries from
 * those matrices. Each half checks what it reads, acquires the plan (the rest finds the gram's: the same request,
 * its algorithm recorded) and enqueues its own launches. */
#include <stdlib.h>
#include <string.h>

#include "compose.h"

camdelta_status camdelta_scan_frames_create(camdelta_context *ctx, camdelta_scan_frames **out) {
  cd_clear_error();
  if (!ctx || !out)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_scan_frames_create: '%s' is NULL", ctx ? "out" : "ctx");
  *out = calloc(1, sizeof **out);
  if (!*out) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_scan_frames_create: out of host memory");
  (*out)->ctx = ctx;
  return CAMDELTA_OK;
}

static void drop_saved_a(camdelta_scan_frames *fr) {
  if (fr->a_saved) clReleaseMemObject(fr->a_saved);
  fr->a_saved = NULL;
}

void camdelta_scan_frames_destroy(camdelta_scan_frames *frames) {
  if (!frames) return;
  for (int i = 0; i < 3; i++)
    if (frames->mem[i]) clReleaseMemObject(frames->mem[i]);
  drop_saved_a(frames);
  free(frames);
}

/* Slot i with at least `bytes`. */
static camdelta_status slot(camdelta_scan_frames *fr, int i, size_t bytes, camdelta_buffer *out) {
  const camdelta_status st = cd_ensure_buffer(fr->ctx, &fr->mem[i], &fr->bytes[i], bytes);
  *out = (camdelta_buffer){fr->mem[i], 0};
  return st;
}

/* The frames argument of a call on ctx. */
static camdelta_status check_frames(const char *op, const camdelta_context *ctx, const camdelta_scan_frames *fr) {
  if (!fr) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' is NULL", op);
  if (fr->ctx != ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' was created for another context", op);
  return CAMDELTA_OK;
}

/* A rest half's frames: a gram of this direction (backward or forward) of the same call (shape, direction,
 * precision, saved object). */
static camdelta_status check_same(const char *op, const camdelta_scan_frames *fr, int backward, size_t B, size_t H,
                                  size_t D, size_t F, size_t S, int reverse, camdelta_precision prec,
                                  const camdelta_scan_saved *saved) {
  if (!fr->valid || fr->backward != backward)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' holds no %s gram (call camdelta_scan_%s_gram first)",
                   op, backward ? "backward" : "forward", backward ? "backward" : "forward");
  if (fr->B != B || fr->H != H || fr->D != D || fr->F != F || fr->S != S || (fr->reverse != 0) != (reverse != 0) ||
      fr->prec != prec)
    return cd_fail(CAMDELTA_ERROR_SHAPE,
                   "%s: 'frames' holds the gram of B=%zu H=%zu D=%zu F=%zu S=%zu (%s, %s), this call has B=%zu H=%zu "
                   "D=%zu F=%zu S=%zu (%s, %s)",
                   op, fr->B, fr->H, fr->D, fr->F, fr->S, fr->reverse ? "reverse" : "causal",
                   camdelta_precision_name(fr->prec), B, H, D, F, S, reverse ? "reverse" : "causal",
                   camdelta_precision_name(prec));
  if (fr->saved != saved)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the gram of 'frames' ran with %s saved object", op,
                   fr->saved ? "another" : "no");
  return CAMDELTA_OK;
}

static void record(camdelta_scan_frames *fr, int backward, size_t B, size_t H, size_t D, size_t F, size_t S,
                   int reverse, camdelta_precision prec, camdelta_scan_algorithm alg,
                   const camdelta_scan_saved *saved) {
  fr->valid = 1, fr->backward = backward;
  fr->B = B, fr->H = H, fr->D = D, fr->F = F, fr->S = S;
  fr->reverse = reverse != 0, fr->prec = prec, fr->alg = alg, fr->saved = saved;
}

#define NB(f) {#f, a->f}

/* --------------------------------------------------------------------------------------------- forward */

static camdelta_status forward_prologue(const char *op, camdelta_context *ctx, const camdelta_scan_args *a,
                                        const camdelta_scan_saved *saved, const camdelta_scan_frames *fr) {
  cd_clear_error();
  camdelta_status st = CAMDELTA_OK;
  if (!a) st = cd_prologue(op, ctx, a, NULL, 0, NULL, NULL, 0);
  else {
    const cd_named_buffer b[] = {NB(q),   NB(k),          NB(v),          NB(beta), NB(decay),
                                 NB(out), NB(init_state), NB(final_state)};
    st = cd_prologue(op, ctx, a, saved ? saved->ctx : NULL, saved != NULL, a->profile, b, sizeof b / sizeof b[0]);
  }
  if (!st) st = check_frames(op, ctx, fr);
  if (!st) st = cd_forward_check(op, a);
  return st;
}

camdelta_status camdelta_scan_forward_gram(camdelta_context *ctx, const camdelta_scan_args *args,
                                           camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  static const char op[] = "camdelta_scan_forward_gram";
  camdelta_status st = forward_prologue(op, ctx, args, saved, frames);
  if (st) return st;
  cd_fwd_request r;
  cd_plan_entry *e;
  if ((st = cd_forward_request(ctx, args, &r)) || (st = cd_forward_acquire(ctx, &r, &e))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(args->B, args->H, args->D, args->F, args->S);
  const size_t bytes = geo.BHF * geo.D * geo.D * sizeof(float);
  frames->valid = 0, frames->has[CD_FR_A] = frames->has[CD_FR_U] = frames->has[CD_FR_W] = 0;
  drop_saved_a(frames);
  if (args->used) *args->used = r.alg;
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  if (r.alg == CAMDELTA_SCAN_CHUNKWISE) {
    camdelta_buffer A = {NULL, 0}, U;
    if (saved) { /* A_f into the saved object, which no longer holds a forward's states */
      saved->valid = 0, saved->has_a = 0;
      st = cd_ensure_buffer(ctx, &saved->a_mat, &saved->a_bytes, bytes);
    } else
      st = slot(frames, CD_FR_A, bytes, &A);
    if (!st) st = slot(frames, CD_FR_U, bytes, &U);
    if (!st) st = cd_forward_gram(ctx, e, &geo, args, saved, A, U, &l);
    if (!st && saved) clRetainMemObject(frames->a_saved = saved->a_mat);
    frames->has[CD_FR_A] = frames->has[CD_FR_U] = !st;
  }
  cd_plan_release(ctx, e);
  st = cd_launch_end(ctx, &l, st);
  if (!st) record(frames, 0, args->B, args->H, args->D, args->F, args->S, args->reverse, args->precision, r.alg, saved);
  return st;
}

camdelta_status camdelta_scan_forward_rest(camdelta_context *ctx, const camdelta_scan_args *args,
                                           camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  static const char op[] = "camdelta_scan_forward_rest";
  camdelta_status st = forward_prologue(op, ctx, args, saved, frames);
  if (!st)
    st = check_same(op, frames, 0, args->B, args->H, args->D, args->F, args->S, args->reverse, args->precision,
                    saved);
  if (!st && saved && frames->alg == CAMDELTA_SCAN_CHUNKWISE && saved->a_mat != frames->a_saved)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' no longer holds the gram's A_f", op);
  if (st) return st;
  cd_fwd_request r;
  camdelta_scan_args a = *args;
  a.algorithm = frames->alg; /* the gram's decision */
  cd_plan_entry *e;
  if ((st = cd_forward_request(ctx, &a, &r)) || (st = cd_forward_acquire(ctx, &r, &e))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(args->B, args->H, args->D, args->F, args->S);
  if (args->used) *args->used = r.alg;
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  if (saved && !(st = cd_saved_reserve(ctx, saved, geo.BHF * geo.D * geo.D * sizeof(float)))) saved->valid = 0;
  const camdelta_buffer A = {frames->mem[CD_FR_A], 0}, U = {frames->mem[CD_FR_U], 0};
  if (!st) st = cd_forward_rest(ctx, e, &geo, args, saved, A, U, &l);
  cd_plan_release(ctx, e);
  st = cd_launch_end(ctx, &l, st);
  if (saved && !st) {
    saved->B = args->B, saved->H = args->H, saved->D = args->D, saved->F = args->F, saved->S = args->S;
    saved->reverse = args->reverse != 0;
    saved->has_init = args->init_state.mem != NULL;
    saved->has_a = r.alg == CAMDELTA_SCAN_CHUNKWISE;
    saved->valid = 1;
  }
  return st;
}

/* -------------------------------------------------------------------------------------------- backward */

static camdelta_status backward_prologue(const char *op, camdelta_context *ctx, const camdelta_scan_backward_args *a,
                                         const camdelta_scan_saved *saved, const camdelta_scan_frames *fr) {
  cd_clear_error();
  camdelta_status st = CAMDELTA_OK;
  if (!a) st = cd_prologue(op, ctx, a, NULL, 0, NULL, NULL, 0);
  else {
    const cd_named_buffer b[] = {NB(q),  NB(k),  NB(v),  NB(beta),  NB(decay),  NB(init_state), NB(grad_out),
                                 NB(grad_final_state), NB(dq), NB(dk), NB(dv), NB(dbeta), NB(ddecay),
                                 NB(dinit_state)};
    st = cd_prologue(op, ctx, a, saved ? saved->ctx : NULL, saved != NULL, a->profile, b, sizeof b / sizeof b[0]);
  }
  if (!st) st = check_frames(op, ctx, fr);
  if (!st) st = cd_backward_check(op, a, saved);
  return st;
}

camdelta_status camdelta_scan_backward_gram(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                            const camdelta_scan_saved *saved, int want_u,
                                            camdelta_scan_frames *frames) {
  static const char op[] = "camdelta_scan_backward_gram";
  camdelta_status st = backward_prologue(op, ctx, args, saved, frames);
  if (st) return st;
  const cd_bwd_request r = cd_backward_request(args);
  cd_plan_entry *e;
  if ((st = cd_backward_acquire(ctx, &r, &e))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(args->B, args->H, args->D, args->F, args->S);
  const size_t bytes = geo.BHF * geo.D * geo.D * sizeof(float);
  frames->valid = 0, frames->has[CD_FR_A] = frames->has[CD_FR_U] = frames->has[CD_FR_W] = 0;
  drop_saved_a(frames);
  /* U_f for the state chain (no saved states) or the caller's summary E; A_f the forward's where it is kept */
  const int need_u = !saved || want_u, reuse_a = saved && saved->has_a && !need_u;
  camdelta_buffer A = {NULL, 0}, U = {NULL, 0}, W;
  st = reuse_a ? CAMDELTA_OK : slot(frames, CD_FR_A, bytes, &A);
  if (!st) st = slot(frames, CD_FR_W, bytes, &W);
  if (!st && need_u) st = slot(frames, CD_FR_U, bytes, &U);
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  if (!st) st = cd_backward_gram(ctx, e, &geo, args, A, reuse_a, U, need_u, W, &l);
  if (!st && reuse_a) clRetainMemObject(frames->a_saved = saved->a_mat);
  cd_plan_release(ctx, e);
  st = cd_launch_end(ctx, &l, st);
  if (!st) {
    frames->has[CD_FR_A] = frames->has[CD_FR_W] = 1, frames->has[CD_FR_U] = need_u;
    record(frames, 1, args->B, args->H, args->D, args->F, args->S, args->reverse, args->precision,
           CAMDELTA_SCAN_CHUNKWISE, saved);
  }
  return st;
}

camdelta_status camdelta_scan_backward_rest(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                            const camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  static const char op[] = "camdelta_scan_backward_rest";
  camdelta_status st = backward_prologue(op, ctx, args, saved, frames);
  if (!st)
    st = check_same(op, frames, 1, args->B, args->H, args->D, args->F, args->S, args->reverse, args->precision,
                    saved);
  if (!st && frames->a_saved && saved->a_mat != frames->a_saved)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' no longer holds the A_f the gram read", op);
  if (st) return st;
  const cd_bwd_request r = cd_backward_request(args);
  cd_plan_entry *e;
  if ((st = cd_backward_acquire(ctx, &r, &e))) return st;
  const cd_scan_geo geo = cd_scan_geo_fixed(args->B, args->H, args->D, args->F, args->S);
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  const camdelta_buffer A = {frames->a_saved ? frames->a_saved : frames->mem[CD_FR_A], 0};
  const camdelta_buffer U = {frames->has[CD_FR_U] ? frames->mem[CD_FR_U] : NULL, 0}, W = {frames->mem[CD_FR_W], 0};
  const camdelta_buffer states = {saved ? saved->state_post : NULL, 0};
  st = cd_backward_rest(ctx, e, &geo, args, states, A, U, W, &l);
  cd_plan_release(ctx, e);
  return cd_launch_end(ctx, &l, st);
}

#undef NB

/* --------------------------------------------------------------------------------------------- summary */

camdelta_status camdelta_scan_frames_summary(camdelta_context *ctx, const camdelta_scan_frames *frames,
                                             const camdelta_frames_summary_args *a) {
  static const char op[] = "camdelta_scan_frames_summary";
  cd_clear_error();
  camdelta_status st = CAMDELTA_OK;
  if (!a) st = cd_prologue(op, ctx, a, NULL, 0, NULL, NULL, 0);
  else {
    const cd_named_buffer b[] = {{"init", a->init}, {"grad_final", a->grad_final}, {"T", a->T}, {"E", a->E},
                                 {"G", a->G}};
    st = cd_prologue(op, ctx, a, NULL, 0, a->profile, b, sizeof b / sizeof b[0]);
  }
  if (!st) st = check_frames(op, ctx, frames);
  if (st) return st;
  const camdelta_scan_frames *fr = frames;
  if (!fr->valid || ((a->T.mem || a->E.mem || a->G.mem) && !fr->has[CD_FR_A]))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' holds no per-frame matrices (%s)", op,
                   fr->valid ? "the sequential algorithm has no gram: camdelta_scan_summary computes its own"
                             : "no gram yet");
  if (a->E.mem && !fr->has[CD_FR_U])
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'E' needs U_f, which the gram did not compute (want_u)", op);
  if (a->G.mem && !fr->has[CD_FR_W])
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'G' needs W_f, which only a backward's gram computes", op);
  const size_t BH = fr->B * fr->H, ns = BH * fr->D * fr->D;
  if ((st = cd_check_buffer(op, "init", a->init, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "grad_final", a->grad_final, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "T", a->T, ns, 4, 1)) || (st = cd_check_buffer(op, "E", a->E, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "G", a->G, ns, 4, 1)))
    return st;
  const cd_tensor_arg outs[3] = {{"T", a->T, ns, 4}, {"E", a->E, ns, 4}, {"G", a->G, ns, 4}};
  const cd_tensor_arg ins[2] = {{"init", a->init, ns, 4}, {"grad_final", a->grad_final, ns, 4}};
  if ((st = cd_check_no_overlap(op, outs, 3, ins, 2))) return st;
  if (!a->T.mem && !a->E.mem && !a->G.mem) return CAMDELTA_OK;
  const cl_mem A = fr->a_saved ? fr->a_saved : fr->mem[CD_FR_A];
  return cd_summary_from_frames(ctx, BH, fr->D, fr->F, fr->reverse, A, fr->mem[CD_FR_U], fr->mem[CD_FR_W], a->init,
                                a->grad_final, a->T, a->E, a->G, a->profile);
}
