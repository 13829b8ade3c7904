/* Packed clips on the device (camdelta_packed.h, docs/math.md §9): clips of (F, S) = (1, 7), (5, 64), (21, 12),
 * (3, 1) and one clip whose frames have 4, 2 and 5 tokens, packed along one token axis; with and without per-clip
 * init states, both directions, both forward algorithms, forward and backward (with and without the forward's
 * saved states). Checked against the f64 packed reference (the bounds of docs/math.md §5) and against each clip run
 * alone through the fixed-shape calls (1e-6 relative; bit-equal counts printed). Bad offsets and tensors that do not
 * match them are rejected with a clear message and nothing written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "testutil.h"

enum { H = 2, D = 16, CLIPS = 5, MAXF = 40 };
static const size_t frames_of[CLIPS] = {1, 5, 21, 3, 3};
static const size_t tok_fixed[CLIPS] = {7, 64, 12, 1, 0}; /* 0: the frames below */
static const size_t tok_mixed[3] = {4, 2, 5};

typedef struct pk {
  size_t F, N, nt, ns;
  int64_t fo[MAXF + 1], co[CLIPS + 1];
  float *q, *k, *v, *beta, *decay, *init, *go, *gf;
  cl_mem m[8]; /* q k v beta decay init go gf */
} pk;

static void pk_make(pk *p) {
  memset(p, 0, sizeof *p);
  size_t f = 0, n = 0;
  for (size_t c = 0; c < CLIPS; c++) {
    p->co[c] = (int64_t)f;
    for (size_t i = 0; i < frames_of[c]; i++) p->fo[f++] = (int64_t)n, n += tok_fixed[c] ? tok_fixed[c] : tok_mixed[i];
  }
  p->co[CLIPS] = (int64_t)f, p->fo[f] = (int64_t)n, p->F = f, p->N = n;
  p->nt = H * D * n, p->ns = CLIPS * H * D * D;
  tu_seed(77);
  p->q = malloc(p->nt * 4), p->k = malloc(p->nt * 4), p->v = malloc(p->nt * 4), p->go = malloc(p->nt * 4);
  p->beta = malloc(H * n * 4), p->decay = malloc(H * f * 4), p->init = malloc(p->ns * 4), p->gf = malloc(p->ns * 4);
  tu_fill_uniform(p->q, p->nt, -1, 1);
  tu_fill_normal(p->k, p->nt, 0.08);
  tu_fill_normal(p->v, p->nt, 1);
  tu_fill_normal(p->go, p->nt, 1);
  tu_fill_uniform(p->beta, H * n, 0, 1);
  tu_fill_uniform(p->decay, H * f, 0.6, 1);
  tu_fill_normal(p->init, p->ns, 0.3);
  tu_fill_normal(p->gf, p->ns, 0.3);
  const float *h[8] = {p->q, p->k, p->v, p->beta, p->decay, p->init, p->go, p->gf};
  const size_t cnt[8] = {p->nt, p->nt, p->nt, H * n, H * f, p->ns, p->nt, p->ns};
  for (int i = 0; i < 8; i++) p->m[i] = tu_upload(h[i], cnt[i] * 4);
}

static void pk_free(pk *p) {
  free(p->q), free(p->k), free(p->v), free(p->beta), free(p->decay), free(p->init), free(p->go), free(p->gf);
  for (int i = 0; i < 8; i++) clReleaseMemObject(p->m[i]);
}

static camdelta_packed_clips clips_of(const pk *p) {
  camdelta_packed_clips c = {p->fo, p->co, CLIPS, p->N, NULL};
  return c;
}

static float *fetch(cl_mem m, size_t n) {
  float *x = malloc(n * 4 + 4);
  tu_download(m, 0, n * 4, x);
  return x;
}

/* Packed results: out, final (forward); dq dk dv dbeta ddecay dinit (backward). */
enum { R_OUT, R_FIN, R_DQ, R_DK, R_DV, R_DB, R_DD, R_DI, R_COUNT };
static const char *const R_NAME[R_COUNT] = {"out", "final", "dq", "dk", "dv", "dbeta", "ddecay", "dinit"};

static size_t r_count(const pk *p, int r) {
  return r == R_FIN || r == R_DI ? p->ns : r == R_DB ? H * p->N : r == R_DD ? H * p->F : p->nt;
}

