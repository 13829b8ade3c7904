/* Cameras -> matrices and RoPE tables on the device against the f64 reference (docs/math.md §8.1), properties and bad
 * input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_problem.h"

typedef struct cam_shape {
  size_t B, T, Hs, Ws, ph, pw, D, off;
} cam_shape;

static const cam_shape shapes[] = {
    {2, 1, 3, 5, 1, 1, 8, 0},   {2, 2, 7, 9, 2, 2, 64, 3},  {1, 7, 5, 11, 1, 2, 112, 0},
    {2, 21, 4, 6, 2, 2, 128, 1}, {1, 2, 3, 250, 1, 1, 128, 0}, /* large width positions: angles up to 250 rad */
};

static double worst_m = 0, worst_r = 0;

/* Uploads n floats at element offset off (the slots before it hold garbage). */
static cl_mem upload_off(const float *x, size_t n, size_t off) {
  float *tmp = malloc((n + off) * sizeof *tmp);
  assert_non_null(tmp);
  for (size_t i = 0; i < off; i++) tmp[i] = 12345.0f;
  memcpy(tmp + off, x, n * sizeof *x);
  cl_mem m = tu_upload(tmp, (n + off) * sizeof *tmp);
  free(tmp);
  return m;
}

static void run_shape(const cam_shape *s) {
  camdelta_context *ctx = tu_context();
  const size_t N = s->T * s->Hs * s->Ws, BN16 = s->B * N * 16, NDh = N * s->D / 2, off = s->off;
  float *cc = malloc(s->B * s->T * 20 * sizeof *cc);
  bp_cameras(cc, s->B, s->T, s->Hs, s->Ws, s->ph, s->pw);
  cl_mem dcc = upload_off(cc, s->B * s->T * 20, off);
  cl_mem o[5];
  const size_t cnt[5] = {BN16, BN16, BN16, NDh, NDh};
  for (int i = 0; i < 5; i++) o[i] = tu_buffer((cnt[i] + off) * 4);
  camdelta_profile prof = {0, 0};
  const camdelta_camera_args a = {s->B,        s->T,        s->Hs,       s->Ws,       1,           s->ph,
                                  s->pw,       s->D,        {dcc, off},  {o[0], off}, {o[1], off}, {o[2], off},
                                  {o[3], off}, {o[4], off}, &prof};
  TU_OK(camdelta_camera_forward(ctx, &a));
  assert_int_equal(prof.kernels, 2);
  double *cc64 = tu_to_f64(cc, s->B * s->T * 20);
  double *ref[5];
  for (int i = 0; i < 5; i++) ref[i] = malloc(cnt[i] * sizeof(double));
  const camdelta_ref_camera r = {s->B, s->T, s->Hs, s->Ws, s->ph, s->pw, s->D, cc64, ref[0], ref[1], ref[2], ref[3],
                                 ref[4]};
  TU_OK(camdelta_ref_camera_forward(&r));
  static const char *names[5] = {"proj_q", "proj_kv", "proj_o", "rope_cos", "rope_sin"};
  for (int i = 0; i < 5; i++) {
    float *got = malloc(cnt[i] * sizeof *got);
    tu_download(o[i], off * 4, cnt[i] * 4, got);
    const double e = tu_rel_err(got, ref[i], cnt[i]);
    if (i < 3 && e > worst_m) worst_m = e;
    if (i >= 3 && e > worst_r) worst_r = e;
    if (e > 1e-6)
      fail_msg("B=%zu T=%zu Hs=%zu Ws=%zu D=%zu: %s rel err %.3g > 1e-6", s->B, s->T, s->Hs, s->Ws, s->D, names[i], e);
    free(got);
    free(ref[i]);
    clReleaseMemObject(o[i]);
  }
  free(cc64);
  free(cc);
  clReleaseMemObject(dcc);
}

static void test_shapes(void **state) {
  (void)state;
  tu_seed(11);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
  tu_report("camera matrices max rel err", worst_m);
  tu_report("camera rope tables max rel err", worst_r);
}

