/* The whole camera branch over MPI (include/camdelta_mpi.h): each rank holds a contiguous share of every
 * sequence's frames. The single-device branch (src/ops/branch.c) runs on the rank's frames with the chunking of
 * the whole sequence (masks and conv segments from global frame indices, RoPE angles from global frame
 * indices) and reaches the other ranks through the hooks of src/ops/branch_sp.h, implemented here:
 *   - the two scans and their backward: camdelta_mpi_scan_forward / _backward (D x D summaries only; the
 *     chunk-masked reverse scan needs nothing more: a frame whose beta'_r and decay_r are zero drops its
 *     incoming state, so its chaining across ranks is that of one device);
 *   - the short conv's halo: up to 3 raw K frames (forward) or dk_conv frames (backward) on each side; the ranks
 *     all-gather how many frames each needs on each side, then each owner sends exactly those frames to their
 *     requester, point to point (a halo may span several ranks when ranks hold fewer than 3 frames);
 *   - sums over all frames (dconv_weight, dq_norm_weight, dk_norm_weight): each rank's partial is all-gathered
 *     and summed in rank order, so every rank holds the same bits run to run.
 * Every hook first agrees on a status over the ranks, so all ranks return the same status and no rank waits
 * in a collective that another one skipped. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ops/branch_sp.h"
#include "camdelta_helpers.h"
#include "camdelta_mpi.h"
#include "mpi_agree.h"

typedef struct bsp {
  MPI_Comm comm;
  int P, rank;
  size_t *first, *count; /* every rank's frames */
  camdelta_mpi_timing tm; /* summed over the call's scans, halos and reductions (see camdelta_mpi.h) */
} bsp;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void add_scan(bsp *c, const camdelta_mpi_timing *t) {
  c->tm.summary_ms += t->summary_ms, c->tm.wait_ms += t->wait_ms, c->tm.exchange_ms += t->exchange_ms;
  c->tm.combine_ms += t->combine_ms;
}

static camdelta_status agree(void *user, camdelta_status st) {
  const bsp *c = user;
  return cd_mpi_agree(c->comm, c->rank, c->P, st);
}

/* A hook's first agreement: the wait for the other ranks. */
static camdelta_status agree_timed(bsp *c, camdelta_status st) {
  const double t0 = now_ms();
  st = agree(c, st);
  c->tm.wait_ms += now_ms() - t0;
  return st;
}

static camdelta_status scan_forward(void *user, camdelta_status st, camdelta_context *ctx,
                                    const camdelta_scan_args *args, camdelta_scan_saved *saved) {
  bsp *c = user;
  if ((st = agree_timed(c, st))) return st;
  camdelta_mpi_timing t;
  st = camdelta_mpi_scan_forward(ctx, args, saved, c->comm, &t);
  if (!st) add_scan(c, &t);
  return st;
}

static camdelta_status scan_backward(void *user, camdelta_status st, camdelta_context *ctx,
                                     const camdelta_scan_backward_args *args, const camdelta_scan_saved *saved) {
  bsp *c = user;
  if ((st = agree_timed(c, st))) return st;
  camdelta_mpi_timing t;
  st = camdelta_mpi_scan_backward(ctx, args, saved, c->comm, &t);
  if (!st) add_scan(c, &t);
  return st;
}

static size_t min3(size_t n) { return n < 3 ? n : 3; }

/* The halo, point to point: the ranks all-gather how many frames each needs on each side (nleft, nright), then
 * every rank sends each requester exactly the frames of its own that the requester needs (one message per batch
 * and side; they lie in its first or last min(3, F) frames) and receives its halo from their owners. */
