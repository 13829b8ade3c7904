/* State summaries (docs/math.md §9): T·M + E equals running the segment from M, Tᵀ·dM + G equals the backward's
 * dinit_state for grad_final_state dM, for random M and dM, both directions, in f64 (the references) and on the
 * device (against the f64 references and against the device's own scan forward and backward); the combine
 * helper against the summary of the joined segment; bad input. D = 16 and 40 (a partial 32-tile). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_summary.h"
#include "testutil.h"

#define BOUND 1e-5

/* the two states: M the incoming state of a segment (init), dM the gradient of its final state (gf) */
typedef tu_scan_host sp;

static void sp_make(sp *p, size_t B, size_t H, size_t D, size_t F, size_t S, uint64_t seed) {
  tu_scan_host_make(p, B, H, D, F, S, (const double[2]){0.5, 0.5}, seed);
}

/* f64 copies */
typedef struct sp64 {
  double *q, *k, *v, *beta, *decay, *M, *dM, *go;
} sp64;

static sp64 sp_f64(const sp *p) {
  sp64 d = {tu_to_f64(p->q, p->tok),     tu_to_f64(p->k, p->tok),         tu_to_f64(p->v, p->tok),
            tu_to_f64(p->beta, p->gates), tu_to_f64(p->decay, p->bhf),   tu_to_f64(p->init, p->st),
            tu_to_f64(p->gf, p->st),  tu_to_f64(p->go, p->tok)};
  return d;
}

static void sp64_free(sp64 *d) {
  free(d->q), free(d->k), free(d->v), free(d->beta), free(d->decay), free(d->M), free(d->dM), free(d->go);
}

/* Y = op(T)·X + E per (b, h) in f64 */
static void apply64(const sp *p, const double *T, int trans, const double *X, const double *E, double *Y) {
  const size_t D = p->D, DD = D * D;
  for (size_t bh = 0; bh < p->B * p->H; bh++)
    for (size_t i = 0; i < D; i++)
      for (size_t j = 0; j < D; j++) {
        double acc = E ? E[bh * DD + i * D + j] : 0;
        for (size_t k = 0; k < D; k++)
          acc += (trans ? T[bh * DD + k * D + i] : T[bh * DD + i * D + k]) * X[bh * DD + k * D + j];
        Y[bh * DD + i * D + j] = acc;
      }
}

/* The f64 references satisfy the summary identities (to rounding). */
static void test_reference_identities(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++) {
    sp p;
    sp_make(&p, 2, 1, 8, 4, 5, 11 + rev);
    sp64 d = sp_f64(&p);
    const size_t ns = p.st;
    double *T = malloc(ns * 8), *E = malloc(ns * 8), *Ei = malloc(ns * 8), *G = malloc(ns * 8), *Gf = malloc(ns * 8);
    double *fin = malloc(ns * 8), *dinit = malloc(ns * 8), *y = malloc(ns * 8);
    camdelta_ref_scan rs = {p.B, p.H, p.D, p.F, p.S, rev, d.q, d.k, d.v, d.beta, d.decay, NULL,
                            NULL, NULL, NULL, NULL};
    TU_OK(camdelta_ref_scan_summary(&rs, T, E));
    TU_OK(camdelta_ref_scan_grad_summary(&rs, d.go, NULL, G));
    /* forward from M */
    rs.init_state = d.M;
    rs.final_state = fin;
    TU_OK(camdelta_ref_scan_forward(&rs));
    apply64(&p, T, 0, d.M, E, y);
    double e1 = tu_rel_err64(y, fin, ns);
    TU_OK(camdelta_ref_scan_summary(&rs, NULL, Ei)); /* E with init_state folded in */
    double e2 = tu_rel_err64(Ei, fin, ns);
    /* backward with grad_final_state dM */
    camdelta_ref_scan_grads g = {d.go, d.dM, NULL, NULL, NULL, NULL, NULL, dinit};
    TU_OK(camdelta_ref_scan_backward(&rs, &g));
    apply64(&p, T, 1, d.dM, G, y);
    double e3 = tu_rel_err64(y, dinit, ns);
    TU_OK(camdelta_ref_scan_grad_summary(&rs, d.go, d.dM, Gf));
    double e4 = tu_rel_err64(Gf, dinit, ns);
    printf("ref identities %s: T*M+E %.2e, folded E %.2e, T'dM+G %.2e, folded G %.2e\n", rev ? "reverse" : "causal",
           e1, e2, e3, e4);
    assert_true(e1 < 1e-12 && e2 < 1e-12 && e3 < 1e-12 && e4 < 1e-12);
    /* the identities can fail: a wrong direction's T does not satisfy them */
    camdelta_ref_scan other = rs;
    other.reverse = !rev, other.init_state = NULL;
    TU_OK(camdelta_ref_scan_summary(&other, T, NULL));
    apply64(&p, T, 0, d.M, E, y);
    assert_true(tu_rel_err64(y, fin, ns) > 1e-6);
    free(T), free(E), free(Ei), free(G), free(Gf), free(fin), free(dinit), free(y);
    sp64_free(&d);
    tu_scan_host_free(&p);
  }
}

