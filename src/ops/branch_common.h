/* Pieces shared by the camera-branch operations (src/ops/camera.c, short_conv.c, output_transform.c, branch.c)
 * and their f64 references (src/ref/ref_camera.c, ref_branch.c). Not installed. */
#ifndef CAMDELTA_BRANCH_COMMON_H
#define CAMDELTA_BRANCH_COMMON_H
#include "runtime/internal.h"

/** Camera-half RoPE frequencies (docs/math.md §8.1, WAN 3-axis RoPE of the full head dim D, theta = 10000): the first
 *  nt temporal, nh height and nh width frequencies (nt + 2 nh = D/4). omega must hold D/4 doubles:
 *  omega[0..nt) temporal, [nt, nt+nh) height, [nt+nh, D/4) width. */
void cd_rope_frequencies(size_t D, size_t *nt, size_t *nh, double *omega);

/** Checks a token grid: every extent >= 1, N = T*Hs*Ws and products without overflow. */
camdelta_status cd_check_grid(const char *op, size_t T, size_t Hs, size_t Ws, size_t *N);

/** The camera-conditions rule (docs/math.md §8.1 as camdelta implements it): a NaN marks a frame without a camera (a NaN in
 *  R·d gives P = I); an infinity is refused. The index of the first infinity among x[0 .. n) (20 values per frame),
 *  or n when there is none. */
size_t cd_camera_first_inf_f32(const float *x, size_t n);
size_t cd_camera_first_inf_f64(const double *x, size_t n);
/** INVALID_ARGUMENT naming camera_conditions[b, f, k] (flat index `at` of a (B, T, 20) array) and the rule. */
camdelta_status cd_camera_inf_error(const char *op, size_t at, size_t T, double value);

/** Per-frame end of each frame's segment: seg_end[t] = the bound after t, from `bounds` (nb entries). */
void cd_segment_ends(const size_t *bounds, size_t nb, size_t T, uint32_t *seg_end);

/** Reverse-scan mask (docs/math.md §8.4): mask[t] = 0 at every interior chunk start 0 < p < T and at the start of
 *  every one-frame chunk, else 1. */
void cd_reverse_mask(const size_t *bounds, size_t nb, size_t T, uint32_t *mask);
#endif
