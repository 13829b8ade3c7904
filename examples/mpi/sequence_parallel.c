/* Sequence parallelism with camdelta_mpi: one causal sequence of F frames split over the ranks of
 * MPI_COMM_WORLD (rank r takes frames [F·r/P, F·(r+1)/P)), the forward with the sequence's final state on every
 * rank, checked on rank 0 against the whole sequence run on one device. Exit status 0 when they agree. */
#include <camdelta_mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 2, D = 16, F = 6, S = 5, N = F * S };

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 16777216.0 * 2.0 - 1.0);
}

static cl_mem upload(camdelta_context *ctx, const float *x, size_t n) {
  cl_int err;
  return clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | (x ? CL_MEM_COPY_HOST_PTR : 0), n * 4,
                        (void *)x, &err);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  camdelta_context *ctx;
  if (camdelta_context_create(&ctx, NULL) != CAMDELTA_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, camdelta_last_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* the whole sequence, the same on every rank: q k v (1, H, D, N), beta (1, H, F, S), decay (1, H, F) */
  static float q[H * D * N], k[H * D * N], v[H * D * N], beta[H * N], decay[H * F];
  unsigned seed = 7;
  for (int i = 0; i < H * D * N; i++) q[i] = frand(&seed), k[i] = 0.1f * frand(&seed), v[i] = frand(&seed);
  for (int i = 0; i < H * N; i++) beta[i] = 0.5f + 0.5f * frand(&seed);
  for (int i = 0; i < H * F; i++) decay[i] = 0.8f + 0.2f * frand(&seed);
  /* this rank's frames */
  size_t f0, nf;
  camdelta_mpi_frame_share(F, ranks, rank, &f0, &nf);
  const size_t n0 = f0 * S, nl = nf * S;
  float *lq = malloc(H * D * nl * 4), *lk = malloc(H * D * nl * 4), *lv = malloc(H * D * nl * 4);
  float *lb = malloc(H * nl * 4), *ld = malloc(H * nf * 4);
  for (size_t r = 0; r < H * D; r++) {
    memcpy(lq + r * nl, q + r * N + n0, nl * 4);
    memcpy(lk + r * nl, k + r * N + n0, nl * 4);
    memcpy(lv + r * nl, v + r * N + n0, nl * 4);
  }
  for (size_t h = 0; h < H; h++) memcpy(lb + h * nl, beta + h * N + n0, nl * 4), memcpy(ld + h * nf, decay + h * F + f0, nf * 4);
  camdelta_scan_args a;
  memset(&a, 0, sizeof a);
  a.B = 1, a.H = H, a.D = D, a.F = nf, a.S = S;
  a.q.mem = upload(ctx, lq, H * D * nl), a.k.mem = upload(ctx, lk, H * D * nl), a.v.mem = upload(ctx, lv, H * D * nl);
  a.beta.mem = upload(ctx, lb, H * nl), a.decay.mem = upload(ctx, ld, H * nf);
  a.out.mem = upload(ctx, NULL, H * D * nl), a.final_state.mem = upload(ctx, NULL, H * D * D);
  camdelta_mpi_timing t;
  camdelta_status st = camdelta_mpi_scan_forward(ctx, &a, NULL, MPI_COMM_WORLD, &t);
  if (st != CAMDELTA_OK) {
    if (rank == 0) fprintf(stderr, "%s: %s\n", camdelta_status_name(st), camdelta_last_message());
    MPI_Finalize();
    return 1;
  }
  float fin[H * D * D], one[H * D * D];
  clEnqueueReadBuffer(camdelta_context_queue(ctx), a.final_state.mem, CL_TRUE, 0, sizeof fin, fin, 0, NULL, NULL);
  int bad = 0;
  if (rank == 0) {
    /* the whole sequence on one device */
    camdelta_scan_args w = a;
    w.F = F;
    w.q.mem = upload(ctx, q, H * D * N), w.k.mem = upload(ctx, k, H * D * N), w.v.mem = upload(ctx, v, H * D * N);
    w.beta.mem = upload(ctx, beta, H * N), w.decay.mem = upload(ctx, decay, H * F);
    w.out.mem = upload(ctx, NULL, H * D * N), w.final_state.mem = upload(ctx, NULL, H * D * D);
    st = camdelta_scan_forward(ctx, &w, NULL);
    clEnqueueReadBuffer(camdelta_context_queue(ctx), w.final_state.mem, CL_TRUE, 0, sizeof one, one, 0, NULL, NULL);
    double md = 0, mr = 0;
    for (int i = 0; i < H * D * D; i++) md = fmax(md, fabs((double)fin[i] - one[i])), mr = fmax(mr, fabs(one[i]));
    bad = st != CAMDELTA_OK || !(md <= 1e-5 * mr);
    printf("%d ranks: final state vs one device: %.2e relative; rank 0 exchanged summaries in %.3f ms (%s)\n", ranks,
           md / mr, t.exchange_ms, bad ? "FAIL" : "ok");
    cl_mem m[7] = {w.q.mem, w.k.mem, w.v.mem, w.beta.mem, w.decay.mem, w.out.mem, w.final_state.mem};
    for (int i = 0; i < 7; i++) clReleaseMemObject(m[i]);
  }
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  cl_mem m[7] = {a.q.mem, a.k.mem, a.v.mem, a.beta.mem, a.decay.mem, a.out.mem, a.final_state.mem};
  for (int i = 0; i < 7; i++) clReleaseMemObject(m[i]);
  free(lq), free(lk), free(lv), free(lb), free(ld);
  camdelta_context_destroy(ctx);
  MPI_Finalize();
  return bad;
}
