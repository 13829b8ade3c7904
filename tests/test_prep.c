/* Prep forward on the device against the f64 reference (docs/math.md §2, §5). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "ops/prep_common.h"
#include "prep_problem.h"

typedef struct shape {
  size_t B, N, H, D;
  camdelta_dtype dt;
  size_t offset;     /* element offset of every device tensor */
  size_t zero_every; /* zero all k of every such token */
} shape;

static const shape shapes[] = {
    {1, 1, 1, 8, CAMDELTA_F32, 0, 0},     {1, 7, 3, 8, CAMDELTA_F32, 5, 3},     {2, 33, 1, 16, CAMDELTA_F32, 0, 0},
    {1, 100, 3, 32, CAMDELTA_F32, 3, 7},  {2, 65, 20, 64, CAMDELTA_F32, 0, 0},  {1, 257, 3, 112, CAMDELTA_F32, 11, 5},
    {1, 2000, 20, 112, CAMDELTA_F32, 0, 0}, {2, 129, 1, 128, CAMDELTA_F32, 1, 0}, {1, 3001, 3, 128, CAMDELTA_F32, 0, 17},
    {1, 31, 3, 112, CAMDELTA_F16, 2, 4},  {2, 77, 1, 64, CAMDELTA_F16, 0, 0},   {1, 45, 3, 112, CAMDELTA_BF16, 7, 6},
    {2, 300, 20, 16, CAMDELTA_BF16, 0, 0}, {1, 1, 20, 128, CAMDELTA_F16, 0, 0},
};

/* Output bound: docs/math.md §5's 1e-6 for f32; one rounding of the output for 16-bit storage. */
static double bound_for(camdelta_dtype dt) { return dt == CAMDELTA_F32 ? 1e-6 : dt == CAMDELTA_F16 ? 1e-3 : 8e-3; }

static double worst[3][4];
static int g_variant = -1; /* CAMDELTA_PREP_FUSED of the current context, -1 = the device's default */

