/* Cost model of the scan forward's algorithms and the AUTO choice (declarations in cost.h).
 *
 * Each kernel of the plan that would run (the tiles come from tiles.c, as the plan's own) gets
 *
 *   time = max(full-device time, waves x lone work-group time) + launch
 *   full-device time   = max(flops / (CUs x peak_cu x eff), bytes / (CUs x bandwidth_cu))
 *   lone work-group    = (flops / work-groups) / (peak_cu x eff x min(1, items / items_sat))  (the sequential
 *                        kernel: items_sat_seq)
 *                        + serial stages x stage latency
 *   waves              = ceil(work-groups / (CUs x work-groups resident per CU))
 *
 * so that a kernel with fewer work-groups than the device holds runs at that fraction of the peak, and a kernel
 * whose work-groups walk a serial chain (the sequential kernel over every token tile of every frame, phase B over
 * the frames) pays each stage's latency in order. `eff` is the fraction of the nominal f32 FMA peak the kernel
 * family reaches (tensor-core rates for phases A and C where the plan runs them there, counted in useful flops).
 *
 * Calibration: the constants below come from kernel times of `camdelta bench` and CAMDELTA_PROFILE_KERNELS=1 on
 * an NVIDIA H200 (the GPU class) and of PoCL on a 2-core CPU (the CPU class); each constant's measurement is in
 * docs/performance.md, "Measurements behind the code's constants", and the estimates against measurements in its "AUTO from plan costs".
 * Launch 5 us (GPU), 70 us (CPU); 10 us per scratch buffer allocated (an assumption). Resident items per CU: 2048
 * (NVIDIA), 2560 (AMD), 1024 (others); on CPUs one work-group per core at a time and stage latencies hidden.
 * Unknown GPUs get the GPU class's efficiencies with a nominal peak from the vendor (NVIDIA 508, AMD 256, others
 * 64 GFLOP/s per compute unit); the choice depends mostly on ratios within one device. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scan/cost.h"
#include "scan/cpu.h"
#include "scan/tc.h"

static const cd_cost_class GPU_CLASS = {
    .name = "gpu",
    .eff_seq = 0.44, .eff_a = 0.229, .eff_b = 0.44, .eff_c = 0.327, .eff_a_tc = 0.661, .eff_c_tc = 0.645,
    .seq_us_per_token = 0.22 / 64, .b_us_per_elem = 0.55 / 16,
    .launch_us = 5.0, .alloc_us = 10.0, .items_sat = 256, .items_sat_seq = 861,
};
static const cd_cost_class CPU_CLASS = {
    .name = "cpu",
    .eff_seq = 0.3125, .eff_a = 0.228, .eff_b = 0.0625, .eff_c = 0.228, .eff_a_tc = 0.228, .eff_c_tc = 0.228,
    .seq_us_per_token = 0.0, .b_us_per_elem = 0.0,
    .launch_us = 70.0, .alloc_us = 0.0, .items_sat = 1, .items_sat_seq = 1,
};

void cd_cost_device_from_info(const camdelta_device_info *info, int tc, cd_cost_device *d) {
  memset(d, 0, sizeof *d);
  cd_scan_limits_from_info(info, &d->lim);
  const int nvidia = strstr(info->device_vendor, "NVIDIA") != NULL;
  const int amd = strstr(info->device_vendor, "Advanced Micro Devices") != NULL ||
                  strstr(info->device_vendor, "AMD") != NULL;
  if (d->lim.gpu) {
    d->cls = &GPU_CLASS;
    d->cu_gflops = nvidia ? 508.0 : amd ? 256.0 : 64.0;
    d->cu_gbs = nvidia ? 36.4 : amd ? 17.0 : 10.0;
    d->items_max = nvidia ? 2048 : amd ? 2560 : 1024;
    d->tc = tc != 0;
  } else {
    d->cls = &CPU_CLASS;
    d->cu_gflops = 32.0;
    d->cu_gbs = 10.0;
    d->items_max = 0;
    d->tc = 0;
  }
}

/* The kernel's time from its flops, bytes, work-groups and serial stages (the formula above). */
static void kernel_time(const cd_cost_device *d, cd_cost_kernel *k) {
  const double cus = d->lim.cus, peak_cu = d->cu_gflops * 1e9 * k->eff, gpu = d->lim.gpu;
  const double full = fmax(k->flops / (peak_cu * cus), k->bytes / (d->cu_gbs * 1e9 * cus));
  const double share = gpu ? fmin(1.0, k->items / (k->sat > 0 ? k->sat : d->cls->items_sat)) : 1.0;
  const double lone = k->flops / k->groups / (peak_cu * share) + k->stages * k->stage_us * 1e-6;
  const double per_cu = gpu ? fmax(1.0, floor(d->items_max / k->items)) : 1.0;
  const double waves = ceil(k->groups / (cus * per_cu));
  k->ms = (fmax(full, waves * lone) + d->cls->launch_us * 1e-6) * 1e3;
}

