/* The CPU forms of the scan's phases (cl/scan_cpu.cl, src/scan/cpu.c), forced on whatever device the tests run on
 * (option scan CPU=1) through the engine's forward (gram → chain → apply) and backward (gram → chain → frames →
 * ddecay),
 * against the f64 reference (SPEC sections 3-5): both directions, init and final states, states and A_f from the
 * forward or recomputed, awkward shapes (D = 8 .. 128, partial token blocks and chunks, F = 1), offsets, decay 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "scan/cpu.h"
#include "testutil.h"

#define FWD_BOUND 1e-5
#define BWD_BOUND 1e-4

typedef struct sc_case {
  size_t B, H, D, F, S;
  int reverse;
  int states;     /* init_state, final_state, grad_final_state and dinit_state given */
  int from_fwd;   /* the backward reads the forward's states and A_f (else it recomputes them) */
  size_t off;     /* element offset of every device tensor */
  int zero_decay; /* decay of frame 1 (or 0) is exactly 0 */
} sc_case;

enum { IQ, IK, IV, IBETA, IDECAY, IINIT, IGO, IGF, NIN };
enum { OOUT, OFINAL, ODQ, ODK, ODV, ODBETA, ODDECAY, ODINIT, NOUT };
static const char *const out_names[NOUT] = {"out", "final_state", "dq", "dk", "dv", "dbeta", "ddecay", "dinit_state"};
static double worst[NOUT];

static const char *describe(const sc_case *c) {
  static char buf[160];
  snprintf(buf, sizeof buf, "B%zu H%zu D%zu F%zu S%zu %s%s%s off %zu%s", c->B, c->H, c->D, c->F, c->S,
           c->reverse ? "reverse" : "causal", c->states ? " states" : "", c->from_fwd ? " from-forward" : "", c->off,
           c->zero_decay ? " decay0" : "");
  return buf;
}

static void check(const sc_case *c, int o, cl_mem m, size_t n, const double *ref, double bound) {
  float *got = malloc(n * sizeof(float));
  assert_non_null(got);
  tu_download(m, c->off * sizeof(float), n * sizeof(float), got);
  const double e = tu_rel_err(got, ref, n);
  free(got);
  if (e > worst[o]) worst[o] = e;
  if (!(e <= bound)) fail_msg("%s: %s rel err %.3g > %.3g", describe(c), out_names[o], e, bound);
}

