#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static camdelta_context *g_ctx;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* CAMDELTA_TEST_FILTER=PATTERN runs only the tests whose names match (cmocka's filter: * and ? wildcards), for
 * working on one test without running its whole program. */
__attribute__((constructor)) static void tu_filter_from_env(void) {
  const char *f = getenv("CAMDELTA_TEST_FILTER");
  if (f && *f) cmocka_set_test_filter(f);
}

camdelta_context *tu_context(void) {
  if (!g_ctx) {
    camdelta_status st = camdelta_context_create(&g_ctx, NULL);
    if (st != CAMDELTA_OK) fail_msg("camdelta_context_create: %s: %s", camdelta_status_name(st), camdelta_last_message());
  }
  return g_ctx;
}

camdelta_context *tu_context_tc_emulated(void) {
  camdelta_context *emu = NULL;
  setenv("CAMDELTA_TC", "emulate", 1);
  camdelta_status st = camdelta_context_create_from_queue(&emu, camdelta_context_cl_context(tu_context()),
                                                          camdelta_context_queue(tu_context()));
  unsetenv("CAMDELTA_TC");
  if (st != CAMDELTA_OK) fail_msg("camdelta_context_create_from_queue: %s: %s", camdelta_status_name(st),
                                  camdelta_last_message());
  return emu;
}

void tu_context_release(void) {
  camdelta_context_destroy(g_ctx);
  g_ctx = NULL;
}

void tu_seed(uint64_t seed) { g_rng = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; }

static uint64_t next_u64(void) {
  uint64_t x = g_rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  g_rng = x;
  return x;
}

double tu_uniform(double lo, double hi) {
  double u = (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

double tu_normal(void) {
  double u1 = tu_uniform(1e-12, 1.0), u2 = tu_uniform(0.0, 1.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_fill_uniform(float *x, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = (float)tu_uniform(lo, hi);
}

void tu_fill_normal(float *x, size_t n, double scale) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(scale * tu_normal());
}

void tu_other_cl_context(cl_context *c, cl_command_queue *q) {
  cl_device_id dev = camdelta_context_device(tu_context());
  cl_int err;
  *c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS) fail_msg("clCreateContext: %s", camdelta_cl_error_name(err));
  *q = clCreateCommandQueue(*c, dev, 0, &err);
  if (err != CL_SUCCESS) fail_msg("clCreateCommandQueue: %s", camdelta_cl_error_name(err));
}

cl_mem tu_buffer(size_t bytes) {
  camdelta_context *ctx = tu_context();
  cl_int err;
  if (bytes == 0) bytes = 4;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) fail_msg("clCreateBuffer(%zu): %s", bytes, camdelta_cl_error_name(err));
  unsigned char *p = malloc(bytes);
  assert_non_null(p);
  memset(p, 0xFF, bytes);
  err = clEnqueueWriteBuffer(camdelta_context_queue(ctx), m, CL_TRUE, 0, bytes, p, 0, NULL, NULL);
  free(p);
  if (err != CL_SUCCESS) fail_msg("clEnqueueWriteBuffer: %s", camdelta_cl_error_name(err));
  return m;
}

cl_mem tu_upload(const void *host, size_t bytes) {
  camdelta_context *ctx = tu_context();
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (err != CL_SUCCESS) fail_msg("clCreateBuffer(%zu): %s", bytes, camdelta_cl_error_name(err));
  if (bytes) {
    err = clEnqueueWriteBuffer(camdelta_context_queue(ctx), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("clEnqueueWriteBuffer: %s", camdelta_cl_error_name(err));
  }
  return m;
}

cl_mem tu_upload_at(const void *host, size_t elems, size_t es, size_t offset, unsigned char fill) {
  unsigned char *tmp = malloc((elems + offset) * es + 1);
  assert_non_null(tmp);
  memset(tmp, fill, offset * es);
  if (elems) memcpy(tmp + offset * es, host, elems * es);
  cl_mem m = tu_upload(tmp, (elems + offset) * es);
  free(tmp);
  return m;
}

void tu_download(cl_mem mem, size_t byte_offset, size_t bytes, void *host) {
  camdelta_context *ctx = tu_context();
  cl_int err = clEnqueueReadBuffer(camdelta_context_queue(ctx), mem, CL_TRUE, byte_offset, bytes, host, 0, NULL, NULL);
  if (err != CL_SUCCESS) fail_msg("clEnqueueReadBuffer: %s", camdelta_cl_error_name(err));
}

size_t tu_mem_size(cl_mem mem) {
  size_t s = 0;
  clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof s, &s, NULL);
  return s;
}

double *tu_to_f64(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

void tu_round_to(camdelta_dtype dt, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (dt == CAMDELTA_F16) x[i] = camdelta_f16_to_f32(camdelta_f32_to_f16(x[i]));
    else if (dt == CAMDELTA_BF16) x[i] = camdelta_bf16_to_f32(camdelta_f32_to_bf16(x[i]));
  }
}

void *tu_pack(camdelta_dtype dt, const float *x, size_t n) {
  size_t es = camdelta_dtype_size(dt);
  void *p = malloc((n ? n : 1) * es);
  assert_non_null(p);
  if (dt == CAMDELTA_F32) {
    memcpy(p, x, n * sizeof(float));
  } else {
    uint16_t *h = p;
    for (size_t i = 0; i < n; i++) h[i] = dt == CAMDELTA_F16 ? camdelta_f32_to_f16(x[i]) : camdelta_f32_to_bf16(x[i]);
  }
  return p;
}

void tu_unpack(camdelta_dtype dt, const void *src, float *dst, size_t n) {
  if (dt == CAMDELTA_F32) {
    memcpy(dst, src, n * sizeof(float));
    return;
  }
  const uint16_t *h = src;
  for (size_t i = 0; i < n; i++) dst[i] = dt == CAMDELTA_F16 ? camdelta_f16_to_f32(h[i]) : camdelta_bf16_to_f32(h[i]);
}

/* The largest difference over the largest reference magnitude, of x given in f32 (xf) or f64 (xd). */
static double rel_err(const float *xf, const double *xd, const double *ref, size_t n) {
  double maxref = 0, maxdiff = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = xf ? (double)xf[i] : xd[i];
    if (!isfinite(x)) return INFINITY;
    double r = fabs(ref[i]);
    if (r > maxref) maxref = r;
    double d = fabs(x - ref[i]);
    if (d > maxdiff) maxdiff = d;
  }
  return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

double tu_rel_err(const float *x, const double *ref, size_t n) { return rel_err(x, NULL, ref, n); }

double tu_rel_err64(const double *x, const double *ref, size_t n) { return rel_err(NULL, x, ref, n); }

unsigned char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

void tu_write_file(const char *path, const void *b, size_t len) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, len, f), len);
  fclose(f);
}

