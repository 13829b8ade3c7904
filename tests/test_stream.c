/* Streams (include/camdelta_stream.h, docs/streaming.md): T frames streamed block by block, committing each block,
 * against camdelta_branch_forward over the T frames with the same schedule (where its conv segments are its scan
 * chunks) and against the f64 stream reference (camdelta_ref_stream_forward, every schedule); non-committing steps
 * give the committing step's y and change no bit of the stream; restore-then-continue equals never stopping (host
 * memory and file); B > 1 in lockstep; bad input (a block of the wrong length, 16-bit dtypes for now, images of
 * another configuration, damaged, truncated or hostile images and files) refused with nothing changed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_problem.h"
#include "camdelta_stream.h"
#include "ops/stream_image.h"

typedef struct sshape {
  size_t B, T, Hs, Ws, H, D, cs;
  camdelta_chunk_strategy strategy;
  int branch_equal; /* camdelta_branch_forward's conv segments are its chunks for this T */
} sshape;

enum { IQ, IK, IV, IW, IQW, IKW, ICC, IBETA, IDECAY, NIN };

/* A whole sequence on the host, its device copies (for camdelta_branch_forward), the block buffers of a stream. */
typedef struct sproblem {
  sshape s;
  size_t S, C, N;
  float k_scale;
  float *in[NIN];
  size_t count[NIN];
  cl_mem din[NIN];
  cl_mem blk[7]; /* q, k, v, cameras, beta, decay, y of the longest block */
  cl_mem w[3];
} sproblem;

static camdelta_scan_algorithm g_alg = CAMDELTA_SCAN_AUTO;

static void sp_init(sproblem *p, const sshape *s, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->s = *s;
  p->S = s->Hs * s->Ws, p->C = s->H * s->D, p->N = s->T * p->S;
  p->k_scale = (float)(1.0 / sqrt((double)s->D * (double)p->S));
  bp_inputs(p->in, p->count, s->B, s->T, s->Hs, s->Ws, s->H, s->D, seed);
  for (int i = 0; i < NIN; i++) p->din[i] = tu_upload(p->in[i], p->count[i] * sizeof(float));
  const size_t most = s->cs + 1, bnc = s->B * most * p->S * p->C;
  const size_t bcount[7] = {bnc, bnc, bnc, s->B * most * 20, s->B * s->H * most * p->S, s->B * s->H * most, bnc};
  for (int i = 0; i < 7; i++) p->blk[i] = tu_buffer(bcount[i] * 4);
  for (int i = 0; i < 3; i++) p->w[i] = p->din[IW + i];
}

static void sp_free(sproblem *p) {
  for (int i = 0; i < NIN; i++) free(p->in[i]), clReleaseMemObject(p->din[i]);
  for (int i = 0; i < 7; i++) clReleaseMemObject(p->blk[i]);
}

static camdelta_stream_args stream_args(const sproblem *p) {
  const sshape *s = &p->s;
  const camdelta_stream_args a = {.B = s->B, .H = s->H, .D = s->D, .Hs = s->Hs, .Ws = s->Ws, .pt = 1, .ph = 1,
                                  .pw = 1, .chunk_size = s->cs, .strategy = s->strategy, .k_scale = p->k_scale,
                                  .norm_eps = 1e-6f, .dtype = CAMDELTA_F32, .algorithm = g_alg,
                                  .conv_weight = {p->din[IW], 0}, .q_norm_weight = {p->din[IQW], 0},
                                  .k_norm_weight = {p->din[IKW], 0}};
  return a;
}

static camdelta_stream *sp_stream(const sproblem *p) {
  const camdelta_stream_args a = stream_args(p);
  camdelta_stream *st = NULL;
  TU_OK(camdelta_stream_create(tu_context(), &a, &st));
  return st;
}

/* Writes frames [f0, f0 + Tb) of the sequence into the block buffers: per batch (and head) a contiguous run. */
static void upload_block(const sproblem *p, size_t f0, size_t Tb) {
  const sshape *s = &p->s;
  const size_t S = p->S, C = p->C, T = s->T;
  cl_command_queue q = camdelta_context_queue(tu_context());
  /* (outer, T frames of fs floats) -> (outer, Tb frames) */
  const size_t outer[6] = {s->B, s->B, s->B, s->B, s->B * s->H, s->B * s->H};
  const size_t fs[6] = {S * C, S * C, S * C, 20, S, 1};
  const int src[6] = {IQ, IK, IV, ICC, IBETA, IDECAY};
  for (int i = 0; i < 6; i++)
    for (size_t o = 0; o < outer[i]; o++)
      assert_int_equal(clEnqueueWriteBuffer(q, p->blk[i], CL_TRUE, o * Tb * fs[i] * 4, Tb * fs[i] * 4,
                                            p->in[src[i]] + (o * T + f0) * fs[i], 0, NULL, NULL),
                       CL_SUCCESS);
}

