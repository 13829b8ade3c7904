/* .npy reading and writing: round trips, the exact bytes NumPy writes, and
 * every malformed input rejected with the right status and nothing leaked. */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmp_path(const char *name) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), name);
  return path;
}

static size_t elem_size(camdelta_npy_type t) { return t == CAMDELTA_NPY_F2 ? 2 : t == CAMDELTA_NPY_F4 ? 4 : 8; }

/* An .npy image of format major.0 with the given dict text (padded to 64
 * bytes plus '\n' like NumPy) followed by `data_bytes` bytes of data. */
static unsigned char *make_npy(int major, const char *dict, size_t data_bytes, size_t *len) {
  size_t lb = major == 1 ? 2 : 4, dl = strlen(dict);
  size_t hl = dl + 1;
  hl += (64 - (6 + 2 + lb + hl) % 64) % 64;
  *len = 8 + lb + hl + data_bytes;
  unsigned char *b = malloc(*len);
  assert_non_null(b);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  for (size_t i = 0; i < lb; i++) b[8 + i] = (unsigned char)(hl >> (8 * i));
  memcpy(b + 8 + lb, dict, dl);
  memset(b + 8 + lb + dl, ' ', hl - dl - 1);
  b[8 + lb + hl - 1] = '\n';
  for (size_t i = 0; i < data_bytes; i++) b[8 + lb + hl + i] = (unsigned char)(i * 7 + 1);
  return b;
}

/* Both camdelta_npy_parse on the image and camdelta_npy_read on a file of it
 * fail with `want`, leave `out` empty and mention `needle`. */
static void expect_reject_image(const unsigned char *b, size_t len, camdelta_status want, const char *needle) {
  camdelta_npy out;
  memset(&out, 0xAB, sizeof out);
  camdelta_status st = camdelta_npy_parse(b, len, &out);
  if (st != want) fail_msg("parse: got %s (%s), want %s", camdelta_status_name(st), camdelta_last_message(),
                           camdelta_status_name(want));
  assert_null(out.data);
  assert_int_equal(out.count, 0);
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("parse: message '%s' lacks '%s'", camdelta_last_message(), needle);

  char *path = tmp_path("bad.npy");
  tu_write_file(path, b, len);
  memset(&out, 0xAB, sizeof out);
  st = camdelta_npy_read(path, &out);
  if (st != want) fail_msg("read: got %s (%s), want %s", camdelta_status_name(st), camdelta_last_message(),
                           camdelta_status_name(want));
  assert_null(out.data);
  if (!strstr(camdelta_last_message(), path))
    fail_msg("read: message '%s' does not name the file", camdelta_last_message());
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("read: message '%s' lacks '%s'", camdelta_last_message(), needle);
  camdelta_npy_free(&out); /* safe on a failed read */
  remove(path);
}

static void expect_reject_dict(const char *dict, size_t data_bytes, const char *needle) {
  size_t len;
  unsigned char *b = make_npy(1, dict, data_bytes, &len);
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, needle);
  free(b);
}

static int remove_tmpdir(void **state) {
  (void)state;
  rmdir(tu_tmpdir()); /* each test removes its own files */
  return 0;
}

/* ---------------------------------------------------------------- tests */

