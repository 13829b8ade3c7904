/* Sequence parallelism in the camdelta tool (docs/math.md §7 and §9), under mpirun:
 *   camdelta run scan|scan-backward --in DIR --out DIR --sequence-parallel [--reverse] ...
 *       every rank reads the inputs, takes its contiguous share of frames (camdelta_mpi_frame_share), runs
 *       camdelta_mpi_scan_forward/backward; rank 0 gathers the shares and writes the same files as a
 *       single-device run.
 *   camdelta demo --sequence-parallel [--shape B,H,D,F,S] [--no-branch]
 *       rank 0 runs the whole sequence on one device, every rank checks its share of the sequence-parallel
 *       forward and backward (both directions) against it; then the same for the whole camera branch forward
 *       and backward (camdelta_mpi_branch_*; grid F x Hs x Ws with Hs·Ws = S, patch 1, uniform chunks).
 *   camdelta bench --sequence-parallel [--shape ...] [--no-branch]
 *       time per rank of the sequence-parallel scan forward and backward and of the branch forward and
 *       backward: local compute, waiting for the other ranks, the exchange (and the summaries, the local rest),
 *       beside the single-device time (rank 0).
 * The tool links camdelta_mpi only when built with MPI (CAMDELTA_WITH_MPI). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "cli_packed.h"
#include "cli_sp.h"

int cli_sp_requested(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--sequence-parallel") == 0) return 1;
  return 0;
}

#ifndef CAMDELTA_WITH_MPI

static int no_mpi(void) {
  return cli_error(CLI_EXIT_USAGE, "--sequence-parallel: this camdelta was built without MPI (install an MPI, e.g. "
                                   "Debian's libopenmpi-dev, and rebuild)");
}
int cmd_run_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return no_mpi();
}
int cmd_demo_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return no_mpi();
}
int cmd_bench_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return no_mpi();
}

#else

#include <cjson/cJSON.h>
#include <mpi.h>
#include <time.h>

#include "camdelta_mpi.h"

static int g_rank, g_size, g_we_init;

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

static int sp_init(void) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return cli_error(CLI_EXIT_FAILURE, "MPI_Init failed");
    g_we_init = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  return CLI_EXIT_OK;
}

/* The worst exit code over the ranks. */
static int agree_rc(int rc) {
  int all = rc;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

/* The end of a command: the worst exit code over the ranks, MPI finalised; before MPI started (an option or input
 * refused at once, alike on every rank: they read the same files), rc as it is. */
static int sp_end(int rc) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return rc;
  rc = agree_rc(rc);
  if (g_we_init) MPI_Finalize();
  return rc;
}

/* The context on `selector` with "{local_rank}" replaced by the rank's index on its node. */
static int sp_context(camdelta_context **ctx, const char *selector) {
  char sel[512];
  const char *use = selector;
  const char *at = selector ? strstr(selector, "{local_rank}") : NULL;
  if (at) {
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    snprintf(sel, sizeof sel, "%.*s%d%s", (int)(at - selector), selector, local, at + strlen("{local_rank}"));
    use = sel;
  }
  return cli_context(ctx, use);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int upload(camdelta_context *ctx, const float *x, size_t n, cl_mem *out) {
  cl_int err;
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | (x ? CL_MEM_COPY_HOST_PTR : 0),
                        n ? n * 4 : 4, (void *)x, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "allocating %zu bytes on the device: %s", n * 4, camdelta_cl_error_name(err));
  }
  return CLI_EXIT_OK;
}

