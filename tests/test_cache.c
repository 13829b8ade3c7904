#define _DEFAULT_SOURCE /* setgroups, utimes */
/* The disk program cache (docs/cache.md): hits across contexts, rebuilds of
 * truncated, corrupt and foreign entries, CAMDELTA_CACHE=0, an unwritable
 * folder, private permissions, and one build per context. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "testutil.h"
#include "scan/tc.h"

static const char *kOpts = "-DCD_DTYPE=0 -DCD_D=16 -DCD_TS=8";

static void use_cache_dir(const char *leaf, char *out, size_t size) {
  snprintf(out, size, "%s/%s", tu_tmpdir(), leaf);
  setenv("CAMDELTA_CACHE_DIR", out, 1);
  unsetenv("CAMDELTA_CACHE");
}

/* A new context whose kernel cache is the folder tu_tmpdir()/leaf. */
static camdelta_context *context_caching_in(const char *leaf) {
  char dir[1200];
  use_cache_dir(leaf, dir, sizeof dir);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  return ctx;
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

/* A cache in tu_tmpdir()/leaf (dir) holding the test program's one entry (its path in entry). */
static void stored_entry(const char *leaf, char dir[1200], char entry[1500]) {
  use_cache_dir(leaf, dir, 1200);
  build_once();
  only_entry(dir, entry, 1500);
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
  if (cd_cache_refusal()[0])
    fail_msg("the test folder is refused as a cache folder (%s): run the tests below folders that group and others "
             "cannot write",
             cd_cache_refusal());
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
  stored_entry(leaf, dir, entry);
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

/* A damaged entry (each its own test, its state one of kDamages) is never loaded and is rewritten. */
typedef struct damage_case {
  const char *leaf;
  void (*damage)(const char *path);
} damage_case;

static damage_case kDamages[] = {
    {"truncated", truncate_half}, {"corrupt", flip_payload_byte}, {"foreign", make_foreign}, {"garbage", garbage}};

static void test_damaged(void **state) {
  const damage_case *c = *state;
  damage_and_check(c->leaf, c->damage);
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
  camdelta_context *ctx = context_caching_in("once");
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
  camdelta_context *ctx = context_caching_in("warm");
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

/* ------------------------------------------------------------ hostile entries (issue 11) */

/* The entry of the test program (prep.cl kOpts) and of another program, in `dir`. */
static void two_entries(const char *dir, char *mine, char *other, size_t size) {
  build_once();
  only_entry(dir, mine, size);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  cl_program prog;
  TU_OK(cd_program(ctx, "prep_backward.cl", kOpts, &prog)); /* no cd_prep_forward in it */
  camdelta_context_destroy(ctx);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  other[0] = '\0';
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".clbin") && !strstr(mine, e->d_name)) snprintf(other, size, "%s/%s", dir, e->d_name);
  closedir(d);
  assert_true(other[0] != '\0');
}

/* An entry moved under another key's name, as is and with the key field rewritten: discarded and rebuilt, never
 * loaded (issue 11: a rewritten key loaded another program, and every call failed with CL_INVALID_KERNEL_NAME). */
static void test_moved_entry(void **state) {
  (void)state;
  char dir[1200], mine[1500], other[1500];
  use_cache_dir("moved", dir, sizeof dir);
  two_entries(dir, mine, other, sizeof mine);
  size_t n;
  unsigned char *b = tu_read_file(other, &n);
  tu_write_file(mine, b, n); /* as is: the key field names the other program */
  camdelta_build_stats s = build_once();
  assert_int_equal(s.from_disk, 0);
  assert_int_equal(s.compiled, 1);
  const char *base = strrchr(mine, '/') + 1;
  memcpy(b + 16, base, 64); /* the key field rewritten to this name: the hash (over header and payload) fails */
  tu_write_file(mine, b, n);
  s = build_once();
  assert_int_equal(s.from_disk, 0);
  assert_int_equal(s.compiled, 1);
  /* resealed as a writer would: it verifies and loads, but lacks the kernel: discarded and rebuilt */
  cd_cache_entry_seal(b, n);
  tu_write_file(mine, b, n);
  s = build_once(); /* build_once's cd_kernel succeeds only on the rebuilt program */
  assert_int_equal(s.compiled, 1);
  s = build_once();
  assert_int_equal(s.from_disk, 1); /* the rebuilt entry is good */
  free(b);
}

/* An entry claiming a 4 GiB payload is discarded without allocating it (issue 11: every load allocated 4 GiB
 * first); one claiming more than the file holds, or less, too. */
static void test_huge_claim(void **state) {
  (void)state;
  char dir[1200], entry[1500];
  stored_entry("huge", dir, entry);
  size_t n;
  unsigned char *b = tu_read_file(entry, &n);
  const uint64_t claims[3] = {((uint64_t)1 << 32) - 1, (uint64_t)(n - 184 + 1), (uint64_t)(n - 184 - 1)};
  for (int c = 0; c < 3; c++) {
    for (int i = 0; i < 8; i++) b[144 + i] = (unsigned char)(claims[c] >> (8 * i));
    cd_cache_entry_seal(b, n);
    tu_write_file(entry, b, n);
    atomic_store(&cd_cache_largest_alloc, 0);
    camdelta_build_stats s = build_once();
    assert_int_equal(s.from_disk, 0);
    if (atomic_load(&cd_cache_largest_alloc) > n)
      fail_msg("claim %llu: the reader allocated %zu bytes for a %zu-byte file", (unsigned long long)claims[c],
               atomic_load(&cd_cache_largest_alloc), n);
  }
  assert_int_equal(cd_cache_parse_entry(b, n, NULL, &n, NULL), 0);
  free(b);
}

/* A named pipe in place of an entry neither blocks a load nor is loaded (issue 11: blocked forever). */
static void test_fifo_entry(void **state) {
  (void)state;
  char dir[1200], entry[1500];
  stored_entry("fifo", dir, entry);
  unlink(entry);
  assert_int_equal(mkfifo(entry, 0600), 0);
  alarm(120); /* a hang becomes a failure */
  camdelta_build_stats s = build_once();
  alarm(0);
  assert_int_equal(s.from_disk, 0);
  struct stat sb;
  assert_int_equal(lstat(entry, &sb), 0);
  assert_true(S_ISREG(sb.st_mode)); /* replaced by a real entry */
}

/* Dates the file at path a minute beyond CD_CACHE_STALE_SECONDS in the past (access and modification times). */
static void make_stale(const char *path) {
  struct timeval tv[2];
  gettimeofday(&tv[0], NULL);
  tv[0].tv_sec -= CD_CACHE_STALE_SECONDS + 60;
  tv[1] = tv[0];
  assert_int_equal(utimes(path, tv), 0);
}

/* Temporary files older than CD_CACHE_STALE_SECONDS are removed on the next store; a fresh one is kept. */
static void test_stale_temp(void **state) {
  (void)state;
  char dir[1200], oldp[1500], fresh[1500];
  use_cache_dir("stale", dir, sizeof dir);
  mkdir(dir, 0700);
  snprintf(oldp, sizeof oldp, "%s/%064d.clbin.tmp.1.2.3", dir, 0);
  snprintf(fresh, sizeof fresh, "%s/%064d.clbin.tmp.4.5.6", dir, 1);
  tu_write_file(oldp, (const unsigned char *)"x", 1);
  tu_write_file(fresh, (const unsigned char *)"y", 1);
  make_stale(oldp);
  build_once(); /* compiles and stores */
  struct stat sb;
  assert_int_not_equal(lstat(oldp, &sb), 0);
  assert_int_equal(lstat(fresh, &sb), 0);
}

/* camdelta_cache_list / camdelta_cache_clear: states as a load would judge them; only camdelta's files. */
static void test_list_api(void **state) {
  (void)state;
  char dir[1200], mine[1500], other[1500], path[1500];
  use_cache_dir("list", dir, sizeof dir);
  camdelta_cache_entry *e = NULL;
  size_t n = 99;
  TU_OK(camdelta_cache_list(&e, &n)); /* not created yet */
  assert_int_equal(n, 0);
  two_entries(dir, mine, other, sizeof mine);
  size_t len;
  unsigned char *b = tu_read_file(other, &len);
  b[len - 1] ^= 1; /* a corrupt payload, right size: only the hash tells */
  tu_write_file(other, b, len);
  free(b);
  snprintf(path, sizeof path, "%s/%064d.clbin.tmp.9.9.9", dir, 7);
  tu_write_file(path, (const unsigned char *)"z", 1);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  tu_write_file(path, (const unsigned char *)"keep", 4);
  TU_OK(camdelta_cache_list(&e, &n));
  assert_int_equal(n, 3);
  int ok = 0, corrupt = 0, partial = 0;
  camdelta_device_info info;
  TU_OK(camdelta_context_info(tu_context(), &info));
  for (size_t i = 0; i < n; i++) {
    if (e[i].state == CAMDELTA_CACHE_ENTRY_OK) {
      ok++;
      assert_non_null(strstr(mine, e[i].file));
      assert_true(strncmp(e[i].device, info.device_name, 63) == 0);
      assert_int_equal(e[i].bytes, (uint64_t)file_size(mine));
    }
    corrupt += e[i].state == CAMDELTA_CACHE_ENTRY_CORRUPT;
    partial += e[i].state == CAMDELTA_CACHE_ENTRY_PARTIAL;
  }
  assert_int_equal(ok, 1);
  assert_int_equal(corrupt, 1);
  assert_int_equal(partial, 1);
  camdelta_cache_list_free(e);
  size_t removed = 0;
  uint64_t bytes = 0;
  TU_OK(camdelta_cache_clear(&removed, &bytes));
  assert_int_equal(removed, 3);
  assert_true(bytes > 0);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0); /* notes.txt survives */
  TU_OK(camdelta_cache_list(&e, &n));
  assert_int_equal(n, 0);
  camdelta_cache_list_free(e);
  assert_int_equal(camdelta_cache_list(NULL, &n), CAMDELTA_ERROR_INVALID_ARGUMENT);
}