static void run_shape(const shape *s) {
  camdelta_context *ctx = tu_context();
  prep_problem p;
  prep_problem_init(&p, s->B, s->N, s->H, s->D, s->dt, 1000 + s->N * 7 + s->D, s->zero_every);
  const size_t BNHD = s->B * s->N * s->H * s->D, es = camdelta_dtype_size(s->dt), off = s->offset;
  cl_mem in[9];
  for (int i = 0; i < 9; i++) {
    if (i < 3) {
      void *packed = tu_pack(s->dt, p.in[i], p.count[i]);
      in[i] = tu_upload_at(packed, p.count[i], es, off, 0x7F);
      free(packed);
    } else {
      in[i] = tu_upload_at(p.in[i], p.count[i], 4, off, 0x7F);
    }
  }
  cl_mem q = tu_buffer((BNHD + off) * es), k = tu_buffer((BNHD + off) * es), v = tu_buffer((BNHD + off) * es);
  cl_mem infl = tu_buffer((s->B * s->H * s->N + off) * 4);
  camdelta_profile prof = {0, 0};
  camdelta_prep_args a = {s->B, s->N, s->H, s->D, s->dt, p.k_scale, p.norm_eps,
                          {in[0], off}, {in[1], off}, {in[2], off}, {in[3], off}, {in[4], off}, {in[5], off},
                          {in[6], off}, {in[7], off}, {in[8], off}, {q, off}, {k, off}, {v, off}, {infl, off}, &prof};
  TU_OK(camdelta_prep_forward(ctx, &a, NULL));
  /* the one-pass forms are one launch, the two-pass form two (inverse RMS, transform); a one-pass form asked for runs
   * unless its kernel cannot take 4 tokens' work-items (a device whose kernels allow few, e.g. Rusticl's 32) */
  int one_pass = g_variant > 0;
  if (g_variant >= 1) { /* and the form asked for is the one that ran (register-resident up to 64 heads) */
    cd_pf_plan pf;
    camdelta_status st;
    one_pass = cd_prep_fused_kernel(ctx, s->dt, s->D, s->H, cd_prep_ix32(s->B, s->N, s->H, s->D), &pf, &st);
    TU_OK(st);
    if (one_pass) {
      /* under a driver's loop budget (Rusticl) the CPU form takes fewer blocks per work-item until they fit, and
       * gives way to the GPUs' default form where one block does not */
      const size_t budget = cd_loop_budget(ctx);
      const int form = g_variant == 3 && budget && cd_prep_cpu_loops(s->H, s->D, 1) > budget ? (s->H <= 48 ? 2 : 1)
                                                                                              : g_variant;
      assert_int_equal(pf.regs, form == 2 && s->H <= 64);
      assert_int_equal(pf.cpu, form == 3);
      if (pf.cpu && budget) assert_true(cd_prep_cpu_loops(s->H, s->D, pf.pb) <= budget);
      clReleaseKernel(pf.k);
    } else { /* only where the device's kernels allow fewer than 4·D/4 work-items */
      cl_kernel kt;
      size_t ts;
      TU_OK(cd_prep_kernel(ctx, "prep.cl", "cd_prep_forward", s->dt, s->D, &kt, &ts));
      assert_true(cd_kernel_max_wg(ctx, kt) < s->D);
      clReleaseKernel(kt);
    }
  }
  if (g_variant >= 0) assert_int_equal(prof.kernels, one_pass ? 1 : 2);

  double *rq, *rk, *rv, *ri;
  prep_problem_reference(&p, &rq, &rk, &rv, &ri);
  void *raw = malloc(BNHD * es);
  float *got = malloc(BNHD * sizeof(float));
  const double *refs[3] = {rq, rk, rv};
  cl_mem outs[3] = {q, k, v};
  const char *names[3] = {"q", "k", "v"};
  for (int o = 0; o < 3; o++) {
    tu_download(outs[o], off * es, BNHD * es, raw);
    tu_unpack(s->dt, raw, got, BNHD);
    double e = tu_rel_err(got, refs[o], BNHD);
    if (e > worst[s->dt][o]) worst[s->dt][o] = e;
    if (e > bound_for(s->dt))
      fail_msg("B=%zu N=%zu H=%zu D=%zu %s: %s rel err %.3g > %.3g", s->B, s->N, s->H, s->D,
               camdelta_dtype_name(s->dt), names[o], e, bound_for(s->dt));
  }
  float *gi = malloc(s->B * s->H * s->N * sizeof(float));
  tu_download(infl, off * 4, s->B * s->H * s->N * 4, gi);
  double e = tu_rel_err(gi, ri, s->B * s->H * s->N);
  if (e > worst[s->dt][3]) worst[s->dt][3] = e;
  /* inflation_sq is f32 arithmetic on (possibly rounded) inputs in every dtype */
  if (e > 1e-6)
    fail_msg("B=%zu N=%zu H=%zu D=%zu %s: inflation_sq rel err %.3g", s->B, s->N, s->H, s->D,
             camdelta_dtype_name(s->dt), e);
  if (s->zero_every) {
    /* all-zero k: both norms clamp to 1e-12, so the ratio is exactly 1 */
    for (size_t b = 0; b < s->B; b++)
      for (size_t h = 0; h < s->H; h++)
        for (size_t n = 0; n < s->N; n += s->zero_every) assert_true(gi[(b * s->H + h) * s->N + n] == 1.0f);
  }
  free(gi), free(raw), free(got), free(rq), free(rk), free(rv), free(ri);
  for (int i = 0; i < 9; i++) clReleaseMemObject(in[i]);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(infl);
  prep_problem_free(&p);
}

static void test_prep_shapes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
  const char *outs[4] = {"q", "k", "v", "inflation_sq"};
  for (int dt = 0; dt < 3; dt++)
    for (int o = 0; o < 4; o++) {
      char what[96];
      snprintf(what, sizeof what, "prep_forward max rel err %s %s", camdelta_dtype_name((camdelta_dtype)dt), outs[o]);
      tu_report(what, worst[dt][o]);
    }
}

