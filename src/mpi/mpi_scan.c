/* Sequence parallelism over MPI (include/camdelta_mpi.h, SPEC section 9), on the public API plus the scan's
 * callback (src/ops/scan_hook.h).
 *
 * Ranks are ordered along the direction the state flows: position pos = rank (causal) or P−1−rank (reverse), so
 * position 0 holds the sequence's start (it reads init_state) and position P−1 its end (it produces final_state
 * and reads grad_final_state). Per call:
 *   0. checks: every rank checks its own arguments, the ranks all-gather a descriptor (shape, direction, which
 *      optional states are given) and agree on one status before anything is enqueued;
 *   then the local scan (or backward) starts, with init_state (and grad_final_state) pointing at this rank's
 *   incoming-state buffers, and computes its per-frame matrices once (phase A: A_f, U_f; the backward's grams:
 *   A_f, W_f and U_f); between those and the state chain it calls sp_middle, which does 1-3:
 *   1. summaries from those matrices (only D x D chains, no gram): position p < P−1 computes E_p (at p = 0 with
 *      init_state folded in: E_0 = its final state) and, for 0 < p < P−1, T_p; in the backward, position p > 0
 *      also computes G_p (at p = P−1 with grad_final_state folded in: G_{P−1} = its dinit_state); then a status
 *      agreement, timed apart as the wait for the slowest rank;
 *   2. exchange: only the summaries some rank folds go to the host (before that agreement, overlapping slower
 *      ranks' work), MPI_Allgatherv, and each rank uploads those of the ranks it folds (a fold of one summary,
 *      as with 2 ranks, straight into the incoming-state buffer);
 *   3. combine: M_in(p) = T_{p−1}(…(T_1·E_0 + E_1)…) + E_{p−1} (p > 0); in the backward also
 *      dM_out(p) = G_{p+1} + T_{p+1}ᵀ(G_{p+2} + …) (p < P−1), each on the device in that fixed order, into the
 *      incoming-state buffers;
 *   4. the scan goes on from there (phase B and C; the backward's chain, frames and ddecay);
 *   5. the sequence's final_state (dinit_state) is broadcast from the rank that holds it to the ranks that ask.
 * The sequential forward has no phase A: the callback runs before its launch and computes the summaries with
 * their own grams (camdelta_scan_summary), as every summary does with CAMDELTA_SP_SEPARATE_SUMMARIES=1 (for
 * measuring what the reuse saves).
 * Statuses are agreed after every step that can fail, so every rank returns the same status; the message of a
 * failing rank is broadcast and carries its rank. A rank whose scan fails before its callback agrees on that
 * failure after the scan returns, where the other ranks wait in their callback's first agreement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "camdelta_helpers.h"
#include "camdelta_mpi.h"
#include "camdelta_summary.h"
#include "mpi_agree.h"
#include "../ops/scan_hook.h"

void camdelta_mpi_frame_share(size_t F, int ranks, int rank, size_t *first, size_t *count) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    if (first) *first = 0;
    if (count) *count = 0;
    return;
  }
  const size_t a = F * (size_t)rank / (size_t)ranks, b = F * (size_t)(rank + 1) / (size_t)ranks;
  if (first) *first = a;
  if (count) *count = b - a;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

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

static int mul(size_t *out, size_t a, size_t b) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

static camdelta_status check_buf(const char *op, const char *name, camdelta_buffer b, size_t elems, int optional) {
  if (!b.mem) {
    if (optional) return CAMDELTA_OK;
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is NULL (expected a cl_mem of %zu "
                              "elements)", op, name, elems);
  }
  size_t bytes;
  if (b.offset > SIZE_MAX / 4 - elems || !mul(&bytes, b.offset + elems, 4))
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
      !mul(&z->tok, z->beta, D) || !mul(&z->state, bh * D, D) || z->tok > SIZE_MAX / 8)
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

enum { DS_ST, DS_B, DS_H, DS_D, DS_F, DS_S, DS_REV, DS_WANT, DS_COUNT };

/* All-gather the descriptors; check that the shapes agree. `a`: this rank's shape and direction (NULL: none);
 * `want`: this rank asks for final/dinit_state. *any_want: some rank does. */
