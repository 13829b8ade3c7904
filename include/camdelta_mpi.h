/*
 * camdelta_mpi — sequence parallelism over MPI (docs/math.md §9): the scan forward and backward with the frames of
 * every sequence split over the ranks of a communicator. Optional component: library camdelta_mpi, CMake target
 * camdelta::camdelta_mpi (built when CMake finds MPI); includes camdelta.h and mpi.h.
 *
 * Every rank of `comm` calls with the same B, H, D, S and direction, and its own contiguous share of every
 * sequence's frames: rank 0 the first frames, rank 1 the next ones, ... (args->F = this rank's frame count, at
 * least 1; the tensors are this rank's share, laid out as a single-device call with F frames). A rank computes
 * its segment's state summary (camdelta_summary.h), the ranks exchange only these D x D summaries (point to
 * point, each to the ranks that fold it; each rank folds those of the ranks before it in a fixed order: causal
 * left to right, reverse right to left), and each rank then runs its segment from its exact incoming state. The backward does the same with
 * the gradient summaries (causal right to left, reverse left to right), so the cross-rank terms (the ddecay and
 * dk/dv/dbeta of a segment's first frame, dinit_state) are those of one device. Results equal one device to
 * rounding (docs/math.md §9.3: 1e-6 relative).
 *
 * The sequence's own states:
 *  - init_state: read on the rank holding the sequence's start (rank 0 causal, the last rank reverse); the
 *    other ranks' init_state is ignored (may be absent).
 *  - final_state (forward) and dinit_state (backward): written on every rank that passes one, with the
 *    sequence's final state / dinit_state (computed on the rank that holds it and broadcast).
 *  - grad_final_state (backward): read on the rank holding the sequence's end (the last rank causal, rank 0
 *    reverse); ignored elsewhere.
 *  - saved: this rank's per-frame states; a camdelta_mpi_scan_forward's saved object goes to the matching
 *    camdelta_mpi_scan_backward with the same args.
 *
 * Transfers: device regions go to pinned host memory (non-blocking reads), over MPI point to point in chunks,
 * and to the device (non-blocking writes), the three legs pipelined chunk by chunk; the staging is kept per
 * communicator (camdelta_mpi_release_staging). Calls on one communicator must not run concurrently (as MPI
 * collectives on one communicator may not).
 *
 * The calls are collective: every rank must call, and every rank returns the same status. Bad input on any
 * rank fails every rank before anything is written (the message names the rank). The calls return when the
 * results are complete on the device (they synchronise with the exchange). Several ranks may share one device.
 */
#ifndef CAMDELTA_MPI_H
#define CAMDELTA_MPI_H

#include <mpi.h>

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Wall-clock phases of one call on this rank, in ms (the device is synchronised at each phase's end). */
typedef struct camdelta_mpi_timing {
  double summary_ms;  /* local work before the exchange: the per-frame matrices (the scan's phase A, or the
                         backward's grams, computed once and reused by the scan) and this rank's summaries */
  double exchange_ms; /* the summaries some rank needs to pinned host memory, MPI, to the other ranks' device */
  double combine_ms;  /* folding the other ranks' summaries into the incoming state (and gradient) */
  double scan_ms;     /* the rest of the local scan forward or backward from the incoming state */
  double total_ms;    /* the whole call, including the checks and the broadcast of final/dinit states */
  double wait_ms;     /* waiting for the other ranks to finish their local work (the status agreement before
                         the exchange; with ranks sharing one device, also the time their kernels take it) */
  double compute_ms;  /* local device work: summary_ms + combine_ms + scan_ms */
  /* exchange_ms split into its exposed legs (d2h_ms + mpi_ms + h2d_ms = exchange_ms): the copies to pinned host
   * memory until the last one is done (those that ran while this rank waited for the others are not counted),
   * then the MPI messages (with the bookkeeping and the collectives of the exchange) until every one is sent
   * and received, then the copies to the device still running after the last message arrived */
  double d2h_ms, mpi_ms, h2d_ms;
} camdelta_mpi_timing;

/** Scan forward over the ranks of `comm`. `timing` may be NULL. */
CAMDELTA_API camdelta_status camdelta_mpi_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                                       camdelta_scan_saved *saved, MPI_Comm comm,
                                                       camdelta_mpi_timing *timing);

