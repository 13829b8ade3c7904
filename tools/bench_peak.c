/* The device's own peaks for `camdelta bench` (cmd_bench.c): an FMA-throughput kernel and a copy kernel, built on
 * the context's OpenCL context and timed on its queue (the best of several runs, host wall clock around a finish).
 *
 * Each peak is measured in two shapes and the better is kept, because CPU stacks vectorise differently: PoCL runs a
 * work-item's explicit vectors on the SIMD units (one-item work-groups of float8 win there), Mesa's llvmpipe runs the
 * work-items of a group side by side in the SIMD lanes and leaves a one-item group seven of its eight lanes idle
 * (wide work-groups of scalar work win there). bench_peak says which shape gave each figure.
 *
 * FMA, "item" shape: each work-item runs CD_PEAK_CHAINS independent float8 fma chains (enough to cover the fma
 * latency of two pipes on an AVX2 core), ITERS steps each; items = 16 per compute unit, work-groups of one item.
 * FMA, "group" shape: work-groups of up to 64 items (the kernel's own limit where lower), each item CD_PEAK_LANES
 * independent scalar chains, 4 groups per compute unit.
 * The compiler cannot fold the chains: their seeds depend on the item and the result is stored.
 * A device that reports no fused multiply-add in hardware (CL_FP_FMA absent: llvmpipe) runs OpenCL's fma() as an
 * exact software routine; camdelta's kernels use mad() there (CD_SOFT_FMA, cl/common.cl), and so does the peak,
 * which then counts a multiply and an add as the two flops of an fma.
 * Copy, "item" shape: every work-item copies one contiguous slice of a buffer far larger than the caches with
 * float8 loads and stores. Copy, "group" shape: work-groups of up to 64 items, neighbouring items on neighbouring
 * float8 elements, every item striding by the whole grid. GB/s counts the bytes read and written.
 * Every loop runs fewer than 65535 steps per launch (Rusticl's loop budget, docs/portability.md). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_peak.h"

#define CD_PEAK_CHAINS 12
#define CD_PEAK_LANES 16

static const char *peak_src =
    "#define C 12\n"
    "#define L 16\n"
    "kernel void cd_peak_fma(global float *out, uint iters, float a, float b) {\n"
    "  const float s = (float)get_global_id(0) * 1e-9f;\n"
    "  float8 x[C];\n"
    "  for (int c = 0; c < C; c++) x[c] = (float8)(s + c, s - c, s * c, s + 2 * c, s, -s, s + 0.5f, c);\n"
    "  for (uint i = 0; i < iters; i++) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < C; c++) x[c] = CD_PEAK_FMA(x[c], (float8)(a), (float8)(b));\n"
    "  }\n"
    "  float8 t = x[0];\n"
    "  for (int c = 1; c < C; c++) t += x[c];\n"
    "  out[get_global_id(0)] = t.s0 + t.s1 + t.s2 + t.s3 + t.s4 + t.s5 + t.s6 + t.s7;\n"
    "}\n"
    "kernel void cd_peak_fma_group(global float *out, uint iters, float a, float b) {\n"
    "  const float s = (float)get_global_id(0) * 1e-9f;\n"
    "  float x[L];\n"
    "#pragma unroll\n"
    "  for (int c = 0; c < L; c++) x[c] = s + c;\n"
    "  for (uint i = 0; i < iters; i++) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < L; c++) x[c] = CD_PEAK_FMA(x[c], a, b);\n"
    "  }\n"
    "  float t = 0.0f;\n"
    "#pragma unroll\n"
    "  for (int c = 0; c < L; c++) t += x[c];\n"
    "  out[get_global_id(0)] = t;\n"
    "}\n"
    "kernel void cd_peak_copy(global const float8 *src, global float8 *dst, ulong per) {\n"
    "  const ulong o = get_global_id(0) * per;\n"
    "  for (ulong i = 0; i < per; i++) dst[o + i] = src[o + i];\n"
    "}\n"
    "kernel void cd_peak_copy_group(global const float8 *src, global float8 *dst, ulong per) {\n"
    "  const ulong g = get_global_size(0);\n"
    "  for (ulong i = 0, o = get_global_id(0); i < per; i++, o += g) dst[o] = src[o];\n"
    "}\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Most loop steps a work-item runs here per launch: under Rusticl's budget of 65535. */
