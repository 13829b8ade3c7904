/* The f64 reference of the scan over packed clips (docs/math.md §9; host only): clips of (F, S) = (1, 7), (5, 6),
 * (3, 1) and one clip whose frames have 4, 2 and 5 tokens, with and without per-clip init states, both
 * directions. Forward: equal to a direct token-range recurrence written here; on the clips of one token count,
 * bit-equal to camdelta_ref_scan_forward of the clip alone. Backward: bit-equal to camdelta_ref_scan_backward of
 * each clip alone where the clip has one token count, and finite differences of the packed forward for the
 * mixed clip. Bad offsets are rejected. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { H = 2, D = 4, CLIPS = 4 };
static const size_t frames_of[CLIPS] = {1, 5, 3, 3};
static const size_t tokens_of[CLIPS][5] = {{7}, {6, 6, 6, 6, 6}, {1, 1, 1}, {4, 2, 5}};

typedef struct pk {
  size_t frames, N;
  int64_t fo[16], co[CLIPS + 1];
  double *q, *k, *v, *beta, *decay, *init, *go, *gf;
} pk;

static double rnd(double lo, double hi) { return tu_uniform(lo, hi); }

static void pk_make(pk *p) {
  memset(p, 0, sizeof *p);
  tu_seed(5);
  size_t f = 0, n = 0;
  for (size_t c = 0; c < CLIPS; c++) {
    p->co[c] = (int64_t)f;
    for (size_t i = 0; i < frames_of[c]; i++) p->fo[f++] = (int64_t)n, n += tokens_of[c][i];
  }
  p->co[CLIPS] = (int64_t)f, p->fo[f] = (int64_t)n, p->frames = f, p->N = n;
  const size_t nt = H * D * n;
  p->q = malloc(nt * 8), p->k = malloc(nt * 8), p->v = malloc(nt * 8), p->go = malloc(nt * 8);
  p->beta = malloc(H * n * 8), p->decay = malloc(H * f * 8);
  p->init = malloc(CLIPS * H * D * D * 8), p->gf = malloc(CLIPS * H * D * D * 8);
  for (size_t i = 0; i < nt; i++) p->q[i] = rnd(-1, 1), p->k[i] = rnd(-0.4, 0.4), p->v[i] = rnd(-1, 1), p->go[i] = rnd(-1, 1);
  for (size_t i = 0; i < H * n; i++) p->beta[i] = rnd(0, 1);
  for (size_t i = 0; i < H * f; i++) p->decay[i] = rnd(0.6, 1);
  for (size_t i = 0; i < CLIPS * H * D * D; i++) p->init[i] = rnd(-0.5, 0.5), p->gf[i] = rnd(-0.5, 0.5);
}

static void pk_free(pk *p) {
  free(p->q), free(p->k), free(p->v), free(p->go), free(p->beta), free(p->decay), free(p->init), free(p->gf);
}

static camdelta_ref_scan_packed args(const pk *p, int reverse, int with_init, double *out, double *fin) {
  camdelta_ref_scan_packed a = {H,   D,   p->frames, CLIPS,   p->fo,   p->co,  reverse, p->q,
                                p->k, p->v, p->beta, p->decay, with_init ? p->init : NULL, out, fin};
  return a;
}

/* Direct recurrence over token ranges (docs/math.md §3 per clip): M_t = g·M + Σ_s k_s β_s (v_s − k_sᵀ·g·M)ᵀ. */
static void direct_forward(const pk *p, int reverse, int with_init, double *out) {
  for (size_t c = 0; c < CLIPS; c++)
    for (size_t h = 0; h < H; h++) {
      double M[D][D], P[D][D];
      for (size_t a = 0; a < D; a++)
        for (size_t b = 0; b < D; b++) M[a][b] = with_init ? p->init[((c * H + h) * D + a) * D + b] : 0;
      const size_t f0 = (size_t)p->co[c], F = (size_t)p->co[c + 1] - f0;
      for (size_t i = 0; i < F; i++) {
        /* causal: absorb frame i, output frame i; reverse: output frame F−1−i reads M after absorbing F−i */
        const size_t qf = reverse ? F - 1 - i : i;
        if (!reverse || i > 0) {
          const size_t kf = reverse ? F - i : i, g = f0 + kf;
          const double dg = p->decay[h * p->frames + g];
          for (size_t a = 0; a < D; a++)
            for (size_t b = 0; b < D; b++) P[a][b] = dg * M[a][b], M[a][b] = P[a][b];
          for (size_t n = (size_t)p->fo[g]; n < (size_t)p->fo[g + 1]; n++) {
            double r[D];
            for (size_t b = 0; b < D; b++) {
              double pred = 0;
              for (size_t a = 0; a < D; a++) pred += p->k[(h * D + a) * p->N + n] * P[a][b];
              r[b] = p->beta[h * p->N + n] * (p->v[(h * D + b) * p->N + n] - pred);
            }
            for (size_t a = 0; a < D; a++)
              for (size_t b = 0; b < D; b++) M[a][b] += p->k[(h * D + a) * p->N + n] * r[b];
          }
        }
        const size_t g = f0 + qf;
        for (size_t n = (size_t)p->fo[g]; n < (size_t)p->fo[g + 1]; n++)
          for (size_t b = 0; b < D; b++) {
            double acc = 0;
            for (size_t a = 0; a < D; a++) acc += p->q[(h * D + a) * p->N + n] * M[a][b];
            out[(h * D + b) * p->N + n] = acc;
          }
      }
    }
}