static int download(camdelta_context *ctx, cl_mem m, size_t n, float **out) {
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
static double share_error(camdelta_context *ctx, cl_mem m, const float *ref, size_t rows, size_t cols, size_t lc,
                          size_t c0) {
  float *x = NULL;
  double mref = 0, md = 0;
  if (download(ctx, m, rows * lc, &x)) {
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
static float *slice(const float *x, size_t rows, size_t cols, size_t c0, size_t cl) {
  float *y = malloc(rows * cl * 4 + 4);
  if (y)
    for (size_t r = 0; r < rows; r++) memcpy(y + r * cl, x + r * cols + c0, cl * 4);
  return y;
}

/* Rank 0 receives every rank's rows x (frames·unit) block into the full rows x (F·unit) array (others get NULL). */
static int gather_cols(const float *local, size_t rows, size_t F, size_t unit, float **full) {
  *full = NULL;
  size_t f0, fl;
  camdelta_mpi_frame_share(F, g_size, g_rank, &f0, &fl);
  const size_t mine = rows * fl * unit;
  /* every rank judges every share alike, so that none waits for a message another will never send */
  for (int r = 0; r < g_size; r++) {
    size_t r0, rl, n;
    camdelta_mpi_frame_share(F, g_size, r, &r0, &rl);
    if (!camdelta_size_prod(&n, 3, (const size_t[]){rows, rl, unit}) || n > (size_t)2147483647)
      return cli_error(CLI_EXIT_INPUT, "rank %d's share of an output exceeds 2^31-1 elements (one MPI message)", r);
  }
  if (g_rank != 0) {
    MPI_Send(local, (int)mine, MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
    return CLI_EXIT_OK;
  }
  float *all = malloc(rows * F * unit * 4 + 4), *buf = NULL;
  if (!all) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  for (int r = 0; r < g_size; r++) {
    size_t r0, rl;
    camdelta_mpi_frame_share(F, g_size, r, &r0, &rl);
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

/* ================================================================================================ run */

enum { IN_Q, IN_K, IN_V, IN_BETA, IN_DECAY, IN_GO, IN_INIT, IN_GF, IN_COUNT };

/* An output: name, rows, column unit (S: token columns, 1: frame columns, 0: a whole state), ndim, shape. */
typedef struct sp_out {
  const char *name;
  size_t rows, unit;
  int ndim;
  size_t shape[4];
  cl_mem mem;
} sp_out;

/* an output of rows x (frames x unit) columns (unit 0: rows values, whole), written with the given shape */
static sp_out sp_output(const char *name, size_t rows, size_t unit, int ndim, size_t d0, size_t d1, size_t d2,
                        size_t d3) {
  return (sp_out){.name = name, .rows = rows, .unit = unit, .ndim = ndim, .shape = {d0, d1, d2, d3}, .mem = NULL};
}

/* ---------------------------------------------------------------------------------- run branch over ranks */

/* `camdelta run branch|branch-backward --sequence-parallel`: every rank reads the inputs of the single-device
 * operation, takes its share of frames and runs camdelta_mpi_branch_forward/_backward; rank 0 gathers the
 * shares and writes the same files as one device. */
static int run_branch_sp(int argc, char **argv) {
  const char *op = NULL, *v;
  size_t grid[3] = {0, 0, 0}, patch[3] = {1, 1, 1}, cs = 0;
  int have_grid = 0;
  camdelta_chunk_strategy strategy = CAMDELTA_CHUNK_UNIFORM;
  cli_run_opts c;
  cli_run_opts_init(&c);
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    if (cli_flag(&a, "--sequence-parallel")) continue;
    int r = cli_run_option(&a, &c); /* --help: the usage of run printed */
    if (r == CLI_OPT_TAKEN) continue;
    if (r != CLI_OPT_OTHER) return r == CLI_OPT_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if ((r = cli_value(&a, "--grid", &v))) {
      if (r < 0 || !cli_parse_sizes("--grid", v, 3, grid, "T,Hs,Ws")) return CLI_EXIT_USAGE;
      have_grid = 1;
      continue;
    }
    if ((r = cli_value(&a, "--patch", &v))) {
      if (r < 0 || !cli_parse_patch(v, patch)) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(&a, "--chunk-size", &v))) {
      if (r < 0 || !cli_parse_size("--chunk-size", v, &cs)) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(&a, "--chunk-strategy", &v))) {
      if (r < 0 || !cli_parse_strategy(v, &strategy)) return CLI_EXIT_USAGE;
      continue;
    }
    if (argv[a.i][0] == '-' && argv[a.i][1])
      return cli_error(CLI_EXIT_USAGE, "run --sequence-parallel: option '%s' is not supported by branch and "
                       "branch-backward", argv[a.i]);
    else if (op)
      return cli_error(CLI_EXIT_USAGE, "run: unexpected argument '%s' (the operation is '%s')", argv[a.i], op);
    else op = argv[a.i++];
  }
  if (!op) return cli_error(CLI_EXIT_USAGE, "run --sequence-parallel: missing the operation");
  const char *in = c.in, *outdir = c.out, *device = c.device;
  const int backward = strcmp(op, "branch-backward") == 0, quiet = c.quiet;
  if (!in || !*in) return cli_error(CLI_EXIT_USAGE, "run %s: missing --in DIR", op);
  if (!outdir || !*outdir) return cli_error(CLI_EXIT_USAGE, "run %s: missing --out DIR", op);
  if (!have_grid) return cli_error(CLI_EXIT_USAGE, "run %s: missing --grid T,Hs,Ws", op);
  int rc = CLI_EXIT_OK;
  /* every rank reads and checks the inputs before MPI starts, so that a bad one is refused at once */
  enum { I_Q, I_K, I_V, I_W, I_QW, I_KW, I_CC, I_B, I_D, I_GY, I_N };
  cli_tensor t[I_N], ci;
  memset(t, 0, sizeof t);
  memset(&ci, 0, sizeof ci);
  const size_t T = grid[0], Hs = grid[1], Ws = grid[2];
  size_t B = 0, N = 0, H = 0, D = 0, S = 0;
  rc = cli_tensor_load_f32(&t[I_Q], in, "q_raw", 0, -4, NULL, "(B, N, H, D)");
  if (!rc) {
    const size_t *s = t[I_Q].npy.shape;
    B = s[0], N = s[1], H = s[2], D = s[3];
    rc = cli_check_grid(grid, N, t[I_Q].path); /* then S = Hs*Ws divides N: no overflow */
    if (!rc) S = Hs * Ws;
  }
  const size_t C = H * D, bnhd[4] = {B, N, H, D}, c4[2] = {C, 4}, c1[1] = {C}, bt20[3] = {B, T, 20},
               bhts[4] = {B, H, T, S}, bht[3] = {B, H, T};
  if (!rc) rc = cli_tensor_load_f32(&t[I_K], in, "k_raw", 0, 4, bnhd, "(B, N, H, D)");
  if (!rc) rc = cli_tensor_load_f32(&t[I_V], in, "v_raw", 0, 4, bnhd, "(B, N, H, D)");
  if (!rc) rc = cli_tensor_load_f32(&t[I_W], in, "conv_weight", 0, 2, c4, "(C, 4) with C = H*D");
  if (!rc) rc = cli_tensor_load_f32(&t[I_QW], in, "q_norm_weight", 0, 1, c1, "(C,) with C = H*D");
  if (!rc) rc = cli_tensor_load_f32(&t[I_KW], in, "k_norm_weight", 0, 1, c1, "(C,) with C = H*D");
  if (!rc) rc = cli_tensor_load_f32(&t[I_CC], in, "camera_conditions", 0, 3, bt20, "(B, T, 20) with T from --grid");
  if (!rc) rc = cli_tensor_load_f32(&t[I_B], in, "beta", 0, 4, bhts, "(B, H, T, S) with S = Hs*Ws");
  if (!rc) rc = cli_tensor_load_f32(&t[I_D], in, "decay", 0, 3, bht, "(B, H, T)");
  if (!rc && backward) rc = cli_tensor_load_f32(&t[I_GY], in, "grad_y", 0, 4, bnhd, "(B, N, H, D)");
  camdelta_chunking ch;
  memset(&ch, 0, sizeof ch);
  ch.chunk_size = cs, ch.strategy = strategy;
  if (!rc) rc = cli_tensor_load(&ci, in, "chunk_index", 1, "(K,) <i8");
  if (!rc && ci.present) {
    if (ci.npy.type != CAMDELTA_NPY_I8 || ci.npy.ndim != 1 || ci.npy.count == 0)
      rc = cli_error(CLI_EXIT_INPUT, "%s: expected a non-empty 1-d <i8 array of frame starts", ci.path);
    ch.chunk_index = (const int64_t *)ci.npy.data, ch.chunk_index_count = ci.npy.count;
  }
  if (!rc && (D < 8 || D > 128 || D % 8))
    rc = cli_error(CLI_EXIT_INPUT, "%s: head dim D = %zu unsupported (expected a multiple of 8 in [8, 128])",
                   t[I_Q].path, D);
  camdelta_context *ctx = NULL;
  if (rc || (rc = sp_init())) goto done;
  if (T < (size_t)g_size)
    rc = cli_error(CLI_EXIT_INPUT, "--grid: T = %zu frames cannot be split over %d ranks (every rank needs a frame)",
                   T, g_size);
  if ((rc = agree_rc(rc))) goto done;
  if ((rc = agree_rc(sp_context(&ctx, device)))) goto done;
  {
    size_t f0, fl;
    camdelta_mpi_frame_share(T, g_size, g_rank, &f0, &fl);
    /* rows and per-frame columns of each input (0: whole, not split) */
    const size_t rows[I_N] = {B, B, B, 4 * C, C, C, B, B * H, B * H, B};
    const size_t unit[I_N] = {S * C, S * C, S * C, 0, 0, 0, 20, S, 1, S * C};
    cl_mem m[I_N] = {NULL};
    for (int i = 0; i < I_N && !rc; i++) {
      if (i == I_GY && !backward) continue;
      float *loc = unit[i] ? slice(t[i].npy.data, rows[i], T * unit[i], f0 * unit[i], fl * unit[i]) : NULL;
      if (unit[i] && !loc) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
      if (!rc) rc = upload(ctx, unit[i] ? loc : t[i].npy.data, unit[i] ? rows[i] * fl * unit[i] : rows[i], &m[i]);
      free(loc);
    }
    /* outputs: name, rows, unit (0: whole), ndim, shape */
    sp_out o[8];
    int no = 0;
    if (!backward) o[no++] = sp_output("y", B, S * C, 4, B, N, H, D);
    else {
      o[no++] = sp_output("dq_raw", B, S * C, 4, B, N, H, D);
      o[no++] = sp_output("dk_raw", B, S * C, 4, B, N, H, D);
      o[no++] = sp_output("dv_raw", B, S * C, 4, B, N, H, D);
      o[no++] = sp_output("dconv_weight", 4 * C, 0, 2, C, 4, 0, 0);
      o[no++] = sp_output("dq_norm_weight", C, 0, 1, C, 0, 0, 0);
      o[no++] = sp_output("dk_norm_weight", C, 0, 1, C, 0, 0, 0);
      o[no++] = sp_output("dbeta", B * H, S, 4, B, H, T, S);
      o[no++] = sp_output("ddecay", B * H, 1, 3, B, H, T, 0);
    }
    for (int i = 0; i < no && !rc; i++)
      rc = upload(ctx, NULL, o[i].unit ? o[i].rows * fl * o[i].unit : o[i].rows, &o[i].mem);
    rc = agree_rc(rc);
    const double t0 = now_ms();
    if (!rc) {
      camdelta_branch_args ba;
      memset(&ba, 0, sizeof ba);
      ba.B = B, ba.T = fl, ba.Hs = Hs, ba.Ws = Ws, ba.H = H, ba.D = D, ba.pt = patch[0], ba.ph = patch[1];
      ba.pw = patch[2], ba.chunking = ch, ba.algorithm = c.algorithm, ba.norm_eps = (float)c.norm_eps;
      ba.k_scale = (float)(c.have_k_scale ? c.k_scale : 1.0 / sqrt((double)D * (double)S));
      camdelta_buffer *ib[I_N - 1] = {&ba.q_raw,          &ba.k_raw,     &ba.v_raw, &ba.conv_weight, &ba.q_norm_weight,
                                      &ba.k_norm_weight, &ba.camera_conditions, &ba.beta, &ba.decay};
      for (int i = 0; i < I_N - 1; i++) *ib[i] = (camdelta_buffer){m[i], 0};
      camdelta_status st;
      if (!backward) {
        ba.y.mem = o[0].mem;
        st = camdelta_mpi_branch_forward(ctx, &ba, NULL, MPI_COMM_WORLD);
      } else {
        camdelta_branch_grads g;
        memset(&g, 0, sizeof g);
        g.grad_y.mem = m[I_GY], g.dq_raw.mem = o[0].mem, g.dk_raw.mem = o[1].mem, g.dv_raw.mem = o[2].mem;
        g.dconv_weight.mem = o[3].mem, g.dq_norm_weight.mem = o[4].mem, g.dk_norm_weight.mem = o[5].mem;
        g.dbeta.mem = o[6].mem, g.ddecay.mem = o[7].mem;
        st = camdelta_mpi_branch_backward(ctx, &ba, &g, NULL, MPI_COMM_WORLD);
      }
      const char *call = backward ? "camdelta_mpi_branch_backward" : "camdelta_mpi_branch_forward";
      if (st) rc = g_rank == 0 ? cli_lib_error(st, call) : cli_exit_code(st);
    }
    const double ms = now_ms() - t0;
    cli_outset *set = NULL; /* rank 0 writes the gathered outputs as one set, all or nothing (cli_outset.h) */
    if (!rc && g_rank == 0) set = cli_outset_open(outdir, &rc);
    rc = agree_rc(rc);
    for (int i = 0; i < no && !rc; i++) {
      float *h = NULL, *full = NULL;
      rc = agree_rc(download(ctx, o[i].mem, o[i].unit ? o[i].rows * fl * o[i].unit : o[i].rows, &h));
      if (!rc && o[i].unit) rc = agree_rc(gather_cols(h, o[i].rows, T, o[i].unit, &full));
      else if (!rc) full = h, h = NULL; /* summed over the ranks: the same on every rank */
      if (!rc && g_rank == 0 && (rc = cli_outset_add(set, o[i].name, CAMDELTA_NPY_F4, o[i].ndim, o[i].shape, full)))
        set = NULL; /* aborted by the failed add */
      rc = agree_rc(rc);
      free(h), free(full);
    }
    if (g_rank == 0 && set && rc) cli_outset_abort(set);
    else if (g_rank == 0 && set) rc = cli_outset_commit(set);
    rc = agree_rc(rc);
    double slowest = ms;
    MPI_Reduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (!rc && g_rank == 0 && !quiet) {
      printf("camdelta run %s: sequence parallel over %d ranks: B=%zu H=%zu D=%zu grid %zux%zux%zu; slowest rank "
             "%.3f ms; wrote", op, g_size, B, H, D, T, Hs, Ws, slowest);
      for (int i = 0; i < no; i++) printf(" %s", o[i].name);
      printf(" to %s\n", outdir);
    }
    for (int i = 0; i < no; i++)
      if (o[i].mem) clReleaseMemObject(o[i].mem);
    for (int i = 0; i < I_N; i++)
      if (m[i]) clReleaseMemObject(m[i]);
  }
done:
  camdelta_context_destroy(ctx);
  for (int i = 0; i < I_N; i++) cli_tensor_free(&t[i]);
  cli_tensor_free(&ci);
  return sp_end(rc);
}

int cmd_run_sp(int argc, char **argv) {
  const char *op = NULL;
  int reverse = 0, final_state = 0;
  cli_run_opts c;
  cli_run_opts_init(&c);
  /* branch and branch-backward have their own options */
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] == '-') {
      if (i + 1 < argc && argv[i + 1][0] != '-' && strcmp(argv[i], "--sequence-parallel") != 0 &&
          strcmp(argv[i], "--quiet") != 0 && strcmp(argv[i], "-q") != 0 && strcmp(argv[i], "--reverse") != 0 &&
          strcmp(argv[i], "--final-state") != 0)
        i++; /* its value */
      continue;
    }
    if (strcmp(argv[i], "branch") == 0 || strcmp(argv[i], "branch-backward") == 0) return run_branch_sp(argc, argv);
    break;
  }
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    if (cli_flag(&a, "--sequence-parallel")) continue;
    int r = cli_run_option(&a, &c); /* --help: the usage of run printed */
    if (r == CLI_OPT_TAKEN) continue;
    if (r != CLI_OPT_OTHER) return r == CLI_OPT_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if (cli_flag(&a, "--reverse")) reverse = 1;
    else if (cli_flag(&a, "--final-state")) final_state = 1;
    else if (argv[a.i][0] == '-' && argv[a.i][1])
      return cli_error(CLI_EXIT_USAGE, "run --sequence-parallel: option '%s' is not supported here (scan and "
                       "scan-backward take --in --out --device --reverse --algorithm --final-state --quiet)", argv[a.i]);
    else if (op)
      return cli_error(CLI_EXIT_USAGE, "run: unexpected argument '%s' (the operation is '%s')", argv[a.i], op);
    else op = argv[a.i++];
  }
  if (!op)
    return cli_error(CLI_EXIT_USAGE, "run --sequence-parallel: missing the operation: scan, scan-backward, branch or "
                     "branch-backward");
  const int backward = strcmp(op, "scan-backward") == 0;
  if (!backward && strcmp(op, "scan") != 0)
    return cli_error(CLI_EXIT_USAGE, "run --sequence-parallel: operation '%s' is not split over ranks (scan, "
                     "scan-backward, branch and branch-backward are)", op);
  if (c.in && cli_packed_requested(c.in))
    return cli_error(CLI_EXIT_INPUT,
                     "run %s --sequence-parallel: %s holds packed clips (frame_offsets or clip_offsets): packed clips "
                     "are not supported over ranks (run them on one device without --sequence-parallel)", op, c.in);
  if (c.have_k_scale || c.have_norm_eps)
    return cli_error(CLI_EXIT_USAGE, "run %s --sequence-parallel: --k-scale and --norm-eps apply to branch and "
                     "branch-backward only", op);
  const char *in = c.in, *outdir = c.out, *device = c.device;
  const camdelta_scan_algorithm alg = c.algorithm;
  const int quiet = c.quiet;
  if (!in || !*in) return cli_error(CLI_EXIT_USAGE, "run %s: missing --in DIR", op);
  if (!outdir || !*outdir) return cli_error(CLI_EXIT_USAGE, "run %s: missing --out DIR", op);
  if (backward && (final_state || c.have_algorithm))
    return cli_error(CLI_EXIT_USAGE, "run scan-backward: --final-state and --algorithm apply to scan only");
  int rc = CLI_EXIT_OK;
  /* every rank reads and checks the inputs before MPI starts, so that a bad one is refused at once */
  cli_tensor t[IN_COUNT];
  memset(t, 0, sizeof t);
  size_t B = 0, H = 0, D = 0, N = 0, F = 0, S = 0;
  rc = cli_tensor_load_f32(&t[IN_Q], in, "q", 0, -4, NULL, "(B, H, D, N)");
  if (!rc) rc = cli_tensor_load_f32(&t[IN_BETA], in, "beta", 0, -4, NULL, "(B, H, F, S)");
  if (!rc) {
    const size_t *s = t[IN_Q].npy.shape, *bs = t[IN_BETA].npy.shape;
    B = s[0], H = s[1], D = s[2], N = s[3], F = bs[2], S = bs[3];
    if (bs[0] != B || bs[1] != H || (S ? F > N / S || F * S != N : N != 0)) {
      char have[256];
      rc = cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected (B, H, F, S) with B = %zu, H = %zu and "
                     "F*S = N = %zu (from %s)", t[IN_BETA].path, cli_shape_str(have, sizeof have, 4, bs), B, H, N,
                     t[IN_Q].path);
    }
  }
  const size_t bhdn[4] = {B, H, D, N}, bhf[3] = {B, H, F}, bhdd[4] = {B, H, D, D};
  if (!rc) rc = cli_tensor_load_f32(&t[IN_K], in, "k", 0, 4, bhdn, "(B, H, D, N)");
  if (!rc) rc = cli_tensor_load_f32(&t[IN_V], in, "v", 0, 4, bhdn, "(B, H, D, N)");
  if (!rc) rc = cli_tensor_load_f32(&t[IN_DECAY], in, "decay", 0, 3, bhf, "(B, H, F)");
  if (!rc && backward) rc = cli_tensor_load_f32(&t[IN_GO], in, "grad_out", 0, 4, bhdn, "(B, H, D, N)");
  if (!rc) rc = cli_tensor_load_f32(&t[IN_INIT], in, "init_state", 1, 4, bhdd, "(B, H, D, D)");
  if (!rc && backward) rc = cli_tensor_load_f32(&t[IN_GF], in, "grad_final_state", 1, 4, bhdd, "(B, H, D, D)");
  if (rc || (rc = sp_init())) goto done_inputs;
  if (F < (size_t)g_size)
    rc = cli_error(CLI_EXIT_INPUT, "%s: F = %zu frames cannot be split over %d ranks (every rank needs a frame)",
                   t[IN_BETA].path, F, g_size);
  if ((rc = agree_rc(rc))) goto done_inputs;

  camdelta_context *ctx = NULL;
  rc = agree_rc(sp_context(&ctx, device));
  if (rc) goto done_ctx;
  {
    size_t f0, fl;
    camdelta_mpi_frame_share(F, g_size, g_rank, &f0, &fl);
    const size_t BH = B * H, n0 = f0 * S, nl = fl * S, ns = BH * D * D, tl = BH * D * nl;
    const int has_init = t[IN_INIT].present, has_gf = backward && t[IN_GF].present;
    cl_mem m[16] = {NULL};
    int nm = 0;
    float *loc[6] = {NULL};
    /* this rank's share: token tensors by (b, h, d) rows, beta by (b, h) rows, decay by (b, h) rows of frames */
    const int tok_in[4] = {IN_Q, IN_K, IN_V, IN_GO};
    for (int i = 0; i < 4 && !rc; i++) {
      if (tok_in[i] == IN_GO && !backward) continue;
      loc[i] = slice(t[tok_in[i]].npy.data, BH * D, N, n0, nl);
      if (!loc[i]) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    }
    if (!rc) loc[4] = slice(t[IN_BETA].npy.data, BH, N, n0, nl), loc[5] = slice(t[IN_DECAY].npy.data, BH, F, f0, fl);
    if (!rc && (!loc[4] || !loc[5])) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    cl_mem q = NULL, k = NULL, vv = NULL, go = NULL, beta = NULL, decay = NULL, init = NULL, gf = NULL;
    if (!rc) rc = upload(ctx, loc[0], tl, &q);
    if (!rc) rc = upload(ctx, loc[1], tl, &k);
    if (!rc) rc = upload(ctx, loc[2], tl, &vv);
    if (!rc && backward) rc = upload(ctx, loc[3], tl, &go);
    if (!rc) rc = upload(ctx, loc[4], BH * nl, &beta);
    if (!rc) rc = upload(ctx, loc[5], BH * fl, &decay);
    if (!rc && has_init) rc = upload(ctx, t[IN_INIT].npy.data, ns, &init);
    if (!rc && has_gf) rc = upload(ctx, t[IN_GF].npy.data, ns, &gf);
    m[nm++] = q, m[nm++] = k, m[nm++] = vv, m[nm++] = go, m[nm++] = beta, m[nm++] = decay, m[nm++] = init;
    m[nm++] = gf;
    /* outputs: name, rows, unit (S: token columns, 1: frame columns, 0: a whole state), ndim, shape */
    sp_out o[6];
    int no = 0;
    if (!backward) {
      o[no++] = sp_output("out", BH * D, S, 4, B, H, D, N);
      if (final_state) o[no++] = sp_output("final_state", 1, 0, 4, B, H, D, D);
    } else {
      o[no++] = sp_output("dq", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dk", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dv", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dbeta", BH, S, 4, B, H, F, S);
      o[no++] = sp_output("ddecay", BH, 1, 3, B, H, F, 0);
      if (has_init) o[no++] = sp_output("dinit_state", 1, 0, 4, B, H, D, D);
    }
    for (int i = 0; i < no && !rc; i++) rc = upload(ctx, NULL, o[i].unit ? o[i].rows * fl * o[i].unit : ns, &o[i].mem);
    rc = agree_rc(rc);
    camdelta_mpi_timing tm;
    memset(&tm, 0, sizeof tm);
    camdelta_status st = CAMDELTA_OK;
    camdelta_scan_algorithm used = alg;
    if (!rc) {
      if (!backward) {
        camdelta_scan_args sa;
        memset(&sa, 0, sizeof sa);
        sa.B = B, sa.H = H, sa.D = D, sa.F = fl, sa.S = S, sa.reverse = reverse, sa.algorithm = alg, sa.used = &used;
        sa.q.mem = q, sa.k.mem = k, sa.v.mem = vv, sa.beta.mem = beta, sa.decay.mem = decay, sa.init_state.mem = init;
        sa.out.mem = o[0].mem;
        if (final_state) sa.final_state.mem = o[1].mem;
        st = camdelta_mpi_scan_forward(ctx, &sa, NULL, MPI_COMM_WORLD, &tm);
      } else {
        camdelta_scan_backward_args ba;
        memset(&ba, 0, sizeof ba);
        ba.B = B, ba.H = H, ba.D = D, ba.F = fl, ba.S = S, ba.reverse = reverse;
        ba.q.mem = q, ba.k.mem = k, ba.v.mem = vv, ba.beta.mem = beta, ba.decay.mem = decay, ba.init_state.mem = init;
        ba.grad_out.mem = go, ba.grad_final_state.mem = gf;
        ba.dq.mem = o[0].mem, ba.dk.mem = o[1].mem, ba.dv.mem = o[2].mem, ba.dbeta.mem = o[3].mem;
        ba.ddecay.mem = o[4].mem;
        if (has_init) ba.dinit_state.mem = o[5].mem;
        st = camdelta_mpi_scan_backward(ctx, &ba, NULL, MPI_COMM_WORLD, &tm);
      }
      /* the status is the same on every rank: rank 0 reports it */
      if (st) rc = g_rank == 0 ? cli_lib_error(st, backward ? "camdelta_mpi_scan_backward" : "camdelta_mpi_scan_forward")
                               : cli_exit_code(st);
    }
    cli_outset *set = NULL; /* rank 0 writes the gathered outputs as one set, all or nothing (cli_outset.h) */
    if (!rc && g_rank == 0) set = cli_outset_open(outdir, &rc);
    rc = agree_rc(rc);
    for (int i = 0; i < no && !rc; i++) {
      float *h = NULL, *full = NULL;
      const size_t count = o[i].unit ? o[i].rows * fl * o[i].unit : ns;
      rc = agree_rc(download(ctx, o[i].mem, count, &h));
      if (!rc && o[i].unit) rc = agree_rc(gather_cols(h, o[i].rows, F, o[i].unit, &full));
      else if (!rc) full = h, h = NULL; /* a whole state: the same on every rank */
      if (!rc && g_rank == 0 && (rc = cli_outset_add(set, o[i].name, CAMDELTA_NPY_F4, o[i].ndim, o[i].shape, full)))
        set = NULL; /* aborted by the failed add */
      rc = agree_rc(rc);
      free(h), free(full);
    }
    if (g_rank == 0 && set && rc) cli_outset_abort(set);
    else if (g_rank == 0 && set) rc = cli_outset_commit(set);
    rc = agree_rc(rc);
    /* timings: the largest over the ranks */
    double mx[5] = {tm.summary_ms, tm.exchange_ms, tm.combine_ms, tm.scan_ms, tm.total_ms}, all[5];
    MPI_Reduce(mx, all, 5, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (!rc && g_rank == 0 && !quiet) {
      camdelta_device_info info;
      const char *dev = camdelta_context_info(ctx, &info) == CAMDELTA_OK ? info.device_name : "?";
      printf("camdelta run %s: sequence parallel over %d ranks (%s on rank 0): B=%zu H=%zu D=%zu F=%zu S=%zu %s%s%s; "
             "slowest rank: %.3f ms (summaries %.3f, exchange %.3f, combine %.3f, local %s %.3f); wrote",
             op, g_size, dev, B, H, D, F, S, reverse ? "reverse" : "causal", has_init ? " from init_state" : "",
             has_gf ? " with grad_final_state" : "", all[4], all[0], all[1], all[2], backward ? "backward" : "scan",
             all[3]);
      for (int i = 0; i < no; i++) printf(" %s", o[i].name);
      printf(" to %s\n", outdir);
    }
    for (int i = 0; i < no; i++)
      if (o[i].mem) clReleaseMemObject(o[i].mem);
    for (int i = 0; i < nm; i++)
      if (m[i]) clReleaseMemObject(m[i]);
    for (int i = 0; i < 6; i++) free(loc[i]);
  }
done_ctx:
  camdelta_context_destroy(ctx);
done_inputs:
  for (int i = 0; i < IN_COUNT; i++) cli_tensor_free(&t[i]);
  return sp_end(rc);
}

/* ================================================================================= demo and bench */

typedef cli_shape shape5; /* named shapes and B,H,D,F,S: cli_parse_shape */

/* What demo or bench `cmd` allocates for shape s (whole: also the full sequence, on the host for demo's problem
 * and references), every count broadcast within one MPI message: an input error (exit 3) when it cannot fit (ctx
 * NULL: the host only). */
static int sp_budget(const char *cmd, const shape5 *s, int whole, int branch, camdelta_context *ctx) {
  cli_budget b = {0, 0, 0, 0};
  size_t N = 0, tok = 0, st = 0, C = 0, bnc = 0;
  if (!camdelta_size_mul(&N, s->F, s->S) || !camdelta_size_prod(&tok, 4, (const size_t[]){s->B, s->H, s->D, N}) ||
      !camdelta_size_prod(&st, 4, (const size_t[]){s->B, s->H, s->D, s->D}) || !camdelta_size_mul(&C, s->H, s->D) ||
      !camdelta_size_prod(&bnc, 3, (const size_t[]){s->B, N, C}) || tok > (size_t)2147483647 ||
      bnc > (size_t)2147483647)
    b.overflow = 1; /* (MPI_Bcast counts are int) */
  cli_budget_device(&b, 10, tok, 4); /* q k v grad_out out dq dk dv, beta and its gradient within */
  cli_budget_device(&b, 4, st, 4);
  if (whole) cli_budget_host(&b, 4 + 8, tok, 4); /* the problem and the broadcast references */
  if (branch) {
    cli_budget_device(&b, 8, bnc, 4);
    if (whole) cli_budget_host(&b, 4 + 4, bnc, 4);
  }
  char what[320], shown[256];
  snprintf(what, sizeof what, "%s --sequence-parallel: shape %s", cmd, cli_escape(s->name, shown, sizeof shown));
  return cli_budget_check(&b, ctx, what);
}

static unsigned long long g_rng = 0x2545F4914F6CDD1Dull;
static float *rand_f(size_t n, double lo, double hi) {
  float *x = malloc(n ? n * 4 : 4);
  if (!x) return NULL;
  for (size_t i = 0; i < n; i++) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    x[i] = (float)(lo + (hi - lo) * (double)(g_rng >> 11) * (1.0 / 9007199254740992.0));
  }
  return x;
}

