/* Extreme values on every shape and size option of every command (issue 38): each is refused with a usage error
 * (exit 2) or an input error (exit 3) in one line on stderr, within a second, writing nothing. Before, a shape of
 * 2^64-1 tokens hung demo and bench (the grid factoring's i * i wrapped), 2^62 sequences overflowed the demo's
 * buffers, tune took "-1" as 2^64-1, and zero-element inputs claiming 2^62 tokens overflowed the chunk bounds. A
 * chunk size past every frame count is one chunk, as the library says. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Values that are no size, or no size any operation can take. */
static const char *const EXTREME[] = {"0",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "0x10",
                                      "1e3",
                                      "",
                                      "2147483648",
                                      "4294967295",
                                      "4294967296",
                                      "4611686018427387904",
                                      "9223372036854775808",
                                      "18446744073709551615",
                                      "18446744073709551616",
                                      "99999999999999999999999999"};
enum { NX = sizeof EXTREME / sizeof EXTREME[0] };

static int g_runs;

/* A second in the release and debug builds; the sanitizer build (ci/test.sh --sanitize, tests in parallel) takes
 * longer to start a device (AddressSanitizer's interception in the OpenCL drivers' loading), not to refuse. */
#if defined(__SANITIZE_ADDRESS__)
static const double LIMIT_S = 5.0;
#else
static const double LIMIT_S = 1.0;
#endif

/* Runs `camdelta <args>` (a shell word list); fails unless it exits with 2 or 3 within LIMIT_S, saying so in one
 * "camdelta: error:" line, and `out` (when given) does not exist afterwards. */
static void expect_refused(const char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_refused(const char *out, const char *fmt, ...) {
  char args[8192], err[8192];
  struct timespec t0, t1;
  va_list ap;
  va_start(ap, fmt);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const int code = tu_run_cli("timeout 20", getenv("CAMDELTA_CLI"), args, sizeof args, NULL, 0, err, sizeof err, fmt, ap);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  va_end(ap);
  const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  g_runs++;
  if (code != 2 && code != 3) fail_msg("camdelta %s: exit %d (expected 2 or 3) after %.2f s: %s", args, code, s, err);
  if (s > LIMIT_S) fail_msg("camdelta %s: %.2f s to refuse (at most %.0f s)", args, s, LIMIT_S);
  const char *nl = strchr(err, '\n');
  if (strncmp(err, "camdelta: error: ", 17) != 0 || !nl || nl[1] != '\0')
    fail_msg("camdelta %s: stderr is not one 'camdelta: error:' line: %s", args, err);
  struct stat sb;
  if (out && stat(out, &sb) == 0) fail_msg("camdelta %s: %s was created", args, out);
}

/* "1,2,16,2,8" with field k replaced by v. */
static const char *shape_with(const char *const *base, int n, int k, const char *v, char *buf, size_t size) {
  size_t len = 0;
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? "," : "", i == k ? v : base[i]);
  return buf;
}

/* --shape of demo, bench, bench --packed, tune, cache warm and the --sequence-parallel demo and bench. */
static void test_shape_options(void **state) {
  (void)state;
  static const char *const five[5] = {"1", "2", "16", "2", "8"}, *const four[4] = {"1", "2", "16", "8"};
  static const char *const forms[] = {"demo --shape '%s'",
                                      "bench --shape '%s' --reps 1 --warmup 0",
                                      "bench --packed --shape '%s' --reps 1 --warmup 0",
                                      "tune --shape '%s'",
                                      "demo --sequence-parallel --shape '%s'",
                                      "bench --sequence-parallel --shape '%s' --reps 1 --warmup 0"};
  char shape[512], args[1024];
  for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
    for (int k = 0; k < 5; k++)
      for (int x = 0; x < NX; x++) {
        snprintf(args, sizeof args, forms[f], shape_with(five, 5, k, EXTREME[x], shape, sizeof shape));
        expect_refused(NULL, "%s", args);
      }
  for (int k = 0; k < 4; k++)
    for (int x = 0; x < NX; x++) expect_refused(NULL, "cache warm --shape '%s'", shape_with(four, 4, k, EXTREME[x],
                                                                                             shape, sizeof shape));
  /* the shapes of the issue, and products that pass every factor's own limit */
  static const char *const whole[] = {"1,1,8,1,18446744073709551615", "4611686018427387904,1,8,4,1",
                                      "2305843009213693952,1,8,4,1", "1,-1,8,4,4", "65536,65536,128,65536,65536",
                                      "4294967295,4294967295,128,1,1", "1,1,128,65536,65536", "1,1,8,4294967295,1"};
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
      snprintf(args, sizeof args, forms[f], whole[i]);
      expect_refused(NULL, "%s", args);
    }
  /* counts */
  static const char *const counts[] = {"bench --reps '%s'", "bench --warmup '%s'", "bench --packed --reps '%s'",
                                       "bench --packed --warmup '%s'", "tune --reps '%s'",
                                       "bench --sequence-parallel --reps '%s'"};
  for (size_t f = 0; f < sizeof counts / sizeof counts[0]; f++)
    for (int x = 0; x < NX; x++) {
      if (strstr(counts[f], "warmup") && strcmp(EXTREME[x], "0") == 0) continue; /* no warm-up is allowed */
      snprintf(args, sizeof args, counts[f], EXTREME[x]);
      expect_refused(NULL, "%s", args);
    }
  print_message("%d refusals checked\n", g_runs);
}

