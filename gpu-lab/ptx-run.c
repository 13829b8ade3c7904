/* Runs one kernel of an OpenCL program's PTX (as gpu-lab/cl-inspect.c writes it) through the CUDA driver API, so that
 * Nsight Compute (ncu), which does not see OpenCL kernels, can measure the machine code the OpenCL driver builds.
 * The arguments are given on the command line, buffers filled with pseudo-random data. `gpu-lab/gpu-test.sh ptx-prof`
 * runs it on the lent GPU.
 *   cc -I/usr/local/cuda/include -o ptx-run gpu-lab/ptx-run.c -lcuda
 *   ptx-run FILE.ptx KERNEL GX,GY,GZ LX,LY,LZ REPS ARG...
 * G: work-groups per dimension (OpenCL's global size / local size), L: the local size. ARG, one per kernel argument:
 *   r<bytes>  a buffer of f32 values in [-1, 1)    p<bytes>  in [0, 1)    z<bytes>  zeros
 *   =<i>      the buffer of argument i (0-based)
 *   q<v>      a ulong    u<v>  a uint    i<v>  an int    f<v>  a float
 * The PTX's %envreg registers (OpenCL's group-id offsets, zero here) must have been replaced by 0 (gpu-test.sh does).
 * Prints the kernel's registers, static local memory and median time of REPS launches (after 3 warm-up launches). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                        \
  do {                                                                                               \
    CUresult r_ = (x);                                                                               \
    if (r_ != CUDA_SUCCESS) {                                                                        \
      const char *s_ = "?";                                                                          \
      cuGetErrorString(r_, &s_);                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                                \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

enum { MAX_ARGS = 64, MAX_REPS = 256 };

static CUdeviceptr filled(size_t bytes, float lo, float hi, unsigned seed) {
  const size_t n = bytes / sizeof(float);
  float *h = malloc(n * sizeof *h + 1);
  if (!h) exit(1);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
  }
  CUdeviceptr d;
  CK(cuMemAlloc(&d, bytes ? bytes : 4));
  CK(cuMemcpyHtoD(d, h, n * sizeof *h));
  free(h);
  return d;
}

static int dims(const char *s, unsigned d[3]) {
  d[0] = d[1] = d[2] = 1;
  return sscanf(s, "%u,%u,%u", &d[0], &d[1], &d[2]) >= 1;
}

int main(int argc, char **argv) {
  unsigned grid[3], local[3];
  if (argc < 6 || !dims(argv[3], grid) || !dims(argv[4], local) || argc - 6 > MAX_ARGS) {
    fprintf(stderr, "usage: %s FILE.ptx KERNEL GX,GY,GZ LX,LY,LZ REPS ARG...\n", argv[0]);
    return 2;
  }
  const int reps = atoi(argv[5]), nargs = argc - 6;
  if (reps < 1 || reps > MAX_REPS) return fprintf(stderr, "REPS: 1 to %d\n", MAX_REPS), 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  fseek(f, 0, SEEK_END);
  const long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *ptx = calloc((size_t)len + 1, 1);
  if (!ptx || fread(ptx, 1, (size_t)len, f) != (size_t)len) return 1;
  fclose(f);
  CK(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  char log[8192] = "";
  CUjit_option o[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *ov[2] = {log, (void *)(size_t)sizeof log};
  CUmodule mod;
  const CUresult jr = cuModuleLoadDataEx(&mod, ptx, 2, o, ov);
  if (jr != CUDA_SUCCESS) {
    const char *why = "?";
    cuGetErrorString(jr, &why);
    return fprintf(stderr, "loading the PTX: %s (error %d); JIT log: %s\n", why, (int)jr, log), 1;
  }
  CUfunction fn;
  CK(cuModuleGetFunction(&fn, mod, argv[2]));

  static union {
    CUdeviceptr p;
    unsigned long long q;
    unsigned u;
    int i;
    float f;
  } val[MAX_ARGS];
  void *args[MAX_ARGS];
  for (int a = 0; a < nargs; a++) {
    const char *s = argv[6 + a];
    switch (s[0]) {
      case 'r': val[a].p = filled(strtoull(s + 1, NULL, 10), -1.0f, 1.0f, 7u * (unsigned)a + 1u); break;
      case 'p': val[a].p = filled(strtoull(s + 1, NULL, 10), 0.0f, 1.0f, 7u * (unsigned)a + 1u); break;
      case 'z': val[a].p = filled(strtoull(s + 1, NULL, 10), 0.0f, 0.0f, 1u); break;
      case '=': {
        const int i = atoi(s + 1);
        if (i < 0 || i >= a) return fprintf(stderr, "argument %d: '%s' names no earlier argument\n", a, s), 2;
        val[a].p = val[i].p;
        break;
      }
      case 'q': val[a].q = strtoull(s + 1, NULL, 10); break;
      case 'u': val[a].u = (unsigned)strtoul(s + 1, NULL, 10); break;
      case 'i': val[a].i = atoi(s + 1); break;
      case 'f': val[a].f = strtof(s + 1, NULL); break;
      default: return fprintf(stderr, "argument %d: unknown kind '%s'\n", a, s), 2;
    }
    args[a] = &val[a];
  }
  int regs = 0, smem = 0;
  cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
  cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
  CUevent e0, e1;
  CK(cuEventCreate(&e0, 0));
  CK(cuEventCreate(&e1, 0));
#define LAUNCH() CK(cuLaunchKernel(fn, grid[0], grid[1], grid[2], local[0], local[1], local[2], 0, 0, args, 0))
  for (int r = 0; r < 3; r++) LAUNCH();
  float t[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    CK(cuEventRecord(e0, 0));
    LAUNCH();
    CK(cuEventRecord(e1, 0));
    CK(cuEventSynchronize(e1));
    CK(cuEventElapsedTime(&t[r], e0, e1));
  }
  for (int i = 1; i < reps; i++) /* median */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      const float x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  printf("ptx-run %s %s: grid %u,%u,%u local %u,%u,%u, %d registers, %d B static local: median %.4f ms of %d\n", argv[1],
         argv[2], grid[0], grid[1], grid[2], local[0], local[1], local[2], regs, smem, t[reps / 2], reps);
  return 0;
}
