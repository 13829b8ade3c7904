/* Scan forward (docs/math.md §3): both algorithms and directions against the f64 C reference, saved
 * states, segment chaining, the two algorithms against each other, and bad input.
 *
 * Shapes are chosen so that few kernel variants are built: on a CPU the variants depend on D and on
 * S <= 8 or not, and PoCL spends seconds compiling each; most small cases use D = 16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>

#include "runtime/internal.h"
#include "testutil.h"

#define BOUND 1e-5

/* Largest relative error seen per algorithm (0 sequential, 1 chunkwise) and direction (0 causal, 1 reverse). */
static double g_max_err[2][2];

typedef struct problem {
  size_t B, H, D, F, S, N;
  size_t n_tok, n_beta, n_decay, n_state, n_frames;
  float *q, *k, *v, *beta, *decay, *init;
} problem;

static void problem_make(problem *p, size_t B, size_t H, size_t D, size_t F, size_t S, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->B = B, p->H = H, p->D = D, p->F = F, p->S = S, p->N = F * S;
  p->n_tok = B * H * D * p->N;
  p->n_beta = B * H * F * S;
  p->n_decay = B * H * F;
  p->n_state = B * H * D * D;
  p->n_frames = B * H * F * D * D;
  tu_seed(seed);
  p->q = malloc(p->n_tok * sizeof(float));
  p->k = malloc(p->n_tok * sizeof(float));
  p->v = malloc(p->n_tok * sizeof(float));
  p->beta = malloc(p->n_beta * sizeof(float));
  p->decay = malloc(p->n_decay * sizeof(float));
  p->init = malloc(p->n_state * sizeof(float));
  assert_true(p->q && p->k && p->v && p->beta && p->decay && p->init);
  tu_fill_uniform(p->q, p->n_tok, -1.0, 1.0);
  /* keys scaled like the model's k_scale = D^-0.5·S^-0.5, so that I − Kᵀ·β·K stays contractive */
  tu_fill_normal(p->k, p->n_tok, 1.0 / sqrt((double)D * (double)S));
  tu_fill_normal(p->v, p->n_tok, 1.0);
  tu_fill_uniform(p->beta, p->n_beta, 0.0, 1.0);
  tu_fill_uniform(p->decay, p->n_decay, 0.6, 1.0);
  tu_fill_normal(p->init, p->n_state, 0.3);
}

static void problem_free(problem *p) {
  free(p->q), free(p->k), free(p->v), free(p->beta), free(p->decay), free(p->init);
  memset(p, 0, sizeof *p);
}

/* f64 reference results */
typedef struct ref_result {
  double *out, *final_state, *pre, *post;
} ref_result;

static void reference(const problem *p, int reverse, int with_init, int with_final, int with_states, ref_result *r) {
  double *q = tu_to_f64(p->q, p->n_tok), *k = tu_to_f64(p->k, p->n_tok), *v = tu_to_f64(p->v, p->n_tok);
  double *beta = tu_to_f64(p->beta, p->n_beta), *decay = tu_to_f64(p->decay, p->n_decay);
  double *init = with_init ? tu_to_f64(p->init, p->n_state) : NULL;
  r->out = malloc(p->n_tok * sizeof(double));
  r->final_state = with_final ? malloc(p->n_state * sizeof(double)) : NULL;
  r->pre = with_states ? malloc(p->n_frames * sizeof(double)) : NULL;
  r->post = with_states ? malloc(p->n_frames * sizeof(double)) : NULL;
  camdelta_ref_scan rs = {p->B, p->H, p->D, p->F, p->S, reverse, q, k, v, beta, decay, init,
                          r->out, r->final_state, r->pre, r->post};
  TU_OK(camdelta_ref_scan_forward(&rs));
  free(q), free(k), free(v), free(beta), free(decay), free(init);
}

static void ref_free(ref_result *r) {
  free(r->out), free(r->final_state), free(r->pre), free(r->post);
  memset(r, 0, sizeof *r);
}

/* Device run */
typedef struct dev_result {
  float *out, *final_state, *pre, *post;
  camdelta_scan_algorithm used;
  int refused; /* the sequential walk exceeds the driver's loop budget (nothing ran) */
} dev_result;

static void device_run(const problem *p, camdelta_scan_algorithm alg, int reverse, int with_init, int with_final,
                       int with_states, dev_result *r) {
  cl_mem q = tu_upload(p->q, p->n_tok * 4), k = tu_upload(p->k, p->n_tok * 4), v = tu_upload(p->v, p->n_tok * 4);
  cl_mem beta = tu_upload(p->beta, p->n_beta * 4), decay = tu_upload(p->decay, p->n_decay * 4);
  cl_mem init = with_init ? tu_upload(p->init, p->n_state * 4) : NULL;
  cl_mem out = tu_buffer(p->n_tok * 4), fin = with_final ? tu_buffer(p->n_state * 4) : NULL;
  camdelta_scan_saved *saved = NULL;
  if (with_states) TU_OK(camdelta_scan_saved_create(tu_context(), &saved));
  camdelta_scan_args a = {0};
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = p->F, a.S = p->S;
  a.reverse = reverse;
  a.algorithm = alg;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = out;
  a.init_state.mem = init, a.final_state.mem = fin;
  a.used = &r->used;
  const camdelta_status st = camdelta_scan_forward(tu_context(), &a, saved);
  /* a driver's loop budget may leave a frame of the sequential walk too long for one launch (Rusticl at D=112,
   * S=300: its kernels allow 32 items): refused with a message, never wrong numbers; AUTO runs chunkwise there */
  r->refused = st == CAMDELTA_ERROR_UNSUPPORTED && alg == CAMDELTA_SCAN_SEQUENTIAL && cd_loop_budget(tu_context()) &&
               strstr(camdelta_last_message(), "loops after");
  r->out = NULL, r->final_state = NULL, r->pre = NULL, r->post = NULL;
  if (!r->refused) TU_OK(st);
  else print_message("sequential %s B=%zu H=%zu D=%zu F=%zu S=%zu: %s\n", reverse ? "reverse" : "causal", p->B, p->H,
                     p->D, p->F, p->S, camdelta_last_message());
  if (r->refused) with_final = with_states = 0, camdelta_scan_saved_destroy(saved);
  else r->out = malloc(p->n_tok * 4);
  if (r->out) tu_download(out, 0, p->n_tok * 4, r->out);
  if (with_final) {
    r->final_state = malloc(p->n_state * 4);
    tu_download(fin, 0, p->n_state * 4, r->final_state);
  }
  if (with_states) {
    cl_mem pre, post;
    TU_OK(camdelta_scan_saved_states(saved, &pre, &post));
    r->pre = malloc(p->n_frames * 4);
    r->post = malloc(p->n_frames * 4);
    tu_download(pre, 0, p->n_frames * 4, r->pre);
    tu_download(post, 0, p->n_frames * 4, r->post);
    camdelta_scan_saved_destroy(saved);
  }
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
  clReleaseMemObject(decay), clReleaseMemObject(out);
  if (init) clReleaseMemObject(init);
  if (fin) clReleaseMemObject(fin);
}

static void dev_free(dev_result *r) {
  free(r->out), free(r->final_state), free(r->pre), free(r->post);
  memset(r, 0, sizeof *r);
}

static void check_err(const char *what, const problem *p, camdelta_scan_algorithm alg, int reverse, double err) {
  const int ai = alg == CAMDELTA_SCAN_CHUNKWISE;
  if (err > g_max_err[ai][reverse]) g_max_err[ai][reverse] = err;
  if (!(err <= BOUND))
    fail_msg("%s: %s %s B=%zu H=%zu D=%zu F=%zu S=%zu: relative error %.3g > %.0e", what,
             camdelta_scan_algorithm_name(alg), reverse ? "reverse" : "causal", p->B, p->H, p->D, p->F, p->S, err,
             BOUND);
}

