/* The f64 host references: every gradient against central finite differences of the f64 forward, the scan
 * against a plainly-written chunkwise / flip-and-shift formulation, segment chaining through init/final
 * states in both directions, and the host helpers (RoPE tables, SE(3) inverse). Needs no device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "se3.h"
#include "testutil.h"

#define FD_TOL 1e-6

/* ------------------------------------------------------------------ helpers */
static double *alloc0(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  assert_non_null(p);
  return p;
}

static double *rnd_uniform(size_t n, double lo, double hi) {
  double *p = alloc0(n);
  for (size_t i = 0; i < n; i++) p[i] = tu_uniform(lo, hi);
  return p;
}

static double *rnd_normal(size_t n, double scale) {
  double *p = alloc0(n);
  for (size_t i = 0; i < n; i++) p[i] = scale * tu_normal();
  return p;
}

/* magnitudes in [lo, hi] with random signs: keeps values away from ReLU kinks */
static double *rnd_signed(size_t n, double lo, double hi) {
  double *p = alloc0(n);
  for (size_t i = 0; i < n; i++) p[i] = (tu_uniform(0, 1) < 0.5 ? -1 : 1) * tu_uniform(lo, hi);
  return p;
}

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Worst FD error seen per gradient name, printed at the end. */
#define MAX_WORST 32
static struct {
  char name[48];
  double err;
} g_worst[MAX_WORST];
static int g_nworst;

static void note_worst(const char *name, double err) {
  for (int i = 0; i < g_nworst; i++)
    if (!strcmp(g_worst[i].name, name)) {
      if (err > g_worst[i].err) g_worst[i].err = err;
      return;
    }
  if (g_nworst < MAX_WORST) {
    snprintf(g_worst[g_nworst].name, sizeof g_worst[g_nworst].name, "%s", name);
    g_worst[g_nworst++].err = err;
  }
}

typedef double (*loss_fn)(void *ctx);

/* Central finite differences of loss over every element of x (skipping those where skip[i] != 0) against the
 * analytic gradient g. Returns max|g−fd|/max|fd| over the checked elements. */
static double fd_check(const char *name, double *x, size_t n, const double *g, const unsigned char *skip, loss_fn f,
                       void *ctx) {
  double maxfd = 0, maxdiff = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip && skip[i]) continue;
    const double x0 = x[i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
    x[i] = x0 + h;
    const double lp = f(ctx);
    x[i] = x0 - h;
    const double lm = f(ctx);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    if (fabs(fd) > maxfd) maxfd = fabs(fd);
    if (fabs(fd - g[i]) > maxdiff) maxdiff = fabs(fd - g[i]);
  }
  const double rel = maxdiff / (maxfd > 1e-30 ? maxfd : 1e-30);
  note_worst(name, rel);
  if (!(rel < FD_TOL)) fail_msg("%s: FD relative error %.3e (max|fd| %.3e)", name, rel, maxfd);
  return rel;
}

/* --------------------------------------------------------------- scan: FD */
typedef struct scan_prob {
  size_t B, H, D, F, S, N;
  int reverse;
  double *q, *k, *v, *beta, *decay, *init; /* init may be NULL */
  double *go, *gfs;                        /* each may be NULL */
  double *out, *fin;                       /* scratch */
} scan_prob;

static size_t sp_tok(const scan_prob *s) { return s->B * s->H * s->D * s->N; }
static size_t sp_dd(const scan_prob *s) { return s->B * s->H * s->D * s->D; }

static camdelta_ref_scan sp_args(const scan_prob *s) {
  camdelta_ref_scan a = {s->B, s->H, s->D, s->F, s->S, s->reverse, s->q, s->k, s->v, s->beta, s->decay, s->init,
                         NULL, NULL, NULL, NULL};
  return a;
}

static double scan_loss(void *ctx) {
  scan_prob *s = ctx;
  camdelta_ref_scan a = sp_args(s);
  a.out = s->out;
  a.final_state = s->gfs ? s->fin : NULL;
  TU_OK(camdelta_ref_scan_forward(&a));
  double l = 0;
  if (s->go) l += dot(s->go, s->out, sp_tok(s));
  if (s->gfs) l += dot(s->gfs, s->fin, sp_dd(s));
  return l;
}

static void scan_prob_init(scan_prob *s, size_t B, size_t H, size_t D, size_t F, size_t S, int reverse, int with_init,
                           int with_go, int with_gfs) {
  memset(s, 0, sizeof *s);
  s->B = B, s->H = H, s->D = D, s->F = F, s->S = S, s->N = F * S, s->reverse = reverse;
  const size_t tok = sp_tok(s), dd = sp_dd(s);
  s->q = rnd_normal(tok, 1.0);
  s->k = rnd_normal(tok, 1.0 / sqrt((double)D));
  s->v = rnd_normal(tok, 1.0);
  s->beta = rnd_uniform(B * H * F * S, 0.1, 0.9);
  s->decay = rnd_uniform(B * H * F, 0.5, 1.0);
  s->init = with_init ? rnd_normal(dd, 0.5) : NULL;
  s->go = with_go ? rnd_normal(tok, 1.0) : NULL;
  s->gfs = with_gfs ? rnd_normal(dd, 1.0) : NULL;
  s->out = alloc0(tok);
  s->fin = alloc0(dd);
}

static void scan_prob_free(scan_prob *s) {
  free(s->q), free(s->k), free(s->v), free(s->beta), free(s->decay), free(s->init);
  free(s->go), free(s->gfs), free(s->out), free(s->fin);
}

