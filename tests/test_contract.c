/* The contract camdelta.h states for every public enqueuing entry: before anything is enqueued, a call checks ctx
 * and its argument structs for NULL, a `saved` object for its context, a profile request for a profiling queue,
 * and every cl_mem of its structs for being a valid buffer of the context's cl_context. A call that fails one of
 * these returns INVALID_ARGUMENT with a message naming what failed, enqueues nothing (the context's launch trace
 * stays empty) and writes nothing (outputs filled with 0x5A beforehand keep every byte).
 *
 * The entries and their buffer fields are this file's own table, written from the public headers and checked
 * against them: an enqueuing entry, or a camdelta_buffer field of an entry's struct, that the headers gain
 * without a row here fails the test. The MPI component's entries (camdelta_mpi.h, a separate library) are
 * tested in tests/mpi/. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "camdelta_phases.h"
#include "camdelta_stream.h"
#include "camdelta_summary.h"
#include "runtime/internal.h"
#include "testutil.h"

/* --------------------------------------------------------------------------------------------- the table */

typedef enum role {
  IN,    /* read by the entry */
  OUT,   /* written by the entry: poisoned before each call, must keep the poison on every rejection */
  UNREAD /* a field of a struct the entry shares with another entry (e.g. a forward's fields in the backward's
            struct): neither read nor written, but still a cl_mem the call was given */
} role;

typedef struct slot {
  const char *name;
  int part;   /* 0: the args struct, 1: the entry's second struct (a branch backward's grads) */
  size_t off; /* offsetof the camdelta_buffer in that struct */
  role role;
} slot;

#define A_(T, f, r) {.name = #f, .part = 0, .off = offsetof(T, f), .role = r}
#define G_(T, f, r) {.name = #f, .part = 1, .off = offsetof(T, f), .role = r}

typedef enum saved_kind { NO_SAVED, PREP_SAVED, SCAN_SAVED, BRANCH_SAVED, STREAM_SAVED } saved_kind;

typedef struct entry {
  const char *name;
  const char *args_type;   /* the struct's name in the headers; NULL: the buffers are parameters (by value) */
  const char *second_type; /* the second struct's name, or NULL */
  const char *second_name; /* its parameter's name ("grads", "clips") */
  size_t args_size, second_size;
  const slot *slots;
  size_t nslots;
  int profile_part; /* -1: no profile */
  size_t profile_off;
  saved_kind saved;
  const char *saved_param; /* the saved object's parameter in messages, quoted; NULL: "'saved'" */
  void (*init)(void *args, void *second); /* the scalars of a small valid call */
  camdelta_status (*call)(camdelta_context *ctx, const void *args, const void *second, void *saved);
  void (*prepare)(camdelta_context *ctx); /* or NULL: run before each call on ctx, outside its checks (the phases'
                                             frames object) */
} entry;

/* one small shape for every entry: B 1, H 2, D 16, F = T 2 frames of S 8 tokens (Hs 2 x Ws 4), N 16, C 32 */
enum { B_ = 1, H_ = 2, D_ = 16, F_ = 2, S_ = 8, HS_ = 2, WS_ = 4, N_ = F_ * S_, C_ = H_ * D_ };
#define POOL_BYTES 16384 /* each slot's buffer: more than any of its tensors at this shape */
#define POISON 0x5A

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
/* the scalars of a small valid call: static void NAME(void *args, void *second) */
#define INIT(name, type, ...)                   \
  static void name(void *p, void *s) {          \
    (void)s;                                    \
    *(type *)p = (type){__VA_ARGS__};           \
  }
/* the call of an entry: static camdelta_status NAME(ctx, args, second, saved) calling FN(ctx, <the rest>), the rest
 * being a (ctx, args), "a, sv" (ctx, args, saved) or "a, s, sv" (ctx, args, second, saved) */
#define CALL(name, fn, ...)                                                                  \
  static camdelta_status name(camdelta_context *c, const void *a, const void *s, void *sv) { \
    (void)s, (void)sv;                                                                       \
    return fn(c, __VA_ARGS__);                                                               \
  }

/* prep forward and backward */
#define PF_(f, r) A_(camdelta_prep_args, f, r)
static const slot PREP_SLOTS[] = {PF_(q_raw, IN),   PF_(k_raw, IN),   PF_(v_raw, IN),    PF_(q_norm_weight, IN),
                                  PF_(k_norm_weight, IN), PF_(proj_q, IN), PF_(proj_kv, IN), PF_(rope_cos, IN),
                                  PF_(rope_sin, IN), PF_(q, OUT), PF_(k, OUT), PF_(v, OUT), PF_(inflation_sq, OUT)};
INIT(init_prep, camdelta_prep_args, .B = B_, .N = N_, .H = H_, .D = D_, .dtype = CAMDELTA_F32, .k_scale = 0.25f,
     .norm_eps = 1e-6f)
CALL(call_prep, camdelta_prep_forward, a, sv)

#define PB_(f, r) A_(camdelta_prep_backward_args, f, r)
static const slot PREP_BWD_SLOTS[] = {
    PB_(q_raw, IN), PB_(k_raw, IN), PB_(v_raw, IN), PB_(q_norm_weight, IN), PB_(k_norm_weight, IN), PB_(proj_q, IN),
    PB_(proj_kv, IN), PB_(rope_cos, IN), PB_(rope_sin, IN), PB_(grad_q, IN), PB_(grad_k, IN), PB_(grad_v, IN),
    PB_(grad_inflation_sq, IN), PB_(dq_raw, OUT), PB_(dk_raw, OUT), PB_(dv_raw, OUT), PB_(dq_norm_weight, OUT),
    PB_(dk_norm_weight, OUT), PB_(dproj_q, OUT), PB_(dproj_kv, OUT), PB_(drope_cos, OUT), PB_(drope_sin, OUT),
    PB_(q, IN), PB_(k, IN), PB_(inflation_sq, IN)};
INIT(init_prep_bwd, camdelta_prep_backward_args, .B = B_, .N = N_, .H = H_, .D = D_, .dtype = CAMDELTA_F32,
     .k_scale = 0.25f, .norm_eps = 1e-6f)
CALL(call_prep_bwd, camdelta_prep_backward, a, sv)

