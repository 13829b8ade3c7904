/* Packed clips (docs/math.md §9.1, include/camdelta_packed.h): camdelta_scan_forward_packed and
 * camdelta_scan_backward_packed.
 *
 * Native path (the chunkwise forward, and the backward): the scan kernels' packed variant (-DCD_PACKED, see
 * cl/common.cl) reads each frame's token start and count, its clip's first and last frame and its clip's state
 * row from one int64 table uploaded per call (frame offsets, a word per frame, clip offsets); the per-frame
 * kernels run over all H·F frames at once with token-tile grids sized by the longest frame (tiles past a frame's
 * end leave at once), the serial chains (phase B, the backward's chain) run one work-group per (clip, head,
 * column block) over that clip's frames. No copies, no padding; on equal clips the launches, tiles and results are
 * those of the fixed-shape call (bit for bit). When every frame has the same token count (clips of one resolution,
 * any lengths) the kernels compute token ranges as for the fixed shape (CD_PACKED=2) and read the table only for
 * the clip bounds. The saved object then holds (H, F, D, D) by packed frame (S = 0).
 *
 * Padded path (the sequential forward, and a backward given a saved object of a padded forward): the clips are
 * moved (cl/scan_packed.cl, one launch per tensor) into a padded fixed-shape batch: B = clips,
 * F = the most frames of a clip, S = the most tokens of a frame; a clip's frames keep their order, a short frame
 * is padded with tokens whose q, k, v, β (and grad_out) are zero, a short clip with frames of decay 1 and no
 * tokens. Such padding changes nothing exactly: a zero key row neither updates the state nor carries gradient,
 * and a padded frame's A_f = I, U_f = 0 (in reverse the padded frames after a clip's end pass its init_state
 * through unchanged). The batch runs as the fixed-shape forward or backward (its plan and launches: all clips
 * and frames in parallel, no per-clip launches) with the per-clip states (clips, H, D, D) passed straight through,
 * and the results are moved back. Cost: the copies, and the padding's work and memory when clips differ much in size
 * (a packed variant of the sequential kernel would avoid both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "scan/compose.h"
#include "scan/engine.h"

/* The native path's table of one call (cl/common.cl, CD_PACKED). */
typedef struct cd_packed_run {
  cl_mem pk;    /* device int64: F + 1 frame offsets, F frame words (clip·4·H + first + 2·last), clips + 1 clip
                   offsets */
  size_t clips; /* number of clips */
  size_t N;     /* packed tokens */
  int vec;      /* every frame offset and N are multiples of 4 (16-byte token rows for the tensor-core loads) */
  int uniform;  /* every frame has the same token count (the kernels' CD_PACKED=2 variant) */
  int in_const; /* the table fits in 64 KiB (the OpenCL minimum constant buffer): a __constant argument */
} cd_packed_run;

typedef struct pk_geo {
  size_t H, D, F, clips, N, Fm, Sm;
} pk_geo;