static double cdiv(double a, double b) { return ceil(a / b); }

void cd_scan_estimate_costs(const cd_cost_device *d, size_t BH, size_t D, size_t F, size_t S, cd_scan_estimate *e) {
  memset(e, 0, sizeof *e);
  const cd_cost_class *k = d->cls;
  const double bh = (double)BH, dd = (double)D, f = (double)F, s = (double)S, bhf = bh * f;
  const double tok = 4.0 * bhf * s * dd;  /* bytes of one token tensor (q, k, v or out) */
  const double gate = 4.0 * bhf * s;      /* bytes of beta */
  const double mats = 4.0 * bhf * dd * dd; /* bytes of one per-frame D x D set (A, U or the states) */

  /* chunkwise: A (A_f, U_f per frame and tile), B (serial over frames per chain and value block), C. Where A and C
   * run on tensor cores their rates change, and the FMA plan's grid stands in for the tensor-core tiles' (at every
   * calibrated shape the device is full and only the rate counts); exact and tf32 are not told apart. Phase C
   * also computes the sequential plan's outputs where that plan leaves them to it (OUT=2, GPUs). */
  cd_chunk_cfg cc;
  memset(&cc, 0, sizeof cc);
  const int chunk_ok = cd_chunk_configure(&d->lim, BH, D, S, 256, NULL, "", &cc) == CAMDELTA_OK;
  if (!chunk_ok) cd_clear_error(); /* this algorithm cannot run here: an answer, not the caller's error */
  const double ns = chunk_ok ? cdiv(s, cc.c.wc * cc.c.rn) : 0;
  if (chunk_ok) {
    e->c = (cd_cost_kernel){.name = d->tc ? "phase C (tensor cores)" : "phase C", .flops = 2.0 * bhf * s * dd * dd,
                            .bytes = 2.0 * tok + ns * mats, .groups = bhf * cc.c_nv * ns, .items = cc.c_w,
                            .eff = d->tc ? k->eff_c_tc : k->eff_c};
    kernel_time(d, &e->c);
  }

  /* sequential: B·H·(value blocks) work-groups; per frame an update stage per token tile, and an output stage per
   * token tile unless phase C computes the outputs from the saved states (OUT=2: the kernel writes them) */
  cd_seq_cfg sc;
  e->ms[CAMDELTA_SCAN_SEQUENTIAL] = HUGE_VAL;
  if (cd_seq_configure(&d->lim, BH, D, S, 256, NULL, NULL, &sc) == CAMDELTA_OK && (sc.OUT != 2 || chunk_ok)) {
    const double nj = sc.nJ;
    const int split = sc.OUT == 2;
    /* GPUs, frames of several tiles: the kernel's arithmetic runs on whole token tiles (its times follow the
     * tiles, not S: docs/performance.md, "Measurements behind the code's constants"). A frame within one tile (its tile the power of two above S) and CPUs: S. */
    const double sp = d->lim.gpu && s > sc.TS ? cdiv(s, sc.TS) * sc.TS : s;
    e->seq = (cd_cost_kernel){
        .name = "sequential", .flops = (split ? 4.0 : 6.0) * bhf * sp * dd * dd,
        .bytes = split ? (nj + 1.0) * tok + nj * gate + mats : (2.0 * nj + 2.0) * tok + nj * gate,
        .groups = bh * nj, .items = sc.W, .stages = (split ? 1.0 : 2.0) * f * cdiv(s, sc.TS),
        .stage_us = k->seq_us_per_token * sc.TS, .eff = k->eff_seq, .sat = k->items_sat_seq};
    kernel_time(d, &e->seq);
    e->seq_out = split ? e->c.ms + k->alloc_us * 1e-3 : 0.0;
    e->ms[CAMDELTA_SCAN_SEQUENTIAL] = e->seq.ms + e->seq_out;
  } else
    cd_clear_error();

  e->ms[CAMDELTA_SCAN_CHUNKWISE] = HUGE_VAL;
  if (chunk_ok) {
    e->a = (cd_cost_kernel){.name = d->tc ? "phase A (tensor cores)" : "phase A", .flops = 4.0 * bhf * s * dd * dd,
                            .bytes = 2.0 * tok + gate + 2.0 * mats, .groups = bhf * cc.a_nr * cc.a_nc,
                            .items = cc.a_w, .eff = d->tc ? k->eff_a_tc : k->eff_a};
    /* a chunk stage's latency grows with the D rows it stages and walks (calibrated at D=112) */
    e->b = (cd_cost_kernel){.name = "phase B", .flops = 2.0 * bhf * dd * dd * dd, .bytes = 3.0 * mats,
                            .groups = bh * cc.b_nj, .items = cc.b_w, .stages = f * cdiv(dd, cc.b_kc),
                            .stage_us = k->b_us_per_elem * cc.b_kc * dd / 112.0, .eff = k->eff_b};
    kernel_time(d, &e->a);
    kernel_time(d, &e->b);
    e->ms[CAMDELTA_SCAN_CHUNKWISE] = e->a.ms + e->b.ms + e->c.ms + 3 * k->alloc_us * 1e-3;
  }
  /* Chunkwise must win by more than the model's error band (CD_COST_MARGIN): it also holds 3·B·H·F·D² floats of
   * scratch memory and launches three kernels, and where the two estimates are that close (latency-bound shapes:
   * few chains, short frames) the measurements do not separate them. Ties, and a device where neither fits (the
   * call then fails with the sequential plan's message), go to the sequential kernel. */
  e->pick = e->ms[CAMDELTA_SCAN_CHUNKWISE] < CD_COST_MARGIN * e->ms[CAMDELTA_SCAN_SEQUENTIAL]
                ? CAMDELTA_SCAN_CHUNKWISE
                : CAMDELTA_SCAN_SEQUENTIAL;
}

