/* camdelta demo --stream (docs/streaming.md): a long camera path (an orbit, then a dolly, then a pan) generated
 * block by block through a stream, as a block-autoregressive video model runs it: each block's inputs are made
 * when it comes (nothing of the video is kept but the stream), run through a few non-committing "denoising" steps,
 * then committed. Reports the per-block latency and memory along the path (flat in the number of blocks) and checks
 * a prefix of the frames against the one-shot branch (camdelta_branch_forward) and the f64 stream reference. With
 * --dtype f16|bf16 the activations (q_raw, k_raw, v_raw, y) travel in 16 bits: the host rounds them, so that the
 * references see what the device sees (docs/math.md §8.7's bounds apply). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "camdelta_stream.h"
#include "cli_common.h"
#include "cli_stream.h"
#include "usage.h"

enum { PATCH = 16, CIN = 16 }; /* image pixels per token along each axis; token features projected to Q, K, V */
enum { BQ, BK, BV, BCC, BBETA, BDECAY, BY, NBLK };

typedef struct sdemo {
  size_t B, H, D, F, S, Hs, Ws, cs, denoise, check;
  camdelta_chunk_strategy strategy;
  camdelta_dtype dt; /* of the activations */
  size_t es;
  unsigned long long rng;
  const char *device;
  size_t C, most;
  float *w[3], *proj;         /* conv_weight, q_norm_weight, k_norm_weight; the Q/K/V projections (3, CIN, C) */
  float *blk[NBLK];           /* one block's host tensors (activations rounded to dt) */
  void *bits;                 /* one block's activation in dt, as the device holds it */
  float *pre[NBLK];           /* the checked prefix's inputs and stream y, (B, P frames) each */
  camdelta_context *ctx;
  cl_mem dw[3], dblk[NBLK];
} sdemo;

static double unif(sdemo *s) {
  s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
  return (double)(s->rng >> 11) / 9007199254740992.0;
}
static double gauss(sdemo *s) { return sqrt(-2 * log(unif(s) + 1e-300)) * cos(6.283185307179586 * unif(s)); }

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Frame f of F's camera: an orbit of radius 3 around the origin over the first third, a dolly towards it (radius 3
 * to 1.5) over the second, a pan (the camera turns in place, 0.6 rad) over the last. */
static void path(const sdemo *s, size_t f, float *cc) {
  const double t = (double)f / (double)(s->F > 1 ? s->F - 1 : 1), third = 1.0 / 3.0;
  double a, r, yaw = 0;
  if (t < third) a = -0.8 + 1.6 * t / third, r = 3.0;
  else if (t < 2 * third) a = 0.8, r = 3.0 - 1.5 * (t - third) / third;
  else a = 0.8, r = 1.5, yaw = 0.6 * (t - 2 * third) / third;
  const double c[3] = {r * sin(a), 0.4, -r * cos(a)};
  cli_look_at_origin(c, yaw, cc);
  const double W = (double)(s->Ws * PATCH), Hh = (double)(s->Hs * PATCH);
  cc[16] = cc[17] = (float)(0.9 * W), cc[18] = (float)(W / 2), cc[19] = (float)(Hh / 2);
}

static int is_act(int i) { return i == BQ || i == BK || i == BV || i == BY; }

/* n floats of x rounded to dt in place, their dt elements into bits (f32: x itself is what the device holds). */
static void round_to(camdelta_dtype dt, float *x, void *bits, size_t n) {
  uint16_t *h = bits;
  for (size_t i = 0; i < n && dt != CAMDELTA_F32; i++) {
    h[i] = dt == CAMDELTA_F16 ? camdelta_f32_to_f16(x[i]) : camdelta_f32_to_bf16(x[i]);
    x[i] = dt == CAMDELTA_F16 ? camdelta_f16_to_f32(h[i]) : camdelta_bf16_to_f32(h[i]);
  }
}

/* The device's n elements of dt in bits, widened into x. */
static void widen(camdelta_dtype dt, const void *bits, float *x, size_t n) {
  const uint16_t *h = bits;
  for (size_t i = 0; i < n && dt != CAMDELTA_F32; i++)
    x[i] = dt == CAMDELTA_F16 ? camdelta_f16_to_f32(h[i]) : camdelta_bf16_to_f32(h[i]);
}