typedef struct dev {
  cl_mem q, k, v, beta, decay, M, dM, go;
} dev;

static dev dev_upload(const sp *p) {
  dev d = {tu_upload(p->q, p->tok * 4),     tu_upload(p->k, p->tok * 4),       tu_upload(p->v, p->tok * 4),
           tu_upload(p->beta, p->gates * 4), tu_upload(p->decay, p->bhf * 4), tu_upload(p->init, p->st * 4),
           tu_upload(p->gf, p->st * 4),  tu_upload(p->go, p->tok * 4)};
  return d;
}

static void dev_free(dev *d) {
  cl_mem m[8] = {d->q, d->k, d->v, d->beta, d->decay, d->M, d->dM, d->go};
  for (int i = 0; i < 8; i++) clReleaseMemObject(m[i]);
}

static float *fetch(cl_mem m, size_t n) {
  float *x = malloc(n * 4);
  assert_non_null(x);
  tu_download(m, 0, n * 4, x);
  return x;
}

static double worst[4]; /* T, E, G vs f64; identities on the device */

/* Device summaries against the f64 references, and the identities against the device's own scan. */
static void check_case(size_t B, size_t H, size_t D, size_t F, size_t S, int rev, uint64_t seed) {
  camdelta_context *ctx = tu_context();
  sp p;
  sp_make(&p, B, H, D, F, S, seed);
  sp64 h = sp_f64(&p);
  dev d = dev_upload(&p);
  const size_t ns = p.st;
  cl_mem T = tu_buffer(ns * 4), E = tu_buffer(ns * 4), Ei = tu_buffer(ns * 4), G = tu_buffer(ns * 4),
         Gf = tu_buffer(ns * 4);
  camdelta_scan_summary_args sa = {0};
  sa.B = B, sa.H = H, sa.D = D, sa.F = F, sa.S = S, sa.reverse = rev;
  sa.k.mem = d.k, sa.v.mem = d.v, sa.beta.mem = d.beta, sa.decay.mem = d.decay, sa.T.mem = T, sa.E.mem = E;
  TU_OK(camdelta_scan_summary(ctx, &sa));
  sa.T.mem = NULL, sa.E.mem = Ei, sa.init_state.mem = d.M;
  TU_OK(camdelta_scan_summary(ctx, &sa));
  camdelta_scan_grad_summary_args ga = {0};
  ga.B = B, ga.H = H, ga.D = D, ga.F = F, ga.S = S, ga.reverse = rev;
  ga.q.mem = d.q, ga.k.mem = d.k, ga.beta.mem = d.beta, ga.decay.mem = d.decay, ga.grad_out.mem = d.go;
  ga.G.mem = G;
  TU_OK(camdelta_scan_grad_summary(ctx, &ga));
  ga.G.mem = Gf, ga.grad_final_state.mem = d.dM;
  TU_OK(camdelta_scan_grad_summary(ctx, &ga));

  /* f64 references */
  double *rT = malloc(ns * 8), *rE = malloc(ns * 8), *rEi = malloc(ns * 8), *rG = malloc(ns * 8),
         *rGf = malloc(ns * 8);
  camdelta_ref_scan rs = {B, H, D, F, S, rev, h.q, h.k, h.v, h.beta, h.decay, NULL, NULL, NULL, NULL, NULL};
  TU_OK(camdelta_ref_scan_summary(&rs, rT, rE));
  TU_OK(camdelta_ref_scan_grad_summary(&rs, h.go, NULL, rG));
  TU_OK(camdelta_ref_scan_grad_summary(&rs, h.go, h.dM, rGf));
  rs.init_state = h.M;
  TU_OK(camdelta_ref_scan_summary(&rs, NULL, rEi));
  float *xT = fetch(T, ns), *xE = fetch(E, ns), *xEi = fetch(Ei, ns), *xG = fetch(G, ns), *xGf = fetch(Gf, ns);
  const double eT = tu_rel_err(xT, rT, ns), eE = tu_rel_err(xE, rE, ns), eEi = tu_rel_err(xEi, rEi, ns);
  const double eG = tu_rel_err(xG, rG, ns), eGf = tu_rel_err(xGf, rGf, ns);

  /* the device's own scan from M, and its backward with grad_final_state dM */
  cl_mem out = tu_buffer(p.tok * 4), fin = tu_buffer(ns * 4), Mout = tu_buffer(ns * 4), dMin = tu_buffer(ns * 4);
  cl_mem dinit = tu_buffer(ns * 4), gq = tu_buffer(p.tok * 4), gk = tu_buffer(p.tok * 4),
         gv = tu_buffer(p.tok * 4), gb = tu_buffer(p.gates * 4), gd = tu_buffer(p.bhf * 4);
  camdelta_scan_args fa = {0};
  fa.B = B, fa.H = H, fa.D = D, fa.F = F, fa.S = S, fa.reverse = rev, fa.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
  fa.q.mem = d.q, fa.k.mem = d.k, fa.v.mem = d.v, fa.beta.mem = d.beta, fa.decay.mem = d.decay, fa.out.mem = out;
  fa.init_state.mem = d.M, fa.final_state.mem = fin;
  TU_OK(camdelta_scan_forward(ctx, &fa, NULL));
  camdelta_scan_backward_args ba = {0};
  ba.B = B, ba.H = H, ba.D = D, ba.F = F, ba.S = S, ba.reverse = rev;
  ba.q.mem = d.q, ba.k.mem = d.k, ba.v.mem = d.v, ba.beta.mem = d.beta, ba.decay.mem = d.decay;
  ba.init_state.mem = d.M, ba.grad_out.mem = d.go, ba.grad_final_state.mem = d.dM;
  ba.dq.mem = gq, ba.dk.mem = gk, ba.dv.mem = gv, ba.dbeta.mem = gb, ba.ddecay.mem = gd, ba.dinit_state.mem = dinit;
  TU_OK(camdelta_scan_backward(ctx, &ba, NULL));
  camdelta_summary_apply_args aa = {0};
  aa.B = B, aa.H = H, aa.D = D, aa.T.mem = T, aa.E.mem = E, aa.M_in.mem = d.M, aa.M_out.mem = Mout;
  TU_OK(camdelta_summary_apply(ctx, &aa));
  aa.transpose = 1, aa.E.mem = G, aa.M_in.mem = d.dM, aa.M_out.mem = dMin;
  TU_OK(camdelta_summary_apply(ctx, &aa));
  float *xfin = fetch(fin, ns), *xMout = fetch(Mout, ns), *xdinit = fetch(dinit, ns), *xdMin = fetch(dMin, ns);
  double *dfin = tu_to_f64(xfin, ns), *ddinit = tu_to_f64(xdinit, ns);
  const double iF = tu_rel_err(xMout, dfin, ns), iG = tu_rel_err(xdMin, ddinit, ns);

  printf("B=%zu H=%zu D=%zu F=%zu S=%zu %s: vs f64 T %.2e E %.2e E(init) %.2e G %.2e G(gfinal) %.2e; "
         "device T*M+E vs scan %.2e, T'dM+G vs backward %.2e\n",
         B, H, D, F, S, rev ? "reverse" : "causal", eT, eE, eEi, eG, eGf, iF, iG);
  const double e[4] = {eT, fmax(eE, eEi), fmax(eG, eGf), fmax(iF, iG)};
  for (int i = 0; i < 4; i++) worst[i] = fmax(worst[i], e[i]);
  assert_true(eT <= BOUND && eE <= BOUND && eEi <= BOUND && eG <= BOUND && eGf <= BOUND);
  assert_true(iF <= BOUND && iG <= BOUND);

  free(rT), free(rE), free(rEi), free(rG), free(rGf), free(xT), free(xE), free(xEi), free(xG), free(xGf);
  free(xfin), free(xMout), free(xdinit), free(xdMin), free(dfin), free(ddinit);
  cl_mem rel[15] = {T, E, Ei, G, Gf, out, fin, Mout, dMin, dinit, gq, gk, gv, gb, gd};
  for (int i = 0; i < 15; i++) clReleaseMemObject(rel[i]);
  dev_free(&d);
  sp64_free(&h);
  tu_scan_host_free(&p);
}