static char g_in[1200], g_out[1300];

static int limits_setup(void **state) {
  (void)state;
  snprintf(g_in, sizeof g_in, "%s", tu_fresh_dir("branch-in"));
  snprintf(g_out, sizeof g_out, "%s/never", g_in);
  char cmd[2000];
  /* B=1 T=4 Hs=2 Ws=3 H=2 D=16: the inputs of every camera-branch operation */
  snprintf(cmd, sizeof cmd, "'%s' branch 1 4 2 3 2 16 '%s'", getenv("CAMDELTA_GEN_INPUTS"), g_in);
  return system(cmd) == 0 ? 0 : -1;
}

/* --grid, --patch and --head-dim of the camera-branch operations, one device and over ranks (a singleton). */
static void test_grid_options(void **state) {
  (void)state;
  static const char *const grid[3] = {"4", "2", "3"}, *const patch[3] = {"1", "1", "1"};
  static const char *const ops[] = {"camera --head-dim 16", "short-conv", "branch", "branch-backward",
                                    "branch --sequence-parallel", "branch-backward --sequence-parallel"};
  char v[512];
  const int before = g_runs;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (int k = 0; k < 3; k++)
      for (int x = 0; x < NX; x++) {
        expect_refused(g_out, "run %s --in '%s' --out '%s' --grid '%s'", ops[o], g_in, g_out,
                       shape_with(grid, 3, k, EXTREME[x], v, sizeof v));
        if (strstr(ops[o], "short-conv")) continue;
        expect_refused(g_out, "run %s --in '%s' --out '%s' --grid 4,2,3 --patch '%s'", ops[o], g_in, g_out,
                       shape_with(patch, 3, k, EXTREME[x], v, sizeof v));
      }
  /* grids whose product wraps to the tokens of the files (24 = 2^64 + 24 is no grid of 24 tokens) */
  static const char *const wraps[] = {"4294967296,4294967296,24", "18446744073709551615,1,1", "1,4294967297,4294967295",
                                      "2,9223372036854775820,1"};
  for (size_t i = 0; i < sizeof wraps / sizeof wraps[0]; i++)
    for (size_t o = 1; o < sizeof ops / sizeof ops[0]; o++)
      expect_refused(g_out, "run %s --in '%s' --out '%s' --grid '%s'", ops[o], g_in, g_out, wraps[i]);
  for (int x = 0; x < NX; x++) {
    expect_refused(g_out, "run camera --in '%s' --out '%s' --grid 4,2,3 --head-dim '%s'", g_in, g_out, EXTREME[x]);
    expect_refused(g_out, "run camera --in '%s' --out '%s' --grid '4,%s,1' --head-dim 16", g_in, g_out, EXTREME[x]);
  }
  /* what is no size at all (a large chunk size is one chunk: test_huge_chunk_size) */
  static const char *const not_sizes[] = {"0", "-1", "+1", " 1", "1 ", "0x10", "1e3", "", "18446744073709551616"};
  for (size_t x = 0; x < sizeof not_sizes / sizeof not_sizes[0]; x++)
    expect_refused(g_out, "run branch --in '%s' --out '%s' --grid 4,2,3 --chunk-size '%s'", g_in, g_out, not_sizes[x]);
  /* options an operation does not take */
  expect_refused(g_out, "run output-transform --in '%s' --out '%s' --grid 4,2,3", g_in, g_out);
  expect_refused(g_out, "run short-conv --in '%s' --out '%s' --grid 4,2,3 --patch 1,2,2", g_in, g_out);
  print_message("%d refusals checked\n", g_runs - before);
}

/* A chunk size past every frame count is one chunk: the same result as no chunking (the first chunk's end,
 * chunk_size + 1, once wrapped to 0 and made an empty chunk). */
