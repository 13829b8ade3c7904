/* Builds one kernel file on the first GPU with NVIDIA's verbose option and prints the build log (ptxas
 * registers, spills, local memory per kernel); writes the program binary (PTX on NVIDIA) to OUT.
 *   cc -o cl-inspect gpu-lab/cl-inspect.c -lOpenCL && ./cl-inspect cl/gemm_tc.cl "-DCD_GRAM -DCD_D=112" out.ptx */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 4) return fprintf(stderr, "usage: %s FILE.cl OPTIONS OUT\n", argv[0]), 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  static char src[1 << 20];
  size_t n = fread(src, 1, sizeof src - 1, f);
  fclose(f);
  src[n] = 0;
  cl_platform_id plats[8];
  cl_uint np = 0;
  clGetPlatformIDs(8, plats, &np);
  cl_device_id dev = NULL;
  for (cl_uint i = 0; i < np && !dev; i++)
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
  if (!dev) return fprintf(stderr, "no GPU\n"), 1;
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  const char *s = src;
  cl_program p = clCreateProgramWithSource(ctx, 1, &s, &n, &err);
  char opts[4096];
  snprintf(opts, sizeof opts, "-cl-std=CL1.2 -cl-nv-verbose %s", argv[2]);
  err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
  size_t ln = 0;
  clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
  char *log = malloc(ln + 1);
  clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, ln, log, NULL);
  log[ln] = 0;
  printf("== %s %s: build %d\n%s\n", argv[1], argv[2], err, log);
  if (err == CL_SUCCESS) {
    size_t bs = 0;
    clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, NULL);
    unsigned char *b = malloc(bs);
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof b, &b, NULL);
    FILE *o = fopen(argv[3], "wb");
    if (o) fwrite(b, 1, bs, o), fclose(o);
  }
  return err != CL_SUCCESS;
}
