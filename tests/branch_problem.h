/* Random camera-branch problems on the host, shared by the camera-branch tests. */
#ifndef CD_BRANCH_PROBLEM_H
#define CD_BRANCH_PROBLEM_H
#include "testutil.h"

/** Random cameras (B, T, 20): rotations from random unit quaternions, translations in [-3, 3], focal lengths
 *  0.6..1.4 of the image extent, principal points near the image centre (image = grid * patch). */
void bp_cameras(float *cc, size_t B, size_t T, size_t Hs, size_t Ws, size_t ph, size_t pw);
/** A random camera-branch problem's nine inputs (B sequences of T frames of Hs x Ws tokens, H heads of head dim D,
 *  C = H * D, N = T * Hs * Ws; patch 1): q_raw, k_raw, v_raw (B, N, C) normal (sd 1), conv_weight (4, C) normal (sd 0.5),
 *  q_norm_weight and k_norm_weight (C) U(0.5, 1.5), camera_conditions (B, T, 20) (bp_cameras), beta (B, H, N)
 *  U(0.1, 0.9), decay (B, H, T) U(0.5, 1); the generator seeded with `seed` first. malloc'd into in[0 .. 8], their
 *  element counts in count[0 .. 8]. */
void bp_inputs(float *in[9], size_t count[9], size_t B, size_t T, size_t Hs, size_t Ws, size_t H, size_t D,
               uint64_t seed);
/** Device buffer poisoned with 0xFF bytes, and a check that it still is. */
cl_mem bp_poison(size_t bytes);
int bp_untouched(cl_mem m, size_t bytes);
/** Download n floats. malloc'd. */
float *bp_download(cl_mem m, size_t n);
#endif