#define CD_PEAK_STEPS 32768u

/* The best wall time of `reps` runs of k over gws items in work-groups of lws, after one untimed run; where `lose`
 * is positive and that first run takes more than four times it (the other shape's best: this one cannot win), the
 * first run's time, not repeated. */
static int best_time(cl_command_queue q, cl_kernel k, size_t gws, size_t lws, int reps, double lose, double *best) {
  *best = 1e30;
  for (int r = 0; r <= reps; r++) {
    const double t0 = now_s();
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS)
      return -1;
    const double t = now_s() - t0;
    if (r == 0 && lose > 0 && t > 4 * lose) {
      *best = t;
      break;
    }
    if (r > 0 && t < *best) *best = t;
  }
  return 0;
}

/* The group shape's work-group size for k: 64 items, or the largest power of two the kernel and device allow. */
static size_t group_items(cl_kernel k, cl_device_id dev) {
  size_t lim = 0;
  if (clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof lim, &lim, NULL) != CL_SUCCESS) lim = 1;
  size_t n = 64;
  while (n > 1 && n > lim) n /= 2;
  return n;
}

static int set_fma_args(cl_kernel k, cl_mem out, cl_uint iters) {
  const float a = 0.999999f, b = 1e-7f;
  cl_int err = clSetKernelArg(k, 0, sizeof out, &out);
  err |= clSetKernelArg(k, 1, sizeof iters, &iters);
  err |= clSetKernelArg(k, 2, sizeof a, &a);
  err |= clSetKernelArg(k, 3, sizeof b, &b);
  return err == CL_SUCCESS ? 0 : -1;
}

static int set_copy_args(cl_kernel k, cl_mem src, cl_mem dst, cl_ulong per) {
  cl_int err = clSetKernelArg(k, 0, sizeof src, &src);
  err |= clSetKernelArg(k, 1, sizeof dst, &dst);
  err |= clSetKernelArg(k, 2, sizeof per, &per);
  return err == CL_SUCCESS ? 0 : -1;
}

