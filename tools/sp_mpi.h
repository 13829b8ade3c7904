/* Sequence parallelism in the tool (tools/sp_mpi.c): MPI's start and end, the ranks' agreement on exit codes, each
 * rank's context, and moving frame shares between the host, the device and the ranks. The commands that use it:
 * cmd_run_sp.c, cmd_demo_sp.c and cmd_bench_sp.c (camdelta run|demo|bench --sequence-parallel). */
#ifndef CAMDELTA_SP_MPI_H
#define CAMDELTA_SP_MPI_H

#include "cli_common.h"
#include "cli_sp.h"

/** The usage error of --sequence-parallel in a tool built without MPI. */
int sp_no_mpi(void);

#ifdef CAMDELTA_WITH_MPI
#include <mpi.h>

#include "camdelta_mpi.h"

/** This process's rank in MPI_COMM_WORLD and the number of ranks (set by sp_init). */
extern int sp_rank, sp_size;

/** Start MPI (unless the program already did) and set sp_rank and sp_size. */
int sp_init(void);
/** The worst exit code over the ranks (every rank must call). */
int sp_agree(int rc);
/** The end of a command: the worst exit code over the ranks, MPI finalised; before MPI started (an option or input
 *  refused at once, alike on every rank: they read the same files), rc as it is. */
int sp_end(int rc);
/** The context on `selector` with "{local_rank}" replaced by the rank's index on its node. */
int sp_context(camdelta_context **ctx, const char *selector);
/** Wall-clock milliseconds (monotonic). */
double sp_now_ms(void);
/** A device buffer of n floats (at least one), filled from x when x is not NULL. */
int sp_upload(camdelta_context *ctx, const float *x, size_t n, cl_mem *out);
/** n floats read from m into *out (malloc'd). */
int sp_download(camdelta_context *ctx, cl_mem m, size_t n, float **out);
/** max |x - ref| / max |ref| of this rank's share: the rows x lc array in m against columns [c0, c0 + lc) of the
 *  rows x cols reference; INFINITY when m cannot be read or a difference is NaN. */
double sp_share_error(camdelta_context *ctx, cl_mem m, const float *ref, size_t rows, size_t cols, size_t lc,
                      size_t c0);
/** rows x [c0, c0 + cl) of a rows x cols array (malloc'd; NULL when out of memory). */
float *sp_slice(const float *x, size_t rows, size_t cols, size_t c0, size_t cl);
/** Rank 0 receives every rank's rows x (frames·unit) block into the full rows x (F·unit) array (others get NULL). */
int sp_gather_cols(const float *local, size_t rows, size_t F, size_t unit, float **full);
#endif

#endif