static void scan_fd_case(size_t B, size_t H, size_t D, size_t F, size_t S, int reverse, int with_init, int with_go,
                         int with_gfs, int zero_decay) {
  scan_prob s;
  scan_prob_init(&s, B, H, D, F, S, reverse, with_init, with_go, with_gfs);
  if (zero_decay)
    for (size_t i = 0; i < B * H * F; i += 2) s.decay[i] = 0.0; /* ddecay must be exact at g = 0 */
  const size_t tok = sp_tok(&s), dd = sp_dd(&s), nb = B * H * F * S, nd = B * H * F;
  double *dq = alloc0(tok), *dk = alloc0(tok), *dv = alloc0(tok), *dbeta = alloc0(nb), *ddecay = alloc0(nd);
  double *dinit = alloc0(dd);
  camdelta_ref_scan a = sp_args(&s);
  camdelta_ref_scan_grads g = {s.go, s.gfs, dq, dk, dv, dbeta, ddecay, dinit};
  TU_OK(camdelta_ref_scan_backward(&a, &g));
  char tag[16];
  snprintf(tag, sizeof tag, "scan %s", reverse ? "rev" : "fwd");
  char name[48];
  double e[6];
  snprintf(name, sizeof name, "%s dq", tag), e[0] = fd_check(name, s.q, tok, dq, NULL, scan_loss, &s);
  snprintf(name, sizeof name, "%s dk", tag), e[1] = fd_check(name, s.k, tok, dk, NULL, scan_loss, &s);
  snprintf(name, sizeof name, "%s dv", tag), e[2] = fd_check(name, s.v, tok, dv, NULL, scan_loss, &s);
  snprintf(name, sizeof name, "%s dbeta", tag), e[3] = fd_check(name, s.beta, nb, dbeta, NULL, scan_loss, &s);
  snprintf(name, sizeof name, "%s ddecay", tag), e[4] = fd_check(name, s.decay, nd, ddecay, NULL, scan_loss, &s);
  e[5] = 0;
  if (with_init) {
    snprintf(name, sizeof name, "%s dinit_state", tag);
    e[5] = fd_check(name, s.init, dd, dinit, NULL, scan_loss, &s);
  }
  printf("  scan %-3s B%zu H%zu D%zu F%zu S%zu init=%d go=%d gfs=%d zdecay=%d: dq %.1e dk %.1e dv %.1e dbeta %.1e "
         "ddecay %.1e dinit %.1e\n",
         reverse ? "rev" : "fwd", B, H, D, F, S, with_init, with_go, with_gfs, zero_decay, e[0], e[1], e[2], e[3], e[4],
         e[5]);
  if (reverse && !with_gfs) {
    /* frame 0's keys/values/beta and decay[0] feed nothing but the reverse final state: exactly zero */
    for (size_t bh = 0; bh < B * H; bh++) {
      assert_true(ddecay[bh * F] == 0.0);
      for (size_t s0 = 0; s0 < S; s0++) {
        assert_true(dbeta[bh * F * S + s0] == 0.0);
        for (size_t d = 0; d < D; d++) {
          assert_true(dk[(bh * D + d) * s.N + s0] == 0.0);
          assert_true(dv[(bh * D + d) * s.N + s0] == 0.0);
        }
      }
    }
  }
  /* NULL outputs are skipped and do not change the others */
  double *dq2 = alloc0(tok);
  camdelta_ref_scan_grads g2 = {s.go, s.gfs, dq2, NULL, NULL, NULL, NULL, NULL};
  TU_OK(camdelta_ref_scan_backward(&a, &g2));
  assert_memory_equal(dq, dq2, tok * sizeof *dq);
  free(dq2);
  free(dq), free(dk), free(dv), free(dbeta), free(ddecay), free(dinit);
  scan_prob_free(&s);
}

static void test_scan_grad_fd(void **state) {
  (void)state;
  tu_seed(101);
  for (int rev = 0; rev < 2; rev++) {
    scan_fd_case(1, 1, 8, 1, 1, rev, 0, 1, 0, 0);
    scan_fd_case(1, 1, 8, 1, 3, rev, 1, 1, 1, 0);
    scan_fd_case(2, 2, 8, 3, 4, rev, 1, 1, 1, 0);
    scan_fd_case(2, 1, 8, 3, 2, rev, 0, 1, 1, 0);
    scan_fd_case(1, 2, 16, 2, 3, rev, 1, 1, 0, 0);
    scan_fd_case(1, 2, 8, 3, 2, rev, 0, 1, 0, 0);
    scan_fd_case(1, 1, 8, 3, 2, rev, 1, 0, 1, 0);  /* grad_out absent */
    scan_fd_case(2, 1, 8, 3, 3, rev, 1, 1, 1, 1);  /* some decays exactly 0 */
  }
}

/* ----------------------------------------------------- scan: naive formulation */
/* Plain chunkwise form, causal only: M_f = A_f·M_{f−1} + U_f, A_f = g_f·(I − K_fᵀβ_fK_f), U_f = K_fᵀβ_fV_f.
 * Arrays per single (b, h): k/v/q (D, Fn·S) with frames given through pointers per frame. */
typedef struct naive_frame {
  const double *q, *k, *v; /* base pointers; token s of the frame is at [d*N + off + s] */
  size_t off;              /* token offset of the frame, or (size_t)-1 for an all-zero (padding) frame */
  const double *beta;      /* S values, or NULL for zero */
  double decay;
} naive_frame;

