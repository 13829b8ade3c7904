/* Streams (include/camdelta_stream.h): the camera branch block by block. A step is the branch's run on a block
 * (src/ops/branch.c, cd_branch_block_start): the stream holds what the block needs of the frames before it (the
 * causal state M and the conv's look-back) and the block's masks; the branch's plan holds the workspace, reused by
 * every step. The state and the look-back are double-buffered: a step writes the next ones into the spare buffers
 * and a successful committing step swaps them in, so that a step that does not commit, or fails, changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/branch_block.h"
#include "camdelta_stream.h"
#include "ops/camera_op.h"
#include "ops/stream_image.h"
#include "scan/engine.h"

struct camdelta_stream {
  camdelta_context *ctx;
  camdelta_stream_args cfg; /* the buffers replaced by the stream's copies */
  size_t S, C, es;
  cd_stream_key key;
  cl_mem weights[3];      /* conv_weight, q_norm_weight, k_norm_weight */
  cl_mem state[2];        /* (B, H, D, D) f32: state[cur] is M */
  cl_mem lookback[2];     /* (B, 3, S, C): lookback[cur] holds the last three committed frames' raw K */
  int cur;
  cl_mem mask, seg;       /* the current block's masks (cd_branch_block_masks) */
  uint32_t *mask_host, *seg_host; /* what mask and seg hold (first block: invalid) */
  size_t masks_f0, masks_T; /* the block kind they were written for; masks_T = 0: none */
  size_t f0;
  size_t device_bytes;
};

static void stream_free(camdelta_stream *s) {
  if (!s) return;
  cl_mem m[] = {s->weights[0], s->weights[1], s->weights[2], s->state[0], s->state[1], s->lookback[0],
                s->lookback[1], s->mask, s->seg};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  free(s->mask_host), free(s->seg_host);
  free(s);
}

void camdelta_stream_destroy(camdelta_stream *stream) { stream_free(stream); }

/* ------------------------------------------------------------------------------------------ create */

typedef struct create_call {
  camdelta_stream *s;
} create_call;

#define SA(f) CD_SLOT(camdelta_stream_args, f, CD_IN)
static const cd_slot CREATE_SLOTS[] = {SA(conv_weight), SA(q_norm_weight), SA(k_norm_weight)};
#undef SA

static camdelta_status create_check(cd_call *c) {
  const camdelta_stream_args *a = c->args;
  const char *op = c->entry->op;
  camdelta_status st = cd_check_head_dim(op, a->D);
  if (st) return st;
  if (!a->B || !a->H || !a->Hs || !a->Ws)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, Hs=%zu, Ws=%zu: each must be at least 1", op, a->B, a->H,
                   a->Hs, a->Ws);
  if (!a->pt || !a->ph || !a->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: patch (%zu, %zu, %zu): each must be at least 1", op, a->pt, a->ph,
                   a->pw);
  if (!a->chunk_size)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: chunk_size 0: a stream's blocks need a chunk_size >= 1", op);
  if (a->strategy != CAMDELTA_CHUNK_UNIFORM && a->strategy != CAMDELTA_CHUNK_FIRST_FRAME &&
      a->strategy != CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: chunk strategy %d unknown", op, (int)a->strategy);
  if (a->chunk_size >= UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: chunk_size %zu exceeds 2^32-2", op, a->chunk_size);
  if ((st = cd_check_algorithm(op, a->algorithm))) return st;
  if ((st = cd_check_precision(op, a->precision))) return st;
  if (!(a->k_scale == a->k_scale) || a->k_scale - a->k_scale != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: k_scale must be finite (got %g)", op, (double)a->k_scale);
  if (!(a->norm_eps >= 0.0f) || a->norm_eps - a->norm_eps != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: norm_eps must be finite and >= 0 (got %g)", op,
                   (double)a->norm_eps);
  if (a->dtype != CAMDELTA_F32 && a->dtype != CAMDELTA_F16 && a->dtype != CAMDELTA_BF16)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: dtype %d unknown (expected CAMDELTA_F32, F16 or BF16)", op,
                   (int)a->dtype);
  /* a block of the largest kind (chunk_size + 1 frames) with its look-back, as the branch's own checks size it */
  size_t S, C, C4, sb, lb, big;
  if (!CD_PROD(&S, a->Hs, a->Ws) || !CD_PROD(&C, a->H, a->D) || !CD_PROD(&C4, C, 4) || C4 > UINT32_MAX ||
      !CD_PROD(&sb, a->B, a->H, a->D, a->D, 4) || !CD_PROD(&lb, a->B, 3, S, C, 4) ||
      !CD_PROD(&big, a->B, a->chunk_size + 4, S, C, 16))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B=%zu H=%zu D=%zu Hs=%zu Ws=%zu chunk_size=%zu: sizes overflow", op,
                   a->B, a->H, a->D, a->Hs, a->Ws, a->chunk_size);
  const size_t n[3] = {C4, C, C};
  for (int i = 0; i < 3; i++) c->use[i] = (cd_use){.need = CD_REQUIRED, .elems = n[i], .es = 4};
  return CAMDELTA_OK;
}