static void test_forward(void **state) {
  (void)state;
  pk p;
  pk_make(&p);
  double *out = malloc(H * D * p.N * 8), *want = malloc(H * D * p.N * 8), *fin = malloc(CLIPS * H * D * D * 8);
  for (int rev = 0; rev < 2; rev++)
    for (int wi = 0; wi < 2; wi++) {
      camdelta_ref_scan_packed a = args(&p, rev, wi, out, fin);
      TU_OK(camdelta_ref_scan_packed_forward(&a));
      direct_forward(&p, rev, wi, want);
      const double e = tu_rel_err64(out, want, H * D * p.N);
      printf("packed forward %s init=%d vs direct recurrence: %.2e\n", rev ? "reverse" : "causal", wi, e);
      assert_true(e < 1e-13);
      /* clip 1 (5 frames of 6 tokens) alone through the fixed-shape reference: bit-equal */
      const size_t c = 1, f0 = (size_t)p.co[c], F = 5, S = 6, n0 = (size_t)p.fo[f0], Nc = F * S;
      for (size_t h = 0; h < H; h++) {
        double *q = malloc(D * Nc * 8), *k = malloc(D * Nc * 8), *v = malloc(D * Nc * 8), *o = malloc(D * Nc * 8);
        double f1[D * D];
        for (size_t r = 0; r < D; r++)
          for (size_t n = 0; n < Nc; n++) {
            q[r * Nc + n] = p.q[(h * D + r) * p.N + n0 + n];
            k[r * Nc + n] = p.k[(h * D + r) * p.N + n0 + n];
            v[r * Nc + n] = p.v[(h * D + r) * p.N + n0 + n];
          }
        camdelta_ref_scan rs = {1, 1, D, F, S, rev, q, k, v, p.beta + h * p.N + n0, p.decay + h * p.frames + f0,
                                wi ? p.init + (c * H + h) * D * D : NULL, o, f1, NULL, NULL};
        TU_OK(camdelta_ref_scan_forward(&rs));
        for (size_t r = 0; r < D; r++) assert_memory_equal(o + r * Nc, out + (h * D + r) * p.N + n0, Nc * 8);
        assert_memory_equal(f1, fin + (c * H + h) * D * D, D * D * 8);
        free(q), free(k), free(v), free(o);
      }
    }
  free(out), free(want), free(fin);
  pk_free(&p);
}

/* L = Σ out·go + Σ final·gf of the packed forward */
static double loss(const pk *p, int rev, int wi) {
  double *out = malloc(H * D * p->N * 8), *fin = malloc(CLIPS * H * D * D * 8);
  camdelta_ref_scan_packed a = args(p, rev, wi, out, fin);
  if (camdelta_ref_scan_packed_forward(&a)) fail();
  double L = 0;
  for (size_t i = 0; i < H * D * p->N; i++) L += out[i] * p->go[i];
  for (size_t i = 0; i < CLIPS * H * D * D; i++) L += fin[i] * p->gf[i];
  free(out), free(fin);
  return L;
}