int bench_peak_measure(camdelta_context *ctx, bench_peak *p) {
  memset(p, 0, sizeof *p);
  cl_context cl = camdelta_context_cl_context(ctx);
  cl_command_queue q = camdelta_context_queue(ctx);
  cl_device_id dev = camdelta_context_device(ctx);
  camdelta_device_info info;
  if (camdelta_context_info(ctx, &info) != CAMDELTA_OK) return -1;
  p->compute_units = info.compute_units ? info.compute_units : 1;
  cl_device_fp_config fp = 0;
  p->soft_fma = clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS &&
                !(fp & CL_FP_FMA);
  cl_int err;
  cl_program prog = clCreateProgramWithSource(cl, 1, &peak_src, NULL, &err);
  if (err != CL_SUCCESS) return -1;
  cl_kernel kf = NULL, kfg = NULL, kc = NULL, kcg = NULL;
  cl_mem out = NULL, src = NULL, dst = NULL;
  int rc = -1;
  const char *opts = p->soft_fma ? "-cl-mad-enable -DCD_PEAK_FMA=mad" : "-cl-mad-enable -DCD_PEAK_FMA=fma";
  if (clBuildProgram(prog, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) goto done;
  kf = clCreateKernel(prog, "cd_peak_fma", &err);
  if (err != CL_SUCCESS) goto done;
  kfg = clCreateKernel(prog, "cd_peak_fma_group", &err);
  if (err != CL_SUCCESS) goto done;
  kc = clCreateKernel(prog, "cd_peak_copy", &err);
  if (err != CL_SUCCESS) goto done;
  kcg = clCreateKernel(prog, "cd_peak_copy_group", &err);
  if (err != CL_SUCCESS) goto done;
  /* FMA, item shape: 16 items per compute unit, enough steps for ~0.1 s at 100 GFLOP/s per unit */
  const size_t items = 16 * (size_t)p->compute_units;
  const cl_uint iters = 1u << 14;
  const size_t fg = group_items(kfg, dev), fitems = 4 * fg * (size_t)p->compute_units;
  out = clCreateBuffer(cl, CL_MEM_READ_WRITE, (items > fitems ? items : fitems) * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) goto done;
  double t;
  if (set_fma_args(kf, out, iters) || best_time(q, kf, items, 1, 3, 0, &t)) goto done;
  p->gflops = (double)items * iters * CD_PEAK_CHAINS * 8 * 2 / t / 1e9;
  snprintf(p->fma_shape, sizeof p->fma_shape, "one-item work-groups, float8");
  /* FMA, group shape: 4 work-groups per compute unit */
  const double t_item = t * (double)fitems * CD_PEAK_LANES / ((double)items * CD_PEAK_CHAINS * 8);
  if (set_fma_args(kfg, out, iters) || best_time(q, kfg, fitems, fg, 3, t_item, &t)) goto done;
  const double g = (double)fitems * iters * CD_PEAK_LANES * 2 / t / 1e9;
  if (g > p->gflops) {
    p->gflops = g;
    snprintf(p->fma_shape, sizeof p->fma_shape, "%zu-item work-groups, scalar", fg);
  }
  /* copy: 2 x 128 MiB (or a quarter of the device's memory); item shape: 4 slices per compute unit, more where a
   * slice would take more than CD_PEAK_STEPS steps */
  size_t bytes = (size_t)128 << 20;
  if (info.global_mem_bytes && bytes > info.global_mem_bytes / 4) bytes = (size_t)(info.global_mem_bytes / 4);
  size_t slices = 4 * (size_t)p->compute_units;
  while (bytes / 32 / slices > CD_PEAK_STEPS) slices *= 2;
  const size_t cg = group_items(kcg, dev), citems = 4 * cg * (size_t)p->compute_units;
  size_t units = slices > citems ? slices : citems; /* float8 elements: a multiple of both grids (powers of two) */
  while (bytes / 32 / units > CD_PEAK_STEPS) units *= 2;
  bytes = bytes / 32 / units * units * 32;
  src = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) goto done;
  dst = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) goto done;
  const float zero = 0.0f;
  if (clEnqueueFillBuffer(q, src, &zero, sizeof zero, 0, bytes, 0, NULL, NULL) != CL_SUCCESS) goto done;
  if (set_copy_args(kc, src, dst, bytes / 32 / slices) || best_time(q, kc, slices, 1, 5, 0, &t)) goto done;
  p->gbs = 2.0 * (double)bytes / t / 1e9;
  snprintf(p->copy_shape, sizeof p->copy_shape, "one-item work-groups, float8");
  /* copy, group shape: 4 work-groups per compute unit, each item striding by the grid */
  if (set_copy_args(kcg, src, dst, bytes / 32 / citems) || best_time(q, kcg, citems, cg, 5, t, &t)) goto done;
  if (2.0 * (double)bytes / t / 1e9 > p->gbs) {
    p->gbs = 2.0 * (double)bytes / t / 1e9;
    snprintf(p->copy_shape, sizeof p->copy_shape, "%zu-item work-groups, float8", cg);
  }
  rc = 0;
done:
  if (rc) memset(p, 0, sizeof *p);
  if (out) clReleaseMemObject(out);
  if (src) clReleaseMemObject(src);
  if (dst) clReleaseMemObject(dst);
  if (kf) clReleaseKernel(kf);
  if (kfg) clReleaseKernel(kfg);
  if (kc) clReleaseKernel(kc);
  if (kcg) clReleaseKernel(kcg);
  clReleaseProgram(prog);
  return rc;
}
