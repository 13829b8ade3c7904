/*
 * camdelta — the scan's phases and the camera branch in parts, to chain segments of a sequence over any transport
 * (docs/math.md §9.3).
 *
 * EXPLICITLY UNSTABLE. Unlike camdelta.h, the functions and types of this header may change in any release, a minor
 * one included, without a deprecation period: it is installed for camdelta's own MPI component (camdelta_mpi) and
 * for applications that split a sequence over devices or processes themselves and accept to follow its changes.
 * Part of the core library; includes camdelta.h.
 *
 * A scan forward (camdelta_scan_forward) is its gram, the per-frame matrices of the segment's frames
 *   A_f = decay_f·(I − K_fᵀ·β_f·K_f),  U_f = K_fᵀ·β_f·V_f
 * then the rest: the state chain from init_state and the outputs. A backward (camdelta_scan_backward) is its gram
 *   W_f = Q_fᵀ·dO_f  (with A_f, and U_f where the states are recomputed)
 * then the rest: the gradient chain from grad_final_state and the per-token gradients. Between the two halves a
 * segment's state summaries (camdelta_summary.h: T, E, G) follow from the per-frame matrices with D x D products
 * only (camdelta_scan_frames_summary), so that a rank of a sequence-parallel scan computes every gram once:
 *
 *   camdelta_scan_forward_gram      the segment's per-frame matrices
 *   camdelta_scan_frames_summary    its summaries
 *   (exchange the summaries; fold the earlier segments' into the incoming state with camdelta_summary_apply)
 *   camdelta_scan_forward_rest      the rest from the incoming state (args->init_state)
 *
 * and the same with camdelta_scan_backward_gram / _rest and the gradient summary. The two halves together enqueue
 * the launches of the one call, and their results are its results, bit for bit (a backward gram with want_u
 * computes A_f again rather than reading the saved object's: there the results agree to rounding).
 *
 * The halves of one call take the same arguments, except the incoming states, which the rest reads and the gram
 * does not: init_state and final_state (forward), init_state, grad_final_state and dinit_state (backward) may
 * change between them (each is checked by the half that reads it); a profile request covers the half it is given
 * to. The sequential algorithm has no gram: its forward's gram half computes nothing (the frames then hold no
 * matrices, and the segment's summaries come from camdelta_scan_summary) and its rest runs the whole scan.
 * Both halves return as camdelta_scan_forward / camdelta_scan_backward do, with nothing enqueued on an error.
 *
 * The camera branch (camdelta_branch_forward / _backward) on a part of a sequence's frames is a run that stops
 * where the part needs data of the rest of the sequence, saying what (camdelta_branch_request), and goes on when
 * the caller has provided it: the short conv's halo (up to 3 frames of its input from each neighbouring part), the
 * two scans (run by the caller: their states cross the parts), and sums over the parts (the weights' gradients).
 * camdelta_mpi's branch composes it over MPI; a run over the whole sequence needs nothing and is the one call.
 */
#ifndef CAMDELTA_PHASES_H
#define CAMDELTA_PHASES_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The per-frame matrices of one scan call (device memory, kept and grown between calls). create returns
 *  CAMDELTA_OK, INVALID_ARGUMENT (NULL argument) or OUT_OF_MEMORY; destroy of NULL is a no-op. */
typedef struct camdelta_scan_frames camdelta_scan_frames;
CAMDELTA_API camdelta_status camdelta_scan_frames_create(camdelta_context *ctx, camdelta_scan_frames **out);
CAMDELTA_API void camdelta_scan_frames_destroy(camdelta_scan_frames *frames);

/** The forward's gram. The algorithm is decided here as camdelta_scan_forward decides it (args->used receives it)
 *  and the rest runs that one. With a saved object A_f goes into it (its backward reads it) and `frames` refers to
 *  it there. */
CAMDELTA_API camdelta_status camdelta_scan_forward_gram(camdelta_context *ctx, const camdelta_scan_args *args,
                                                        camdelta_scan_saved *saved, camdelta_scan_frames *frames);
/** The rest of the forward, after camdelta_scan_forward_gram with the same args (but the incoming states) and the
 *  same saved object. */
CAMDELTA_API camdelta_status camdelta_scan_forward_rest(camdelta_context *ctx, const camdelta_scan_args *args,
                                                        camdelta_scan_saved *saved, camdelta_scan_frames *frames);

/** The backward's gram: W_f; A_f unless `saved` holds the forward's (and want_u is 0); U_f when the states are
 *  recomputed (saved NULL) or want_u is set (the forward summary E from the same frames). */
CAMDELTA_API camdelta_status camdelta_scan_backward_gram(camdelta_context *ctx,
                                                         const camdelta_scan_backward_args *args,
                                                         const camdelta_scan_saved *saved, int want_u,
                                                         camdelta_scan_frames *frames);
/** The rest of the backward, after camdelta_scan_backward_gram with the same args (but the incoming states) and the
 *  same saved object. */
CAMDELTA_API camdelta_status camdelta_scan_backward_rest(camdelta_context *ctx,
                                                         const camdelta_scan_backward_args *args,
                                                         const camdelta_scan_saved *saved,
                                                         camdelta_scan_frames *frames);

