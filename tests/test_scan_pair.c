/* The fused scan pair (src/scan/pair.c, docs/math.md §8.4): its output against the f64 reference of the two scans
 * (causal with beta, decay; reverse with beta_r, decay_r zeroed at the masked frames) summed, each direction's
 * init and final states (as a part of a sequence has them), the saved states the backward reads
 * against those of camdelta_scan_forward (bit-identical: the same phase A and the same chain arithmetic), and
 * the whole branch with and without the pair. Shapes: T = 1, 2, 7, chunk_size >= T, explicit chunk indexes,
 * D = 8, 64, 112, B = 2; both precisions (tf32 is the exact path where the device has no tensor cores). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/branch_common.h"
#include "scan/engine.h"
#include "testutil.h"

#define FWD_BOUND 1e-5
#define TF32_BOUND 3e-2 /* as tests/test_scan_precision.c: a single TF32 product, about 1e-3 measured */

static double g_worst[2], g_worst_bwd[2]; /* exact, tf32 */

typedef struct pcase {
  size_t B, H, D, F, S;
  camdelta_chunking chunking;
  int init, final;
} pcase;

static void fill(float *x, size_t n, double lo, double hi) { tu_fill_uniform(x, n, lo, hi); }

static double *f64(const float *x, size_t n) { return tu_to_f64(x, n); }

/* m as an argument where `on`, else absent. */
static camdelta_buffer opt(int on, cl_mem m) { return on ? (camdelta_buffer){m, 0} : (camdelta_buffer){NULL, 0}; }