/* One configuration, one algorithm, against the reference (computed by the caller). */
static void compare(const problem *p, const ref_result *ref, camdelta_scan_algorithm alg, int reverse, int with_init,
                    int with_final, int with_states) {
  dev_result d;
  device_run(p, alg, reverse, with_init, with_final, with_states, &d);
  if (d.refused) return;
  assert_int_equal(d.used, alg);
  check_err("out", p, alg, reverse, tu_rel_err(d.out, ref->out, p->n_tok));
  if (with_final) check_err("final_state", p, alg, reverse, tu_rel_err(d.final_state, ref->final_state, p->n_state));
  if (with_states) {
    check_err("state_pre", p, alg, reverse, tu_rel_err(d.pre, ref->pre, p->n_frames));
    check_err("state_post", p, alg, reverse, tu_rel_err(d.post, ref->post, p->n_frames));
  }
  dev_free(&d);
}

/* Both algorithms, one direction and option set. */
static void check_case(size_t B, size_t H, size_t D, size_t F, size_t S, int reverse, int with_init, int with_final,
                       int with_states, uint64_t seed) {
  problem p;
  problem_make(&p, B, H, D, F, S, seed);
  ref_result ref;
  reference(&p, reverse, with_init, with_final, with_states, &ref);
  compare(&p, &ref, CAMDELTA_SCAN_SEQUENTIAL, reverse, with_init, with_final, with_states);
  compare(&p, &ref, CAMDELTA_SCAN_CHUNKWISE, reverse, with_init, with_final, with_states);
  ref_free(&ref);
  problem_free(&p);
}

/* ------------------------------------------------------------------------------------- sweeps */

static void test_head_dims(void **state) {
  (void)state;
  static const size_t Ds[] = {8, 16, 32, 64, 112, 128};
  for (size_t i = 0; i < sizeof Ds / sizeof *Ds; i++)
    for (int rev = 0; rev < 2; rev++) check_case(1, 2, Ds[i], 5, 64, rev, 1, 1, 0, 100 + i * 2 + rev);
}

/* The constrained-device profiles' case (tests/run_profile.sh): the production head dim and a ragged one, both
 * algorithms and directions, states saved, few tokens. */
static void test_profile_shapes(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++) {
    check_case(1, 2, 112, 3, 20, rev, 1, 1, 1, 150 + rev);
    check_case(2, 1, 56, 2, 9, rev, !rev, 1, 0, 152 + rev);
  }
}

static void test_frame_sizes(void **state) {
  (void)state;
  static const size_t Ss[] = {1, 7, 64, 300};
  for (size_t i = 0; i < sizeof Ss / sizeof *Ss; i++)
    for (int rev = 0; rev < 2; rev++) check_case(2, 1, 16, 5, Ss[i], rev, i % 2, 1, 0, 200 + i * 2 + rev);
}

static void test_frame_counts(void **state) {
  (void)state;
  static const size_t Fs[] = {1, 2, 5, 21};
  for (size_t i = 0; i < sizeof Fs / sizeof *Fs; i++)
    for (int rev = 0; rev < 2; rev++) check_case(1, 1, 16, Fs[i], 7, rev, 1, 1, 0, 300 + i * 2 + rev);
}

static void test_batch_heads(void **state) {
  (void)state;
  static const size_t BH[][2] = {{1, 1}, {1, 3}, {3, 1}, {2, 3}, {3, 2}};
  for (size_t i = 0; i < sizeof BH / sizeof *BH; i++)
    for (int rev = 0; rev < 2; rev++) check_case(BH[i][0], BH[i][1], 16, 2, 7, rev, rev, !rev, 0, 400 + i * 2 + rev);
}

static void test_init_and_final_options(void **state) {
  (void)state;
  /* every combination of init_state / final_state, both directions */
  for (int rev = 0; rev < 2; rev++)
    for (int init = 0; init < 2; init++)
      for (int fin = 0; fin < 2; fin++) check_case(2, 1, 16, 3, 10, rev, init, fin, 0, 500 + rev * 4 + init * 2 + fin);
}

/* A shape run causal and reverse: init_state given or not in each direction, final_state given, states saved or not. */
typedef struct walk_case {
  size_t B, H, D, F, S;
  int init[2], states;
} walk_case;

/* check_case of each case causal, then reverse; case i's seeds seed0 + 2 i and seed0 + 2 i + 1. */
static void check_both_directions(const walk_case *c, size_t n, uint64_t seed0) {
  for (size_t i = 0; i < n; i++)
    for (int rev = 0; rev < 2; rev++)
      check_case(c[i].B, c[i].H, c[i].D, c[i].F, c[i].S, rev, c[i].init[rev], 1, c[i].states,
                 seed0 + 2 * i + (uint64_t)rev);
}

static void test_large_shapes(void **state) {
  (void)state;
  static const walk_case cases[] = {{1, 1, 112, 21, 64, {1, 1}, 0}, {1, 1, 128, 2, 300, {0, 1}, 0}};
  check_both_directions(cases, sizeof cases / sizeof *cases, 601);
}

/* The shapes where Mesa Rusticl on llvmpipe returned wrong outputs from the third frame on (its driver ends a
 * work-item's loops after 65535 iterations per launch): right on every device. */
static void test_long_walks(void **state) {
  (void)state;
  static const walk_case cases[] = {{1, 1, 56, 4, 64, {1, 1}, 1}, {1, 1, 112, 4, 65, {1, 0}, 0}};
  check_both_directions(cases, sizeof cases / sizeof *cases, 651);
}

/* One forward of p with algorithm alg; returns its status and the launches it made. */
static camdelta_status forward_launches(const problem *p, int reverse, unsigned *kernels, float *out_host,
                                        float *fin_host, camdelta_scan_algorithm alg) {
  cl_mem q = tu_upload(p->q, p->n_tok * 4), k = tu_upload(p->k, p->n_tok * 4), v = tu_upload(p->v, p->n_tok * 4);
  cl_mem beta = tu_upload(p->beta, p->n_beta * 4), decay = tu_upload(p->decay, p->n_decay * 4);
  cl_mem init = tu_upload(p->init, p->n_state * 4), out = tu_buffer(p->n_tok * 4), fin = tu_buffer(p->n_state * 4);
  camdelta_profile prof = {0, 0};
  camdelta_scan_algorithm used = CAMDELTA_SCAN_AUTO;
  camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = p->F, a.S = p->S, a.reverse = reverse, a.algorithm = alg;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = out;
  a.init_state.mem = init, a.final_state.mem = fin, a.profile = &prof, a.used = &used;
  const camdelta_status st = camdelta_scan_forward(tu_context(), &a, NULL);
  *kernels = prof.kernels;
  if (!st) {
    assert_int_equal(used, alg);
    tu_download(out, 0, p->n_tok * 4, out_host);
    tu_download(fin, 0, p->n_state * 4, fin_host);
  }
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
  clReleaseMemObject(decay), clReleaseMemObject(init), clReleaseMemObject(out), clReleaseMemObject(fin);
  return st;
}

/* The budget tests' setup: the device limits as they were (*state[0], which the tests extend) and the scan's
 * work-group forms (scan CPU=0; *state[1] the setting before); the teardown gives both back. */
static int budget_setup(void **state) {
  char **was = malloc(2 * sizeof *was);
  assert_non_null(was);
  was[0] = tu_limits_saved(), was[1] = tu_scan_cpu_off();
  *state = was;
  return 0;
}
static int budget_teardown(void **state) {
  char **was = *state;
  tu_scan_cpu_restore(was[1]);
  tu_limits_restore(was[0]);
  free(was);
  return 0;
}

/* A driver that ends a work-item's loops after a number of iterations per launch (Mesa's llvmpipe: 65535, found by
 * the probe), emulated with CAMDELTA_DEVICE_LIMITS loops=N: the sequential walk and the chunkwise phase B run in
 * several launches that carry the state and give the same results; where a launch cannot fit, the call fails with a
 * message instead of returning wrong numbers. The work-group forms (scan CPU=0; the CPU forms' walks under a budget
 * are test_scan_cpu's). */
