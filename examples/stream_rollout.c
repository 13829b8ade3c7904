/* A block-autoregressive rollout of the camera branch from C (docs/streaming.md).
 *
 * A video model generates a long video one block of latent frames at a time. For each block it runs its denoiser
 * several times against the same committed past, then commits the block. The camera branch of each attention
 * layer sees the past only through a camdelta_stream: its causal state, the conv's look-back and the frame index.
 * This program runs such a rollout for one layer: 10 blocks of 3 frames (first_chunk_plus_one schedule: 4 frames,
 * then 3), each run 3 times without committing (the "denoising steps", whose Q, K, V would change from step to step;
 * here they are the same) and once committing. Half-way it saves the stream to a file, then branches the rollout:
 * a second stream restored from the file continues with the same blocks and must give the same y, bit for bit. At
 * the end it checks the concatenated y of the committed blocks against the library's f64 reference. */
#include <camdelta.h>
#include <camdelta_ref.h>
#include <camdelta_stream.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

enum { B = 1, HS = 3, WS = 4, S = HS * WS, H = 2, D = 16, C = H * D, CS = 3, BLOCKS = 10 };
enum { T = CS + 1 + (BLOCKS - 1) * CS, MOST = CS + 1 }; /* 31 frames; the longest block */

/* The whole video's inputs, kept here only to check the result (a model makes each block when it comes). */
static float q[T * S * C], k[T * S * C], v[T * S * C], cams[T * 20], beta[H * T * S], decay[H * T];
static float y_a[T * S * C], y_b[T * S * C];

/* One layer's block buffers on the device. */
typedef struct block_bufs {
  cl_mem q, k, v, cams, beta, decay, y;
} block_bufs;

static cl_mem buffer(camdelta_context *ctx, size_t bytes) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "clCreateBuffer: %d\n", (int)err);
    exit(1);
  }
  return m;
}

static void put(camdelta_context *ctx, cl_mem m, size_t at, size_t bytes, const void *src) {
  if (clEnqueueWriteBuffer(camdelta_context_queue(ctx), m, CL_TRUE, at, bytes, src, 0, NULL, NULL) != CL_SUCCESS) {
    fprintf(stderr, "clEnqueueWriteBuffer failed\n");
    exit(1);
  }
}

/* Frames [f0, f0 + Tb) into the block buffers (B = 1: q, k, v and the cameras are contiguous per block; beta and
 * decay per head). */
static void upload(camdelta_context *ctx, const block_bufs *bb, size_t f0, size_t Tb) {
  const size_t fs = S * C * sizeof(float);
  put(ctx, bb->q, 0, Tb * fs, q + f0 * S * C);
  put(ctx, bb->k, 0, Tb * fs, k + f0 * S * C);
  put(ctx, bb->v, 0, Tb * fs, v + f0 * S * C);
  put(ctx, bb->cams, 0, Tb * 20 * sizeof(float), cams + f0 * 20);
  for (size_t h = 0; h < H; h++) {
    put(ctx, bb->beta, h * Tb * S * sizeof(float), Tb * S * sizeof(float), beta + (h * T + f0) * S);
    put(ctx, bb->decay, h * Tb * sizeof(float), Tb * sizeof(float), decay + h * T + f0);
  }
}

/* The rollout from the stream's frame to T: for each block, 3 denoising steps without commit, then the commit;
 * the committed y into y_out. */
