/* Sequence parallelism over MPI (include/camdelta_mpi.h, docs/math.md §9.3), composed of the public API: the scan's
 * phases (include/camdelta_phases.h) and the state summaries (include/camdelta_summary.h).
 *
 * Ranks are ordered along the direction the state flows: position pos = rank (causal) or P−1−rank (reverse), so
 * position 0 holds the sequence's start (it reads init_state) and position P−1 its end (it produces final_state
 * and reads grad_final_state). Per call:
 *   0. checks: every rank checks its own arguments, the ranks all-gather a descriptor (shape, direction, which
 *      optional states are given) and agree on one status before anything is enqueued;
 *   1. the local gram (camdelta_scan_forward_gram: A_f, U_f; camdelta_scan_backward_gram: A_f, W_f, U_f), with
 *      init_state (and grad_final_state) pointing at this rank's incoming-state buffers, and the summaries from the
 *      per-frame matrices (camdelta_scan_frames_summary: only D x D chains, no second gram): position p < P−1
 *      computes E_p (at p = 0 with init_state folded in: E_0 = its final state) and, for 0 < p < P−1, T_p; in the
 *      backward, position p > 0 also computes G_p (at p = P−1 with grad_final_state folded in: G_{P−1} = its
 *      dinit_state); then a status agreement, timed apart as the wait for the slowest rank;
 *   2. exchange (cd_xfer, mpi_stage.h): each summary some rank folds is read into pinned staging (enqueued before
 *      that agreement, so the copy runs while this rank waits for slower ones), sent point to point to the ranks
 *      that fold it, and written to their device (a fold of one summary, as with 2 ranks, straight into the
 *      incoming-state buffer), in chunks pipelined through the three legs; the staging, scratch and per-frame
 *      matrices are kept per communicator (nothing allocated once a shape has run);
 *   3. combine: M_in(p) = T_{p−1}(…(T_1·E_0 + E_1)…) + E_{p−1} (p > 0); in the backward also
 *      dM_out(p) = G_{p+1} + T_{p+1}ᵀ(G_{p+2} + …) (p < P−1), each on the device in that fixed order, into the
 *      incoming-state buffers;
 *   4. the rest of the local scan from there (camdelta_scan_forward_rest, camdelta_scan_backward_rest);
 *   5. the sequence's final_state (dinit_state) is broadcast from the rank that holds it to the ranks that ask.
 * The sequential forward has no gram: its summaries come with their own grams (camdelta_scan_summary).
 * Statuses are agreed after every step that can fail, so every rank returns the same status; the message of a
 * failing rank is broadcast and carries its rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "camdelta_helpers.h"
#include "camdelta_mpi.h"
#include "camdelta_phases.h"
#include "camdelta_summary.h"
#include "mpi/mpi_agree.h"
#include "mpi/mpi_stage.h"

void camdelta_mpi_frame_share(size_t F, int ranks, int rank, size_t *first, size_t *count) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    if (first) *first = 0;
    if (count) *count = 0;
    return;
  }
  /* floor(F * r / P) without forming F * r (it wraps for F near 2^64 / P): (F / P) * r + floor((F % P) * r / P) */
  const size_t P = (size_t)ranks, q = F / P, m = F % P;
  const size_t a = q * (size_t)rank + m * (size_t)rank / P, b = q * (size_t)(rank + 1) + m * (size_t)(rank + 1) / P;
  if (first) *first = a;
  if (count) *count = b - a;
}

static double now_ms(void) { return cd_mpi_now_ms(); }

/* ------------------------------------------------------------------------------------------ agreement */

typedef struct sp {
  MPI_Comm comm;
  int P, rank, pos;
  const char *op;
  camdelta_context *ctx;
} sp;

camdelta_status cd_mpi_agree(MPI_Comm comm, int rank, int P, camdelta_status st) {
  int mine = st != CAMDELTA_OK ? rank : P, first = P;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first >= P) return CAMDELTA_OK;
  struct {
    int st;
    char msg[1536];
  } m;
  memset(&m, 0, sizeof m);
  if (rank == first) {
    m.st = (int)st;
    snprintf(m.msg, sizeof m.msg, "%s", camdelta_last_message());
  }
  MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm);
  /* a message that already names its rank (from a nested collective call) is passed on as it is */
  if (strncmp(m.msg, "rank ", 5) == 0) return camdelta_set_error((camdelta_status)m.st, "%s", m.msg);
  return camdelta_set_error((camdelta_status)m.st, "rank %d of %d: %s", first, P, m.msg);
}

static camdelta_status agree(const sp *c, camdelta_status st) { return cd_mpi_agree(c->comm, c->rank, c->P, st); }