static void test_loop_budget(void **state) {
  const char *was = ((char **)*state)[0];
  problem p;
  problem_make(&p, 1, 2, 56, 8, 64, 661);
  float *out = malloc(p.n_tok * 4), *fin = malloc(p.n_state * 4);
  assert_true(out && fin);
  for (int rev = 0; rev < 2; rev++) {
    ref_result ref;
    reference(&p, rev, 1, 1, 0, &ref);
    for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
      unsigned split = 0;
      int splits = 0;
      /* the first three split PoCL's tiles; a device whose tiles give each work-item fewer iterations (NVIDIA's
       * work-groups of hundreds) needs the smaller ones, tried only until a walk has split */
      static const char *const budgets[] = {"loops=40000", "loops=20000", "loops=12000", "loops=6000",
                                            "loops=3000",  "loops=1500",  "loops=800"};
      for (size_t b = 0; b < sizeof budgets / sizeof *budgets && (b < 3 || !splits); b++) {
        tu_limits_env(was, budgets[b]);
        const camdelta_status st = forward_launches(&p, rev, &split, out, fin, (camdelta_scan_algorithm)alg);
        if (st == CAMDELTA_ERROR_UNSUPPORTED) { /* a launch does not fit this device's tiles: refused, named */
          assert_non_null(strstr(camdelta_last_message(), "loops after"));
          continue;
        }
        TU_OK(st);
        check_err("out (loop budget)", &p, (camdelta_scan_algorithm)alg, rev, tu_rel_err(out, ref.out, p.n_tok));
        check_err("final_state (loop budget)", &p, (camdelta_scan_algorithm)alg, rev,
                  tu_rel_err(fin, ref.final_state, p.n_state));
        /* launches of a walk in one piece: the sequential kernel (and phase C where the plan has OUT=2), or
         * chunkwise phases A, B and C */
        camdelta_scan_args d = CAMDELTA_SCAN_ARGS_INIT;
        d.B = p.B, d.H = p.H, d.D = p.D, d.F = p.F, d.S = p.S, d.reverse = rev, d.algorithm = (camdelta_scan_algorithm)alg;
        char plan[1024];
        TU_OK(camdelta_scan_plan_describe(tu_context(), &d, plan, sizeof plan));
        const unsigned whole = alg == CAMDELTA_SCAN_CHUNKWISE ? 3u : strstr(plan, "OUT=2") ? 2u : 1u;
        splits += split > whole;
        /* the plan says how the walk splits (causal: the call's walk and the description's have F steps) */
        if (split > whole && !rev && !strstr(plan, "frames per launch (the driver's loop budget"))
          fail_msg("plan '%s' does not say how the walk splits", plan);
      }
      if (!splits) fail_msg("%s: no budget split the walk", camdelta_scan_algorithm_name((camdelta_scan_algorithm)alg));
      /* far too small a budget: refused with a message */
      tu_limits_env(was, "loops=300");
      assert_int_equal(forward_launches(&p, rev, &split, out, fin, (camdelta_scan_algorithm)alg),
                       CAMDELTA_ERROR_UNSUPPORTED);
      assert_non_null(strstr(camdelta_last_message(), "loops after 300 iterations"));
    }
    ref_free(&ref);
  }
  free(out), free(fin);
  problem_free(&p);
}

/* Frames longer than one launch of the chunkwise phase A can sum (Rusticl: D=32 S=2000 needs 185679 iterations of
 * its 65535): the gram sums a frame's tokens over several launches, carrying the raw sums in its outputs, with the
 * results of one launch; a budget too small for one chunk of tokens is refused with a message. The work-group forms
 * (scan CPU=0), as above. */
static void test_loop_budget_long_frames(void **state) {
  const char *was = ((char **)*state)[0];
  problem p;
  problem_make(&p, 1, 2, 32, 3, 1000, 662);
  float *out = malloc(p.n_tok * 4), *fin = malloc(p.n_state * 4), *whole = malloc(p.n_tok * 4);
  assert_true(out && fin && whole);
  for (int rev = 0; rev < 2; rev++) {
    ref_result ref;
    reference(&p, rev, 1, 1, 0, &ref);
    unsigned one = 0, split = 0;
    /* a budget no launch reaches: the same kernels (the portable ones, where a device has tensor cores) in one
     * launch each */
    tu_limits_env(was, "loops=1000000000");
    TU_OK(forward_launches(&p, rev, &one, whole, fin, CAMDELTA_SCAN_CHUNKWISE));
    tu_limits_env(was, "loops=4000");
    TU_OK(forward_launches(&p, rev, &split, out, fin, CAMDELTA_SCAN_CHUNKWISE));
    printf("chunkwise D=32 S=1000 %s: %u kernels in one launch each, %u under loops=4000\n", rev ? "reverse" : "causal",
           one, split);
    if (split <= one + 2) fail_msg("loops=4000 did not split phase A (%u kernels, %u under a budget no launch reaches)", split, one);
    check_err("out (long frames, loop budget)", &p, CAMDELTA_SCAN_CHUNKWISE, rev, tu_rel_err(out, ref.out, p.n_tok));
    check_err("final_state (long frames, loop budget)", &p, CAMDELTA_SCAN_CHUNKWISE, rev,
              tu_rel_err(fin, ref.final_state, p.n_state));
    /* the tokens are summed in the order of one launch: the same bits */
    if (memcmp(out, whole, p.n_tok * 4)) fail_msg("phase A over launches differs from one launch");
    ref_free(&ref);
  }
  tu_limits_env(was, "loops=60");
  unsigned n;
  assert_int_equal(forward_launches(&p, 0, &n, out, fin, CAMDELTA_SCAN_CHUNKWISE), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "loops after 60 iterations"));
  free(out), free(fin), free(whole);
  problem_free(&p);
}

/* ------------------------------------------------------------------------------- saved states */

static void test_saved_states(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++)
    for (int init = 0; init < 2; init++) check_case(2, 2, 32, 5, 20, rev, init, 1, 1, 700 + rev * 2 + init);
  check_case(1, 1, 112, 3, 40, 1, 0, 0, 1, 710);
  check_case(1, 1, 16, 1, 1, 1, 1, 0, 1, 711);
}