/* scan forward and backward, also over packed clips: two clips of one frame each, 8 tokens per frame */
#define SF_(f, r) A_(camdelta_scan_args, f, r)
static const slot SCAN_SLOTS[] = {SF_(q, IN),   SF_(k, IN),          SF_(v, IN),          SF_(beta, IN),
                                  SF_(decay, IN), SF_(out, OUT),     SF_(init_state, IN), SF_(final_state, OUT)};
#define SB_(f, r) A_(camdelta_scan_backward_args, f, r)
static const slot SCAN_BWD_SLOTS[] = {
    SB_(q, IN),          SB_(k, IN),   SB_(v, IN),   SB_(beta, IN),  SB_(decay, IN),   SB_(init_state, IN),
    SB_(grad_out, IN),   SB_(grad_final_state, IN),  SB_(dq, OUT),   SB_(dk, OUT),     SB_(dv, OUT),
    SB_(dbeta, OUT),     SB_(ddecay, OUT),           SB_(dinit_state, OUT)};
INIT(init_scan, camdelta_scan_args, .B = B_, .H = H_, .D = D_, .F = F_, .S = S_)
INIT(init_scan_bwd, camdelta_scan_backward_args, .B = B_, .H = H_, .D = D_, .F = F_, .S = S_)
CALL(call_scan, camdelta_scan_forward, a, sv)
CALL(call_scan_bwd, camdelta_scan_backward, a, sv)
static const int64_t FRAME_OFFSETS[] = {0, S_, 2 * S_};
static const int64_t CLIP_OFFSETS[] = {0, 1, 2};
static void init_clips(void *s) {
  *(camdelta_packed_clips *)s = (camdelta_packed_clips){
      .frame_offsets = FRAME_OFFSETS, .clip_offsets = CLIP_OFFSETS, .clips = 2, .tokens = N_, .native = NULL};
}
static void init_scan_packed(void *p, void *s) {
  *(camdelta_scan_args *)p = (camdelta_scan_args){.B = 1, .H = H_, .D = D_, .F = F_, .S = 0};
  init_clips(s);
}
static void init_scan_bwd_packed(void *p, void *s) {
  *(camdelta_scan_backward_args *)p = (camdelta_scan_backward_args){.B = 1, .H = H_, .D = D_, .F = F_, .S = 0};
  init_clips(s);
}
CALL(call_scan_packed, camdelta_scan_forward_packed, a, s, sv)
CALL(call_scan_bwd_packed, camdelta_scan_backward_packed, a, s, sv)

/* state summaries */
#define SS_(f, r) A_(camdelta_scan_summary_args, f, r)
static const slot SUMMARY_SLOTS[] = {SS_(k, IN),          SS_(v, IN), SS_(beta, IN), SS_(decay, IN),
                                     SS_(init_state, IN), SS_(T, OUT), SS_(E, OUT)};
#define SG_(f, r) A_(camdelta_scan_grad_summary_args, f, r)
static const slot GRAD_SUMMARY_SLOTS[] = {SG_(q, IN), SG_(k, IN), SG_(beta, IN), SG_(decay, IN), SG_(grad_out, IN),
                                          SG_(grad_final_state, IN), SG_(G, OUT)};
#define SA_(f, r) A_(camdelta_summary_apply_args, f, r)
static const slot APPLY_SLOTS[] = {SA_(T, IN), SA_(E, IN), SA_(M_in, IN), SA_(M_out, OUT)};
#define SC_(f, r) A_(camdelta_summary_combine_args, f, r)
static const slot COMBINE_SLOTS[] = {SC_(T1, IN), SC_(E1, IN), SC_(T2, IN), SC_(E2, IN), SC_(T, OUT), SC_(E, OUT)};
INIT(init_summary, camdelta_scan_summary_args, .B = B_, .H = H_, .D = D_, .F = F_, .S = S_)
INIT(init_grad_summary, camdelta_scan_grad_summary_args, .B = B_, .H = H_, .D = D_, .F = F_, .S = S_)
INIT(init_apply, camdelta_summary_apply_args, .B = B_, .H = H_, .D = D_)
INIT(init_combine, camdelta_summary_combine_args, .B = B_, .H = H_, .D = D_)
CALL(call_summary, camdelta_scan_summary, a)
CALL(call_grad_summary, camdelta_scan_grad_summary, a)
CALL(call_apply, camdelta_summary_apply, a)
CALL(call_combine, camdelta_summary_combine, a)

/* the scan's phases (camdelta_phases.h): each call gets a frames object of its context, made before the call; a
 * rest's, and the summary's, holds the gram of a valid call of the same shape (a backward's with U_f) */
static camdelta_scan_frames *phase_frames;
static cl_mem pool_buffer(cl_context c, cl_command_queue q, unsigned char byte);
static void frames_gram(camdelta_context *ctx, int backward) {
  camdelta_scan_frames_destroy(phase_frames);
  phase_frames = NULL;
  TU_OK(camdelta_scan_frames_create(ctx, &phase_frames));
  if (backward < 0) return;
  cl_mem m[8];
  camdelta_buffer b[8];
  for (int i = 0; i < 8; i++) {
    m[i] = pool_buffer(camdelta_context_cl_context(ctx), camdelta_context_queue(ctx), 0);
    b[i] = (camdelta_buffer){m[i], 0};
  }
  const camdelta_buffer tok = b[0], beta = b[1], decay = b[2], out = b[3];
  if (backward) {
    const camdelta_scan_backward_args a = {.q = tok, .k = tok, .v = tok, .beta = beta, .decay = decay,
                                           .grad_out = tok, .dq = out, .dk = b[4], .dv = b[5], .dbeta = b[6],
                                           .ddecay = b[7], .B = B_, .H = H_, .D = D_, .F = F_, .S = S_};
    TU_OK(camdelta_scan_backward_gram(ctx, &a, NULL, 1, phase_frames));
  } else {
    const camdelta_scan_args a = {.q = tok, .k = tok, .v = tok, .beta = beta, .decay = decay, .out = out,
                                  .B = B_, .H = H_, .D = D_, .F = F_, .S = S_};
    TU_OK(camdelta_scan_forward_gram(ctx, &a, NULL, phase_frames));
  }
  TU_OK(camdelta_finish(ctx));
  for (int i = 0; i < 8; i++) clReleaseMemObject(m[i]);
}
static void frames_empty(camdelta_context *ctx) { frames_gram(ctx, -1); }
static void frames_forward(camdelta_context *ctx) { frames_gram(ctx, 0); }
static void frames_backward(camdelta_context *ctx) { frames_gram(ctx, 1); }
CALL(call_fwd_gram, camdelta_scan_forward_gram, a, sv, phase_frames)
CALL(call_fwd_rest, camdelta_scan_forward_rest, a, sv, phase_frames)
CALL(call_bwd_gram, camdelta_scan_backward_gram, a, sv, 0, phase_frames)
CALL(call_bwd_rest, camdelta_scan_backward_rest, a, sv, phase_frames)
#define FS_(f, r) A_(camdelta_frames_summary_args, f, r)
static const slot FRAMES_SUMMARY_SLOTS[] = {FS_(init, IN), FS_(grad_final, IN), FS_(T, OUT), FS_(E, OUT), FS_(G, OUT)};
static void init_frames_summary(void *p, void *s) {
  (void)s;
  *(camdelta_frames_summary_args *)p = (camdelta_frames_summary_args){.profile = NULL};
}
CALL(call_frames_summary, camdelta_scan_frames_summary, phase_frames, a)