/* Frames [f0, f0 + Tb) on the host: Q/K/V random projections of random token features, the cameras, gates. */
static void make_block(sdemo *s, size_t f0, size_t Tb) {
  const size_t C = s->C, n = s->B * Tb * s->S;
  float x[CIN];
  for (size_t i = 0; i < n; i++) {
    for (int k = 0; k < CIN; k++) x[k] = (float)gauss(s);
    for (int t = 0; t < 3; t++)
      for (size_t c = 0; c < C; c++) {
        double acc = 0;
        for (int k = 0; k < CIN; k++) acc += (double)x[k] * s->proj[(t * CIN + k) * C + c];
        s->blk[BQ + t][i * C + c] = (float)acc;
      }
  }
  for (size_t b = 0; b < s->B; b++)
    for (size_t f = 0; f < Tb; f++) path(s, f0 + f, s->blk[BCC] + (b * Tb + f) * 20);
  for (size_t i = 0; i < s->B * s->H * Tb * s->S; i++) s->blk[BBETA][i] = (float)(1.0 / (1.0 + exp(-gauss(s))));
  for (size_t i = 0; i < s->B * s->H * Tb; i++) s->blk[BDECAY][i] = (float)(0.85 + 0.15 * unif(s));
}

/* Per block element counts of tensor i for Tb frames (per batch row: `row`, rows: `rows`). */
static void shape_of(const sdemo *s, int i, size_t Tb, size_t *rows, size_t *row) {
  const size_t fs[NBLK] = {s->S * s->C, s->S * s->C, s->S * s->C, 20, s->S, 1, s->S * s->C};
  *rows = i == BBETA || i == BDECAY ? s->B * s->H : s->B;
  *row = Tb * fs[i];
}

