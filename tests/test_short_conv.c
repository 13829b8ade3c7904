/* Chunk bounds (docs/math.md §8.4) against values from camref.py, and the short conv on K (docs/math.md §8.2) on the
 * device against the f64 reference, forward and backward; the reference backward against finite differences; no
 * look-ahead across a segment end; determinism; bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_problem.h"
#include "runtime/internal.h"

/* One row of tests/golden/chunk-bounds.txt: camref.chunk_bounds(T, cs, strategy), strategy 0 uniform, 1 first_frame,
 * 2 first_chunk_plus_one. */
typedef struct bounds_case {
  size_t T, cs;
  int strategy;
  size_t n, b[24];
} bounds_case;

/* The rows of the golden file (at most `max`); fails the test on a malformed row. */
static size_t read_bounds(bounds_case *cases, size_t max) {
  const char *src = getenv("CAMDELTA_SOURCE_DIR");
  if (!src) fail_msg("CAMDELTA_SOURCE_DIR is not set: run through ctest");
  char path[1024], line[512];
  snprintf(path, sizeof path, "%s/tests/golden/chunk-bounds.txt", src);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot read %s", path);
  size_t count = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    assert_true(count < max);
    bounds_case *c = &cases[count++];
    int at = 0;
    if (sscanf(line, "%zu %zu %d:%n", &c->T, &c->cs, &c->strategy, &at) != 3) fail_msg("%s: bad row: %s", path, line);
    c->n = 0;
    for (int used = 0; c->n < 24 && sscanf(line + at, "%zu%n", &c->b[c->n], &used) == 1; at += used) c->n++;
    if (c->n < 2) fail_msg("%s: a row without bounds: %s", path, line);
  }
  fclose(f);
  return count;
}

static void test_chunk_bounds(void **state) {
  (void)state;
  static bounds_case cases[512];
  const size_t ncases = read_bounds(cases, 512);
  assert_true(ncases >= 100);
  for (size_t i = 0; i < ncases; i++) {
    const bounds_case *c = &cases[i];
    const camdelta_chunking ch = {c->cs, (camdelta_chunk_strategy)c->strategy, NULL, 0};
    size_t b[32], n = 0;
    TU_OK(camdelta_chunk_bounds(c->T, &ch, b, 32, &n));
    if (n != c->n || memcmp(b, c->b, n * sizeof *b) != 0)
      fail_msg("T=%zu cs=%zu %s: %zu bounds, expected %zu", c->T, c->cs,
               camdelta_chunk_strategy_name((camdelta_chunk_strategy)c->strategy), n, c->n);
    /* conv: uniform when T % cs == 0, one segment when cs >= T, else the scan's bounds */
    TU_OK(camdelta_conv_bounds(c->T, &ch, b, 32, &n));
    if (c->cs >= c->T) {
      assert_int_equal(n, 2);
      assert_int_equal(b[1], c->T);
    } else if (c->T % c->cs == 0) {
      assert_int_equal(n, c->T / c->cs + 1);
      for (size_t j = 0; j < n; j++) assert_int_equal(b[j], j * c->cs);
    } else {
      assert_int_equal(n, c->n);
      assert_memory_equal(b, c->b, n * sizeof *b);
    }
  }
  /* no chunking: one chunk */
  size_t b[32], n = 0;
  TU_OK(camdelta_chunk_bounds(7, NULL, b, 32, &n));
  assert_int_equal(n, 2);
  assert_int_equal(b[1], 7);
  /* an explicit chunk_index: the scan's chunks; the conv stays bidirectional without a chunk_size */
  const int64_t idx[3] = {0, 2, 5};
  camdelta_chunking ch = {0, CAMDELTA_CHUNK_UNIFORM, idx, 3};
  TU_OK(camdelta_chunk_bounds(7, &ch, b, 32, &n));
  assert_int_equal(n, 4);
  assert_int_equal(b[1], 2);
  assert_int_equal(b[2], 5);
  assert_int_equal(b[3], 7);
  TU_OK(camdelta_conv_bounds(7, &ch, b, 32, &n));
  assert_int_equal(n, 2);
  ch.chunk_size = 3; /* 7 % 3 != 0: the conv follows the chunk_index */
  TU_OK(camdelta_conv_bounds(7, &ch, b, 32, &n));
  assert_int_equal(n, 4);
  assert_int_equal(b[2], 5);
  /* bad chunk_index: not increasing, out of range, not starting at 0; too small an output */
  const int64_t bad1[3] = {0, 3, 3}, bad2[3] = {0, 2, 7}, bad3[2] = {1, 3};
  const int64_t *bads[3] = {bad1, bad2, bad3};
  const size_t nbad[3] = {3, 3, 2};
  static const char *what[3] = {"increasing", "out of range", "expected 0"};
  for (int i = 0; i < 3; i++) {
    camdelta_chunking bc = {0, CAMDELTA_CHUNK_UNIFORM, bads[i], nbad[i]};
    n = 99;
    assert_int_equal(camdelta_chunk_bounds(7, &bc, b, 32, &n), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), what[i]));
    assert_int_equal(n, 99);
  }
  camdelta_chunking cs1 = {1, CAMDELTA_CHUNK_UNIFORM, NULL, 0};
  assert_int_equal(camdelta_chunk_bounds(7, &cs1, b, 4, &n), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  camdelta_chunking bad_strategy = {2, (camdelta_chunk_strategy)7, NULL, 0};
  assert_int_equal(camdelta_chunk_bounds(7, &bad_strategy, b, 32, &n), CAMDELTA_ERROR_INVALID_ARGUMENT);
}