static void round_trip(camdelta_npy_type t, int ndim, const size_t *shape) {
  size_t count = 1;
  for (int i = 0; i < ndim; i++) count *= shape[i];
  size_t bytes = count * elem_size(t);
  unsigned char *data = malloc(bytes ? bytes : 1);
  assert_non_null(data);
  for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(i * 31 + 7);
  char *path = tmp_path("rt.npy");
  TU_OK(camdelta_npy_write(path, t, ndim, shape, data));

  camdelta_npy a;
  TU_OK(camdelta_npy_read(path, &a));
  assert_int_equal(a.type, t);
  assert_int_equal(a.ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(a.shape[i], shape[i]);
  assert_int_equal(a.count, count);
  assert_non_null(a.data);
  if (bytes) assert_memory_equal(a.data, data, bytes);

  size_t len;
  unsigned char *img = tu_read_file(path, &len);
  assert_int_equal(len % 64, bytes % 64); /* header is a multiple of 64 bytes */
  assert_int_equal(img[len - bytes - 1], '\n');
  camdelta_npy b;
  TU_OK(camdelta_npy_parse(img, len, &b));
  assert_int_equal(b.type, t);
  assert_int_equal(b.ndim, ndim);
  assert_int_equal(b.count, count);
  if (bytes) assert_memory_equal(b.data, data, bytes);

  camdelta_npy_free(&a);
  camdelta_npy_free(&b);
  assert_null(a.data);
  free(img);
  free(data);
  remove(path);
}

static void test_round_trips(void **state) {
  (void)state;
  static const size_t dims[8] = {2, 3, 1, 2, 1, 3, 1, 2};
  camdelta_npy_type types[3] = {CAMDELTA_NPY_F4, CAMDELTA_NPY_F2, CAMDELTA_NPY_F8};
  for (int t = 0; t < 3; t++) {
    for (int nd = 0; nd <= CAMDELTA_NPY_MAX_DIMS; nd++) round_trip(types[t], nd, dims);
    static const size_t z1[2] = {0, 3}, z2[3] = {3, 0, 2}, z3[1] = {0};
    round_trip(types[t], 2, z1);
    round_trip(types[t], 3, z2);
    round_trip(types[t], 1, z3);
    static const size_t big[2] = {1000000000, 0}; /* 10-digit first axis, still zero-size */
    round_trip(types[t], 2, big);
  }
}

static void test_values_round_trip(void **state) {
  (void)state;
  float x[6] = {0.0f, 1.0f, -2.5f, 3.25f, 1e-30f, -1e30f};
  size_t shape[2] = {2, 3};
  char *path = tmp_path("vals.npy");
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 2, shape, x));
  camdelta_npy a;
  TU_OK(camdelta_npy_read(path, &a));
  const float *y = a.data;
  for (int i = 0; i < 6; i++) assert_true(y[i] == x[i]);
  camdelta_npy_free(&a);
  remove(path);
}

/* The bytes NumPy's np.save writes for np.arange(6, dtype='<f4').reshape(2, 3),
 * worked out from numpy.lib.format:
 *   dict  = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"  (59 chars)
 *   + 21 - len("2") = 20 spaces of room for the first axis to grow (NumPy >= 1.24)
 *   hlen  = 79 + 1 ('\n') = 80; padlen = 64 - (10 + 80) % 64 = 38
 *   header length field = 80 + 38 = 118 = 0x76; the data starts at byte 128.
 * So: magic, 01 00, 76 00, the dict, 20 + 38 = 58 spaces, '\n', data. */
static void test_header_bytes_like_numpy(void **state) {
  (void)state;
  static const char expect_header[] =
      "\x93NUMPY\x01\x00\x76\x00"
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
      "          "
      "          "
      "          "
      "          "
      "          "
      "        "
      "\n";
  assert_int_equal(sizeof expect_header - 1, 128);
  float x[6] = {0, 1, 2, 3, 4, 5};
  size_t shape[2] = {2, 3};
  char *path = tmp_path("hdr.npy");
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 2, shape, x));
  size_t len;
  unsigned char *b = tu_read_file(path, &len);
  assert_int_equal(len, 128 + sizeof x);
  assert_memory_equal(b, expect_header, 128);
  /* little-endian IEEE data: 1.0f = 00 00 80 3f */
  static const unsigned char one[4] = {0x00, 0x00, 0x80, 0x3f};
  assert_memory_equal(b + 128 + 4, one, 4);
  free(b);

  /* 0-d <f8 scalar: dict "{'descr': '<f8', 'fortran_order': False, 'shape': (), }" (55 chars), no growth room;
   * hlen = 56, padlen = 64 - 66 % 64 = 62, length field 118 again, data at 128. */
  static const char expect_scalar[] =
      "\x93NUMPY\x01\x00\x76\x00"
      "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  double s = 2.0;
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F8, 0, NULL, &s));
  b = tu_read_file(path, &len);
  assert_int_equal(len, 128 + 8);
  assert_memory_equal(b, expect_scalar, sizeof expect_scalar - 1);
  for (size_t i = sizeof expect_scalar - 1; i < 127; i++) assert_int_equal(b[i], ' ');
  assert_int_equal(b[127], '\n');
  free(b);

  /* 1-d: "(5,)" with the trailing comma. */
  static const char expect_1d[] = "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }";
  uint16_t h[5] = {0};
  size_t n5 = 5;
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F2, 1, &n5, h));
  b = tu_read_file(path, &len);
  assert_int_equal(len, 128 + 10);
  assert_memory_equal(b + 10, expect_1d, sizeof expect_1d - 1);
  free(b);
  remove(path);
}

