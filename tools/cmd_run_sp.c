/* `camdelta run scan|scan-backward|branch|branch-backward --sequence-parallel`, under mpirun: every rank reads
 * the inputs, takes its contiguous share of frames (camdelta_mpi_frame_share) and runs the MPI component's call;
 * rank 0 gathers the shares and writes the same files as a single-device run (docs/math.md §7 and §9). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_packed.h"
#include "sp_mpi.h"

#ifndef CAMDELTA_WITH_MPI

int cmd_run_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return sp_no_mpi();
}

#else


/* An output: name, rows and columns per frame (unit; 0: not split over frames, `rows` elements in all), ndim, shape. */
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

/* Elements of output o on a rank with fl frames. */
static size_t out_count(const sp_out *o, size_t fl) { return o->unit ? o->rows * fl * o->unit : o->rows; }

/* Rank 0 gathers the shares of every output of F frames (an output of unit 0 is whole, the same on every rank) and
 * writes them into outdir as one set, all or nothing (cli_outset.h), when rc is 0; every rank returns the same exit
 * code. */
static int write_outputs(camdelta_context *ctx, const sp_out *o, int no, size_t fl, size_t F, const char *outdir,
                         int rc) {
  cli_outset *set = NULL;
  if (!rc && sp_rank == 0) set = cli_outset_open(outdir, &rc);
  rc = sp_agree(rc);
  for (int i = 0; i < no && !rc; i++) {
    float *h = NULL, *full = NULL;
    rc = sp_agree(sp_download(ctx, o[i].mem, out_count(&o[i], fl), &h));
    if (!rc && o[i].unit) rc = sp_agree(sp_gather_cols(h, o[i].rows, F, o[i].unit, &full));
    else if (!rc) full = h, h = NULL;
    if (!rc && sp_rank == 0 && (rc = cli_outset_add(set, o[i].name, CAMDELTA_NPY_F4, o[i].ndim, o[i].shape, full)))
      set = NULL; /* aborted by the failed add */
    rc = sp_agree(rc);
    free(h), free(full);
  }
  if (sp_rank == 0 && set && rc) cli_outset_abort(set);
  else if (sp_rank == 0 && set) rc = cli_outset_commit(set);
  return sp_agree(rc);
}

/* Ends the report line with " NAME ... to DIR" when `report`, and releases the outputs' device buffers. */
static void outputs_done(sp_out *o, int no, const char *outdir, int report) {
  if (report) {
    for (int i = 0; i < no; i++) printf(" %s", o[i].name);
    printf(" to %s\n", outdir);
  }
  for (int i = 0; i < no; i++)
    if (o[i].mem) clReleaseMemObject(o[i].mem), o[i].mem = NULL;
}

/* The device buffer of output `name` among o[0..n), NULL when there is none of that name (an output not asked for). */
static cl_mem out_mem(const sp_out *o, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(o[i].name, name) == 0) return o[i].mem;
  return NULL;
}

