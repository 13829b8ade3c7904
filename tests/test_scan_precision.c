/* Scan precision (docs/math.md §5 and §10): the chunkwise forward and the backward in both precisions against
 * the f64 reference on awkward head dims (24, 40, 72) and frame sizes that are no multiple of any tile; the plan
 * says which path runs, and `tf32` on a device without the tensor-core path falls back to the exact FMA kernels
 * (bit-identical results). On a device with the path (NVIDIA), `exact` is split-TF32 and must still meet the
 * docs/math.md §5 bounds; the largest errors per precision are printed as "[ measure ]" lines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "testutil.h"
#include "scan/cpu.h"
#include "scan/tc.h"

#define FWD_BOUND 1e-5
#define BWD_BOUND 1e-4
#define TF32_BOUND 3e-2 /* a single TF32 product: about 1e-3 measured; the bound only catches a broken path */

typedef tu_scan_host prob;

static void prob_make(prob *p, size_t B, size_t H, size_t D, size_t F, size_t S, uint64_t seed) {
  tu_scan_host_make(p, B, H, D, F, S, (const double[2]){0.3, 1.0}, seed);
}

static double g_worst[2][2]; /* [forward, backward][exact, tf32] */
static camdelta_context *g_ctx; /* the context under test: the shared one, or the emulated one */

static camdelta_context *ctx(void) { return g_ctx ? g_ctx : tu_context(); }
static int has_tc(void) { return cd_tc_available(ctx()); }

/* Forward, chunkwise, with init and final state; returns out and final (malloc'd). */
static void fwd_run(const prob *p, int reverse, camdelta_precision prec, float **out, float **fin) {
  cl_mem q = tu_upload(p->q, p->tok * 4), k = tu_upload(p->k, p->tok * 4), v = tu_upload(p->v, p->tok * 4);
  cl_mem beta = tu_upload(p->beta, p->gates * 4), decay = tu_upload(p->decay, p->bhf * 4);
  cl_mem init = tu_upload(p->init, p->st * 4), o = tu_buffer(p->tok * 4), f = tu_buffer(p->st * 4);
  camdelta_scan_args a = {0};
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = p->F, a.S = p->S, a.reverse = reverse;
  a.algorithm = CAMDELTA_SCAN_CHUNKWISE, a.precision = prec;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = o;
  a.init_state.mem = init, a.final_state.mem = f;
  TU_OK(camdelta_scan_forward(ctx(), &a, NULL));
  *out = malloc(p->tok * 4), *fin = malloc(p->st * 4);
  tu_download(o, 0, p->tok * 4, *out);
  tu_download(f, 0, p->st * 4, *fin);
  cl_mem all[8] = {q, k, v, beta, decay, init, o, f};
  for (int i = 0; i < 8; i++) clReleaseMemObject(all[i]);
}

/* q, k, v, beta, decay, init_state, grad_out, grad_final_state in f64 (malloc'd) for the references. */
static void prob_f64(const prob *p, double *in[8]) {
  const float *host[8] = {p->q, p->k, p->v, p->beta, p->decay, p->init, p->go, p->gf};
  const size_t n[8] = {p->tok, p->tok, p->tok, p->gates, p->bhf, p->st, p->tok, p->st};
  for (int i = 0; i < 8; i++) in[i] = tu_to_f64(host[i], n[i]);
}

/* The worst relative error e of a forward (dir 0) or backward (dir 1) case in precision pr: recorded, and within
 * the precision's bound (TF32_BOUND for tf32, else FWD_BOUND or BWD_BOUND) or the test fails naming the case. */
static void check_bound(int dir, const prob *p, int reverse, camdelta_precision pr, double e) {
  if (e > g_worst[dir][pr]) g_worst[dir][pr] = e;
  const double bound = pr ? TF32_BOUND : dir ? BWD_BOUND : FWD_BOUND;
  if (!(e <= bound))
    fail_msg("%s %s B=%zu H=%zu D=%zu F=%zu S=%zu %s: relative error %.3g > %.0e", dir ? "backward" : "forward",
             camdelta_precision_name(pr), p->B, p->H, p->D, p->F, p->S, reverse ? "reverse" : "causal", e, bound);
}

