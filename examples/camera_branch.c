/* The model's whole camera branch from C: a training step without PyTorch.
 *
 * A camera orbits a point; its poses and intrinsics (camera_conditions) go to the device with the layer's Q, K, V
 * and gates. One camdelta_branch_forward runs cameras -> matrices and RoPE tables, the short conv on K, prep, the
 * beta discount, the causal + chunk-masked reverse scan pair and the output transform, keeping what its backward
 * needs in a camdelta_branch_saved. One camdelta_branch_backward then gives every input gradient. The program
 * checks y and the gradients against the library's f64 reference and exits 0 when they agree. */
#include <camdelta.h>
#include <camdelta_ref.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

enum { B = 1, T = 5, HS = 3, WS = 4, S = HS * WS, N = T * S, H = 2, D = 16, C = H * D };

static cl_mem upload(camdelta_context *ctx, const float *x, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            n * sizeof *x, (void *)x, &err);
  if (err != CL_SUCCESS) fprintf(stderr, "clCreateBuffer: %s\n", camdelta_cl_error_name(err)), exit(1);
  return m;
}

static cl_mem output(camdelta_context *ctx, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) fprintf(stderr, "clCreateBuffer: %s\n", camdelta_cl_error_name(err)), exit(1);
  return m;
}

/* The largest |device - reference| over the largest |reference| (docs/math.md §5's measure). */
static double rel_error(camdelta_context *ctx, cl_mem m, const double *ref, size_t n) {
  float *got = malloc(n * sizeof *got);
  if (!got) exit(1);
  if (clEnqueueReadBuffer(camdelta_context_queue(ctx), m, CL_TRUE, 0, n * sizeof *got, got, 0, NULL, NULL))
    fprintf(stderr, "clEnqueueReadBuffer failed\n"), exit(1);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    if (!(fabs(got[i] - ref[i]) <= diff)) diff = fabs(got[i] - ref[i]); /* a NaN counts as the largest */
  }
  free(got);
  return scale > 0 ? diff / scale : diff;
}

