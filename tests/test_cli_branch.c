/* camdelta run camera | short-conv | output-transform | branch | branch-backward as a separate process
 * (CAMDELTA_CLI): results against the f64 reference, the chunk_index file, run branch --stream, and the error paths with their exit
 * codes (2 usage, 3 bad input), each leaving no output file behind. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "branch_problem.h"

static int g_code;
static char g_err[16384];

#if defined(__GNUC__)
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#endif
static int run(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  g_code = tu_run_cli(NULL, getenv("CAMDELTA_CLI"), NULL, 0, NULL, 0, g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return g_code;
}

static void expect(int code, const char *needle) {
  if (g_code != code) fail_msg("exit code %d, expected %d; stderr: %s", g_code, code, g_err);
  if (needle && !strstr(g_err, needle)) fail_msg("stderr lacks '%s': %s", needle, g_err);
}

static void save(const char *d, const char *name, int ndim, const size_t *shape, const float *x) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", d, name);
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, ndim, shape, x));
}

static double *load64(const char *d, const char *name, size_t expect_count) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", d, name);
  camdelta_npy n;
  TU_OK(camdelta_npy_read(path, &n));
  assert_int_equal(n.type, CAMDELTA_NPY_F4);
  assert_int_equal(n.count, expect_count);
  double *x = tu_to_f64(n.data, n.count);
  camdelta_npy_free(&n);
  return x;
}

static int exists(const char *d, const char *name) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", d, name);
  return access(path, F_OK) == 0;
}

/* The last run exited with `code`, its stderr naming `needle`, and wrote no `output` into d. */
static void refused(int code, const char *needle, const char *d, const char *output) {
  expect(code, needle);
  if (exists(d, output)) fail_msg("%s/%s.npy written by a refused run", d, output);
}

/* the branch problem: B 1, grid 5x2x3, H 2, D 8 */
enum { B = 1, T = 5, HS = 2, WS = 3, H = 2, D = 8, S = HS * WS, N = T * S, C = H * D };
static float q[B * N * C], k[B * N * C], v[B * N * C], w[C * 4], qw[C], kw[C], cc[B * T * 20], beta[B * H * N],
    decay[B * H * T], gy[B * N * C];

/* The branch's inputs and grad_y (drawn again from the same seed each time) written into `in`. */
static void write_inputs(const char *in) {
  tu_seed(81);
  tu_fill_normal(q, B * N * C, 1.0), tu_fill_normal(k, B * N * C, 1.0), tu_fill_normal(v, B * N * C, 1.0);
  tu_fill_normal(w, C * 4, 0.5), tu_fill_uniform(qw, C, 0.5, 1.5), tu_fill_uniform(kw, C, 0.5, 1.5);
  bp_cameras(cc, B, T, HS, WS, 1, 1);
  tu_fill_uniform(beta, B * H * N, 0.1, 0.9), tu_fill_uniform(decay, B * H * T, 0.5, 1.0);
  tu_fill_normal(gy, B * N * C, 1.0);
  const size_t bnhd[4] = {B, N, H, D}, c4[2] = {C, 4}, c1[1] = {C}, bt20[3] = {B, T, 20}, bhts[4] = {B, H, T, S},
               bht[3] = {B, H, T};
  save(in, "q_raw", 4, bnhd, q), save(in, "k_raw", 4, bnhd, k), save(in, "v_raw", 4, bnhd, v);
  save(in, "conv_weight", 2, c4, w), save(in, "q_norm_weight", 1, c1, qw), save(in, "k_norm_weight", 1, c1, kw);
  save(in, "camera_conditions", 3, bt20, cc), save(in, "beta", 4, bhts, beta), save(in, "decay", 3, bht, decay);
  save(in, "grad_y", 4, bnhd, gy);
}

/* A fresh folder "in" holding them; its path. */
static const char *fresh_inputs(void) {
  const char *in = tu_fresh_dir("in");
  write_inputs(in);
  return in;
}

