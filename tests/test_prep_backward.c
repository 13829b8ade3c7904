/* Prep backward on the device against the f64 reference (docs/math.md §4, §5): every gradient, each upstream
 * gradient optional, the inflation_sq clamps, 16-bit storage, offsets, saved inverse RMS values from the
 * forward, determinism, and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/backward.h"
#include "runtime/internal.h"
#include "ops/prep_backward_fused.h"
#include "prep_problem.h"

enum { GQ = 1, GK = 2, GV = 4, GI = 8, GALL = 15 };

typedef struct pb_case {
  size_t B, N, H, D;
  camdelta_dtype dt;
  size_t off;        /* element offset of every device tensor */
  size_t zero_every; /* zero all of k_raw for every such token (both inflation clamps) */
  unsigned grads;    /* which upstream gradients are given */
  int all;           /* also dproj_q, dproj_kv, drope_cos, drope_sin */
  int saved;         /* 1: a saved object from camdelta_prep_forward; 2: that and the forward's q, k, inflation_sq */
} pb_case;

enum { ODQ, ODK, ODV, OQW, OKW, OPQ, OPKV, OCOS, OSIN, NOUT };
static const char *out_names[NOUT] = {"dq_raw",   "dk_raw",  "dv_raw",    "dq_norm_weight", "dk_norm_weight",
                                      "dproj_q", "dproj_kv", "drope_cos", "drope_sin"};
static double worst[3][NOUT];
static int g_variant = -1; /* CAMDELTA_PREP_BWD_FUSED of the current context, -1 = the device's default */

/* Whether a call of case c takes the CPU form (cl/prep_cpu.cl): CPUs by default, where the driver has no loop
 * budget. */
static int uses_cpu(const pb_case *c) { return cd_prep_backward_cpu_form(tu_context(), c->dt); }

/* Whether a call of case c takes the fused form (cl/prep_backward_fused.cl): GPUs and accelerators by default,
 * never with dproj/drope. */