/* ------------------------------------------------------------------------------------------ checks */

/* sizes follow the library's rule: camdelta_size_mul / _add / _prod (camdelta_helpers.h) */
static int mul(size_t *out, size_t a, size_t b) { return camdelta_size_mul(out, a, b); }

static camdelta_status check_buf(const char *op, const char *name, camdelta_buffer b, size_t elems, int optional) {
  if (!b.mem) {
    if (optional) return CAMDELTA_OK;
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is NULL (expected a cl_mem of %zu "
                              "elements)", op, name, elems);
  }
  size_t end, bytes;
  if (!camdelta_size_add(&end, b.offset, elems) || !mul(&bytes, end, 4))
    return camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "%s: argument '%s': offset + size overflows size_t", op, name);
  size_t have = 0;
  cl_int err = clGetMemObjectInfo(b.mem, CL_MEM_SIZE, sizeof have, &have, NULL);
  if (err != CL_SUCCESS)
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is not a valid cl_mem (%s)", op, name,
                              camdelta_cl_error_name(err));
  if (have < bytes)
    return camdelta_set_error(CAMDELTA_ERROR_BUFFER_TOO_SMALL,
                              "%s: argument '%s' holds %zu bytes but needs %zu (offset %zu + %zu f32 elements)", op,
                              name, have, bytes, b.offset, elems);
  return CAMDELTA_OK;
}

/* Sizes of one rank's share. */
typedef struct sizes {
  size_t tok, beta, decay, state;
} sizes;

static camdelta_status check_shape(const char *op, size_t B, size_t H, size_t D, size_t F, size_t S, sizes *z) {
  if (!B || !H || !D || !F || !S)
    return camdelta_set_error(CAMDELTA_ERROR_SHAPE,
                              "%s: B=%zu, H=%zu, D=%zu, F=%zu (this rank's frames), S=%zu: each must be at least 1", op,
                              B, H, D, F, S);
  size_t bh, n;
  if (!mul(&bh, B, H) || !mul(&n, F, S) || !mul(&z->decay, bh, F) || !mul(&z->beta, bh, n) ||
      !mul(&z->tok, z->beta, D) || !camdelta_size_prod(&z->state, 3, (const size_t[]){bh, D, D}) ||
      z->tok > SIZE_MAX / 8)
    return camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  return CAMDELTA_OK;
}

/* The forward inputs both directions check first: the shape, the head dim, q, k, v, beta and decay. */
static camdelta_status check_inputs(const char *op, const camdelta_scan_args *a, sizes *z) {
  camdelta_status st = check_shape(op, a->B, a->H, a->D, a->F, a->S, z);
  if (!st && (a->D % 8 || a->D > 128))
    st = camdelta_set_error(CAMDELTA_ERROR_UNSUPPORTED, "%s: D=%zu (expected a multiple of 8 in [8, 128])", op, a->D);
  if (!st && ((st = check_buf(op, "q", a->q, z->tok, 0)) || (st = check_buf(op, "k", a->k, z->tok, 0)) ||
              (st = check_buf(op, "v", a->v, z->tok, 0)) || (st = check_buf(op, "beta", a->beta, z->beta, 0)) ||
              (st = check_buf(op, "decay", a->decay, z->decay, 0))))
    (void)0;
  return st;
}

enum { DS_ST, DS_B, DS_H, DS_D, DS_F, DS_S, DS_REV, DS_WANT, DS_CHUNK, DS_COUNT };

/* All-gather the descriptors; check that the shapes agree. `a`: this rank's shape and direction (NULL: none);
 * `want`: this rank asks for final/dinit_state. *any_want: some rank does. */
