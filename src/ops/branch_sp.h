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
  /* Halo of a (B, F, frame) host tensor: `first` holds this rank's first nfirst frames and `last` its last
   * nlast frames (each (B, n, frame)); receives global frames [f0 - nleft, f0) into `left` (B, nleft, frame)
   * and [f1, f1 + nright) into `right` (B, nright, frame). */
  camdelta_status (*halo)(void *user, camdelta_status st, size_t B, size_t frame, const float *first, size_t nfirst,
                          const float *last, size_t nlast, float *left, size_t nleft, float *right, size_t nright);
  /* x (n floats) <- the sum over the ranks of every rank's x, in rank order (the same bits on every rank) */
  camdelta_status (*reduce)(void *user, camdelta_status st, float *x, size_t n);
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