/* A problem: full-sequence host arrays (demo) */
typedef struct sp_prob {
  size_t B, H, D, F, S, N, BH;
  float *q, *k, *v, *beta, *decay, *go, *init, *gf;
} sp_prob;

static int prob_make(sp_prob *p, const shape5 *s) {
  p->B = s->B, p->H = s->H, p->D = s->D, p->F = s->F, p->S = s->S, p->N = s->F * s->S, p->BH = s->B * s->H;
  const size_t nt = p->BH * p->D * p->N, ns = p->BH * p->D * p->D;
  const double ks = 1.7 / sqrt((double)p->D * (double)p->S);
  p->q = rand_f(nt, -1, 1), p->k = rand_f(nt, -ks, ks), p->v = rand_f(nt, -1, 1), p->go = rand_f(nt, -1, 1);
  p->beta = rand_f(p->BH * p->N, 0, 1), p->decay = rand_f(p->BH * p->F, 0.6, 1.0);
  p->init = rand_f(ns, -0.5, 0.5), p->gf = rand_f(ns, -0.5, 0.5);
  if (!p->q || !p->k || !p->v || !p->go || !p->beta || !p->decay || !p->init || !p->gf)
    return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  return CLI_EXIT_OK;
}

static void prob_free(sp_prob *p) {
  free(p->q), free(p->k), free(p->v), free(p->go), free(p->beta), free(p->decay), free(p->init), free(p->gf);
}

