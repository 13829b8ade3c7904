/* The device's measured peaks for `camdelta bench` (bench_peak.c). */
#ifndef CAMDELTA_TOOLS_BENCH_PEAK_H
#define CAMDELTA_TOOLS_BENCH_PEAK_H
#include "camdelta.h"

typedef struct bench_peak {
  double gflops;          /* f32 fma throughput, GFLOP/s (2 per fma) */
  double gbs;             /* copy bandwidth, GB/s (bytes read + written) */
  unsigned compute_units; /* the device's, as reported (PoCL: its worker threads) */
  int soft_fma;           /* no fused multiply-add in hardware: gflops counts a mad (multiply and add) as an fma */
  char fma_shape[48];     /* the kernel shape that gave gflops (bench_peak.c measures two, keeps the better) */
  char copy_shape[48];    /* the same for gbs */
} bench_peak;

/** Measures both on the context's device. 0, or -1 where an OpenCL call failed (p is then zero). */
int bench_peak_measure(camdelta_context *ctx, bench_peak *p);
#endif
