/* The tensor cores' rate for mma.sync.m16n8k8 TF32 on the NVIDIA OpenCL device (`gpu-lab/gpu-test.sh mma`): builds
 * gpu-lab/mma-throughput.cl for 1..16 accumulator chains per warp and runs it at 128, 256 and 512 items per work-group,
 * 8192 items per SM-sized slice; prints TFLOP/s and clocks per mma per SM at a given clock (argv[2], GHz).
 * Usage: mma-throughput FILE.cl [GHz] [SMs] */
#include <stdlib.h>

#include "cl-tool.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE.cl [GHz] [SMs]\n", argv[0]);
    return 2;
  }
  const double ghz = argc > 2 ? atof(argv[2]) : 1.98, sms = argc > 3 ? atof(argv[3]) : 132;
  const cl_device_id dev = cl_tool_nvidia_gpu();
  static char src[1 << 16];
  if (!dev || !cl_tool_read(argv[1], src, sizeof src)) return 1;
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  const char *text = src;
  static const int wgs[] = {128, 256, 512}, nchs[] = {1, 2, 4, 8, 16};
  for (int ci = 0; ci < 5; ci++) {
    char opts[64];
    snprintf(opts, sizeof opts, "-DNCH=%d", nchs[ci]);
    cl_program p = clCreateProgramWithSource(ctx, 1, &text, NULL, &err);
    if (clBuildProgram(p, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) {
      char log[8192] = "";
      clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
      fprintf(stderr, "%s\n", log);
      return 1;
    }
    cl_kernel k = clCreateKernel(p, "mma_throughput", &err);
    for (int wi = 0; wi < 3; wi++) {
      const size_t lws = (size_t)wgs[wi], gws = (size_t)sms * 2048 * 4; /* four waves of 2048 items per SM */
      cl_mem o = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, gws * sizeof(float), NULL, &err);
      const int iters = 16384 / nchs[ci];
      const float seed = 1.0f;
      clSetKernelArg(k, 0, sizeof o, &o);
      clSetKernelArg(k, 1, sizeof iters, &iters);
      clSetKernelArg(k, 2, sizeof seed, &seed);
      double best = 1e30;
      for (int r = 0; r < 4; r++) { /* the first run warms up */
        cl_event ev;
        cl_ulong t0, t1;
        clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, &ev);
        clWaitForEvents(1, &ev);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
        const double ms = (double)(t1 - t0) * 1e-6;
        if (r && ms < best) best = ms;
      }
      const double mmas = (double)(gws / 32) * iters * nchs[ci];
      printf("chains %2d, %3zu items: %.3f ms, %.1f TFLOP/s (m16n8k8 tf32 mma.sync), %.2f clocks per mma per SM at "
             "%.2f GHz\n",
             nchs[ci], lws, best, mmas * 2048 / best / 1e9, best * 1e-3 * ghz * 1e9 * sms / mmas, ghz);
      clReleaseMemObject(o);
    }
    clReleaseKernel(k);
    clReleaseProgram(p);
  }
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