/* the camera branch's pieces */
#define CA_(f, r) A_(camdelta_camera_args, f, r)
static const slot CAMERA_SLOTS[] = {CA_(camera_conditions, IN), CA_(proj_q, OUT),   CA_(proj_kv, OUT),
                                    CA_(proj_o, OUT),           CA_(rope_cos, OUT), CA_(rope_sin, OUT)};
INIT(init_camera, camdelta_camera_args, .B = B_, .T = F_, .Hs = HS_, .Ws = WS_, .pt = 1, .ph = 1, .pw = 1, .D = D_)
CALL(call_camera, camdelta_camera_forward, a)

#define CV_(f, r) A_(camdelta_short_conv_args, f, r)
static const slot CONV_SLOTS[] = {CV_(k_raw, IN), CV_(conv_weight, IN), CV_(k_conv, OUT), CV_(grad_k_conv, UNREAD),
                                  CV_(dk_raw, UNREAD), CV_(dconv_weight, UNREAD)};
static const slot CONV_BWD_SLOTS[] = {CV_(k_raw, IN), CV_(conv_weight, IN), CV_(k_conv, UNREAD),
                                      CV_(grad_k_conv, IN), CV_(dk_raw, OUT), CV_(dconv_weight, OUT)};
INIT(init_conv, camdelta_short_conv_args, .B = B_, .T = F_, .S = S_, .C = C_)
CALL(call_conv, camdelta_short_conv_forward, a)
CALL(call_conv_bwd, camdelta_short_conv_backward, a)

#define OT_(f, r) A_(camdelta_output_transform_args, f, r)
static const slot OT_SLOTS[] = {OT_(out, IN),      OT_(out2, IN), OT_(proj_o, IN),        OT_(rope_cos, IN),
                                OT_(rope_sin, IN), OT_(y, OUT),   OT_(grad_y, UNREAD),    OT_(grad_out, UNREAD)};
static const slot OT_BWD_SLOTS[] = {OT_(out, UNREAD), OT_(out2, UNREAD), OT_(proj_o, IN),   OT_(rope_cos, IN),
                                    OT_(rope_sin, IN), OT_(y, UNREAD),   OT_(grad_y, IN),   OT_(grad_out, OUT)};
INIT(init_ot, camdelta_output_transform_args, .B = B_, .N = N_, .H = H_, .D = D_)
CALL(call_ot, camdelta_output_transform_forward, a)
CALL(call_ot_bwd, camdelta_output_transform_backward, a)

/* the whole branch */
#define BA_(f, r) A_(camdelta_branch_args, f, r)
#define BG_(f, r) G_(camdelta_branch_grads, f, r)
#define BRANCH_ARGS_SLOTS(y_role)                                                                                \
  BA_(q_raw, IN), BA_(k_raw, IN), BA_(v_raw, IN), BA_(conv_weight, IN), BA_(q_norm_weight, IN),                  \
      BA_(k_norm_weight, IN), BA_(camera_conditions, IN), BA_(beta, IN), BA_(decay, IN), BA_(y, y_role)
static const slot BRANCH_SLOTS[] = {BRANCH_ARGS_SLOTS(OUT)};
static const slot BRANCH_BWD_SLOTS[] = {
    BRANCH_ARGS_SLOTS(UNREAD), BG_(grad_y, IN),          BG_(dq_raw, OUT),         BG_(dk_raw, OUT),
    BG_(dv_raw, OUT),          BG_(dconv_weight, OUT),   BG_(dq_norm_weight, OUT), BG_(dk_norm_weight, OUT),
    BG_(dbeta, OUT),           BG_(ddecay, OUT)};
INIT(init_branch, camdelta_branch_args, .B = B_, .T = F_, .Hs = HS_, .Ws = WS_, .H = H_, .D = D_, .pt = 1, .ph = 1,
     .pw = 1, .k_scale = 0.25f, .norm_eps = 1e-6f)
static void init_branch_bwd(void *p, void *s) {
  init_branch(p, NULL);
  *(camdelta_branch_grads *)s = (camdelta_branch_grads){.profile = NULL};
}
CALL(call_branch, camdelta_branch_forward, a, sv)
CALL(call_branch_bwd, camdelta_branch_backward, a, s, sv)

/* a run of the branch, started and ended (its start checks the call's arguments; it enqueues nothing) */
static camdelta_status call_branch_run(camdelta_context *c, const void *a, const void *s, void *sv) {
  (void)s;
  camdelta_branch_run *run = NULL;
  const camdelta_status st = camdelta_branch_run_forward(c, a, sv, NULL, &run);
  camdelta_branch_run_destroy(run);
  return st;
}
static camdelta_status call_branch_run_bwd(camdelta_context *c, const void *a, const void *s, void *sv) {
  camdelta_branch_run *run = NULL;
  const camdelta_status st = camdelta_branch_run_backward(c, a, s, sv, NULL, &run);
  camdelta_branch_run_destroy(run);
  return st;
}

/* streams (camdelta_stream.h): a stream of the step's context, made before each call (a step's saved object) */
#define STA_(f, r) A_(camdelta_stream_args, f, r)
#define STS_(f, r) A_(camdelta_stream_step_args, f, r)
static const slot STREAM_CREATE_SLOTS[] = {STA_(conv_weight, IN), STA_(q_norm_weight, IN), STA_(k_norm_weight, IN)};
static const slot STREAM_STEP_SLOTS[] = {STS_(q_raw, IN), STS_(k_raw, IN),  STS_(v_raw, IN), STS_(camera_conditions, IN),
                                         STS_(beta, IN),  STS_(decay, IN), STS_(y, OUT)};
