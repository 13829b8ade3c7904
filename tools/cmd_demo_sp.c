/* `camdelta demo --sequence-parallel [--shape B,H,D,F,S] [--no-branch]`, under mpirun: rank 0 runs the whole
 * sequence on one device, every rank checks its share of the sequence-parallel forward and backward (both
 * directions) against it; then the same for the whole camera branch forward and backward (camdelta_mpi_branch_*;
 * grid F x Hs x Ws with Hs·Ws = S, patch 1, uniform chunks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_problems.h"

#ifndef CAMDELTA_WITH_MPI

int cmd_demo_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return sp_no_mpi();
}

#else

static const char *const BUF_NAME[B_COUNT] = {"q",     "k",      "v",  "beta", "decay", "grad_out", "init", "gf",
                                              "out",   "final",  "dq", "dk",   "dv",    "dbeta",    "ddecay",
                                              "dinit"};

/* Output buffers compared in the demo and their column unit (S tokens, 1 frame, 0 whole state). */
static const int DEMO_OUT[8] = {B_OUT, B_FIN, B_DQ, B_DK, B_DV, B_DB, B_DD, B_DI};

static size_t rows_of(const sp_prob *p, int i) {
  return (i == B_OUT || i == B_DQ || i == B_DK || i == B_DV) ? p->BH * p->D : (i == B_DB || i == B_DD) ? p->BH : 1;
}
static size_t unit_of(const sp_prob *p, int i) {
  return (i == B_FIN || i == B_DI) ? 0 : i == B_DD ? 1 : p->S;
}

static const char *const BO_NAME[BO_N] = {"y", "dq_raw", "dk_raw", "dv_raw", "dconv_w", "dq_norm_w", "dk_norm_w",
                                          "dbeta", "ddecay"};

/* demo: the branch forward and backward over the ranks against one device (rank 0); prints one row per rank and
 * returns the largest relative difference in *worst. */