static void test_device_summaries(void **state) {
  (void)state;
  for (int rev = 0; rev < 2; rev++) {
    check_case(1, 2, 16, 4, 7, rev, 100 + rev);
    check_case(2, 1, 16, 1, 9, rev, 110 + rev);  /* one frame */
    check_case(1, 1, 40, 3, 20, rev, 120 + rev); /* D not a multiple of the 32-tile */
  }
  tu_report("summary T vs f64", worst[0]);
  tu_report("summary E vs f64", worst[1]);
  tu_report("summary G vs f64", worst[2]);
  tu_report("summary identities vs device scan", worst[3]);
}

/* combine(first half, second half) equals the summary of the whole segment, both directions. */
static void test_combine(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const size_t B = 1, H = 2, D = 16, F = 5, S = 6, F1 = 2;
  sp p;
  sp_make(&p, B, H, D, F, S, 200);
  dev d = dev_upload(&p);
  const size_t ns = p.st;
  for (int rev = 0; rev < 2; rev++) {
    cl_mem T[3], E[3], Tc = tu_buffer(ns * 4), Ec = tu_buffer(ns * 4);
    for (int i = 0; i < 3; i++) T[i] = tu_buffer(ns * 4), E[i] = tu_buffer(ns * 4);
    /* the parts as sub-tensors: a (B=1, H) layout has each head's tokens contiguous, so each head is a
     * separate call with B = H = 1 */
    for (size_t hh = 0; hh < H; hh++) {
      for (int part = 0; part < 3; part++) {
        const size_t f0 = part == 1 ? F1 : 0, nf = part == 0 ? F1 : part == 1 ? F - F1 : F;
        camdelta_scan_summary_args sa = {0};
        sa.B = 1, sa.H = 1, sa.D = D, sa.F = nf, sa.S = S, sa.reverse = rev;
        /* per-head (D, N) rows are strided by N, so a frame range of one head is not contiguous: copy it */
        float *kk = malloc(D * nf * S * 4), *vv = malloc(D * nf * S * 4);
        for (size_t r = 0; r < D; r++)
          for (size_t n = 0; n < nf * S; n++) {
            kk[r * nf * S + n] = p.k[(hh * D + r) * p.N + f0 * S + n];
            vv[r * nf * S + n] = p.v[(hh * D + r) * p.N + f0 * S + n];
          }
        cl_mem km = tu_upload(kk, D * nf * S * 4), vm = tu_upload(vv, D * nf * S * 4);
        sa.k.mem = km, sa.v.mem = vm;
        sa.beta = (camdelta_buffer){d.beta, hh * p.N + f0 * S};
        sa.decay = (camdelta_buffer){d.decay, hh * F + f0};
        sa.T = (camdelta_buffer){T[part], hh * D * D}, sa.E = (camdelta_buffer){E[part], hh * D * D};
        TU_OK(camdelta_scan_summary(ctx, &sa));
        clReleaseMemObject(km), clReleaseMemObject(vm);
        free(kk), free(vv);
      }
    }
    /* causal: part 0 feeds part 1; reverse: part 1 feeds part 0 */
    camdelta_summary_combine_args ca = {0};
    ca.B = B, ca.H = H, ca.D = D;
    ca.T1.mem = T[rev ? 1 : 0], ca.E1.mem = E[rev ? 1 : 0], ca.T2.mem = T[rev ? 0 : 1], ca.E2.mem = E[rev ? 0 : 1];
    ca.T.mem = Tc, ca.E.mem = Ec;
    TU_OK(camdelta_summary_combine(ctx, &ca));
    float *xt = fetch(Tc, ns), *xe = fetch(Ec, ns), *wt = fetch(T[2], ns), *we = fetch(E[2], ns);
    double *dwt = tu_to_f64(wt, ns), *dwe = tu_to_f64(we, ns);
    const double et = tu_rel_err(xt, dwt, ns), ee = tu_rel_err(xe, dwe, ns);
    printf("combine %s: T %.2e E %.2e\n", rev ? "reverse" : "causal", et, ee);
    assert_true(et <= BOUND && ee <= BOUND);
    /* the wrong order does not match */
    camdelta_summary_combine_args wrong = ca;
    wrong.T1 = ca.T2, wrong.E1 = ca.E2, wrong.T2 = ca.T1, wrong.E2 = ca.E1;
    TU_OK(camdelta_summary_combine(ctx, &wrong));
    float *xw = fetch(Ec, ns);
    assert_true(tu_rel_err(xw, dwe, ns) > 1e-3);
    free(xt), free(xe), free(wt), free(we), free(dwt), free(dwe), free(xw);
    for (int i = 0; i < 3; i++) clReleaseMemObject(T[i]), clReleaseMemObject(E[i]);
    clReleaseMemObject(Tc), clReleaseMemObject(Ec);
  }
  dev_free(&d);
  tu_scan_host_free(&p);
}