static camdelta_status gather_desc(const sp *c, camdelta_status st, const camdelta_scan_args *a, int want,
                                   int *any_want) {
  const size_t B = a ? a->B : 0, H = a ? a->H : 0, D = a ? a->D : 0, F = a ? a->F : 0, S = a ? a->S : 0;
  const int reverse = a && a->reverse != 0;
  int64_t mine[DS_COUNT] = {st, (int64_t)B, (int64_t)H, (int64_t)D, (int64_t)F, (int64_t)S, reverse != 0, want != 0};
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
      if (d[DS_WANT]) *any_want = 1;
    }
  }
  free(all);
  return agree(c, out);
}

/* ------------------------------------------------------------------------------------------ device help */

typedef struct scratch {
  cl_mem m[12];
  int n;
} scratch;

static camdelta_status alloc(camdelta_context *ctx, scratch *s, size_t bytes, cl_mem *out) {
  cl_int err;
  if (s->n == (int)(sizeof s->m / sizeof s->m[0]))
    return camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "internal: too many scratch buffers");
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return camdelta_set_error(err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                                      err == CL_OUT_OF_HOST_MEMORY
                                  ? CAMDELTA_ERROR_OUT_OF_MEMORY
                                  : CAMDELTA_ERROR_OPENCL,
                              "allocating a device buffer of %zu bytes: %s", bytes, camdelta_cl_error_name(err));
  }
  s->m[s->n++] = *out;
  return CAMDELTA_OK;
}

static void scratch_free(scratch *s) {
  for (int i = 0; i < s->n; i++) clReleaseMemObject(s->m[i]);
  s->n = 0;
}

static camdelta_status rw(camdelta_context *ctx, int write, camdelta_buffer b, size_t floats, float *host) {
  cl_command_queue q = camdelta_context_queue(ctx);
  cl_int err = write ? clEnqueueWriteBuffer(q, b.mem, CL_TRUE, b.offset * 4, floats * 4, host, 0, NULL, NULL)
                     : clEnqueueReadBuffer(q, b.mem, CL_TRUE, b.offset * 4, floats * 4, host, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return camdelta_set_error(CAMDELTA_ERROR_OPENCL, "%s a state buffer: %s", write ? "writing" : "reading",
                              camdelta_cl_error_name(err));
  return CAMDELTA_OK;
}

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

/* Broadcast the sequence's (B, H, D, D) state from position `from_pos` to the ranks that pass `dst`. */
static camdelta_status bcast_state(const sp *c, int reverse, int from_pos, camdelta_buffer src, camdelta_buffer dst,
                                   size_t ns) {
  float *h = malloc(ns * 4);
  camdelta_status st = h ? CAMDELTA_OK : camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->op);
  const int root = rank_at(c, from_pos, reverse);
  if (!st && c->rank == root) st = rw(c->ctx, 0, src, ns, h);
  if ((st = agree(c, st))) {
    free(h);
    return st;
  }
  MPI_Bcast(h, (int)ns, MPI_FLOAT, root, c->comm);
  if (c->rank != root && dst.mem) st = rw(c->ctx, 1, dst, ns, h);
  free(h);
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

/* Step 2, the exchange of the summaries some rank folds (see sends()): rank r's summary k (from src[k] on rank r)
 * goes to every rank by one MPI_Allgatherv of only those. In two parts:
 *  xch_begin, before the ranks wait for each other (so that it overlaps the slower ranks' work): the layout
 *    (off[r·NSLOT + k], in floats, or NO_SLOT) and this rank's summaries to the host; not collective;
 *  xch_end, after the agreement: the all-gather, and a rank that folds (`need`) writes to the device those of
 *    the ranks in `want` (want[r] != 0): into direct[r·NSLOT + k] when given (a fold of one summary is that
 *    summary), else into *all (allocated here) at off[r·NSLOT + k]. Collective. */
typedef struct xch {
  int *counts; /* P counts, then P displacements */
  float *buf;
  size_t total;
} xch;

static camdelta_status xch_begin(const sp *c, xch *x, int reverse, int grad, const cl_mem src[NSLOT], size_t ns,
                                 size_t *off) {
  const int P = c->P;
  x->total = 0, x->buf = NULL;
  x->counts = malloc((size_t)P * 2 * sizeof *x->counts);
  camdelta_status st =
      x->counts ? CAMDELTA_OK : camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->op);
  for (int r = 0; r < P && !st; r++) {
    const int p = pos_of(c, r, reverse);
    size_t n = 0;
    for (int k = 0; k < NSLOT; k++) {
      off[(size_t)r * NSLOT + k] = sends(P, p, k, grad) ? x->total + n * ns : NO_SLOT;
      n += sends(P, p, k, grad) ? 1 : 0;
    }
    if (n * ns > (size_t)0x7fffffff || x->total > (size_t)0x7fffffff)
      st = camdelta_set_error(CAMDELTA_ERROR_UNSUPPORTED, "%s: summaries of %zu floats exceed MPI's int counts", c->op,
                              n * ns);
    else
      x->counts[r] = (int)(n * ns), x->counts[P + r] = (int)x->total;
    x->total += n * ns;
  }
  if (!st && !(x->buf = malloc(x->total ? x->total * 4 : 4)))
    st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->op);
  for (int k = 0; k < NSLOT && !st; k++)
    if (src[k] && off[(size_t)c->rank * NSLOT + k] != NO_SLOT)
      st = rw(c->ctx, 0, (camdelta_buffer){src[k], 0}, ns, x->buf + off[(size_t)c->rank * NSLOT + k]);
  return st;
}

