/* Packed clips (SPEC section 9, include/camdelta_packed.h): camdelta_scan_forward_packed and
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
 * through unchanged). The batch runs as one fixed-shape call — either algorithm, all clips and frames in
 * parallel, no per-clip launches — with the per-clip states (clips, H, D, D) passed straight through, and the
 * results are moved back. Cost: the copies, and the padding's work and memory when clips differ much in size
 * (a native packed path in the scan kernels would avoid both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "camdelta_packed.h"
#include "cost.h"
#include "scan_packed.h"
#include "scan_warm.h"
#include "tune.h"

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
  *g = (pk_geo){H, D, F, clips, N, Fm, Sm};
  return CAMDELTA_OK;
}

/* 1 when two state ranges of one cl_mem overlap without being the same range. */
static int overlapping_states(camdelta_buffer a, camdelta_buffer b, size_t n) {
  if (!a.mem || !b.mem || a.mem != b.mem || a.offset == b.offset) return 0;
  return a.offset < b.offset + n && b.offset < a.offset + n;
}

typedef struct pk_job {
  camdelta_context *ctx;
  pk_geo g;
  cl_kernel gather, scatter;
  cl_mem fo, co;
  cl_mem mem[16];
  int n;
  cd_launch l;
} pk_job;

static camdelta_status job_alloc(pk_job *j, size_t floats, cl_mem *out) {
  camdelta_status st = cd_alloc(j->ctx, floats * 4, out);
  if (!st) j->mem[j->n++] = *out;
  return st;
}

static void job_free(pk_job *j) {
  for (int i = 0; i < j->n; i++) clReleaseMemObject(j->mem[i]);
  if (j->fo) clReleaseMemObject(j->fo);
  if (j->co) clReleaseMemObject(j->co);
  if (j->gather) clReleaseKernel(j->gather);
  if (j->scatter) clReleaseKernel(j->scatter);
}

static camdelta_status job_start(pk_job *j, camdelta_context *ctx, const pk_geo *g, const int64_t *fo,
                                 const int64_t *co, camdelta_profile *profile) {
  memset(j, 0, sizeof *j);
  if (profile) profile->kernel_ms = 0, profile->kernels = 0;
  j->ctx = ctx, j->g = *g;
  camdelta_status st = cd_kernel(ctx, "scan_packed.cl", "", "cd_pack_gather", &j->gather);
  if (!st) st = cd_kernel(ctx, "scan_packed.cl", "", "cd_pack_scatter", &j->scatter);
  cl_int err = CL_SUCCESS;
  if (!st) j->fo = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (g->F + 1) * 8, (void *)fo, &err);
  if (!st && err == CL_SUCCESS)
    j->co = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (g->clips + 1) * 8, (void *)co, &err);
  if (!st && err != CL_SUCCESS) st = cd_cl_fail(err, "packed clips: uploading the offsets");
  cd_launch_init(&j->l, profile);
  return st;
}

/* rows R per head; per_frame: one column per frame (decay), else the frame's tokens */
static camdelta_status move(pk_job *j, int scatter, camdelta_buffer packed, cl_mem padded, size_t R, int per_frame,
                            float pad) {
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
  return cd_enqueue(j->ctx, a.kernel, 2, gws, lws, &j->l, scatter ? "cd_pack_scatter" : "cd_pack_gather");
}

static void add_profile(camdelta_profile *to, const camdelta_profile *from) {
  if (!to) return;
  to->kernel_ms += from->kernel_ms, to->kernels += from->kernels;
}

/* The moved tensors, by kind: q, k, v (and grad_out, dq, dk, dv, out) have D rows per head and a column per
 * token, beta (dbeta) one row, decay (ddecay) one row and a column per frame, padded with decay 1. */
enum { PK_Q, PK_K, PK_V, PK_BETA, PK_DECAY, PK_GRAD_OUT };

static size_t pk_rows(const pk_geo *g, int kind) { return kind == PK_BETA || kind == PK_DECAY ? 1 : g->D; }

/* Elements of a padded tensor of that kind. */
static size_t pk_padded(const pk_geo *g, int kind) {
  return g->clips * g->H * pk_rows(g, kind) * g->Fm * (kind == PK_DECAY ? 1 : g->Sm);
}

/* Gather src[kind] for kind = 0 .. n-1 into fresh padded device buffers in[kind]. */
static camdelta_status gather_inputs(pk_job *j, const camdelta_buffer *src, int n, cl_mem *in) {
  const pk_geo *g = &j->g;
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++) {
    const int per_frame = t == PK_DECAY;
    st = job_alloc(j, pk_padded(g, t), &in[t]);
    if (!st) st = move(j, 0, src[t], in[t], pk_rows(g, t), per_frame, per_frame ? 1.0f : 0.0f);
  }
  return st;
}

