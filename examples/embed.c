/* Embedding camdelta in an application that owns its OpenCL objects.
 *
 * The application creates its context and queue, hands them to camdelta,
 * runs prep and then the causal scan on device buffers (prep's outputs feed
 * the scan directly, no copies in between), reads the result, and checks it
 * against the library's f64 reference. */
#include <camdelta.h>
#include <camdelta_ref.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(st)                                                                          \
  do {                                                                                     \
    camdelta_status s_ = (st);                                                             \
    if (s_ != CAMDELTA_OK) {                                                               \
      fprintf(stderr, "%s: %s\n", camdelta_status_name(s_), camdelta_last_message());     \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) / 16777216.0 * 2.0 - 1.0);
}

/* The application's own device choice: the first GPU, else the first device. */
static int pick_device(cl_platform_id *plat, cl_device_id *dev) {
  cl_platform_id ps[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, ps, &np) != CL_SUCCESS || np == 0) return 0;
  for (int pass = 0; pass < 2; pass++)
    for (cl_uint i = 0; i < np && i < 8; i++)
      if (clGetDeviceIDs(ps[i], pass == 0 ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL, 1, dev, NULL) == CL_SUCCESS) {
        *plat = ps[i];
        return 1;
      }
  return 0;
}

int main(void) {
  enum { B = 1, H = 2, D = 16, F = 3, S = 10, N = F * S, C = H * D };
  printf("camdelta %s (built against %s)\n", camdelta_version_string(), CAMDELTA_VERSION_STRING);
  if (camdelta_version_number() / 100 != CAMDELTA_VERSION_NUMBER / 100) {
    fprintf(stderr, "library version mismatch\n");
    return 1;
  }
  cl_platform_id plat;
  cl_device_id dev;
  if (!pick_device(&plat, &dev)) {
    fprintf(stderr, "no OpenCL device\n");
    return 1;
  }
  cl_int err;
  cl_context clctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue queue = clCreateCommandQueue(clctx, dev, 0, &err);
  camdelta_context *ctx;
  CHECK(camdelta_context_create_from_queue(&ctx, clctx, queue));

  /* host inputs */
  static float in[9][B * N * C > B * N * 16 ? B * N * C : B * N * 16];
  const size_t count[9] = {B * N * C, B * N * C, B * N * C, C, C, B * N * 16, B * N * 16, N * D / 2, N * D / 2};
  unsigned seed = 7;
  for (int t = 0; t < 9; t++)
    for (size_t i = 0; i < count[t]; i++) in[t][i] = t == 3 || t == 4 ? 1.0f + 0.2f * frand(&seed) : frand(&seed);
  static float beta[B * H * N], decay[B * H * F];
  for (size_t i = 0; i < B * H * N; i++) beta[i] = 0.5f + 0.4f * frand(&seed);
  for (size_t i = 0; i < B * H * F; i++) decay[i] = 0.95f + 0.04f * frand(&seed);

  cl_mem m[9], q, k, v, infl, mbeta, mdecay, out;
  for (int t = 0; t < 9; t++) m[t] = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, count[t] * 4, in[t], &err);
  q = clCreateBuffer(clctx, CL_MEM_READ_WRITE, B * N * C * 4, NULL, &err);
  k = clCreateBuffer(clctx, CL_MEM_READ_WRITE, B * N * C * 4, NULL, &err);
  v = clCreateBuffer(clctx, CL_MEM_READ_WRITE, B * N * C * 4, NULL, &err);
  infl = clCreateBuffer(clctx, CL_MEM_READ_WRITE, B * H * N * 4, NULL, &err);
  out = clCreateBuffer(clctx, CL_MEM_READ_WRITE, B * N * C * 4, NULL, &err);
  mbeta = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof beta, beta, &err);
  mdecay = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof decay, decay, &err);

  const float k_scale = (float)(1.0 / sqrt((double)D * S));
  camdelta_prep_args p = {B, N, H, D, CAMDELTA_F32, k_scale, 1e-6f, {m[0], 0}, {m[1], 0}, {m[2], 0}, {m[3], 0},
                          {m[4], 0}, {m[5], 0}, {m[6], 0}, {m[7], 0}, {m[8], 0}, {q, 0}, {k, 0}, {v, 0}, {infl, 0},
                          NULL};
  CHECK(camdelta_prep_forward(ctx, &p, NULL));
  camdelta_scan_args s = {B, H, D, F, S, 0, CAMDELTA_SCAN_AUTO, {q, 0}, {k, 0}, {v, 0}, {mbeta, 0}, {mdecay, 0},
                          {out, 0}, {NULL, 0}, {NULL, 0}, NULL, NULL, CAMDELTA_PRECISION_EXACT};
  CHECK(camdelta_scan_forward(ctx, &s, NULL));
  static float got[B * N * C];
  clEnqueueReadBuffer(queue, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);

  /* the same two steps through the f64 reference */
  static double in64[9][B * N * C > B * N * 16 ? B * N * C : B * N * 16], rq[B * N * C], rk[B * N * C],
      rv[B * N * C], ro[B * N * C], b64[B * H * N], d64[B * H * F];
  for (int t = 0; t < 9; t++)
    for (size_t i = 0; i < count[t]; i++) in64[t][i] = in[t][i];
  for (size_t i = 0; i < B * H * N; i++) b64[i] = beta[i];
  for (size_t i = 0; i < B * H * F; i++) d64[i] = decay[i];
  camdelta_ref_prep rp = {B, N, H, D, k_scale, 1e-6, in64[0], in64[1], in64[2], in64[3], in64[4], in64[5],
                          in64[6], in64[7], in64[8], rq, rk, rv, NULL};
  CHECK(camdelta_ref_prep_forward(&rp));
  camdelta_ref_scan rs = {B, H, D, F, S, 0, rq, rk, rv, b64, d64, NULL, ro, NULL, NULL, NULL};
  CHECK(camdelta_ref_scan_forward(&rs));
  double maxref = 0, maxdiff = 0;
  for (size_t i = 0; i < B * N * C; i++) {
    if (fabs(ro[i]) > maxref) maxref = fabs(ro[i]);
    if (!(fabs(got[i] - ro[i]) <= maxdiff)) maxdiff = fabs(got[i] - ro[i]);
  }
  double rel = maxdiff / maxref;
  printf("prep -> scan on the application's queue: max relative error %.2e %s\n", rel, rel < 1e-5 ? "ok" : "FAIL");

  for (int t = 0; t < 9; t++) clReleaseMemObject(m[t]);
  clReleaseMemObject(q), clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(infl);
  clReleaseMemObject(out), clReleaseMemObject(mbeta), clReleaseMemObject(mdecay);
  camdelta_context_destroy(ctx);
  clReleaseCommandQueue(queue);
  clReleaseContext(clctx);
  return rel < 1e-5 ? 0 : 1;
}
