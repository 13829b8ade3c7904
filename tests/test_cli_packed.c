/* `camdelta run scan|scan-backward` over packed clips (frame_offsets.npy and clip_offsets.npy, int64 <i8) against
 * the f64 packed reference, both directions, with per-clip init states; bad offset files and bad offsets give a
 * clear input error (exit 3) and write nothing. Also camdelta_npy_read_i64 on good and bad files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "testutil.h"

enum { H = 2, D = 8, CLIPS = 3, F = 6 };
static const int64_t FO[F + 1] = {0, 5, 10, 11, 12, 16, 19}; /* clips: 2 frames of 5; 1 frame of 1... */
static const int64_t CO[CLIPS + 1] = {0, 2, 3, 6};
#define N 19

static char g_dir[4096];

static const char *path_of(const char *sub, const char *name) {
  static char p[8192];
  snprintf(p, sizeof p, "%s/%s/%s.npy", g_dir, sub, name);
  return p;
}

static void mkdirs(const char *sub) {
  char p[8192];
  snprintf(p, sizeof p, "%s/%s", g_dir, sub);
  mkdir(g_dir, 0700);
  mkdir(p, 0700);
}

/* A 1-D <i8 .npy written by hand (format 1.0, header padded to 64 bytes). */
static void write_i64(const char *path, const int64_t *v, size_t n, const char *descr, int two_d) {
  char dict[128];
  int len = two_d ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (1, %zu), }", descr, n)
                  : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%zu,), }", descr, n);
  size_t hl = (size_t)len + 1, total = 10 + hl;
  size_t pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((hl + pad) & 0xFF),
                                 (unsigned char)((hl + pad) >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, (size_t)len, f);
  for (size_t i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(v, 8, n, f);
  fclose(f);
}

static void save(const char *sub, const char *name, int ndim, const size_t *shape, const float *x) {
  TU_OK(camdelta_npy_write(path_of(sub, name), CAMDELTA_NPY_F4, ndim, shape, x));
}

static float *load(const char *sub, const char *name, size_t n) {
  camdelta_npy a;
  TU_OK(camdelta_npy_read(path_of(sub, name), &a));
  assert_int_equal(a.count, n);
  float *x = malloc(n * 4);
  memcpy(x, a.data, n * 4);
  camdelta_npy_free(&a);
  return x;
}