INIT(init_stream, camdelta_stream_args, .B = B_, .H = H_, .D = D_, .Hs = HS_, .Ws = WS_, .pt = 1, .ph = 1, .pw = 1,
     .chunk_size = F_, .k_scale = 0.25f, .norm_eps = 1e-6f)
INIT(init_stream_step, camdelta_stream_step_args, .frames = F_, .commit = 1)
static camdelta_status call_stream_create(camdelta_context *c, const void *a, const void *s, void *sv) {
  (void)s, (void)sv;
  camdelta_stream *st = NULL;
  const camdelta_status r = camdelta_stream_create(c, a, &st);
  camdelta_stream_destroy(st);
  return r;
}
static camdelta_stream *stream_of(camdelta_context *ctx) {
  cl_mem w = pool_buffer(camdelta_context_cl_context(ctx), camdelta_context_queue(ctx), 0);
  camdelta_stream_args a;
  init_stream(&a, NULL);
  a.conv_weight = a.q_norm_weight = a.k_norm_weight = (camdelta_buffer){w, 0};
  camdelta_stream *st = NULL;
  TU_OK(camdelta_stream_create(ctx, &a, &st));
  clReleaseMemObject(w);
  return st;
}
static camdelta_stream *prepared_stream;
static void stream_prepare(camdelta_context *ctx) {
  camdelta_stream_destroy(prepared_stream);
  prepared_stream = stream_of(ctx);
}
static camdelta_status call_stream_step(camdelta_context *c, const void *a, const void *s, void *sv) {
  (void)s;
  return camdelta_stream_step(c, sv ? sv : prepared_stream, a);
}

/* device-side random inputs: the buffer is a parameter */
typedef struct fill_args {
  camdelta_buffer buf;
} fill_args;
static const slot FILL_SLOTS[] = {A_(fill_args, buf, OUT)};
static void init_fill(void *p, void *s) { (void)p, (void)s; }
static camdelta_status call_fill(camdelta_context *c, const void *a, const void *s, void *sv) {
  (void)s, (void)sv;
  return camdelta_fill_random(c, ((const fill_args *)a)->buf, N_, CAMDELTA_F32, 7, 0.0f, 1.0f);
}

/* a row: the function, its args struct, the second struct (its name in the headers, its parameter's name, its
 * size; or NULL, NULL, 0), the slots, the profile's struct (0 args, 1 second) and type, the saved object's kind */
#define ENTRY_(fn, atype, stype, sname, ssize, slots_, ppart, ptype, saved_, init_, call_)                      \
  {                                                                                                           \
    .name = #fn, .args_type = #atype, .second_type = stype, .second_name = sname, .args_size = sizeof(atype), \
    .second_size = ssize, .slots = slots_, .nslots = N_OF(slots_), .profile_part = ppart,                     \
    .profile_off = offsetof(ptype, profile), .saved = saved_, .init = init_, .call = call_                    \
  }
#define ENTRY(...) ENTRY_(__VA_ARGS__) /* NONE_, CLIPS_ and GRADS_ expand to three arguments first */
#define NONE_ NULL, NULL, 0
/* the common row: one struct, holding the profile */
#define ENTRY1(fn, type, slots_, saved_, init_, call_) ENTRY(fn, type, NONE_, slots_, 0, type, saved_, init_, call_)
#define CLIPS_ "camdelta_packed_clips", "clips", sizeof(camdelta_packed_clips)
#define GRADS_ "camdelta_branch_grads", "grads", sizeof(camdelta_branch_grads)
#define PREP_ camdelta_prep_args
#define PREP_BWD_ camdelta_prep_backward_args
#define SCAN_ camdelta_scan_args
#define SCAN_BWD_ camdelta_scan_backward_args
/* a phase's row: one struct, and a frames object made before each call */
#define PHASE(...) PHASE_(__VA_ARGS__) /* SCAN_ and SCAN_BWD_ expand first */
#define PHASE_(fn, type, slots_, saved_, init_, call_, prepare_)                                      \
  {                                                                                                 \
    .name = #fn, .args_type = #type, .second_type = NULL, .second_name = NULL, .args_size = sizeof(type), \
    .second_size = 0, .slots = slots_, .nslots = N_OF(slots_), .profile_part = 0,                   \
    .profile_off = offsetof(type, profile), .saved = saved_, .init = init_, .call = call_,          \
    .prepare = prepare_                                                                             \
  }