/* The last estimate of this thread: a loop calling with one shape (the usual case) configures the two plans once
 * (configuring them is what costs), later calls compare the facts and the shape. */
typedef struct cost_memo {
  int valid;
  cd_cost_device d; /* compared bytewise: cd_cost_device_from_info zeroes it first, memcpy keeps its padding */
  size_t BH, D, F, S;
  cd_scan_estimate e;
} cost_memo;
static _Thread_local cost_memo memo;

camdelta_scan_algorithm cd_scan_auto(const camdelta_device_info *info, int tc, size_t BH, size_t D, size_t F,
                                     size_t S, cd_scan_estimate *e) {
  cd_cost_device d;
  cd_cost_device_from_info(info, tc, &d);
  if (!(memo.valid && memo.BH == BH && memo.D == D && memo.F == F && memo.S == S &&
        memcmp(&memo.d, &d, sizeof d) == 0)) {
    cd_scan_estimate_costs(&d, BH, D, F, S, &memo.e);
    memcpy(&memo.d, &d, sizeof d);
    memo.BH = BH, memo.D = D, memo.F = F, memo.S = S;
    memo.valid = 1;
  }
  if (e) *e = memo.e;
  return memo.e.pick;
}

camdelta_scan_algorithm cd_scan_auto_ctx(camdelta_context *ctx, size_t BH, size_t D, size_t F, size_t S,
                                         cd_scan_estimate *e) {
  /* emulated kernels run at FMA rates, except where the context stands for a device that has the tensor cores */
  const int tc = cd_tc_available(ctx) && (!cd_tc_emulated(ctx) || ctx->facts_emulated);
  const camdelta_scan_algorithm pick = cd_scan_auto(&ctx->info, tc, BH, D, F, S, e);
  /* the CPU forms run the chunkwise algorithm (their costs are not modelled: the estimates are the FMA forms') */
  if (!cd_scan_cpu_forms(ctx, D)) return pick;
  if (e) e->pick = CAMDELTA_SCAN_CHUNKWISE;
  return CAMDELTA_SCAN_CHUNKWISE;
}

static void ms_text(double ms, char *buf, size_t size) {
  if (ms == HUGE_VAL) snprintf(buf, size, "does not fit the device");
  else if (ms >= 1000) snprintf(buf, size, "est. %.3g s", ms / 1000);
  else snprintf(buf, size, "est. %.3g ms", ms);
}

void cd_scan_estimate_text(const cd_scan_estimate *e, camdelta_scan_algorithm requested, char *buf, size_t size) {
  const camdelta_scan_algorithm run = requested == CAMDELTA_SCAN_AUTO ? e->pick : requested;
  const camdelta_scan_algorithm other = run == CAMDELTA_SCAN_SEQUENTIAL ? CAMDELTA_SCAN_CHUNKWISE
                                                                        : CAMDELTA_SCAN_SEQUENTIAL;
  char a[48], b[48];
  ms_text(e->ms[run], a, sizeof a);
  ms_text(e->ms[other], b, sizeof b);
  if (requested == CAMDELTA_SCAN_AUTO)
    snprintf(buf, size, "auto: %s (%s) over %s (%s)", camdelta_scan_algorithm_name(run), a,
             camdelta_scan_algorithm_name(other), b);
  else
    snprintf(buf, size, "%s forced by the caller (%s; %s %s)", camdelta_scan_algorithm_name(run), a,
             camdelta_scan_algorithm_name(other), b);
}
