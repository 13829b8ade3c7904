/* The output transform (docs/math.md §8.5) and the whole camera branch (docs/math.md §8.6) on the device against the
 * f64 reference, forward and every gradient; the reference backward against finite differences; properties
 * (beta' <= beta and the reverse gates, output transform o K/V transform = identity, no information from a later
 * chunk, determinism) and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_problem.h"
#include "ops/backward.h"
#include "ops/camera_op.h"
#include "ops/prep_backward_fused.h"
#include "scan/engine.h"
#include "scan/tc.h"

/* The scan algorithm the branch runs with: AUTO (sequential on CPUs), and CHUNKWISE for the fused scan pair
 * (src/scan/pair.c) on every device. */
static camdelta_scan_algorithm g_algorithm = CAMDELTA_SCAN_AUTO;
/* The context under test: the shared one, or an emulated tensor-core one (the fused output transform). */
static camdelta_context *g_ctx;
static camdelta_context *cur(void) { return g_ctx ? g_ctx : tu_context(); }
/* y's element offset in its buffer in run_branch (the fused output transform needs a multiple of 4) */
static size_t g_y_off;

/* ------------------------------------------------------------------------------------- a branch problem */

typedef struct br_shape {
  size_t B, T, Hs, Ws, H, D, cs;
  int strategy; /* 0 uniform, 1 first_frame, 2 first_chunk_plus_one */
  int use_index; /* chunk_index {0, 2, 5} */
} br_shape;

enum { IQ, IK, IV, IW, IQW, IKW, ICC, IBETA, IDECAY, NIN };
static const char *const in_names[NIN] = {"q_raw", "k_raw", "v_raw", "conv_weight", "q_norm_weight",
                                          "k_norm_weight", "camera_conditions", "beta", "decay"};
enum { GQ, GK, GV, GW, GQW, GKW, GBETA, GDECAY, NGRAD };

typedef struct br_problem {
  br_shape s;
  size_t N, S, C;
  int64_t idx[3];
  camdelta_chunking ch;
  float k_scale, eps;
  float *in[NIN];
  size_t count[NIN];
  float *gy;
  cl_mem din[NIN], dgy;
} br_problem;

static void problem_init(br_problem *p, const br_shape *s, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->s = *s;
  p->S = s->Hs * s->Ws, p->N = s->T * p->S, p->C = s->H * s->D;
  p->idx[0] = 0, p->idx[1] = 2, p->idx[2] = 5;
  p->ch = (camdelta_chunking){s->cs, (camdelta_chunk_strategy)s->strategy, s->use_index ? p->idx : NULL,
                              s->use_index ? 3 : 0};
  p->k_scale = (float)(1.0 / sqrt((double)s->D * (double)p->S));
  p->eps = 1e-6f;
  bp_inputs(p->in, p->count, s->B, s->T, s->Hs, s->Ws, s->H, s->D, seed);
  const size_t BNC = p->count[IQ];
  p->gy = malloc(BNC * sizeof(float)); /* the generator goes on after the inputs */
  tu_fill_normal(p->gy, BNC, 1.0);
  for (int i = 0; i < NIN; i++) p->din[i] = tu_upload(p->in[i], p->count[i] * sizeof(float));
  p->dgy = tu_upload(p->gy, BNC * sizeof(float));
}

/* The worst relative error of each gradient, reported as "branch backward NAME max rel errSUFFIX". */
static void report_grads(const double worst[NGRAD], const char *suffix) {
  for (int i = 0; i < NGRAD; i++) {
    char what[128];
    snprintf(what, sizeof what, "branch backward %s max rel err%s", bp_grad_names[i], suffix);
    tu_report(what, worst[i]);
  }
}

static void problem_free(br_problem *p) {
  bp_free(p->in, p->din, p->gy, p->dgy);
}

static camdelta_branch_args device_args(const br_problem *p, cl_mem y) {
  const br_shape *s = &p->s;
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = s->B, a.T = s->T, a.Hs = s->Hs, a.Ws = s->Ws, a.H = s->H, a.D = s->D;
  a.pt = a.ph = a.pw = 1;
  a.chunking = p->ch;
  a.k_scale = p->k_scale, a.norm_eps = p->eps;
  a.algorithm = g_algorithm;
  camdelta_buffer *b[NIN] = {&a.q_raw, &a.k_raw, &a.v_raw, &a.conv_weight, &a.q_norm_weight, &a.k_norm_weight,
                             &a.camera_conditions, &a.beta, &a.decay};
  for (int i = 0; i < NIN; i++) *b[i] = (camdelta_buffer){p->din[i], 0};
  a.y = (camdelta_buffer){y, 0};
  return a;
}

/* f64 reference of p; the double inputs are malloc'd into in64 */
static camdelta_ref_branch ref_args(const br_problem *p, double *in64[NIN]) {
  const br_shape *s = &p->s;
  for (int i = 0; i < NIN; i++) in64[i] = tu_to_f64(p->in[i], p->count[i]);
  const camdelta_ref_branch r = {s->B,       s->T,      s->Hs,     s->Ws,      1,        1,         s->H,
                                 s->D,       p->ch,     p->k_scale, p->eps,    in64[IQ], in64[IK], in64[IV],
                                 in64[IW],   in64[IQW], in64[IKW], in64[ICC],  in64[IBETA], in64[IDECAY], NULL};
  return r;
}

static const br_shape shapes[] = {
    {2, 7, 3, 5, 2, 8, 3, 2, 0},  {1, 21, 2, 3, 1, 64, 3, 2, 0}, {2, 2, 3, 3, 1, 112, 0, 0, 0},
    {1, 1, 2, 5, 2, 128, 0, 0, 0}, {1, 6, 2, 2, 1, 8, 2, 0, 0},   {2, 7, 2, 3, 1, 8, 2, 1, 0},
    {1, 7, 3, 2, 1, 64, 0, 0, 1},  {1, 5, 2, 3, 1, 8, 8, 2, 0},   {1, 7, 3, 2, 1, 8, 3, 0, 1},
};

/* Kernels the public prep and scan calls of the branch launch on this device for the shape of p (with saved
 * objects, as the branch uses them): [0] prep forward, [1] [2] causal / reverse scan forward, [3] prep backward,
 * [4] [5] causal / reverse scan backward. */