/* One forward case: both precisions against the f64 reference (in: prob_f64's). */
static void forward_case(const prob *p, int reverse, double *const in[8]) {
  double *rout = malloc(p->tok * 8), *rfin = malloc(p->st * 8);
  camdelta_ref_scan rs = {p->B, p->H, p->D, p->F, p->S, reverse, in[0], in[1], in[2], in[3], in[4], in[5],
                          rout, rfin, NULL, NULL};
  TU_OK(camdelta_ref_scan_forward(&rs));
  float *out[2], *fin[2];
  for (int pr = 0; pr < 2; pr++) {
    fwd_run(p, reverse, (camdelta_precision)pr, &out[pr], &fin[pr]);
    const double e = tu_rel_err(out[pr], rout, p->tok), ef = tu_rel_err(fin[pr], rfin, p->st);
    check_bound(0, p, reverse, (camdelta_precision)pr, ef > e ? ef : e);
  }
  /* without the tensor-core path, tf32 is the exact path: bit-identical */
  if (!has_tc()) {
    assert_memory_equal(out[0], out[1], p->tok * 4);
    assert_memory_equal(fin[0], fin[1], p->st * 4);
  }
  for (int pr = 0; pr < 2; pr++) free(out[pr]), free(fin[pr]);
  free(rout), free(rfin);
}

/* Backward recomputing the states, with init_state and grad_final_state; worst relative error over the grads. */
static double bwd_case(const prob *p, int reverse, camdelta_precision prec, double *const ref[6], float *keep) {
  cl_mem in[8];
  const float *host[8] = {p->q, p->k, p->v, p->beta, p->decay, p->init, p->go, p->gf};
  const size_t n[8] = {p->tok, p->tok, p->tok, p->gates, p->bhf, p->st, p->tok, p->st};
  const size_t no[6] = {p->tok, p->tok, p->tok, p->gates, p->bhf, p->st};
  for (int i = 0; i < 8; i++) in[i] = tu_upload(host[i], n[i] * 4);
  cl_mem out[6];
  for (int i = 0; i < 6; i++) out[i] = tu_buffer(no[i] * 4);
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = p->F, a.S = p->S, a.reverse = reverse, a.precision = prec;
  a.q.mem = in[0], a.k.mem = in[1], a.v.mem = in[2], a.beta.mem = in[3], a.decay.mem = in[4];
  a.init_state.mem = in[5], a.grad_out.mem = in[6], a.grad_final_state.mem = in[7];
  a.dq.mem = out[0], a.dk.mem = out[1], a.dv.mem = out[2], a.dbeta.mem = out[3], a.ddecay.mem = out[4];
  a.dinit_state.mem = out[5];
  TU_OK(camdelta_scan_backward(ctx(), &a, NULL));
  double worst = 0;
  size_t at = 0;
  for (int i = 0; i < 6; i++) {
    float *h = malloc(no[i] * 4);
    tu_download(out[i], 0, no[i] * 4, h);
    const double e = tu_rel_err(h, ref[i], no[i]);
    if (!(e <= worst)) worst = e;
    if (keep) memcpy(keep + at, h, no[i] * 4);
    at += no[i];
    free(h);
    clReleaseMemObject(out[i]);
  }
  for (int i = 0; i < 8; i++) clReleaseMemObject(in[i]);
  return worst;
}

