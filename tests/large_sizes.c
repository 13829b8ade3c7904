/* Sizes past 2^31 elements per tensor on a real device (issue 11): prep forward and the scan (both directions) at
 * B=3 H=32 D=128 N=219,600 (F=61 frames of S=3600 tokens: 2,698,444,800 elements per (B, H, D, N) tensor), inputs
 * generated on the device (camdelta_fill_random), sampled outputs checked against the f64 reference:
 *  - prep: whole tokens (b, n) (every head and channel; the RMS couples the heads), among them the last token of
 *    the last batch, whose elements sit past 2^31 in every tensor; the inputs recomputed on the host with
 *    camdelta_random_value, the outputs read with strided reads;
 *  - scan: whole (b, h) sequences (the state runs through every frame), among them the last (b, h), in parallel
 *    threads on the host.
 * Not run by ctest on PoCL at this size (gpu-lab/gpu-test.sh large runs it; ctest runs it at a small shape as a smoke
 * test). Prints "[ measure  ]" lines: kernel times and the largest relative errors, and exits 1 past the bounds of
 * docs/math.md §5 (prep 1e-6, scan 1e-5).
 *   cd_large_sizes [--shape B,H,D,F,S] [--scan-samples K]      (default 3,32,128,61,3600 and 3) */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "camdelta.h"
#include "camdelta_helpers.h"
#include "camdelta_ref.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(expr)                                                                                           \
  do {                                                                                                        \
    camdelta_status st_ = (expr);                                                                             \
    if (st_ != CAMDELTA_OK) {                                                                                 \
      fprintf(stderr, "large_sizes: %s failed: %s: %s\n", #expr, camdelta_status_name(st_), camdelta_last_message()); \
      exit(2);                                                                                                \
    }                                                                                                         \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "large_sizes: out of host memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

static camdelta_context *g_ctx;

static cl_mem dev_alloc(size_t bytes, const char *what) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(g_ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "large_sizes: allocating %s (%zu bytes): %s\n", what, bytes, camdelta_cl_error_name(err));
    exit(2);
  }
  return m;
}

static void fill(cl_mem m, size_t count, uint64_t seed, float lo, float hi) {
  CHECK(camdelta_fill_random(g_ctx, (camdelta_buffer){m, 0}, count, CAMDELTA_F32, seed, lo, hi));
}

/* `rows` floats at element offsets first, first + stride, ... (one strided rectangle read) */
static void read_strided(cl_mem m, size_t first, size_t stride, size_t rows, float *out) {
  const size_t origin[3] = {first * 4 % (stride * 4), first / stride, 0}, host[3] = {0, 0, 0};
  const size_t region[3] = {4, rows, 1};
  cl_int err = clEnqueueReadBufferRect(camdelta_context_queue(g_ctx), m, CL_TRUE, origin, host, region, stride * 4, 0,
                                       4, 0, out, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "large_sizes: strided read: %s\n", camdelta_cl_error_name(err));
    exit(2);
  }
}

static void read_range(cl_mem m, size_t first, size_t count, float *out) {
  cl_int err = clEnqueueReadBuffer(camdelta_context_queue(g_ctx), m, CL_TRUE, first * 4, count * 4, out, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "large_sizes: read: %s\n", camdelta_cl_error_name(err));
    exit(2);
  }
}

typedef struct err_acc {
  double max_diff, max_ref;
} err_acc;
static void acc(err_acc *e, double x, double ref) {
  if (!(fabs(x - ref) <= e->max_diff)) e->max_diff = isnan(x) ? INFINITY : fabs(x - ref);
  if (fabs(ref) > e->max_ref) e->max_ref = fabs(ref);
}
static double rel(const err_acc *e) { return e->max_diff / fmax(e->max_ref, 1e-30); }

/* seeds of the inputs */
enum { S_QRAW = 11, S_KRAW, S_VRAW, S_QW, S_KW, S_PQ, S_PKV, S_RC, S_RS, S_Q, S_K, S_V, S_BETA, S_DECAY };

static size_t B, H, D, F, S, N, C, Dh, T;

/* ------------------------------------------------------------------ prep */