/* The stream and its device buffers (the plan step: nothing enqueued), and the branch's kernels. */
static camdelta_status create_plan(cd_call *c) {
  const camdelta_stream_args *a = c->args;
  const char *op = c->entry->op;
  camdelta_stream *s = ((create_call *)c->op)->s = calloc(1, sizeof *s);
  if (!s) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  s->ctx = c->ctx, s->cfg = *a;
  s->S = a->Hs * a->Ws, s->C = a->H * a->D, s->es = camdelta_dtype_size(a->dtype);
  const size_t sb = a->B * a->H * a->D * a->D * 4, lb = a->B * 3 * s->S * s->C * s->es;
  s->key = (cd_stream_key){.B = a->B, .H = a->H, .D = a->D, .Hs = a->Hs, .Ws = a->Ws, .ph = a->ph, .pw = a->pw,
                           .chunk_size = a->chunk_size, .strategy = (uint32_t)a->strategy,
                           .dtype = (uint32_t)a->dtype, .k_scale = a->k_scale, .norm_eps = a->norm_eps,
                           .state_bytes = sb, .lookback_bytes = lb};
  if (!cd_stream_image_size(&s->key))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: the stream's image size overflows", op);
  const size_t most = a->chunk_size + 1; /* the longest block */
  s->mask_host = cd_malloc_array(most, sizeof *s->mask_host);
  s->seg_host = cd_malloc_array(most + 3, sizeof *s->seg_host);
  if (!s->mask_host || !s->seg_host) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  const size_t bytes[] = {4 * s->C * 4, s->C * 4, s->C * 4, sb, sb, lb, lb, most * 4, (most + 3) * 4};
  cl_mem *mem[] = {&s->weights[0], &s->weights[1], &s->weights[2], &s->state[0], &s->state[1], &s->lookback[0],
                   &s->lookback[1], &s->mask, &s->seg};
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0] && !st; i++) {
    st = cd_alloc(c->ctx, bytes[i], mem[i]);
    s->device_bytes += bytes[i];
  }
  if (!st) st = cd_branch_warm(c->ctx, a->D);
  return st;
}

/* The weights copied and hashed (the image names them). */
static camdelta_status create_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_stream_args *a = c->args;
  camdelta_stream *s = ((create_call *)c->op)->s;
  const camdelta_buffer w[3] = {a->conv_weight, a->q_norm_weight, a->k_norm_weight};
  const size_t n[3] = {4 * s->C, s->C, s->C};
  float *host = cd_malloc_array(4 * s->C, sizeof *host);
  if (!host) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", c->entry->op);
  uint64_t h = CD_FNV_START;
  camdelta_status st = CAMDELTA_OK;
  for (int i = 0; i < 3 && !st; i++) {
    st = cd_copy(c->ctx, w[i].mem, w[i].offset * 4, s->weights[i], 0, n[i] * 4, l);
    if (st) break;
    const cl_int err = clEnqueueReadBuffer(c->ctx->queue, s->weights[i], CL_TRUE, 0, n[i] * 4, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) st = cd_cl_fail(err, "reading the stream's weights");
    h = cd_fnv1a(h, host, n[i] * 4);
  }
  free(host);
  s->key.weights_hash = h;
  s->cfg.conv_weight = (camdelta_buffer){s->weights[0], 0};
  s->cfg.q_norm_weight = (camdelta_buffer){s->weights[1], 0};
  s->cfg.k_norm_weight = (camdelta_buffer){s->weights[2], 0};
  return st;
}

static camdelta_status create_end(cd_call *c, camdelta_status st) {
  create_call *cc = c->op;
  if (st) stream_free(cc->s), cc->s = NULL;
  return st;
}

static const cd_entry CREATE = {.op = "camdelta_stream_create", .second = NULL, .slots = CREATE_SLOTS,
                                .nslots = sizeof CREATE_SLOTS / sizeof CREATE_SLOTS[0], .profile_part = -1,
                                .profile_offset = 0, .check = create_check, .plan = create_plan,
                                .enqueue = create_enqueue, .end = create_end};