static void xch_free(xch *x) {
  free(x->counts), free(x->buf);
  x->counts = NULL, x->buf = NULL;
}

static camdelta_status xch_end(const sp *c, scratch *s, xch *x, size_t ns, int need, const int *want,
                               const cl_mem *direct, cl_mem *all, const size_t *off) {
  const int P = c->P;
  camdelta_status st = CAMDELTA_OK;
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->buf, x->counts, x->counts + P, MPI_FLOAT, c->comm);
  if (need && x->total) {
    cl_command_queue q = camdelta_context_queue(c->ctx);
    for (int r = 0; r < P && !st; r++)
      for (int k = 0; k < NSLOT && !st && want[r]; k++) {
        const size_t o = off[(size_t)r * NSLOT + k];
        if (o == NO_SLOT) continue;
        cl_mem dst = direct[(size_t)r * NSLOT + k];
        if (!dst && !*all) st = alloc(c->ctx, s, x->total * 4, all);
        if (st) break;
        cl_int err = clEnqueueWriteBuffer(q, dst ? dst : *all, CL_FALSE, dst ? 0 : o * 4, ns * 4, x->buf + o, 0, NULL,
                                          NULL);
        if (err != CL_SUCCESS)
          st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "writing the summaries: %s", camdelta_cl_error_name(err));
      }
    if (!st) st = camdelta_finish(c->ctx); /* the host buffer is freed after */
  }
  return agree(c, st);
}

/* t[0] the call's start, then the ends of: checks, the local compute before the exchange, the wait for the other
 * ranks, the exchange, the combine, the rest of the local scan. */
enum { TM_START, TM_CHECKS, TM_COMPUTE, TM_WAIT, TM_EXCHANGE, TM_COMBINE, TM_SCAN, TM_PRE, TM_N };
/* TM_PRE: not a time stamp but the duration of the exchange's first part (xch_begin), between TM_COMPUTE and the
 * wait's start. */
static void put_timing(camdelta_mpi_timing *timing, const double t[TM_N]) {
  timing->summary_ms = t[TM_COMPUTE] - t[TM_CHECKS], timing->wait_ms = t[TM_WAIT] - t[TM_COMPUTE] - t[TM_PRE];
  timing->exchange_ms = t[TM_EXCHANGE] - t[TM_WAIT] + t[TM_PRE], timing->combine_ms = t[TM_COMBINE] - t[TM_EXCHANGE];
  timing->scan_ms = t[TM_SCAN] - t[TM_COMBINE], timing->total_ms = now_ms() - t[TM_START];
  timing->compute_ms = timing->summary_ms + timing->combine_ms + timing->scan_ms;
}