/* One backward case: both precisions against the f64 reference (in: prob_f64's). */
static void backward_case(const prob *p, int reverse, double *const in[8]) {
  double *ref[6];
  const size_t no[6] = {p->tok, p->tok, p->tok, p->gates, p->bhf, p->st};
  for (int j = 0; j < 6; j++) ref[j] = malloc(no[j] * 8);
  camdelta_ref_scan rs = {p->B, p->H, p->D, p->F, p->S, reverse, in[0], in[1], in[2], in[3], in[4], in[5],
                          NULL, NULL, NULL, NULL};
  camdelta_ref_scan_grads g = {in[6], in[7], ref[0], ref[1], ref[2], ref[3], ref[4], ref[5]};
  TU_OK(camdelta_ref_scan_backward(&rs, &g));
  const size_t total = 3 * p->tok + p->gates + p->bhf + p->st;
  float *keep[2] = {malloc(total * 4), malloc(total * 4)};
  for (int pr = 0; pr < 2; pr++) {
    const double e = bwd_case(p, reverse, (camdelta_precision)pr, ref, keep[pr]);
    check_bound(1, p, reverse, (camdelta_precision)pr, e);
  }
  if (!has_tc()) assert_memory_equal(keep[0], keep[1], total * 4);
  free(keep[0]), free(keep[1]);
  for (int j = 0; j < 6; j++) free(ref[j]);
}

/* The cases of `shapes` (B, H, D, F, S) in one direction (dir 0 forward, 1 backward), causal and reverse in turn. */
static void cases(const size_t (*shapes)[5], size_t n, int dir) {
  for (size_t i = 0; i < n; i++) {
    prob p;
    prob_make(&p, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], (dir ? 950 : 900) + i);
    double *in[8];
    prob_f64(&p, in);
    if (dir) backward_case(&p, (int)(i % 2), in);
    else forward_case(&p, (int)(i % 2), in);
    for (int j = 0; j < 8; j++) free(in[j]);
    tu_scan_host_free(&p);
  }
}

static void test_forward(void **state) {
  (void)state;
  static const size_t shapes[][5] = {{1, 2, 24, 3, 37}, {2, 1, 40, 2, 100}, {1, 1, 72, 3, 300},
                                     {1, 2, 112, 2, 129}, {1, 1, 128, 2, 70}, {1, 1, 8, 4, 45}};
  /* D = 128 and 8 only on the tensor-core path (tile edge cases there); test_scan covers them on the FMA
   * kernels, and PoCL spends seconds compiling each head dim */
  cases(shapes, has_tc() ? 6 : 4, 0);
}

static void test_backward(void **state) {
  (void)state;
  static const size_t shapes[][5] = {{1, 2, 24, 3, 37}, {1, 1, 72, 3, 100}, {1, 1, 40, 2, 70}, {1, 2, 112, 2, 129},
                                     {1, 1, 128, 2, 45}, {1, 1, 8, 3, 21}};
  cases(shapes, has_tc() ? 6 : 3, 1);
}

/* The override API (camdelta_tune_set/get) changes what runs, as the plan shows, and the results stay exact;
 * tiles breaking a constraint fail at the call with a message; NULL restores the defaults. */