/* Device buffers of one problem or share: inputs and outputs. */
enum { B_Q, B_K, B_V, B_BETA, B_DECAY, B_GO, B_INIT, B_GF, B_OUT, B_FIN, B_DQ, B_DK, B_DV, B_DB, B_DD, B_DI, B_COUNT };
static const char *const BUF_NAME[B_COUNT] = {"q",     "k",      "v",  "beta", "decay", "grad_out", "init", "gf",
                                              "out",   "final",  "dq", "dk",   "dv",    "dbeta",    "ddecay",
                                              "dinit"};

typedef struct bufs {
  cl_mem m[B_COUNT];
  size_t n[B_COUNT];
} bufs;

/* Buffers for F frames of p (host data from p's frames [f0, f0 + F) when `p` has data, else random). */
static int bufs_make(camdelta_context *ctx, const sp_prob *p, size_t f0, size_t F, bufs *b) {
  memset(b, 0, sizeof *b);
  const size_t D = p->D, S = p->S, BH = p->BH, n0 = f0 * S, nl = F * S;
  const size_t tok = BH * D * nl, ns = BH * D * D;
  const size_t counts[B_COUNT] = {tok, tok, tok, BH * nl, BH * F, tok, ns, ns, tok, ns, tok, tok, tok, BH * nl, BH * F, ns};
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < B_COUNT && !rc; i++) {
    b->n[i] = counts[i];
    float *h = NULL;
    if (i <= B_GF) {
      if (p->q) {
        const float *src[8] = {p->q, p->k, p->v, p->beta, p->decay, p->go, p->init, p->gf};
        h = i == B_BETA ? slice(src[i], BH, p->N, n0, nl)
          : i == B_DECAY ? slice(src[i], BH, p->F, f0, F)
          : i >= B_INIT ? slice(src[i], 1, ns, 0, ns)
                        : slice(src[i], BH * D, p->N, n0, nl);
      } else {
        const double ks = 1.7 / sqrt((double)D * (double)S);
        h = i == B_K ? rand_f(counts[i], -ks, ks)
          : i == B_BETA ? rand_f(counts[i], 0, 1)
          : i == B_DECAY ? rand_f(counts[i], 0.6, 1.0)
                         : rand_f(counts[i], -0.5, 0.5);
      }
      if (!h) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    }
    if (!rc) rc = upload(ctx, h, counts[i], &b->m[i]);
    free(h);
  }
  return rc;
}

