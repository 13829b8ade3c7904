/* Standalone probe: what a CPU OpenCL stack runs fast. PoCL runs a work-item's explicit vectors on the SIMD units;
 * Mesa's llvmpipe (gallivm: Rusticl and lavapipe run on it) runs the work-items of a group side by side in the SIMD
 * lanes, and the two reward different kernel shapes. For every device, one line per measurement:
 *
 *   cc -O2 ci/portability/cpu_rates.c -lOpenCL -o cpu_rates
 *   RUSTICL_ENABLE=llvmpipe ./cpu_rates [platform-substring]
 *
 *  - arithmetic: GFLOP/s of independent multiply-add chains, written as fma() and as mad(), in one-item work-groups
 *    of float8 (12 chains: the bench's original peak kernel) and in work-groups of 8, 32 and 64 items of scalars
 *    (16 chains each), 2 flops per multiply-add;
 *  - memory: nanoseconds of the device's time per work-item load, a float and a float8 (vload8), work-groups of 32
 *    (the time of the launch over the loads it makes);
 *  - GEMM-shaped: C = A·B at the scan's product shapes (112x1560 by 1560x224, 1560x112 by 112x112) in two forms
 *    without local memory: "column" (a work-item per column j of C along the contiguous dimension, 8 rows of it in
 *    registers, A broadcast) and "tile" (a work-item per 8x8 block of C, vload8 of a row of B and of a column of A
 *    given transposed); the best of work-groups of 7, 14 and 28 items; the largest error against a double product.
 * Every loop stays under gallivm's 65535 iterations per work-item (loop_limit.c). */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *SRC =
    "kernel void fma8(global float *out, uint n, float a, float b) {\n"
    "  const float s = (float)get_global_id(0) * 1e-9f;\n"
    "  float8 x[12];\n"
    "  for (int c = 0; c < 12; c++) x[c] = (float8)(s + c, s - c, s * c, s + 2 * c, s, -s, s + 0.5f, c);\n"
    "  for (uint i = 0; i < n; i++) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < 12; c++) x[c] = OP(x[c], (float8)(a), (float8)(b));\n"
    "  }\n"
    "  float8 t = x[0];\n"
    "  for (int c = 1; c < 12; c++) t += x[c];\n"
    "  out[get_global_id(0)] = t.s0 + t.s1 + t.s2 + t.s3 + t.s4 + t.s5 + t.s6 + t.s7;\n"
    "}\n"
    "kernel void fma1(global float *out, uint n, float a, float b) {\n"
    "  float x[16];\n"
    "#pragma unroll\n"
    "  for (int c = 0; c < 16; c++) x[c] = (float)get_global_id(0) * 1e-9f + c;\n"
    "  for (uint i = 0; i < n; i++) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < 16; c++) x[c] = OP(x[c], a, b);\n"
    "  }\n"
    "  float t = 0.0f;\n"
    "#pragma unroll\n"
    "  for (int c = 0; c < 16; c++) t += x[c];\n"
    "  out[get_global_id(0)] = t;\n"
    "}\n"
    "kernel void load1(global const float *x, global float *out, uint n) {\n"
    "  const uint j = get_local_id(0);\n"
    "  float s0 = 0.0f, s1 = 0.0f;\n"
    "  for (uint k = 0; k < n; k += 2) { s0 += x[k * 32 + j]; s1 += x[(k + 1) * 32 + j]; }\n"
    "  out[get_global_id(0)] = s0 + s1;\n"
    "}\n"
    "kernel void load8(global const float *x, global float *out, uint n) {\n"
    "  const uint j = get_local_id(0);\n"
    "  float8 s0 = 0.0f, s1 = 0.0f;\n"
    "  for (uint k = 0; k < n; k += 2) { s0 += vload8(k * 32 + j, x); s1 += vload8((k + 1) * 32 + j, x); }\n"
    "  s0 += s1;\n"
    "  out[get_global_id(0)] = s0.s0 + s0.s1 + s0.s2 + s0.s3 + s0.s4 + s0.s5 + s0.s6 + s0.s7;\n"
    "}\n"
    "kernel void column(global const float *A, global const float *At, global const float *B, global float *C,\n"
    "                   int M, int N, int K) {\n"
    "  const int j = get_global_id(0), i0 = get_global_id(1) * 8;\n"
    "  float c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;\n"
    "  global const float *a = A + (size_t)i0 * K;\n"
    "  for (int k = 0; k < K; k++) {\n"
    "    const float b = B[(size_t)k * N + j];\n"
    "    c0 = OP(a[k], b, c0); c1 = OP(a[K + k], b, c1); c2 = OP(a[2 * K + k], b, c2); c3 = OP(a[3 * K + k], b, c3);\n"
    "    c4 = OP(a[4 * K + k], b, c4); c5 = OP(a[5 * K + k], b, c5); c6 = OP(a[6 * K + k], b, c6);\n"
    "    c7 = OP(a[7 * K + k], b, c7);\n"
    "  }\n"
    "  global float *o = C + (size_t)i0 * N + j;\n"
    "  o[0] = c0; o[N] = c1; o[2 * N] = c2; o[3 * N] = c3; o[4 * N] = c4; o[5 * N] = c5; o[6 * N] = c6; o[7 * N] = c7;\n"
    "}\n"
    "kernel void tile(global const float *A, global const float *At, global const float *B, global float *C,\n"
    "                 int M, int N, int K) {\n"
    "  const int j0 = get_global_id(0) * 8, i0 = get_global_id(1) * 8;\n"
    "  float8 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;\n"
    "  for (int k = 0; k < K; k++) {\n"
    "    const float8 a = vload8(0, At + (size_t)k * M + i0), b = vload8(0, B + (size_t)k * N + j0);\n"
    "    c0 = OP(a.s0, b, c0); c1 = OP(a.s1, b, c1); c2 = OP(a.s2, b, c2); c3 = OP(a.s3, b, c3);\n"
    "    c4 = OP(a.s4, b, c4); c5 = OP(a.s5, b, c5); c6 = OP(a.s6, b, c6); c7 = OP(a.s7, b, c7);\n"
    "  }\n"
    "  global float *o = C + (size_t)i0 * N + j0;\n"
    "  vstore8(c0, 0, o); vstore8(c1, 0, o + N); vstore8(c2, 0, o + 2 * N); vstore8(c3, 0, o + 3 * N);\n"
    "  vstore8(c4, 0, o + 4 * N); vstore8(c5, 0, o + 5 * N); vstore8(c6, 0, o + 6 * N); vstore8(c7, 0, o + 7 * N);\n"
    "}\n";