/* Identity c2w with the principal point on token (u0, v0): that token's matrices are I. P^-1 P = I everywhere. */
static void test_identity_and_inverse(void **state) {
  (void)state;
  tu_seed(12);
  const size_t B = 2, T = 3, Hs = 5, Ws = 7, ph = 2, pw = 2, N = T * Hs * Ws, u0 = 4, v0 = 3;
  float cc[2 * 3 * 20];
  bp_cameras(cc, B, T, Hs, Ws, ph, pw);
  for (size_t i = 0; i < B * T; i++)
    if (i % 2 == 0) {
      float *o = cc + 20 * i;
      memset(o, 0, 16 * sizeof *o);
      o[0] = o[5] = o[10] = o[15] = 1.0f;
      o[18] = (float)(u0 * pw), o[19] = (float)(v0 * ph);
    }
  cl_mem dcc = tu_upload(cc, sizeof cc), pq = tu_buffer(B * N * 64), pkv = tu_buffer(B * N * 64),
         po = tu_buffer(B * N * 64);
  const camdelta_camera_args a = {B, T, Hs, Ws, 1, ph, pw, 8, {dcc, 0}, {pq, 0}, {pkv, 0}, {po, 0}, {NULL, 0},
                                  {NULL, 0}, NULL};
  TU_OK(camdelta_camera_forward(tu_context(), &a));
  float *Q = bp_download(pq, B * N * 16), *K = bp_download(pkv, B * N * 16), *O = bp_download(po, B * N * 16);
  double worst_id = 0, worst_inv = 0;
  for (size_t b = 0; b < B; b++)
    for (size_t n = 0; n < N; n++) {
      const size_t f = n / (Hs * Ws), v = (n % (Hs * Ws)) / Ws, u = n % Ws, o = (b * N + n) * 16;
      if ((b * T + f) % 2 == 0 && u == u0 && v == v0)
        for (int i = 0; i < 16; i++) {
          const double id = (i % 5 == 0) ? 1.0 : 0.0;
          worst_id = fmax(worst_id, fmax(fabs(Q[o + i] - id), fmax(fabs(K[o + i] - id), fabs(O[o + i] - id))));
        }
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          double acc = 0;
          for (int k = 0; k < 4; k++) acc += (double)K[o + 4 * i + k] * O[o + 4 * k + j];
          worst_inv = fmax(worst_inv, fabs(acc - (i == j ? 1.0 : 0.0)));
          /* proj_q = P^T */
          assert_true(Q[o + 4 * i + j] == O[o + 4 * j + i]);
        }
    }
  tu_report("identity camera at principal point |P - I|", worst_id);
  tu_report("|P^-1 P - I|", worst_inv);
  assert_true(worst_id <= 1e-6);
  assert_true(worst_inv <= 1e-5); /* |t| up to 3*sqrt(3) scales the last column */
  free(Q), free(K), free(O);
  clReleaseMemObject(dcc), clReleaseMemObject(pq), clReleaseMemObject(pkv), clReleaseMemObject(po);
}

/* A NaN pose gives identity matrices for every token of that frame; other frames are unaffected. */
static void test_nan_pose(void **state) {
  (void)state;
  tu_seed(13);
  const size_t B = 1, T = 3, Hs = 2, Ws = 3, N = T * Hs * Ws, S = Hs * Ws;
  float cc[3 * 20];
  bp_cameras(cc, B, T, Hs, Ws, 1, 1);
  cc[20 + 5] = NAN;
  cl_mem dcc = tu_upload(cc, sizeof cc), pq = tu_buffer(N * 64), pkv = tu_buffer(N * 64), po = tu_buffer(N * 64);
  const camdelta_camera_args a = {B, T, Hs, Ws, 1, 1, 1, 8, {dcc, 0}, {pq, 0}, {pkv, 0}, {po, 0}, {NULL, 0},
                                  {NULL, 0}, NULL};
  TU_OK(camdelta_camera_forward(tu_context(), &a));
  float *M[3] = {bp_download(pq, N * 16), bp_download(pkv, N * 16), bp_download(po, N * 16)};
  for (int m = 0; m < 3; m++) {
    for (size_t n = 0; n < N; n++) {
      int is_id = 1;
      for (int i = 0; i < 16; i++) is_id &= M[m][n * 16 + i] == ((i % 5 == 0) ? 1.0f : 0.0f);
      if (n / S == 1) assert_true(is_id);
      else assert_false(is_id);
    }
    free(M[m]);
  }
  clReleaseMemObject(dcc), clReleaseMemObject(pq), clReleaseMemObject(pkv), clReleaseMemObject(po);
}

/* The reference against values computed independently with camref.py (float64 NumPy, docs/math.md §8): angles of the
 * camera-half RoPE for D = 112 at token (f, v, u) = (20, 29, 51) of a 21x30x52 grid. */
static void test_reference_rope_values(void **state) {
  (void)state;
  const size_t T = 21, Hs = 30, Ws = 52, D = 112, N = T * Hs * Ws, Dh = D / 2, n = (20 * Hs + 29) * Ws + 51;
  double *cc = calloc(T * 20, sizeof *cc);
  for (size_t f = 0; f < T; f++) {
    cc[f * 20 + 0] = cc[f * 20 + 5] = cc[f * 20 + 10] = cc[f * 20 + 15] = 1;
    cc[f * 20 + 16] = cc[f * 20 + 17] = 50, cc[f * 20 + 18] = 26, cc[f * 20 + 19] = 15;
  }
  double *rc = malloc(N * Dh * sizeof *rc), *rs = malloc(N * Dh * sizeof *rs);
  const camdelta_ref_camera r = {1, T, Hs, Ws, 1, 1, D, cc, NULL, NULL, NULL, rc, rs};
  TU_OK(camdelta_ref_camera_forward(&r));
  /* camref.cam_rope_angles(21, 30, 52, 112)[n] for i = 0, 1, 9, 10, 18, 19, 27: nt = 10, nh = 9 */
  static const double ang[7] = {20.0, 12.619146889603865, 0.3169786384922227, 29.0, 0.4837491557880172, 51.0,
                                0.8507312739720302};
  static const size_t idx[7] = {0, 1, 9, 10, 18, 19, 27};
  for (int i = 0; i < 7; i++) {
    assert_true(fabs(rc[n * Dh + 2 * idx[i]] - cos(ang[i])) < 1e-14);
    assert_true(fabs(rc[n * Dh + 2 * idx[i] + 1] - cos(ang[i])) < 1e-14);
    assert_true(fabs(rs[n * Dh + 2 * idx[i]] + sin(ang[i])) < 1e-14);
    assert_true(fabs(rs[n * Dh + 2 * idx[i] + 1] - sin(ang[i])) < 1e-14);
  }
  free(cc), free(rc), free(rs);
}