/* The head dim, and the offsets: increasing from 0, ending at N (tokens) and F (frames). */
static camdelta_status check_geometry(const char *op, const camdelta_packed_clips *pc, size_t B, size_t S, size_t F,
                                      size_t H, size_t D, pk_geo *g) {
  camdelta_status st = cd_check_head_dim(op, D);
  if (st) return st;
  const int64_t *fo = pc->frame_offsets, *co = pc->clip_offsets;
  const size_t clips = pc->clips, N = pc->tokens;
  if (!fo || !co)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: packed clips need both 'frame_offsets' and 'clip_offsets' "
                   "('%s' is NULL)", op, fo ? "clip_offsets" : "frame_offsets");
  if (B != 1 || S != 0)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: packed clips need B = 1 and S = 0 (got B=%zu S=%zu)", op, B, S);
  if (!F || !clips || !N || !H)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: packed clips: F=%zu, clips=%zu, tokens=%zu, H=%zu: each must be at least 1",
                   op, F, clips, N, H);
  if (clips > F) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: packed clips: %zu clips but only %zu frames", op, clips, F);
  if (fo[0] != 0)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frame_offsets[0] = %lld, expected 0", op, (long long)fo[0]);
  size_t Sm = 0, Fm = 0;
  for (size_t f = 0; f < F; f++) {
    if (fo[f + 1] <= fo[f])
      return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frame_offsets are not increasing at frame %zu (%lld, then %lld)", op, f,
                     (long long)fo[f], (long long)fo[f + 1]);
    if ((uint64_t)(fo[f + 1] - fo[f]) > Sm) Sm = (size_t)(fo[f + 1] - fo[f]);
  }
  if ((uint64_t)fo[F] != (uint64_t)N)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frame_offsets end at %lld, expected tokens = N = %zu", op,
                   (long long)fo[F], N);
  if (co[0] != 0)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: clip_offsets[0] = %lld, expected 0", op, (long long)co[0]);
  for (size_t c = 0; c < clips; c++) {
    if (co[c + 1] <= co[c])
      return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: clip_offsets are not increasing at clip %zu (%lld, then %lld)", op, c,
                     (long long)co[c], (long long)co[c + 1]);
    if ((uint64_t)(co[c + 1] - co[c]) > Fm) Fm = (size_t)(co[c + 1] - co[c]);
  }
  if ((uint64_t)co[clips] != (uint64_t)F)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: clip_offsets end at %lld, expected the frame count F = %zu", op,
                   (long long)co[clips], F);
  size_t padded;
  const size_t fac[5] = {clips, H, D, Fm, Sm};
  if (!cd_prod(&padded, 5, fac) || padded > SIZE_MAX / 4 || Fm > UINT32_MAX || Sm > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: packed clips: the padded batch overflows size_t", op);
  *g = (pk_geo){.H = H, .D = D, .F = F, .clips = clips, .N = N, .Fm = Fm, .Sm = Sm};
  return CAMDELTA_OK;
}

/* The padded path's moves of one call: the two kernels, the offsets on the device, the padded tensors. */
typedef struct pk_job {
  pk_geo g;
  cl_kernel gather, scatter;
  cl_mem fo, co;
  cl_mem mem[16];
  int n;
} pk_job;

static void job_free(pk_job *j) {
  for (int i = 0; i < j->n; i++) clReleaseMemObject(j->mem[i]);
  if (j->fo) clReleaseMemObject(j->fo);
  if (j->co) clReleaseMemObject(j->co);
  if (j->gather) clReleaseKernel(j->gather);
  if (j->scatter) clReleaseKernel(j->scatter);
}

static camdelta_status job_start(pk_job *j, camdelta_context *ctx, const pk_geo *g, const int64_t *fo,
                                 const int64_t *co) {
  j->g = *g;
  camdelta_status st = cd_kernel(ctx, "scan_packed.cl", "", "cd_pack_gather", &j->gather);
  if (!st) st = cd_kernel(ctx, "scan_packed.cl", "", "cd_pack_scatter", &j->scatter);
  cl_int err = CL_SUCCESS;
  if (!st) j->fo = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (g->F + 1) * 8, (void *)fo, &err);
  if (!st && err == CL_SUCCESS)
    j->co = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (g->clips + 1) * 8, (void *)co, &err);
  if (!st && err != CL_SUCCESS) st = cd_cl_fail(err, "packed clips: uploading the offsets");
  return st;
}