static void run_case(const pcase *c, camdelta_precision prec, uint64_t seed) {
  camdelta_context *ctx = tu_context();
  const size_t B = c->B, H = c->H, D = c->D, F = c->F, S = c->S, N = F * S;
  const size_t ntok = B * H * D * N, nbeta = B * H * F * S, ndec = B * H * F, nst = B * H * D * D;
  const size_t nfr = B * H * F * D * D;
  size_t *bounds = malloc((F + 1) * sizeof *bounds), nb = 0;
  uint32_t *mask = malloc(F * sizeof *mask);
  assert_true(bounds && mask);
  TU_OK(camdelta_chunk_bounds(F, &c->chunking, bounds, F + 1, &nb));
  cd_reverse_mask(bounds, nb, F, mask);
  tu_seed(seed);
  float *q = malloc(ntok * 4), *k = malloc(ntok * 4), *v = malloc(ntok * 4), *beta = malloc(nbeta * 4);
  float *decay = malloc(ndec * 4), *beta_r = malloc(nbeta * 4), *decay_r = malloc(ndec * 4);
  float *ic = malloc(nst * 4), *ir = malloc(nst * 4);
  assert_true(q && k && v && beta && decay && beta_r && decay_r && ic && ir);
  fill(q, ntok, -1, 1);
  tu_fill_normal(k, ntok, 1.0 / sqrt((double)D * (double)S));
  tu_fill_normal(v, ntok, 1.0);
  fill(beta, nbeta, 0, 1);
  fill(decay, ndec, 0.6, 1.0);
  tu_fill_normal(ic, nst, 0.3);
  tu_fill_normal(ir, nst, 0.3);
  for (size_t bh = 0; bh < B * H; bh++)
    for (size_t f = 0; f < F; f++) {
      decay_r[bh * F + f] = mask[f] ? decay[bh * F + f] : 0.0f;
      for (size_t s = 0; s < S; s++) beta_r[(bh * F + f) * S + s] = mask[f] ? beta[(bh * F + f) * S + s] : 0.0f;
    }

  /* f64 reference: the two scans and their sum */
  double *dq = f64(q, ntok), *dk = f64(k, ntok), *dv = f64(v, ntok), *db = f64(beta, nbeta), *dd = f64(decay, ndec);
  double *dbr = f64(beta_r, nbeta), *ddr = f64(decay_r, ndec), *dic = f64(ic, nst), *dir = f64(ir, nst);
  double *oc = malloc(ntok * 8), *orr = malloc(ntok * 8), *fc = malloc(nst * 8), *fr = malloc(nst * 8);
  assert_true(oc && orr && fc && fr);
  camdelta_ref_scan rc = {B, H, D, F, S, 0, dq, dk, dv, db, dd, c->init ? dic : NULL, oc, fc, NULL, NULL};
  camdelta_ref_scan rr = {B, H, D, F, S, 1, dq, dk, dv, dbr, ddr, c->init ? dir : NULL, orr, fr, NULL, NULL};
  TU_OK(camdelta_ref_scan_forward(&rc));
  TU_OK(camdelta_ref_scan_forward(&rr));
  for (size_t i = 0; i < ntok; i++) oc[i] += orr[i];

  /* device: the pair, and the two scans with saved objects */
  cl_mem mq = tu_upload(q, ntok * 4), mk = tu_upload(k, ntok * 4), mv = tu_upload(v, ntok * 4);
  cl_mem mb = tu_upload(beta, nbeta * 4), md = tu_upload(decay, ndec * 4), mbr = tu_upload(beta_r, nbeta * 4);
  cl_mem mdr = tu_upload(decay_r, ndec * 4), mic = tu_upload(ic, nst * 4), mir = tu_upload(ir, nst * 4);
  cl_mem mm = tu_upload(mask, F * 4), mo = tu_buffer(ntok * 4), mfc = tu_buffer(nst * 4), mfr = tu_buffer(nst * 4);
  cl_mem so_c = tu_buffer(ntok * 4), so_r = tu_buffer(ntok * 4), sf_c = tu_buffer(nst * 4), sf_r = tu_buffer(nst * 4);
  camdelta_scan_saved *pc = NULL, *pr = NULL, *sc = NULL, *sr = NULL;
  TU_OK(camdelta_scan_saved_create(ctx, &pc));
  TU_OK(camdelta_scan_saved_create(ctx, &pr));
  TU_OK(camdelta_scan_saved_create(ctx, &sc));
  TU_OK(camdelta_scan_saved_create(ctx, &sr));
  const cd_scan_pair_args pa = {.B = B, .H = H, .D = D, .F = F, .S = S, .q = {mq, 0}, .k = {mk, 0}, .v = {mv, 0},
                                .beta = {mb, 0}, .decay = {md, 0}, .mask = mm, .out = {mo, 0},
                                .init_c = opt(c->init, mic), .init_r = opt(c->init, mir),
                                .final_c = opt(c->final, mfc), .final_r = opt(c->final, mfr), .precision = prec};
  TU_OK(cd_scan_pair_forward(ctx, &pa, pc, pr));
  for (int rev = 0; rev < 2; rev++) {
    const camdelta_scan_args sa = {.B = B, .H = H, .D = D, .F = F, .S = S, .reverse = rev,
                                   .algorithm = CAMDELTA_SCAN_CHUNKWISE, .q = {mq, 0}, .k = {mk, 0}, .v = {mv, 0},
                                   .beta = {rev ? mbr : mb, 0}, .decay = {rev ? mdr : md, 0},
                                   .out = {rev ? so_r : so_c, 0}, .init_state = opt(c->init, rev ? mir : mic),
                                   .final_state = opt(c->final, rev ? sf_r : sf_c), .precision = prec};
    TU_OK(camdelta_scan_forward(ctx, &sa, rev ? sr : sc));
  }
  float *o = malloc(ntok * 4), *h = malloc(nst * 4), *s1 = malloc(nfr * 4), *s2 = malloc(nfr * 4);
  assert_true(o && h && s1 && s2);
  tu_download(mo, 0, ntok * 4, o);
  double err = tu_rel_err(o, oc, ntok);
  if (c->final) {
    tu_download(mfc, 0, nst * 4, h);
    const double e1 = tu_rel_err(h, fc, nst);
    tu_download(mfr, 0, nst * 4, h);
    const double e2 = tu_rel_err(h, fr, nst);
    err = fmax(err, fmax(e1, e2));
    /* the final states come from the same chains as the scans': the same bits */
    float *h2 = malloc(nst * 4);
    assert_non_null(h2);
    for (int rev = 0; rev < 2; rev++) {
      tu_download(rev ? mfr : mfc, 0, nst * 4, h);
      tu_download(rev ? sf_r : sf_c, 0, nst * 4, h2);
      for (size_t i = 0; i < nst; i++)
        if (h[i] != h2[i]) fail_msg("final state %s [%zu]: pair %.9g, scan %.9g", rev ? "reverse" : "causal", i,
                                    (double)h[i], (double)h2[i]);
    }
    free(h2);
  }
  const double bound = prec == CAMDELTA_PRECISION_TF32 ? TF32_BOUND : FWD_BOUND;
  printf("pair B=%zu H=%zu D=%zu F=%zu S=%zu chunks=%zu init=%d final=%d %s: rel err %.3g\n", B, H, D, F, S, nb - 1,
         c->init, c->final, camdelta_precision_name(prec), err);
  if (!(err <= bound)) fail_msg("relative error %.3g above %.1g", err, bound);
  g_worst[prec == CAMDELTA_PRECISION_TF32] = fmax(g_worst[prec == CAMDELTA_PRECISION_TF32], err);
  /* the saved states each direction's backward reads: those of its own scan, bit for bit */
  for (int rev = 0; rev < 2; rev++) {
    cl_mem a, b;
    TU_OK(camdelta_scan_saved_states(rev ? pr : pc, NULL, &a));
    TU_OK(camdelta_scan_saved_states(rev ? sr : sc, NULL, &b));
    tu_download(a, 0, nfr * 4, s1);
    tu_download(b, 0, nfr * 4, s2);
    for (size_t i = 0; i < nfr; i++)
      if (s1[i] != s2[i])
        fail_msg("%s state [%zu]: pair %.9g, scan %.9g", rev ? "reverse" : "causal", i, (double)s1[i], (double)s2[i]);
  }
  /* the pair's output against the sum of the two scans' outputs: one rounding apart */
  {
    float *a = malloc(ntok * 4), *b = malloc(ntok * 4);
    double *sum = malloc(ntok * 8);
    assert_true(a && b && sum);
    tu_download(so_c, 0, ntok * 4, a);
    tu_download(so_r, 0, ntok * 4, b);
    for (size_t i = 0; i < ntok; i++) sum[i] = (double)a[i] + (double)b[i];
    const double e = tu_rel_err(o, sum, ntok);
    if (!(e <= (prec == CAMDELTA_PRECISION_TF32 ? TF32_BOUND : 2e-6))) fail_msg("pair vs two scans: %.3g", e);
    free(a), free(b), free(sum);
  }
  /* the backward: the pair's against the f64 reference of the two scans' backward (dq, dk, dv summed) and
   * against the two scan backward calls on the device (the same bits except dq with tensor cores, one product
   * with the summed states there) */
  {
    const size_t n[5] = {ntok, ntok, ntok, nbeta, ndec};
    float *go = malloc(ntok * 4), *gfc = malloc(nst * 4), *gfr = malloc(nst * 4);
    assert_true(go && gfc && gfr);
    fill(go, ntok, -1, 1);
    tu_fill_normal(gfc, nst, 0.5);
    tu_fill_normal(gfr, nst, 0.5);
    cl_mem mg = tu_upload(go, ntok * 4), mgc = tu_upload(gfc, nst * 4), mgr = tu_upload(gfr, nst * 4);
    cl_mem d[2][6]; /* [scan direction][dq dk dv dbeta ddecay dinit] of the two scan backward calls */
    for (int rv = 0; rv < 2; rv++) {
      for (int t = 0; t < 5; t++) d[rv][t] = tu_buffer(n[t] * 4);
      d[rv][5] = tu_buffer(nst * 4);
      const camdelta_scan_backward_args ba = {.B = B, .H = H, .D = D, .F = F, .S = S, .reverse = rv, .q = {mq, 0},
                                              .k = {mk, 0}, .v = {mv, 0}, .beta = {rv ? mbr : mb, 0},
                                              .decay = {rv ? mdr : md, 0}, .init_state = opt(c->init, rv ? mir : mic),
                                              .grad_out = {mg, 0}, .grad_final_state = opt(c->final, rv ? mgr : mgc),
                                              .dq = {d[rv][0], 0}, .dk = {d[rv][1], 0}, .dv = {d[rv][2], 0},
                                              .dbeta = {d[rv][3], 0}, .ddecay = {d[rv][4], 0},
                                              .dinit_state = opt(c->final, d[rv][5]), .precision = prec};
      TU_OK(camdelta_scan_backward(ctx, &ba, rv ? sr : sc));
    }
    cl_mem p[9]; /* dq dk dv dbeta_c dbeta_r ddecay_c ddecay_r dinit_c dinit_r */
    const size_t pn[9] = {ntok, ntok, ntok, nbeta, nbeta, ndec, ndec, nst, nst};
    for (int t = 0; t < 9; t++) p[t] = tu_buffer(pn[t] * 4);
    const cd_scan_pair_bwd_args pb = {.B = B, .H = H, .D = D, .F = F, .S = S, .q = {mq, 0}, .k = {mk, 0},
                                      .v = {mv, 0}, .beta = {mb, 0}, .decay = {md, 0}, .beta_r = {mbr, 0},
                                      .decay_r = {mdr, 0}, .mask = mm, .grad_out = {mg, 0},
                                      .init_c = opt(c->init, mic), .init_r = opt(c->init, mir),
                                      .grad_final_c = opt(c->final, mgc), .grad_final_r = opt(c->final, mgr),
                                      .dq = {p[0], 0}, .dk = {p[1], 0}, .dv = {p[2], 0}, .dbeta_c = {p[3], 0},
                                      .dbeta_r = {p[4], 0}, .ddecay_c = {p[5], 0}, .ddecay_r = {p[6], 0},
                                      .dinit_c = opt(c->final, p[7]), .dinit_r = opt(c->final, p[8]),
                                      .precision = prec};
    TU_OK(cd_scan_pair_backward(ctx, &pb, pc, pr));
    /* f64 reference */
    double *g64 = f64(go, ntok), *gc64 = f64(gfc, nst), *gr64 = f64(gfr, nst);
    double *rg[2][6];
    for (int rv = 0; rv < 2; rv++) {
      for (int t = 0; t < 5; t++) rg[rv][t] = malloc(n[t] * 8);
      rg[rv][5] = malloc(nst * 8);
      const camdelta_ref_scan_grads rgr = {g64, c->final ? (rv ? gr64 : gc64) : NULL, rg[rv][0], rg[rv][1], rg[rv][2],
                                           rg[rv][3], rg[rv][4], rg[rv][5]};
      TU_OK(camdelta_ref_scan_backward(rv ? &rr : &rc, &rgr));
    }
    const double gbound = prec == CAMDELTA_PRECISION_TF32 ? TF32_BOUND : 1e-4;
    static const char *const names[9] = {"dq", "dk", "dv", "dbeta_c", "dbeta_r", "ddecay_c", "ddecay_r", "dinit_c",
                                         "dinit_r"};
    double gworst = 0;
    for (int t = 0; t < 9; t++) {
      if (t >= 7 && !c->final) continue;
      float *got = malloc(pn[t] * 4), *dev = malloc(pn[t] * 4), *dev2 = malloc(pn[t] * 4);
      double *ref = malloc(pn[t] * 8);
      assert_true(got && dev && dev2 && ref);
      tu_download(p[t], 0, pn[t] * 4, got);
      /* the reference and the device's two scans for this output */
      const int rv = t < 3 ? -1 : t < 7 ? (t - 3) % 2 : t - 7, slot = t < 3 ? t : t < 5 ? 3 : t < 7 ? 4 : 5;
      for (size_t e = 0; e < pn[t]; e++) ref[e] = rv < 0 ? rg[0][slot][e] + rg[1][slot][e] : rg[rv][slot][e];
      tu_download(d[rv < 0 ? 0 : rv][slot], 0, pn[t] * 4, dev);
      if (rv < 0) {
        tu_download(d[1][slot], 0, pn[t] * 4, dev2);
        for (size_t e = 0; e < pn[t]; e++) dev[e] += dev2[e];
      }
      const double e = tu_rel_err(got, ref, pn[t]);
      gworst = fmax(gworst, e);
      if (!(e <= gbound)) fail_msg("pair backward %s: rel err %.3g above %.1g", names[t], e, gbound);
      /* dq with tensor cores: one product with the summed states (tf32: each product rounds to about 1e-3) */
      const float dq_tol = prec == CAMDELTA_PRECISION_TF32 ? 1e-2f : 1e-5f;
      for (size_t i2 = 0; i2 < pn[t]; i2++)
        if (got[i2] != dev[i2] && (t != 0 || fabsf(got[i2] - dev[i2]) > dq_tol * (1.0f + fabsf(dev[i2]))))
          fail_msg("pair backward %s [%zu]: %.9g, the two scans' %.9g", names[t], i2, (double)got[i2],
                   (double)dev[i2]);
      free(got), free(dev), free(dev2), free(ref);
    }
    printf("  backward %s: rel err %.3g\n", camdelta_precision_name(prec), gworst);
    g_worst_bwd[prec == CAMDELTA_PRECISION_TF32] = fmax(g_worst_bwd[prec == CAMDELTA_PRECISION_TF32], gworst);
    for (int rv = 0; rv < 2; rv++)
      for (int t = 0; t < 6; t++) clReleaseMemObject(d[rv][t]), free(rg[rv][t]);
    for (int t = 0; t < 9; t++) clReleaseMemObject(p[t]);
    clReleaseMemObject(mg), clReleaseMemObject(mgc), clReleaseMemObject(mgr);
    free(go), free(gfc), free(gfr), free(g64), free(gc64), free(gr64);
  }
  camdelta_scan_saved_destroy(pc), camdelta_scan_saved_destroy(pr);
  camdelta_scan_saved_destroy(sc), camdelta_scan_saved_destroy(sr);
  cl_mem all[] = {mq, mk, mv, mb, md, mbr, mdr, mic, mir, mm, mo, mfc, mfr, so_c, so_r, sf_c, sf_r};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clReleaseMemObject(all[i]);
  free(o), free(h), free(s1), free(s2);
  free(dq), free(dk), free(dv), free(db), free(dd), free(dbr), free(ddr), free(dic), free(dir);
  free(oc), free(orr), free(fc), free(fr);
  free(q), free(k), free(v), free(beta), free(decay), free(beta_r), free(decay_r), free(ic), free(ir);
  free(bounds), free(mask);
}