static void run_packed(const pk *p, int rev, int init, camdelta_scan_algorithm alg, int use_saved, float *res[R_COUNT]) {
  camdelta_context *ctx = tu_context();
  cl_mem o[R_COUNT];
  for (int r = 0; r < R_COUNT; r++) o[r] = tu_buffer(r_count(p, r) * 4);
  const camdelta_packed_clips pc = clips_of(p);
  camdelta_scan_saved *saved = NULL;
  if (use_saved) TU_OK(camdelta_scan_saved_create(ctx, &saved));
  camdelta_scan_args a = {0};
  a.B = 1, a.H = H, a.D = D, a.F = p->F, a.S = 0, a.reverse = rev, a.algorithm = alg;
  a.q.mem = p->m[0], a.k.mem = p->m[1], a.v.mem = p->m[2], a.beta.mem = p->m[3], a.decay.mem = p->m[4];
  if (init) a.init_state.mem = p->m[5];
  a.out.mem = o[R_OUT], a.final_state.mem = o[R_FIN];
  TU_OK(camdelta_scan_forward_packed(ctx, &a, &pc, saved));
  camdelta_scan_backward_args b = {0};
  b.B = 1, b.H = H, b.D = D, b.F = p->F, b.S = 0, b.reverse = rev;
  b.q.mem = p->m[0], b.k.mem = p->m[1], b.v.mem = p->m[2], b.beta.mem = p->m[3], b.decay.mem = p->m[4];
  if (init) b.init_state.mem = p->m[5];
  b.grad_out.mem = p->m[6], b.grad_final_state.mem = p->m[7];
  b.dq.mem = o[R_DQ], b.dk.mem = o[R_DK], b.dv.mem = o[R_DV], b.dbeta.mem = o[R_DB], b.ddecay.mem = o[R_DD];
  b.dinit_state.mem = o[R_DI];
  TU_OK(camdelta_scan_backward_packed(ctx, &b, &pc, saved));
  camdelta_scan_saved_destroy(saved);
  for (int r = 0; r < R_COUNT; r++) res[r] = fetch(o[r], r_count(p, r)), clReleaseMemObject(o[r]);
}

/* The f64 packed reference. */
static void reference(const pk *p, int rev, int init, double *ref[R_COUNT]) {
  double *q = tu_to_f64(p->q, p->nt), *k = tu_to_f64(p->k, p->nt), *v = tu_to_f64(p->v, p->nt);
  double *beta = tu_to_f64(p->beta, H * p->N), *decay = tu_to_f64(p->decay, H * p->F);
  double *in = tu_to_f64(p->init, p->ns), *go = tu_to_f64(p->go, p->nt), *gf = tu_to_f64(p->gf, p->ns);
  for (int r = 0; r < R_COUNT; r++) ref[r] = malloc(r_count(p, r) * 8);
  camdelta_ref_scan_packed a = {H, D, p->F, CLIPS, p->fo, p->co, rev, q, k, v, beta, decay, init ? in : NULL,
                                ref[R_OUT], ref[R_FIN]};
  TU_OK(camdelta_ref_scan_packed_forward(&a));
  camdelta_ref_scan_grads g = {go, gf, ref[R_DQ], ref[R_DK], ref[R_DV], ref[R_DB], ref[R_DD], ref[R_DI]};
  a.out = NULL, a.final_state = NULL;
  TU_OK(camdelta_ref_scan_packed_backward(&a, &g));
  free(q), free(k), free(v), free(beta), free(decay), free(in), free(go), free(gf);
}

