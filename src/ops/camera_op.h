/* Internal entry points of the camera-branch operations, used by the whole branch (src/ops/branch.c). */
#ifndef CAMDELTA_CAMERA_OP_H
#define CAMDELTA_CAMERA_OP_H
#include "runtime/internal.h"

/** The camera-conditions rule on the device buffer `cc` of B*T frames (checked to hold them): read back to the host
 *  (waiting for the queue's earlier work on it) and refused (INVALID_ARGUMENT, cd_camera_inf_error) when a value is
 *  infinite. B*T*20 is a checked count. */
camdelta_status cd_camera_check_conditions(camdelta_context *ctx, const char *op, camdelta_buffer cc, size_t B,
                                           size_t T);
/** Enqueue the camera kernels (arguments already checked). */
camdelta_status cd_camera_enqueue(camdelta_context *ctx, const camdelta_camera_args *a, size_t N, cd_launch *l);
/** The device table of the RoPE angles' cosines and sines a caller keeps between calls (grown as needed; released
 *  by the caller). */
typedef struct cd_camera_axis {
  cl_mem mem;
  size_t bytes;
} cd_camera_axis;
/** The same for frames that start at global frame f0 (the RoPE's temporal angles use f0 + f). keep: NULL (the table
 *  is a buffer of this call), or the caller's table, written with a blocking write (its previous users on the
 *  in-order queue have finished then). */
camdelta_status cd_camera_enqueue_at(camdelta_context *ctx, const camdelta_camera_args *a, size_t N, size_t f0,
                                     cd_camera_axis *keep, cd_launch *l);

/** Short conv: checked shapes; bounds -> device seg_end buffer (caller releases). */
camdelta_status cd_short_conv_segments(camdelta_context *ctx, const char *op, size_t T,
                                       const camdelta_chunking *chunking, cl_mem *seg_end);
/** The conv's launches with x, y (forward) and x, dy, dx (backward) in `dtype` storage (the activations'; f32
 *  arithmetic, f32 weights and weight gradient); cd_short_conv_program builds (or loads) its program. The forward
 *  continues `back` (0..3) frames before x's: the last `back` of lookback (B, 3, S, C; unread when back = 0), with
 *  seg_end over the back + T frames [look-back's | x's]; y (B, T, S, C) gets x's frames. With lookback_out (B, 3, S,
 *  C; another buffer than lookback) the launch also writes the last three frames of [look-back's | x's] there, zeros
 *  for frames before frame 0: a stream's next look-back. */
camdelta_status cd_short_conv_program(camdelta_context *ctx, camdelta_dtype dtype);
camdelta_status cd_short_conv_enqueue_forward(camdelta_context *ctx, camdelta_dtype dtype, size_t B, size_t T,
                                              size_t S, size_t C, camdelta_buffer lookback, size_t back,
                                              camdelta_buffer x, camdelta_buffer w, cl_mem seg_end, camdelta_buffer y,
                                              camdelta_buffer lookback_out, cd_launch *l);
camdelta_status cd_short_conv_enqueue_backward(camdelta_context *ctx, camdelta_dtype dtype, size_t B, size_t T,
                                               size_t S, size_t C, camdelta_buffer x, camdelta_buffer w,
                                               cl_mem seg_end, camdelta_buffer dy, camdelta_buffer dx,
                                               camdelta_buffer dw, cd_launch *l);

/** Output transform: kernels of cl/branch.cl for D (local size ts * D / 4), y and grad_y in `dtype` storage (out,
 *  out2 and grad_out stay f32: the scan's side). */
camdelta_status cd_branch_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, const char *name,
                                 cl_kernel *k, size_t *ts);
camdelta_status cd_output_transform_enqueue(camdelta_context *ctx, camdelta_dtype dtype, int backward,
                                            const camdelta_output_transform_args *a, cd_launch *l);
/** The CPU forms of the conv and of the output transform (cl/branch_cpu.cl): 1 where options conv FORM and output
 *  FORM choose them and the driver has no loop budget (cd_loop_budget: their work-items walk all their frames,
 *  channel groups or heads in one launch, which Mesa's llvmpipe would end early); else the work-group forms run.
 *  cd_branch_cpu_kernel gives a kernel of that program for activations in `dtype` storage. */
int cd_conv_cpu(camdelta_context *ctx, camdelta_dtype dtype);
int cd_output_cpu(camdelta_context *ctx, camdelta_dtype dtype);
camdelta_status cd_branch_cpu_kernel(camdelta_context *ctx, camdelta_dtype dtype, const char *name, cl_kernel *k);
/** Work-items of a CPU form: `items` tasks of G channel groups each become items · ceil(G / cg) tasks of cg groups,
 *  cg halved from G while the call has fewer than 4 tasks per compute unit. Returns cg. */
size_t cd_branch_cpu_groups(const camdelta_context *ctx, size_t items, size_t G);
/** Build (or load) the camera branch's own programs (camera.cl, short_conv.cl, branch.cl for D), as a call
 *  would; camdelta_warm_shape calls it. */
camdelta_status cd_branch_warm(camdelta_context *ctx, size_t D);
/** For tests: the discounted gates beta' (B, H, T, S), beta'_r, decay_r (B, H, T) and prep's inflation_sq
 *  (B, H, N) held by a saved object after a forward. */
camdelta_status cd_branch_saved_gates(const camdelta_branch_saved *s, cl_mem *beta_p, cl_mem *beta_r,
                                      cl_mem *decay_r, cl_mem *inflation_sq);
#endif