static camdelta_status gather_desc(const sp *c, camdelta_status st, const camdelta_scan_args *a, int want,
                                   int *any_want) {
  const size_t B = a ? a->B : 0, H = a ? a->H : 0, D = a ? a->D : 0, F = a ? a->F : 0, S = a ? a->S : 0;
  const int reverse = a && a->reverse != 0;
  if (!st && !cd_xfer_chunk())
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s", c->op, cd_xfer_chunk_error());
  int64_t mine[DS_COUNT] = {st,          (int64_t)B, (int64_t)H,   (int64_t)D, (int64_t)F, (int64_t)S, reverse != 0,
                            want != 0, (int64_t)cd_xfer_chunk()};
  int64_t *all = malloc((size_t)c->P * DS_COUNT * sizeof *all);
  int ok = all != NULL, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm);
  if (!all_ok) {
    free(all);
    return agree(c, ok ? CAMDELTA_OK : camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->op));
  }
  MPI_Allgather(mine, DS_COUNT, MPI_INT64_T, all, DS_COUNT, MPI_INT64_T, c->comm);
  *any_want = 0;
  camdelta_status out = st;
  if (!out) {
    for (int r = 0; r < c->P; r++) {
      const int64_t *d = all + (size_t)r * DS_COUNT;
      if (d[DS_ST]) continue; /* that rank reports its own failure */
      if (d[DS_B] != mine[DS_B] || d[DS_H] != mine[DS_H] || d[DS_D] != mine[DS_D] || d[DS_S] != mine[DS_S] ||
          d[DS_REV] != mine[DS_REV]) {
        out = camdelta_set_error(CAMDELTA_ERROR_SHAPE,
                                 "%s: rank %d has B=%lld H=%lld D=%lld S=%lld %s, rank %d has B=%zu H=%zu D=%zu S=%zu "
                                 "%s (every rank must call with the same B, H, D, S and direction)",
                                 c->op, r, (long long)d[DS_B], (long long)d[DS_H], (long long)d[DS_D],
                                 (long long)d[DS_S], d[DS_REV] ? "reverse" : "causal", c->rank, B, H, D, S,
                                 reverse ? "reverse" : "causal");
        break;
      }
      if (d[DS_CHUNK] != mine[DS_CHUNK]) {
        out = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: rank %d transfers in chunks of %lld bytes, rank "
                                 "%d in chunks of %lld (CAMDELTA_SP_CHUNK_BYTES must be the same on every rank)",
                                 c->op, r, (long long)d[DS_CHUNK], c->rank, (long long)mine[DS_CHUNK]);
        break;
      }
      if (d[DS_WANT]) *any_want = 1;
    }
  }
  free(all);
  return agree(c, out);
}

/* ------------------------------------------------------------------------------------------ device help */

static cl_command_queue queue_of(const sp *c) { return camdelta_context_queue(c->ctx); }

static int rank_at(const sp *c, int pos, int reverse) { return reverse ? c->P - 1 - pos : pos; }

/* Where each rank's summaries lie in the exchanged buffer: off[r·NSLOT + k] (floats) for rank r's summary k
 * (k = SL_T, SL_E, SL_G), or NO_SLOT when that rank does not send it. Only the summaries some rank folds are sent:
 * T at positions 0 < p < P−1, E at p < P−1, G (backward) at p > 0. */
enum { SL_T, SL_E, SL_G, NSLOT };
#define NO_SLOT ((size_t)-1)

static int pos_of(const sp *c, int rank, int reverse) { return reverse ? c->P - 1 - rank : rank; }

static int sends(int P, int p, int k, int grad) {
  if (k == SL_T) return p > 0 && p < P - 1;
  if (k == SL_E) return p < P - 1;
  return grad && p > 0;
}

/* Fold: forward (transpose 0) X = E_{from}; for j = from+1 … to: X = T_j·X + E_j, position j's summaries at
 * off[rank_at(j)] in `all`. Gradient (transpose 1): X = G_{from}; for j = from−1 … to: X = T_jᵀ·X + G_j. The result
 * lands in `dst`; tmp is a second (B, H, D, D) buffer. */
static camdelta_status fold(const sp *c, size_t B, size_t H, size_t D, int reverse, cl_mem all, const size_t *off,
                            int from, int to, int transpose, cl_mem dst, cl_mem tmp) {
  const int step = transpose ? -1 : 1, n = transpose ? from - to : to - from; /* n applies after the first */
  const int e_slot = transpose ? SL_G : SL_E;
  camdelta_status st = CAMDELTA_OK;
  /* the last apply must write dst: choose the first buffer so that the ping-pong ends there */
  cl_mem buf[2] = {n % 2 == 0 ? dst : tmp, n % 2 == 0 ? tmp : dst};
  camdelta_summary_apply_args a;
  memset(&a, 0, sizeof a);
  a.B = B, a.H = H, a.D = D;
  /* copy the first summary (T·0 + E) */
  const size_t *o0 = off + (size_t)rank_at(c, from, reverse) * NSLOT;
  a.T = (camdelta_buffer){all, o0[e_slot]};
  a.E = (camdelta_buffer){all, o0[e_slot]};
  a.M_out = (camdelta_buffer){buf[0], 0};
  st = camdelta_summary_apply(c->ctx, &a);
  int cur = 0;
  for (int j = from + step, k = 0; k < n && !st; j += step, k++) {
    const size_t *oj = off + (size_t)rank_at(c, j, reverse) * NSLOT;
    a.transpose = transpose;
    a.T = (camdelta_buffer){all, oj[SL_T]};
    a.E = (camdelta_buffer){all, oj[e_slot]};
    a.M_in = (camdelta_buffer){buf[cur], 0};
    a.M_out = (camdelta_buffer){buf[1 - cur], 0};
    st = camdelta_summary_apply(c->ctx, &a);
    cur = 1 - cur;
  }
  return st;
}

