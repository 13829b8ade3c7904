/* Internal (not installed, not documented API): what the sequence-parallel component (src/mpi/, its own library)
 * needs from the scan so that every gram is computed once per rank. Exported from the shared library (CAMDELTA_API)
 * only because camdelta_mpi is a separate library (so their names start with camdelta_, as every exported
 * symbol); depends on camdelta.h alone.
 *
 * A callback in the middle of a scan forward or backward: the scan computes its per-frame matrices once; the
 * callback receives them, may compute summaries from them and exchange those with other ranks, and writes the
 * incoming states the rest of the call reads (the caller passes those buffers as init_state / grad_final_state;
 * their contents are first read after the callback returns).
 *   forward  (camdelta_scan_sp_forward_hooked): called once, after phase A and before phase B, with A_f and U_f
 *            ((B, H, F, D, D), enqueued, not finished); the sequential algorithm has no phase A: A = U = NULL,
 *            and the callback runs before the scan's only launch.
 *   backward (camdelta_scan_sp_backward_hooked): called once, after the grams and before the chain, with A_f, W_f and
 *            (when the call recomputes the states, or want_u is set) U_f; else U = NULL.
 * The callback is not called when the call fails before it (checks, kernel builds, allocations, enqueues); a
 * non-zero status from it aborts the call with that status.
 *
 * camdelta_summary_sp_from_frames: the state summaries of SPEC section 9 from such per-frame matrices, without any gram:
 *   A, U, W  (B, H, F, D, D): A_f = decay_f·(I − K_fᵀβ_fK_f), U_f = K_fᵀβ_fV_f, W_f = Q_fᵀ·dO_f
 *   T        T_seg; E: E_seg from `init` (mem NULL: zero); G: the gradient summary from `gfinal` (mem NULL:
 *            zero); each (B, H, D, D), computed when its mem is set (E needs U, G needs W).
 * The chains and their order are those of camdelta_scan_summary / camdelta_scan_grad_summary (scan_summary.c);
 * enqueued on the context's queue, not finished. BH = B·H. */
#ifndef CAMDELTA_SCAN_HOOK_H
#define CAMDELTA_SCAN_HOOK_H
#include "camdelta.h"

typedef struct cd_scan_hook {
  camdelta_status (*fn)(void *user, cl_mem A, cl_mem U, cl_mem W);
  void *user;
  int want_u; /* backward: compute U_f even with a saved object */
} cd_scan_hook;

CAMDELTA_API camdelta_status camdelta_scan_sp_forward_hooked(camdelta_context *ctx, const camdelta_scan_args *args,
                                                    camdelta_scan_saved *saved, const cd_scan_hook *hook);
CAMDELTA_API camdelta_status camdelta_scan_sp_backward_hooked(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                                     const camdelta_scan_saved *saved, const cd_scan_hook *hook);
CAMDELTA_API camdelta_status camdelta_summary_sp_from_frames(camdelta_context *ctx, size_t BH, size_t D, size_t F, int reverse,
                                                    cl_mem A, cl_mem U, cl_mem W, camdelta_buffer init,
                                                    camdelta_buffer gfinal, camdelta_buffer T, camdelta_buffer E,
                                                    camdelta_buffer G);
#endif
