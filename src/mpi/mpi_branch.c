/* The whole camera branch over MPI (include/camdelta_mpi.h): each rank holds a contiguous share of every
 * sequence's frames. It runs the branch on its part of the sequence (camdelta_branch_run_forward / _backward,
 * include/camdelta_phases.h: the chunking of the whole sequence, masks and conv segments and RoPE angles from the
 * sequence's frame indices) and provides what the run asks for between its stages:
 *   - the two scans and their backward: camdelta_mpi_scan_forward / _backward (D x D summaries only; the
 *     chunk-masked reverse scan needs nothing more: a frame whose beta'_r and decay_r are zero drops its
 *     incoming state, so its chaining across ranks is that of one device);
 *   - the short conv's halo: up to 3 raw K frames (forward) or dk_conv frames (backward) on each side, only those
 *     the conv reads; the ranks all-gather how many frames each needs on each side, then each owner sends exactly
 *     those frames to their requester, device to device through pinned staging, point to point and pipelined in
 *     chunks (cd_xfer; a halo may span several ranks when ranks hold fewer than 3 frames), into the run's extended
 *     frames;
 *   - sums over all frames (dconv_weight, dq_norm_weight, dk_norm_weight): each rank's partial is all-gathered
 *     and summed in rank order, so every rank holds the same bits run to run.
 * The ranks agree on a status after every stage of the run, so all ranks return the same status and no rank
 * waits in a collective that another one skipped. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "camdelta_helpers.h"
#include "camdelta_mpi.h"
#include "camdelta_phases.h"
#include "mpi/mpi_agree.h"
#include "mpi/mpi_stage.h"

typedef struct bsp {
  MPI_Comm comm;
  int P, rank;
  size_t *first, *count; /* every rank's frames */
  camdelta_mpi_timing tm; /* summed over the call's scans, halos and reductions (see camdelta_mpi.h) */
  cd_stage *stg;          /* the communicator's staging (mpi_stage.h), from the first exchange that needs it */
} bsp;

static double now_ms(void) { return cd_mpi_now_ms(); }

static void add_scan(bsp *c, const camdelta_mpi_timing *t) {
  c->tm.summary_ms += t->summary_ms, c->tm.wait_ms += t->wait_ms, c->tm.exchange_ms += t->exchange_ms;
  c->tm.combine_ms += t->combine_ms;
  c->tm.d2h_ms += t->d2h_ms, c->tm.mpi_ms += t->mpi_ms, c->tm.h2d_ms += t->h2d_ms;
}

static camdelta_status agree(const bsp *c, camdelta_status st) { return cd_mpi_agree(c->comm, c->rank, c->P, st); }

/* The agreement after each stage of the run: the wait for the other ranks. */
static camdelta_status agree_timed(bsp *c, camdelta_status st) {
  const double t0 = now_ms();
  st = agree(c, st);
  c->tm.wait_ms += now_ms() - t0;
  return st;
}

static size_t min3(size_t n) { return n < 3 ? n : 3; }

static camdelta_status stage(bsp *c, camdelta_context *ctx) {
  return c->stg ? CAMDELTA_OK : cd_stage_get(c->comm, ctx, &c->stg);
}

/* The halo, point to point through pinned staging (cd_xfer): every rank's wants are all-gathered (with its
 * status), then each rank sends every requester exactly the frames of its own that the requester wants (one region
 * per batch and side; they lie in its first or last min(3, F) frames, which the run's extended frames hold at
 * [at, at + T)) and receives its own halo from their owners straight into its extended frames. */
enum { HW_ST, HW_LEFT, HW_RIGHT, HW_N };