static camdelta_status sp_begin(sp *c, camdelta_context *ctx, MPI_Comm comm, const char *op,
                                camdelta_mpi_timing *timing) {
  camdelta_set_error(CAMDELTA_OK, "%s", "");
  if (timing) memset(timing, 0, sizeof *timing);
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: MPI is not initialised", op);
  if (comm == MPI_COMM_NULL) return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'comm' is MPI_COMM_NULL", op);
  c->comm = comm, c->op = op, c->ctx = ctx;
  MPI_Comm_size(comm, &c->P);
  MPI_Comm_rank(comm, &c->rank);
  return CAMDELTA_OK;
}

/* Broadcast the sequence's (B, H, D, D) state from position `from_pos` to the ranks that pass `dst`, through pinned
 * staging. */
static camdelta_status bcast_state(const sp *c, cd_stage *stg, int reverse, int from_pos, camdelta_buffer src,
                                   camdelta_buffer dst, size_t ns) {
  float *h = NULL;
  camdelta_status st = cd_stage_host(stg, CD_HOST_SMALL, ns * 4, &h);
  const int root = rank_at(c, from_pos, reverse);
  if (!st && c->rank == root) {
    const cl_int err = clEnqueueReadBuffer(queue_of(c), src.mem, CL_TRUE, src.offset * 4, ns * 4, h, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "reading a state buffer: %s", camdelta_cl_error_name(err));
  }
  if ((st = agree(c, st))) return st;
  MPI_Bcast(h, (int)ns, MPI_FLOAT, root, c->comm);
  if (c->rank != root && dst.mem) {
    const cl_int err = clEnqueueWriteBuffer(queue_of(c), dst.mem, CL_TRUE, dst.offset * 4, ns * 4, h, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "writing a state buffer: %s", camdelta_cl_error_name(err));
  }
  return agree(c, st);
}

/* Step 1's forward summary of the local share at position c->pos < P−1: T (c->pos > 0) and E (at position 0 with
 * init_state folded in). */
static camdelta_status state_summary(const sp *c, const camdelta_scan_args *a, cl_mem T, cl_mem E) {
  camdelta_scan_summary_args sa;
  memset(&sa, 0, sizeof sa);
  sa.B = a->B, sa.H = a->H, sa.D = a->D, sa.F = a->F, sa.S = a->S, sa.reverse = a->reverse != 0;
  sa.k = a->k, sa.v = a->v, sa.beta = a->beta, sa.decay = a->decay;
  if (c->pos == 0) sa.init_state = a->init_state;
  if (c->pos > 0) sa.T = (camdelta_buffer){T, 0};
  sa.E = (camdelta_buffer){E, 0};
  return camdelta_scan_summary(c->ctx, &sa);
}

/* Step 2, the exchange: every summary some rank folds (see sends()) goes point to point from its owner to the
 * ranks that fold it (wants()), through pinned staging (cd_xfer, mpi_stage.h): rank r's summary k lands in the
 * device buffer `all` at off[r·NSLOT + k] floats, or in place (direct[r·NSLOT + k]) where a fold of one summary is
 * that summary. The lists are built the same way on every rank: sources in slot order, each sent to its folders
 * in rank order; receipts by owner rank, then slot. */
static int wants(int P, int q, int j, int k, int grad) {
  if (!sends(P, j, k, grad)) return 0;
  if (k == SL_E) return j < q;
  if (k == SL_T) return j < q || (grad && j > q);
  return grad && j > q;
}

typedef struct xlists {
  cd_xregion src[NSLOT];
  cd_xsend *send;
  cd_xrecv *recv;
  int nsrc, nsend, nrecv;
} xlists;

/* Builds the transfer's lists; *all_out gets the device buffer of the summaries folded (NULL when every summary
 * goes in place). */