static int run_prep(double *worst) {
  const double t0 = now_s();
  cl_mem raw[3], qw, kw, pq, pkv, rc, rs, out[3], infl;
  const char *names[3] = {"q_raw", "k_raw", "v_raw"};
  for (int i = 0; i < 3; i++) raw[i] = dev_alloc(T * 4, names[i]);
  qw = dev_alloc(C * 4, "q_norm_weight"), kw = dev_alloc(C * 4, "k_norm_weight");
  pq = dev_alloc(B * N * 64, "proj_q"), pkv = dev_alloc(B * N * 64, "proj_kv");
  rc = dev_alloc(N * Dh * 4, "rope_cos"), rs = dev_alloc(N * Dh * 4, "rope_sin");
  for (int i = 0; i < 3; i++) out[i] = dev_alloc(T * 4, "q/k/v");
  infl = dev_alloc(B * H * N * 4, "inflation_sq");
  for (int i = 0; i < 3; i++) fill(raw[i], T, (uint64_t)(S_QRAW + i), -1.0f, 1.0f);
  fill(qw, C, S_QW, 0.5f, 1.5f), fill(kw, C, S_KW, 0.5f, 1.5f);
  fill(pq, B * N * 16, S_PQ, -1.0f, 1.0f), fill(pkv, B * N * 16, S_PKV, -1.0f, 1.0f);
  fill(rc, N * Dh, S_RC, -1.0f, 1.0f), fill(rs, N * Dh, S_RS, -1.0f, 1.0f);
  CHECK(camdelta_finish(g_ctx));
  printf("prep: inputs generated on the device in %.2f s\n", now_s() - t0);
  fflush(stdout);

  const float k_scale = (float)(1.0 / sqrt((double)D * (double)S)), eps = 1e-6f;
  camdelta_prep_args a = CAMDELTA_PREP_ARGS_INIT;
  a.B = B, a.N = N, a.H = H, a.D = D, a.dtype = CAMDELTA_F32, a.k_scale = k_scale, a.norm_eps = eps;
  a.q_raw = (camdelta_buffer){raw[0], 0}, a.k_raw = (camdelta_buffer){raw[1], 0}, a.v_raw = (camdelta_buffer){raw[2], 0};
  a.q_norm_weight = (camdelta_buffer){qw, 0}, a.k_norm_weight = (camdelta_buffer){kw, 0};
  a.proj_q = (camdelta_buffer){pq, 0}, a.proj_kv = (camdelta_buffer){pkv, 0};
  a.rope_cos = (camdelta_buffer){rc, 0}, a.rope_sin = (camdelta_buffer){rs, 0};
  a.q = (camdelta_buffer){out[0], 0}, a.k = (camdelta_buffer){out[1], 0}, a.v = (camdelta_buffer){out[2], 0};
  a.inflation_sq = (camdelta_buffer){infl, 0};
  camdelta_profile prof = {0, 0};
  a.profile = &prof;
  CHECK(camdelta_prep_forward(g_ctx, &a, NULL));
  printf("[ measure  ] large prep forward kernel ms = %.3f\n", prof.kernel_ms);

  /* sampled tokens: the corners (the last one's elements are the farthest past 2^31) and a spread */
  size_t tb[10], tn[10];
  int nt = 0;
  tb[nt] = B - 1, tn[nt++] = N - 1;
  tb[nt] = 0, tn[nt++] = 0;
  tb[nt] = B - 1, tn[nt++] = N / 2;
  tb[nt] = B / 2, tn[nt++] = (N * 7) / 11;
  for (int i = 0; i < 4; i++) {
    tb[nt] = (size_t)(camdelta_random_value(99, (uint64_t)i, 0, 1) * (float)B) % B;
    tn[nt++] = (size_t)((double)camdelta_random_value(98, (uint64_t)i, 0, 1) * (double)N) % N;
  }
  double *x[9], *ro[4];
  const size_t cnt[9] = {C, C, C, C, C, 16, 16, Dh, Dh};
  for (int i = 0; i < 9; i++) x[i] = xmalloc(cnt[i] * sizeof(double));
  for (int i = 0; i < 4; i++) ro[i] = xmalloc(C * sizeof(double));
  float *got = xmalloc(C * sizeof(float));
  err_acc e[4];
  memset(e, 0, sizeof e);
  size_t far = 0;
  for (int s = 0; s < nt; s++) {
    const size_t b = tb[s], n = tn[s], tok = b * N + n;
    for (size_t c = 0; c < C; c++) {
      for (int i = 0; i < 3; i++) x[i][c] = camdelta_random_value((uint64_t)(S_QRAW + i), tok * C + c, -1, 1);
      x[3][c] = camdelta_random_value(S_QW, c, 0.5f, 1.5f);
      x[4][c] = camdelta_random_value(S_KW, c, 0.5f, 1.5f);
    }
    for (int j = 0; j < 16; j++) {
      x[5][j] = camdelta_random_value(S_PQ, tok * 16 + (size_t)j, -1, 1);
      x[6][j] = camdelta_random_value(S_PKV, tok * 16 + (size_t)j, -1, 1);
    }
    for (size_t r = 0; r < Dh; r++) {
      x[7][r] = camdelta_random_value(S_RC, n * Dh + r, -1, 1);
      x[8][r] = camdelta_random_value(S_RS, n * Dh + r, -1, 1);
    }
    camdelta_ref_prep rp = {1, 1, H, D, k_scale, eps, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8],
                            ro[0], ro[1], ro[2], ro[3]};
    CHECK(camdelta_ref_prep_forward(&rp));
    /* device q/k/v at ((b*H + h)*D + d)*N + n: H*D values, stride N; inflation_sq at (b*H + h)*N + n */
    for (int o = 0; o < 3; o++) {
      read_strided(out[o], (b * H * D) * N + n, N, H * D, got);
      for (size_t c = 0; c < C; c++) acc(&e[o], got[c], ro[o][c]);
    }
    read_strided(infl, (b * H) * N + n, N, H, got);
    for (size_t h = 0; h < H; h++) acc(&e[3], got[h], ro[3][h]);
    const size_t last = ((b * H + H - 1) * D + D - 1) * N + n;
    if (last > far) far = last;
  }
  const char *on[4] = {"q", "k", "v", "inflation_sq"};
  int ok = 1;
  for (int o = 0; o < 4; o++) {
    printf("[ measure  ] large prep %s rel err (%d tokens) = %.3g\n", on[o], nt, rel(&e[o]));
    if (rel(&e[o]) > *worst) *worst = rel(&e[o]);
    if (!(rel(&e[o]) <= 1e-6)) ok = 0;
  }
  printf("prep: %d sampled tokens, farthest element checked at index %zu (2^31 = %zu)\n", nt, far,
         (size_t)1 << 31);
  for (int i = 0; i < 9; i++) free(x[i]);
  for (int i = 0; i < 4; i++) free(ro[i]);
  free(got);
  for (int i = 0; i < 3; i++) clReleaseMemObject(raw[i]), clReleaseMemObject(out[i]);
  clReleaseMemObject(qw), clReleaseMemObject(kw), clReleaseMemObject(pq), clReleaseMemObject(pkv);
  clReleaseMemObject(rc), clReleaseMemObject(rs), clReleaseMemObject(infl);
  return ok;
}