static int uses_fused(const pb_case *c) {
  if (c->all || uses_cpu(c)) return 0;
  int want = g_variant;
  if (want < 0) {
    camdelta_device_info info;
    TU_OK(camdelta_context_info(tu_context(), &info));
    want = (info.type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
  }
  if (want != 1) return 0;
  /* and its kernels take a tile's work-items (where they allow few, e.g. Rusticl's 32 at D=112, the three-kernel
   * form runs) */
  cd_pbf_plan p;
  camdelta_status st;
  int fits = 1;
  for (int g2 = 0; g2 < 2 && fits; g2++) {
    fits = cd_pbf_kernels(tu_context(), c->dt, c->D, g2, CD_PBF_P1_RAW, &p, &st);
    TU_OK(st);
    if (fits) cd_pbf_release(&p);
  }
  return fits;
}

typedef struct pb_data {
  prep_problem p;
  float *g[4]; /* grad_q grad_k grad_v (rounded to dtype) and grad_inflation_sq */
  size_t gcount[4];
  size_t count[NOUT];
} pb_data;

static void data_init(pb_data *x, const pb_case *c, uint64_t seed) {
  memset(x, 0, sizeof *x);
  prep_problem_init(&x->p, c->B, c->N, c->H, c->D, c->dt, seed, c->zero_every);
  const size_t BNHD = c->B * c->N * c->H * c->D, Dh = c->D / 2;
  const size_t gc[4] = {BNHD, BNHD, BNHD, c->B * c->H * c->N};
  for (int i = 0; i < 4; i++) {
    x->gcount[i] = gc[i];
    x->g[i] = malloc(gc[i] * sizeof(float));
    assert_non_null(x->g[i]);
    tu_fill_normal(x->g[i], gc[i], i == 3 ? 0.3 : 1.0);
    if (i < 3) tu_round_to(c->dt, x->g[i], gc[i]);
  }
  const size_t oc[NOUT] = {BNHD, BNHD, BNHD, c->H * c->D, c->H * c->D, c->B * c->N * 16, c->B * c->N * 16,
                           c->N * Dh, c->N * Dh};
  memcpy(x->count, oc, sizeof oc);
}

static void data_free(pb_data *x) {
  for (int i = 0; i < 4; i++) free(x->g[i]);
  prep_problem_free(&x->p);
}

static void reference(const pb_data *x, const pb_case *c, double *ref[NOUT]) {
  double *in[9], *g[4];
  for (int i = 0; i < 9; i++) in[i] = tu_to_f64(x->p.in[i], x->p.count[i]);
  for (int i = 0; i < 4; i++) g[i] = tu_to_f64(x->g[i], x->gcount[i]);
  for (int o = 0; o < NOUT; o++) {
    ref[o] = malloc(x->count[o] * sizeof(double));
    assert_non_null(ref[o]);
  }
  camdelta_ref_prep r = {c->B,  c->N,  c->H,  c->D,  x->p.k_scale, x->p.norm_eps, in[0], in[1], in[2], in[3], in[4],
                         in[5], in[6], in[7], in[8], NULL,         NULL,          NULL,  NULL};
  camdelta_ref_prep_grads rg = {c->grads & GQ ? g[0] : NULL,
                                c->grads & GK ? g[1] : NULL,
                                c->grads & GV ? g[2] : NULL,
                                c->grads & GI ? g[3] : NULL,
                                ref[ODQ],
                                ref[ODK],
                                ref[ODV],
                                ref[OQW],
                                ref[OKW],
                                ref[OPQ],
                                ref[OPKV],
                                ref[OCOS],
                                ref[OSIN]};
  TU_OK(camdelta_ref_prep_backward(&r, &rg));
  for (int i = 0; i < 9; i++) free(in[i]);
  for (int i = 0; i < 4; i++) free(g[i]);
}

static cl_mem upload_dt(const float *x, size_t n, camdelta_dtype dt, size_t off) {
  void *packed = tu_pack(dt, x, n);
  cl_mem m = tu_upload_at(packed, n, camdelta_dtype_size(dt), off, 0x7F);
  free(packed);
  return m;
}

typedef struct pb_device {
  cl_mem in[9], g[4], out[NOUT];
} pb_device;

static size_t out_es(const pb_case *c, int o) { return o <= ODV ? camdelta_dtype_size(c->dt) : 4; }

static void device_init(pb_device *d, const pb_data *x, const pb_case *c) {
  for (int i = 0; i < 9; i++)
    d->in[i] = i < 3 ? upload_dt(x->p.in[i], x->p.count[i], c->dt, c->off)
                     : tu_upload_at(x->p.in[i], x->p.count[i], 4, c->off, 0x7F);
  for (int i = 0; i < 4; i++)
    d->g[i] = i < 3 ? upload_dt(x->g[i], x->gcount[i], c->dt, c->off)
                    : tu_upload_at(x->g[i], x->gcount[i], 4, c->off, 0x7F);
  for (int o = 0; o < NOUT; o++) d->out[o] = tu_buffer((x->count[o] + c->off) * out_es(c, o));
}

static void device_free(pb_device *d) {
  for (int i = 0; i < 9; i++) clReleaseMemObject(d->in[i]);
  for (int i = 0; i < 4; i++) clReleaseMemObject(d->g[i]);
  for (int o = 0; o < NOUT; o++) clReleaseMemObject(d->out[o]);
}

static camdelta_prep_backward_args make_args(const pb_data *x, const pb_device *d, const pb_case *c,
                                             camdelta_profile *prof) {
  const size_t off = c->off;
  camdelta_prep_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = c->B, a.N = c->N, a.H = c->H, a.D = c->D, a.dtype = c->dt;
  a.k_scale = x->p.k_scale, a.norm_eps = x->p.norm_eps;
  camdelta_buffer *in[9] = {&a.q_raw,  &a.k_raw,   &a.v_raw,    &a.q_norm_weight, &a.k_norm_weight,
                            &a.proj_q, &a.proj_kv, &a.rope_cos, &a.rope_sin};
  for (int i = 0; i < 9; i++) *in[i] = (camdelta_buffer){d->in[i], off};
  camdelta_buffer *g[4] = {&a.grad_q, &a.grad_k, &a.grad_v, &a.grad_inflation_sq};
  for (int i = 0; i < 4; i++)
    if (c->grads & (1u << i)) *g[i] = (camdelta_buffer){d->g[i], off};
  camdelta_buffer *out[NOUT] = {&a.dq_raw,  &a.dk_raw,   &a.dv_raw,    &a.dq_norm_weight, &a.dk_norm_weight,
                                &a.dproj_q, &a.dproj_kv, &a.drope_cos, &a.drope_sin};
  for (int o = 0; o < NOUT; o++)
    if (o < OPQ || c->all) *out[o] = (camdelta_buffer){d->out[o], off};
  a.profile = prof;
  return a;
}

static float *download_out(const pb_device *d, const pb_data *x, const pb_case *c, int o) {
  const size_t n = x->count[o], es = out_es(c, o);
  void *raw = malloc(n * es);
  float *f = malloc(n * sizeof(float));
  assert_non_null(raw);
  assert_non_null(f);
  tu_download(d->out[o], c->off * es, n * es, raw);
  tu_unpack(o <= ODV ? c->dt : CAMDELTA_F32, raw, f, n);
  free(raw);
  return f;
}

/* f32 arithmetic: 1e-4 (docs/math.md §5); outputs stored in 16 bits add one rounding. */
static double bound_for(const pb_case *c, int o) {
  if (o > ODV || c->dt == CAMDELTA_F32) return 1e-4;
  return c->dt == CAMDELTA_F16 ? 1e-3 : 8e-3;
}

static const char *describe(const pb_case *c) {
  static char buf[160];
  snprintf(buf, sizeof buf, "B=%zu N=%zu H=%zu D=%zu %s off=%zu zero_every=%zu grads=%u all=%d saved=%d", c->B,
           c->N, c->H, c->D, camdelta_dtype_name(c->dt), c->off, c->zero_every, c->grads, c->all, c->saved);
  return buf;
}

static void run_case(const pb_case *c, double *ms) {
  camdelta_context *ctx = tu_context();
  pb_data x;
  data_init(&x, c, 300 + c->N * 3 + c->D + c->grads * 11);
  double *ref[NOUT];
  reference(&x, c, ref);
  pb_device d;
  device_init(&d, &x, c);
  camdelta_prep_saved *saved = NULL;
  cl_mem q = NULL, k = NULL, infl = NULL;
  if (c->saved) {
    const size_t BNHD = c->B * c->N * c->H * c->D, es = camdelta_dtype_size(c->dt);
    q = tu_buffer(BNHD * es), k = tu_buffer(BNHD * es), infl = tu_buffer(c->B * c->H * c->N * 4);
    cl_mem v = tu_buffer(BNHD * es);
    TU_OK(camdelta_prep_saved_create(ctx, &saved));
    camdelta_prep_args fa = {c->B, c->N, c->H, c->D, c->dt, x.p.k_scale, x.p.norm_eps,
                             {d.in[0], c->off}, {d.in[1], c->off}, {d.in[2], c->off}, {d.in[3], c->off},
                             {d.in[4], c->off}, {d.in[5], c->off}, {d.in[6], c->off}, {d.in[7], c->off},
                             {d.in[8], c->off}, {q, 0}, {k, 0}, {v, 0}, {infl, 0}, NULL};
    TU_OK(camdelta_prep_forward(ctx, &fa, saved));
    clReleaseMemObject(v);
  }
  camdelta_profile prof = {0, 0};
  camdelta_prep_backward_args a = make_args(&x, &d, c, &prof);
  if (c->saved == 2) {
    a.q = (camdelta_buffer){q, 0}, a.k = (camdelta_buffer){k, 0};
    a.inflation_sq = (camdelta_buffer){infl, 0};
  }
  TU_OK(camdelta_prep_backward(ctx, &a, saved));
  if (q) clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(infl);
  /* [inverse RMS,] heads, tokens, reduce; or [inverse RMS,] sums, S, grads, reduce; or [inverse RMS,] the CPU
   * form's pass, reduce */
  const unsigned kernels = (uses_cpu(c) ? 2u : uses_fused(c) ? 4u : 3u) + (c->saved ? 0u : 1u);
  if (prof.kernels != kernels) fail_msg("%s: %u kernels, expected %u", describe(c), prof.kernels, kernels);
  if (ms) *ms = prof.kernel_ms;
  for (int o = 0; o < NOUT; o++) {
    if (o >= OPQ && !c->all) continue;
    float *got = download_out(&d, &x, c, o);
    const double e = tu_rel_err(got, ref[o], x.count[o]);
    if (e > worst[c->dt][o]) worst[c->dt][o] = e;
    if (e > bound_for(c, o)) fail_msg("%s: %s rel err %.3g > %.3g", describe(c), out_names[o], e, bound_for(c, o));
    free(got);
  }
  camdelta_prep_saved_destroy(saved);
  device_free(&d);
  for (int o = 0; o < NOUT; o++) free(ref[o]);
  data_free(&x);
}

static void report_worst(const char *prefix) {
  for (int dt = 0; dt < 3; dt++)
    for (int o = 0; o < NOUT; o++) {
      if (worst[dt][o] == 0) continue;
      char what[128];
      snprintf(what, sizeof what, "%s max rel err %s %s", prefix, camdelta_dtype_name((camdelta_dtype)dt),
               out_names[o]);
      tu_report(what, worst[dt][o]);
      worst[dt][o] = 0;
    }
}

/* Every gradient, on shapes covering each head dim path, partial token tiles, offsets and the clamps. */
/* The constrained-device profiles' case (tests/run_profile.sh): the production head dim in f32 with every gradient
 * and in f16, few tokens. */
static void test_prep_backward_profile(void **state) {
  (void)state;
  static const pb_case cases[] = {{1, 20, 2, 112, CAMDELTA_F32, 3, 5, GALL, 1, 0},
                                  {1, 20, 2, 112, CAMDELTA_F32, 0, 0, GALL, 0, 2},
                                  {1, 9, 3, 112, CAMDELTA_F16, 0, 4, GALL, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], NULL);
}

static void test_prep_backward_shapes(void **state) {
  (void)state;
  static const pb_case cases[] = {
      {1, 1, 1, 8, CAMDELTA_F32, 0, 0, GALL, 1, 0},     {1, 7, 3, 8, CAMDELTA_F32, 5, 3, GALL, 1, 0},
      {2, 33, 1, 16, CAMDELTA_F32, 0, 0, GALL, 1, 1},   {1, 100, 3, 32, CAMDELTA_F32, 3, 7, GALL, 1, 0},
      {2, 65, 5, 64, CAMDELTA_F32, 0, 0, GALL, 1, 1},   {1, 70, 3, 112, CAMDELTA_F32, 11, 5, GALL, 1, 0},
      {2, 40, 2, 128, CAMDELTA_F32, 1, 0, GALL, 1, 0},  {1, 45, 2, 120, CAMDELTA_F32, 0, 9, GALL, 1, 1},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GQ, 1, 0},     {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GK, 1, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GV, 1, 0},     {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GI, 1, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GK | GI, 0, 0}, {1, 50, 3, 24, CAMDELTA_F32, 0, 4, 0, 1, 0},
      {1, 31, 3, 112, CAMDELTA_F16, 2, 4, GALL, 1, 0},  {2, 77, 1, 64, CAMDELTA_F16, 0, 0, GALL, 1, 1},
      {1, 45, 3, 112, CAMDELTA_BF16, 7, 6, GALL, 1, 0}, {2, 50, 4, 16, CAMDELTA_BF16, 0, 0, GQ | GV, 1, 1},
      {2, 65, 5, 64, CAMDELTA_F32, 0, 3, GALL, 0, 2},   {1, 70, 3, 112, CAMDELTA_F32, 0, 5, GK | GI, 0, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], NULL);
  report_worst("prep_backward shapes");
}