static void test_backward(void **state) {
  (void)state;
  pk p;
  pk_make(&p);
  const size_t nt = H * D * p.N, ns = CLIPS * H * D * D;
  double *dq = malloc(nt * 8), *dk = malloc(nt * 8), *dv = malloc(nt * 8), *db = malloc(H * p.N * 8);
  double *dd = malloc(H * p.frames * 8), *di = malloc(ns * 8);
  for (int rev = 0; rev < 2; rev++) {
    camdelta_ref_scan_packed a = args(&p, rev, 1, NULL, NULL);
    camdelta_ref_scan_grads g = {p.go, p.gf, dq, dk, dv, db, dd, di};
    TU_OK(camdelta_ref_scan_packed_backward(&a, &g));
    /* finite differences on entries of the mixed clip (clip 3: frames 9..11) and of clip 0 */
    struct {
      double *x, *grad;
      size_t i;
    } probe[] = {
        {p.k, dk, (1 * D + 2) * p.N + (size_t)p.fo[9] + 1}, {p.v, dv, (0 * D + 3) * p.N + (size_t)p.fo[10]},
        {p.q, dq, (1 * D + 0) * p.N + (size_t)p.fo[11] + 4}, {p.beta, db, 1 * p.N + (size_t)p.fo[11] + 2},
        {p.decay, dd, 0 * p.frames + 10},                 {p.decay, dd, 1 * p.frames + 9},
        {p.init, di, ((3 * H + 1) * D + 1) * D + 2},      {p.k, dk, (0 * D + 1) * p.N + 3},
    };
    double worst = 0;
    for (size_t t = 0; t < sizeof probe / sizeof probe[0]; t++) {
      double *x = probe[t].x + probe[t].i, x0 = *x, hstep = 1e-6;
      *x = x0 + hstep;
      const double lp = loss(&p, rev, 1);
      *x = x0 - hstep;
      const double lm = loss(&p, rev, 1);
      *x = x0;
      const double fd = (lp - lm) / (2 * hstep), an = probe[t].grad[probe[t].i];
      const double e = fabs(fd - an) / fmax(1e-3, fabs(an));
      worst = fmax(worst, e);
      if (e > 1e-6) printf("probe %zu: fd %.10f analytic %.10f\n", t, fd, an);
    }
    printf("packed backward %s: finite differences worst %.2e\n", rev ? "reverse" : "causal", worst);
    assert_true(worst < 1e-6);
    /* clip 2 (3 frames of 1 token) alone: bit-equal */
    const size_t c = 2, f0 = (size_t)p.co[c], F = 3, n0 = (size_t)p.fo[f0];
    for (size_t h = 0; h < H; h++) {
      double q[D * 3], k[D * 3], v[D * 3], go[D * 3], gq[D * 3], gk[D * 3], gv[D * 3], gb[3], gd[3], gi[D * D];
      for (size_t r = 0; r < D; r++)
        for (size_t n = 0; n < 3; n++) {
          const size_t src = (h * D + r) * p.N + n0 + n;
          q[r * 3 + n] = p.q[src], k[r * 3 + n] = p.k[src], v[r * 3 + n] = p.v[src], go[r * 3 + n] = p.go[src];
        }
      camdelta_ref_scan rs = {1, 1, D, F, 1, rev, q, k, v, p.beta + h * p.N + n0, p.decay + h * p.frames + f0,
                              p.init + (c * H + h) * D * D, NULL, NULL, NULL, NULL};
      camdelta_ref_scan_grads cg = {go, p.gf + (c * H + h) * D * D, gq, gk, gv, gb, gd, gi};
      TU_OK(camdelta_ref_scan_backward(&rs, &cg));
      for (size_t r = 0; r < D; r++)
        for (size_t n = 0; n < 3; n++) {
          const size_t dst = (h * D + r) * p.N + n0 + n;
          assert_true(gq[r * 3 + n] == dq[dst] && gk[r * 3 + n] == dk[dst] && gv[r * 3 + n] == dv[dst]);
        }
      assert_memory_equal(gb, db + h * p.N + n0, 3 * 8);
      assert_memory_equal(gd, dd + h * p.frames + f0, 3 * 8);
      assert_memory_equal(gi, di + (c * H + h) * D * D, D * D * 8);
    }
  }
  free(dq), free(dk), free(dv), free(db), free(dd), free(di);
  pk_free(&p);
}

static void test_bad_offsets(void **state) {
  (void)state;
  pk p;
  pk_make(&p);
  double *out = malloc(H * D * p.N * 8);
  camdelta_ref_scan_packed a = args(&p, 0, 0, out, NULL);
  int64_t fo[16], co[CLIPS + 1];
  memcpy(fo, p.fo, sizeof fo), memcpy(co, p.co, sizeof co);
  a.frame_offsets = fo, a.clip_offsets = co;
  fo[3] = fo[2]; /* not increasing */
  assert_int_equal(camdelta_ref_scan_packed_forward(&a), CAMDELTA_ERROR_SHAPE);
  assert_non_null(strstr(camdelta_last_message(), "not increasing"));
  memcpy(fo, p.fo, sizeof fo);
  co[CLIPS] = (int64_t)p.frames - 1; /* does not end at the frame count */
  assert_int_equal(camdelta_ref_scan_packed_forward(&a), CAMDELTA_ERROR_SHAPE);
  assert_non_null(strstr(camdelta_last_message(), "clip_offsets"));
  free(out);
  pk_free(&p);
}

TU_MAIN(NULL, NULL,
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_backward),
      cmocka_unit_test(test_bad_offsets))