static camdelta_status halo(bsp *c, camdelta_context *ctx, const camdelta_branch_request *rq) {
  const int P = c->P, me = c->rank;
  const size_t B = rq->halo_batches, fs = rq->halo_floats, Te = rq->halo_frames, nl = rq->halo_at;
  const size_t want_left = rq->halo_before, want_right = rq->halo_after, T = c->count[me];
  const size_t f0 = c->first[me], f1 = f0 + T, e0 = f0 - nl;
  cl_mem ext = rq->halo;
  int64_t *need = NULL;
  camdelta_status st = stage(c, ctx);
  if (!st && (nl > f0 || want_left > nl || Te < nl + T || want_right > Te - nl - T))
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "halo: internal: %zu/%zu/%zu frames", nl, want_left,
                            want_right);
  if (!st && !(need = cd_stage_arr(c->stg, CD_ARR_LAYOUT, (size_t)P * HW_N * sizeof *need)))
    st = CAMDELTA_ERROR_OUT_OF_MEMORY;
  /* the wants and statuses of every rank */
  const double tw = now_ms();
  int64_t mine[HW_N] = {st, (int64_t)want_left, (int64_t)want_right};
  int ok = need != NULL, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm);
  if (!all_ok) {
    c->tm.wait_ms += now_ms() - tw;
    return agree(c, ok ? CAMDELTA_OK : st ? st : CAMDELTA_ERROR_OUT_OF_MEMORY);
  }
  MPI_Allgather(mine, HW_N, MPI_INT64_T, need, HW_N, MPI_INT64_T, c->comm);
  const double t0 = now_ms();
  c->tm.wait_ms += t0 - tw;
  int bad = 0;
  for (int r = 0; r < P; r++) bad |= need[(size_t)r * HW_N + HW_ST] != 0;
  if (bad) return agree(c, st);
  size_t Tg = 0;
  for (int r = 0; r < P; r++) Tg = c->first[r] + c->count[r] > Tg ? c->first[r] + c->count[r] : Tg;
  /* every rank checks every request the same way (same data), so all go on or none does */
  for (int r = 0; r < P && !st; r++) {
    const size_t r0 = c->first[r], r1 = r0 + c->count[r];
    for (int side = 0; side < 2 && !st; side++) {
      const size_t want = (size_t)need[(size_t)r * HW_N + HW_LEFT + side];
      if (want > 3 || (side ? r1 + want > Tg : want > r0)) {
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
  /* the lists: sources and messages by requester, side, batch; receipts by side, owner, batch (the same order for
   * every pair of ranks) */
  const size_t most = (size_t)P * 2 * B;
  void *mem = st ? NULL : cd_stage_arr(c->stg, CD_ARR_LIST, most * (sizeof(cd_xregion) + sizeof(cd_xsend) +
                                                                    sizeof(cd_xrecv)));
  if (!st && !mem) st = CAMDELTA_ERROR_OUT_OF_MEMORY;
  cd_xfer xf;
  memset(&xf, 0, sizeof xf);
  if (!st) {
    cd_xregion *src = mem;
    cd_xsend *snd = (cd_xsend *)(src + most);
    cd_xrecv *rcv = (cd_xrecv *)(snd + most);
    int ns = 0, nr = 0;
    for (int r = 0; r < P; r++) {
      if (r == me) continue;
      const size_t r0 = c->first[r], r1 = r0 + c->count[r];
      for (int side = 0; side < 2; side++) {
        const size_t want = (size_t)need[(size_t)r * HW_N + HW_LEFT + side], g0 = side ? r1 : r0 - want;
        const size_t a = g0 > f0 ? g0 : f0, b = g0 + want < f1 ? g0 + want : f1;
        if (a >= b) continue;
        for (size_t bb = 0; bb < B; bb++) {
          src[ns] = (cd_xregion){ext, (bb * Te + nl + (a - f0)) * fs * 4, (b - a) * fs * 4};
          snd[ns] = (cd_xsend){ns, r};
          ns++;
        }
      }
    }
    for (int side = 0; side < 2; side++) {
      const size_t want = side ? want_right : want_left, g0 = side ? f1 : f0 - want;
      for (int o = 0; o < P; o++) {
        if (o == me) continue;
        const size_t o0 = c->first[o], o1 = o0 + c->count[o];
        const size_t a = g0 > o0 ? g0 : o0, b = g0 + want < o1 ? g0 + want : o1;
        if (a >= b) continue;
        for (size_t bb = 0; bb < B; bb++)
          rcv[nr++] = (cd_xrecv){{ext, (bb * Te + (a - e0)) * fs * 4, (b - a) * fs * 4}, o};
      }
    }
    xf.s = c->stg, xf.ctx = ctx, xf.comm = c->comm, xf.host_send = CD_HOST_HALO_SEND;
    xf.host_recv = CD_HOST_HALO_RECV, xf.src = src, xf.nsrc = ns, xf.send = snd, xf.nsend = ns, xf.recv = rcv;
    xf.nrecv = nr;
    st = cd_xfer_begin(&xf);
  }
  st = agree(c, st);
  cd_xtime xt = {0, 0, 0};
  if (!st) st = cd_xfer_end(&xf, &xt);
  else cd_xfer_abandon(&xf);
  st = agree(c, st);
  /* legs: the reads (their enqueueing and wait) d2h; the writes still running after the last message h2d; the
   * rest (the lists, the agreements, the messages) mpi */
  const double total = now_ms() - t0;
  c->tm.exchange_ms += total, c->tm.d2h_ms += xt.d2h_ms, c->tm.h2d_ms += xt.h2d_ms;
  c->tm.mpi_ms += total - xt.d2h_ms - xt.h2d_ms;
  return st;
}

/* dst <- the sum over the ranks of src (n floats), in rank order: each rank's partial to pinned memory, all-gathered,
 * summed on the host, written back. */
static camdelta_status reduce(bsp *c, camdelta_context *ctx, camdelta_buffer src, camdelta_buffer dst, size_t n) {
  camdelta_status st = CAMDELTA_OK;
  float *h = NULL;
  const cl_command_queue q = camdelta_context_queue(ctx);
  if (!st) st = stage(c, ctx);
  if (!st && n > (size_t)INT_MAX) st = camdelta_set_error(CAMDELTA_ERROR_OVERFLOW, "reduce: %zu floats", n);
  if (!st) st = cd_stage_host(c->stg, CD_HOST_SMALL, ((size_t)c->P + 1) * n * 4, &h);
  cl_event rd = NULL;
  if (!st) { /* the kernels that make src, as local compute */
    const cl_int err = clFinish(q);
    if (err != CL_SUCCESS) st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "reduce: %s", camdelta_cl_error_name(err));
  }
  const double t0 = now_ms();
  if (!st) {
    const cl_int err = clEnqueueReadBuffer(q, src.mem, CL_FALSE, src.offset * 4, n * 4, h + (size_t)c->P * n, 0,
                                           NULL, &rd);
    if (err != CL_SUCCESS)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "reduce: reading: %s", camdelta_cl_error_name(err));
    else clFlush(q);
  }
  const double tr = now_ms();
  if ((st = agree_timed(c, st))) {
    if (rd) clWaitForEvents(1, &rd), clReleaseEvent(rd);
    return st;
  }
  const double t1 = now_ms();
  cl_int err = clWaitForEvents(1, &rd);
  clReleaseEvent(rd);
  const double t2 = now_ms();
  if (err != CL_SUCCESS)
    st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "reduce: reading: %s", camdelta_cl_error_name(err));
  MPI_Allgather(h + (size_t)c->P * n, (int)n, MPI_FLOAT, h, (int)n, MPI_FLOAT, c->comm);
  for (size_t i = 0; i < n; i++) {
    float acc = 0.0f;
    for (int r = 0; r < c->P; r++) acc += h[(size_t)r * n + i];
    h[(size_t)c->P * n + i] = acc;
  }
  const double t3 = now_ms();
  err = clEnqueueWriteBuffer(q, dst.mem, CL_TRUE, dst.offset * 4, n * 4, h + (size_t)c->P * n, 0, NULL, NULL);
  if (!st && err != CL_SUCCESS)
    st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "reduce: writing: %s", camdelta_cl_error_name(err));
  st = agree(c, st);
  const double t4 = now_ms();
  c->tm.exchange_ms += (tr - t0) + (t4 - t1);
  c->tm.d2h_ms += (tr - t0) + (t2 - t1), c->tm.mpi_ms += t3 - t2, c->tm.h2d_ms += t4 - t3;
  /* the wait was counted by agree_timed from tr; the enqueueing before it is exchange */
  return st;
}

