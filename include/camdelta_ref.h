/*
 * camdelta — float64 host references of every operation (slow; for tests and checks).
 * Not part of the stable core API in camdelta.h; includes it.
 */
#ifndef CAMDELTA_REF_H
#define CAMDELTA_REF_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------- f64 host reference (CPU) */
/* Plain host arrays in the layouts of camdelta.h, all double. Slow; for testing. Each function returns
 * CAMDELTA_OK; INVALID_ARGUMENT (a NULL required array), SHAPE (a zero size), UNSUPPORTED (head dim), OVERFLOW
 * (sizes overflow size_t) or OUT_OF_MEMORY (its small scratch). Outputs given as NULL are not computed. */
typedef struct camdelta_ref_prep {
  size_t B, N, H, D;
  double k_scale, norm_eps;
  const double *q_raw, *k_raw, *v_raw, *q_norm_weight, *k_norm_weight, *proj_q, *proj_kv, *rope_cos, *rope_sin;
  double *q, *k, *v, *inflation_sq; /* outputs, each may be NULL */
} camdelta_ref_prep;
CAMDELTA_API camdelta_status camdelta_ref_prep_forward(const camdelta_ref_prep *p);

typedef struct camdelta_ref_prep_grads {
  const double *grad_q, *grad_k, *grad_v, *grad_inflation_sq; /* each may be NULL */
  double *dq_raw, *dk_raw, *dv_raw, *dq_norm_weight, *dk_norm_weight; /* may be NULL */
  double *dproj_q, *dproj_kv, *drope_cos, *drope_sin;                /* may be NULL */
} camdelta_ref_prep_grads;
CAMDELTA_API camdelta_status camdelta_ref_prep_backward(const camdelta_ref_prep *p, const camdelta_ref_prep_grads *g);

typedef struct camdelta_ref_scan {
  size_t B, H, D, F, S;
  int reverse;
  const double *q, *k, *v, *beta, *decay;
  const double *init_state; /* may be NULL */
  double *out;              /* may be NULL */
  double *final_state;      /* may be NULL */
  double *state_pre, *state_post; /* may be NULL: (B, H, F, D, D) */
} camdelta_ref_scan;
CAMDELTA_API camdelta_status camdelta_ref_scan_forward(const camdelta_ref_scan *p);

typedef struct camdelta_ref_scan_grads {
  const double *grad_out;         /* may be NULL (zero) */
  const double *grad_final_state; /* may be NULL */
  double *dq, *dk, *dv, *dbeta, *ddecay, *dinit_state; /* may be NULL */
} camdelta_ref_scan_grads;
CAMDELTA_API camdelta_status camdelta_ref_scan_backward(const camdelta_ref_scan *p, const camdelta_ref_scan_grads *g);

/* State summaries (docs/math.md §9, include/camdelta_summary.h) of the segment p describes, per (b, h), f64:
 * T and E (B, H, D, D), each may be NULL; with p->init_state, E receives T·init_state + E. p->out, final_state,
 * state_pre and state_post are ignored. */
CAMDELTA_API camdelta_status camdelta_ref_scan_summary(const camdelta_ref_scan *p, double *T, double *E);
/* Gradient summary G (B, H, D, D) for grad_out (may be NULL: zero); with grad_final_state (may be NULL),
 * G receives Tᵀ·grad_final_state + G, i.e. the segment's dinit_state. */
CAMDELTA_API camdelta_status camdelta_ref_scan_grad_summary(const camdelta_ref_scan *p, const double *grad_out,
                                                            const double *grad_final_state, double *G);

/* Packed clips (docs/math.md §9), f64: q, k, v, out (1, H, D, N) with N = frame_offsets[frames]; beta (1, H, N);
 * decay (1, H, frames); init_state, final_state and the gradients' grad_final_state, dinit_state
 * (clips, H, D, D). Frame f holds tokens [frame_offsets[f], frame_offsets[f+1]), clip c the frames
 * [clip_offsets[c], clip_offsets[c+1]); frames may have any token counts. Defined as each clip run alone. */
