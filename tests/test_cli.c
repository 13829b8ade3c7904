/* The camdelta command-line tool, run as a separate process (CAMDELTA_CLI):
 * info, run on .npy files checked against the f64 reference, and every
 * documented error path with its exit code and message. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ running it */

typedef struct cli_result {
  int code;
  char out[65536];
  char err[16384];
} cli_result;

static cli_result g_res;

static const char *cli_path(void) {
  const char *p = getenv("CAMDELTA_CLI");
  return p && *p ? p : NULL;
}

/* Run `camdelta <args>` (args: a shell word list) with optional extra
 * environment assignments; fills g_res. */
#if defined(__GNUC__)
static cli_result *run_env(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
static cli_result *run_env(const char *env, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  g_res.code = tu_run_cli(env, cli_path(), NULL, 0, g_res.out, sizeof g_res.out, g_res.err, sizeof g_res.err, fmt, ap);
  va_end(ap);
  return &g_res;
}
#define run(...) run_env(NULL, __VA_ARGS__)

static void expect_code(const cli_result *r, int code, const char *needle_err) {
  if (r->code != code)
    fail_msg("exit code %d, expected %d\nstdout: %s\nstderr: %s", r->code, code, r->out, r->err);
  if (needle_err && !strstr(r->err, needle_err)) fail_msg("stderr lacks '%s':\n%s", needle_err, r->err);
  if (code != 0) {
    /* one line: "camdelta: error: ..." */
    if (strncmp(r->err, "camdelta: error: ", 17) != 0)
      fail_msg("stderr does not start with 'camdelta: error: ': %s", r->err);
    const char *nl = strchr(r->err, '\n');
    if (!nl || nl[1] != '\0') fail_msg("stderr is not exactly one line: %s", r->err);
  }
}

static int cli_setup(void **state) {
  (void)state;
  if (!cli_path()) {
    fprintf(stderr, "CAMDELTA_CLI is not set: run through ctest\n");
    return -1;
  }
  if (access(cli_path(), X_OK) != 0) {
    fprintf(stderr, "CAMDELTA_CLI=%s is not an executable (did the tool build?)\n", cli_path());
    return -1;
  }
  return 0;
}

static int cli_teardown(void **state) {
  (void)state;
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_tmpdir());
  return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ npy helpers */

/* Write DIR/NAME.npy of `type` from f32 values; returns the values as the file holds them (rounded). */
static void save(const char *dir, const char *name, camdelta_npy_type type, int ndim, const size_t *shape, float *x) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  void *data;
  if (type == CAMDELTA_NPY_F4) {
    data = tu_pack(CAMDELTA_F32, x, n);
  } else if (type == CAMDELTA_NPY_F2) {
    tu_round_to(CAMDELTA_F16, x, n);
    data = tu_pack(CAMDELTA_F16, x, n);
  } else {
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    data = d;
  }
  TU_OK(camdelta_npy_write(path, type, ndim, shape, data));
  free(data);
}

/* Read DIR/NAME.npy as f32; checks the type and shape. */
static float *load(const char *dir, const char *name, camdelta_npy_type type, int ndim, const size_t *shape) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  camdelta_npy a;
  camdelta_status st = camdelta_npy_read(path, &a);
  if (st) fail_msg("%s", camdelta_last_message());
  assert_int_equal(a.type, type);
  assert_int_equal(a.ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(a.shape[i], shape[i]);
  float *x = malloc((a.count ? a.count : 1) * sizeof *x);
  assert_non_null(x);
  if (type == CAMDELTA_NPY_F4) tu_unpack(CAMDELTA_F32, a.data, x, a.count);
  else if (type == CAMDELTA_NPY_F2) tu_unpack(CAMDELTA_F16, a.data, x, a.count);
  else fail_msg("unexpected output type");
  camdelta_npy_free(&a);
  return x;
}

static int file_exists(const char *dir, const char *name) {
  char path[1400];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  return stat(path, &sb) == 0;
}

static void remove_file(const char *dir, const char *name) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  assert_int_equal(remove(path), 0);
}

/* An .npy with an arbitrary descr (e.g. "<i4") and zeroed data. */
static void save_raw(const char *dir, const char *name, const char *descr, const char *shape_text, size_t data_bytes) {
  char path[1400], dict[256];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape_text);
  size_t hl = (size_t)dl + 1;
  hl += (64 - (10 + hl) % 64) % 64;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xFF), (unsigned char)(hl >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, (size_t)dl, f);
  for (size_t i = (size_t)dl; i + 1 < hl; i++) fputc(' ', f);
  fputc('\n', f);
  for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
  fclose(f);
}

/* ------------------------------------------------------------ prep data */

typedef struct prep_data {
  size_t B, N, H, D;
  float *in[9]; /* q_raw k_raw v_raw q_norm_weight k_norm_weight proj_q proj_kv rope_cos rope_sin */
  size_t n[9];
} prep_data;

static const char *const prep_names[9] = {"q_raw",  "k_raw",   "v_raw",    "q_norm_weight", "k_norm_weight",
                                          "proj_q", "proj_kv", "rope_cos", "rope_sin"};

/* Random prep inputs written into dir; q/k/v_raw as `raw_type`, the rest as <f4. */
static void prep_make(prep_data *p, const char *dir, size_t B, size_t N, size_t H, size_t D,
                      camdelta_npy_type raw_type, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->B = B, p->N = N, p->H = H, p->D = D;
  tu_seed(seed);
  size_t bnhd[4] = {B, N, H, D}, c[1] = {H * D}, bn44[4] = {B, N, 4, 4}, ndh[2] = {N, D / 2};
  const size_t *shapes[9] = {bnhd, bnhd, bnhd, c, c, bn44, bn44, ndh, ndh};
  const int nd[9] = {4, 4, 4, 1, 1, 4, 4, 2, 2};
  for (int i = 0; i < 9; i++) {
    size_t n = 1;
    for (int k = 0; k < nd[i]; k++) n *= shapes[i][k];
    p->n[i] = n;
    p->in[i] = malloc(n * sizeof(float));
    assert_non_null(p->in[i]);
    if (i == 3 || i == 4) tu_fill_uniform(p->in[i], n, 0.5, 1.5);
    else if (i == 7 || i == 8) tu_fill_uniform(p->in[i], n, -1, 1);
    else tu_fill_normal(p->in[i], n, 1.0);
    save(dir, prep_names[i], i < 3 ? raw_type : CAMDELTA_NPY_F4, nd[i], shapes[i], p->in[i]);
  }
}

/* A fresh folder `leaf` holding a small prep problem (B 1, N 8, H 2, D 16; q/k/v_raw as raw_type); its path. out
 * (unless NULL): the path of its output folder leaf/out. */
static const char *small_prep(const char *leaf, prep_data *p, camdelta_npy_type raw_type, uint64_t seed,
                              char out[1300]) {
  const char *in = tu_fresh_dir(leaf);
  prep_make(p, in, 1, 8, 2, 16, raw_type, seed);
  if (out) snprintf(out, 1300, "%s/out", in);
  return in;
}

static void prep_free(prep_data *p) {
  for (int i = 0; i < 9; i++) free(p->in[i]);
}

/* Check DIR's q k v inflation_sq against the f64 reference; returns the largest relative error. */
static double prep_check(const prep_data *p, const char *out, double k_scale, double eps, camdelta_npy_type type) {
  double *d[9];
  for (int i = 0; i < 9; i++) d[i] = tu_to_f64(p->in[i], p->n[i]);
  size_t n = p->B * p->H * p->D * p->N, ni = p->B * p->H * p->N;
  double *rq = malloc(n * sizeof(double)), *rk = malloc(n * sizeof(double)), *rv = malloc(n * sizeof(double));
  double *ri = malloc(ni * sizeof(double));
  camdelta_ref_prep r = {p->B, p->N, p->H, p->D, k_scale, eps, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8],
                         rq, rk, rv, ri};
  TU_OK(camdelta_ref_prep_forward(&r));
  size_t bhdn[4] = {p->B, p->H, p->D, p->N}, bhn[3] = {p->B, p->H, p->N};
  float *q = load(out, "q", type, 4, bhdn), *k = load(out, "k", type, 4, bhdn), *v = load(out, "v", type, 4, bhdn);
  float *inf = load(out, "inflation_sq", CAMDELTA_NPY_F4, 3, bhn);
  double e = fmax(fmax(tu_rel_err(q, rq, n), tu_rel_err(k, rk, n)),
                  fmax(tu_rel_err(v, rv, n), tu_rel_err(inf, ri, ni)));
  free(q), free(k), free(v), free(inf), free(rq), free(rk), free(rv), free(ri);
  for (int i = 0; i < 9; i++) free(d[i]);
  return e;
}