static void test_saved_object_api(void **state) {
  (void)state;
  camdelta_scan_saved *saved = NULL;
  assert_int_equal(camdelta_scan_saved_create(NULL, &saved), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_scan_saved_create(tu_context(), NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  TU_OK(camdelta_scan_saved_create(tu_context(), &saved));
  cl_mem a = NULL, b = NULL;
  assert_int_equal(camdelta_scan_saved_states(saved, &a, &b), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "saved"));
  assert_int_equal(camdelta_scan_saved_states(NULL, &a, &b), CAMDELTA_ERROR_INVALID_ARGUMENT);
  /* reuse across shapes: a larger then a smaller problem */
  for (int round = 0; round < 2; round++) {
    problem p;
    problem_make(&p, 1, 1, round ? 16 : 32, round ? 2 : 3, round ? 5 : 9, 750 + round);
    cl_mem q = tu_upload(p.q, p.n_tok * 4), k = tu_upload(p.k, p.n_tok * 4), v = tu_upload(p.v, p.n_tok * 4);
    cl_mem beta = tu_upload(p.beta, p.n_beta * 4), decay = tu_upload(p.decay, p.n_decay * 4);
    cl_mem out = tu_buffer(p.n_tok * 4);
    camdelta_scan_args args = {0};
    args.B = p.B, args.H = p.H, args.D = p.D, args.F = p.F, args.S = p.S;
    args.q.mem = q, args.k.mem = k, args.v.mem = v, args.beta.mem = beta, args.decay.mem = decay, args.out.mem = out;
    TU_OK(camdelta_scan_forward(tu_context(), &args, saved));
    TU_OK(camdelta_scan_saved_states(saved, &a, &b));
    assert_non_null(a);
    assert_non_null(b);
    assert_true(tu_mem_size(a) >= p.n_frames * 4);
    ref_result ref;
    reference(&p, 0, 0, 0, 1, &ref);
    float *post = malloc(p.n_frames * 4);
    tu_download(b, 0, p.n_frames * 4, post);
    assert_true(tu_rel_err(post, ref.post, p.n_frames) <= BOUND);
    free(post);
    ref_free(&ref);
    clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
    clReleaseMemObject(decay), clReleaseMemObject(out);
    problem_free(&p);
  }
  camdelta_scan_saved_destroy(saved);
  camdelta_scan_saved_destroy(NULL);
}

/* --------------------------------------------------------------------- algorithms against each other */

static void test_sequential_vs_chunkwise(void **state) {
  (void)state;
  static const size_t shapes[][5] = {{2, 3, 64, 5, 64}, {3, 1, 112, 2, 300}, {1, 2, 128, 21, 20}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    for (int rev = 0; rev < 2; rev++) {
      problem p;
      problem_make(&p, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], 800 + i * 2 + rev);
      dev_result a, b;
      device_run(&p, CAMDELTA_SCAN_SEQUENTIAL, rev, 1, 1, 1, &a);
      if (a.refused) {
        problem_free(&p);
        continue;
      }
      device_run(&p, CAMDELTA_SCAN_CHUNKWISE, rev, 1, 1, 1, &b);
      double *ref = malloc((p.n_tok > p.n_frames ? p.n_tok : p.n_frames) * sizeof(double));
      for (size_t j = 0; j < p.n_tok; j++) ref[j] = a.out[j];
      double e = tu_rel_err(b.out, ref, p.n_tok);
      for (size_t j = 0; j < p.n_state; j++) ref[j] = a.final_state[j];
      double ef = tu_rel_err(b.final_state, ref, p.n_state);
      for (size_t j = 0; j < p.n_frames; j++) ref[j] = a.post[j];
      double ep = tu_rel_err(b.post, ref, p.n_frames);
      for (size_t j = 0; j < p.n_frames; j++) ref[j] = a.pre[j];
      double eq = tu_rel_err(b.pre, ref, p.n_frames);
      if (!(e <= BOUND && ef <= BOUND && ep <= BOUND && eq <= BOUND))
        fail_msg("sequential vs chunkwise, shape %zu %s: out %.3g final %.3g post %.3g pre %.3g", i,
                 rev ? "reverse" : "causal", e, ef, ep, eq);
      free(ref);
      dev_free(&a), dev_free(&b);
      problem_free(&p);
    }
  }
}

/* ----------------------------------------------------------------------------- segment chaining */

/* Frames [f0, f0 + nf) of a problem as a problem of its own. */
static void problem_slice(const problem *p, size_t f0, size_t nf, problem *s) {
  memset(s, 0, sizeof *s);
  s->B = p->B, s->H = p->H, s->D = p->D, s->F = nf, s->S = p->S, s->N = nf * p->S;
  s->n_tok = p->B * p->H * p->D * s->N;
  s->n_beta = p->B * p->H * nf * p->S;
  s->n_decay = p->B * p->H * nf;
  s->n_state = p->n_state;
  s->n_frames = p->B * p->H * nf * p->D * p->D;
  s->q = malloc(s->n_tok * 4), s->k = malloc(s->n_tok * 4), s->v = malloc(s->n_tok * 4);
  s->beta = malloc(s->n_beta * 4), s->decay = malloc(s->n_decay * 4), s->init = malloc(s->n_state * 4);
  const size_t BHD = p->B * p->H * p->D, BH = p->B * p->H;
  for (size_t r = 0; r < BHD; r++) {
    memcpy(s->q + r * s->N, p->q + r * p->N + f0 * p->S, s->N * 4);
    memcpy(s->k + r * s->N, p->k + r * p->N + f0 * p->S, s->N * 4);
    memcpy(s->v + r * s->N, p->v + r * p->N + f0 * p->S, s->N * 4);
  }
  for (size_t r = 0; r < BH; r++) {
    memcpy(s->beta + r * nf * p->S, p->beta + (r * p->F + f0) * p->S, nf * p->S * 4);
    memcpy(s->decay + r * nf, p->decay + r * p->F + f0, nf * 4);
  }
  memcpy(s->init, p->init, s->n_state * 4);
}

/* Run the segments (frame counts `cuts`) chained through one state buffer (final_state = init_state,
 * in place) and compare with one run over all frames. */
static void check_chain(size_t B, size_t H, size_t D, size_t S, const size_t *cuts, int ncuts, int reverse,
                        camdelta_scan_algorithm alg, uint64_t seed) {
  size_t F = 0;
  for (int i = 0; i < ncuts; i++) F += cuts[i];
  problem p;
  problem_make(&p, B, H, D, F, S, seed);
  dev_result whole;
  device_run(&p, alg, reverse, 1, 1, 0, &whole);
  assert_false(whole.refused); /* small shapes: a frame fits any budget seen */

  float *out = malloc(p.n_tok * 4);
  cl_mem st = tu_upload(p.init, p.n_state * 4);
  for (int c = 0; c < ncuts; c++) {
    /* causal: segments first to last; reverse: last to first */
    const int seg = reverse ? ncuts - 1 - c : c;
    size_t f0 = 0;
    for (int i = 0; i < seg; i++) f0 += cuts[i];
    problem s;
    problem_slice(&p, f0, cuts[seg], &s);
    cl_mem q = tu_upload(s.q, s.n_tok * 4), k = tu_upload(s.k, s.n_tok * 4), v = tu_upload(s.v, s.n_tok * 4);
    cl_mem beta = tu_upload(s.beta, s.n_beta * 4), decay = tu_upload(s.decay, s.n_decay * 4);
    cl_mem o = tu_buffer(s.n_tok * 4);
    camdelta_scan_args a = {0};
    a.B = B, a.H = H, a.D = D, a.F = s.F, a.S = S, a.reverse = reverse, a.algorithm = alg;
    a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = o;
    a.init_state.mem = st, a.final_state.mem = st;
    TU_OK(camdelta_scan_forward(tu_context(), &a, NULL));
    float *so = malloc(s.n_tok * 4);
    tu_download(o, 0, s.n_tok * 4, so);
    for (size_t r = 0; r < B * H * D; r++) memcpy(out + r * p.N + f0 * S, so + r * s.N, s.N * 4);
    free(so);
    clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
    clReleaseMemObject(decay), clReleaseMemObject(o);
    problem_free(&s);
  }
  float *fin = malloc(p.n_state * 4);
  tu_download(st, 0, p.n_state * 4, fin);
  double *ref = malloc(p.n_tok * sizeof(double));
  for (size_t j = 0; j < p.n_tok; j++) ref[j] = whole.out[j];
  double e = tu_rel_err(out, ref, p.n_tok);
  for (size_t j = 0; j < p.n_state; j++) ref[j] = whole.final_state[j];
  double ef = tu_rel_err(fin, ref, p.n_state);
  if (!(e <= BOUND && ef <= BOUND))
    fail_msg("%s %s chain of %d segments: out %.3g, final_state %.3g", camdelta_scan_algorithm_name(alg),
             reverse ? "reverse" : "causal", ncuts, e, ef);
  free(ref), free(fin), free(out);
  clReleaseMemObject(st);
  dev_free(&whole);
  problem_free(&p);
}

static void test_segment_chaining(void **state) {
  (void)state;
  static const size_t two[] = {2, 3}, three[] = {1, 2, 2};
  for (int rev = 0; rev < 2; rev++)
    for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
      check_chain(2, 1, 16, 7, two, 2, rev, (camdelta_scan_algorithm)alg, 900 + rev * 4 + alg);
      check_chain(1, 2, 32, 9, three, 3, rev, (camdelta_scan_algorithm)alg, 910 + rev * 4 + alg);
    }
}