static void check_branch(const char *out, const camdelta_chunking *ch, int backward) {
  double *in64[9] = {tu_to_f64(q, B * N * C),  tu_to_f64(k, B * N * C),  tu_to_f64(v, B * N * C),
                     tu_to_f64(w, C * 4),      tu_to_f64(qw, C),         tu_to_f64(kw, C),
                     tu_to_f64(cc, B * T * 20), tu_to_f64(beta, B * H * N), tu_to_f64(decay, B * H * T)};
  double *ry = malloc(B * N * C * 8);
  camdelta_ref_branch r = {B,        T,        HS,       WS,       1,        1,        H,        D,
                           *ch,      1.0 / sqrt((double)D * S),   1e-6,     in64[0],  in64[1],  in64[2],
                           in64[3],  in64[4],  in64[5],  in64[6],  in64[7],  in64[8],  ry};
  r.k_scale = (float)(1.0 / sqrt((double)D * S)); /* the CLI passes k_scale as f32 */
  if (!backward) {
    TU_OK(camdelta_ref_branch_forward(&r));
    double *y = load64(out, "y", B * N * C);
    const double e = tu_rel_err64(y, ry, B * N * C);
    if (e > 1e-5) fail_msg("CLI branch y rel err %.3g", e);
    free(y);
  } else {
    static const char *names[8] = {"dq_raw", "dk_raw", "dv_raw", "dconv_weight", "dq_norm_weight", "dk_norm_weight",
                                   "dbeta", "ddecay"};
    const size_t cnt[8] = {B * N * C, B * N * C, B * N * C, 4 * C, C, C, B * H * N, B * H * T};
    double *g[8];
    for (int i = 0; i < 8; i++) g[i] = malloc(cnt[i] * 8);
    double *gy64 = tu_to_f64(gy, B * N * C);
    const camdelta_ref_branch_grads rg = {gy64, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]};
    TU_OK(camdelta_ref_branch_backward(&r, &rg));
    for (int i = 0; i < 8; i++) {
      double *x = load64(out, names[i], cnt[i]);
      const double e = tu_rel_err64(x, g[i], cnt[i]);
      if (e > 1e-4) fail_msg("CLI branch-backward %s rel err %.3g", names[i], e);
      free(x), free(g[i]);
    }
    free(gy64);
  }
  free(ry);
  for (int i = 0; i < 9; i++) free(in64[i]);
}

static void test_branch_runs(void **state) {
  (void)state;
  const char *in = fresh_inputs(), *out = tu_fresh_dir("out");
  run("run branch --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --chunk-strategy first_chunk_plus_one", in, out);
  expect(0, NULL);
  const camdelta_chunking ch = {2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  check_branch(out, &ch, 0);
  run("run branch-backward --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --chunk-strategy first_chunk_plus_one", in,
      out);
  expect(0, NULL);
  check_branch(out, &ch, 1);
  /* an explicit chunk_index file */
  const int64_t idx[3] = {0, 1, 3};
  const size_t three[1] = {3};
  char path[1400];
  snprintf(path, sizeof path, "%s/chunk_index.npy", in);
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, three, idx));
  const char *out2 = tu_fresh_dir("out2");
  run("run branch --in '%s' --out '%s' --grid 5,2,3", in, out2);
  expect(0, NULL);
  const camdelta_chunking chi = {0, CAMDELTA_CHUNK_UNIFORM, idx, 3};
  check_branch(out2, &chi, 0);
  remove(path);
}

