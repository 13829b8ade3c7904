/* Host helpers shared by the camera-branch operations and references (see branch_common.h). */
#include <math.h>

#include "ops/branch_common.h"

void cd_rope_frequencies(size_t D, size_t *nt_out, size_t *nh_out, double *omega) {
  const size_t hd = 2 * (D / 6), td = D - 2 * hd, Dh = D / 2;
  const size_t nh = Dh / 6, nt = Dh / 2 - 2 * nh;
  const double theta = 10000.0;
  for (size_t j = 0; j < nt; j++) omega[j] = pow(theta, -(double)(2 * j) / (double)td);
  for (size_t j = 0; j < nh; j++) omega[nt + j] = omega[nt + nh + j] = pow(theta, -(double)(2 * j) / (double)hd);
  *nt_out = nt;
  *nh_out = nh;
}

camdelta_status cd_check_grid(const char *op, size_t T, size_t Hs, size_t Ws, size_t *N) {
  if (!T || !Hs || !Ws)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: grid T=%zu, Hs=%zu, Ws=%zu: each must be at least 1", op, T, Hs, Ws);
  const size_t f[3] = {T, Hs, Ws};
  if (!cd_prod(N, 3, f) || *N > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: grid T*Hs*Ws = %zu*%zu*%zu exceeds 2^32-1 tokens", op, T, Hs, Ws);
  return CAMDELTA_OK;
}

size_t cd_camera_first_inf_f32(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (isinf(x[i])) return i;
  return n;
}

size_t cd_camera_first_inf_f64(const double *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (isinf(x[i])) return i;
  return n;
}

camdelta_status cd_camera_inf_error(const char *op, size_t at, size_t T, double value) {
  static const char *const field[20] = {"c2w[0][0]", "c2w[0][1]", "c2w[0][2]", "c2w[0][3]", "c2w[1][0]",
                                        "c2w[1][1]", "c2w[1][2]", "c2w[1][3]", "c2w[2][0]", "c2w[2][1]",
                                        "c2w[2][2]", "c2w[2][3]", "c2w[3][0]", "c2w[3][1]", "c2w[3][2]",
                                        "c2w[3][3]", "fx",        "fy",        "cx",        "cy"};
  const size_t k = at % 20, f = at / 20 % T, b = at / 20 / T;
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                 "%s: camera_conditions[%zu, %zu, %zu] (%s) is %s: camera poses and intrinsics must be finite or NaN "
                 "(a NaN marks a frame without a camera, whose matrices are the identity)",
                 op, b, f, k, field[k], value > 0 ? "+inf" : "-inf");
}

void cd_segment_ends(const size_t *bounds, size_t nb, size_t T, uint32_t *seg_end) {
  for (size_t i = 0; i + 1 < nb; i++)
    for (size_t t = bounds[i]; t < bounds[i + 1] && t < T; t++) seg_end[t] = (uint32_t)bounds[i + 1];
}

void cd_reverse_mask(const size_t *bounds, size_t nb, size_t T, uint32_t *mask) {
  for (size_t t = 0; t < T; t++) mask[t] = 1;
  for (size_t i = 0; i + 1 < nb; i++) {
    const size_t s = bounds[i], e = bounds[i + 1];
    if (s > 0 && s < T) mask[s] = 0;
    if (e - s == 1 && s < T) mask[s] = 0;
  }
}
