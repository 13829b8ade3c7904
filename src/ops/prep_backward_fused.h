/* The fused form of the prep backward (cl/prep_backward_fused.cl), used by prep_backward.c. Not installed. */
#ifndef CAMDELTA_PREP_BACKWARD_FUSED_H
#define CAMDELTA_PREP_BACKWARD_FUSED_H
#include "internal.h"

/** The kernels and launch shape of one fused call. */
typedef struct cd_pbf_plan {
  cl_kernel fused, reduce;
  unsigned tt;           /* tokens per tile (CD_TT) */
  unsigned hb;           /* heads per step */
  size_t lws, groups;    /* local size, work-groups */
  size_t tiles;          /* B * ceil(N / tt) */
  int wlocal;            /* norm-weight partials in local memory (rows = groups), else one row per tile */
} cd_pbf_plan;

/** 1 when this context runs the prep backward of (dtype, D) in the fused form (GPUs and accelerators unless
 *  CAMDELTA_PREP_BWD_FUSED says otherwise), with both kernels built into *p (g2: the variant that adds second K and
 *  V gradients as it reads them, cd_prep_backward_g2); 0 for the three-kernel form; a build failure sets *st (and
 *  returns 0). */
int cd_pbf_kernels(camdelta_context *ctx, camdelta_dtype dtype, size_t D, int g2, cd_pbf_plan *p,
                   camdelta_status *st);
/** The launch shape for (B, N, H); 0 (kernels released) when the device cannot take it: use the three kernels. */
int cd_pbf_shape(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, cd_pbf_plan *p);
void cd_pbf_release(cd_pbf_plan *p);
/** Allocates the scratch, then enqueues [the inverse RMS kernel when inv is NULL,] the fused kernel and the
 *  norm-weight reduction; inv: saved inverse RMS values (2, B, N) or NULL; g2 (NULL or two buffers shaped like
 *  grad_k and grad_v): added to grad_k and grad_v as they are read. */
camdelta_status cd_pbf_run(camdelta_context *ctx, const camdelta_prep_backward_args *a, cl_mem inv,
                           const camdelta_buffer *g2, const cd_pbf_plan *p, cd_launch *l);
#endif