/* Every form of the prep forward on this device, whatever its default: a fresh context per form, chosen through
 * camdelta_tune_set "prep" with the given tiles (ix64: 64-bit indices where 32 would do). The one-pass forms on a
 * subset of the shapes (every D, partial token tiles, B = 2 rows, offsets, zero k tokens, both 16-bit types) keep
 * PoCL's compile time low. */
static void check_saved(void);

static void run_variant(int form, const char *tiles, int ix64, const size_t *which, size_t count) {
  tu_context_release();
  char params[128];
  snprintf(params, sizeof params, "FORM=%d%s%s", form, tiles ? "," : "", tiles ? tiles : "");
  TU_OK(camdelta_tune_set(tu_context(), "prep", params));
  if (ix64) cd_opt_put(&tu_context()->opts, CD_OPT_PREP_IX, 64, CD_OPT_FROM_API);
  g_variant = form;
  for (size_t i = 0; i < count; i++) run_shape(&shapes[which[i]]);
  check_saved();
  if (ix64) { /* every register-resident program of the context counts in 64 bits */
    int regs = 0;
    for (const cd_program_entry *e = tu_context()->programs; e; e = e->next) {
      assert_null(strstr(e->key, "-DCD_IX32=1"));
      regs += strstr(e->key, "-DCD_IX32=0") != NULL;
    }
    assert_true(regs > 0);
  }
  tu_context_release();
  g_variant = -1;
}

/* The fused form: one and several heads per step (D = 64: two), more steps than the inflation ring holds (H = 20 at
 * D = 64 and 128), partial tiles, B = 2, unaligned offsets, both 16-bit types (16-token tiles); then other tiles
 * and one work-group per compute unit (each walks many tiles). */