/** The state summaries of the segment whose gram `frames` holds (camdelta_summary.h; B, H, D, F, direction those
 *  of the gram's call), with D x D products only: T, E (from init; absent: zero; needs U_f) and G (from
 *  grad_final; absent: zero; needs W_f), each computed when its mem is set, in the orders of camdelta_scan_summary
 *  and camdelta_scan_grad_summary (whose own grams agree with the scan's to rounding). INVALID_ARGUMENT when the
 *  frames lack a matrix asked for (no gram yet, the sequential algorithm, U_f or W_f not computed). */
typedef struct camdelta_frames_summary_args {
  camdelta_buffer init, grad_final; /* optional (B, H, D, D) f32 */
  camdelta_buffer T, E, G;          /* outputs, each optional (B, H, D, D) f32; must not overlap the inputs */
  camdelta_profile *profile;
} camdelta_frames_summary_args;
CAMDELTA_API camdelta_status camdelta_scan_frames_summary(camdelta_context *ctx, const camdelta_scan_frames *frames,
                                                          const camdelta_frames_summary_args *args);

/* --------------------------------------------------------------------------------- the branch in parts */

/** A part of a sequence: the frames [first, first + args->T) of a sequence of `frames` frames. The chunking of the
 *  call's args is that of the whole sequence (masks and conv segments from the sequence's frame indices, RoPE
 *  angles from them too). */
typedef struct camdelta_branch_part {
  size_t frames;
  size_t first;
} camdelta_branch_part;

/** What a run needs before it can go on. */
typedef enum camdelta_branch_need {
  CAMDELTA_BRANCH_NEED_NOTHING = 0,      /* the call is complete */
  CAMDELTA_BRANCH_NEED_HALO = 1,         /* the conv's halo frames: fill them in `halo` */
  CAMDELTA_BRANCH_NEED_SCAN_FORWARD = 2, /* run the scan forward `scan` (with `saved`) over the parts */
  CAMDELTA_BRANCH_NEED_SCAN_BACKWARD = 3, /* run the scan backward `scan_backward` (with `saved_backward`) */
  CAMDELTA_BRANCH_NEED_SUM = 4           /* sum_dst <- the sum over the parts of their sum_src (sum_n floats) */
} camdelta_branch_need;

/** A request of a run (the fields of its `need`; the buffers are the run's or the call's, valid until the next
 *  camdelta_branch_run_next). HALO: `halo` (B = halo_batches sequences of halo_frames frames of halo_floats floats,
 *  f32) holds the sequence's frames [first − halo_at, first − halo_at + halo_frames): this part's own at
 *  [halo_at, halo_at + T), zeros elsewhere; the caller writes the sequence's frames [first − halo_before, first) at
 *  [halo_at − halo_before, halo_at) and [first + T, first + T + halo_after) at [halo_at + T, …). SCAN_*: the scan of
 *  this part's frames in one direction (scan.reverse / scan_backward.reverse), its arguments as a one-device call
 *  over the part would give them; the caller runs it with the sequence's chaining of the states (e.g.
 *  camdelta_mpi_scan_forward / _backward over the parts' ranks). SUM: in a fixed order, so that every part gets the
 *  same bits. */
typedef struct camdelta_branch_request {
  camdelta_branch_need need;
  cl_mem halo;
  size_t halo_batches, halo_frames, halo_floats, halo_at, halo_before, halo_after;
  camdelta_scan_args scan;
  camdelta_scan_saved *saved;
  camdelta_scan_backward_args scan_backward;
  const camdelta_scan_saved *saved_backward;
  camdelta_buffer sum_src, sum_dst;
  size_t sum_n;
} camdelta_branch_request;

/** A branch call in progress. */
typedef struct camdelta_branch_run camdelta_branch_run;

/** Starts camdelta_branch_forward / camdelta_branch_backward on `part` (NULL: the whole sequence, which needs
 *  nothing) with the checks of those calls; nothing is enqueued yet. The run holds the context's branch plan (its
 *  kernels and workspace) until it is destroyed: another run or branch call of the context waits for that (on the
 *  same thread, create one run at a time). *run is NULL on failure. */
CAMDELTA_API camdelta_status camdelta_branch_run_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                         camdelta_branch_saved *saved,
                                                         const camdelta_branch_part *part, camdelta_branch_run **run);
CAMDELTA_API camdelta_status camdelta_branch_run_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                          const camdelta_branch_grads *grads,
                                                          const camdelta_branch_saved *saved,
                                                          const camdelta_branch_part *part,
                                                          camdelta_branch_run **run);
/** Enqueues the run's work up to its next need and says what that is (NOTHING: the call's work is all enqueued).
 *  After an error the run stops (later calls return the same status). */
CAMDELTA_API camdelta_status camdelta_branch_run_next(camdelta_branch_run *run, camdelta_branch_request *request);
/** Ends a run (complete or not); NULL is a no-op. */
CAMDELTA_API void camdelta_branch_run_destroy(camdelta_branch_run *run);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_PHASES_H */
