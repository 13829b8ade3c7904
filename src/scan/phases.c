/* The scan's phases as an API (include/camdelta_phases.h, explicitly unstable): the forward and the backward split
 * after their gram, the same compositions as camdelta_scan_forward / camdelta_scan_backward (compose.h) with the
 * per-frame matrices in a camdelta_scan_frames object instead of the plan's workspace, and the state summaries from
 * those matrices. Each is an entry of the driver (src/runtime/driver.c) over the same slots as the whole call: the
 * check step checks the frames object too, the plan step acquires the plan (the rest finds the gram's: the same
 * request, its algorithm recorded), the enqueue step enqueues its half. */
#include <stdlib.h>
#include <string.h>

#include "scan/compose.h"

camdelta_status camdelta_scan_frames_create(camdelta_context *ctx, camdelta_scan_frames **out) {
  CD_CREATE_OBJECT("camdelta_scan_frames_create", ctx, out);
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

/* One call of a phase (the steps of src/runtime/driver.c): its objects, and the plan held from the plan step to
 * the end step. */
typedef struct phase_call {
  camdelta_scan_frames *frames;
  camdelta_scan_saved *saved; /* a forward's (the backward's is the call's const saved) */
  int want_u;                 /* camdelta_scan_backward_gram */
  cd_fwd_request r;           /* a forward's request */
  cd_plan_entry *e;
} phase_call;

/* The first check of every phase: the call's frames object, of the call's context. */
static camdelta_status check_frames(const cd_call *c) {
  const camdelta_scan_frames *fr = ((const phase_call *)c->op)->frames;
  const char *op = c->entry->op;
  if (!fr) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' is NULL", op);
  if (fr->ctx != c->ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' was created for another context", op);
  return CAMDELTA_OK;
}

static camdelta_status phase_end(cd_call *c, camdelta_status st) {
  phase_call *s = c->op;
  if (s->e) cd_plan_release(c->ctx, s->e);
  return st;
}

static camdelta_status run(const cd_entry *entry, camdelta_context *ctx, const void *args,
                           const camdelta_scan_saved *saved, phase_call *s) {
  cd_call c = {.entry = entry, .ctx = ctx, .args = args, .saved = saved, .saved_ctx = saved ? saved->ctx : NULL,
               .op = s};
  return cd_run_entry(&c);
}

/* --------------------------------------------------------------------------------------------- forward */

static camdelta_status forward_uses(cd_call *c) {
  const camdelta_status st = check_frames(c);
  return st ? st : cd_forward_uses(c);
}

static camdelta_status forward_gram_plan(cd_call *c) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  camdelta_status st = cd_forward_request(c->ctx, a, &s->r);
  if (!st) st = cd_forward_acquire(c->ctx, &s->r, &s->e);
  if (!st && a->used) *a->used = s->r.alg;
  return st;
}

static camdelta_status forward_gram_enqueue(cd_call *c, cd_launch *l) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  camdelta_scan_frames *fr = s->frames;
  camdelta_scan_saved *saved = s->saved;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  const size_t bytes = geo.BHF * geo.D * geo.D * sizeof(float);
  fr->valid = 0, fr->has[CD_FR_A] = fr->has[CD_FR_U] = fr->has[CD_FR_W] = 0;
  drop_saved_a(fr);
  if (s->r.alg != CAMDELTA_SCAN_CHUNKWISE) return CAMDELTA_OK;
  camdelta_buffer A = {NULL, 0}, U;
  camdelta_status st;
  if (saved) { /* A_f into the saved object, which no longer holds a forward's states */
    saved->valid = 0, saved->has_a = 0;
    st = cd_ensure_buffer(c->ctx, &saved->a_mat, &saved->a_bytes, bytes);
  } else
    st = slot(fr, CD_FR_A, bytes, &A);
  if (!st) st = slot(fr, CD_FR_U, bytes, &U);
  if (!st) st = cd_forward_gram(c->ctx, s->e, &geo, a, saved, A, U, l);
  if (!st && saved) clRetainMemObject(fr->a_saved = saved->a_mat);
  fr->has[CD_FR_A] = fr->has[CD_FR_U] = !st;
  return st;
}

static camdelta_status forward_gram_end(cd_call *c, camdelta_status st) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  if (!st) record(s->frames, 0, a->B, a->H, a->D, a->F, a->S, a->reverse, a->precision, s->r.alg, s->saved);
  return phase_end(c, st);
}

static const cd_entry FORWARD_GRAM = CD_ENTRY("camdelta_scan_forward_gram", camdelta_scan_args, cd_forward_slots,
                                              forward_uses, forward_gram_plan, forward_gram_enqueue, forward_gram_end);

camdelta_status camdelta_scan_forward_gram(camdelta_context *ctx, const camdelta_scan_args *args,
                                           camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  phase_call s = {.frames = frames, .saved = saved};
  return run(&FORWARD_GRAM, ctx, args, saved, &s);
}