/* rows R per head; per_frame: one column per frame (decay), else the frame's tokens */
static camdelta_status move(camdelta_context *ctx, const pk_job *j, int scatter, camdelta_buffer packed, cl_mem padded,
                            size_t R, int per_frame, float pad, cd_launch *l) {
  const pk_geo *g = &j->g;
  cd_args a = {scatter ? j->scatter : j->gather, 0, CL_SUCCESS};
  if (scatter) {
    cd_arg_buf(&a, (camdelta_buffer){padded, 0});
    cd_arg_buf(&a, packed);
  } else {
    cd_arg_buf(&a, packed);
    cd_arg_buf(&a, (camdelta_buffer){padded, 0});
  }
  cd_arg_mem(&a, j->fo);
  cd_arg_mem(&a, j->co);
  cd_arg_u32(&a, (uint32_t)g->H);
  cd_arg_u32(&a, (uint32_t)R);
  cd_arg_u64(&a, per_frame ? g->F : g->N);
  cd_arg_u32(&a, (uint32_t)g->Fm);
  cd_arg_u32(&a, (uint32_t)g->Sm);
  cd_arg_i32(&a, per_frame);
  if (!scatter) cd_arg_f32(&a, pad);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_pack: setting arguments");
  const size_t cols = per_frame ? g->Fm : g->Fm * g->Sm, lw = 64;
  const size_t gws[2] = {(cols + lw - 1) / lw * lw, g->clips * g->H * R}, lws[2] = {lw, 1};
  return cd_enqueue(ctx, a.kernel, 2, gws, lws, l, scatter ? "cd_pack_scatter" : "cd_pack_gather");
}

/* The moved tensors, by kind: q, k, v (and grad_out, dq, dk, dv, out) have D rows per head and a column per
 * token, beta (dbeta) one row, decay (ddecay) one row and a column per frame, padded with decay 1. */
enum { PK_Q, PK_K, PK_V, PK_BETA, PK_DECAY, PK_GRAD_OUT };

static size_t pk_rows(const pk_geo *g, int kind) { return kind == PK_BETA || kind == PK_DECAY ? 1 : g->D; }

/* Elements of a padded tensor of that kind. */
static size_t pk_padded(const pk_geo *g, int kind) {
  return g->clips * g->H * pk_rows(g, kind) * g->Fm * (kind == PK_DECAY ? 1 : g->Sm);
}

/* Fresh padded device buffers out[kind] for kind = 0 .. n-1. */
static camdelta_status alloc_padded(camdelta_context *ctx, pk_job *j, int n, camdelta_buffer *out) {
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++) {
    cl_mem m = NULL;
    st = cd_alloc(ctx, pk_padded(&j->g, t) * 4, &m);
    if (!st) j->mem[j->n++] = m;
    out[t] = (camdelta_buffer){m, 0};
  }
  return st;
}

/* Gather src[kind] for kind = 0 .. n-1 into the padded in[kind]. */
static camdelta_status gather_inputs(camdelta_context *ctx, const pk_job *j, const camdelta_buffer *src, int n,
                                     const camdelta_buffer *in, cd_launch *l) {
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++) {
    const int per_frame = t == PK_DECAY;
    st = move(ctx, j, 0, src[t], in[t].mem, pk_rows(&j->g, t), per_frame, per_frame ? 1.0f : 0.0f, l);
  }
  return st;
}

/* Scatter the padded padded[kind] back into dst[kind] for kind = 0 .. n-1. */
static camdelta_status scatter_outputs(camdelta_context *ctx, const pk_job *j, const camdelta_buffer *dst, int n,
                                       const camdelta_buffer *padded, cd_launch *l) {
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++)
    st = move(ctx, j, 1, dst[t], padded[t].mem, pk_rows(&j->g, t), t == PK_DECAY, 0.0f, l);
  return st;
}

/* The native path's table (cl/common.cl, CD_PACKED): F + 1 frame offsets, per frame clip·4·H + 1 (first frame of
 * its clip) + 2 (last), clips + 1 clip offsets; uploaded once per call. */
