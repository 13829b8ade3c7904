/* The native packed-clip path (docs/math.md §9.1; src/scan/packed.c, the kernels' CD_PACKED variant):
 *  - which path ran (camdelta_packed_clips.native): native for the chunkwise forward and every backward, the
 *    padded batch for the sequential forward and for a backward given that forward's saved states;
 *  - on equal clips the native path equals the fixed-shape call on a batch of those clips bit for bit (the same
 *    launches and tiles: the work-group forms, CAMDELTA_SCAN_CPU=0), forward and backward, both directions, with
 *    and without init states;
 *  - mixed clips (frames of different token counts, tiles past a frame's end; and clips of one resolution but
 *    different lengths, the uniform-frames variant) equal each clip run alone (1e-6 relative, bit-equal counts
 *    printed) and the f64 packed reference (docs/math.md §5 bounds);
 *  - the same on the tensor-core kernels' logic where the device has none (CAMDELTA_TC=emulate on a second context),
 *    with 16-byte token loads (every frame offset a multiple of 4) and without. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "runtime/internal.h"
#include "testutil.h"
#include "scan/tc.h"

enum { MAXC = 8, MAXF = 4400 };

typedef struct prob {
  size_t H, D, F, C, N, nt, ns;
  int64_t fo[MAXF + 1], co[MAXC + 1];
  float *h[8]; /* q k v beta decay init grad_out grad_final */
  cl_mem m[8];
} prob;
enum { I_Q, I_K, I_V, I_BETA, I_DECAY, I_INIT, I_GO, I_GF };

/* Clip c has nf[c] frames; frame tokens from tok[] in order (all frames of all clips). */
static void make(prob *p, size_t H, size_t D, size_t C, const size_t *nf, const size_t *tok, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->H = H, p->D = D, p->C = C;
  size_t f = 0, n = 0;
  for (size_t c = 0; c < C; c++) {
    p->co[c] = (int64_t)f;
    for (size_t i = 0; i < nf[c]; i++, f++) p->fo[f] = (int64_t)n, n += tok[f];
  }
  p->co[C] = (int64_t)f, p->fo[f] = (int64_t)n, p->F = f, p->N = n;
  p->nt = H * D * n, p->ns = C * H * D * D;
  const size_t cnt[8] = {p->nt, p->nt, p->nt, H * n, H * f, p->ns, p->nt, p->ns};
  tu_seed(seed);
  for (int i = 0; i < 8; i++) p->h[i] = malloc(cnt[i] * 4);
  tu_fill_uniform(p->h[I_Q], p->nt, -1, 1);
  tu_fill_normal(p->h[I_K], p->nt, 0.1);
  tu_fill_normal(p->h[I_V], p->nt, 1);
  tu_fill_uniform(p->h[I_BETA], H * n, 0, 1);
  tu_fill_uniform(p->h[I_DECAY], H * f, 0.6, 1);
  tu_fill_normal(p->h[I_INIT], p->ns, 0.3);
  tu_fill_normal(p->h[I_GO], p->nt, 1);
  tu_fill_normal(p->h[I_GF], p->ns, 0.3);
  for (int i = 0; i < 8; i++) p->m[i] = tu_upload(p->h[i], cnt[i] * 4);
}

static void release(prob *p) {
  for (int i = 0; i < 8; i++) free(p->h[i]), clReleaseMemObject(p->m[i]);
}

/* Results: out final dq dk dv dbeta ddecay dinit, in the packed layouts. */
enum { R_OUT, R_FIN, R_DQ, R_DK, R_DV, R_DB, R_DD, R_DI, R_COUNT };
static const char *const R_NAME[R_COUNT] = {"out", "final", "dq", "dk", "dv", "dbeta", "ddecay", "dinit"};

static size_t r_count(const prob *p, int r) {
  return r == R_FIN || r == R_DI ? p->ns : r == R_DB ? p->H * p->N : r == R_DD ? p->H * p->F : p->nt;
}

static float *fetch(cl_mem m, size_t n) {
  float *x = malloc(n * 4 + 4);
  tu_download(m, 0, n * 4, x);
  return x;
}

/* Forward and backward over the packed clips; use_saved: the forward's saved object goes to the backward (else the
 * backward recomputes). native[0], native[1]: the path each call reported. */