static void override_checks(camdelta_context *c) {
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 1, a.D = 24, a.F = 2, a.S = 37, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  char before[1024], after[1024], got[1024];
  TU_OK(camdelta_scan_plan_describe(c, &a, before, sizeof before));
  TU_OK(camdelta_tune_set(c, "gram", "WM=1,WN=2,MR=2,NR=2,KC=16"));
  TU_OK(camdelta_tune_set(c, "apply", "KC=8,NR=2"));
  TU_OK(camdelta_scan_plan_describe(c, &a, after, sizeof after));
  printf("plan with overrides: %s\n", after);
  assert_non_null(strstr(after, "phase_a gram_tc WM=1 WN=2 MR=2 NR=2 KC=16"));
  assert_non_null(strstr(after, "NR=2 KC=8"));
  assert_string_not_equal(before, after);
  TU_OK(camdelta_tune_get(c, "gram", 24, got, sizeof got));
  assert_non_null(strstr(got, "for D=24: WM=1 WN=2 MR=2 NR=2 KC=16 (override)"));
  static const size_t fs[][5] = {{1, 1, 24, 2, 37}};
  cases(fs, 1, 0); /* still exact with the other tiles */
  /* frames: KC must divide D */
  TU_OK(camdelta_tune_set(c, "frames", "KC=16"));
  camdelta_scan_backward_args b;
  memset(&b, 0, sizeof b);
  prob p;
  prob_make(&p, 1, 1, 24, 2, 9, 991);
  cl_mem q = tu_upload(p.q, p.tok * 4), bt = tu_upload(p.beta, p.gates * 4), dc = tu_upload(p.decay, p.bhf * 4);
  cl_mem o[5] = {tu_buffer(p.tok * 4), tu_buffer(p.tok * 4), tu_buffer(p.tok * 4), tu_buffer(p.gates * 4),
                 tu_buffer(p.bhf * 4)};
  b.B = 1, b.H = 1, b.D = 24, b.F = 2, b.S = 9;
  b.q.mem = q, b.k.mem = q, b.v.mem = q, b.beta.mem = bt, b.decay.mem = dc, b.grad_out.mem = q;
  b.dq.mem = o[0], b.dk.mem = o[1], b.dv.mem = o[2], b.dbeta.mem = o[3], b.ddecay.mem = o[4];
  assert_int_equal(camdelta_scan_backward(c, &b, NULL), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "KC must divide D"));
  assert_int_equal(camdelta_scan_backward_plan_describe(c, &b, after, sizeof after), CAMDELTA_ERROR_UNSUPPORTED);
  TU_OK(camdelta_tune_set(c, "frames", NULL));
  TU_OK(camdelta_scan_backward(c, &b, NULL));
  /* the backward plan shows the tensor-core kernels and follows an override of the frames tiles; the gradients
   * stay exact with it */
  char bplan[1024], bover[1024];
  TU_OK(camdelta_scan_backward_plan_describe(c, &b, bplan, sizeof bplan));
  printf("backward plan: %s\n", bplan);
  assert_non_null(strstr(bplan, "split-TF32"));
  assert_non_null(strstr(bplan, "frames frames_tc"));
  assert_null(strstr(bplan, "frames frames_tc W=64 WM=2 "));
  TU_OK(camdelta_tune_set(c, "frames", "WM=2,WN=1"));
  TU_OK(camdelta_scan_backward_plan_describe(c, &b, bover, sizeof bover));
  if (!strstr(bover, "frames frames_tc W=64 WM=2 WN=1 MR=")) fail_msg("backward plan with WM=2: %s", bover);
  static const size_t bs1[][5] = {{1, 1, 24, 2, 9}};
  cases(bs1, 1, 1);
  TU_OK(camdelta_tune_set(c, "frames", NULL));
  TU_OK(camdelta_scan_backward_plan_describe(c, &b, bover, sizeof bover));
  assert_string_equal(bplan, bover);
  clReleaseMemObject(q), clReleaseMemObject(bt), clReleaseMemObject(dc);
  for (int i = 0; i < 5; i++) clReleaseMemObject(o[i]);
  tu_scan_host_free(&p);
  /* bad input */
  tu_tune_refused(c, "phase_x", "WM=1", NULL);
  tu_tune_refused(c, "gram", "XX=1", "unknown key 'XX'");
  /* defaults back */
  TU_OK(camdelta_tune_set(c, "gram", NULL));
  TU_OK(camdelta_tune_set(c, "apply", ""));
  TU_OK(camdelta_scan_plan_describe(c, &a, after, sizeof after));
  assert_string_equal(before, after);
}

/* Where the device has no tensor-core path, the same kernels with the mma emulated through local memory
 * (CAMDELTA_TC=emulate on a second context sharing the queue): their indexing, tails and host side checked in CI.
 * Small shapes, the emulation is slow. */