void tu_assert_same_bytes(cl_mem a, cl_mem b, size_t bytes, const char *what) {
  unsigned char *x = malloc(bytes), *y = malloc(bytes);
  assert_true(x && y);
  tu_download(a, 0, bytes, x);
  tu_download(b, 0, bytes, y);
  if (memcmp(x, y, bytes) != 0) fail_msg("%s: the bytes differ", what);
  free(x), free(y);
}

void tu_report(const char *what, double value) { printf("[ measure  ] %s = %.6g\n", what, value); }

void tu_report_worst(const char *prefix, const char *const *names, double *worst, int n) {
  for (int o = 0; o < n; o++) {
    char what[160];
    snprintf(what, sizeof what, "%s max rel err %s", prefix, names[o]);
    tu_report(what, worst[o]);
    worst[o] = 0;
  }
}

void tu_check_bad_env(const char *var, const char *const *bad, size_t n) {
  tu_context_release();
  for (size_t i = 0; i < n; i++) {
    setenv(var, bad[i], 1);
    camdelta_context *ctx = (camdelta_context *)1;
    const camdelta_status st = camdelta_context_create(&ctx, NULL);
    if (st != CAMDELTA_ERROR_INVALID_ARGUMENT || ctx)
      fail_msg("%s=%s: got %s", var, bad[i], camdelta_status_name(st));
    if (!strstr(camdelta_last_message(), var))
      fail_msg("%s=%s: message '%s' does not name the variable", var, bad[i], camdelta_last_message());
  }
  unsetenv(var);
}

void tu_env_context(const char *var, const char *value) {
  if (value) assert_int_equal(setenv(var, value, 1), 0);
  else assert_int_equal(unsetenv(var), 0);
  tu_context_release();
}

void tu_tune_refused(camdelta_context *ctx, const char *family, const char *list, const char *needle) {
  const camdelta_status st = camdelta_tune_set(ctx, family, list);
  if (st != CAMDELTA_ERROR_INVALID_ARGUMENT) fail_msg("tune_set %s '%s': %s", family, list, camdelta_status_name(st));
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("tune_set %s '%s': message '%s' lacks '%s'", family, list, camdelta_last_message(), needle);
}