static void run_packed(camdelta_context *ctx, const prob *p, int rev, int init, camdelta_scan_algorithm alg,
                       int use_saved, float *res[R_COUNT], int native[2]) {
  cl_mem o[R_COUNT];
  for (int r = 0; r < R_COUNT; r++) o[r] = tu_buffer(r_count(p, r) * 4);
  camdelta_packed_clips pc = {p->fo, p->co, p->C, p->N, &native[0]};
  camdelta_scan_saved *saved = NULL;
  if (use_saved) TU_OK(camdelta_scan_saved_create(ctx, &saved));
  camdelta_scan_args a = {0};
  a.B = 1, a.H = p->H, a.D = p->D, a.F = p->F, a.S = 0, a.reverse = rev, a.algorithm = alg;
  a.q.mem = p->m[I_Q], a.k.mem = p->m[I_K], a.v.mem = p->m[I_V], a.beta.mem = p->m[I_BETA];
  a.decay.mem = p->m[I_DECAY], a.init_state.mem = init ? p->m[I_INIT] : NULL;
  a.out.mem = o[R_OUT], a.final_state.mem = o[R_FIN];
  native[0] = native[1] = -1;
  TU_OK(camdelta_scan_forward_packed(ctx, &a, &pc, saved));
  camdelta_scan_backward_args b = {0};
  b.B = 1, b.H = p->H, b.D = p->D, b.F = p->F, b.S = 0, b.reverse = rev;
  b.q = a.q, b.k = a.k, b.v = a.v, b.beta = a.beta, b.decay = a.decay, b.init_state = a.init_state;
  b.grad_out.mem = p->m[I_GO], b.grad_final_state.mem = p->m[I_GF];
  b.dq.mem = o[R_DQ], b.dk.mem = o[R_DK], b.dv.mem = o[R_DV], b.dbeta.mem = o[R_DB], b.ddecay.mem = o[R_DD];
  b.dinit_state.mem = o[R_DI];
  pc.native = &native[1];
  TU_OK(camdelta_scan_backward_packed(ctx, &b, &pc, saved));
  camdelta_scan_saved_destroy(saved);
  for (int r = 0; r < R_COUNT; r++) res[r] = fetch(o[r], r_count(p, r)), clReleaseMemObject(o[r]);
}

/* Clips c0 .. c0+B−1, all of F frames of S tokens, through one fixed-shape call (B, H, D, F, S); results put back
 * into the packed layout at their places in res (other places untouched). */