camdelta_status camdelta_stream_create(camdelta_context *ctx, const camdelta_stream_args *args,
                                       camdelta_stream **out) {
  cd_clear_error();
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'out' is NULL", CREATE.op);
  *out = NULL;
  create_call cc = {NULL};
  cd_call c = {.entry = &CREATE, .ctx = ctx, .args = args, .op = &cc};
  const camdelta_status st = cd_run_entry(&c);
  *out = cc.s;
  return st;
}

/* -------------------------------------------------------------------------------------------- queries */

size_t camdelta_stream_frames(const camdelta_stream *s) { return s ? s->f0 : 0; }

static size_t next_frames(const camdelta_stream *s) {
  uint64_t first, rest;
  cd_stream_schedule(s->cfg.chunk_size, (uint32_t)s->cfg.strategy, &first, &rest);
  return (size_t)(s->f0 ? rest : first);
}

size_t camdelta_stream_next_frames(const camdelta_stream *s) { return s ? next_frames(s) : 0; }
size_t camdelta_stream_device_bytes(const camdelta_stream *s) { return s ? s->device_bytes : 0; }

camdelta_status camdelta_stream_reset(camdelta_stream *s) {
  cd_clear_error();
  if (!s) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_stream_reset: 'stream' is NULL");
  s->f0 = 0;
  return CAMDELTA_OK;
}

/* ----------------------------------------------------------------------------------------------- step */

#define ST_(f, r) CD_SLOT(camdelta_stream_step_args, f, r)
static const cd_slot STEP_SLOTS[] = {ST_(q_raw, CD_IN), ST_(k_raw, CD_IN), ST_(v_raw, CD_IN),
                                     ST_(camera_conditions, CD_IN), ST_(beta, CD_IN), ST_(decay, CD_IN),
                                     ST_(y, CD_OUT)};
#undef ST_

typedef struct step_call {
  camdelta_stream *s;
  camdelta_branch_run *run;
} step_call;

static camdelta_status step_check(cd_call *c) {
  const camdelta_stream_step_args *a = c->args;
  camdelta_stream *s = ((step_call *)c->op)->s;
  const char *op = c->entry->op;
  if (!s) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'stream' is NULL", op);
  const size_t want = next_frames(s);
  if (a->frames != want)
    return cd_fail(CAMDELTA_ERROR_SHAPE,
                   "%s: a block of %zu frames; the stream's next block (frames %zu..%zu, %s schedule, chunk_size "
                   "%zu) has %zu",
                   op, a->frames, s->f0, s->f0 + want - 1, camdelta_chunk_strategy_name(s->cfg.strategy),
                   s->cfg.chunk_size, want);
  if (s->f0 > UINT32_MAX - want)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: frame %zu + %zu passes 2^32-1", op, s->f0, want);
  const camdelta_stream_args *k = &s->cfg;
  const size_t BNC = k->B * want * s->S * s->C, BHN = k->B * k->H * want * s->S; /* within create's checks */
  const size_t n[7] = {BNC, BNC, BNC, k->B * want * 20, BHN, k->B * k->H * want, BNC};
  const size_t es[7] = {s->es, s->es, s->es, 4, 4, 4, s->es};
  for (int i = 0; i < 7; i++) c->use[i] = (cd_use){.need = CD_REQUIRED, .elems = n[i], .es = es[i]};
  return CAMDELTA_OK;
}

/* The block's masks on the device (written when the block's kind changes: the first blocks), then the branch's
 * run on the block. */