/* A shared sticky folder the user owns (root's /tmp, or one like it) named as the cache folder was turned 0700 even by
 * `cache list`, locking every other user out (issue 38). Its mode is left alone: the files go to its private
 * subfolder camdelta-<uid>, which camdelta_cache_dir names. A shared folder without the sticky bit is refused. */
static void expect_refused(const char *dir, const char *why);

static void test_shared_sticky_folder(void **state) {
  (void)state;
  char dir[1200], sub[1300], got[1400];
  use_cache_dir("shared", dir, sizeof dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 01777), 0);
  snprintf(sub, sizeof sub, "%s/camdelta-%ld", dir, (long)geteuid());
  camdelta_cache_entry *e = NULL;
  size_t n = 9;
  TU_OK(camdelta_cache_list(&e, &n));
  assert_int_equal(n, 0);
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 01777);
  TU_OK(camdelta_cache_dir(got, sizeof got));
  assert_string_equal(got, sub);
  assert_int_equal(build_once().from_disk, 0);
  assert_int_equal(build_once().from_disk, 1);
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 01777); /* still shared */
  assert_int_equal(stat(sub, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0700);
  assert_int_equal(sb.st_uid, geteuid());
  char entry[1500];
  only_entry(sub, entry, sizeof entry);
  TU_OK(camdelta_cache_list(&e, &n));
  assert_int_equal(n, 1);
  camdelta_cache_list_free(e);
  /* a shared folder without the sticky bit: refused, its mode kept */
  assert_int_equal(chmod(dir, 0777), 0);
  expect_refused(dir, "and not sticky");
  assert_int_equal(camdelta_cache_list(&e, &n), CAMDELTA_ERROR_IO);
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0777);
  /* a private subfolder someone made group-writable: refused, not tightened */
  assert_int_equal(chmod(dir, 01777), 0);
  assert_int_equal(chmod(sub, 0770), 0);
  expect_refused(dir, "writable by group or others (mode 770)");
  assert_int_equal(stat(sub, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0770);
}

