/* The scan engine's interface to the rest of the library (src/scan/): what the camera branch (src/ops/branch.c),
 * the prep backward and camdelta_warm use of it. The public entries (camdelta.h, camdelta_packed.h,
 * camdelta_summary.h, camdelta_phases.h) are the engine's own compositions; this header adds the camera branch's
 * fused scan pair and the engine's warm-up. Not installed. */
#ifndef CAMDELTA_SCAN_ENGINE_H
#define CAMDELTA_SCAN_ENGINE_H
#include "runtime/internal.h"

/* ---------------------------------------------------------------------------------- argument checks */

/** INVALID_ARGUMENT naming op, the value and the known ones where `alg` is not a camdelta_scan_algorithm (names.c). */
camdelta_status cd_check_algorithm(const char *op, camdelta_scan_algorithm alg);
/** The same for a camdelta_precision. */
camdelta_status cd_check_precision(const char *op, camdelta_precision prec);

/* ------------------------------------------------------------------------------------------- warm-up */

/** Build (or load) both scan-forward algorithms' kernels as a call with B*H = BH, head dim D and S tokens per frame
 *  would (their tiles depend on all three). */
camdelta_status cd_scan_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S);
/** Build (or load from the disk cache) the scan-backward kernels for head dim D, as a call would. */
camdelta_status cd_scan_backward_warm(camdelta_context *ctx, size_t D);
/** The pair's plans for B·H = BH, head dim D and S tokens per frame, forward and backward, both precisions
 *  (camdelta_warm_shape). */
camdelta_status cd_scan_pair_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S);

/* ------------------------------------------------------------------------------------ the camera branch */

/** The algorithm a scan forward of BH chains of F frames of S tokens at head dim D runs (`alg`; AUTO is decided
 *  once per shape, in the plans), and whether the camera branch runs its two scans as the fused pair: where the
 *  algorithm is chunkwise. */
camdelta_status cd_scan_branch_algorithm(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH, size_t D,
                                         size_t F, size_t S, camdelta_scan_algorithm *run, int *pair);

/** The output transform (docs/math.md §8.5) as the pair's phase C epilogue: y (B, N, H, D) from proj_o (B, N, 4, 4)
 *  and the RoPE tables (N, D/2), N = F·S. done: set to 1 when the pair wrote y (and not out), 0 when it wrote out (no
 *  tensor-core path, y, proj_o or the tables not on 16 bytes, or the tile does not fit the local memory): the
 *  caller then runs cd_output_transform. */
typedef struct cd_pair_ot {
  camdelta_buffer proj_o, rope_cos, rope_sin, y;
  camdelta_dtype dtype; /* y's storage (the activations') */
  int done;
} cd_pair_ot;

/** The fused scan pair of the camera branch (docs/math.md §8.4): a causal and a chunk-masked reverse delta-rule scan
 *  over the same q, k, v and gates, summed, in one pass (pair.c). The causal scan runs with (beta, decay); the reverse
 *  scan with beta_r, decay_r equal to beta, decay except zero at the frames f with mask[f] == 0 (there its chain
 *  restarts from zero: A_f = 0, U_f = 0). out = causal output + reverse output. init_* / final_* (optional,
 *  (B, H, D, D)) are each direction's init and final states exactly as camdelta_scan_forward's. */
typedef struct cd_scan_pair_args {
  size_t B, H, D, F, S;
  camdelta_buffer q, k, v;  /* (B, H, D, F·S) f32 */
  camdelta_buffer beta;     /* (B, H, F, S) */
  camdelta_buffer decay;    /* (B, H, F) */
  cl_mem mask;              /* F uint32: 1 keep, 0 masked in the reverse scan */
  camdelta_buffer out;      /* (B, H, D, F·S) */
  camdelta_buffer init_c, init_r, final_c, final_r; /* optional */
  camdelta_precision precision;
  camdelta_profile *profile; /* optional: kernel time of this call */
  cd_pair_ot *ot;            /* optional: the output transform fused into phase C where it can be */
} cd_scan_pair_args;

/** Forward. saved_c / saved_r (both or neither) receive each direction's states for camdelta_scan_backward, as
 *  camdelta_scan_forward with a saved object would (state_post only; state_pre is not kept). */
camdelta_status cd_scan_pair_forward(camdelta_context *ctx, const cd_scan_pair_args *a, camdelta_scan_saved *saved_c,
                                     camdelta_scan_saved *saved_r);

/** The pair's backward: both scans' gradients for one grad_out (the gradient of out, shared by the two scans), from
 *  the states of cd_scan_pair_forward (or of two camdelta_scan_forward calls: state_post of each, reverse slot
 *  F−1 included, as the chunkwise scan writes it). dq, dk, dv receive the sums over the two scans; dbeta_* and
 *  ddecay_* each scan's own (the branch's discount backward combines them). beta_r, decay_r are the reverse
 *  scan's gates (beta, decay zeroed where mask is 0). init_* (as given to the forward), grad_final_* and
 *  dinit_* are optional. W = Qᵀ·dO and the causal A once, one chain launch for both directions, each direction's
 *  frames (the reverse one into the scratch) and ddecay, then dk, dv (and dq without tensor cores) added; with
 *  tensor cores dq is one product with the summed states. */
typedef struct cd_scan_pair_bwd_args {
  size_t B, H, D, F, S;
  camdelta_buffer q, k, v, beta, decay, beta_r, decay_r;
  cl_mem mask;
  camdelta_buffer grad_out;
  camdelta_buffer init_c, init_r, grad_final_c, grad_final_r; /* optional */
  camdelta_buffer dq, dk, dv;                                 /* (B, H, D, F·S) */
  camdelta_buffer dbeta_c, dbeta_r, ddecay_c, ddecay_r;
  camdelta_buffer dinit_c, dinit_r; /* optional */
  /* optional (B, H, D, F·S) scratch for the reverse direction's dq, dk, dv before they are added (the plan's
   * workspace when absent); not an input or output */
  camdelta_buffer scratch_dq, scratch_dk, scratch_dv;
  camdelta_precision precision;
  camdelta_profile *profile;
  /* 1: dk, dv receive the causal direction's gradients only and scratch_dk, scratch_dv (then required) the reverse
   * one's, for the caller to sum where it reads them (the camera branch: in the prep backward's loads) */
  int kv_apart;
} cd_scan_pair_bwd_args;
camdelta_status cd_scan_pair_backward(camdelta_context *ctx, const cd_scan_pair_bwd_args *a,
                                      const camdelta_scan_saved *saved_c, const camdelta_scan_saved *saved_r);

/** a[i] += b[i] for n floats with k = scan_pair.cl's cd_pair_add, enqueued on l under the name `what`. */
camdelta_status cd_pair_add_enqueue(camdelta_context *ctx, cl_kernel k, camdelta_buffer a, camdelta_buffer b,
                                    uint64_t n, cd_launch *l, const char *what);
#endif