enum { DS_OK, DS_B, DS_T, DS_HS, DS_WS, DS_H, DS_D, DS_PT, DS_PH, DS_PW, DS_CS, DS_STRAT, DS_CIC, DS_ALG, DS_PREC,
       DS_KS, DS_EPS, DS_SAVED, DS_GRADS, DS_CHUNK, DS_COUNT };

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Checks MPI, gathers every rank's descriptor and frame count, checks that the calls match. */
static camdelta_status setup(bsp *c, camdelta_branch_part *part, MPI_Comm comm, const char *op,
                             const camdelta_branch_args *a, int has_saved, int grads) {
  memset(c, 0, sizeof *c);
  memset(part, 0, sizeof *part);
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
  else if (!cd_xfer_chunk())
    st = camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s", op, cd_xfer_chunk_error());
  int64_t d[DS_COUNT] = {0};
  if (!st) {
    const int64_t v[DS_COUNT] = {1, (int64_t)a->B, (int64_t)a->T, (int64_t)a->Hs, (int64_t)a->Ws, (int64_t)a->H,
                                 (int64_t)a->D, (int64_t)a->pt, (int64_t)a->ph, (int64_t)a->pw,
                                 (int64_t)a->chunking.chunk_size, (int64_t)a->chunking.strategy,
                                 (int64_t)a->chunking.chunk_index_count, (int64_t)a->algorithm,
                                 (int64_t)a->precision, fbits(a->k_scale), fbits(a->norm_eps), has_saved, grads,
                                 (int64_t)cd_xfer_chunk()};
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
                                : i == DS_GRADS ? "which gradients are asked for"
                                                : "the transfers' chunk size (CAMDELTA_SP_CHUNK_BYTES)");
        break;
      }
    c->first[r] = T, c->count[r] = (size_t)o[DS_T], T += (size_t)o[DS_T];
  }
  free(all);
  st = agree(c, st);
  if (st) return st;
  part->frames = T, part->first = c->first[c->rank];
  return CAMDELTA_OK;
}