/* The best of three timed launches after one untimed; a negative value on an OpenCL error. */
static double best(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *g, const size_t *l) {
  double b = 1e30;
  struct timespec t0, t1;
  for (int r = 0; r < 4; r++) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (clEnqueueNDRangeKernel(q, k, dims, NULL, g, l, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS)
      return -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double t = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (r > 0 && t < b) b = t;
  }
  return b;
}

static void arithmetic(cl_command_queue q, cl_program p[2], cl_mem out, cl_uint cu) {
  const float a = 0.999999f, b = 1e-7f;
  const cl_uint n = 4096;
  for (int op = 0; op < 2; op++) {
    cl_int err;
    cl_kernel k8 = clCreateKernel(p[op], "fma8", &err), k1 = clCreateKernel(p[op], "fma1", &err);
    cl_kernel ks[2] = {k8, k1};
    for (int i = 0; i < 2; i++) {
      clSetKernelArg(ks[i], 0, sizeof out, &out), clSetKernelArg(ks[i], 1, sizeof n, &n);
      clSetKernelArg(ks[i], 2, sizeof a, &a), clSetKernelArg(ks[i], 3, sizeof b, &b);
    }
    const size_t one = 1, items = 16 * (size_t)cu;
    const double t = best(q, k8, 1, &items, &one);
    printf("  %s, one-item work-groups of float8: %.2f GFLOP/s\n", op ? "mad()" : "fma()",
           t > 0 ? (double)items * n * 12 * 16 / t / 1e9 : 0);
    const size_t groups[] = {8, 32, 64};
    for (int g = 0; g < 3; g++) {
      const size_t gi = groups[g] * 4 * cu;
      const double tg = best(q, k1, 1, &gi, &groups[g]);
      printf("  %s, %zu-item work-groups of scalars: %.2f GFLOP/s%s\n", op ? "mad()" : "fma()", groups[g],
             tg > 0 ? (double)gi * n * 16 * 2 / tg / 1e9 : 0, tg > 0 ? "" : " (launch failed)");
    }
    clReleaseKernel(k8), clReleaseKernel(k1);
  }
}

static void memory(cl_context c, cl_command_queue q, cl_program p, cl_mem out) {
  const cl_uint n = 2048;
  cl_int err;
  cl_mem x = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof(float) * 8 * 32 * (n + 2), NULL, &err);
  const float z = 1e-3f;
  clEnqueueFillBuffer(q, x, &z, sizeof z, 0, sizeof(float) * 8 * 32 * (n + 2), 0, NULL, NULL);
  const char *names[] = {"load1", "load8"};
  for (int i = 0; i < 2; i++) {
    cl_kernel k = clCreateKernel(p, names[i], &err);
    clSetKernelArg(k, 0, sizeof x, &x), clSetKernelArg(k, 1, sizeof out, &out), clSetKernelArg(k, 2, sizeof n, &n);
    const size_t l = 32, g = 32 * 16;
    const double t = best(q, k, 1, &g, &l);
    printf("  %s: %.2f ns per work-item load\n", i ? "float8 (vload8)" : "float", t * 1e9 / ((double)g * n));
    clReleaseKernel(k);
  }
  clReleaseMemObject(x);
}