static const entry ENTRIES[] = {
    ENTRY1(camdelta_prep_forward, PREP_, PREP_SLOTS, PREP_SAVED, init_prep, call_prep),
    ENTRY1(camdelta_prep_backward, PREP_BWD_, PREP_BWD_SLOTS, PREP_SAVED, init_prep_bwd, call_prep_bwd),
    ENTRY1(camdelta_scan_forward, SCAN_, SCAN_SLOTS, SCAN_SAVED, init_scan, call_scan),
    ENTRY1(camdelta_scan_backward, SCAN_BWD_, SCAN_BWD_SLOTS, SCAN_SAVED, init_scan_bwd, call_scan_bwd),
    ENTRY(camdelta_scan_forward_packed, SCAN_, CLIPS_, SCAN_SLOTS, 0, SCAN_, SCAN_SAVED, init_scan_packed,
          call_scan_packed),
    ENTRY(camdelta_scan_backward_packed, SCAN_BWD_, CLIPS_, SCAN_BWD_SLOTS, 0, SCAN_BWD_, SCAN_SAVED,
          init_scan_bwd_packed, call_scan_bwd_packed),
    ENTRY1(camdelta_scan_summary, camdelta_scan_summary_args, SUMMARY_SLOTS, NO_SAVED, init_summary, call_summary),
    ENTRY1(camdelta_scan_grad_summary, camdelta_scan_grad_summary_args, GRAD_SUMMARY_SLOTS, NO_SAVED,
           init_grad_summary, call_grad_summary),
    ENTRY1(camdelta_summary_apply, camdelta_summary_apply_args, APPLY_SLOTS, NO_SAVED, init_apply, call_apply),
    ENTRY1(camdelta_summary_combine, camdelta_summary_combine_args, COMBINE_SLOTS, NO_SAVED, init_combine,
           call_combine),
    ENTRY1(camdelta_camera_forward, camdelta_camera_args, CAMERA_SLOTS, NO_SAVED, init_camera, call_camera),
    ENTRY1(camdelta_short_conv_forward, camdelta_short_conv_args, CONV_SLOTS, NO_SAVED, init_conv, call_conv),
    ENTRY1(camdelta_short_conv_backward, camdelta_short_conv_args, CONV_BWD_SLOTS, NO_SAVED, init_conv,
           call_conv_bwd),
    ENTRY1(camdelta_output_transform_forward, camdelta_output_transform_args, OT_SLOTS, NO_SAVED, init_ot, call_ot),
    ENTRY1(camdelta_output_transform_backward, camdelta_output_transform_args, OT_BWD_SLOTS, NO_SAVED, init_ot,
           call_ot_bwd),
    ENTRY1(camdelta_branch_forward, camdelta_branch_args, BRANCH_SLOTS, BRANCH_SAVED, init_branch, call_branch),
    ENTRY(camdelta_branch_backward, camdelta_branch_args, GRADS_, BRANCH_BWD_SLOTS, 1, camdelta_branch_grads,
          BRANCH_SAVED, init_branch_bwd, call_branch_bwd),
    ENTRY1(camdelta_branch_run_forward, camdelta_branch_args, BRANCH_SLOTS, BRANCH_SAVED, init_branch,
           call_branch_run),
    ENTRY(camdelta_branch_run_backward, camdelta_branch_args, GRADS_, BRANCH_BWD_SLOTS, 1, camdelta_branch_grads,
          BRANCH_SAVED, init_branch_bwd, call_branch_run_bwd),
    PHASE(camdelta_scan_forward_gram, SCAN_, SCAN_SLOTS, SCAN_SAVED, init_scan, call_fwd_gram, frames_empty),
    PHASE(camdelta_scan_forward_rest, SCAN_, SCAN_SLOTS, SCAN_SAVED, init_scan, call_fwd_rest, frames_forward),
    PHASE(camdelta_scan_backward_gram, SCAN_BWD_, SCAN_BWD_SLOTS, SCAN_SAVED, init_scan_bwd, call_bwd_gram,
          frames_empty),
    PHASE(camdelta_scan_backward_rest, SCAN_BWD_, SCAN_BWD_SLOTS, SCAN_SAVED, init_scan_bwd, call_bwd_rest,
          frames_backward),
    PHASE(camdelta_scan_frames_summary, camdelta_frames_summary_args, FRAMES_SUMMARY_SLOTS, NO_SAVED,
          init_frames_summary, call_frames_summary, frames_backward),
};
/* camdelta_fill_random takes its buffer by value: its own row (no args pointer, no profile) */
static const entry STREAM_STEP = {
    .name = "camdelta_stream_step", .args_type = "camdelta_stream_step_args", .second_type = NULL,
    .second_name = NULL, .args_size = sizeof(camdelta_stream_step_args), .second_size = 0, .slots = STREAM_STEP_SLOTS,
    .nslots = N_OF(STREAM_STEP_SLOTS), .profile_part = 0, .profile_off = offsetof(camdelta_stream_step_args, profile),
    .saved = STREAM_SAVED, .saved_param = "'stream'", .init = init_stream_step, .call = call_stream_step,
    .prepare = stream_prepare};
/* camdelta_stream_create: no profile */
static const entry STREAM_CREATE = {
    .name = "camdelta_stream_create", .args_type = "camdelta_stream_args", .second_type = NULL, .second_name = NULL,
    .args_size = sizeof(camdelta_stream_args), .second_size = 0, .slots = STREAM_CREATE_SLOTS,
    .nslots = N_OF(STREAM_CREATE_SLOTS), .profile_part = -1, .profile_off = 0, .saved = NO_SAVED,
    .init = init_stream, .call = call_stream_create};
static const entry FILL = {.name = "camdelta_fill_random", .args_type = NULL, .second_type = NULL,
                           .second_name = NULL, .args_size = sizeof(fill_args), .second_size = 0,
                           .slots = FILL_SLOTS, .nslots = N_OF(FILL_SLOTS), .profile_part = -1, .profile_off = 0,
                           .saved = NO_SAVED, .init = init_fill, .call = call_fill};

/* Public functions that take a context and argument structs but enqueue nothing (they describe plans). */
static const char *const NOT_ENQUEUING[] = {"camdelta_scan_plan_describe", "camdelta_scan_backward_plan_describe"};

static const entry *const EXTRA[] = {&FILL, &STREAM_CREATE, &STREAM_STEP};
static const entry *entry_at(size_t i) {
  return i < N_OF(ENTRIES) ? &ENTRIES[i] : i < N_OF(ENTRIES) + N_OF(EXTRA) ? EXTRA[i - N_OF(ENTRIES)] : NULL;
}
#define N_ENTRIES (N_OF(ENTRIES) + N_OF(EXTRA))

/* ------------------------------------------------------------------------------------------- fixtures */

/* One entry's call on one context: a buffer per slot (inputs and unread fields zero, outputs POISON), the
 * argument structs, and the failures found so far. */
typedef struct fixture {
  const entry *e;
  camdelta_context *ctx;
  cl_context clctx;
  cl_command_queue queue;
  cl_mem mem[32];
  void *part[2];
} fixture;

static cl_mem pool_buffer(cl_context c, cl_command_queue q, unsigned char byte) {
  cl_int err;
  cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, POOL_BYTES, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  assert_int_equal(clEnqueueFillBuffer(q, m, &byte, 1, 0, POOL_BYTES, 0, NULL, NULL), CL_SUCCESS);
  assert_int_equal(clFinish(q), CL_SUCCESS);
  return m;
}

static void poison_outputs(fixture *f) {
  const unsigned char byte = POISON;
  for (size_t i = 0; i < f->e->nslots; i++)
    if (f->e->slots[i].role == OUT)
      assert_int_equal(clEnqueueFillBuffer(f->queue, f->mem[i], &byte, 1, 0, POOL_BYTES, 0, NULL, NULL), CL_SUCCESS);
  assert_int_equal(clFinish(f->queue), CL_SUCCESS);
}

