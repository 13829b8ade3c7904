/* Host helpers (docs/math.md §2): RoPE tables from complex frequencies and the closed-form SE(3) inverse. */
#include <stdint.h>

#include "runtime/internal.h"

camdelta_status camdelta_rope_tables(size_t N, size_t Dh, const float *freqs_re_im, float *rope_cos,
                                     float *rope_sin) {
  cd_clear_error();
  static const char op[] = "camdelta_rope_tables";
  if (!freqs_re_im) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'freqs_re_im' is NULL", op);
  if (!rope_cos) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'rope_cos' is NULL", op);
  if (!rope_sin) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'rope_sin' is NULL", op);
  if (Dh == 0 || Dh % 2 != 0)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'Dh' is %zu (expected an even number > 0)", op, Dh);
  size_t total;
  if (!cd_mul(&total, N, Dh) || total > SIZE_MAX / sizeof(float))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: N=%zu x Dh=%zu overflows size_t", op, N, Dh);
  /* freqs (N, Dh/2) complex, stored as (re, im) pairs: exactly Dh floats per row, like the tables. Read a whole
   * pair before writing, so the tables may alias the input row by row. */
  for (size_t n = 0; n < N; n++) {
    for (size_t i = 0; i < Dh / 2; i++) {
      const float re = freqs_re_im[n * Dh + 2 * i], im = freqs_re_im[n * Dh + 2 * i + 1];
      rope_cos[n * Dh + 2 * i] = re;
      rope_cos[n * Dh + 2 * i + 1] = re;
      rope_sin[n * Dh + 2 * i] = -im;
      rope_sin[n * Dh + 2 * i + 1] = im;
    }
  }
  return CAMDELTA_OK;
}

camdelta_status camdelta_invert_se3(size_t count, const float *in, float *out) {
  cd_clear_error();
  static const char op[] = "camdelta_invert_se3";
  if (!in) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'in' is NULL", op);
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument 'out' is NULL", op);
  if (count > SIZE_MAX / 16 / sizeof(float))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: count=%zu matrices overflow size_t", op, count);
  /* [R t; 0 1]^-1 = [Rᵀ −Rᵀt; 0 1]; the input's last row is not read (as the seed's _invert_SE3). */
  for (size_t m = 0; m < count; m++) {
    double a[16];
    for (int i = 0; i < 16; i++) a[i] = in[m * 16 + i];
    float *o = out + m * 16;
    for (int i = 0; i < 3; i++) {
      double t = 0;
      for (int j = 0; j < 3; j++) {
        o[i * 4 + j] = (float)a[j * 4 + i];
        t += a[j * 4 + i] * a[j * 4 + 3];
      }
      o[i * 4 + 3] = (float)-t;
    }
    o[12] = 0.0f, o[13] = 0.0f, o[14] = 0.0f, o[15] = 1.0f;
  }
  return CAMDELTA_OK;
}
