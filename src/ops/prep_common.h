/* Pieces of the prep forward shared with the prep backward. */
#ifndef CAMDELTA_PREP_COMMON_H
#define CAMDELTA_PREP_COMMON_H
#include "runtime/internal.h"

/** Shape, dtype and scalar checks of a prep call. */
camdelta_status cd_prep_check_shape(const char *op, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype,
                                    float k_scale, float norm_eps);
/** The nine inputs prep forward and backward share, the first nine slots of both entries in camdelta_prep_args
 *  order (q_raw k_raw v_raw q_norm_weight k_norm_weight proj_q proj_kv rope_cos rope_sin): their uses for a call
 *  of that shape (v_raw optional when !need_v). */
enum { CD_PREP_INPUTS = 9 };
#define CD_PREP_INPUT_SLOTS(type)                                                                                \
  [0] = CD_SLOT(type, q_raw, CD_IN), [1] = CD_SLOT(type, k_raw, CD_IN), [2] = CD_SLOT(type, v_raw, CD_IN),       \
  [3] = CD_SLOT(type, q_norm_weight, CD_IN), [4] = CD_SLOT(type, k_norm_weight, CD_IN),                          \
  [5] = CD_SLOT(type, proj_q, CD_IN), [6] = CD_SLOT(type, proj_kv, CD_IN), [7] = CD_SLOT(type, rope_cos, CD_IN), \
  [8] = CD_SLOT(type, rope_sin, CD_IN)
void cd_prep_use_inputs(cd_call *c, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype, int need_v);
/** Enqueue the inverse-RMS kernel: inv_rms (2, B, N) f32, q then k. */
camdelta_status cd_prep_inv_rms(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype,
                                 float eps, camdelta_buffer q_raw, camdelta_buffer k_raw, cl_mem inv_rms, cd_launch *l);
/** Build (or load) the prep forward's programs for (dtype, D, H) as a call would (camdelta_warm): the form the
 *  context runs (H = 0: the heads not known, so not the register-resident form), in both index widths, and the
 *  inverse RMS. */
camdelta_status cd_prep_forward_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H);
/** Build (or load) the inverse-RMS program for `dtype`. */
camdelta_status cd_prep_inv_rms_warm(camdelta_context *ctx, camdelta_dtype dtype);
/** A per-token prep-family kernel from `source` built for (dtype, D) with the
 *  largest token tile (CD_TS) the device allows; local size = ts * D / 4. */
camdelta_status cd_prep_kernel(camdelta_context *ctx, const char *source, const char *name, camdelta_dtype dtype,
                               size_t D, cl_kernel *out, size_t *ts_out);
/** The one-pass prep forward of one (dtype, D[, H]): its kernel (cl/prep.cl cd_prep_fused, or cd_prep_regs when
 *  regs is set), tokens per tile, heads per step (1 for cd_prep_regs) and local size. */
typedef struct cd_pf_plan {
  cl_kernel k;
  unsigned tt, hb;
  int regs;
  int cpu;     /* the CPU form (cl/prep_cpu.cl cd_prep_cpu): one work-item per pb blocks of 8 tokens */
  unsigned pb;
  size_t lws;
} cd_pf_plan;
/** The one-pass prep forward kernel for (dtype, D, H) when the context uses it (see prep.c): returns 1 and fills *p
 *  (the caller releases p->k); 0 for the two-pass form. H = 0 (not known yet, camdelta_warm) never picks the
 *  register-resident form; that form is built with 32-bit index arithmetic when ix32 is set (cd_prep_ix32). A build
 *  failure sets *st. */
/** Loop iterations one work-item of the CPU form (cl/prep_cpu.cl) runs at most for H heads of D at pb blocks of 8
 *  tokens, for a driver's loop budget (cd_loop_budget): cd_prep_fused_kernel halves pb until they fit it. */
size_t cd_prep_cpu_loops(size_t H, size_t D, size_t pb);
int cd_prep_fused_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H, int ix32, cd_pf_plan *p,
                         camdelta_status *st);
/** Where cd_prep_regs reads the norm weights (CD_WL) for (dtype, H, D) at tt tokens per tile: option "prep" WL minus
 *  1 when given, else 2 (staged in local memory) in f32 and below D = 96 in 16-bit storage, 1 (applied before the
 *  barrier) in 16-bit storage from D = 96; 0 (in the head loop) where the staged weights would not fit the device's
 *  local memory. */
int cd_prep_weights_mode(const camdelta_context *ctx, camdelta_dtype dtype, size_t H, size_t D, unsigned tt);
/** 1 when every index of cd_prep_regs for (B, N, H, D), counted from each tensor's offset, fits 32 bits: the rows
 *  (B N H D), the camera matrices (16 B N), the inverse RMS values (2 B N), the RoPE tables (N D/2); else 0. */
int cd_prep_ix32(size_t B, size_t N, size_t H, size_t D);
/** The prep forward form for option "prep" FORM = form (CD_OPT_AUTO: the GPUs' rule) and H heads (0: not known):
 *  0 two passes, 1 the staged one-pass kernel, 2 the register-resident one (up to 48 heads by the rule; asked for,
 *  up to 64). */
int cd_prep_forward_form(uint32_t form, size_t H);
/** The fused prep kernels' launch shape: heads per step, the most of 32 / (D/4) that fit lmax work-items of
 *  tt * D/4 each, evened out over the steps (H = 20, D = 8: two steps of 10, not 16 + 4); and the persistent
 *  work-groups walking `tiles` tiles, wpc per compute unit, at most one per tile. */
unsigned cd_prep_heads_per_step(size_t H, size_t g4, size_t tt, size_t lmax);
size_t cd_prep_tile_groups(const camdelta_context *ctx, size_t tiles, size_t wpc);
/** camdelta_prep_backward with grad_k + grad_k2 and grad_v + grad_v2 as the K and V gradients (f32; the camera
 *  branch's two scan directions): the fused form adds them as it reads them; the three-kernel form first adds the
 *  second ones into grad_k and grad_v (which it then overwrites), with the same bits. */
camdelta_status cd_prep_backward_g2(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                    const camdelta_prep_saved *saved, camdelta_buffer grad_k2,
                                    camdelta_buffer grad_v2);
/** camdelta_prep_forward / _backward with prep's (B, H, D, N) side (q, k, v out; grad_q, grad_k, grad_v and the
 *  saved q, k in) in f32 whatever args->dtype, the raw side (q_raw, k_raw, v_raw in, dq_raw, dk_raw, dv_raw out) in
 *  args->dtype: the camera branch on 16-bit activations. The backward takes second K and V gradients as
 *  cd_prep_backward_g2 when g2 (two buffers) is given. */
camdelta_status cd_prep_forward_split(camdelta_context *ctx, const camdelta_prep_args *args,
                                      camdelta_prep_saved *saved);
camdelta_status cd_prep_backward_split(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                       const camdelta_prep_saved *saved, const camdelta_buffer *g2);

#endif
