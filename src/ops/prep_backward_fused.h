/* The two-pass form of the prep backward (cl/prep_backward_fused.cl), used by prep_backward.c. Not installed. */
#ifndef CAMDELTA_PREP_BACKWARD_FUSED_H
#define CAMDELTA_PREP_BACKWARD_FUSED_H
#include "runtime/internal.h"

/** Pass 1's kernel: recomputing the forward from q_raw and k_raw (cd_prep_bwd_sums), or reading its outputs q, k,
 *  inflation_sq one token (cd_prep_bwd_sums_out) or four tokens (cd_prep_bwd_sums_out4) per work-item. */
typedef enum cd_pbf_pass1 { CD_PBF_P1_RAW, CD_PBF_P1_OUT, CD_PBF_P1_OUT4 } cd_pbf_pass1;

/** Pass 1's kernel for a call: from the forward's outputs where they are given with saved in f32 (four tokens per
 *  work-item where N and the offsets of q, k, grad_q, grad_k[, g2[0]] are multiples of 4), else recomputing. */
cd_pbf_pass1 cd_pbf_pass1_of(const camdelta_prep_backward_args *a, const camdelta_prep_saved *saved,
                             const camdelta_buffer *g2);

/** The kernels and launch shape of one call. */
typedef struct cd_pbf_plan {
  cl_kernel sums, ssum, grads, reduce; /* sums: pass 1's kernel, p1 */
  cd_pbf_pass1 p1;
  unsigned ts;            /* tokens per work-group of pass 1 (and cd_prep_bwd_ssum's local size) */
  unsigned tt;            /* tokens per tile of pass 2 (CD_TT) */
  unsigned nu;            /* work-groups per (tile, head) of pass 2, each D/4/nu units (CD_UW) */
  unsigned wpc;           /* pass 2's work-groups per compute unit (sets rows below) */
  unsigned tw;            /* tensors per work-group of pass 2: 3 (cd_prep_bwd_grads) or 1 (cd_prep_bwd_grads_kind) */
  size_t groups1;         /* work-groups of pass 1 */
  size_t lws2, groups2;   /* local size and work-groups of pass 2 */
  size_t rows;            /* work-groups per head of pass 2 = rows of norm-weight partials */
} cd_pbf_plan;

/** 1 when this context runs the prep backward of (dtype, D) in the two-pass form (GPUs and accelerators unless
 *  CAMDELTA_PREP_BWD_FUSED says otherwise), with its kernels built into *p, pass 1's as p1 says (g2: the variant that
 *  adds second K and V gradients as it reads them, cd_prep_backward_g2); 0 for the three-kernel form (also where
 *  the device cannot take a 4-token tile); a build failure sets *st (and returns 0). */
int cd_pbf_kernels(camdelta_context *ctx, camdelta_dtype dtype, size_t D, int g2, cd_pbf_pass1 p1, cd_pbf_plan *p,
                   camdelta_status *st);
/** The launch shape for (B, N, H, D). */
void cd_pbf_shape(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, cd_pbf_plan *p);
void cd_pbf_release(cd_pbf_plan *p);
/** Allocates the scratch, then enqueues [the inverse RMS kernel without saved,] both passes and the norm-weight
 *  reduction; saved: the forward's saved object (checked) or NULL; g2 (NULL or two buffers shaped like grad_k and
 *  grad_v): added to grad_k and grad_v as they are read. */
camdelta_status cd_pbf_run(camdelta_context *ctx, const camdelta_prep_backward_args *a,
                           const camdelta_prep_saved *saved, const camdelta_buffer *g2, const cd_pbf_plan *p,
                           cd_launch *l);
#endif