static void probe_kernel_counts(const br_problem *p, unsigned n[6]) {
  camdelta_context *ctx = cur();
  const br_shape *s = &p->s;
  const size_t BNC = s->B * p->N * p->C;
  cl_mem o[4];
  for (int i = 0; i < 4; i++) o[i] = tu_buffer(BNC * 4);
  cl_mem infl = tu_buffer(s->B * s->H * p->N * 4), g[2] = {tu_buffer(p->count[IBETA] * 4), tu_buffer(p->count[IDECAY] * 4)};
  cl_mem pw[2] = {tu_buffer(p->C * 4), tu_buffer(p->C * 4)};
  float *host = calloc(s->B * p->N * 16 + p->N * s->D / 2, sizeof *host);
  assert_non_null(host);
  for (size_t i = 0; i < s->B * p->N * 16; i++) host[i] = (i % 16) % 5 == 0 ? 1.0f : 0.0f; /* identities; zero tables */
  cl_mem proj = tu_upload(host, s->B * p->N * 16 * 4), rope = tu_upload(host + s->B * p->N * 16, p->N * s->D / 2 * 4);
  free(host);
  camdelta_prep_saved *ps = NULL;
  TU_OK(camdelta_prep_saved_create(ctx, &ps));
  camdelta_profile pr = {0, 0};
  const camdelta_prep_args pa = {s->B, p->N, s->H, s->D, CAMDELTA_F32, p->k_scale, p->eps, {p->din[IQ], 0},
                                 {p->din[IK], 0}, {p->din[IV], 0}, {p->din[IQW], 0}, {p->din[IKW], 0}, {proj, 0},
                                 {proj, 0}, {rope, 0}, {rope, 0}, {o[0], 0}, {o[1], 0}, {o[2], 0}, {infl, 0}, &pr};
  TU_OK(camdelta_prep_forward(ctx, &pa, ps));
  n[0] = pr.kernels;
  camdelta_prep_backward_args pb;
  memset(&pb, 0, sizeof pb);
  pb.B = s->B, pb.N = p->N, pb.H = s->H, pb.D = s->D, pb.dtype = CAMDELTA_F32, pb.k_scale = p->k_scale;
  pb.norm_eps = p->eps, pb.q_raw = pa.q_raw, pb.k_raw = pa.k_raw, pb.v_raw = pa.v_raw;
  pb.q_norm_weight = pa.q_norm_weight, pb.k_norm_weight = pa.k_norm_weight, pb.proj_q = pa.proj_q;
  pb.proj_kv = pa.proj_kv, pb.rope_cos = pa.rope_cos, pb.rope_sin = pa.rope_sin;
  pb.grad_q = (camdelta_buffer){o[0], 0}, pb.grad_k = (camdelta_buffer){o[1], 0}, pb.grad_v = (camdelta_buffer){o[2], 0};
  pb.grad_inflation_sq = (camdelta_buffer){infl, 0}, pb.dq_raw = (camdelta_buffer){o[3], 0};
  pb.dk_raw = (camdelta_buffer){tu_buffer(BNC * 4), 0}, pb.dv_raw = (camdelta_buffer){tu_buffer(BNC * 4), 0};
  pb.dq_norm_weight = (camdelta_buffer){pw[0], 0}, pb.dk_norm_weight = (camdelta_buffer){pw[1], 0}, pb.profile = &pr;
  TU_OK(camdelta_prep_backward(ctx, &pb, ps));
  n[3] = pr.kernels;
  for (int rev = 0; rev < 2; rev++) {
    camdelta_scan_saved *ss = NULL;
    TU_OK(camdelta_scan_saved_create(ctx, &ss));
    camdelta_scan_args sa = {s->B, s->H, s->D, s->T, p->S, rev, g_algorithm, {o[0], 0}, {o[1], 0}, {o[2], 0},
                             {p->din[IBETA], 0}, {p->din[IDECAY], 0}, {o[3], 0}, {NULL, 0}, {NULL, 0}, &pr, NULL, CAMDELTA_PRECISION_EXACT};
    TU_OK(camdelta_scan_forward(ctx, &sa, ss));
    n[1 + rev] = pr.kernels;
    camdelta_scan_backward_args sb;
    memset(&sb, 0, sizeof sb);
    sb.B = s->B, sb.H = s->H, sb.D = s->D, sb.F = s->T, sb.S = p->S, sb.reverse = rev;
    sb.q = sa.q, sb.k = sa.k, sb.v = sa.v, sb.beta = sa.beta, sb.decay = sa.decay, sb.grad_out = sa.out;
    sb.dq = (camdelta_buffer){tu_buffer(BNC * 4), 0}, sb.dk = (camdelta_buffer){tu_buffer(BNC * 4), 0};
    sb.dv = (camdelta_buffer){tu_buffer(BNC * 4), 0}, sb.dbeta = (camdelta_buffer){g[0], 0};
    sb.ddecay = (camdelta_buffer){g[1], 0}, sb.profile = &pr;
    TU_OK(camdelta_scan_backward(ctx, &sb, ss));
    n[4 + rev] = pr.kernels;
    clReleaseMemObject(sb.dq.mem), clReleaseMemObject(sb.dk.mem), clReleaseMemObject(sb.dv.mem);
    camdelta_scan_saved_destroy(ss);
  }
  camdelta_prep_saved_destroy(ps);
  clReleaseMemObject(pb.dk_raw.mem), clReleaseMemObject(pb.dv_raw.mem);
  for (int i = 0; i < 4; i++) clReleaseMemObject(o[i]);
  cl_mem rest[7] = {infl, g[0], g[1], pw[0], pw[1], proj, rope};
  for (int i = 0; i < 7; i++) clReleaseMemObject(rest[i]);
}

static double worst_y = 0, worst_g[NGRAD];

/* 1 when ctx runs the prep backward of head dim D in the two-pass form (prep_backward_fused.c) */
static int prep_bwd_fused(camdelta_context *ctx, size_t D) {
  cd_pbf_plan p;
  camdelta_status st;
  if (!cd_pbf_kernels(ctx, CAMDELTA_F32, D, 1, CD_PBF_P1_RAW, &p, &st)) return 0;
  cd_pbf_release(&p);
  return 1;
}

