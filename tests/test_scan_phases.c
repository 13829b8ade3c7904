/* The scan's phases (include/camdelta_phases.h): a forward or backward split after its gram gives the one call's
 * results bit for bit (both algorithms, both directions, with and without a saved object, the incoming states
 * changed between the halves as a sequence-parallel rank changes them); the summaries from the per-frame matrices
 * against camdelta_scan_summary / camdelta_scan_grad_summary and the f64 references; bad input is rejected with
 * nothing written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_phases.h"
#include "camdelta_summary.h"
#include "testutil.h"

typedef struct prob {
  size_t B, H, D, F, S, n_tok, n_beta, n_decay, n_state;
  float *h[9]; /* q k v beta decay init other_init grad_out grad_final */
  cl_mem m[9];
  camdelta_scan_frames *fr; /* for the split calls, on the test context */
} prob;
enum { Q, K, V, BETA, DECAY, INIT, OTHER, GO, GF, NIN };

/* A problem of B sequences of H heads, head dim D, F frames of S tokens: its inputs on the host and the device, and
 * a frames object. */
static prob prob_make(size_t B, size_t H, size_t D, size_t F, size_t S, uint64_t seed) {
  prob r;
  memset(&r, 0, sizeof r);
  r.B = B, r.H = H, r.D = D, r.F = F, r.S = S;
  r.n_tok = B * H * D * F * S, r.n_beta = B * H * F * S, r.n_decay = B * H * F, r.n_state = B * H * D * D;
  const size_t n[NIN] = {r.n_tok,   r.n_tok,   r.n_tok, r.n_beta, r.n_decay,
                         r.n_state, r.n_state, r.n_tok, r.n_state};
  tu_seed(seed);
  for (int i = 0; i < NIN; i++) {
    r.h[i] = malloc(n[i] * 4);
    assert_non_null(r.h[i]);
    if (i == BETA) tu_fill_uniform(r.h[i], n[i], 0.0, 1.0);
    else if (i == DECAY) tu_fill_uniform(r.h[i], n[i], 0.6, 1.0);
    else if (i == K) tu_fill_normal(r.h[i], n[i], 1.0 / sqrt((double)D * (double)S));
    else tu_fill_normal(r.h[i], n[i], i == INIT || i == OTHER || i == GF ? 0.5 : 1.0);
    r.m[i] = tu_upload(r.h[i], n[i] * 4);
  }
  TU_OK(camdelta_scan_frames_create(tu_context(), &r.fr));
  return r;
}

static void prob_free(prob *p) {
  for (int i = 0; i < NIN; i++) free(p->h[i]), clReleaseMemObject(p->m[i]);
  camdelta_scan_frames_destroy(p->fr);
}

static camdelta_buffer B_(cl_mem m) { return (camdelta_buffer){.mem = m, .offset = 0}; }

static camdelta_scan_args fwd_args(const prob *p, int rev, camdelta_scan_algorithm alg, cl_mem init, cl_mem out,
                                   cl_mem fin) {
  const camdelta_scan_args a = {.B = p->B, .H = p->H, .D = p->D, .F = p->F, .S = p->S, .reverse = rev,
                                .algorithm = alg, .q = B_(p->m[Q]), .k = B_(p->m[K]), .v = B_(p->m[V]),
                                .beta = B_(p->m[BETA]), .decay = B_(p->m[DECAY]), .out = B_(out),
                                .init_state = B_(init), .final_state = B_(fin)};
  return a;
}

/* n floats of a device buffer as doubles (malloc'd). */
static double *download64(cl_mem m, size_t n) {
  float *x = malloc(n * 4);
  assert_non_null(x);
  tu_download(m, 0, n * 4, x);
  double *d = tu_to_f64(x, n);
  free(x);
  return d;
}

/* The backward's outputs dq dk dv dbeta ddecay dinit, poisoned. */
typedef struct grads {
  cl_mem m[6];
} grads;

static grads grads_make(const prob *p) {
  const size_t n[6] = {p->n_tok, p->n_tok, p->n_tok, p->n_beta, p->n_decay, p->n_state};
  grads g;
  for (int i = 0; i < 6; i++) g.m[i] = tu_buffer(n[i] * 4);
  return g;
}

static void grads_free(grads *g) {
  for (int i = 0; i < 6; i++) clReleaseMemObject(g->m[i]);
}

