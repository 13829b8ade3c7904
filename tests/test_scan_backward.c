/* Scan backward on the device against the f64 reference (docs/math.md §4, §5): both directions, with and
 * without init/final states, from saved forward states and recomputed, odd shapes and offsets, decay = 0,
 * determinism, and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "scan/cpu.h"
#include "scan/engine.h"
#include "testutil.h"
#include "scan/tc.h"

#define BOUND 1e-4

enum { SAVED_NONE = 0, SAVED_REF = 1, SAVED_FORWARD = 2 };

typedef struct sb_case {
  size_t B, H, D, F, S;
  int reverse;
  int init;   /* init_state given (and dinit_state asked for) */
  int gfinal; /* grad_final_state given */
  int saved;  /* SAVED_*: recompute, states from the f64 reference, states from camdelta_scan_forward */
  size_t off; /* element offset of every device tensor */
  int zero_decay; /* decay of frame 1 (or 0) is exactly 0 */
  camdelta_scan_algorithm algo; /* of the device forward (SAVED_FORWARD) */
} sb_case;

typedef struct sb_problem {
  sb_case c;
  size_t N, elems, gates, BHF, BHDD;
  float *in[8]; /* q k v beta decay init grad_out grad_final */
  size_t count[8];
} sb_problem;

enum { IQ, IK, IV, IBETA, IDECAY, IINIT, IGO, IGF };
enum { OQ, OK_, OV, OBETA, ODECAY, OINIT, NOUT };
static const char *out_names[NOUT] = {"dq", "dk", "dv", "dbeta", "ddecay", "dinit_state"};
static double worst[NOUT];

static void problem_init(sb_problem *p, const sb_case *c, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->c = *c;
  p->N = c->F * c->S;
  p->elems = c->B * c->H * c->D * p->N;
  p->gates = c->B * c->H * c->F * c->S;
  p->BHF = c->B * c->H * c->F;
  p->BHDD = c->B * c->H * c->D * c->D;
  const size_t counts[8] = {p->elems, p->elems, p->elems, p->gates, p->BHF, p->BHDD, p->elems, p->BHDD};
  tu_seed(seed);
  for (int i = 0; i < 8; i++) {
    p->count[i] = counts[i];
    p->in[i] = malloc(counts[i] * sizeof(float));
    assert_non_null(p->in[i]);
  }
  /* keys scaled like k_scale = (D S)^-1/2 keep I - K^T b K a contraction */
  tu_fill_normal(p->in[IQ], p->elems, 1.0);
  tu_fill_normal(p->in[IK], p->elems, 1.0 / sqrt((double)(c->D * c->S)));
  tu_fill_normal(p->in[IV], p->elems, 1.0);
  tu_fill_uniform(p->in[IBETA], p->gates, 0.0, 1.0);
  tu_fill_uniform(p->in[IDECAY], p->BHF, 0.5, 1.0);
  tu_fill_normal(p->in[IINIT], p->BHDD, 0.5);
  tu_fill_normal(p->in[IGO], p->elems, 1.0);
  tu_fill_normal(p->in[IGF], p->BHDD, 1.0);
  if (c->zero_decay)
    for (size_t bh = 0; bh < c->B * c->H; bh++) p->in[IDECAY][bh * c->F + (c->F > 1 ? 1 : 0)] = 0.0f;
}

static void problem_free(sb_problem *p) {
  for (int i = 0; i < 8; i++) free(p->in[i]);
}

static size_t out_count(const sb_problem *p, int o) {
  return o <= OV ? p->elems : o == OBETA ? p->gates : o == ODECAY ? p->BHF : p->BHDD;
}

/* f64 reference gradients (NOUT arrays, malloc'd); states (state_post) when asked. */
static void problem_reference(const sb_problem *p, double *ref[NOUT], double **state_post) {
  double *in[8];
  for (int i = 0; i < 8; i++) in[i] = tu_to_f64(p->in[i], p->count[i]);
  const sb_case *c = &p->c;
  camdelta_ref_scan r = {c->B, c->H, c->D, c->F, c->S, c->reverse, in[IQ], in[IK], in[IV], in[IBETA], in[IDECAY],
                         c->init ? in[IINIT] : NULL, NULL, NULL, NULL, NULL};
  for (int o = 0; o < NOUT; o++) {
    ref[o] = malloc(out_count(p, o) * sizeof(double));
    assert_non_null(ref[o]);
  }
  camdelta_ref_scan_grads g = {in[IGO], c->gfinal ? in[IGF] : NULL, ref[OQ], ref[OK_], ref[OV], ref[OBETA],
                               ref[ODECAY], ref[OINIT]};
  TU_OK(camdelta_ref_scan_backward(&r, &g));
  if (state_post) {
    *state_post = malloc(p->BHF * c->D * c->D * sizeof(double));
    assert_non_null(*state_post);
    r.state_post = *state_post;
    TU_OK(camdelta_ref_scan_forward(&r));
  }
  for (int i = 0; i < 8; i++) free(in[i]);
}