/* -------------------------------------------------------------------------------------- offsets */

static void test_buffer_offsets(void **state) {
  (void)state;
  problem p;
  problem_make(&p, 2, 1, 16, 3, 5, 1000);
  ref_result ref;
  reference(&p, 1, 1, 1, 0, &ref);
  /* every tensor at its own element offset inside one big buffer */
  const size_t off[8] = {3, 0, 0, 0, 0, 0, 0, 0};
  size_t pos[8], sizes[8] = {p.n_tok, p.n_tok, p.n_tok, p.n_beta, p.n_decay, p.n_state, p.n_tok, p.n_state};
  size_t total = 0;
  for (int i = 0; i < 8; i++) pos[i] = total + off[0] + (size_t)i, total = pos[i] + sizes[i];
  float *host = malloc(total * 4);
  for (size_t i = 0; i < total; i++) host[i] = NAN;
  memcpy(host + pos[0], p.q, p.n_tok * 4), memcpy(host + pos[1], p.k, p.n_tok * 4);
  memcpy(host + pos[2], p.v, p.n_tok * 4), memcpy(host + pos[3], p.beta, p.n_beta * 4);
  memcpy(host + pos[4], p.decay, p.n_decay * 4), memcpy(host + pos[5], p.init, p.n_state * 4);
  cl_mem m = tu_upload(host, total * 4);
  for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
    camdelta_scan_args a = {0};
    a.B = p.B, a.H = p.H, a.D = p.D, a.F = p.F, a.S = p.S, a.reverse = 1, a.algorithm = (camdelta_scan_algorithm)alg;
    camdelta_buffer *b[8] = {&a.q, &a.k, &a.v, &a.beta, &a.decay, &a.init_state, &a.out, &a.final_state};
    for (int i = 0; i < 8; i++) b[i]->mem = m, b[i]->offset = pos[i];
    TU_OK(camdelta_scan_forward(tu_context(), &a, NULL));
    float *got = malloc(total * 4);
    tu_download(m, 0, total * 4, got);
    check_err("out (offsets)", &p, (camdelta_scan_algorithm)alg, 1, tu_rel_err(got + pos[6], ref.out, p.n_tok));
    check_err("final_state (offsets)", &p, (camdelta_scan_algorithm)alg, 1,
              tu_rel_err(got + pos[7], ref.final_state, p.n_state));
    /* nothing outside the outputs changed (the gaps stay NaN) */
    for (int i = 0; i < 8; i++) {
      const size_t gap = i ? pos[i - 1] + sizes[i - 1] : 0;
      for (size_t j = gap; j < pos[i]; j++) assert_true(isnan(got[j]));
    }
    free(got);
  }
  clReleaseMemObject(m);
  free(host);
  ref_free(&ref);
  problem_free(&p);
}

/* ------------------------------------------------------------------------------------ API misc */

static void test_api_misc(void **state) {
  (void)state;
  assert_string_equal(camdelta_scan_algorithm_name(CAMDELTA_SCAN_AUTO), "auto");
  assert_string_equal(camdelta_scan_algorithm_name(CAMDELTA_SCAN_SEQUENTIAL), "sequential");
  assert_string_equal(camdelta_scan_algorithm_name(CAMDELTA_SCAN_CHUNKWISE), "chunkwise");
  assert_string_equal(camdelta_scan_algorithm_name((camdelta_scan_algorithm)7), "unknown");
  /* AUTO picks one of the two and reports it; results match the reference; the profile is filled */
  problem p;
  problem_make(&p, 1, 2, 32, 4, 33, 1100);
  ref_result ref;
  reference(&p, 0, 0, 0, 0, &ref);
  cl_mem q = tu_upload(p.q, p.n_tok * 4), k = tu_upload(p.k, p.n_tok * 4), v = tu_upload(p.v, p.n_tok * 4);
  cl_mem beta = tu_upload(p.beta, p.n_beta * 4), decay = tu_upload(p.decay, p.n_decay * 4);
  cl_mem out = tu_buffer(p.n_tok * 4);
  camdelta_scan_algorithm used = CAMDELTA_SCAN_AUTO;
  camdelta_profile prof = {-1.0, 99};
  camdelta_scan_args a = {0};
  a.B = p.B, a.H = p.H, a.D = p.D, a.F = p.F, a.S = p.S;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = out;
  a.used = &used, a.profile = &prof;
  TU_OK(camdelta_scan_forward(tu_context(), &a, NULL));
  assert_true(used == CAMDELTA_SCAN_SEQUENTIAL || used == CAMDELTA_SCAN_CHUNKWISE);
  assert_true(prof.kernels >= 1 && prof.kernels <= 3);
  if (tu_context()->kernel_times) /* a driver without kernel times (Rusticl) reports NaN, never a made-up figure */
    assert_true(prof.kernel_ms >= 0);
  else
    assert_true(isnan(prof.kernel_ms));
  float *got = malloc(p.n_tok * 4);
  tu_download(out, 0, p.n_tok * 4, got);
  check_err("out (auto)", &p, used, 0, tu_rel_err(got, ref.out, p.n_tok));
  printf("auto picked %s for B=1 H=2 D=32 F=4 S=33\n", camdelta_scan_algorithm_name(used));
  free(got);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
  clReleaseMemObject(decay), clReleaseMemObject(out);
  ref_free(&ref);
  problem_free(&p);
}

/* ------------------------------------------------------------------------------------- bad input */

typedef struct bad_env {
  problem p;
  cl_mem q, k, v, beta, decay, out, init, fin, small;
  camdelta_scan_args a;
} bad_env;

static void bad_setup(bad_env *e) {
  problem_make(&e->p, 2, 2, 16, 3, 4, 1200);
  problem *p = &e->p;
  e->q = tu_upload(p->q, p->n_tok * 4), e->k = tu_upload(p->k, p->n_tok * 4), e->v = tu_upload(p->v, p->n_tok * 4);
  e->beta = tu_upload(p->beta, p->n_beta * 4), e->decay = tu_upload(p->decay, p->n_decay * 4);
  e->init = tu_upload(p->init, p->n_state * 4);
  e->out = tu_buffer(p->n_tok * 4), e->fin = tu_buffer(p->n_state * 4), e->small = tu_buffer(16);
  memset(&e->a, 0, sizeof e->a);
  camdelta_scan_args *a = &e->a;
  a->B = p->B, a->H = p->H, a->D = p->D, a->F = p->F, a->S = p->S;
  a->q.mem = e->q, a->k.mem = e->k, a->v.mem = e->v, a->beta.mem = e->beta, a->decay.mem = e->decay;
  a->out.mem = e->out, a->init_state.mem = e->init, a->final_state.mem = e->fin;
}

static void bad_teardown(bad_env *e) {
  cl_mem all[9] = {e->q, e->k, e->v, e->beta, e->decay, e->out, e->init, e->fin, e->small};
  for (int i = 0; i < 9; i++) clReleaseMemObject(all[i]);
  problem_free(&e->p);
}