/* ------------------------------------------------------------------ tests */

static void test_version_and_help(void **state) {
  (void)state;
  cli_result *r = run("--version");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, CAMDELTA_VERSION_STRING));
  r = run("help");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "run OP --in DIR --out DIR"));
  assert_non_null(strstr(r->out, "info"));
  assert_non_null(strstr(r->out, "exit status"));
  expect_code(run("--help"), 0, NULL);
  r = run("help run");
  expect_code(r, 0, NULL);
  const char *words[] = {"prep", "scan-backward", "prep-backward", "--k-scale", "--norm-eps", "--reverse",
                         "--algorithm", "--final-state", "--all-grads", "--device", "D^-0.5", "grad_inflation_sq"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strstr(r->out, words[i])) fail_msg("'help run' does not mention %s", words[i]);
  r = run("run --help");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "--k-scale"));
  /* --help after the operation, in every form of run: the usage, not an unknown option (the --sequence-parallel
   * forms: tests/mpi/cli_sp.sh) */
  const char *forms[] = {"run scan --help", "run prep -h", "run branch --help", "run camera -h"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    r = run("%s", forms[i]);
    expect_code(r, 0, NULL);
    if (!strstr(r->out, "usage: camdelta run OP") || !strstr(r->out, "branch-backward"))
      fail_msg("'%s' does not print the usage of run:\n%s", forms[i], r->out);
  }
  r = run("help info");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "--device"));
  expect_code(run("help nosuchcommand"), 2, "nosuchcommand");
  expect_code(run("frobnicate"), 2, "unknown command 'frobnicate'");
  r = run("%s", "");
  assert_int_equal(r->code, 2);
  assert_non_null(strstr(r->err, "usage"));
}

static void test_info(void **state) {
  (void)state;
  cli_result *r = run("info");
  expect_code(r, 0, NULL);
  const char *words[] = {"platform 0:", "device 0:0:", "vendor:", "type:", "version:", "driver:", "compute units:",
                         "global memory:", "local memory:", "[chosen]", "chosen device: ", "extensions:",
                         "cache folder: "};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strstr(r->out, words[i])) fail_msg("'info' output lacks '%s':\n%s", words[i], r->out);
  const char *cache = getenv("CAMDELTA_CACHE_DIR");
  if (cache && *cache) assert_non_null(strstr(r->out, cache));
  /* the chosen device by index, as listed */
  expect_code(run("info --device 0:0"), 0, NULL);
  assert_non_null(strstr(g_res.out, "chosen device: 0:0 "));
  /* caching off */
  r = run_env("CAMDELTA_CACHE=0", "info");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "cache folder: off"));
  expect_code(run("info --bogus"), 2, "--bogus");
  expect_code(run("info --device"), 2, "--device needs a value");
}

static void test_unknown_device(void **state) {
  (void)state;
  cli_result *r = run("info --device no-such-device-xyz");
  expect_code(r, 4, "no-such-device-xyz");
  assert_non_null(strstr(r->err, "0:0")); /* lists the devices there are */
  assert_non_null(strstr(r->out, "device 0:0:")); /* and still shows them on stdout */
  r = run_env("CAMDELTA_DEVICE=no-such-device-xyz", "info");
  expect_code(r, 4, "no-such-device-xyz");
  r = run("info --device 9:9");
  expect_code(r, 4, "9:9");

  const char *in = tu_fresh_dir("dev-in");
  prep_data p;
  prep_make(&p, in, 1, 4, 1, 8, CAMDELTA_NPY_F4, 1);
  r = run("run prep --in '%s' --out '%s/out' --device no-such-device-xyz", in, in);
  expect_code(r, 4, "no-such-device-xyz");
  assert_non_null(strstr(r->err, "0:0"));
  assert_false(file_exists(in, "out/q"));
  prep_free(&p);
}

/* `camdelta run prep --in IN --out OUT OPTIONS` exits 0 (its output in g_res); the largest relative error of its
 * outputs (of `type`) against the reference with k_scale and eps. */
static double prep_run_ok(const prep_data *p, const char *in, const char *out, const char *options, double k_scale,
                          double eps, camdelta_npy_type type) {
  expect_code(run("run prep --in '%s' --out '%s' %s", in, out, options), 0, NULL);
  return prep_check(p, out, k_scale, eps, type);
}

static void test_run_prep_f32(void **state) {
  (void)state;
  const char *in = tu_fresh_dir("prep32");
  prep_data p;
  prep_make(&p, in, 2, 12, 2, 16, CAMDELTA_NPY_F4, 2);
  /* default k_scale = D^-0.5, norm_eps = 1e-6; the --out folder is created */
  char out[1300];
  snprintf(out, sizeof out, "%s/out/nested", in);
  double e = prep_run_ok(&p, in, out, "", 1.0 / sqrt(16.0), 1e-6, CAMDELTA_NPY_F4);
  assert_non_null(strstr(g_res.out, "wrote q k v inflation_sq"));
  tu_report("cli prep f32 rel err", e);
  assert_true(e <= 1e-5);

  /* explicit options, in both spellings */
  cli_result *r = run("run prep --quiet --in='%s' --out '%s' --k-scale 0.37 --norm-eps=1e-3", in, out);
  expect_code(r, 0, NULL);
  assert_string_equal(r->out, "");
  e = prep_check(&p, out, 0.37, 1e-3, CAMDELTA_NPY_F4);
  assert_true(e <= 1e-5);

  /* --tokens-per-frame S: k_scale = D^-0.5 * S^-0.5 */
  e = prep_run_ok(&p, in, out, "--tokens-per-frame 4", 1.0 / sqrt(16.0) / sqrt(4.0), 1e-6, CAMDELTA_NPY_F4);
  assert_true(e <= 1e-5);
  expect_code(run("run prep --in '%s' --out '%s' --tokens-per-frame 5", in, out), 3, "does not divide N = 12");
  prep_free(&p);
}

static void test_run_prep_f16_and_f64(void **state) {
  (void)state;
  /* all of q_raw, k_raw, v_raw <f2: computed in f16 storage, outputs written as <f2 */
  prep_data p;
  char out[1300];
  const char *in = small_prep("prep16", &p, CAMDELTA_NPY_F2, 3, out);
  double e = prep_run_ok(&p, in, out, "", 0.25, 1e-6, CAMDELTA_NPY_F2);
  assert_non_null(strstr(g_res.out, "f16"));
  tu_report("cli prep f16 rel err", e);
  assert_true(e <= 2e-3); /* outputs rounded to f16 */
  prep_free(&p);

  /* <f8 inputs are converted to f32 */
  in = small_prep("prep64", &p, CAMDELTA_NPY_F8, 4, out);
  assert_true(prep_run_ok(&p, in, out, "", 0.25, 1e-6, CAMDELTA_NPY_F4) <= 1e-5);
  prep_free(&p);
}

