/* The synthetic problems of `camdelta demo|bench --sequence-parallel` (tools/sp_problems.c): the scans' and the
 * camera branch's inputs for a shape, the same on every rank, their device buffers for a share of frames, and the
 * calls on them over the ranks or on one device. */
#ifndef CAMDELTA_SP_PROBLEMS_H
#define CAMDELTA_SP_PROBLEMS_H

#include "sp_mpi.h"

#ifdef CAMDELTA_WITH_MPI

typedef cli_shape sp_shape; /* named shapes and B,H,D,F,S: cli_parse_shape */

/** What demo or bench `cmd` allocates for shape s (whole: also the full sequence, on the host for demo's problem and
 *  references; branch: the camera branch too), every count within one MPI message: an input error (exit 3) when it
 *  cannot fit (ctx NULL: the host only). */
int sp_budget(const char *cmd, const sp_shape *s, int whole, int branch, camdelta_context *ctx);
/** Mixes `seed` into the inputs' random generator (demo --seed). */
void sp_seed(size_t seed);

/** A scan problem: full-sequence host arrays (demo; bench leaves them NULL and fills the device at random), and the
 *  forward's algorithm. */
typedef struct sp_prob {
  size_t B, H, D, F, S, N, BH;
  float *q, *k, *v, *beta, *decay, *go, *init, *gf;
  camdelta_scan_algorithm alg;
} sp_prob;
int sp_prob_make(sp_prob *p, const sp_shape *s, camdelta_scan_algorithm alg);
void sp_prob_free(sp_prob *p);

/* Device buffers of one problem or share: inputs and outputs. */
enum { B_Q, B_K, B_V, B_BETA, B_DECAY, B_GO, B_INIT, B_GF, B_OUT, B_FIN, B_DQ, B_DK, B_DV, B_DB, B_DD, B_DI, B_COUNT };
typedef struct sp_bufs {
  cl_mem m[B_COUNT];
  size_t n[B_COUNT];
} sp_bufs;
/** Buffers for F frames of p (host data from p's frames [f0, f0 + F) when `p` has data, else random). */
int sp_bufs_make(camdelta_context *ctx, const sp_prob *p, size_t f0, size_t F, sp_bufs *b);
void sp_bufs_free(sp_bufs *b);
/** The scan forward and backward on F frames: over the ranks (mpi, timed in *tm) or on this device (then finished). */
camdelta_status sp_run_fwd(camdelta_context *ctx, const sp_prob *p, size_t F, sp_bufs *b, int reverse, int mpi,
                           camdelta_mpi_timing *tm);
camdelta_status sp_run_bwd(camdelta_context *ctx, const sp_prob *p, size_t F, sp_bufs *b, int reverse, int mpi,
                           camdelta_mpi_timing *tm);

/* A camera-branch problem from a scan shape (B, H, D, F = T frames, S = Hs·Ws tokens per frame; patch 1): full
 * host arrays, the same on every rank. Chunking: uniform chunks of max(3, T/3) frames (0 = one chunk when that
 * is T or more), so that chunks cross the ranks' boundaries. */
enum { BR_Q, BR_K, BR_V, BR_W, BR_QW, BR_KW, BR_CC, BR_BETA, BR_DECAY, BR_GY, BR_NIN };
enum { BO_Y, BO_DQ, BO_DK, BO_DV, BO_DW, BO_DQW, BO_DKW, BO_DB, BO_DD, BO_N };
typedef struct sp_br_prob {
  size_t B, H, D, T, Hs, Ws, S, C, cs;
  float *in[BR_NIN];
  size_t rows[BR_NIN], unit[BR_NIN]; /* per-frame columns (0: not split over frames) */
  size_t orows[BO_N], ounit[BO_N];
  camdelta_scan_algorithm alg;
} sp_br_prob;
int sp_br_make(sp_br_prob *p, const sp_shape *s, camdelta_scan_algorithm alg);
void sp_br_free(sp_br_prob *p);
typedef struct sp_br_bufs {
  cl_mem in[BR_NIN], out[BO_N];
  size_t nout[BO_N];
} sp_br_bufs;
/** The device buffers of frames [f0, f0 + fl). */
int sp_br_bufs_make(camdelta_context *ctx, const sp_br_prob *p, size_t f0, size_t fl, sp_br_bufs *b);
void sp_br_bufs_free(sp_br_bufs *b);
/** The branch forward (with `saved`) or backward (from `saved`) on fl frames; mpi: 1 over the ranks, 2 on this rank
 *  alone through the MPI component (MPI_COMM_SELF: one device with the ranks' arithmetic), 0 the single-device
 *  call. */
camdelta_status sp_br_run(camdelta_context *ctx, const sp_br_prob *p, size_t fl, const sp_br_bufs *b, int backward,
                          camdelta_branch_saved *saved, int mpi, camdelta_mpi_timing *tm);

#endif /* CAMDELTA_WITH_MPI */
#endif