/* A saved object filled by hand from reference states (used until/besides the device forward). */
static camdelta_scan_saved *saved_from_states(const sb_problem *p, const double *state_post) {
  camdelta_scan_saved *s = calloc(1, sizeof *s);
  assert_non_null(s);
  const size_t n = p->BHF * p->c.D * p->c.D;
  float *f = malloc(n * sizeof(float));
  assert_non_null(f);
  for (size_t i = 0; i < n; i++) f[i] = (float)state_post[i];
  s->ctx = tu_context();
  s->state_post = tu_upload(f, n * sizeof(float));
  s->state_pre = NULL;
  s->bytes = n * sizeof(float);
  s->B = p->c.B, s->H = p->c.H, s->D = p->c.D, s->F = p->c.F, s->S = p->c.S;
  s->reverse = p->c.reverse, s->has_init = p->c.init, s->valid = 1;
  free(f);
  return s;
}

static void saved_free_by_hand(camdelta_scan_saved *s) {
  if (s->state_post) clReleaseMemObject(s->state_post);
  free(s);
}

typedef struct sb_device {
  cl_mem in[8];
  cl_mem out[NOUT];
} sb_device;

static void device_init(sb_device *d, const sb_problem *p) {
  const size_t off = p->c.off;
  for (int i = 0; i < 8; i++) d->in[i] = tu_upload_at(p->in[i], p->count[i], sizeof(float), off, 0xFF);
  for (int o = 0; o < NOUT; o++) d->out[o] = tu_buffer((out_count(p, o) + off) * sizeof(float));
}

static void device_free(sb_device *d) {
  for (int i = 0; i < 8; i++) clReleaseMemObject(d->in[i]);
  for (int o = 0; o < NOUT; o++) clReleaseMemObject(d->out[o]);
}

static camdelta_scan_backward_args make_args(const sb_problem *p, const sb_device *d, camdelta_profile *prof) {
  const sb_case *c = &p->c;
  const size_t off = c->off;
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = c->B, a.H = c->H, a.D = c->D, a.F = c->F, a.S = c->S, a.reverse = c->reverse;
  /* the argument slot of each of d's buffers (none: the case leaves the optional ones out) */
  camdelta_buffer *const in[8] = {[IQ] = &a.q, [IK] = &a.k, [IV] = &a.v, [IBETA] = &a.beta, [IDECAY] = &a.decay,
                                  [IINIT] = c->init ? &a.init_state : NULL, [IGO] = &a.grad_out,
                                  [IGF] = c->gfinal ? &a.grad_final_state : NULL};
  camdelta_buffer *const out[NOUT] = {[OQ] = &a.dq, [OK_] = &a.dk, [OV] = &a.dv, [OBETA] = &a.dbeta,
                                      [ODECAY] = &a.ddecay, [OINIT] = c->init ? &a.dinit_state : NULL};
  for (int i = 0; i < 8; i++)
    if (in[i]) *in[i] = (camdelta_buffer){d->in[i], off};
  for (int o = 0; o < NOUT; o++)
    if (out[o]) *out[o] = (camdelta_buffer){d->out[o], off};
  a.profile = prof;
  return a;
}

/* p's buffers on the device (into d) and the arguments naming them, without a profile. */
static camdelta_scan_backward_args device_args(const sb_problem *p, sb_device *d) {
  device_init(d, p);
  return make_args(p, d, NULL);
}

static float *download_out(const sb_problem *p, const sb_device *d, int o) {
  const size_t n = out_count(p, o);
  float *x = malloc(n * sizeof(float));
  assert_non_null(x);
  tu_download(d->out[o], p->c.off * sizeof(float), n * sizeof(float), x);
  return x;
}