static int parse(int argc, char **argv, sdemo *s, int *done) {
  cli_args a = {argc, argv, 0};
  const char *v;
  cli_shape sh = {.name = NULL, .B = 1, .H = 2, .D = 32, .F = 301, .S = 48};
  s->cs = 3, s->denoise = 4, s->check = 31;
  s->strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE;
  s->dt = CAMDELTA_F32;
  s->rng = 88172645463325252ull;
  while (a.i < argc) {
    int r;
    if (cli_flag(&a, "--stream")) continue;
    if ((r = cli_demo_option(&a, &sh, &s->strategy, &s->device, &s->rng))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--chunk-size", &v))) {
      if (r < 0 || !cli_parse_count("--chunk-size", v, 1, 4096, &s->cs)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--dtype", &v))) {
      if (r < 0 || cli_parse_dtype("demo --stream", v, &s->dt)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--denoise", &v))) {
      if (r < 0 || !cli_parse_count("--denoise", v, 0, 1000, &s->denoise)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--check-frames", &v))) {
      if (r < 0 || !cli_parse_count("--check-frames", v, 0, 1u << 20, &s->check)) return CLI_EXIT_USAGE;
    } else {
      *done = cli_help_or_unknown(&a, "demo --stream", "demo", usage_demo);
      return *done ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
  }
  s->B = sh.B, s->H = sh.H, s->D = sh.D, s->F = sh.F, s->S = sh.S;
  size_t blocks;
  if (s->check > s->F) s->check = s->F;
  if (s->check && !cli_stream_tiles(s->check, s->cs, s->strategy, &blocks))
    return cli_error(CLI_EXIT_USAGE, "demo --stream: --check-frames %zu is not a whole number of blocks (%s, chunk "
                     "size %zu)", s->check, camdelta_chunk_strategy_name(s->strategy), s->cs);
  if (!cli_stream_tiles(s->F, s->cs, s->strategy, &blocks))
    return cli_error(CLI_EXIT_USAGE, "demo --stream: F = %zu frames is not a whole number of blocks (%s, chunk size "
                     "%zu)", s->F, camdelta_chunk_strategy_name(s->strategy), s->cs);
  cli_grid_of(s->S, &s->Hs, &s->Ws);
  s->C = s->H * s->D, s->most = s->cs + 1, s->es = camdelta_dtype_size(s->dt);
  return CLI_EXIT_OK;
}

/* Host and device memory: fixed by the block's size and the checked prefix, never by F. */
static int allocate(sdemo *s) {
  cli_budget bud = {0, 0, 0, 0};
  size_t rows, row, n[NBLK], p[NBLK];
  int ok = 1;
  for (int i = 0; i < NBLK; i++) {
    shape_of(s, i, s->most, &rows, &row);
    ok &= camdelta_size_mul(&n[i], rows, row);
    shape_of(s, i, s->check, &rows, &row);
    ok &= camdelta_size_mul(&p[i], rows, row);
    cli_budget_device(&bud, 1, n[i], is_act(i) ? s->es : 4);
    cli_budget_host(&bud, 2, n[i] + p[i], 4);
  }
  cli_budget_host(&bud, 1, n[BQ], s->es); /* bits */
  if (!ok) bud.overflow = 1;
  int rc = cli_budget_check(&bud, s->ctx, "demo --stream: this shape");
  if (rc) return rc;
  for (int i = 0; i < NBLK; i++)
    if (!(s->blk[i] = calloc(n[i], 4)) || !(s->pre[i] = calloc(p[i] ? p[i] : 1, 4)))
      return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  if (!(s->bits = malloc(n[BQ] * s->es))) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  const size_t wn[3] = {4 * s->C, s->C, s->C};
  for (int i = 0; i < 3; i++)
    if (!(s->w[i] = malloc(wn[i] * 4))) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  if (!(s->proj = malloc(3 * CIN * s->C * 4))) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  for (size_t i = 0; i < 3 * CIN * s->C; i++) s->proj[i] = (float)(gauss(s) / sqrt((double)CIN));
  for (size_t i = 0; i < 4 * s->C; i++) s->w[0][i] = (float)(0.3 * gauss(s));
  for (size_t c = 0; c < s->C; c++) s->w[1][c] = (float)(0.8 + 0.4 * unif(s)), s->w[2][c] = (float)(0.8 + 0.4 * unif(s));
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
    s->dw[i] = clCreateBuffer(camdelta_context_cl_context(s->ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              wn[i] * 4, s->w[i], &err);
  for (int i = 0; i < NBLK && err == CL_SUCCESS; i++)
    s->dblk[i] = clCreateBuffer(camdelta_context_cl_context(s->ctx), CL_MEM_READ_WRITE,
                                n[i] * (is_act(i) ? s->es : 4), NULL, &err);
  return err == CL_SUCCESS ? CLI_EXIT_OK
                           : cli_error(CLI_EXIT_DEVICE, "demo: allocating device memory: %s", camdelta_cl_error_name(err));
}

static double rel_err(const float *x, const double *ref, size_t n) {
  double m = 0, e = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) e = fmax(e, isfinite(x[i]) ? fabs(x[i] - ref[i]) : INFINITY);
  return e / fmax(m, 1e-30);
}

/* The prefix [0, P) through camdelta_branch_forward (where its conv segments are its chunks, docs/math.md §8.2)
 * and through the f64 stream reference, against the stream's y. */
static int check_prefix(sdemo *s, const camdelta_stream_args *sa, double *e_branch, double *e_ref, int *branch_ok) {
  const size_t P = s->check, N = P * s->S, BNC = s->B * N * s->C;
  const camdelta_chunking ch = {s->cs, s->strategy, NULL, 0};
  size_t cb[2][4097], nb[2];
  *e_branch = -1, *branch_ok = 0;
  camdelta_status st = CAMDELTA_OK;
  if (P <= 4096 && !camdelta_chunk_bounds(P, &ch, cb[0], 4097, &nb[0]) &&
      !camdelta_conv_bounds(P, &ch, cb[1], 4097, &nb[1]) && nb[0] == nb[1] &&
      memcmp(cb[0], cb[1], nb[0] * sizeof cb[0][0]) == 0) {
    cl_mem d[NBLK];
    cl_int err = CL_SUCCESS;
    size_t rows, row;
    void *bits = malloc(BNC * s->es); /* a prefix activation in dt (the stream's inputs were rounded: exact) */
    if (!bits) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
    for (int i = 0; i < NBLK && err == CL_SUCCESS; i++) {
      shape_of(s, i, P, &rows, &row);
      const int act = is_act(i) && s->dt != CAMDELTA_F32;
      if (act && i != BY) round_to(s->dt, s->pre[i], bits, rows * row);
      void *from = i == BY ? NULL : act ? bits : (void *)s->pre[i];
      d[i] = clCreateBuffer(camdelta_context_cl_context(s->ctx),
                            i == BY ? CL_MEM_READ_WRITE : CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            rows * row * (is_act(i) ? s->es : 4), from, &err);
    }
    if (err != CL_SUCCESS) {
      free(bits);
      return cli_error(CLI_EXIT_DEVICE, "demo: %s", camdelta_cl_error_name(err));
    }
    const camdelta_branch_args a = {
        .B = s->B, .T = P, .Hs = s->Hs, .Ws = s->Ws, .H = s->H, .D = s->D, .pt = 1, .ph = PATCH, .pw = PATCH,
        .chunking = ch, .k_scale = sa->k_scale, .norm_eps = sa->norm_eps, .q_raw = {d[BQ], 0}, .k_raw = {d[BK], 0},
        .v_raw = {d[BV], 0}, .conv_weight = {s->dw[0], 0}, .q_norm_weight = {s->dw[1], 0},
        .k_norm_weight = {s->dw[2], 0}, .camera_conditions = {d[BCC], 0}, .beta = {d[BBETA], 0},
        .decay = {d[BDECAY], 0}, .y = {d[BY], 0}, .dtype = s->dt};
    float *y = malloc(BNC * 4);
    void *ybits = s->dt == CAMDELTA_F32 ? (void *)y : bits;
    st = camdelta_branch_forward(s->ctx, &a, NULL);
    if (!st && y) st = camdelta_finish(s->ctx);
    if (!st && y && clEnqueueReadBuffer(camdelta_context_queue(s->ctx), d[BY], CL_TRUE, 0, BNC * s->es, ybits, 0,
                                        NULL, NULL) != CL_SUCCESS)
      st = CAMDELTA_ERROR_OPENCL;
    if (!st && y) {
      widen(s->dt, ybits, y, BNC);
      double *y64 = malloc(BNC * 8);
      for (size_t i = 0; y64 && i < BNC; i++) y64[i] = y[i];
      if (y64) *e_branch = rel_err(s->pre[BY], y64, BNC), *branch_ok = 1;
      free(y64);
    }
    free(y), free(bits);
    for (int i = 0; i < NBLK; i++) clReleaseMemObject(d[i]);
    if (st) return cli_lib_error(st, "demo: the one-shot branch over the prefix");
  }
  double *in[NBLK - 1], *ref = malloc(BNC * 8), *w64[3];
  const size_t wn[3] = {4 * s->C, s->C, s->C};
  int ok = ref != NULL;
  for (int i = 0; i < NBLK - 1; i++) {
    size_t rows, row;
    shape_of(s, i, P, &rows, &row);
    in[i] = malloc(rows * row * 8);
    ok &= in[i] != NULL;
    for (size_t k = 0; in[i] && k < rows * row; k++) in[i][k] = s->pre[i][k];
  }
  for (int i = 0; i < 3; i++) {
    w64[i] = malloc(wn[i] * 8);
    ok &= w64[i] != NULL;
    for (size_t k = 0; w64[i] && k < wn[i]; k++) w64[i][k] = s->w[i][k];
  }
  if (ok) {
    const camdelta_ref_branch r = {
        .B = s->B, .T = P, .Hs = s->Hs, .Ws = s->Ws, .ph = PATCH, .pw = PATCH, .H = s->H, .D = s->D,
        .chunking = ch, .k_scale = sa->k_scale, .norm_eps = sa->norm_eps, .q_raw = in[BQ], .k_raw = in[BK],
        .v_raw = in[BV], .conv_weight = w64[0], .q_norm_weight = w64[1], .k_norm_weight = w64[2],
        .camera_conditions = in[BCC], .beta = in[BBETA], .decay = in[BDECAY], .y = ref};
    st = camdelta_ref_stream_forward(&r);
    if (!st) *e_ref = rel_err(s->pre[BY], ref, BNC);
  }
  for (int i = 0; i < NBLK - 1; i++) free(in[i]);
  for (int i = 0; i < 3; i++) free(w64[i]);
  free(ref);
  if (!ok) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  return st ? cli_lib_error(st, "demo: the f64 stream reference") : CLI_EXIT_OK;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *x, size_t n) {
  double *c = malloc((n ? n : 1) * sizeof *c);
  if (!c || !n) return free(c), 0;
  memcpy(c, x, n * sizeof *c);
  qsort(c, n, sizeof *c, cmp_double);
  const double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  free(c);
  return m;
}

static int run(sdemo *s) {
  camdelta_device_info info;
  camdelta_context_info(s->ctx, &info);
  const camdelta_stream_args sa = {.B = s->B, .H = s->H, .D = s->D, .Hs = s->Hs, .Ws = s->Ws, .pt = 1, .ph = PATCH,
                                   .pw = PATCH, .chunk_size = s->cs, .strategy = s->strategy,
                                   .k_scale = (float)(1.0 / sqrt((double)s->D * (double)s->S)), .norm_eps = 1e-6f,
                                   .dtype = s->dt, .algorithm = CAMDELTA_SCAN_AUTO,
                                   .conv_weight = {s->dw[0], 0}, .q_norm_weight = {s->dw[1], 0},
                                   .k_norm_weight = {s->dw[2], 0}};
  size_t nblocks;
  cli_stream_tiles(s->F, s->cs, s->strategy, &nblocks);
  printf("camdelta demo --stream %s\n", camdelta_version_string());
  printf("device   %s (%s, %s)\n", info.device_name, info.platform_name, info.driver_version);
  printf("shape    B=%zu H=%zu D=%zu S=%zu as a %zux%zu grid, %zu frames in %zu blocks (%s, chunk size %zu), %s\n",
         s->B, s->H, s->D, s->S, s->Hs, s->Ws, s->F, nblocks, camdelta_chunk_strategy_name(s->strategy), s->cs,
         camdelta_dtype_name(s->dt));
  printf("cameras  orbit, then dolly, then pan (frames 0-%zu, %zu-%zu, %zu-%zu); %zu non-committing steps per block\n",
         s->F / 3, s->F / 3 + 1, 2 * s->F / 3, 2 * s->F / 3 + 1, s->F - 1, s->denoise);
  camdelta_stream *st = NULL;
  camdelta_status cs = camdelta_stream_create(s->ctx, &sa, &st);
  if (cs) return cli_lib_error(cs, "demo: camdelta_stream_create");
  double *wall = calloc(nblocks, sizeof *wall), *kern = calloc(nblocks, sizeof *kern), *rss = calloc(nblocks, 8);
  int rc = wall && kern && rss ? CLI_EXIT_OK : cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  const camdelta_buffer b[NBLK] = {{s->dblk[0], 0}, {s->dblk[1], 0}, {s->dblk[2], 0}, {s->dblk[3], 0},
                                   {s->dblk[4], 0}, {s->dblk[5], 0}, {s->dblk[6], 0}};
  printf("\n%8s %8s %12s %14s %12s %14s\n", "block", "frames", "wall ms", "commit kernel", "stream MiB",
         "resident MiB");
  for (size_t k = 0; k < nblocks && !rc; k++) {
    const size_t f0 = camdelta_stream_frames(st), Tb = camdelta_stream_next_frames(st);
    make_block(s, f0, Tb);
    const double t0 = now_ms();
    cl_int err = CL_SUCCESS;
    size_t rows, row;
    for (int i = 0; i < BY && err == CL_SUCCESS; i++) {
      shape_of(s, i, Tb, &rows, &row);
      const int bits = is_act(i) && s->dt != CAMDELTA_F32; /* rounded in place, sent from s->bits (blocking) */
      if (bits) round_to(s->dt, s->blk[i], s->bits, rows * row);
      err = clEnqueueWriteBuffer(camdelta_context_queue(s->ctx), s->dblk[i], bits ? CL_TRUE : CL_FALSE, 0,
                                 rows * row * (is_act(i) ? s->es : 4), bits ? s->bits : (void *)s->blk[i], 0, NULL,
                                 NULL);
    }
    if (err != CL_SUCCESS) rc = cli_error(CLI_EXIT_DEVICE, "demo: %s", camdelta_cl_error_name(err));
    camdelta_profile prof = {0, 0};
    camdelta_stream_step_args a = {.frames = Tb, .q_raw = b[BQ], .k_raw = b[BK], .v_raw = b[BV],
                                   .camera_conditions = b[BCC], .beta = b[BBETA], .decay = b[BDECAY], .y = b[BY]};
    for (size_t r = 0; r <= s->denoise && !rc; r++) {
      a.commit = r == s->denoise, a.profile = a.commit ? &prof : NULL;
      if ((cs = camdelta_stream_step(s->ctx, st, &a))) rc = cli_lib_error(cs, "demo: camdelta_stream_step");
    }
    shape_of(s, BY, Tb, &rows, &row);
    void *ybits = s->dt == CAMDELTA_F32 ? (void *)s->blk[BY] : s->bits;
    if (!rc && clEnqueueReadBuffer(camdelta_context_queue(s->ctx), s->dblk[BY], CL_TRUE, 0, rows * row * s->es, ybits,
                                   0, NULL, NULL) != CL_SUCCESS)
      rc = cli_error(CLI_EXIT_DEVICE, "demo: reading y");
    if (!rc) widen(s->dt, ybits, s->blk[BY], rows * row);
    wall[k] = now_ms() - t0, kern[k] = prof.kernel_ms, rss[k] = cli_rss_mib();
    if (!rc && f0 < s->check) /* keep the prefix: its inputs and the stream's y, frames [f0, f0 + Tb) of P */
      for (int i = 0; i < NBLK; i++) {
        size_t rr, rw;
        shape_of(s, i, 1, &rr, &rw); /* rw: one frame's elements per row */
        for (size_t q = 0; q < rr; q++)
          memcpy(s->pre[i] + (q * s->check + f0) * rw, s->blk[i] + q * Tb * rw, Tb * rw * 4);
      }
    if (!rc && (k < 3 || k + 1 == nblocks || (k + 1) % (nblocks / 8 ? nblocks / 8 : 1) == 0))
      printf("%8zu %8zu %12.2f %14.3f %12.2f %14.1f\n", k + 1, f0 + Tb, wall[k], kern[k],
             (double)camdelta_stream_device_bytes(st) / 1048576.0, rss[k]);
  }
  int pass = !rc;
  if (!rc) {
    const size_t q = nblocks / 4 ? nblocks / 4 : 1;
    const double first = median(wall + (nblocks > 4 ? 1 : 0), q), last = median(wall + nblocks - q, q);
    const double kfirst = median(kern + (nblocks > 4 ? 1 : 0), q), klast = median(kern + nblocks - q, q);
    printf("\nlatency  per block (median of %zu blocks): first quarter %.2f ms wall, %.3f ms kernel; last quarter "
           "%.2f ms wall, %.3f ms kernel (last/first %.2f)\n", q, first, kfirst, last, klast, last / first);
    printf("memory   stream %.2f MiB on the device, fixed; process resident %.1f MiB after block 1, %.1f MiB after "
           "block %zu\n", (double)camdelta_stream_device_bytes(st) / 1048576.0, rss[0], rss[nblocks - 1], nblocks);
    double eb = -1, er = -1;
    int branch_ok = 0;
    if (s->check) rc = check_prefix(s, &sa, &eb, &er, &branch_ok);
    if (!rc && s->check) {
      /* docs/math.md §5 (f32) and §8.7 (16-bit activations, against the reference fed the same rounded inputs) */
      const double bound = s->dt == CAMDELTA_F32 ? 1e-5 : s->dt == CAMDELTA_F16 ? 2e-3 : 1.6e-2;
      const int okr = er >= 0 && er <= bound, okb = !branch_ok || eb <= bound;
      pass = okr && okb;
      printf("check    frames 0-%zu: the stream vs the f64 stream reference %.1e%s", s->check - 1, er,
             okr ? "" : " FAIL");
      if (branch_ok) printf(", vs camdelta_branch_forward %.1e%s", eb, okb ? "" : " FAIL");
      else printf(" (the one-shot branch's conv segments are not the blocks here: not compared)");
      printf("\nresult   %s (bound %g)\n", pass ? "PASS" : "FAIL", bound);
    }
  }
  free(wall), free(kern), free(rss);
  camdelta_stream_destroy(st);
  return rc ? rc : pass ? CLI_EXIT_OK : 5;
}

int cmd_demo_stream(int argc, char **argv) {
  sdemo *s = calloc(1, sizeof *s);
  if (!s) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  int done = 0, rc = parse(argc, argv, s, &done);
  if (!rc && !done) rc = cli_context(&s->ctx, s->device);
  if (!rc && !done) rc = allocate(s);
  if (!rc && !done) rc = run(s);
  for (int i = 0; i < NBLK; i++) {
    free(s->blk[i]), free(s->pre[i]);
    if (s->dblk[i]) clReleaseMemObject(s->dblk[i]);
  }
  for (int i = 0; i < 3; i++) {
    free(s->w[i]);
    if (s->dw[i]) clReleaseMemObject(s->dw[i]);
  }
  free(s->proj), free(s->bits);
  if (s->ctx) camdelta_context_destroy(s->ctx);
  free(s);
  return rc;
}