static camdelta_scan_backward_args bwd_args(const prob *p, int rev, cl_mem init, cl_mem gfinal, const grads *g) {
  const camdelta_scan_backward_args a = {
      .B = p->B, .H = p->H, .D = p->D, .F = p->F, .S = p->S, .reverse = rev, .q = B_(p->m[Q]), .k = B_(p->m[K]),
      .v = B_(p->m[V]), .beta = B_(p->m[BETA]), .decay = B_(p->m[DECAY]), .init_state = B_(init),
      .grad_out = B_(p->m[GO]), .grad_final_state = B_(gfinal), .dq = B_(g->m[0]), .dk = B_(g->m[1]),
      .dv = B_(g->m[2]), .dbeta = B_(g->m[3]), .ddecay = B_(g->m[4]), .dinit_state = B_(g->m[5])};
  return a;
}

/* gram + rest == the one call, bit for bit; the gram runs with another init_state (and grad_final_state), which the
 * rest replaces. */
static void test_halves(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  prob p = prob_make(1, 2, 16, 3, 10, 5);
  const size_t tok = p.n_tok * 4, st = p.n_state * 4;
  for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++)
    for (int rev = 0; rev < 2; rev++)
      for (int with_saved = 0; with_saved < 2; with_saved++) {
        cl_mem out1 = tu_buffer(tok), out2 = tu_buffer(tok), fin1 = tu_buffer(st), fin2 = tu_buffer(st);
        camdelta_scan_saved *s1 = NULL, *s2 = NULL;
        if (with_saved) {
          TU_OK(camdelta_scan_saved_create(ctx, &s1));
          TU_OK(camdelta_scan_saved_create(ctx, &s2));
        }
        camdelta_scan_args a = fwd_args(&p, rev, (camdelta_scan_algorithm)alg, p.m[INIT], out1, fin1);
        TU_OK(camdelta_scan_forward(ctx, &a, s1));
        camdelta_scan_algorithm used = CAMDELTA_SCAN_AUTO;
        camdelta_scan_args h = fwd_args(&p, rev, (camdelta_scan_algorithm)alg, p.m[OTHER], out2, NULL);
        h.used = &used;
        TU_OK(camdelta_scan_forward_gram(ctx, &h, s2, p.fr));
        assert_int_equal(used, alg);
        h.init_state = B_(p.m[INIT]), h.final_state = B_(fin2);
        TU_OK(camdelta_scan_forward_rest(ctx, &h, s2, p.fr));
        tu_assert_same_bytes(out1, out2, tok, "out");
        tu_assert_same_bytes(fin1, fin2, st, "final_state");
        if (with_saved) {
          cl_mem pre1, post1, pre2, post2;
          TU_OK(camdelta_scan_saved_states(s1, &pre1, &post1));
          TU_OK(camdelta_scan_saved_states(s2, &pre2, &post2));
          tu_assert_same_bytes(post1, post2, p.n_decay * p.D * p.D * 4, "saved states");
        }
        /* the backward the same way, after each forward */
        grads g1 = grads_make(&p), g2 = grads_make(&p);
        camdelta_scan_backward_args b1 = bwd_args(&p, rev, p.m[INIT], p.m[GF], &g1);
        TU_OK(camdelta_scan_backward(ctx, &b1, s1));
        camdelta_scan_backward_args b2 = bwd_args(&p, rev, p.m[INIT], p.m[OTHER], &g2);
        TU_OK(camdelta_scan_backward_gram(ctx, &b2, s2, 0, p.fr));
        b2.grad_final_state = B_(p.m[GF]);
        TU_OK(camdelta_scan_backward_rest(ctx, &b2, s2, p.fr));
        static const char *const names[6] = {"dq", "dk", "dv", "dbeta", "ddecay", "dinit_state"};
        const size_t n[6] = {tok, tok, tok, p.n_beta * 4, p.n_decay * 4, st};
        for (int i = 0; i < 6; i++) tu_assert_same_bytes(g1.m[i], g2.m[i], n[i], names[i]);
        grads_free(&g1), grads_free(&g2);
        camdelta_scan_saved_destroy(s1), camdelta_scan_saved_destroy(s2);
        clReleaseMemObject(out1), clReleaseMemObject(out2), clReleaseMemObject(fin1), clReleaseMemObject(fin2);
      }
  prob_free(&p);
}

/* The summaries from the frames against camdelta_scan_summary / _grad_summary (their own grams: agreement to
 * rounding) and the f64 references. */