static void test_huge_chunk_size(void **state) {
  (void)state;
  static const char *const strategies[] = {"uniform", "first_frame", "first_chunk_plus_one"};
  static const char *const sizes[] = {"4", "4294967295", "9223372036854775808", "18446744073709551615"};
  char cmd[4000], first[1400], path[1400];
  for (size_t s = 0; s < sizeof strategies / sizeof strategies[0]; s++)
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
      char out[1300];
      snprintf(out, sizeof out, "%s/chunk-%zu-%zu", g_in, s, c);
      snprintf(cmd, sizeof cmd,
               "'%s' run branch-backward --quiet --in '%s' --out '%s' --grid 4,2,3 --chunk-size '%s' --chunk-strategy %s",
               getenv("CAMDELTA_CLI"), g_in, out, sizes[c], strategies[s]);
      if (system(cmd) != 0) fail_msg("%s failed", cmd);
      /* every size at least T = 4 gives the chunks of size 4 */
      snprintf(path, sizeof path, "%s/dk_raw.npy", out);
      if (c == 0) {
        snprintf(first, sizeof first, "%s", path);
        continue;
      }
      camdelta_npy x, y;
      TU_OK(camdelta_npy_read(first, &x));
      TU_OK(camdelta_npy_read(path, &y));
      assert_int_equal(x.count, y.count);
      if (memcmp(x.data, y.data, x.count * 4) != 0)
        fail_msg("--chunk-size %s --chunk-strategy %s: not the result of --chunk-size 4", sizes[c], strategies[s]);
      camdelta_npy_free(&x), camdelta_npy_free(&y);
    }
  /* the library: bounds of T frames with such chunk sizes, and T past the operations' limit */
  size_t b[8], n = 0;
  for (int st = 0; st < 3; st++) {
    const camdelta_chunking ch = {SIZE_MAX, (camdelta_chunk_strategy)st, NULL, 0};
    TU_OK(camdelta_chunk_bounds(5, &ch, b, 8, &n));
    assert_int_equal(b[0], 0);
    assert_int_equal(b[n - 1], 5);
    for (size_t i = 1; i < n; i++) assert_true(b[i] > b[i - 1]);
    TU_OK(camdelta_conv_bounds(5, &ch, b, 8, &n));
    assert_int_equal(n, 2);
    const camdelta_chunking small = {1, (camdelta_chunk_strategy)st, NULL, 0};
    assert_int_equal(camdelta_chunk_bounds((size_t)1 << 40, &small, b, 8, &n), CAMDELTA_ERROR_UNSUPPORTED);
    assert_int_equal(camdelta_conv_bounds(SIZE_MAX, &small, b, 8, &n), CAMDELTA_ERROR_UNSUPPORTED);
  }
}

/* Inputs whose headers claim hostile sizes: empty tensors beside 2^62 tokens, and a header claiming more than the
 * file holds (the library's reader), for every operation. */
static void test_hostile_headers(void **state) {
  (void)state;
  struct {
    const char *op, *file, *shape;
  } cases[] = {{"prep", "q_raw", "(0, 4611686018427387904, 1, 8)"},
               {"prep", "q_raw", "(1, 4611686018427387904, 1, 8)"},
               {"scan", "q", "(1, 1, 8, 0)"},
               {"scan", "q", "(4611686018427387904, 4, 8, 4)"},
               {"scan-backward", "q", "(0, 1, 8, 4611686018427387904)"},
               {"camera --head-dim 16 --grid 4611686018427387904,1,1", "camera_conditions",
                "(0, 4611686018427387904, 20)"},
               {"short-conv --grid 4611686018427387904,1,1", "k_raw", "(0, 4611686018427387904, 1, 8)"},
               {"output-transform", "out", "(0, 1, 8, 4611686018427387904)"},
               {"branch --grid 4611686018427387904,1,1", "q_raw", "(0, 4611686018427387904, 1, 8)"},
               {"branch-backward --grid 4611686018427387904,1,1", "q_raw", "(0, 4611686018427387904, 1, 8)"},
               {"branch --grid 4611686018427387904,1,1 --sequence-parallel", "q_raw",
                "(0, 4611686018427387904, 1, 8)"},
               {"scan --sequence-parallel", "q", "(0, 1, 8, 4611686018427387904)"},
               {"scan", "frame_offsets", "(4611686018427387904,)"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *dir = tu_fresh_dir("headers");
    char path[1400], dict[256], out[1400];
    snprintf(out, sizeof out, "%s/never", dir);
    snprintf(path, sizeof path, "%s/%s.npy", dir, cases[i].file);
    const char *descr = strcmp(cases[i].file, "frame_offsets") ? "<f4" : "<i8";
    const int dl =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, cases[i].shape);
    size_t hl = (size_t)dl + 1;
    hl += (64 - (10 + hl) % 64) % 64;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xFF),
                                   (unsigned char)(hl >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (size_t k = (size_t)dl; k + 1 < hl; k++) fputc(' ', f);
    fputc('\n', f);
    for (int k = 0; k < 64; k++) fputc(0, f); /* a few bytes: never what the header claims */
    fclose(f);
    expect_refused(out, "run %s --in '%s' --out '%s'", cases[i].op, dir, out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_options),
      cmocka_unit_test(test_grid_options),
      cmocka_unit_test(test_huge_chunk_size),
      cmocka_unit_test(test_hostile_headers),
  };
  if (!getenv("CAMDELTA_CLI")) {
    fprintf(stderr, "CAMDELTA_CLI is not set: run through ctest\n");
    return 1;
  }
  return cmocka_run_group_tests(tests, limits_setup, NULL);
}