/* ------------------------------------------------------------------ scan */

static float g_kamp;

typedef struct scan_sample {
  size_t b, h;
  int reverse;
  float *out, *fin; /* device results of this (b, h) */
  double err_out, err_fin;
} scan_sample;

static int scan_ref_worker(void *arg) {
  scan_sample *s = arg;
  const size_t bh = s->b * H + s->h, n = D * N;
  double *q = xmalloc(n * sizeof(double)), *k = xmalloc(n * sizeof(double)), *v = xmalloc(n * sizeof(double));
  double *beta = xmalloc(N * sizeof(double)), *decay = xmalloc(F * sizeof(double));
  double *out = xmalloc(n * sizeof(double)), *fin = xmalloc(D * D * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    q[i] = camdelta_random_value(S_Q, bh * n + i, -1, 1);
    k[i] = camdelta_random_value(S_K, bh * n + i, -g_kamp, g_kamp);
    v[i] = camdelta_random_value(S_V, bh * n + i, -1, 1);
  }
  for (size_t i = 0; i < N; i++) beta[i] = camdelta_random_value(S_BETA, bh * N + i, 0, 1);
  for (size_t i = 0; i < F; i++) decay[i] = camdelta_random_value(S_DECAY, bh * F + i, 0.9f, 1);
  camdelta_ref_scan r = {1, 1, D, F, S, s->reverse, q, k, v, beta, decay, NULL, out, fin, NULL, NULL};
  if (camdelta_ref_scan_forward(&r) != CAMDELTA_OK) {
    s->err_out = s->err_fin = INFINITY;
  } else {
    err_acc eo = {0, 0}, ef = {0, 0};
    for (size_t i = 0; i < n; i++) acc(&eo, s->out[i], out[i]);
    for (size_t i = 0; i < D * D; i++) acc(&ef, s->fin[i], fin[i]);
    s->err_out = rel(&eo), s->err_fin = rel(&ef);
  }
  free(q), free(k), free(v), free(beta), free(decay), free(out), free(fin);
  return 0;
}