typedef struct conv_shape {
  size_t B, T, S, C, cs;
  int strategy;
  int use_index;
  size_t off;
} conv_shape;

static const conv_shape shapes[] = {
    {2, 1, 5, 24, 0, 0, 0, 0},  {2, 2, 3, 16, 1, 0, 0, 1},  {1, 7, 5, 40, 3, 2, 0, 0}, {2, 7, 3, 8, 2, 1, 0, 2},
    {1, 21, 7, 24, 3, 2, 0, 0}, {2, 21, 2, 8, 3, 0, 0, 0},  {1, 7, 4, 16, 3, 0, 1, 0}, {1, 7, 4, 16, 0, 0, 1, 0},
    {2, 6, 3, 8, 2, 2, 0, 0},   {1, 5, 9, 16, 8, 1, 0, 0},  {1, 10, 17, 8, 4, 0, 0, 3},
};

static double worst_fwd = 0, worst_dx = 0, worst_dw = 0;

static void run_conv(const conv_shape *s) {
  camdelta_context *ctx = tu_context();
  const size_t total = s->B * s->T * s->S * s->C, C4 = 4 * s->C, off = s->off;
  static const int64_t idx[3] = {0, 2, 5};
  const camdelta_chunking ch = {s->cs, (camdelta_chunk_strategy)s->strategy, s->use_index ? idx : NULL,
                                s->use_index ? 3 : 0};
  float *x = malloc((total + off) * 4), *w = malloc(C4 * 4), *dy = malloc((total + off) * 4);
  tu_fill_normal(x, total + off, 1.0);
  tu_fill_normal(w, C4, 0.5);
  tu_fill_normal(dy, total + off, 1.0);
  cl_mem dx_in = tu_upload(x, (total + off) * 4), dw_in = tu_upload(w, C4 * 4), ddy = tu_upload(dy, (total + off) * 4);
  cl_mem y = tu_buffer((total + off) * 4), gx = tu_buffer((total + off) * 4), gw = tu_buffer((C4 + off) * 4);
  camdelta_profile prof = {0, 0};
  camdelta_short_conv_args a = {s->B,       s->T,        s->S,        s->C,      ch,       {dx_in, off},
                                {dw_in, 0}, {y, off},    {ddy, off},  {gx, off}, {gw, off}, &prof};
  TU_OK(camdelta_short_conv_forward(ctx, &a));
  assert_int_equal(prof.kernels, 1);
  TU_OK(camdelta_short_conv_backward(ctx, &a));
  assert_int_equal(prof.kernels, 2);

  size_t b[64], nb;
  TU_OK(camdelta_conv_bounds(s->T, &ch, b, 64, &nb));
  double *x64 = tu_to_f64(x + off, total), *w64 = tu_to_f64(w, C4), *dy64 = tu_to_f64(dy + off, total);
  double *ry = malloc(total * 8), *rdx = malloc(total * 8), *rdw = malloc(C4 * 8);
  const camdelta_ref_conv r = {s->B, s->T, s->S, s->C, b, nb, x64, w64, ry, dy64, rdx, rdw};
  TU_OK(camdelta_ref_short_conv_forward(&r));
  TU_OK(camdelta_ref_short_conv_backward(&r));
  float *got = malloc(total * 4);
  tu_download(y, off * 4, total * 4, got);
  const double ef = tu_rel_err(got, ry, total);
  tu_download(gx, off * 4, total * 4, got);
  const double ex = tu_rel_err(got, rdx, total);
  tu_download(gw, off * 4, C4 * 4, got);
  const double ew = tu_rel_err(got, rdw, C4);
  worst_fwd = fmax(worst_fwd, ef), worst_dx = fmax(worst_dx, ex), worst_dw = fmax(worst_dw, ew);
  if (ef > 1e-6 || ex > 1e-6 || ew > 1e-5)
    fail_msg("B=%zu T=%zu S=%zu C=%zu cs=%zu: conv rel err fwd %.3g dx %.3g dw %.3g", s->B, s->T, s->S, s->C, s->cs,
             ef, ex, ew);
  /* deterministic: a second backward gives the same bits */
  float *got2 = malloc(C4 * 4);
  TU_OK(camdelta_short_conv_backward(ctx, &a));
  tu_download(gw, off * 4, C4 * 4, got2);
  assert_memory_equal(got, got2, C4 * 4);
  free(got2);
  free(got), free(ry), free(rdx), free(rdw), free(x64), free(w64), free(dy64), free(x), free(w), free(dy);
  clReleaseMemObject(dx_in), clReleaseMemObject(dw_in), clReleaseMemObject(ddy), clReleaseMemObject(y);
  clReleaseMemObject(gx), clReleaseMemObject(gw);
}