static camdelta_status native_start(camdelta_context *ctx, const pk_geo *g, const camdelta_packed_clips *pc,
                                    cd_packed_run *pr) {
  const size_t F = g->F, C = g->clips, n = 2 * F + C + 2;
  int64_t *t = cd_malloc_array(n, sizeof *t); /* n <= 3F + 2, F below the checked padded batch */
  if (!t) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "packed clips: out of host memory");
  const int64_t *fo = pc->frame_offsets, *co = pc->clip_offsets;
  int vec = g->N % 4 == 0;
  for (size_t f = 0; f <= F; f++) t[f] = fo[f], vec &= fo[f] % 4 == 0;
  for (size_t c = 0; c < C; c++)
    for (int64_t f = co[c]; f < co[c + 1]; f++)
      t[F + 1 + (size_t)f] = (int64_t)(c * g->H) * 4 + (f == co[c] ? 1 : 0) + (f == co[c + 1] - 1 ? 2 : 0);
  for (size_t c = 0; c <= C; c++) t[2 * F + 1 + c] = co[c];
  cl_int err = CL_SUCCESS;
  memset(pr, 0, sizeof *pr);
  pr->pk = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof *t, t, &err);
  free(t);
  if (err != CL_SUCCESS) return cd_cl_fail(err, "packed clips: uploading the offsets");
  pr->clips = C, pr->N = g->N, pr->vec = vec, pr->uniform = g->Sm * F == g->N;
  pr->in_const = n * sizeof *t <= 65536;
  return CAMDELTA_OK;
}

/* The kernels' variant of this run (1 … 4; 0 is the fixed shape's) and its build options. */
static unsigned packed_variant(const cd_packed_run *pr) { return 1 + (pr->uniform ? 1 : 0) + (pr->in_const ? 2 : 0); }

static const char *packed_opts(const cd_packed_run *pr) {
  static const char *const opts[4] = {" -DCD_PACKED=1", " -DCD_PACKED=2", " -DCD_PACKED=1 -DCD_PK_CONST=1",
                                      " -DCD_PACKED=2 -DCD_PK_CONST=1"};
  return opts[packed_variant(pr) - 1];
}

/* The kernels' geometry of a run: clips·H chains, H·F per-frame matrices, tile grids for the longest frame Sm. */
static cd_scan_geo packed_geo(const pk_geo *g, const cd_packed_run *pr) {
  const cd_scan_geo geo = {.D = g->D, .F = g->F, .S = g->Sm, .N = g->N, .BH = g->clips * g->H, .BHF = g->H * g->F,
                           .pk = pr->pk, .pk_h = (uint32_t)g->H};
  return geo;
}

/* ----------------------------------------------------------------------------------------- the entries */

/* One packed call (the steps of src/runtime/driver.c): its geometry, its path, and what the plan step made for it:
 * the native path's table, or the padded path's moves and the padded batch's args; the fixed-shape plan either
 * runs. */
typedef struct pk_call {
  pk_geo g;
  int native;
  cd_packed_run pr;                   /* native */
  pk_job j;                           /* padded */
  camdelta_scan_args fa;              /* padded forward: the batch */
  camdelta_scan_backward_args ba;     /* padded backward: the batch */
  camdelta_scan_saved *saved;         /* the forward's */
  camdelta_scan_algorithm alg;        /* the forward's */
  cd_plan_entry *e;
} pk_call;

static void report_path(const camdelta_context *ctx, const camdelta_packed_clips *pc, int native) {
  if (pc->native) *pc->native = native;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32))
    fprintf(stderr, "camdelta scan: packed clips, %s path\n", native ? "native" : "padded batch");
}

static camdelta_status pk_end(cd_call *c, camdelta_status st) {
  pk_call *s = c->op;
  if (s->e) cd_plan_release(c->ctx, s->e);
  if (s->pr.pk) clReleaseMemObject(s->pr.pk);
  job_free(&s->j);
  return st;
}

/* A packed tensor's elements (cd_fwd_sizes' meaning): tok H·D·N, beta H·N, frames (decay) H·F, state clips·H·D·D. */
static cd_fwd_sizes pk_sizes(const pk_geo *g) {
  return (cd_fwd_sizes){.tok = g->H * g->D * g->N, .beta = g->H * g->N, .frames = g->H * g->F,
                        .state = g->clips * g->H * g->D * g->D};
}

/* --------------------------------------------------------------------------------------------- forward */

