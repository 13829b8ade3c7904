/* The disk program cache (SPEC section 6): hits across contexts, rebuilds of
 * truncated, corrupt and foreign entries, CAMDELTA_CACHE=0, an unwritable
 * folder, private permissions, and one build per context. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static const char *kOpts = "-DCD_DTYPE=0 -DCD_D=16 -DCD_TS=8";

static void use_cache_dir(const char *leaf, char *out, size_t size) {
  snprintf(out, size, "%s/%s", tu_tmpdir(), leaf);
  setenv("CAMDELTA_CACHE_DIR", out, 1);
  unsetenv("CAMDELTA_CACHE");
}

/* Builds the test program in a fresh context; returns its stats. */
static camdelta_build_stats build_once(void) {
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  cl_program prog;
  TU_OK(cd_program(ctx, "prep.cl", kOpts, &prog));
  cl_kernel k;
  TU_OK(cd_kernel(ctx, "prep.cl", kOpts, "cd_prep_forward", &k));
  clReleaseKernel(k);
  camdelta_build_stats s;
  TU_OK(camdelta_context_build_stats(ctx, &s));
  camdelta_context_destroy(ctx);
  return s;
}

/* Path of the single entry in dir (fails unless exactly one). */
static void only_entry(const char *dir, char *path, size_t size) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    assert_non_null(strstr(e->d_name, ".clbin"));
    snprintf(path, size, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  assert_int_equal(n, 1);
}

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void test_hit_across_contexts(void **state) {
  (void)state;
  char dir[1200], entry[1500];
  use_cache_dir("hit", dir, sizeof dir);
  camdelta_build_stats a = build_once();
  assert_int_equal(a.compiled, 1);
  assert_int_equal(a.from_disk, 0);
  assert_int_equal(a.last_from_disk, 0);
  only_entry(dir, entry, sizeof entry);
  camdelta_build_stats b = build_once();
  assert_int_equal(b.compiled, 0);
  assert_int_equal(b.from_disk, 1);
  assert_int_equal(b.last_from_disk, 1);
  tu_report("program setup cold build ms", a.last_setup_ms);
  tu_report("program setup cache hit ms", b.last_setup_ms);
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  char got[1300];
  TU_OK(camdelta_cache_dir(got, sizeof got));
  assert_string_equal(got, dir);
}

static void damage_and_check(const char *leaf, void (*damage)(const char *path)) {
  char dir[1200], entry[1500];
  use_cache_dir(leaf, dir, sizeof dir);
  build_once();
  only_entry(dir, entry, sizeof entry);
  long good = file_size(entry);
  damage(entry);
  camdelta_build_stats s = build_once();
  assert_int_equal(s.from_disk, 0); /* never loaded */
  assert_int_equal(s.compiled, 1);
  char again[1500];
  only_entry(dir, again, sizeof again); /* rewritten, no stray temp files */
  assert_string_equal(again, entry);
  assert_int_equal(file_size(entry), good);
  s = build_once();
  assert_int_equal(s.from_disk, 1); /* the rewritten entry is good */
}

static void truncate_half(const char *path) { assert_int_equal(truncate(path, file_size(path) / 2), 0); }

static void flip_payload_byte(const char *path) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  long pos = file_size(path) - 7;
  fseek(f, pos, SEEK_SET);
  int c = fgetc(f);
  fseek(f, pos, SEEK_SET);
  fputc(c ^ 0x5A, f);
  fclose(f);
}

static void make_foreign(const char *path) {
  /* a well-formed entry of another key under this entry's name */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, 16, SEEK_SET);
  fputc('z', f);
  fclose(f);
}

static void garbage(const char *path) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("not a camdelta cache entry", f);
  fclose(f);
}

static void test_truncated(void **state) {
  (void)state;
  damage_and_check("truncated", truncate_half);
}
static void test_corrupt(void **state) {
  (void)state;
  damage_and_check("corrupt", flip_payload_byte);
}
static void test_foreign(void **state) {
  (void)state;
  damage_and_check("foreign", make_foreign);
}
static void test_garbage(void **state) {
  (void)state;
  damage_and_check("garbage", garbage);
}

static void test_cache_off(void **state) {
  (void)state;
  char dir[1200];
  use_cache_dir("off", dir, sizeof dir);
  setenv("CAMDELTA_CACHE", "0", 1);
  camdelta_build_stats a = build_once(), b = build_once();
  assert_int_equal(a.compiled, 1);
  assert_int_equal(b.compiled, 1);
  assert_int_equal(b.from_disk, 0);
  struct stat sb;
  assert_int_not_equal(stat(dir, &sb), 0); /* nothing created */
  char got[64];
  TU_OK(camdelta_cache_dir(got, sizeof got));
  assert_string_equal(got, "");
  unsetenv("CAMDELTA_CACHE");
}

static void test_unwritable(void **state) {
  (void)state;
  /* a folder below a regular file cannot be created, even by root */
  char file[1200], dir[1300];
  snprintf(file, sizeof file, "%s/plain-file", tu_tmpdir());
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(dir, sizeof dir, "%s/cache", file);
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  camdelta_build_stats a = build_once(), b = build_once();
  assert_int_equal(a.compiled, 1);
  assert_int_equal(b.compiled, 1);
}