static const char *describe(const sb_case *c) {
  static char buf[160];
  snprintf(buf, sizeof buf, "B=%zu H=%zu D=%zu F=%zu S=%zu %s init=%d gfinal=%d saved=%d off=%zu zero_decay=%d",
           c->B, c->H, c->D, c->F, c->S, c->reverse ? "reverse" : "causal", c->init, c->gfinal, c->saved, c->off,
           c->zero_decay);
  return buf;
}

static camdelta_context *g_ctx; /* the context under test when not the shared one (the emulated tensor cores) */
static unsigned g_kernels;      /* launches of the last run_case's backward */

/* Runs one case; returns 1 (a failure fails the test). */
static int run_case(const sb_case *c, double *ms) {
  camdelta_context *ctx = g_ctx ? g_ctx : tu_context();
  sb_problem p;
  problem_init(&p, c, 7000 + c->D * 31 + c->F * 7 + c->S + (uint64_t)c->reverse * 3 + (uint64_t)c->init * 5);
  double *ref[NOUT], *state_post = NULL;
  problem_reference(&p, ref, c->saved == SAVED_REF ? &state_post : NULL);
  sb_device d;
  device_init(&d, &p);
  camdelta_scan_saved *saved = NULL;
  camdelta_scan_algorithm fwd_alg = CAMDELTA_SCAN_AUTO;
  if (c->saved == SAVED_REF) saved = saved_from_states(&p, state_post);
  if (c->saved == SAVED_FORWARD) {
    TU_OK(camdelta_scan_saved_create(ctx, &saved));
    cl_mem out = tu_buffer((p.elems + c->off) * sizeof(float));
    camdelta_scan_args fa;
    memset(&fa, 0, sizeof fa);
    fa.B = c->B, fa.H = c->H, fa.D = c->D, fa.F = c->F, fa.S = c->S, fa.reverse = c->reverse;
    fa.algorithm = c->algo;
    fa.q = (camdelta_buffer){d.in[IQ], c->off};
    fa.k = (camdelta_buffer){d.in[IK], c->off};
    fa.v = (camdelta_buffer){d.in[IV], c->off};
    fa.beta = (camdelta_buffer){d.in[IBETA], c->off};
    fa.decay = (camdelta_buffer){d.in[IDECAY], c->off};
    fa.out = (camdelta_buffer){out, c->off};
    fa.used = &fwd_alg;
    if (c->init) fa.init_state = (camdelta_buffer){d.in[IINIT], c->off};
    camdelta_status st = camdelta_scan_forward(ctx, &fa, saved);
    clReleaseMemObject(out);
    TU_OK(st); /* the forward exists for every shape here: UNSUPPORTED is a failure, not a skip */
  }
  camdelta_profile prof = {0, 0};
  camdelta_scan_backward_args a = make_args(&p, &d, &prof);
  TU_OK(camdelta_scan_backward(ctx, &a, saved));
  /* grams, chain, frames, ddecay; with tensor cores two grams (W; A, U) and dq apart, one gram (W) when the saved
   * object holds the chunkwise forward's A_f */
  const int reused_a = c->saved == SAVED_FORWARD && fwd_alg == CAMDELTA_SCAN_CHUNKWISE;
  if (c->saved == SAVED_FORWARD) assert_true(fwd_alg == CAMDELTA_SCAN_SEQUENTIAL || fwd_alg == CAMDELTA_SCAN_CHUNKWISE);
  /* the CPU forms: W in its own launch, then A (and U) unless reused; more where the driver's loop budget splits the
   * grams' tokens or the chains' frames over launches */
  const unsigned launches = cd_tc_available(ctx)    ? (reused_a ? 5u : 6u)
                            : cd_scan_cpu_forms(ctx, c->D) ? (reused_a ? 4u : 5u)
                                                     : 4u;
  if (cd_loop_budget(ctx)) assert_true(prof.kernels >= launches);
  else assert_int_equal(prof.kernels, launches);
  g_kernels = prof.kernels;
  if (ms) *ms = prof.kernel_ms;
  for (int o = 0; o < NOUT; o++) {
    if (o == OINIT && !c->init) continue;
    float *got = download_out(&p, &d, o);
    const double e = tu_rel_err(got, ref[o], out_count(&p, o));
    if (e > worst[o]) worst[o] = e;
    if (e > BOUND) fail_msg("%s: %s rel err %.3g > %.3g", describe(c), out_names[o], e, BOUND);
    if (o == ODECAY && c->zero_decay == 0 && !c->init && !c->reverse)
      for (size_t bh = 0; bh < c->B * c->H; bh++) assert_true(got[bh * c->F] == 0.0f); /* state_in is exactly 0 */
    free(got);
  }
  if (c->saved == SAVED_REF) saved_free_by_hand(saved);
  if (c->saved == SAVED_FORWARD) camdelta_scan_saved_destroy(saved);
  free(state_post);
  device_free(&d);
  for (int o = 0; o < NOUT; o++) free(ref[o]);
  problem_free(&p);
  return 1;
}