static int run_scan(int nsamples, double *worst) {
  const double t0 = now_s();
  cl_mem q = dev_alloc(T * 4, "q"), k = dev_alloc(T * 4, "k"), v = dev_alloc(T * 4, "v"), o = dev_alloc(T * 4, "out");
  cl_mem beta = dev_alloc(B * H * N * 4, "beta"), decay = dev_alloc(B * H * F * 4, "decay");
  cl_mem fin = dev_alloc(B * H * D * D * 4, "final_state");
  /* the scales of the seed's prep outputs: |k|^2 about 1/S per token, so a frame's update stays contracting */
  g_kamp = (float)sqrt(3.0 / ((double)D * (double)S));
  fill(q, T, S_Q, -1, 1), fill(k, T, S_K, -g_kamp, g_kamp), fill(v, T, S_V, -1, 1);
  fill(beta, B * H * N, S_BETA, 0, 1), fill(decay, B * H * F, S_DECAY, 0.9f, 1);
  CHECK(camdelta_finish(g_ctx));
  printf("scan: inputs generated on the device in %.2f s\n", now_s() - t0);
  fflush(stdout);
  size_t sb[8], sh[8];
  int ns = 0;
  sb[ns] = B - 1, sh[ns++] = H - 1; /* the farthest past 2^31 */
  if (nsamples > 1) sb[ns] = 0, sh[ns++] = 0;
  for (int i = 2; i < nsamples && ns < 8; i++) sb[ns] = (size_t)i % B, sh[ns++] = (size_t)(7 * i + 3) % H;
  scan_sample smp[16];
  int nsmp = 0, ok = 1;
  for (int reverse = 0; reverse < 2; reverse++) {
    camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
    a.B = B, a.H = H, a.D = D, a.F = F, a.S = S, a.reverse = reverse, a.algorithm = CAMDELTA_SCAN_AUTO;
    a.q = (camdelta_buffer){q, 0}, a.k = (camdelta_buffer){k, 0}, a.v = (camdelta_buffer){v, 0};
    a.beta = (camdelta_buffer){beta, 0}, a.decay = (camdelta_buffer){decay, 0}, a.out = (camdelta_buffer){o, 0};
    a.final_state = (camdelta_buffer){fin, 0};
    camdelta_profile prof = {0, 0};
    camdelta_scan_algorithm used = CAMDELTA_SCAN_AUTO;
    a.profile = &prof, a.used = &used;
    CHECK(camdelta_scan_forward(g_ctx, &a, NULL));
    printf("[ measure  ] large scan %s (%s) kernel ms = %.3f\n", reverse ? "reverse" : "causal",
           camdelta_scan_algorithm_name(used), prof.kernel_ms);
    fflush(stdout);
    for (int i = 0; i < ns; i++) {
      scan_sample *s = &smp[nsmp++];
      s->b = sb[i], s->h = sh[i], s->reverse = reverse;
      s->out = xmalloc(D * N * sizeof(float)), s->fin = xmalloc(D * D * sizeof(float));
      read_range(o, (s->b * H + s->h) * D * N, D * N, s->out);
      read_range(fin, (s->b * H + s->h) * D * D, D * D, s->fin);
    }
  }
  const double t1 = now_s();
  thrd_t th[16];
  for (int i = 0; i < nsmp; i++)
    if (thrd_create(&th[i], scan_ref_worker, &smp[i]) != thrd_success) {
      fprintf(stderr, "large_sizes: cannot start a thread\n");
      exit(2);
    }
  for (int i = 0; i < nsmp; i++) thrd_join(th[i], NULL);
  for (int i = 0; i < nsmp; i++) {
    scan_sample *s = &smp[i];
    printf("scan %s b=%zu h=%zu (elements from %zu): out rel err %.3g, final_state rel err %.3g\n",
           s->reverse ? "reverse" : "causal ", s->b, s->h, (s->b * H + s->h) * D * N, s->err_out, s->err_fin);
    const double e = fmax(s->err_out, s->err_fin);
    if (e > *worst || isnan(e)) *worst = e;
    if (!(e <= 1e-5)) ok = 0;
    free(s->out), free(s->fin);
  }
  printf("scan: f64 reference of %d sequences in %.1f s\n", nsmp, now_s() - t1);
  printf("[ measure  ] large scan rel err (%d sequences, both directions) = %.3g\n", nsmp, *worst);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(o);
  clReleaseMemObject(beta), clReleaseMemObject(decay), clReleaseMemObject(fin);
  return ok;
}