static camdelta_status xch_lists(const sp *c, cd_stage *stg, int reverse, int grad, const cl_mem mine[NSLOT],
                                 size_t ns, const size_t *off, const cl_mem *direct, size_t total, xlists *L,
                                 cl_mem *all_out) {
  const int P = c->P, me = c->rank, q = c->pos;
  *all_out = NULL;
  memset(L->src, 0, sizeof L->src);
  L->nsrc = L->nsend = L->nrecv = 0;
  void *mem = cd_stage_arr(stg, CD_ARR_LIST, (size_t)P * NSLOT * (sizeof(cd_xsend) + sizeof(cd_xrecv)));
  if (!mem) return CAMDELTA_ERROR_OUT_OF_MEMORY;
  L->send = mem, L->recv = (cd_xrecv *)(L->send + (size_t)P * NSLOT);
  for (int k = 0; k < NSLOT; k++) {
    if (!mine[k] || !sends(P, q, k, grad)) continue;
    int any = 0;
    for (int r = 0; r < P; r++)
      if (r != me && wants(P, pos_of(c, r, reverse), q, k, grad))
        L->send[L->nsend++] = (cd_xsend){L->nsrc, r}, any = 1;
    if (any) L->src[L->nsrc++] = (cd_xregion){mine[k], 0, ns * 4};
  }
  camdelta_status st = CAMDELTA_OK;
  for (int r = 0; r < P && !st; r++) {
    if (r == me) continue;
    const int j = pos_of(c, r, reverse);
    for (int k = 0; k < NSLOT && !st; k++) {
      if (!wants(P, q, j, k, grad)) continue;
      cl_mem dst = direct[(size_t)r * NSLOT + k];
      size_t at = 0;
      if (!dst) {
        if (!*all_out) st = cd_stage_dev(stg, CD_DEV_ALL, total * 4, all_out);
        dst = *all_out, at = off[(size_t)r * NSLOT + k] * 4;
      }
      if (!st) L->recv[L->nrecv++] = (cd_xrecv){{dst, at, ns * 4}, r};
    }
  }
  return st;
}

/* t[0] the call's start, then the ends of: checks, the local compute before the exchange, the wait for the other
 * ranks, the exchange, the combine, the rest of the local scan. */
enum { TM_START, TM_CHECKS, TM_COMPUTE, TM_WAIT, TM_EXCHANGE, TM_COMBINE, TM_SCAN, TM_N };
/* The exchange's legs (cd_xtime): its reads to the host are enqueued before the local compute is waited for, so
 * their enqueueing (d2h_ms's first part, x.d2h_pre) is moved from the compute to the exchange. */
typedef struct legs {
  double pre, d2h, h2d;
} legs;

static void put_timing(camdelta_mpi_timing *timing, const double t[TM_N], const legs *lg) {
  timing->summary_ms = t[TM_COMPUTE] - t[TM_CHECKS] - lg->pre, timing->wait_ms = t[TM_WAIT] - t[TM_COMPUTE];
  timing->exchange_ms = t[TM_EXCHANGE] - t[TM_WAIT] + lg->pre, timing->combine_ms = t[TM_COMBINE] - t[TM_EXCHANGE];
  timing->scan_ms = t[TM_SCAN] - t[TM_COMBINE], timing->total_ms = now_ms() - t[TM_START];
  timing->compute_ms = timing->summary_ms + timing->combine_ms + timing->scan_ms;
  timing->d2h_ms = lg->d2h, timing->h2d_ms = lg->h2d;
  timing->mpi_ms = timing->exchange_ms - lg->d2h - lg->h2d;
}

/* The middle of a sequence-parallel call (steps 1-3): this rank's summaries from its gram's per-frame matrices, the
 * exchange, and the fold into the incoming state(s) the rest of the scan reads. */
typedef struct sp_mid {
  sp *c;
  const camdelta_scan_args *fwd; /* the forward's inputs (shape, direction, k, v, beta, decay, init_state) */
  camdelta_buffer grad_final;    /* backward: grad_final_state; NULL mem in the forward */
  int grad;                      /* backward */
  size_t ns;
  cd_stage *stg;
  camdelta_scan_frames *frames;
  cl_mem T, E, G, Mi, dMo, tmp;
  double *t;
  legs lg;
  int timed;
} sp_mid;

/* Steps 1-3 after this rank's gram (its status `st`: a rank whose gram failed still takes part in the agreements,
 * so that every rank stops at the same point); `chunkwise`: the gram computed the per-frame matrices (else the
 * sequential forward's summaries get their own grams). */