static void test_emulated(void **state) {
  (void)state;
  if (cd_tc_available(tu_context())) return; /* the real path ran above */
  camdelta_context *emu = tu_context_tc_emulated();
  assert_true(cd_tc_available(emu));
  assert_true(cd_tc_emulated(emu));
  g_ctx = emu;
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 1, a.D = 24, a.F = 2, a.S = 37, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  char plan[1024];
  TU_OK(camdelta_scan_plan_describe(emu, &a, plan, sizeof plan));
  assert_non_null(strstr(plan, "split-TF32"));
  static const size_t fs[][5] = {{1, 1, 24, 2, 37}, {1, 1, 40, 3, 21}};
  cases(fs, 2, 0);
  static const size_t bs[][5] = {{1, 1, 24, 2, 37}, {1, 1, 16, 3, 9}};
  cases(bs, 2, 1);
  override_checks(emu);
  g_ctx = NULL;
  camdelta_context_destroy(emu);
}

/* The gram's small-work tiles (the device table's entry for calls of few (b, h, f) frames, cd_tc_small_entry) on
 * the H100's facts, the mma emulated where the device has none: a chunkwise forward at D = 112 with B·H·F = 4
 * launches the entry's tiles (WM=7: 14 warps over the whole 112 x 112 product) and stays within the bound, as does
 * the backward (its W gram). */
static void test_small_work_gram(void **state) {
  (void)state;
  camdelta_context *c;
  TU_OK(camdelta_context_create_from_queue(&c, camdelta_context_cl_context(tu_context()),
                                           camdelta_context_queue(tu_context())));
  TU_OK(cd_context_emulate(c, "h100"));
  if (!cd_tc_available(c)) { /* an NVIDIA card with a failed feature test: nothing to emulate here */
    camdelta_context_destroy(c);
    return;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *trace = open_memstream(&text, &len);
  assert_non_null(trace);
  cd_trace_launches(c, trace, 0);
  g_ctx = c;
  static const size_t fs[][5] = {{1, 2, 112, 2, 129}};
  cases(fs, 1, 0);
  cases(fs, 1, 1);
  g_ctx = NULL;
  cd_trace_launches(c, NULL, 0);
  fclose(trace);
  if (!strstr(text, "cd_gram_tc [gemm_tc.cl -DCD_GRAM -DCD_D=112 -DCD_SPLIT=1 -DCD_VEC=0 -DCD_WM=7 -DCD_WN=2 -DCD_MR=1 "
                    "-DCD_NR=7 -DCD_KC=16"))
    fail_msg("no launch of the small-work gram tiles in:\n%s", text);
  free(text);
  camdelta_context_destroy(c);
}

/* The plan names the path: tensor cores where the feature test passed, else FMA with the tf32 fallback said. */
static void test_plan(void **state) {
  (void)state;
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 2, a.D = 24, a.F = 3, a.S = 37, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  char exact[1024], tf32[1024];
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, exact, sizeof exact));
  a.precision = CAMDELTA_PRECISION_TF32;
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, tf32, sizeof tf32));
  printf("plan exact: %s\nplan tf32:  %s\n", exact, tf32);
  assert_non_null(strstr(exact, "chunkwise; precision exact"));
  if (has_tc()) {
    assert_non_null(strstr(exact, "split-TF32"));
    assert_non_null(strstr(exact, "phase_a gram_tc"));
    assert_non_null(strstr(tf32, "precision tf32 (tensor cores)"));
  } else if (cd_scan_cpu_forms(tu_context(), a.D)) {
    assert_non_null(strstr(exact, "cpu forms (gram, chain, apply)"));
    assert_non_null(strstr(tf32, "tf32 requested, no tensor-core path"));
    assert_non_null(strstr(tf32, "cpu forms"));
  } else {
    assert_non_null(strstr(exact, "phase_a fma"));
    assert_non_null(strstr(tf32, "tf32 requested, no tensor-core path"));
    assert_non_null(strstr(tf32, "phase_c fma"));
  }
  if (has_tc()) override_checks(tu_context());
  a.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, exact, sizeof exact));
  /* a.precision is tf32: where phase C computes the sequential plan's outputs (OUT=2, GPUs) on tensor cores it
   * runs them in tf32; the state recurrence is always the FMA kernel */
  printf("plan sequential tf32: %s\n", exact);
  if (strstr(exact, "OUT=2") && has_tc()) {
    assert_non_null(strstr(exact, "sequential; precision tf32 (tensor cores); sequential fma"));
    assert_non_null(strstr(exact, "phase_c apply_tc"));
  } else {
    assert_non_null(strstr(exact, "sequential; precision exact (fma"));
  }
  /* too small a buffer, bad precision: clear errors */
  char tiny[8];
  assert_int_equal(camdelta_scan_plan_describe(tu_context(), &a, tiny, sizeof tiny), CAMDELTA_ERROR_INVALID_ARGUMENT);
  a.precision = (camdelta_precision)7;
  assert_int_equal(camdelta_scan_plan_describe(tu_context(), &a, exact, sizeof exact),
                   CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "precision"));
}