static void test_read_variants(void **state) {
  (void)state;
  /* versions 2.0 and 3.0 (uint32 header length), other key orders and quotes,
   * Python 2 long suffixes, extra whitespace. Trailing bytes after the data: rejected (issue 11). */
  struct {
    int major;
    const char *dict;
    int ndim;
    size_t s0, s1;
    camdelta_npy_type t;
  } cases[] = {
      {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 2, 2, 3, CAMDELTA_NPY_F4},
      {3, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", 1, 4, 0, CAMDELTA_NPY_F8},
      {1, "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f2\"}", 2, 2, 3, CAMDELTA_NPY_F2},
      {1, "{'descr':'<f4','fortran_order':False,'shape':(2L, 3L)}", 2, 2, 3, CAMDELTA_NPY_F4},
      {1, "  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 3 , ) , }  ", 1, 3, 0, CAMDELTA_NPY_F4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t count = cases[i].ndim == 2 ? cases[i].s0 * cases[i].s1 : cases[i].s0;
    size_t bytes = count * elem_size(cases[i].t), len;
    unsigned char *b = make_npy(cases[i].major, cases[i].dict, bytes + 5, &len);
    camdelta_npy a;
    expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "5 trailing bytes");
    len -= 5;
    camdelta_status st = camdelta_npy_parse(b, len, &a);
    if (st) fail_msg("case %zu: %s", i, camdelta_last_message());
    assert_int_equal(a.type, cases[i].t);
    assert_int_equal(a.ndim, cases[i].ndim);
    assert_int_equal(a.shape[0], cases[i].s0);
    if (cases[i].ndim == 2) assert_int_equal(a.shape[1], cases[i].s1);
    assert_int_equal(a.count, count);
    assert_memory_equal(a.data, b + len - bytes, bytes);
    camdelta_npy_free(&a);
    free(b);
  }
}

/* A header length field one byte short (issue 11: the data was read shifted by one byte, exit 0 with values like
 * 9.5e19): rejected, and so is one byte long. */
static void test_header_length_off_by_one(void **state) {
  (void)state;
  size_t len;
  unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, &len);
  const size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
  b[8] = (unsigned char)((hl - 1) & 0xFF), b[9] = (unsigned char)((hl - 1) >> 8);
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "newline");
  expect_reject_image(b, len - 1, CAMDELTA_ERROR_FORMAT, "newline");
  b[8] = (unsigned char)((hl + 1) & 0xFF), b[9] = (unsigned char)((hl + 1) >> 8);
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "header");
  free(b);
}

/* Control bytes and escape sequences in a header or a path never reach a message raw (issue 11). */
static void test_messages_escaped(void **state) {
  (void)state;
  size_t len;
  unsigned char *b = make_npy(1, "{'descr': '\x1b[31m<f4', 'fortran_order': False, 'shape': (2,), }", 8, &len);
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "\\x1b[31m<f4");
  assert_null(strchr(camdelta_last_message(), 0x1b));
  free(b);
  b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'sh\rape': (2,), }", 8, &len);
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "sh\\x0dape");
  assert_null(strchr(camdelta_last_message(), '\r'));
  free(b);
  camdelta_npy a;
  char *path = tmp_path("bell\a\x1b]0;title\a.npy");
  assert_int_equal(camdelta_npy_read(path, &a), CAMDELTA_ERROR_IO);
  assert_non_null(strstr(camdelta_last_message(), "bell\\x07\\x1b]0;title\\x07.npy"));
  for (const char *m = camdelta_last_message(); *m; m++) assert_true((unsigned char)*m >= 0x20 && *m != 0x7f);
}

/* A FIFO in place of an input is refused at once (issue 11: the read blocked forever). The alarm turns a hang
 * into a failure. */
static void test_fifo_refused(void **state) {
  (void)state;
  char *path = tmp_path("fifo.npy");
  unlink(path);
  assert_int_equal(mkfifo(path, 0600), 0);
  alarm(20);
  camdelta_npy a;
  assert_int_equal(camdelta_npy_read(path, &a), CAMDELTA_ERROR_IO);
  alarm(0);
  assert_non_null(strstr(camdelta_last_message(), "not a regular file"));
  assert_null(a.data);
  unlink(path);
}