static camdelta_status fwd_check(cd_call *c) {
  pk_call *s = c->op;
  const camdelta_scan_args *p = c->args;
  const char *op = c->entry->op;
  camdelta_status st = check_geometry(op, c->second, p->B, p->S, p->F, p->H, p->D, &s->g);
  if (st) return st;
  if ((st = cd_check_algorithm(op, p->algorithm))) return st;
  if ((st = cd_check_precision(op, p->precision))) return st;
  const cd_fwd_sizes z = pk_sizes(&s->g);
  cd_forward_set_uses(c, &z);
  return CAMDELTA_OK;
}

/* The algorithm (AUTO decides as for a fixed batch of clips·H chains of the mean clip's frames with the mean
 * frame's tokens), then the chunkwise forward natively in the kernels' packed variant, or the sequential one on
 * the padded batch. */
static camdelta_status fwd_plan(cd_call *c) {
  pk_call *s = c->op;
  const camdelta_scan_args *p = c->args;
  const pk_geo *g = &s->g;
  s->alg = p->algorithm;
  camdelta_status st = CAMDELTA_OK;
  /* the packed variant has no CPU forms: the costs (under a loop budget, cd_scan_decide: what fits) */
  if (s->alg == CAMDELTA_SCAN_AUTO && cd_scan_cpu_forms(c->ctx, g->D) && !cd_loop_budget(c->ctx))
    s->alg = cd_scan_auto(&c->ctx->info, 0, g->clips * g->H, g->D, (g->F + g->clips - 1) / g->clips,
                          (g->N + g->F - 1) / g->F, NULL);
  else if (s->alg == CAMDELTA_SCAN_AUTO)
    st = cd_scan_decide(c->ctx, g->clips * g->H, g->D, (g->F + g->clips - 1) / g->clips, (g->N + g->F - 1) / g->F,
                        &s->alg, NULL);
  if (st) return st;
  s->native = s->alg == CAMDELTA_SCAN_CHUNKWISE;
  report_path(c->ctx, c->second, s->native);
  cd_fwd_request r;
  if (s->native) {
    if ((st = native_start(c->ctx, g, c->second, &s->pr))) return st;
    const size_t offs[5] = {p->q.offset, p->k.offset, p->v.offset, p->beta.offset, p->out.offset};
    r = (cd_fwd_request){.alg = CAMDELTA_SCAN_CHUNKWISE, .BH = g->clips * g->H, .D = g->D, .S = g->Sm,
                         .prec = p->precision, .vec = s->pr.vec && cd_tc_vec_ok(4, offs, 5),
                         .variant = packed_variant(&s->pr), .extra = packed_opts(&s->pr)};
  } else {
    const camdelta_packed_clips *pc = c->second;
    camdelta_buffer in[6];
    st = job_start(&s->j, c->ctx, g, pc->frame_offsets, pc->clip_offsets);
    if (!st) st = alloc_padded(c->ctx, &s->j, 6, in); /* q, k, v, beta, decay, and out laid out like q */
    if (st) return st;
    camdelta_scan_args *a = &s->fa;
    *a = *p;
    a->B = g->clips, a->F = g->Fm, a->S = g->Sm, a->algorithm = s->alg;
    a->q = in[PK_Q], a->k = in[PK_K], a->v = in[PK_V], a->beta = in[PK_BETA], a->decay = in[PK_DECAY];
    a->out = in[PK_GRAD_OUT];
    if ((st = cd_forward_request(c->ctx, a, &r))) return st;
  }
  if ((st = cd_forward_acquire(c->ctx, &r, &s->e))) return st;
  if (cd_option(c->ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    cd_forward_text(s->e, p->precision, text, sizeof text);
    fprintf(stderr, "camdelta scan (packed clips, %s): %s\n", s->native ? "native" : "padded batch", text);
  }
  if (p->used) *p->used = s->alg;
  return CAMDELTA_OK;
}

static camdelta_status fwd_enqueue(cd_call *c, cd_launch *l) {
  pk_call *s = c->op;
  const camdelta_scan_args *p = c->args;
  if (s->native) {
    const cd_scan_geo geo = packed_geo(&s->g, &s->pr);
    return cd_forward_enqueue(c->ctx, s->e, &geo, p, s->saved, l);
  }
  const camdelta_scan_args *a = &s->fa;
  const camdelta_buffer src[5] = {p->q, p->k, p->v, p->beta, p->decay}, in[5] = {a->q, a->k, a->v, a->beta, a->decay};
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  camdelta_status st = gather_inputs(c->ctx, &s->j, src, 5, in, l);
  if (!st) st = cd_forward_enqueue(c->ctx, s->e, &geo, a, s->saved, l);
  if (!st) st = scatter_outputs(c->ctx, &s->j, &p->out, 1, &a->out, l);
  return st;
}

/* A saved object of the native path holds (H, F, D, D) by packed frame, marked by S = 0 (the call's B = 1, S = 0);
 * of the padded path, the padded batch's states. */
static camdelta_status fwd_end(cd_call *c, camdelta_status st) {
  pk_call *s = c->op;
  if (s->saved && !st) cd_scan_saved_commit(s->saved, s->native ? c->args : &s->fa, s->native);
  return pk_end(c, st);
}

static const cd_entry FORWARD = {.op = "camdelta_scan_forward_packed", .second = "clips", .slots = cd_forward_slots,
                                 .nslots = CD_FWD_NSLOTS, .profile_part = 0,
                                 .profile_offset = offsetof(camdelta_scan_args, profile), .check = fwd_check,
                                 .plan = fwd_plan, .enqueue = fwd_enqueue, .end = fwd_end};

camdelta_status camdelta_scan_forward_packed(camdelta_context *ctx, const camdelta_scan_args *args,
                                             const camdelta_packed_clips *clips, camdelta_scan_saved *saved) {
  pk_call s = {.saved = saved};
  cd_call c = {.entry = &FORWARD, .ctx = ctx, .args = args, .second = clips, .saved = saved,
               .saved_ctx = saved ? saved->ctx : NULL, .op = &s};
  return cd_run_entry(&c);
}

/* -------------------------------------------------------------------------------------------- backward */

/* The native path unless the saved states are a padded forward's (S > 0: a padded batch layout); a saved object
 * checked against the path's layout. */
static camdelta_status bwd_check(cd_call *c) {
  pk_call *s = c->op;
  const camdelta_scan_backward_args *p = c->args;
  const camdelta_scan_saved *saved = c->saved;
  const char *op = c->entry->op;
  camdelta_status st = check_geometry(op, c->second, p->B, p->S, p->F, p->H, p->D, &s->g);
  if (st) return st;
  if ((st = cd_check_precision(op, p->precision))) return st;
  const pk_geo *g = &s->g;
  const size_t H = g->H, D = g->D;
  s->native = !saved || (saved->valid && saved->S == 0);
  if (s->native && saved) {
    if (saved->B != 1 || saved->H != H || saved->D != D || saved->F != g->F)
      return cd_fail(CAMDELTA_ERROR_SHAPE,
                     "%s: 'saved' is from a packed forward with H=%zu D=%zu and %zu frames, this call has H=%zu "
                     "D=%zu and %zu frames",
                     op, saved->H, saved->D, saved->F, H, D, g->F);
    st = cd_saved_matches(op, saved, p->reverse, p->init_state.mem != NULL);
    if (st) return st;
    if (!saved->state_post || saved->bytes < H * g->F * D * D * sizeof(float))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' holds no states of this shape", op);
  }
  if (!s->native) { /* the padded batch's shape, which the saved object must be of */
    camdelta_scan_backward_args *a = &s->ba;
    *a = *p;
    a->B = g->clips, a->F = g->Fm, a->S = g->Sm;
    if ((st = cd_backward_saved_check(op, a, saved))) return st;
  }
  const cd_fwd_sizes z = pk_sizes(g);
  cd_backward_set_uses(c, &z);
  return CAMDELTA_OK;
}

static camdelta_status bwd_plan(cd_call *c) {
  pk_call *s = c->op;
  const camdelta_scan_backward_args *p = c->args;
  const pk_geo *g = &s->g;
  report_path(c->ctx, c->second, s->native);
  cd_bwd_request r;
  camdelta_status st;
  if (s->native) {
    if ((st = native_start(c->ctx, g, c->second, &s->pr))) return st;
    const size_t offs[6] = {p->q.offset, p->k.offset, p->v.offset, p->beta.offset, p->grad_out.offset, p->dq.offset};
    const size_t offs2[2] = {p->dk.offset, p->dv.offset};
    r = (cd_bwd_request){.D = g->D, .prec = p->precision,
                         .vec = cd_tc_vec_ok(s->pr.vec ? 4 : 1, offs, 6) && cd_tc_vec_ok(4, offs2, 2),
                         .variant = packed_variant(&s->pr), .extra = packed_opts(&s->pr)};
  } else {
    const camdelta_packed_clips *pc = c->second;
    camdelta_buffer in[6], out[5];
    st = job_start(&s->j, c->ctx, g, pc->frame_offsets, pc->clip_offsets);
    if (!st) st = alloc_padded(c->ctx, &s->j, 6, in);
    /* dq, dk, dv, dbeta, ddecay: laid out like q, k, v, beta, decay */
    if (!st) st = alloc_padded(c->ctx, &s->j, 5, out);
    if (st) return st;
    camdelta_scan_backward_args *a = &s->ba;
    a->q = in[PK_Q], a->k = in[PK_K], a->v = in[PK_V], a->beta = in[PK_BETA], a->decay = in[PK_DECAY];
    a->grad_out = in[PK_GRAD_OUT];
    a->dq = out[PK_Q], a->dk = out[PK_K], a->dv = out[PK_V], a->dbeta = out[PK_BETA], a->ddecay = out[PK_DECAY];
    r = cd_backward_request(a);
  }
  if ((st = cd_backward_acquire(c->ctx, &r, &s->e))) return st;
  cd_backward_verbose(c->ctx, s->e, g->D, s->native ? " (packed clips, native)" : " (packed clips, padded batch)");
  return CAMDELTA_OK;
}

static camdelta_status bwd_enqueue(cd_call *c, cd_launch *l) {
  pk_call *s = c->op;
  const camdelta_scan_backward_args *p = c->args;
  if (s->native) {
    const cd_scan_geo geo = packed_geo(&s->g, &s->pr);
    return cd_backward_enqueue(c->ctx, s->e, &geo, p, c->saved, l);
  }
  const camdelta_scan_backward_args *a = &s->ba;
  const camdelta_buffer src[6] = {p->q, p->k, p->v, p->beta, p->decay, p->grad_out};
  const camdelta_buffer in[6] = {a->q, a->k, a->v, a->beta, a->decay, a->grad_out};
  const camdelta_buffer dst[5] = {p->dq, p->dk, p->dv, p->dbeta, p->ddecay};
  const camdelta_buffer out[5] = {a->dq, a->dk, a->dv, a->dbeta, a->ddecay};
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  camdelta_status st = gather_inputs(c->ctx, &s->j, src, 6, in, l);
  if (!st) st = cd_backward_enqueue(c->ctx, s->e, &geo, a, c->saved, l);
  if (!st) st = scatter_outputs(c->ctx, &s->j, dst, 5, out, l);
  return st;
}

static const cd_entry BACKWARD = {.op = "camdelta_scan_backward_packed", .second = "clips",
                                  .slots = cd_backward_slots, .nslots = CD_BWD_NSLOTS, .profile_part = 0,
                                  .profile_offset = offsetof(camdelta_scan_backward_args, profile),
                                  .check = bwd_check, .plan = bwd_plan, .enqueue = bwd_enqueue, .end = pk_end};

camdelta_status camdelta_scan_backward_packed(camdelta_context *ctx, const camdelta_scan_backward_args *args,
                                              const camdelta_packed_clips *clips, const camdelta_scan_saved *saved) {
  pk_call s = {.native = 0};
  cd_call c = {.entry = &BACKWARD, .ctx = ctx, .args = args, .second = clips, .saved = saved,
               .saved_ctx = saved ? saved->ctx : NULL, .op = &s};
  return cd_run_entry(&c);
}
