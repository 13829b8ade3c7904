/* camdelta bench: kernel times of every operation on named or given shapes,
 * from OpenCL profiling events after warm-up. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_peak.h"
#include "cli_common.h"
#include "cli_packed.h"
#include "cli_sp.h"
#include "camdelta_stream.h"
#include "usage.h"

typedef cli_shape bench_shape; /* named shapes and B,H,D,F,S: cli_parse_shape */

typedef struct bench_buffers {
  size_t B, H, D, F, S, N;
  camdelta_dtype dt;
  cl_mem raw[3], qw, kw, pq, pkv, rc, rs;           /* prep inputs */
  cl_mem q, k, v, infl;                             /* prep outputs (dtype) */
  cl_mem fq, fk, fv, beta, decay, out, st0, st1;    /* scan f32 */
  cl_mem gq, gk, gv, ginfl, dq_raw, dk_raw, dv_raw, dqw, dkw; /* prep backward */
  cl_mem gout, dq, dk, dv, dbeta, ddecay;           /* scan backward */
  cl_mem conv_w, cams, y, gy, dconv;                /* camera branch (f32) */
  cl_mem hq, hk, hv, hy, hgy, hdq, hdk, hdv;        /* the branch's bf16 activations and their gradients */
} bench_buffers;

/* A device buffer of n elements of dt filled on the device (camdelta_fill_random; zero when lo == hi == 0): nothing
 * is generated on the host or copied over, so large shapes start at once. */
static int device_random(camdelta_context *ctx, size_t n, double lo, double hi, camdelta_dtype dt, uint64_t seed,
                         cl_mem *out) {
  const size_t es = camdelta_dtype_size(dt);
  if (n > SIZE_MAX / es) return cli_error(CLI_EXIT_INPUT, "bench: %zu elements overflow size_t", n);
  const size_t bytes = n * es > 0 ? n * es : 4;
  cl_int err;
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "allocating %zu bytes: %s", bytes, camdelta_cl_error_name(err));
  }
  camdelta_status st;
  if (lo == 0 && hi == 0) {
    const cl_uint zero = 0; /* a 4-byte pattern when the size allows it, else bytes */
    err = clEnqueueFillBuffer(camdelta_context_queue(ctx), *out, &zero, bytes % 4 ? 1 : sizeof zero, 0, bytes, 0,
                              NULL, NULL);
    if (err != CL_SUCCESS) return cli_error(CLI_EXIT_DEVICE, "clearing %zu bytes: %s", bytes, camdelta_cl_error_name(err));
    return CLI_EXIT_OK;
  }
  st = camdelta_fill_random(ctx, (camdelta_buffer){*out, 0}, n, dt, seed, (float)lo, (float)hi);
  if (st != CAMDELTA_OK) return cli_lib_error(st, "bench: generating inputs");
  return CLI_EXIT_OK;
}

static void release_all(bench_buffers *b) {
  cl_mem *all = &b->raw[0];
  size_t count = (size_t)((cl_mem *)(b + 1) - all);
  for (size_t i = 0; i < count; i++)
    if (all[i]) clReleaseMemObject(all[i]);
}

static int make_buffers(camdelta_context *ctx, bench_buffers *b, int tty) {
  uint64_t seed = 12345;
  /* every size below is a factor of B*N*H*D or B*H*D*D, checked by cli_check_shape and bench_budget */
  const size_t BNHD = b->B * b->N * b->H * b->D, C = b->H * b->D, BN = b->B * b->N, BHN = b->B * b->H * b->N;
  const size_t DD = b->B * b->H * b->D * b->D;
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) rc = device_random(ctx, BNHD, -1, 1, b->dt, seed++, &b->raw[i]);
  struct {
    cl_mem *m;
    size_t n;
    double lo, hi;
    camdelta_dtype dt;
  } list[] = {
#define RND(m_, n_, lo_, hi_, dt_) {.m = (m_), .n = (n_), .lo = (lo_), .hi = (hi_), .dt = (dt_)}
      RND(&b->qw, C, 0.5, 1.5, CAMDELTA_F32),
      RND(&b->kw, C, 0.5, 1.5, CAMDELTA_F32),
      RND(&b->pq, BN * 16, -1, 1, CAMDELTA_F32),
      RND(&b->pkv, BN * 16, -1, 1, CAMDELTA_F32),
      RND(&b->rc, b->N * b->D / 2, -1, 1, CAMDELTA_F32),
      RND(&b->rs, b->N * b->D / 2, -1, 1, CAMDELTA_F32),
      RND(&b->q, BNHD, 0, 0, b->dt),
      RND(&b->k, BNHD, 0, 0, b->dt),
      RND(&b->v, BNHD, 0, 0, b->dt),
      RND(&b->infl, BHN, 0, 0, CAMDELTA_F32),
      RND(&b->fq, BNHD, -0.1, 0.1, CAMDELTA_F32),
      RND(&b->fk, BNHD, -0.1, 0.1, CAMDELTA_F32),
      RND(&b->fv, BNHD, -1, 1, CAMDELTA_F32),
      RND(&b->beta, BHN, 0, 1, CAMDELTA_F32),
      RND(&b->decay, b->B * b->H * b->F, 0.9, 1, CAMDELTA_F32),
      RND(&b->out, BNHD, 0, 0, CAMDELTA_F32),
      RND(&b->st0, DD, -0.1, 0.1, CAMDELTA_F32),
      RND(&b->st1, DD, 0, 0, CAMDELTA_F32),
      RND(&b->gq, BNHD, -1, 1, b->dt),
      RND(&b->gk, BNHD, -1, 1, b->dt),
      RND(&b->gv, BNHD, -1, 1, b->dt),
      RND(&b->ginfl, BHN, -1, 1, CAMDELTA_F32),
      RND(&b->dq_raw, BNHD, 0, 0, b->dt),
      RND(&b->dk_raw, BNHD, 0, 0, b->dt),
      RND(&b->dv_raw, BNHD, 0, 0, b->dt),
      RND(&b->dqw, C, 0, 0, CAMDELTA_F32),
      RND(&b->dkw, C, 0, 0, CAMDELTA_F32),
      RND(&b->gout, BNHD, -1, 1, CAMDELTA_F32),
      RND(&b->dq, BNHD, 0, 0, CAMDELTA_F32),
      RND(&b->dk, BNHD, 0, 0, CAMDELTA_F32),
      RND(&b->dv, BNHD, 0, 0, CAMDELTA_F32),
      RND(&b->dbeta, BHN, 0, 0, CAMDELTA_F32),
      RND(&b->ddecay, b->B * b->H * b->F, 0, 0, CAMDELTA_F32),
#undef RND
  };
  const size_t nlist = sizeof list / sizeof list[0];
  for (size_t i = 0; i < nlist && !rc; i++) {
    if (tty) fprintf(stderr, "\r[inputs %zu/%zu] generating on the device", i + 4, nlist + 3), fflush(stderr);
    rc = device_random(ctx, list[i].n, list[i].lo, list[i].hi, list[i].dt, seed++, list[i].m);
  }
  if (!rc && camdelta_finish(ctx) != CAMDELTA_OK) rc = cli_lib_error(CAMDELTA_ERROR_OPENCL, "bench: generating inputs");
  if (tty) fprintf(stderr, "\r%50s\r", ""), fflush(stderr);
  return rc;
}