/* Each of the n cases in both precisions, the i-th with the seed seed0 + i. */
static void run_cases(const pcase *cases, size_t n, uint64_t seed0) {
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < 2; p++) run_case(&cases[i], (camdelta_precision)p, seed0 + i);
}

static const int64_t IDX7[] = {0, 1, 4};    /* chunks [0,1) [1,4) [4,7) */
static const int64_t IDX7B[] = {0, 2, 3, 6}; /* a one-frame chunk inside */

static void test_small_d8(void **state) {
  (void)state;
  const pcase cases[] = {
      {1, 1, 8, 1, 5, {4, CAMDELTA_CHUNK_UNIFORM, NULL, 0}, 1, 1},               /* T = 1, chunk_size >= T */
      {2, 1, 8, 2, 5, {1, CAMDELTA_CHUNK_UNIFORM, NULL, 0}, 1, 1},               /* T = 2, every frame a chunk */
      {1, 2, 8, 2, 12, {0, CAMDELTA_CHUNK_UNIFORM, NULL, 0}, 0, 1},              /* no chunks: nothing masked */
      {1, 2, 8, 7, 5, {3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0}, 1, 0},  /* T = 7 */
      {2, 1, 8, 7, 12, {0, CAMDELTA_CHUNK_UNIFORM, IDX7, 3}, 1, 1},              /* explicit chunk_index */
      {1, 1, 8, 7, 5, {0, CAMDELTA_CHUNK_UNIFORM, IDX7B, 4}, 0, 0},
      {1, 1, 8, 7, 5, {2, CAMDELTA_CHUNK_FIRST_FRAME, NULL, 0}, 1, 1},
  };
  run_cases(cases, sizeof cases / sizeof cases[0], 100);
}