/* Bad input: a clear status and message, nothing written. */
static void test_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  sp p;
  sp_make(&p, 1, 1, 16, 3, 4, 300);
  dev d = dev_upload(&p);
  const size_t ns = p.st;
  cl_mem T = tu_buffer(ns * 4), E = tu_buffer(ns * 4), small = tu_buffer(ns * 4 - 4);
  float *before = fetch(T, ns);
  camdelta_scan_summary_args sa = {0};
  sa.B = 1, sa.H = 1, sa.D = 16, sa.F = 3, sa.S = 4;
  sa.k.mem = d.k, sa.v.mem = d.v, sa.beta.mem = d.beta, sa.decay.mem = d.decay;
  assert_int_equal(camdelta_scan_summary(ctx, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT); /* no output */
  assert_non_null(strstr(camdelta_last_message(), "neither output"));
  sa.T.mem = T, sa.E.mem = small;
  assert_int_equal(camdelta_scan_summary(ctx, &sa), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  assert_non_null(strstr(camdelta_last_message(), "'E'"));
  sa.E.mem = E, sa.D = 12;
  assert_int_equal(camdelta_scan_summary(ctx, &sa), CAMDELTA_ERROR_UNSUPPORTED);
  sa.D = 16, sa.E = (camdelta_buffer){T, 0};
  assert_int_equal(camdelta_scan_summary(ctx, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT); /* T and E overlap */
  sa.E.mem = E, sa.v.mem = NULL;
  assert_int_equal(camdelta_scan_summary(ctx, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT); /* E needs v */
  assert_non_null(strstr(camdelta_last_message(), "'v'"));
  camdelta_scan_grad_summary_args ga = {0};
  ga.B = 1, ga.H = 1, ga.D = 16, ga.F = 3, ga.S = 4;
  ga.q.mem = d.q, ga.k.mem = d.k, ga.beta.mem = d.beta, ga.decay.mem = d.decay, ga.grad_out.mem = d.go;
  ga.G = (camdelta_buffer){T, 0};
  ga.grad_final_state = (camdelta_buffer){T, 0};
  assert_int_equal(camdelta_scan_grad_summary(ctx, &ga), CAMDELTA_ERROR_INVALID_ARGUMENT); /* G overlaps input */
  ga.grad_final_state.mem = NULL, ga.grad_out.mem = NULL;
  assert_int_equal(camdelta_scan_grad_summary(ctx, &ga), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "grad_out"));
  camdelta_summary_apply_args aa = {0};
  aa.B = 1, aa.H = 1, aa.D = 16, aa.T.mem = E, aa.M_in.mem = d.M, aa.M_out = (camdelta_buffer){d.M, 0};
  assert_int_equal(camdelta_summary_apply(ctx, &aa), CAMDELTA_ERROR_INVALID_ARGUMENT); /* in place */
  aa.M_out.mem = NULL;
  assert_int_equal(camdelta_summary_apply(ctx, &aa), CAMDELTA_ERROR_INVALID_ARGUMENT);
  camdelta_summary_combine_args ca = {0};
  ca.B = 1, ca.H = 1, ca.D = 16, ca.T1.mem = E, ca.T2.mem = d.M, ca.T.mem = small;
  assert_int_equal(camdelta_summary_combine(ctx, &ca), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  TU_OK(camdelta_finish(ctx));
  float *after = fetch(T, ns);
  assert_memory_equal(before, after, ns * 4); /* nothing written (still the poison) */
  free(before), free(after);
  clReleaseMemObject(T), clReleaseMemObject(E), clReleaseMemObject(small);
  dev_free(&d);
  tu_scan_host_free(&p);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_reference_identities),
      cmocka_unit_test(test_device_summaries),
      cmocka_unit_test(test_combine),
      cmocka_unit_test(test_bad_input))