static void run_fixed(camdelta_context *ctx, const prob *p, size_t c0, size_t B, int rev, int init,
                      camdelta_scan_algorithm alg, float *res[R_COUNT]) {
  const size_t H = p->H, D = p->D, f0 = (size_t)p->co[c0], F = (size_t)(p->co[c0 + 1] - p->co[c0]);
  const size_t n0 = (size_t)p->fo[f0], S = (size_t)(p->fo[f0 + 1] - p->fo[f0]), Nc = F * S, DD = D * D;
  const size_t nt = B * H * D * Nc, nb = B * H * Nc, nd = B * H * F, ns = B * H * DD;
  float *x[8];
  const size_t cnt[8] = {nt, nt, nt, nb, nd, ns, nt, ns};
  for (int i = 0; i < 8; i++) x[i] = malloc(cnt[i] * 4);
  for (size_t b = 0; b < B; b++)
    for (size_t h = 0; h < H; h++) {
      for (size_t r = 0; r < D; r++)
        for (size_t n = 0; n < Nc; n++) {
          const size_t s = (h * D + r) * p->N + n0 + b * Nc + n, d = ((b * H + h) * D + r) * Nc + n;
          x[I_Q][d] = p->h[I_Q][s], x[I_K][d] = p->h[I_K][s], x[I_V][d] = p->h[I_V][s], x[I_GO][d] = p->h[I_GO][s];
        }
      memcpy(x[I_BETA] + (b * H + h) * Nc, p->h[I_BETA] + h * p->N + n0 + b * Nc, Nc * 4);
      memcpy(x[I_DECAY] + (b * H + h) * F, p->h[I_DECAY] + h * p->F + f0 + b * F, F * 4);
      memcpy(x[I_INIT] + (b * H + h) * DD, p->h[I_INIT] + ((c0 + b) * H + h) * DD, DD * 4);
      memcpy(x[I_GF] + (b * H + h) * DD, p->h[I_GF] + ((c0 + b) * H + h) * DD, DD * 4);
    }
  cl_mem m[8];
  for (int i = 0; i < 8; i++) m[i] = tu_upload(x[i], cnt[i] * 4);
  const size_t oc[R_COUNT] = {nt, ns, nt, nt, nt, nb, nd, ns};
  cl_mem o[R_COUNT];
  for (int r = 0; r < R_COUNT; r++) o[r] = tu_buffer(oc[r] * 4);
  camdelta_scan_args a = {0};
  a.B = B, a.H = H, a.D = D, a.F = F, a.S = S, a.reverse = rev, a.algorithm = alg;
  a.q.mem = m[I_Q], a.k.mem = m[I_K], a.v.mem = m[I_V], a.beta.mem = m[I_BETA], a.decay.mem = m[I_DECAY];
  a.init_state.mem = init ? m[I_INIT] : NULL, a.out.mem = o[R_OUT], a.final_state.mem = o[R_FIN];
  TU_OK(camdelta_scan_forward(ctx, &a, NULL));
  camdelta_scan_backward_args g = {0};
  g.B = B, g.H = H, g.D = D, g.F = F, g.S = S, g.reverse = rev;
  g.q = a.q, g.k = a.k, g.v = a.v, g.beta = a.beta, g.decay = a.decay, g.init_state = a.init_state;
  g.grad_out.mem = m[I_GO], g.grad_final_state.mem = m[I_GF];
  g.dq.mem = o[R_DQ], g.dk.mem = o[R_DK], g.dv.mem = o[R_DV], g.dbeta.mem = o[R_DB], g.ddecay.mem = o[R_DD];
  g.dinit_state.mem = o[R_DI];
  TU_OK(camdelta_scan_backward(ctx, &g, NULL));
  for (int r = 0; r < R_COUNT; r++) {
    float *y = fetch(o[r], oc[r]);
    for (size_t i = 0; i < oc[r]; i++) {
      size_t j;
      if (r == R_FIN || r == R_DI) j = c0 * H * DD + i;
      else if (r == R_DD) j = (i / F % H) * p->F + f0 + (i / (H * F)) * F + i % F;
      else if (r == R_DB) j = (i / Nc % H) * p->N + n0 + (i / (H * Nc)) * Nc + i % Nc;
      else j = (i / Nc % (H * D)) * p->N + n0 + (i / (H * D * Nc)) * Nc + i % Nc;
      res[r][j] = y[i];
    }
    free(y);
    clReleaseMemObject(o[r]);
  }
  for (int i = 0; i < 8; i++) free(x[i]), clReleaseMemObject(m[i]);
}

static void reference(const prob *p, int rev, int init, double *ref[R_COUNT]) {
  double *x[8];
  const size_t cnt[8] = {p->nt, p->nt, p->nt, p->H * p->N, p->H * p->F, p->ns, p->nt, p->ns};
  for (int i = 0; i < 8; i++) x[i] = tu_to_f64(p->h[i], cnt[i]);
  for (int r = 0; r < R_COUNT; r++) ref[r] = malloc(r_count(p, r) * 8);
  camdelta_ref_scan_packed a = {p->H,      p->D,     p->F,        p->C,      p->fo,          p->co,
                                rev,       x[I_Q],   x[I_K],      x[I_V],    x[I_BETA],      x[I_DECAY],
                                init ? x[I_INIT] : NULL, ref[R_OUT], ref[R_FIN]};
  TU_OK(camdelta_ref_scan_packed_forward(&a));
  camdelta_ref_scan_grads g = {x[I_GO], x[I_GF], ref[R_DQ], ref[R_DK], ref[R_DV], ref[R_DB], ref[R_DD], ref[R_DI]};
  a.out = NULL, a.final_state = NULL;
  TU_OK(camdelta_ref_scan_packed_backward(&a, &g));
  for (int i = 0; i < 8; i++) free(x[i]);
}