/* Reports and resets the worst errors seen since the last report. */
static void report_worst(const char *prefix) { tu_report_worst(prefix, out_names, worst, NOUT); }

/* Medium shapes: both directions, init/final states on and off, recomputed and from saved states. */
static void test_scan_backward_medium(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++)
    for (int states = 0; states < 2; states++)
      for (int saved = SAVED_NONE; saved <= SAVED_REF; saved++) {
        sb_case c = {1, 3, 64, 5, 150, rev, states, states, saved, states ? 3 : 0, 0, CAMDELTA_SCAN_AUTO};
        assert_int_equal(run_case(&c, NULL), 1);
      }
  report_worst("scan_backward medium");
}

/* Odd shapes: every D path (DPT 8 and 16, tiny and large D), F = 1, partial token tiles, offsets, decay = 0. */
/* The constrained-device profiles' case (tests/run_profile.sh): the production head dim and a ragged one, both
 * directions, recomputed and from saved states, few tokens. */
static void test_scan_backward_profile(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++) {
    const sb_case c[2] = {{1, 2, 112, 3, 20, rev, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO},
                          {2, 1, 56, 2, 9, rev, 1, 1, SAVED_REF, 3, 0, CAMDELTA_SCAN_AUTO}};
    for (int i = 0; i < 2; i++) assert_int_equal(run_case(&c[i], NULL), 1);
  }
  report_worst("scan_backward profile");
}

static void test_scan_backward_shapes(void **state) {
  (void)state;
  static const sb_case cases[] = {
      {1, 1, 8, 4, 9, 0, 0, 0, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 1, 8, 4, 9, 1, 1, 1, SAVED_NONE, 1, 0, CAMDELTA_SCAN_AUTO},
      {2, 1, 16, 3, 64, 0, 1, 0, SAVED_REF, 0, 0, CAMDELTA_SCAN_AUTO},
      {2, 1, 16, 3, 64, 1, 0, 1, SAVED_REF, 2, 0, CAMDELTA_SCAN_AUTO},
      {1, 2, 32, 1, 33, 0, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 2, 32, 1, 33, 1, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 2, 32, 1, 33, 1, 0, 0, SAVED_REF, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 2, 24, 4, 20, 0, 1, 1, SAVED_NONE, 5, 1, CAMDELTA_SCAN_AUTO},
      {1, 2, 24, 4, 20, 1, 1, 1, SAVED_REF, 5, 1, CAMDELTA_SCAN_AUTO},
      {1, 1, 112, 3, 70, 0, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 1, 112, 3, 70, 1, 1, 1, SAVED_REF, 7, 0, CAMDELTA_SCAN_AUTO},
      {1, 1, 120, 2, 40, 0, 0, 1, SAVED_REF, 0, 0, CAMDELTA_SCAN_AUTO},
      {1, 1, 120, 2, 40, 1, 1, 0, SAVED_NONE, 0, 1, CAMDELTA_SCAN_AUTO},
      {1, 1, 128, 2, 65, 0, 1, 1, SAVED_REF, 0, 1, CAMDELTA_SCAN_AUTO},
      {1, 1, 128, 2, 65, 1, 1, 1, SAVED_NONE, 3, 0, CAMDELTA_SCAN_AUTO},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) assert_int_equal(run_case(&cases[i], NULL), 1);
  report_worst("scan_backward shapes");
}

/* The production head dim on a medium shape, both directions, states on: the 1e-4 bound and kernel times. */
static void test_scan_backward_d112(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++) {
    sb_case c = {1, 2, 112, 4, 300, rev, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
    double ms = 0;
    assert_int_equal(run_case(&c, &ms), 1);
    tu_report(rev ? "scan_backward B1 H2 D112 F4 S300 reverse ms" : "scan_backward B1 H2 D112 F4 S300 causal ms", ms);
  }
  report_worst("scan_backward d112");
}