/* The constrained-device profiles' case (tests/run_profile.sh): the production head dim, f32 and f16, few tokens. */
static void test_prep_profile(void **state) {
  (void)state;
  static const shape cases[] = {{1, 20, 2, 112, CAMDELTA_F32, 3, 5}, {2, 9, 3, 112, CAMDELTA_F16, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_shape(&cases[i]);
}

static void test_prep_fused(void **state) {
  (void)state;
  static const size_t which[] = {1, 2, 4, 5, 7, 8, 9, 12, 13};
  memset(worst, 0, sizeof worst);
  run_variant(1, NULL, 0, which, sizeof which / sizeof which[0]);
  static const size_t other[] = {4, 5, 9};
  run_variant(1, "TT=4,WPC=1", 0, other, sizeof other / sizeof other[0]);
  run_variant(1, "TT=16,WPC=3", 0, other, 2);
  tu_report("prep_forward fused max rel err f32 q", worst[0][0]);
  tu_report("prep_forward fused max rel err f32 inflation_sq", worst[0][3]);
}

/* The register-resident form (CAMDELTA_PREP_FUSED=2): one head and many, ragged token tiles, B = 2, aligned and
 * unaligned offsets, zero k tokens, both 16-bit types, D from 8 to 128 (a program per shape: seven of the table's
 * fourteen keep PoCL's compile time down); 4-token tiles; 64-bit indices; rings of k's squares that end full or partial; and 65
 * heads, past what it holds in registers, where the context falls back to the staged one-pass form (checked
 * through the plan in run_shape). */
static void test_prep_regs(void **state) {
  (void)state;
  static const size_t which[] = {0, 1, 4, 5, 7, 9, 12};
  memset(worst, 0, sizeof worst);
  run_variant(2, NULL, 0, which, sizeof which / sizeof which[0]);
  static const size_t other[] = {5, 4};
  run_variant(2, "TT=4", 0, other, 1);
  /* 64-bit index arithmetic, which the calls too large for 32 bits take (cd_prep_ix32) */
  run_variant(2, NULL, 1, other, 2);
  /* the norm weights read in the head loop (WL=1), applied before the barrier (2), staged in local memory (3): f32
   * with B = 2, f16 at D = 112 with offsets and zero k tokens, bf16 at D = 16 with B = 2 */
  static const size_t wl[] = {4, 9, 12};
  run_variant(2, "WL=1", 0, wl, 3);
  run_variant(2, "WL=2", 0, wl, 3);
  run_variant(2, "WL=3", 0, wl, 3);
  /* k's squares go through rings of 8 heads (CD_RR): 23 heads end in a partial ring, 40 in a full one */
  static const shape rings[] = {{1, 19, 23, 128, CAMDELTA_F32, 1, 3}, {1, 13, 40, 128, CAMDELTA_F32, 0, 2}};
  static const shape many = {1, 9, 65, 8, CAMDELTA_F32, 1, 4};
  tu_context_release();
  setenv("CAMDELTA_PREP_FUSED", "2", 1);
  g_variant = 2;
  for (size_t i = 0; i < sizeof rings / sizeof rings[0]; i++) run_shape(&rings[i]);
  run_shape(&many);
  tu_context_release();
  unsetenv("CAMDELTA_PREP_FUSED");
  g_variant = -1;
  tu_report("prep_forward register-resident max rel err f32 q", worst[0][0]);
  tu_report("prep_forward register-resident max rel err f32 k", worst[0][1]);
  tu_report("prep_forward register-resident max rel err f32 v", worst[0][2]);
  tu_report("prep_forward register-resident max rel err f32 inflation_sq", worst[0][3]);
}

/* The form rule, without a device: CPUs the CPU form, GPUs the register-resident form up to 48 heads and the staged
 * one past them or while H is not known (camdelta_warm); an explicit choice holds, except the register-resident
 * form past 64 heads. And where that form's indices fit 32 bits. */
static void test_prep_form_rule(void **state) {
  (void)state;
  const cd_opt_decl *form = &cd_opt_decls[CD_OPT_PREP_FORM];
  assert_int_equal(form->def[cd_opt_default_index(0, 0)], 3);
  assert_int_equal(form->def[cd_opt_default_index(0, 1)], 3);
  assert_int_equal(form->def[cd_opt_default_index(1, 0)], CD_OPT_AUTO);
  assert_int_equal(form->def[cd_opt_default_index(1, 1)], CD_OPT_AUTO);
  assert_int_equal(cd_prep_forward_form(CD_OPT_AUTO, 20), 2);
  assert_int_equal(cd_prep_forward_form(CD_OPT_AUTO, 48), 2);
  assert_int_equal(cd_prep_forward_form(CD_OPT_AUTO, 49), 1);
  assert_int_equal(cd_prep_forward_form(CD_OPT_AUTO, 0), 1);
  assert_int_equal(cd_prep_forward_form(0, 20), 0);
  assert_int_equal(cd_prep_forward_form(1, 20), 1);
  assert_int_equal(cd_prep_forward_form(2, 3), 2);
  assert_int_equal(cd_prep_forward_form(2, 64), 2);
  assert_int_equal(cd_prep_forward_form(2, 65), 1);
  assert_int_equal(cd_prep_forward_form(2, 0), 1);
  assert_int_equal(cd_prep_forward_form(3, 20), 3);
  assert_int_equal(cd_prep_forward_form(3, 65), 3);
  /* 32-bit indices up to 2^32 - 1 elements in the rows and in the camera matrices (16 per token) */
  assert_int_equal(cd_prep_ix32(1, 32760, 20, 112), 1);
  assert_int_equal(cd_prep_ix32(1, ((size_t)1 << 26) - 1, 8, 8), 1);
  assert_int_equal(cd_prep_ix32(1, (size_t)1 << 26, 8, 8), 0);
  assert_int_equal(cd_prep_ix32(2, (size_t)1 << 25, 8, 8), 0);
  assert_int_equal(cd_prep_ix32(1, (size_t)1 << 28, 1, 8), 0);
  assert_int_equal(cd_prep_ix32(1, ((size_t)1 << 28) - 1, 1, 8), 1);
  /* where the register-resident form reads the norm weights: staged in local memory in f32 and in 16-bit below
   * D = 96, applied before the barrier in 16-bit from D = 96, in the loop where the staged weights do not fit (64
   * heads of 128 at 16 tokens: 32 KiB of weights and 32 KiB of squares), and as option WL says */
  static camdelta_context c; /* zeroed: no override */
  c.info.local_mem_bytes = 48 * 1024;
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F32, 20, 112, 8), 2);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_BF16, 20, 112, 16), 1);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F16, 20, 96, 16), 1);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_BF16, 20, 64, 16), 2);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F32, 48, 128, 8), 2);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F32, 64, 128, 16), 0);
  cd_opt_put(&c.opts, CD_OPT_PREP_WL, 1, CD_OPT_FROM_API);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F32, 20, 112, 8), 0);
  cd_opt_put(&c.opts, CD_OPT_PREP_WL, 2, CD_OPT_FROM_API);
  assert_int_equal(cd_prep_weights_mode(&c, CAMDELTA_F32, 20, 112, 8), 1);
}