static camdelta_status halo(void *user, camdelta_status st, size_t B, size_t frame, const float *first,
                            size_t nfirst, const float *last, size_t nlast, float *left, size_t nleft, float *right,
                            size_t nright) {
  bsp *c = user;
  if ((st = agree_timed(c, st))) return st;
  const double t0 = now_ms();
  const int P = c->P, me = c->rank;
  const size_t f0 = c->first[me], f1 = f0 + c->count[me], k = min3(c->count[me]);
  int64_t mine[2] = {(int64_t)nleft, (int64_t)nright}, *need = malloc((size_t)P * 2 * sizeof *need);
  /* at most one message per (peer, batch, side) each way */
  const size_t most = (size_t)P * B * 4;
  MPI_Request *req = malloc((most ? most : 1) * sizeof *req);
  if (!need || !req) st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "halo: out of host memory");
  if (!st && (nfirst != k || nlast != k))
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: %zu/%zu boundary frames", nfirst, nlast);
  if (!st && (nleft > f0 || nleft > 3 || nright > 3))
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: %zu/%zu halo frames", nleft, nright);
  if (!st && 3 * frame > (size_t)INT_MAX)
    st = camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "halo: frames of %zu floats exceed MPI's int counts", frame);
  if ((st = agree(c, st)) == CAMDELTA_OK) {
    MPI_Allgather(mine, 2, MPI_INT64_T, need, 2, MPI_INT64_T, c->comm);
    size_t T = 0;
    for (int r = 0; r < P; r++) T = c->first[r] + c->count[r] > T ? c->first[r] + c->count[r] : T;
    /* every rank checks every request the same way (same data), so all post their messages or none does */
    for (int r = 0; r < P && !st; r++) {
      const size_t r0 = c->first[r], r1 = r0 + c->count[r];
      for (int side = 0; side < 2 && !st; side++) {
        const size_t want = (size_t)need[2 * r + side];
        if (side ? r1 + want > T : want > r0) {
          st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: rank %d asks for %zu frames "
                                  "beyond the sequence", r, want);
          break;
        }
        const size_t g0 = side ? r1 : r0 - want, g1 = g0 + want;
        for (int o = 0; o < P && !st; o++) {
          const size_t o0 = c->first[o], o1 = o0 + c->count[o], ko = min3(c->count[o]);
          const size_t a = g0 > o0 ? g0 : o0, b = g1 < o1 ? g1 : o1;
          if (a < b && (o == r || (side ? b - o0 : o1 - a) > ko))
            st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: rank %d asks for frames "
                                    "[%zu, %zu) beyond rank %d's boundary frames", r, a, b, o);
        }
      }
    }
    int n = 0;
    /* sends: requester r's halo ranges, intersected with this rank's frames */
    for (int r = 0; r < P && !st; r++) {
      if (r == me) continue;
      const size_t r0 = c->first[r], r1 = r0 + c->count[r];
      for (int side = 0; side < 2 && !st; side++) {
        const size_t want = (size_t)need[2 * r + side], g0 = side ? r1 : r0 - want, g1 = g0 + want;
        const size_t a = g0 > f0 ? g0 : f0, b = g1 < f1 ? g1 : f1;
        if (a >= b) continue;
        /* r's left halo is this rank's last frames, its right halo this rank's first frames (checked above) */
        const float *src = side ? first : last;
        const size_t idx = side ? a - f0 : a - (f1 - k);
        for (size_t bb = 0; bb < B; bb++)
          MPI_Isend(src + (bb * k + idx) * frame, (int)((b - a) * frame), MPI_FLOAT, r, (int)(2 * bb + (size_t)side),
                    c->comm, &req[n++]);
      }
    }
    /* receives: this rank's halo ranges, from their owners */
    for (int side = 0; side < 2 && !st; side++) {
      const size_t want = side ? nright : nleft, g0 = side ? f1 : f0 - want;
      float *dst = side ? right : left;
      for (int o = 0; o < P; o++) {
        if (o == me) continue;
        const size_t o0 = c->first[o], o1 = o0 + c->count[o];
        const size_t a = g0 > o0 ? g0 : o0, b = g0 + want < o1 ? g0 + want : o1;
        if (a >= b) continue;
        for (size_t bb = 0; bb < B; bb++)
          MPI_Irecv(dst + (bb * want + (a - g0)) * frame, (int)((b - a) * frame), MPI_FLOAT, o,
                    (int)(2 * bb + (size_t)side), c->comm, &req[n++]);
      }
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    st = agree(c, st);
  }
  free(need), free(req);
  c->tm.exchange_ms += now_ms() - t0;
  return st;
}