/* Saved states from the device forward, when it is available. */
static void test_scan_backward_from_forward(void **state) {
  (void)state;
  int ran = 0;
  for (int algo = CAMDELTA_SCAN_SEQUENTIAL; algo <= CAMDELTA_SCAN_CHUNKWISE; algo++)
    for (int rev = 0; rev < 2; rev++)
      for (int states = 0; states < 2; states++) {
        sb_case c = {1, 2, 32, 4, 50, rev, states, states, SAVED_FORWARD, states, 0, (camdelta_scan_algorithm)algo};
        ran += run_case(&c, NULL);
      }
  assert_int_equal(ran, 8); /* every case ran */
  report_worst("scan_backward from forward");
}

/* The emulated tensor-core path (where the device has none): from a chunkwise forward's saved object the backward
 * reads A_f (one gram kernel fewer, checked in run_case), from a sequential one it computes A_f; both meet the
 * bound against the reference. */
static void test_scan_backward_saved_a_emulated(void **state) {
  (void)state;
  if (cd_tc_available(tu_context())) return; /* the real path ran in test_scan_backward_from_forward */
  g_ctx = tu_context_tc_emulated();
  assert_true(cd_tc_available(g_ctx));
  int ran = 0;
  for (int algo = CAMDELTA_SCAN_SEQUENTIAL; algo <= CAMDELTA_SCAN_CHUNKWISE; algo++)
    for (int rev = 0; rev < 2; rev++) {
      sb_case c = {1, 2, 16, 3, 21, rev, 1, 1, SAVED_FORWARD, 1, 0, (camdelta_scan_algorithm)algo};
      ran += run_case(&c, NULL);
    }
  camdelta_context_destroy(g_ctx);
  g_ctx = NULL;
  assert_int_equal(ran, 4);
  report_worst("scan_backward saved A (emulated tensor cores)");
}