static void run_case(const sc_case *c) {
  camdelta_context *ctx = tu_context();
  const size_t N = c->F * c->S, elems = c->B * c->H * c->D * N, gates = c->B * c->H * N, BHF = c->B * c->H * c->F,
               BHDD = c->B * c->H * c->D * c->D;
  const size_t count[NIN] = {elems, elems, elems, gates, BHF, BHDD, elems, BHDD};
  float *in[NIN];
  double *in64[NIN];
  tu_seed(4000 + c->D * 13 + c->F * 7 + c->S + (uint64_t)c->reverse * 3 + (uint64_t)c->states * 5);
  for (int i = 0; i < NIN; i++) {
    in[i] = malloc(count[i] * sizeof(float));
    assert_non_null(in[i]);
  }
  /* keys scaled like k_scale = (D S)^-1/2 keep I − KᵀβK a contraction */
  tu_fill_normal(in[IQ], elems, 1.0);
  tu_fill_normal(in[IK], elems, 1.0 / sqrt((double)(c->D * c->S)));
  tu_fill_normal(in[IV], elems, 1.0);
  tu_fill_uniform(in[IBETA], gates, 0.0, 1.0);
  tu_fill_uniform(in[IDECAY], BHF, 0.5, 1.0);
  tu_fill_normal(in[IINIT], BHDD, 0.5);
  tu_fill_normal(in[IGO], elems, 1.0);
  tu_fill_normal(in[IGF], BHDD, 1.0);
  if (c->zero_decay)
    for (size_t bh = 0; bh < c->B * c->H; bh++) in[IDECAY][bh * c->F + (c->F > 1 ? 1 : 0)] = 0.0f;
  for (int i = 0; i < NIN; i++) in64[i] = tu_to_f64(in[i], count[i]);

  const size_t ocount[NOUT] = {elems, BHDD, elems, elems, elems, gates, BHF, BHDD};
  double *ref[NOUT];
  for (int o = 0; o < NOUT; o++) {
    ref[o] = malloc(ocount[o] * sizeof(double));
    assert_non_null(ref[o]);
  }
  const camdelta_ref_scan r = {.B = c->B, .H = c->H, .D = c->D, .F = c->F, .S = c->S, .reverse = c->reverse,
                               .q = in64[IQ], .k = in64[IK], .v = in64[IV], .beta = in64[IBETA],
                               .decay = in64[IDECAY], .init_state = c->states ? in64[IINIT] : NULL,
                               .out = ref[OOUT], .final_state = ref[OFINAL]};
  TU_OK(camdelta_ref_scan_forward(&r));
  const camdelta_ref_scan_grads rg = {.grad_out = in64[IGO], .grad_final_state = c->states ? in64[IGF] : NULL,
                                      .dq = ref[ODQ], .dk = ref[ODK], .dv = ref[ODV], .dbeta = ref[ODBETA],
                                      .ddecay = ref[ODDECAY], .dinit_state = ref[ODINIT]};
  TU_OK(camdelta_ref_scan_backward(&r, &rg));

  cl_mem d[NIN], o[NOUT];
  for (int i = 0; i < NIN; i++) d[i] = tu_upload_at(in[i], count[i], sizeof(float), c->off, 0xFF);
  for (int i = 0; i < NOUT; i++) o[i] = tu_buffer((ocount[i] + c->off) * sizeof(float));
#define BUF(m) ((camdelta_buffer){(m), c->off})
  const camdelta_buffer none = {NULL, 0};

  /* the CPU forms forced on this device: the plans must take them (their description says so) */
  TU_OK(camdelta_tune_set(ctx, "scan", "CPU=1"));
  camdelta_scan_algorithm used = CAMDELTA_SCAN_SEQUENTIAL;
  const camdelta_scan_args fa = {.B = c->B, .H = c->H, .D = c->D, .F = c->F, .S = c->S, .reverse = c->reverse,
                                 .algorithm = CAMDELTA_SCAN_AUTO, .used = &used,
                                 .q = BUF(d[IQ]), .k = BUF(d[IK]), .v = BUF(d[IV]), .beta = BUF(d[IBETA]),
                                 .decay = BUF(d[IDECAY]), .out = BUF(o[OOUT]),
                                 .init_state = c->states ? BUF(d[IINIT]) : none,
                                 .final_state = c->states ? BUF(o[OFINAL]) : none};
  char text[1024];
  TU_OK(camdelta_scan_plan_describe(ctx, &fa, text, sizeof text));
  if (!strstr(text, "cpu forms")) fail_msg("%s: the forward's plan is not the CPU forms': %s", describe(c), text);
  camdelta_scan_saved *saved = NULL;
  if (c->from_fwd) TU_OK(camdelta_scan_saved_create(ctx, &saved));
  TU_OK(camdelta_scan_forward(ctx, &fa, saved));
  assert_int_equal(used, CAMDELTA_SCAN_CHUNKWISE);
  check(c, OOUT, o[OOUT], elems, ref[OOUT], FWD_BOUND);
  if (c->states) check(c, OFINAL, o[OFINAL], BHDD, ref[OFINAL], FWD_BOUND);

  /* from the forward: its states and A_f; else the backward recomputes both */
  const camdelta_scan_backward_args ba = {
      .B = c->B, .H = c->H, .D = c->D, .F = c->F, .S = c->S, .reverse = c->reverse, .q = BUF(d[IQ]),
      .k = BUF(d[IK]), .v = BUF(d[IV]), .beta = BUF(d[IBETA]), .decay = BUF(d[IDECAY]),
      .init_state = c->states ? BUF(d[IINIT]) : none, .grad_out = BUF(d[IGO]),
      .grad_final_state = c->states ? BUF(d[IGF]) : none, .dq = BUF(o[ODQ]), .dk = BUF(o[ODK]), .dv = BUF(o[ODV]),
      .dbeta = BUF(o[ODBETA]), .ddecay = BUF(o[ODDECAY]), .dinit_state = c->states ? BUF(o[ODINIT]) : none};
  TU_OK(camdelta_scan_backward_plan_describe(ctx, &ba, text, sizeof text));
  if (!strstr(text, "cpu forms")) fail_msg("%s: the backward's plan is not the CPU forms': %s", describe(c), text);
  TU_OK(camdelta_scan_backward(ctx, &ba, saved));
  camdelta_scan_saved_destroy(saved);
  for (int k = ODQ; k < NOUT; k++)
    if (k != ODINIT || c->states) check(c, k, o[k], ocount[k], ref[k], BWD_BOUND);
#undef BUF

  for (int i = 0; i < NIN; i++) clReleaseMemObject(d[i]), free(in[i]), free(in64[i]);
  for (int i = 0; i < NOUT; i++) clReleaseMemObject(o[i]), free(ref[i]);
}