static void test_d64_d112(void **state) {
  (void)state;
  const pcase cases[] = {
      {1, 2, 64, 7, 12, {3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0}, 1, 1},
      {1, 1, 112, 7, 20, {0, CAMDELTA_CHUNK_UNIFORM, IDX7, 3}, 1, 1},
      {2, 1, 112, 2, 20, {3, CAMDELTA_CHUNK_UNIFORM, NULL, 0}, 0, 0},
  };
  run_cases(cases, sizeof cases / sizeof cases[0], 200);
}

/* Bad input: a missing or short mask, one saved object without the other: clear status, nothing written. */
static void test_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const size_t D = 8, F = 3, S = 4, ntok = D * F * S;
  float *x = calloc(ntok, 4);
  assert_non_null(x);
  cl_mem m = tu_upload(x, ntok * 4), o = tu_buffer(ntok * 4), mask = tu_upload(x, 2 * 4);
  const camdelta_buffer none = {NULL, 0};
  cd_scan_pair_args a = {1,    1,    D,    F,    S,    {m, 0}, {m, 0}, {m, 0}, {m, 0}, {m, 0}, NULL, {o, 0},
                         none, none, none, none, CAMDELTA_PRECISION_EXACT, NULL, NULL};
  assert_int_equal(cd_scan_pair_forward(ctx, &a, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "mask"));
  a.mask = mask; /* 2 frames of 3 */
  assert_int_equal(cd_scan_pair_forward(ctx, &a, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "'mask' holds 8 bytes"));
  camdelta_scan_saved *s = NULL;
  TU_OK(camdelta_scan_saved_create(ctx, &s));
  assert_int_equal(cd_scan_pair_forward(ctx, &a, s, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  a.D = 12; /* not a multiple of 8 */
  assert_int_not_equal(cd_scan_pair_forward(ctx, &a, NULL, NULL), CAMDELTA_OK);
  /* nothing written: out still holds the poison (NaN bytes) */
  uint32_t *h = malloc(ntok * 4);
  assert_non_null(h);
  tu_download(o, 0, ntok * 4, h);
  for (size_t i = 0; i < ntok; i++) assert_int_equal(h[i], 0xFFFFFFFFu);
  camdelta_scan_saved_destroy(s);
  clReleaseMemObject(m), clReleaseMemObject(o), clReleaseMemObject(mask);
  free(x), free(h);
}

/* camdelta_warm_shape builds the pair's programs too: a pair forward and backward afterwards build nothing. */
static void test_warm(void **state) {
  (void)state;
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  const size_t B = 1, H = 2, D = 16, F = 3, S = 6, N = F * S, ntok = B * H * D * N, nst = B * H * D * D;
  TU_OK(camdelta_warm_shape(ctx, B, H, D, S));
  camdelta_build_stats before, after;
  TU_OK(camdelta_context_build_stats(ctx, &before));
  float *x = malloc(ntok * 4);
  assert_non_null(x);
  tu_seed(7);
  tu_fill_uniform(x, ntok, 0.1, 0.5);
  const uint32_t mask[3] = {1, 0, 1};
  cl_int err;
  cl_mem in = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, ntok * 4, x,
                             &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_mem mm = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof mask,
                             (void *)mask, &err);
  assert_int_equal(err, CL_SUCCESS);
  cl_mem o[8];
  for (int i = 0; i < 8; i++) {
    o[i] = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, ntok * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
  }
  const camdelta_buffer none = {NULL, 0}, bin = {in, 0};
  camdelta_scan_saved *sc = NULL, *sr = NULL;
  TU_OK(camdelta_scan_saved_create(ctx, &sc));
  TU_OK(camdelta_scan_saved_create(ctx, &sr));
  /* q, k, v, beta, decay all read the same buffer (inputs may alias); every output its own */
  const cd_scan_pair_args a = {B, H, D, F, S, bin, bin, bin, bin, bin, mm, {o[0], 0}, none, none, none, none,
                               CAMDELTA_PRECISION_EXACT, NULL, NULL};
  TU_OK(cd_scan_pair_forward(ctx, &a, sc, sr));
  const cd_scan_pair_bwd_args b = {B,         H,         D,         F,         S,         bin,  bin,  bin,
                                   bin,       bin,       bin,       bin,       mm,        {o[0], 0}, none, none,
                                   none,      none,      {o[1], 0}, {o[2], 0}, {o[3], 0}, {o[4], 0}, {o[5], 0},
                                   {o[6], 0}, {o[7], 0}, none,      none,      none,      none,      none,
                                   CAMDELTA_PRECISION_EXACT, NULL, 0};
  TU_OK(cd_scan_pair_backward(ctx, &b, sc, sr));
  TU_OK(camdelta_context_build_stats(ctx, &after));
  assert_int_equal(after.programs, before.programs);
  (void)nst;
  camdelta_scan_saved_destroy(sc), camdelta_scan_saved_destroy(sr);
  clReleaseMemObject(in), clReleaseMemObject(mm);
  for (int i = 0; i < 8; i++) clReleaseMemObject(o[i]);
  free(x);
  camdelta_context_destroy(ctx);
}

static int report(void **state) {
  (void)state;
  tu_report("scan pair exact: worst relative error", g_worst[0]);
  tu_report("scan pair tf32: worst relative error", g_worst[1]);
  tu_report("scan pair backward exact: worst relative error", g_worst_bwd[0]);
  tu_report("scan pair backward tf32: worst relative error", g_worst_bwd[1]);
  return tu_teardown_context(state);
}

TU_MAIN(NULL, report,
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_warm),
      cmocka_unit_test(test_small_d8),
      cmocka_unit_test(test_d64_d112))