int main(int argc, char **argv) {
  B = 3, H = 32, D = 128, F = 61, S = 3600;
  int nsamples = 3;
  for (int i = 1; i < argc; i++) {
    unsigned long long v[5];
    char tail;
    if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
        sscanf(argv[i + 1], "%llu,%llu,%llu,%llu,%llu%c", &v[0], &v[1], &v[2], &v[3], &v[4], &tail) == 5 &&
        argv[i + 1][0] != '-' && !strchr(argv[i + 1], '-')) {
      B = (size_t)v[0], H = (size_t)v[1], D = (size_t)v[2], F = (size_t)v[3], S = (size_t)v[4];
      i++;
    } else if (!strcmp(argv[i], "--scan-samples") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
               atoi(argv[i + 1]) <= 8) {
      nsamples = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: cd_large_sizes [--shape B,H,D,F,S] [--scan-samples 1..8]\n");
      return 2;
    }
  }
  N = F * S, C = H * D, Dh = D / 2, T = B * H * D * N;
  if (!B || !H || !D || !F || !S || N / S != F || T / N != B * H * D) {
    fprintf(stderr, "large_sizes: bad shape\n");
    return 2;
  }
  CHECK(camdelta_context_create(&g_ctx, NULL));
  camdelta_device_info info;
  CHECK(camdelta_context_info(g_ctx, &info));
  cl_ulong max_alloc = 0;
  clGetDeviceInfo(camdelta_context_device(g_ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  printf("large sizes on %s (%s): B=%zu H=%zu D=%zu F=%zu S=%zu N=%zu: %zu elements per (B, H, D, N) tensor "
         "(2^31 = %zu), %.2f GB each; device memory %.1f GB, largest allocation %.1f GB\n",
         info.device_name, info.platform_name, B, H, D, F, S, N, T, (size_t)1 << 31, T * 4 / 1e9,
         (double)info.global_mem_bytes / 1e9, (double)max_alloc / 1e9);
  if ((double)T * 4 > (double)max_alloc || (double)T * 4 * 6.2 > (double)info.global_mem_bytes) {
    fprintf(stderr, "large_sizes: the device cannot hold 6 tensors of %.2f GB\n", T * 4 / 1e9);
    return 2;
  }
  fflush(stdout);
  const double t0 = now_s();
  double wp = 0, ws = 0;
  const int okp = run_prep(&wp);
  const int oks = run_scan(nsamples, &ws);
  printf("large sizes: prep worst rel err %.3g (bound 1e-6) %s, scan worst rel err %.3g (bound 1e-5) %s, %.1f s\n",
         wp, okp ? "PASS" : "FAIL", ws, oks ? "PASS" : "FAIL", now_s() - t0);
  camdelta_context_destroy(g_ctx);
  return okp && oks ? 0 : 1;
}