static void test_summaries(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  prob p = prob_make(2, 1, 24, 4, 7, 9);
  const size_t ns = p.n_state;
  double *h64[NIN];
  const size_t n[NIN] = {p.n_tok, p.n_tok, p.n_tok, p.n_beta, p.n_decay, ns, ns, p.n_tok, ns};
  for (int i = 0; i < NIN; i++) h64[i] = tu_to_f64(p.h[i], n[i]);
  for (int rev = 0; rev < 2; rev++) {
    cl_mem T = tu_buffer(ns * 4), E = tu_buffer(ns * 4), G = tu_buffer(ns * 4), T2 = tu_buffer(ns * 4),
           E2 = tu_buffer(ns * 4), G2 = tu_buffer(ns * 4), out = tu_buffer(p.n_tok * 4);
    grads g = grads_make(&p);
    /* the backward's gram with U: T, E (from init) and G (from grad_final) */
    camdelta_scan_backward_args b = bwd_args(&p, rev, p.m[INIT], p.m[GF], &g);
    TU_OK(camdelta_scan_backward_gram(ctx, &b, NULL, 1, p.fr));
    const camdelta_frames_summary_args fa = {.init = B_(p.m[INIT]), .grad_final = B_(p.m[GF]), .T = B_(T), .E = B_(E),
                                             .G = B_(G)};
    TU_OK(camdelta_scan_frames_summary(ctx, p.fr, &fa));
    const camdelta_scan_summary_args sa = {.B = p.B, .H = p.H, .D = p.D, .F = p.F, .S = p.S, .reverse = rev,
                                           .k = B_(p.m[K]), .v = B_(p.m[V]), .beta = B_(p.m[BETA]),
                                           .decay = B_(p.m[DECAY]), .init_state = B_(p.m[INIT]), .T = B_(T2),
                                           .E = B_(E2)};
    TU_OK(camdelta_scan_summary(ctx, &sa));
    const camdelta_scan_grad_summary_args ga = {.B = p.B, .H = p.H, .D = p.D, .F = p.F, .S = p.S, .reverse = rev,
                                                .q = B_(p.m[Q]), .k = B_(p.m[K]), .beta = B_(p.m[BETA]),
                                                .decay = B_(p.m[DECAY]), .grad_out = B_(p.m[GO]),
                                                .grad_final_state = B_(p.m[GF]), .G = B_(G2)};
    TU_OK(camdelta_scan_grad_summary(ctx, &ga));
    double *rT = malloc(ns * 8), *rE = malloc(ns * 8), *rG = malloc(ns * 8);
    camdelta_ref_scan rs = {p.B,     p.H,      p.D,     p.F,  p.S,  rev,  h64[Q], h64[K], h64[V], h64[BETA],
                            h64[DECAY], h64[INIT], NULL, NULL, NULL, NULL};
    TU_OK(camdelta_ref_scan_summary(&rs, rT, rE));
    TU_OK(camdelta_ref_scan_grad_summary(&rs, h64[GO], h64[GF], rG));
    cl_mem got[6] = {T, E, G, T2, E2, G2};
    const double *want[3] = {rT, rE, rG};
    for (int i = 0; i < 6; i++) {
      double *d = download64(got[i], ns);
      const double err = tu_rel_err64(d, want[i % 3], ns);
      static const char *const nm[3] = {"T", "E", "G"};
      printf("%s %s %s: %.2e\n", rev ? "reverse" : "causal", nm[i % 3], i < 3 ? "from the frames" : "own grams", err);
      assert_true(err < 1e-5);
      free(d);
    }
    /* the forward's gram (chunkwise) gives T and E too */
    camdelta_scan_args a = fwd_args(&p, rev, CAMDELTA_SCAN_CHUNKWISE, p.m[INIT], out, NULL);
    TU_OK(camdelta_scan_forward_gram(ctx, &a, NULL, p.fr));
    const camdelta_frames_summary_args fe = {.init = B_(p.m[INIT]), .T = B_(T), .E = B_(E)};
    TU_OK(camdelta_scan_frames_summary(ctx, p.fr, &fe));
    for (int i = 0; i < 2; i++) {
      double *d = download64(got[i], ns);
      assert_true(tu_rel_err64(d, want[i], ns) < 1e-5);
      free(d);
    }
    free(rT), free(rE), free(rG);
    grads_free(&g);
    for (int i = 0; i < 6; i++) clReleaseMemObject(got[i]);
    clReleaseMemObject(out);
  }
  for (int i = 0; i < NIN; i++) free(h64[i]);
  prob_free(&p);
}

/* Every element of `m` still holds the poison (0xFF bytes). */
static void assert_untouched(cl_mem m, size_t bytes) {
  unsigned char *x = malloc(bytes);
  assert_non_null(x);
  tu_download(m, 0, bytes, x);
  for (size_t i = 0; i < bytes; i++)
    if (x[i] != 0xFF) fail_msg("byte %zu written by a rejected call", i);
  free(x);
}