/* 1 when ctx's prep backward of head dim D adds the scan pair's second dk, dv as it reads them (its two-pass form or
 * its CPU form), so that the pair's two adds do not run */
static int prep_bwd_reads_g2(camdelta_context *ctx, size_t D) {
  return prep_bwd_fused(ctx, D) || cd_prep_backward_cpu_form(ctx, CAMDELTA_F32);
}

/* One branch forward and backward on cur() against the f64 reference; y_out (optional) receives y. */
static void run_branch(const br_shape *s, uint64_t seed, float **y_out) {
  camdelta_context *ctx = cur();
  br_problem p;
  problem_init(&p, s, seed);
  const size_t BNC = s->B * p.N * p.C;
  cl_mem y = tu_buffer((BNC + g_y_off) * 4);
  camdelta_branch_args a = device_args(&p, y);
  a.y.offset = g_y_off;
  camdelta_profile prof = {0, 0};
  a.profile = &prof;
  camdelta_branch_saved *saved = NULL;
  TU_OK(camdelta_branch_saved_create(ctx, &saved));
  TU_OK(camdelta_branch_forward(ctx, &a, saved));
  /* the profile counts every kernel once: cameras 2, conv 1, discount 1, output transform 1, prep's, the scans' */
  unsigned nk[6];
  probe_kernel_counts(&p, nk);
  /* the fused pair: the chunkwise scan's phases A and C once, its chain for both directions, one sum; with
   * tensor cores its phase C also does the output transform (one kernel less) */
  camdelta_scan_algorithm run;
  int pair;
  TU_OK(cd_scan_branch_algorithm(ctx, g_algorithm, s->B * s->H, s->D, s->T, p.S, &run, &pair));
  const int fused_ot = pair && cd_tc_available(ctx) && g_y_off % 4 == 0;
  assert_int_equal(prof.kernels, (fused_ot ? 4 : 5) + nk[0] + (pair ? nk[1] + 1 : nk[1] + nk[2]));
  if (ctx->kernel_times) /* a driver without kernel times (Rusticl) reports NaN, never a made-up figure */
    assert_true(prof.kernel_ms > 0);
  else
    assert_true(isnan(prof.kernel_ms));

  bp_ref ref = {0};
  camdelta_ref_branch r = ref_args(&p, ref.in);
  ref.y = malloc(BNC * 8);
  assert_non_null(ref.y);
  r.y = ref.y;
  TU_OK(camdelta_ref_branch_forward(&r));
  float *got = malloc(BNC * 4);
  assert_non_null(got);
  tu_download(y, g_y_off * 4, BNC * 4, got);
  const double ey = tu_rel_err(got, ref.y, BNC);
  worst_y = fmax(worst_y, ey);
  if (ey > 1e-5)
    fail_msg("B=%zu T=%zu Hs=%zu Ws=%zu H=%zu D=%zu cs=%zu: branch y rel err %.3g > 1e-5", s->B, s->T, s->Hs, s->Ws,
             s->H, s->D, s->cs, ey);
  if (y_out)
    *y_out = got;
  else
    free(got);

  /* backward: every gradient */
  const size_t gcnt[NGRAD] = {BNC, BNC, BNC, 4 * p.C, p.C, p.C, p.count[IBETA], p.count[IDECAY]};
  cl_mem gm[NGRAD];
  for (int i = 0; i < NGRAD; i++) gm[i] = tu_buffer(gcnt[i] * 4);
  const camdelta_branch_grads g = bp_grads(p.dgy, gm, &prof);
  TU_OK(camdelta_branch_backward(ctx, &a, &g, saved));
  /* output transform 1, add 1, discount 1, conv 2, prep's, the scans'; the pair instead of the scans and the add:
   * one scan backward's kernels + the second frames and ddecay, and the adds (dq, dk, dv with FMA; dk, dv and the
   * state sum with tensor cores, whose grams and dq run once): + 5 either way; of those the dk and dv adds run in
   * the prep backward's three-kernel form, while its two-pass and CPU forms sum dk, dv as they read them (2 kernels
   * less) */
  if (pair)
    assert_int_equal(prof.kernels, 4 + nk[3] + nk[4] + 5 - (prep_bwd_reads_g2(ctx, s->D) ? 2 : 0));
  else
    assert_int_equal(prof.kernels, 5 + nk[3] + nk[4] + nk[5]);
  bp_ref_backward(&r, p.gy, BNC, gcnt, &ref);
  void *first[NGRAD];
  for (int i = 0; i < NGRAD; i++) {
    first[i] = bp_download(gm[i], gcnt[i]);
    const double e = tu_rel_err(first[i], ref.g[i], gcnt[i]);
    worst_g[i] = fmax(worst_g[i], e);
    if (e > 1e-4)
      fail_msg("B=%zu T=%zu Hs=%zu Ws=%zu H=%zu D=%zu cs=%zu: %s rel err %.3g > 1e-4", s->B, s->T, s->Hs, s->Ws, s->H,
               s->D, s->cs, bp_grad_names[i], e);
  }
  /* deterministic, and the same without a saved object (the forward recomputed) */
  static const size_t es[NGRAD] = {4, 4, 4, 4, 4, 4, 4, 4};
  bp_backward_again(ctx, &a, p.dgy, gm, gcnt, es, first, "f32");
  bp_ref_free(&ref);
  camdelta_branch_saved_destroy(saved);
  clReleaseMemObject(y);
  problem_free(&p);
}

static void test_branch_device(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_branch(&shapes[i], 100 + i, NULL);
  /* the fused scan pair (chunkwise) on a few shapes: T = 7 first_chunk_plus_one, T = 2 D = 112, chunk_index */
  g_algorithm = CAMDELTA_SCAN_CHUNKWISE;
  const size_t chunkwise[] = {0, 2, 6, 8};
  for (size_t i = 0; i < sizeof chunkwise / sizeof chunkwise[0]; i++) run_branch(&shapes[chunkwise[i]], 300 + i, NULL);
  g_algorithm = CAMDELTA_SCAN_AUTO;
  tu_report("branch forward y max rel err", worst_y);
  report_grads(worst_g, "");
}