/* Fresh padded device buffers out[kind] for kind = 0 .. n-1. */
static camdelta_status alloc_outputs(pk_job *j, int n, cl_mem *out) {
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++) st = job_alloc(j, pk_padded(&j->g, t), &out[t]);
  return st;
}

/* Scatter the padded padded[kind] back into dst[kind] for kind = 0 .. n-1. */
static camdelta_status scatter_outputs(pk_job *j, const camdelta_buffer *dst, int n, const cl_mem *padded) {
  camdelta_status st = CAMDELTA_OK;
  for (int t = 0; t < n && !st; t++) st = move(j, 1, dst[t], padded[t], pk_rows(&j->g, t), t == PK_DECAY, 0.0f);
  return st;
}

/* The inner fixed-shape call failed: keep its message, name the packed view. */
static camdelta_status name_padded_batch(camdelta_status st, const pk_geo *g) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", camdelta_last_message());
  return cd_fail(st, "%s (packed clips, run as a padded batch of %zu clips x %zu frames x %zu tokens)", msg, g->clips,
                 g->Fm, g->Sm);
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

const char *cd_packed_opts(const cd_packed_run *pr) {
  static const char *const opts[4] = {" -DCD_PACKED=1", " -DCD_PACKED=2", " -DCD_PACKED=1 -DCD_PK_CONST=1",
                                      " -DCD_PACKED=2 -DCD_PK_CONST=1"};
  return opts[(pr->uniform ? 1 : 0) + (pr->in_const ? 2 : 0)];
}

static void report_path(const camdelta_context *ctx, const camdelta_packed_clips *pc, int native) {
  if (pc->native) *pc->native = native;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32))
    fprintf(stderr, "camdelta scan: packed clips, %s path\n", native ? "native" : "padded batch");
}