/* Writes are atomic: a symbolic link at the name is replaced, not followed; a folder in the way fails with the
 * previous content untouched; no temporary file is ever left. */
static void test_write_atomic(void **state) {
  (void)state;
  const float x[3] = {1, 2, 3};
  const size_t shape[1] = {3};
  char victim[1200], link[1200], dirp[1200];
  snprintf(victim, sizeof victim, "%s", tmp_path("victim.txt"));
  snprintf(link, sizeof link, "%s", tmp_path("link.npy"));
  snprintf(dirp, sizeof dirp, "%s", tmp_path("dir.npy"));
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("precious", f);
  fclose(f);
  unlink(link);
  assert_int_equal(symlink(victim, link), 0);
  TU_OK(camdelta_npy_write(link, CAMDELTA_NPY_F4, 1, shape, x));
  struct stat sb;
  assert_int_equal(lstat(link, &sb), 0);
  assert_true(S_ISREG(sb.st_mode)); /* the link itself was replaced */
  char text[32] = {0};
  f = fopen(victim, "r");
  assert_non_null(f);
  assert_true(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  assert_string_equal(text, "precious");
  camdelta_npy a;
  TU_OK(camdelta_npy_read(link, &a));
  assert_int_equal(a.count, 3);
  camdelta_npy_free(&a);
  mkdir(dirp, 0700);
  assert_int_equal(camdelta_npy_write(dirp, CAMDELTA_NPY_F4, 1, shape, x), CAMDELTA_ERROR_IO);
  assert_non_null(strstr(camdelta_last_message(), "folder"));
  /* nothing but the files made here */
  DIR *d = opendir(tu_tmpdir());
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) fail_msg("temporary file left: %s", e->d_name);
  closedir(d);
  rmdir(dirp);
}

static void test_missing_file(void **state) {
  (void)state;
  camdelta_npy a;
  char *path = tmp_path("does-not-exist.npy");
  assert_int_equal(camdelta_npy_read(path, &a), CAMDELTA_ERROR_IO);
  assert_null(a.data);
  assert_non_null(strstr(camdelta_last_message(), "does-not-exist.npy"));
  assert_int_equal(camdelta_npy_read(tu_tmpdir(), &a), CAMDELTA_ERROR_IO); /* a folder */
  assert_int_equal(camdelta_npy_read(NULL, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_read(path, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_parse(NULL, 10, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  camdelta_npy_free(NULL);
}

static void test_truncated(void **state) {
  (void)state;
  size_t len;
  unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, &len);
  /* every proper prefix is rejected as FORMAT; an empty file too */
  for (size_t cut = 0; cut < len; cut += (cut < 140 ? 1 : 7)) {
    camdelta_npy a;
    camdelta_status st = camdelta_npy_parse(b, cut, &a);
    if (st != CAMDELTA_ERROR_FORMAT) fail_msg("prefix %zu: %s", cut, camdelta_status_name(st));
    assert_null(a.data);
  }
  expect_reject_image(b, 5, CAMDELTA_ERROR_FORMAT, "truncated");
  expect_reject_image(b, 9, CAMDELTA_ERROR_FORMAT, "truncated");
  expect_reject_image(b, 60, CAMDELTA_ERROR_FORMAT, "truncated");
  expect_reject_image(b, len - 1, CAMDELTA_ERROR_FORMAT, "truncated");
  expect_reject_image(b, 0, CAMDELTA_ERROR_FORMAT, NULL);
  /* a header length field pointing far past the end of the file */
  b[8] = 0xFF;
  b[9] = 0xFF;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "truncated");
  free(b);
  /* version 2.0 with a 4 GiB header length */
  b = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, &len);
  b[8] = b[9] = b[10] = b[11] = 0xFF;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "truncated");
  free(b);
}

static void test_bad_magic_and_version(void **state) {
  (void)state;
  size_t len;
  unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, &len);
  b[0] = 0x92;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "magic");
  b[0] = 0x93;
  b[3] = 'm';
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "magic");
  b[3] = 'M';
  b[6] = 4;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "version");
  b[6] = 1;
  b[7] = 1;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "version");
  free(b);
  static const char text[] = "hello, this is not an npy file at all\n";
  expect_reject_image((const unsigned char *)text, sizeof text - 1, CAMDELTA_ERROR_FORMAT, "magic");
}