/* The output transform as the scan pair's phase C epilogue (cd_apply_ot_tc): on tensor cores, emulated where the
 * device has none. Its y against the f64 reference (run_branch, whose kernel count shows the transform kernel
 * gone) and bit for bit against y at an offset that rules the fused kernel out (phase C, then cd_output_transform:
 * the same operations in the same order; run_branch counts the two kernels). Shapes: D = 8 with a 4-token tail,
 * D = 112 over two row tiles of which the second is partial, D = 64, and an explicit chunk_index. */
static void test_fused_output_transform(void **state) {
  (void)state;
  camdelta_context *emu = cd_tc_available(tu_context()) ? NULL : tu_context_tc_emulated();
  g_ctx = emu ? emu : tu_context();
  g_algorithm = CAMDELTA_SCAN_CHUNKWISE;
  const size_t pick[] = {0, 2, 6, 8};
  for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++) {
    const br_shape *s = &shapes[pick[i]];
    float *y[2];
    for (int c = 0; c < 2; c++) {
      g_y_off = c ? 5 : 0;
      run_branch(s, 500 + i, &y[c]);
    }
    g_y_off = 0;
    const size_t n = s->B * s->T * s->Hs * s->Ws * s->H * s->D;
    for (size_t j = 0; j < n; j++)
      if (memcmp(&y[0][j], &y[1][j], 4) != 0)
        fail_msg("shape %zu: y[%zu] fused %.9g, apart %.9g", pick[i], j, (double)y[0][j], (double)y[1][j]);
    free(y[0]), free(y[1]);
  }
  g_ctx = NULL;
  g_algorithm = CAMDELTA_SCAN_AUTO;
  if (emu) camdelta_context_destroy(emu);
  tu_report("branch y, fused output transform: max rel err (all runs)", worst_y);
}

/* The prep backward's fused form (CAMDELTA_PREP_BWD_FUSED=1, the GPUs' default) in the branch with the scan pair:
 * the two directions' dk, dv summed as the prep backward reads them (cd_prep_backward_g2), against the f64
 * reference; the kernel count in run_branch shows the pair's dk, dv adds gone. */
static void test_fused_prep_backward(void **state) {
  (void)state;
  setenv("CAMDELTA_PREP_BWD_FUSED", "1", 1);
  TU_OK(camdelta_context_create_from_queue(&g_ctx, camdelta_context_cl_context(tu_context()),
                                           camdelta_context_queue(tu_context())));
  unsetenv("CAMDELTA_PREP_BWD_FUSED");
  g_algorithm = CAMDELTA_SCAN_CHUNKWISE;
  const size_t pick[] = {0, 2, 6, 8};
  int fused = 0;
  for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++) {
    const br_shape *s = &shapes[pick[i]];
    fused += prep_bwd_fused(g_ctx, s->D);
    run_branch(s, 700 + i, NULL);
  }
  assert_true(fused > 0);
  camdelta_context_destroy(g_ctx);
  g_ctx = NULL;
  g_algorithm = CAMDELTA_SCAN_AUTO;
  report_grads(worst_g, " (all runs)");
}

/* The reference backward against central differences of the reference forward, L = <grad_y, y>, on a tiny
 * problem whose chunks (first_frame, cs 2, T 4: scan [0, 1, 4], conv [0, 2, 4]) use every rule. */
static void test_reference_fd(void **state) {
  (void)state;
  const br_shape s = {1, 4, 1, 2, 1, 8, 2, 1, 0};
  br_problem p;
  problem_init(&p, &s, 7);
  double *in64[NIN];
  camdelta_ref_branch r = ref_args(&p, in64);
  const size_t BNC = s.B * p.N * p.C;
  double *y = malloc(BNC * 8), *gy = tu_to_f64(p.gy, BNC);
  double *gr[NGRAD];
  const size_t gcnt[NGRAD] = {BNC, BNC, BNC, 4 * p.C, p.C, p.C, p.count[IBETA], p.count[IDECAY]};
  for (int i = 0; i < NGRAD; i++) gr[i] = malloc(gcnt[i] * 8);
  const camdelta_ref_branch_grads g = {gy, gr[GQ], gr[GK], gr[GV], gr[GW], gr[GQW], gr[GKW], gr[GBETA], gr[GDECAY]};
  TU_OK(camdelta_ref_branch_backward(&r, &g));
  static const int grad_of[NIN] = {GQ, GK, GV, GW, GQW, GKW, -1, GBETA, GDECAY};
  r.y = y;
  double worst = 0;
  for (int i = 0; i < NIN; i++) {
    if (grad_of[i] < 0) continue;
    double *x = (double *)in64[i];
    for (size_t j = 0; j < p.count[i]; j++) {
      const double keep = x[j], h = 1e-6 * fmax(1.0, fabs(keep));
      double l[2];
      for (int sg = 0; sg < 2; sg++) {
        x[j] = keep + (sg ? -h : h);
        TU_OK(camdelta_ref_branch_forward(&r));
        l[sg] = 0;
        for (size_t k = 0; k < BNC; k++) l[sg] += gy[k] * y[k];
      }
      x[j] = keep;
      const double fd = (l[0] - l[1]) / (2 * h), an = gr[grad_of[i]][j];
      const double e = fabs(fd - an) / fmax(1.0, fabs(an));
      if (e > 1e-5) fail_msg("%s[%zu]: analytic %.9g, finite difference %.9g", in_names[i], j, an, fd);
      worst = fmax(worst, e);
    }
  }
  tu_report("branch reference vs finite differences", worst);
  for (int i = 0; i < NGRAD; i++) free(gr[i]);
  for (int i = 0; i < NIN; i++) free(in64[i]);
  free(y), free(gy);
  problem_free(&p);
}