static void test_pieces(void **state) {
  (void)state;
  const char *in = fresh_inputs(), *out = tu_fresh_dir("out");
  /* camera */
  run("run camera --in '%s' --out '%s' --grid 5,2,3 --head-dim 16", in, out);
  expect(0, NULL);
  double *cc64 = tu_to_f64(cc, B * T * 20);
  double *ref[5];
  const size_t cnt[5] = {B * N * 16, B * N * 16, B * N * 16, N * 8, N * 8};
  for (int i = 0; i < 5; i++) ref[i] = malloc(cnt[i] * 8);
  const camdelta_ref_camera rc = {B, T, HS, WS, 1, 1, 16, cc64, ref[0], ref[1], ref[2], ref[3], ref[4]};
  TU_OK(camdelta_ref_camera_forward(&rc));
  static const char *names[5] = {"proj_q", "proj_kv", "proj_o", "rope_cos", "rope_sin"};
  for (int i = 0; i < 5; i++) {
    double *x = load64(out, names[i], cnt[i]);
    assert_true(tu_rel_err64(x, ref[i], cnt[i]) <= 1e-6);
    free(x), free(ref[i]);
  }
  free(cc64);
  /* short conv, uniform rule (5 % 2 != 0: the scan's bounds [0, 2, 5]) */
  run("run short-conv --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2", in, out);
  expect(0, NULL);
  const size_t bounds[3] = {0, 2, 5};
  double *x64 = tu_to_f64(k, B * N * C), *w64 = tu_to_f64(w, 4 * C), *ry = malloc(B * N * C * 8);
  const camdelta_ref_conv r = {B, T, S, C, bounds, 3, x64, w64, ry, NULL, NULL, NULL};
  TU_OK(camdelta_ref_short_conv_forward(&r));
  double *y = load64(out, "k_conv", B * N * C);
  assert_true(tu_rel_err64(y, ry, B * N * C) <= 1e-6);
  free(y), free(x64), free(w64), free(ry);
  /* output transform of q_raw taken as (B, H, D, N) = (1, 2, 8, 30) with the camera's proj_o and tables (D 8) */
  run("run camera --in '%s' --out '%s' --grid 5,2,3 --head-dim 8", in, in);
  expect(0, NULL);
  const size_t bhdn[4] = {B, H, D, N};
  save(in, "out", 4, bhdn, q);
  run("run output-transform --in '%s' --out '%s'", in, out);
  expect(0, NULL);
  double *o64 = tu_to_f64(q, B * N * C), *po = load64(in, "proj_o", B * N * 16), *c64 = load64(in, "rope_cos", N * 4),
         *s64 = load64(in, "rope_sin", N * 4), *ro = malloc(B * N * C * 8);
  TU_OK(camdelta_ref_output_transform(B, N, H, D, o64, po, c64, s64, ro));
  y = load64(out, "y", B * N * C);
  assert_true(tu_rel_err64(y, ro, B * N * C) <= 1e-6);
  free(y), free(o64), free(po), free(c64), free(s64), free(ro);
}

/* run branch --stream: the same y as the one-shot branch where the conv's segments are the blocks (T = 5 frames in
 * blocks 3, 2 of first_chunk_plus_one with chunk size 2), with non-committing steps in between; its errors. */