static camdelta_status step_plan(cd_call *c) {
  const camdelta_stream_step_args *a = c->args;
  step_call *sc = c->op;
  camdelta_stream *s = sc->s;
  const camdelta_stream_args *k = &s->cfg;
  const size_t T = a->frames, back = s->f0 < 3 ? s->f0 : 3;
  const int spare = !s->cur;
  const camdelta_buffer none = {NULL, 0};
  const cd_branch_block blk = {.f0 = s->f0, .lookback = {s->lookback[s->cur], 0},
                               .init = s->f0 ? (camdelta_buffer){s->state[s->cur], 0} : none,
                               .final = {s->state[spare], 0},
                               .lookback_out = a->commit ? (camdelta_buffer){s->lookback[spare], 0} : none,
                               .mask = s->mask, .seg_end = s->seg};
  const camdelta_branch_args ba = {
      .B = k->B, .T = T, .Hs = k->Hs, .Ws = k->Ws, .H = k->H, .D = k->D, .pt = k->pt, .ph = k->ph, .pw = k->pw,
      .k_scale = k->k_scale, .norm_eps = k->norm_eps, .algorithm = k->algorithm, .q_raw = a->q_raw,
      .k_raw = a->k_raw, .v_raw = a->v_raw, .conv_weight = k->conv_weight, .q_norm_weight = k->q_norm_weight,
      .k_norm_weight = k->k_norm_weight, .camera_conditions = a->camera_conditions, .beta = a->beta,
      .decay = a->decay, .y = a->y, .profile = a->profile, .precision = k->precision, .dtype = k->dtype};
  camdelta_status st = cd_branch_block_start(c->ctx, c->entry->op, &ba, &blk, &sc->run);
  if (st) return st;
  const size_t kind = s->f0 < 3 ? s->f0 : 3; /* the masks depend on min(f0, 3) > 0 and T only */
  if (s->masks_T != T || s->masks_f0 != kind) {
    cd_branch_block_masks(s->f0, T, s->mask_host, s->seg_host);
    cl_int err = clEnqueueWriteBuffer(c->ctx->queue, s->mask, CL_TRUE, 0, T * 4, s->mask_host, 0, NULL, NULL);
    if (err == CL_SUCCESS)
      err = clEnqueueWriteBuffer(c->ctx->queue, s->seg, CL_TRUE, 0, (back + T) * 4, s->seg_host, 0, NULL, NULL);
    s->masks_T = 0;
    if (err != CL_SUCCESS) return cd_cl_fail(err, "writing the block's masks");
    s->masks_T = T, s->masks_f0 = kind;
  }
  return CAMDELTA_OK;
}

static camdelta_status step_enqueue(cd_call *c, cd_launch *l) {
  (void)l;
  step_call *sc = c->op;
  camdelta_branch_request rq;
  camdelta_status st = camdelta_branch_run_next(sc->run, &rq);
  if (!st && rq.need != CAMDELTA_BRANCH_NEED_NOTHING)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: internal: a block's run needs %d", c->entry->op, (int)rq.need);
  return st;
}

static camdelta_status step_end(cd_call *c, camdelta_status st) {
  step_call *sc = c->op;
  camdelta_branch_run_destroy(sc->run);
  sc->run = NULL;
  const camdelta_stream_step_args *a = c->args;
  if (!st && a->commit) {
    camdelta_stream *s = sc->s;
    s->cur = !s->cur;
    s->f0 += a->frames;
  }
  return st;
}

static const cd_entry STEP = {.op = "camdelta_stream_step", .second = NULL, .saved_name = "stream",
                              .slots = STEP_SLOTS, .nslots = sizeof STEP_SLOTS / sizeof STEP_SLOTS[0],
                              .profile_part = 0, .profile_offset = offsetof(camdelta_stream_step_args, profile),
                              .check = step_check, .plan = step_plan, .enqueue = step_enqueue, .end = step_end};

camdelta_status camdelta_stream_step(camdelta_context *ctx, camdelta_stream *stream,
                                     const camdelta_stream_step_args *args) {
  step_call sc = {.s = stream};
  cd_call c = {.entry = &STEP, .ctx = ctx, .args = args, .saved = stream, .saved_ctx = stream ? stream->ctx : NULL,
               .op = &sc};
  return cd_run_entry(&c);
}

/* ----------------------------------------------------------------------------------- save and restore */

size_t camdelta_stream_state_size(const camdelta_stream *s) { return s ? cd_stream_image_size(&s->key) : 0; }