static camdelta_status forward_rest_uses(cd_call *c) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  const char *op = c->entry->op;
  camdelta_status st = forward_uses(c);
  if (!st) st = check_same(op, s->frames, 0, a->B, a->H, a->D, a->F, a->S, a->reverse, a->precision, s->saved);
  if (!st && s->saved && s->frames->alg == CAMDELTA_SCAN_CHUNKWISE && s->saved->a_mat != s->frames->a_saved)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' no longer holds the gram's A_f", op);
  return st;
}

static camdelta_status forward_rest_plan(cd_call *c) {
  phase_call *s = c->op;
  camdelta_scan_args a = *(const camdelta_scan_args *)c->args;
  a.algorithm = s->frames->alg; /* the gram's decision */
  camdelta_status st = cd_forward_request(c->ctx, &a, &s->r);
  if (!st) st = cd_forward_acquire(c->ctx, &s->r, &s->e);
  if (!st && a.used) *a.used = s->r.alg;
  return st;
}

static camdelta_status forward_rest_enqueue(cd_call *c, cd_launch *l) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  const camdelta_scan_frames *fr = s->frames;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  camdelta_status st = CAMDELTA_OK;
  if (s->saved && !(st = cd_saved_reserve(c->ctx, s->saved, geo.BHF * geo.D * geo.D * sizeof(float))))
    s->saved->valid = 0;
  const camdelta_buffer A = {fr->mem[CD_FR_A], 0}, U = {fr->mem[CD_FR_U], 0};
  return st ? st : cd_forward_rest(c->ctx, s->e, &geo, a, s->saved, A, U, l);
}

static camdelta_status forward_rest_end(cd_call *c, camdelta_status st) {
  phase_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  if (s->saved && !st) cd_scan_saved_commit(s->saved, a, s->r.alg == CAMDELTA_SCAN_CHUNKWISE);
  return phase_end(c, st);
}

static const cd_entry FORWARD_REST = CD_ENTRY("camdelta_scan_forward_rest", camdelta_scan_args, cd_forward_slots,
                                              forward_rest_uses, forward_rest_plan, forward_rest_enqueue,
                                              forward_rest_end);

camdelta_status camdelta_scan_forward_rest(camdelta_context *ctx, const camdelta_scan_args *args,
                                           camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  phase_call s = {.frames = frames, .saved = saved};
  return run(&FORWARD_REST, ctx, args, saved, &s);
}

/* -------------------------------------------------------------------------------------------- backward */

static camdelta_status backward_uses(cd_call *c) {
  const camdelta_status st = check_frames(c);
  return st ? st : cd_backward_uses(c);
}

static camdelta_status backward_plan(cd_call *c) {
  phase_call *s = c->op;
  const cd_bwd_request r = cd_backward_request(c->args);
  return cd_backward_acquire(c->ctx, &r, &s->e);
}

static camdelta_status backward_gram_enqueue(cd_call *c, cd_launch *l) {
  phase_call *s = c->op;
  const camdelta_scan_backward_args *a = c->args;
  const camdelta_scan_saved *saved = c->saved;
  camdelta_scan_frames *fr = s->frames;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  const size_t bytes = geo.BHF * geo.D * geo.D * sizeof(float);
  fr->valid = 0, fr->has[CD_FR_A] = fr->has[CD_FR_U] = fr->has[CD_FR_W] = 0;
  drop_saved_a(fr);
  /* U_f for the state chain (no saved states) or the caller's summary E; A_f the forward's where it is kept */
  const int need_u = !saved || s->want_u, reuse_a = saved && saved->has_a && !need_u;
  camdelta_buffer A = {NULL, 0}, U = {NULL, 0}, W;
  camdelta_status st = reuse_a ? CAMDELTA_OK : slot(fr, CD_FR_A, bytes, &A);
  if (!st) st = slot(fr, CD_FR_W, bytes, &W);
  if (!st && need_u) st = slot(fr, CD_FR_U, bytes, &U);
  if (!st) st = cd_backward_gram(c->ctx, s->e, &geo, a, A, reuse_a, U, need_u, W, l);
  if (!st && reuse_a) clRetainMemObject(fr->a_saved = saved->a_mat);
  if (!st) fr->has[CD_FR_A] = fr->has[CD_FR_W] = 1, fr->has[CD_FR_U] = need_u;
  return st;
}

static camdelta_status backward_gram_end(cd_call *c, camdelta_status st) {
  phase_call *s = c->op;
  const camdelta_scan_backward_args *a = c->args;
  if (!st)
    record(s->frames, 1, a->B, a->H, a->D, a->F, a->S, a->reverse, a->precision, CAMDELTA_SCAN_CHUNKWISE, c->saved);
  return phase_end(c, st);
}

static const cd_entry BACKWARD_GRAM =
    CD_ENTRY("camdelta_scan_backward_gram", camdelta_scan_backward_args, cd_backward_slots, backward_uses,
             backward_plan, backward_gram_enqueue, backward_gram_end);

camdelta_status camdelta_scan_backward_gram(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                            const camdelta_scan_saved *saved, int want_u,
                                            camdelta_scan_frames *frames) {
  phase_call s = {.frames = frames, .want_u = want_u};
  return run(&BACKWARD_GRAM, ctx, args, saved, &s);
}

