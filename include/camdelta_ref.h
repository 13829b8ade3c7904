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

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_REF_H */