static camdelta_status sp_middle(sp_mid *m, camdelta_status st, int chunkwise) {
  sp *c = m->c;
  const camdelta_scan_args *a = m->fwd;
  const int P = c->P, pos = c->pos, reverse = a->reverse != 0;
  const camdelta_buffer none = {NULL, 0};
  /* 1. summaries */
  camdelta_buffer T = pos > 0 && pos < P - 1 ? (camdelta_buffer){m->T, 0} : none;
  camdelta_buffer E = pos < P - 1 ? (camdelta_buffer){m->E, 0} : none;
  camdelta_buffer G = m->grad && pos > 0 ? (camdelta_buffer){m->G, 0} : none;
  if (!st && chunkwise) {
    const camdelta_frames_summary_args sa = {.init = pos == 0 ? a->init_state : none,
                                             .grad_final = pos == P - 1 ? m->grad_final : none, .T = T, .E = E, .G = G};
    st = camdelta_scan_frames_summary(c->ctx, m->frames, &sa);
  } else if (!st && E.mem)
    st = state_summary(c, a, m->T, m->E);
  /* the end of the local compute, as an event (so that the reads below are enqueued behind it at once) */
  cl_event computed = NULL;
  if (!st) {
    const cl_int err = clEnqueueMarkerWithWaitList(queue_of(c), 0, NULL, &computed);
    if (err != CL_SUCCESS)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "%s: enqueueing a marker: %s", c->op, camdelta_cl_error_name(err));
  }
  /* 2. exchange, first part: the layout, the lists and the reads of this rank's summaries to pinned host memory,
   * enqueued before waiting (they run while this rank waits for the others). A fold of one summary is that summary:
   * position 1's incoming state is E_0, position P−2's incoming state gradient G_{P−1}, received in place. */
  const double tp = now_ms();
  size_t *off = m->stg ? cd_stage_arr(m->stg, CD_ARR_LAYOUT, (size_t)P * NSLOT * (sizeof(size_t) + sizeof(cl_mem)))
                       : NULL;
  cl_mem *direct = off ? (cl_mem *)(off + (size_t)P * NSLOT) : NULL;
  if (!st && !off) st = CAMDELTA_ERROR_OUT_OF_MEMORY;
  const int direct_fwd = pos == 1, direct_grad = m->grad && pos == P - 2;
  size_t total = 0;
  cl_mem all = NULL;
  xlists L;
  cd_xfer x;
  memset(&x, 0, sizeof x);
  if (!st) {
    for (int r = 0; r < P; r++)
      for (int k = 0; k < NSLOT; k++) {
        const int send = sends(P, pos_of(c, r, reverse), k, m->grad);
        off[(size_t)r * NSLOT + k] = send ? total : NO_SLOT, total += send ? m->ns : 0;
        direct[(size_t)r * NSLOT + k] = NULL;
      }
    if (direct_fwd) direct[(size_t)rank_at(c, 0, reverse) * NSLOT + SL_E] = m->Mi;
    if (direct_grad) direct[(size_t)rank_at(c, P - 1, reverse) * NSLOT + SL_G] = m->dMo;
    const cl_mem mine[NSLOT] = {T.mem, E.mem, G.mem};
    st = xch_lists(c, m->stg, reverse, m->grad, mine, m->ns, off, direct, total, &L, &all);
  }
  if (!st) {
    x.s = m->stg, x.ctx = c->ctx, x.comm = c->comm, x.host_send = CD_HOST_SCAN_SEND, x.host_recv = CD_HOST_SCAN_RECV;
    x.src = L.src, x.nsrc = L.nsrc, x.send = L.send, x.nsend = L.nsend, x.recv = L.recv, x.nrecv = L.nrecv;
    st = cd_xfer_begin(&x);
  }
  m->lg.pre = now_ms() - tp;
  if (computed) {
    clFlush(queue_of(c));
    const cl_int err = clWaitForEvents(1, &computed);
    if (!st && err != CL_SUCCESS)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "%s: the summaries: %s", c->op, camdelta_cl_error_name(err));
    clReleaseEvent(computed);
  }
  m->t[TM_COMPUTE] = now_ms();
  /* the wait for the slowest rank: the status agreement is the first collective after the local work */
  st = agree(c, st);
  m->t[TM_WAIT] = now_ms();
  if (st) { /* every rank stops here */
    cd_xfer_abandon(&x);
    return st;
  }
  /* 2. the messages; the received summaries written to the device */
  cd_xtime xt = {0, 0, 0};
  st = cd_xfer_end(&x, &xt);
  m->lg.d2h = m->lg.pre + xt.d2h_ms - x.tbeg, m->lg.h2d = xt.h2d_ms;
  m->t[TM_EXCHANGE] = now_ms();
  /* 3. combine: the incoming state (forward order) and the incoming state gradient (backward order) */
  if (!st && pos > 0 && !direct_fwd) st = fold(c, a->B, a->H, a->D, reverse, all, off, 0, pos - 1, 0, m->Mi, m->tmp);
  if (!st && m->grad && pos < P - 1 && !direct_grad)
    st = fold(c, a->B, a->H, a->D, reverse, all, off, P - 1, pos + 1, 1, m->dMo, m->tmp);
  if (!st && m->timed) st = camdelta_finish(c->ctx);
  st = agree(c, st);
  m->t[TM_COMBINE] = now_ms();
  return st;
}