/* max relative difference of two packed result sets; bit-equal values counted. */
static double compare(const prob *p, float *const x[R_COUNT], float *const y[R_COUNT], size_t *eq, size_t *tot) {
  double worst = 0;
  for (int r = 0; r < R_COUNT; r++) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < r_count(p, r); i++) {
      md = fmax(md, fabs((double)x[r][i] - y[r][i]));
      mr = fmax(mr, fabs((double)y[r][i]));
      *eq += memcmp(&x[r][i], &y[r][i], 4) == 0;
      (*tot)++;
    }
    worst = fmax(worst, md / fmax(mr, 1e-30));
  }
  return worst;
}

static void free_res(float *res[R_COUNT]) {
  for (int r = 0; r < R_COUNT; r++) free(res[r]);
}

/* run_packed, chunkwise, the backward recomputing; both calls must report the native path. */
static void run_native(camdelta_context *ctx, const prob *p, int rev, int init, float *res[R_COUNT]) {
  int native[2];
  run_packed(ctx, p, rev, init, CAMDELTA_SCAN_CHUNKWISE, 0, res, native);
  assert_int_equal(native[0], 1);
  assert_int_equal(native[1], 1);
}

/* Equal clips: the native path equals the fixed-shape call on the batch, bit for bit. */
static void equal_clips(camdelta_context *ctx, size_t C, size_t F, size_t S, const char *what) {
  size_t nf[MAXC], tok[MAXF];
  for (size_t c = 0; c < C; c++) nf[c] = F;
  for (size_t f = 0; f < C * F; f++) tok[f] = S;
  prob p;
  make(&p, 2, 16, C, nf, tok, 91);
  for (int rev = 0; rev < 2; rev++)
    for (int init = 0; init < 2; init++) {
      float *pk[R_COUNT], *fx[R_COUNT];
      run_native(ctx, &p, rev, init, pk);
      for (int r = 0; r < R_COUNT; r++) fx[r] = calloc(r_count(&p, r), 4);
      run_fixed(ctx, &p, 0, C, rev, init, CAMDELTA_SCAN_CHUNKWISE, fx);
      size_t eq = 0, tot = 0;
      const double d = compare(&p, pk, fx, &eq, &tot);
      printf("%s: %zu clips of (F, S) = (%zu, %zu) %s init=%d: packed (native) vs fixed batch: max rel %.1e, %zu of "
             "%zu bit-equal\n",
             what, C, F, S, rev ? "reverse" : "causal", init, d, eq, tot);
      for (int r = 0; r < R_COUNT; r++)
        if (memcmp(pk[r], fx[r], r_count(&p, r) * 4) != 0) fail_msg("%s differs from the fixed-shape call", R_NAME[r]);
      free_res(pk), free_res(fx);
    }
  release(&p);
}

/* Mixed clips: equal to each clip alone (those of one token count) and to the f64 reference. */
static void mixed_clips(camdelta_context *ctx, size_t C, const size_t *nf, const size_t *tok, const char *what,
                        double *worst_alone, double worst_ref[R_COUNT]) {
  prob p;
  make(&p, 2, 16, C, nf, tok, 17);
  for (int rev = 0; rev < 2; rev++)
    for (int init = 0; init < 2; init++) {
      float *pk[R_COUNT], *al[R_COUNT];
      run_native(ctx, &p, rev, init, pk);
      double *ref[R_COUNT];
      reference(&p, rev, init, ref);
      printf("%s %s init=%d vs f64:", what, rev ? "reverse" : "causal", init);
      for (int r = 0; r < R_COUNT; r++) {
        const double e = tu_rel_err(pk[r], ref[r], r_count(&p, r));
        worst_ref[r] = fmax(worst_ref[r], e);
        printf(" %s %.1e", R_NAME[r], e);
        assert_true(e <= (r <= R_FIN ? 1e-5 : 1e-4));
      }
      /* clips alone: start from the packed results, overwrite each equal-token clip's places with its own run */
      for (int r = 0; r < R_COUNT; r++) {
        al[r] = malloc(r_count(&p, r) * 4);
        memcpy(al[r], pk[r], r_count(&p, r) * 4);
      }
      for (size_t c = 0; c < C; c++) {
        int equal = 1;
        for (int64_t f = p.co[c]; f < p.co[c + 1]; f++) equal &= tok[f] == tok[p.co[c]];
        if (equal) run_fixed(ctx, &p, c, 1, rev, init, CAMDELTA_SCAN_CHUNKWISE, al);
      }
      size_t eq = 0, tot = 0;
      const double d = compare(&p, pk, al, &eq, &tot);
      *worst_alone = fmax(*worst_alone, d);
      printf("; clips alone: max rel %.1e, %zu of %zu bit-equal\n", d, eq, tot);
      assert_true(d <= 1e-6);
      for (int r = 0; r < R_COUNT; r++) free(ref[r]);
      free_res(pk), free_res(al);
    }
  release(&p);
}

