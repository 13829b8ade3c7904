/* The device's measured peaks for `camdelta bench` (bench_peak.c). */
#ifndef CAMDELTA_TOOLS_BENCH_PEAK_H
#define CAMDELTA_TOOLS_BENCH_PEAK_H
#include "camdelta.h"

typedef struct bench_peak {
  double gflops;          /* f32 fma throughput, GFLOP/s (2 per fma) */
  double gbs;             /* copy bandwidth, GB/s (bytes read + written) */
  unsigned compute_units; /* the device's, as reported (PoCL: its worker threads) */
} bench_peak;

/** Measures both on the context's device. 0, or -1 where an OpenCL call failed (p is then zero). */
int bench_peak_measure(camdelta_context *ctx, bench_peak *p);
#endif
