/* The device's own peaks for `camdelta bench` (cmd_bench.c): an FMA-throughput kernel and a copy kernel, built on
 * the context's OpenCL context and timed on its queue (the best of several runs, host wall clock around a finish).
 *
 * FMA: each work-item runs CD_PEAK_CHAINS independent float8 fma chains (enough to cover the fma latency of two
 * pipes on an AVX2 core), ITERS steps each; items = 16 per compute unit, work-groups of one item (a core's task).
 * The compiler cannot fold the chains: their seeds depend on the item and the result is stored.
 * Copy: every work-item copies one contiguous slice of a buffer far larger than the caches with float8 loads and
 * stores; GB/s counts the bytes read and written. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_peak.h"

#define CD_PEAK_CHAINS 12

static const char *peak_src =
    "#define C 12\n"
    "kernel void cd_peak_fma(global float *out, uint iters, float a, float b) {\n"
    "  const float s = (float)get_global_id(0) * 1e-9f;\n"
    "  float8 x[C];\n"
    "  for (int c = 0; c < C; c++) x[c] = (float8)(s + c, s - c, s * c, s + 2 * c, s, -s, s + 0.5f, c);\n"
    "  for (uint i = 0; i < iters; i++) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < C; c++) x[c] = fma(x[c], (float8)(a), (float8)(b));\n"
    "  }\n"
    "  float8 t = x[0];\n"
    "  for (int c = 1; c < C; c++) t += x[c];\n"
    "  out[get_global_id(0)] = t.s0 + t.s1 + t.s2 + t.s3 + t.s4 + t.s5 + t.s6 + t.s7;\n"
    "}\n"
    "kernel void cd_peak_copy(global const float8 *src, global float8 *dst, ulong per) {\n"
    "  const ulong o = get_global_id(0) * per;\n"
    "  for (ulong i = 0; i < per; i++) dst[o + i] = src[o + i];\n"
    "}\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The best wall time of `reps` runs of k over gws items (work-groups of one item), after one untimed run. */
static int best_time(cl_command_queue q, cl_kernel k, size_t gws, int reps, double *best) {
  const size_t one = 1;
  *best = 1e30;
  for (int r = 0; r <= reps; r++) {
    const double t0 = now_s();
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &one, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS)
      return -1;
    const double t = now_s() - t0;
    if (r > 0 && t < *best) *best = t;
  }
  return 0;
}

int bench_peak_measure(camdelta_context *ctx, bench_peak *p) {
  memset(p, 0, sizeof *p);
  cl_context cl = camdelta_context_cl_context(ctx);
  cl_command_queue q = camdelta_context_queue(ctx);
  cl_device_id dev = camdelta_context_device(ctx);
  camdelta_device_info info;
  if (camdelta_context_info(ctx, &info) != CAMDELTA_OK) return -1;
  p->compute_units = info.compute_units ? info.compute_units : 1;
  cl_int err;
  cl_program prog = clCreateProgramWithSource(cl, 1, &peak_src, NULL, &err);
  if (err != CL_SUCCESS) return -1;
  cl_kernel kf = NULL, kc = NULL;
  cl_mem out = NULL, src = NULL, dst = NULL;
  int rc = -1;
  if (clBuildProgram(prog, 1, &dev, "-cl-mad-enable", NULL, NULL) != CL_SUCCESS) goto done;
  kf = clCreateKernel(prog, "cd_peak_fma", &err);
  if (err != CL_SUCCESS) goto done;
  kc = clCreateKernel(prog, "cd_peak_copy", &err);
  if (err != CL_SUCCESS) goto done;
  /* FMA: 16 items per compute unit, enough steps for ~0.1 s at 100 GFLOP/s per unit */
  const size_t items = 16 * (size_t)p->compute_units;
  const cl_uint iters = 1u << 14;
  const float a = 0.999999f, b = 1e-7f;
  out = clCreateBuffer(cl, CL_MEM_READ_WRITE, items * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) goto done;
  err = clSetKernelArg(kf, 0, sizeof out, &out);
  err |= clSetKernelArg(kf, 1, sizeof iters, &iters);
  err |= clSetKernelArg(kf, 2, sizeof a, &a);
  err |= clSetKernelArg(kf, 3, sizeof b, &b);
  double t;
  if (err != CL_SUCCESS || best_time(q, kf, items, 3, &t)) goto done;
  p->gflops = (double)items * iters * CD_PEAK_CHAINS * 8 * 2 / t / 1e9;
  /* copy: 2 x 128 MiB (or a quarter of the device's memory), 4 slices per compute unit */
  size_t bytes = (size_t)128 << 20;
  if (info.global_mem_bytes && bytes > info.global_mem_bytes / 4) bytes = (size_t)(info.global_mem_bytes / 4);
  const size_t slices = 4 * (size_t)p->compute_units;
  const cl_ulong per = bytes / 32 / slices;
  bytes = (size_t)per * 32 * slices;
  src = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) goto done;
  dst = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) goto done;
  const float zero = 0.0f;
  if (clEnqueueFillBuffer(q, src, &zero, sizeof zero, 0, bytes, 0, NULL, NULL) != CL_SUCCESS) goto done;
  err = clSetKernelArg(kc, 0, sizeof src, &src);
  err |= clSetKernelArg(kc, 1, sizeof dst, &dst);
  err |= clSetKernelArg(kc, 2, sizeof per, &per);
  if (err != CL_SUCCESS || best_time(q, kc, slices, 5, &t)) goto done;
  p->gbs = 2.0 * (double)bytes / t / 1e9;
  rc = 0;
done:
  if (out) clReleaseMemObject(out);
  if (src) clReleaseMemObject(src);
  if (dst) clReleaseMemObject(dst);
  if (kf) clReleaseKernel(kf);
  if (kc) clReleaseKernel(kc);
  clReleaseProgram(prog);
  return rc;
}
