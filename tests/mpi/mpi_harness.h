/* What the MPI test programs share (each is one translation unit run under mpirun): the rank, a failure flag,
 * the context, a reproducible generator, CHECK (records a failure) and OK (aborts every rank on a library error),
 * and host/device buffer helpers. */
#ifndef CD_MPI_HARNESS_H
#define CD_MPI_HARNESS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_mpi.h"

static int g_rank, g_size, g_failed;
static camdelta_context *g_ctx;
static uint64_t g_rng;

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      g_failed = 1;                                            \
    }                                                          \
  } while (0)

#define OK(expr)                                                                                     \
  do {                                                                                               \
    camdelta_status st_ = (expr);                                                                    \
    if (st_ != CAMDELTA_OK) {                                                                        \
      fprintf(stderr, "rank %d: %s -> %s: %s\n", g_rank, #expr, camdelta_status_name(st_), camdelta_last_message()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                  \
    }                                                                                                \
  } while (0)

static inline double uni(double lo, double hi) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static inline float *randv(size_t n, double lo, double hi) {
  float *x = malloc(n * 4 + 4);
  if (!x) MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t i = 0; i < n; i++) x[i] = (float)uni(lo, hi);
  return x;
}

static inline cl_mem upload(const float *x, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(g_ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            n ? n * 4 : 4, (void *)x, &err);
  if (err != CL_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
  return m;
}

/* A buffer poisoned with 0xFF bytes (NaN). */
static inline cl_mem poisoned(size_t n) {
  float *p = malloc(n * 4 + 4);
  memset(p, 0xFF, n * 4 + 4);
  cl_mem m = upload(p, n);
  free(p);
  return m;
}

static inline float *download(cl_mem m, size_t n) {
  float *x = malloc(n * 4 + 4);
  if (!x || clEnqueueReadBuffer(camdelta_context_queue(g_ctx), m, CL_TRUE, 0, n * 4, x, 0, NULL, NULL) != CL_SUCCESS)
    MPI_Abort(MPI_COMM_WORLD, 1);
  return x;
}

/* rows × [c0, c0 + cl) of a rows × cols array */
static inline float *slice(const float *x, size_t rows, size_t cols, size_t c0, size_t cl) {
  float *y = malloc(rows * cl * 4 + 4);
  for (size_t r = 0; r < rows; r++) memcpy(y + r * cl, x + r * cols + c0, cl * 4);
  return y;
}

/* The end of a test program: every rank learns whether any failed, rank 0 says PASSED or FAILED; the exit code. */
static inline int finish(void) {
  int failed = g_failed, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  camdelta_context_destroy(g_ctx);
  MPI_Finalize();
  if (g_rank == 0) printf("%s\n", any ? "FAILED" : "PASSED");
  return any ? 1 : 0;
}

#endif