/* Scratch of the middle: summaries and incoming states, kept in the communicator's stage. */
static camdelta_status mid_alloc(sp_mid *m) {
  cd_stage *s = m->stg;
  const size_t b = m->ns * 4;
  camdelta_status st = cd_stage_dev(s, CD_DEV_T, b, &m->T);
  if (!st) st = cd_stage_dev(s, CD_DEV_E, b, &m->E);
  if (!st && m->grad) st = cd_stage_dev(s, CD_DEV_G, b, &m->G);
  if (!st) st = cd_stage_dev(s, CD_DEV_MI, b, &m->Mi);
  if (!st && m->grad) st = cd_stage_dev(s, CD_DEV_DMO, b, &m->dMo);
  if (!st) st = cd_stage_dev(s, CD_DEV_TMP, b, &m->tmp);
  return st;
}

/* ------------------------------------------------------------------------------------------ forward */

camdelta_status camdelta_mpi_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                          camdelta_scan_saved *saved, MPI_Comm comm, camdelta_mpi_timing *timing) {
  static const char op[] = "camdelta_mpi_scan_forward";
  double t[TM_N] = {now_ms(), 0, 0, 0, 0, 0, 0}; /* see put_timing */
  sp c;
  camdelta_status st = sp_begin(&c, ctx, comm, op, timing);
  if (st) return st;
  /* 0. checks */
  sizes z = {0, 0, 0, 0};
  if (!ctx || !args) st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  if (!st) st = check_inputs(op, args, &z);
  if (!st && ((st = check_buf(op, "out", args->out, z.tok, 0)) ||
              (st = check_buf(op, "init_state", args->init_state, z.state, 1)) ||
              (st = check_buf(op, "final_state", args->final_state, z.state, 1))))
    (void)0;
  int any_final = 0;
  st = gather_desc(&c, st, args, args && args->final_state.mem, &any_final);
  if (st) return st;
  const int reverse = args->reverse != 0;
  const size_t ns = z.state;
  const int P = c.P, pos = reverse ? P - 1 - c.rank : c.rank;
  c.pos = pos;

  cl_mem fin = NULL;
  sp_mid m;
  memset(&m, 0, sizeof m);
  m.c = &c, m.fwd = args, m.ns = ns, m.t = t, m.timed = timing != NULL;
  t[TM_CHECKS] = now_ms();
  /* 1-4: the gram once, the summaries from it, the exchange and the fold into the incoming state the rest reads */
  camdelta_scan_args a = *args;
  if (P > 1) st = cd_stage_get(comm, ctx, &m.stg);
  if (!st && P > 1) st = mid_alloc(&m);
  if (!st && P > 1) st = cd_stage_frames(m.stg, ctx, &m.frames);
  if (pos > 0) a.init_state = (camdelta_buffer){m.Mi, 0};
  if (!st && pos == P - 1 && any_final && !args->final_state.mem) st = cd_stage_dev(m.stg, CD_DEV_FIN, ns * 4, &fin);
  if (pos == P - 1 && any_final) a.final_state = args->final_state.mem ? args->final_state : (camdelta_buffer){fin, 0};
  else a.final_state = (camdelta_buffer){NULL, 0};
  if (P == 1) {
    if (!st) st = camdelta_scan_forward(ctx, &a, saved);
    t[TM_COMPUTE] = t[TM_WAIT] = t[TM_EXCHANGE] = t[TM_COMBINE] = t[TM_CHECKS];
  } else {
    camdelta_scan_algorithm alg = CAMDELTA_SCAN_AUTO;
    a.used = &alg;
    if (!st) st = camdelta_scan_forward_gram(ctx, &a, saved, m.frames);
    st = sp_middle(&m, st, alg == CAMDELTA_SCAN_CHUNKWISE);
    a.used = args->used;
    if (!st) st = camdelta_scan_forward_rest(ctx, &a, saved, m.frames);
  }
  if (!st) st = camdelta_finish(ctx);
  st = agree(&c, st);
  t[TM_SCAN] = now_ms();
  /* 5. the sequence's final state */
  if (!st && any_final && P > 1) {
    camdelta_buffer src = {NULL, 0};
    if (pos == P - 1) src = args->final_state.mem ? args->final_state : (camdelta_buffer){fin, 0};
    if (!st) st = bcast_state(&c, m.stg, reverse, P - 1, src, args->final_state, ns);
  }
  if (timing && !st) put_timing(timing, t, &m.lg);
  return st;
}

/* ------------------------------------------------------------------------------------------ backward */