static void test_branch_stream(void **state) {
  (void)state;
  const char *in = fresh_inputs(), *out = tu_fresh_dir("out");
  const camdelta_chunking ch = {2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  for (int repeat = 0; repeat < 3; repeat += 2) {
    run("run branch --stream --repeat %d --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --chunk-strategy "
        "first_chunk_plus_one", repeat, in, out);
    expect(0, NULL);
    check_branch(out, &ch, 0);
  }
  const char *bad = tu_fresh_dir("bad");
  run("run branch --stream --in '%s' --out '%s' --grid 5,2,3", in, bad);
  expect(2, "--chunk-size");
  run("run branch --repeat 2 --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2", in, bad);
  expect(2, "--repeat needs --stream");
  run("run branch-backward --stream --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2", in, bad);
  expect(2, "--stream applies to branch only");
  run("run branch --stream --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2", in, bad); /* blocks 2, 2, 2 */
  refused(3, "not a whole number of blocks", bad, "y");
}

static void test_errors(void **state) {
  (void)state;
  const char *in = fresh_inputs(), *out = tu_fresh_dir("out");
  /* usage (exit 2): missing --grid, malformed --grid and --patch, a bad strategy, an option of another operation;
   * bad input (exit 3): a grid that does not match N, T that does not match the cameras */
  static const struct {
    const char *op, *options;
    int code;
    const char *needle;
  } bad_runs[] = {
      {"branch", "", 2, "--grid"},
      {"branch", "--grid 5,2", 2, "--grid"},
      {"branch", "--grid 5,,2,3", 2, "--grid"}, /* an empty field is not skipped */
      {"camera", "--grid 5,2,3 --head-dim 8 --patch 1,1", 2, "--patch"},
      {"branch", "--grid 5,2,3 --chunk-strategy sideways", 2, "sideways"},
      {"output-transform", "--chunk-size 2", 2, "chunk"},
      {"camera", "--grid 5,2,3", 2, "--head-dim"},
      {"camera", "--grid 5,2,3 --head-dim 8 --algorithm auto", 2, "--algorithm apply to branch"}, /* given = used */
      {"branch", "--grid 5,3,3", 3, "does not match N"},
      {"camera", "--grid 6,1,5 --head-dim 8", 3, "camera_conditions"},
  };
  for (size_t i = 0; i < sizeof bad_runs / sizeof bad_runs[0]; i++) {
    run("run %s --in '%s' --out '%s' %s", bad_runs[i].op, in, out, bad_runs[i].options);
    expect(bad_runs[i].code, bad_runs[i].needle);
  }
  /* a conv weight of the wrong shape */
  const size_t c3[2] = {C, 3};
  const char *bad = tu_fresh_dir("bad");
  write_inputs(bad);
  save(bad, "conv_weight", 2, c3, w);
  run("run branch --in '%s' --out '%s' --grid 5,2,3", bad, out);
  expect(3, "conv_weight.npy");
  /* chunk_index: not increasing, out of range, floats */
  write_inputs(bad);
  char path[1400];
  snprintf(path, sizeof path, "%s/chunk_index.npy", bad);
  const size_t three[1] = {3};
  const int64_t inc[3] = {0, 3, 3}, rng[3] = {0, 2, 5};
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, three, inc));
  run("run branch --in '%s' --out '%s' --grid 5,2,3", bad, out);
  expect(3, "increasing");
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_I8, 1, three, rng));
  run("run branch-backward --in '%s' --out '%s' --grid 5,2,3", bad, out);
  expect(3, "out of range");
  const float f[3] = {0, 1, 2};
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_F4, 1, three, f));
  run("run short-conv --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2", bad, out);
  expect(3, "<i8");
  /* an infinity in the cameras (a NaN marks a frame without a camera; an infinity is refused): exit 3, naming it */
  remove(path);
  write_inputs(bad);
  float inf_cc[B * T * 20];
  memcpy(inf_cc, cc, sizeof inf_cc);
  inf_cc[(0 * T + 3) * 20 + 17] = -INFINITY;
  const size_t bt20[3] = {B, T, 20};
  save(bad, "camera_conditions", 3, bt20, inf_cc);
  static const char *const inf_ops[] = {"branch --grid 5,2,3", "branch-backward --grid 5,2,3",
                                        "camera --grid 5,2,3 --head-dim 8"};
  for (size_t i = 0; i < sizeof inf_ops / sizeof inf_ops[0]; i++) {
    run("run %s --in '%s' --out '%s'", inf_ops[i], bad, out);
    expect(3, "camera_conditions[0, 3, 17] (fy) is -inf");
  }
  write_inputs(bad);
  /* a missing input file */
  snprintf(path, sizeof path, "%s/decay.npy", bad);
  remove(path);
  run("run branch --in '%s' --out '%s' --grid 5,2,3", bad, out);
  expect(3, "decay.npy");
  static const char *outs[] = {"y", "k_conv", "proj_q", "dq_raw", "ddecay"};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) assert_false(exists(out, outs[i]));
}

static int setup(void **state) {
  (void)state;
  const char *p = getenv("CAMDELTA_CLI");
  return p && *p && access(p, X_OK) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_tmpdir());
  tu_context_release();
  return system(cmd) == 0 ? 0 : -1;
}