/* beta' = beta / max(mean_s inflation_sq, 1) <= beta; the reverse gates are zero exactly at the masked frames. */
static void test_discount_gates(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const br_shape s = {2, 7, 3, 2, 2, 8, 3, 2, 0}; /* chunks [0, 4, 7]: frame 4 masked */
  br_problem p;
  problem_init(&p, &s, 31);
  const size_t BNC = s.B * p.N * p.C, BH = s.B * s.H, T = s.T, S = p.S;
  cl_mem y = tu_buffer(BNC * 4);
  camdelta_branch_args a = device_args(&p, y);
  camdelta_branch_saved *saved = NULL;
  TU_OK(camdelta_branch_saved_create(ctx, &saved));
  TU_OK(camdelta_branch_forward(ctx, &a, saved));
  cl_mem mbp, mbr, mdr, minfl;
  TU_OK(cd_branch_saved_gates(saved, &mbp, &mbr, &mdr, &minfl));
  float *bp = bp_download(mbp, BH * T * S), *br = bp_download(mbr, BH * T * S), *dr = bp_download(mdr, BH * T);
  float *infl = bp_download(minfl, BH * p.N);
  int discounted = 0;
  double worst = 0;
  for (size_t bh = 0; bh < BH; bh++)
    for (size_t t = 0; t < T; t++) {
      double mean = 0;
      for (size_t s2 = 0; s2 < S; s2++) mean += infl[bh * p.N + t * S + s2];
      mean /= (double)S;
      if (mean > 1.0) discounted = 1;
      for (size_t s2 = 0; s2 < S; s2++) {
        const size_t i = (bh * T + t) * S + s2;
        const float beta = p.in[IBETA][i];
        assert_true(bp[i] <= beta);
        worst = fmax(worst, fabs(bp[i] - beta / fmax(mean, 1.0)) / beta);
        assert_true(br[i] == (t == 4 ? 0.0f : bp[i]));
      }
      assert_true(dr[bh * T + t] == (t == 4 ? 0.0f : p.in[IDECAY][bh * T + t]));
    }
  assert_true(discounted); /* the test exercises the discount */
  assert_true(worst < 1e-6);
  free(bp), free(br), free(dr), free(infl);
  camdelta_branch_saved_destroy(saved);
  clReleaseMemObject(y);
  problem_free(&p);
}

/* Perturbing every input of a later chunk leaves the outputs of earlier chunks bit-identical. */
static void test_no_leak(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const br_shape s = {1, 7, 2, 3, 2, 8, 3, 2, 0}; /* chunks [0, 4, 7], conv segments the same */
  br_problem p;
  problem_init(&p, &s, 41);
  const size_t BNC = s.B * p.N * p.C, first = 4 * p.S * p.C;
  cl_mem y = tu_buffer(BNC * 4);
  camdelta_branch_args a = device_args(&p, y);
  TU_OK(camdelta_branch_forward(ctx, &a, NULL));
  float *y1 = bp_download(y, BNC);
  for (size_t i = first; i < BNC; i++) {
    p.in[IQ][i] += 0.5f, p.in[IK][i] *= -2.0f, p.in[IV][i] += 3.0f;
  }
  for (size_t bh = 0; bh < s.H; bh++) {
    for (size_t i = 4 * p.S; i < 7 * p.S; i++) p.in[IBETA][bh * p.N + i] = 0.95f;
    for (size_t t = 4; t < 7; t++) p.in[IDECAY][bh * 7 + t] = 0.3f;
  }
  for (int i = 0; i < NIN; i++) clReleaseMemObject(p.din[i]), p.din[i] = tu_upload(p.in[i], p.count[i] * 4);
  a = device_args(&p, y);
  TU_OK(camdelta_branch_forward(ctx, &a, NULL));
  float *y2 = bp_download(y, BNC);
  assert_memory_equal(y1, y2, first * 4);
  assert_memory_not_equal(y1 + first, y2 + first, (BNC - first) * 4);
  free(y1), free(y2);
  clReleaseMemObject(y);
  problem_free(&p);
}

/* ---------------------------------------------------------------------------------- output transform */

typedef struct ot_shape {
  size_t B, N, H, D;
  int two;
} ot_shape;

static void test_output_transform(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  static const ot_shape sh[] = {{2, 7, 3, 8, 1}, {2, 45, 2, 64, 0}, {1, 33, 3, 112, 1}, {2, 70, 1, 128, 1}, {1, 1, 1, 8, 0}};
  double worst_f = 0, worst_b = 0;
  tu_seed(51);
  for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
    const ot_shape *s = &sh[k];
    const size_t tot = s->B * s->N * s->H * s->D, Dh = s->D / 2;
    float *o1 = malloc(tot * 4), *o2 = malloc(tot * 4), *gy = malloc(tot * 4), *P = malloc(s->B * s->N * 64);
    float *rc = malloc(s->N * Dh * 4), *rs = malloc(s->N * Dh * 4);
    tu_fill_normal(o1, tot, 1.0), tu_fill_normal(o2, tot, 1.0), tu_fill_normal(gy, tot, 1.0);
    tu_fill_normal(P, s->B * s->N * 16, 1.0);
    for (size_t i = 0; i < s->N * Dh / 2; i++) {
      const double ang = tu_uniform(-40, 40);
      rc[2 * i] = rc[2 * i + 1] = (float)cos(ang);
      rs[2 * i] = (float)-sin(ang), rs[2 * i + 1] = (float)sin(ang);
    }
    cl_mem d1 = tu_upload(o1, tot * 4), d2 = tu_upload(o2, tot * 4), dgy = tu_upload(gy, tot * 4);
    cl_mem dP = tu_upload(P, s->B * s->N * 64), dc = tu_upload(rc, s->N * Dh * 4), ds = tu_upload(rs, s->N * Dh * 4);
    cl_mem y = tu_buffer(tot * 4), go = tu_buffer(tot * 4);
    const camdelta_output_transform_args a = {s->B,    s->N,      s->H,     s->D,
                                              {d1, 0}, {s->two ? d2 : NULL, 0}, {dP, 0}, {dc, 0},
                                              {ds, 0}, {y, 0},    {dgy, 0}, {go, 0}, NULL};
    TU_OK(camdelta_output_transform_forward(ctx, &a));
    TU_OK(camdelta_output_transform_backward(ctx, &a));
    double *x = tu_to_f64(o1, tot), *P64 = tu_to_f64(P, s->B * s->N * 16), *c64 = tu_to_f64(rc, s->N * Dh),
           *s64 = tu_to_f64(rs, s->N * Dh), *g64 = tu_to_f64(gy, tot), *ref = malloc(tot * 8);
    if (s->two)
      for (size_t i = 0; i < tot; i++) x[i] += (double)o2[i];
    TU_OK(camdelta_ref_output_transform(s->B, s->N, s->H, s->D, x, P64, c64, s64, ref));
    float *got = bp_download(y, tot);
    worst_f = fmax(worst_f, tu_rel_err(got, ref, tot));
    free(got);
    TU_OK(camdelta_ref_output_transform_backward(s->B, s->N, s->H, s->D, g64, P64, c64, s64, ref));
    got = bp_download(go, tot);
    worst_b = fmax(worst_b, tu_rel_err(got, ref, tot));
    /* the backward is the adjoint: <gy, OT(x)> = <OT^T(gy), x> */
    double lhs = 0, rhs = 0, *yx = malloc(tot * 8);
    TU_OK(camdelta_ref_output_transform(s->B, s->N, s->H, s->D, x, P64, c64, s64, yx));
    for (size_t i = 0; i < tot; i++) lhs += g64[i] * yx[i], rhs += ref[i] * x[i];
    assert_true(fabs(lhs - rhs) <= 1e-9 * fmax(1.0, fabs(lhs)));
    free(yx), free(got), free(x), free(P64), free(c64), free(s64), free(g64), free(ref);
    free(o1), free(o2), free(gy), free(P), free(rc), free(rs);
    cl_mem all[8] = {d1, d2, dgy, dP, dc, ds, y, go};
    for (int i = 0; i < 8; i++) clReleaseMemObject(all[i]);
  }
  tu_report("output transform forward max rel err", worst_f);
  tu_report("output transform backward max rel err", worst_b);
  assert_true(worst_f <= 1e-6);
  assert_true(worst_b <= 1e-6);
}