camdelta_status camdelta_mpi_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                           const camdelta_scan_saved *saved, MPI_Comm comm,
                                           camdelta_mpi_timing *timing) {
  static const char op[] = "camdelta_mpi_scan_backward";
  double t[TM_N] = {now_ms(), 0, 0, 0, 0, 0, 0}; /* see put_timing */
  sp c;
  camdelta_status st = sp_begin(&c, ctx, comm, op, timing);
  if (st) return st;
  sizes z = {0, 0, 0, 0};
  /* the forward's inputs, as the forward takes them */
  camdelta_scan_args fwd = CAMDELTA_SCAN_ARGS_INIT;
  if (args) {
    fwd.B = args->B, fwd.H = args->H, fwd.D = args->D, fwd.F = args->F, fwd.S = args->S, fwd.reverse = args->reverse;
    fwd.q = args->q, fwd.k = args->k, fwd.v = args->v, fwd.beta = args->beta, fwd.decay = args->decay;
    fwd.init_state = args->init_state;
  }
  if (!ctx || !args) st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, ctx ? "args" : "ctx");
  if (!st) st = check_inputs(op, &fwd, &z);
  if (!st && ((st = check_buf(op, "grad_out", args->grad_out, z.tok, 0)) ||
              (st = check_buf(op, "init_state", args->init_state, z.state, 1)) ||
              (st = check_buf(op, "grad_final_state", args->grad_final_state, z.state, 1)) ||
              (st = check_buf(op, "dq", args->dq, z.tok, 0)) || (st = check_buf(op, "dk", args->dk, z.tok, 0)) ||
              (st = check_buf(op, "dv", args->dv, z.tok, 0)) || (st = check_buf(op, "dbeta", args->dbeta, z.beta, 0)) ||
              (st = check_buf(op, "ddecay", args->ddecay, z.decay, 0)) ||
              (st = check_buf(op, "dinit_state", args->dinit_state, z.state, 1))))
    (void)0;
  int any_dinit = 0;
  st = gather_desc(&c, st, args ? &fwd : NULL, args && args->dinit_state.mem, &any_dinit);
  if (st) return st;
  const int reverse = args->reverse != 0;
  const size_t ns = z.state;
  const int P = c.P, pos = reverse ? P - 1 - c.rank : c.rank;
  c.pos = pos;

  cl_mem din = NULL;
  sp_mid m;
  memset(&m, 0, sizeof m);
  m.c = &c, m.fwd = &fwd, m.grad = 1, m.grad_final = args->grad_final_state, m.ns = ns, m.t = t;
  m.timed = timing != NULL;
  t[TM_CHECKS] = now_ms();
  /* 1-4: the grams once (A, W, and U for the forward summaries), the summaries from them, the exchange and the fold
   * into the incoming state and state gradient the rest reads */
  camdelta_scan_backward_args a = *args;
  if (P > 1) st = cd_stage_get(comm, ctx, &m.stg);
  if (!st && P > 1) st = mid_alloc(&m);
  if (!st && P > 1) st = cd_stage_frames(m.stg, ctx, &m.frames);
  if (pos > 0) a.init_state = (camdelta_buffer){m.Mi, 0};
  if (pos < P - 1) a.grad_final_state = (camdelta_buffer){m.dMo, 0};
  if (!st && pos == 0 && any_dinit && !args->dinit_state.mem) st = cd_stage_dev(m.stg, CD_DEV_FIN, ns * 4, &din);
  if (pos == 0 && any_dinit) a.dinit_state = args->dinit_state.mem ? args->dinit_state : (camdelta_buffer){din, 0};
  else a.dinit_state = (camdelta_buffer){NULL, 0};
  if (P == 1) {
    if (!st) st = camdelta_scan_backward(ctx, &a, saved);
    t[TM_COMPUTE] = t[TM_WAIT] = t[TM_EXCHANGE] = t[TM_COMBINE] = t[TM_CHECKS];
  } else {
    if (!st) st = camdelta_scan_backward_gram(ctx, &a, saved, 1, m.frames);
    st = sp_middle(&m, st, 1);
    if (!st) st = camdelta_scan_backward_rest(ctx, &a, saved, m.frames);
  }
  if (!st) st = camdelta_finish(ctx);
  st = agree(&c, st);
  t[TM_SCAN] = now_ms();
  /* 5. the sequence's dinit_state */
  if (!st && any_dinit && P > 1) {
    camdelta_buffer src = {NULL, 0};
    if (pos == 0) src = args->dinit_state.mem ? args->dinit_state : (camdelta_buffer){din, 0};
    if (!st) st = bcast_state(&c, m.stg, reverse, 0, src, args->dinit_state, ns);
  }
  if (timing && !st) put_timing(timing, t, &m.lg);
  return st;
}