/* (F, S) = (1, 7), (5, 64), (21, 12), (3, 1) and a clip of frames with 4, 2, 5 tokens; and, for the 16-byte loads,
 * clips whose frames all have multiples of 4 tokens: (2, 8), (3, 4), (1, 12), frames 4, 16, 8. */
static const size_t MIX_NF[5] = {1, 5, 21, 3, 3};
static size_t MIX_TOK[33];
static const size_t VEC_NF[4] = {2, 3, 1, 3};
static const size_t VEC_TOK[9] = {8, 8, 4, 4, 4, 12, 4, 16, 8};
/* clips of one resolution and different lengths: every frame 12 tokens (the kernels' CD_PACKED=2 variant) */
static const size_t UNI_NF[3] = {1, 3, 2};
static const size_t UNI_TOK[6] = {12, 12, 12, 12, 12, 12};

/* the group setup: MIX_TOK's clip lengths */
/* The group setup: the clip-length mix, and the work-group forms for the fixed-shape calls (packed clips run them;
 * the CPU forms take the fixed shape only): the fixed-shape calls the packed ones are compared with bit for bit
 * run them too. */
static int fill_mix(void **state) {
  (void)state;
  if (setenv("CAMDELTA_SCAN_CPU", "0", 1) != 0) return 1;
  size_t f = 0;
  const size_t s[4] = {7, 64, 12, 1};
  for (int c = 0; c < 4; c++)
    for (size_t i = 0; i < MIX_NF[c]; i++) MIX_TOK[f++] = s[c];
  MIX_TOK[f++] = 4, MIX_TOK[f++] = 2, MIX_TOK[f++] = 5;
  return 0;
}

static void test_fma(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  if (cd_tc_available(ctx)) printf("(tensor-core device: these run its tensor-core kernels)\n");
  equal_clips(ctx, 3, 4, 12, "device");
  double alone = 0, ref[R_COUNT] = {0};
  mixed_clips(ctx, 5, MIX_NF, MIX_TOK, "mix", &alone, ref);
  mixed_clips(ctx, 4, VEC_NF, VEC_TOK, "mix/4", &alone, ref);
  mixed_clips(ctx, 3, UNI_NF, UNI_TOK, "one resolution", &alone, ref);
  tu_report("native packed vs clips alone", alone);
  for (int r = 0; r < R_COUNT; r++) {
    char what[64];
    snprintf(what, sizeof what, "native packed %s vs f64", R_NAME[r]);
    tu_report(what, ref[r]);
  }
}

/* Which path: the sequential forward pads; its saved states send the backward to the padded batch too, with the
 * gradients of the native backward. */