static void fixture_open(fixture *f, const entry *e, camdelta_context *ctx) {
  memset(f, 0, sizeof *f);
  f->e = e, f->ctx = ctx;
  f->clctx = camdelta_context_cl_context(ctx), f->queue = camdelta_context_queue(ctx);
  assert_true(e->nslots <= N_OF(f->mem));
  for (size_t i = 0; i < e->nslots; i++)
    f->mem[i] = pool_buffer(f->clctx, f->queue, e->slots[i].role == OUT ? POISON : 0);
  f->part[0] = calloc(1, e->args_size);
  f->part[1] = e->second_size ? calloc(1, e->second_size) : NULL;
  assert_non_null(f->part[0]);
}

static void fixture_close(fixture *f) {
  for (size_t i = 0; i < f->e->nslots; i++) clReleaseMemObject(f->mem[i]);
  free(f->part[0]), free(f->part[1]);
}

static camdelta_buffer *slot_of(fixture *f, size_t i) {
  const slot *s = &f->e->slots[i];
  return (camdelta_buffer *)((char *)f->part[s->part] + s->off);
}

/* Fills the argument structs afresh: the scalars, slot i's buffer replaced by `swap` (when not NULL), a profile. */
static void fixture_args(fixture *f, size_t swap_slot, cl_mem swap, camdelta_profile *profile) {
  const entry *e = f->e;
  memset(f->part[0], 0, e->args_size);
  if (f->part[1]) memset(f->part[1], 0, e->second_size);
  e->init(f->part[0], f->part[1]);
  for (size_t i = 0; i < e->nslots; i++)
    *slot_of(f, i) = (camdelta_buffer){.mem = swap && i == swap_slot ? swap : f->mem[i], .offset = 0};
  if (e->profile_part >= 0) {
    camdelta_profile **p = (camdelta_profile **)((char *)f->part[e->profile_part] + e->profile_off);
    *p = profile;
  }
}

/* A call that must be rejected: INVALID_ARGUMENT, a message with every string of want[], nothing enqueued (the
 * trace stays empty), every output (but `skip`) still POISON. Returns 0 and a reason in why[] otherwise. */
static int rejected(fixture *f, camdelta_context *ctx, const void *args, const void *second, void *saved,
                    cl_mem skip, const char *const *want, size_t nwant, char *why, size_t wsize) {
  poison_outputs(f);
  if (ctx && f->e->prepare) f->e->prepare(ctx);
  FILE *trace = tmpfile();
  assert_non_null(trace);
  if (ctx) cd_trace_launches(ctx, trace, 0);
  const camdelta_status st = f->e->call(ctx, args, second, saved);
  if (ctx) cd_trace_launches(ctx, NULL, 0);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", camdelta_last_message());
  const long traced = ftell(trace);
  fclose(trace);
  assert_int_equal(clFinish(f->queue), CL_SUCCESS);
  if (st != CAMDELTA_ERROR_INVALID_ARGUMENT) {
    snprintf(why, wsize, "returned %s (\"%s\"), expected CAMDELTA_ERROR_INVALID_ARGUMENT", camdelta_status_name(st),
             msg);
    return 0;
  }
  for (size_t i = 0; i < nwant; i++)
    if (!strstr(msg, want[i])) {
      snprintf(why, wsize, "the message \"%s\" does not contain \"%s\"", msg, want[i]);
      return 0;
    }
  if (traced != 0) {
    snprintf(why, wsize, "rejected (\"%s\") after enqueuing work (%ld bytes of launch trace)", msg, traced);
    return 0;
  }
  unsigned char *h = malloc(POOL_BYTES);
  for (size_t i = 0; i < f->e->nslots; i++) {
    if (f->e->slots[i].role != OUT || f->mem[i] == skip) continue;
    assert_int_equal(clEnqueueReadBuffer(f->queue, f->mem[i], CL_TRUE, 0, POOL_BYTES, h, 0, NULL, NULL), CL_SUCCESS);
    for (size_t b = 0; b < POOL_BYTES; b++)
      if (h[b] != POISON) {
        snprintf(why, wsize, "rejected (\"%s\") but output '%s' was written at byte %zu", msg, f->e->slots[i].name, b);
        free(h);
        return 0;
      }
  }
  free(h);
  return 1;
}

/* A valid call on the fixture's buffers: the rejections that follow are the checks', not the fixture's. */
static int runs(fixture *f, camdelta_profile *profile, char *why, size_t wsize) {
  fixture_args(f, 0, NULL, profile);
  if (f->e->prepare) f->e->prepare(f->ctx);
  const camdelta_status st = f->e->call(f->ctx, f->part[0], f->part[1], NULL);
  if (st != CAMDELTA_OK) {
    snprintf(why, wsize, "a valid call failed: %s: %s", camdelta_status_name(st), camdelta_last_message());
    return 0;
  }
  TU_OK(camdelta_finish(f->ctx));
  return 1;
}

static void report(int *failures, const entry *e, const char *what, const char *why) {
  print_message("FAIL %s: %s: %s\n", e->name, what, why);
  (*failures)++;
}

static void *saved_for(camdelta_context *ctx, saved_kind kind) {
  camdelta_prep_saved *ps = NULL;
  camdelta_scan_saved *ss = NULL;
  camdelta_branch_saved *bs = NULL;
  switch (kind) {
    case PREP_SAVED: TU_OK(camdelta_prep_saved_create(ctx, &ps)); return ps;
    case SCAN_SAVED: TU_OK(camdelta_scan_saved_create(ctx, &ss)); return ss;
    case BRANCH_SAVED: TU_OK(camdelta_branch_saved_create(ctx, &bs)); return bs;
    case STREAM_SAVED: return stream_of(ctx);
    case NO_SAVED: break;
  }
  return NULL;
}

static void saved_free(saved_kind kind, void *s) {
  if (kind == PREP_SAVED) camdelta_prep_saved_destroy(s);
  if (kind == SCAN_SAVED) camdelta_scan_saved_destroy(s);
  if (kind == BRANCH_SAVED) camdelta_branch_saved_destroy(s);
  if (kind == STREAM_SAVED) camdelta_stream_destroy(s);
}

/* ------------------------------------------------------------------------------------------------ tests */