static void cleanup(bsp *c) {
  free(c->first), free(c->count);
  c->first = c->count = NULL;
}

/* Runs this rank's part of a branch call (`run`, created with status st) to its end, providing what it asks for
 * between its stages; collective: the ranks agree after every stage. */
static camdelta_status drive(bsp *c, camdelta_context *ctx, camdelta_branch_run *run, camdelta_status st) {
  for (;;) {
    camdelta_branch_request rq;
    memset(&rq, 0, sizeof rq);
    if (!st) st = camdelta_branch_run_next(run, &rq);
    /* the stage's device work ends here, as local compute, before the exchange it needs */
    if (!st && (rq.need == CAMDELTA_BRANCH_NEED_HALO || rq.need == CAMDELTA_BRANCH_NEED_SUM)) st = camdelta_finish(ctx);
    st = agree_timed(c, st);
    if (st || rq.need == CAMDELTA_BRANCH_NEED_NOTHING) return st;
    camdelta_mpi_timing t;
    switch (rq.need) {
      case CAMDELTA_BRANCH_NEED_HALO: st = halo(c, ctx, &rq); break;
      case CAMDELTA_BRANCH_NEED_SCAN_FORWARD:
        if (!(st = camdelta_mpi_scan_forward(ctx, &rq.scan, rq.saved, c->comm, &t))) add_scan(c, &t);
        break;
      case CAMDELTA_BRANCH_NEED_SCAN_BACKWARD:
        if (!(st = camdelta_mpi_scan_backward(ctx, &rq.scan_backward, rq.saved_backward, c->comm, &t)))
          add_scan(c, &t);
        break;
      case CAMDELTA_BRANCH_NEED_SUM: st = reduce(c, ctx, rq.sum_src, rq.sum_dst, rq.sum_n); break;
      default:
        st = agree(c, camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "branch run: unknown need %d", (int)rq.need));
    }
  }
}