/* The camera branch's own buffers: conv weight, cameras (a pan with every frame looking at the scene, so that no
 * ray is degenerate), y, grad_y, dconv_weight. The f32 branch rows take the f32 scan buffers as q_raw ...; the bf16
 * rows their own activations (q_raw, k_raw, v_raw, y, grad_y, dq_raw, dk_raw, dv_raw in bf16). */
static int make_branch_buffers(camdelta_context *ctx, bench_buffers *b, size_t Hs, size_t Ws) {
  const uint64_t seed = 777;
  const size_t C = b->H * b->D, BNC = b->B * b->N * C;
  int rc = device_random(ctx, 4 * C, -0.5, 0.5, CAMDELTA_F32, seed, &b->conv_w);
  cl_mem *half[8] = {&b->hq, &b->hk, &b->hv, &b->hgy, &b->hy, &b->hdq, &b->hdk, &b->hdv};
  for (int i = 0; i < 8 && !rc; i++)
    rc = device_random(ctx, BNC, i < 4 ? (i == 2 || i == 3 ? -1 : -0.1) : 0, i < 4 ? (i == 2 || i == 3 ? 1 : 0.1) : 0,
                       CAMDELTA_BF16, seed + 10 + (uint64_t)i, half[i]);
  if (!rc) rc = device_random(ctx, BNC, 0, 0, CAMDELTA_F32, seed + 1, &b->y);
  if (!rc) rc = device_random(ctx, BNC, -1, 1, CAMDELTA_F32, seed + 2, &b->gy);
  if (!rc) rc = device_random(ctx, 4 * C, 0, 0, CAMDELTA_F32, seed + 3, &b->dconv);
  if (rc) return rc;
  float *cc = calloc(b->B * b->F * 20, sizeof *cc); /* counted by bench_budget */
  if (!cc) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  for (size_t i = 0; i < b->B * b->F; i++) {
    const double a = 0.05 * (double)(i % b->F), c = cos(a), s = sin(a);
    float *o = cc + 20 * i;
    o[0] = (float)c, o[2] = (float)s, o[5] = 1, o[8] = (float)-s, o[10] = (float)c, o[15] = 1;
    o[3] = (float)(0.1 * (double)i), o[7] = 0.2f, o[11] = -3.0f;
    o[16] = o[17] = (float)(16.0 * (double)Ws), o[18] = (float)(8.0 * (double)Ws), o[19] = (float)(8.0 * (double)Hs);
  }
  cl_int err;
  b->cams = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                           b->B * b->F * 20 * sizeof *cc, cc, &err);
  free(cc);
  if (err != CL_SUCCESS) return cli_error(CLI_EXIT_DEVICE, "allocating the cameras: %s", camdelta_cl_error_name(err));
  return CLI_EXIT_OK;
}

typedef enum { OP_PREP, OP_PREP_BWD, OP_SCAN, OP_SCAN_BWD, OP_BRANCH, OP_BRANCH_BWD, OP_STREAM } op_kind;
typedef struct bench_op {
  const char *name;
  op_kind kind;
  camdelta_scan_algorithm alg;
  int reverse;
  camdelta_dtype act; /* the branch and stream rows' activations */
} bench_op;

