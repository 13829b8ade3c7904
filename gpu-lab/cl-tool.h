/* Shared by the gpu-lab/ measurement programs that run one OpenCL C file on the lent machine's NVIDIA GPU
 * (mma-throughput.c, transpose-bound.c). Header-only: each program is one translation unit. */
#ifndef CAMDELTA_CI_CL_TOOL_H
#define CAMDELTA_CI_CL_TOOL_H
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>

/* The first GPU of the NVIDIA platform, or NULL (a message on stderr). */
static cl_device_id cl_tool_nvidia_gpu(void) {
  cl_platform_id pf[8];
  cl_uint np = 0;
  cl_device_id dev = NULL;
  clGetPlatformIDs(8, pf, &np);
  for (cl_uint i = 0; i < np && i < 8 && !dev; i++) {
    char name[256] = "";
    clGetPlatformInfo(pf[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (strstr(name, "NVIDIA") && clGetDeviceIDs(pf[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
  }
  if (!dev) fprintf(stderr, "no NVIDIA OpenCL device\n");
  return dev;
}

/* The text of file `path` into buf (NUL-terminated, at most size - 1 bytes); 0 (a message on stderr) when it
 * cannot be read or is empty. */
static size_t cl_tool_read(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "rb");
  const size_t n = f ? fread(buf, 1, size - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  if (!n) fprintf(stderr, "cannot read %s\n", path);
  return n;
}
#endif