typedef struct camdelta_ref_scan_packed {
  size_t H, D, frames, clips;
  const int64_t *frame_offsets; /* frames + 1, from 0, increasing */
  const int64_t *clip_offsets;  /* clips + 1, from 0 to frames, increasing */
  int reverse;
  const double *q, *k, *v, *beta, *decay;
  const double *init_state; /* may be NULL */
  double *out;              /* may be NULL */
  double *final_state;      /* may be NULL */
} camdelta_ref_scan_packed;
CAMDELTA_API camdelta_status camdelta_ref_scan_packed_forward(const camdelta_ref_scan_packed *p);
/* g's arrays in the packed layouts (dbeta (1, H, N), ddecay (1, H, frames), states (clips, H, D, D)). */
CAMDELTA_API camdelta_status camdelta_ref_scan_packed_backward(const camdelta_ref_scan_packed *p,
                                                               const camdelta_ref_scan_grads *g);

/* ------------------------------------------- camera branch (docs/math.md §8), f64 */
/** Cameras -> proj_q, proj_kv, proj_o (B, N, 4, 4) and rope_cos, rope_sin (N, D/2); outputs may be NULL. */
typedef struct camdelta_ref_camera {
  size_t B, T, Hs, Ws, ph, pw, D;
  const double *camera_conditions; /* (B, T, 20) */
  double *proj_q, *proj_kv, *proj_o, *rope_cos, *rope_sin;
} camdelta_ref_camera;
CAMDELTA_API camdelta_status camdelta_ref_camera_forward(const camdelta_ref_camera *p);

/** Short conv (§8.2) on x (B, T*S, C) with weight (C, 4) and segment bounds (from camdelta_conv_bounds).
 *  Forward writes y; backward writes dx and/or dw (C, 4) from dy (each may be NULL). */
typedef struct camdelta_ref_conv {
  size_t B, T, S, C;
  const size_t *bounds;
  size_t nbounds;
  const double *x, *w;
  double *y;
  const double *dy;
  double *dx, *dw;
} camdelta_ref_conv;
CAMDELTA_API camdelta_status camdelta_ref_short_conv_forward(const camdelta_ref_conv *p);
CAMDELTA_API camdelta_status camdelta_ref_short_conv_backward(const camdelta_ref_conv *p);

/** Output transform (§8.5): out (B, H, D, N) -> y (B, N, H, D); backward grad_y -> grad_out. */
CAMDELTA_API camdelta_status camdelta_ref_output_transform(size_t B, size_t N, size_t H, size_t D, const double *out,
                                                           const double *proj_o, const double *rope_cos,
                                                           const double *rope_sin, double *y);
CAMDELTA_API camdelta_status camdelta_ref_output_transform_backward(size_t B, size_t N, size_t H, size_t D,
                                                                    const double *grad_y, const double *proj_o,
                                                                    const double *rope_cos, const double *rope_sin,
                                                                    double *grad_out);

/** Whole branch (§8.6) in f64: the cameras, conv, prep, discount, scan pair and output transform. */
typedef struct camdelta_ref_branch {
  size_t B, T, Hs, Ws, ph, pw, H, D;
  camdelta_chunking chunking;
  double k_scale, norm_eps;
  const double *q_raw, *k_raw, *v_raw, *conv_weight, *q_norm_weight, *k_norm_weight, *camera_conditions, *beta,
      *decay;
  double *y; /* (B, N, H, D), may be NULL */
} camdelta_ref_branch;
typedef struct camdelta_ref_branch_grads {
  const double *grad_y;
  double *dq_raw, *dk_raw, *dv_raw, *dconv_weight, *dq_norm_weight, *dk_norm_weight, *dbeta, *ddecay; /* may be NULL */
} camdelta_ref_branch_grads;
CAMDELTA_API camdelta_status camdelta_ref_branch_forward(const camdelta_ref_branch *p);
CAMDELTA_API camdelta_status camdelta_ref_branch_backward(const camdelta_ref_branch *p,
                                                          const camdelta_ref_branch_grads *g);
/** A stream's committed blocks (camdelta_stream.h) over the T frames in f64: the whole branch with the conv's
 *  segments at the scan's chunks (the stream's blocks: chunking.chunk_size >= 1 and its strategy, no chunk_index;
 *  the last block may be shorter than the schedule's), whatever T % chunk_size. Writes y. */
CAMDELTA_API camdelta_status camdelta_ref_stream_forward(const camdelta_ref_branch *p);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_REF_H */
