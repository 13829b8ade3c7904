/* `camdelta bench --sequence-parallel [--shape ...] [--no-branch]`, under mpirun: time per rank of the
 * sequence-parallel scan forward and backward and of the branch forward and backward (local compute, waiting for
 * the other ranks, the exchange, the summaries, the local rest), beside the single-device time (rank 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_problems.h"

#ifndef CAMDELTA_WITH_MPI

int cmd_bench_sp(int argc, char **argv) {
  (void)argc, (void)argv;
  return sp_no_mpi();
}

#else

#include <cjson/cJSON.h>

int cmd_bench_sp(int argc, char **argv) {
  const char *device = NULL, *json = NULL, *v;
  sp_shape shapes[8];
  int nshapes = 0, single = 1, branch = 1;
  camdelta_scan_algorithm alg = CAMDELTA_SCAN_AUTO;
  size_t reps = 10, warmup = 2;
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    int r;
    if (cli_flag(&a, "--no-single")) {
      single = 0;
      continue;
    }
    if ((r = cli_sp_option(&a, &branch, &alg))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--shape", &v))) {
      if (r < 0) return CLI_EXIT_USAGE;
      if (nshapes == 8) return cli_error(CLI_EXIT_USAGE, "bench: at most 8 --shape options");
      if (!cli_parse_shape("bench --sequence-parallel", "--shape", v, 1, &shapes[nshapes])) return CLI_EXIT_USAGE;
      nshapes++;
    } else if ((r = cli_value(&a, "--device", &device)) || (r = cli_value(&a, "--json", &json))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_reps_option(&a, &reps, &warmup))) {
      if (r < 0) return CLI_EXIT_USAGE;
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
  rc = sp_agree(sp_context(&ctx, device));
  for (int si = 0; si < nshapes && !rc; si++) rc = sp_agree(sp_budget("bench", &shapes[si], single, branch, ctx));
  cJSON *root = cJSON_CreateObject(), *js = cJSON_AddArrayToObject(root, "shapes");
  if (!rc && sp_rank == 0) {
    camdelta_device_info info;
    camdelta_context_info(ctx, &info);
    cJSON_AddNumberToObject(root, "ranks", sp_size);
    cJSON_AddStringToObject(root, "device_rank0", info.device_name);
    printf("camdelta bench --sequence-parallel: %d ranks, rank 0 on %s (%s); median of %zu runs after %zu warm-up\n",
           sp_size, info.device_name, info.platform_name, reps, warmup);
  }
  for (int si = 0; si < nshapes && !rc; si++) {
    const sp_shape *s = &shapes[si];
    if (s->F < (size_t)sp_size) {
      rc = sp_rank == 0 ? cli_error(CLI_EXIT_USAGE, "bench: shape %s has F = %zu < %d ranks", s->name, s->F, sp_size)
                       : CLI_EXIT_USAGE;
      break;
    }
    sp_prob p;
    memset(&p, 0, sizeof p);
    p.B = s->B, p.H = s->H, p.D = s->D, p.F = s->F, p.S = s->S, p.N = s->F * s->S, p.BH = s->B * s->H, p.alg = alg;
    size_t f0, fl;
    camdelta_mpi_frame_share(p.F, sp_size, sp_rank, &f0, &fl);
    sp_bufs b;
    rc = sp_agree(sp_bufs_make(ctx, &p, f0, fl, &b)); /* random share */
    sp_br_prob bp;
    sp_br_bufs bb;
    camdelta_branch_saved *bsv = NULL;
    memset(&bp, 0, sizeof bp), memset(&bb, 0, sizeof bb);
    if (!rc && branch) rc = sp_agree(sp_br_make(&bp, s, alg));
    if (!rc && branch) rc = sp_agree(sp_br_bufs_make(ctx, &bp, f0, fl, &bb));
    if (!rc && branch) {
      const camdelta_status bst = camdelta_branch_saved_create(ctx, &bsv);
      rc = sp_agree(bst ? cli_lib_error(bst, "branch saved") : 0);
    }
    if (!rc && sp_rank == 0) {
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
        if (opi >= 4) st = sp_br_run(ctx, &bp, fl, &bb, bwd, bsv, 1, &tm); /* the backward from the forward's saved */
        else st = bwd ? sp_run_bwd(ctx, &p, fl, &b, reverse, 1, &tm) : sp_run_fwd(ctx, &p, fl, &b, reverse, 1, &tm);
        if (!st && it >= warmup) {
          const double x[NPH] = {tm.total_ms, tm.summary_ms, tm.exchange_ms, tm.combine_ms, tm.scan_ms,
                                 tm.wait_ms,  tm.compute_ms, tm.d2h_ms,      tm.mpi_ms,     tm.h2d_ms};
          for (int k = 0; k < NPH; k++) ph[k][it - warmup] = x[k];
        }
      }
      if (st) {
        rc = sp_rank == 0 ? cli_lib_error(st, opname) : cli_exit_code(st);
      } else {
        double med[NPH + 1];
        for (int k = 0; k < NPH; k++) med[k] = reps ? cli_median(ph[k], reps) : 0;
        med[NPH] = (double)fl;
        double *all = sp_rank == 0 ? malloc((size_t)sp_size * (NPH + 1) * sizeof *all) : NULL;
        MPI_Gather(med, NPH + 1, MPI_DOUBLE, all, NPH + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (sp_rank == 0 && all) {
          cJSON *jop = cJSON_CreateObject();
          cJSON_AddItemToArray(jops, jop);
          cJSON_AddStringToObject(jop, "op", opname);
          cJSON *jr = cJSON_AddArrayToObject(jop, "ranks");
          for (int r = 0; r < sp_size; r++) {
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
      rc = sp_agree(rc);
    }
    sp_bufs_free(&b);
    sp_br_bufs_free(&bb);
    camdelta_branch_saved_destroy(bsv);
    /* the whole sequence on one device (rank 0; the other ranks wait) */
    if (!rc && single) {
      int lrc = CLI_EXIT_OK;
      if (sp_rank == 0) {
        sp_bufs w;
        sp_br_bufs wb;
        camdelta_branch_saved *wsv = NULL;
        memset(&wb, 0, sizeof wb);
        lrc = sp_bufs_make(ctx, &p, 0, p.F, &w);
        if (!lrc && branch) lrc = sp_br_bufs_make(ctx, &bp, 0, bp.T, &wb);
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
            const double t0 = sp_now_ms();
            if (opi >= 4) st = sp_br_run(ctx, &bp, bp.T, &wb, bwd, wsv, 0, NULL);
            else st = bwd ? sp_run_bwd(ctx, &p, p.F, &w, reverse, 0, NULL) : sp_run_fwd(ctx, &p, p.F, &w, reverse, 0, NULL);
            if (it >= warmup) t[it - warmup] = sp_now_ms() - t0;
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
        sp_bufs_free(&w);
        sp_br_bufs_free(&wb);
        camdelta_branch_saved_destroy(wsv);
      }
      rc = sp_agree(lrc);
    }
    sp_br_free(&bp);
  }
  if (!rc && sp_rank == 0 && json) {
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