/* Two runs give bit-identical gradients (fixed reduction orders, no atomics). */
static void test_scan_backward_deterministic(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  for (int rev = 0; rev < 2; rev++) {
    sb_case c = {1, 2, 48, 3, 100, rev, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
    sb_problem p;
    problem_init(&p, &c, 99 + (uint64_t)rev);
    sb_device d[2];
    float *got[2][NOUT];
    for (int r = 0; r < 2; r++) {
      camdelta_scan_backward_args a = device_args(&p, &d[r]);
      TU_OK(camdelta_scan_backward(ctx, &a, NULL));
      for (int o = 0; o < NOUT; o++) got[r][o] = download_out(&p, &d[r], o);
    }
    for (int o = 0; o < NOUT; o++) {
      assert_memory_equal(got[0][o], got[1][o], out_count(&p, o) * sizeof(float));
      free(got[0][o]), free(got[1][o]);
    }
    device_free(&d[0]), device_free(&d[1]);
    problem_free(&p);
  }
}

/* Expects `st` and that no output was written (still the 0xFF poison). */
static void expect_rejected(camdelta_status st, camdelta_status want, const sb_problem *p, const sb_device *d,
                            const char *needle) {
  if (st != want)
    fail_msg("expected %s, got %s: %s", camdelta_status_name(want), camdelta_status_name(st), camdelta_last_message());
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("message '%s' does not mention '%s'", camdelta_last_message(), needle);
  for (int o = 0; o < NOUT; o++) {
    const size_t n = out_count(p, o);
    unsigned char *x = malloc(n * sizeof(float));
    assert_non_null(x);
    tu_download(d->out[o], 0, n * sizeof(float), x);
    for (size_t i = 0; i < n * sizeof(float); i++)
      if (x[i] != 0xFF) fail_msg("output %s written by a rejected call", out_names[o]);
    free(x);
  }
}

/* The backward plan of shape (B, H, D, F, S) on the test context. */
static void plan_of(size_t B, size_t H, size_t D, size_t F, size_t S, char *buf, size_t size) {
  camdelta_scan_backward_args a = CAMDELTA_SCAN_BACKWARD_ARGS_INIT;
  a.B = B, a.H = H, a.D = D, a.F = F, a.S = S;
  TU_OK(camdelta_scan_backward_plan_describe(tu_context(), &a, buf, size));
}

/* The backward plan line of tu_context() for the tile-override shape. */
static void bwd_plan(char *buf, size_t size) { plan_of(1, 2, 32, 3, 45, buf, size); }

/* Unless the tensor-core path runs (its plan differs), the backward plan of (B, H, D, F, S) shows `needle`. */
static void fma_plan_says(size_t B, size_t H, size_t D, size_t F, size_t S, const char *needle) {
  char plan[1024];
  plan_of(B, H, D, F, S, plan, sizeof plan);
  if (!cd_tc_available(tu_context()) && !strstr(plan, needle)) fail_msg("plan '%s' does not show '%s'", plan, needle);
}

/* CAMDELTA_SCAN_BWD_TILES (read at context creation) and camdelta_tune_set "backward": other tiles give the same
 * gradients and show in the plan; bad lists and tiles fail cleanly. */
static void test_scan_backward_tile_override(void **state) {
  (void)state;
  /* tiles of at most 32 work-items per kernel, within every device's limit (Rusticl's kernels allow 32) */
  static const char *const good[] = {"RPT=8,TSG=8,CB=4,DPT=8,TL=4,TPT=3,MC=4,RL=16",
                                     "RPT=8,DPT=8,TL=4,TPT=1,MC=8,TSG=16,RL=16"};
  static const char *const shown[] = {"RPT=8 TSG=8; chain fma W=32 CB=4", "DPT=8 TL=4 TPT=1 MC=8"};
  char plain[1024], plan[1024];
  /* the FMA kernels' tiles: where the tensor-core path runs (NVIDIA) it replaces them in some phases, on CPUs the
   * CPU forms replace them all */
  char *was_cpu = tu_env_saved("CAMDELTA_SCAN_CPU");
  assert_int_equal(setenv("CAMDELTA_SCAN_CPU", "0", 1), 0);
  tu_env_context("CAMDELTA_TC", "0");
  bwd_plan(plain, sizeof plain);
  assert_null(strstr(plain, "overridden"));
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    /* good[0] through the environment of a new context, good[1] through camdelta_tune_set */
    if (i == 0) {
      tu_env_context("CAMDELTA_SCAN_BWD_TILES", good[i]);
      (void)tu_context();
      assert_int_equal(unsetenv("CAMDELTA_SCAN_BWD_TILES"), 0); /* read at creation: no effect from here on */
    } else {
      TU_OK(camdelta_tune_set(tu_context(), "backward", good[i]));
    }
    bwd_plan(plan, sizeof plan);
    if (!strstr(plan, shown[i]) || !strstr(plan, "(tiles overridden)"))
      fail_msg("plan '%s' does not show the override '%s'", plan, shown[i]);
    char got[1024];
    TU_OK(camdelta_tune_get(tu_context(), "backward", 32, got, sizeof got));
    assert_non_null(strstr(got, "(override)"));
    for (int rev = 0; rev < 2; rev++) {
      sb_case c = {1, 2, 32, 3, 45, rev, 1, 1, rev ? SAVED_REF : SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
      assert_int_equal(run_case(&c, NULL), 1);
    }
  }
  report_worst("scan_backward tile override");
  TU_OK(camdelta_tune_set(tu_context(), "backward", NULL));
  bwd_plan(plan, sizeof plan);
  assert_string_equal(plan, plain);
  tu_tune_refused(tu_context(), "backward", "TL", NULL);
  static const struct {
    const char *value, *needle;
    camdelta_status want;
  } bad[] = {
      {"RPT=6", "RPT must be", CAMDELTA_ERROR_UNSUPPORTED},
      {"TSG=12", "TSG must be", CAMDELTA_ERROR_UNSUPPORTED},
      {"DPT=12", "DPT must be", CAMDELTA_ERROR_UNSUPPORTED},
      {"MC=3", "MC must divide", CAMDELTA_ERROR_UNSUPPORTED},
      {"RL=48", "RL must be", CAMDELTA_ERROR_UNSUPPORTED},
      {"TL=4096,DPT=4", "the device allows", CAMDELTA_ERROR_UNSUPPORTED},
      {"TSG=4000", "the device allows", CAMDELTA_ERROR_UNSUPPORTED},
  };
  sb_case c = {1, 2, 16, 3, 10, 0, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
  sb_problem p;
  problem_init(&p, &c, 6);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    /* a context created with the bad value: the call and the plan fail, nothing written */
    tu_env_context("CAMDELTA_SCAN_BWD_TILES", bad[i].value);
    sb_device d;
    const camdelta_scan_backward_args a = device_args(&p, &d);
    expect_rejected(camdelta_scan_backward(tu_context(), &a, NULL), bad[i].want, &p, &d, bad[i].needle);
    char text[1024];
    assert_int_equal(camdelta_scan_backward_plan_describe(tu_context(), &a, text, sizeof text), bad[i].want);
    device_free(&d);
  }
  assert_int_equal(unsetenv("CAMDELTA_SCAN_BWD_TILES"), 0);
  /* what the option registry refuses (a key or value outside its declaration) fails the context's creation */
  static const char *const refused[] = {"RPT=4,FOO=1", "TL", "TL=-1", "RL=4097"};
  tu_check_bad_env("CAMDELTA_SCAN_BWD_TILES", refused, sizeof refused / sizeof *refused);
  tu_env_context("CAMDELTA_SCAN_CPU", was_cpu);
  free(was_cpu);
  tu_env_context("CAMDELTA_TC", NULL);
  sb_device d;
  const camdelta_scan_backward_args a = device_args(&p, &d);
  TU_OK(camdelta_scan_backward(tu_context(), &a, NULL));
  device_free(&d);
  problem_free(&p);
}

/* A device whose kernels allow fewer work-items than D (Mesa Rusticl on llvmpipe reports 32 for every kernel): the
 * FMA chain (the CPU forms off: they are one work-item per group) takes several rows per item instead of refusing
 * the shape, says so in the plan, and the gradients hold. */
static void test_scan_backward_small_kernel_limit(void **state) {
  (void)state;
  char *was = tu_limits_saved(), *was_cpu = tu_scan_cpu_off();
  tu_limits_env(NULL, "wg=32");
  fma_plan_says(1, 2, 56, 3, 20, "chain fma W=28 CB=8 CR=2"); /* the chain's two rows per item */
  for (int rev = 0; rev < 2; rev++) {
    sb_case c = {1, 2, 56, 3, 20, rev, 1, 1, rev ? SAVED_REF : SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
    assert_int_equal(run_case(&c, NULL), 1);
  }
  report_worst("scan_backward kernel limit 32");
  tu_scan_cpu_restore(was_cpu);
  tu_limits_restore(was);
}

/* A driver that ends a work-item's loops after a number of iterations per launch (Mesa's llvmpipe: 65535), emulated
 * with CAMDELTA_DEVICE_LIMITS loops=N: the grams sum each frame's tokens over several launches and the chains run in
 * launches of a few frames, with the same gradients; a budget too small for one chunk fails with a message. The
 * work-group forms (scan CPU=0; the CPU forms' are test_scan_cpu's). */
static void test_scan_backward_loop_budget(void **state) {
  (void)state;
  char *was = tu_limits_saved(), *was_cpu = tu_scan_cpu_off();
  tu_limits_env(was, "loops=5000");
  for (int rev = 0; rev < 2; rev++)
    for (int saved = SAVED_NONE; saved <= SAVED_REF; saved++) {
      sb_case c = {1, 2, 32, 40, 200, rev, 1, 1, saved, 0, 0, CAMDELTA_SCAN_AUTO};
      assert_int_equal(run_case(&c, NULL), 1);
      if (!cd_tc_available(tu_context())) assert_true(g_kernels > 4); /* the tensor-core grams are not split */
    }
  report_worst("scan_backward loop budget");
  fma_plan_says(1, 2, 32, 40, 200, "the driver's loop budget: grams"); /* how the grams and the chain split */
  tu_limits_env(was, "loops=100");
  sb_case c = {1, 2, 32, 3, 40, 0, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
  sb_problem p;
  problem_init(&p, &c, 9);
  sb_device d;
  const camdelta_scan_backward_args a = device_args(&p, &d);
  expect_rejected(camdelta_scan_backward(tu_context(), &a, NULL), CAMDELTA_ERROR_UNSUPPORTED, &p, &d,
                  "loops after 100 iterations");
  device_free(&d);
  problem_free(&p);
  tu_scan_cpu_restore(was_cpu);
  tu_limits_restore(was);
}

static void test_scan_backward_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  sb_case c = {1, 2, 16, 3, 10, 0, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
  sb_problem p;
  problem_init(&p, &c, 5);
  sb_device d;
  const camdelta_scan_backward_args good = device_args(&p, &d);
  camdelta_scan_backward_args a;

  expect_rejected(camdelta_scan_backward(NULL, &good, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "ctx");
  expect_rejected(camdelta_scan_backward(ctx, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "args");
  a = good, a.D = 12;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_UNSUPPORTED, &p, &d, "D=12");
  a = good, a.D = 136;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_UNSUPPORTED, &p, &d, "D=136");
  a = good, a.F = 0;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_SHAPE, &p, &d, "F=0");
  a = good, a.S = 0;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_SHAPE, &p, &d, "S=0");
  a = good, a.B = SIZE_MAX / 2;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_OVERFLOW, &p, &d, "overflow");
  /* every required tensor missing, and one element too small */
  const char *names[] = {"q", "k", "v", "beta", "decay", "grad_out", "dq", "dk", "dv", "dbeta", "ddecay"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    camdelta_buffer *fields[] = {&a.q, &a.k, &a.v, &a.beta, &a.decay, &a.grad_out, &a.dq, &a.dk, &a.dv, &a.dbeta,
                                 &a.ddecay};
    a = good;
    fields[i]->mem = NULL;
    char needle[64];
    snprintf(needle, sizeof needle, "'%s'", names[i]);
    expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, needle);
    a = good;
    fields[i]->offset = 1;
    expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &p, &d, needle);
  }
  a = good, a.init_state.offset = 1;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &p, &d, "init_state");
  a = good, a.grad_final_state.offset = 1;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &p, &d, "grad_final_state");
  a = good, a.dinit_state.offset = 1;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &p, &d, "dinit_state");
  a = good, a.dk = a.dq;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "overlap");
  a = good, a.dq = a.q;
  expect_rejected(camdelta_scan_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "overlap");

  /* saved objects that do not match the call */
  double *ref[NOUT], *sp = NULL;
  problem_reference(&p, ref, &sp);
  camdelta_scan_saved *s = saved_from_states(&p, sp);
  s->valid = 0;
  expect_rejected(camdelta_scan_backward(ctx, &good, s), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "saved");
  s->valid = 1, s->S = 11;
  expect_rejected(camdelta_scan_backward(ctx, &good, s), CAMDELTA_ERROR_SHAPE, &p, &d, "saved");
  s->S = 10, s->reverse = 1;
  expect_rejected(camdelta_scan_backward(ctx, &good, s), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "reverse");
  s->reverse = 0, s->has_init = 0;
  expect_rejected(camdelta_scan_backward(ctx, &good, s), CAMDELTA_ERROR_INVALID_ARGUMENT, &p, &d, "init_state");
  s->has_init = 1;
  TU_OK(camdelta_scan_backward(ctx, &good, s)); /* and the matching one works */
  TU_OK(camdelta_finish(ctx));
  saved_free_by_hand(s);
  free(sp);
  for (int o = 0; o < NOUT; o++) free(ref[o]);
  device_free(&d);
  problem_free(&p);
}