camdelta_status camdelta_scan_forward_packed(camdelta_context *ctx, const camdelta_scan_args *p,
                                             const camdelta_packed_clips *pc, camdelta_scan_saved *saved) {
  static const char op[] = "camdelta_scan_forward_packed";
  cd_clear_error();
  if (!ctx || !p || !pc)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, !ctx ? "ctx" : !p ? "args" : "clips");
  pk_geo g = {0, 0, 0, 0, 0, 0, 0};
  camdelta_status st = check_geometry(op, pc, p->B, p->S, p->F, p->H, p->D, &g);
  if (st) return st;
  const size_t H = g.H, D = g.D, tok = H * D * g.N, ns = g.clips * H * D * D;
  if ((st = cd_check_buffer(op, "q", p->q, tok, 4, 0)) || (st = cd_check_buffer(op, "k", p->k, tok, 4, 0)) ||
      (st = cd_check_buffer(op, "v", p->v, tok, 4, 0)) || (st = cd_check_buffer(op, "beta", p->beta, H * g.N, 4, 0)) ||
      (st = cd_check_buffer(op, "decay", p->decay, H * g.F, 4, 0)) ||
      (st = cd_check_buffer(op, "out", p->out, tok, 4, 0)) ||
      (st = cd_check_buffer(op, "init_state", p->init_state, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "final_state", p->final_state, ns, 4, 1)))
    return st;
  const cd_tensor_arg outs[2] = {{"out", p->out, tok, 4}, {"final_state", p->final_state, ns, 4}};
  const cd_tensor_arg ins[5] = {{"q", p->q, tok, 4},
                                {"k", p->k, tok, 4},
                                {"v", p->v, tok, 4},
                                {"beta", p->beta, H * g.N, 4},
                                {"decay", p->decay, H * g.F, 4}};
  if ((st = cd_check_no_overlap(op, outs, 2, ins, 5))) return st;
  if (overlapping_states(p->init_state, p->final_state, ns))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'final_state' partly overlaps 'init_state' (the same range, or disjoint ranges, are fine)", op);
  if (p->algorithm != CAMDELTA_SCAN_AUTO && p->algorithm != CAMDELTA_SCAN_SEQUENTIAL &&
      p->algorithm != CAMDELTA_SCAN_CHUNKWISE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: algorithm %d unknown", op, (int)p->algorithm);
  if (p->precision != CAMDELTA_PRECISION_EXACT && p->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: precision %d unknown", op, (int)p->precision);
  if (saved && saved->ctx != ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' was created for another context", op);
  if ((st = cd_prologue_scan_forward(ctx, p, saved))) return st;

  /* The algorithm: AUTO decides as for a fixed batch of clips·H chains of the mean clip's frames with the mean
   * frame's tokens. */
  camdelta_scan_algorithm alg = p->algorithm;
  if (alg == CAMDELTA_SCAN_AUTO)
    alg = cd_scan_auto_ctx(ctx, g.clips * H, D, (g.F + g.clips - 1) / g.clips, (g.N + g.F - 1) / g.F, NULL);
  report_path(ctx, pc, alg == CAMDELTA_SCAN_CHUNKWISE);
  if (alg == CAMDELTA_SCAN_CHUNKWISE) {
    cd_packed_run pr;
    if ((st = native_start(ctx, &g, pc, &pr))) return st;
    camdelta_scan_args a = *p;
    a.S = g.Sm, a.algorithm = alg;
    st = cd_scan_forward_native(ctx, &a, &pr, saved);
    clReleaseMemObject(pr.pk);
    return st;
  }

  pk_job j;
  st = job_start(&j, ctx, &g, pc->frame_offsets, pc->clip_offsets, p->profile);
  cl_mem in[5] = {NULL}, out = NULL;
  const camdelta_buffer src[5] = {p->q, p->k, p->v, p->beta, p->decay};
  if (!st) st = gather_inputs(&j, src, 5, in);
  if (!st) st = alloc_outputs(&j, 1, &out); /* laid out like q */
  camdelta_profile inner = {0, 0};
  if (!st) {
    camdelta_scan_args a = *p;
    a.B = g.clips, a.F = g.Fm, a.S = g.Sm, a.algorithm = alg;
    a.q = (camdelta_buffer){in[PK_Q], 0}, a.k = (camdelta_buffer){in[PK_K], 0}, a.v = (camdelta_buffer){in[PK_V], 0};
    a.beta = (camdelta_buffer){in[PK_BETA], 0}, a.decay = (camdelta_buffer){in[PK_DECAY], 0};
    a.out = (camdelta_buffer){out, 0};
    a.profile = p->profile ? &inner : NULL;
    st = camdelta_scan_forward(ctx, &a, saved);
    if (st) st = name_padded_batch(st, &g);
  }
  if (!st) st = scatter_outputs(&j, &p->out, 1, &out);
  st = cd_launch_end(ctx, &j.l, st);
  if (!st) add_profile(p->profile, &inner);
  job_free(&j);
  return st;
}

camdelta_status camdelta_scan_backward_packed(camdelta_context *ctx, const camdelta_scan_backward_args *p,
                                              const camdelta_packed_clips *pc, const camdelta_scan_saved *saved) {
  static const char op[] = "camdelta_scan_backward_packed";
  cd_clear_error();
  if (!ctx || !p || !pc)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", op, !ctx ? "ctx" : !p ? "args" : "clips");
  pk_geo g = {0, 0, 0, 0, 0, 0, 0};
  camdelta_status st = check_geometry(op, pc, p->B, p->S, p->F, p->H, p->D, &g);
  if (st) return st;
  const size_t H = g.H, D = g.D, tok = H * D * g.N, ns = g.clips * H * D * D, nb = H * g.N, nd = H * g.F;
  if ((st = cd_check_buffer(op, "q", p->q, tok, 4, 0)) || (st = cd_check_buffer(op, "k", p->k, tok, 4, 0)) ||
      (st = cd_check_buffer(op, "v", p->v, tok, 4, 0)) || (st = cd_check_buffer(op, "beta", p->beta, nb, 4, 0)) ||
      (st = cd_check_buffer(op, "decay", p->decay, nd, 4, 0)) ||
      (st = cd_check_buffer(op, "grad_out", p->grad_out, tok, 4, 0)) ||
      (st = cd_check_buffer(op, "init_state", p->init_state, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "grad_final_state", p->grad_final_state, ns, 4, 1)) ||
      (st = cd_check_buffer(op, "dq", p->dq, tok, 4, 0)) || (st = cd_check_buffer(op, "dk", p->dk, tok, 4, 0)) ||
      (st = cd_check_buffer(op, "dv", p->dv, tok, 4, 0)) || (st = cd_check_buffer(op, "dbeta", p->dbeta, nb, 4, 0)) ||
      (st = cd_check_buffer(op, "ddecay", p->ddecay, nd, 4, 0)) ||
      (st = cd_check_buffer(op, "dinit_state", p->dinit_state, ns, 4, 1)))
    return st;
  const cd_tensor_arg outs[6] = {{"dq", p->dq, tok, 4},        {"dk", p->dk, tok, 4},
                                 {"dv", p->dv, tok, 4},        {"dbeta", p->dbeta, nb, 4},
                                 {"ddecay", p->ddecay, nd, 4}, {"dinit_state", p->dinit_state, ns, 4}};
  const cd_tensor_arg ins[8] = {{"q", p->q, tok, 4},
                                {"k", p->k, tok, 4},
                                {"v", p->v, tok, 4},
                                {"beta", p->beta, nb, 4},
                                {"decay", p->decay, nd, 4},
                                {"grad_out", p->grad_out, tok, 4},
                                {"init_state", p->init_state, ns, 4},
                                {"grad_final_state", p->grad_final_state, ns, 4}};
  if ((st = cd_check_no_overlap(op, outs, 6, ins, 8))) return st;
  if (p->precision != CAMDELTA_PRECISION_EXACT && p->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: precision %d unknown", op, (int)p->precision);
  if (saved && saved->ctx != ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' was created for another context", op);
  if ((st = cd_prologue_scan_backward(ctx, p, saved))) return st;

  /* Native unless the saved states are a padded forward's (S > 0: a padded batch layout). */
  const int native = !saved || (saved->valid && saved->S == 0);
  report_path(ctx, pc, native);
  if (native) {
    if (saved) {
      if (saved->B != 1 || saved->H != H || saved->D != D || saved->F != g.F)
        return cd_fail(CAMDELTA_ERROR_SHAPE,
                       "%s: 'saved' is from a packed forward with H=%zu D=%zu and %zu frames, this call has H=%zu "
                       "D=%zu and %zu frames",
                       op, saved->H, saved->D, saved->F, H, D, g.F);
      if ((saved->reverse != 0) != (p->reverse != 0))
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a %s forward, this call has reverse=%d",
                       op, saved->reverse ? "reverse" : "causal", p->reverse != 0);
      if ((saved->has_init != 0) != (p->init_state.mem != NULL))
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                       "%s: 'saved' is from a forward %s an init_state, this call %s one (pass the same init_state)",
                       op, saved->has_init ? "with" : "without", p->init_state.mem ? "has" : "has no");
      if (!saved->state_post || saved->bytes < H * g.F * D * D * sizeof(float))
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' holds no states of this shape", op);
    }
    cd_packed_run pr;
    if ((st = native_start(ctx, &g, pc, &pr))) return st;
    camdelta_scan_backward_args a = *p;
    a.S = g.Sm;
    st = cd_scan_backward_native(ctx, &a, &pr, saved);
    clReleaseMemObject(pr.pk);
    return st;
  }

  pk_job j;
  st = job_start(&j, ctx, &g, pc->frame_offsets, pc->clip_offsets, p->profile);
  cl_mem in[6] = {NULL}, outm[5] = {NULL};
  const camdelta_buffer src[6] = {p->q, p->k, p->v, p->beta, p->decay, p->grad_out};
  if (!st) st = gather_inputs(&j, src, 6, in);
  if (!st) st = alloc_outputs(&j, 5, outm); /* dq, dk, dv, dbeta, ddecay: laid out like q, k, v, beta, decay */
  camdelta_profile inner = {0, 0};
  if (!st) {
    camdelta_scan_backward_args a = *p;
    a.B = g.clips, a.F = g.Fm, a.S = g.Sm;
    a.q = (camdelta_buffer){in[PK_Q], 0}, a.k = (camdelta_buffer){in[PK_K], 0}, a.v = (camdelta_buffer){in[PK_V], 0};
    a.beta = (camdelta_buffer){in[PK_BETA], 0}, a.decay = (camdelta_buffer){in[PK_DECAY], 0};
    a.grad_out = (camdelta_buffer){in[PK_GRAD_OUT], 0};
    a.dq = (camdelta_buffer){outm[PK_Q], 0}, a.dk = (camdelta_buffer){outm[PK_K], 0};
    a.dv = (camdelta_buffer){outm[PK_V], 0};
    a.dbeta = (camdelta_buffer){outm[PK_BETA], 0}, a.ddecay = (camdelta_buffer){outm[PK_DECAY], 0};
    a.profile = p->profile ? &inner : NULL;
    st = camdelta_scan_backward(ctx, &a, saved);
    if (st) st = name_padded_batch(st, &g);
  }
  const camdelta_buffer dst[5] = {p->dq, p->dk, p->dv, p->dbeta, p->ddecay};
  if (!st) st = scatter_outputs(&j, dst, 5, outm);
  st = cd_launch_end(ctx, &j.l, st);
  if (!st) add_profile(p->profile, &inner);
  job_free(&j);
  return st;
}