static void test_once_per_context(void **state) {
  (void)state;
  char dir[1200];
  use_cache_dir("once", dir, sizeof dir);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  cl_program p1, p2;
  TU_OK(cd_program(ctx, "prep.cl", kOpts, &p1));
  TU_OK(cd_program(ctx, "prep.cl", kOpts, &p2));
  assert_ptr_equal(p1, p2);
  camdelta_build_stats s;
  TU_OK(camdelta_context_build_stats(ctx, &s));
  assert_int_equal(s.programs, 1);
  camdelta_context_destroy(ctx);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* CAMDELTA_KERNEL_DIR: sources come from the folder; a missing file and a
 * kernel that does not compile are clear errors (with the build log). */
static void test_kernel_dir(void **state) {
  (void)state;
  char dir[1200], cache[1200], path[1400], src[1400];
  unsetenv("CAMDELTA_CACHE");
  use_cache_dir("kdir-cache", cache, sizeof cache);
  snprintf(dir, sizeof dir, "%s/kernels", tu_tmpdir());
  mkdir(dir, 0700);
  setenv("CAMDELTA_KERNEL_DIR", dir, 1);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  cl_program prog;
  assert_int_equal(cd_program(ctx, "prep.cl", kOpts, &prog), CAMDELTA_ERROR_IO);
  assert_non_null(strstr(camdelta_last_message(), "common.cl"));
  /* copy the real sources from the source tree */
  const char *root = getenv("CAMDELTA_SOURCE_DIR");
  assert_non_null(root);
  const char *names[2] = {"common.cl", "prep.cl"};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, "%s/cl/%s", root, names[i]);
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *in = fopen(src, "rb"), *out = fopen(path, "wb");
    assert_non_null(in);
    assert_non_null(out);
    int c;
    while ((c = fgetc(in)) != EOF) fputc(c, out);
    fclose(in), fclose(out);
  }
  TU_OK(cd_program(ctx, "prep.cl", kOpts, &prog));
  /* a kernel with a syntax error: CAMDELTA_ERROR_BUILD carrying the log */
  snprintf(path, sizeof path, "%s/broken.cl", dir);
  write_text(path, "kernel void broken(global float *x) { x[0] = undefined_symbol_xyz; }\n");
  assert_int_equal(cd_program(ctx, "broken.cl", "", &prog), CAMDELTA_ERROR_BUILD);
  assert_non_null(strstr(camdelta_last_message(), "broken.cl"));
  assert_non_null(strstr(camdelta_last_message(), "undefined_symbol_xyz"));
  camdelta_context_destroy(ctx);
  unsetenv("CAMDELTA_KERNEL_DIR");
}

/* After camdelta_warm_shape, calls of that shape compile nothing. */
static void test_warm_shape(void **state) {
  (void)state;
  char dir[1200];
  use_cache_dir("warm", dir, sizeof dir);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  enum { B = 1, H = 2, D = 16, F = 3, S = 40, N = F * S };
  assert_int_equal(camdelta_warm_shape(ctx, B, H, 12, S), CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(camdelta_warm_shape(NULL, B, H, D, S), CAMDELTA_ERROR_INVALID_ARGUMENT);
  TU_OK(camdelta_warm_shape(ctx, B, H, D, S));
  camdelta_build_stats before, after;
  TU_OK(camdelta_context_build_stats(ctx, &before));
  assert_true(before.programs >= 5);
  float *x = calloc(B * H * D * N, sizeof(float));
  tu_fill_normal(x, B * H * D * N, 0.3);
  /* buffers of this context (not the shared test context's) */
  cl_context clctx = camdelta_context_cl_context(ctx);
  cl_int err;
  const cl_mem_flags fl = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
  cl_mem q = clCreateBuffer(clctx, fl, B * H * D * N * 4, x, &err), k = clCreateBuffer(clctx, fl, B * H * D * N * 4, x, &err);
  cl_mem v = clCreateBuffer(clctx, fl, B * H * D * N * 4, x, &err), beta = clCreateBuffer(clctx, fl, B * H * N * 4, x, &err);
  cl_mem decay = clCreateBuffer(clctx, fl, B * H * F * 4, x, &err), out = clCreateBuffer(clctx, fl, B * H * D * N * 4, x, &err);
  assert_int_equal(err, CL_SUCCESS);
  for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
    camdelta_scan_args a = {B, H, D, F, S, 0, (camdelta_scan_algorithm)alg, {q, 0}, {k, 0}, {v, 0}, {beta, 0},
                            {decay, 0}, {out, 0}, {NULL, 0}, {NULL, 0}, NULL, NULL, CAMDELTA_PRECISION_EXACT};
    TU_OK(camdelta_scan_forward(ctx, &a, NULL));
  }
  TU_OK(camdelta_finish(ctx));
  TU_OK(camdelta_context_build_stats(ctx, &after));
  assert_int_equal(after.programs, before.programs);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(beta);
  clReleaseMemObject(decay), clReleaseMemObject(out);
  free(x);
  camdelta_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_across_contexts), cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_corrupt),             cmocka_unit_test(test_foreign),
      cmocka_unit_test(test_garbage),             cmocka_unit_test(test_cache_off),
      cmocka_unit_test(test_unwritable),          cmocka_unit_test(test_once_per_context),
      cmocka_unit_test(test_kernel_dir),          cmocka_unit_test(test_warm_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