static void naive_causal(size_t D, size_t S, size_t N, size_t Fn, const naive_frame *fr, const double *init,
                         double *M /* (Fn+1) states */, double *Ppre /* Fn */) {
  const size_t DD = D * D;
  double *A = alloc0(DD), *U = alloc0(DD);
  for (size_t i = 0; i < DD; i++) M[i] = init ? init[i] : 0;
  for (size_t f = 0; f < Fn; f++) {
    for (size_t a = 0; a < D; a++)
      for (size_t c = 0; c < D; c++) {
        double kbk = 0, kbv = 0;
        if (fr[f].off != (size_t)-1)
          for (size_t s = 0; s < S; s++) {
            const double ka = fr[f].k[a * N + fr[f].off + s], b = fr[f].beta[s];
            kbk += ka * b * fr[f].k[c * N + fr[f].off + s];
            kbv += ka * b * fr[f].v[c * N + fr[f].off + s];
          }
        A[a * D + c] = fr[f].decay * ((a == c ? 1.0 : 0.0) - kbk);
        U[a * D + c] = kbv;
      }
    const double *Mp = M + f * DD;
    double *Mn = M + (f + 1) * DD;
    for (size_t i = 0; i < DD; i++) Ppre[f * DD + i] = fr[f].decay * Mp[i];
    for (size_t a = 0; a < D; a++)
      for (size_t c = 0; c < D; c++) {
        double acc = U[a * D + c];
        for (size_t j = 0; j < D; j++) acc += A[a * D + j] * Mp[j * D + c];
        Mn[a * D + c] = acc;
      }
  }
  free(A), free(U);
}

/* out[:, frame qf] = Q_qf·M */
static void naive_out(size_t D, size_t S, size_t N, const double *q, size_t qf, const double *M, double *out) {
  for (size_t s = 0; s < S; s++)
    for (size_t c = 0; c < D; c++) {
      double acc = 0;
      for (size_t a = 0; a < D; a++) acc += q[a * N + qf * S + s] * M[a * D + c];
      out[c * N + qf * S + s] = acc;
    }
}

/* The whole scan, naive: causal directly; reverse as the seed's flip-and-shift (q flipped; k, v, beta flipped and
 * shifted with zero padding; decay flipped and shifted with 1), extended by one frame (original frame 0) so the
 * reverse final state falls out as the state after the last shifted frame. */
static void naive_scan(const scan_prob *s, double *out, double *fin, double *spre, double *spost) {
  const size_t D = s->D, S = s->S, N = s->N, F = s->F, DD = D * D;
  naive_frame *fr = calloc(F + 1, sizeof *fr);
  double *M = alloc0((F + 2) * DD), *P = alloc0((F + 1) * DD);
  assert_non_null(fr);
  for (size_t bh = 0; bh < s->B * s->H; bh++) {
    const size_t tok = bh * D * N;
    const double *q = s->q + tok, *k = s->k + tok, *v = s->v + tok, *beta = s->beta + bh * F * S;
    const double *decay = s->decay + bh * F, *init = s->init ? s->init + bh * DD : NULL;
    if (!s->reverse) {
      for (size_t f = 0; f < F; f++) fr[f] = (naive_frame){q, k, v, f * S, beta + f * S, decay[f]};
      naive_causal(D, S, N, F, fr, init, M, P);
      for (size_t f = 0; f < F; f++) {
        naive_out(D, S, N, q, f, M + (f + 1) * DD, out + tok);
        memcpy(spre + (bh * F + f) * DD, P + f * DD, DD * sizeof(double));
        memcpy(spost + (bh * F + f) * DD, M + (f + 1) * DD, DD * sizeof(double));
      }
      memcpy(fin + bh * DD, M + F * DD, DD * sizeof(double));
    } else {
      /* shifted frame j: j = 0 is padding (zero keys, decay 1); j >= 1 is original frame F − j */
      fr[0] = (naive_frame){q, k, v, (size_t)-1, NULL, 1.0};
      for (size_t j = 1; j <= F; j++) fr[j] = (naive_frame){q, k, v, (F - j) * S, beta + (F - j) * S, decay[F - j]};
      naive_causal(D, S, N, F + 1, fr, init, M, P);
      for (size_t j = 0; j < F; j++) {
        const size_t qf = F - 1 - j; /* flipped q */
        naive_out(D, S, N, q, qf, M + (j + 1) * DD, out + tok);
        memcpy(spre + (bh * F + qf) * DD, P + j * DD, DD * sizeof(double));
        memcpy(spost + (bh * F + qf) * DD, M + (j + 1) * DD, DD * sizeof(double));
      }
      memcpy(fin + bh * DD, M + (F + 1) * DD, DD * sizeof(double));
    }
  }
  free(fr), free(M), free(P);
}