static void test_bad_layout_and_dtypes(void **state) {
  (void)state;
  expect_reject_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "fortran_order");
  expect_reject_dict("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "big-endian");
  expect_reject_dict("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }", 48, "big-endian");
  expect_reject_dict("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24, "<i4");
  expect_reject_dict("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", 6, "|u1");
  expect_reject_dict("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", 48, "dtype");
  expect_reject_dict("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", 6, "dtype");
  expect_reject_dict("{'descr': '<f16', 'fortran_order': False, 'shape': (2,), }", 32, "dtype");
  expect_reject_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, "structured");
}

static void test_bad_shapes(void **state) {
  (void)state;
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 24, "negative");
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4,
                     "dimensions");
  /* 2^32 * 2^32 overflows a 64-bit size_t */
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 4, "overflow");
  /* count fits, bytes overflow */
  expect_reject_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952, 2), }", 4,
                     "overflow");
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 1), }", 4,
                     "overflow");
  /* more data than the file holds */
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", 24, "truncated");
  expect_reject_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, "truncated");
}

static void test_header_parse_errors(void **state) {
  (void)state;
  const char *bad[] = {
      "",
      "not a dict",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ",
      "{'descr': '<f4', 'fortran_order': False, }",
      "{'descr': '<f4', 'shape': (2, 3), }",
      "{'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }",
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3), }",
      "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3), }",
      "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }",
      "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } trailing",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }}",
      "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)",
      "{'descr': '<f4\\n', 'fortran_order': False, 'shape': (2, 3), }",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t len;
    unsigned char *b = make_npy(1, bad[i], 24, &len);
    camdelta_npy a;
    camdelta_status st = camdelta_npy_parse(b, len, &a);
    if (st != CAMDELTA_ERROR_FORMAT)
      fail_msg("header %zu <%s>: got %s, want FORMAT", i, bad[i], camdelta_status_name(st));
    assert_null(a.data);
    assert_true(strlen(camdelta_last_message()) > 0);
    free(b);
  }
  /* a NUL inside the header */
  size_t len;
  unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, &len);
  b[20] = 0;
  expect_reject_image(b, len, CAMDELTA_ERROR_FORMAT, "NUL");
  free(b);
}

static void test_write_errors(void **state) {
  (void)state;
  float x[4] = {0};
  size_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  char path[1200];
  snprintf(path, sizeof path, "%s/no/such/folder/x.npy", tu_tmpdir());
  assert_int_equal(camdelta_npy_write(path, CAMDELTA_NPY_F4, 1, shape, x), CAMDELTA_ERROR_IO);
  assert_non_null(strstr(camdelta_last_message(), "x.npy"));
  char *p = tmp_path("w.npy");
  assert_int_equal(camdelta_npy_write(p, CAMDELTA_NPY_F4, 9, shape, x), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_write(p, CAMDELTA_NPY_F4, -1, shape, x), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_write(p, (camdelta_npy_type)7, 1, shape, x), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_write(p, CAMDELTA_NPY_F4, 1, NULL, x), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_write(p, CAMDELTA_NPY_F4, 1, shape, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_npy_write(NULL, CAMDELTA_NPY_F4, 1, shape, x), CAMDELTA_ERROR_INVALID_ARGUMENT);
  size_t huge[2] = {SIZE_MAX / 2, 3};
  assert_int_equal(camdelta_npy_write(p, CAMDELTA_NPY_F4, 2, huge, x), CAMDELTA_ERROR_OVERFLOW);
  /* zero-size data may be NULL */
  size_t z[1] = {0};
  TU_OK(camdelta_npy_write(p, CAMDELTA_NPY_F4, 1, z, NULL));
  /* a successful call clears the previous message */
  assert_string_equal(camdelta_last_message(), "");
  remove(p);
}

TU_MAIN(NULL, remove_tmpdir,
      cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_values_round_trip),
      cmocka_unit_test(test_header_bytes_like_numpy),
      cmocka_unit_test(test_read_variants),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_header_length_off_by_one),
      cmocka_unit_test(test_messages_escaped),
      cmocka_unit_test(test_fifo_refused),
      cmocka_unit_test(test_write_atomic),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_bad_magic_and_version),
      cmocka_unit_test(test_bad_layout_and_dtypes),
      cmocka_unit_test(test_bad_shapes),
      cmocka_unit_test(test_header_parse_errors),
      cmocka_unit_test(test_write_errors))
