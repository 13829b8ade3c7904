/* The scan forward's AUTO choice from the plans' costs (src/scan/cost.c), without a device: given device facts,
 * the estimates must reproduce the measured kernel times (NVIDIA H200 and PoCL on a 2-core CPU) and the choices
 * they imply; tiny frames, a device filled by B·H alone, more compute units and longer frames move the estimates
 * and the choice as they should. One test at the end runs on the test device (PoCL in CI): the call takes the
 * estimate's choice, and the plan description states both estimates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/compose.h"
#include "runtime/internal.h"
#include "scan/cost.h"
#include "scan/cpu.h"
#include "testutil.h"

static camdelta_device_info facts(const char *vendor, cl_device_type type, unsigned cus, size_t max_wg,
                                  uint64_t local) {
  camdelta_device_info d;
  memset(&d, 0, sizeof d);
  snprintf(d.device_vendor, sizeof d.device_vendor, "%s", vendor);
  snprintf(d.device_name, sizeof d.device_name, "%s", "test device");
  d.type = type, d.compute_units = cus, d.max_work_group_size = max_wg, d.local_mem_bytes = local;
  return d;
}
static camdelta_device_info h200_with(unsigned cus) {
  return facts("NVIDIA Corporation", CL_DEVICE_TYPE_GPU, cus, 1024, 49152);
}
static camdelta_device_info cpu_with(unsigned cores) {
  return facts("AuthenticAMD", CL_DEVICE_TYPE_CPU, cores, 4096, 4u << 20);
}

static const char *name(camdelta_scan_algorithm a) { return camdelta_scan_algorithm_name(a); }

/* est / measured within [1/tol, tol] */
static void near(const char *what, double est, double measured, double tol) {
  const double r = est / measured;
  printf("  %-44s est %9.3f ms  measured %9.3f ms  (x%.2f)\n", what, est, measured, r);
  if (!(r <= tol && r >= 1 / tol))
    fail_msg("%s: estimate %.4g ms vs measured %.4g ms (ratio %.3f)", what, est, measured, r);
}

typedef struct measured {
  size_t B, H, D, F, S;
  double seq_ms, chunk_ms; /* kernel time, causal */
} measured;

static void check_measured(const char *device, const camdelta_device_info *d, int tc, const measured *m, size_t n,
                           camdelta_scan_algorithm want, double tol) {
  for (size_t i = 0; i < n; i++) {
    cd_scan_estimate e;
    const camdelta_scan_algorithm got = cd_scan_auto(d, tc, m[i].B * m[i].H, m[i].D, m[i].F, m[i].S, &e);
    char what[96], text[256];
    cd_scan_estimate_text(&e, CAMDELTA_SCAN_AUTO, text, sizeof text);
    printf("%s%s B%zu H%zu D%zu F%zu S%zu: %s\n", device, tc ? " (tensor cores)" : "", m[i].B, m[i].H, m[i].D, m[i].F,
           m[i].S, text);
    snprintf(what, sizeof what, "sequential");
    near(what, e.ms[CAMDELTA_SCAN_SEQUENTIAL], m[i].seq_ms, tol);
    snprintf(what, sizeof what, "chunkwise (A %.3g + B %.3g + C %.3g)", e.a.ms, e.b.ms, e.c.ms);
    near(what, e.ms[CAMDELTA_SCAN_CHUNKWISE], m[i].chunk_ms, tol);
    if (got != want) fail_msg("%s B%zu H%zu D%zu F%zu S%zu: AUTO picks %s, measured best %s", device, m[i].B, m[i].H,
                              m[i].D, m[i].F, m[i].S, name(got), name(want));
  }
}

/* The H200 (132 SMs, 48 KiB local memory), `camdelta bench` medians (docs/performance.md, "AUTO from plan costs";
 * `gpu-lab/gpu-test.sh bench-scan` and `seq-cal`): the exact path on tensor cores, and the FMA kernels
 * (CAMDELTA_TC=0) whose sequential kernel is the same (its outputs by the tensor-core or the FMA phase C). */