camdelta_status camdelta_stream_save(camdelta_stream *s, void *dst, size_t size, size_t *written) {
  static const char op[] = "camdelta_stream_save";
  cd_clear_error();
  if (!s || !dst) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, s ? "dst" : "stream");
  const size_t need = cd_stream_image_size(&s->key), sb = (size_t)s->key.state_bytes;
  if (size < need)
    return cd_fail(CAMDELTA_ERROR_BUFFER_TOO_SMALL, "%s: %zu bytes; the stream's image has %zu", op, size, need);
  unsigned char *img = dst;
  cd_stream_image_header(&s->key, s->f0, img);
  unsigned char *state = img + CD_STREAM_HEADER, *lookback = state + sb;
  const size_t back = s->f0 < 3 ? s->f0 : 3, frame = s->S * s->C * s->es;
  /* frame 0's stream has no state yet, and look-back slots of frames before 0 were never written: zeros */
  memset(state, 0, sb);
  memset(lookback, 0, (size_t)s->key.lookback_bytes);
  cl_int err = CL_SUCCESS;
  if (s->f0) err = clEnqueueReadBuffer(s->ctx->queue, s->state[s->cur], CL_TRUE, 0, sb, state, 0, NULL, NULL);
  for (size_t b = 0; b < s->cfg.B && err == CL_SUCCESS && back; b++) {
    const size_t at = (b * 3 + 3 - back) * frame;
    err = clEnqueueReadBuffer(s->ctx->queue, s->lookback[s->cur], CL_TRUE, at, back * frame, lookback + at, 0, NULL,
                              NULL);
  }
  if (err != CL_SUCCESS) return cd_cl_fail(err, "reading the stream's state");
  cd_stream_image_seal(img, need);
  if (written) *written = need;
  return CAMDELTA_OK;
}

static camdelta_status restore(const char *op, camdelta_stream *s, const unsigned char *img, size_t size) {
  uint64_t f0;
  size_t state_at, lookback_at;
  camdelta_status st = cd_stream_image_parse(op, &s->key, img, size, &f0, &state_at, &lookback_at);
  if (st) return st;
  /* into the spare buffers, swapped in once both are written */
  const int spare = !s->cur;
  cl_int err = clEnqueueWriteBuffer(s->ctx->queue, s->state[spare], CL_TRUE, 0, (size_t)s->key.state_bytes,
                                    img + state_at, 0, NULL, NULL);
  if (err == CL_SUCCESS)
    err = clEnqueueWriteBuffer(s->ctx->queue, s->lookback[spare], CL_TRUE, 0, (size_t)s->key.lookback_bytes,
                               img + lookback_at, 0, NULL, NULL);
  if (err != CL_SUCCESS) return cd_cl_fail(err, "writing the stream's state");
  s->cur = spare, s->f0 = (size_t)f0;
  return CAMDELTA_OK;
}

camdelta_status camdelta_stream_restore(camdelta_stream *s, const void *src, size_t size) {
  static const char op[] = "camdelta_stream_restore";
  cd_clear_error();
  if (!s || !src) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, s ? "src" : "stream");
  return restore(op, s, src, size);
}

/* The image written to `path` (through path.partial, renamed into place: a reader never sees half a file). */
static camdelta_status save_image(const char *op, camdelta_stream *s, const char *path, unsigned char *img, size_t n) {
  camdelta_status st = camdelta_stream_save(s, img, n, NULL);
  char *tmp = NULL;
  const size_t plen = strlen(path);
  if (!st && !(tmp = malloc(plen + 16))) st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) {
    snprintf(tmp, plen + 16, "%s.partial", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
      st = cd_fail(CAMDELTA_ERROR_IO, "%s: cannot write '%s'", op, tmp);
    } else {
      const int bad = fwrite(img, 1, n, fp) != n;
      if (fclose(fp) != 0 || bad) st = cd_fail(CAMDELTA_ERROR_IO, "%s: writing '%s' failed", op, tmp);
      if (!st && rename(tmp, path) != 0) st = cd_fail(CAMDELTA_ERROR_IO, "%s: cannot rename '%s' to '%s'", op, tmp, path);
      if (st) remove(tmp);
    }
  }
  free(tmp);
  return st;
}

static camdelta_status restore_image(const char *op, camdelta_stream *s, const char *path, unsigned char *img,
                                     size_t n) {
  camdelta_status st = cd_stream_read_file(op, &s->key, path, img, n);
  return st ? st : restore(op, s, img, n);
}

typedef camdelta_status (*image_io)(const char *op, camdelta_stream *s, const char *path, unsigned char *img, size_t n);

/* The file entries: their arguments checked, then `io` on a host buffer of the stream's image size. */
static camdelta_status with_image(const char *op, camdelta_stream *s, const char *path, image_io io) {
  cd_clear_error();
  if (!s || !path) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, s ? "path" : "stream");
  const size_t n = cd_stream_image_size(&s->key);
  unsigned char *img = malloc(n);
  if (!img) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  const camdelta_status st = io(op, s, path, img, n);
  free(img);
  return st;
}

camdelta_status camdelta_stream_save_file(camdelta_stream *s, const char *path) {
  return with_image("camdelta_stream_save_file", s, path, save_image);
}

camdelta_status camdelta_stream_restore_file(camdelta_stream *s, const char *path) {
  return with_image("camdelta_stream_restore_file", s, path, restore_image);
}