/* The production channel count on a medium token count: the 1e-4 bound and the kernel time. */
static void test_prep_backward_medium(void **state) {
  (void)state;
  const pb_case c = {1, 600, 20, 112, CAMDELTA_F32, 0, 0, GALL, 1, 1};
  double ms = 0;
  run_case(&c, &ms);
  tu_report("prep_backward B1 N600 H20 D112 (all grads, saved) ms", ms);
  report_worst("prep_backward medium");
}

/* Two runs give bit-identical gradients (fixed reduction orders, no atomics). */
static void check_deterministic(const pb_case *cp) {
  const pb_case c = *cp;
  camdelta_context *ctx = tu_context();
  pb_data x;
  data_init(&x, &c, 4242);
  pb_device d[2];
  float *got[2][NOUT];
  for (int r = 0; r < 2; r++) {
    device_init(&d[r], &x, &c);
    camdelta_prep_backward_args a = make_args(&x, &d[r], &c, NULL);
    TU_OK(camdelta_prep_backward(ctx, &a, NULL));
    for (int o = 0; o < NOUT; o++) got[r][o] = download_out(&d[r], &x, &c, o);
  }
  for (int o = 0; o < NOUT; o++) {
    assert_memory_equal(got[0][o], got[1][o], x.count[o] * sizeof(float));
    free(got[0][o]), free(got[1][o]);
  }
  device_free(&d[0]), device_free(&d[1]);
  data_free(&x);
}