static void bufs_free(bufs *b) {
  for (int i = 0; i < B_COUNT; i++)
    if (b->m[i]) clReleaseMemObject(b->m[i]);
}

/* The forward algorithm of the demo and bench runs (both the sequence-parallel and the one-device ones). */
static camdelta_scan_algorithm g_alg = CAMDELTA_SCAN_AUTO;

static camdelta_status run_fwd(camdelta_context *ctx, const sp_prob *p, size_t F, bufs *b, int reverse, int mpi,
                               camdelta_mpi_timing *tm) {
  camdelta_scan_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = F, a.S = p->S, a.reverse = reverse, a.algorithm = g_alg;
  a.q.mem = b->m[B_Q], a.k.mem = b->m[B_K], a.v.mem = b->m[B_V], a.beta.mem = b->m[B_BETA];
  a.decay.mem = b->m[B_DECAY], a.init_state.mem = b->m[B_INIT], a.out.mem = b->m[B_OUT], a.final_state.mem = b->m[B_FIN];
  if (mpi) return camdelta_mpi_scan_forward(ctx, &a, NULL, MPI_COMM_WORLD, tm);
  camdelta_status st = camdelta_scan_forward(ctx, &a, NULL);
  return st ? st : camdelta_finish(ctx);
}

static camdelta_status run_bwd(camdelta_context *ctx, const sp_prob *p, size_t F, bufs *b, int reverse, int mpi,
                               camdelta_mpi_timing *tm) {
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = F, a.S = p->S, a.reverse = reverse;
  a.q.mem = b->m[B_Q], a.k.mem = b->m[B_K], a.v.mem = b->m[B_V], a.beta.mem = b->m[B_BETA];
  a.decay.mem = b->m[B_DECAY], a.init_state.mem = b->m[B_INIT], a.grad_out.mem = b->m[B_GO];
  a.grad_final_state.mem = b->m[B_GF];
  a.dq.mem = b->m[B_DQ], a.dk.mem = b->m[B_DK], a.dv.mem = b->m[B_DV], a.dbeta.mem = b->m[B_DB];
  a.ddecay.mem = b->m[B_DD], a.dinit_state.mem = b->m[B_DI];
  if (mpi) return camdelta_mpi_scan_backward(ctx, &a, NULL, MPI_COMM_WORLD, tm);
  camdelta_status st = camdelta_scan_backward(ctx, &a, NULL);
  return st ? st : camdelta_finish(ctx);
}

/* Output buffers compared in the demo and their column unit (S tokens, 1 frame, 0 whole state). */
static const int DEMO_OUT[8] = {B_OUT, B_FIN, B_DQ, B_DK, B_DV, B_DB, B_DD, B_DI};

static size_t rows_of(const sp_prob *p, int i) {
  return (i == B_OUT || i == B_DQ || i == B_DK || i == B_DV) ? p->BH * p->D : (i == B_DB || i == B_DD) ? p->BH : 1;
}
static size_t unit_of(const sp_prob *p, int i) {
  return (i == B_FIN || i == B_DI) ? 0 : i == B_DD ? 1 : p->S;
}

/* ------------------------------------------------------------------------------ the branch over ranks */

/* A camera-branch problem from a scan shape (B, H, D, F = T frames, S = Hs·Ws tokens per frame; patch 1): full
 * host arrays, the same on every rank. Chunking: uniform chunks of max(3, T/3) frames (0 = one chunk when that
 * is T or more), so that chunks cross the ranks' boundaries. */
enum { BR_Q, BR_K, BR_V, BR_W, BR_QW, BR_KW, BR_CC, BR_BETA, BR_DECAY, BR_GY, BR_NIN };
enum { BO_Y, BO_DQ, BO_DK, BO_DV, BO_DW, BO_DQW, BO_DKW, BO_DB, BO_DD, BO_N };
static const char *const BO_NAME[BO_N] = {"y", "dq_raw", "dk_raw", "dv_raw", "dconv_w", "dq_norm_w", "dk_norm_w",
                                          "dbeta", "ddecay"};

typedef struct br_prob {
  size_t B, H, D, T, Hs, Ws, S, C, cs;
  float *in[BR_NIN];
  size_t rows[BR_NIN], unit[BR_NIN]; /* per-frame columns (0: not split over frames) */
  size_t orows[BO_N], ounit[BO_N];
} br_prob;

static void br_free(br_prob *p) {
  for (int i = 0; i < BR_NIN; i++) free(p->in[i]), p->in[i] = NULL;
}

static int br_make(br_prob *p, const shape5 *s) {
  memset(p, 0, sizeof *p);
  size_t hs, ws;
  cli_grid_of(s->S, &hs, &ws);
  p->B = s->B, p->H = s->H, p->D = s->D, p->T = s->F, p->Hs = hs, p->Ws = ws, p->S = s->S, p->C = s->H * s->D;
  p->cs = s->F / 3 < 3 ? 3 : s->F / 3;
  if (p->cs >= p->T) p->cs = 0;
  const size_t B = p->B, C = p->C, T = p->T, S = p->S, BH = p->B * p->H;
  const size_t rows[BR_NIN] = {B, B, B, 4 * C, C, C, B, BH, BH, B}, unit[BR_NIN] = {S * C, S * C, S * C, 0, 0, 0, 20,
                                                                                  S, 1, S * C};
  const size_t orows[BO_N] = {B, B, B, B, 4 * C, C, C, BH, BH}, ounit[BO_N] = {S * C, S * C, S * C, S * C, 0, 0, 0, S, 1};
  memcpy(p->rows, rows, sizeof rows), memcpy(p->unit, unit, sizeof unit);
  memcpy(p->orows, orows, sizeof orows), memcpy(p->ounit, ounit, sizeof ounit);
  const double lo[BR_NIN] = {-1, -1, -1, -0.5, 0.8, 0.8, 0, 0.05, 0.85, -1}, hi[BR_NIN] = {1, 1, 1, 0.5, 1.2, 1.2, 0,
                                                                                         0.95, 1.0, 1};
  for (int i = 0; i < BR_NIN; i++) {
    const size_t n = rows[i] * (unit[i] ? T * unit[i] : 1);
    if (!(p->in[i] = rand_f(n, lo[i], hi[i]))) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  }
  /* cameras: an orbit of radius 3 around the origin at height 0.4, looking at it; fx = fy = 0.9·Ws */
  for (size_t b = 0; b < B; b++)
    for (size_t f = 0; f < T; f++) {
      float *cc = p->in[BR_CC] + (b * T + f) * 20;
      const double a = -0.4 + 0.8 * (double)f / (double)(T > 1 ? T - 1 : 1) + 0.1 * (double)b;
      const double c[3] = {3 * sin(a), 0.4, -3 * cos(a)};
      double z[3] = {-c[0], -c[1], -c[2]}, n = sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2]);
      for (int i = 0; i < 3; i++) z[i] /= n;
      double x[3] = {z[2], 0, -z[0]};
      n = sqrt(x[0] * x[0] + x[2] * x[2]);
      x[0] /= n, x[2] /= n;
      const double y[3] = {z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]};
      for (int i = 0; i < 3; i++)
        cc[4 * i] = (float)x[i], cc[4 * i + 1] = (float)y[i], cc[4 * i + 2] = (float)z[i], cc[4 * i + 3] = (float)c[i];
      cc[12] = cc[13] = cc[14] = 0, cc[15] = 1;
      cc[16] = cc[17] = (float)(0.9 * (double)p->Ws), cc[18] = (float)p->Ws / 2, cc[19] = (float)p->Hs / 2;
    }
  return CLI_EXIT_OK;
}

typedef struct br_bufs {
  cl_mem in[BR_NIN], out[BO_N];
  size_t nout[BO_N];
} br_bufs;