static camdelta_stream_step_args step_args(const sproblem *p, size_t Tb, int commit) {
  const camdelta_stream_step_args a = {.frames = Tb, .commit = commit, .q_raw = {p->blk[0], 0},
                                       .k_raw = {p->blk[1], 0}, .v_raw = {p->blk[2], 0},
                                       .camera_conditions = {p->blk[3], 0}, .beta = {p->blk[4], 0},
                                       .decay = {p->blk[5], 0}, .y = {p->blk[6], 0}};
  return a;
}

/* Streams frames [stream's f0, T) into y_all (B, N, H, D), with `repeat` non-committing steps before each commit
 * (their y must be the commit's, bit for bit). */
static void stream_rest(const sproblem *p, camdelta_stream *st, float *y_all, int repeat) {
  const sshape *s = &p->s;
  const size_t fsz = p->S * p->C;
  float *yb = malloc(s->B * (s->cs + 1) * fsz * 4), *yr = malloc(s->B * (s->cs + 1) * fsz * 4);
  assert_non_null(yb), assert_non_null(yr);
  while (camdelta_stream_frames(st) < s->T) {
    const size_t f0 = camdelta_stream_frames(st), Tb = camdelta_stream_next_frames(st);
    assert_true(f0 + Tb <= s->T);
    upload_block(p, f0, Tb);
    const camdelta_stream_step_args a = step_args(p, Tb, 1);
    camdelta_stream_step_args dry = a;
    dry.commit = 0;
    for (int r = 0; r < repeat; r++) {
      TU_OK(camdelta_stream_step(tu_context(), st, &dry));
      assert_int_equal(camdelta_stream_frames(st), f0);
    }
    if (repeat) tu_download(p->blk[6], 0, s->B * Tb * fsz * 4, yr);
    TU_OK(camdelta_stream_step(tu_context(), st, &a));
    assert_int_equal(camdelta_stream_frames(st), f0 + Tb);
    tu_download(p->blk[6], 0, s->B * Tb * fsz * 4, yb);
    if (repeat && memcmp(yr, yb, s->B * Tb * fsz * 4) != 0)
      fail_msg("frames %zu..%zu: a non-committing step's y differs from the committing step's", f0, f0 + Tb - 1);
    for (size_t b = 0; b < s->B; b++) memcpy(y_all + (b * s->T + f0) * fsz, yb + b * Tb * fsz, Tb * fsz * 4);
  }
  free(yb), free(yr);
}

static camdelta_ref_branch ref_of(const sproblem *p, double *in64[NIN], double *y) {
  const sshape *s = &p->s;
  for (int i = 0; i < NIN; i++) in64[i] = tu_to_f64(p->in[i], p->count[i]);
  const camdelta_ref_branch r = {.B = s->B, .T = s->T, .Hs = s->Hs, .Ws = s->Ws, .ph = 1, .pw = 1, .H = s->H,
                                 .D = s->D, .chunking = {s->cs, s->strategy, NULL, 0}, .k_scale = p->k_scale,
                                 .norm_eps = 1e-6, .q_raw = in64[IQ], .k_raw = in64[IK], .v_raw = in64[IV],
                                 .conv_weight = in64[IW], .q_norm_weight = in64[IQW], .k_norm_weight = in64[IKW],
                                 .camera_conditions = in64[ICC], .beta = in64[IBETA], .decay = in64[IDECAY], .y = y};
  return r;
}

/* Whole blocks of T frames; with blocks of more than one frame every schedule's conv segments are its chunks
 * (T % cs != 0 for first_frame and first_chunk_plus_one), one-frame blocks after a first block of two
 * (first_chunk_plus_one, cs 1) make the branch's conv uniform: there only the reference applies. */