/* A cl_mem of another OpenCL context, in each buffer slot of each entry, is rejected naming the slot. */
static void test_foreign_buffer_in_every_slot(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  cl_context other;
  cl_command_queue oq;
  tu_other_cl_context(&other, &oq);
  cl_mem foreign = pool_buffer(other, oq, POISON);
  unsigned char *h = malloc(POOL_BYTES);
  int failures = 0, checked = 0;
  char why[1400];
  for (size_t k = 0; k < N_ENTRIES; k++) {
    const entry *e = entry_at(k);
    fixture f;
    fixture_open(&f, e, ctx);
    if (!runs(&f, NULL, why, sizeof why)) {
      report(&failures, e, "fixture", why);
      fixture_close(&f);
      continue;
    }
    for (size_t i = 0; i < e->nslots; i++) {
      fixture_args(&f, i, foreign, NULL);
      char quoted[96], what[128];
      snprintf(quoted, sizeof quoted, "'%s'", e->slots[i].name);
      snprintf(what, sizeof what, "a foreign cl_mem in '%s'", e->slots[i].name);
      const char *want[3] = {e->name, quoted, "another OpenCL context"};
      if (!rejected(&f, ctx, f.part[0], f.part[1], NULL, foreign, want, 3, why, sizeof why))
        report(&failures, e, what, why);
      /* nor was the foreign buffer written */
      assert_int_equal(clEnqueueReadBuffer(oq, foreign, CL_TRUE, 0, POOL_BYTES, h, 0, NULL, NULL), CL_SUCCESS);
      for (size_t b = 0; b < POOL_BYTES; b++)
        if (h[b] != POISON) {
          snprintf(why, sizeof why, "the foreign buffer was written at byte %zu", b);
          report(&failures, e, what, why);
          const unsigned char byte = POISON;
          assert_int_equal(clEnqueueFillBuffer(oq, foreign, &byte, 1, 0, POOL_BYTES, 0, NULL, NULL), CL_SUCCESS);
          assert_int_equal(clFinish(oq), CL_SUCCESS);
          break;
        }
      checked++;
    }
    fixture_close(&f);
  }
  free(h);
  clReleaseMemObject(foreign);
  clReleaseCommandQueue(oq);
  clReleaseContext(other);
  print_message("%d slots of %zu entries checked\n", checked, (size_t)N_ENTRIES);
  if (failures) fail_msg("%d contract violations (listed above)", failures);
}

/* A profile asked of a context whose queue has no profiling: rejected before anything runs; the same call
 * without a profile runs. */
static void test_profile_needs_profiling_queue(void **state) {
  (void)state;
  cl_context c;
  cl_command_queue q;
  tu_other_cl_context(&c, &q);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create_from_queue(&ctx, c, q));
  int failures = 0;
  char why[1400];
  for (size_t k = 0; k < N_ENTRIES; k++) {
    const entry *e = entry_at(k);
    if (e->profile_part < 0) continue;
    fixture f;
    fixture_open(&f, e, ctx);
    camdelta_profile prof = {.kernel_ms = -1, .kernels = 77};
    fixture_args(&f, 0, NULL, &prof);
    const char *want[3] = {e->name, "'profile'", "CL_QUEUE_PROFILING_ENABLE"};
    if (!rejected(&f, ctx, f.part[0], f.part[1], NULL, NULL, want, 3, why, sizeof why))
      report(&failures, e, "a profile on a queue without profiling", why);
    else if (!runs(&f, NULL, why, sizeof why))
      report(&failures, e, "without a profile", why);
    fixture_close(&f);
  }
  camdelta_context_destroy(ctx);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
  if (failures) fail_msg("%d contract violations (listed above)", failures);
}

/* NULL ctx, NULL args (and NULL second struct), a saved object of another camdelta context. */
static void test_null_and_saved(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context(), *ctx2 = NULL;
  TU_OK(camdelta_context_create_from_queue(&ctx2, camdelta_context_cl_context(ctx), camdelta_context_queue(ctx)));
  int failures = 0;
  char why[1400];
  for (size_t k = 0; k < N_ENTRIES; k++) {
    const entry *e = entry_at(k);
    fixture f;
    fixture_open(&f, e, ctx);
    fixture_args(&f, 0, NULL, NULL);
    const char *want_ctx[2] = {e->name, "'ctx'"};
    if (!rejected(&f, NULL, f.part[0], f.part[1], NULL, NULL, want_ctx, 2, why, sizeof why))
      report(&failures, e, "NULL ctx", why);
    if (e->args_type) {
      const char *want[2] = {e->name, "'args'"};
      if (!rejected(&f, ctx, NULL, f.part[1], NULL, NULL, want, 2, why, sizeof why))
        report(&failures, e, "NULL args", why);
    }
    if (e->second_type) {
      char quoted[64];
      snprintf(quoted, sizeof quoted, "'%s'", e->second_name);
      const char *want[2] = {e->name, quoted};
      if (!rejected(&f, ctx, f.part[0], NULL, NULL, NULL, want, 2, why, sizeof why))
        report(&failures, e, "NULL second struct", why);
    }
    if (e->saved != NO_SAVED) {
      void *s = saved_for(ctx2, e->saved);
      const char *want[3] = {e->name, e->saved_param ? e->saved_param : "'saved'", "another context"};
      if (!rejected(&f, ctx, f.part[0], f.part[1], s, NULL, want, 3, why, sizeof why))
        report(&failures, e, "a saved object of another context", why);
      saved_free(e->saved, s);
    }
    fixture_close(&f);
  }
  camdelta_context_destroy(ctx2);
  if (failures) fail_msg("%d contract violations (listed above)", failures);
}

/* ------------------------------------------------------------------------ the table against the headers */

static char *read_header(const char *name) {
  const char *src = getenv("CAMDELTA_SOURCE_DIR");
  if (!src || !*src) fail_msg("CAMDELTA_SOURCE_DIR is not set: run through ctest");
  char path[1024];
  snprintf(path, sizeof path, "%s/include/%s", src, name);
  FILE *fp = fopen(path, "rb");
  if (!fp) fail_msg("cannot read %s", path);
  fseek(fp, 0, SEEK_END);
  const long n = ftell(fp);
  rewind(fp);
  char *text = malloc((size_t)n + 1);
  assert_int_equal(fread(text, 1, (size_t)n, fp), (size_t)n);
  text[n] = '\0';
  fclose(fp);
  /* comments and preprocessor lines become spaces */
  for (char *p = text; *p; p++) {
    if (p[0] == '/' && p[1] == '*') {
      char *end = strstr(p + 2, "*/");
      end = end ? end + 2 : p + strlen(p);
      memset(p, ' ', (size_t)(end - p));
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') *p++ = ' ';
    } else if (*p == '#' && (p == text || p[-1] == '\n')) {
      while (*p && *p != '\n') *p++ = ' ';
    }
    if (!*p) break;
  }
  return text;
}