/* The call fails with `want`, its message names `needle`, and out / final_state are untouched. */
static void expect_bad(bad_env *e, const camdelta_scan_args *a, camdelta_status want, const char *needle) {
  for (int alg = CAMDELTA_SCAN_AUTO; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
    camdelta_scan_args b = *a;
    if (b.algorithm == CAMDELTA_SCAN_AUTO) b.algorithm = (camdelta_scan_algorithm)alg;
    camdelta_status st = camdelta_scan_forward(tu_context(), &b, NULL);
    if (st != want)
      fail_msg("expected %s, got %s (%s)", camdelta_status_name(want), camdelta_status_name(st),
               camdelta_last_message());
    if (needle && !strstr(camdelta_last_message(), needle))
      fail_msg("message '%s' does not mention '%s'", camdelta_last_message(), needle);
  }
  camdelta_finish(tu_context());
  const size_t n[2] = {e->p.n_tok, e->p.n_state};
  const cl_mem m[2] = {e->out, e->fin};
  for (int i = 0; i < 2; i++) {
    unsigned char *h = malloc(n[i] * 4);
    tu_download(m[i], 0, n[i] * 4, h);
    for (size_t j = 0; j < n[i] * 4; j++)
      if (h[j] != 0xFF) fail_msg("output %d was written by a call that failed", i);
    free(h);
  }
}

static void test_bad_input(void **state) {
  (void)state;
  bad_env e;
  bad_setup(&e);
  camdelta_scan_args a;

  assert_int_equal(camdelta_scan_forward(NULL, &e.a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_scan_forward(tu_context(), NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);

  /* head dim out of range */
  static const size_t badD[] = {0, 4, 12, 136, 256};
  for (size_t i = 0; i < sizeof badD / sizeof *badD; i++) {
    a = e.a, a.D = badD[i];
    expect_bad(&e, &a, CAMDELTA_ERROR_UNSUPPORTED, "D=");
  }
  /* zero dims */
  a = e.a, a.B = 0;
  expect_bad(&e, &a, CAMDELTA_ERROR_SHAPE, "B=0");
  a = e.a, a.F = 0;
  expect_bad(&e, &a, CAMDELTA_ERROR_SHAPE, "F=0");
  a = e.a, a.S = 0;
  expect_bad(&e, &a, CAMDELTA_ERROR_SHAPE, "S=0");
  /* overflow */
  a = e.a, a.S = SIZE_MAX / 2;
  expect_bad(&e, &a, CAMDELTA_ERROR_OVERFLOW, NULL);
  /* unknown algorithm */
  a = e.a, a.algorithm = (camdelta_scan_algorithm)9;
  expect_bad(&e, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "algorithm");

  /* shapes that do not fit the buffers: more frames / tokens / heads than the tensors hold */
  a = e.a, a.F = 4; /* N = F·S no longer matches q (and beta, decay) */
  expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'q'");
  a = e.a, a.H = 3;
  expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'q'");
  a = e.a, a.D = 24;
  expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'q'");

  /* each buffer missing, too small, or pushed past its end by an offset */
  static const char *names[8] = {"q", "k", "v", "beta", "decay", "out", "init_state", "final_state"};
  for (int i = 0; i < 8; i++) {
    char needle[32];
    snprintf(needle, sizeof needle, "'%s'", names[i]);
    a = e.a;
    camdelta_buffer *b[8] = {&a.q, &a.k, &a.v, &a.beta, &a.decay, &a.out, &a.init_state, &a.final_state};
    if (i < 6) {
      b[i]->mem = NULL;
      expect_bad(&e, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, needle);
    }
    a = e.a;
    b[i]->mem = e.small;
    expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, needle);
    a = e.a;
    b[i]->offset = 1;
    expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, needle);
    a = e.a;
    b[i]->offset = SIZE_MAX - 2;
    expect_bad(&e, &a, CAMDELTA_ERROR_OVERFLOW, needle);
  }
  /* beta / decay / state of the wrong shape: a (B, H, F) beta, a (B, H) decay, a (B, H, D) state */
  {
    cl_mem b3 = tu_buffer(e.p.n_decay * 4), d2 = tu_buffer(e.p.B * e.p.H * 4), s3 = tu_buffer(e.p.B * e.p.H * 16 * 4);
    a = e.a, a.beta.mem = b3;
    expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'beta'");
    a = e.a, a.decay.mem = d2;
    expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'decay'");
    a = e.a, a.init_state.mem = s3;
    expect_bad(&e, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'init_state'");
    clReleaseMemObject(b3), clReleaseMemObject(d2), clReleaseMemObject(s3);
  }
  /* outputs overlapping inputs */
  a = e.a, a.out.mem = e.q;
  {
    camdelta_status st = camdelta_scan_forward(tu_context(), &a, NULL);
    assert_int_equal(st, CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), "'out'"));
  }
  a = e.a;
  {
    cl_mem big = tu_buffer((e.p.n_tok + e.p.n_state) * 4);
    a.final_state.mem = big, a.q.mem = big;
    camdelta_status st = camdelta_scan_forward(tu_context(), &a, NULL);
    assert_int_equal(st, CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), "'final_state'"));
    clReleaseMemObject(big);
  }
  /* a saved object of another context is refused */
  {
    camdelta_context *other = NULL;
    if (camdelta_context_create(&other, NULL) == CAMDELTA_OK) {
      camdelta_scan_saved *s = NULL;
      TU_OK(camdelta_scan_saved_create(other, &s));
      assert_int_equal(camdelta_scan_forward(tu_context(), &e.a, s), CAMDELTA_ERROR_INVALID_ARGUMENT);
      camdelta_scan_saved_destroy(s);
      camdelta_context_destroy(other);
    }
  }
  /* and the untouched arguments still work */
  TU_OK(camdelta_scan_forward(tu_context(), &e.a, NULL));
  bad_teardown(&e);
}

/* Chunkwise plan line of tu_context() for the tile-override shape. */
static void chunk_plan(char *buf, size_t size) {
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 2, a.D = 16, a.F = 3, a.S = 37, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, buf, size));
}

/* CAMDELTA_SCAN_TILES (read at context creation) and camdelta_tune_set "chunkwise": odd tiles (many phase-A tiles
 * on and off the diagonal, ragged edges) give the same results and show in the plan; the environment set after a
 * context exists changes nothing there; lists that do not parse and tiles that break a kernel's constraints or
 * the device's limits fail cleanly. */
static void seq_plan(char *buf, size_t size) {
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 2, a.D = 16, a.F = 3, a.S = 37, a.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, buf, size));
}

/* CAMDELTA_SEQ_TILES (read at context creation) and camdelta_tune_set "sequential": ragged blocks of value columns
 * and token tiles give the reference's results and show in the plan; "" restores the heuristic; bad values fail
 * the sequential calls naming their source, and leave the chunkwise calls alone. */