static int demo_branch(camdelta_context *ctx, const sp_shape *shape, camdelta_scan_algorithm alg,
                       double *worst) {
  sp_br_prob p;
  int rc = sp_agree(sp_br_make(&p, shape, alg));
  size_t f0, fl;
  camdelta_mpi_frame_share(p.T, sp_size, sp_rank, &f0, &fl);
  float *ref[BO_N] = {NULL};
  if (!rc && sp_rank == 0) {
    sp_br_bufs w;
    camdelta_branch_saved *sv = NULL;
    rc = sp_br_bufs_make(ctx, &p, 0, p.T, &w);
    camdelta_status st = rc ? CAMDELTA_OK : camdelta_branch_saved_create(ctx, &sv);
    /* the reference: one device, the same arithmetic as the ranks (the fused scan pair of the single-device
     * branch sums in another order: the two stay within the bounds of docs/math.md §5 of the f64 reference) */
    if (!rc && !st) st = sp_br_run(ctx, &p, p.T, &w, 0, sv, 2, NULL);
    if (!rc && !st) st = sp_br_run(ctx, &p, p.T, &w, 1, sv, 2, NULL);
    if (!rc && st) rc = cli_lib_error(st, "one-device branch");
    for (int i = 0; i < BO_N && !rc; i++) rc = sp_download(ctx, w.out[i], w.nout[i], &ref[i]);
    camdelta_branch_saved_destroy(sv);
    sp_br_bufs_free(&w);
  }
  rc = sp_agree(rc);
  for (int i = 0; i < BO_N && !rc; i++) {
    const size_t n = p.orows[i] * (p.ounit[i] ? p.T * p.ounit[i] : 1);
    if (sp_rank != 0 && !(ref[i] = malloc(n * 4 + 4))) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    if ((rc = sp_agree(rc))) break;
    MPI_Bcast(ref[i], (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  sp_br_bufs mine;
  memset(&mine, 0, sizeof mine);
  camdelta_branch_saved *sv = NULL;
  if (!rc) rc = sp_agree(sp_br_bufs_make(ctx, &p, f0, fl, &mine));
  if (!rc && sp_rank == 0) {
    printf("\nthe camera branch (camdelta_mpi_branch_forward / _backward; one device: the same calls on MPI_COMM_SELF): "
           "grid %zux%zux%zu, patch 1, chunk size %zu "
           "(uniform), saved states\n%-8s %-5s", p.T, p.Hs, p.Ws, p.cs, "pass", "rank");
    for (int i = 0; i < BO_N; i++) printf(" %9s", BO_NAME[i]);
    printf(" %9s %9s\n", "total ms", "exch. ms");
  }
  camdelta_mpi_timing tf, tb;
  camdelta_status st = CAMDELTA_OK;
  if (!rc) rc = sp_agree((st = camdelta_branch_saved_create(ctx, &sv)) ? cli_lib_error(st, "branch saved") : 0);
  if (!rc) {
    st = sp_br_run(ctx, &p, fl, &mine, 0, sv, 1, &tf);
    if (!st) st = sp_br_run(ctx, &p, fl, &mine, 1, sv, 1, &tb);
    if (st) rc = sp_rank == 0 ? cli_lib_error(st, "sequence-parallel branch") : cli_exit_code(st);
  }
  double err[BO_N + 2] = {0};
  for (int i = 0; i < BO_N && !rc; i++) {
    const size_t rows = p.orows[i], u = p.ounit[i], cols = u ? p.T * u : 1, lc = u ? fl * u : 1, c0 = u ? f0 * u : 0;
    err[i] = sp_share_error(ctx, mine.out[i], ref[i], rows, cols, lc, c0);
    *worst = fmax(*worst, err[i]);
  }
  if (!rc) {
    err[BO_N] = tf.total_ms + tb.total_ms, err[BO_N + 1] = tf.exchange_ms + tb.exchange_ms;
    double *all = sp_rank == 0 ? malloc((size_t)sp_size * (BO_N + 2) * sizeof *all) : NULL;
    MPI_Gather(err, BO_N + 2, MPI_DOUBLE, all, BO_N + 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (sp_rank == 0 && all) {
      for (int r = 0; r < sp_size; r++) {
        printf("%-8s %-5d", "branch", r);
        for (int i = 0; i < BO_N; i++) printf(" %9.1e", all[r * (BO_N + 2) + i]);
        printf(" %9.2f %9.2f\n", all[r * (BO_N + 2) + BO_N], all[r * (BO_N + 2) + BO_N + 1]);
      }
    }
    free(all);
  }
  camdelta_branch_saved_destroy(sv);
  sp_br_bufs_free(&mine);
  for (int i = 0; i < BO_N; i++) free(ref[i]);
  sp_br_free(&p);
  return sp_agree(rc);
}

int cmd_demo_sp(int argc, char **argv) {
  const char *device = NULL, *v;
  sp_shape shape = {.name = "1,4,32,8,64", .B = 1, .H = 4, .D = 32, .F = 8, .S = 64};
  /* chunkwise by default: its chain M_f = A_f·M + U_f is the arithmetic of the state summaries, so the comparison
   * shows the sequence-parallel split, not the difference between the two algorithms' f32 rounding */
  camdelta_scan_algorithm alg = CAMDELTA_SCAN_CHUNKWISE;
  int branch = 1;
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    int r;
    if ((r = cli_sp_option(&a, &branch, &alg))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--shape", &v))) {
      if (r < 0 || !cli_parse_shape("demo --sequence-parallel", "--shape", v, 1, &shape)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--seed", &v))) {
      size_t seed;
      if (r < 0 || !cli_parse_size("--seed", v, &seed)) return CLI_EXIT_USAGE;
      sp_seed(seed);
    } else {
      return cli_error(CLI_EXIT_USAGE, "demo --sequence-parallel: unknown option '%s' (--shape, --device, --seed, "
                       "--algorithm, --no-branch)", argv[a.i]);
    }
  }
  int rc = sp_budget("demo", &shape, 1, branch, NULL); /* the host, before MPI starts */
  if (rc) return rc;
  if ((rc = sp_init())) return rc;
  if (shape.F < (size_t)sp_size) {
    if (sp_rank == 0) cli_error(CLI_EXIT_USAGE, "demo: F = %zu frames cannot be split over %d ranks", shape.F, sp_size);
    return sp_end(CLI_EXIT_USAGE);
  }
  sp_prob p;
  memset(&p, 0, sizeof p);
  camdelta_context *ctx = NULL;
  rc = sp_agree(sp_context(&ctx, device));
  if (!rc) rc = sp_agree(sp_budget("demo", &shape, 1, branch, ctx));
  if (!rc) rc = sp_agree(sp_prob_make(&p, &shape, alg)); /* the same problem on every rank (same generator, same seed) */
  size_t f0, fl;
  camdelta_mpi_frame_share(p.F, sp_size, sp_rank, &f0, &fl);
  sp_bufs whole, mine;
  memset(&whole, 0, sizeof whole), memset(&mine, 0, sizeof mine);
  if (!rc) rc = sp_agree(sp_bufs_make(ctx, &p, f0, fl, &mine));
  if (!rc && sp_rank == 0) {
    camdelta_device_info info;
    camdelta_context_info(ctx, &info);
    printf("camdelta demo --sequence-parallel %s: %d ranks, rank 0 on %s (%s)\n", camdelta_version_string(), sp_size,
           info.device_name, info.platform_name);
    printf("shape B=%zu H=%zu D=%zu F=%zu S=%zu; frames per rank:", p.B, p.H, p.D, p.F, p.S);
    for (int r = 0; r < sp_size; r++) {
      size_t r0, rl;
      camdelta_mpi_frame_share(p.F, sp_size, r, &r0, &rl);
      printf(" %zu", rl);
    }
    printf("; init_state, final_state and grad_final_state given; forward algorithm %s\n",
           camdelta_scan_algorithm_name(alg));
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
    if (sp_rank == 0) {
      lrc = sp_bufs_make(ctx, &p, 0, p.F, &whole);
      camdelta_status st = lrc ? CAMDELTA_OK : sp_run_fwd(ctx, &p, p.F, &whole, reverse, 0, NULL);
      if (!st && !lrc) st = sp_run_bwd(ctx, &p, p.F, &whole, reverse, 0, NULL);
      if (st) lrc = cli_lib_error(st, "one-device scan");
      for (int i = 0; i < 8 && !lrc; i++) lrc = sp_download(ctx, whole.m[DEMO_OUT[i]], whole.n[DEMO_OUT[i]], &ref[i]);
      sp_bufs_free(&whole);
    }
    if ((rc = sp_agree(lrc))) break;
    for (int i = 0; i < 8; i++) {
      const int bi = DEMO_OUT[i];
      const size_t n = unit_of(&p, bi) ? rows_of(&p, bi) * p.F * unit_of(&p, bi) : p.BH * p.D * p.D;
      if (sp_rank != 0) ref[i] = malloc(n * 4 + 4);
      MPI_Bcast(ref[i], (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
    /* sequence parallel */
    camdelta_mpi_timing tf, tb;
    camdelta_status st = sp_run_fwd(ctx, &p, fl, &mine, reverse, 1, &tf);
    if (!st) st = sp_run_bwd(ctx, &p, fl, &mine, reverse, 1, &tb);
    if (st) {
      rc = sp_rank == 0 ? cli_lib_error(st, "sequence-parallel scan") : cli_exit_code(st);
    } else {
      double err[10];
      for (int i = 0; i < 8; i++) {
        const int bi = DEMO_OUT[i];
        const size_t rows = rows_of(&p, bi), unit = unit_of(&p, bi), cols = unit ? p.F * unit : p.BH * p.D * p.D;
        const size_t lc = unit ? fl * unit : cols, c0 = unit ? f0 * unit : 0;
        err[i] = sp_share_error(ctx, mine.m[bi], ref[i], rows, cols, lc, c0);
        worst = fmax(worst, err[i]);
      }
      err[8] = tf.total_ms + tb.total_ms, err[9] = tf.exchange_ms + tb.exchange_ms;
      double *all = sp_rank == 0 ? malloc((size_t)sp_size * 10 * sizeof *all) : NULL;
      MPI_Gather(err, 10, MPI_DOUBLE, all, 10, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (sp_rank == 0) {
        for (int r = 0; r < sp_size; r++) {
          printf("%-8s %-5d", reverse ? "reverse" : "causal", r);
          for (int i = 0; i < 8; i++) printf(" %9.1e", all[r * 10 + i]);
          printf(" %9.2f %9.2f\n", all[r * 10 + 8], all[r * 10 + 9]);
        }
        free(all);
      }
    }
    for (int i = 0; i < 8; i++) free(ref[i]);
    rc = sp_agree(rc);
  }
  if (!rc && branch) rc = demo_branch(ctx, &shape, alg, &worst);
  double w = worst;
  MPI_Allreduce(&worst, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (!rc) {
    if (sp_rank == 0)
      printf("\nlargest difference against one device: %.2e (bound 1e-6): %s\n", w, w <= 1e-6 ? "PASS" : "FAIL");
    if (!(w <= 1e-6)) rc = 5;
  }
  sp_bufs_free(&mine);
  camdelta_context_destroy(ctx);
  sp_prob_free(&p);
  return sp_end(rc);
}

#endif /* CAMDELTA_WITH_MPI */
