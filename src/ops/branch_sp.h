/* The whole camera branch on one rank's share of the frames (sequence parallelism): the hooks through which
 * src/ops/branch.c reaches the other ranks. Implemented over MPI by src/mpi/mpi_branch.c; not installed.
 * Only camdelta.h is needed to include it. */
#ifndef CAMDELTA_BRANCH_SP_H
#define CAMDELTA_BRANCH_SP_H
#include "camdelta.h"

/* Every hook is collective: each rank calls it at the same point with its status so far; it first agrees on a
 * status over the ranks (the first failing rank's status and message) and does its work only when all are OK. */
typedef struct cd_branch_sp {
  size_t T_global; /* frames of the whole sequence */
  size_t f0;       /* this rank holds frames [f0, f0 + args->T) */
  void *user;
  camdelta_status (*agree)(void *user, camdelta_status st);
  camdelta_status (*scan_forward)(void *user, camdelta_status st, camdelta_context *ctx,
                                  const camdelta_scan_args *args, camdelta_scan_saved *saved);
  camdelta_status (*scan_backward)(void *user, camdelta_status st, camdelta_context *ctx,
                                   const camdelta_scan_backward_args *args, const camdelta_scan_saved *saved);
  /* The conv's frames with the neighbours' halo: *ext (B, Te frames of fs floats; frame i = the sequence's frame
   * f0 − nl + i) gets this rank's x (B, T frames, device) at frames [nl, nl + T), the `want_left` frames just
   * before them and the `want_right` frames just after them from the ranks that hold them, and zeros in every
   * other frame. want_left <= nl, want_right <= Te − nl − T. *ext is the hooks' buffer in `slot` (0 … 2, kept
   * between calls), valid until that slot is asked for again. */
  camdelta_status (*extend)(void *user, camdelta_status st, camdelta_context *ctx, int slot, size_t B, size_t fs,
                            camdelta_buffer x, size_t T, size_t Te, size_t nl, size_t want_left, size_t want_right,
                            cl_mem *ext);
  /* Not collective: a device buffer of at least `bytes` in the hooks' slot `slot` (0 … 3; 0 … 2 shared with
   * extend), kept between calls. */
  camdelta_status (*scratch)(void *user, camdelta_context *ctx, int slot, size_t bytes, cl_mem *out);
  /* dst (n floats, device) <- the sum over the ranks of every rank's src (n floats, device), in rank order (the
   * same bits on every rank) */
  camdelta_status (*reduce)(void *user, camdelta_status st, camdelta_context *ctx, camdelta_buffer src,
                            camdelta_buffer dst, size_t n);
} cd_branch_sp;

/** Internal (exported for camdelta_mpi only, not installed; names start with camdelta_ as every exported symbol).
 *  camdelta_branch_forward / _backward on this rank's frames (args->T of them), with the chunking of the whole
 *  sequence (sp->T_global frames). Collective over the ranks behind `sp`. `saved` is required. */
CAMDELTA_API camdelta_status camdelta_branch_sp_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                  camdelta_branch_saved *saved, const cd_branch_sp *sp);
CAMDELTA_API camdelta_status camdelta_branch_sp_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                                   const camdelta_branch_grads *grads,
                                                   const camdelta_branch_saved *saved, const cd_branch_sp *sp);
#endif