static void test_scan_vs_naive(void **state) {
  (void)state;
  tu_seed(202);
  static const size_t shapes[][5] = {{1, 1, 8, 1, 1}, {2, 2, 8, 3, 4}, {1, 3, 16, 4, 5}, {2, 1, 24, 2, 7}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int rev = 0; rev < 2; rev++)
      for (int wi = 0; wi < 2; wi++) {
        scan_prob s;
        scan_prob_init(&s, shapes[c][0], shapes[c][1], shapes[c][2], shapes[c][3], shapes[c][4], rev, wi, 0, 0);
        const size_t tok = sp_tok(&s), dd = sp_dd(&s), ss = dd * s.F;
        double *out = alloc0(tok), *fin = alloc0(dd), *spre = alloc0(ss), *spost = alloc0(ss);
        double *nout = alloc0(tok), *nfin = alloc0(dd), *npre = alloc0(ss), *npost = alloc0(ss);
        camdelta_ref_scan a = sp_args(&s);
        a.out = out, a.final_state = fin, a.state_pre = spre, a.state_post = spost;
        TU_OK(camdelta_ref_scan_forward(&a));
        naive_scan(&s, nout, nfin, npre, npost);
        const double eo = tu_rel_err64(out, nout, tok), ef = tu_rel_err64(fin, nfin, dd);
        const double ep = tu_rel_err64(spre, npre, ss), eq = tu_rel_err64(spost, npost, ss);
        printf("  naive %s init=%d shape %zu: out %.1e final %.1e pre %.1e post %.1e\n", rev ? "rev" : "fwd", wi, c,
               eo, ef, ep, eq);
        assert_true(eo < 1e-12 && ef < 1e-12 && ep < 1e-12 && eq < 1e-12);
        if (rev) {
          /* output frame F−1 reads the init state (zero without one) with no update */
          for (size_t bh = 0; bh < s.B * s.H; bh++)
            for (size_t i = 0; i < s.D * s.D; i++) {
              const double want = s.init ? s.init[bh * s.D * s.D + i] : 0.0;
              assert_true(spre[(bh * s.F + s.F - 1) * s.D * s.D + i] == want);
              assert_true(spost[(bh * s.F + s.F - 1) * s.D * s.D + i] == want);
            }
        }
        /* outputs may each be NULL; out alone gives the same values */
        double *out2 = alloc0(tok);
        camdelta_ref_scan a2 = sp_args(&s);
        a2.out = out2;
        TU_OK(camdelta_ref_scan_forward(&a2));
        assert_memory_equal(out, out2, tok * sizeof *out);
        free(out2);
        free(out), free(fin), free(spre), free(spost), free(nout), free(nfin), free(npre), free(npost);
        scan_prob_free(&s);
      }
}

/* ---------------------------------------------------- scan: segment chaining */
/* Copy frames [f0, f1) of a (B·H, D, F·S) tensor / (B·H, F·S) / (B·H, F) into a segment. */
static double *slice_tok(const double *x, size_t BH, size_t D, size_t F, size_t S, size_t f0, size_t f1) {
  const size_t n = (f1 - f0) * S;
  double *y = alloc0(BH * D * n);
  for (size_t r = 0; r < BH * D; r++) memcpy(y + r * n, x + r * F * S + f0 * S, n * sizeof *y);
  return y;
}

static double *slice_frames(const double *x, size_t BH, size_t per_frame, size_t F, size_t f0, size_t f1) {
  const size_t n = (f1 - f0) * per_frame;
  double *y = alloc0(BH * n);
  for (size_t r = 0; r < BH; r++) memcpy(y + r * n, x + (r * F + f0) * per_frame, n * sizeof *y);
  return y;
}

static void put_tok(double *x, const double *y, size_t BH, size_t D, size_t F, size_t S, size_t f0, size_t f1) {
  const size_t n = (f1 - f0) * S;
  for (size_t r = 0; r < BH * D; r++) memcpy(x + r * F * S + f0 * S, y + r * n, n * sizeof *y);
}

static void put_frames(double *x, const double *y, size_t BH, size_t per_frame, size_t F, size_t f0, size_t f1) {
  const size_t n = (f1 - f0) * per_frame;
  for (size_t r = 0; r < BH; r++) memcpy(x + (r * F + f0) * per_frame, y + r * n, n * sizeof *y);
}

