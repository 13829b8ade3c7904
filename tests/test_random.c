/* camdelta_fill_random: the device writes exactly camdelta_random_value's values (bit for bit, every dtype), in
 * range, at the buffer's offset and nowhere else; bad arguments are rejected with nothing written. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void check_dtype(camdelta_dtype dt) {
  const size_t count = 100003, off = 5, es = camdelta_dtype_size(dt);
  const uint64_t seed = 0xC0FFEEull + (uint64_t)dt;
  const float lo = -0.75f, hi = 1.25f;
  cl_mem m = tu_buffer((count + off + 7) * es); /* poisoned 0xFF */
  TU_OK(camdelta_fill_random(tu_context(), (camdelta_buffer){m, off}, count, dt, seed, lo, hi));
  unsigned char *h = malloc((count + off + 7) * es);
  tu_download(m, 0, (count + off + 7) * es, h);
  for (size_t i = 0; i < off * es; i++) assert_int_equal(h[i], 0xFF);                  /* before the offset */
  for (size_t i = (count + off) * es; i < (count + off + 7) * es; i++) assert_int_equal(h[i], 0xFF); /* after */
  double sum = 0;
  for (size_t i = 0; i < count; i++) {
    const float want = camdelta_random_value(seed, i, lo, hi);
    assert_true(want >= lo && want < hi);
    sum += want;
    if (dt == CAMDELTA_F32) {
      float got;
      memcpy(&got, h + (off + i) * 4, 4);
      if (memcmp(&got, &want, 4) != 0) fail_msg("f32 element %zu: device %.9g, host %.9g", i, got, want);
    } else {
      uint16_t got, w = dt == CAMDELTA_F16 ? camdelta_f32_to_f16(want) : camdelta_f32_to_bf16(want);
      memcpy(&got, h + (off + i) * 2, 2);
      if (got != w) fail_msg("%s element %zu: device 0x%04x, host 0x%04x", camdelta_dtype_name(dt), i, got, w);
    }
  }
  const double mean = sum / (double)count;
  if (fabs(mean - 0.5 * (lo + hi)) > 0.01) fail_msg("mean %g, expected about %g", mean, 0.5 * (lo + hi));
  free(h);
  clReleaseMemObject(m);
}

static void test_values(void **state) {
  (void)state;
  check_dtype(CAMDELTA_F32);
  check_dtype(CAMDELTA_F16);
  check_dtype(CAMDELTA_BF16);
  /* seeds and indices decorrelate */
  assert_true(camdelta_random_value(1, 0, 0, 1) != camdelta_random_value(2, 0, 0, 1));
  assert_true(camdelta_random_value(1, 0, 0, 1) != camdelta_random_value(1, 1, 0, 1));
  /* indices past 2^32 are distinct values, not a wrapped 32-bit index */
  assert_true(camdelta_random_value(7, 5, 0, 1) != camdelta_random_value(7, 5 + ((uint64_t)1 << 32), 0, 1));
}

static void test_bad_arguments(void **state) {
  (void)state;
  cl_mem m = tu_buffer(64);
  camdelta_context *ctx = tu_context();
  assert_int_equal(camdelta_fill_random(NULL, (camdelta_buffer){m, 0}, 4, CAMDELTA_F32, 1, 0, 1),
                   CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){NULL, 0}, 4, CAMDELTA_F32, 1, 0, 1),
                   CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){m, 1}, 16, CAMDELTA_F32, 1, 0, 1),
                   CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){m, SIZE_MAX}, 16, CAMDELTA_F32, 1, 0, 1),
                   CAMDELTA_ERROR_OVERFLOW);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){m, 0}, 4, (camdelta_dtype)7, 1, 0, 1),
                   CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){m, 0}, 4, CAMDELTA_F32, 1, 0, INFINITY),
                   CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_fill_random(ctx, (camdelta_buffer){m, 0}, 4, CAMDELTA_F32, 1, -3e38f, 3e38f),
                   CAMDELTA_ERROR_INVALID_ARGUMENT); /* hi - lo overflows f32 */
  TU_OK(camdelta_finish(ctx));
  unsigned char h[64];
  tu_download(m, 0, 64, h);
  for (int i = 0; i < 64; i++) assert_int_equal(h[i], 0xFF); /* nothing written */
  TU_OK(camdelta_fill_random(ctx, (camdelta_buffer){m, 0}, 0, CAMDELTA_F32, 1, 0, 1)); /* nothing to do */
  clReleaseMemObject(m);
}

TU_MAIN(NULL, tu_teardown_context, cmocka_unit_test(test_values), cmocka_unit_test(test_bad_arguments))