static const sshape SHAPES[] = {
    {2, 9, 3, 4, 2, 16, 3, CAMDELTA_CHUNK_UNIFORM, 1},               /* B > 1 */
    {1, 7, 2, 5, 1, 64, 2, CAMDELTA_CHUNK_FIRST_FRAME, 1},           /* blocks 1, 2, 2, 2 */
    {1, 7, 3, 3, 2, 32, 2, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 1},  /* 3, 2, 2 */
    {1, 12, 2, 2, 1, 16, 1, CAMDELTA_CHUNK_UNIFORM, 1},              /* one-frame blocks */
    {2, 10, 2, 3, 2, 8, 3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 1},  /* 4, 3, 3 */
    {1, 13, 2, 3, 1, 112, 3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 1}, /* 4, 3, 3, 3 */
    {1, 10, 2, 2, 1, 16, 3, CAMDELTA_CHUNK_FIRST_FRAME, 1},          /* 1, 3, 3, 3 */
    {1, 9, 2, 3, 1, 24, 4, CAMDELTA_CHUNK_FIRST_FRAME, 1},           /* 1, 4, 4 */
    {1, 12, 2, 2, 2, 16, 4, CAMDELTA_CHUNK_UNIFORM, 1},
    {1, 8, 2, 3, 1, 16, 1, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 0},  /* 2, 1, 1, ... */
    {2, 6, 2, 2, 2, 32, 1, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 0},
};

/* The schedule's block lengths tile T exactly (the last block full). */
static int tiles(const sshape *s) {
  uint64_t first, rest, f = 0;
  cd_stream_schedule(s->cs, (uint32_t)s->strategy, &first, &rest);
  for (f = first; f < s->T; f += rest) {
  }
  return f == s->T;
}

static void check_shape(const sshape *s, uint64_t seed, double *worst_ref, double *worst_branch) {
  sproblem p;
  sp_init(&p, s, seed);
  camdelta_stream *st = sp_stream(&p);
  const size_t BNC = s->B * p.N * p.C;
  float *ys = malloc(BNC * 4);
  stream_rest(&p, st, ys, 1);
  double *in64[NIN], *yr = malloc(BNC * 8);
  camdelta_ref_branch r = ref_of(&p, in64, yr);
  TU_OK(camdelta_ref_stream_forward(&r));
  const double e = tu_rel_err(ys, yr, BNC);
  *worst_ref = fmax(*worst_ref, e);
  if (e > 1e-5)
    fail_msg("B=%zu T=%zu S=%zu H=%zu D=%zu cs=%zu %s: stream vs f64 reference %.3g > 1e-5", s->B, s->T, p.S, s->H,
             s->D, s->cs, camdelta_chunk_strategy_name(s->strategy), e);
  /* where the branch's conv segments are its chunks (docs/math.md §8.2) the stream is the one-shot branch */
  size_t cb[64], sb_[64], nc, ns;
  const camdelta_chunking ch = {s->cs, s->strategy, NULL, 0};
  TU_OK(camdelta_chunk_bounds(s->T, &ch, cb, 64, &nc));
  TU_OK(camdelta_conv_bounds(s->T, &ch, sb_, 64, &ns));
  const int same = nc == ns && memcmp(cb, sb_, nc * sizeof *cb) == 0;
  assert_int_equal(same, s->branch_equal);
  if (same) {
    cl_mem y = tu_buffer(BNC * 4);
    const camdelta_branch_args a = {
        .B = s->B, .T = s->T, .Hs = s->Hs, .Ws = s->Ws, .H = s->H, .D = s->D, .pt = 1, .ph = 1, .pw = 1,
        .chunking = ch, .k_scale = p.k_scale, .norm_eps = 1e-6f, .algorithm = g_alg, .q_raw = {p.din[IQ], 0},
        .k_raw = {p.din[IK], 0}, .v_raw = {p.din[IV], 0}, .conv_weight = {p.din[IW], 0},
        .q_norm_weight = {p.din[IQW], 0}, .k_norm_weight = {p.din[IKW], 0}, .camera_conditions = {p.din[ICC], 0},
        .beta = {p.din[IBETA], 0}, .decay = {p.din[IDECAY], 0}, .y = {y, 0}};
    TU_OK(camdelta_branch_forward(tu_context(), &a, NULL));
    float *yb = malloc(BNC * 4);
    tu_download(y, 0, BNC * 4, yb);
    double *yb64 = tu_to_f64(yb, BNC);
    const double eb = tu_rel_err(ys, yb64, BNC);
    *worst_branch = fmax(*worst_branch, eb);
    if (eb > 1e-5)
      fail_msg("B=%zu T=%zu cs=%zu %s: stream vs camdelta_branch_forward %.3g > 1e-5", s->B, s->T, s->cs,
               camdelta_chunk_strategy_name(s->strategy), eb);
    free(yb), free(yb64);
    clReleaseMemObject(y);
  } else {
    /* the reference branch with the upstream conv segments is another function here: the test can tell them */
    double *yu = malloc(BNC * 8);
    r.y = yu;
    TU_OK(camdelta_ref_branch_forward(&r));
    assert_true(tu_rel_err64(yu, yr, BNC) > 1e-3);
    free(yu);
  }
  for (int i = 0; i < NIN; i++) free(in64[i]);
  free(yr), free(ys);
  camdelta_stream_destroy(st);
  sp_free(&p);
}