static void chain_case(int reverse, int with_init, int with_gfs, size_t nseg, const size_t *cuts /* nseg+1 */) {
  scan_prob s;
  scan_prob_init(&s, 2, 2, 8, cuts[nseg], 3, reverse, with_init, 1, with_gfs);
  const size_t B = s.B, H = s.H, BH = B * H, D = s.D, F = s.F, S = s.S, tok = sp_tok(&s), dd = sp_dd(&s);
  /* one run */
  double *out = alloc0(tok), *fin = alloc0(dd);
  double *dq = alloc0(tok), *dk = alloc0(tok), *dv = alloc0(tok), *dbeta = alloc0(BH * F * S), *ddecay = alloc0(BH * F);
  double *dinit = alloc0(dd);
  camdelta_ref_scan a = sp_args(&s);
  a.out = out, a.final_state = fin;
  TU_OK(camdelta_ref_scan_forward(&a));
  camdelta_ref_scan_grads g = {s.go, s.gfs, dq, dk, dv, dbeta, ddecay, dinit};
  TU_OK(camdelta_ref_scan_backward(&a, &g));
  /* segments, in the order the state flows: causal first to last, reverse last to first */
  double *cout = alloc0(tok), *cdq = alloc0(tok), *cdk = alloc0(tok), *cdv = alloc0(tok);
  double *cdbeta = alloc0(BH * F * S), *cddecay = alloc0(BH * F);
  double *st = alloc0(dd), *st_next = alloc0(dd);
  double **seg_init = calloc(nseg, sizeof *seg_init);
  assert_non_null(seg_init);
  int have_state = with_init;
  if (with_init) memcpy(st, s.init, dd * sizeof *st);
  for (size_t i = 0; i < nseg; i++) {
    const size_t sg = reverse ? nseg - 1 - i : i, f0 = cuts[sg], f1 = cuts[sg + 1], Fs = f1 - f0;
    double *q = slice_tok(s.q, BH, D, F, S, f0, f1), *k = slice_tok(s.k, BH, D, F, S, f0, f1);
    double *v = slice_tok(s.v, BH, D, F, S, f0, f1), *beta = slice_frames(s.beta, BH, S, F, f0, f1);
    double *decay = slice_frames(s.decay, BH, 1, F, f0, f1), *o = alloc0(BH * D * Fs * S);
    seg_init[sg] = have_state ? alloc0(dd) : NULL;
    if (have_state) memcpy(seg_init[sg], st, dd * sizeof *st);
    camdelta_ref_scan sa = {B, H, D, Fs, S, reverse, q, k, v, beta, decay, seg_init[sg], o, st_next, NULL, NULL};
    TU_OK(camdelta_ref_scan_forward(&sa));
    memcpy(st, st_next, dd * sizeof *st);
    have_state = 1;
    put_tok(cout, o, BH, D, F, S, f0, f1);
    free(q), free(k), free(v), free(beta), free(decay), free(o);
  }
  const double eo = tu_rel_err64(cout, out, tok), ef = tu_rel_err64(st, fin, dd);
  /* backward: the gradient of the state flows the other way */
  double *gst = alloc0(dd);
  int have_g = with_gfs;
  if (with_gfs) memcpy(gst, s.gfs, dd * sizeof *gst);
  double *cdinit = alloc0(dd);
  for (size_t i = 0; i < nseg; i++) {
    const size_t sg = reverse ? i : nseg - 1 - i, f0 = cuts[sg], f1 = cuts[sg + 1], Fs = f1 - f0;
    double *q = slice_tok(s.q, BH, D, F, S, f0, f1), *k = slice_tok(s.k, BH, D, F, S, f0, f1);
    double *v = slice_tok(s.v, BH, D, F, S, f0, f1), *beta = slice_frames(s.beta, BH, S, F, f0, f1);
    double *decay = slice_frames(s.decay, BH, 1, F, f0, f1), *go = slice_tok(s.go, BH, D, F, S, f0, f1);
    const size_t ts = BH * D * Fs * S;
    double *sdq = alloc0(ts), *sdk = alloc0(ts), *sdv = alloc0(ts), *sdb = alloc0(BH * Fs * S), *sdd = alloc0(BH * Fs);
    camdelta_ref_scan sa = {B, H, D, Fs, S, reverse, q, k, v, beta, decay, seg_init[sg], NULL, NULL, NULL, NULL};
    camdelta_ref_scan_grads sgr = {go, have_g ? gst : NULL, sdq, sdk, sdv, sdb, sdd, cdinit};
    TU_OK(camdelta_ref_scan_backward(&sa, &sgr));
    memcpy(gst, cdinit, dd * sizeof *gst);
    have_g = 1;
    put_tok(cdq, sdq, BH, D, F, S, f0, f1), put_tok(cdk, sdk, BH, D, F, S, f0, f1);
    put_tok(cdv, sdv, BH, D, F, S, f0, f1);
    put_frames(cdbeta, sdb, BH, S, F, f0, f1), put_frames(cddecay, sdd, BH, 1, F, f0, f1);
    free(q), free(k), free(v), free(beta), free(decay), free(go), free(sdq), free(sdk), free(sdv), free(sdb), free(sdd);
  }
  const double e[6] = {tu_rel_err64(cdq, dq, tok),          tu_rel_err64(cdk, dk, tok),
                       tu_rel_err64(cdv, dv, tok),          tu_rel_err64(cdbeta, dbeta, BH * F * S),
                       tu_rel_err64(cddecay, ddecay, BH * F), tu_rel_err64(cdinit, dinit, dd)};
  printf("  chain %s init=%d gfs=%d %zu segs: out %.1e final %.1e | dq %.1e dk %.1e dv %.1e dbeta %.1e ddecay %.1e "
         "dinit %.1e\n",
         reverse ? "rev" : "fwd", with_init, with_gfs, nseg, eo, ef, e[0], e[1], e[2], e[3], e[4], e[5]);
  assert_true(eo < 1e-12 && ef < 1e-12);
  for (int i = 0; i < 6; i++) assert_true(e[i] < 1e-12);
  for (size_t i = 0; i < nseg; i++) free(seg_init[i]);
  free(seg_init), free(gst), free(cdinit), free(st), free(st_next);
  free(cout), free(cdq), free(cdk), free(cdv), free(cdbeta), free(cddecay);
  free(out), free(fin), free(dq), free(dk), free(dv), free(dbeta), free(ddecay), free(dinit);
  scan_prob_free(&s);
}

static void test_scan_chaining(void **state) {
  (void)state;
  tu_seed(303);
  static const size_t two[] = {0, 2, 5}, three[] = {0, 1, 3, 5}, ones[] = {0, 1, 2, 3};
  for (int rev = 0; rev < 2; rev++)
    for (int wi = 0; wi < 2; wi++)
      for (int wg = 0; wg < 2; wg++) {
        chain_case(rev, wi, wg, 2, two);
        chain_case(rev, wi, wg, 3, three);
        chain_case(rev, wi, wg, 3, ones);
      }
}

/* --------------------------------------------------------------- prep: FD */
typedef struct prep_prob {
  size_t B, N, H, D;
  double k_scale, eps;
  double *q_raw, *k_raw, *v_raw, *qw, *kw, *pq, *pkv, *cs, *sn;
  double *gq, *gk, *gv, *gi; /* each may be NULL */
  double *q, *k, *v, *infl;  /* scratch */
} prep_prob;

static camdelta_ref_prep pp_args(const prep_prob *p) {
  camdelta_ref_prep a = {p->B,  p->N,  p->H,  p->D,  p->k_scale, p->eps, p->q_raw, p->k_raw, p->v_raw, p->qw, p->kw,
                         p->pq, p->pkv, p->cs, p->sn, NULL,       NULL,   NULL,     NULL};
  return a;
}