/* Every shape in the device's own form, then in the work-group form (conv FORM=0: 4-channel vectors, aligned where
 * the offset is a multiple of 4, lane by lane elsewhere), which a CPU device does not pick by itself. */
static void test_conv_device(void **state) {
  (void)state;
  tu_seed(21);
  for (int form = 0; form < 2; form++) {
    if (form) TU_OK(camdelta_tune_set(tu_context(), "conv", "FORM=0"));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_conv(&shapes[i]);
  }
  TU_OK(camdelta_tune_set(tu_context(), "conv", NULL));
  tu_report("short conv forward max rel err", worst_fwd);
  tu_report("short conv dk_raw max rel err", worst_dx);
  tu_report("short conv dconv_weight max rel err", worst_dw);
}

/* Spatial positions per backward work-item (option "conv" SB): one position, and 3 (no divisor of most S here: a
 * short last block) give the same bounds on every shape, set through CAMDELTA_CONV_SB at context creation and through
 * camdelta_tune_set; values outside 1..64 or not a number fail the context creation with a message naming the
 * variable. */
static void test_conv_sb(void **state) {
  (void)state;
  tu_context_release();
  setenv("CAMDELTA_CONV_SB", "1", 1);
  assert_int_equal(cd_option(tu_context(), CD_OPT_CONV_SB, CAMDELTA_F32), 1u);
  unsetenv("CAMDELTA_CONV_SB");
  tu_seed(22);
  for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++) run_conv(&shapes[j]);
  TU_OK(camdelta_tune_set(tu_context(), "conv", "SB=3"));
  assert_int_equal(cd_option(tu_context(), CD_OPT_CONV_SB, CAMDELTA_F32), 3u);
  tu_seed(23);
  for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++) run_conv(&shapes[j]);
  TU_OK(camdelta_tune_set(tu_context(), "conv", NULL));
  static const char *const bad[] = {"0", "65", "x", "2x", "-1"};
  tu_check_bad_env("CAMDELTA_CONV_SB", bad, sizeof bad / sizeof bad[0]);
  assert_false(cd_opt_is_set(&tu_context()->opts, CD_OPT_CONV_SB));
  assert_int_equal(cd_option(tu_context(), CD_OPT_CONV_SB, CAMDELTA_F32),
                   cd_device_gpu_like(&tu_context()->info) ? 4u : 8u);
}

/* The reference backward against central differences of the reference forward (L = <dy, y>). */
static void test_conv_reference_fd(void **state) {
  (void)state;
  tu_seed(22);
  const size_t B = 1, T = 7, S = 2, C = 3, total = B * T * S * C;
  const size_t bounds[3] = {0, 4, 7};
  double x[42], w[12], dy[42], y[42], dx[42], dw[12];
  for (size_t i = 0; i < total; i++) x[i] = tu_normal(), dy[i] = tu_normal();
  for (size_t i = 0; i < 12; i++) w[i] = tu_normal();
  camdelta_ref_conv r = {B, T, S, C, bounds, 3, x, w, y, dy, dx, dw};
  TU_OK(camdelta_ref_short_conv_backward(&r));
  const double h = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < total + 12; i++) {
    double *p = i < total ? &x[i] : &w[i - total];
    const double keep = *p;
    double l[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      *p = keep + (sgn ? -h : h);
      TU_OK(camdelta_ref_short_conv_forward(&r));
      l[sgn] = 0;
      for (size_t j = 0; j < total; j++) l[sgn] += dy[j] * y[j];
    }
    *p = keep;
    const double fd = (l[0] - l[1]) / (2 * h), an = i < total ? dx[i] : dw[i - total];
    worst = fmax(worst, fabs(fd - an));
  }
  tu_report("short conv reference vs finite differences", worst);
  assert_true(worst < 1e-7);
}