static void test_run_input_errors(void **state) {
  (void)state;
  prep_data p;
  char out[1300];
  const char *in = small_prep("errs", &p, CAMDELTA_NPY_F4, 5, out);
  cli_result *r;

  /* missing file: names it and the expected shape */
  remove_file(in, "k_raw");
  r = run("run prep --in '%s' --out '%s'", in, out);
  expect_code(r, 3, "k_raw.npy: missing input file");
  assert_non_null(strstr(r->err, "(B, N, H, D) = (1, 8, 2, 16)"));
  assert_false(file_exists(out, "q"));
  size_t bnhd[4] = {1, 8, 2, 16};
  save(in, "k_raw", CAMDELTA_NPY_F4, 4, bnhd, p.in[1]);
  /* the first file too */
  r = run("run prep --in '%s/nowhere' --out '%s'", in, out);
  expect_code(r, 3, "q_raw.npy: missing input file");
  assert_non_null(strstr(r->err, "(B, N, H, D)"));

  /* wrong dtype */
  save_raw(in, "rope_cos", "<i4", "(8, 8)", 256);
  r = run("run prep --in '%s' --out '%s'", in, out);
  expect_code(r, 3, "rope_cos.npy");
  assert_non_null(strstr(r->err, "<i4"));
  assert_non_null(strstr(r->err, "(N, D/2) = (8, 8)"));
  save_raw(in, "rope_cos", ">f4", "(8, 8)", 256);
  expect_code(run("run prep --in '%s' --out '%s'", in, out), 3, "big-endian");
  /* malformed file */
  save_raw(in, "rope_cos", "<f4", "(8, 8)", 100);
  expect_code(run("run prep --in '%s' --out '%s'", in, out), 3, "truncated");
  save_raw(in, "rope_cos", "<f4", "(8, 8)", 256);

  /* wrong shape */
  size_t bad[2] = {8, 7};
  float z[64] = {0};
  save(in, "rope_sin", CAMDELTA_NPY_F4, 2, bad, z);
  r = run("run prep --in '%s' --out '%s'", in, out);
  expect_code(r, 3, "rope_sin.npy: shape (8, 7) does not fit");
  assert_non_null(strstr(r->err, "(N, D/2) = (8, 8)"));
  size_t c3[1] = {31};
  save(in, "k_norm_weight", CAMDELTA_NPY_F4, 1, c3, z);
  r = run("run prep --in '%s' --out '%s'", in, out);
  expect_code(r, 3, "k_norm_weight.npy: shape (31,) does not fit");
  assert_non_null(strstr(r->err, "(32,)"));
  /* q_raw that is not 4-d */
  save(in, "q_raw", CAMDELTA_NPY_F4, 2, bad, z);
  expect_code(run("run prep --in '%s' --out '%s'", in, out), 3, "q_raw.npy: shape (8, 7) does not fit");
  /* nothing was written by any failed run */
  assert_false(file_exists(out, "q"));
  prep_free(&p);

  /* scan: beta must fit q */
  const char *sin_ = tu_fresh_dir("scan-errs");
  size_t bhdn[4] = {1, 2, 8, 12}, beta_bad[4] = {1, 2, 5, 2};
  float *x = calloc(1 * 2 * 8 * 12, sizeof(float));
  save(sin_, "q", CAMDELTA_NPY_F4, 4, bhdn, x);
  save(sin_, "beta", CAMDELTA_NPY_F4, 4, beta_bad, x);
  r = run("run scan --in '%s' --out '%s/out'", sin_, sin_);
  expect_code(r, 3, "beta.npy: shape (1, 2, 5, 2) does not fit");
  assert_non_null(strstr(r->err, "F*S = N = 12"));
  size_t beta_ok[4] = {1, 2, 3, 4};
  save(sin_, "beta", CAMDELTA_NPY_F4, 4, beta_ok, x);
  r = run("run scan --in '%s' --out '%s/out'", sin_, sin_);
  expect_code(r, 3, "k.npy: missing input file");
  assert_non_null(strstr(r->err, "(B, H, D, N) = (1, 2, 8, 12)"));
  save(sin_, "k", CAMDELTA_NPY_F4, 4, bhdn, x);
  save(sin_, "v", CAMDELTA_NPY_F4, 4, bhdn, x);
  r = run("run scan --in '%s' --out '%s/out'", sin_, sin_);
  expect_code(r, 3, "decay.npy: missing input file");
  assert_non_null(strstr(r->err, "(B, H, F) = (1, 2, 3)"));
  size_t bhf_bad[3] = {1, 2, 4};
  save(sin_, "decay", CAMDELTA_NPY_F4, 3, bhf_bad, x);
  expect_code(run("run scan --in '%s' --out '%s/out'", sin_, sin_), 3, "(B, H, F) = (1, 2, 3)");
  size_t bhf[3] = {1, 2, 3}, dd_bad[4] = {1, 2, 8, 7};
  save(sin_, "decay", CAMDELTA_NPY_F4, 3, bhf, x);
  save(sin_, "init_state", CAMDELTA_NPY_F4, 4, dd_bad, x);
  expect_code(run("run scan --in '%s' --out '%s/out'", sin_, sin_), 3, "(B, H, D, D) = (1, 2, 8, 8)");
  r = run("run scan-backward --in '%s' --out '%s/out'", sin_, sin_);
  expect_code(r, 3, "grad_out.npy: missing input file");
  free(x);
}

static void test_run_usage_errors(void **state) {
  (void)state;
  const char *in = tu_fresh_dir("usage");
  expect_code(run("run"), 2, "missing the operation");
  expect_code(run("run frobnicate --in '%s' --out '%s'", in, in), 2, "unknown operation 'frobnicate'");
  expect_code(run("run prep --in '%s' --out '%s' --bogus", in, in), 2, "unknown option '--bogus'");
  expect_code(run("run prep --out '%s'", in), 2, "missing --in");
  expect_code(run("run prep --in '%s'", in), 2, "missing --out");
  expect_code(run("run prep --in"), 2, "--in needs a value");
  expect_code(run("run prep scan --in '%s' --out '%s'", in, in), 2, "unexpected argument 'scan'");
  expect_code(run("run prep --in '%s' --out '%s' --k-scale abc", in, in), 2, "--k-scale");
  expect_code(run("run prep --in '%s' --out '%s' --k-scale inf", in, in), 2, "--k-scale");
  expect_code(run("run prep --in '%s' --out '%s' --norm-eps -1", in, in), 2, "--norm-eps");
  expect_code(run("run prep --in '%s' --out '%s' --tokens-per-frame 0", in, in), 2, "--tokens-per-frame");
  expect_code(run("run scan --in '%s' --out '%s' --algorithm fastest", in, in), 2, "fastest");
  /* options that belong to another operation */
  expect_code(run("run prep --in '%s' --out '%s' --reverse", in, in), 2, "--reverse does not apply");
  expect_code(run("run scan --in '%s' --out '%s' --k-scale 1", in, in), 2, "--k-scale does not apply");
  expect_code(run("run scan-backward --in '%s' --out '%s' --final-state", in, in), 2, "--final-state");
  expect_code(run("run prep --in '%s' --out '%s' --all-grads", in, in), 2, "--all-grads");
  expect_code(run("run prep-backward --in '%s' --out '%s' --algorithm chunkwise", in, in), 2, "--algorithm");
}

/* ------------------------------------------------------------------- scan */

typedef struct scan_data {
  size_t B, H, D, F, S, N;
  float *q, *k, *v, *beta, *decay, *init, *gout, *gfinal;
} scan_data;

static void scan_make(scan_data *s, const char *dir, size_t B, size_t H, size_t D, size_t F, size_t S, int with_init,
                      int with_grads, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->B = B, s->H = H, s->D = D, s->F = F, s->S = S, s->N = F * S;
  tu_seed(seed);
  size_t n = B * H * D * s->N, nb = B * H * F * S, nd = B * H * F, ns = B * H * D * D;
  size_t bhdn[4] = {B, H, D, s->N}, bhfs[4] = {B, H, F, S}, bhf[3] = {B, H, F}, bhdd[4] = {B, H, D, D};
  float **bufs[4] = {&s->q, &s->k, &s->v, &s->gout};
  for (int i = 0; i < 4; i++) {
    *bufs[i] = malloc(n * sizeof(float));
    assert_non_null(*bufs[i]);
    tu_fill_normal(*bufs[i], n, 1.0 / sqrt((double)D * (double)S));
  }
  s->beta = malloc(nb * sizeof(float));
  s->decay = malloc(nd * sizeof(float));
  s->init = malloc(ns * sizeof(float));
  s->gfinal = malloc(ns * sizeof(float));
  assert_true(s->beta && s->decay && s->init && s->gfinal);
  tu_fill_uniform(s->beta, nb, 0.1, 0.9);
  tu_fill_uniform(s->decay, nd, 0.8, 1.0);
  tu_fill_normal(s->init, ns, 0.3);
  tu_fill_normal(s->gfinal, ns, 0.3);
  save(dir, "q", CAMDELTA_NPY_F4, 4, bhdn, s->q);
  save(dir, "k", CAMDELTA_NPY_F4, 4, bhdn, s->k);
  save(dir, "v", CAMDELTA_NPY_F4, 4, bhdn, s->v);
  save(dir, "beta", CAMDELTA_NPY_F4, 4, bhfs, s->beta);
  save(dir, "decay", CAMDELTA_NPY_F4, 3, bhf, s->decay);
  if (with_init) save(dir, "init_state", CAMDELTA_NPY_F4, 4, bhdd, s->init);
  if (with_grads) {
    save(dir, "grad_out", CAMDELTA_NPY_F4, 4, bhdn, s->gout);
    if (with_init) save(dir, "grad_final_state", CAMDELTA_NPY_F4, 4, bhdd, s->gfinal);
  }
  if (!with_init) {
    free(s->init);
    s->init = NULL;
  }
}