/* A tuning override that does not parse or is out of range fails the context creation, naming the variable. */
static void test_prep_tiles_env(void **state) {
  (void)state;
  static const char *const bad[] = {"TT=5", "TT=32", "TT=8,PF=2", "WPC=0", "TT", "IX=64", "WL=4", "PB=3"};
  tu_check_bad_env("CAMDELTA_PREP_TILES", bad, sizeof bad / sizeof bad[0]);
}

/* The CPU form (FORM=3), whatever the device's default: partial 8-token blocks and work-items (N = 1, 7, 33, 65,
 * 257), B = 2, one head and many, D from 8 to 128 with the camera half ending inside an 8-channel group (D = 8),
 * offsets, zero k tokens, both 16-bit types; then one and four blocks per work-item. */
static void test_prep_cpu(void **state) {
  (void)state;
  static const size_t which[] = {0, 1, 2, 4, 5, 7, 9, 11, 12};
  memset(worst, 0, sizeof worst);
  run_variant(3, NULL, 0, which, sizeof which / sizeof which[0]);
  static const size_t other[] = {1, 5};
  run_variant(3, "PB=1", 0, other, 2);
  run_variant(3, "PB=4", 0, other, 2);
  tu_report("prep_forward cpu max rel err f32 q", worst[0][0]);
  tu_report("prep_forward cpu max rel err f32 k", worst[0][1]);
  tu_report("prep_forward cpu max rel err f32 inflation_sq", worst[0][3]);
}

/* The CPU form under a driver's loop budget (emulated: loops=N): at loops=20000, H=20 D=64 takes 4 blocks per
 * work-item (8 would need 30589 iterations, 4 need 15545) and H=3 D=32 keeps 8 (fewer where the device's local
 * memory holds fewer blocks' tables: Rusticl's 4); at loops=4000 the first gives way (one block needs 4262) while the
 * second runs; the results are the reference's. */
