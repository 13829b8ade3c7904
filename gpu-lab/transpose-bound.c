/* The data movement under the prep forward, measured on the NVIDIA OpenCL device (`gpu-lab/gpu-test.sh transpose-bound`):
 * B tensors of (B, N, H, D) f32 rows transposed to (B, H, D, N) by gpu-lab/transpose-bound.cl, without the prep's
 * arithmetic: clEnqueueCopyBuffer and a float4 copy kernel (the same bytes, not transposed), the prep's register
 * tile (TT tokens of all heads per work-group, with and without a barrier between loads and stores; with the barrier
 * also with float4 row stores through local memory), and a
 * streaming transpose (one float4 per work-item) at 8, 16 and 32 tokens per row store. Kernel time from profiling
 * events, median of 15 after 3 warm-ups; GB/s counts each byte read and written once.
 * Usage: transpose-bound FILE.cl [B N H D] (default 3 32760 20 112: q, k and v at sana480); TB_OPTIONS adds build
 * options (-DINTER=1: the register tile takes the tensors' tiles interleaved, as the prep's kinds are). */
#include <stdlib.h>

#include "cl-tool.h"

enum { REPS = 15, WARM = 3 };
static cl_command_queue q;

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double timed(cl_kernel k, cl_mem src, cl_mem dst, size_t bytes, cl_uint dims, const size_t *gws,
                    const size_t *lws) {
  double t[REPS];
  for (int r = 0; r < WARM + REPS; r++) {
    cl_event ev;
    cl_int err = k ? clEnqueueNDRangeKernel(q, k, dims, NULL, gws, lws, 0, NULL, &ev)
                   : clEnqueueCopyBuffer(q, src, dst, 0, 0, bytes, 0, NULL, &ev);
    if (err != CL_SUCCESS) return fprintf(stderr, "enqueue failed (%d)\n", err), -1;
    clWaitForEvents(1, &ev);
    cl_ulong t0, t1;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    clReleaseEvent(ev);
    if (r >= WARM) t[r - WARM] = (double)(t1 - t0) * 1e-6;
  }
  qsort(t, REPS, sizeof t[0], cmp);
  return t[REPS / 2];
}

/* One of the transposes (in, out, N; the grid carries B): its median time, -1 when it did not launch */
static double timed_transpose(cl_program p, const char *kernel, cl_mem in, cl_mem out, cl_ulong N, cl_uint dims,
                              const size_t *gws, const size_t *lws) {
  cl_int err;
  cl_kernel k = clCreateKernel(p, kernel, &err);
  if (err != CL_SUCCESS) return -1;
  clSetKernelArg(k, 0, sizeof in, &in);
  clSetKernelArg(k, 1, sizeof out, &out);
  clSetKernelArg(k, 2, sizeof N, &N);
  const double ms = timed(k, NULL, NULL, 0, dims, gws, lws);
  clReleaseKernel(k);
  return ms;
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 6) {
    fprintf(stderr, "usage: %s FILE.cl [B N H D]\n", argv[0]);
    return 2;
  }
  const unsigned long B = argc > 2 ? strtoul(argv[2], NULL, 10) : 3, N = argc > 2 ? strtoul(argv[3], NULL, 10) : 32760,
                      H = argc > 2 ? strtoul(argv[4], NULL, 10) : 20, D = argc > 2 ? strtoul(argv[5], NULL, 10) : 112;
  const cl_device_id dev = cl_tool_nvidia_gpu();
  static char src[1 << 16];
  if (!dev || !cl_tool_read(argv[1], src, sizeof src)) return 1;
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  const size_t bytes = (size_t)B * N * H * D * sizeof(float);
  cl_mem in = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  cl_mem out = err == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err) : NULL;
  if (err != CL_SUCCESS) return fprintf(stderr, "two buffers of %zu bytes: error %d\n", bytes, err), 1;
  cl_uint cus = 0;
  clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  const float one = 1.0f;
  clEnqueueFillBuffer(q, in, &one, sizeof one, 0, bytes, 0, NULL, NULL);
  clFinish(q);
  printf("transpose-bound: B=%lu N=%lu H=%lu D=%lu, %.1f MB read and written\n", B, N, H, D, bytes / 1e6);
#define REPORT(name, ms)                                                                   \
  do {                                                                                     \
    const double ms_ = (ms);                                                               \
    if (ms_ < 0) printf("%-40s      n/a (did not launch)\n", name);                         \
    else printf("%-40s %8.4f ms %8.1f GB/s\n", name, ms_, 2.0 * bytes / ms_ / 1e6);         \
  } while (0)
  REPORT("clEnqueueCopyBuffer", timed(NULL, in, out, bytes, 0, NULL, NULL));
  const char *text = src;
  static const unsigned tts[] = {8, 16, 32};
  for (int i = 0; i < 3; i++) {
    for (int dep = 0; dep < 2; dep++) {
      char opts[256];
      const char *extra = getenv("TB_OPTIONS"); /* more build options, e.g. -DINTER=1 */
      snprintf(opts, sizeof opts, "-DH=%lu -DD=%lu -DTT=%u -DDEP=%d %s", H, D, tts[i], dep, extra ? extra : "");
      cl_program p = clCreateProgramWithSource(ctx, 1, &text, NULL, &err);
      if (clBuildProgram(p, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) {
        char log[8192] = "";
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        return fprintf(stderr, "%s\n", log), 1;
      }
      const unsigned long tt = tts[i], tiles = B * ((N + tt - 1) / tt);
      char name[64];
      if (i == 0 && dep == 0) { /* the float4 copy, once */
        cl_kernel k = clCreateKernel(p, "tp_copy", &err);
        const cl_ulong n4 = bytes / 16;
        clSetKernelArg(k, 0, sizeof in, &in);
        clSetKernelArg(k, 1, sizeof out, &out);
        clSetKernelArg(k, 2, sizeof n4, &n4);
        const size_t lws = 256, gws = (size_t)(cus ? cus : 1) * 2048; /* 2048 items per compute unit */
        REPORT("copy kernel (float4, grid-stride)", timed(k, NULL, NULL, 0, 1, &gws, &lws));
        clReleaseKernel(k);
      }
      const size_t lws = tt * (D / 4);
      const size_t gws = tiles * lws, l2[2] = {lws, 1}, g2[2] = {tiles * lws, H};
      if (lws <= 1024) {
        snprintf(name, sizeof name, "register tile TT=%lu%s", tt, dep ? " + barrier" : "");
        REPORT(name, timed_transpose(p, "tp_tile", in, out, N, 1, &gws, &lws));
      }
      if (dep && lws <= 1024 && N % 4 == 0 && tt <= 16) { /* tp_tile4's float4 stores need N % 4 == 0 */
        snprintf(name, sizeof name, "register tile TT=%lu, float4 row stores", tt);
        REPORT(name, timed_transpose(p, "tp_tile4", in, out, N, 1, &gws, &lws));
      }
      if (!dep && lws <= 1024) {
        snprintf(name, sizeof name, "streaming TT=%lu", tt);
        REPORT(name, timed_transpose(p, "tp_stream", in, out, N, 2, g2, l2));
      }
      clReleaseProgram(p);
    }
  }
  clReleaseMemObject(in);
  clReleaseMemObject(out);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
