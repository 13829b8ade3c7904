/*
 * camdelta — state summaries of the scan (docs/math.md §9), to chain segments of a sequence over any transport
 * (MPI, NCCL, an application's own). Part of the core library; includes camdelta.h.
 *
 * The scan over a segment is affine in its incoming state, per (b, h) (D x D matrices, rows = key dim):
 *
 *   forward   M_out = T · M_in + E
 *   gradient  dM_in = Tᵀ · dM_out + G
 *
 * with A_f = decay_f · (I − K_fᵀ·β_f·K_f) and U_f = K_fᵀ·β_f·V_f per frame f of the segment (F frames):
 *   causal   M_in = init_state, M_out = final_state:  T = A_{F−1}···A_1·A_0
 *   reverse  M_in = the reverse init_state (what output frame F−1 reads, the contribution of the frames after
 *            the segment), M_out = the reverse final_state (after also absorbing frame 0):  T = A_0·A_1···A_{F−1}
 *   E = the segment's final_state from a zero start; dM_out = grad_final_state, dM_in = dinit_state, and
 *   G = the dinit_state of the segment's backward for its grad_out with a zero grad_final_state.
 * So the causal T of a segment is the transpose of its reverse T (A_f is symmetric).
 *
 * Chaining: a segment's M_in is the previous segment's M_out (causal: the segment to the left; reverse: the
 * segment to the right), and a segment's dM_out is the dM_in of the segment its M_out feeds.
 * All buffers are f32 (B, H, D, D) unless said otherwise; calls enqueue on the context's queue and return.
 */
#ifndef CAMDELTA_SUMMARY_H
#define CAMDELTA_SUMMARY_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct camdelta_scan_summary_args {
  size_t B, H, D, F, S; /* the segment's shape, as camdelta_scan_args */
  int reverse;
  camdelta_buffer k, v;        /* (B, H, D, N) f32; v only needed for E */
  camdelta_buffer beta;        /* (B, H, F, S) f32 */
  camdelta_buffer decay;       /* (B, H, F) f32    */
  camdelta_buffer init_state;  /* optional: E then receives T·init_state + E (the segment's final state from it) */
  camdelta_buffer T;           /* optional output */
  camdelta_buffer E;           /* optional output (at least one of T and E) */
  camdelta_profile *profile;
} camdelta_scan_summary_args;

/** Forward summary (T, E) of a segment. */
CAMDELTA_API camdelta_status camdelta_scan_summary(camdelta_context *ctx, const camdelta_scan_summary_args *args);

typedef struct camdelta_scan_grad_summary_args {
  size_t B, H, D, F, S;
  int reverse;
  camdelta_buffer q, k;              /* (B, H, D, N) f32 */
  camdelta_buffer beta, decay;       /* as the forward */
  camdelta_buffer grad_out;          /* (B, H, D, N) f32 */
  camdelta_buffer grad_final_state;  /* optional: G then receives Tᵀ·grad_final_state + G (the dinit_state) */
  camdelta_buffer G;                 /* output */
  camdelta_profile *profile;
} camdelta_scan_grad_summary_args;

/** Gradient summary G of a segment (it does not depend on the segment's incoming state). */
CAMDELTA_API camdelta_status camdelta_scan_grad_summary(camdelta_context *ctx,
                                                        const camdelta_scan_grad_summary_args *args);

typedef struct camdelta_summary_apply_args {
  size_t B, H, D;
  int transpose;           /* 0: M_out = T·M_in + E (forward); 1: M_out = Tᵀ·M_in + E (gradient, E = G) */
  camdelta_buffer T;       /* required */
  camdelta_buffer E;       /* optional (zero) */
  camdelta_buffer M_in;    /* optional (zero) */
  camdelta_buffer M_out;   /* output; must not overlap T, E or M_in */
  camdelta_profile *profile;
} camdelta_summary_apply_args;

/** Apply a summary to an incoming state (or state gradient). */
CAMDELTA_API camdelta_status camdelta_summary_apply(camdelta_context *ctx, const camdelta_summary_apply_args *args);

typedef struct camdelta_summary_combine_args {
  size_t B, H, D;
  camdelta_buffer T1, E1;  /* the segment whose M_out feeds the other's M_in (E1 optional: zero) */
  camdelta_buffer T2, E2;  /* the segment after it in the chain's order (E2 optional: zero) */
  camdelta_buffer T, E;    /* outputs, each optional: T = T2·T1, E = T2·E1 + E2; must not overlap the inputs */
  camdelta_profile *profile;
} camdelta_summary_combine_args;

/** The summary of two chained segments. For gradient summaries of the same pair: G = T1ᵀ·G2 + G1
 *  (camdelta_summary_apply with transpose = 1, T = T1, M_in = G2, E = G1). */
CAMDELTA_API camdelta_status camdelta_summary_combine(camdelta_context *ctx,
                                                      const camdelta_summary_combine_args *args);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_SUMMARY_H */