/* The warm hook builds exactly the program a call uses: the call after it builds nothing. */
static void test_scan_backward_warm(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  assert_int_equal(cd_scan_backward_warm(ctx, 12), CAMDELTA_ERROR_UNSUPPORTED);
  TU_OK(cd_scan_backward_warm(ctx, 40));
  camdelta_build_stats before, after;
  TU_OK(camdelta_context_build_stats(ctx, &before));
  sb_case c = {1, 1, 40, 2, 20, 1, 1, 1, SAVED_NONE, 0, 0, CAMDELTA_SCAN_AUTO};
  assert_int_equal(run_case(&c, NULL), 1);
  TU_OK(camdelta_context_build_stats(ctx, &after));
  assert_int_equal(after.programs, before.programs);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_scan_backward_medium),        cmocka_unit_test(test_scan_backward_shapes),
      cmocka_unit_test(test_scan_backward_profile),
      cmocka_unit_test(test_scan_backward_d112),          cmocka_unit_test(test_scan_backward_from_forward),
      cmocka_unit_test(test_scan_backward_deterministic), cmocka_unit_test(test_scan_backward_bad_input),
      cmocka_unit_test(test_scan_backward_warm),          cmocka_unit_test(test_scan_backward_tile_override),
      cmocka_unit_test(test_scan_backward_saved_a_emulated), cmocka_unit_test(test_scan_backward_small_kernel_limit),
      cmocka_unit_test(test_scan_backward_loop_budget))
