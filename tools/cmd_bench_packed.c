/* camdelta bench --packed: the scan over packed clips against the fixed-shape scan on a batch of equal clips
 * (docs/parallel.md, packed clips: the packed path should cost no more than the fixed shape), forward and
 * backward, both directions, kernel time from profiling events (median after warm-up). Shapes B,H,D,F,S mean B
 * clips of F frames of S tokens.
 * A third call times the fixed-shape scan on the packed batch's memory layout (B = 1, B·F frames: rows B times as
 * long, the state carried across the clip boundaries, so a time reference only): the packed call against it shows
 * what the packed path itself costs, the fixed call against it what the longer rows cost. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "cli_common.h"
#include "cli_packed.h"

int cli_bench_packed_requested(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--packed") == 0) return 1;
  return 0;
}

static int buf(camdelta_context *ctx, size_t n, float fill, cl_mem *m) {
  int rc = cli_alloc(ctx, n * 4, m);
  if (!rc && fill != 0.0f &&
      clEnqueueFillBuffer(camdelta_context_queue(ctx), *m, &fill, 4, 0, n * 4, 0, NULL, NULL) != CL_SUCCESS)
    rc = cli_error(CLI_EXIT_DEVICE, "filling a buffer failed");
  return rc;
}

int cmd_bench_packed(int argc, char **argv) {
  const char *device = NULL, *v;
  size_t B = 4, H = 20, D = 112, F = 5, S = 1560, reps = 20, warmup = 3;
  cli_args a = {argc, argv, 0};
  while (a.i < argc) {
    int r;
    if (cli_flag(&a, "--packed")) continue;
    if ((r = cli_value(&a, "--shape", &v))) {
      cli_shape sh; /* clips,H,D,F,S: B = clips */
      if (r < 0 || !cli_parse_shape("bench --packed (--shape clips,H,D,F,S)", "--shape", v, 0, &sh))
        return CLI_EXIT_USAGE;
      /* the packed batch and the fixed call on its layout are one row of clips*F frames, clips*F*S tokens */
      cli_shape row = sh;
      row.B = 1;
      if (!camdelta_size_mul(&row.F, sh.B, sh.F) || !cli_check_shape("bench --packed (the clips as one row)", &row))
        return CLI_EXIT_USAGE;
      B = sh.B, H = sh.H, D = sh.D, F = sh.F, S = sh.S;
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_reps_option(&a, &reps, &warmup))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else {
      return cli_error(CLI_EXIT_USAGE, "bench --packed: unknown option '%s' (--shape, --device, --reps, --warmup)",
                       argv[a.i]);
    }
  }
  /* every size below is a factor of clips*H*D*F*S, checked by cli_check_shape on the one-row shape */
  const size_t N = F * S, nt = B * H * D * N;
  cli_budget bud = {0, 0, 0, 0};
  cli_budget_device(&bud, 8, nt, 4);
  cli_budget_device(&bud, 2, B * H, N * 4);
  cli_budget_device(&bud, 2, B * H, F * 4);
  cli_budget_host(&bud, 1, B * F + B + 2, 8);
  cli_budget_host(&bud, 3, reps, sizeof(double));
  camdelta_context *ctx = NULL;
  int rc = cli_context_for(&ctx, device, &bud, "bench --packed: this shape");
  if (rc) return rc;
  int64_t *fo = malloc((B * F + 1) * 8), *co = malloc((B + 1) * 8);
  if (!fo || !co) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
  for (size_t f = 0; !rc && f <= B * F; f++) fo[f] = (int64_t)(f * S);
  for (size_t c = 0; !rc && c <= B; c++) co[c] = (int64_t)(c * F);
  /* q k v grad_out, beta, decay, out, dq dk dv dbeta ddecay: the same sizes in both layouts */
  cl_mem m[12] = {NULL};
  const size_t cnt[12] = {nt, nt, nt, nt, B * H * N, B * H * F, nt, nt, nt, nt, B * H * N, B * H * F};
  const float fill[12] = {0.01f, 0.001f, 0.5f, 0.5f, 0.5f, 0.9f, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 12 && !rc; i++) rc = buf(ctx, cnt[i], fill[i], &m[i]);
  camdelta_device_info info;
  camdelta_context_info(ctx, &info);
  if (!rc)
    printf("camdelta bench --packed on %s: %zu equal clips of F=%zu frames x S=%zu tokens, H=%zu D=%zu; kernel ms, "
           "median of %zu after %zu warm-up, the three calls alternating; 'fixed, 1 row': the fixed-shape call on "
           "the packed layout (B=1, F=%zu)\n%-24s %12s %12s %8s %14s %8s  %s\n",
           info.device_name, B, F, S, H, D, reps, warmup, B * F, "operation", "fixed ms", "packed ms", "ratio",
           "fixed, 1 row", "ratio", "packed path");
  double *t = calloc(3 * (reps ? reps : 1), sizeof *t);
  int host = 0; /* the driver gives no kernel times: host clock from the call to camdelta_finish */
  if (!t) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
  for (int op = 0; op < 4 && !rc; op++) {
    const int bwd = op >= 2, rev = op % 2;
    double med[3] = {0, 0, 0};
    int native = -1;
    const camdelta_packed_clips pc = {.frame_offsets = fo, .clip_offsets = co, .clips = B, .tokens = B * N,
                                      .native = &native};
    /* fixed, packed and fixed on the packed layout alternate, so that all see the same clocks and caches */
    for (size_t it = 0; it < warmup + reps && !rc; it++)
      for (int mode = 0; mode < 3 && !rc; mode++) {
        const int packed = mode == 1, one_row = mode != 0; /* one_row: B = 1, B·F frames */
        camdelta_profile prof = {0, 0};
        camdelta_status st = camdelta_finish(ctx);
        const double t0 = cli_now_ms(); /* where the driver gives no kernel times (kernel_ms NaN) */
        if (!st && !bwd) {
          camdelta_scan_args s;
          memset(&s, 0, sizeof s);
          s.B = one_row ? 1 : B, s.H = H, s.D = D, s.F = one_row ? B * F : F, s.S = packed ? 0 : S, s.reverse = rev;
          s.q.mem = m[0], s.k.mem = m[1], s.v.mem = m[2], s.beta.mem = m[4], s.decay.mem = m[5], s.out.mem = m[6];
          s.profile = &prof;
          st = packed ? camdelta_scan_forward_packed(ctx, &s, &pc, NULL) : camdelta_scan_forward(ctx, &s, NULL);
        } else if (!st) {
          camdelta_scan_backward_args s;
          memset(&s, 0, sizeof s);
          s.B = one_row ? 1 : B, s.H = H, s.D = D, s.F = one_row ? B * F : F, s.S = packed ? 0 : S, s.reverse = rev;
          s.q.mem = m[0], s.k.mem = m[1], s.v.mem = m[2], s.grad_out.mem = m[3], s.beta.mem = m[4];
          s.decay.mem = m[5], s.dq.mem = m[7], s.dk.mem = m[8], s.dv.mem = m[9], s.dbeta.mem = m[10];
          s.ddecay.mem = m[11];
          s.profile = &prof;
          st = packed ? camdelta_scan_backward_packed(ctx, &s, &pc, NULL) : camdelta_scan_backward(ctx, &s, NULL);
        }
        if (!st && isnan(prof.kernel_ms)) st = camdelta_finish(ctx), host = 1;
        if (st) rc = cli_lib_error(st, packed ? "packed scan" : "fixed-shape scan");
        else if (it >= warmup) t[mode * reps + it - warmup] = host ? cli_now_ms() - t0 : prof.kernel_ms;
      }
    for (int mode = 0; mode < 3 && !rc && reps; mode++) med[mode] = cli_median(t + mode * reps, reps);
    if (!rc)
      printf("%-24s %12.3f %12.3f %7.2fx %14.3f %7.2fx  %s\n",
             bwd ? (rev ? "scan backward reverse" : "scan backward causal")
                 : (rev ? "scan forward reverse" : "scan forward causal"),
             med[0], med[1], med[0] > 0 ? med[1] / med[0] : 0.0, med[2], med[2] > 0 ? med[1] / med[2] : 0.0,
             native ? "native" : "padded batch");
  }
  if (!rc && host) printf("(the driver gives no kernel times: host ms from the call to camdelta_finish)\n");
  free(t), free(fo), free(co);
  for (int i = 0; i < 12; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  camdelta_context_destroy(ctx);
  return rc;
}