static void scan_free(scan_data *s) {
  free(s->q), free(s->k), free(s->v), free(s->beta), free(s->decay), free(s->init), free(s->gout), free(s->gfinal);
}

static void test_run_scan(void **state) {
  (void)state;
  const char *in = tu_fresh_dir("scan");
  scan_data s;
  scan_make(&s, in, 1, 2, 16, 3, 4, 1, 0, 6);
  size_t n = s.B * s.H * s.D * s.N, ns = s.B * s.H * s.D * s.D;
  size_t bhdn[4] = {s.B, s.H, s.D, s.N}, bhdd[4] = {s.B, s.H, s.D, s.D};
  double *q = tu_to_f64(s.q, n), *k = tu_to_f64(s.k, n), *v = tu_to_f64(s.v, n);
  double *beta = tu_to_f64(s.beta, s.B * s.H * s.N), *decay = tu_to_f64(s.decay, s.B * s.H * s.F);
  double *init = tu_to_f64(s.init, ns);
  double *rout = malloc(n * sizeof(double)), *rfin = malloc(ns * sizeof(double));
  char out[1300];
  snprintf(out, sizeof out, "%s/out", in);
  const char *algos[3] = {"auto", "sequential", "chunkwise"};
  for (int reverse = 0; reverse < 2; reverse++) {
    for (int al = 0; al < 3; al++) {
      cli_result *r = run("run scan --in '%s' --out '%s' --algorithm %s --final-state%s", in, out, algos[al],
                          reverse ? " --reverse" : "");
      expect_code(r, 0, NULL);
      camdelta_ref_scan ref = {s.B, s.H, s.D, s.F, s.S, reverse, q, k, v, beta, decay, init, rout, rfin, NULL, NULL};
      TU_OK(camdelta_ref_scan_forward(&ref));
      float *o = load(out, "out", CAMDELTA_NPY_F4, 4, bhdn), *fs = load(out, "final_state", CAMDELTA_NPY_F4, 4, bhdd);
      double e = fmax(tu_rel_err(o, rout, n), tu_rel_err(fs, rfin, ns));
      if (e > 1e-5) fail_msg("scan reverse=%d %s: rel err %g", reverse, algos[al], e);
      free(o), free(fs);
    }
  }
  {
    /* without --final-state no final_state is written */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    assert_int_equal(system(cmd), 0);
    expect_code(run("run scan --in '%s' --out '%s'", in, out), 0, NULL);
    assert_true(file_exists(out, "out"));
    assert_false(file_exists(out, "final_state"));
  }
  free(q), free(k), free(v), free(beta), free(decay), free(init), free(rout), free(rfin);
  scan_free(&s);
}

static void test_run_scan_backward(void **state) {
  (void)state;
  const char *in = tu_fresh_dir("scanbw");
  scan_data s;
  scan_make(&s, in, 1, 2, 8, 3, 4, 1, 1, 7);
  size_t n = s.B * s.H * s.D * s.N, ns = s.B * s.H * s.D * s.D, nb = s.B * s.H * s.N, nd = s.B * s.H * s.F;
  size_t bhdn[4] = {s.B, s.H, s.D, s.N}, bhdd[4] = {s.B, s.H, s.D, s.D}, bhfs[4] = {s.B, s.H, s.F, s.S},
         bhf[3] = {s.B, s.H, s.F};
  double *q = tu_to_f64(s.q, n), *k = tu_to_f64(s.k, n), *v = tu_to_f64(s.v, n), *go = tu_to_f64(s.gout, n);
  double *beta = tu_to_f64(s.beta, nb), *decay = tu_to_f64(s.decay, nd), *init = tu_to_f64(s.init, ns),
         *gf = tu_to_f64(s.gfinal, ns);
  double *rdq = malloc(n * sizeof(double)), *rdk = malloc(n * sizeof(double)), *rdv = malloc(n * sizeof(double));
  double *rdb = malloc(nb * sizeof(double)), *rdd = malloc(nd * sizeof(double)), *rdi = malloc(ns * sizeof(double));
  char out[1300];
  snprintf(out, sizeof out, "%s/out", in);
  for (int reverse = 0; reverse < 2; reverse++) {
    cli_result *r = run("run scan-backward --in '%s' --out '%s'%s", in, out, reverse ? " --reverse" : "");
    expect_code(r, 0, NULL);
    camdelta_ref_scan ref = {s.B, s.H, s.D, s.F, s.S, reverse, q, k, v, beta, decay, init, NULL, NULL, NULL, NULL};
    camdelta_ref_scan_grads g = {go, gf, rdq, rdk, rdv, rdb, rdd, rdi};
    TU_OK(camdelta_ref_scan_backward(&ref, &g));
    float *dq = load(out, "dq", CAMDELTA_NPY_F4, 4, bhdn), *dk = load(out, "dk", CAMDELTA_NPY_F4, 4, bhdn);
    float *dv = load(out, "dv", CAMDELTA_NPY_F4, 4, bhdn), *db = load(out, "dbeta", CAMDELTA_NPY_F4, 4, bhfs);
    float *dd = load(out, "ddecay", CAMDELTA_NPY_F4, 3, bhf), *di = load(out, "dinit_state", CAMDELTA_NPY_F4, 4, bhdd);
    double e[6] = {tu_rel_err(dq, rdq, n),   tu_rel_err(dk, rdk, n),   tu_rel_err(dv, rdv, n),
                   tu_rel_err(db, rdb, nb), tu_rel_err(dd, rdd, nd), tu_rel_err(di, rdi, ns)};
    for (int i = 0; i < 6; i++)
      if (e[i] > 1e-4) fail_msg("scan-backward reverse=%d: gradient %d rel err %g", reverse, i, e[i]);
    free(dq), free(dk), free(dv), free(db), free(dd), free(di);
  }
  {
    /* without init_state (and grad_final_state): no dinit_state */
    remove_file(in, "init_state");
    remove_file(in, "grad_final_state");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    assert_int_equal(system(cmd), 0);
    expect_code(run("run scan-backward --in '%s' --out '%s'", in, out), 0, NULL);
    assert_true(file_exists(out, "ddecay"));
    assert_false(file_exists(out, "dinit_state"));
    camdelta_ref_scan ref = {s.B, s.H, s.D, s.F, s.S, 0, q, k, v, beta, decay, NULL, NULL, NULL, NULL, NULL};
    camdelta_ref_scan_grads g = {go, NULL, rdq, rdk, rdv, rdb, rdd, NULL};
    TU_OK(camdelta_ref_scan_backward(&ref, &g));
    float *dk = load(out, "dk", CAMDELTA_NPY_F4, 4, bhdn);
    double e = tu_rel_err(dk, rdk, n);
    if (e > 1e-4) fail_msg("scan-backward without init_state: dk rel err %g", e);
    free(dk);
  }
  free(q), free(k), free(v), free(go), free(beta), free(decay), free(init), free(gf);
  free(rdq), free(rdk), free(rdv), free(rdb), free(rdd), free(rdi);
  scan_free(&s);
}

