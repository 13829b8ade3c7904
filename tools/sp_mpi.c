/* Sequence parallelism in the tool: MPI and the frame shares (tools/sp_mpi.h). */
#include "sp_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_sp_requested(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--sequence-parallel") == 0) return 1;
  return 0;
}

int sp_no_mpi(void) {
  return cli_error(CLI_EXIT_USAGE, "--sequence-parallel: this camdelta was built without MPI (install an MPI, e.g. "
                                   "Debian's libopenmpi-dev, and rebuild)");
}

#ifdef CAMDELTA_WITH_MPI

#include <time.h>

int sp_rank, sp_size;
static int g_we_init; /* MPI_Init was ours: MPI_Finalize is too */

#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define CLI_ASAN 1
#elif defined(__has_feature) /* clang */
#if __has_feature(address_sanitizer)
#define CLI_ASAN 1
#endif
#endif
#ifdef CLI_ASAN
/* Under AddressSanitizer (ci/test.sh --sanitize): MPI_Init loads Open MPI's plugins and unloads those it does not
 * select, so allocations they keep until exit show an unloaded module as their first frame; the slow unwinder
 * reaches their callers in libmpi and libopen-pal, which ci/lsan.supp names. LSAN_OPTIONS still overrides it. */
__attribute__((visibility("default"))) const char *__lsan_default_options(void);
__attribute__((visibility("default"))) const char *__lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }
#endif

int sp_init(void) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return cli_error(CLI_EXIT_FAILURE, "MPI_Init failed");
    g_we_init = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &sp_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &sp_size);
  return CLI_EXIT_OK;
}

/* The worst exit code over the ranks. */
int sp_agree(int rc) {
  int all = rc;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

/* The end of a command: the worst exit code over the ranks, MPI finalised; before MPI started (an option or input
 * refused at once, alike on every rank: they read the same files), rc as it is. */
int sp_end(int rc) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return rc;
  rc = sp_agree(rc);
  if (g_we_init) MPI_Finalize();
  return rc;
}

/* The context on `selector` with "{local_rank}" replaced by the rank's index on its node. */
int sp_context(camdelta_context **ctx, const char *selector) {
  char sel[512];
  const char *use = selector;
  const char *at = selector ? strstr(selector, "{local_rank}") : NULL;
  if (at) {
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, sp_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    snprintf(sel, sizeof sel, "%.*s%d%s", (int)(at - selector), selector, local, at + strlen("{local_rank}"));
    use = sel;
  }
  return cli_context(ctx, use);
}

double sp_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int sp_upload(camdelta_context *ctx, const float *x, size_t n, cl_mem *out) {
  cl_int err;
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | (x ? CL_MEM_COPY_HOST_PTR : 0),
                        n ? n * 4 : 4, (void *)x, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "allocating %zu bytes on the device: %s", n * 4, camdelta_cl_error_name(err));
  }
  return CLI_EXIT_OK;
}

int sp_download(camdelta_context *ctx, cl_mem m, size_t n, float **out) {
  *out = malloc(n ? n * 4 : 4);
  if (!*out) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  cl_int err = clEnqueueReadBuffer(camdelta_context_queue(ctx), m, CL_TRUE, 0, n * 4, *out, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    free(*out), *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "reading a result from the device: %s", camdelta_cl_error_name(err));
  }
  return CLI_EXIT_OK;
}

/* max |x − ref| / max |ref| of this rank's share: the rows x lc array in m against columns [c0, c0 + lc) of the
 * rows x cols reference; INFINITY when m cannot be read or a difference is NaN. */
double sp_share_error(camdelta_context *ctx, cl_mem m, const float *ref, size_t rows, size_t cols, size_t lc,
                          size_t c0) {
  float *x = NULL;
  double mref = 0, md = 0;
  if (sp_download(ctx, m, rows * lc, &x)) {
    md = INFINITY;
  } else {
    for (size_t j = 0; j < rows * cols; j++) mref = fmax(mref, fabs(ref[j]));
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < lc; c++) {
        const double d = fabs((double)x[r * lc + c] - ref[r * cols + c0 + c]);
        md = isnan(d) ? INFINITY : fmax(md, d);
      }
  }
  free(x);
  return md / fmax(mref, 1e-30);
}

/* rows x [c0, c0 + cl) of a rows x cols array (malloc'd) */
float *sp_slice(const float *x, size_t rows, size_t cols, size_t c0, size_t cl) {
  float *y = malloc(rows * cl * 4 + 4);
  if (y)
    for (size_t r = 0; r < rows; r++) memcpy(y + r * cl, x + r * cols + c0, cl * 4);
  return y;
}

/* Rank 0 receives every rank's rows x (frames·unit) block into the full rows x (F·unit) array (others get NULL). */
int sp_gather_cols(const float *local, size_t rows, size_t F, size_t unit, float **full) {
  *full = NULL;
  size_t f0, fl;
  camdelta_mpi_frame_share(F, sp_size, sp_rank, &f0, &fl);
  const size_t mine = rows * fl * unit;
  /* every rank judges every share alike, so that none waits for a message another will never send */
  for (int r = 0; r < sp_size; r++) {
    size_t r0, rl, n;
    camdelta_mpi_frame_share(F, sp_size, r, &r0, &rl);
    if (!camdelta_size_prod(&n, 3, (const size_t[]){rows, rl, unit}) || n > (size_t)2147483647)
      return cli_error(CLI_EXIT_INPUT, "rank %d's share of an output exceeds 2^31-1 elements (one MPI message)", r);
  }
  if (sp_rank != 0) {
    MPI_Send(local, (int)mine, MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
    return CLI_EXIT_OK;
  }
  float *all = malloc(rows * F * unit * 4 + 4), *buf = NULL;
  if (!all) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  for (int r = 0; r < sp_size; r++) {
    size_t r0, rl;
    camdelta_mpi_frame_share(F, sp_size, r, &r0, &rl);
    const float *blk = local;
    if (r > 0) {
      free(buf);
      buf = malloc(rows * rl * unit * 4 + 4);
      if (!buf) {
        free(all);
        return cli_error(CLI_EXIT_FAILURE, "out of host memory");
      }
      MPI_Recv(buf, (int)(rows * rl * unit), MPI_FLOAT, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      blk = buf;
    }
    for (size_t row = 0; row < rows; row++)
      memcpy(all + row * F * unit + r0 * unit, blk + row * rl * unit, rl * unit * 4);
  }
  free(buf);
  *full = all;
  return CLI_EXIT_OK;
}

#endif /* CAMDELTA_WITH_MPI */
