/* Cost model of the scan forward's two algorithms, and the AUTO choice made from it (CAMDELTA_SCAN_AUTO).
 *
 * For each algorithm the plan that would run is configured (src/scan/tiles.c: work-groups, work-group
 * sizes, token tiles, value blocks, reduction chunks) and every kernel of it gets an estimated time from its
 * flops, the bytes it moves, its parallelism (work-groups against what the device holds) and its serial chain
 * (steps one work-group must take in order), plus a launch overhead. AUTO takes the lower estimate. Pure
 * functions of the device facts the context read once (camdelta_device_info) and the shape: no device, no
 * environment, no OpenCL call; the unit tests (tests/test_scan_auto.c) give device facts and check the choice and
 * the estimates against measured times. The model and its calibration are described in cost.c and in
 * docs/performance.md ("AUTO from plan costs"). Not installed. */
#ifndef CAMDELTA_COST_H
#define CAMDELTA_COST_H
#include "runtime/internal.h"
#include "scan/tiles.h"

/** Per-kernel-family rates of one device class (GPU or CPU), calibrated by measurement (cost.c). */
typedef struct cd_cost_class {
  const char *name;
  /* fraction of the nominal f32 FMA peak a family's kernel reaches with the device full (useful flops) */
  double eff_seq, eff_a, eff_b, eff_c, eff_a_tc, eff_c_tc;
  /* latency of a lone work-group's serial stage (load a tile, synchronise, walk a dependent loop through local
   * memory), microseconds per step of that loop: the sequential kernel's tile stages walk its TS tokens, phase
   * B's stages the B_KC reduction elements of a chunk of A_f */
  double seq_us_per_token, b_us_per_elem;
  double launch_us;   /* per kernel launch */
  double alloc_us;    /* per scratch buffer the call allocates (chunkwise: A, U and the per-frame states) */
  unsigned items_sat; /* work-items one compute unit needs to reach its rate (CPUs: 1, any work-group) */
  unsigned items_sat_seq; /* the same for the sequential kernel (a lone work-group's serial chain) */
} cd_cost_class;

/** What the model knows of a device. */
typedef struct cd_cost_device {
  cd_scan_limits lim;        /* the limits the plans are configured with */
  int tc;                    /* phases A and C on tensor cores (the path is available and not emulated) */
  double cu_gflops;          /* nominal f32 FMA peak of one compute unit, GFLOP/s */
  double cu_gbs;             /* memory bandwidth per compute unit, GB/s */
  unsigned items_max;        /* work-items resident on one compute unit (GPUs); CPUs: one work-group */
  const cd_cost_class *cls;  /* rates of the device's class */
} cd_cost_device;

/** The device model from the context's facts; tc: the tensor-core path runs (cd_tc_available and not emulated). */
void cd_cost_device_from_info(const camdelta_device_info *info, int tc, cd_cost_device *d);

/** One kernel of a plan as the model sees it. */
typedef struct cd_cost_kernel {
  const char *name;
  double flops;  /* useful flops (the extra 2·F·D³ of phase B counted in phase B) */
  double bytes;  /* global memory read and written */
  double groups; /* work-groups launched */
  double items;  /* work-items per work-group */
  double stages; /* serial stages of one work-group */
  double stage_us;
  double eff; /* fraction of the peak at full device */
  double ms;  /* estimate */
  double sat; /* items to reach a compute unit's rate; 0: the class's items_sat */
} cd_cost_kernel;

/** AUTO picks chunkwise when its estimate is below this fraction of the sequential kernel's. */
#define CD_COST_MARGIN 0.9

/** Both algorithms' estimates for one shape (ms[CAMDELTA_SCAN_SEQUENTIAL], ms[CAMDELTA_SCAN_CHUNKWISE]; an
 *  algorithm whose plan cannot be configured on the device costs HUGE_VAL) and the one AUTO picks. */
typedef struct cd_scan_estimate {
  double ms[3];
  cd_cost_kernel seq, a, b, c;
  double seq_out; /* the sequential plan's outputs by phase C (OUT=2): that kernel's time and its states buffer */
  camdelta_scan_algorithm pick;
} cd_scan_estimate;

/** Estimates for B*H = BH chains of F frames of S tokens, head dim D. */
void cd_scan_estimate_costs(const cd_cost_device *d, size_t BH, size_t D, size_t F, size_t S, cd_scan_estimate *e);

/** The algorithm CAMDELTA_SCAN_AUTO picks on a device with these facts (no device needed); e (may be NULL)
 *  receives the estimates. */
camdelta_scan_algorithm cd_scan_auto(const camdelta_device_info *info, int tc, size_t BH, size_t D, size_t F,
                                     size_t S, cd_scan_estimate *e);
/** The same for the context's device (its tensor-core path as cd_tc_available and cd_tc_emulated say). */
camdelta_scan_algorithm cd_scan_auto_ctx(camdelta_context *ctx, size_t BH, size_t D, size_t F, size_t S,
                                         cd_scan_estimate *e);

/** "auto: chunkwise (est. 2.27 ms) over sequential (est. 11.3 ms)", or with a forced algorithm
 *  "chunkwise forced by the caller (est. 2.27 ms; sequential est. 11.3 ms)". */
void cd_scan_estimate_text(const cd_scan_estimate *e, camdelta_scan_algorithm requested, char *buf, size_t size);
#endif