static void br_bufs_free(br_bufs *b) {
  for (int i = 0; i < BR_NIN; i++)
    if (b->in[i]) clReleaseMemObject(b->in[i]);
  for (int i = 0; i < BO_N; i++)
    if (b->out[i]) clReleaseMemObject(b->out[i]);
  memset(b, 0, sizeof *b);
}

/* The device buffers of frames [f0, f0 + fl). */
static int br_bufs_make(camdelta_context *ctx, const br_prob *p, size_t f0, size_t fl, br_bufs *b) {
  memset(b, 0, sizeof *b);
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < BR_NIN && !rc; i++) {
    const size_t u = p->unit[i];
    float *loc = u ? slice(p->in[i], p->rows[i], p->T * u, f0 * u, fl * u) : NULL;
    if (u && !loc) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    if (!rc) rc = upload(ctx, u ? loc : p->in[i], p->rows[i] * (u ? fl * u : 1), &b->in[i]);
    free(loc);
  }
  for (int i = 0; i < BO_N && !rc; i++) {
    b->nout[i] = p->orows[i] * (p->ounit[i] ? fl * p->ounit[i] : 1);
    rc = upload(ctx, NULL, b->nout[i], &b->out[i]);
  }
  return rc;
}

/* The branch forward (with `saved`) or backward (from `saved`) on fl frames; mpi: 1 over the ranks, 2 on this rank
 * alone through the MPI component (MPI_COMM_SELF: one device with the ranks' arithmetic, two scans where the
 * single-device branch fuses its scan pair), 0 the single-device call. */
static camdelta_status br_run(camdelta_context *ctx, const br_prob *p, size_t fl, const br_bufs *b, int backward,
                              camdelta_branch_saved *saved, int mpi, camdelta_mpi_timing *tm) {
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.T = fl, a.Hs = p->Hs, a.Ws = p->Ws, a.H = p->H, a.D = p->D, a.pt = a.ph = a.pw = 1;
  a.chunking.chunk_size = p->cs, a.chunking.strategy = CAMDELTA_CHUNK_UNIFORM, a.algorithm = g_alg;
  a.k_scale = (float)(1.0 / sqrt((double)p->D * (double)p->S)), a.norm_eps = 1e-6f;
  camdelta_buffer *ib[BR_NIN - 1] = {&a.q_raw,         &a.k_raw, &a.v_raw, &a.conv_weight, &a.q_norm_weight,
                                     &a.k_norm_weight, &a.camera_conditions, &a.beta, &a.decay};
  for (int i = 0; i < BR_NIN - 1; i++) *ib[i] = (camdelta_buffer){b->in[i], 0};
  a.y = (camdelta_buffer){b->out[BO_Y], 0};
  camdelta_status st;
  camdelta_mpi_timing self_tm;
  const MPI_Comm comm = mpi == 2 ? MPI_COMM_SELF : MPI_COMM_WORLD;
  if (!tm) tm = &self_tm;
  if (!backward) {
    st = mpi ? camdelta_mpi_branch_forward_timed(ctx, &a, saved, comm, tm)
             : camdelta_branch_forward(ctx, &a, saved);
  } else {
    camdelta_branch_grads g;
    memset(&g, 0, sizeof g);
    g.grad_y = (camdelta_buffer){b->in[BR_GY], 0};
    camdelta_buffer *ob[BO_N - 1] = {&g.dq_raw,         &g.dk_raw,         &g.dv_raw, &g.dconv_weight,
                                     &g.dq_norm_weight, &g.dk_norm_weight, &g.dbeta,  &g.ddecay};
    for (int i = 0; i < BO_N - 1; i++) *ob[i] = (camdelta_buffer){b->out[i + 1], 0};
    st = mpi ? camdelta_mpi_branch_backward_timed(ctx, &a, &g, saved, comm, tm)
             : camdelta_branch_backward(ctx, &a, &g, saved);
  }
  return st || mpi == 1 ? st : camdelta_finish(ctx);
}

/* demo: the branch forward and backward over the ranks against one device (rank 0); prints one row per rank and
 * returns the largest relative difference in *worst. */