/* --dtype f16 | bf16: the activations as <f2 or <u2 (bfloat16 bits) in and out, against the f64 reference fed the same
 * rounded inputs within docs/math.md §8.7's bounds; float activation files rounded to the dtype give the same bits;
 * <u2 without --dtype bf16, or beta as <u2, is an input error (exit 3) and --dtype on another operation a usage error,
 * each writing nothing. */
static void save_as(const char *d, const char *name, camdelta_dtype dt, const size_t *shape, const float *x) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", d, name);
  void *h = tu_pack(dt, x, B * N * C);
  TU_OK(camdelta_npy_write(path, dt == CAMDELTA_F16 ? CAMDELTA_NPY_F2 : CAMDELTA_NPY_U2, 4, shape, h));
  free(h);
}

static float *load_as(const char *d, const char *name, camdelta_dtype dt) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s.npy", d, name);
  camdelta_npy n;
  TU_OK(camdelta_npy_read(path, &n));
  assert_int_equal(n.type, dt == CAMDELTA_F16 ? CAMDELTA_NPY_F2 : CAMDELTA_NPY_U2);
  assert_int_equal(n.count, B * N * C);
  float *x = malloc(n.count * sizeof(float));
  assert_non_null(x);
  tu_unpack(dt, n.data, x, n.count);
  camdelta_npy_free(&n);
  return x;
}

