/* Standalone reproducer: Mesa's gallivm (llvmpipe; Rusticl and lavapipe run on it) ends every loop of a shader
 * invocation once the invocation has run 65535 loop iterations in all (LP_MAX_TGSI_LOOP_ITERATIONS, one counter
 * shared by all loops, nested ones included), without an error: the kernel completes with wrong results.
 *
 *   cc -O1 ci/portability/loop_limit.c -lOpenCL -o loop_limit
 *   RUSTICL_ENABLE=llvmpipe ./loop_limit            # every platform and device, one line each
 *
 * One work-item runs n steps of a linear congruential generator in one loop (and, second, 8192 x 7 steps in two
 * nested loops: 57344 steps, 8192 + 57344 = 65536 loop iterations) and the host checks the value. On Mesa 22.3
 * (Debian 12) Rusticl on llvmpipe: one loop right up to n = 65535, wrong from 65536; the nested form wrong. PoCL:
 * right for every n. Exit status 1 where a device showed the limit. camdelta measures this limit once per context (cl/device_probe.cl,
 * src/runtime/loops.c) and splits its serial walks to stay within it (docs/portability.md). */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>

static const char *SRC =
    "kernel void one(global uint *out, uint n) {\n"
    "  uint s = 1u;\n"
    "  for (uint i = 0; i < n; i++) s = s * 1664525u + 1013904223u;\n"
    "  out[0] = s;\n"
    "}\n"
    "kernel void nested(global uint *out, uint n, uint m) {\n"
    "  uint s = 1u;\n"
    "  for (uint i = 0; i < n; i++)\n"
    "    for (uint j = 0; j < m; j++) s = s * 1664525u + 1013904223u;\n"
    "  out[0] = s;\n"
    "}\n";

static cl_uint expect(unsigned long steps) {
  cl_uint s = 1u;
  for (unsigned long i = 0; i < steps; i++) s = s * 1664525u + 1013904223u;
  return s;
}

/* 1: the kernel's value after `steps` steps is right; 0 wrong; -1 an OpenCL error. */
static int run(cl_command_queue q, cl_kernel k, cl_mem b, cl_uint n, cl_uint m, unsigned long steps) {
  cl_uint got = 0;
  const size_t one = 1;
  if (clSetKernelArg(k, 0, sizeof b, &b) || clSetKernelArg(k, 1, sizeof n, &n) ||
      (m && clSetKernelArg(k, 2, sizeof m, &m)) || clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL) ||
      clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof got, &got, 0, NULL, NULL))
    return -1;
  return got == expect(steps);
}

int main(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || !np) {
    printf("no OpenCL platform\n");
    return 0;
  }
  int bad = 0;
  for (cl_uint p = 0; p < np; p++) {
    char pname[128] = "";
    clGetPlatformInfo(ps[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    cl_device_id ds[8];
    cl_uint nd = 0;
    if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 8, ds, &nd) != CL_SUCCESS) {
      printf("%s: no devices\n", pname);
      continue;
    }
    for (cl_uint d = 0; d < nd; d++) {
      char dname[128] = "";
      clGetDeviceInfo(ds[d], CL_DEVICE_NAME, sizeof dname, dname, NULL);
      cl_int err;
      cl_context c = clCreateContext(NULL, 1, &ds[d], NULL, NULL, &err);
      cl_command_queue q = clCreateCommandQueue(c, ds[d], 0, &err);
      cl_program pr = clCreateProgramWithSource(c, 1, &SRC, NULL, &err);
      if (clBuildProgram(pr, 1, &ds[d], "", NULL, NULL) != CL_SUCCESS) {
        printf("%s / %s: build failed\n", pname, dname);
        continue;
      }
      cl_kernel k1 = clCreateKernel(pr, "one", &err), k2 = clCreateKernel(pr, "nested", &err);
      cl_mem b = clCreateBuffer(c, CL_MEM_WRITE_ONLY, sizeof(cl_uint), NULL, &err);
      const cl_uint ns[] = {1000, 65535, 65536, 1u << 20};
      printf("%s / %s:", pname, dname);
      for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        const int r = run(q, k1, b, ns[i], 0, ns[i]);
        printf(" one loop n=%u %s;", ns[i], r < 0 ? "error" : r ? "right" : "WRONG");
        bad |= r == 0;
      }
      /* 8192 outer x 7 inner = 57344 steps, 65536 loop iterations in all (8192 + 57344): wrong under the limit */
      const int r = run(q, k2, b, 8192, 7, 8192ul * 7);
      printf(" nested 8192x7 %s\n", r < 0 ? "error" : r ? "right" : "WRONG");
      bad |= r == 0;
      clReleaseMemObject(b), clReleaseKernel(k1), clReleaseKernel(k2), clReleaseProgram(pr);
      clReleaseCommandQueue(q), clReleaseContext(c);
    }
  }
  return bad; /* 1 where a device showed the limit */
}
