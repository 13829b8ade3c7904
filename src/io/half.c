/* Host conversions between f32 and 16-bit storage formats (RNE). */
#include <math.h>
#include <string.h>

#include "runtime/internal.h"

static uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

uint16_t camdelta_f32_to_bf16(float x) {
  uint32_t u = f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float camdelta_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t camdelta_f32_to_f16(float x) {
  uint32_t u = f2u(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);        /* NaN */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);       /* overflow (>= 65520) -> inf */
  if (a < 0x38800000u) {                                          /* subnormal or zero in f16 */
    if (a < 0x33000000u) return (uint16_t)sign;                   /* < 2^-25: rounds to 0 */
    uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126 - e;                                     /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((a >> 13) - (112u << 10));
  uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

float camdelta_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return u2f(sign) + (sign ? -1.0f : 1.0f) * ldexpf((float)m, -24);
  if (e == 31) return u2f(sign | 0x7F800000u | (m << 13));
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}