/* The headers of the core library (camdelta_mpi.h is the MPI component's). */
static const char *const HEADERS[] = {"camdelta.h", "camdelta_summary.h", "camdelta_packed.h", "camdelta_helpers.h",
                                      "camdelta_phases.h", "camdelta_stream.h"};

/* Collapses whitespace runs of s[0..n) into single spaces, into out. */
static void squeeze(const char *s, size_t n, char *out, size_t size) {
  size_t o = 0;
  int space = 0;
  for (size_t i = 0; i < n && o + 1 < size; i++) {
    if (isspace((unsigned char)s[i])) {
      space = o > 0;
      continue;
    }
    if (space && o + 2 < size) out[o++] = ' ';
    space = 0;
    out[o++] = s[i];
  }
  out[o] = '\0';
}

/* The names declared `camdelta_buffer a, b;` in the text of a declaration list (struct body or parameters, split
 * at `sep`), appended to names[] as one space-separated list. */
static void buffer_names(const char *body, size_t n, char sep, char *names, size_t size) {
  const char *p = body, *end = body + n;
  while (p < end) {
    const char *q = p;
    while (q < end && *q != sep) q++;
    char decl[512];
    squeeze(p, (size_t)(q - p), decl, sizeof decl);
    if (strncmp(decl, "camdelta_buffer ", 16) == 0) {
      for (char *t = strtok(decl + 16, ", "); t; t = strtok(NULL, ", ")) {
        strncat(names, t, size - strlen(names) - 1);
        strncat(names, " ", size - strlen(names) - 1);
      }
    }
    p = q + 1;
  }
}

/* The camdelta_buffer fields of `typedef struct type {...} type;` in the headers ("" when there is none). */
static int struct_buffers(char *const *texts, const char *type, char *names, size_t size) {
  names[0] = '\0';
  char open[160];
  snprintf(open, sizeof open, "typedef struct %s {", type);
  for (size_t h = 0; h < N_OF(HEADERS); h++) {
    const char *s = strstr(texts[h], open);
    if (!s) continue;
    const char *body = s + strlen(open), *close = strchr(body, '}');
    assert_non_null(close);
    buffer_names(body, (size_t)(close - body), ';', names, size);
    return 1;
  }
  return 0;
}

/* The slot names of `part` of entry e in the table, in the headers' format. */
static void table_names(const entry *e, int part, char *names, size_t size) {
  names[0] = '\0';
  for (size_t i = 0; i < e->nslots; i++)
    if (e->slots[i].part == part) {
      strncat(names, e->slots[i].name, size - strlen(names) - 1);
      strncat(names, " ", size - strlen(names) - 1);
    }
}

/* Every public function that takes a context and an argument struct or a buffer enqueues work: it has a row in
 * the table (or is listed as not enqueuing), and each row's buffers are its structs' camdelta_buffer fields in the
 * headers' order. */
static void test_table_matches_headers(void **state) {
  (void)state;
  char *texts[N_OF(HEADERS)];
  for (size_t h = 0; h < N_OF(HEADERS); h++) texts[h] = read_header(HEADERS[h]);
  int failures = 0, found = 0;
  for (size_t h = 0; h < N_OF(HEADERS); h++) {
    for (const char *p = strstr(texts[h], "CAMDELTA_API"); p; p = strstr(p + 1, "CAMDELTA_API")) {
      const char *paren = strchr(p, '('), *semi = strchr(p, ';');
      if (!paren || !semi || semi < paren) continue;
      const char *ne = paren;
      while (ne > p && isspace((unsigned char)ne[-1])) ne--;
      const char *nb = ne;
      while (nb > p && (isalnum((unsigned char)nb[-1]) || nb[-1] == '_')) nb--;
      char name[128], params[1024];
      snprintf(name, sizeof name, "%.*s", (int)(ne - nb), nb);
      const char *close = strchr(paren, ')');
      squeeze(paren + 1, (size_t)(close - paren - 1), params, sizeof params);
      if (strncmp(params, "camdelta_context *", 18) != 0) continue;
      if (!strstr(params, "_args *") && !strstr(params, "camdelta_buffer ")) continue;
      int known = 0;
      for (size_t i = 0; i < N_OF(NOT_ENQUEUING); i++) known |= strcmp(name, NOT_ENQUEUING[i]) == 0;
      if (known) continue;
      const entry *e = NULL;
      for (size_t k = 0; k < N_ENTRIES; k++)
        if (strcmp(entry_at(k)->name, name) == 0) e = entry_at(k);
      found++;
      if (!e) {
        print_message("FAIL %s (%s): an enqueuing entry without a row in this test's table\n", name, HEADERS[h]);
        failures++;
        continue;
      }
      char want[1024], have[1024];
      for (int part = 0; part < 2; part++) {
        const char *type = part ? e->second_type : e->args_type;
        if (part == 0 && !type) {
          want[0] = '\0';
          buffer_names(paren + 1, (size_t)(close - paren - 1), ',', want, sizeof want);
        } else if (type && !struct_buffers(texts, type, want, sizeof want)) {
          print_message("FAIL %s: struct %s not found in the headers\n", name, type);
          failures++;
          continue;
        } else if (!type) {
          want[0] = '\0';
        }
        table_names(e, part, have, sizeof have);
        if (strcmp(want, have) != 0) {
          print_message("FAIL %s: the headers' buffers of %s are \"%s\", the table's \"%s\"\n", name,
                        type ? type : "the parameters", want, have);
          failures++;
        }
      }
    }
  }
  for (size_t h = 0; h < N_OF(HEADERS); h++) free(texts[h]);
  if (found != (int)N_ENTRIES) {
    print_message("FAIL the headers declare %d enqueuing entries, the table has %zu rows\n", found,
                  (size_t)N_ENTRIES);
    failures++;
  }
  if (failures) fail_msg("%d differences between the table and the headers (listed above)", failures);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_matches_headers),
      cmocka_unit_test(test_null_and_saved),
      cmocka_unit_test(test_foreign_buffer_in_every_slot),
      cmocka_unit_test(test_profile_needs_profiling_queue),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, tu_teardown_context);
  camdelta_scan_frames_destroy(phase_frames);
  camdelta_stream_destroy(prepared_stream);
  return failed;
}