static void report_worst(const char *prefix) { tu_report_worst(prefix, out_names, worst, NOUT); }

/* The CPU forms give way, even where they are forced, to the tensor-core path (a device that has it: NVIDIA's),
 * whose plans must say so; there is nothing of the CPU forms to run there: 1. Under a loop budget (cd_loop_budget:
 * Rusticl on llvmpipe) they split their walks and run. */
static int cpu_forms_off(void) {
  camdelta_context *ctx = tu_context();
  TU_OK(camdelta_tune_set(ctx, "scan", "CPU=1"));
  camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
  a.B = 1, a.H = 1, a.D = 16, a.F = 2, a.S = 8, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  char text[1024];
  TU_OK(camdelta_scan_plan_describe(ctx, &a, text, sizeof text));
  if (strstr(text, "cpu forms")) return 0;
  if (!strstr(text, "tensor cores")) fail_msg("the CPU forms forced, no tensor-core path, yet: %s", text);
  return 1;
}

/* Both directions, states on and off, from the forward and recomputed. */
static void test_scan_cpu_medium(void **state) {
  (void)state;
  if (cpu_forms_off()) return;
  for (int rev = 0; rev < 2; rev++)
    for (int states = 0; states < 2; states++)
      for (int from = 0; from < 2; from++) {
        const sc_case c = {.B = 1, .H = 3, .D = 64, .F = 5, .S = 150, .reverse = rev, .states = states,
                           .from_fwd = from, .off = states ? 3 : 0};
        run_case(&c);
      }
  report_worst("scan_cpu medium");
}

/* Every column-block width (D % 16 == 0 and not, one block and several), tiny and the largest D, F = 1, token counts
 * below one vector, below one block, one past a chunk, offsets, decay = 0. Few head dims (each is a program to
 * compile): 8, 16, 24, 112, 128, and 64 above. */