static camdelta_status reduce(void *user, camdelta_status st, float *x, size_t n) {
  bsp *c = user;
  if ((st = agree_timed(c, st))) return st;
  const double t0 = now_ms();
  float *all = malloc((size_t)c->P * n * 4);
  if (!all) st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "reduce: out of host memory");
  if (!st && n > (size_t)INT_MAX) st = camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "reduce: %zu floats", n);
  if ((st = agree(user, st)) == CAMDELTA_OK) {
    MPI_Allgather(x, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, c->comm);
    for (size_t i = 0; i < n; i++) {
      float acc = 0.0f;
      for (int r = 0; r < c->P; r++) acc += all[(size_t)r * n + i];
      x[i] = acc;
    }
  }
  free(all);
  c->tm.exchange_ms += now_ms() - t0;
  return st;
}

enum { DS_OK, DS_B, DS_T, DS_HS, DS_WS, DS_H, DS_D, DS_PT, DS_PH, DS_PW, DS_CS, DS_STRAT, DS_CIC, DS_ALG, DS_PREC,
       DS_KS, DS_EPS, DS_SAVED, DS_GRADS, DS_COUNT };

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Checks MPI, gathers every rank's descriptor and frame count, checks that the calls match. */
static camdelta_status setup(bsp *c, cd_branch_sp *sp, MPI_Comm comm, const char *op,
                             const camdelta_branch_args *a, int has_saved, int grads) {
  memset(c, 0, sizeof *c);
  memset(sp, 0, sizeof *sp);
  camdelta_set_error(CAMDELTA_OK, "%s", "");
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: MPI is not initialised", op);
  if (comm == MPI_COMM_NULL)
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'comm' is MPI_COMM_NULL", op);
  c->comm = comm;
  MPI_Comm_size(comm, &c->P);
  MPI_Comm_rank(comm, &c->rank);
  camdelta_status st = CAMDELTA_OK;
  if (!a) st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'args' is NULL", op);
  else if (!a->T)
    st = camdelta_set_error(CAMDELTA_ERROR_SHAPE, "%s: T=0 (each rank must hold at least one frame)", op);
  int64_t d[DS_COUNT] = {0};
  if (!st) {
    const int64_t v[DS_COUNT] = {1, (int64_t)a->B, (int64_t)a->T, (int64_t)a->Hs, (int64_t)a->Ws, (int64_t)a->H,
                                 (int64_t)a->D, (int64_t)a->pt, (int64_t)a->ph, (int64_t)a->pw,
                                 (int64_t)a->chunking.chunk_size, (int64_t)a->chunking.strategy,
                                 (int64_t)a->chunking.chunk_index_count, (int64_t)a->algorithm,
                                 (int64_t)a->precision, fbits(a->k_scale), fbits(a->norm_eps), has_saved, grads};
    memcpy(d, v, sizeof d);
  }
  int64_t *all = malloc((size_t)c->P * DS_COUNT * sizeof *all);
  c->first = malloc((size_t)c->P * sizeof *c->first);
  c->count = malloc((size_t)c->P * sizeof *c->count);
  int ok = all && c->first && c->count, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (!all_ok) {
    free(all);
    return agree(c, camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op));
  }
  MPI_Allgather(d, DS_COUNT, MPI_INT64_T, all, DS_COUNT, MPI_INT64_T, comm);
  size_t T = 0;
  for (int r = 0; r < c->P && !st; r++) {
    const int64_t *o = all + (size_t)r * DS_COUNT;
    if (!o[DS_OK]) continue; /* that rank reports its own failure */
    for (int i = DS_B; i < DS_COUNT; i++)
      if (i != DS_T && o[i] != d[i]) {
        st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT,
                                "%s: rank %d and rank %d differ in %s (every rank must pass the same shape, chunking, "
                                "k_scale, norm_eps, algorithm, precision, and the same saved/gradient buffers present)",
                                op, r, c->rank,
                                i <= DS_PW    ? "shape or patch"
                                : i <= DS_CIC ? "chunking"
                                : i <= DS_EPS ? "algorithm, precision, k_scale or norm_eps"
                                : i == DS_SAVED ? "whether 'saved' is passed"
                                                : "which gradients are asked for");
        break;
      }
    c->first[r] = T, c->count[r] = (size_t)o[DS_T], T += (size_t)o[DS_T];
  }
  free(all);
  st = agree(c, st);
  if (st) return st;
  sp->T_global = T, sp->f0 = c->first[c->rank], sp->user = c;
  sp->agree = agree, sp->scan_forward = scan_forward, sp->scan_backward = scan_backward, sp->halo = halo;
  sp->reduce = reduce;
  return CAMDELTA_OK;
}