static int run(const char *args, char *err, size_t errsize) {
  char cmd[16384], ef[8192];
  snprintf(ef, sizeof ef, "%s/stderr.txt", g_dir);
  snprintf(cmd, sizeof cmd, "\"%s\" %s 2>\"%s\"", getenv("CAMDELTA_CLI"), args, ef);
  int st = system(cmd);
  FILE *f = fopen(ef, "r");
  size_t got = f ? fread(err, 1, errsize - 1, f) : 0;
  err[got] = '\0';
  if (f) fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* run() with stdout kept in out */
static int run_out(const char *args, char *out, size_t outsize, char *err, size_t errsize) {
  char full[16384], of[8192];
  snprintf(of, sizeof of, "%s/stdout.txt", g_dir);
  snprintf(full, sizeof full, "%s >\"%s\"", args, of);
  const int rc = run(full, err, errsize);
  FILE *f = fopen(of, "r");
  size_t got = f ? fread(out, 1, outsize - 1, f) : 0;
  out[got] = '\0';
  if (f) fclose(f);
  return rc;
}

/* camdelta bench --packed: one row per direction and pass, each with the fixed, packed and one-row times (positive)
 * and the two ratios that follow from them; a bad shape, a bad count and an option it does not take are usage
 * errors that time nothing. */
static void test_bench_packed(void **state) {
  (void)state;
  mkdirs("bench");
  static char out[16384], err[8192];
  assert_int_equal(run_out("bench --packed --shape 2,2,16,2,8 --reps 3 --warmup 1", out, sizeof out, err, sizeof err),
                   0);
  static const char *const rows[4] = {"scan forward causal", "scan forward reverse", "scan backward causal",
                                      "scan backward reverse"};
  for (int i = 0; i < 4; i++) {
    const char *p = strstr(out, rows[i]);
    assert_non_null(p);
    double fixed = 0, packed = 0, ratio = 0, one = 0, ratio1 = 0;
    char path[32] = "";
    assert_int_equal(sscanf(p + strlen(rows[i]), "%lf %lf %lfx %lf %lfx %31s", &fixed, &packed, &ratio, &one, &ratio1,
                            path),
                     6);
    assert_true(fixed > 0 && packed > 0 && one > 0);
    /* the ratios are printed to 2 decimals from the unrounded times, the times to 3 */
    assert_true(fabs(ratio - packed / fixed) <= 0.0051 + ratio * (0.0005 / packed + 0.0005 / fixed));
    assert_true(fabs(ratio1 - packed / one) <= 0.0051 + ratio1 * (0.0005 / packed + 0.0005 / one));
    /* the backward always runs natively; the forward natively unless it picked the sequential algorithm */
    if (i >= 2) assert_string_equal(path, "native");
    else assert_true(strcmp(path, "native") == 0 || strcmp(path, "padded") == 0);
  }
  assert_non_null(strstr(out, "fixed, 1 row"));
  assert_int_equal(run_out("bench --packed --shape 2,2,12,2,8", out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "clips,H,D,F,S"));
  assert_int_equal(run_out("bench --packed --reps -1", out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "--reps"));
  assert_int_equal(run_out("bench --packed --only scan", out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "unknown option '--only'"));
  assert_null(strstr(out, "scan forward causal")); /* nothing timed */
}

static void test_read_i64(void **state) {
  (void)state;
  mkdirs("i64");
  write_i64(path_of("i64", "good"), FO, F + 1, "<i8", 0);
  int64_t *v = NULL;
  size_t n = 0;
  TU_OK(camdelta_npy_read_i64(path_of("i64", "good"), &v, &n));
  assert_int_equal(n, F + 1);
  assert_memory_equal(v, FO, sizeof FO);
  free(v);
  write_i64(path_of("i64", "float"), FO, F + 1, "<f8", 0);
  assert_int_equal(camdelta_npy_read_i64(path_of("i64", "float"), &v, &n), CAMDELTA_ERROR_FORMAT);
  assert_non_null(strstr(camdelta_last_message(), "expected <i8"));
  write_i64(path_of("i64", "twod"), FO, F + 1, "<i8", 1);
  assert_int_equal(camdelta_npy_read_i64(path_of("i64", "twod"), &v, &n), CAMDELTA_ERROR_FORMAT);
  assert_non_null(strstr(camdelta_last_message(), "1-D"));
  /* the general reader gives the same values, typed <i8 */
  camdelta_npy a;
  TU_OK(camdelta_npy_read(path_of("i64", "good"), &a));
  assert_int_equal(a.type, CAMDELTA_NPY_I8);
  assert_memory_equal(a.data, FO, sizeof FO);
  camdelta_npy_free(&a);
}

static void test_run_packed(void **state) {
  (void)state;
  mkdirs("in");
  tu_seed(9);
  const size_t nt = H * D * N, ns = CLIPS * H * D * D;
  float *q = malloc(nt * 4), *k = malloc(nt * 4), *v = malloc(nt * 4), *go = malloc(nt * 4), *beta = malloc(H * N * 4),
        *decay = malloc(H * F * 4), *init = malloc(ns * 4);
  tu_fill_uniform(q, nt, -1, 1), tu_fill_normal(k, nt, 0.15), tu_fill_normal(v, nt, 1), tu_fill_normal(go, nt, 1);
  tu_fill_uniform(beta, H * N, 0, 1), tu_fill_uniform(decay, H * F, 0.6, 1), tu_fill_normal(init, ns, 0.3);
  const size_t tok[4] = {1, H, D, N}, bt[3] = {1, H, N}, dc[3] = {1, H, F}, st[4] = {CLIPS, H, D, D};
  save("in", "q", 4, tok, q), save("in", "k", 4, tok, k), save("in", "v", 4, tok, v), save("in", "grad_out", 4, tok, go);
  save("in", "beta", 3, bt, beta), save("in", "decay", 3, dc, decay), save("in", "init_state", 4, st, init);
  write_i64(path_of("in", "frame_offsets"), FO, F + 1, "<i8", 0);
  write_i64(path_of("in", "clip_offsets"), CO, CLIPS + 1, "<i8", 0);
  double *dq = tu_to_f64(q, nt), *dk = tu_to_f64(k, nt), *dv = tu_to_f64(v, nt), *dgo = tu_to_f64(go, nt);
  double *db = tu_to_f64(beta, H * N), *dd = tu_to_f64(decay, H * F), *di = tu_to_f64(init, ns);
  char err[4096], args[16384];
  for (int rev = 0; rev < 2; rev++) {
    snprintf(args, sizeof args, "run scan --in \"%s/in\" --out \"%s/out%d\" --final-state %s --quiet", g_dir, g_dir, rev,
             rev ? "--reverse" : "");
    assert_int_equal(run(args, err, sizeof err), 0);
    snprintf(args, sizeof args, "run scan-backward --in \"%s/in\" --out \"%s/outb%d\" %s --quiet", g_dir, g_dir, rev,
             rev ? "--reverse" : "");
    assert_int_equal(run(args, err, sizeof err), 0);
    double *ro = malloc(nt * 8), *rf = malloc(ns * 8), *g[6];
    const size_t gn[6] = {nt, nt, nt, H * N, H * F, ns};
    for (int i = 0; i < 6; i++) g[i] = malloc(gn[i] * 8);
    camdelta_ref_scan_packed a = {H, D, F, CLIPS, FO, CO, rev, dq, dk, dv, db, dd, di, ro, rf};
    TU_OK(camdelta_ref_scan_packed_forward(&a));
    camdelta_ref_scan_grads gr = {dgo, NULL, g[0], g[1], g[2], g[3], g[4], g[5]};
    a.out = NULL, a.final_state = NULL;
    TU_OK(camdelta_ref_scan_packed_backward(&a, &gr));
    char sub[64], subb[64];
    snprintf(sub, sizeof sub, "out%d", rev), snprintf(subb, sizeof subb, "outb%d", rev);
    float *o = load(sub, "out", nt), *f = load(sub, "final_state", ns);
    const double eo = tu_rel_err(o, ro, nt), ef = tu_rel_err(f, rf, ns);
    printf("cli packed %s: out %.2e final %.2e", rev ? "reverse" : "causal", eo, ef);
    assert_true(eo <= 1e-5 && ef <= 1e-5);
    static const char *const gname[6] = {"dq", "dk", "dv", "dbeta", "ddecay", "dinit_state"};
    for (int i = 0; i < 6; i++) {
      float *x = load(subb, gname[i], gn[i]);
      const double e = tu_rel_err(x, g[i], gn[i]);
      printf(" %s %.2e", gname[i], e);
      assert_true(e <= 1e-4);
      free(x), free(g[i]);
    }
    printf("\n");
    free(o), free(f), free(ro), free(rf);
  }
  /* bad offsets: exit 3, a message naming the problem, nothing written */
  int64_t bad[F + 1];
  memcpy(bad, FO, sizeof bad);
  bad[3] = bad[2];
  write_i64(path_of("in", "frame_offsets"), bad, F + 1, "<i8", 0);
  snprintf(args, sizeof args, "run scan --in \"%s/in\" --out \"%s/never\"", g_dir, g_dir);
  assert_int_equal(run(args, err, sizeof err), 3);
  assert_non_null(strstr(err, "not increasing"));
  struct stat sb;
  char never[8192];
  snprintf(never, sizeof never, "%s/never", g_dir);
  assert_int_not_equal(stat(never, &sb), 0);
  write_i64(path_of("in", "frame_offsets"), FO, F + 1, "<f8", 0); /* wrong dtype */
  assert_int_equal(run(args, err, sizeof err), 3);
  assert_non_null(strstr(err, "frame_offsets.npy"));
  write_i64(path_of("in", "frame_offsets"), FO, F, "<i8", 0); /* one frame short: decay no longer fits */
  assert_int_equal(run(args, err, sizeof err), 3);
  assert_non_null(strstr(err, "decay"));
  assert_int_not_equal(stat(never, &sb), 0);
  free(q), free(k), free(v), free(go), free(beta), free(decay), free(init);
  free(dq), free(dk), free(dv), free(dgo), free(db), free(dd), free(di);
}

int main(void) {
  const char *cli = getenv("CAMDELTA_CLI");
  if (!cli || !*cli) {
    fprintf(stderr, "CAMDELTA_CLI is not set: run through ctest\n");
    return 1;
  }
  snprintf(g_dir, sizeof g_dir, "%s", tu_tmpdir());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_i64),
      cmocka_unit_test(test_run_packed),
      cmocka_unit_test(test_bench_packed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