/* Output transform o (prep's V transform) = identity: cameras -> proj_kv, proj_o, RoPE tables on the device, prep
 * forward (V has no norm), then the output transform gives v_raw back. */
static void test_transform_roundtrip(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const size_t B = 2, T = 3, Hs = 4, Ws = 5, H = 2, D = 64, N = T * Hs * Ws, BNC = B * N * H * D;
  tu_seed(61);
  float *cc = malloc(B * T * 20 * 4), *v = malloc(BNC * 4), *w = malloc(H * D * 4);
  bp_cameras(cc, B, T, Hs, Ws, 1, 1);
  tu_fill_normal(v, BNC, 1.0);
  for (size_t i = 0; i < H * D; i++) w[i] = 1.0f;
  cl_mem dcc = tu_upload(cc, B * T * 80), dv = tu_upload(v, BNC * 4), dw = tu_upload(w, H * D * 4);
  cl_mem pq = tu_buffer(B * N * 64), pkv = tu_buffer(B * N * 64), po = tu_buffer(B * N * 64);
  cl_mem rc = tu_buffer(N * D * 2), rs = tu_buffer(N * D * 2);
  const camdelta_camera_args ca = {B, T, Hs, Ws, 1, 1, 1, D, {dcc, 0}, {pq, 0}, {pkv, 0}, {po, 0}, {rc, 0}, {rs, 0},
                                   NULL};
  TU_OK(camdelta_camera_forward(ctx, &ca));
  cl_mem q = tu_buffer(BNC * 4), k = tu_buffer(BNC * 4), vo = tu_buffer(BNC * 4), infl = tu_buffer(B * H * N * 4);
  const camdelta_prep_args pa = {B,        N,        H,        D,        CAMDELTA_F32, 0.1f,    1e-6f,   {dv, 0},
                                 {dv, 0},  {dv, 0},  {dw, 0},  {dw, 0},  {pq, 0},      {pkv, 0}, {rc, 0}, {rs, 0},
                                 {q, 0},   {k, 0},   {vo, 0},  {infl, 0}, NULL};
  TU_OK(camdelta_prep_forward(ctx, &pa, NULL));
  cl_mem y = tu_buffer(BNC * 4);
  const camdelta_output_transform_args oa = {B, N, H, D, {vo, 0}, {NULL, 0}, {po, 0}, {rc, 0}, {rs, 0}, {y, 0},
                                             {NULL, 0}, {NULL, 0}, NULL};
  TU_OK(camdelta_output_transform_forward(ctx, &oa));
  float *got = bp_download(y, BNC);
  double *ref = tu_to_f64(v, BNC);
  const double e = tu_rel_err(got, ref, BNC);
  tu_report("output transform o K/V transform vs identity", e);
  assert_true(e < 1e-5);
  free(got), free(ref), free(cc), free(v), free(w);
  cl_mem all[13] = {dcc, dv, dw, pq, pkv, po, rc, rs, q, k, vo, infl, y};
  for (int i = 0; i < 13; i++) clReleaseMemObject(all[i]);
}

/* Every tensor at an element offset into a larger buffer gives the same bits as offset 0, forward and backward; and
 * after camdelta_warm_shape the branch builds no program. */