static void cleanup(bsp *c) {
  free(c->first), free(c->count);
  c->first = c->count = NULL;
}

/* The call's timing from the sums of its hooks: what is neither waiting nor exchanging is local compute. */
static void put_timing(bsp *c, double t0, camdelta_mpi_timing *timing) {
  if (!timing) return;
  *timing = c->tm;
  timing->total_ms = now_ms() - t0;
  timing->scan_ms = timing->total_ms - timing->summary_ms - timing->wait_ms - timing->exchange_ms - timing->combine_ms;
  timing->compute_ms = timing->summary_ms + timing->combine_ms + timing->scan_ms;
}

camdelta_status camdelta_mpi_branch_forward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                  camdelta_branch_saved *saved, MPI_Comm comm,
                                                  camdelta_mpi_timing *timing) {
  const double t0 = now_ms();
  if (timing) memset(timing, 0, sizeof *timing);
  bsp c;
  cd_branch_sp sp;
  camdelta_status st = setup(&c, &sp, comm, "camdelta_mpi_branch_forward", args, saved != NULL, 0);
  if (!st) {
    st = camdelta_branch_sp_forward(ctx, args, saved, &sp);
    st = agree(&c, st ? st : camdelta_finish(ctx)); /* every rank that passed the setup agrees once more */
  }
  if (!st) put_timing(&c, t0, timing);
  cleanup(&c);
  return st;
}

camdelta_status camdelta_mpi_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                            camdelta_branch_saved *saved, MPI_Comm comm) {
  return camdelta_mpi_branch_forward_timed(ctx, args, saved, comm, NULL);
}

camdelta_status camdelta_mpi_branch_backward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                   const camdelta_branch_grads *grads,
                                                   const camdelta_branch_saved *saved, MPI_Comm comm,
                                                   camdelta_mpi_timing *timing) {
  const double t0 = now_ms();
  if (timing) memset(timing, 0, sizeof *timing);
  int mask = 0;
  if (grads) {
    const camdelta_buffer b[8] = {grads->dq_raw,         grads->dk_raw,         grads->dv_raw, grads->dconv_weight,
                                  grads->dq_norm_weight, grads->dk_norm_weight, grads->dbeta,  grads->ddecay};
    for (int i = 0; i < 8; i++) mask |= (b[i].mem != NULL) << i;
  }
  bsp c;
  cd_branch_sp sp;
  camdelta_status st = setup(&c, &sp, comm, "camdelta_mpi_branch_backward", args, saved != NULL, mask);
  if (!st) {
    st = camdelta_branch_sp_backward(ctx, args, grads, saved, &sp);
    st = agree(&c, st ? st : camdelta_finish(ctx)); /* every rank that passed the setup agrees once more */
  }
  if (!st) put_timing(&c, t0, timing);
  cleanup(&c);
  return st;
}

camdelta_status camdelta_mpi_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                             const camdelta_branch_grads *grads, const camdelta_branch_saved *saved,
                                             MPI_Comm comm) {
  return camdelta_mpi_branch_backward_timed(ctx, args, grads, saved, comm, NULL);
}