static void test_equality(void **state) {
  (void)state;
  double wr = 0, wb = 0;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
    if (!tiles(&SHAPES[i])) fail_msg("shape %zu: T is not a whole number of blocks", i);
    check_shape(&SHAPES[i], 100 + i, &wr, &wb);
  }
  tu_report("stream y vs f64 stream reference (max rel err)", wr);
  tu_report("stream y vs camdelta_branch_forward (max rel err)", wb);
}

/* The pair (chunkwise) path on every device. */
static void test_equality_chunkwise(void **state) {
  g_alg = CAMDELTA_SCAN_CHUNKWISE;
  test_equality(state);
  g_alg = CAMDELTA_SCAN_AUTO;
}

static unsigned char *save(camdelta_stream *st) {
  const size_t n = camdelta_stream_state_size(st);
  unsigned char *img = malloc(n);
  size_t w = 0;
  TU_OK(camdelta_stream_save(st, img, n, &w));
  assert_int_equal(w, n);
  return img;
}

/* A non-committing step changes no bit of the stream; restore-then-continue is never stopping, bit for bit. */
static void test_noncommit_and_restore(void **state) {
  (void)state;
  const sshape s = {2, 10, 2, 3, 2, 16, 3, CAMDELTA_CHUNK_FIRST_FRAME, 1};
  sproblem p;
  sp_init(&p, &s, 7);
  const size_t BNC = s.B * p.N * p.C;
  float *y_ref = malloc(BNC * 4), *y_b = malloc(BNC * 4);
  camdelta_stream *a = sp_stream(&p);
  stream_rest(&p, a, y_ref, 0);
  /* again to frame 4 (blocks 1, 3), non-committing steps in between compared by their saved images */
  TU_OK(camdelta_stream_reset(a));
  memset(y_b, 0, BNC * 4);
  for (int blk = 0; blk < 2; blk++) {
    const size_t f0 = camdelta_stream_frames(a), Tb = camdelta_stream_next_frames(a);
    upload_block(&p, f0, Tb);
    unsigned char *before = save(a);
    camdelta_stream_step_args sa = step_args(&p, Tb, 0);
    TU_OK(camdelta_stream_step(tu_context(), a, &sa));
    TU_OK(camdelta_stream_step(tu_context(), a, &sa));
    unsigned char *after = save(a);
    if (memcmp(before, after, camdelta_stream_state_size(a)) != 0)
      fail_msg("a non-committing step at frame %zu changed the stream's saved state", f0);
    free(before), free(after);
    sa.commit = 1;
    TU_OK(camdelta_stream_step(tu_context(), a, &sa));
  }
  assert_int_equal(camdelta_stream_frames(a), 4);
  /* the image at frame 4, in memory and in a file, into a fresh stream: the rest equals never stopping */
  unsigned char *img = save(a);
  char path[512];
  snprintf(path, sizeof path, "%s/stream.cds", tu_fresh_dir("stream"));
  TU_OK(camdelta_stream_save_file(a, path));
  camdelta_stream *b = sp_stream(&p);
  TU_OK(camdelta_stream_restore(b, img, camdelta_stream_state_size(b)));
  assert_int_equal(camdelta_stream_frames(b), 4);
  stream_rest(&p, b, y_b, 1);
  const size_t fsz = p.S * p.C;
  for (size_t bb = 0; bb < s.B; bb++)
    if (memcmp(y_b + (bb * s.T + 4) * fsz, y_ref + (bb * s.T + 4) * fsz, (s.T - 4) * fsz * 4) != 0)
      fail_msg("restored from memory at frame 4: batch %zu's later frames differ from the uninterrupted stream", bb);
  /* the file, into the first stream after it went on to the end */
  TU_OK(camdelta_stream_restore_file(a, path));
  assert_int_equal(camdelta_stream_frames(a), 4);
  unsigned char *img2 = save(a);
  assert_memory_equal(img, img2, camdelta_stream_state_size(a));
  memset(y_b, 0, BNC * 4);
  stream_rest(&p, a, y_b, 0);
  for (size_t bb = 0; bb < s.B; bb++)
    assert_memory_equal(y_b + (bb * s.T + 4) * fsz, y_ref + (bb * s.T + 4) * fsz, (s.T - 4) * fsz * 4);
  free(img), free(img2), free(y_ref), free(y_b);
  camdelta_stream_destroy(a);
  camdelta_stream_destroy(b);
  sp_free(&p);
}