static void test_run_prep_backward(void **state) {
  (void)state;
  prep_data p;
  const char *in = small_prep("prepbw", &p, CAMDELTA_NPY_F4, 8, NULL);
  size_t B = p.B, N = p.N, H = p.H, D = p.D, n = B * N * H * D, ni = B * H * N, C = H * D;
  size_t bhdn[4] = {B, H, D, N}, bhn[3] = {B, H, N}, bnhd[4] = {B, N, H, D}, c1[1] = {C}, bn44[4] = {B, N, 4, 4},
         ndh[2] = {N, D / 2};
  float *gq = malloc(n * sizeof(float)), *gv = malloc(n * sizeof(float)), *gi = malloc(ni * sizeof(float));
  assert_true(gq && gv && gi);
  tu_fill_normal(gq, n, 1.0);
  tu_fill_normal(gv, n, 1.0);
  tu_fill_normal(gi, ni, 1.0);
  save(in, "grad_q", CAMDELTA_NPY_F4, 4, bhdn, gq);
  save(in, "grad_v", CAMDELTA_NPY_F4, 4, bhdn, gv); /* grad_k absent: zero */
  save(in, "grad_inflation_sq", CAMDELTA_NPY_F4, 3, bhn, gi);
  char out[1300];
  snprintf(out, sizeof out, "%s/out", in);
  cli_result *r = run("run prep-backward --in '%s' --out '%s' --all-grads --k-scale 0.2", in, out);
  expect_code(r, 0, NULL);
  double *d[9];
  for (int i = 0; i < 9; i++) d[i] = tu_to_f64(p.in[i], p.n[i]);
  double *dgq = tu_to_f64(gq, n), *dgv = tu_to_f64(gv, n), *dgi = tu_to_f64(gi, ni);
  size_t sizes[9] = {n, n, n, C, C, B * N * 16, B * N * 16, N * D / 2, N * D / 2};
  double *ref[9];
  for (int i = 0; i < 9; i++) ref[i] = malloc(sizes[i] * sizeof(double));
  camdelta_ref_prep rp = {B, N, H, D, 0.2, 1e-6, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8],
                          NULL, NULL, NULL, NULL};
  camdelta_ref_prep_grads g = {dgq, NULL, dgv, dgi, ref[0], ref[1], ref[2], ref[3], ref[4],
                               ref[5], ref[6], ref[7], ref[8]};
  TU_OK(camdelta_ref_prep_backward(&rp, &g));
  const char *names[9] = {"dq_raw", "dk_raw", "dv_raw", "dq_norm_weight", "dk_norm_weight",
                          "dproj_q", "dproj_kv", "drope_cos", "drope_sin"};
  const size_t *shapes[9] = {bnhd, bnhd, bnhd, c1, c1, bn44, bn44, ndh, ndh};
  const int nds[9] = {4, 4, 4, 1, 1, 4, 4, 2, 2};
  for (int i = 0; i < 9; i++) {
    float *x = load(out, names[i], CAMDELTA_NPY_F4, nds[i], shapes[i]);
    double e = tu_rel_err(x, ref[i], sizes[i]);
    if (e > 1e-4) fail_msg("prep-backward %s: rel err %g", names[i], e);
    free(x);
  }
  /* without --all-grads only the five main gradients */
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
  assert_int_equal(system(cmd), 0);
  expect_code(run("run prep-backward --in '%s' --out '%s' --k-scale 0.2", in, out), 0, NULL);
  assert_true(file_exists(out, "dk_norm_weight"));
  assert_false(file_exists(out, "dproj_q"));
  for (int i = 0; i < 9; i++) free(d[i]), free(ref[i]);
  free(dgq), free(dgv), free(dgi), free(gq), free(gv), free(gi);
  prep_free(&p);
}

/* ------------------------------------------------------------------ cache */

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void test_cache(void **state) {
  (void)state;
  const char *shared = getenv("CAMDELTA_CACHE_DIR");
  if (!shared || !*shared) fail_msg("CAMDELTA_CACHE_DIR is not set: run through ctest, which sets the test cache");
  /* warm the shared test cache (compiles at most once for the whole test suite), then again: all from disk */
  cli_result *r = run("cache warm --shape 1,2,16,64");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "warmed "));
  r = run("cache warm --device \"${CAMDELTA_DEVICE:-0:0}\" --shape 1,2,16,64"); /* the same device, named */
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, " 0 compiled"));
  expect_code(run("cache warm --device no-such-device-xyz"), 4, "no-such-device-xyz");
  expect_code(run("cache warm --bogus"), 2, "--bogus");
  expect_code(run("cache warm --shape 1,2,12,64"), 2, "D must be a multiple of 8"); /* at once, nothing built */
  expect_code(run("cache warm --shape 1,2"), 2, "B,H,D,S");

  /* a private copy of some entries to list and clear (at most 40: the listing of a long-used shared cache would
   * outgrow the captured output) */
  const char *dir = tu_fresh_dir("cache");
  char cmd[4000], env[1400];
  snprintf(cmd, sizeof cmd, "ls '%s'/*.clbin | head -n 40 | xargs -I{} cp {} '%s'/", shared, dir);
  assert_int_equal(system(cmd), 0);
  snprintf(env, sizeof env, "CAMDELTA_CACHE_DIR='%s'", dir);
  r = run_env(env, "cache dir");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, dir));
  r = run_env(env, "cache list");
  expect_code(r, 0, NULL);
  int ok_entries = count_lines_with(r->out, ".clbin ");
  assert_true(ok_entries > 0);
  assert_int_equal(count_lines_with(r->out, "  ok "), ok_entries);
  camdelta_device_info info;
  TU_OK(camdelta_context_info(tu_context(), &info));
  char dev[80];
  snprintf(dev, sizeof dev, "%.63s", info.device_name);
  assert_non_null(strstr(r->out, dev));
  char tail[64];
  snprintf(tail, sizeof tail, "%d entries", ok_entries);
  assert_non_null(strstr(r->out, tail));

  /* a corrupt entry, a partial write and someone else's file */
  char path[1400];
  snprintf(path, sizeof path, "%s/%064d.clbin", dir, 0);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("not a program binary", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/%064d.clbin.tmp.123.456.0", dir, 1);
  f = fopen(path, "wb");
  assert_non_null(f);
  fclose(f);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("keep me", f);
  fclose(f);
  r = run_env(env, "cache list");
  expect_code(r, 0, NULL);
  assert_int_equal(count_lines_with(r->out, "corrupt"), 1);
  assert_int_equal(count_lines_with(r->out, "partial"), 1);
  assert_null(strstr(r->out, "notes.txt"));

  r = run_env(env, "cache clear");
  expect_code(r, 0, NULL);
  snprintf(tail, sizeof tail, "removed %d entries", ok_entries + 2);
  assert_non_null(strstr(r->out, tail));
  r = run_env(env, "cache list");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "0 entries"));
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0); /* notes.txt survives */

  /* a folder that does not exist yet, and caching off */
  snprintf(env, sizeof env, "CAMDELTA_CACHE_DIR='%s/not-yet'", dir);
  r = run_env(env, "cache list");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "0 entries"));
  r = run_env("CAMDELTA_CACHE=0", "cache list");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "off"));
  r = run_env("CAMDELTA_CACHE=0", "cache clear");
  expect_code(r, 0, NULL);

  expect_code(run("cache"), 2, "missing the action");
  expect_code(run("cache frobnicate"), 2, "unknown action 'frobnicate'");
  expect_code(run("cache list extra"), 2, "unexpected argument 'extra'");
  r = run("help cache");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "warm"));
}

/* ------------------------------------------------------------ hostile files and options (issue 11) */