/* The middle of a sequence-parallel call (the scan's callback, scan_hook.h): this rank's summaries from the
 * scan's own per-frame matrices, the exchange, and the fold into the incoming state(s) the rest of the scan
 * reads. */
typedef struct sp_mid {
  sp *c;
  const camdelta_scan_args *fwd; /* the forward's inputs (shape, direction, k, v, beta, decay, init_state) */
  camdelta_buffer grad_final;    /* backward: grad_final_state; NULL mem in the forward */
  int grad;                      /* backward */
  size_t ns;
  scratch *s;
  cl_mem T, E, G, Mi, dMo, tmp, all;
  double *t;
  int called, timed;
  int separate;                             /* CAMDELTA_SP_SEPARATE_SUMMARIES (see the top of this file) */
  const camdelta_scan_backward_args *gsrc; /* backward: q, grad_out for a separate gradient summary */
} sp_mid;

/* The gradient summary with its own grams (CAMDELTA_SP_SEPARATE_SUMMARIES=1 only). */
static camdelta_status grad_summary(const sp *c, const camdelta_scan_args *a, const camdelta_scan_backward_args *b,
                                    camdelta_buffer grad_final, cl_mem G) {
  camdelta_scan_grad_summary_args ga;
  memset(&ga, 0, sizeof ga);
  ga.B = a->B, ga.H = a->H, ga.D = a->D, ga.F = a->F, ga.S = a->S, ga.reverse = a->reverse != 0;
  ga.q = b->q, ga.k = b->k, ga.beta = b->beta, ga.decay = b->decay, ga.grad_out = b->grad_out;
  if (c->pos == c->P - 1) ga.grad_final_state = grad_final;
  ga.G = (camdelta_buffer){G, 0};
  return camdelta_scan_grad_summary(c->ctx, &ga);
}

/* CAMDELTA_SP_SEPARATE_SUMMARIES=1: the summaries from their own grams (camdelta_scan_summary /
 * camdelta_scan_grad_summary) instead of the scan's; for measuring what the reuse saves. */
static int separate_summaries(void) {
  const char *e = getenv("CAMDELTA_SP_SEPARATE_SUMMARIES");
  return e && *e && strcmp(e, "0") != 0;
}