static void test_h200_measured(void **state) {
  (void)state;
  const camdelta_device_info d = h200_with(132);
  static const measured tc[] = {
      {1, 20, 112, 21, 1560, 4.411, 1.248}, /* sana480 */
      {1, 20, 64, 21, 1560, 2.317, 0.465},
      {1, 20, 112, 21, 3600, 9.894, 2.590}, /* sana720 */
  };
  static const measured fma[] = {
      {1, 20, 112, 21, 1560, 4.783, 2.976},
      {1, 20, 64, 21, 1560, 2.446, 1.056},
      {1, 20, 112, 21, 3600, 10.753, 6.670},
  };
  check_measured("H200", &d, 1, tc, 3, CAMDELTA_SCAN_CHUNKWISE, 1.15);
  check_measured("H200", &d, 0, fma, 3, CAMDELTA_SCAN_CHUNKWISE, 1.15);
}

/* PoCL on the project's 2-core CPU (causal kernel time; the first shape's sequential time varies from run to run
 * by about a fifth). */
static void test_pocl_measured(void **state) {
  (void)state;
  const camdelta_device_info d = cpu_with(2);
  static const measured m[] = {
      {1, 20, 112, 21, 1560, 2750.0, 3900.0},
      {1, 8, 112, 5, 1560, 231.0, 328.0},
      {1, 1, 112, 5, 300, 11.6, 18.2},
      {2, 4, 32, 5, 64, 0.76, 2.1},
  };
  check_measured("PoCL 2 cores", &d, 0, m, 4, CAMDELTA_SCAN_SEQUENTIAL, 1.25);
  /* a CPU never gets the tensor-core rates, even when asked */
  cd_scan_estimate a, b;
  cd_scan_auto(&d, 1, 20, 112, 21, 1560, &a);
  cd_scan_auto(&d, 0, 20, 112, 21, 1560, &b);
  assert_true(a.ms[CAMDELTA_SCAN_CHUNKWISE] == b.ms[CAMDELTA_SCAN_CHUNKWISE]);
}

/* S < D/2: chunkwise's phase B adds 2·F·D³ flops, more than 2/3 of the useful 6·F·S·D², on a chain as long as
 * the sequential kernel's: sequential on the CPUs for every such shape, and on the H200 for S < D/3 (from
 * D/3 up to D/2 a few chains of S just above a power of two pay the sequential kernel's padded token tile, e.g.
 * S=33 runs 64-token stages, and the model finds chunkwise faster there: see docs/performance.md). */