static double prep_loss(void *ctx) {
  prep_prob *p = ctx;
  camdelta_ref_prep a = pp_args(p);
  a.q = p->q, a.k = p->k, a.v = p->v, a.inflation_sq = p->infl;
  TU_OK(camdelta_ref_prep_forward(&a));
  const size_t tok = p->B * p->N * p->H * p->D, bhn = p->B * p->H * p->N;
  double l = 0;
  if (p->gq) l += dot(p->gq, p->q, tok);
  if (p->gk) l += dot(p->gk, p->k, tok);
  if (p->gv) l += dot(p->gv, p->v, tok);
  if (p->gi) l += dot(p->gi, p->infl, bhn);
  return l;
}

/* grads: bit 0 grad_q, 1 grad_k, 2 grad_v, 3 grad_inflation_sq. clamp: token 0 has tiny k_raw (0 < pre, post <
 * 1e-12: both clamps active with nonzero k, so only the clamp indicators keep the inflation gradient at zero),
 * token 1 has all-zero k_raw (both norms clamped, every ReLU at its kink), token 2 has zero proj_kv and rope rows
 * (k_out = 0: only the post norm clamped). */
static void prep_fd_case(size_t B, size_t N, size_t H, size_t D, unsigned grads, int clamp) {
  prep_prob p = {0};
  p.B = B, p.N = N, p.H = H, p.D = D, p.eps = 1e-6;
  p.k_scale = clamp ? 0.1 : 1.0 / sqrt((double)D * 2);
  const size_t C = H * D, Dh = D / 2, tok = B * N * C, bhn = B * H * N;
  p.q_raw = rnd_signed(tok, 0.2, 1.5), p.k_raw = rnd_signed(tok, 0.2, 1.5), p.v_raw = rnd_normal(tok, 1.0);
  p.qw = rnd_signed(C, 0.5, 1.5), p.kw = rnd_signed(C, 0.5, 1.5);
  p.pq = rnd_normal(B * N * 16, 0.7), p.pkv = rnd_normal(B * N * 16, 0.7);
  p.cs = rnd_uniform(N * Dh, -1, 1), p.sn = rnd_uniform(N * Dh, -1, 1);
  p.gq = grads & 1 ? rnd_normal(tok, 1.0) : NULL;
  p.gk = grads & 2 ? rnd_normal(tok, 1.0) : NULL;
  p.gv = grads & 4 ? rnd_normal(tok, 1.0) : NULL;
  p.gi = grads & 8 ? rnd_normal(bhn, 1.0) : NULL;
  p.q = alloc0(tok), p.k = alloc0(tok), p.v = alloc0(tok), p.infl = alloc0(bhn);
  unsigned char *skip_k = NULL;
  if (clamp) {
    assert_true(N >= 3);
    skip_k = calloc(tok, 1);
    assert_non_null(skip_k);
    for (size_t b = 0; b < B; b++) {
      for (size_t c = 0; c < C; c++) p.k_raw[b * N * C + c] *= 1e-10;
      memset(skip_k + b * N * C, 1, C); /* a central difference of step 1e-6 would leave the clamped regime */
      memset(p.k_raw + (b * N + 1) * C, 0, C * sizeof(double));
      memset(skip_k + (b * N + 1) * C, 1, C); /* k_raw = 0 sits on every ReLU kink: FD is one-sided there */
      memset(p.pkv + (b * N + 2) * 16, 0, 16 * sizeof(double));
    }
    memset(p.cs + 2 * Dh, 0, Dh * sizeof(double));
    memset(p.sn + 2 * Dh, 0, Dh * sizeof(double));
  }
  double *dq_raw = alloc0(tok), *dk_raw = alloc0(tok), *dv_raw = alloc0(tok), *dqw = alloc0(C), *dkw = alloc0(C);
  double *dpq = alloc0(B * N * 16), *dpkv = alloc0(B * N * 16), *dcs = alloc0(N * Dh), *dsn = alloc0(N * Dh);
  camdelta_ref_prep a = pp_args(&p);
  camdelta_ref_prep_grads g = {p.gq, p.gk, p.gv, p.gi, dq_raw, dk_raw, dv_raw, dqw, dkw, dpq, dpkv, dcs, dsn};
  TU_OK(camdelta_ref_prep_backward(&a, &g));
  double e[9];
  e[0] = fd_check("prep dq_raw", p.q_raw, tok, dq_raw, NULL, prep_loss, &p);
  e[1] = fd_check("prep dk_raw", p.k_raw, tok, dk_raw, skip_k, prep_loss, &p);
  e[2] = fd_check("prep dv_raw", p.v_raw, tok, dv_raw, NULL, prep_loss, &p);
  e[3] = fd_check("prep dq_norm_weight", p.qw, C, dqw, NULL, prep_loss, &p);
  e[4] = fd_check("prep dk_norm_weight", p.kw, C, dkw, NULL, prep_loss, &p);
  e[5] = fd_check("prep dproj_q", p.pq, B * N * 16, dpq, NULL, prep_loss, &p);
  e[6] = fd_check("prep dproj_kv", p.pkv, B * N * 16, dpkv, NULL, prep_loss, &p);
  e[7] = fd_check("prep drope_cos", p.cs, N * Dh, dcs, NULL, prep_loss, &p);
  e[8] = fd_check("prep drope_sin", p.sn, N * Dh, dsn, NULL, prep_loss, &p);
  printf("  prep B%zu N%zu H%zu D%zu grads=%x clamp=%d: dq_raw %.1e dk_raw %.1e dv_raw %.1e dqw %.1e dkw %.1e "
         "dproj_q %.1e dproj_kv %.1e dcos %.1e dsin %.1e\n",
         B, N, H, D, grads, clamp, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8]);
  if (clamp) {
    prep_loss(&p);
    for (size_t b = 0; b < B; b++)
      for (size_t h = 0; h < H; h++) {
        /* tiny and all-zero k tokens: pre and post clamped, inflation 1 */
        assert_true(p.infl[(b * H + h) * N + 0] == 1.0);
        assert_true(p.infl[(b * H + h) * N + 1] == 1.0);
        /* zero projection: post clamped (k_out = 0), pre not: inflation = 1e-12 / pre */
        assert_true(p.infl[(b * H + h) * N + 2] > 0 && p.infl[(b * H + h) * N + 2] < 1e-9);
      }
    for (size_t b = 0; b < B; b++)
      for (size_t c = 0; c < C; c++) assert_true(dk_raw[(b * N + 1) * C + c] == 0.0);
    /* with only grad_inflation_sq, active clamps pass nothing: the tiny token's k_raw, proj_kv and rope rows and
     * the zero-projection token's proj_kv and rope rows get exactly zero */
    if (grads == 8) {
      for (size_t b = 0; b < B; b++) {
        for (size_t c = 0; c < C; c++) assert_true(dk_raw[b * N * C + c] == 0.0);
        for (size_t i = 0; i < 16; i++) assert_true(dpkv[(b * N + 0) * 16 + i] == 0.0);
        for (size_t i = 0; i < 16; i++) assert_true(dpkv[(b * N + 2) * 16 + i] == 0.0);
      }
      for (size_t r = 0; r < Dh; r++) assert_true(dcs[0 * Dh + r] == 0.0 && dsn[0 * Dh + r] == 0.0);
      for (size_t r = 0; r < Dh; r++) assert_true(dcs[2 * Dh + r] == 0.0 && dsn[2 * Dh + r] == 0.0);
    }
  }
  /* NULL outputs are skipped; the others are unchanged */
  double *dk2 = alloc0(tok), *dkw2 = alloc0(C);
  camdelta_ref_prep_grads g2 = {p.gq, p.gk, p.gv, p.gi, NULL, dk2, NULL, NULL, dkw2, NULL, NULL, NULL, NULL};
  TU_OK(camdelta_ref_prep_backward(&a, &g2));
  assert_memory_equal(dk2, dk_raw, tok * sizeof *dk2);
  assert_memory_equal(dkw2, dkw, C * sizeof *dkw2);
  free(dk2), free(dkw2), free(skip_k);
  free(dq_raw), free(dk_raw), free(dv_raw), free(dqw), free(dkw), free(dpq), free(dpkv), free(dcs), free(dsn);
  free(p.q_raw), free(p.k_raw), free(p.v_raw), free(p.qw), free(p.kw), free(p.pq), free(p.pkv), free(p.cs), free(p.sn);
  free(p.gq), free(p.gk), free(p.gv), free(p.gi), free(p.q), free(p.k), free(p.v), free(p.infl);
}