static void gemm(cl_context c, cl_command_queue q, cl_program p, int M, int N, int K) {
  float *a = malloc(sizeof(float) * M * K), *at = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *r = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) at[(size_t)k * M + i] = a[(size_t)i * K + k];
  cl_int err;
  cl_mem dA = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(float) * M * K, a, &err);
  cl_mem dAt = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(float) * M * K, at, &err);
  cl_mem dB = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(float) * K * N, b, &err);
  cl_mem dC = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof(float) * M * N, NULL, &err);
  const char *names[] = {"column", "tile"};
  for (int f = 0; f < 2; f++) {
    cl_kernel k = clCreateKernel(p, names[f], &err);
    clSetKernelArg(k, 0, sizeof dA, &dA), clSetKernelArg(k, 1, sizeof dAt, &dAt), clSetKernelArg(k, 2, sizeof dB, &dB);
    clSetKernelArg(k, 3, sizeof dC, &dC), clSetKernelArg(k, 4, sizeof M, &M), clSetKernelArg(k, 5, sizeof N, &N);
    clSetKernelArg(k, 6, sizeof K, &K);
    const size_t g[2] = {f ? (size_t)N / 8 : (size_t)N, (size_t)M / 8};
    double tb = 1e30;
    size_t lb = 0;
    for (size_t l0 = 7; l0 <= 28; l0 *= 2) {
      const size_t l[2] = {l0, 1};
      const double t = g[0] % l0 ? -1 : best(q, k, 2, g, l);
      if (t > 0 && t < tb) tb = t, lb = l0;
    }
    double e = 0;
    if (lb && clEnqueueReadBuffer(q, dC, CL_TRUE, 0, sizeof(float) * M * N, r, 0, NULL, NULL) == CL_SUCCESS)
      for (int i = 0; i < M; i += 13)
        for (int j = 0; j < N; j += 7) {
          double s = 0;
          for (int kk = 0; kk < K; kk++) s += (double)a[(size_t)i * K + kk] * b[(size_t)kk * N + j];
          e = fmax(e, fabs(s - r[(size_t)i * N + j]));
        }
    if (lb)
      printf("  %dx%d by %dx%d, %s: %.2f GFLOP/s (%.2f ms, work-groups of %zu, max error %.1e)\n", M, K, K, N,
             names[f], 2.0 * M * N * K / tb / 1e9, tb * 1e3, lb, e);
    clReleaseKernel(k);
  }
  clReleaseMemObject(dA), clReleaseMemObject(dAt), clReleaseMemObject(dB), clReleaseMemObject(dC);
  free(a), free(at), free(b), free(r);
}

/* Every measurement on the platform's first CPU device; 0 where it has none. */
static int device_rates(cl_platform_id pf, const char *pname) {
  cl_device_id d;
  if (clGetDeviceIDs(pf, CL_DEVICE_TYPE_CPU, 1, &d, NULL) != CL_SUCCESS) return 0;
  char dname[128] = "";
  cl_uint cu = 1;
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dname, dname, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
  printf("%s / %s, %u compute units\n", pname, dname, cu);
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(c, d, 0, &err);
  cl_program p[2];
  int ok = 1;
  for (int op = 0; op < 2; op++) {
    p[op] = clCreateProgramWithSource(c, 1, &SRC, NULL, &err);
    ok &= clBuildProgram(p[op], 1, &d, op ? "-DOP=mad" : "-DOP=fma", NULL, NULL) == CL_SUCCESS;
  }
  cl_mem out = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof(float) * 64 * 4 * cu, NULL, &err);
  if (ok) {
    arithmetic(q, p, out, cu);
    memory(c, q, p[1], out);
    gemm(c, q, p[1], 112, 224, 1560);
    gemm(c, q, p[1], 1560, 112, 112);
  } else
    printf("  build failed\n");
  clReleaseMemObject(out), clReleaseProgram(p[0]), clReleaseProgram(p[1]);
  clReleaseCommandQueue(q), clReleaseContext(c);
  return 1;
}

/* Every platform's CPU device, or those of the platforms whose name contains argv[1]. */
int main(int argc, char **argv) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  int seen = 0;
  if (clGetPlatformIDs(16, ps, &np) == CL_SUCCESS)
    for (cl_uint i = 0; i < np; i++) {
      char name[128] = "";
      clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
      if (argc < 2 || strstr(name, argv[1])) seen += device_rates(ps[i], name);
    }
  if (!seen) printf("no OpenCL CPU device\n");
  return 0;
}