static camdelta_status sp_middle(void *user, cl_mem A, cl_mem U, cl_mem W) {
  sp_mid *m = user;
  sp *c = m->c;
  const camdelta_scan_args *a = m->fwd;
  const int P = c->P, pos = c->pos, reverse = a->reverse != 0;
  const camdelta_buffer none = {NULL, 0};
  m->called = 1;
  /* 1. summaries (the per-frame matrices are this call's; without them, the sequential forward, they are
   * computed apart) */
  camdelta_buffer T = pos > 0 && pos < P - 1 ? (camdelta_buffer){m->T, 0} : none;
  camdelta_buffer E = pos < P - 1 ? (camdelta_buffer){m->E, 0} : none;
  camdelta_buffer G = m->grad && pos > 0 ? (camdelta_buffer){m->G, 0} : none;
  camdelta_status st = CAMDELTA_OK;
  if (A && !m->separate) {
    st = camdelta_summary_sp_from_frames(c->ctx, a->B * a->H, a->D, a->F, reverse, A, U, W,
                                         pos == 0 ? a->init_state : none, pos == P - 1 ? m->grad_final : none, T, E, G);
  } else {
    if (E.mem) st = state_summary(c, a, m->T, m->E);
    if (!st && G.mem) st = grad_summary(c, a, m->gsrc, m->grad_final, m->G);
  }
  if (!st) st = camdelta_finish(c->ctx);
  m->t[TM_COMPUTE] = now_ms();
  /* 2. exchange, first part: the layout and this rank's summaries to the host, before waiting for the others */
  int *want = calloc((size_t)P, sizeof *want);
  size_t *off = malloc((size_t)P * NSLOT * sizeof *off);
  cl_mem *direct = calloc((size_t)P * NSLOT, sizeof *direct);
  xch x = {NULL, NULL, 0};
  if (!st && (!want || !off || !direct))
    st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->op);
  const cl_mem mine[NSLOT] = {T.mem, E.mem, G.mem};
  if (!st) st = xch_begin(c, &x, reverse, m->grad, mine, m->ns, off);
  m->t[TM_PRE] = now_ms() - m->t[TM_COMPUTE];
  /* the wait for the slowest rank: the status agreement is the first collective after the local work */
  st = agree(c, st);
  m->t[TM_WAIT] = now_ms();
  if (st) { /* every rank stops here (a rank whose scan failed before calling back agrees once, after it) */
    xch_free(&x);
    free(want), free(off), free(direct);
    return st;
  }
  /* forward folds need the positions before this one, gradient folds those after it; a fold of one summary is that
   * summary: position 1's incoming state is E_0, position P−2's incoming state gradient G_{P−1}, written straight
   * into place */
  const int direct_fwd = pos == 1, direct_grad = m->grad && pos == P - 2;
  if (direct_fwd) direct[(size_t)rank_at(c, 0, reverse) * NSLOT + SL_E] = m->Mi;
  if (direct_grad) direct[(size_t)rank_at(c, P - 1, reverse) * NSLOT + SL_G] = m->dMo;
  for (int r = 0; r < P; r++) {
    const int p = pos_of(c, r, reverse);
    want[r] = p < pos || (m->grad && p > pos);
  }
  st = xch_end(c, m->s, &x, m->ns, pos > 0 || (m->grad && pos < P - 1), want, direct, &m->all, off);
  xch_free(&x);
  m->t[TM_EXCHANGE] = now_ms();
  /* 3. combine: the incoming state (forward order) and the incoming state gradient (backward order) */
  if (!st && pos > 0 && !direct_fwd) st = fold(c, a->B, a->H, a->D, reverse, m->all, off, 0, pos - 1, 0, m->Mi, m->tmp);
  if (!st && m->grad && pos < P - 1 && !direct_grad)
    st = fold(c, a->B, a->H, a->D, reverse, m->all, off, P - 1, pos + 1, 1, m->dMo, m->tmp);
  if (!st && m->timed) st = camdelta_finish(c->ctx);
  st = agree(c, st);
  m->t[TM_COMBINE] = now_ms();
  free(want), free(off), free(direct);
  return st;
}

/* Scratch of the middle: summaries and incoming states. */
static camdelta_status mid_alloc(sp_mid *m) {
  camdelta_context *ctx = m->c->ctx;
  const size_t b = m->ns * 4;
  camdelta_status st = alloc(ctx, m->s, b, &m->T);
  if (!st) st = alloc(ctx, m->s, b, &m->E);
  if (!st && m->grad) st = alloc(ctx, m->s, b, &m->G);
  if (!st) st = alloc(ctx, m->s, b, &m->Mi);
  if (!st && m->grad) st = alloc(ctx, m->s, b, &m->dMo);
  if (!st) st = alloc(ctx, m->s, b, &m->tmp);
  return st;
}

/* ------------------------------------------------------------------------------------------ forward */

