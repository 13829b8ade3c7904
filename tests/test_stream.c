/* Streams (include/camdelta_stream.h, docs/streaming.md): T frames streamed block by block, committing each block,
 * against camdelta_branch_forward over the T frames with the same schedule (where its conv segments are its scan
 * chunks) and against the f64 stream reference (camdelta_ref_stream_forward, every schedule); non-committing steps
 * give the committing step's y and change no bit of the stream; restore-then-continue equals never stopping (host
 * memory and file); B > 1 in lockstep. The same with 16-bit activations (f16, bf16: q_raw, k_raw, v_raw, y and the
 * look-back; docs/math.md §8.7): against the one-shot 16-bit branch and the f64 reference fed the same rounded
 * inputs, within §8.7's bounds (y <= 2e-3 f16, 1.6e-2 bf16). Bad input (a block of the wrong length, an unknown
 * dtype, images of another configuration or dtype, damaged, truncated or hostile images and files, buffers sized
 * for 16 bits given to an f32 stream) refused with nothing changed and nothing written. */
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
  camdelta_dtype dt; /* of q_raw, k_raw, v_raw and y (the host's in[IQ..IV] hold them rounded to it) */
  size_t es;
  size_t S, C, N;
  float k_scale;
  float *in[NIN];
  size_t count[NIN];
  cl_mem din[NIN];
  cl_mem blk[7]; /* q, k, v, cameras, beta, decay, y of the longest block */
  cl_mem w[3];
} sproblem;

static camdelta_scan_algorithm g_alg = CAMDELTA_SCAN_AUTO;

/* The activations (q_raw, k_raw, v_raw; the block's y) in dt: rounded to it on the host, stored in it on the device. */
static void sp_init_dt(sproblem *p, const sshape *s, uint64_t seed, camdelta_dtype dt) {
  memset(p, 0, sizeof *p);
  p->s = *s;
  p->dt = dt, p->es = camdelta_dtype_size(dt);
  p->S = s->Hs * s->Ws, p->C = s->H * s->D, p->N = s->T * p->S;
  p->k_scale = (float)(1.0 / sqrt((double)s->D * (double)p->S));
  bp_inputs(p->in, p->count, s->B, s->T, s->Hs, s->Ws, s->H, s->D, seed);
  for (int i = 0; i < NIN; i++) {
    if (i > IV || dt == CAMDELTA_F32) {
      p->din[i] = tu_upload(p->in[i], p->count[i] * sizeof(float));
      continue;
    }
    tu_round_to(dt, p->in[i], p->count[i]);
    void *h = tu_pack(dt, p->in[i], p->count[i]);
    p->din[i] = tu_upload(h, p->count[i] * p->es);
    free(h);
  }
  const size_t most = s->cs + 1, bnc = s->B * most * p->S * p->C;
  const size_t bcount[7] = {bnc, bnc, bnc, s->B * most * 20, s->B * s->H * most * p->S, s->B * s->H * most, bnc};
  for (int i = 0; i < 7; i++) p->blk[i] = tu_buffer(bcount[i] * (i < 3 || i == 6 ? p->es : 4));
  for (int i = 0; i < 3; i++) p->w[i] = p->din[IW + i];
}

static void sp_init(sproblem *p, const sshape *s, uint64_t seed) { sp_init_dt(p, s, seed, CAMDELTA_F32); }

static void sp_free(sproblem *p) {
  for (int i = 0; i < NIN; i++) free(p->in[i]), clReleaseMemObject(p->din[i]);
  for (int i = 0; i < 7; i++) clReleaseMemObject(p->blk[i]);
}