char *tu_env_saved(const char *var) {
  const char *was = getenv(var);
  char *copy = was ? strdup(was) : NULL;
  if (was && !copy) fail_msg("out of memory");
  return copy;
}

char *tu_limits_saved(void) { return tu_env_saved("CAMDELTA_DEVICE_LIMITS"); }

char *tu_scan_cpu_off(void) {
  char *was = tu_env_saved("CAMDELTA_SCAN_CPU");
  tu_env_context("CAMDELTA_SCAN_CPU", "0");
  return was;
}

void tu_scan_cpu_restore(char *was) {
  tu_env_context("CAMDELTA_SCAN_CPU", was);
  free(was);
}

void tu_limits_env(const char *was, const char *extra) {
  char text[160];
  const int n = snprintf(text, sizeof text, "%s%s%s", was ? was : "", was && extra ? "," : "", extra ? extra : "");
  if (n < 0 || (size_t)n >= sizeof text) fail_msg("CAMDELTA_DEVICE_LIMITS text too long");
  tu_env_context("CAMDELTA_DEVICE_LIMITS", text[0] ? text : NULL);
}

void tu_limits_restore(char *was) {
  tu_limits_env(was, NULL);
  free(was);
}

const char *tu_tmpdir(void) {
  static char path[1024];
  if (!path[0]) {
    const char *base = getenv("CAMDELTA_TEST_TMP");
    if (base && *base) {
      snprintf(path, sizeof path, "%s-%ld", base, (long)getpid());
    } else {
      snprintf(path, sizeof path, "/tmp/camdelta-test-%ld", (long)getpid());
    }
    mkdir(path, 0700);
  }
  return path;
}

const char *tu_fresh_dir(const char *name) {
  static char path[8][1200];
  static int next;
  char *p = path[next++ % 8];
  snprintf(p, 1200, "%s/%s", tu_tmpdir(), name);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(mkdir(p, 0700), 0);
  return p;
}

void tu_slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

int tu_teardown_context(void **state) {
  (void)state;
  tu_context_release();
  return 0;
}

int tu_run_cli(const char *prefix, const char *cli, char *args, size_t args_size, char *out, size_t out_size,
               char *err, size_t err_size, const char *fmt, va_list ap) {
  char words[8192], cmd[12288], outp[1200], errp[1200];
  vsnprintf(words, sizeof words, fmt, ap);
  snprintf(outp, sizeof outp, "%s/cli.stdout", tu_tmpdir());
  snprintf(errp, sizeof errp, "%s/cli.stderr", tu_tmpdir());
  snprintf(cmd, sizeof cmd, "%s '%s' %s >'%s' 2>'%s' </dev/null", prefix ? prefix : "", cli, words,
           out ? outp : "/dev/null", errp);
  const int st = system(cmd);
  assert_true(st != -1);
  if (args) snprintf(args, args_size, "%s", words);
  if (out) tu_slurp(outp, out, out_size);
  if (err) tu_slurp(errp, err, err_size);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

void tu_scan_host_make(tu_scan_host *p, size_t B, size_t H, size_t D, size_t F, size_t S, const double state_sd[2],
                       uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->B = B, p->H = H, p->D = D, p->F = F, p->S = S, p->N = F * S;
  p->tok = B * H * D * p->N, p->gates = B * H * p->N, p->bhf = B * H * F, p->st = B * H * D * D;
  float **x[8] = {&p->q, &p->k, &p->v, &p->go, &p->beta, &p->decay, &p->init, &p->gf};
  const size_t n[8] = {p->tok, p->tok, p->tok, p->tok, p->gates, p->bhf, p->st, p->st};
  tu_seed(seed);
  for (int i = 0; i < 8; i++) {
    *x[i] = malloc(n[i] * 4);
    assert_non_null(*x[i]);
  }
  tu_fill_uniform(p->q, p->tok, -1.0, 1.0);
  tu_fill_normal(p->k, p->tok, 1.0 / sqrt((double)D * (double)S));
  tu_fill_normal(p->v, p->tok, 1.0);
  tu_fill_normal(p->go, p->tok, 1.0);
  tu_fill_uniform(p->beta, p->gates, 0.0, 1.0);
  tu_fill_uniform(p->decay, p->bhf, 0.6, 1.0);
  tu_fill_normal(p->init, p->st, state_sd[0]);
  tu_fill_normal(p->gf, p->st, state_sd[1]);
}

void tu_scan_host_free(tu_scan_host *p) {
  free(p->q), free(p->k), free(p->v), free(p->go), free(p->beta), free(p->decay), free(p->init), free(p->gf);
}