static void test_prep_backward_deterministic(void **state) {
  (void)state;
  const pb_case c = {2, 90, 4, 32, CAMDELTA_F32, 0, 0, GALL, 1, 0};
  check_deterministic(&c);
  const pb_case f = {2, 90, 4, 32, CAMDELTA_F32, 0, 3, GALL, 0, 0}; /* the default form without dproj/drope */
  check_deterministic(&f);
}

static void expect_rejected(camdelta_status st, camdelta_status want, const pb_device *d, const char *needle) {
  if (st != want)
    fail_msg("expected %s, got %s: %s", camdelta_status_name(want), camdelta_status_name(st), camdelta_last_message());
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("message '%s' does not mention '%s'", camdelta_last_message(), needle);
  TU_OK(camdelta_finish(tu_context()));
  for (int o = 0; o < NOUT; o++) {
    const size_t n = tu_mem_size(d->out[o]);
    unsigned char *b = malloc(n);
    assert_non_null(b);
    tu_download(d->out[o], 0, n, b);
    for (size_t i = 0; i < n; i++)
      if (b[i] != 0xFF) fail_msg("output %s written by a rejected call", out_names[o]);
    free(b);
  }
}

static void test_prep_backward_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const pb_case c = {1, 20, 2, 16, CAMDELTA_F32, 0, 0, GALL, 1, 0};
  pb_data x;
  data_init(&x, &c, 5);
  pb_device d;
  device_init(&d, &x, &c);
  const camdelta_prep_backward_args good = make_args(&x, &d, &c, NULL);
  camdelta_prep_backward_args a;

  expect_rejected(camdelta_prep_backward(NULL, &good, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "ctx");
  expect_rejected(camdelta_prep_backward(ctx, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "args");
  a = good, a.D = 12;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_UNSUPPORTED, &d, "D=12");
  a = good, a.N = 0;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_SHAPE, &d, "N=0");
  a = good, a.dtype = (camdelta_dtype)7;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_UNSUPPORTED, &d, "dtype");
  a = good, a.k_scale = NAN;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "k_scale");
  a = good, a.norm_eps = -1;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "norm_eps");
  a = good, a.B = SIZE_MAX / 4;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_OVERFLOW, &d, NULL);
  static const char *names[] = {"q_raw",    "k_raw",    "q_norm_weight", "k_norm_weight",  "proj_q",
                                "proj_kv",  "rope_cos", "rope_sin",      "dq_raw",         "dk_raw",
                                "dv_raw",   "dq_norm_weight", "dk_norm_weight"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    a = good;
    camdelta_buffer *f[] = {&a.q_raw,  &a.k_raw,  &a.q_norm_weight, &a.k_norm_weight, &a.proj_q,
                            &a.proj_kv, &a.rope_cos, &a.rope_sin,   &a.dq_raw,        &a.dk_raw,
                            &a.dv_raw,  &a.dq_norm_weight, &a.dk_norm_weight};
    char needle[64];
    snprintf(needle, sizeof needle, "'%s'", names[i]);
    f[i]->mem = NULL;
    expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, needle);
    a = good;
    camdelta_buffer *f2[] = {&a.q_raw,  &a.k_raw,  &a.q_norm_weight, &a.k_norm_weight, &a.proj_q,
                             &a.proj_kv, &a.rope_cos, &a.rope_sin,   &a.dq_raw,        &a.dk_raw,
                             &a.dv_raw,  &a.dq_norm_weight, &a.dk_norm_weight};
    f2[i]->offset = 1;
    expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &d, needle);
  }
  /* v_raw is needed for dproj_kv / the RoPE tables when grad_v is given */
  a = good, a.v_raw.mem = NULL;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "v_raw");
  static const char *opt[] = {"grad_q", "grad_k", "grad_v", "grad_inflation_sq", "dproj_q", "dproj_kv",
                              "drope_cos", "drope_sin"};
  for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
    a = good;
    camdelta_buffer *f[] = {&a.grad_q,  &a.grad_k,   &a.grad_v,    &a.grad_inflation_sq,
                            &a.dproj_q, &a.dproj_kv, &a.drope_cos, &a.drope_sin};
    f[i]->offset = 1;
    expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &d, opt[i]);
  }
  /* the forward's outputs q, k, inflation_sq: all three or none, each of its size, none overlapping an output */
  a = good, a.q = a.grad_q;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d,
                  "'q' is given without 'k'");
  a = good, a.q = a.grad_q, a.k = a.grad_k;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d,
                  "'q' is given without 'inflation_sq'");
  a = good, a.inflation_sq = a.grad_inflation_sq;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d,
                  "'inflation_sq' is given without 'q'");
  a = good, a.q = a.grad_q, a.k = a.grad_k, a.inflation_sq = a.grad_inflation_sq, a.k.offset = 1;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &d, "'k'");
  a = good, a.q = a.grad_q, a.k = a.grad_k, a.inflation_sq = a.grad_inflation_sq, a.inflation_sq.offset = 1;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, &d, "'inflation_sq'");
  a = good, a.q = a.dk_raw, a.k = a.grad_k, a.inflation_sq = a.grad_inflation_sq;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "overlap");
  a = good, a.dk_raw = a.dq_raw;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "overlap");
  a = good, a.dq_raw = a.grad_q;
  expect_rejected(camdelta_prep_backward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "overlap");

  /* saved objects that do not match */
  camdelta_prep_saved *s = NULL;
  TU_OK(camdelta_prep_saved_create(ctx, &s));
  expect_rejected(camdelta_prep_backward(ctx, &good, s), CAMDELTA_ERROR_INVALID_ARGUMENT, &d, "saved");
  {
    const size_t BNHD = c.B * c.N * c.H * c.D;
    cl_mem q = tu_buffer(BNHD * 4), k = tu_buffer(BNHD * 4), v = tu_buffer(BNHD * 4);
    cl_mem infl = tu_buffer(c.B * c.H * c.N * 4);
    camdelta_prep_args fa = {c.B, c.N, c.H, c.D, c.dt, x.p.k_scale, x.p.norm_eps,
                             good.q_raw, good.k_raw, good.v_raw, good.q_norm_weight, good.k_norm_weight, good.proj_q,
                             good.proj_kv, good.rope_cos, good.rope_sin, {q, 0}, {k, 0}, {v, 0}, {infl, 0}, NULL};
    TU_OK(camdelta_prep_forward(ctx, &fa, s));
    clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(infl);
  }
  a = good, a.N = 10;
  expect_rejected(camdelta_prep_backward(ctx, &a, s), CAMDELTA_ERROR_SHAPE, &d, "saved");
  camdelta_prep_saved_destroy(s);
  device_free(&d);
  data_free(&x);
}