static void test_seq_tile_override(void **state) {
  (void)state;
  char plain[1024], plan[1024];
  tu_context_release();
  seq_plan(plain, sizeof plain);
  /* prefetch on (the GPUs' default) and off (the CPUs'), whichever device runs this; W=32, the smallest work-group
   * the kernel takes (Rusticl's kernels allow no more) */
  tu_env_context("CAMDELTA_SEQ_TILES", "J=5,TS=7,W=32,PF=1");
  seq_plan(plan, sizeof plan);
  if (!strstr(plan, "W=32 blocks=4 J=5 TS=7 PF=1")) fail_msg("plan '%s' does not show the override", plan);
  for (int rev = 0; rev < 2; rev++) check_case(2, 2, 16, 3, 37, rev, 1, 1, 1, 940 + (uint64_t)rev);
  tu_env_context("CAMDELTA_SEQ_TILES", "J=5,TS=7,W=32,PF=2");
  seq_plan(plan, sizeof plan);
  if (!strstr(plan, "W=32 blocks=4 J=5 TS=7 PF=0")) fail_msg("plan '%s' does not show the override", plan);
  for (int rev = 0; rev < 2; rev++) check_case(2, 2, 16, 3, 37, rev, 1, 1, 1, 950 + (uint64_t)rev);
  /* the outputs by phase C from the saved states (the GPUs' default), and in the kernel (the CPUs') */
  for (int out = 1; out <= 2; out++) {
    char text[64];
    snprintf(text, sizeof text, "OUT=%d,J=8", out);
    tu_env_context("CAMDELTA_SEQ_TILES", text);
    seq_plan(plan, sizeof plan);
    if (!strstr(plan, out == 2 ? "OUT=2; phase_c " : "OUT=1")) fail_msg("plan '%s' lacks OUT=%d", plan, out);
    for (int rev = 0; rev < 2; rev++)
      for (int states = 0; states < 2; states++)
        check_case(2, 2, 16, 3, 37, rev, rev, 1, states, 970 + 4 * (uint64_t)out + 2 * (uint64_t)rev + (uint64_t)states);
  }
  tu_env_context("CAMDELTA_SEQ_TILES", NULL);
  TU_OK(camdelta_tune_set(tu_context(), "sequential", "TS=3,J=16"));
  seq_plan(plan, sizeof plan);
  if (!strstr(plan, "blocks=1 J=16 TS=3")) fail_msg("plan '%s' does not show camdelta_tune_set's tiles", plan);
  for (int rev = 0; rev < 2; rev++) check_case(1, 3, 16, 4, 10, rev, 1, 1, 1, 960 + (uint64_t)rev);
  char got[1024];
  TU_OK(camdelta_tune_get(tu_context(), "sequential", 16, got, sizeof got));
  assert_non_null(strstr(got, "J=16 (camdelta_tune_set) TS=3 (camdelta_tune_set) W=auto"));
  TU_OK(camdelta_tune_set(tu_context(), "sequential", ""));
  seq_plan(plan, sizeof plan);
  assert_string_equal(plan, plain);
  tu_tune_refused(tu_context(), "sequential", "J=4,A_WR=2", "unknown key 'A_WR'");
  static const struct {
    const char *value, *needle;
  } bad[] = {{"J=17", "J=17 is more than the head dim D=16"}, {"W=48", "W=48 must be a power of two"},
             {"TS=1025", "at most 1024"}, {"OUT=3", "OUT=3: 1 outputs in the kernel"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tu_env_context("CAMDELTA_SEQ_TILES", bad[i].value);
    bad_env e;
    bad_setup(&e);
    camdelta_scan_args a = e.a;
    a.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
    assert_int_equal(camdelta_scan_forward(tu_context(), &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
    if (!strstr(camdelta_last_message(), bad[i].needle) || !strstr(camdelta_last_message(), "CAMDELTA_SEQ_TILES"))
      fail_msg("'%s': %s", bad[i].value, camdelta_last_message());
    a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
    TU_OK(camdelta_scan_forward(tu_context(), &a, NULL));
    bad_teardown(&e);
  }
  assert_int_equal(unsetenv("CAMDELTA_SEQ_TILES"), 0);
  /* what the option registry refuses (a key or value outside its declaration) fails the context's creation */
  static const char *const refused[] = {"J=0", "J=4,A_WR=2", "TS", "W=4097"};
  tu_check_bad_env("CAMDELTA_SEQ_TILES", refused, sizeof refused / sizeof *refused);
  tu_context_release();
}

static void test_tile_override(void **state) {
  (void)state;
  /* good[0]'s B_PF=2 runs phase B's register prefetch of A (two chunks, the unrolled chunk loop), which a CPU
   * does not choose by itself */
  static const char *const good[] = {"A_WR=4,A_RM=1,A_WC=4,A_RN=2,A_KC=5,B_KC=8,B_PF=2,C_WR=8,C_RM=3,C_WC=4,C_RN=5,C_KC=8",
                                     " A_WR=2 , A_RM=3,A_WC=8,A_RN=1,B_J=8,C_RN=3,"};
  static const char *const shown[] = {"A_WR=4 A_RM=1 A_WC=4 A_RN=2 A_KC=5", "A_WR=2 A_RM=3 A_WC=8 A_RN=1"};
  char plain[1024], plan[1024];
  /* the FMA kernels' tiles: where the tensor-core path runs (NVIDIA) it replaces them in some phases, on CPUs the
   * CPU forms replace them all */
  char *was_cpu = tu_env_saved("CAMDELTA_SCAN_CPU");
  assert_int_equal(setenv("CAMDELTA_SCAN_CPU", "0", 1), 0);
  tu_env_context("CAMDELTA_TC", "0");
  chunk_plan(plain, sizeof plain);
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    /* good[0] through the environment of a new context, good[1] through camdelta_tune_set */
    if (i == 0) {
      tu_env_context("CAMDELTA_SCAN_TILES", good[i]);
    } else {
      TU_OK(camdelta_tune_set(tu_context(), "chunkwise", good[i]));
    }
    chunk_plan(plan, sizeof plan);
    if (!strstr(plan, shown[i])) fail_msg("plan '%s' does not show the override '%s'", plan, shown[i]);
    if (i == 0 && !strstr(plan, "B_KC=8 B_PF=2")) fail_msg("plan '%s' does not show B_KC=8 B_PF=2", plan);
    for (int rev = 0; rev < 2; rev++) check_case(1, 2, 16, 3, 37, rev, 1, 1, 1, 900 + 2 * i + (uint64_t)rev);
    if (i == 0) {
      /* read at creation only: unsetting it now changes nothing for this context */
      assert_int_equal(unsetenv("CAMDELTA_SCAN_TILES"), 0);
      chunk_plan(plan, sizeof plan);
      assert_non_null(strstr(plan, shown[0]));
      /* camdelta_tune_set with "" restores the heuristic tiles, over the environment's */
      TU_OK(camdelta_tune_set(tu_context(), "chunkwise", ""));
      chunk_plan(plan, sizeof plan);
      assert_string_equal(plan, plain);
    }
  }
  TU_OK(camdelta_tune_set(tu_context(), "chunkwise", NULL));
  chunk_plan(plan, sizeof plan);
  assert_string_equal(plan, plain);
  tu_tune_refused(tu_context(), "chunkwise", "A_WR=16,FOO=2", "unknown key 'FOO'");
  static const struct {
    const char *value, *needle;
    camdelta_status want;
    int chunkwise_only;
  } bad[] = {
      {"A_RM=17,A_RN=17", "exceed", CAMDELTA_ERROR_UNSUPPORTED, 1},
      {"A_KC=4096,A_WR=16,A_RM=16", "local memory", CAMDELTA_ERROR_UNSUPPORTED, 1},
      {"C_WR=4096,C_WC=4", "exceed", CAMDELTA_ERROR_UNSUPPORTED, 1},
      {"C_KC=3", "C_KC=3 must divide", CAMDELTA_ERROR_UNSUPPORTED, 1},
      {"B_WR=2,B_RM=2", "B_WR*B_RM >= D", CAMDELTA_ERROR_UNSUPPORTED, 1},
      {"B_J=32", "B_J <= D", CAMDELTA_ERROR_UNSUPPORTED, 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    /* a context created with the bad value: its scan calls fail naming the variable */
    tu_env_context("CAMDELTA_SCAN_TILES", bad[i].value);
    bad_env e;
    bad_setup(&e);
    camdelta_scan_args a = e.a;
    if (bad[i].chunkwise_only) a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
    expect_bad(&e, &a, bad[i].want, bad[i].needle);
    a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
    assert_int_equal(camdelta_scan_forward(tu_context(), &a, NULL), bad[i].want);
    if (!strstr(camdelta_last_message(), "CAMDELTA_SCAN_TILES"))
      fail_msg("'%s': the message does not name the variable: %s", bad[i].value, camdelta_last_message());
    bad_teardown(&e);
  }
  assert_int_equal(unsetenv("CAMDELTA_SCAN_TILES"), 0);
  /* what the option registry refuses (a key or value outside its declaration) fails the context's creation */
  static const char *const refused[] = {"A_WR=16,FOO=2", "A_WR", "A_WR=0", "C_RN=7x"};
  tu_check_bad_env("CAMDELTA_SCAN_TILES", refused, sizeof refused / sizeof *refused);
  tu_env_context("CAMDELTA_SCAN_CPU", was_cpu);
  free(was_cpu);
  tu_env_context("CAMDELTA_TC", NULL);
  bad_env e;
  bad_setup(&e);
  TU_OK(camdelta_scan_forward(tu_context(), &e.a, NULL));
  bad_teardown(&e);
}

/* The CLI's 'run scan' rejects N not divisible by F (the API takes F and S, so N cannot mismatch there). */
static void test_cli_frames_mismatch(void **state) {
  (void)state;
  const char *cli = getenv("CAMDELTA_CLI");
  if (!cli || !*cli) fail_msg("CAMDELTA_CLI is not set: run through ctest, which sets it to the built tool");
  char in[1100], outdir[1100], cmd[4096], path[1200];
  snprintf(in, sizeof in, "%s/scan-in", tu_tmpdir());
  snprintf(outdir, sizeof outdir, "%s/scan-out", tu_tmpdir());
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", in, outdir);
  assert_int_equal(system(cmd), 0);
  /* N = 10 tokens, F = 3 frames */
  const size_t B = 1, H = 1, D = 8, N = 10, F = 3;
  float *z = calloc(B * H * D * N, 4);
  const size_t tok[4] = {B, H, D, N}, bsh[4] = {B, H, F, 3}, dsh[3] = {B, H, F};
  static const char *tn[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s.npy", in, tn[i]);
    TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 4, tok, z));
  }
  snprintf(path, sizeof path, "%s/beta.npy", in);
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 4, bsh, z));
  snprintf(path, sizeof path, "%s/decay.npy", in);
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 3, dsh, z));
  free(z);
  snprintf(cmd, sizeof cmd, "'%s' run scan --in '%s' --out '%s' >/dev/null 2>&1", cli, in, outdir);
  int rc = system(cmd);
  assert_true(rc != -1);
  printf("camdelta run scan with N=10, F=3: exit %d\n", WEXITSTATUS(rc));
  assert_int_equal(WEXITSTATUS(rc), 3);
}

