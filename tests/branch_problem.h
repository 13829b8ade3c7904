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
/** Frees the host inputs in[0 .. 8] and gy, releases the device buffers din[0 .. 8] and dgy (NULL ones skipped). */
void bp_free(float *in[9], cl_mem din[9], float *gy, cl_mem dgy);
/** Device buffer poisoned with 0xFF bytes, and a check that it still is. */
cl_mem bp_poison(size_t bytes);
int bp_untouched(cl_mem m, size_t bytes);
/** Download n floats. malloc'd. */
float *bp_download(cl_mem m, size_t n);

/** The gradients of camdelta_branch_backward in the order of camdelta_branch_grads. */
enum { BP_NGRAD = 8 };
extern const char *const bp_grad_names[BP_NGRAD]; /* dq_raw .. ddecay */
/** camdelta_branch_grads of grad_y and the gradient buffers g[0 .. 7] (offsets 0), with profile (may be NULL). */
camdelta_branch_grads bp_grads(cl_mem grad_y, const cl_mem g[BP_NGRAD], camdelta_profile *profile);

/** The f64 reference of a branch problem: its inputs, y and the gradients (malloc'd or NULL; bp_ref_free). */
typedef struct bp_ref {
  double *in[9], *y, *g[BP_NGRAD];
} bp_ref;
/** r's backward (camdelta_ref_branch_backward) for grad_y gy (n_gy values) into ref->g, count[i] values each. */
void bp_ref_backward(const camdelta_ref_branch *r, const float *gy, size_t n_gy, const size_t count[BP_NGRAD],
                     bp_ref *ref);
void bp_ref_free(bp_ref *ref);

/** The backward of `a` again without a saved object (the forward recomputed), into fresh poisoned buffers g[i] of
 *  count[i] elements of es[i] bytes (the old ones released): each must hold the bytes first[i] holds, else the test
 *  fails naming `what` and the gradient. Frees first[i] and releases g[i]. */
void bp_backward_again(camdelta_context *ctx, const camdelta_branch_args *a, cl_mem grad_y, cl_mem g[BP_NGRAD],
                       const size_t count[BP_NGRAD], const size_t es[BP_NGRAD], void *first[BP_NGRAD],
                       const char *what);
#endif