static void rollout(camdelta_context *ctx, camdelta_stream *stream, const block_bufs *bb, float *y_out) {
  while (camdelta_stream_frames(stream) < T) {
    const size_t f0 = camdelta_stream_frames(stream), Tb = camdelta_stream_next_frames(stream);
    upload(ctx, bb, f0, Tb);
    camdelta_stream_step_args step = {.frames = Tb, .commit = 0, .q_raw = {bb->q, 0}, .k_raw = {bb->k, 0},
                                      .v_raw = {bb->v, 0}, .camera_conditions = {bb->cams, 0},
                                      .beta = {bb->beta, 0}, .decay = {bb->decay, 0}, .y = {bb->y, 0}};
    for (int denoise = 0; denoise < 3; denoise++) CHECK(camdelta_stream_step(ctx, stream, &step));
    step.commit = 1;
    CHECK(camdelta_stream_step(ctx, stream, &step));
    if (clEnqueueReadBuffer(camdelta_context_queue(ctx), bb->y, CL_TRUE, 0, Tb * S * C * sizeof(float),
                            y_out + f0 * S * C, 0, NULL, NULL) != CL_SUCCESS) {
      fprintf(stderr, "clEnqueueReadBuffer failed\n");
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "stream_rollout.cds";
  unsigned seed = 7;
  for (size_t i = 0; i < T * S * C; i++) q[i] = frand(&seed), k[i] = frand(&seed), v[i] = frand(&seed);
  for (size_t f = 0; f < T; f++) orbit_camera(-0.8 + 0.05 * (double)f, HS, WS, cams + 20 * f);
  for (size_t i = 0; i < H * T * S; i++) beta[i] = 0.5f + 0.4f * frand(&seed);
  for (size_t i = 0; i < H * T; i++) decay[i] = 0.9f + 0.1f * frand(&seed);
  float conv_w[C * 4], qw[C], kw[C];
  for (size_t i = 0; i < C * 4; i++) conv_w[i] = 0.5f * frand(&seed);
  for (size_t i = 0; i < C; i++) qw[i] = 1.0f + 0.3f * frand(&seed), kw[i] = 1.0f + 0.3f * frand(&seed);

  camdelta_context *ctx = NULL;
  CHECK(camdelta_context_create(&ctx, NULL));
  /* the layer's weights: the stream copies them */
  cl_mem dw = buffer(ctx, sizeof conv_w), dqw = buffer(ctx, sizeof qw), dkw = buffer(ctx, sizeof kw);
  put(ctx, dw, 0, sizeof conv_w, conv_w), put(ctx, dqw, 0, sizeof qw, qw), put(ctx, dkw, 0, sizeof kw, kw);
  const float k_scale = (float)(1.0 / sqrt((double)D * S));
  const camdelta_stream_args cfg = {.B = B, .H = H, .D = D, .Hs = HS, .Ws = WS, .pt = 1, .ph = 1, .pw = 1,
                                    .chunk_size = CS, .strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE,
                                    .k_scale = k_scale, .norm_eps = 1e-6f, .dtype = CAMDELTA_F32,
                                    .algorithm = CAMDELTA_SCAN_AUTO, .precision = CAMDELTA_PRECISION_EXACT,
                                    .conv_weight = {dw, 0}, .q_norm_weight = {dqw, 0}, .k_norm_weight = {dkw, 0}};
  camdelta_stream *a = NULL, *b = NULL;
  CHECK(camdelta_stream_create(ctx, &cfg, &a));
  CHECK(camdelta_stream_create(ctx, &cfg, &b));
  const size_t fs = MOST * S * C * sizeof(float);
  const block_bufs bb = {buffer(ctx, fs), buffer(ctx, fs), buffer(ctx, fs), buffer(ctx, MOST * 20 * sizeof(float)),
                         buffer(ctx, H * MOST * S * sizeof(float)), buffer(ctx, H * MOST * sizeof(float)),
                         buffer(ctx, fs)};

  /* the first five blocks, then a checkpoint */
  const block_bufs *p = &bb;
  while (camdelta_stream_frames(a) < 16) { /* blocks of 4, 3, 3, 3, 3 frames */
    const size_t f0 = camdelta_stream_frames(a), Tb = camdelta_stream_next_frames(a);
    upload(ctx, p, f0, Tb);
    camdelta_stream_step_args step = {.frames = Tb, .commit = 1, .q_raw = {p->q, 0}, .k_raw = {p->k, 0},
                                      .v_raw = {p->v, 0}, .camera_conditions = {p->cams, 0},
                                      .beta = {p->beta, 0}, .decay = {p->decay, 0}, .y = {p->y, 0}};
    CHECK(camdelta_stream_step(ctx, a, &step));
    if (clEnqueueReadBuffer(camdelta_context_queue(ctx), p->y, CL_TRUE, 0, Tb * S * C * sizeof(float),
                            y_a + f0 * S * C, 0, NULL, NULL) != CL_SUCCESS) {
      fprintf(stderr, "clEnqueueReadBuffer failed\n");
      exit(1);
    }
  }
  CHECK(camdelta_stream_save_file(a, path));
  printf("checkpoint at frame %zu: %zu bytes in %s\n", camdelta_stream_frames(a), camdelta_stream_state_size(a),
         path);
  /* the rest twice: the stream itself, and a branch of the rollout restored from the checkpoint */
  rollout(ctx, a, &bb, y_a);
  CHECK(camdelta_stream_restore_file(b, path));
  memcpy(y_b, y_a, 16 * S * C * sizeof(float));
  rollout(ctx, b, &bb, y_b);
  const int same = memcmp(y_a, y_b, sizeof y_a) == 0;

  /* the f64 reference of the committed blocks */
  double *in[9], *ref = malloc(sizeof y_a * 2);
  const float *src[9] = {q, k, v, conv_w, qw, kw, cams, beta, decay};
  const size_t n[9] = {T * S * C, T * S * C, T * S * C, C * 4, C, C, T * 20, H * T * S, H * T};
  for (int i = 0; i < 9; i++) {
    in[i] = malloc(n[i] * sizeof(double));
    for (size_t j = 0; j < n[i]; j++) in[i][j] = src[i][j];
  }
  const camdelta_ref_branch r = {.B = B, .T = T, .Hs = HS, .Ws = WS, .ph = 1, .pw = 1, .H = H, .D = D,
                                 .chunking = {CS, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0}, .k_scale = k_scale,
                                 .norm_eps = 1e-6, .q_raw = in[0], .k_raw = in[1], .v_raw = in[2],
                                 .conv_weight = in[3], .q_norm_weight = in[4], .k_norm_weight = in[5],
                                 .camera_conditions = in[6], .beta = in[7], .decay = in[8], .y = ref};
  CHECK(camdelta_ref_stream_forward(&r));
  double m = 0, e = 0;
  for (size_t i = 0; i < T * S * C; i++) m = fmax(m, fabs(ref[i])), e = fmax(e, fabs(y_a[i] - ref[i]));
  const double rel = e / m;
  printf("%d blocks, %d frames: y vs the f64 reference %.2e (bound 1e-5); restored branch %s\n", BLOCKS, T, rel,
         same ? "identical" : "DIFFERS");
  for (int i = 0; i < 9; i++) free(in[i]);
  free(ref);
  const cl_mem all[] = {bb.q, bb.k, bb.v, bb.cams, bb.beta, bb.decay, bb.y, dw, dqw, dkw};
  CHECK(camdelta_finish(ctx));
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clReleaseMemObject(all[i]);
  camdelta_stream_destroy(a);
  camdelta_stream_destroy(b);
  camdelta_context_destroy(ctx);
  remove(path);
  return rel <= 1e-5 && same ? 0 : 1;
}