static int teardown_all(void **state) {
  (void)state;
  static const char *alg[2] = {"sequential", "chunkwise"}, *dir[2] = {"causal", "reverse"};
  for (int a = 0; a < 2; a++)
    for (int d = 0; d < 2; d++) {
      char what[96];
      snprintf(what, sizeof what, "scan max rel err %s %s", alg[a], dir[d]);
      tu_report(what, g_max_err[a][d]);
    }
  tu_context_release();
  return 0;
}

/* Sizes near the limits: S above 2^31 must neither wrap nor loop in the tile choice (a power of two above S once
 * overflowed), and S beyond 2^32 − 1 is refused with the scan's limit. */
static void test_huge_token_counts(void **state) {
  (void)state;
  TU_OK(camdelta_warm_shape(tu_context(), 1, 1, 16, (size_t)UINT32_MAX));
  TU_OK(camdelta_warm_shape(tu_context(), 1, 1, 16, ((size_t)1 << 31) + 1));
  if (SIZE_MAX > UINT32_MAX) {
    assert_int_equal(camdelta_warm_shape(tu_context(), 1, 1, 16, (size_t)UINT32_MAX + 1), CAMDELTA_ERROR_UNSUPPORTED);
    assert_non_null(strstr(camdelta_last_message(), "2^32-1"));
  }
}

/* Threads sharing one context share its plans: each call takes its plan's use lock while it sets the kernels'
 * arguments and enqueues, and camdelta_tune_set dropping the plans meanwhile (one thread) frees a plan only after
 * its last user. Every thread's results equal the single-threaded run's, bit for bit. */
typedef struct plan_worker {
  camdelta_scan_args a;
  int retune, failures;
} plan_worker;

static int plan_worker_run(void *arg) {
  plan_worker *w = arg;
  for (int i = 0; i < 12; i++) {
    camdelta_scan_args a = w->a;
    a.algorithm = i % 2 ? CAMDELTA_SCAN_CHUNKWISE : CAMDELTA_SCAN_SEQUENTIAL;
    if (camdelta_scan_forward(tu_context(), &a, NULL) != CAMDELTA_OK) w->failures++;
    if (w->retune && camdelta_tune_set(tu_context(), "backward", i % 2 ? "RPT=4" : NULL) != CAMDELTA_OK) w->failures++;
  }
  return 0;
}

static void test_threads_share_plans(void **state) {
  (void)state;
  problem p;
  problem_make(&p, 1, 2, 24, 3, 21, 4242);
  cl_mem q = tu_upload(p.q, p.n_tok * 4), k = tu_upload(p.k, p.n_tok * 4), v = tu_upload(p.v, p.n_tok * 4);
  cl_mem beta = tu_upload(p.beta, p.n_beta * 4), decay = tu_upload(p.decay, p.n_decay * 4);
  enum { NT = 4 };
  cl_mem outs[NT + 2];
  for (int t = 0; t < NT + 2; t++) outs[t] = tu_buffer(p.n_tok * 4);
  camdelta_scan_args a = {0};
  a.B = p.B, a.H = p.H, a.D = p.D, a.F = p.F, a.S = p.S;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay;
  /* single-threaded references, one per algorithm */
  for (int r = 0; r < 2; r++) {
    camdelta_scan_args b = a;
    b.algorithm = r ? CAMDELTA_SCAN_CHUNKWISE : CAMDELTA_SCAN_SEQUENTIAL;
    b.out.mem = outs[NT + r];
    TU_OK(camdelta_scan_forward(tu_context(), &b, NULL));
  }
  plan_worker w[NT];
  thrd_t th[NT];
  for (int t = 0; t < NT; t++) {
    memset(&w[t], 0, sizeof w[t]);
    w[t].a = a;
    w[t].a.out.mem = outs[t];
    w[t].retune = t == 0;
    assert_int_equal(thrd_create(&th[t], plan_worker_run, &w[t]), thrd_success);
  }
  for (int t = 0; t < NT; t++) {
    assert_int_equal(thrd_join(th[t], NULL), thrd_success);
    assert_int_equal(w[t].failures, 0);
  }
  TU_OK(camdelta_finish(tu_context()));
  float *ref = malloc(p.n_tok * 4), *got = malloc(p.n_tok * 4);
  assert_true(ref && got);
  tu_download(outs[NT + 1], 0, p.n_tok * 4, ref); /* each worker's last call is chunkwise */
  for (int t = 0; t < NT; t++) {
    tu_download(outs[t], 0, p.n_tok * 4, got);
    assert_memory_equal(ref, got, p.n_tok * 4);
  }
  free(ref), free(got);
  for (int t = 0; t < NT + 2; t++) clReleaseMemObject(outs[t]);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta),
      clReleaseMemObject(decay);
  problem_free(&p);
  TU_OK(camdelta_tune_set(tu_context(), "backward", NULL));
}

TU_MAIN(NULL, teardown_all,
      cmocka_unit_test(test_api_misc),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_head_dims),
      cmocka_unit_test(test_profile_shapes),
      cmocka_unit_test(test_frame_sizes),
      cmocka_unit_test(test_frame_counts),
      cmocka_unit_test(test_batch_heads),
      cmocka_unit_test(test_init_and_final_options),
      cmocka_unit_test(test_saved_states),
      cmocka_unit_test(test_saved_object_api),
      cmocka_unit_test(test_sequential_vs_chunkwise),
      cmocka_unit_test(test_segment_chaining),
      cmocka_unit_test(test_buffer_offsets),
      cmocka_unit_test(test_large_shapes),
      cmocka_unit_test(test_long_walks),
      cmocka_unit_test_setup_teardown(test_loop_budget, budget_setup, budget_teardown),
      cmocka_unit_test_setup_teardown(test_loop_budget_long_frames, budget_setup, budget_teardown),
      cmocka_unit_test(test_huge_token_counts),
      cmocka_unit_test(test_cli_frames_mismatch),
      cmocka_unit_test(test_tile_override),
      cmocka_unit_test(test_seq_tile_override),
      cmocka_unit_test(test_threads_share_plans))
