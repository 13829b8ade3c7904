/* The whole camera branch over MPI (include/camdelta_mpi.h): each rank holds a contiguous share of every
 * sequence's frames. The single-device branch (src/ops/branch.c) runs on the rank's frames with the chunking of
 * the whole sequence (masks and conv segments from global frame indices, RoPE angles from global frame
 * indices) and reaches the other ranks through the hooks of src/ops/branch_sp.h, implemented here:
 *   - the two scans and their backward: camdelta_mpi_scan_forward / _backward (D x D summaries only; the
 *     chunk-masked reverse scan needs nothing more: a frame whose beta'_r and decay_r are zero drops its
 *     incoming state, so its chaining across ranks is that of one device);
 *   - the short conv's halo: up to 3 raw K frames (forward) or dk_conv frames (backward) on each side; every
 *     rank contributes its first and last min(3, F) frames to one MPI_Allgatherv and takes the frames it needs
 *     from their owners (a halo may span several ranks when ranks hold fewer than 3 frames);
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

static camdelta_status halo(void *user, camdelta_status st, size_t B, size_t frame, const float *first,
                            size_t nfirst, const float *last, size_t nlast, float *left, size_t nleft, float *right,
                            size_t nright) {
  bsp *c = user;
  if ((st = agree_timed(c, st))) return st;
  const double t0 = now_ms();
  const int P = c->P;
  int *counts = malloc((size_t)P * sizeof *counts), *displs = malloc((size_t)P * sizeof *displs);
  size_t total = 0, *at = malloc((size_t)P * sizeof *at);
  if (!counts || !displs || !at) st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "halo: out of host memory");
  for (int r = 0; r < P && !st; r++) {
    const size_t n = 2 * B * min3(c->count[r]) * frame;
    if (n > (size_t)INT_MAX || total > (size_t)INT_MAX - n)
      st = camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "halo: %zu floats exceed MPI's int counts", total + n);
    else
      counts[r] = (int)n, displs[r] = (int)total, at[r] = total, total += n;
  }
  float *send = NULL, *recv = NULL;
  const size_t mine = 2 * B * min3(c->count[c->rank]) * frame;
  if (!st && (nfirst != min3(c->count[c->rank]) || nlast != nfirst))
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: %zu/%zu boundary frames", nfirst, nlast);
  if (!st && (!(send = malloc(mine * 4 + 4)) || !(recv = malloc(total * 4 + 4))))
    st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "halo: out of host memory");
  if ((st = agree(user, st)) == CAMDELTA_OK) {
    memcpy(send, first, B * nfirst * frame * 4);
    memcpy(send + B * nfirst * frame, last, B * nlast * frame * 4);
    MPI_Allgatherv(send, (int)mine, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, c->comm);
    const size_t f0 = c->first[c->rank], f1 = f0 + c->count[c->rank];
    /* global frame gf of batch b -> dst frame i of n */
    for (int side = 0; side < 2; side++) {
      const size_t n = side ? nright : nleft, g0 = side ? f1 : f0 - nleft;
      float *dst = side ? right : left;
      for (size_t i = 0; i < n; i++) {
        const size_t gf = g0 + i;
        int r = 0;
        while (r < P - 1 && gf >= c->first[r] + c->count[r]) r++;
        const size_t k = min3(c->count[r]);
        /* left halo: in the owner's last k frames; right halo: in its first k */
        const size_t idx = side ? gf - c->first[r] : gf - (c->first[r] + c->count[r] - k);
        const float *src = recv + at[r] + (side ? 0 : B * k * frame);
        for (size_t b = 0; b < B; b++) memcpy(dst + (b * n + i) * frame, src + (b * k + idx) * frame, frame * 4);
      }
    }
  }
  free(counts), free(displs), free(at), free(send), free(recv);
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