/** Scan backward over the ranks of `comm`. `timing` may be NULL. */
CAMDELTA_API camdelta_status camdelta_mpi_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                                        const camdelta_scan_saved *saved, MPI_Comm comm,
                                                        camdelta_mpi_timing *timing);

/** The whole camera branch (camdelta_branch_forward / _backward, docs/math.md §8.6) over `comm`'s ranks. Each rank
 *  passes its contiguous share of every sequence's frames: args->T = this rank's frame count (at least 1; rank 0
 *  the first frames, rank 1 the next ones, ...), every tensor the slice of those frames (q_raw, k_raw, v_raw, y,
 *  grad_y and the token gradients (B, T·Hs·Ws, H, D); beta, dbeta (B, H, T, S); decay, ddecay (B, H, T);
 *  camera_conditions (B, T, 20)). The chunking is that of the whole sequence (its T = the sum of the ranks'
 *  frames); conv_weight and the norm weights are the same on every rank. Every rank passes the same shape,
 *  chunking, k_scale, norm_eps, algorithm and precision, and `saved` (and each gradient buffer) on all ranks or
 *  on none. The ranks exchange D x D state summaries (the scan pair, as camdelta_mpi_scan_*), the short conv's
 *  halo (up to 3 frames of raw K forward, of its gradient backward, from the neighbours) and, in the backward,
 *  the partial sums of dconv_weight, dq_norm_weight and dk_norm_weight (added in rank order; every rank gets
 *  the same totals). Collective; every rank returns the same status. Results equal one device to rounding. */
CAMDELTA_API camdelta_status camdelta_mpi_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                         camdelta_branch_saved *saved, MPI_Comm comm);
CAMDELTA_API camdelta_status camdelta_mpi_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                          const camdelta_branch_grads *grads,
                                                          const camdelta_branch_saved *saved, MPI_Comm comm);

/** As camdelta_mpi_branch_forward / _backward, with this rank's wall-clock split (`timing` may be NULL): wait_ms and
 *  exchange_ms sum every collective step of the call (the two scans' summary exchanges, the conv halo, the sums
 *  of the weight gradients; wait = the status agreement each step begins with), summary_ms and combine_ms those
 *  of the two scans, scan_ms the rest of the local work (prep, conv, the scans' local parts, ...); compute_ms =
 *  summary_ms + combine_ms + scan_ms. The calls return with the results complete on the device. */
CAMDELTA_API camdelta_status camdelta_mpi_branch_forward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                               camdelta_branch_saved *saved, MPI_Comm comm,
                                                               camdelta_mpi_timing *timing);
CAMDELTA_API camdelta_status camdelta_mpi_branch_backward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                                const camdelta_branch_grads *grads,
                                                                const camdelta_branch_saved *saved, MPI_Comm comm,
                                                                camdelta_mpi_timing *timing);
/** The calls keep their staging per communicator (pinned host buffers for the transfers, device scratch for the
 *  summaries and the branch's conv halo; for one OpenCL context at a time), grown to the largest shape run and
 *  freed with the communicator or at MPI_Finalize. This frees it now (not collective; a later call allocates it
 *  again). Returns CAMDELTA_OK (also when there is nothing to free or MPI is not initialised). */
CAMDELTA_API camdelta_status camdelta_mpi_release_staging(MPI_Comm comm);

/** The contiguous share of F frames that rank `rank` of `ranks` takes in camdelta's tools and tests:
 *  frames [F·rank/ranks, F·(rank+1)/ranks). Needs F >= ranks for every share to be non-empty. */
CAMDELTA_API void camdelta_mpi_frame_share(size_t F, int ranks, int rank, size_t *first, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_MPI_H */
