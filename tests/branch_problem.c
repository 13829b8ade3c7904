#include "branch_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void bp_inputs(float *in[9], size_t count[9], size_t B, size_t T, size_t Hs, size_t Ws, size_t H, size_t D,
               uint64_t seed) {
  const size_t C = H * D, N = T * Hs * Ws, BNC = B * N * C, BHN = B * H * N;
  const size_t cnt[9] = {BNC, BNC, BNC, 4 * C, C, C, B * T * 20, BHN, B * H * T};
  tu_seed(seed);
  for (int i = 0; i < 9; i++) {
    count[i] = cnt[i];
    in[i] = malloc(cnt[i] * sizeof(float));
    assert_non_null(in[i]);
  }
  for (int i = 0; i < 3; i++) tu_fill_normal(in[i], BNC, 1.0); /* q_raw, k_raw, v_raw */
  tu_fill_normal(in[3], 4 * C, 0.5);
  tu_fill_uniform(in[4], C, 0.5, 1.5);
  tu_fill_uniform(in[5], C, 0.5, 1.5);
  bp_cameras(in[6], B, T, Hs, Ws, 1, 1);
  tu_fill_uniform(in[7], BHN, 0.1, 0.9);
  tu_fill_uniform(in[8], B * H * T, 0.5, 1.0);
}

void bp_cameras(float *cc, size_t B, size_t T, size_t Hs, size_t Ws, size_t ph, size_t pw) {
  const double Wi = (double)(Ws * pw), Hi = (double)(Hs * ph);
  for (size_t i = 0; i < B * T; i++) {
    double q[4], n = 0;
    for (int j = 0; j < 4; j++) q[j] = tu_normal(), n += q[j] * q[j];
    n = sqrt(n);
    const double a = q[0] / n, b = q[1] / n, c = q[2] / n, d = q[3] / n;
    const double R[9] = {a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c),
                         2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b),
                         2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d};
    float *o = cc + i * 20;
    memset(o, 0, 20 * sizeof *o);
    for (int r = 0; r < 3; r++) {
      for (int k = 0; k < 3; k++) o[4 * r + k] = (float)R[3 * r + k];
      o[4 * r + 3] = (float)tu_uniform(-3, 3);
    }
    o[15] = 1.0f;
    o[16] = (float)(tu_uniform(0.6, 1.4) * Wi);
    o[17] = (float)(tu_uniform(0.6, 1.4) * Hi);
    o[18] = (float)(Wi * tu_uniform(0.4, 0.6));
    o[19] = (float)(Hi * tu_uniform(0.4, 0.6));
  }
}

cl_mem bp_poison(size_t bytes) { return tu_buffer(bytes); }

int bp_untouched(cl_mem m, size_t bytes) {
  unsigned char *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  tu_download(m, 0, bytes, p);
  int ok = 1;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != 0xFF) ok = 0;
  free(p);
  return ok;
}

float *bp_download(cl_mem m, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  assert_non_null(p);
  tu_download(m, 0, n * sizeof *p, p);
  return p;
}

const char *const bp_grad_names[BP_NGRAD] = {"dq_raw",         "dk_raw",         "dv_raw", "dconv_weight",
                                             "dq_norm_weight", "dk_norm_weight", "dbeta",  "ddecay"};

camdelta_branch_grads bp_grads(cl_mem grad_y, const cl_mem g[BP_NGRAD], camdelta_profile *profile) {
  return (camdelta_branch_grads){.grad_y = {grad_y, 0},
                                 .dq_raw = {g[0], 0},
                                 .dk_raw = {g[1], 0},
                                 .dv_raw = {g[2], 0},
                                 .dconv_weight = {g[3], 0},
                                 .dq_norm_weight = {g[4], 0},
                                 .dk_norm_weight = {g[5], 0},
                                 .dbeta = {g[6], 0},
                                 .ddecay = {g[7], 0},
                                 .profile = profile};
}

void bp_ref_backward(const camdelta_ref_branch *r, const float *gy, size_t n_gy, const size_t count[BP_NGRAD],
                     bp_ref *ref) {
  for (int i = 0; i < BP_NGRAD; i++) {
    ref->g[i] = malloc(count[i] * sizeof(double));
    assert_non_null(ref->g[i]);
  }
  double *gy64 = tu_to_f64(gy, n_gy);
  const camdelta_ref_branch_grads rg = {.grad_y = gy64,
                                        .dq_raw = ref->g[0],
                                        .dk_raw = ref->g[1],
                                        .dv_raw = ref->g[2],
                                        .dconv_weight = ref->g[3],
                                        .dq_norm_weight = ref->g[4],
                                        .dk_norm_weight = ref->g[5],
                                        .dbeta = ref->g[6],
                                        .ddecay = ref->g[7]};
  TU_OK(camdelta_ref_branch_backward(r, &rg));
  free(gy64);
}

void bp_ref_free(bp_ref *ref) {
  for (int i = 0; i < 9; i++) free(ref->in[i]);
  for (int i = 0; i < BP_NGRAD; i++) free(ref->g[i]);
  free(ref->y);
}

void bp_backward_again(camdelta_context *ctx, const camdelta_branch_args *a, cl_mem grad_y, cl_mem g[BP_NGRAD],
                       const size_t count[BP_NGRAD], const size_t es[BP_NGRAD], void *first[BP_NGRAD],
                       const char *what) {
  for (int i = 0; i < BP_NGRAD; i++) clReleaseMemObject(g[i]), g[i] = tu_buffer(count[i] * es[i]);
  const camdelta_branch_grads g2 = bp_grads(grad_y, g, NULL);
  TU_OK(camdelta_branch_backward(ctx, a, &g2, NULL));
  for (int i = 0; i < BP_NGRAD; i++) {
    void *again = malloc(count[i] * es[i]);
    assert_non_null(again);
    tu_download(g[i], 0, count[i] * es[i], again);
    if (memcmp(again, first[i], count[i] * es[i]) != 0)
      fail_msg("%s: %s differs between the backward with and without a saved object", what, bp_grad_names[i]);
    free(again);
    free(first[i]);
    clReleaseMemObject(g[i]);
  }
}

void bp_free(float *in[9], cl_mem din[9], float *gy, cl_mem dgy) {
  for (int i = 0; i < 9; i++) {
    free(in[i]);
    if (din[i]) clReleaseMemObject(din[i]);
  }
  free(gy);
  if (dgy) clReleaseMemObject(dgy);
}