/* The refusal names the folder with its control bytes escaped (it once went raw to the terminal). */
static void test_refusal_escaped(void **state) {
  (void)state;
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/open\x1b]0;title\x07\nx", tu_tmpdir());
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  expect_refused(dir, "open\\x1b]0;title\\x07\\x0ax is writable by group or others");
  assert_null(strchr(cd_cache_refusal(), '\x1b'));
  assert_null(strchr(cd_cache_refusal(), '\n'));
}

/* ------------------------------------------------------------ the tuning file (issue 38, item 3) */

/* The tuning file's path for the test device in folder `dir`. */
static void tune_path(const char *dir, char *out, size_t size) {
  char name[200];
  cd_tune_file_name(tu_context(), name, sizeof name);
  snprintf(out, size, "%s/%s", dir, name);
}

/* The gram tiles a new context resolves for D = 16 ("WM=.. ... (source)", the part of camdelta_tune_get's text after
 * the family's values). */
static void gram_tiles(char *out, size_t size) {
  camdelta_context *ctx = NULL;
  char text[1024];
  TU_OK(camdelta_context_create(&ctx, NULL));
  TU_OK(camdelta_tune_get(ctx, "gram", 16, text, sizeof text));
  camdelta_context_destroy(ctx);
  const char *tiles = strstr(text, "; for D=16: ");
  assert_non_null(tiles);
  snprintf(out, size, "%s", tiles + strlen("; for D=16: "));
}