/* The warm hook builds exactly the programs a call uses (the inverse-RMS one comes from the forward's warm-up):
 * a call with saved inverse RMS values after it builds nothing. */
static void check_warm(const pb_case *cp) {
  const pb_case c = *cp;
  camdelta_context *ctx = tu_context();
  assert_int_equal(cd_prep_backward_warm(ctx, CAMDELTA_F32, 12), CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(cd_prep_backward_warm(ctx, (camdelta_dtype)9, 16), CAMDELTA_ERROR_UNSUPPORTED);
  TU_OK(cd_prep_backward_warm(ctx, c.dt, c.D));
  camdelta_build_stats before, after;
  TU_OK(camdelta_context_build_stats(ctx, &before));
  pb_data x;
  data_init(&x, &c, 17);
  pb_device d;
  device_init(&d, &x, &c);
  camdelta_prep_backward_args a = make_args(&x, &d, &c, NULL);
  /* a saved object by hand (the forward would build its own kernel) */
  camdelta_prep_saved *s = NULL;
  TU_OK(camdelta_prep_saved_create(ctx, &s));
  float *inv = malloc(2 * c.N * sizeof(float));
  assert_non_null(inv);
  for (size_t i = 0; i < 2 * c.N; i++) inv[i] = 1.0f;
  s->inv_rms = tu_upload(inv, 2 * c.N * sizeof(float));
  s->bytes = 2 * c.N * sizeof(float);
  s->B = c.B, s->N = c.N, s->H = c.H, s->D = c.D, s->valid = 1;
  TU_OK(camdelta_prep_backward(ctx, &a, s));
  TU_OK(camdelta_finish(ctx));
  TU_OK(camdelta_context_build_stats(ctx, &after));
  assert_int_equal(after.programs, before.programs);
  free(inv);
  camdelta_prep_saved_destroy(s);
  device_free(&d);
  data_free(&x);
}

static void test_prep_backward_warm(void **state) {
  (void)state;
  const pb_case c = {1, 30, 2, 40, CAMDELTA_BF16, 0, 0, GALL, 1, 1};
  check_warm(&c);
  const pb_case f = {1, 30, 2, 40, CAMDELTA_BF16, 0, 0, GALL, 0, 1};
  check_warm(&f);
}

/* A fresh context with CAMDELTA_PREP_BWD_FUSED = form (read at context creation) and CAMDELTA_PREP_BWD_TILES =
 * tiles (NULL: unset). */
static void use_form(int form, const char *tiles) {
  tu_context_release();
  static const char *const forms[3] = {"0", "1", "2"};
  if (form >= 0) setenv("CAMDELTA_PREP_BWD_FUSED", forms[form], 1);
  else unsetenv("CAMDELTA_PREP_BWD_FUSED");
  if (tiles) setenv("CAMDELTA_PREP_BWD_TILES", tiles, 1);
  else unsetenv("CAMDELTA_PREP_BWD_TILES");
  g_variant = form;
}

/* The two-pass form on any device (the default on GPUs): every head-dim class, partial tiles and partial work-groups
 * of pass 1, B = 2, aligned and unaligned offsets, both clamps, both 16-bit types, each upstream gradient absent,
 * saved inverse RMS values or not, C = 3328 (26 heads of 128), other tile sizes and work-group counts (one tile per
 * work-group of pass 2 and many); a call with dproj/drope takes the three kernels under the same setting. */
static void test_prep_backward_fused(void **state) {
  (void)state;
  static const pb_case cases[] = {
      {1, 1, 1, 8, CAMDELTA_F32, 0, 0, GALL, 0, 0},      {1, 7, 3, 8, CAMDELTA_F32, 5, 3, GALL, 0, 0},
      {1, 20, 20, 8, CAMDELTA_F32, 0, 2, GALL, 0, 0},     {2, 33, 1, 16, CAMDELTA_F32, 0, 0, GALL, 0, 1},
      {1, 100, 3, 32, CAMDELTA_F32, 4, 7, GALL, 0, 0},    {2, 65, 5, 64, CAMDELTA_F32, 0, 0, GALL, 0, 1},
      {1, 70, 3, 112, CAMDELTA_F32, 11, 5, GALL, 0, 0},   {2, 40, 2, 128, CAMDELTA_F32, 1, 0, GALL, 0, 0},
      {1, 45, 2, 120, CAMDELTA_F32, 0, 9, GALL, 0, 1},    {1, 9, 26, 128, CAMDELTA_F32, 0, 4, GALL, 0, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GQ, 0, 0},       {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GK, 0, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GV, 0, 0},       {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GI, 0, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GK | GI, 0, 0},  {1, 50, 3, 24, CAMDELTA_F32, 0, 4, 0, 0, 0},
      {1, 50, 3, 24, CAMDELTA_F32, 0, 4, GALL, 1, 0},     {1, 31, 3, 112, CAMDELTA_F16, 2, 4, GALL, 0, 0},
      {2, 77, 1, 64, CAMDELTA_F16, 0, 0, GALL, 0, 1},     {1, 45, 3, 112, CAMDELTA_BF16, 7, 6, GALL, 0, 0},
      {2, 50, 4, 16, CAMDELTA_BF16, 0, 0, GQ | GV, 0, 1}, {1, 40, 5, 16, CAMDELTA_BF16, 4, 3, GALL, 0, 0},
  };
  use_form(1, NULL);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], NULL);
  report_worst("prep_backward fused");
  const pb_case medium = {1, 600, 20, 112, CAMDELTA_F32, 0, 0, GALL, 0, 1};
  double ms = 0;
  run_case(&medium, &ms);
  tu_report("prep_backward fused B1 N600 H20 D112 (saved) ms", ms);
  report_worst("prep_backward fused medium");
  /* pass 1 from the forward's outputs q, k, inflation_sq (saved = 2): the cases above again (every head-dim class,
   * partial work-groups of pass 1, B = 2, offsets, both clamps (zero_every: heads whose k is all zero, pre = post =
   * 0), each upstream gradient absent; in 16-bit storage the outputs are given but not read), and more where N and
   * the offsets are multiples of 4 (four tokens per work-item: N = 20, 100 above, 600, 64, 52 here) */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pb_case c = cases[i];
    c.saved = 2;
    run_case(&c, NULL);
  }
  static const pb_case outs[] = {
      {1, 600, 20, 112, CAMDELTA_F32, 0, 0, GALL, 0, 2}, {2, 64, 3, 112, CAMDELTA_F32, 0, 5, GALL, 0, 2},
      {1, 52, 3, 24, CAMDELTA_F32, 4, 4, GK | GI, 0, 2}, {1, 52, 3, 24, CAMDELTA_F32, 8, 4, GQ, 0, 2},
  };
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) run_case(&outs[i], NULL);
  report_worst("prep_backward fused from the forward's outputs");
  const pb_case det = {2, 90, 4, 32, CAMDELTA_F32, 0, 3, GALL, 0, 0};
  check_deterministic(&det);
  const pb_case warm = {1, 30, 2, 40, CAMDELTA_BF16, 0, 0, GALL, 0, 1};
  check_warm(&warm);
  /* other tiles: 4 tokens (f32's default is 16) and whole heads per work-group of pass 2 (f32's default is halves),
   * one work-group per compute unit (many tiles per work-group), 32 tokens per work-group of pass 1; then 16 tokens,
   * quarter heads, 1000 work-groups per compute unit (one tile each), 256 tokens in pass 1; then a count that does
   * not divide D/4 (D = 8: 2 units) */
  use_form(1, "TT=4, WPC=1, TS=32, NU=1");
  run_case(&cases[6], NULL);
  check_deterministic(&det);
  use_form(1, "TT=16,WPC=1000,TS=256,NU=4");
  run_case(&cases[6], NULL);
  run_case(&cases[1], NULL);
  use_form(1, "TT=8,NU=4");
  run_case(&cases[1], NULL);
  /* pass 2's other form: one tensor per work-group in f32 (16-bit storage's default), all three in 16-bit (f32's
   * default): head-dim classes, offsets, B = 2, each gradient absent, from the forward's outputs */
  const size_t ncases = sizeof cases / sizeof cases[0];
  use_form(1, "TW=1");
  for (size_t i = 0; i < ncases; i++)
    if (cases[i].dt == CAMDELTA_F32) run_case(&cases[i], NULL);
  pb_case out6 = cases[6];
  out6.saved = 2;
  run_case(&out6, NULL);
  check_deterministic(&det);
  use_form(1, "TW=3,NU=2");
  for (size_t i = 0; i < ncases; i++)
    if (cases[i].dt != CAMDELTA_F32) run_case(&cases[i], NULL);
  report_worst("prep_backward fused other tiles");
  use_form(-1, NULL);
}

