/* Prep backward, register-resident form (cl/prep_bwd_regs.cl): plan and launches. */
#ifndef CAMDELTA_PREP_BWD_REGS_H
#define CAMDELTA_PREP_BWD_REGS_H
#include "internal.h"

typedef struct cd_pbr_plan {
  cl_kernel kernel, reduce;
  size_t tt, hs, wg, hpi; /* tokens per tile, head slots, work-group size, heads per slot */
  size_t groups;     /* persistent work-groups (rows of norm-weight partials) */
} cd_pbr_plan;

/** The register-resident backward for this call's shape when the context uses it (CAMDELTA_PREP_BWD_FUSED=2, or
 *  the GPU default) and the shape and device fit it: 1 with *p set; 0 otherwise (a build failure sets *st). */
int cd_pbr_plan_make(camdelta_context *ctx, const camdelta_prep_backward_args *a, cd_pbr_plan *p,
                     camdelta_status *st);
void cd_pbr_release(cd_pbr_plan *p);
/** Build (or load) the form's programs for (dtype, D) where the context uses it. */
camdelta_status cd_pbr_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D);
/** Enqueue the backward (inv: the saved inverse RMS, or NULL to compute it first). *refused = 1 when the device
 *  refused the main kernel's launch (nothing of the gradients written; the caller takes another form). */
camdelta_status cd_pbr_run(camdelta_context *ctx, const camdelta_prep_backward_args *a, cl_mem inv,
                           const cd_pbr_plan *p, cd_launch *l, int *refused);
#endif
