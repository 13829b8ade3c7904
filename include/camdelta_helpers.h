/*
 * camdelta — helpers: RoPE tables, SE(3) inverse, checked size arithmetic, 16-bit float conversions, device-side
 * random inputs.
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
 *  interleaved-pair tables rope_cos, rope_sin (N, Dh). Dh must be even.
 *  Returns CAMDELTA_OK, INVALID_ARGUMENT (NULL pointer, odd Dh) or OVERFLOW. */
CAMDELTA_API camdelta_status camdelta_rope_tables(size_t N, size_t Dh, const float *freqs_re_im, float *rope_cos,
                                                  float *rope_sin);
/** Closed-form inverse of `count` 4x4 SE(3) matrices (row-major). in == out allowed.
 *  Returns CAMDELTA_OK, INVALID_ARGUMENT (NULL pointer) or OVERFLOW. */
CAMDELTA_API camdelta_status camdelta_invert_se3(size_t count, const float *in, float *out);

/** Overflow-checked size arithmetic, the rule every size in camdelta, camdelta_mpi and the camdelta tool goes
 *  through (a product or sum of sizes from a caller, a file or a command line): *out = a*b, a+b, or the product of
 *  factors[0..n) (1 for n = 0); 1 on success, 0 (and *out unchanged) when the result does not fit size_t or out is
 *  NULL. */
CAMDELTA_API int camdelta_size_mul(size_t *out, size_t a, size_t b);
CAMDELTA_API int camdelta_size_add(size_t *out, size_t a, size_t b);
CAMDELTA_API int camdelta_size_prod(size_t *out, size_t n, const size_t *factors);

/** Host conversions between f32 and 16-bit storage (round to nearest even; never fail). */
CAMDELTA_API uint16_t camdelta_f32_to_f16(float x);
CAMDELTA_API float camdelta_f16_to_f32(uint16_t h);
CAMDELTA_API uint16_t camdelta_f32_to_bf16(float x);
CAMDELTA_API float camdelta_bf16_to_f32(uint16_t h);

/* ------------------------------------------------------- random inputs */
/** Fills `count` elements of `buf` (stored as `dtype`) on the device with reproducible pseudo-random values,
 *  uniform in [lo, hi): element i is camdelta_random_value(seed, i, lo, hi), stored as f32 or rounded to nearest
 *  even in f16/bf16. For benchmarks and tests of sizes whose host-side generation would be slow: nothing moves
 *  between host and device. Enqueued on the context's queue (returns without waiting).
 *  Returns CAMDELTA_OK; INVALID_ARGUMENT (NULL ctx or buffer, a buffer of another context, non-finite lo/hi),
 *  UNSUPPORTED (dtype), BUFFER_TOO_SMALL, OVERFLOW, BUILD or OPENCL. */
CAMDELTA_API camdelta_status camdelta_fill_random(camdelta_context *ctx, camdelta_buffer buf, size_t count,
                                                  camdelta_dtype dtype, uint64_t seed, float lo, float hi);
/** The f32 value camdelta_fill_random() writes at `index` (bit for bit; never fails). */
CAMDELTA_API float camdelta_random_value(uint64_t seed, uint64_t index, float lo, float hi);

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