/* Frames of a later segment never reach an earlier segment's output (look-ahead stops at the segment end). */
static void test_conv_no_leak(void **state) {
  (void)state;
  tu_seed(23);
  camdelta_context *ctx = tu_context();
  const size_t B = 2, T = 7, S = 3, C = 8, total = B * T * S * C;
  const camdelta_chunking ch = {3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0}; /* [0, 4, 7] */
  float *x = malloc(total * 4), *w = malloc(4 * C * 4), *o1 = malloc(total * 4), *o2 = malloc(total * 4);
  tu_fill_normal(x, total, 1.0);
  tu_fill_normal(w, 4 * C, 1.0);
  cl_mem dw = tu_upload(w, 4 * C * 4), y = tu_buffer(total * 4);
  for (int pass = 0; pass < 2; pass++) {
    if (pass)
      for (size_t b = 0; b < B; b++)
        for (size_t i = 4 * S * C; i < T * S * C; i++) x[b * T * S * C + i] += 10.0f;
    cl_mem dx = tu_upload(x, total * 4);
    camdelta_short_conv_args a = {B, T, S, C, ch, {dx, 0}, {dw, 0}, {y, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}, NULL};
    TU_OK(camdelta_short_conv_forward(ctx, &a));
    tu_download(y, 0, total * 4, pass ? o2 : o1);
    clReleaseMemObject(dx);
  }
  for (size_t b = 0; b < B; b++) {
    assert_memory_equal(o1 + b * T * S * C, o2 + b * T * S * C, 4 * S * C * 4); /* frames 0..3 */
    assert_memory_not_equal(o1 + (b * T + 4) * S * C, o2 + (b * T + 4) * S * C, 3 * S * C * 4);
  }
  free(x), free(w), free(o1), free(o2);
  clReleaseMemObject(dw), clReleaseMemObject(y);
}

static void test_conv_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const size_t B = 1, T = 4, S = 2, C = 8, total = B * T * S * C;
  float x[64], w[32];
  tu_fill_normal(x, total, 1.0);
  tu_fill_normal(w, 32, 1.0);
  cl_mem dx = tu_upload(x, sizeof x), dw_small = tu_upload(w, 3 * C * 4), dw = tu_upload(w, sizeof w);
  cl_mem y = bp_poison(total * 4), gx = bp_poison(total * 4), gw = bp_poison(4 * C * 4);
  camdelta_short_conv_args a = {B, T, S, C, {0, 0, NULL, 0}, {dx, 0}, {dw_small, 0}, {y, 0}, {dx, 0}, {gx, 0},
                                {gw, 0}, NULL};
  /* conv weight of the wrong shape (C, 3) */
  assert_int_equal(camdelta_short_conv_forward(ctx, &a), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  assert_non_null(strstr(camdelta_last_message(), "conv_weight"));
  assert_int_equal(camdelta_short_conv_backward(ctx, &a), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  a.conv_weight.mem = dw;
  /* chunk_index out of range */
  const int64_t idx[2] = {0, 4};
  a.chunking = (camdelta_chunking){2, CAMDELTA_CHUNK_UNIFORM, idx, 2};
  assert_int_equal(camdelta_short_conv_forward(ctx, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "chunk_index"));
  assert_int_equal(camdelta_short_conv_backward(ctx, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  a.chunking = (camdelta_chunking){0, CAMDELTA_CHUNK_UNIFORM, NULL, 0};
  a.T = 5; /* more frames than the tensors hold */
  assert_int_equal(camdelta_short_conv_forward(ctx, &a), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  a.T = T;
  a.k_conv = a.k_raw; /* in place is not allowed */
  assert_int_equal(camdelta_short_conv_forward(ctx, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_true(bp_untouched(y, total * 4));
  assert_true(bp_untouched(gx, total * 4));
  assert_true(bp_untouched(gw, 4 * C * 4));
  clReleaseMemObject(dx), clReleaseMemObject(dw_small), clReleaseMemObject(dw), clReleaseMemObject(y);
  clReleaseMemObject(gx), clReleaseMemObject(gw);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_chunk_bounds),      cmocka_unit_test(test_conv_device),
      cmocka_unit_test(test_conv_reference_fd), cmocka_unit_test(test_conv_no_leak),
      cmocka_unit_test(test_conv_bad_input),    cmocka_unit_test(test_conv_sb))