static void test_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  prob p = prob_make(1, 1, 8, 2, 4, 3), q = prob_make(1, 1, 8, 3, 4, 4);
  const size_t tok = p.n_tok * 4, st = p.n_state * 4;
  cl_mem out = tu_buffer(tok), T = tu_buffer(st), E = tu_buffer(st), G = tu_buffer(st);
  camdelta_scan_args a = fwd_args(&p, 0, CAMDELTA_SCAN_CHUNKWISE, NULL, out, NULL);
  assert_int_equal(camdelta_scan_frames_create(ctx, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_scan_forward_gram(ctx, &a, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "frames"));
  /* a rest with no gram before it */
  assert_int_equal(camdelta_scan_forward_rest(ctx, &a, NULL, p.fr), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "no forward gram"));
  const camdelta_frames_summary_args te = {.T = B_(T), .E = B_(E)};
  assert_int_equal(camdelta_scan_frames_summary(ctx, p.fr, &te), CAMDELTA_ERROR_INVALID_ARGUMENT);
  /* a rest of another shape, direction or saved object than its gram */
  TU_OK(camdelta_scan_forward_gram(ctx, &a, NULL, p.fr));
  cl_mem out_q = tu_buffer(q.n_tok * 4);
  camdelta_scan_args other = fwd_args(&q, 0, CAMDELTA_SCAN_CHUNKWISE, NULL, out_q, NULL);
  assert_int_equal(camdelta_scan_forward_rest(ctx, &other, NULL, p.fr), CAMDELTA_ERROR_SHAPE);
  assert_untouched(out_q, q.n_tok * 4);
  clReleaseMemObject(out_q);
  a.reverse = 1;
  assert_int_equal(camdelta_scan_forward_rest(ctx, &a, NULL, p.fr), CAMDELTA_ERROR_SHAPE);
  a.reverse = 0;
  camdelta_scan_saved *s;
  TU_OK(camdelta_scan_saved_create(ctx, &s));
  assert_int_equal(camdelta_scan_forward_rest(ctx, &a, s, p.fr), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_untouched(out, tok);
  /* summaries the frames cannot give: G without W (a forward's gram) */
  const camdelta_frames_summary_args g = {.G = B_(G)};
  assert_int_equal(camdelta_scan_frames_summary(ctx, p.fr, &g), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "W_f"));
  assert_untouched(G, st);
  /* the sequential forward has no gram: no matrices */
  a.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
  TU_OK(camdelta_scan_forward_gram(ctx, &a, NULL, p.fr));
  assert_int_equal(camdelta_scan_frames_summary(ctx, p.fr, &te), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "sequential"));
  assert_untouched(T, st), assert_untouched(E, st);
  /* a backward rest after a forward gram */
  grads gr = grads_make(&p);
  camdelta_scan_backward_args b = bwd_args(&p, 0, NULL, NULL, &gr);
  assert_int_equal(camdelta_scan_backward_rest(ctx, &b, NULL, p.fr), CAMDELTA_ERROR_INVALID_ARGUMENT);
  const size_t gbytes[6] = {tok, tok, tok, p.n_beta * 4, p.n_decay * 4, st};
  for (int i = 0; i < 6; i++) assert_untouched(gr.m[i], gbytes[i]);
  /* E without U: a backward's gram with a saved object and no want_u */
  a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  TU_OK(camdelta_scan_forward(ctx, &a, s));
  TU_OK(camdelta_scan_backward_gram(ctx, &b, s, 0, p.fr));
  assert_int_equal(camdelta_scan_frames_summary(ctx, p.fr, &te), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "U_f"));
  /* frames of another context */
  camdelta_context *c2;
  TU_OK(camdelta_context_create_from_queue(&c2, camdelta_context_cl_context(ctx), camdelta_context_queue(ctx)));
  assert_int_equal(camdelta_scan_forward_gram(c2, &a, NULL, p.fr), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "another context"));
  camdelta_context_destroy(c2);
  grads_free(&gr);
  camdelta_scan_saved_destroy(s);
  clReleaseMemObject(out), clReleaseMemObject(T), clReleaseMemObject(E), clReleaseMemObject(G);
  prob_free(&p), prob_free(&q);
}

TU_MAIN(NULL, tu_teardown_context, cmocka_unit_test(test_halves), cmocka_unit_test(test_summaries),
        cmocka_unit_test(test_bad_input))