static void test_prep_grad_fd(void **state) {
  (void)state;
  tu_seed(404);
  prep_fd_case(1, 1, 1, 8, 15, 0);
  prep_fd_case(2, 3, 2, 8, 15, 0);
  prep_fd_case(1, 4, 2, 16, 15, 0);
  prep_fd_case(1, 3, 3, 8, 8, 0); /* inflation only */
  prep_fd_case(2, 2, 1, 16, 5, 0); /* q and v only */
  prep_fd_case(1, 2, 2, 8, 2, 0);  /* k only */
  prep_fd_case(2, 4, 2, 8, 15, 1); /* clamps */
  prep_fd_case(1, 4, 2, 8, 8, 1);
}

/* --------------------------------------------------------------- bad input */
static void test_reference_bad_input(void **state) {
  (void)state;
  double x[64] = {0}, o[64];
  camdelta_ref_scan s = {1, 1, 8, 1, 1, 0, x, x, x, x, x, NULL, o, NULL, NULL, NULL};
  s.q = NULL;
  assert_int_equal(camdelta_ref_scan_forward(&s), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_true(strlen(camdelta_last_message()) > 0);
  assert_int_equal(camdelta_ref_scan_forward(NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  s.q = x, s.F = 0;
  assert_int_equal(camdelta_ref_scan_forward(&s), CAMDELTA_ERROR_SHAPE);
  s.F = 1;
  TU_OK(camdelta_ref_scan_forward(&s));
  assert_string_equal(camdelta_last_message(), "");
  assert_int_equal(camdelta_ref_scan_backward(&s, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  camdelta_ref_prep p = {1, 1, 1, 8, 1, 1e-6, x, x, x, x, x, x, x, x, x, NULL, NULL, NULL, NULL};
  camdelta_ref_prep_grads g = {0};
  TU_OK(camdelta_ref_prep_backward(&p, &g));
  assert_int_equal(camdelta_ref_prep_backward(&p, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  p.D = 12;
  assert_int_equal(camdelta_ref_prep_backward(&p, &g), CAMDELTA_ERROR_UNSUPPORTED);
  p.D = 8, p.rope_sin = NULL;
  assert_int_equal(camdelta_ref_prep_backward(&p, &g), CAMDELTA_ERROR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------- host helpers */
static void test_rope_tables(void **state) {
  (void)state;
  /* N = 2, Dh = 4: two complex frequencies per token */
  const float fr[] = {0.5f, 0.25f, -1.0f, 2.0f, 0.0f, -3.0f, 4.0f, 0.125f};
  const float want_cos[] = {0.5f, 0.5f, -1.0f, -1.0f, 0.0f, 0.0f, 4.0f, 4.0f};
  const float want_sin[] = {-0.25f, 0.25f, -2.0f, 2.0f, 3.0f, -3.0f, -0.125f, 0.125f};
  float cs[8], sn[8];
  TU_OK(camdelta_rope_tables(2, 4, fr, cs, sn));
  assert_memory_equal(cs, want_cos, sizeof cs);
  assert_memory_equal(sn, want_sin, sizeof sn);
  assert_string_equal(camdelta_last_message(), "");
  /* applied as y[d] = x[d]·cos[d] + x[d^1]·sin[d], the tables multiply each pair by re + i·im */
  const float x[4] = {0.3f, -0.7f, 1.1f, 0.2f};
  for (size_t i = 0; i < 2; i++) {
    const double re = fr[2 * i], im = fr[2 * i + 1], xr = x[2 * i], xi = x[2 * i + 1];
    const double y0 = x[2 * i] * (double)cs[2 * i] + x[2 * i + 1] * (double)sn[2 * i];
    const double y1 = x[2 * i + 1] * (double)cs[2 * i + 1] + x[2 * i] * (double)sn[2 * i + 1];
    assert_true(fabs(y0 - (xr * re - xi * im)) < 1e-12 && fabs(y1 - (xr * im + xi * re)) < 1e-12);
  }
  /* bad input */
  assert_int_equal(camdelta_rope_tables(2, 3, fr, cs, sn), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "Dh"));
  assert_int_equal(camdelta_rope_tables(2, 0, fr, cs, sn), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_rope_tables(2, 4, NULL, cs, sn), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "freqs_re_im"));
  assert_int_equal(camdelta_rope_tables(2, 4, fr, NULL, sn), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_rope_tables(2, 4, fr, cs, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_rope_tables(SIZE_MAX / 2, 4, fr, cs, sn), CAMDELTA_ERROR_OVERFLOW);
  TU_OK(camdelta_rope_tables(0, 4, fr, cs, sn));
}

static void test_invert_se3(void **state) {
  (void)state;
  /* hand-computed: 90° about z, t = (1, 2, 3) -> [Rᵀ | −Rᵀt] with −Rᵀt = (−2, 1, −3) */
  const float m[16] = {0, -1, 0, 1, 1, 0, 0, 2, 0, 0, 1, 3, 0, 0, 0, 1};
  const float want[16] = {0, 1, 0, -2, -1, 0, 0, 1, 0, 0, 1, -3, 0, 0, 0, 1};
  float inv[16];
  TU_OK(camdelta_invert_se3(1, m, inv));
  for (int i = 0; i < 16; i++) assert_true(inv[i] == want[i]);
  /* random rotations (unit quaternions) and translations: P·P⁻¹ = P⁻¹·P = I; in place gives the same */
  tu_seed(505);
  enum { COUNT = 32 };
  float P[COUNT * 16], Pi[COUNT * 16], Pp[COUNT * 16];
  for (int c = 0; c < COUNT; c++) {
    double qv[4], t[3];
    for (int i = 0; i < 4; i++) qv[i] = tu_normal();
    for (int i = 0; i < 3; i++) t[i] = tu_uniform(-5, 5);
    tu_se3(qv, t, P + c * 16);
  }
  TU_OK(camdelta_invert_se3(COUNT, P, Pi));
  memcpy(Pp, P, sizeof Pp);
  TU_OK(camdelta_invert_se3(COUNT, Pp, Pp));
  assert_memory_equal(Pp, Pi, sizeof Pp);
  double worst = 0;
  for (int c = 0; c < COUNT; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        double ab = 0, ba = 0;
        for (int l = 0; l < 4; l++) {
          ab += (double)P[c * 16 + i * 4 + l] * Pi[c * 16 + l * 4 + j];
          ba += (double)Pi[c * 16 + i * 4 + l] * P[c * 16 + l * 4 + j];
        }
        const double id = i == j ? 1.0 : 0.0;
        worst = fmax(worst, fmax(fabs(ab - id), fabs(ba - id)));
      }
  printf("  invert_se3: max |P·P⁻¹ − I| = %.2e\n", worst);
  assert_true(worst < 1e-5);
  /* bad input */
  assert_int_equal(camdelta_invert_se3(1, NULL, inv), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "in"));
  assert_int_equal(camdelta_invert_se3(1, m, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "out"));
  assert_int_equal(camdelta_invert_se3(SIZE_MAX / 4, m, inv), CAMDELTA_ERROR_OVERFLOW);
  TU_OK(camdelta_invert_se3(0, m, inv));
}

static int print_worst(void **state) {
  (void)state;
  for (int i = 0; i < g_nworst; i++) {
    char what[80];
    snprintf(what, sizeof what, "fd rel err %.47s", g_worst[i].name);
    tu_report(what, g_worst[i].err);
  }
  return 0;
}

TU_MAIN(NULL, print_worst,
      cmocka_unit_test(test_scan_vs_naive),   cmocka_unit_test(test_scan_chaining),
      cmocka_unit_test(test_scan_grad_fd),    cmocka_unit_test(test_prep_grad_fd),
      cmocka_unit_test(test_reference_bad_input), cmocka_unit_test(test_rope_tables),
      cmocka_unit_test(test_invert_se3))