/* The three-kernel form on any device (the default on CPUs, and on GPUs for dproj/drope). */
static void test_prep_backward_three_kernels(void **state) {
  (void)state;
  static const pb_case cases[] = {
      {1, 7, 3, 8, CAMDELTA_F32, 5, 3, GALL, 0, 0},
      {2, 65, 5, 64, CAMDELTA_F32, 0, 0, GALL, 0, 1},
      {1, 70, 3, 112, CAMDELTA_F32, 11, 5, GK | GI, 0, 0},
      {1, 45, 3, 112, CAMDELTA_BF16, 7, 6, GALL, 0, 0},
  };
  use_form(0, NULL);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], NULL);
  report_worst("prep_backward three kernels");
  use_form(-1, NULL);
}

/* The CPU form on any device (the default on CPUs; where the driver has a loop budget the three-kernel form runs
 * and run_case expects that): every head-dim class (D = 8, 24 and 56, whose groups straddle the camera and RoPE
 * halves), partial blocks and blocks past the last token, B = 2, offsets, both clamps, 16-bit storage, each upstream
 * gradient absent, dproj/drope, the forward's outputs given; one block per work-item and 32 (one work-item for all
 * of N); bit-identical reruns. */
static void test_prep_backward_cpu(void **state) {
  (void)state;
  static const pb_case cases[] = {
      {1, 1, 1, 8, CAMDELTA_F32, 0, 0, GALL, 1, 0},     {2, 41, 3, 24, CAMDELTA_F32, 3, 4, GALL, 1, 1},
      {1, 70, 3, 56, CAMDELTA_F32, 5, 5, GK | GI, 1, 2}, {1, 50, 2, 112, CAMDELTA_F32, 0, 4, GQ | GV, 1, 0},
      {1, 33, 3, 24, CAMDELTA_F32, 0, 4, 0, 1, 0},       {1, 31, 2, 112, CAMDELTA_F16, 2, 4, GALL, 1, 0},
      {2, 45, 2, 56, CAMDELTA_BF16, 7, 6, GALL, 0, 1},
  };
  const size_t n = sizeof cases / sizeof cases[0];
  use_form(2, NULL);
  for (size_t i = 0; i < n; i++) run_case(&cases[i], NULL);
  check_deterministic(&cases[1]);
  use_form(2, "PB=1");
  for (size_t i = 0; i < n; i += 2) run_case(&cases[i], NULL);
  use_form(2, "PB=32");
  for (size_t i = 1; i < n; i += 2) run_case(&cases[i], NULL);
  report_worst("prep_backward CPU form");
  use_form(-1, NULL);
}

/* A tuning override that does not parse or is out of range fails the context creation, naming the variable. */
static void test_prep_backward_tiles_env(void **state) {
  (void)state;
  static const char *const bad[] = {"TT=5",  "TT=32",  "TT=8,XX=2", "WPC=0", "TT",
                                    "PF=2",  "TS=48",  "TS=512",    "NU=3",  "NU=0", "TW=2", "MX=3", "PB=3", "PB=64"};
  tu_check_bad_env("CAMDELTA_PREP_BWD_TILES", bad, sizeof bad / sizeof bad[0]);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_prep_backward_shapes),
      cmocka_unit_test(test_prep_backward_profile),
      cmocka_unit_test(test_prep_backward_medium),
      cmocka_unit_test(test_prep_backward_deterministic),
      cmocka_unit_test(test_prep_backward_bad_input),
      cmocka_unit_test(test_prep_backward_warm),
      cmocka_unit_test(test_prep_backward_fused),
      cmocka_unit_test(test_prep_backward_three_kernels),
      cmocka_unit_test(test_prep_backward_cpu),
      cmocka_unit_test(test_prep_backward_tiles_env))