/* designated: bench_op has five fields */
#define OPROW(n_, k_, a_, r_, t_) {.name = (n_), .kind = (k_), .alg = (a_), .reverse = (r_), .act = (t_)}
static const bench_op ops[] = {
    OPROW("prep-forward", OP_PREP, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("prep-backward", OP_PREP_BWD, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("scan-forward sequential causal", OP_SCAN, CAMDELTA_SCAN_SEQUENTIAL, 0, CAMDELTA_F32),
    OPROW("scan-forward sequential reverse", OP_SCAN, CAMDELTA_SCAN_SEQUENTIAL, 1, CAMDELTA_F32),
    OPROW("scan-forward chunkwise causal", OP_SCAN, CAMDELTA_SCAN_CHUNKWISE, 0, CAMDELTA_F32),
    OPROW("scan-forward chunkwise reverse", OP_SCAN, CAMDELTA_SCAN_CHUNKWISE, 1, CAMDELTA_F32),
    OPROW("scan-backward causal", OP_SCAN_BWD, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("scan-backward reverse", OP_SCAN_BWD, CAMDELTA_SCAN_AUTO, 1, CAMDELTA_F32),
    OPROW("branch-forward", OP_BRANCH, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("branch-forward bf16", OP_BRANCH, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_BF16),
    OPROW("branch-backward", OP_BRANCH_BWD, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("branch-backward bf16", OP_BRANCH_BWD, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_BF16),
    OPROW("stream-step (3 frames)", OP_STREAM, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_F32),
    OPROW("stream-step (3 frames) bf16", OP_STREAM, CAMDELTA_SCAN_AUTO, 0, CAMDELTA_BF16),
};
#undef OPROW

typedef struct op_ctx {
  bench_buffers *b;
  float k_scale;
  camdelta_prep_saved *psaved;
  camdelta_scan_saved *ssaved;
  camdelta_branch_saved *bsaved;
  camdelta_stream *stream; /* the stream rows' (uniform blocks of STREAM_BLOCK frames), made by prepare_op */
  camdelta_dtype stream_dt; /* its activations' */
  size_t Hs, Ws; /* the token grid of the branch rows */
  camdelta_precision precision; /* scan and scan backward */
} op_ctx;

/* The whole camera branch at chunk size 3, first_chunk_plus_one (the production setting), activations in `act`. */
static camdelta_branch_args branch_args(const op_ctx *o, camdelta_dtype act, camdelta_profile *prof) {
  const bench_buffers *b = o->b;
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = b->B, a.T = b->F, a.Hs = o->Hs, a.Ws = o->Ws, a.H = b->H, a.D = b->D, a.pt = 1, a.ph = 16, a.pw = 16;
  a.chunking = (camdelta_chunking){3, CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, NULL, 0};
  a.k_scale = o->k_scale, a.norm_eps = 1e-6f, a.algorithm = CAMDELTA_SCAN_AUTO;
  a.q_raw.mem = b->fq, a.k_raw.mem = b->fk, a.v_raw.mem = b->fv, a.conv_weight.mem = b->conv_w;
  a.q_norm_weight.mem = b->qw, a.k_norm_weight.mem = b->kw, a.camera_conditions.mem = b->cams;
  a.beta.mem = b->beta, a.decay.mem = b->decay, a.y.mem = b->y, a.profile = prof;
  if (act == CAMDELTA_BF16) a.q_raw.mem = b->hq, a.k_raw.mem = b->hk, a.v_raw.mem = b->hv, a.y.mem = b->hy;
  a.dtype = act;
  return a;
}

/* The stream rows: committed blocks of 3 frames (the production chunk size) of a stream with activations in dt, its
 * inputs the first 3 frames of the branch rows' (f32: the f32 scan buffers; bf16: the bf16 branch buffers; f16, the
 * flatness check's with --dtype f16: the prep buffers). */
enum { STREAM_BLOCK = 3 };
static camdelta_status stream_make(camdelta_context *ctx, op_ctx *o, camdelta_dtype dt) {
  const bench_buffers *b = o->b;
  camdelta_stream_destroy(o->stream);
  o->stream = NULL, o->stream_dt = dt;
  const camdelta_stream_args a = {.B = b->B, .H = b->H, .D = b->D, .Hs = o->Hs, .Ws = o->Ws, .pt = 1, .ph = 16,
                                  .pw = 16, .chunk_size = STREAM_BLOCK, .strategy = CAMDELTA_CHUNK_UNIFORM,
                                  .k_scale = o->k_scale, .norm_eps = 1e-6f, .dtype = dt,
                                  .algorithm = CAMDELTA_SCAN_AUTO, .precision = o->precision,
                                  .conv_weight = {b->conv_w, 0}, .q_norm_weight = {b->qw, 0},
                                  .k_norm_weight = {b->kw, 0}};
  return camdelta_stream_create(ctx, &a, &o->stream);
}

static camdelta_status stream_step(camdelta_context *ctx, op_ctx *o, camdelta_profile *prof) {
  const bench_buffers *b = o->b;
  const int d = o->stream_dt == CAMDELTA_F32 ? 0 : o->stream_dt == CAMDELTA_BF16 ? 1 : 2;
  const cl_mem q[3] = {b->fq, b->hq, b->raw[0]}, k[3] = {b->fk, b->hk, b->raw[1]}, v[3] = {b->fv, b->hv, b->raw[2]},
               y[3] = {b->y, b->hy, b->dq_raw};
  const camdelta_stream_step_args a = {
      .frames = STREAM_BLOCK, .commit = 1, .q_raw = {q[d], 0}, .k_raw = {k[d], 0}, .v_raw = {v[d], 0},
      .camera_conditions = {b->cams, 0}, .beta = {b->beta, 0}, .decay = {b->decay, 0}, .y = {y[d], 0},
      .profile = prof};
  return camdelta_stream_step(ctx, o->stream, &a);
}

/* The prep forward on the bench buffers (the outputs a training step keeps: q, k, v, inflation_sq). */
static camdelta_prep_args prep_args(const op_ctx *o, camdelta_profile *prof) {
  const bench_buffers *b = o->b;
  const camdelta_prep_args a = {.B = b->B, .N = b->N, .H = b->H, .D = b->D, .dtype = b->dt, .k_scale = o->k_scale,
                                .norm_eps = 1e-6f, .q_raw = {b->raw[0], 0}, .k_raw = {b->raw[1], 0},
                                .v_raw = {b->raw[2], 0}, .q_norm_weight = {b->qw, 0}, .k_norm_weight = {b->kw, 0},
                                .proj_q = {b->pq, 0}, .proj_kv = {b->pkv, 0}, .rope_cos = {b->rc, 0},
                                .rope_sin = {b->rs, 0}, .q = {b->q, 0}, .k = {b->k, 0}, .v = {b->v, 0},
                                .inflation_sq = {b->infl, 0}, .profile = prof};
  return a;
}

/* The scan forward on the bench's f32 buffers. */
static camdelta_scan_args scan_args(const op_ctx *o, int reverse, camdelta_scan_algorithm alg,
                                    camdelta_profile *prof) {
  const bench_buffers *b = o->b;
  const camdelta_scan_args s = {.B = b->B, .H = b->H, .D = b->D, .F = b->F, .S = b->S, .reverse = reverse,
                                .algorithm = alg, .q = {b->fq, 0}, .k = {b->fk, 0}, .v = {b->fv, 0},
                                .beta = {b->beta, 0}, .decay = {b->decay, 0}, .out = {b->out, 0}, .profile = prof,
                                .precision = o->precision};
  return s;
}

static camdelta_status run_op(camdelta_context *ctx, op_ctx *o, const bench_op *op, camdelta_profile *prof) {
  bench_buffers *b = o->b;
  if (op->kind == OP_BRANCH) {
    const camdelta_branch_args a = branch_args(o, op->act, prof);
    return camdelta_branch_forward(ctx, &a, NULL);
  }
  if (op->kind == OP_BRANCH_BWD) {
    const camdelta_branch_args a = branch_args(o, op->act, NULL);
    const int h = op->act == CAMDELTA_BF16;
    const camdelta_branch_grads g = {.grad_y = {h ? b->hgy : b->gy, 0}, .dq_raw = {h ? b->hdq : b->dq, 0},
                                     .dk_raw = {h ? b->hdk : b->dk, 0},   .dv_raw = {h ? b->hdv : b->dv, 0},
                                     .dconv_weight = {b->dconv, 0},       .dq_norm_weight = {b->dqw, 0},
                                     .dk_norm_weight = {b->dkw, 0},       .dbeta = {b->dbeta, 0},
                                     .ddecay = {b->ddecay, 0},            .profile = prof};
    return camdelta_branch_backward(ctx, &a, &g, o->bsaved);
  }
  if (op->kind == OP_STREAM) return stream_step(ctx, o, prof);
  if (op->kind == OP_PREP) {
    const camdelta_prep_args a = prep_args(o, prof);
    return camdelta_prep_forward(ctx, &a, NULL);
  }
  if (op->kind == OP_PREP_BWD) {
    camdelta_prep_backward_args a;
    memset(&a, 0, sizeof a);
    a.B = b->B, a.N = b->N, a.H = b->H, a.D = b->D, a.dtype = b->dt, a.k_scale = o->k_scale, a.norm_eps = 1e-6f;
    a.q_raw.mem = b->raw[0], a.k_raw.mem = b->raw[1], a.v_raw.mem = b->raw[2], a.q_norm_weight.mem = b->qw;
    a.k_norm_weight.mem = b->kw, a.proj_q.mem = b->pq, a.proj_kv.mem = b->pkv, a.rope_cos.mem = b->rc;
    a.rope_sin.mem = b->rs, a.grad_q.mem = b->gq, a.grad_k.mem = b->gk, a.grad_v.mem = b->gv;
    a.grad_inflation_sq.mem = b->ginfl, a.dq_raw.mem = b->dq_raw, a.dk_raw.mem = b->dk_raw, a.dv_raw.mem = b->dv_raw;
    a.dq_norm_weight.mem = b->dqw, a.dk_norm_weight.mem = b->dkw, a.profile = prof;
    /* the outputs of prepare_op's forward, as a training step keeps them */
    a.q.mem = b->q, a.k.mem = b->k, a.inflation_sq.mem = b->infl;
    return camdelta_prep_backward(ctx, &a, o->psaved);
  }
  const camdelta_scan_args s = scan_args(o, op->reverse, op->alg, prof);
  if (op->kind == OP_SCAN) return camdelta_scan_forward(ctx, &s, NULL);
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = b->B, a.H = b->H, a.D = b->D, a.F = b->F, a.S = b->S, a.reverse = op->reverse;
  a.q.mem = b->fq, a.k.mem = b->fk, a.v.mem = b->fv, a.beta.mem = b->beta, a.decay.mem = b->decay;
  a.grad_out.mem = b->gout, a.dq.mem = b->dq, a.dk.mem = b->dk, a.dv.mem = b->dv, a.dbeta.mem = b->dbeta;
  a.ddecay.mem = b->ddecay, a.profile = prof, a.precision = o->precision;
  return camdelta_scan_backward(ctx, &a, o->ssaved);
}

/* What a backward needs from its forward, run once before timing. */
static camdelta_status prepare_op(camdelta_context *ctx, op_ctx *o, const bench_op *op) {
  if (op->kind == OP_BRANCH_BWD) {
    const camdelta_branch_args a = branch_args(o, op->act, NULL);
    return camdelta_branch_forward(ctx, &a, o->bsaved);
  }
  if (op->kind == OP_STREAM) return stream_make(ctx, o, op->act);
  if (op->kind == OP_PREP_BWD) {
    const camdelta_prep_args f = prep_args(o, NULL);
    return camdelta_prep_forward(ctx, &f, o->psaved);
  }
  if (op->kind == OP_SCAN_BWD) {
    const camdelta_scan_args s = scan_args(o, op->reverse, CAMDELTA_SCAN_AUTO, NULL);
    return camdelta_scan_forward(ctx, &s, o->ssaved);
  }
  return CAMDELTA_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --flatness: one stream committing blocks of 3 frames, the per-block kernel time (median of `reps` blocks) from
 * block 1, 10, 100 and 1000 on, with the stream's device bytes and the process's resident memory there: flat in the
 * number of committed blocks. */
static int stream_flatness(camdelta_context *ctx, op_ctx *o, size_t reps, cJSON *jops, int tty) {
  static const size_t at[4] = {1, 10, 100, 1000};
  if (o->b->F < STREAM_BLOCK) {
    printf("%-32s %10s  (a stream block is %d frames, the shape has F=%zu)\n", "stream flatness", "n/a",
           (int)STREAM_BLOCK, o->b->F);
    return CLI_EXIT_OK;
  }
  const size_t total = at[3] - 1 + reps;
  double *ms = calloc(total, sizeof *ms), rss[4] = {0, 0, 0, 0};
  if (!ms) return cli_error(CLI_EXIT_FAILURE, "bench: out of host memory");
  camdelta_status st = stream_make(ctx, o, o->b->dt);
  for (size_t k = 0; k < total && !st; k++) {
    if (tty && k % 10 == 0) fprintf(stderr, "\r[flatness] block %zu/%zu", k + 1, total), fflush(stderr);
    camdelta_profile p = {0, 0};
    st = stream_step(ctx, o, &p);
    ms[k] = p.kernel_ms;
    for (int i = 0; i < 4; i++)
      if (k + 1 == at[i] + reps - 1) rss[i] = cli_rss_mib();
  }
  if (tty) fprintf(stderr, "\r%50s\r", ""), fflush(stderr);
  if (st) {
    free(ms);
    if (st == CAMDELTA_ERROR_UNSUPPORTED) {
      printf("%-32s %10s  (%s)\n", "stream flatness", "n/a", camdelta_last_message());
      return CLI_EXIT_OK;
    }
    return cli_lib_error(st, "stream flatness");
  }
  const size_t dev = camdelta_stream_device_bytes(o->stream);
  for (int i = 0; i < 4; i++) {
    double *w = ms + at[i] - 1;
    qsort(w, reps, sizeof *w, cmp_double);
    const double med = reps % 2 ? w[reps / 2] : 0.5 * (w[reps / 2 - 1] + w[reps / 2]);
    char name[64];
    snprintf(name, sizeof name, "stream-step from block %zu", at[i]);
    printf("%-32s %10.4f %10.4f  stream %.2f MiB, process resident %.1f MiB\n", name, med, w[0],
           (double)dev / 1048576.0, rss[i]);
    cJSON *jo = cJSON_CreateObject();
    cJSON_AddItemToArray(jops, jo);
    cJSON_AddStringToObject(jo, "name", name);
    cJSON_AddNumberToObject(jo, "median_ms", med);
    cJSON_AddNumberToObject(jo, "min_ms", w[0]);
    cJSON_AddNumberToObject(jo, "stream_device_bytes", (double)dev);
    cJSON_AddNumberToObject(jo, "resident_mib", rss[i]);
  }
  fflush(stdout);
  free(ms);
  return CLI_EXIT_OK;
}

/* Fewest bytes each operation must move, and its floating-point operations. */
static void cost(const bench_op *op, const bench_buffers *b, double *bytes, double *flops) {
  const double BNHD = (double)b->B * b->N * b->H * b->D, es = (double)camdelta_dtype_size(b->dt);
  const double BN = (double)b->B * b->N, BHN = (double)b->B * b->H * b->N, aux = BN * 2 * 64 + (double)b->N * b->D * 4;
  const double D = (double)b->D;
  *bytes = *flops = 0;
  switch (op->kind) {
    case OP_PREP:
      *bytes = 6 * BNHD * es + aux + BHN * 4;
      *flops = 0;
      break;
    case OP_PREP_BWD:
      /* q_raw, k_raw and three gradients in, three gradients out (v_raw is not read) */
      *bytes = 8 * BNHD * es + aux + BHN * 4;
      *flops = 0;
      break;
    case OP_SCAN:
      *bytes = 4 * BNHD * 4 + BHN * 4;
      *flops = 6 * BNHD * D;
      break;
    case OP_SCAN_BWD:
      *bytes = 7 * BNHD * 4 + 2 * BHN * 4;
      *flops = 14 * BNHD * D;
      break;
    case OP_BRANCH: /* q_raw k_raw v_raw in, y out, beta; the two scans */
      *bytes = 4 * BNHD * (double)camdelta_dtype_size(op->act) + BHN * 4;
      *flops = 12 * BNHD * D;
      break;
    case OP_BRANCH_BWD: /* q_raw k_raw v_raw grad_y in, three gradients out, beta and dbeta */
      *bytes = 7 * BNHD * (double)camdelta_dtype_size(op->act) + 2 * BHN * 4;
      *flops = 28 * BNHD * D;
      break;
    case OP_STREAM: /* the branch forward on one block, and the state read and written */
      *bytes = (4 * BNHD * (double)camdelta_dtype_size(op->act) + BHN * 4) * STREAM_BLOCK / (double)b->F +
               2 * (double)(b->B * b->H * D * D) * 4;
      *flops = 12 * BNHD * D * STREAM_BLOCK / (double)b->F;
      break;
  }
}

/* The token grid Hs x Ws = S of the branch rows: the production grids of the named shapes (sana480 30x52,
 * sana720 45x80), else the most square factorisation of S. */
static void grid_of(const bench_shape *s, size_t *Hs, size_t *Ws) {
  if (strcmp(s->name, "sana480") == 0 || strcmp(s->name, "d64") == 0) {
    *Hs = 30, *Ws = 52;
    return;
  }
  if (strcmp(s->name, "sana720") == 0) {
    *Hs = 45, *Ws = 80;
    return;
  }
  cli_grid_of(s->S, Hs, Ws);
}

/* The device buffers make_buffers and make_branch_buffers allocate for shape s, and the cameras on the host: an
 * input error (exit 3) when they cannot fit. */
static int bench_budget(camdelta_context *ctx, const bench_shape *s, camdelta_dtype dt) {
  cli_budget b = {0, 0, 0, 0};
  size_t N = 0, C = 0, BNHD = 0, BN = 0, BHN = 0, BHF = 0, DD = 0;
  if (!camdelta_size_mul(&N, s->F, s->S) || !camdelta_size_mul(&C, s->H, s->D) ||
      !camdelta_size_prod(&BNHD, 3, (const size_t[]){s->B, N, C}) || !camdelta_size_mul(&BN, s->B, N) ||
      !camdelta_size_prod(&BHN, 3, (const size_t[]){s->B, s->H, N}) ||
      !camdelta_size_prod(&BHF, 3, (const size_t[]){s->B, s->H, s->F}) ||
      !camdelta_size_prod(&DD, 4, (const size_t[]){s->B, s->H, s->D, s->D}))
    b.overflow = 1;
  const size_t es = camdelta_dtype_size(dt);
  cli_budget_device(&b, 12, BNHD, es); /* raw, q k v, their gradients, dq_raw dk_raw dv_raw */
  cli_budget_device(&b, 10, BNHD, 4);  /* the f32 scan tensors and the branch's y, grad_y */
  cli_budget_device(&b, 8, BNHD, 2);   /* the branch's bf16 activations and their gradients */
  cli_budget_device(&b, 4, BHN, 4);
  cli_budget_device(&b, 2, BHF, 4);
  cli_budget_device(&b, 2, DD, 4);
  cli_budget_device(&b, 2, BN, 16 * 4);
  cli_budget_device(&b, 2, N, s->D / 2 * 4);
  cli_budget_device(&b, 12, C, 4);
  cli_budget_device(&b, 1, s->B, s->F * 20 * 4);
  cli_budget_host(&b, 1, s->B, s->F * 20 * 4);
  char what[320], shown[256];
  snprintf(what, sizeof what, "bench: shape %s", cli_escape(s->name, shown, sizeof shown));
  return cli_budget_check(&b, ctx, what);
}

int cmd_bench(int argc, char **argv) {
  if (cli_sp_requested(argc, argv)) return cmd_bench_sp(argc, argv); /* tools/cmd_bench_sp.c */
  if (cli_bench_packed_requested(argc, argv)) return cmd_bench_packed(argc, argv); /* tools/cmd_bench_packed.c */
  cli_args a = {argc, argv, 0};
  const char *device = NULL, *json_path = NULL, *only = NULL, *v;
  bench_shape shapes[16];
  int nshapes = 0;
  size_t reps = 20, warmup = 3;
  int host_timed = 0; /* some row was timed on the host: the driver gives no kernel times */
  double peak_gbs = 0, peak_tflops = 0;
  int flatness = 0;
  camdelta_dtype dt = CAMDELTA_F32;
  camdelta_precision prec = CAMDELTA_PRECISION_EXACT;
  while (a.i < argc) {
    int r;
    if ((r = cli_value(&a, "--shape", &v))) {
      if (r < 0) return CLI_EXIT_USAGE;
      if (nshapes == 16) return cli_error(CLI_EXIT_USAGE, "bench: at most 16 --shape options");
      if (!cli_parse_shape("bench", "--shape", v, 1, &shapes[nshapes])) return CLI_EXIT_USAGE;
      nshapes++;
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--json", &json_path))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--only", &only))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_reps_option(&a, &reps, &warmup))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--peak-gbs", &v))) {
      if (r < 0 || !cli_parse_double("--peak-gbs", v, &peak_gbs)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--peak-tflops", &v))) {
      if (r < 0 || !cli_parse_double("--peak-tflops", v, &peak_tflops)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--dtype", &v))) {
      if (r < 0 || cli_parse_dtype("bench", v, &dt)) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--precision", &v))) {
      if (r < 0 || !cli_parse_precision(v, &prec)) return CLI_EXIT_USAGE;
    } else if (cli_flag(&a, "--flatness")) {
      flatness = 1;
    } else {
      return cli_help_or_unknown(&a, "bench", "bench", usage_bench) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
  }
  if (nshapes == 0 && !cli_parse_shape("bench", "--shape", "small", 1, &shapes[nshapes++])) return CLI_EXIT_USAGE;

  camdelta_context *ctx = NULL;
  int rc = CLI_EXIT_OK;
  for (int si = 0; si < nshapes && !rc; si++) rc = bench_budget(NULL, &shapes[si], dt); /* the host, no device yet */
  if (!rc) rc = cli_context(&ctx, device);
  for (int si = 0; si < nshapes && !rc; si++) rc = bench_budget(ctx, &shapes[si], dt); /* before any is run */
  if (rc) {
    camdelta_context_destroy(ctx);
    return rc;
  }
  camdelta_device_info info;
  camdelta_context_info(ctx, &info);
  /* on a CPU, the device's own peaks (unless given) and the rates in GFLOP/s */
  const int cpu = (info.type & CL_DEVICE_TYPE_CPU) != 0;
  bench_peak measured = {.gflops = 0, .gbs = 0, .compute_units = 0, .fma_shape = "", .copy_shape = ""};
  if (cpu && (peak_gbs <= 0 || peak_tflops <= 0)) {
    if (bench_peak_measure(ctx, &measured))
      fprintf(stderr, "camdelta bench: measuring the device's peaks failed; no fractions printed\n");
    else {
      printf("device peaks (measured): %.1f GFLOP/s %s, %.1f GB/s copy, %u compute units\n", measured.gflops,
             measured.soft_fma ? "mul+add (no hardware fma)" : "fma", measured.gbs, measured.compute_units);
      printf("  fma from %s, copy from %s\n", measured.fma_shape, measured.copy_shape);
      if (peak_gbs <= 0) peak_gbs = measured.gbs;
      if (peak_tflops <= 0) peak_tflops = measured.gflops / 1000;
    }
  }
  const double fscale = cpu ? 1000 : 1; /* TFLOP/s, or GFLOP/s on a CPU */
  const int tty = isatty(fileno(stderr));
  cJSON *root = cJSON_CreateObject(), *jshapes = cJSON_AddArrayToObject(root, "shapes");
  cJSON_AddStringToObject(root, "device", info.device_name);
  cJSON_AddStringToObject(root, "platform", info.platform_name);
  cJSON_AddStringToObject(root, "driver", info.driver_version);
  cJSON_AddStringToObject(root, "camdelta", camdelta_version_string());
  cJSON_AddStringToObject(root, "dtype", camdelta_dtype_name(dt));
  cJSON_AddStringToObject(root, "precision", camdelta_precision_name(prec));
  if (peak_gbs > 0) cJSON_AddNumberToObject(root, "peak_gbs", peak_gbs);
  if (peak_tflops > 0) cJSON_AddNumberToObject(root, "peak_tflops", peak_tflops);
  if (measured.gflops > 0) {
    cJSON_AddNumberToObject(root, "measured_peak_gflops", measured.gflops);
    cJSON_AddNumberToObject(root, "measured_peak_gbs", measured.gbs);
    cJSON_AddStringToObject(root, "measured_peak_fma_shape", measured.fma_shape);
    cJSON_AddStringToObject(root, "measured_peak_copy_shape", measured.copy_shape);
    cJSON_AddBoolToObject(root, "measured_peak_soft_fma", measured.soft_fma);
  }
  cJSON_AddNumberToObject(root, "compute_units", info.compute_units);

  for (int si = 0; si < nshapes && !rc; si++) {
    bench_buffers b;
    memset(&b, 0, sizeof b);
    b.B = shapes[si].B, b.H = shapes[si].H, b.D = shapes[si].D, b.F = shapes[si].F, b.S = shapes[si].S;
    b.N = b.F * b.S, b.dt = dt;
    printf("camdelta bench: %s on %s (%s)\n", shapes[si].name, info.device_name, info.platform_name);
    printf("shape B=%zu H=%zu D=%zu F=%zu S=%zu (N=%zu), prep dtype %s, scan precision %s, %zu reps after %zu "
           "warm-up\n",
           b.B, b.H, b.D, b.F, b.S, b.N, camdelta_dtype_name(dt), camdelta_precision_name(prec), reps, warmup);
    printf("%-39s %10s %10s %9s %9s", "operation", "median ms", "min ms", "GB/s", cpu ? "GFLOP/s" : "TFLOP/s");
    if (peak_gbs > 0) printf(" %8s", "%GB/s");
    if (peak_tflops > 0) printf(" %8s", "%FLOP/s");
    printf("\n");
    fflush(stdout);
    cJSON *js = cJSON_CreateObject(), *jops = NULL;
    cJSON_AddItemToArray(jshapes, js);
    cJSON_AddStringToObject(js, "name", shapes[si].name);
    cJSON_AddNumberToObject(js, "B", (double)b.B);
    cJSON_AddNumberToObject(js, "H", (double)b.H);
    cJSON_AddNumberToObject(js, "D", (double)b.D);
    cJSON_AddNumberToObject(js, "F", (double)b.F);
    cJSON_AddNumberToObject(js, "S", (double)b.S);
    jops = cJSON_AddArrayToObject(js, "operations");
    rc = make_buffers(ctx, &b, tty);
    op_ctx o = {.b = &b, .k_scale = (float)(1.0 / sqrt((double)b.D * (double)b.S)), .precision = prec};
    grid_of(&shapes[si], &o.Hs, &o.Ws);
    if (!rc) rc = make_branch_buffers(ctx, &b, o.Hs, o.Ws);
    if (!rc && (camdelta_prep_saved_create(ctx, &o.psaved) || camdelta_scan_saved_create(ctx, &o.ssaved) ||
                camdelta_branch_saved_create(ctx, &o.bsaved)))
      rc = cli_lib_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "bench");
    const size_t nops = sizeof ops / sizeof ops[0];
    for (size_t oi = 0; oi < nops && !rc; oi++) {
      const bench_op *op = &ops[oi];
      if (only && !strstr(op->name, only)) continue;
      if (tty) fprintf(stderr, "\r[%zu/%zu] %-34s", oi + 1, nops, op->name), fflush(stderr);
      double *ms = calloc(reps, sizeof *ms);
      if (!ms) {
        rc = cli_error(CLI_EXIT_FAILURE, "bench: out of host memory");
        break;
      }
      char why[160] = "";
      if (op->kind == OP_STREAM && b.F < STREAM_BLOCK) /* a stream's step is a whole block */
        snprintf(why, sizeof why, "a stream block is %d frames, the shape has F=%zu", (int)STREAM_BLOCK, b.F);
      camdelta_status st = why[0] ? CAMDELTA_ERROR_UNSUPPORTED : prepare_op(ctx, &o, op);
      int host = 0; /* the driver gives no kernel times (kernel_ms NaN): host clock around camdelta_finish */
      for (size_t r = 0; r < warmup && !st; r++) {
        camdelta_profile p = {0, 0};
        st = run_op(ctx, &o, op, &p);
        host |= isnan(p.kernel_ms);
      }
      for (size_t r = 0; r < reps && !st; r++) {
        camdelta_profile p = {0, 0};
        if (!host) {
          st = run_op(ctx, &o, op, &p);
          if (!(host = isnan(p.kernel_ms))) {
            ms[r] = p.kernel_ms;
            continue;
          }
        }
        if (!st) st = camdelta_finish(ctx);
        const double t0 = cli_now_ms();
        if (!st) st = run_op(ctx, &o, op, NULL);
        if (!st) st = camdelta_finish(ctx);
        ms[r] = cli_now_ms() - t0;
      }
      if (host) host_timed = 1;
      if (tty) fprintf(stderr, "\r%50s\r", ""), fflush(stderr);
      cJSON *jo = cJSON_CreateObject();
      cJSON_AddItemToArray(jops, jo);
      cJSON_AddStringToObject(jo, "name", op->name);
      if (st) {
        char line[160];
        snprintf(line, sizeof line, "%s", why[0] ? why : camdelta_last_message());
        for (char *c = line; *c; c++)
          if (*c == '\n') *c = ' ';
        printf("%-39s %10s  (%s: %s)\n", op->name, "n/a", camdelta_status_name(st), line);
        cJSON_AddStringToObject(jo, "error", line);
        free(ms);
        if (st != CAMDELTA_ERROR_UNSUPPORTED) rc = cli_lib_error(st, op->name);
        continue;
      }
      qsort(ms, reps, sizeof *ms, cmp_double);
      double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]), mn = ms[0];
      double bytes = 0, flops = 0;
      cost(op, &b, &bytes, &flops);
      double gbs = bytes / (med * 1e-3) / 1e9, tf = flops / (med * 1e-3) / 1e12;
      char label[64];
      snprintf(label, sizeof label, "%s%s", op->name, host ? " (host)" : "");
      printf("%-39s %10.4f %10.4f %9.1f", label, med, mn, gbs);
      if (flops > 0) printf(" %9.2f", tf * fscale);
      else printf(" %9s", "-");
      if (peak_gbs > 0) printf(" %7.1f%%", 100 * gbs / peak_gbs);
      if (peak_tflops > 0) {
        if (flops > 0) printf(" %7.1f%%", 100 * tf / peak_tflops);
        else printf(" %8s", "-");
      }
      printf("\n");
      fflush(stdout);
      cJSON_AddStringToObject(jo, "timing", host ? "host" : "kernel");
      cJSON_AddNumberToObject(jo, "median_ms", med);
      cJSON_AddNumberToObject(jo, "min_ms", mn);
      cJSON_AddNumberToObject(jo, "bytes", bytes);
      cJSON_AddNumberToObject(jo, "flops", flops);
      cJSON_AddNumberToObject(jo, "gbs", gbs);
      cJSON_AddNumberToObject(jo, "tflops", tf);
      if (op->kind == OP_SCAN) { /* which kernels and arithmetic ran */
        camdelta_scan_args sa;
        memset(&sa, 0, sizeof sa);
        sa.B = b.B, sa.H = b.H, sa.D = b.D, sa.F = b.F, sa.S = b.S, sa.reverse = op->reverse;
        sa.algorithm = op->alg, sa.precision = prec;
        char plan[1024];
        if (camdelta_scan_plan_describe(ctx, &sa, plan, sizeof plan) == CAMDELTA_OK)
          cJSON_AddStringToObject(jo, "plan", plan);
      }
      free(ms);
    }
    if (!rc && flatness) rc = stream_flatness(ctx, &o, reps, jops, tty);
    camdelta_stream_destroy(o.stream);
    camdelta_prep_saved_destroy(o.psaved);
    camdelta_scan_saved_destroy(o.ssaved);
    camdelta_branch_saved_destroy(o.bsaved);
    release_all(&b);
    printf("\n");
  }
  if (host_timed)
    printf("(host): the driver gives no kernel times (its profiling timer has no resolution); these rows are host\n"
           "milliseconds from enqueue to camdelta_finish, launch and wait included.\n");
  if (!rc && json_path) {
    char *text = cJSON_Print(root);
    FILE *f = fopen(json_path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) rc = cli_error(CLI_EXIT_FAILURE, "bench: cannot write '%s'", json_path);
    free(text);
  }
  cJSON_Delete(root);
  camdelta_context_destroy(ctx);
  return rc;
}