static const char kSaved16[] = "gram 16 16 3 1 1 2 24\napply 16 16 1 1 1 2 8\nframes 16 16 1 1 1 2 8\n";

/* A saved entry round trip: 0600, the user's, other D's kept, this D's replaced; a new context uses it. */
static void test_tune_file_roundtrip(void **state) {
  (void)state;
  char dir[1200], file[1500], got[256];
  use_cache_dir("tune-rt", dir, sizeof dir);
  tune_path(dir, file, sizeof file);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  TU_OK(camdelta_tune_set(ctx, "gram", "WM=3,WN=1,MR=1,NR=2,KC=24"));
  TU_OK(camdelta_tune_set(ctx, "apply", "WM=1,WN=1,MR=1,NR=2,KC=8"));
  TU_OK(camdelta_tune_set(ctx, "frames", "WM=1,WN=1,MR=1,NR=2,KC=8"));
  char path[1500];
  TU_OK(camdelta_tune_save(ctx, 16, path, sizeof path));
  assert_string_equal(path, file);
  TU_OK(camdelta_tune_save(ctx, 32, NULL, 0));
  TU_OK(camdelta_tune_set(ctx, "gram", "WM=1"));
  TU_OK(camdelta_tune_save(ctx, 32, NULL, 0)); /* replaces D = 32's lines */
  camdelta_context_destroy(ctx);
  tu_slurp(file, got, sizeof got);
  const size_t n16 = strlen(kSaved16);
  assert_memory_equal(got, kSaved16, n16);
  /* D = 32 once, with the second save's tiles: gram WM=1 (the rest as resolved then) */
  const char *d32 = got + n16;
  assert_true(strncmp(d32, "gram 32 32 1 ", 13) == 0);
  assert_non_null((d32 = strstr(d32, "\napply 32 32 ")));
  assert_non_null((d32 = strstr(d32 + 1, "\nframes 32 32 ")));
  assert_null(strchr(strchr(d32 + 1, '\n') + 1, '\n'));
  struct stat sb;
  assert_int_equal(lstat(file, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(sb.st_uid, geteuid());
  gram_tiles(got, sizeof got);
  assert_string_equal(got, "WM=3 WN=1 MR=1 NR=2 KC=24 (saved)");
  assert_string_equal(cd_tune_refusal(), "");
}

/* The strict parser: every malformed text is refused whole, naming why; good texts give their rows. */
static void test_tune_parse(void **state) {
  (void)state;
  static const char *const bad[] = {
      "gram 16 16 2 2 2 4 32",          /* no newline at the end */
      "gram 16 16 2 2 2 4 -32\n",       "gram 16 16 2 2 2 4 +32\n",   "gram  16 16 2 2 2 4 32\n",
      " gram 16 16 2 2 2 4 32\n",       "gram 16 16 2 2 2 4 32 \n",   "gram 16 16 2 2 2 4 32\r\n",
      "gram 16 16 2 2 2 4 18446744073709551648\n",                    "gram 16 16 2 2 2 4 4097\n",
      "gram 16 16 2 2 2 4 0\n",         "gram 17 17 2 2 2 4 32\n",    "gram 0 16 2 2 2 4 32\n",
      "gram 32 16 2 2 2 4 32\n",        "gram 16 136 2 2 2 4 32\n",   "GRAM 16 16 2 2 2 4 32\n",
      "gram 16 16 2 2 2 4\n",           "gram 16 16 2 2 2 4 32 1\n",  "gram\n",
      "\n",                             "gram 16 16 2 2 2 4 0x20\n",  "gram 16 16 2 2 2 4 32\ngram 16\n",
      "# comment\n",
  };
  unsigned rows[CD_TUNE_MAX_ENTRIES][8];
  int n;
  char why[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (cd_tune_parse(bad[i], strlen(bad[i]), rows, CD_TUNE_MAX_ENTRIES, &n, why, sizeof why))
      fail_msg("accepted '%s'", bad[i]);
  const char nul[] = "gram 16 16 2 2 2 4 32\n\0";
  assert_int_equal(cd_tune_parse(nul, sizeof nul - 1, rows, CD_TUNE_MAX_ENTRIES, &n, why, sizeof why), 0);
  assert_non_null(strstr(why, "NUL"));
  const char *three = "apply 8 8 1 1 1 1 8\ngram 16 16 2 2 2 4 32\nbad\n";
  assert_int_equal(cd_tune_parse(three, strlen(three), rows, 8, &n, why, sizeof why), 0);
  assert_non_null(strstr(why, "line 3"));
  assert_int_equal(cd_tune_parse("", 0, rows, 8, &n, why, sizeof why), 1);
  assert_int_equal(n, 0);
  assert_int_equal(cd_tune_parse(kSaved16, strlen(kSaved16), rows, 8, &n, why, sizeof why), 1);
  assert_int_equal(n, 3);
  const unsigned want[8] = {CD_TC_GRAM, 16, 16, 3, 1, 1, 2, 24};
  assert_memory_equal(rows[0], want, sizeof want);
  /* CD_TUNE_MAX_ENTRIES lines are good, one more is not; the longest possible lines fit CD_TUNE_MAX_BYTES */
  char text[CD_TUNE_MAX_BYTES + 64];
  size_t len = 0;
  for (int i = 0; i <= CD_TUNE_MAX_ENTRIES; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "frames 128 128 4096 4096 4096 4096 4096\n");
  assert_true(len <= CD_TUNE_MAX_BYTES);
  const size_t one = strlen("frames 128 128 4096 4096 4096 4096 4096\n");
  assert_int_equal(cd_tune_parse(text, len - one, rows, CD_TUNE_MAX_ENTRIES, &n, why, sizeof why), 1);
  assert_int_equal(n, CD_TUNE_MAX_ENTRIES);
  assert_int_equal(cd_tune_parse(text, len, rows, CD_TUNE_MAX_ENTRIES, &n, why, sizeof why), 0);
  assert_non_null(strstr(why, "more than"));
}

/* Files the rules refuse are ignored (the heuristic tiles), with the reason: malformed, too large, a FIFO (which
 * once blocked every tensor-core call forever, holding the context's lock), a symbolic link. */
static void test_tune_file_refused(void **state) {
  (void)state;
  char dir[1200], file[1500], got[256], elsewhere[1500];
  use_cache_dir("tune-bad", dir, sizeof dir);
  mkdir(dir, 0700);
  tune_path(dir, file, sizeof file);
  tu_write_file(file, (const unsigned char *)kSaved16, strlen(kSaved16));
  gram_tiles(got, sizeof got);
  assert_string_equal(got, "WM=3 WN=1 MR=1 NR=2 KC=24 (saved)"); /* the good file is used */
  static const char *const texts[] = {"gram 16 16 3 1 1 2 24\napply 16 16 1 1 1 2 -8\n", "gram 16 16 3 1 1 2 24"};
  for (int i = 0; i < 2; i++) {
    tu_write_file(file, (const unsigned char *)texts[i], strlen(texts[i]));
    gram_tiles(got, sizeof got);
    assert_non_null(strstr(got, "(heuristic)"));
    assert_non_null(strstr(cd_tune_refusal(), file));
  }
  char *big = malloc(CD_TUNE_MAX_BYTES + 1);
  assert_non_null(big);
  memset(big, '\n', CD_TUNE_MAX_BYTES + 1);
  memcpy(big, kSaved16, strlen(kSaved16));
  tu_write_file(file, (const unsigned char *)big, CD_TUNE_MAX_BYTES + 1);
  free(big);
  gram_tiles(got, sizeof got);
  assert_non_null(strstr(got, "(heuristic)"));
  assert_non_null(strstr(cd_tune_refusal(), "larger than the limit of 4096 bytes"));
  unlink(file);
  assert_int_equal(mkfifo(file, 0600), 0);
  alarm(60); /* a hang becomes a failure */
  gram_tiles(got, sizeof got);
  alarm(0);
  assert_non_null(strstr(got, "(heuristic)"));
  assert_non_null(strstr(cd_tune_refusal(), "not a regular file"));
  unlink(file);
  snprintf(elsewhere, sizeof elsewhere, "%s/tune-elsewhere.txt", tu_tmpdir());
  tu_write_file(elsewhere, (const unsigned char *)kSaved16, strlen(kSaved16));
  assert_int_equal(symlink(elsewhere, file), 0);
  gram_tiles(got, sizeof got);
  assert_non_null(strstr(got, "(heuristic)"));
  assert_non_null(strstr(cd_tune_refusal(), "symbolic link"));
  /* a save replaces the link (and the refused contents) with a regular file; the link's target is untouched */
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  TU_OK(camdelta_tune_save(ctx, 64, NULL, 0));
  camdelta_context_destroy(ctx);
  struct stat sb;
  assert_int_equal(lstat(file, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  tu_slurp(elsewhere, got, sizeof got);
  assert_string_equal(got, kSaved16);
}

/* `tune --save` once wrote through the fixed name <file>.tmp: a symbolic link planted there made it overwrite any
 * file the user can write. The temporary name is now random and created exclusively; stale temporary files of a
 * killed writer are removed by the next save. */
static void test_tune_save_temp(void **state) {
  (void)state;
  char dir[1200], file[1500], link[1600], victim[1500], got[256], stale[1700];
  use_cache_dir("tune-temp", dir, sizeof dir);
  mkdir(dir, 0700);
  tune_path(dir, file, sizeof file);
  snprintf(victim, sizeof victim, "%s/victim.txt", tu_tmpdir());
  tu_write_file(victim, (const unsigned char *)"precious\n", 9);
  snprintf(link, sizeof link, "%s.tmp", file);
  assert_int_equal(symlink(victim, link), 0);
  snprintf(stale, sizeof stale, "%s.tmp.0123456789abcdef", file);
  tu_write_file(stale, (const unsigned char *)"x", 1);
  make_stale(stale);
  camdelta_context *ctx = NULL;
  TU_OK(camdelta_context_create(&ctx, NULL));
  TU_OK(camdelta_tune_save(ctx, 16, NULL, 0));
  camdelta_context_destroy(ctx);
  tu_slurp(victim, got, sizeof got);
  assert_string_equal(got, "precious\n");
  struct stat sb;
  assert_int_equal(lstat(file, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_not_equal(lstat(stale, &sb), 0); /* removed */
  /* nothing else is left beside the file: only it, the planted link and nothing of the save's own */
  DIR *d = opendir(dir);
  assert_non_null(d);
  int others = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && !strstr(file, e->d_name) && !strstr(link, e->d_name)) others++;
  closedir(d);
  assert_int_equal(others, 0);
}

/* The child of test_tune_warning_once, a fresh process (the warning is once per process): three contexts resolve
 * tiles with a refused tuning file; exit 0 when each gets the heuristic ones. */
static int tune_warning_child(void) {
  for (int i = 0; i < 3; i++) {
    camdelta_context *ctx = NULL;
    char got[1024];
    if (camdelta_context_create(&ctx, NULL) || camdelta_tune_get(ctx, "gram", 16, got, sizeof got)) return 91;
    if (!strstr(got, "(heuristic)")) return 92;
    camdelta_context_destroy(ctx);
  }
  return 0;
}

static char g_self[4096]; /* this program, for children run anew */

/* A refused tuning file gives one warning per process, its path escaped (control bytes never reach a terminal). */
static void test_tune_warning_once(void **state) {
  (void)state;
  char dir[1200], file[1500], log[1500];
  snprintf(dir, sizeof dir, "%s/tune\x1b[31mred\nline", tu_tmpdir());
  mkdir(dir, 0700);
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  tune_path(dir, file, sizeof file);
  tu_write_file(file, (const unsigned char *)"gram 16 16\n", 11);
  snprintf(log, sizeof log, "%s/tune-warning.log", tu_tmpdir());
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (!freopen(log, "w", stderr)) _exit(90);
    execl(g_self, g_self, "--tune-warning-child", (char *)NULL);
    _exit(89);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  char text[8192];
  tu_slurp(log, text, sizeof text);
  int n = 0;
  for (const char *p = text; (p = strstr(p, "ignoring the tuning file")); p++) n++;
  if (n != 1) fail_msg("%d warnings, not one: '%s'", n, text);
  assert_non_null(strstr(text, "tune\\x1b[31mred\\x0aline/tune-"));
  assert_null(strchr(text, '\x1b'));
  assert_non_null(strstr(text, "line 1 is not"));
}

/* ------------------------------------------------------------ a second user (issue 11) */

static uid_t g_evil_uid;
static gid_t g_evil_gid;
static char g_base[256];

/* A throwaway second user when running as root (CI does); otherwise the reason, and 0. */
static int second_user(void) {
  if (geteuid() != 0) {
    print_message("skipping the second-user attacks: not running as root (uid %ld), so no second user can be "
                  "created or impersonated\n", (long)geteuid());
    return 0;
  }
  struct stat sb;
  if (g_evil_uid && g_base[0] && stat(g_base, &sb) == 0) return 1;
  struct passwd *pw = g_evil_uid ? NULL : getpwnam("cdevil");
  if (!g_evil_uid && !pw && system("command -v useradd >/dev/null 2>&1") == 0) {
    int rc = system("useradd --system --no-create-home --shell /usr/sbin/nologin cdevil >/dev/null 2>&1");
    pw = getpwnam("cdevil");
    if (!pw) fail_msg("root, but useradd failed (status %d): cannot create the second user", rc);
  }
  if (g_evil_uid) {
    /* known from an earlier test: only the base is made anew */
  } else if (pw) {
    g_evil_uid = pw->pw_uid;
    g_evil_gid = pw->pw_gid;
  } else {
    /* no useradd here: root can still act as a uid that no account uses */
    uid_t u = 54321;
    while (getpwuid(u)) u++;
    g_evil_uid = u;
    g_evil_gid = (gid_t)u;
    print_message("no useradd on this machine: the second user is the unused uid %ld\n", (long)u);
  }
  /* a world-traversable base outside the 0700 test folder, with a sticky world-writable place like /tmp */
  snprintf(g_base, sizeof g_base, "/tmp/camdelta-attack-XXXXXX");
  assert_non_null(mkdtemp(g_base));
  assert_int_equal(chmod(g_base, 0755), 0);
  char p[400];
  snprintf(p, sizeof p, "%s/sticky", g_base);
  assert_int_equal(mkdir(p, 0777), 0);
  assert_int_equal(chmod(p, 01777), 0);
  snprintf(p, sizeof p, "%s/open", g_base);
  assert_int_equal(mkdir(p, 0777), 0);
  assert_int_equal(chmod(p, 0777), 0);
  return 1;
}

/* Runs `script` (sh) as the second user; fails the test unless it succeeds. */
static void as_evil(const char *script) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(g_evil_gid) != 0 || setuid(g_evil_uid) != 0) _exit(97);
    execl("/bin/sh", "sh", "-c", script, (char *)NULL);
    _exit(98);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("as the second user: '%s' failed (status %d)", script, st);
}

/* A genuine entry of the test program, world-readable at g_base/genuine (the attacker copies it under any
 * name: a real binary, so loading it would "work"). Returns its file name. */
static const char *genuine_entry(void) {
  static char name[128];
  char dir[1200], entry[1500], dst[400];
  stored_entry("genuine", dir, entry);
  snprintf(name, sizeof name, "%s", strrchr(entry, '/') + 1);
  size_t n;
  unsigned char *b = tu_read_file(entry, &n);
  snprintf(dst, sizeof dst, "%s/genuine", g_base);
  tu_write_file(dst, b, n);
  chmod(dst, 0644);
  free(b);
  return name;
}

static void expect_refused(const char *dir, const char *why) {
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  camdelta_build_stats s = build_once();
  assert_int_equal(s.from_disk, 0);
  s = build_once();
  assert_int_equal(s.from_disk, 0); /* still uncached */
  if (!strstr(cd_cache_refusal(), why)) fail_msg("refusal '%s' lacks '%s'", cd_cache_refusal(), why);
}

static void test_second_user(void **state) {
  (void)state;
  if (!second_user()) skip();
  const char *name = genuine_entry();
  char cmd[2000], dir[600];
  /* 1. a folder the attacker owns, holding a (genuine-looking) entry: never used */
  snprintf(dir, sizeof dir, "%s/sticky/theirs", g_base);
  snprintf(cmd, sizeof cmd, "mkdir -m 0777 '%s' && cp '%s/genuine' '%s/%s'", dir, g_base, dir, name);
  as_evil(cmd);
  expect_refused(dir, "not by you");
  char path[800];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_uid, g_evil_uid); /* untouched */
  /* 2. the user's own folder left 0777 (not sticky), where the attacker planted an entry: refused, its mode left
   *    as it is (camdelta changes the mode of no folder it did not create), the entry never loaded */
  snprintf(dir, sizeof dir, "%s/sticky/mine", g_base);
  assert_int_equal(mkdir(dir, 0777), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  snprintf(cmd, sizeof cmd, "cp '%s/genuine' '%s/%s'", g_base, dir, name);
  as_evil(cmd);
  expect_refused(dir, "and not sticky");
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0777);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_uid, g_evil_uid); /* untouched */
  /* the same folder made private by its owner: the planted entry (not the user's) is discarded and rebuilt */
  assert_int_equal(chmod(dir, 0755), 0);
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  camdelta_build_stats s = build_once();
  assert_int_equal(s.from_disk, 0);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_uid, geteuid()); /* replaced by the user's own */
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0755); /* readable by others, used as it is */
  s = build_once();
  assert_int_equal(s.from_disk, 1); /* and a sticky parent is fine */
  /* 3. a symbolic link planted at a guessable path: as the folder, and as a parent */
  snprintf(dir, sizeof dir, "%s/sticky/link", g_base);
  snprintf(cmd, sizeof cmd, "ln -s '%s/sticky/theirs' '%s'", g_base, dir);
  as_evil(cmd);
  expect_refused(dir, "symbolic link");
  snprintf(dir, sizeof dir, "%s/sticky/link/sub", g_base);
  expect_refused(dir, "symbolic link owned by uid");
  /* 3b. the shared sticky folder itself as the cache folder: its private subfolder, which the attacker pre-created
   *     (theirs) or planted as a link: refused */
  snprintf(dir, sizeof dir, "%s/sticky", g_base);
  snprintf(cmd, sizeof cmd, "mkdir -m 0700 '%s/camdelta-%ld'", dir, (long)geteuid());
  as_evil(cmd);
  expect_refused(dir, "not by you");
  snprintf(cmd, sizeof cmd, "rmdir '%s/camdelta-%ld' && ln -s '%s/theirs' '%s/camdelta-%ld'", dir, (long)geteuid(),
           dir, dir, (long)geteuid());
  as_evil(cmd);
  expect_refused(dir, "as a real folder");
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 01777);
  /* 4. a parent anyone can write (not sticky): the attacker could swap the folder */
  snprintf(dir, sizeof dir, "%s/open/cache", g_base);
  assert_int_equal(mkdir(dir, 0700), 0);
  expect_refused(dir, "writable by group or others");
  /* and the listing refuses it too, with the reason */
  camdelta_cache_entry *e = NULL;
  size_t n;
  assert_int_equal(camdelta_cache_list(&e, &n), CAMDELTA_ERROR_IO);
  assert_non_null(strstr(camdelta_last_message(), "writable by group or others"));
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
  assert_int_equal(system(cmd), 0);
}