/* The reference against a ray matrix computed independently with camref.py (float64 NumPy, docs/math.md §8.1): c2w = a
 * rotation of 0.3 rad about y with t = (0.5, -0.25, 2), fx fy cx cy = 40 36 9 7 px, patch (1, 2, 2), grid 1x4x6,
 * token (v, u) = (1, 2). */
static void test_reference_matrix_values(void **state) {
  (void)state;
  const double a = 0.3, c = cos(a), s = sin(a);
  const double cc[20] = {c, 0, s, 0.5, 0, 1, 0, -0.25, -s, 0, c, 2.0, 0, 0, 0, 1, 40.0, 36.0, 9.0, 7.0};
  static const double P[16] = {0.9846140333756335,  0.0,  -0.17474325531981752, -0.1428205060481817,
                               0.02385698507373324, 0.9906364979223425, 0.1344253445126634, -0.03312005708160776,
                               0.1731070464855738, -0.13652592788242301, 0.9753945978284301, -2.0714742008702527,
                               0.0, 0.0, 0.0, 1.0};
  double po[24 * 16], pq[24 * 16], pkv[24 * 16];
  const camdelta_ref_camera r = {1, 1, 4, 6, 2, 2, 8, cc, pq, pkv, po, NULL, NULL};
  TU_OK(camdelta_ref_camera_forward(&r));
  const size_t n = 1 * 6 + 2;
  for (int i = 0; i < 16; i++) {
    assert_true(fabs(po[n * 16 + i] - P[i]) < 1e-14);
    assert_true(fabs(pq[n * 16 + i] - P[4 * (i % 4) + i / 4]) < 1e-14);
  }
  /* proj_kv P = I */
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      double acc = 0;
      for (int k = 0; k < 4; k++) acc += pkv[n * 16 + 4 * i + k] * P[4 * k + j];
      assert_true(fabs(acc - (i == j)) < 1e-14);
    }
}

static void test_bad_input(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  const size_t B = 1, T = 3, Hs = 2, Ws = 3, N = T * Hs * Ws, D = 16;
  float cc[2 * 20];
  tu_seed(14);
  bp_cameras(cc, 1, 2, Hs, Ws, 1, 1);
  cl_mem dcc = tu_upload(cc, sizeof cc); /* only T = 2 cameras */
  cl_mem o[5];
  const size_t bytes[5] = {N * 64, N * 64, N * 64, N * D / 2 * 4, N * D / 2 * 4};
  for (int i = 0; i < 5; i++) o[i] = bp_poison(bytes[i]);
  camdelta_camera_args a = {B, T, Hs, Ws, 1, 1, 1, D, {dcc, 0}, {o[0], 0}, {o[1], 0}, {o[2], 0}, {o[3], 0},
                            {o[4], 0}, NULL};
  assert_int_equal(camdelta_camera_forward(ctx, &a), CAMDELTA_ERROR_BUFFER_TOO_SMALL);
  assert_non_null(strstr(camdelta_last_message(), "camera_conditions"));
  a.T = 2;
  a.ph = 0;
  assert_int_equal(camdelta_camera_forward(ctx, &a), CAMDELTA_ERROR_SHAPE);
  assert_non_null(strstr(camdelta_last_message(), "patch"));
  a.ph = 1;
  a.D = 12;
  assert_int_equal(camdelta_camera_forward(ctx, &a), CAMDELTA_ERROR_UNSUPPORTED);
  a.D = D;
  a.Hs = 0;
  assert_int_equal(camdelta_camera_forward(ctx, &a), CAMDELTA_ERROR_SHAPE);
  a.Hs = Hs;
  a.proj_kv = a.proj_q; /* two outputs in the same memory */
  assert_int_equal(camdelta_camera_forward(ctx, &a), CAMDELTA_ERROR_INVALID_ARGUMENT);
  for (int i = 0; i < 5; i++) {
    assert_true(bp_untouched(o[i], bytes[i]));
    clReleaseMemObject(o[i]);
  }
  clReleaseMemObject(dcc);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_shapes),        cmocka_unit_test(test_identity_and_inverse),
      cmocka_unit_test(test_nan_pose),      cmocka_unit_test(test_reference_rope_values),
      cmocka_unit_test(test_reference_matrix_values), cmocka_unit_test(test_bad_input))
