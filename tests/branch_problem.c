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
