/* Bad input to the prep forward: each case gets its own status and message,
 * and nothing is written (outputs keep their poison). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "prep_problem.h"

typedef struct fixture {
  prep_problem p;
  cl_mem in[9], q, k, v, infl;
  camdelta_prep_args a;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  prep_problem_init(&f->p, 1, 20, 2, 16, CAMDELTA_F32, 5, 0);
  const size_t BNHD = 20 * 2 * 16;
  for (int i = 0; i < 9; i++) f->in[i] = tu_upload(f->p.in[i], f->p.count[i] * 4);
  f->q = tu_buffer(BNHD * 4), f->k = tu_buffer(BNHD * 4), f->v = tu_buffer(BNHD * 4), f->infl = tu_buffer(2 * 20 * 4);
  camdelta_prep_args a = {1, 20, 2, 16, CAMDELTA_F32, f->p.k_scale, f->p.norm_eps, {f->in[0], 0}, {f->in[1], 0},
                          {f->in[2], 0}, {f->in[3], 0}, {f->in[4], 0}, {f->in[5], 0}, {f->in[6], 0}, {f->in[7], 0},
                          {f->in[8], 0}, {f->q, 0}, {f->k, 0}, {f->v, 0}, {f->infl, 0}, NULL};
  f->a = a;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  for (int i = 0; i < 9; i++) clReleaseMemObject(f->in[i]);
  clReleaseMemObject(f->q), clReleaseMemObject(f->k), clReleaseMemObject(f->v), clReleaseMemObject(f->infl);
  prep_problem_free(&f->p);
  free(f);
  return 0;
}

static void assert_untouched(fixture *f) {
  TU_OK(camdelta_finish(tu_context()));
  cl_mem outs[4] = {f->q, f->k, f->v, f->infl};
  for (int o = 0; o < 4; o++) {
    size_t n = tu_mem_size(outs[o]);
    unsigned char *b = malloc(n);
    tu_download(outs[o], 0, n, b);
    for (size_t i = 0; i < n; i++)
      if (b[i] != 0xFF) fail_msg("output %d byte %zu was written", o, i);
    free(b);
  }
}

static void expect(fixture *f, const camdelta_prep_args *a, camdelta_status want, const char *needle) {
  camdelta_status st = camdelta_prep_forward(tu_context(), a, NULL);
  if (st != want)
    fail_msg("expected %s, got %s (%s)", camdelta_status_name(want), camdelta_status_name(st), camdelta_last_message());
  const char *msg = camdelta_last_message();
  if (!strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
  assert_untouched(f);
}

static void test_null_handles(void **state) {
  fixture *f = *state;
  assert_int_equal(camdelta_prep_forward(NULL, &f->a, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "ctx"));
  assert_int_equal(camdelta_prep_forward(tu_context(), NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "args"));
  assert_untouched(f);
}

static void test_null_buffer(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.proj_kv.mem = NULL;
  expect(f, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "proj_kv");
  a = f->a;
  a.inflation_sq.mem = NULL;
  expect(f, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "inflation_sq");
}

static void test_head_dim(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.D = 12, a.H = 2;
  expect(f, &a, CAMDELTA_ERROR_UNSUPPORTED, "D=12");
  a.D = 136, a.H = 1;
  expect(f, &a, CAMDELTA_ERROR_UNSUPPORTED, "D=136");
  a.D = 0;
  expect(f, &a, CAMDELTA_ERROR_UNSUPPORTED, "D=0");
}

static void test_buffer_too_small(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.q_raw.offset = 1; /* one element past the end */
  expect(f, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "q_raw");
  a = f->a;
  a.N = 21; /* every (B,N,..) tensor is now too small; the first checked is named */
  expect(f, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "q_raw");
  a = f->a;
  a.v.offset = 3;
  expect(f, &a, CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'v'");
}

static void test_overflow(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.B = SIZE_MAX / 4, a.N = 1u << 20;
  expect(f, &a, CAMDELTA_ERROR_OVERFLOW, "overflows");
  a = f->a;
  a.q_raw.offset = SIZE_MAX - 5;
  expect(f, &a, CAMDELTA_ERROR_OVERFLOW, "q_raw");
}

static void test_overlap(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.k = a.q; /* two outputs in the same place */
  expect(f, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "overlap");
  a = f->a;
  a.q_raw = a.v; /* output over an input */
  expect(f, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "'q_raw'");
}

static void test_dtype(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.dtype = (camdelta_dtype)7;
  expect(f, &a, CAMDELTA_ERROR_UNSUPPORTED, "dtype");
}

static void test_zero_sizes_and_scalars(void **state) {
  fixture *f = *state;
  camdelta_prep_args a = f->a;
  a.N = 0;
  expect(f, &a, CAMDELTA_ERROR_SHAPE, "N=0");
  a = f->a;
  a.norm_eps = -1.0f;
  expect(f, &a, CAMDELTA_ERROR_INVALID_ARGUMENT, "norm_eps");
}

static void test_saved_other_context(void **state) {
  fixture *f = *state;
  camdelta_context *other = NULL;
  TU_OK(camdelta_context_create(&other, NULL));
  camdelta_prep_saved *saved = NULL;
  TU_OK(camdelta_prep_saved_create(other, &saved));
  assert_int_equal(camdelta_prep_forward(tu_context(), &f->a, saved), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(camdelta_last_message(), "saved"));
  assert_untouched(f);
  camdelta_prep_saved_destroy(saved);
  camdelta_context_destroy(other);
}

static void test_malformed_npy(void **state) {
  (void)state;
  static const unsigned char bad_magic[] = "\x93NUMPX\x01\x00\x08\x00{}      ";
  camdelta_npy npy;
  assert_int_equal(camdelta_npy_parse(bad_magic, sizeof bad_magic - 1, &npy), CAMDELTA_ERROR_FORMAT);
  assert_true(strlen(camdelta_last_message()) > 0);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test_setup_teardown(test_null_handles, setup, teardown),
      cmocka_unit_test_setup_teardown(test_null_buffer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_head_dim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_buffer_too_small, setup, teardown),
      cmocka_unit_test_setup_teardown(test_overflow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(test_overlap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_sizes_and_scalars, setup, teardown),
      cmocka_unit_test_setup_teardown(test_saved_other_context, setup, teardown),
      cmocka_unit_test(test_malformed_npy))