static void test_prep_cpu_loop_budget(void **state) {
  (void)state;
  char *was = tu_limits_saved();
  static const size_t which[] = {3, 4};
  static const char *const budgets[] = {"loops=20000", "loops=4000"};
  static const unsigned pb[2][2] = {{8, 4}, {8, 0}}; /* 0: the GPU form */
  for (int b = 0; b < 2; b++) {
    tu_limits_env(was, budgets[b]);
    run_variant(3, NULL, 0, which, 2);
    TU_OK(camdelta_tune_set(tu_context(), "prep", "FORM=3"));
    unsigned cap = 8; /* the blocks whose tables the device's local memory holds */
    while (cap > 1 && (uint64_t)cap * (34 + CAMDELTA_MAX_HEAD_DIM) * 32 > tu_context()->info.local_mem_bytes) cap /= 2;
    for (int i = 0; i < 2; i++) {
      const shape *s = &shapes[which[i]];
      cd_pf_plan pf;
      camdelta_status st;
      const int one = cd_prep_fused_kernel(tu_context(), s->dt, s->D, s->H, 1, &pf, &st);
      TU_OK(st);
      const unsigned want = pb[b][i] < cap ? pb[b][i] : cap;
      if (!one) { /* neither one-pass GPU form fits the device's kernels (the two-pass form runs) */
        assert_int_equal(want, 0);
        continue;
      }
      assert_int_equal(pf.cpu ? pf.pb : 0, want);
      clReleaseKernel(pf.k);
    }
  }
  tu_limits_restore(was);
}

static void test_prep_two_pass(void **state) {
  (void)state;
  static const size_t which[] = {1, 5, 8, 9, 12};
  run_variant(0, NULL, 0, which, sizeof which / sizeof which[0]);
}

/* The saved object holds the inverse RMS values; a second forward reuses it. */
static void check_saved(void) {
  camdelta_context *ctx = tu_context();
  camdelta_prep_saved *saved = NULL;
  TU_OK(camdelta_prep_saved_create(ctx, &saved));
  for (int rep = 0; rep < 2; rep++) {
    prep_problem p;
    prep_problem_init(&p, 1, 40 + 10 * rep, 2, 16, CAMDELTA_F32, 77 + rep, 0);
    const size_t BNHD = p.B * p.N * p.H * p.D;
    cl_mem in[9];
    for (int i = 0; i < 9; i++) in[i] = tu_upload(p.in[i], p.count[i] * 4);
    cl_mem q = tu_buffer(BNHD * 4), k = tu_buffer(BNHD * 4), v = tu_buffer(BNHD * 4), infl = tu_buffer(p.B * p.H * p.N * 4);
    camdelta_prep_args a = {p.B, p.N, p.H, p.D, p.dtype, p.k_scale, p.norm_eps, {in[0], 0}, {in[1], 0}, {in[2], 0},
                            {in[3], 0}, {in[4], 0}, {in[5], 0}, {in[6], 0}, {in[7], 0}, {in[8], 0}, {q, 0}, {k, 0},
                            {v, 0}, {infl, 0}, NULL};
    TU_OK(camdelta_prep_forward(ctx, &a, saved));
    TU_OK(camdelta_finish(ctx));
    assert_int_equal(saved->valid, 1);
    float *inv = malloc(2 * p.N * sizeof(float));
    tu_download(saved->inv_rms, 0, 2 * p.N * 4, inv);
    for (size_t n = 0; n < p.N; n++) {
      double sq = 0;
      for (size_t c = 0; c < p.H * p.D; c++) sq += (double)p.in[0][n * p.H * p.D + c] * p.in[0][n * p.H * p.D + c];
      double ref = 1.0 / sqrt(sq / (double)(p.H * p.D) + 1e-6);
      assert_true(fabs(inv[n] - ref) <= 1e-6 * ref);
    }
    free(inv);
    for (int i = 0; i < 9; i++) clReleaseMemObject(in[i]);
    clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(infl);
    prep_problem_free(&p);
  }
  camdelta_prep_saved_destroy(saved);
}

static void test_prep_saved(void **state) {
  (void)state;
  check_saved();
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_prep_shapes),
      cmocka_unit_test(test_prep_profile),
      cmocka_unit_test(test_prep_saved),
      cmocka_unit_test(test_prep_fused),
      cmocka_unit_test(test_prep_regs),
      cmocka_unit_test(test_prep_form_rule),
      cmocka_unit_test(test_prep_two_pass),
      cmocka_unit_test(test_prep_cpu),
      cmocka_unit_test(test_prep_cpu_loop_budget),
      cmocka_unit_test(test_prep_tiles_env))