static int demo_branch(camdelta_context *ctx, const shape5 *shape, double *worst) {
  br_prob p;
  int rc = agree_rc(br_make(&p, shape));
  size_t f0, fl;
  camdelta_mpi_frame_share(p.T, g_size, g_rank, &f0, &fl);
  float *ref[BO_N] = {NULL};
  if (!rc && g_rank == 0) {
    br_bufs w;
    camdelta_branch_saved *sv = NULL;
    rc = br_bufs_make(ctx, &p, 0, p.T, &w);
    camdelta_status st = rc ? CAMDELTA_OK : camdelta_branch_saved_create(ctx, &sv);
    /* the reference: one device, the same arithmetic as the ranks (the fused scan pair of the single-device
     * branch sums in another order: the two stay within the bounds of docs/math.md §5 of the f64 reference) */
    if (!rc && !st) st = br_run(ctx, &p, p.T, &w, 0, sv, 2, NULL);
    if (!rc && !st) st = br_run(ctx, &p, p.T, &w, 1, sv, 2, NULL);
    if (!rc && st) rc = cli_lib_error(st, "one-device branch");
    for (int i = 0; i < BO_N && !rc; i++) rc = download(ctx, w.out[i], w.nout[i], &ref[i]);
    camdelta_branch_saved_destroy(sv);
    br_bufs_free(&w);
  }
  rc = agree_rc(rc);
  for (int i = 0; i < BO_N && !rc; i++) {
    const size_t n = p.orows[i] * (p.ounit[i] ? p.T * p.ounit[i] : 1);
    if (g_rank != 0 && !(ref[i] = malloc(n * 4 + 4))) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    if ((rc = agree_rc(rc))) break;
    MPI_Bcast(ref[i], (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  br_bufs mine;
  memset(&mine, 0, sizeof mine);
  camdelta_branch_saved *sv = NULL;
  if (!rc) rc = agree_rc(br_bufs_make(ctx, &p, f0, fl, &mine));
  if (!rc && g_rank == 0) {
    printf("\nthe camera branch (camdelta_mpi_branch_forward / _backward; one device: the same calls on MPI_COMM_SELF): "
           "grid %zux%zux%zu, patch 1, chunk size %zu "
           "(uniform), saved states\n%-8s %-5s", p.T, p.Hs, p.Ws, p.cs, "pass", "rank");
    for (int i = 0; i < BO_N; i++) printf(" %9s", BO_NAME[i]);
    printf(" %9s %9s\n", "total ms", "exch. ms");
  }
  camdelta_mpi_timing tf, tb;
  camdelta_status st = CAMDELTA_OK;
  if (!rc) rc = agree_rc((st = camdelta_branch_saved_create(ctx, &sv)) ? cli_lib_error(st, "branch saved") : 0);
  if (!rc) {
    st = br_run(ctx, &p, fl, &mine, 0, sv, 1, &tf);
    if (!st) st = br_run(ctx, &p, fl, &mine, 1, sv, 1, &tb);
    if (st) rc = g_rank == 0 ? cli_lib_error(st, "sequence-parallel branch") : cli_exit_code(st);
  }
  double err[BO_N + 2] = {0};
  for (int i = 0; i < BO_N && !rc; i++) {
    const size_t rows = p.orows[i], u = p.ounit[i], cols = u ? p.T * u : 1, lc = u ? fl * u : 1, c0 = u ? f0 * u : 0;
    err[i] = share_error(ctx, mine.out[i], ref[i], rows, cols, lc, c0);
    *worst = fmax(*worst, err[i]);
  }
  if (!rc) {
    err[BO_N] = tf.total_ms + tb.total_ms, err[BO_N + 1] = tf.exchange_ms + tb.exchange_ms;
    double *all = g_rank == 0 ? malloc((size_t)g_size * (BO_N + 2) * sizeof *all) : NULL;
    MPI_Gather(err, BO_N + 2, MPI_DOUBLE, all, BO_N + 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank == 0 && all) {
      for (int r = 0; r < g_size; r++) {
        printf("%-8s %-5d", "branch", r);
        for (int i = 0; i < BO_N; i++) printf(" %9.1e", all[r * (BO_N + 2) + i]);
        printf(" %9.2f %9.2f\n", all[r * (BO_N + 2) + BO_N], all[r * (BO_N + 2) + BO_N + 1]);
      }
    }
    free(all);
  }
  camdelta_branch_saved_destroy(sv);
  br_bufs_free(&mine);
  for (int i = 0; i < BO_N; i++) free(ref[i]);
  br_free(&p);
  return agree_rc(rc);
}

int cmd_demo_sp(int argc, char **argv) {
  const char *device = NULL, *v;
  shape5 shape = {.name = "1,4,32,8,64", .B = 1, .H = 4, .D = 32, .F = 8, .S = 64};
  /* chunkwise by default: its chain M_f = A_f·M + U_f is the arithmetic of the state summaries, so the comparison
   * shows the sequence-parallel split, not the difference between the two algorithms' f32 rounding */
  g_alg = CAMDELTA_SCAN_CHUNKWISE;
  int branch = 1;
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    int r;
    if (cli_flag(&a, "--sequence-parallel")) continue;
    if (cli_flag(&a, "--no-branch")) {
      branch = 0;
      continue;
    }
    if ((r = cli_value(&a, "--algorithm", &v))) {
      if (r < 0 || !cli_parse_algorithm(v, &g_alg)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--shape", &v))) {
      if (r < 0 || !cli_parse_shape("demo --sequence-parallel", "--shape", v, 1, &shape)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--seed", &v))) {
      size_t seed;
      if (r < 0 || !cli_parse_size("--seed", v, &seed)) return CLI_EXIT_USAGE;
      g_rng ^= (unsigned long long)seed * 0x9E3779B97F4A7C15ull;
    } else {
      return cli_error(CLI_EXIT_USAGE, "demo --sequence-parallel: unknown option '%s' (--shape, --device, --seed, "
                       "--algorithm, --no-branch)", argv[a.i]);
    }
  }
  int rc = sp_budget("demo", &shape, 1, branch, NULL); /* the host, before MPI starts */
  if (rc) return rc;
  if ((rc = sp_init())) return rc;
  if (shape.F < (size_t)g_size) {
    if (g_rank == 0) cli_error(CLI_EXIT_USAGE, "demo: F = %zu frames cannot be split over %d ranks", shape.F, g_size);
    return sp_end(CLI_EXIT_USAGE);
  }
  sp_prob p;
  memset(&p, 0, sizeof p);
  camdelta_context *ctx = NULL;
  rc = agree_rc(sp_context(&ctx, device));
  if (!rc) rc = agree_rc(sp_budget("demo", &shape, 1, branch, ctx));
  if (!rc) rc = agree_rc(prob_make(&p, &shape)); /* the same problem on every rank (same generator, same seed) */
  size_t f0, fl;
  camdelta_mpi_frame_share(p.F, g_size, g_rank, &f0, &fl);
  bufs whole, mine;
  memset(&whole, 0, sizeof whole), memset(&mine, 0, sizeof mine);
  if (!rc) rc = agree_rc(bufs_make(ctx, &p, f0, fl, &mine));
  if (!rc && g_rank == 0) {
    camdelta_device_info info;
    camdelta_context_info(ctx, &info);
    printf("camdelta demo --sequence-parallel %s: %d ranks, rank 0 on %s (%s)\n", camdelta_version_string(), g_size,
           info.device_name, info.platform_name);
    printf("shape B=%zu H=%zu D=%zu F=%zu S=%zu; frames per rank:", p.B, p.H, p.D, p.F, p.S);
    for (int r = 0; r < g_size; r++) {
      size_t r0, rl;
      camdelta_mpi_frame_share(p.F, g_size, r, &r0, &rl);
      printf(" %zu", rl);
    }
    printf("; init_state, final_state and grad_final_state given; forward algorithm %s\n",
           camdelta_scan_algorithm_name(g_alg));
    printf("each rank's share against one device (rank 0, whole sequence): max|x - one device| / max|one device|\n\n");
    printf("%-8s %-5s", "pass", "rank");
    for (int i = 0; i < 8; i++) printf(" %9s", BUF_NAME[DEMO_OUT[i]]);
    printf(" %9s %9s\n", "total ms", "exch. ms");
  }
  double worst = 0;
  for (int pass = 0; pass < 2 && !rc; pass++) {
    const int reverse = pass;
    /* one device, on rank 0 */
    float *ref[8] = {NULL};
    int lrc = CLI_EXIT_OK;
    if (g_rank == 0) {
      lrc = bufs_make(ctx, &p, 0, p.F, &whole);
      camdelta_status st = lrc ? CAMDELTA_OK : run_fwd(ctx, &p, p.F, &whole, reverse, 0, NULL);
      if (!st && !lrc) st = run_bwd(ctx, &p, p.F, &whole, reverse, 0, NULL);
      if (st) lrc = cli_lib_error(st, "one-device scan");
      for (int i = 0; i < 8 && !lrc; i++) lrc = download(ctx, whole.m[DEMO_OUT[i]], whole.n[DEMO_OUT[i]], &ref[i]);
      bufs_free(&whole);
    }
    if ((rc = agree_rc(lrc))) break;
    for (int i = 0; i < 8; i++) {
      const int bi = DEMO_OUT[i];
      const size_t n = unit_of(&p, bi) ? rows_of(&p, bi) * p.F * unit_of(&p, bi) : p.BH * p.D * p.D;
      if (g_rank != 0) ref[i] = malloc(n * 4 + 4);
      MPI_Bcast(ref[i], (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
    /* sequence parallel */
    camdelta_mpi_timing tf, tb;
    camdelta_status st = run_fwd(ctx, &p, fl, &mine, reverse, 1, &tf);
    if (!st) st = run_bwd(ctx, &p, fl, &mine, reverse, 1, &tb);
    if (st) {
      rc = g_rank == 0 ? cli_lib_error(st, "sequence-parallel scan") : cli_exit_code(st);
    } else {
      double err[10];
      for (int i = 0; i < 8; i++) {
        const int bi = DEMO_OUT[i];
        const size_t rows = rows_of(&p, bi), unit = unit_of(&p, bi), cols = unit ? p.F * unit : p.BH * p.D * p.D;
        const size_t lc = unit ? fl * unit : cols, c0 = unit ? f0 * unit : 0;
        err[i] = share_error(ctx, mine.m[bi], ref[i], rows, cols, lc, c0);
        worst = fmax(worst, err[i]);
      }
      err[8] = tf.total_ms + tb.total_ms, err[9] = tf.exchange_ms + tb.exchange_ms;
      double *all = g_rank == 0 ? malloc((size_t)g_size * 10 * sizeof *all) : NULL;
      MPI_Gather(err, 10, MPI_DOUBLE, all, 10, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (g_rank == 0) {
        for (int r = 0; r < g_size; r++) {
          printf("%-8s %-5d", reverse ? "reverse" : "causal", r);
          for (int i = 0; i < 8; i++) printf(" %9.1e", all[r * 10 + i]);
          printf(" %9.2f %9.2f\n", all[r * 10 + 8], all[r * 10 + 9]);
        }
        free(all);
      }
    }
    for (int i = 0; i < 8; i++) free(ref[i]);
    rc = agree_rc(rc);
  }
  if (!rc && branch) rc = demo_branch(ctx, &shape, &worst);
  double w = worst;
  MPI_Allreduce(&worst, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (!rc) {
    if (g_rank == 0)
      printf("\nlargest difference against one device: %.2e (bound 1e-6): %s\n", w, w <= 1e-6 ? "PASS" : "FAIL");
    if (!(w <= 1e-6)) rc = 5;
  }
  bufs_free(&mine);
  camdelta_context_destroy(ctx);
  prob_free(&p);
  return sp_end(rc);
}

/* ------------------------------------------------------------------------------------------ bench */

int cmd_bench_sp(int argc, char **argv) {
  const char *device = NULL, *json = NULL, *v;
  shape5 shapes[8];
  int nshapes = 0, single = 1, branch = 1;
  size_t reps = 10, warmup = 2;
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    int r;
    if (cli_flag(&a, "--sequence-parallel")) continue;
    if (cli_flag(&a, "--no-single")) {
      single = 0;
      continue;
    }
    if (cli_flag(&a, "--no-branch")) {
      branch = 0;
      continue;
    }
    if ((r = cli_value(&a, "--algorithm", &v))) {
      if (r < 0 || !cli_parse_algorithm(v, &g_alg)) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(&a, "--shape", &v))) {
      if (r < 0) return CLI_EXIT_USAGE;
      if (nshapes == 8) return cli_error(CLI_EXIT_USAGE, "bench: at most 8 --shape options");
      if (!cli_parse_shape("bench --sequence-parallel", "--shape", v, 1, &shapes[nshapes])) return CLI_EXIT_USAGE;
      nshapes++;
    } else if ((r = cli_value(&a, "--device", &device)) || (r = cli_value(&a, "--json", &json))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--reps", &v))) {
      if (r < 0 || !cli_parse_count("--reps", v, 1, CLI_MAX_REPS, &reps)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--warmup", &v))) {
      if (r < 0 || !cli_parse_count("--warmup", v, 0, CLI_MAX_REPS, &warmup)) return CLI_EXIT_USAGE;
    } else {
      return cli_error(CLI_EXIT_USAGE, "bench --sequence-parallel: unknown option '%s' (--shape, --device, --reps, "
                       "--warmup, --json, --no-single, --no-branch, --algorithm)", argv[a.i]);
    }
  }
  if (!nshapes && !cli_parse_shape("bench --sequence-parallel", "--shape", "small", 1, &shapes[nshapes++]))
    return CLI_EXIT_USAGE;
  int rc = CLI_EXIT_OK;
  for (int si = 0; si < nshapes && !rc; si++) rc = sp_budget("bench", &shapes[si], single, branch, NULL);
  if (rc) return rc;
  if ((rc = sp_init())) return rc;
  camdelta_context *ctx = NULL;
  rc = agree_rc(sp_context(&ctx, device));
  for (int si = 0; si < nshapes && !rc; si++) rc = agree_rc(sp_budget("bench", &shapes[si], single, branch, ctx));
  cJSON *root = cJSON_CreateObject(), *js = cJSON_AddArrayToObject(root, "shapes");
  if (!rc && g_rank == 0) {
    camdelta_device_info info;
    camdelta_context_info(ctx, &info);
    cJSON_AddNumberToObject(root, "ranks", g_size);
    cJSON_AddStringToObject(root, "device_rank0", info.device_name);
    printf("camdelta bench --sequence-parallel: %d ranks, rank 0 on %s (%s); median of %zu runs after %zu warm-up\n",
           g_size, info.device_name, info.platform_name, reps, warmup);
  }
  for (int si = 0; si < nshapes && !rc; si++) {
    const shape5 *s = &shapes[si];
    if (s->F < (size_t)g_size) {
      rc = g_rank == 0 ? cli_error(CLI_EXIT_USAGE, "bench: shape %s has F = %zu < %d ranks", s->name, s->F, g_size)
                       : CLI_EXIT_USAGE;
      break;
    }
    sp_prob p;
    memset(&p, 0, sizeof p);
    p.B = s->B, p.H = s->H, p.D = s->D, p.F = s->F, p.S = s->S, p.N = s->F * s->S, p.BH = s->B * s->H;
    size_t f0, fl;
    camdelta_mpi_frame_share(p.F, g_size, g_rank, &f0, &fl);
    bufs b;
    rc = agree_rc(bufs_make(ctx, &p, f0, fl, &b)); /* random share */
    br_prob bp;
    br_bufs bb;
    camdelta_branch_saved *bsv = NULL;
    memset(&bp, 0, sizeof bp), memset(&bb, 0, sizeof bb);
    if (!rc && branch) rc = agree_rc(br_make(&bp, s));
    if (!rc && branch) rc = agree_rc(br_bufs_make(ctx, &bp, f0, fl, &bb));
    if (!rc && branch) {
      const camdelta_status bst = camdelta_branch_saved_create(ctx, &bsv);
      rc = agree_rc(bst ? cli_lib_error(bst, "branch saved") : 0);
    }
    if (!rc && g_rank == 0) {
      printf("\nshape %s: B=%zu H=%zu D=%zu F=%zu S=%zu", s->name, p.B, p.H, p.D, p.F, p.S);
      if (branch) printf("; branch grid %zux%zux%zu, chunk size %zu", bp.T, bp.Hs, bp.Ws, bp.cs);
      printf("\n%-22s %-5s %-6s %10s %10s %10s %10s %8s %8s %10s %10s %8s %8s %8s\n", "operation", "rank", "frames",
             "total ms", "compute", "wait", "exchange", "exch. %", "wait %", "summary", "local", "d2h", "mpi", "h2d");
    }
    cJSON *jshape = cJSON_CreateObject();
    cJSON_AddItemToArray(js, jshape);
    cJSON_AddStringToObject(jshape, "name", s->name);
    cJSON *jops = cJSON_AddArrayToObject(jshape, "ops");
    enum { NPH = 10 }; /* total, summary, exchange, combine, local, wait, compute; the exchange's d2h, mpi, h2d */
    static const char *const OPNAMES[6] = {"scan forward causal", "scan forward reverse", "scan backward causal",
                                           "scan backward reverse", "branch forward", "branch backward"};
    for (int opi = 0; opi < (branch ? 6 : 4) && !rc; opi++) {
      const int bwd = opi == 2 || opi == 3 || opi == 5, reverse = opi < 4 && opi % 2;
      const char *opname = OPNAMES[opi];
      double *ph[NPH];
      for (int k = 0; k < NPH; k++) ph[k] = calloc(reps ? reps : 1, sizeof(double));
      camdelta_status st = CAMDELTA_OK;
      for (size_t it = 0; it < warmup + reps && !st; it++) {
        camdelta_mpi_timing tm;
        MPI_Barrier(MPI_COMM_WORLD);
        if (opi >= 4) st = br_run(ctx, &bp, fl, &bb, bwd, bsv, 1, &tm); /* the backward from the forward's saved */
        else st = bwd ? run_bwd(ctx, &p, fl, &b, reverse, 1, &tm) : run_fwd(ctx, &p, fl, &b, reverse, 1, &tm);
        if (!st && it >= warmup) {
          const double x[NPH] = {tm.total_ms, tm.summary_ms, tm.exchange_ms, tm.combine_ms, tm.scan_ms,
                                 tm.wait_ms,  tm.compute_ms, tm.d2h_ms,      tm.mpi_ms,     tm.h2d_ms};
          for (int k = 0; k < NPH; k++) ph[k][it - warmup] = x[k];
        }
      }
      if (st) {
        rc = g_rank == 0 ? cli_lib_error(st, opname) : cli_exit_code(st);
      } else {
        double med[NPH + 1];
        for (int k = 0; k < NPH; k++) med[k] = reps ? cli_median(ph[k], reps) : 0;
        med[NPH] = (double)fl;
        double *all = g_rank == 0 ? malloc((size_t)g_size * (NPH + 1) * sizeof *all) : NULL;
        MPI_Gather(med, NPH + 1, MPI_DOUBLE, all, NPH + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (g_rank == 0 && all) {
          cJSON *jop = cJSON_CreateObject();
          cJSON_AddItemToArray(jops, jop);
          cJSON_AddStringToObject(jop, "op", opname);
          cJSON *jr = cJSON_AddArrayToObject(jop, "ranks");
          for (int r = 0; r < g_size; r++) {
            const double *m = all + r * (NPH + 1);
            printf("%-22s %-5d %-6.0f %10.3f %10.3f %10.3f %10.3f %7.1f%% %7.1f%% %10.3f %10.3f %8.3f %8.3f %8.3f\n",
                   opname, r, m[NPH], m[0], m[6], m[5], m[2], m[0] > 0 ? 100.0 * m[2] / m[0] : 0.0,
                   m[0] > 0 ? 100.0 * m[5] / m[0] : 0.0, m[1], m[4], m[7], m[8], m[9]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(jr, o);
            cJSON_AddNumberToObject(o, "frames", m[NPH]);
            cJSON_AddNumberToObject(o, "total_ms", m[0]);
            cJSON_AddNumberToObject(o, "compute_ms", m[6]);
            cJSON_AddNumberToObject(o, "wait_ms", m[5]);
            cJSON_AddNumberToObject(o, "exchange_ms", m[2]);
            cJSON_AddNumberToObject(o, "summary_ms", m[1]);
            cJSON_AddNumberToObject(o, "combine_ms", m[3]);
            cJSON_AddNumberToObject(o, "local_ms", m[4]);
            cJSON_AddNumberToObject(o, "d2h_ms", m[7]);
            cJSON_AddNumberToObject(o, "mpi_ms", m[8]);
            cJSON_AddNumberToObject(o, "h2d_ms", m[9]);
          }
        }
        free(all);
      }
      for (int k = 0; k < NPH; k++) free(ph[k]);
      rc = agree_rc(rc);
    }
    bufs_free(&b);
    br_bufs_free(&bb);
    camdelta_branch_saved_destroy(bsv);
    /* the whole sequence on one device (rank 0; the other ranks wait) */
    if (!rc && single) {
      int lrc = CLI_EXIT_OK;
      if (g_rank == 0) {
        bufs w;
        br_bufs wb;
        camdelta_branch_saved *wsv = NULL;
        memset(&wb, 0, sizeof wb);
        lrc = bufs_make(ctx, &p, 0, p.F, &w);
        if (!lrc && branch) lrc = br_bufs_make(ctx, &bp, 0, bp.T, &wb);
        if (!lrc && branch) {
          const camdelta_status bst = camdelta_branch_saved_create(ctx, &wsv);
          if (bst) lrc = cli_lib_error(bst, "branch saved");
        }
        static const char *const SINGLE[6] = {"single forward causal",  "single forward reverse",
                                              "single backward causal", "single backward reverse",
                                              "single branch forward",  "single branch backward"};
        for (int opi = 0; opi < (branch ? 6 : 4) && !lrc; opi++) {
          const int bwd = opi == 2 || opi == 3 || opi == 5, reverse = opi < 4 && opi % 2;
          double *t = calloc(reps ? reps : 1, sizeof *t);
          camdelta_status st = CAMDELTA_OK;
          for (size_t it = 0; it < warmup + reps && !st && t; it++) {
            const double t0 = now_ms();
            if (opi >= 4) st = br_run(ctx, &bp, bp.T, &wb, bwd, wsv, 0, NULL);
            else st = bwd ? run_bwd(ctx, &p, p.F, &w, reverse, 0, NULL) : run_fwd(ctx, &p, p.F, &w, reverse, 0, NULL);
            if (it >= warmup) t[it - warmup] = now_ms() - t0;
          }
          if (st) lrc = cli_lib_error(st, opi >= 4 ? "one-device branch" : "one-device scan");
          else if (t) {
            const double m = reps ? cli_median(t, reps) : 0;
            printf("%-22s %-5s %-6zu %10.3f   (one device, whole sequence, wall time)\n", OPNAMES[opi], "one", p.F, m);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(jops, o);
            cJSON_AddStringToObject(o, "op", SINGLE[opi]);
            cJSON_AddNumberToObject(o, "total_ms", m);
          }
          free(t);
        }
        bufs_free(&w);
        br_bufs_free(&wb);
        camdelta_branch_saved_destroy(wsv);
      }
      rc = agree_rc(lrc);
    }
    br_free(&bp);
  }
  if (!rc && g_rank == 0 && json) {
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(json, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) rc = cli_error(CLI_EXIT_FAILURE, "--json %s: cannot write", json);
    free(text);
  }
  cJSON_Delete(root);
  camdelta_context_destroy(ctx);
  return sp_end(rc);
}

#endif /* CAMDELTA_WITH_MPI */