static void test_scan_cpu_shapes(void **state) {
  (void)state;
  if (cpu_forms_off()) return;
  static const sc_case cases[] = {
      {.B = 1, .H = 1, .D = 8, .F = 4, .S = 9},
      {.B = 1, .H = 1, .D = 8, .F = 4, .S = 9, .reverse = 1, .states = 1, .off = 1},
      {.B = 2, .H = 1, .D = 16, .F = 3, .S = 64, .states = 1, .from_fwd = 1},
      {.B = 2, .H = 1, .D = 16, .F = 3, .S = 65, .reverse = 1, .from_fwd = 1, .off = 2},
      {.B = 1, .H = 2, .D = 16, .F = 1, .S = 33, .states = 1},
      {.B = 1, .H = 2, .D = 16, .F = 1, .S = 5, .reverse = 1, .states = 1},
      {.B = 1, .H = 2, .D = 24, .F = 4, .S = 20, .states = 1, .off = 5, .zero_decay = 1},
      {.B = 1, .H = 2, .D = 24, .F = 4, .S = 20, .reverse = 1, .states = 1, .from_fwd = 1, .off = 5, .zero_decay = 1},
      {.B = 1, .H = 1, .D = 24, .F = 2, .S = 7, .reverse = 1, .states = 1, .from_fwd = 1},
      {.B = 1, .H = 1, .D = 112, .F = 3, .S = 70, .states = 1},
      {.B = 1, .H = 1, .D = 112, .F = 3, .S = 70, .reverse = 1, .states = 1, .from_fwd = 1, .off = 7},
      {.B = 1, .H = 1, .D = 24, .F = 2, .S = 40, .from_fwd = 1, .zero_decay = 1},
      {.B = 1, .H = 1, .D = 128, .F = 2, .S = 129, .states = 1, .from_fwd = 1},
      {.B = 1, .H = 1, .D = 128, .F = 2, .S = 65, .reverse = 1, .states = 1, .off = 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  report_worst("scan_cpu shapes");
}

/* The production head dim and a frame of several hundred tokens (chunks and blocks in the thousands). */
static void test_scan_cpu_d112(void **state) {
  (void)state;
  if (cpu_forms_off()) return;
  for (int rev = 0; rev < 2; rev++) {
    const sc_case c = {.B = 1, .H = 2, .D = 112, .F = 4, .S = 300, .reverse = rev, .states = 1, .from_fwd = rev};
    run_case(&c);
  }
  report_worst("scan_cpu d112");
}

/* A driver that ends a work-item's loops after a number of iterations per launch (Mesa's llvmpipe: 65535), emulated
 * with CAMDELTA_DEVICE_LIMITS loops=N: at loops=3000 and D=24 the gram sums a frame's 300 tokens in two launches
 * (one chunk of 256 each) and the chains run 12 steps per launch (the forward's 16 in two, the backward's recomputed
 * states and gradients in three), the state carried; the results are the reference's and the plans say how the walks
 * split. A budget below one step of them: the CPU forms give way. */
static void test_scan_cpu_loop_budget(void **state) {
  (void)state;
  char *was = tu_limits_saved();
  tu_limits_env(was, "loops=3000");
  if (cpu_forms_off()) {
    tu_limits_restore(was);
    return;
  }
  for (int rev = 0; rev < 2; rev++) {
    const sc_case c = {.B = 1, .H = 2, .D = 24, .F = 16, .S = 300, .reverse = rev, .states = 1, .from_fwd = rev};
    run_case(&c);
  }
  camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
  a.B = 1, a.H = 2, a.D = 24, a.F = 16, a.S = 300, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  char text[1024];
  TU_OK(camdelta_scan_plan_describe(tu_context(), &a, text, sizeof text));
  printf("forward: %s\n", text);
  if (!strstr(text, "cpu forms") || !strstr(text, "the gram sums 256 tokens per launch") ||
      !strstr(text, "12 frames per launch"))
    fail_msg("the forward's plan does not say how its walks split: %s", text);
  camdelta_scan_backward_args b = CAMDELTA_SCAN_BACKWARD_ARGS_INIT;
  b.B = 1, b.H = 2, b.D = 24, b.F = 16, b.S = 300;
  TU_OK(camdelta_scan_backward_plan_describe(tu_context(), &b, text, sizeof text));
  printf("backward: %s\n", text);
  if (!strstr(text, "cpu forms") || !strstr(text, "grams 256 tokens per launch, chain 12 steps per launch"))
    fail_msg("the backward's plan does not say how its walks split: %s", text);
  /* not one chunk of the gram fits (2423 iterations): the work-group forms */
  assert_true(cd_scan_cpu_forms(tu_context(), 24));
  tu_limits_env(was, "loops=2400");
  TU_OK(camdelta_tune_set(tu_context(), "scan", "CPU=1"));
  assert_false(cd_scan_cpu_forms(tu_context(), 24));
  report_worst("scan_cpu loop budget");
  tu_limits_restore(was);
}

TU_MAIN(NULL, tu_teardown_context, cmocka_unit_test(test_scan_cpu_medium), cmocka_unit_test(test_scan_cpu_shapes),
        cmocka_unit_test(test_scan_cpu_d112), cmocka_unit_test(test_scan_cpu_loop_budget))