static int same_file_bytes(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int x = fgetc(fa), y = fgetc(fb);
    if (x != y) same = 0;
    if (x == EOF || y == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* Files the output commit leaves while it runs (tools/cli_outset.h): temporary files of this and older versions,
 * kept previous files, journals. */
static int temp_files_in(const char *dir) {
  char cmd[1400], text[256];
  snprintf(cmd, sizeof cmd,
           "ls -a '%s' | grep -c -E '\\.tmp\\.|\\.cdtmp\\.|\\.cdold\\.|^\\.camdelta-commit\\.' > '%s/count.txt'", dir,
           tu_tmpdir());
  if (system(cmd) == -1) fail_msg("cannot run: %s", cmd); /* grep -c exits 1 on a count of 0 */
  snprintf(cmd, sizeof cmd, "%s/count.txt", tu_tmpdir());
  tu_slurp(cmd, text, sizeof text);
  return atoi(text);
}

/* Outputs all or nothing (issue 11: a failure part-way left a mix of new, old and missing files and deleted the
 * previous good copy; a symlink in --out was followed). */
static void test_outputs_atomic(void **state) {
  (void)state;
  prep_data p;
  char out[1300], keep[1300], path[1400], saved[1400];
  const char *in = small_prep("atomic", &p, CAMDELTA_NPY_F4, 11, out);
  snprintf(keep, sizeof keep, "%s/keep", in);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, keep), 0, NULL);
  /* a file-size limit: the first output cannot be written; nothing changes, no temporary file stays */
  cli_result *r = run_env("ulimit -f 1;", "run prep --in '%s' --out '%s' --k-scale 0.5", in, out);
  expect_code(r, 1, "write failed");
  const char *names[4] = {"q", "k", "v", "inflation_sq"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
    snprintf(saved, sizeof saved, "%s/%s.npy", keep, names[i]);
    if (!same_file_bytes(path, saved)) fail_msg("ulimit -f: %s changed", path);
  }
  assert_int_equal(temp_files_in(out), 0);
  /* a folder in the way of the third output: the first two are not replaced either */
  snprintf(path, sizeof path, "%s/v.npy", out);
  assert_int_equal(remove(path), 0);
  assert_int_equal(mkdir(path, 0700), 0);
  r = run("run prep --in '%s' --out '%s' --k-scale 0.5", in, out);
  expect_code(r, 1, "v.npy: cannot write: a folder is in the way");
  for (int i = 0; i < 4; i += 1 + (i == 1)) {
    snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
    snprintf(saved, sizeof saved, "%s/%s.npy", keep, names[i]);
    if (!same_file_bytes(path, saved)) fail_msg("folder in the way: %s changed", path);
  }
  assert_int_equal(temp_files_in(out), 0);
  snprintf(path, sizeof path, "%s/v.npy", out);
  assert_int_equal(rmdir(path), 0);
  /* a symbolic link in --out pointing outside: replaced, the target untouched */
  char victim[1400];
  snprintf(victim, sizeof victim, "%s/victim.txt", in);
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("precious", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/q.npy", out);
  assert_int_equal(remove(path), 0);
  assert_int_equal(symlink(victim, path), 0);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  char text[64];
  tu_slurp(victim, text, sizeof text);
  assert_string_equal(text, "precious");
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_true(prep_check(&p, out, 0.37, 1e-6, CAMDELTA_NPY_F4) <= 1e-5);
  assert_int_equal(temp_files_in(out), 0);
  prep_free(&p);
}


/* The tool built with fault injection (tests/CMakeLists.txt: camdelta_faults; CAMDELTA_FAULT=rename:K|kill:K). */
static cli_result *run_faults(const char *fault, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cli_result *run_faults(const char *fault, const char *fmt, ...) {
  char args[8192], env[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  const char *faults = getenv("CAMDELTA_CLI_FAULTS");
  if (!faults || !*faults) fail_msg("CAMDELTA_CLI_FAULTS is not set: run through ctest");
  /* run_env runs CAMDELTA_CLI: point it at the fault build for this call */
  const char *cli = getenv("CAMDELTA_CLI");
  char saved[4096];
  snprintf(saved, sizeof saved, "%s", cli);
  setenv("CAMDELTA_CLI", faults, 1);
  snprintf(env, sizeof env, "CAMDELTA_FAULT=%s", fault);
  cli_result *r = run_env(env, "%s", args);
  setenv("CAMDELTA_CLI", saved, 1);
  return r;
}

/* 1 when every output of `names` in a equals its copy in b. */
static int same_outputs(const char *a, const char *b, const char *const *names, int n) {
  char pa[1400], pb[1400];
  for (int i = 0; i < n; i++) {
    snprintf(pa, sizeof pa, "%s/%s.npy", a, names[i]);
    snprintf(pb, sizeof pb, "%s/%s.npy", b, names[i]);
    if (!same_file_bytes(pa, pb)) return 0;
  }
  return 1;
}

/* Outputs all or nothing to the last rename (issue 38): a rename that fails part-way (here the third of four) rolls
 * the renamed ones back, says so, and leaves no temporary file; a kill between renames leaves a journal that the next
 * output set on the folder rolls back, with the stale temporary files of the killed run. Before, the first outputs
 * stayed replaced with only "cannot replace" said, and a kill left a mixed set and hidden temporary files forever. */
static void test_outputs_commit_faults(void **state) {
  (void)state;
  prep_data p;
  const char *names[4] = {"q", "k", "v", "inflation_sq"};
  char out[1300], keep[1300], want[1300], path[1400];
  const char *in = small_prep("commit", &p, CAMDELTA_NPY_F4, 14, out);
  snprintf(keep, sizeof keep, "%s/keep", in);
  snprintf(want, sizeof want, "%s/want", in);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, keep), 0, NULL);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, want), 0, NULL);
  /* 1. the third rename fails: the first two are restored */
  for (int k = 1; k <= 4; k++) {
    char fault[32];
    snprintf(fault, sizeof fault, "rename:%d", k);
    cli_result *r = run_faults(fault, "run prep --in '%s' --out '%s' --k-scale 0.5", in, out);
    expect_code(r, 1, "cannot replace");
    char note[64];
    snprintf(note, sizeof note, "%d output%s already renamed restored", k - 1, k == 2 ? "" : "s");
    if (!strstr(r->err, note)) fail_msg("rename:%d: the message lacks '%s': %s", k, note, r->err);
    if (!same_outputs(out, keep, names, 4)) fail_msg("rename:%d: the previous outputs changed", k);
    assert_int_equal(temp_files_in(out), 0);
  }
  /* a file system without hard links: the previous files are kept by renames instead, and come back the same way */
  for (int k = 1; k <= 4; k++) {
    char fault[48];
    snprintf(fault, sizeof fault, "nolink,rename:%d", k);
    expect_code(run_faults(fault, "run prep --in '%s' --out '%s' --k-scale 0.5", in, out), 1, "cannot replace");
    if (!same_outputs(out, keep, names, 4)) fail_msg("%s: the previous outputs changed", fault);
    assert_int_equal(temp_files_in(out), 0);
    snprintf(fault, sizeof fault, "nolink,kill:%d", k);
    assert_int_equal(run_faults(fault, "run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, out)->code, 137);
    expect_code(run_faults("rename:1", "run prep --in '%s' --out '%s' --k-scale 0.5", in, out), 1, "cannot replace");
    if (!same_outputs(out, keep, names, 4)) fail_msg("%s: not rolled back", fault);
    assert_int_equal(temp_files_in(out), 0);
  }
  expect_code(run_faults("nolink", "run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, out), 0, NULL);
  if (!same_outputs(out, want, names, 4)) fail_msg("nolink: not the new set");
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  /* outputs that did not exist before are removed again (nothing of a failed set stays) */
  char fresh[1300];
  snprintf(fresh, sizeof fresh, "%s/fresh", in);
  expect_code(run_faults("rename:3", "run prep --in '%s' --out '%s' --k-scale 0.5", in, fresh), 1, "cannot replace");
  for (int i = 0; i < 4; i++) assert_false(file_exists(fresh, names[i]));
  assert_int_equal(temp_files_in(fresh), 0);
  /* 2. killed before the third rename: a mixed set and the commit's files stay, until the next set rolls back */
  for (int k = 1; k <= 4; k++) {
    char fault[32];
    snprintf(fault, sizeof fault, "kill:%d", k);
    cli_result *r = run_faults(fault, "run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, out);
    if (r->code != 128 + 9 && r->code != 137) fail_msg("kill:%d: exit code %d, not a SIGKILL: %s", k, r->code, r->err);
    assert_true(temp_files_in(out) > 0);
    if (k == 3) { /* q and k are new, v and inflation_sq old */
      snprintf(path, sizeof path, "%s/q.npy", out);
      char other[1400];
      snprintf(other, sizeof other, "%s/q.npy", want);
      assert_true(same_file_bytes(path, other));
      snprintf(path, sizeof path, "%s/v.npy", out);
      snprintf(other, sizeof other, "%s/v.npy", keep);
      assert_true(same_file_bytes(path, other));
    }
    /* the next set fails on purpose before its first rename: what it leaves is the rolled-back previous set */
    expect_code(run_faults("rename:1", "run prep --in '%s' --out '%s' --k-scale 0.5", in, out), 1, "cannot replace");
    if (!same_outputs(out, keep, names, 4)) fail_msg("kill:%d: the previous outputs were not restored", k);
    assert_int_equal(temp_files_in(out), 0);
  }
  /* 3. a kill, then a run that succeeds: the new set, nothing else */
  cli_result *r = run_faults("kill:2", "run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, out);
  assert_int_equal(r->code, 137);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.5", in, out), 0, NULL);
  if (!same_outputs(out, want, names, 4)) fail_msg("after a kill and a good run: not the new set");
  assert_int_equal(temp_files_in(out), 0);
  /* 4. a temporary file of a live writer (its lock held) is kept; once nobody holds it, it goes; so does a stale one
   *    of an older camdelta (its process gone) */
  snprintf(path, sizeof path, "%s/.q.npy.cdtmp.1-0123456789abcdef", out);
  const int live = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  assert_true(live >= 0);
  assert_int_equal(flock(live, LOCK_EX), 0);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  assert_int_equal(temp_files_in(out), 1);
  close(live);
  snprintf(path, sizeof path, "%s/.q.npy.tmp.999999999.5f00.0", out);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  expect_code(run("run prep --quiet --in '%s' --out '%s' --k-scale 0.37", in, out), 0, NULL);
  assert_int_equal(temp_files_in(out), 0);
  if (!same_outputs(out, keep, names, 4)) fail_msg("the last good run's outputs are not in place");
  prep_free(&p);
}

/* Hostile inputs (issue 11): a FIFO (blocked forever), a header length one byte short (read shifted, exit 0),
 * trailing bytes (accepted), control bytes (echoed raw). `timeout` turns a hang into exit 124. */
static void test_hostile_inputs(void **state) {
  (void)state;
  prep_data p;
  char out[1300], path[1400];
  const char *in = small_prep("hostile", &p, CAMDELTA_NPY_F4, 12, out);
  snprintf(path, sizeof path, "%s/rope_sin.npy", in);
  assert_int_equal(remove(path), 0);
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_code(run_env("timeout 60", "run prep --in '%s' --out '%s'", in, out), 3, "not a regular file");
  assert_int_equal(remove(path), 0);
  size_t ndh[2] = {8, 8};
  save(in, "rope_sin", CAMDELTA_NPY_F4, 2, ndh, p.in[8]);
  /* the header length field one byte short */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  unsigned char len[2];
  fseek(f, 8, SEEK_SET);
  assert_int_equal(fread(len, 1, 2, f), 2);
  const unsigned hl = len[0] | (unsigned)len[1] << 8;
  len[0] = (unsigned char)((hl - 1) & 0xFF), len[1] = (unsigned char)((hl - 1) >> 8);
  fseek(f, 8, SEEK_SET);
  fwrite(len, 1, 2, f);
  fclose(f);
  expect_code(run("run prep --in '%s' --out '%s'", in, out), 3, "rope_sin.npy: malformed .npy header");
  /* trailing bytes */
  save(in, "rope_sin", CAMDELTA_NPY_F4, 2, ndh, p.in[8]);
  f = fopen(path, "ab");
  assert_non_null(f);
  fputs("junk", f);
  fclose(f);
  expect_code(run("run prep --in '%s' --out '%s'", in, out), 3, "4 trailing bytes");
  save(in, "rope_sin", CAMDELTA_NPY_F4, 2, ndh, p.in[8]);
  /* an escape sequence in the dtype */
  save_raw(in, "rope_cos", "\x1b]0;owned\x07<f4", "(8, 8)", 256);
  cli_result *r = run("run prep --in '%s' --out '%s'", in, out);
  expect_code(r, 3, "\\x1b]0;owned\\x07<f4");
  assert_null(strchr(r->err, 0x1b));
  assert_null(strchr(r->err, 0x07));
  assert_false(file_exists(out, "q"));
  prep_free(&p);
}

/* Negative and overflowing numbers on every numeric option: usage errors (issue 11: sscanf's %lu read -1 as
 * 2^64-1, and `cache warm --shape 1,1,8,-1` ran). */
static void test_numeric_options(void **state) {
  (void)state;
  const char *in = tu_fresh_dir("numbers");
  const char *big = "18446744073709551617"; /* 2^64 + 1 */
  struct {
    const char *args, *needle;
  } cases[] = {
      {"cache warm --shape 1,1,8,-1", "--shape"},
      {"cache warm --shape 1,1,8,18446744073709551617", "--shape"},
      {"cache warm --shape 1,1,8,+4", "--shape"},
      {"cache warm --shape 1,1,8,4,", "--shape"},
      {"cache warm --shape ' 1,1,8,4'", "--shape"},
      {"bench --shape 1,2,16,2,-32", "--shape wants small, d64, sana480, sana720 or B,H,D,F,S"},
      {"bench --shape 1,2,16,2,18446744073709551648", "--shape wants small, d64, sana480, sana720 or B,H,D,F,S"},
      {"bench --reps -1", "--reps"},
      {"bench --warmup -1", "--warmup"},
      {"bench --peak-gbs -5", "--peak-gbs"},
      {"bench --peak-tflops 1e999", "--peak-tflops"},
      /* named values, parsed by one helper each wherever the option stands */
      {"bench --precision fast", "--precision: 'fast' is not exact or tf32"},
      {"tune --precision TF32", "--precision: 'TF32' is not exact or tf32"},
      {"demo --chunk-strategy sideways", "--chunk-strategy: 'sideways' is not uniform"},
      {"demo --chunk-strategy ''", "--chunk-strategy: '' is not uniform"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_code(run("%s", cases[i].args), 2, cases[i].needle);
  expect_code(run("run prep --in '%s' --out '%s' --tokens-per-frame -1", in, in), 2, "--tokens-per-frame");
  expect_code(run("run prep --in '%s' --out '%s' --tokens-per-frame %s", in, in, big), 2, "--tokens-per-frame");
  expect_code(run("run prep --in '%s' --out '%s' --k-scale -0.5", in, in), 2, "--k-scale");
  expect_code(run("run prep --in '%s' --out '%s' --k-scale ' 0.5'", in, in), 2, "--k-scale");
  expect_code(run("run prep --in '%s' --out '%s' --norm-eps 0x1p-3", in, in), 2, "--norm-eps");
  expect_code(run("run scan --in '%s' --out '%s' --precision exact,tf32", in, in), 2, "'exact,tf32' is not exact");
}

/* A cache folder the library must not use: the call still succeeds, and says so once on stderr. */
static void test_cache_refused_once(void **state) {
  (void)state;
  prep_data p;
  const char *in = small_prep("refused", &p, CAMDELTA_NPY_F4, 13, NULL);
  char open_dir[1300], env[1500];
  snprintf(open_dir, sizeof open_dir, "%s/open", in);
  assert_int_equal(mkdir(open_dir, 0777), 0);
  assert_int_equal(chmod(open_dir, 0777), 0); /* writable by others, not sticky */
  snprintf(env, sizeof env, "CAMDELTA_CACHE_DIR='%s/cache'", open_dir);
  cli_result *r = run_env(env, "run prep --in '%s' --out '%s/out' --k-scale 0.37", in, in);
  expect_code(r, 0, NULL);
  assert_int_equal(count_lines_with(r->err, "not using the kernel cache"), 1);
  assert_non_null(strstr(r->err, "writable by group or others"));
  char out[1400];
  snprintf(out, sizeof out, "%s/out", in);
  assert_true(prep_check(&p, out, 0.37, 1e-6, CAMDELTA_NPY_F4) <= 1e-5);
  struct stat sb;
  char cache[1400];
  snprintf(cache, sizeof cache, "%s/cache", open_dir);
  assert_int_not_equal(stat(cache, &sb), 0); /* nothing created there */
  /* `cache list` on it: an error naming the reason */
  expect_code(run_env(env, "cache list"), 1, "writable by group or others");
  prep_free(&p);
}

/* camdelta demo: the main job passes on this device and reports every stage. */
static void test_demo(void **state) {
  (void)state;
  cli_result *r = run("demo --shape 1,2,16,3,24");
  expect_code(r, 0, NULL);
  const char *want[] = {"device", "cameras -> matrices", "short conv on K", "branch forward", "branch backward",
                        "dconv_weight", "ddecay", "result   PASS: 15 outputs"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(r->out, want[i])) fail_msg("demo output lacks '%s':\n%s", want[i], r->out);
  /* the stream demo: a camera path block by block, its prefix checked */
  r = run("demo --stream --shape 1,2,16,22,24 --check-frames 13 --denoise 2");
  expect_code(r, 0, NULL);
  const char *want_stream[] = {"22 frames in 7 blocks", "latency  per block", "memory   stream",
                               "vs camdelta_branch_forward", "result   PASS (bound 1e-05)"};
  for (size_t i = 0; i < sizeof want_stream / sizeof want_stream[0]; i++)
    if (!strstr(r->out, want_stream[i])) fail_msg("demo --stream output lacks '%s':\n%s", want_stream[i], r->out);
  /* in bf16: the activations rounded on the host, the check's bound docs/math.md §8.7's */
  r = run("demo --stream --shape 1,2,16,13,24 --check-frames 13 --denoise 1 --dtype bf16");
  expect_code(r, 0, NULL);
  const char *want_bf16[] = {"13 frames in 4 blocks (first_chunk_plus_one, chunk size 3), bf16",
                             "vs camdelta_branch_forward", "result   PASS (bound 0.016)"};
  for (size_t i = 0; i < sizeof want_bf16 / sizeof want_bf16[0]; i++)
    if (!strstr(r->out, want_bf16[i]))
      fail_msg("demo --stream --dtype bf16 output lacks '%s':\n%s", want_bf16[i], r->out);
  expect_code(run("demo --stream --shape 1,2,16,30,24"), 2, "whole number of blocks");
  expect_code(run("demo --stream --dtype f8"), 2, "--dtype");
  expect_code(run("demo --shape 1,2,12,3,24"), 2, "multiple of 8");
  expect_code(run("demo --shape 1,2"), 2, "B,H,D,F,S");
  expect_code(run("demo --bogus"), 2, "--bogus");
  expect_code(run("demo --device no-such-device-xyz"), 4, "no-such-device-xyz");
  r = run("help demo");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "usage: camdelta demo"));
}

/* A driver that gives no kernel times (Rusticl; emulated here with CAMDELTA_DEVICE_LIMITS profiling=0): bench and
 * the demo time on the host around camdelta_finish and say so; `run` says that it has no kernel time. No made-up 0. */
static void test_no_kernel_times(void **state) {
  (void)state;
  const char *env = "CAMDELTA_DEVICE_LIMITS=\"${CAMDELTA_DEVICE_LIMITS:+$CAMDELTA_DEVICE_LIMITS,}profiling=0\"";
  char json[1200];
  snprintf(json, sizeof json, "%s/bench-host.json", tu_tmpdir());
  cli_result *r = run_env(env, "bench --shape 1,1,8,2,8 --reps 2 --warmup 1 --only scan-forward --json '%s'", json);
  expect_code(r, 0, NULL);
  assert_int_equal(count_lines_with(r->out, "scan-forward"), 4);
  assert_int_equal(count_lines_with(r->out, " (host) "), 4);
  assert_non_null(strstr(r->out, "the driver gives no kernel times"));
  assert_null(strstr(r->out, " 0.0000 ")); /* no row timed 0 */
  char text[65536];
  tu_slurp(json, text, sizeof text);
  assert_int_equal(count_lines_with(text, "\"timing\":\t\"host\""), 4);
  r = run_env(env, "demo --shape 1,1,8,2,8");
  expect_code(r, 0, NULL);
  assert_non_null(strstr(r->out, "host ms"));
  assert_null(strstr(r->out, "kernel ms"));
  /* with kernel times (the queue profiles and the timer has a resolution) the figures are the kernels' */
  r = run("bench --shape 1,1,8,2,8 --reps 1 --warmup 1 --only scan-forward");
  expect_code(r, 0, NULL);
  if (!strstr(r->out, "(host)")) assert_null(strstr(r->out, "the driver gives no kernel times"));
}

/* camdelta bench: a table for every operation, JSON that parses, errors. */
static void test_bench(void **state) {
  (void)state;
  char json[1200];
  snprintf(json, sizeof json, "%s/bench.json", tu_tmpdir());
  cli_result *r = run("bench --shape 1,2,16,3,32 --reps 2 --warmup 1 --peak-gbs 100 --json '%s'", json);
  expect_code(r, 0, NULL);
  const char *ops[] = {"prep-forward", "prep-backward", "scan-forward sequential causal",
                       "scan-forward chunkwise reverse", "scan-backward causal", "scan-backward reverse",
                       "branch-forward", "branch-backward", "stream-step (3 frames)"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strstr(r->out, ops[i])) fail_msg("bench output lacks '%s':\n%s", ops[i], r->out);
  assert_null(strstr(r->out, "n/a"));
  assert_non_null(strstr(r->out, "%GB/s"));
  char text[65536];
  tu_slurp(json, text, sizeof text);
  assert_non_null(strstr(text, "\"median_ms\""));
  assert_non_null(strstr(text, "\"operations\""));
  assert_int_equal(count_lines_with(text, "\"median_ms\""), 14); /* the stream rows and the bf16 branch rows included */
  /* on a CPU the measured peaks (tools/bench_peak.c) name the kernel shape that gave each; a GPU's bench takes
   * its peaks as given and measures none */
  camdelta_device_info info;
  TU_OK(camdelta_context_info(tu_context(), &info));
  if (info.type & CL_DEVICE_TYPE_CPU) {
    assert_non_null(strstr(r->out, "device peaks (measured): "));
    assert_non_null(strstr(r->out, "  fma from "));
    assert_non_null(strstr(text, "\"measured_peak_fma_shape\""));
  } else {
    assert_null(strstr(r->out, "device peaks (measured): "));
  }
  /* not a terminal: no progress indicator */
  assert_null(strchr(r->err, '\r'));
  r = run("bench --shape 1,2,16,2,32 --reps 1 --only prep-forward");
  expect_code(r, 0, NULL);
  assert_null(strstr(r->out, "scan-forward"));
  /* a shape of fewer frames than a stream block: the stream rows say why they do not run */
  r = run("bench --shape 1,2,16,2,32 --reps 1 --only stream --flatness");
  expect_code(r, 0, NULL);
  assert_int_equal(count_lines_with(r->out, "a stream block is 3 frames, the shape has F=2"), 3);
  expect_code(run("bench --shape huge"), 2, "huge");
  expect_code(run("bench --dtype f64"), 2, "--dtype");
  expect_code(run("bench --frobnicate"), 2, "--frobnicate");
  expect_code(run("bench --device no-such-device-xyz"), 4, "no-such-device-xyz");
  /* on a terminal (script(1) gives it one): progress while the inputs are generated on the device (issue 11: a
   * large shape printed nothing for minutes while the host filled random inputs) */
  char cmd[4096], path[1200];
  snprintf(path, sizeof path, "%s/tty.txt", tu_tmpdir());
  snprintf(cmd, sizeof cmd, "script -qec \"'%s' bench --shape 1,2,16,2,32 --reps 1 --only prep-forward\" /dev/null "
           ">'%s' 2>&1 </dev/null", cli_path(), path);
  if (system("command -v script >/dev/null 2>&1") != 0) {
    print_message("script(1) is not installed here: the progress on a terminal was not checked\n");
    return;
  }
  assert_int_equal(system(cmd), 0);
  tu_slurp(path, text, sizeof text);
  if (!strstr(text, "[inputs ") || !strstr(text, "generating on the device"))
    fail_msg("no input progress on a terminal:\n%s", text);
}

TU_MAIN(cli_setup, cli_teardown,
      cmocka_unit_test(test_version_and_help),
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_unknown_device),
      cmocka_unit_test(test_run_prep_f32),
      cmocka_unit_test(test_run_prep_f16_and_f64),
      cmocka_unit_test(test_run_input_errors),
      cmocka_unit_test(test_run_usage_errors),
      cmocka_unit_test(test_run_scan),
      cmocka_unit_test(test_run_scan_backward),
      cmocka_unit_test(test_run_prep_backward),
      cmocka_unit_test(test_cache),
      cmocka_unit_test(test_outputs_atomic),
      cmocka_unit_test(test_outputs_commit_faults),
      cmocka_unit_test(test_hostile_inputs),
      cmocka_unit_test(test_numeric_options),
      cmocka_unit_test(test_cache_refused_once),
      cmocka_unit_test(test_demo),
      cmocka_unit_test(test_bench),
      cmocka_unit_test(test_no_kernel_times))