/* cli_run_option, with --sequence-parallel taken as well. */
static int run_option(cli_args *a, cli_run_opts *c) {
  return cli_flag(a, "--sequence-parallel") ? CLI_OPT_TAKEN : cli_run_option(a, c);
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
    int r = run_option(&a, &c); /* --help: the usage of run printed */
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
  if (T < (size_t)sp_size)
    rc = cli_error(CLI_EXIT_INPUT, "--grid: T = %zu frames cannot be split over %d ranks (every rank needs a frame)",
                   T, sp_size);
  if ((rc = sp_agree(rc))) goto done;
  if ((rc = sp_agree(sp_context(&ctx, device)))) goto done;
  {
    size_t f0, fl;
    camdelta_mpi_frame_share(T, sp_size, sp_rank, &f0, &fl);
    /* rows and per-frame columns of each input (0: whole, not split) */
    const size_t rows[I_N] = {B, B, B, 4 * C, C, C, B, B * H, B * H, B};
    const size_t unit[I_N] = {S * C, S * C, S * C, 0, 0, 0, 20, S, 1, S * C};
    cl_mem m[I_N] = {NULL};
    for (int i = 0; i < I_N && !rc; i++) {
      if (i == I_GY && !backward) continue;
      float *loc = unit[i] ? sp_slice(t[i].npy.data, rows[i], T * unit[i], f0 * unit[i], fl * unit[i]) : NULL;
      if (unit[i] && !loc) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
      if (!rc) rc = sp_upload(ctx, unit[i] ? loc : t[i].npy.data, unit[i] ? rows[i] * fl * unit[i] : rows[i], &m[i]);
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
      rc = sp_upload(ctx, NULL, out_count(&o[i], fl), &o[i].mem);
    rc = sp_agree(rc);
    const double t0 = sp_now_ms();
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
        ba.y.mem = out_mem(o, no, "y");
        st = camdelta_mpi_branch_forward(ctx, &ba, NULL, MPI_COMM_WORLD);
      } else {
        camdelta_branch_grads g;
        memset(&g, 0, sizeof g);
        g.grad_y.mem = m[I_GY];
        g.dq_raw.mem = out_mem(o, no, "dq_raw"), g.dk_raw.mem = out_mem(o, no, "dk_raw");
        g.dv_raw.mem = out_mem(o, no, "dv_raw"), g.dconv_weight.mem = out_mem(o, no, "dconv_weight");
        g.dq_norm_weight.mem = out_mem(o, no, "dq_norm_weight");
        g.dk_norm_weight.mem = out_mem(o, no, "dk_norm_weight");
        g.dbeta.mem = out_mem(o, no, "dbeta"), g.ddecay.mem = out_mem(o, no, "ddecay");
        st = camdelta_mpi_branch_backward(ctx, &ba, &g, NULL, MPI_COMM_WORLD);
      }
      const char *call = backward ? "camdelta_mpi_branch_backward" : "camdelta_mpi_branch_forward";
      if (st) rc = sp_rank == 0 ? cli_lib_error(st, call) : cli_exit_code(st);
    }
    const double ms = sp_now_ms() - t0;
    rc = write_outputs(ctx, o, no, fl, T, outdir, rc); /* the weights' gradients: summed over the ranks */
    double slowest = ms;
    MPI_Reduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const int report = !rc && sp_rank == 0 && !quiet;
    if (report)
      printf("camdelta run %s: sequence parallel over %d ranks: B=%zu H=%zu D=%zu grid %zux%zux%zu; slowest rank "
             "%.3f ms; wrote", op, sp_size, B, H, D, T, Hs, Ws, slowest);
    outputs_done(o, no, outdir, report);
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
    int r = run_option(&a, &c); /* --help: the usage of run printed */
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
  cli_tensor t[CLI_SCAN_COUNT];
  memset(t, 0, sizeof t);
  size_t B = 0, H = 0, D = 0, N = 0, F = 0, S = 0;
  rc = cli_tensor_load_f32(&t[CLI_SCAN_Q], in, "q", 0, -4, NULL, "(B, H, D, N)");
  if (!rc) rc = cli_tensor_load_f32(&t[CLI_SCAN_BETA], in, "beta", 0, -4, NULL, "(B, H, F, S)");
  if (!rc) {
    const size_t *s = t[CLI_SCAN_Q].npy.shape, *bs = t[CLI_SCAN_BETA].npy.shape;
    B = s[0], H = s[1], D = s[2], N = s[3], F = bs[2], S = bs[3];
    if (bs[0] != B || bs[1] != H || (S ? F > N / S || F * S != N : N != 0)) {
      char have[256];
      rc = cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected (B, H, F, S) with B = %zu, H = %zu and "
                     "F*S = N = %zu (from %s)", t[CLI_SCAN_BETA].path, cli_shape_str(have, sizeof have, 4, bs), B, H, N,
                     t[CLI_SCAN_Q].path);
    }
  }
  const size_t bhdn[4] = {B, H, D, N}, bhf[3] = {B, H, F}, bhdd[4] = {B, H, D, D};
  if (!rc) rc = cli_load_scan_inputs(t, in, backward, bhdn, "(B, H, D, N)", bhf, "(B, H, F)", bhdd, "(B, H, D, D)");
  if (rc || (rc = sp_init())) goto done_inputs;
  if (F < (size_t)sp_size)
    rc = cli_error(CLI_EXIT_INPUT, "%s: F = %zu frames cannot be split over %d ranks (every rank needs a frame)",
                   t[CLI_SCAN_BETA].path, F, sp_size);
  if ((rc = sp_agree(rc))) goto done_inputs;

  camdelta_context *ctx = NULL;
  rc = sp_agree(sp_context(&ctx, device));
  if (rc) goto done_ctx;
  {
    size_t f0, fl;
    camdelta_mpi_frame_share(F, sp_size, sp_rank, &f0, &fl);
    const size_t BH = B * H, n0 = f0 * S, nl = fl * S, ns = BH * D * D, tl = BH * D * nl;
    const int has_init = t[CLI_SCAN_INIT].present, has_gf = backward && t[CLI_SCAN_GF].present;
    cl_mem m[16] = {NULL};
    int nm = 0;
    float *loc[6] = {NULL};
    /* this rank's share: token tensors by (b, h, d) rows, beta by (b, h) rows, decay by (b, h) rows of frames */
    const int tok_in[4] = {CLI_SCAN_Q, CLI_SCAN_K, CLI_SCAN_V, CLI_SCAN_GO};
    for (int i = 0; i < 4 && !rc; i++) {
      if (tok_in[i] == CLI_SCAN_GO && !backward) continue;
      loc[i] = sp_slice(t[tok_in[i]].npy.data, BH * D, N, n0, nl);
      if (!loc[i]) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    }
    if (!rc) loc[4] = sp_slice(t[CLI_SCAN_BETA].npy.data, BH, N, n0, nl), loc[5] = sp_slice(t[CLI_SCAN_DECAY].npy.data, BH, F, f0, fl);
    if (!rc && (!loc[4] || !loc[5])) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    cl_mem q = NULL, k = NULL, vv = NULL, go = NULL, beta = NULL, decay = NULL, init = NULL, gf = NULL;
    if (!rc) rc = sp_upload(ctx, loc[0], tl, &q);
    if (!rc) rc = sp_upload(ctx, loc[1], tl, &k);
    if (!rc) rc = sp_upload(ctx, loc[2], tl, &vv);
    if (!rc && backward) rc = sp_upload(ctx, loc[3], tl, &go);
    if (!rc) rc = sp_upload(ctx, loc[4], BH * nl, &beta);
    if (!rc) rc = sp_upload(ctx, loc[5], BH * fl, &decay);
    if (!rc && has_init) rc = sp_upload(ctx, t[CLI_SCAN_INIT].npy.data, ns, &init);
    if (!rc && has_gf) rc = sp_upload(ctx, t[CLI_SCAN_GF].npy.data, ns, &gf);
    m[nm++] = q, m[nm++] = k, m[nm++] = vv, m[nm++] = go, m[nm++] = beta, m[nm++] = decay, m[nm++] = init;
    m[nm++] = gf;
    /* outputs: name, rows, columns per frame (0: a whole state), ndim, shape */
    sp_out o[6];
    int no = 0;
    if (!backward) {
      o[no++] = sp_output("out", BH * D, S, 4, B, H, D, N);
      if (final_state) o[no++] = sp_output("final_state", ns, 0, 4, B, H, D, D);
    } else {
      o[no++] = sp_output("dq", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dk", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dv", BH * D, S, 4, B, H, D, N);
      o[no++] = sp_output("dbeta", BH, S, 4, B, H, F, S);
      o[no++] = sp_output("ddecay", BH, 1, 3, B, H, F, 0);
      if (has_init) o[no++] = sp_output("dinit_state", ns, 0, 4, B, H, D, D);
    }
    for (int i = 0; i < no && !rc; i++) rc = sp_upload(ctx, NULL, out_count(&o[i], fl), &o[i].mem);
    rc = sp_agree(rc);
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
        sa.out.mem = out_mem(o, no, "out"), sa.final_state.mem = out_mem(o, no, "final_state"); /* --final-state */
        st = camdelta_mpi_scan_forward(ctx, &sa, NULL, MPI_COMM_WORLD, &tm);
      } else {
        camdelta_scan_backward_args ba;
        memset(&ba, 0, sizeof ba);
        ba.B = B, ba.H = H, ba.D = D, ba.F = fl, ba.S = S, ba.reverse = reverse;
        ba.q.mem = q, ba.k.mem = k, ba.v.mem = vv, ba.beta.mem = beta, ba.decay.mem = decay, ba.init_state.mem = init;
        ba.grad_out.mem = go, ba.grad_final_state.mem = gf;
        ba.dq.mem = out_mem(o, no, "dq"), ba.dk.mem = out_mem(o, no, "dk"), ba.dv.mem = out_mem(o, no, "dv");
        ba.dbeta.mem = out_mem(o, no, "dbeta"), ba.ddecay.mem = out_mem(o, no, "ddecay");
        ba.dinit_state.mem = out_mem(o, no, "dinit_state"); /* with init_state */
        st = camdelta_mpi_scan_backward(ctx, &ba, NULL, MPI_COMM_WORLD, &tm);
      }
      /* the status is the same on every rank: rank 0 reports it */
      if (st) rc = sp_rank == 0 ? cli_lib_error(st, backward ? "camdelta_mpi_scan_backward" : "camdelta_mpi_scan_forward")
                               : cli_exit_code(st);
    }
    rc = write_outputs(ctx, o, no, fl, F, outdir, rc); /* the whole states: the same on every rank */
    /* timings: the largest over the ranks */
    double mx[5] = {tm.summary_ms, tm.exchange_ms, tm.combine_ms, tm.scan_ms, tm.total_ms}, all[5];
    MPI_Reduce(mx, all, 5, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const int report = !rc && sp_rank == 0 && !quiet;
    if (report) {
      camdelta_device_info info;
      const char *dev = camdelta_context_info(ctx, &info) == CAMDELTA_OK ? info.device_name : "?";
      printf("camdelta run %s: sequence parallel over %d ranks (%s on rank 0): B=%zu H=%zu D=%zu F=%zu S=%zu %s%s%s; "
             "slowest rank: %.3f ms (summaries %.3f, exchange %.3f, combine %.3f, local %s %.3f); wrote",
             op, sp_size, dev, B, H, D, F, S, reverse ? "reverse" : "causal", has_init ? " from init_state" : "",
             has_gf ? " with grad_final_state" : "", all[4], all[0], all[1], all[2], backward ? "backward" : "scan",
             all[3]);
    }
    outputs_done(o, no, outdir, report);
    for (int i = 0; i < nm; i++)
      if (m[i]) clReleaseMemObject(m[i]);
    for (int i = 0; i < 6; i++) free(loc[i]);
  }
done_ctx:
  camdelta_context_destroy(ctx);
done_inputs:
  for (int i = 0; i < CLI_SCAN_COUNT; i++) cli_tensor_free(&t[i]);
  return sp_end(rc);
}

#endif /* CAMDELTA_WITH_MPI */