static void test_offsets_and_warm(void **state) {
  (void)state;
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  const br_shape s = {2, 5, 2, 3, 2, 16, 2, 1, 0};
  br_problem p;
  problem_init(&p, &s, 91);
  const size_t BNC = s.B * p.N * p.C;
  camdelta_build_stats before, after;
  TU_OK(camdelta_warm_shape(ctx, s.B, s.H, s.D, p.S));
  TU_OK(camdelta_context_build_stats(ctx, &before));
  /* buffers of the warmed context (the shared test context's live in another cl_context) */
  cl_int err;
  const size_t gcnt[NGRAD] = {BNC, BNC, BNC, 4 * p.C, p.C, p.C, p.count[IBETA], p.count[IDECAY]};
  float *res[2][NGRAD + 1];
  for (int pass = 0; pass < 2; pass++) {
    const size_t off = pass ? 3 : 0, ooff = pass ? 5 : 0;
    cl_mem in[NIN], gy, y, gm[NGRAD];
    for (int i = 0; i < NIN; i++) {
      float *tmp = calloc(p.count[i] + off, sizeof *tmp);
      memcpy(tmp + off, p.in[i], p.count[i] * 4);
      in[i] = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                             (p.count[i] + off) * 4, tmp, &err);
      assert_int_equal(err, CL_SUCCESS);
      free(tmp);
    }
    float *tmp = calloc(BNC + off, sizeof *tmp);
    memcpy(tmp + off, p.gy, BNC * 4);
    gy = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (BNC + off) * 4, tmp,
                        &err);
    free(tmp);
    y = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, (BNC + ooff) * 4, NULL, &err);
    for (int i = 0; i < NGRAD; i++)
      gm[i] = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, (gcnt[i] + ooff) * 4, NULL, &err);
    camdelta_branch_args a = device_args(&p, y);
    camdelta_buffer *b[NIN] = {&a.q_raw, &a.k_raw, &a.v_raw, &a.conv_weight, &a.q_norm_weight, &a.k_norm_weight,
                               &a.camera_conditions, &a.beta, &a.decay};
    for (int i = 0; i < NIN; i++) *b[i] = (camdelta_buffer){in[i], off};
    a.y = (camdelta_buffer){y, ooff};
    camdelta_branch_saved *saved = NULL;
    TU_OK(camdelta_branch_saved_create(ctx, &saved));
    TU_OK(camdelta_branch_forward(ctx, &a, saved));
    const camdelta_branch_grads g = {{gy, off},        {gm[0], ooff}, {gm[1], ooff}, {gm[2], ooff}, {gm[3], ooff},
                                     {gm[4], ooff},    {gm[5], ooff}, {gm[6], ooff}, {gm[7], ooff}, NULL};
    TU_OK(camdelta_branch_backward(ctx, &a, &g, saved));
    for (int i = 0; i <= NGRAD; i++) {
      const size_t n = i < NGRAD ? gcnt[i] : BNC;
      res[pass][i] = malloc(n * 4);
      err = clEnqueueReadBuffer(camdelta_context_queue(ctx), i < NGRAD ? gm[i] : y, CL_TRUE, ooff * 4, n * 4,
                                res[pass][i], 0, NULL, NULL);
      assert_int_equal(err, CL_SUCCESS);
    }
    camdelta_branch_saved_destroy(saved);
    for (int i = 0; i < NIN; i++) clReleaseMemObject(in[i]);
    for (int i = 0; i < NGRAD; i++) clReleaseMemObject(gm[i]);
    clReleaseMemObject(gy), clReleaseMemObject(y);
  }
  TU_OK(camdelta_context_build_stats(ctx, &after));
  assert_int_equal(after.programs, before.programs);
  for (int i = 0; i <= NGRAD; i++) {
    const size_t n = i < NGRAD ? gcnt[i] : BNC;
    if (memcmp(res[0][i], res[1][i], n * 4) != 0)
      fail_msg("%s differs with offsets", i < NGRAD ? bp_grad_names[i] : "y");
    free(res[0][i]), free(res[1][i]);
  }
  problem_free(&p);
  camdelta_context_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------- bad input */

/* camdelta_branch_forward of a fails with `want` and (unless needle is NULL) a message holding needle. */
static void forward_refused(camdelta_context *ctx, const camdelta_branch_args *a, camdelta_status want,
                            const char *needle) {
  const camdelta_status st = camdelta_branch_forward(ctx, a, NULL);
  if (st != want) fail_msg("forward: %s, expected %s", camdelta_status_name(st), camdelta_status_name(want));
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("forward refused with '%s', which lacks '%s'", camdelta_last_message(), needle);
}

static void test_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const br_shape s = {1, 4, 2, 3, 1, 8, 2, 2, 0};
  br_problem p;
  problem_init(&p, &s, 71);
  const size_t BNC = s.B * p.N * p.C;
  cl_mem y = bp_poison(BNC * 4);
  camdelta_branch_args a = device_args(&p, y);
  /* T that does not match the cameras (the tensors are sized for T = 4; the cameras hold 3 frames) */
  cl_mem cc3 = tu_upload(p.in[ICC], 3 * 20 * 4);
  a.camera_conditions.mem = cc3;
  forward_refused(ctx, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "camera_conditions");
  a.camera_conditions.mem = p.din[ICC];
  /* a grid that does not match N: Ws = 4 needs more tokens than the tensors hold */
  a.Ws = 4;
  forward_refused(ctx, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'q_raw'");
  a.Ws = s.Ws;
  /* chunk_index not increasing, out of range */
  const int64_t bad1[3] = {0, 2, 2}, bad2[2] = {0, 9};
  a.chunking = (camdelta_chunking){0, CAMDELTA_CHUNK_UNIFORM, bad1, 3};
  forward_refused(ctx, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "increasing");
  a.chunking = (camdelta_chunking){0, CAMDELTA_CHUNK_UNIFORM, bad2, 2};
  forward_refused(ctx, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "out of range");
  a.chunking = p.ch;
  /* conv weight of the wrong shape */
  cl_mem w3 = tu_upload(p.in[IW], 3 * p.C * 4);
  a.conv_weight.mem = w3;
  forward_refused(ctx, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "conv_weight");
  a.conv_weight.mem = p.din[IW];
  /* unsupported head dim, y overlapping an input */
  a.D = 12;
  forward_refused(ctx, &a, CAMDELTA_ERROR_UNSUPPORTED, "head dim D=12");
  a.D = s.D;
  a.y = a.q_raw;
  forward_refused(ctx, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "overlaps input 'q_raw'");
  a.y = (camdelta_buffer){y, 0};
  assert_true(bp_untouched(y, BNC * 4));

  /* backward: a saved object from another chunking or shape, a missing grad_y; nothing written */
  cl_mem yy = tu_buffer(BNC * 4);
  a.y.mem = yy;
  camdelta_branch_saved *saved = NULL;
  TU_OK(camdelta_branch_saved_create(ctx, &saved));
  camdelta_branch_grads g;
  memset(&g, 0, sizeof g);
  g.grad_y = (camdelta_buffer){p.dgy, 0};
  cl_mem gq = bp_poison(BNC * 4), gb = bp_poison(p.count[IBETA] * 4);
  g.dq_raw = (camdelta_buffer){gq, 0}, g.dbeta = (camdelta_buffer){gb, 0};
  assert_int_equal(camdelta_branch_backward(ctx, &a, &g, saved), CAMDELTA_ERROR_INVALID_ARGUMENT); /* empty */
  TU_OK(camdelta_branch_forward(ctx, &a, saved));
  a.chunking = (camdelta_chunking){0, CAMDELTA_CHUNK_UNIFORM, NULL, 0};
  assert_int_equal(camdelta_branch_backward(ctx, &a, &g, saved), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "chunking"));
  a.chunking = p.ch;
  a.T = 2, a.Hs = 3, a.Ws = 4; /* the same N, another grid */
  assert_int_equal(camdelta_branch_backward(ctx, &a, &g, saved), CAMDELTA_ERROR_SHAPE);
  a.T = s.T, a.Hs = s.Hs, a.Ws = s.Ws;
  g.grad_y.mem = NULL;
  assert_int_equal(camdelta_branch_backward(ctx, &a, &g, saved), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "grad_y"));
  assert_true(bp_untouched(gq, BNC * 4));
  assert_true(bp_untouched(gb, p.count[IBETA] * 4));
  camdelta_branch_saved_destroy(saved);
  clReleaseMemObject(cc3), clReleaseMemObject(w3), clReleaseMemObject(y), clReleaseMemObject(yy);
  clReleaseMemObject(gq), clReleaseMemObject(gb);
  problem_free(&p);
}