/* A stream's device memory does not grow with its blocks: its own buffers are fixed at creation, and every step
 * after the first reuses the branch's workspace (the context's device buffers: their count and sizes stay). */
static void test_constant_memory(void **state) {
  (void)state;
  const sshape s = {1, 60, 2, 2, 1, 16, 3, CAMDELTA_CHUNK_UNIFORM, 1};
  sproblem p;
  sp_init(&p, &s, 9);
  camdelta_stream *st = sp_stream(&p);
  const size_t bytes0 = camdelta_stream_device_bytes(st);
  float *y = malloc(s.B * p.N * p.C * 4);
  stream_rest(&p, st, y, 0);
  assert_int_equal(camdelta_stream_device_bytes(st), bytes0);
  assert_int_equal(camdelta_stream_state_size(st), CD_STREAM_HEADER + CD_STREAM_TRAILER + s.H * s.D * s.D * 4 +
                                                        3 * p.S * p.C * 4);
  free(y);
  camdelta_stream_destroy(st);
  sp_free(&p);
}

static void expect(camdelta_status got, camdelta_status want, const char *needle) {
  if (got != want)
    fail_msg("got %s (%s), expected %s", camdelta_status_name(got), camdelta_last_message(),
             camdelta_status_name(want));
  if (needle && !strstr(camdelta_last_message(), needle))
    fail_msg("message \"%s\" does not name \"%s\"", camdelta_last_message(), needle);
}