camdelta_status camdelta_mpi_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                          camdelta_scan_saved *saved, MPI_Comm comm, camdelta_mpi_timing *timing) {
  static const char op[] = "camdelta_mpi_scan_forward";
  double t[TM_N] = {now_ms(), 0, 0, 0, 0, 0, 0, 0}; /* see put_timing */
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

  scratch s = {{0}, 0};
  cl_mem fin = NULL;
  sp_mid m;
  memset(&m, 0, sizeof m);
  m.c = &c, m.fwd = args, m.ns = ns, m.s = &s, m.t = t, m.timed = timing != NULL, m.separate = separate_summaries();
  t[TM_CHECKS] = now_ms();
  /* 1-4: the scan computes phase A once; its callback (sp_middle) makes the summaries from it, exchanges and
   * combines them and writes the incoming state before phase B reads it */
  camdelta_scan_args a = *args;
  if (P > 1) st = mid_alloc(&m);
  if (pos > 0) a.init_state = (camdelta_buffer){m.Mi, 0};
  if (!st && pos == P - 1 && any_final && !args->final_state.mem) st = alloc(ctx, &s, ns * 4, &fin);
  if (pos == P - 1 && any_final) a.final_state = args->final_state.mem ? args->final_state : (camdelta_buffer){fin, 0};
  else a.final_state = (camdelta_buffer){NULL, 0};
  const cd_scan_hook hook = {sp_middle, &m, 0};
  if (!st) st = camdelta_scan_sp_forward_hooked(ctx, &a, saved, P > 1 ? &hook : NULL);
  if (P > 1 && !m.called) st = agree(&c, st); /* the ranks in the callback wait there for this status */
  if (P == 1) t[TM_COMPUTE] = t[TM_WAIT] = t[TM_EXCHANGE] = t[TM_COMBINE] = t[TM_CHECKS];
  if (!st) st = camdelta_finish(ctx);
  st = agree(&c, st);
  t[TM_SCAN] = now_ms();
  /* 5. the sequence's final state */
  if (!st && any_final && P > 1) {
    camdelta_buffer src = {NULL, 0};
    if (pos == P - 1) src = args->final_state.mem ? args->final_state : (camdelta_buffer){fin, 0};
    if (!st) st = bcast_state(&c, reverse, P - 1, src, args->final_state, ns);
  }
  scratch_free(&s);
  if (timing && !st) put_timing(timing, t);
  return st;
}

/* ------------------------------------------------------------------------------------------ backward */

camdelta_status camdelta_mpi_scan_backward(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                           const camdelta_scan_saved *saved, MPI_Comm comm,
                                           camdelta_mpi_timing *timing) {
  static const char op[] = "camdelta_mpi_scan_backward";
  double t[TM_N] = {now_ms(), 0, 0, 0, 0, 0, 0, 0}; /* see put_timing */
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

  scratch s = {{0}, 0};
  cl_mem din = NULL;
  sp_mid m;
  memset(&m, 0, sizeof m);
  m.c = &c, m.fwd = &fwd, m.grad = 1, m.grad_final = args->grad_final_state, m.ns = ns, m.s = &s, m.t = t;
  m.timed = timing != NULL, m.separate = separate_summaries(), m.gsrc = args;
  t[TM_CHECKS] = now_ms();
  /* 1-4: the backward computes its grams once (A, W, and U for the forward summaries); its callback makes the
   * summaries from them, exchanges and combines them and writes the incoming state and state gradient before
   * the chain reads them */
  camdelta_scan_backward_args a = *args;
  if (P > 1) st = mid_alloc(&m);
  if (pos > 0) a.init_state = (camdelta_buffer){m.Mi, 0};
  if (pos < P - 1) a.grad_final_state = (camdelta_buffer){m.dMo, 0};
  if (!st && pos == 0 && any_dinit && !args->dinit_state.mem) st = alloc(ctx, &s, ns * 4, &din);
  if (pos == 0 && any_dinit) a.dinit_state = args->dinit_state.mem ? args->dinit_state : (camdelta_buffer){din, 0};
  else a.dinit_state = (camdelta_buffer){NULL, 0};
  const cd_scan_hook hook = {sp_middle, &m, !m.separate};
  if (!st) st = camdelta_scan_sp_backward_hooked(ctx, &a, saved, P > 1 ? &hook : NULL);
  if (P > 1 && !m.called) st = agree(&c, st); /* the ranks in the callback wait there for this status */
  if (P == 1) t[TM_COMPUTE] = t[TM_WAIT] = t[TM_EXCHANGE] = t[TM_COMBINE] = t[TM_CHECKS];
  if (!st) st = camdelta_finish(ctx);
  st = agree(&c, st);
  t[TM_SCAN] = now_ms();
  /* 5. the sequence's dinit_state */
  if (!st && any_dinit && P > 1) {
    camdelta_buffer src = {NULL, 0};
    if (pos == 0) src = args->dinit_state.mem ? args->dinit_state : (camdelta_buffer){din, 0};
    if (!st) st = bcast_state(&c, reverse, 0, src, args->dinit_state, ns);
  }
  scratch_free(&s);
  if (timing && !st) put_timing(timing, t);
  return st;
}