static camdelta_status backward_rest_uses(cd_call *c) {
  phase_call *s = c->op;
  const camdelta_scan_backward_args *a = c->args;
  const camdelta_scan_saved *saved = c->saved;
  const char *op = c->entry->op;
  camdelta_status st = backward_uses(c);
  if (!st) st = check_same(op, s->frames, 1, a->B, a->H, a->D, a->F, a->S, a->reverse, a->precision, saved);
  if (!st && s->frames->a_saved && saved->a_mat != s->frames->a_saved)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' no longer holds the A_f the gram read", op);
  return st;
}

static camdelta_status backward_rest_enqueue(cd_call *c, cd_launch *l) {
  phase_call *s = c->op;
  const camdelta_scan_backward_args *a = c->args;
  const camdelta_scan_saved *saved = c->saved;
  const camdelta_scan_frames *fr = s->frames;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  const camdelta_buffer A = {fr->a_saved ? fr->a_saved : fr->mem[CD_FR_A], 0};
  const camdelta_buffer U = {fr->has[CD_FR_U] ? fr->mem[CD_FR_U] : NULL, 0}, W = {fr->mem[CD_FR_W], 0};
  const camdelta_buffer states = {saved ? saved->state_post : NULL, 0};
  return cd_backward_rest(c->ctx, s->e, &geo, a, states, A, U, W, l);
}

static const cd_entry BACKWARD_REST =
    CD_ENTRY("camdelta_scan_backward_rest", camdelta_scan_backward_args, cd_backward_slots, backward_rest_uses,
             backward_plan, backward_rest_enqueue, phase_end);

camdelta_status camdelta_scan_backward_rest(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                            const camdelta_scan_saved *saved, camdelta_scan_frames *frames) {
  phase_call s = {.frames = frames};
  return run(&BACKWARD_REST, ctx, args, saved, &s);
}

/* --------------------------------------------------------------------------------------------- summary */

static const cd_slot SUMMARY_SLOTS[] = {
    CD_SLOT(camdelta_frames_summary_args, init, CD_IN), CD_SLOT(camdelta_frames_summary_args, grad_final, CD_IN),
    CD_SLOT(camdelta_frames_summary_args, T, CD_OUT),   CD_SLOT(camdelta_frames_summary_args, E, CD_OUT),
    CD_SLOT(camdelta_frames_summary_args, G, CD_OUT)};

static camdelta_status summary_uses(cd_call *c) {
  const camdelta_scan_frames *fr = ((phase_call *)c->op)->frames;
  const camdelta_frames_summary_args *a = c->args;
  const char *op = c->entry->op;
  const camdelta_status st = check_frames(c);
  if (st) return st;
  if (!fr->valid || ((a->T.mem || a->E.mem || a->G.mem) && !fr->has[CD_FR_A]))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'frames' holds no per-frame matrices (%s)", op,
                   fr->valid ? "the sequential algorithm has no gram: camdelta_scan_summary computes its own"
                             : "no gram yet");
  if (a->E.mem && !fr->has[CD_FR_U])
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'E' needs U_f, which the gram did not compute (want_u)", op);
  if (a->G.mem && !fr->has[CD_FR_W])
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'G' needs W_f, which only a backward's gram computes", op);
  const size_t n = fr->B * fr->H * fr->D * fr->D;
  for (int i = 0; i < 5; i++) c->use[i] = (cd_use){.need = CD_OPTIONAL, .elems = n, .es = 4};
  return CAMDELTA_OK;
}

static camdelta_status summary_plan(cd_call *c) {
  phase_call *s = c->op;
  const camdelta_frames_summary_args *a = c->args;
  return a->T.mem || a->E.mem || a->G.mem ? cd_summary_acquire(c->ctx, s->frames->D, &s->e) : CAMDELTA_OK;
}

static camdelta_status summary_enqueue(cd_call *c, cd_launch *l) {
  const phase_call *s = c->op;
  const camdelta_scan_frames *fr = s->frames;
  const camdelta_frames_summary_args *a = c->args;
  if (!s->e) return CAMDELTA_OK;
  const cl_mem A = fr->a_saved ? fr->a_saved : fr->mem[CD_FR_A];
  return cd_summary_from_frames(c->ctx, s->e, fr->B * fr->H, fr->D, fr->F, fr->reverse, A, fr->mem[CD_FR_U],
                                fr->mem[CD_FR_W], a->init, a->grad_final, a->T, a->E, a->G, l);
}

static const cd_entry SUMMARY = CD_ENTRY("camdelta_scan_frames_summary", camdelta_frames_summary_args, SUMMARY_SLOTS,
                                         summary_uses, summary_plan, summary_enqueue, phase_end);

camdelta_status camdelta_scan_frames_summary(camdelta_context *ctx, const camdelta_scan_frames *frames,
                                             const camdelta_frames_summary_args *args) {
  phase_call s = {.frames = (camdelta_scan_frames *)frames};
  return run(&SUMMARY, ctx, args, NULL, &s);
}