int main(void) {
  /* the layer's tensors, in the model's layouts */
  enum { I_Q, I_K, I_V, I_W, I_QW, I_KW, I_CC, I_BETA, I_DECAY, I_GY, NIN };
  static const size_t count[NIN] = {B * N * C, B * N * C, B * N * C, C * 4, C, C, B * T * 20, B * H * N, B * H * T,
                                    B * N * C};
  static float in[NIN][B * N * C];
  unsigned seed = 11;
  for (int t = 0; t < NIN; t++)
    for (size_t i = 0; i < count[t]; i++) in[t][i] = frand(&seed);
  for (size_t i = 0; i < C; i++) in[I_QW][i] = 1 + 0.2f * in[I_QW][i], in[I_KW][i] = 1 + 0.2f * in[I_KW][i];
  for (size_t i = 0; i < C * 4; i++) in[I_W][i] *= 0.5f;
  for (int f = 0; f < T; f++) orbit_camera(-0.4 + 0.2 * f, HS, WS, in[I_CC] + 20 * f);
  for (size_t i = 0; i < count[I_BETA]; i++) in[I_BETA][i] = 0.5f + 0.4f * in[I_BETA][i];
  for (size_t i = 0; i < count[I_DECAY]; i++) in[I_DECAY][i] = 0.95f + 0.04f * in[I_DECAY][i];

  camdelta_context *ctx;
  CHECK(camdelta_context_create(&ctx, NULL)); /* CAMDELTA_DEVICE, else the first GPU, else the first device */
  camdelta_device_info info;
  CHECK(camdelta_context_info(ctx, &info));
  printf("camdelta %s on %s\n", camdelta_version_string(), info.device_name);
  cl_mem m[NIN];
  for (int t = 0; t < NIN; t++) m[t] = upload(ctx, in[t], count[t]);
  enum { O_Y, O_DQ, O_DK, O_DV, O_DW, O_DQW, O_DKW, O_DBETA, O_DDECAY, NOUT };
  static const size_t ocount[NOUT] = {B * N * C, B * N * C, B * N * C, B * N * C, C * 4, C, C, B * H * N, B * H * T};
  cl_mem o[NOUT];
  for (int t = 0; t < NOUT; t++) o[t] = output(ctx, ocount[t]);

  /* forward, keeping what the backward needs; chunks of 2 frames after a first chunk of 3 */
  const camdelta_chunking chunking = {2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  camdelta_branch_args a = {0};
  a.B = B, a.T = T, a.Hs = HS, a.Ws = WS, a.H = H, a.D = D, a.pt = a.ph = a.pw = 1;
  a.chunking = chunking;
  a.k_scale = (float)(1.0 / sqrt((double)D * S)), a.norm_eps = 1e-6f;
  a.algorithm = CAMDELTA_SCAN_AUTO;
  a.q_raw = (camdelta_buffer){m[I_Q], 0}, a.k_raw = (camdelta_buffer){m[I_K], 0};
  a.v_raw = (camdelta_buffer){m[I_V], 0}, a.conv_weight = (camdelta_buffer){m[I_W], 0};
  a.q_norm_weight = (camdelta_buffer){m[I_QW], 0}, a.k_norm_weight = (camdelta_buffer){m[I_KW], 0};
  a.camera_conditions = (camdelta_buffer){m[I_CC], 0};
  a.beta = (camdelta_buffer){m[I_BETA], 0}, a.decay = (camdelta_buffer){m[I_DECAY], 0};
  a.y = (camdelta_buffer){o[O_Y], 0};
  camdelta_branch_saved *saved;
  CHECK(camdelta_branch_saved_create(ctx, &saved));
  CHECK(camdelta_branch_forward(ctx, &a, saved));

  /* backward from the loss gradient grad_y */
  camdelta_branch_grads g = {{m[I_GY], 0}, {o[O_DQ], 0}, {o[O_DK], 0}, {o[O_DV], 0}, {o[O_DW], 0},
                             {o[O_DQW], 0}, {o[O_DKW], 0}, {o[O_DBETA], 0}, {o[O_DDECAY], 0}, NULL};
  CHECK(camdelta_branch_backward(ctx, &a, &g, saved));
  CHECK(camdelta_finish(ctx));

  /* the same step through the f64 reference */
  static double in64[NIN][B * N * C], r[NOUT][B * N * C];
  for (int t = 0; t < NIN; t++)
    for (size_t i = 0; i < count[t]; i++) in64[t][i] = in[t][i];
  camdelta_ref_branch rb = {B, T, HS, WS, 1, 1, H, D, chunking, a.k_scale, a.norm_eps, in64[I_Q], in64[I_K],
                            in64[I_V], in64[I_W], in64[I_QW], in64[I_KW], in64[I_CC], in64[I_BETA], in64[I_DECAY],
                            r[O_Y]};
  CHECK(camdelta_ref_branch_forward(&rb));
  camdelta_ref_branch_grads rg = {in64[I_GY], r[O_DQ],  r[O_DK],  r[O_DV],    r[O_DW],
                                  r[O_DQW],   r[O_DKW], r[O_DBETA], r[O_DDECAY]};
  CHECK(camdelta_ref_branch_backward(&rb, &rg));

  static const char *names[NOUT] = {"y", "dq_raw", "dk_raw", "dv_raw", "dconv_weight", "dq_norm_weight",
                                    "dk_norm_weight", "dbeta", "ddecay"};
  int ok = 1;
  for (int t = 0; t < NOUT; t++) {
    const double err = rel_error(ctx, o[t], r[t], ocount[t]), bound = t == O_Y ? 1e-5 : 1e-4;
    printf("  %-15s max relative error %.2e (bound %.0e)%s\n", names[t], err, bound, err <= bound ? "" : "  FAIL");
    ok &= err <= bound;
  }
  printf("camera branch forward and backward: %s\n", ok ? "ok" : "FAIL");

  camdelta_branch_saved_destroy(saved);
  for (int t = 0; t < NIN; t++) clReleaseMemObject(m[t]);
  for (int t = 0; t < NOUT; t++) clReleaseMemObject(o[t]);
  camdelta_context_destroy(ctx);
  return ok ? 0 : 1;
}