/* The call's timing from the sums of its exchanges: what is neither waiting nor exchanging is local compute. */
static void put_timing(bsp *c, double t0, camdelta_mpi_timing *timing) {
  if (!timing) return;
  *timing = c->tm;
  timing->total_ms = now_ms() - t0;
  timing->scan_ms = timing->total_ms - timing->summary_ms - timing->wait_ms - timing->exchange_ms - timing->combine_ms;
  timing->compute_ms = timing->summary_ms + timing->combine_ms + timing->scan_ms;
}

/* Either direction: the setup (the forward writing saved_out, or the backward with the gradients `grads` of
 * `mask`), this rank's part run through the exchanges, the ranks' agreement and the timing. */
static camdelta_status run_branch(camdelta_context *ctx, int backward, const camdelta_branch_args *args,
                                  const camdelta_branch_grads *grads, camdelta_branch_saved *saved_out,
                                  const camdelta_branch_saved *saved, int mask, MPI_Comm comm,
                                  camdelta_mpi_timing *timing) {
  const double t0 = now_ms();
  if (timing) memset(timing, 0, sizeof *timing);
  bsp c;
  camdelta_branch_part part;
  const char *op = backward ? "camdelta_mpi_branch_backward" : "camdelta_mpi_branch_forward";
  camdelta_status st = setup(&c, &part, comm, op, args, saved != NULL, mask);
  if (!st) {
    camdelta_branch_run *run = NULL;
    st = backward ? camdelta_branch_run_backward(ctx, args, grads, saved, &part, &run)
               : camdelta_branch_run_forward(ctx, args, saved_out, &part, &run);
    st = drive(&c, ctx, run, st);
    camdelta_branch_run_destroy(run);
    st = agree(&c, st ? st : camdelta_finish(ctx)); /* every rank that passed the setup agrees once more */
  }
  if (!st) put_timing(&c, t0, timing);
  cleanup(&c);
  return st;
}

camdelta_status camdelta_mpi_branch_forward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                  camdelta_branch_saved *saved, MPI_Comm comm,
                                                  camdelta_mpi_timing *timing) {
  return run_branch(ctx, 0, args, NULL, saved, saved, 0, comm, timing);
}

camdelta_status camdelta_mpi_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                            camdelta_branch_saved *saved, MPI_Comm comm) {
  return camdelta_mpi_branch_forward_timed(ctx, args, saved, comm, NULL);
}

camdelta_status camdelta_mpi_branch_backward_timed(camdelta_context *ctx, const camdelta_branch_args *args,
                                                   const camdelta_branch_grads *grads,
                                                   const camdelta_branch_saved *saved, MPI_Comm comm,
                                                   camdelta_mpi_timing *timing) {
  int mask = 0;
  if (grads) {
    const camdelta_buffer b[8] = {grads->dq_raw,         grads->dk_raw,         grads->dv_raw, grads->dconv_weight,
                                  grads->dq_norm_weight, grads->dk_norm_weight, grads->dbeta,  grads->ddecay};
    for (int i = 0; i < 8; i++) mask |= (b[i].mem != NULL) << i;
  }
  return run_branch(ctx, 1, args, grads, NULL, saved, mask, comm, timing);
}

camdelta_status camdelta_mpi_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                             const camdelta_branch_grads *grads, const camdelta_branch_saved *saved,
                                             MPI_Comm comm) {
  return camdelta_mpi_branch_backward_timed(ctx, args, grads, saved, comm, NULL);
}