/* An infinity in camera_conditions (issue 38: one gave exit 0 and an entirely non-finite y, where a NaN maps to the
 * identity): refused on the device and by the reference alike, naming where, nothing written; a NaN frame still
 * runs (the identity for its tokens), on the device as in the reference. */
static void test_nonfinite_cameras(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const br_shape s = {2, 4, 2, 3, 1, 8, 2, 2, 0};
  br_problem p;
  problem_init(&p, &s, 73);
  const size_t BNC = s.B * p.N * p.C;
  static const struct {
    size_t b, f, k;
    float v;
    const char *field;
  } cases[] = {{1, 2, 5, INFINITY, "c2w[1][1]"},   {0, 0, 3, -INFINITY, "c2w[0][3]"}, {1, 3, 16, INFINITY, "fx"},
               {0, 1, 19, -INFINITY, "cy"},        {1, 0, 15, INFINITY, "c2w[3][3]"}};
  cl_mem y = bp_poison(BNC * 4);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    float *cc = malloc(p.count[ICC] * sizeof *cc);
    memcpy(cc, p.in[ICC], p.count[ICC] * sizeof *cc);
    const size_t at = (cases[i].b * s.T + cases[i].f) * 20 + cases[i].k;
    cc[at] = cases[i].v;
    cl_mem dcc = tu_upload(cc, p.count[ICC] * sizeof *cc);
    camdelta_branch_args a = device_args(&p, y);
    a.camera_conditions.mem = dcc;
    char where[96];
    snprintf(where, sizeof where, "camera_conditions[%zu, %zu, %zu] (%s) is %s", cases[i].b, cases[i].f, cases[i].k,
             cases[i].field, cases[i].v > 0 ? "+inf" : "-inf");
    assert_int_equal(camdelta_branch_forward(ctx, &a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
    if (!strstr(camdelta_last_message(), where)) fail_msg("'%s' lacks '%s'", camdelta_last_message(), where);
    assert_true(bp_untouched(y, BNC * 4));
    /* the camera operation alone */
    cl_mem po = bp_poison(s.B * p.N * 16 * 4);
    const camdelta_camera_args ca = {s.B, s.T, s.Hs, s.Ws, 1, 1, 1, s.D, {dcc, 0}, {NULL, 0}, {NULL, 0}, {po, 0},
                                     {NULL, 0}, {NULL, 0}, NULL};
    assert_int_equal(camdelta_camera_forward(ctx, &ca), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), where));
    assert_true(bp_untouched(po, s.B * p.N * 16 * 4));
    /* the references */
    double *in64[NIN];
    camdelta_ref_branch r = ref_args(&p, in64);
    in64[ICC][at] = cases[i].v;
    double *yr = malloc(BNC * sizeof *yr);
    r.y = yr;
    assert_int_equal(camdelta_ref_branch_forward(&r), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), where));
    double *P = malloc(s.B * p.N * 16 * sizeof *P);
    const camdelta_ref_camera rc = {s.B, s.T, s.Hs, s.Ws, 1, 1, s.D, in64[ICC], NULL, NULL, P, NULL, NULL};
    assert_int_equal(camdelta_ref_camera_forward(&rc), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), where));
    free(P), free(yr), free(cc);
    for (int k = 0; k < NIN; k++) free(in64[k]);
    clReleaseMemObject(dcc), clReleaseMemObject(po);
  }
  /* a NaN frame: it runs, y finite, the device within the docs/math.md §5 bound of the reference */
  float *cc = malloc(p.count[ICC] * sizeof *cc);
  memcpy(cc, p.in[ICC], p.count[ICC] * sizeof *cc);
  for (int k = 0; k < 16; k++) cc[(1 * s.T + 2) * 20 + k] = NAN;
  cl_mem dcc = tu_upload(cc, p.count[ICC] * sizeof *cc), yy = tu_buffer(BNC * 4);
  camdelta_branch_args a = device_args(&p, yy);
  a.camera_conditions.mem = dcc;
  TU_OK(camdelta_branch_forward(ctx, &a, NULL));
  float *yd = bp_download(yy, BNC);
  double *in64[NIN];
  camdelta_ref_branch r = ref_args(&p, in64);
  for (int k = 0; k < 16; k++) in64[ICC][(1 * s.T + 2) * 20 + k] = NAN;
  double *yr = malloc(BNC * sizeof *yr);
  r.y = yr;
  TU_OK(camdelta_ref_branch_forward(&r));
  for (size_t i = 0; i < BNC; i++) assert_true(isfinite(yd[i]) && isfinite(yr[i]));
  assert_true(tu_rel_err(yd, yr, BNC) <= 1e-5);
  free(yd), free(yr), free(cc);
  for (int k = 0; k < NIN; k++) free(in64[k]);
  clReleaseMemObject(dcc), clReleaseMemObject(yy), clReleaseMemObject(y);
  problem_free(&p);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_nonfinite_cameras),
      cmocka_unit_test(test_output_transform), cmocka_unit_test(test_transform_roundtrip),
      cmocka_unit_test(test_reference_fd),     cmocka_unit_test(test_discount_gates),
      cmocka_unit_test(test_no_leak),          cmocka_unit_test(test_branch_device),
      cmocka_unit_test(test_fused_output_transform), cmocka_unit_test(test_fused_prep_backward),
      cmocka_unit_test(test_offsets_and_warm), cmocka_unit_test(test_bad_input))
