/* Standalone reproducer: Mesa 22.3's Rusticl on llvmpipe reports CL_KERNEL_WORK_GROUP_SIZE = 32 for every kernel
 * (even one declared reqd_work_group_size(128, 1, 1)), while CL_DEVICE_MAX_WORK_GROUP_SIZE is 1024 and work-groups of
 * 64 to 256 items run correctly. camdelta honours the kernel's figure (the OpenCL contract; on other drivers it falls
 * with register and local-memory use), so on this driver every kernel is planned for 32 items (docs/portability.md).
 *
 *   cc -O1 ci/portability/kernel_wg.c -lOpenCL -o kernel_wg
 *   RUSTICL_ENABLE=llvmpipe ./kernel_wg
 *
 * Per device: the device limit, each test kernel's CL_KERNEL_WORK_GROUP_SIZE, and whether work-groups of 32 .. 256
 * items run a kernel with a barrier correctly. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>

static const char *SRC =
    "kernel void plain(global int *x) { x[get_global_id(0)] = 1; }\n"
    "kernel __attribute__((reqd_work_group_size(128, 1, 1))) void fixed128(global int *x) {\n"
    "  x[get_global_id(0)] = 1;\n"
    "}\n"
    "kernel void reverse(global int *x) {\n"
    "  local int l[256];\n"
    "  l[get_local_id(0)] = (int)get_local_id(0);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  x[get_global_id(0)] = l[get_local_size(0) - 1 - get_local_id(0)];\n"
    "}\n";

int main(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || !np) {
    printf("no OpenCL platform\n");
    return 0;
  }
  for (cl_uint p = 0; p < np; p++) {
    char pname[128] = "";
    clGetPlatformInfo(ps[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    cl_device_id dev;
    if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS) {
      printf("%s: no devices\n", pname);
      continue;
    }
    size_t dmax = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof dmax, &dmax, NULL);
    cl_int err;
    cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(c, dev, 0, &err);
    cl_program pr = clCreateProgramWithSource(c, 1, &SRC, NULL, &err);
    if (clBuildProgram(pr, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
      printf("%s: build failed\n", pname);
      continue;
    }
    printf("%s: device max work-group %zu; CL_KERNEL_WORK_GROUP_SIZE", pname, dmax);
    const char *names[3] = {"plain", "fixed128", "reverse"};
    cl_kernel ks[3];
    for (int i = 0; i < 3; i++) {
      size_t kmax = 0;
      ks[i] = clCreateKernel(pr, names[i], &err);
      clGetKernelWorkGroupInfo(ks[i], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
      printf(" %s %zu;", names[i], kmax);
    }
    printf(" reverse runs at");
    cl_mem b = clCreateBuffer(c, CL_MEM_READ_WRITE, 256 * sizeof(int), NULL, &err);
    clSetKernelArg(ks[2], 0, sizeof b, &b);
    for (size_t l = 32; l <= 256 && l <= dmax; l *= 2) {
      const size_t g = 256;
      int out[256] = {0}, ok = 1;
      err = clEnqueueNDRangeKernel(q, ks[2], 1, NULL, &g, &l, 0, NULL, NULL);
      if (err == CL_SUCCESS) err = clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
      for (size_t i = 0; i < 256; i++) ok &= out[i] == (int)(l - 1 - i % l);
      printf(" %zu:%s", l, err != CL_SUCCESS ? "refused" : ok ? "right" : "WRONG");
    }
    printf("\n");
    clReleaseMemObject(b);
    for (int i = 0; i < 3; i++) clReleaseKernel(ks[i]);
    clReleaseProgram(pr), clReleaseCommandQueue(q), clReleaseContext(c);
  }
  return 0;
}
