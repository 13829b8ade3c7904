/* Host helpers shared by the camera-branch operations and references (see branch_common.h). */
#include <math.h>

#include "branch_common.h"

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
