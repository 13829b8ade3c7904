/* camdelta tune: sweeps the tile parameters of the scan's tensor-core kernel families on the current device
 * for one shape, one family at a time (gram, apply, frames), prints the winners as a table entry for
 * src/scan/tc_params.c and, with --save, stores them in the cache folder where the library picks them up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_common.h"
#include "usage.h"

typedef struct tune_bufs {
  cl_mem q, k, v, beta, decay, out, go, dq, dk, dv, dbeta, ddecay;
} tune_bufs;

static cl_mem rnd(camdelta_context *ctx, size_t n, float lo, float hi, unsigned *seed) {
  float *h = malloc(n * sizeof *h);
  if (!h) return NULL;
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    h[i] = lo + (hi - lo) * (float)((*seed >> 8) / 16777216.0);
  }
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * 4, h, &err);
  free(h);
  return err == CL_SUCCESS ? m : NULL;
}

/* Median kernel milliseconds of `reps` runs of the forward (chunkwise, causal) or the backward. */
static camdelta_status time_op(camdelta_context *ctx, const size_t s[5], const tune_bufs *b, camdelta_scan_saved *sv,
                               int backward, camdelta_precision prec, size_t reps, double *ms) {
  double t[64];
  if (reps > 64) reps = 64;
  for (size_t r = 0; r <= reps; r++) {
    camdelta_profile p = {0, 0};
    camdelta_status st = camdelta_finish(ctx);
    const double t0 = cli_now_ms();
    if (st) return st;
    if (!backward) {
      camdelta_scan_args a;
      memset(&a, 0, sizeof a);
      a.B = s[0], a.H = s[1], a.D = s[2], a.F = s[3], a.S = s[4], a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
      a.q.mem = b->q, a.k.mem = b->k, a.v.mem = b->v, a.beta.mem = b->beta, a.decay.mem = b->decay;
      a.out.mem = b->out, a.profile = &p, a.precision = prec;
      st = camdelta_scan_forward(ctx, &a, sv);
    } else {
      camdelta_scan_backward_args a;
      memset(&a, 0, sizeof a);
      a.B = s[0], a.H = s[1], a.D = s[2], a.F = s[3], a.S = s[4];
      a.q.mem = b->q, a.k.mem = b->k, a.v.mem = b->v, a.beta.mem = b->beta, a.decay.mem = b->decay;
      a.grad_out.mem = b->go, a.dq.mem = b->dq, a.dk.mem = b->dk, a.dv.mem = b->dv, a.dbeta.mem = b->dbeta;
      a.ddecay.mem = b->ddecay, a.profile = &p, a.precision = prec;
      st = camdelta_scan_backward(ctx, &a, sv);
    }
    if (!st && isnan(p.kernel_ms)) st = camdelta_finish(ctx); /* no kernel times: the host's */
    if (st) return st;
    if (r) t[r - 1] = isnan(p.kernel_ms) ? cli_now_ms() - t0 : p.kernel_ms; /* the first run warms up (and builds) */
  }
  for (size_t i = 1; i < reps; i++)
    for (size_t j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  *ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  return CAMDELTA_OK;
}

int cmd_tune(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  const char *device = NULL, *shape = "sana480", *v;
  size_t reps = 5;
  int save = 0;
  camdelta_precision prec = CAMDELTA_PRECISION_EXACT;
  while (a.i < argc) {
    int r;
    if ((r = cli_value(&a, "--shape", &shape))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--reps", &v))) {
      if (r < 0 || !cli_parse_count("--reps", v, 1, 64, &reps)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--precision", &v))) {
      if (r < 0 || !cli_parse_precision(v, &prec)) return CLI_EXIT_USAGE;
    } else if (cli_flag(&a, "--save")) {
      save = 1;
    } else {
      return cli_help_or_unknown(&a, "tune", "tune", usage_tune) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
  }
  cli_shape sh; /* the strict parser and the operations' limits (cli_shape.h) */
  if (!cli_parse_shape("tune", "--shape", shape, 1, &sh)) return CLI_EXIT_USAGE;
  const size_t s[5] = {sh.B, sh.H, sh.D, sh.F, sh.S};

  /* every size below is a factor of B*H*D*F*S, checked by cli_check_shape */
  const size_t tok = s[0] * s[1] * s[2] * s[3] * s[4], gates = s[0] * s[1] * s[3] * s[4], bhf = s[0] * s[1] * s[3];
  cli_budget bud = {0, 0, 0, 0};
  cli_budget_device(&bud, 7, tok, 4);
  cli_budget_device(&bud, 2, gates, 4);
  cli_budget_device(&bud, 2, bhf, 4);
  cli_budget_host(&bud, 1, tok, 4);
  camdelta_context *ctx = NULL;
  int rc = cli_context_for(&ctx, device, &bud, "tune: this shape");
  if (rc) return rc;
  camdelta_device_info info;
  camdelta_context_info(ctx, &info);
  printf("camdelta tune: B=%zu H=%zu D=%zu F=%zu S=%zu, precision %s, on %s (%s)\n", s[0], s[1], s[2], s[3], s[4],
         camdelta_precision_name(prec), info.device_name, info.platform_name);
  camdelta_scan_args pa;
  memset(&pa, 0, sizeof pa);
  pa.B = s[0], pa.H = s[1], pa.D = s[2], pa.F = s[3], pa.S = s[4], pa.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  pa.precision = prec;
  char plan[1024];
  camdelta_status st = camdelta_scan_plan_describe(ctx, &pa, plan, sizeof plan);
  if (st) {
    camdelta_context_destroy(ctx);
    return cli_lib_error(st, "tune");
  }
  if (!strstr(plan, "tensor cores")) {
    printf("no tensor-core path on this device: the scan runs its FMA kernels with the heuristic tiles\n"
           "(CAMDELTA_SCAN_TILES / CAMDELTA_SCAN_BWD_TILES override those); nothing to tune here.\n");
    camdelta_context_destroy(ctx);
    return CLI_EXIT_OK;
  }
  unsigned seed = 777;
  tune_bufs b;
  b.q = rnd(ctx, tok, -0.1f, 0.1f, &seed), b.k = rnd(ctx, tok, -0.1f, 0.1f, &seed), b.v = rnd(ctx, tok, -1, 1, &seed);
  b.beta = rnd(ctx, gates, 0, 1, &seed), b.decay = rnd(ctx, bhf, 0.9f, 1, &seed), b.out = rnd(ctx, tok, 0, 0, &seed);
  b.go = rnd(ctx, tok, -1, 1, &seed), b.dq = rnd(ctx, tok, 0, 0, &seed), b.dk = rnd(ctx, tok, 0, 0, &seed);
  b.dv = rnd(ctx, tok, 0, 0, &seed), b.dbeta = rnd(ctx, gates, 0, 0, &seed), b.ddecay = rnd(ctx, bhf, 0, 0, &seed);
  camdelta_scan_saved *sv = NULL;
  cl_mem *all = &b.q;
  for (int i = 0; i < 12; i++)
    if (!all[i]) rc = cli_error(CLI_EXIT_DEVICE, "tune: cannot allocate the buffers");
  if (!rc && camdelta_scan_saved_create(ctx, &sv)) rc = cli_lib_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "tune");

  /* candidates per family: WM WN MR NR KC (frames: NR 0 = cover D) */
  /* the gram stages the f32 values (8-byte slots, cl/gemm_tc.cl): KC/2 planes of TM + TN + 8 slots must fit the
   * local memory; TM = 112 or TN = 112 tiles cover D = 112 without padding */
  static const unsigned gram[][5] = {{2, 2, 2, 4, 16}, {2, 2, 2, 4, 32}, {2, 4, 2, 2, 32}, {2, 4, 2, 2, 16},
                                     {1, 4, 4, 2, 32}, {2, 2, 2, 2, 32}, {4, 2, 1, 4, 32}, {2, 2, 4, 2, 16},
                                     {1, 2, 4, 4, 16}, {7, 2, 1, 7, 16}, {7, 2, 1, 7, 8},  {7, 1, 1, 7, 16},
                                     {1, 7, 7, 2, 16}, {4, 4, 1, 2, 32}, {2, 2, 2, 4, 64}, {7, 2, 1, 7, 32},
                                     {2, 2, 4, 2, 32}, {1, 2, 4, 4, 32}};
  static const unsigned apply[][5] = {{2, 2, 2, 4, 16}, {2, 1, 2, 8, 16}, {2, 1, 2, 8, 32}, {2, 2, 2, 4, 32},
                                      {4, 2, 1, 4, 16}, {2, 4, 2, 2, 16}, {7, 1, 1, 8, 16}, {7, 2, 1, 4, 16},
                                      {7, 1, 1, 8, 32}, {1, 4, 7, 2, 16}, {7, 2, 1, 8, 16}, {2, 2, 2, 8, 16}};
  static const unsigned frames[][5] = {{2, 2, 1, 0, 16}, {2, 2, 1, 0, 8}, {4, 2, 1, 0, 16}, {1, 2, 2, 0, 16},
                                       {2, 2, 2, 0, 16}, {4, 1, 1, 0, 16}, {2, 4, 1, 0, 16}, {1, 4, 2, 0, 16},
                                       {4, 2, 1, 0, 8},  {8, 1, 1, 0, 16}};
  const struct {
    const char *name;
    const unsigned (*c)[5];
    size_t n;
    int backward;
  } fam[3] = {{"gram", gram, sizeof gram / sizeof gram[0], 0},
              {"apply", apply, sizeof apply / sizeof apply[0], 0},
              {"frames", frames, sizeof frames / sizeof frames[0], 1}};
  const int tty = isatty(fileno(stderr));
  char best_text[3][96];
  for (int f = 0; f < 3 && !rc; f++) {
    double best = -1;
    best_text[f][0] = '\0';
    if (fam[f].backward) { /* the backward reads the forward's saved states */
      camdelta_tune_set(ctx, "frames", NULL);
      double ms;
      if ((st = time_op(ctx, s, &b, sv, 0, prec, 1, &ms))) rc = cli_lib_error(st, "tune: forward");
    }
    for (size_t i = 0; i < fam[f].n && !rc; i++) {
      const unsigned *c = fam[f].c[i];
      char text[96];
      if (c[3]) snprintf(text, sizeof text, "WM=%u,WN=%u,MR=%u,NR=%u,KC=%u", c[0], c[1], c[2], c[3], c[4]);
      else snprintf(text, sizeof text, "WM=%u,WN=%u,MR=%u,NR=%zu,KC=%u", c[0], c[1], c[2],
                    (s[2] + 8 * c[1] - 1) / (8 * c[1]), c[4]);
      if ((st = camdelta_tune_set(ctx, fam[f].name, text))) {
        rc = cli_lib_error(st, "tune");
        break;
      }
      double ms = 0;
      st = time_op(ctx, s, &b, fam[f].backward ? sv : NULL, fam[f].backward, prec, reps, &ms);
      if (st == CAMDELTA_ERROR_UNSUPPORTED || st == CAMDELTA_ERROR_BUILD) { /* breaks a constraint here */
        printf("  %-6s %-34s skipped: %s\n", fam[f].name, text, camdelta_last_message());
        continue;
      }
      if (st) {
        rc = cli_lib_error(st, "tune");
        break;
      }
      if (best < 0 || ms < best) best = ms, snprintf(best_text[f], sizeof best_text[f], "%s", text);
      if (tty) fprintf(stderr, "\r[%s %zu/%zu] best %.4f ms %-40s", fam[f].name, i + 1, fam[f].n, best, best_text[f]);
      printf("  %-6s %-34s %s %.4f ms\n", fam[f].name, text, fam[f].backward ? "backward" : "forward ", ms);
      fflush(stdout);
    }
    if (tty) fprintf(stderr, "\r%80s\r", "");
    if (!rc && best_text[f][0]) {
      camdelta_tune_set(ctx, fam[f].name, best_text[f]);
      printf("%s: best %s (%.4f ms)\n", fam[f].name, best_text[f], best);
    }
  }
  if (!rc) {
    /* a shape of at most one (b, h, f) per compute unit (a stream's block): the gram's winner is a small-work entry,
     * for such calls only (cd_tc_small_entry) */
    const int small = info.compute_units && bhf <= info.compute_units;
    printf("\ntable entry (src/scan/tc_params.c)%s:\n",
           small ? "; the gram's for calls of few frames (B*H*F at most the compute units)" : "");
    for (int f = 0; f < 3; f++) {
      char now[1024];
      if (camdelta_tune_get(ctx, fam[f].name, s[2], now, sizeof now) == CAMDELTA_OK) {
        unsigned t[5]; /* the tiles the head dim resolves to follow the family's values: "...; for D=64: WM=.." */
        const char *tiles = strstr(now, ": WM=");
        if (tiles && sscanf(tiles + 2, "WM=%u WN=%u MR=%u NR=%u KC=%u", &t[0], &t[1], &t[2], &t[3], &t[4]) == 5) {
          char extra[48] = "";
          if (small && f == 0) snprintf(extra, sizeof extra, ", .bhf_max = %u", (unsigned)info.compute_units);
          printf("    {.vendor = \"%s\", .device = \"%s\", .family = CD_TC_%s, .dmin = %zu, .dmax = %zu,\n"
                 "     .t = {.wm = %u, .wn = %u, .mr = %u, .nr = %u, .kc = %u}, .prec = %s%s},\n",
                 info.device_vendor, info.device_name, f == 0 ? "GRAM" : f == 1 ? "APPLY" : "FRAMES", s[2], s[2],
                 t[0], t[1], t[2], t[3], t[4], prec == CAMDELTA_PRECISION_TF32 ? "TF32" : "EXACT", extra);
        }
      }
    }
    if (save) {
      char path[4300];
      if ((st = camdelta_tune_save(ctx, s[2], path, sizeof path))) rc = cli_lib_error(st, "tune --save");
      else printf("saved to %s\n", path);
    }
  }
  camdelta_scan_saved_destroy(sv);
  for (int i = 0; i < 12; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  camdelta_context_destroy(ctx);
  return rc;
}