static void test_paths(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  prob p;
  make(&p, 2, 16, 4, VEC_NF, VEC_TOK, 5);
  for (int rev = 0; rev < 2; rev++) {
    float *sq[R_COUNT], *ch[R_COUNT], *sv[R_COUNT];
    int n_seq[2], n_chunk[2], n_saved[2];
    run_packed(ctx, &p, rev, 1, CAMDELTA_SCAN_SEQUENTIAL, 1, sq, n_seq);
    run_packed(ctx, &p, rev, 1, CAMDELTA_SCAN_CHUNKWISE, 0, ch, n_chunk);
    run_packed(ctx, &p, rev, 1, CAMDELTA_SCAN_CHUNKWISE, 1, sv, n_saved);
    assert_int_equal(n_seq[0], 0), assert_int_equal(n_seq[1], 0);
    assert_int_equal(n_chunk[0], 1), assert_int_equal(n_chunk[1], 1);
    assert_int_equal(n_saved[0], 1), assert_int_equal(n_saved[1], 1);
    size_t eq = 0, tot = 0;
    const double d1 = compare(&p, sq, ch, &eq, &tot), d2 = compare(&p, sv, ch, &eq, &tot);
    printf("%s: padded (sequential, saved) vs native %.1e; native with saved vs without %.1e\n",
           rev ? "reverse" : "causal", d1, d2);
    assert_true(d1 <= 1e-6);
    assert_true(d2 <= 1e-6);
    free_res(sq), free_res(ch), free_res(sv);
  }
  /* a saved object of a native forward does not fit a fixed-shape backward */
  camdelta_scan_saved *saved = NULL;
  TU_OK(camdelta_scan_saved_create(ctx, &saved));
  cl_mem out = tu_buffer(p.nt * 4);
  camdelta_packed_clips pc = {p.fo, p.co, p.C, p.N, NULL};
  camdelta_scan_args a = {0};
  a.B = 1, a.H = p.H, a.D = p.D, a.F = p.F, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  a.q.mem = p.m[I_Q], a.k.mem = p.m[I_K], a.v.mem = p.m[I_V], a.beta.mem = p.m[I_BETA], a.decay.mem = p.m[I_DECAY];
  a.out.mem = out;
  TU_OK(camdelta_scan_forward_packed(ctx, &a, &pc, saved));
  camdelta_scan_backward_args b = {0};
  b.B = 1, b.H = p.H, b.D = p.D, b.F = p.F, b.S = p.N / p.F;
  b.q = a.q, b.k = a.k, b.v = a.v, b.beta = a.beta, b.decay = a.decay, b.grad_out.mem = p.m[I_GO];
  cl_mem g[5];
  for (int i = 0; i < 5; i++) g[i] = tu_buffer(p.nt * 4);
  b.dq.mem = g[0], b.dk.mem = g[1], b.dv.mem = g[2], b.dbeta.mem = g[3], b.ddecay.mem = g[4];
  const camdelta_status st = camdelta_scan_backward(ctx, &b, saved);
  printf("fixed-shape backward with a packed saved object: %s\n", camdelta_last_message());
  assert_int_equal(st, CAMDELTA_ERROR_SHAPE);
  assert_non_null(strstr(camdelta_last_message(), "'saved' is from a forward with"));
  camdelta_scan_saved_destroy(saved);
  for (int i = 0; i < 5; i++) clReleaseMemObject(g[i]);
  clReleaseMemObject(out);
  release(&p);
}

/* More than 64 KiB of offsets (the table of 2F + clips + 2 int64 then goes as a __global argument instead of a
 * __constant one): two clips of 2100 frames, of 1 and of 2 tokens. */
static void test_large_table(void **state) {
  (void)state;
  enum { NF = 2100 };
  static size_t tok[2 * NF];
  for (size_t f = 0; f < 2 * NF; f++) tok[f] = f < NF ? 1 : 2;
  const size_t nf[2] = {NF, NF};
  assert_true((2 * 2 * NF + 2 + 2) * 8 > 65536);
  double alone = 0, ref[R_COUNT] = {0};
  mixed_clips(tu_context(), 2, nf, tok, "large table", &alone, ref);
  tu_report("native packed (table in global memory) vs clips alone", alone);
}

/* The tensor-core kernels' packed variant, emulated where the device has no tensor cores. */
static void test_emulated(void **state) {
  (void)state;
  if (cd_tc_available(tu_context())) return; /* test_fma ran the real tensor-core kernels */
  camdelta_context *emu = tu_context_tc_emulated();
  assert_true(cd_tc_available(emu));
  assert_true(cd_tc_emulated(emu));
  equal_clips(emu, 2, 3, 12, "emulated tensor cores");
  static const size_t nf[4] = {1, 2, 3, 2};
  static const size_t tok[8] = {7, 20, 20, 1, 1, 1, 5, 2};
  double alone = 0, ref[R_COUNT] = {0};
  mixed_clips(emu, 4, nf, tok, "emulated mix", &alone, ref);
  mixed_clips(emu, 4, VEC_NF, VEC_TOK, "emulated mix/4", &alone, ref);
  mixed_clips(emu, 3, UNI_NF, UNI_TOK, "emulated one resolution", &alone, ref);
  tu_report("native packed (emulated tensor cores) vs clips alone", alone);
  camdelta_context_destroy(emu);
}

TU_MAIN(fill_mix, tu_teardown_context, cmocka_unit_test(test_fma), cmocka_unit_test(test_paths),
        cmocka_unit_test(test_large_table), cmocka_unit_test(test_emulated))