static void test_bad_input(void **state) {
  (void)state;
  const sshape s = {1, 7, 2, 2, 1, 16, 3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 1};
  sproblem p;
  sp_init(&p, &s, 11);
  camdelta_context *ctx = tu_context();
  camdelta_stream_args a = stream_args(&p);
  camdelta_stream *st = (camdelta_stream *)1;
  /* creation */
  a.dtype = CAMDELTA_BF16;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_UNSUPPORTED, "bf16");
  assert_null(st);
  a = stream_args(&p), a.chunk_size = 0;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_SHAPE, "chunk_size");
  a = stream_args(&p), a.strategy = (camdelta_chunk_strategy)7;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_INVALID_ARGUMENT, "strategy");
  a = stream_args(&p), a.B = SIZE_MAX / 2;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_OVERFLOW, NULL);
  a = stream_args(&p), a.k_scale = INFINITY;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_INVALID_ARGUMENT, "k_scale");
  a = stream_args(&p), a.D = 12;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_UNSUPPORTED, NULL);
  cl_mem small = tu_buffer(16);
  a = stream_args(&p), a.conv_weight.mem = small;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_BUFFER_TOO_SMALL, "conv_weight");
  st = sp_stream(&p);
  assert_int_equal(camdelta_stream_next_frames(st), 4);
  /* a block of another length names the expected one; nothing written, nothing changed */
  upload_block(&p, 0, 4);
  unsigned char *img0 = save(st);
  camdelta_stream_step_args sa = step_args(&p, 3, 1);
  expect(camdelta_stream_step(ctx, st, &sa), CAMDELTA_ERROR_SHAPE, "has 4");
  assert_int_equal(camdelta_stream_frames(st), 0);
  sa = step_args(&p, 4, 1);
  sa.y.mem = small;
  expect(camdelta_stream_step(ctx, st, &sa), CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'y'");
  sa = step_args(&p, 4, 1);
  sa.y = sa.q_raw;
  expect(camdelta_stream_step(ctx, st, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT, "overlaps");
  expect(camdelta_stream_step(ctx, NULL, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT, "'stream'");
  /* an infinite camera value: refused before anything runs */
  float inf = INFINITY;
  cl_command_queue q = camdelta_context_queue(ctx);
  assert_int_equal(clEnqueueWriteBuffer(q, p.blk[3], CL_TRUE, 5 * 4, 4, &inf, 0, NULL, NULL), CL_SUCCESS);
  sa = step_args(&p, 4, 1);
  expect(camdelta_stream_step(ctx, st, &sa), CAMDELTA_ERROR_INVALID_ARGUMENT, "camera_conditions");
  assert_int_equal(camdelta_stream_frames(st), 0);
  unsigned char *img1 = save(st);
  assert_memory_equal(img0, img1, camdelta_stream_state_size(st));
  upload_block(&p, 0, 4);
  TU_OK(camdelta_stream_step(ctx, st, &sa));
  free(img0), free(img1);

  /* images: another configuration, damaged, truncated, another version; nothing changes */
  const size_t n = camdelta_stream_state_size(st);
  unsigned char *img = save(st), *bad = malloc(n + 8);
  a = stream_args(&p), a.chunk_size = 2;
  camdelta_stream *other = NULL;
  TU_OK(camdelta_stream_create(ctx, &a, &other));
  expect(camdelta_stream_restore(other, img, n), CAMDELTA_ERROR_INVALID_ARGUMENT, "chunk_size");
  camdelta_stream_destroy(other);
  a = stream_args(&p), a.q_norm_weight.mem = p.din[IKW], a.k_norm_weight.mem = p.din[IQW]; /* other weights */
  TU_OK(camdelta_stream_create(ctx, &a, &other));
  expect(camdelta_stream_restore(other, img, n), CAMDELTA_ERROR_INVALID_ARGUMENT, "weights");
  assert_int_equal(camdelta_stream_frames(other), 0);
  camdelta_stream_destroy(other);
  memcpy(bad, img, n);
  bad[CD_STREAM_HEADER + 5] ^= 1;
  expect(camdelta_stream_restore(st, bad, n), CAMDELTA_ERROR_FORMAT, "checksum");
  expect(camdelta_stream_restore(st, img, n - 1), CAMDELTA_ERROR_FORMAT, NULL);
  expect(camdelta_stream_restore(st, img, 20), CAMDELTA_ERROR_FORMAT, "too short");
  memcpy(bad, img, n);
  bad[8] = 2; /* version 2 */
  cd_stream_image_seal(bad, n);
  expect(camdelta_stream_restore(st, bad, n), CAMDELTA_ERROR_FORMAT, "version");
  memcpy(bad, img, n);
  bad[104] = 5; /* f0 = 5: between blocks 4 and 7 */
  cd_stream_image_seal(bad, n);
  expect(camdelta_stream_restore(st, bad, n), CAMDELTA_ERROR_FORMAT, "never reaches");
  memcpy(bad, img, n);
  bad[112 + 7] = 0x80; /* a huge state size */
  cd_stream_image_seal(bad, n);
  expect(camdelta_stream_restore(st, bad, n), CAMDELTA_ERROR_FORMAT, NULL);
  expect(camdelta_stream_save(st, bad, n - 1, NULL), CAMDELTA_ERROR_BUFFER_TOO_SMALL, NULL);
  /* files: missing, a folder, the wrong size */
  const char *dir = tu_fresh_dir("stream_bad");
  char path[512];
  snprintf(path, sizeof path, "%s/missing.cds", dir);
  expect(camdelta_stream_restore_file(st, path), CAMDELTA_ERROR_IO, "missing.cds");
  expect(camdelta_stream_restore_file(st, dir), CAMDELTA_ERROR_FORMAT, "regular file");
  snprintf(path, sizeof path, "%s/short.cds", dir);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  fwrite(img, 1, n / 2, fp);
  fclose(fp);
  expect(camdelta_stream_restore_file(st, path), CAMDELTA_ERROR_FORMAT, "bytes");
  assert_int_equal(camdelta_stream_frames(st), 4);
  unsigned char *img2 = save(st);
  assert_memory_equal(img, img2, n);
  free(img), free(img2), free(bad);
  clReleaseMemObject(small);
  camdelta_stream_destroy(st);
  sp_free(&p);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_equality),
      cmocka_unit_test(test_equality_chunkwise),
      cmocka_unit_test(test_noncommit_and_restore),
      cmocka_unit_test(test_constant_memory),
      cmocka_unit_test(test_bad_input))