/* Clip c alone through the fixed-shape calls (clips of one token count), compared with the packed results. */
static double clip_alone(const pk *p, size_t c, int rev, int init, camdelta_scan_algorithm alg, float *res[R_COUNT],
                         size_t *bit_equal, size_t *total) {
  camdelta_context *ctx = tu_context();
  const size_t f0 = (size_t)p->co[c], F = frames_of[c], S = tok_fixed[c], n0 = (size_t)p->fo[f0], Nc = F * S;
  const size_t DD = D * D;
  float *q = malloc(H * D * Nc * 4), *k = malloc(H * D * Nc * 4), *v = malloc(H * D * Nc * 4),
        *go = malloc(H * D * Nc * 4), *beta = malloc(H * Nc * 4), *decay = malloc(H * F * 4);
  float *in = malloc(H * DD * 4), *gf = malloc(H * DD * 4);
  for (size_t h = 0; h < H; h++) {
    for (size_t r = 0; r < D; r++)
      for (size_t n = 0; n < Nc; n++) {
        const size_t s = (h * D + r) * p->N + n0 + n, d = (h * D + r) * Nc + n;
        q[d] = p->q[s], k[d] = p->k[s], v[d] = p->v[s], go[d] = p->go[s];
      }
    memcpy(beta + h * Nc, p->beta + h * p->N + n0, Nc * 4);
    memcpy(decay + h * F, p->decay + h * p->F + f0, F * 4);
    memcpy(in + h * DD, p->init + (c * H + h) * DD, DD * 4);
    memcpy(gf + h * DD, p->gf + (c * H + h) * DD, DD * 4);
  }
  cl_mem mq = tu_upload(q, H * D * Nc * 4), mk = tu_upload(k, H * D * Nc * 4), mv = tu_upload(v, H * D * Nc * 4),
         mgo = tu_upload(go, H * D * Nc * 4), mb = tu_upload(beta, H * Nc * 4), md = tu_upload(decay, H * F * 4),
         mi = tu_upload(in, H * DD * 4), mgf = tu_upload(gf, H * DD * 4);
  const size_t cnt[R_COUNT] = {H * D * Nc, H * DD, H * D * Nc, H * D * Nc, H * D * Nc, H * Nc, H * F, H * DD};
  cl_mem o[R_COUNT];
  for (int r = 0; r < R_COUNT; r++) o[r] = tu_buffer(cnt[r] * 4);
  camdelta_scan_args a = {0};
  a.B = 1, a.H = H, a.D = D, a.F = F, a.S = S, a.reverse = rev, a.algorithm = alg;
  a.q.mem = mq, a.k.mem = mk, a.v.mem = mv, a.beta.mem = mb, a.decay.mem = md, a.init_state.mem = init ? mi : NULL;
  a.out.mem = o[R_OUT], a.final_state.mem = o[R_FIN];
  TU_OK(camdelta_scan_forward(ctx, &a, NULL));
  camdelta_scan_backward_args b = {0};
  b.B = 1, b.H = H, b.D = D, b.F = F, b.S = S, b.reverse = rev;
  b.q.mem = mq, b.k.mem = mk, b.v.mem = mv, b.beta.mem = mb, b.decay.mem = md, b.init_state.mem = init ? mi : NULL;
  b.grad_out.mem = mgo, b.grad_final_state.mem = mgf;
  b.dq.mem = o[R_DQ], b.dk.mem = o[R_DK], b.dv.mem = o[R_DV], b.dbeta.mem = o[R_DB], b.ddecay.mem = o[R_DD];
  b.dinit_state.mem = o[R_DI];
  TU_OK(camdelta_scan_backward(ctx, &b, NULL));
  double worst = 0;
  for (int r = 0; r < R_COUNT; r++) {
    float *x = fetch(o[r], cnt[r]);
    double md_ = 0, mr = 0;
    for (size_t i = 0; i < cnt[r]; i++) {
      /* the clip's element i in the packed result */
      size_t j;
      if (r == R_FIN || r == R_DI) j = c * H * DD + i;
      else if (r == R_DD) j = (i / F) * p->F + f0 + i % F;
      else if (r == R_DB) j = (i / Nc) * p->N + n0 + i % Nc;
      else j = (i / Nc) * p->N + n0 + i % Nc;
      const float y = res[r][j];
      md_ = fmax(md_, fabs((double)x[i] - y));
      mr = fmax(mr, fabs((double)x[i]));
      *bit_equal += memcmp(&x[i], &y, 4) == 0;
      (*total)++;
    }
    worst = fmax(worst, md_ / fmax(mr, 1e-30));
    free(x);
    clReleaseMemObject(o[r]);
  }
  cl_mem rel[8] = {mq, mk, mv, mgo, mb, md, mi, mgf};
  for (int i = 0; i < 8; i++) clReleaseMemObject(rel[i]);
  free(q), free(k), free(v), free(go), free(beta), free(decay), free(in), free(gf);
  return worst;
}