static void test_branch_16bit(void **state) {
  (void)state;
  const size_t bnhd[4] = {B, N, H, D};
  for (int k16 = 0; k16 < 2; k16++) {
    const camdelta_dtype dt = k16 ? CAMDELTA_BF16 : CAMDELTA_F16;
    const char *name = camdelta_dtype_name(dt);
    const double bound = k16 ? 1.6e-2 : 2e-3;
    const char *in = tu_fresh_dir("in16"), *out = tu_fresh_dir("out16"), *outf = tu_fresh_dir("out16f");
    write_inputs(in); /* <f4 files: rounded by the CLI */
    run("run branch --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --dtype %s", in, outf, name);
    expect(0, NULL);
    float *r[4] = {q, k, v, gy};
    static const char *names[4] = {"q_raw", "k_raw", "v_raw", "grad_y"};
    for (int i = 0; i < 4; i++) {
      tu_round_to(dt, r[i], B * N * C);
      save_as(in, names[i], dt, bnhd, r[i]);
    }
    run("run branch --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --dtype %s", in, out, name);
    expect(0, NULL);
    float *y = load_as(out, "y", dt), *yf = load_as(outf, "y", dt);
    assert_memory_equal(y, yf, B * N * C * sizeof(float));
    const camdelta_chunking ch = {2, CAMDELTA_CHUNK_UNIFORM, NULL, 0};
    double *in64[9] = {tu_to_f64(q, B * N * C),  tu_to_f64(k, B * N * C),  tu_to_f64(v, B * N * C),
                       tu_to_f64(w, C * 4),      tu_to_f64(qw, C),         tu_to_f64(kw, C),
                       tu_to_f64(cc, B * T * 20), tu_to_f64(beta, B * H * N), tu_to_f64(decay, B * H * T)};
    double *ry = malloc(B * N * C * 8);
    assert_non_null(ry);
    camdelta_ref_branch rb = {.B = B, .T = T, .Hs = HS, .Ws = WS, .ph = 1, .pw = 1, .H = H, .D = D, .chunking = ch,
                              .k_scale = (float)(1.0 / sqrt((double)D * S)), .norm_eps = 1e-6, .q_raw = in64[0],
                              .k_raw = in64[1], .v_raw = in64[2], .conv_weight = in64[3], .q_norm_weight = in64[4],
                              .k_norm_weight = in64[5], .camera_conditions = in64[6], .beta = in64[7],
                              .decay = in64[8], .y = ry};
    TU_OK(camdelta_ref_branch_forward(&rb));
    double e = tu_rel_err(y, ry, B * N * C);
    if (e > bound) fail_msg("CLI branch --dtype %s: y rel err %.3g > %.3g", name, e, bound);
    free(y), free(yf);
    /* a 16-bit stream (blocks 3, 2) against the f64 stream reference */
    const char *outs = tu_fresh_dir("out16s");
    run("run branch --stream --repeat 1 --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --chunk-strategy "
        "first_chunk_plus_one --dtype %s", in, outs, name);
    expect(0, NULL);
    camdelta_ref_branch rs = rb;
    rs.chunking = (camdelta_chunking){2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
    rs.y = malloc(B * N * C * 8);
    assert_non_null(rs.y);
    TU_OK(camdelta_ref_stream_forward(&rs));
    y = load_as(outs, "y", dt);
    e = tu_rel_err(y, rs.y, B * N * C);
    if (e > bound) fail_msg("CLI branch --stream --dtype %s: y rel err %.3g > %.3g", name, e, bound);
    free(y), free(rs.y);
    run("run branch-backward --in '%s' --out '%s' --grid 5,2,3 --chunk-size 2 --dtype %s", in, out, name);
    expect(0, NULL);
    double *g[3];
    for (int i = 0; i < 3; i++) g[i] = malloc(B * N * C * 8);
    double *gy64 = tu_to_f64(gy, B * N * C);
    const camdelta_ref_branch_grads rg = {.grad_y = gy64, .dq_raw = g[0], .dk_raw = g[1], .dv_raw = g[2]};
    TU_OK(camdelta_ref_branch_backward(&rb, &rg));
    static const char *gn[3] = {"dq_raw", "dk_raw", "dv_raw"};
    for (int i = 0; i < 3; i++) {
      float *x = load_as(out, gn[i], dt);
      e = tu_rel_err(x, g[i], B * N * C);
      if (e > 2 * bound) fail_msg("CLI branch-backward --dtype %s: %s rel err %.3g", name, gn[i], e);
      free(x), free(g[i]);
    }
    assert_true(exists(out, "dconv_weight")); /* f32 (load64 checks <f4) */
    free(load64(out, "dconv_weight", 4 * C));
    free(gy64), free(ry);
    for (int i = 0; i < 9; i++) free(in64[i]);
  }
  /* bad input: <u2 activations without --dtype bf16 (they are in/in16 from the bf16 round), beta as <u2 */
  const char *in = tu_fresh_dir("in16");
  write_inputs(in);
  save_as(in, "q_raw", CAMDELTA_BF16, bnhd, q);
  const char *bad = tu_fresh_dir("bad16");
  run("run branch --in '%s' --out '%s' --grid 5,2,3", in, bad);
  refused(3, "<u2", bad, "y");
  run("run branch --in '%s' --out '%s' --grid 5,2,3 --dtype f16", in, bad);
  refused(3, "q_raw", bad, "y");
  write_inputs(in);
  const size_t bhts[4] = {B, H, T, S};
  char path[1400];
  snprintf(path, sizeof path, "%s/beta.npy", in);
  void *hb = tu_pack(CAMDELTA_BF16, beta, B * H * N);
  TU_OK(camdelta_npy_write(path, CAMDELTA_NPY_U2, 4, bhts, hb));
  free(hb);
  run("run branch --in '%s' --out '%s' --grid 5,2,3 --dtype bf16", in, bad);
  refused(3, "beta", bad, "y");
  run("run branch --in '%s' --out '%s' --grid 5,2,3 --dtype bf8", in, bad);
  expect(2, "--dtype");
  run("run short-conv --in '%s' --out '%s' --grid 5,2,3 --dtype bf16", in, bad);
  refused(2, "--dtype", bad, "k_conv");
  write_inputs(in); /* the other tests' inputs as they were */
}

TU_MAIN(setup, teardown, cmocka_unit_test(test_branch_runs), cmocka_unit_test(test_branch_stream),
        cmocka_unit_test(test_pieces), cmocka_unit_test(test_errors), cmocka_unit_test(test_branch_16bit))