/* The tuning file under the same rules (issue 38): in a folder the cache refuses (another user's), that user's
 * tiles were used; a tuning file in the user's own folder that another user owns is ignored too. */
static void test_tune_second_user(void **state) {
  (void)state;
  if (!second_user()) skip();
  char dir[600], file[1500], cmd[4000], got[256];
  snprintf(dir, sizeof dir, "%s/sticky/tune-theirs", g_base);
  tune_path(dir, file, sizeof file);
  snprintf(cmd, sizeof cmd, "mkdir -m 0755 '%s' && printf '%%s' '%s' > '%s'", dir, kSaved16, file);
  as_evil(cmd);
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  gram_tiles(got, sizeof got);
  assert_non_null(strstr(got, "(heuristic)"));
  assert_non_null(strstr(cd_cache_refusal(), "not by you"));
  snprintf(dir, sizeof dir, "%s/tune-mine", g_base);
  assert_int_equal(mkdir(dir, 0755), 0);
  tune_path(dir, file, sizeof file);
  tu_write_file(file, (const unsigned char *)kSaved16, strlen(kSaved16));
  assert_int_equal(chown(file, g_evil_uid, g_evil_gid), 0);
  setenv("CAMDELTA_CACHE_DIR", dir, 1);
  gram_tiles(got, sizeof got);
  assert_non_null(strstr(got, "(heuristic)"));
  assert_non_null(strstr(cd_tune_refusal(), "not owned by you"));
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
  assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--tune-warning-child") == 0) return tune_warning_child();
  if (!realpath(argv[0], g_self)) snprintf(g_self, sizeof g_self, "%s", argv[0]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_across_contexts),
      {.name = "test_truncated", .test_func = test_damaged, .initial_state = &kDamages[0]},
      {.name = "test_corrupt", .test_func = test_damaged, .initial_state = &kDamages[1]},
      {.name = "test_foreign", .test_func = test_damaged, .initial_state = &kDamages[2]},
      {.name = "test_garbage", .test_func = test_damaged, .initial_state = &kDamages[3]},
      cmocka_unit_test(test_cache_off),
      cmocka_unit_test(test_unwritable),          cmocka_unit_test(test_once_per_context),
      cmocka_unit_test(test_kernel_dir),          cmocka_unit_test(test_warm_shape),
      cmocka_unit_test(test_moved_entry),         cmocka_unit_test(test_huge_claim),
      cmocka_unit_test(test_fifo_entry),          cmocka_unit_test(test_stale_temp),
      cmocka_unit_test(test_list_api),            cmocka_unit_test(test_second_user),
      cmocka_unit_test(test_tune_file_roundtrip), cmocka_unit_test(test_tune_parse),
      cmocka_unit_test(test_tune_file_refused),   cmocka_unit_test(test_tune_save_temp),
      cmocka_unit_test(test_tune_warning_once),   cmocka_unit_test(test_tune_second_user),
      cmocka_unit_test(test_shared_sticky_folder), cmocka_unit_test(test_refusal_escaped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
