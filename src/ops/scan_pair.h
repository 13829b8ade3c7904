/* The fused scan pair of the camera branch (SPEC 8.4): a causal and a chunk-masked reverse delta-rule scan over
 * the same q, k, v and gates, summed, in one pass. Internal (src/ops/scan_pair.c, cl/scan_pair.cl); not installed. */
#ifndef CAMDELTA_SCAN_PAIR_H
#define CAMDELTA_SCAN_PAIR_H
#include "internal.h"

/* ---- the chunkwise forward's phases, from src/ops/scan.c */

/** The chunkwise plan of one camdelta_scan_forward call (args->algorithm is taken as CHUNKWISE; args->reverse
 *  and the states are not used by the phases). Checks args as camdelta_scan_forward does. */
typedef struct cd_scan_chunk cd_scan_chunk;
camdelta_status cd_scan_chunk_create(camdelta_context *ctx, const camdelta_scan_args *args, cd_scan_chunk **out);
void cd_scan_chunk_destroy(cd_scan_chunk *c);
/** The chains' tiles for `chains` serial chains (the pair runs 2·B·H) at D, S with work-groups of at most `cap` items
 *  (the override of CAMDELTA_SCAN_TILES / camdelta_tune_set "chunkwise" applied): scan_chunkwise.cl's whole option
 *  string (CD_D, CD_A_*, CD_B_*, CD_C_*), phase B's work-group size and value-column blocks, and its work-items'
 *  loop iterations (loops[0] per launch, loops[1] per frame; cd_chunk_loop_count). Returns OK, or the override's
 *  error. */
camdelta_status cd_scan_pair_chain_cfg(camdelta_context *ctx, size_t chains, size_t D, size_t S, unsigned cap,
                                       char *opts, size_t size, unsigned *b_w, unsigned *b_nj, size_t loops[2]);
/** The plan in words (as camdelta_scan_plan_describe). */
void cd_scan_chunk_describe(const cd_scan_chunk *c, char *buf, size_t size);
/** Phase A (A_f = d_f(I − K_fᵀβ_fK_f), U_f = K_fᵀβ_fV_f into A, U, (B, H, F, D, D) each) and phase C
 *  (args->out_f = Q_f·states_f), enqueued on l with the plan's kernels (tensor cores where the plan has them). */
camdelta_status cd_scan_chunk_phase_a(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem A, cl_mem U,
                                      cd_launch *l);
camdelta_status cd_scan_chunk_phase_c(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem states, cd_launch *l);
/** Phase C with the output transform as its epilogue (cd_apply_ot_tc): *done = 1 when enqueued (y written, not
 *  args->out); *done = 0 and OK when the plan cannot (FMA kernels, packed clips, the tile's local memory
 *  above the device's). Returns OK or the build / enqueue error. */
struct cd_pair_ot;
camdelta_status cd_scan_chunk_phase_c_ot(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem states,
                                         const struct cd_pair_ot *ot, int *done, cd_launch *l);

/* ---- the scan backward's FMA tiles, from src/ops/scan_backward.c */

/** What camdelta_scan_backward builds for head dim D (skip_dq: its tensor-core form, dq apart): the build
 *  options of scan_backward.cl and the launch sizes they give. */
typedef struct cd_scan_bwd_tiles {
  char opts[256];
  size_t grams_wg;      /* cd_scan_bwd_grams work-group */
  size_t frames_wg;     /* cd_scan_bwd_frames work-group */
  size_t frames_tokens; /* tokens per cd_scan_bwd_frames work-group */
  size_t chain_cb;      /* columns per chain work-group */
  size_t chain_wg;      /* chain work-group: D / (rows per item) */
  size_t grams_tsg;     /* tokens per cd_scan_bwd_grams chunk */
  size_t loops[4];      /* a work-item's loop iterations: grams per launch and per chunk, chain per launch and per
                           step (cd_sbwd_loop_count) */
  size_t rl;            /* cd_scan_bwd_ddecay work-group */
} cd_scan_bwd_tiles;
camdelta_status cd_scan_bwd_tiles_for(camdelta_context *ctx, size_t D, int skip_dq, cd_scan_bwd_tiles *t);

/* ---- the pair */

/** One pair call. The causal scan runs with (beta, decay); the reverse scan with beta_r, decay_r equal to beta,
 *  decay except zero at the frames f with mask[f] == 0 (there its chain restarts from zero: A_f = 0, U_f = 0).
 *  out = causal output + reverse output. init_* / final_* (optional, (B, H, D, D)) are each direction's init and
 *  final states exactly as camdelta_scan_forward's. */
/** The output transform (SPEC 8.5) as the pair's phase C epilogue: y (B, N, H, D) from proj_o (B, N, 4, 4) and the
 *  RoPE tables (N, D/2), N = F·S. done: set to 1 when the pair wrote y (and not out), 0 when it wrote out (no
 *  tensor-core path, or the tile does not fit the local memory): the caller then runs
 *  cd_output_transform. */
typedef struct cd_pair_ot {
  camdelta_buffer proj_o, rope_cos, rope_sin, y;
  int done;
} cd_pair_ot;

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

/** 1 when the pair should replace two scans for this shape on this context: the scan's algorithm (`alg`, AUTO
 *  resolved as camdelta_scan_forward does) is chunkwise. */
int cd_scan_pair_wanted(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH, size_t D, size_t F,
                        size_t S);

/** Builds (or loads) the pair's programs for B·H = BH, head dim D and S tokens per frame, forward and backward
 *  (camdelta_warm_shape). */
camdelta_status cd_scan_pair_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S);

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
  /* optional (B, H, D, F·S) scratch for the reverse direction's dq, dk, dv before they are added (allocated per
   * call when absent); not an input or output */
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