static void test_tiny_frames(void **state) {
  (void)state;
  const camdelta_device_info devs[4] = {cpu_with(2), cpu_with(64), h200_with(132), h200_with(132)};
  const int tcs[4] = {0, 0, 0, 1};
  static const size_t bhs[] = {1, 8, 20, 132, 528}, fs[] = {1, 5, 21, 64};
  unsigned checked = 0;
  for (int dv = 0; dv < 4; dv++)
    for (size_t D = 8; D <= 128; D += 8)
      for (size_t S = 1; 2 * S < D; S++)
        for (size_t i = 0; i < sizeof bhs / sizeof *bhs; i++)
          for (size_t j = 0; j < sizeof fs / sizeof *fs; j++) {
            if (dv >= 2 && 3 * S >= D) continue;
            cd_scan_estimate e;
            if (cd_scan_auto(&devs[dv], tcs[dv], bhs[i], D, fs[j], S, &e) != CAMDELTA_SCAN_SEQUENTIAL)
              fail_msg("device %d BH=%zu D=%zu F=%zu S=%zu: chunkwise %.4g ms vs sequential %.4g ms", dv, bhs[i], D,
                       fs[j], S, e.ms[CAMDELTA_SCAN_CHUNKWISE], e.ms[CAMDELTA_SCAN_SEQUENTIAL]);
            checked++;
          }
  printf("%u tiny-frame shapes: sequential\n", checked);
  /* the H200 at sana480's heads and frames, frames of 40 tokens */
  const camdelta_device_info h = h200_with(132);
  assert_int_equal(cd_scan_auto(&h, 1, 20, 112, 21, 40, NULL), CAMDELTA_SCAN_SEQUENTIAL);
  /* and frames long enough: chunkwise, from about 100 tokens, as measured (docs/performance.md, "Measurements behind the code's constants"); the
   * model follows because it counts the sequential kernel's flops on whole 64-token tiles */
  assert_int_equal(cd_scan_auto(&h, 1, 20, 112, 21, 100, NULL), CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(cd_scan_auto(&h, 1, 20, 112, 21, 150, NULL), CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(cd_scan_auto(&h, 1, 20, 112, 21, 200, NULL), CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(cd_scan_auto(&h, 1, 20, 112, 21, 400, NULL), CAMDELTA_SCAN_CHUNKWISE);
}

/* B·H alone fills the GPU (4 chains per compute unit or more) with few frames. On the FMA path chunkwise gains no
 * parallelism there and still pays phase B, the scratch traffic and two more launches: sequential. On the tensor
 * cores its phases A and C run fast enough that chunkwise wins even so, as the H200 measured
 * (docs/performance.md, "Measurements behind the code's constants"). */
static void test_device_filled_by_chains(void **state) {
  (void)state;
  const camdelta_device_info h = h200_with(132);
  static const size_t Ds[] = {64, 112, 128}, Fs[] = {1, 2, 3, 5};
  for (int tc = 0; tc <= 1; tc++)
    for (size_t i = 0; i < 3; i++)
      for (size_t j = 0; j < 4; j++) {
        cd_scan_estimate e;
        const camdelta_scan_algorithm want = tc ? CAMDELTA_SCAN_CHUNKWISE : CAMDELTA_SCAN_SEQUENTIAL;
        if (cd_scan_auto(&h, tc, 4 * 132, Ds[i], Fs[j], 1560, &e) != want)
          fail_msg("tc=%d BH=528 D=%zu F=%zu: chunkwise %.4g ms vs sequential %.4g ms, want %s", tc, Ds[i], Fs[j],
                   e.ms[CAMDELTA_SCAN_CHUNKWISE], e.ms[CAMDELTA_SCAN_SEQUENTIAL], tc ? "chunkwise" : "sequential");
      }
  assert_int_equal(cd_scan_auto(&h, 0, 8 * 132, 112, 3, 1560, NULL), CAMDELTA_SCAN_SEQUENTIAL);
  assert_int_equal(cd_scan_auto(&h, 1, 8 * 132, 112, 3, 1560, NULL), CAMDELTA_SCAN_CHUNKWISE);
}

/* The choice is computed from the device: the same shapes flip where the compute units change what fills. */
static void test_more_compute_units(void **state) {
  (void)state;
  const camdelta_device_info cpu2 = cpu_with(2), cpu64 = cpu_with(64), h200 = h200_with(132),
                             big = h200_with(1320), small = h200_with(4);
  cd_scan_estimate a, b;
  /* 8 chains on 2 cores fill them; on 64 cores the sequential kernel uses 8 and chunkwise all 64 */
  assert_int_equal(cd_scan_auto(&cpu2, 0, 8, 112, 5, 1560, &a), CAMDELTA_SCAN_SEQUENTIAL);
  assert_int_equal(cd_scan_auto(&cpu64, 0, 8, 112, 5, 1560, &b), CAMDELTA_SCAN_CHUNKWISE);
  /* 8 chains: 4 rounds on 2 cores, one on 8 of 64; chunkwise spreads over all of them */
  assert_true(b.ms[CAMDELTA_SCAN_SEQUENTIAL] > 0.24 * a.ms[CAMDELTA_SCAN_SEQUENTIAL]);
  assert_true(b.ms[CAMDELTA_SCAN_CHUNKWISE] < a.ms[CAMDELTA_SCAN_CHUNKWISE] / 10);
  /* 528 chains fill the H200; ten times its SMs leave the sequential kernel short of work, so they cut the chunkwise
   * estimate more than the sequential one (the FMA path stays sequential on both; the tensor cores' chunkwise wins
   * on both, see test_device_filled_by_chains) */
  assert_int_equal(cd_scan_auto(&h200, 0, 528, 112, 2, 1560, &a), CAMDELTA_SCAN_SEQUENTIAL);
  cd_scan_auto(&big, 0, 528, 112, 2, 1560, &b);
  assert_true(b.ms[CAMDELTA_SCAN_CHUNKWISE] / a.ms[CAMDELTA_SCAN_CHUNKWISE] <
              0.8 * b.ms[CAMDELTA_SCAN_SEQUENTIAL] / a.ms[CAMDELTA_SCAN_SEQUENTIAL]);
  cd_scan_auto(&h200, 1, 528, 112, 2, 1560, &a);
  cd_scan_auto(&big, 1, 528, 112, 2, 1560, &b);
  assert_true(b.ms[CAMDELTA_SCAN_CHUNKWISE] / a.ms[CAMDELTA_SCAN_CHUNKWISE] <
              0.8 * b.ms[CAMDELTA_SCAN_SEQUENTIAL] / a.ms[CAMDELTA_SCAN_SEQUENTIAL]);
  /* sana480 on a 4-SM GPU: 20 chains already fill it */
  assert_int_equal(cd_scan_auto(&h200, 1, 20, 112, 21, 1560, NULL), CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(cd_scan_auto(&small, 0, 20, 112, 21, 1560, &a), CAMDELTA_SCAN_SEQUENTIAL);
  /* the tensor-core rates lower the chunkwise estimate and the sequential plan's outputs (phase C), not its
   * recurrence, and only on a GPU */
  cd_scan_auto(&h200, 0, 20, 112, 21, 1560, &a);
  cd_scan_auto(&h200, 1, 20, 112, 21, 1560, &b);
  assert_true(b.ms[CAMDELTA_SCAN_CHUNKWISE] < 0.8 * a.ms[CAMDELTA_SCAN_CHUNKWISE]);
  assert_true(b.seq.ms == a.seq.ms && b.seq_out > 0 && b.seq_out < a.seq_out);
  assert_true(b.ms[CAMDELTA_SCAN_SEQUENTIAL] == b.seq.ms + b.seq_out);
}

/* Both estimates are about affine in S at fixed D: doubling S adds about twice what the previous doubling added
 * (phase B's chain and the launches do not grow with S), so from S = 780 on a doubling costs between 1.4x and
 * 2.1x (the measured sana720 / sana480 ratios: 2.04 chunkwise, 2.25 sequential, for S x 2.31). */
static void test_linear_in_s(void **state) {
  (void)state;
  const camdelta_device_info devs[3] = {h200_with(132), h200_with(132), cpu_with(2)};
  const int tcs[3] = {1, 0, 0};
  static const size_t shapes[][3] = {{20, 112, 21}, {20, 64, 21}, {8, 112, 5}, {4, 32, 5}};
  for (int dv = 0; dv < 3; dv++)
    for (size_t i = 0; i < 4; i++)
      for (size_t S = 780; S <= 6240; S *= 2) {
        cd_scan_estimate e1, e2, e4;
        cd_scan_auto(&devs[dv], tcs[dv], shapes[i][0], shapes[i][1], shapes[i][2], S, &e1);
        cd_scan_auto(&devs[dv], tcs[dv], shapes[i][0], shapes[i][1], shapes[i][2], 2 * S, &e2);
        cd_scan_auto(&devs[dv], tcs[dv], shapes[i][0], shapes[i][1], shapes[i][2], 4 * S, &e4);
        for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++) {
          const double r = e2.ms[alg] / e1.ms[alg], slope = (e4.ms[alg] - e2.ms[alg]) / (e2.ms[alg] - e1.ms[alg]);
          if (!(r >= 1.4 && r <= 2.1 && slope >= 1.8 && slope <= 2.2))
            fail_msg("device %d BH=%zu D=%zu F=%zu: %s estimate x%.3f from S=%zu to %zu, increments x%.3f", dv,
                     shapes[i][0], shapes[i][1], shapes[i][2], name((camdelta_scan_algorithm)alg), r, S, 2 * S, slope);
        }
      }
  cd_scan_estimate a, b;
  const camdelta_device_info h = h200_with(132);
  cd_scan_auto(&h, 1, 20, 112, 21, 1560, &a);
  cd_scan_auto(&h, 1, 20, 112, 21, 3600, &b);
  const double rc = b.ms[CAMDELTA_SCAN_CHUNKWISE] / a.ms[CAMDELTA_SCAN_CHUNKWISE],
               rs = b.ms[CAMDELTA_SCAN_SEQUENTIAL] / a.ms[CAMDELTA_SCAN_SEQUENTIAL];
  printf("sana720 / sana480 estimates: chunkwise x%.2f (measured 2.04), sequential x%.2f (measured 2.25)\n", rc, rs);
  assert_true(rc > 1.85 && rc < 2.4);
  assert_true(rs > 2.0 && rs < 2.4);
}

/* The estimates' parts follow the plan: phase B carries the 2·F·D³ flops and a chain over the frames, the scratch
 * (3·B·H·F·D² floats written and read) is in the chunkwise bytes, and a device where a plan cannot be configured
 * gives that algorithm no estimate. */
static void test_plan_parts(void **state) {
  (void)state;
  const camdelta_device_info h = h200_with(132);
  cd_scan_estimate e;
  cd_scan_auto(&h, 1, 20, 112, 21, 1560, &e);
  const double bhf = 20.0 * 21, dd = 112;
  assert_true(fabs(e.b.flops - 2 * bhf * dd * dd * dd) < 1);
  assert_true(fabs(e.a.flops + e.c.flops - 6 * bhf * 1560 * dd * dd) < 1e3);
  /* the sequential kernel on a GPU: the recurrence's 4·N·D² (the outputs' 2·N·D² are phase C's) on whole token
   * tiles: 25 of 64 = 1600 tokens per frame */
  assert_true(fabs(e.seq.flops - 4 * bhf * 1600 * dd * dd) < 1e3);
  assert_true(fabs(e.seq_out - (e.c.ms + 0.010)) < 1e-9); /* phase C and the states buffer */
  const double scratch = 4 * bhf * dd * dd; /* bytes of one of A, U, states */
  assert_true(e.a.bytes >= 2 * scratch && e.b.bytes >= 3 * scratch && e.c.bytes >= scratch);
  assert_true(e.b.stages >= 21 && e.seq.stages >= 21 * (1560 / 64));
  /* 20 chains x 13 value blocks of 9 (two per SM, never three), phase B 20 x 5 (one per SM) */
  assert_true(e.seq.groups == 260 && e.b.groups == 100);
  /* 1 KiB of local memory: no plan fits, no estimate, and the answer is the sequential kernel (whose plan then
   * fails the call with the message) */
  const camdelta_device_info tiny = facts("X", CL_DEVICE_TYPE_GPU, 8, 256, 1024);
  cd_clear_error();
  assert_int_equal(cd_scan_auto(&tiny, 0, 20, 112, 21, 1560, &e), CAMDELTA_SCAN_SEQUENTIAL);
  assert_true(e.ms[CAMDELTA_SCAN_SEQUENTIAL] == HUGE_VAL && e.ms[CAMDELTA_SCAN_CHUNKWISE] == HUGE_VAL);
  char text[256];
  cd_scan_estimate_text(&e, CAMDELTA_SCAN_AUTO, text, sizeof text);
  assert_non_null(strstr(text, "does not fit the device"));
  assert_string_equal(camdelta_last_message(), ""); /* estimating is not an error of the call */
}

static void test_text(void **state) {
  (void)state;
  const camdelta_device_info h = h200_with(132);
  cd_scan_estimate e;
  char text[256];
  cd_scan_auto(&h, 1, 20, 112, 21, 1560, &e);
  cd_scan_estimate_text(&e, CAMDELTA_SCAN_AUTO, text, sizeof text);
  printf("%s\n", text);
  assert_int_equal(strncmp(text, "auto: chunkwise (est. 1.", 24), 0);
  assert_non_null(strstr(text, " ms) over sequential (est. 4.4"));
  cd_scan_estimate_text(&e, CAMDELTA_SCAN_SEQUENTIAL, text, sizeof text);
  printf("%s\n", text);
  assert_int_equal(strncmp(text, "sequential forced by the caller (est. 4.4", 41), 0);
  assert_non_null(strstr(text, "; chunkwise est. 1."));
  const camdelta_device_info c = cpu_with(2);
  cd_scan_auto(&c, 0, 20, 112, 21, 1560, &e);
  cd_scan_estimate_text(&e, CAMDELTA_SCAN_AUTO, text, sizeof text);
  printf("%s\n", text);
  assert_non_null(strstr(text, "auto: sequential (est. 2."));
  assert_non_null(strstr(text, " s) over chunkwise (est. 3."));
}

/* On the test device: a call with AUTO runs what the estimate picks, for a shape of tiny frames (sequential on every
 * device) and one long chain (chunkwise on GPUs and on CPUs of 2 cores or more); the plan description states both
 * estimates. Then the context's device facts (read once at creation) are changed to 1 and to 1000x the compute
 * units: on a CPU the long chain's choice flips with them and the call follows; on a GPU such small shapes are
 * latency-bound and no flip is required (the device-free tests above cover GPUs). */
typedef struct dev_problem {
  size_t B, H, D, F, S;
  cl_mem q, k, v, beta, decay, out;
} dev_problem;

static void problem_up(dev_problem *p) {
  const size_t tok = p->B * p->H * p->F * p->S * p->D, gates = p->B * p->H * p->F * p->S;
  float *x = malloc(tok * 4);
  assert_non_null(x);
  tu_fill_uniform(x, tok, -0.5, 0.5);
  p->q = tu_upload(x, tok * 4), p->k = tu_upload(x, tok * 4), p->v = tu_upload(x, tok * 4);
  tu_fill_uniform(x, gates, 0.1, 0.9);
  p->beta = tu_upload(x, gates * 4), p->decay = tu_upload(x, p->B * p->H * p->F * 4), p->out = tu_buffer(tok * 4);
  free(x);
}

static void problem_down(dev_problem *p) {
  clReleaseMemObject(p->q), clReleaseMemObject(p->k), clReleaseMemObject(p->v);
  clReleaseMemObject(p->beta), clReleaseMemObject(p->decay), clReleaseMemObject(p->out);
}

/* Runs p with AUTO on ctx; returns the algorithm the call used. */
static camdelta_scan_algorithm run_auto(camdelta_context *ctx, const dev_problem *p) {
  camdelta_scan_algorithm used = CAMDELTA_SCAN_AUTO;
  camdelta_scan_args a = {0};
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = p->F, a.S = p->S;
  a.q.mem = p->q, a.k.mem = p->k, a.v.mem = p->v, a.beta.mem = p->beta, a.decay.mem = p->decay, a.out.mem = p->out;
  a.used = &used;
  TU_OK(camdelta_scan_forward(ctx, &a, NULL));
  TU_OK(camdelta_finish(ctx));
  return used;
}

/* AUTO's choice as a call makes it (the estimates, then what fits the driver's loop budget). */
static camdelta_scan_algorithm pick(camdelta_context *ctx, const dev_problem *p, cd_scan_estimate *e) {
  camdelta_scan_algorithm alg;
  TU_OK(cd_scan_decide(ctx, p->B * p->H, p->D, p->F, p->S, &alg, e));
  return alg;
}

static void test_on_device(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  /* where the CPU forms run, AUTO takes the chunkwise algorithm whatever the costs; the costs' choice is tested
   * with them off */
  const int cpu_forms = cd_scan_cpu_forms(ctx, 32);
  TU_OK(camdelta_tune_set(ctx, "scan", "CPU=0"));
  tu_seed(7);
  dev_problem tiny = {1, 2, 32, 4, 8, NULL, NULL, NULL, NULL, NULL, NULL};
  dev_problem chain = {1, 1, 32, 4, 2000, NULL, NULL, NULL, NULL, NULL, NULL};
  problem_up(&tiny);
  problem_up(&chain);
  const int gpu = (ctx->info.type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;

  cd_scan_estimate e;
  assert_int_equal(pick(ctx, &tiny, &e), CAMDELTA_SCAN_SEQUENTIAL);
  assert_int_equal(run_auto(ctx, &tiny), CAMDELTA_SCAN_SEQUENTIAL);
  const camdelta_scan_algorithm want = pick(ctx, &chain, &e);
  if (gpu || ctx->info.compute_units >= 2) assert_int_equal(want, CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(run_auto(ctx, &chain), want);
  if (cpu_forms) {
    TU_OK(camdelta_tune_set(ctx, "scan", NULL));
    assert_int_equal(run_auto(ctx, &tiny), CAMDELTA_SCAN_CHUNKWISE);
    TU_OK(camdelta_tune_set(ctx, "scan", "CPU=0"));
  }

  camdelta_scan_args a = {0};
  a.B = chain.B, a.H = chain.H, a.D = chain.D, a.F = chain.F, a.S = chain.S;
  char plan[1024], expect[256];
  TU_OK(camdelta_scan_plan_describe(ctx, &a, plan, sizeof plan));
  printf("plan: %s\n", plan);
  cd_scan_estimate_text(&e, CAMDELTA_SCAN_AUTO, expect, sizeof expect);
  assert_non_null(strstr(plan, expect));
  assert_int_equal(strncmp(plan, name(want), strlen(name(want))), 0);
  a.algorithm = CAMDELTA_SCAN_SEQUENTIAL;
  TU_OK(camdelta_scan_plan_describe(ctx, &a, plan, sizeof plan));
  assert_non_null(strstr(plan, "sequential forced by the caller (est. "));

  /* the long chain on the facts of a device with 1 and with 1000x the compute units (the context's plans, AUTO's
   * choices among them, follow its facts: they are dropped with each change) */
  const camdelta_device_info saved = ctx->info;
  const unsigned cus[2] = {1, saved.compute_units * 1000};
  int flipped = 0, seq_unfit = 0; /* seq_unfit: the driver's loop budget rules the sequential plan out */
  for (int i = 0; i < 2; i++) {
    ctx->info.compute_units = cus[i];
    cd_plan_invalidate(ctx);
    const camdelta_scan_algorithm other = pick(ctx, &chain, &e);
    printf("with %u compute units: %s (sequential est. %.3g ms, chunkwise est. %.3g ms)\n", cus[i], name(other),
           e.ms[CAMDELTA_SCAN_SEQUENTIAL], e.ms[CAMDELTA_SCAN_CHUNKWISE]);
    const camdelta_scan_algorithm used = run_auto(ctx, &chain);
    ctx->info = saved;
    cd_plan_invalidate(ctx);
    assert_int_equal(used, other);
    flipped |= other != want;
    seq_unfit |= e.ms[CAMDELTA_SCAN_SEQUENTIAL] == HUGE_VAL;
  }
  assert_true(flipped || gpu || seq_unfit);
  assert_int_equal(run_auto(ctx, &chain), want);
  TU_OK(camdelta_tune_set(ctx, "scan", NULL));
  problem_down(&tiny);
  problem_down(&chain);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_h200_measured),        cmocka_unit_test(test_pocl_measured),
      cmocka_unit_test(test_tiny_frames),          cmocka_unit_test(test_device_filled_by_chains),
      cmocka_unit_test(test_more_compute_units),   cmocka_unit_test(test_linear_in_s),
      cmocka_unit_test(test_plan_parts),           cmocka_unit_test(test_text),
      cmocka_unit_test(test_on_device))