static camdelta_stream_args stream_args(const sproblem *p) {
  const sshape *s = &p->s;
  const camdelta_stream_args a = {.B = s->B, .H = s->H, .D = s->D, .Hs = s->Hs, .Ws = s->Ws, .pt = 1, .ph = 1,
                                  .pw = 1, .chunk_size = s->cs, .strategy = s->strategy, .k_scale = p->k_scale,
                                  .norm_eps = 1e-6f, .dtype = p->dt, .algorithm = g_alg,
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
  for (int i = 0; i < 6; i++) {
    const camdelta_dtype dt = i < 3 ? p->dt : CAMDELTA_F32;
    const size_t es = camdelta_dtype_size(dt);
    for (size_t o = 0; o < outer[i]; o++) {
      void *h = tu_pack(dt, p->in[src[i]] + (o * T + f0) * fs[i], Tb * fs[i]);
      assert_int_equal(clEnqueueWriteBuffer(q, p->blk[i], CL_TRUE, o * Tb * fs[i] * es, Tb * fs[i] * es, h, 0, NULL,
                                            NULL),
                       CL_SUCCESS);
      free(h);
    }
  }
}

static camdelta_stream_step_args step_args(const sproblem *p, size_t Tb, int commit) {
  const camdelta_stream_step_args a = {.frames = Tb, .commit = commit, .q_raw = {p->blk[0], 0},
                                       .k_raw = {p->blk[1], 0}, .v_raw = {p->blk[2], 0},
                                       .camera_conditions = {p->blk[3], 0}, .beta = {p->blk[4], 0},
                                       .decay = {p->blk[5], 0}, .y = {p->blk[6], 0}};
  return a;
}

/* Streams frames [stream's f0, T) into y_all (B, N, H, D; the stream's dtype widened to f32), with `repeat`
 * non-committing steps before each commit (their y must be the commit's, bit for bit). */
static void stream_rest(const sproblem *p, camdelta_stream *st, float *y_all, int repeat) {
  const sshape *s = &p->s;
  const size_t fsz = p->S * p->C, most = s->B * (s->cs + 1) * fsz;
  float *yb = malloc(most * 4);
  unsigned char *raw = malloc(most * p->es), *yr = malloc(most * p->es);
  assert_non_null(yb), assert_non_null(raw), assert_non_null(yr);
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
    const size_t n = s->B * Tb * fsz;
    if (repeat) tu_download(p->blk[6], 0, n * p->es, yr);
    TU_OK(camdelta_stream_step(tu_context(), st, &a));
    assert_int_equal(camdelta_stream_frames(st), f0 + Tb);
    tu_download(p->blk[6], 0, n * p->es, raw);
    if (repeat && memcmp(yr, raw, n * p->es) != 0)
      fail_msg("frames %zu..%zu: a non-committing step's y differs from the committing step's", f0, f0 + Tb - 1);
    tu_unpack(p->dt, raw, yb, n);
    for (size_t b = 0; b < s->B; b++) memcpy(y_all + (b * s->T + f0) * fsz, yb + b * Tb * fsz, Tb * fsz * 4);
  }
  free(yb), free(raw), free(yr);
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

/* docs/math.md §5's branch-forward bound for f32 activations, §8.7's y bounds for 16-bit ones. */
static double bound_of(camdelta_dtype dt) { return dt == CAMDELTA_F32 ? 1e-5 : dt == CAMDELTA_F16 ? 2e-3 : 1.6e-2; }

static void check_shape(const sshape *s, uint64_t seed, camdelta_dtype dt, double *worst_ref, double *worst_branch) {
  sproblem p;
  sp_init_dt(&p, s, seed, dt);
  const double bound = bound_of(dt);
  camdelta_stream *st = sp_stream(&p);
  const size_t BNC = s->B * p.N * p.C;
  float *ys = malloc(BNC * 4);
  stream_rest(&p, st, ys, 1);
  double *in64[NIN], *yr = malloc(BNC * 8);
  camdelta_ref_branch r = ref_of(&p, in64, yr);
  TU_OK(camdelta_ref_stream_forward(&r));
  const double e = tu_rel_err(ys, yr, BNC);
  *worst_ref = fmax(*worst_ref, e);
  if (e > bound)
    fail_msg("%s B=%zu T=%zu S=%zu H=%zu D=%zu cs=%zu %s: stream vs f64 reference %.3g > %.3g",
             camdelta_dtype_name(dt), s->B, s->T, p.S, s->H, s->D, s->cs, camdelta_chunk_strategy_name(s->strategy),
             e, bound);
  /* where the branch's conv segments are its chunks (docs/math.md §8.2) the stream is the one-shot branch */
  size_t cb[64], sb_[64], nc, ns;
  const camdelta_chunking ch = {s->cs, s->strategy, NULL, 0};
  TU_OK(camdelta_chunk_bounds(s->T, &ch, cb, 64, &nc));
  TU_OK(camdelta_conv_bounds(s->T, &ch, sb_, 64, &ns));
  const int same = nc == ns && memcmp(cb, sb_, nc * sizeof *cb) == 0;
  assert_int_equal(same, s->branch_equal);
  if (same) {
    cl_mem y = tu_buffer(BNC * p.es);
    const camdelta_branch_args a = {
        .B = s->B, .T = s->T, .Hs = s->Hs, .Ws = s->Ws, .H = s->H, .D = s->D, .pt = 1, .ph = 1, .pw = 1,
        .chunking = ch, .k_scale = p.k_scale, .norm_eps = 1e-6f, .algorithm = g_alg, .q_raw = {p.din[IQ], 0},
        .k_raw = {p.din[IK], 0}, .v_raw = {p.din[IV], 0}, .conv_weight = {p.din[IW], 0},
        .q_norm_weight = {p.din[IQW], 0}, .k_norm_weight = {p.din[IKW], 0}, .camera_conditions = {p.din[ICC], 0},
        .beta = {p.din[IBETA], 0}, .decay = {p.din[IDECAY], 0}, .y = {y, 0}, .dtype = dt};
    TU_OK(camdelta_branch_forward(tu_context(), &a, NULL));
    float *yb = malloc(BNC * 4);
    void *raw = malloc(BNC * p.es);
    assert_non_null(yb), assert_non_null(raw);
    tu_download(y, 0, BNC * p.es, raw);
    tu_unpack(dt, raw, yb, BNC);
    double *yb64 = tu_to_f64(yb, BNC);
    const double eb = tu_rel_err(ys, yb64, BNC);
    *worst_branch = fmax(*worst_branch, eb);
    if (eb > bound)
      fail_msg("%s B=%zu T=%zu cs=%zu %s: stream vs camdelta_branch_forward %.3g > %.3g", camdelta_dtype_name(dt),
               s->B, s->T, s->cs, camdelta_chunk_strategy_name(s->strategy), eb, bound);
    free(yb), free(raw), free(yb64);
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

/* The worst errors per dtype (f32, f16, bf16): against the f64 stream reference, against the one-shot branch. */
typedef struct worst {
  double ref[3], branch[3];
} worst;

static void report(const worst *w) {
  static const camdelta_dtype dts[3] = {CAMDELTA_F32, CAMDELTA_F16, CAMDELTA_BF16};
  for (int d = 0; d < 3; d++) {
    if (w->ref[d] < 0) continue;
    const char *n = camdelta_dtype_name(dts[d]);
    char what[128];
    snprintf(what, sizeof what, "stream %s y vs f64 stream reference%s (max rel err)", n,
             d ? " on the rounded inputs" : "");
    tu_report(what, w->ref[d]);
    snprintf(what, sizeof what, "stream %s y vs camdelta_branch_forward %s (max rel err)", n, n);
    tu_report(what, w->branch[d]);
  }
}

static void test_equality(void **state) {
  (void)state;
  worst w = {{0, -1, -1}, {0, -1, -1}};
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
    if (!tiles(&SHAPES[i])) fail_msg("shape %zu: T is not a whole number of blocks", i);
    check_shape(&SHAPES[i], 100 + i, CAMDELTA_F32, &w.ref[0], &w.branch[0]);
  }
  report(&w);
}

/* The pair (chunkwise) path on every device, every shape in one of the three dtypes (in turn: each dtype meets
 * every schedule). */
static void test_equality_chunkwise(void **state) {
  (void)state;
  static const camdelta_dtype dts[3] = {CAMDELTA_F32, CAMDELTA_F16, CAMDELTA_BF16};
  worst w = {{0, 0, 0}, {0, 0, 0}};
  g_alg = CAMDELTA_SCAN_CHUNKWISE;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
    check_shape(&SHAPES[i], 100 + i, dts[i % 3], &w.ref[i % 3], &w.branch[i % 3]);
  g_alg = CAMDELTA_SCAN_AUTO;
  report(&w);
}

/* 16-bit activations with the scans AUTO chooses: B > 1 with blocks 4, 3, 3 in bf16; blocks 1, 3, 3, 3 in f16. */
static void test_equality_half(void **state) {
  (void)state;
  worst w = {{-1, 0, 0}, {-1, 0, 0}};
  check_shape(&SHAPES[6], 300, CAMDELTA_F16, &w.ref[1], &w.branch[1]);
  check_shape(&SHAPES[4], 301, CAMDELTA_BF16, &w.ref[2], &w.branch[2]);
  report(&w);
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
static void noncommit_and_restore(camdelta_dtype dt) {
  const sshape s = {2, 10, 2, 3, 2, 16, 3, CAMDELTA_CHUNK_FIRST_FRAME, 1};
  sproblem p;
  sp_init_dt(&p, &s, 7, dt);
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
  /* the image names the dtype and holds the look-back in it */
  assert_int_equal(img[84], (unsigned char)dt);
  assert_int_equal(camdelta_stream_state_size(a),
                   CD_STREAM_HEADER + CD_STREAM_TRAILER + s.B * s.H * s.D * s.D * 4 + s.B * 3 * p.S * p.C * p.es);
  free(img), free(img2), free(y_ref), free(y_b);
  camdelta_stream_destroy(a);
  camdelta_stream_destroy(b);
  sp_free(&p);
}

/* f32 and bf16 (an f16 stream holds the same bytes: a 2-byte look-back) */
static void test_noncommit_and_restore(void **state) {
  (void)state;
  noncommit_and_restore(CAMDELTA_F32);
  noncommit_and_restore(CAMDELTA_BF16);
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
  a.dtype = (camdelta_dtype)3;
  expect(camdelta_stream_create(ctx, &a, &st), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype 3");
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

/* 16-bit streams: an image of another dtype is refused naming it (memory and file, of the same size or not), a step
 * of an f32 stream given buffers sized for 16 bits is refused; nothing of the streams changes, nothing is written. */
static void test_bad_input_half(void **state) {
  (void)state;
  const sshape s = {1, 7, 2, 2, 1, 16, 3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, 1};
  camdelta_context *ctx = tu_context();
  sproblem ph, pf;
  sp_init_dt(&ph, &s, 12, CAMDELTA_BF16);
  sp_init(&pf, &s, 12); /* the same weights */
  camdelta_stream *bf = sp_stream(&ph), *f32 = sp_stream(&pf), *f16 = NULL;
  camdelta_stream_args a = stream_args(&ph);
  a.dtype = CAMDELTA_F16;
  TU_OK(camdelta_stream_create(ctx, &a, &f16));
  upload_block(&ph, 0, 4);
  camdelta_stream_step_args sa = step_args(&ph, 4, 1);
  TU_OK(camdelta_stream_step(ctx, bf, &sa));
  const size_t n = camdelta_stream_state_size(bf), nh = camdelta_stream_state_size(f16);
  assert_int_equal(n, nh);
  assert_true(camdelta_stream_state_size(f32) > n);
  unsigned char *img = save(bf), *f16_before = save(f16), *f32_before = save(f32);
  expect(camdelta_stream_restore(f16, img, n), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype bf16, this one f16");
  expect(camdelta_stream_restore(f32, img, n), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype bf16, this one f32");
  char path[512];
  snprintf(path, sizeof path, "%s/bf16.cds", tu_fresh_dir("stream_half"));
  TU_OK(camdelta_stream_save_file(bf, path));
  expect(camdelta_stream_restore_file(f16, path), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype bf16");
  assert_int_equal(camdelta_stream_frames(f16), 0);
  assert_int_equal(camdelta_stream_frames(f32), 0);
  /* an f32 image (its look-back twice the size) into the bf16 stream: the dtype named, from memory and from a file
   * of another size alike */
  const size_t n32 = camdelta_stream_state_size(f32);
  expect(camdelta_stream_restore(bf, f32_before, n32), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype f32, this one bf16");
  snprintf(path, sizeof path, "%s/f32.cds", tu_fresh_dir("stream_half"));
  TU_OK(camdelta_stream_save_file(f32, path));
  expect(camdelta_stream_restore_file(bf, path), CAMDELTA_ERROR_INVALID_ARGUMENT, "dtype f32, this one bf16");
  assert_int_equal(camdelta_stream_frames(bf), 4);
  unsigned char *bf_after = save(bf);
  assert_memory_equal(img, bf_after, n);
  /* an f32 stream given the 16-bit block buffers: too small, nothing written to y, nothing changed */
  const size_t ybytes = s.B * (s.cs + 1) * ph.S * ph.C * 2;
  unsigned char *sentinel = malloc(ybytes), *yafter = malloc(ybytes);
  memset(sentinel, 0x5a, ybytes);
  assert_int_equal(clEnqueueWriteBuffer(camdelta_context_queue(ctx), ph.blk[6], CL_TRUE, 0, ybytes, sentinel, 0,
                                        NULL, NULL),
                   CL_SUCCESS);
  expect(camdelta_stream_step(ctx, f32, &sa), CAMDELTA_ERROR_BUFFER_TOO_SMALL, "'q_raw'");
  tu_download(ph.blk[6], 0, ybytes, yafter);
  assert_memory_equal(sentinel, yafter, ybytes);
  unsigned char *f16_after = save(f16), *f32_after = save(f32);
  assert_memory_equal(f16_before, f16_after, nh);
  assert_memory_equal(f32_before, f32_after, camdelta_stream_state_size(f32));
  free(img), free(bf_after), free(sentinel), free(yafter);
  free(f16_before), free(f16_after), free(f32_before), free(f32_after);
  camdelta_stream_destroy(bf), camdelta_stream_destroy(f16), camdelta_stream_destroy(f32);
  sp_free(&ph), sp_free(&pf);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_equality),
      cmocka_unit_test(test_equality_chunkwise),
      cmocka_unit_test(test_equality_half),
      cmocka_unit_test(test_noncommit_and_restore),
      cmocka_unit_test(test_constant_memory),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_bad_input_half))