/* An unknown precision fails before anything is written. */
static void test_bad_precision(void **state) {
  (void)state;
  prob p;
  prob_make(&p, 1, 1, 16, 2, 9, 990);
  cl_mem q = tu_upload(p.q, p.tok * 4), k = tu_upload(p.k, p.tok * 4), v = tu_upload(p.v, p.tok * 4);
  cl_mem beta = tu_upload(p.beta, p.gates * 4), decay = tu_upload(p.decay, p.bhf * 4), o = tu_buffer(p.tok * 4);
  camdelta_scan_args a = {0};
  a.B = 1, a.H = 1, a.D = 16, a.F = 2, a.S = 9, a.precision = (camdelta_precision)2;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = beta, a.decay.mem = decay, a.out.mem = o;
  assert_int_equal(camdelta_scan_forward(tu_context(), &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "precision 2 unknown"));
  float *h = malloc(p.tok * 4);
  tu_download(o, 0, p.tok * 4, h);
  for (size_t i = 0; i < p.tok; i++) assert_true(isnan(h[i])); /* still the poison */
  camdelta_scan_backward_args b;
  memset(&b, 0, sizeof b);
  b.B = 1, b.H = 1, b.D = 16, b.F = 2, b.S = 9, b.precision = (camdelta_precision)-1;
  b.q.mem = q, b.k.mem = k, b.v.mem = v, b.beta.mem = beta, b.decay.mem = decay, b.grad_out.mem = q;
  b.dq.mem = o, b.dk.mem = o, b.dv.mem = o, b.dbeta.mem = o, b.ddecay.mem = o;
  assert_int_equal(camdelta_scan_backward(tu_context(), &b, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "precision -1 unknown"));
  free(h);
  cl_mem all[6] = {q, k, v, beta, decay, o};
  for (int i = 0; i < 6; i++) clReleaseMemObject(all[i]);
  tu_scan_host_free(&p);
}

static int report(void **state) {
  (void)state;
  tu_report("scan forward chunkwise exact: worst relative error (awkward shapes)", g_worst[0][0]);
  tu_report("scan forward chunkwise tf32: worst relative error (awkward shapes)", g_worst[0][1]);
  tu_report("scan backward exact: worst relative error (awkward shapes)", g_worst[1][0]);
  tu_report("scan backward tf32: worst relative error (awkward shapes)", g_worst[1][1]);
  tu_report("tensor-core path (1 = used)", has_tc());
  tu_context_release();
  return 0;
}

TU_MAIN(NULL, report,
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_bad_precision),
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_backward),
      cmocka_unit_test(test_emulated),
      cmocka_unit_test(test_small_work_gram))