static void test_packed(void **state) {
  (void)state;
  pk p;
  pk_make(&p);
  double worst_ref[R_COUNT] = {0}, worst_alone = 0;
  for (int rev = 0; rev < 2; rev++)
    for (int init = 0; init < 2; init++)
      for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
        float *res[R_COUNT];
        run_packed(&p, rev, init, (camdelta_scan_algorithm)alg, 0, res);
        double *ref[R_COUNT];
        reference(&p, rev, init, ref);
        printf("%s init=%d %s vs f64:", rev ? "reverse" : "causal", init,
               camdelta_scan_algorithm_name((camdelta_scan_algorithm)alg));
        for (int r = 0; r < R_COUNT; r++) {
          const double e = tu_rel_err(res[r], ref[r], r_count(&p, r));
          worst_ref[r] = fmax(worst_ref[r], e);
          printf(" %s %.1e", R_NAME[r], e);
          assert_true(e <= (r <= R_FIN ? 1e-5 : 1e-4));
        }
        size_t eq = 0, tot = 0;
        double alone = 0;
        for (size_t c = 0; c < CLIPS; c++)
          if (tok_fixed[c]) alone = fmax(alone, clip_alone(&p, c, rev, init, (camdelta_scan_algorithm)alg, res, &eq, &tot));
        worst_alone = fmax(worst_alone, alone);
        printf("; clips alone: max rel %.1e, %zu of %zu values bit-equal\n", alone, eq, tot);
        assert_true(alone <= 1e-6);
        /* with the forward's saved states the backward gives the same gradients */
        if (alg == CAMDELTA_SCAN_CHUNKWISE) {
          float *sv[R_COUNT];
          run_packed(&p, rev, init, (camdelta_scan_algorithm)alg, 1, sv);
          for (int r = R_DQ; r < R_COUNT; r++) {
            double *x = tu_to_f64(res[r], r_count(&p, r));
            assert_true(tu_rel_err(sv[r], x, r_count(&p, r)) <= 1e-6);
            free(x);
          }
          for (int r = 0; r < R_COUNT; r++) free(sv[r]);
        }
        for (int r = 0; r < R_COUNT; r++) free(res[r]), free(ref[r]);
      }
  for (int r = 0; r < R_COUNT; r++) {
    char what[64];
    snprintf(what, sizeof what, "packed %s vs f64", R_NAME[r]);
    tu_report(what, worst_ref[r]);
  }
  tu_report("packed vs clips alone", worst_alone);
  pk_free(&p);
}

static void test_bad_offsets(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  pk p;
  pk_make(&p);
  cl_mem out = tu_buffer(p.nt * 4), small = tu_buffer(p.nt * 4 - 4);
  float *before = fetch(out, p.nt);
  int64_t fo[MAXF + 1], co[CLIPS + 1];
  camdelta_packed_clips pc = {fo, co, CLIPS, p.N, NULL};
  camdelta_scan_args a = {0};
  a.B = 1, a.H = H, a.D = D, a.F = p.F, a.S = 0;
  a.q.mem = p.m[0], a.k.mem = p.m[1], a.v.mem = p.m[2], a.beta.mem = p.m[3], a.decay.mem = p.m[4], a.out.mem = out;
  struct {
    const char *what, *msg;
    camdelta_status want;
  } cases[] = {
      {"not increasing", "not increasing", CAMDELTA_ERROR_SHAPE},
      {"not ending at N", "expected tokens = N", CAMDELTA_ERROR_SHAPE},
      {"clips not ending at F", "clip_offsets end", CAMDELTA_ERROR_SHAPE},
      {"tensors smaller than N", "'q'", CAMDELTA_ERROR_BUFFER_TOO_SMALL},
      {"B = 2", "B = 1", CAMDELTA_ERROR_SHAPE},
      {"no clip_offsets", "clip_offsets", CAMDELTA_ERROR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memcpy(fo, p.fo, sizeof fo), memcpy(co, p.co, sizeof co);
    camdelta_scan_args b = a;
    camdelta_packed_clips c = pc;
    switch (i) {
      case 0: fo[7] = fo[6]; break;
      case 1: c.tokens = p.N + 1, fo[p.F] = (int64_t)p.N - 1; break;
      case 2: co[CLIPS] = (int64_t)p.F - 1; break;
      case 3: b.q.mem = small; break;
      case 4: b.B = 2; break;
      default: c.clip_offsets = NULL; break;
    }
    const camdelta_status st = camdelta_scan_forward_packed(ctx, &b, &c, NULL);
    printf("%s: %s: %s\n", cases[i].what, camdelta_status_name(st), camdelta_last_message());
    assert_int_equal(st, cases[i].want);
    assert_non_null(strstr(camdelta_last_message(), cases[i].msg));
    camdelta_scan_backward_args bb = {0};
    bb.B = b.B, bb.H = H, bb.D = D, bb.F = p.F, bb.q = b.q, bb.k = b.k, bb.v = b.v, bb.beta = b.beta;
    bb.decay = b.decay, bb.grad_out.mem = p.m[6], bb.dq.mem = out, bb.dk.mem = out, bb.dv.mem = out;
    bb.dbeta.mem = out, bb.ddecay.mem = out;
    assert_int_not_equal(camdelta_scan_backward_packed(ctx, &bb, &c, NULL), CAMDELTA_OK);
  }
  TU_OK(camdelta_finish(ctx));
  float *after = fetch(out, p.nt);
  assert_memory_equal(before, after, p.nt * 4);
  free(before), free(after);
  clReleaseMemObject(out), clReleaseMemObject(small);
  pk_free(&p);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_packed),
      cmocka_unit_test(test_bad_offsets))
