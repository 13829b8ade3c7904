/*
 * camdelta — host-side helpers: RoPE tables, SE(3) inverse, 16-bit float conversions.
 * Not part of the stable core API in camdelta.h; includes it.
 */
#ifndef CAMDELTA_HELPERS_H
#define CAMDELTA_HELPERS_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- host helpers */
/** Complex RoPE frequencies (N, Dh/2) as interleaved (re, im) pairs ->
 *  interleaved-pair tables rope_cos, rope_sin (N, Dh). Dh must be even. */
CAMDELTA_API camdelta_status camdelta_rope_tables(size_t N, size_t Dh, const float *freqs_re_im, float *rope_cos,
                                                  float *rope_sin);
/** Closed-form inverse of `count` 4x4 SE(3) matrices (row-major). in == out allowed. */
CAMDELTA_API camdelta_status camdelta_invert_se3(size_t count, const float *in, float *out);

/** Host conversions between f32 and 16-bit storage (round to nearest even). */
CAMDELTA_API uint16_t camdelta_f32_to_f16(float x);
CAMDELTA_API float camdelta_f16_to_f32(uint16_t h);
CAMDELTA_API uint16_t camdelta_f32_to_bf16(float x);
CAMDELTA_API float camdelta_bf16_to_f32(uint16_t h);

/** For components layered on camdelta (e.g. camdelta_mpi): record `fmt` as this thread's
 *  camdelta_last_message() and return `status`. */
CAMDELTA_API camdelta_status camdelta_set_error(camdelta_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_HELPERS_H */
