/* Prep backward (docs/math.md §4): argument checks and the launches of cl/prep_backward.cl.
 *
 *   [cd_prep_inv_rms  the inverse RMS per token, when no saved object from the forward is given]
 *   cd_prep_bwd_heads    per (b, tile of tokens, h), like the forward: dv_raw, u = da inv_rms w, and fixed-order
 *                        per-head partials of the RMSNorm sums, the norm weights, dproj_q/kv and the RoPE tables
 *   cd_prep_bwd_tokens   per (b, tile of tokens): sums over heads, dq_raw and dk_raw (the full-channel RMSNorm
 *                        backward), dproj_q/kv, the RoPE-table partials per b
 *   cd_prep_bwd_reduce   the norm-weight gradients (over token tiles) and RoPE-table gradients (over b)
 * CPU devices run one kernel instead of the first two, cl/prep_cpu.cl's cd_prep_bwd_cpu (option prep_backward FORM=2),
 * unless the driver has a loop budget: there, and for GPU calls that ask for dproj_q/dproj_kv/drope_cos/drope_sin,
 * the three-kernel form runs; GPUs take the two-pass form of prep_backward_fused.c otherwise (option prep_backward
 * FORM forces any of them).
 *
 * Deterministic: every sum has a fixed order; no atomics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/backward.h"
#include "runtime/internal.h"
#include "ops/prep_backward_fused.h"
#include "ops/prep_common.h"
#include "scan/engine.h"

static const char OP[] = "camdelta_prep_backward";

/* flags of cl/prep_backward.cl */
enum {
  PB_HAS_GQ = 1,
  PB_HAS_GK = 2,
  PB_HAS_GV = 4,
  PB_HAS_GI = 8,
  PB_WANT_PQ = 16,
  PB_WANT_ROPE = 32,
  PB_WANT_PKV = 64,
  PB_WANT_COS = 128,
  PB_WANT_SIN = 256,
  PB_HAS_G2 = 512 /* the CPU form: second K and V gradients, added as they are read */
};

enum { PB_TT = 16 }; /* CD_TT of cl/prep_backward.cl: tokens per work-group of cd_prep_bwd_tokens */

typedef struct pb_kernels {
  cl_kernel heads, tokens, reduce;
  size_t ts; /* tokens per work-group of the heads kernel */
} pb_kernels;

static void release_kernels(pb_kernels *k) {
  if (k->heads) clReleaseKernel(k->heads);
  if (k->tokens) clReleaseKernel(k->tokens);
  if (k->reduce) clReleaseKernel(k->reduce);
  k->heads = k->tokens = k->reduce = NULL;
}

/* The per-head kernel with the largest token tile the device allows (as the forward picks it), and the other two
 * kernels of the same program. */
static camdelta_status build_kernels(camdelta_context *ctx, camdelta_dtype dtype, size_t D, pb_kernels *k) {
  memset(k, 0, sizeof *k);
  camdelta_status st = cd_prep_kernel(ctx, "prep_backward.cl", "cd_prep_bwd_heads", dtype, D, &k->heads, &k->ts);
  if (st) return st;
  char opts[160], dt[40];
  snprintf(opts, sizeof opts, "%s -DCD_D=%zu -DCD_TS=%zu", cd_dtype_opts(dtype, dt), D, k->ts);
  if ((st = cd_kernel(ctx, "prep_backward.cl", opts, "cd_prep_bwd_tokens", &k->tokens)) ||
      (st = cd_kernel(ctx, "prep_backward.cl", opts, "cd_prep_bwd_reduce", &k->reduce)))
    release_kernels(k);
  return st;
}

int cd_prep_backward_cpu_form(camdelta_context *ctx, camdelta_dtype dtype) {
  /* one work-item walks every head of its blocks in one launch: a driver with a loop budget (cd_loop_budget) would
   * end its loops early */
  return cd_option(ctx, CD_OPT_PREP_BWD_FORM, dtype) == 2 && !cd_loop_budget(ctx);
}

/* The CPU form (cl/prep_cpu.cl cd_prep_bwd_cpu) where the context runs it, with its blocks of 8 tokens per work-item:
 * returns 1 and fills *k and *pb, else 0 (a build failure sets *st). Its local memory per block: the inverse RMS (2),
 * camera matrices (32), RoPE tables (D), dproj sums (32) and RoPE-table sums (D) as float8, sized for the largest head
 * dim (D is an argument: one program serves every head dim, the prep forward's CPU form's on PoCL). */
static int cpu_kernel(camdelta_context *ctx, camdelta_dtype dtype, cl_kernel *k, unsigned *pb, camdelta_status *st) {
  *st = CAMDELTA_OK;
  *k = NULL;
  if (!cd_prep_backward_cpu_form(ctx, dtype)) return 0;
  *pb = cd_option(ctx, CD_OPT_PREP_BWD_PB, dtype);
  while (*pb > 1 && (uint64_t)*pb * (66 + 2 * CAMDELTA_MAX_HEAD_DIM) * 32 > ctx->info.local_mem_bytes) *pb /= 2;
  char opts[120], dt[40];
  snprintf(opts, sizeof opts, "%s -DCD_DMAX=%d -DCD_PB=%u", cd_dtype_opts(dtype, dt), CAMDELTA_MAX_HEAD_DIM, *pb);
  return (*st = cd_kernel(ctx, "prep_cpu.cl", opts, "cd_prep_bwd_cpu", k)) ? 0 : 1;
}

camdelta_status cd_prep_backward_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D) {
  camdelta_status st = cd_check_dtype(OP, dtype);
  if (!st) st = cd_check_head_dim(OP, D);
  if (st) return st;
  pb_kernels k;
  if ((st = build_kernels(ctx, dtype, D, &k))) return st;
  release_kernels(&k);
  cl_kernel ck;
  unsigned pb;
  if (cpu_kernel(ctx, dtype, &ck, &pb, &st)) clReleaseKernel(ck);
  if (st) return st;
  /* the fused form too where the context uses it (calls without dproj/drope), in f32 also the camera branch's
   * variant with second K and V gradients */
  cd_pbf_plan p;
  if (cd_pbf_kernels(ctx, dtype, D, 0, CD_PBF_P1_RAW, &p, &st)) cd_pbf_release(&p);
  if (!st && dtype == CAMDELTA_F32 && cd_pbf_kernels(ctx, dtype, D, 1, CD_PBF_P1_RAW, &p, &st)) cd_pbf_release(&p);
  return st;
}

enum { PB_GRAD_Q = CD_PREP_INPUTS, PB_GRAD_K, PB_GRAD_V, PB_GRAD_INFLATION_SQ, PB_DQ_RAW, PB_DK_RAW, PB_DV_RAW,
       PB_DQ_NORM_WEIGHT, PB_DK_NORM_WEIGHT, PB_DPROJ_Q, PB_DPROJ_KV, PB_DROPE_COS, PB_DROPE_SIN, PB_Q, PB_K,
       PB_INFLATION_SQ, PB_SLOTS };
#define PB_SLOT(field, role) CD_SLOT(camdelta_prep_backward_args, field, role)
static const cd_slot PB_SLOTS_[PB_SLOTS] = {
    CD_PREP_INPUT_SLOTS(camdelta_prep_backward_args),
    [PB_GRAD_Q] = PB_SLOT(grad_q, CD_IN), [PB_GRAD_K] = PB_SLOT(grad_k, CD_IN), [PB_GRAD_V] = PB_SLOT(grad_v, CD_IN),
    [PB_GRAD_INFLATION_SQ] = PB_SLOT(grad_inflation_sq, CD_IN),
    [PB_DQ_RAW] = PB_SLOT(dq_raw, CD_OUT), [PB_DK_RAW] = PB_SLOT(dk_raw, CD_OUT), [PB_DV_RAW] = PB_SLOT(dv_raw, CD_OUT),
    [PB_DQ_NORM_WEIGHT] = PB_SLOT(dq_norm_weight, CD_OUT), [PB_DK_NORM_WEIGHT] = PB_SLOT(dk_norm_weight, CD_OUT),
    [PB_DPROJ_Q] = PB_SLOT(dproj_q, CD_OUT), [PB_DPROJ_KV] = PB_SLOT(dproj_kv, CD_OUT),
    [PB_DROPE_COS] = PB_SLOT(drope_cos, CD_OUT), [PB_DROPE_SIN] = PB_SLOT(drope_sin, CD_OUT),
    [PB_Q] = PB_SLOT(q, CD_IN), [PB_K] = PB_SLOT(k, CD_IN), [PB_INFLATION_SQ] = PB_SLOT(inflation_sq, CD_IN)};

/* scratch of the three-kernel form: RMSNorm sums per head ps (2, B, N, H), norm-weight partials pw (2, slots, C),
 * dproj partials pp (B, N, H, 32), RoPE partials per head prh (2, B, N, H, Dh) and per b pr (2, B, N, Dh),
 * u = da inv_rms w for 16-bit storage uq, uk (B, N, H, D) f32 (f32 keeps u in dq_raw, dk_raw), inverse RMS (2, B, N) */
enum { PS, PW, PP, PRH, PR, UQ, UK, INV, NSCR };

typedef struct pb_call {
  const camdelta_prep_saved *saved;
  const camdelta_buffer *g2; /* cd_prep_backward_g2's second K and V gradients, or NULL */
  int scan_f32;              /* the (B, H, D, N) side in f32 whatever the dtype (cd_prep_backward_split) */
  unsigned flags;            /* of cl/prep_backward.cl */
  int fused;                 /* the two-pass form (p), else the three-kernel form (k, scr) */
  cd_pbf_plan p;
  pb_kernels k;              /* the CPU form uses k.reduce */
  cl_kernel cpu;             /* the CPU form (with k.reduce and scr), or NULL */
  unsigned pb;               /* its blocks of 8 tokens per work-item */
  cl_mem scr[NSCR];
} pb_call;

static camdelta_status pb_check(cd_call *c) {
  const camdelta_prep_backward_args *a = c->args;
  const pb_call *s = c->op;
  const camdelta_prep_saved *saved = s->saved;
  const size_t B = a->B, N = a->N, H = a->H, D = a->D;
  camdelta_status st = cd_prep_check_shape(OP, B, N, H, D, a->dtype, a->k_scale, a->norm_eps);
  if (st) return st;
  const camdelta_dtype dtype = cd_store_code(a->dtype, s->scan_f32);
  if (B > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: B=%zu exceeds 2^32-1", OP, B);
  {
    /* the largest scratch buffers: dproj partials (B, N, H, 32) and norm-weight partials (2, B * tiles, C) with
     * tiles <= N, both in bytes (the shape check bounds B*N*H*D*4 only) */
    const size_t fp[5] = {B, N, H, 32, sizeof(float)}, fw[6] = {2, B, N, H, D, sizeof(float)};
    size_t pp, pw;
    if (!cd_prod(&pp, 5, fp) || !cd_prod(&pw, 6, fw))
      return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B=%zu N=%zu H=%zu D=%zu: the scratch sizes overflow size_t", OP,
                     B, N, H, D);
  }
  const size_t es = camdelta_dtype_size(a->dtype), ses = cd_scan_es(dtype), BNHD = B * N * H * D, C = H * D,
               Dh = D / 2;
  const int need_v = (a->dproj_kv.mem || a->drope_cos.mem || a->drope_sin.mem) && a->grad_v.mem;
  cd_prep_use_inputs(c, B, N, H, D, a->dtype, need_v);
  const cd_use tokens = {.need = CD_OPTIONAL, .elems = BNHD, .es = ses}; /* the (B, H, D, N) side */
  const cd_use per_head = {.need = CD_OPTIONAL, .elems = B * H * N, .es = 4};
  const cd_use weights = {.need = CD_REQUIRED, .elems = C, .es = 4};
  const cd_use proj = {.need = CD_OPTIONAL, .elems = B * N * 16, .es = 4};
  const cd_use rope = {.need = CD_OPTIONAL, .elems = N * Dh, .es = 4};
  c->use[PB_GRAD_Q] = c->use[PB_GRAD_K] = c->use[PB_GRAD_V] = tokens;
  c->use[PB_GRAD_INFLATION_SQ] = per_head;
  c->use[PB_DQ_RAW] = c->use[PB_DK_RAW] = c->use[PB_DV_RAW] = (cd_use){.need = CD_REQUIRED, .elems = BNHD, .es = es};
  c->use[PB_DQ_NORM_WEIGHT] = c->use[PB_DK_NORM_WEIGHT] = weights;
  c->use[PB_DPROJ_Q] = c->use[PB_DPROJ_KV] = proj;
  c->use[PB_DROPE_COS] = c->use[PB_DROPE_SIN] = rope;
  c->use[PB_Q] = c->use[PB_K] = tokens;
  c->use[PB_INFLATION_SQ] = per_head;
  {
    /* the forward's outputs: all three or none */
    static const char *const fo[3] = {"q", "k", "inflation_sq"};
    const int has[3] = {a->q.mem != NULL, a->k.mem != NULL, a->inflation_sq.mem != NULL};
    if (has[0] + has[1] + has[2] == 1 || has[0] + has[1] + has[2] == 2) {
      const int given = has[0] ? 0 : has[1] ? 1 : 2, missing = !has[0] ? 0 : !has[1] ? 1 : 2;
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                     "%s: '%s' is given without '%s' (the forward's outputs q, k and inflation_sq come together, or "
                     "not at all)",
                     OP, fo[given], fo[missing]);
    }
  }
  if (saved) {
    if (!saved->valid || !saved->inv_rms)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                     "%s: 'saved' holds nothing (pass it to camdelta_prep_forward first, or pass NULL)", OP);
    if (saved->B != B || saved->N != N || saved->H != H || saved->D != D)
      return cd_fail(CAMDELTA_ERROR_SHAPE,
                     "%s: 'saved' is from a forward with B=%zu N=%zu H=%zu D=%zu, this call has B=%zu N=%zu H=%zu "
                     "D=%zu",
                     OP, saved->B, saved->N, saved->H, saved->D, B, N, H, D);
    camdelta_buffer inv = {saved->inv_rms, 0};
    if ((st = cd_check_buffer(OP, "saved->inv_rms", inv, 2 * B * N, 4, 0))) return st;
  }
  if (s->g2) {
    const camdelta_buffer *g2 = s->g2;
    if (ses != 4) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: second gradients need f32 storage", OP);
    if (!a->grad_k.mem || !a->grad_v.mem)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: second gradients need grad_k and grad_v", OP);
    const cd_tensor_arg in[2] = {{"grad_k2", g2[0], BNHD, 4}, {"grad_v2", g2[1], BNHD, 4}};
    const cd_tensor_arg out[3] = {{"dq_raw", a->dq_raw, BNHD, es}, {"dk_raw", a->dk_raw, BNHD, es},
                                  {"dv_raw", a->dv_raw, BNHD, es}};
    for (int i = 0; i < 2 && !st; i++) st = cd_check_buffer(OP, in[i].name, in[i].b, BNHD, 4, 0);
    if (!st) st = cd_check_no_overlap(OP, out, 3, in, 2);
    if (st) return st;
  }
  return CAMDELTA_OK;
}

/* grad_k += g2[0], grad_v += g2[1] in place (the three-kernel form's way to take two gradients), on l */
static camdelta_status add_g2(camdelta_context *ctx, const camdelta_prep_backward_args *a, const camdelta_buffer *g2,
                              cd_launch *l) {
  cl_kernel k = NULL;
  camdelta_status st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_add", &k);
  const uint64_t n = (uint64_t)a->B * a->H * a->D * a->N;
  for (int i = 0; i < 2 && !st; i++)
    st = cd_pair_add_enqueue(ctx, k, i ? a->grad_v : a->grad_k, g2[i], n, l,
                             "cd_pair_add (prep backward's second gradients)");
  if (k) clReleaseKernel(k);
  return st;
}

/* The rows of norm-weight partials: one per work-group of tokens (the CPU form's blocks, else the heads kernel's
 * tiles) per batch row. */
static size_t pb_slots(const pb_call *s, size_t B, size_t N) {
  const size_t ts = s->cpu ? 8 * (size_t)s->pb : s->k.ts;
  return B * ((N + ts - 1) / ts);
}

static camdelta_status pb_plan(cd_call *c) {
  const camdelta_prep_backward_args *args = c->args;
  pb_call *s = c->op;
  camdelta_context *ctx = c->ctx;
  const size_t B = args->B, N = args->N, H = args->H, D = args->D, C = H * D, Dh = D / 2;
  const camdelta_dtype dtype = cd_store_code(args->dtype, s->scan_f32);
  const int want_rope = args->drope_cos.mem || args->drope_sin.mem;
  s->flags = (args->grad_q.mem ? PB_HAS_GQ : 0) | (args->grad_k.mem ? PB_HAS_GK : 0) |
             (args->grad_v.mem ? PB_HAS_GV : 0) | (args->grad_inflation_sq.mem ? PB_HAS_GI : 0) |
             (args->dproj_q.mem ? PB_WANT_PQ : 0) | (args->dproj_kv.mem ? PB_WANT_PKV : 0) |
             (want_rope ? PB_WANT_ROPE : 0) | (args->drope_cos.mem ? PB_WANT_COS : 0) |
             (args->drope_sin.mem ? PB_WANT_SIN : 0);
  camdelta_status st = CAMDELTA_OK;
  if (s->g2) s->flags |= PB_HAS_G2;
  if (!cpu_kernel(ctx, dtype, &s->cpu, &s->pb, &st) && st) return st;
  /* The two-pass form (GPUs, see prep_backward_fused.c) when no dproj/drope is asked for. */
  if (!s->cpu && !(s->flags & (PB_WANT_PQ | PB_WANT_PKV | PB_WANT_ROPE))) {
    s->fused = cd_pbf_kernels(ctx, dtype, D, s->g2 != NULL, cd_pbf_pass1_of(args, s->saved, s->g2), &s->p, &st);
    if (st) return st;
    if (s->fused) {
      cd_pbf_shape(ctx, B, N, H, D, &s->p);
      return CAMDELTA_OK;
    }
  }
  /* The three-kernel form (the CPU form: its reduce kernel), with the programs of the inverse RMS (without saved) and
   * of the second gradients' add (not the CPU form: it adds them as it reads them) */
  if ((st = build_kernels(ctx, dtype, D, &s->k))) return st;
  cl_program prog;
  if (!s->saved && (st = cd_prep_inv_rms_warm(ctx, args->dtype))) return st;
  if (s->g2 && !s->cpu && (st = cd_program(ctx, "scan_pair.cl", "-DCD_D=8", &prog))) return st;
  const int cpu = s->cpu != NULL;
  const size_t slots = pb_slots(s, B, N);
  const int want_proj = args->dproj_q.mem || args->dproj_kv.mem, f32 = args->dtype == CAMDELTA_F32;
  const size_t bytes[NSCR] = {cpu ? 0 : 2 * B * N * H * sizeof(float),
                              2 * slots * C * sizeof(float),
                              want_proj && !cpu ? B * N * H * 32 * sizeof(float) : 0,
                              want_rope && !cpu ? 2 * B * N * H * Dh * sizeof(float) : 0,
                              want_rope ? 2 * B * N * Dh * sizeof(float) : 0,
                              f32 ? 0 : B * N * C * sizeof(float),
                              f32 ? 0 : B * N * C * sizeof(float),
                              s->saved ? 0 : 2 * B * N * sizeof(float)};
  for (int i = 0; i < NSCR && !st; i++)
    if (bytes[i]) st = cd_alloc(ctx, bytes[i], &s->scr[i]);
  return st;
}

/* cd_prep_bwd_reduce: the norm-weight gradients from their partials (2, slots, C), the RoPE tables' from their
 * per-b partials (2, B, N, Dh). */
static camdelta_status enqueue_reduce(camdelta_context *ctx, const camdelta_prep_backward_args *args, const pb_call *s,
                                      const camdelta_buffer *bs, cd_launch *l) {
  const size_t C = args->H * args->D, N = args->N, Dh = args->D / 2, slots = pb_slots(s, args->B, N);
  const int want_rope = (s->flags & PB_WANT_ROPE) != 0;
  const camdelta_buffer dummy = bs[PW];
#define OPT(x) ((x).mem ? (x) : dummy)
  /* local (W, R): W columns by R lanes, powers of two up to 32 each within the kernel's limit */
  const size_t lmax = cd_kernel_max_wg(ctx, s->k.reduce);
  size_t lws[2] = {1, 1};
  while (lws[0] * 2 <= 32 && lws[0] * 2 <= lmax) lws[0] *= 2;
  while (lws[1] * 2 <= 32 && lws[0] * lws[1] * 2 <= lmax) lws[1] *= 2;
  const size_t nwb = (2 * C + lws[0] - 1) / lws[0];
  const size_t nrb = want_rope ? (2 * N * Dh + lws[0] * lws[1] - 1) / (lws[0] * lws[1]) : 0;
  cd_args a = {s->k.reduce, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, bs[PW], bs[PR], args->dq_norm_weight, args->dk_norm_weight, OPT(args->drope_cos),
              OPT(args->drope_sin));
#undef OPT
  cd_arg_u32(&a, (uint32_t)C);
  cd_arg_u64(&a, slots);
  cd_arg_u32(&a, (uint32_t)args->B);
  cd_arg_u64(&a, N * Dh);
  cd_arg_u32(&a, (uint32_t)nwb);
  cd_arg_u32(&a, s->flags);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_prep_bwd_reduce: setting arguments");
  const size_t gws[2] = {(nwb + nrb) * lws[0], lws[1]};
  return cd_enqueue(ctx, s->k.reduce, 2, gws, lws, l, "cd_prep_bwd_reduce");
}

/* The CPU form's one pass (cl/prep_cpu.cl cd_prep_bwd_cpu): one work-item per pb blocks of 8 tokens of a batch row. */
static camdelta_status enqueue_cpu(camdelta_context *ctx, const camdelta_prep_backward_args *args, const pb_call *s,
                                   const camdelta_buffer *bs, camdelta_buffer binv, cd_launch *l) {
  const camdelta_buffer dummy = bs[PW];
#define OPT(x) ((x).mem ? (x) : dummy)
  cd_args a = {s->cpu, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, args->q_raw, args->k_raw, OPT(args->v_raw), args->q_norm_weight, args->k_norm_weight, args->proj_q,
              args->proj_kv, args->rope_cos, args->rope_sin, binv, OPT(args->grad_q), OPT(args->grad_k),
              OPT(args->grad_v), OPT(args->grad_inflation_sq), s->g2 ? s->g2[0] : dummy, s->g2 ? s->g2[1] : dummy,
              args->dq_raw, args->dk_raw, args->dv_raw, bs[UQ], bs[UK], bs[PW], bs[PR], OPT(args->dproj_q),
              OPT(args->dproj_kv));
#undef OPT
  cd_arg_u64(&a, args->N);
  cd_arg_u32(&a, (uint32_t)args->H);
  cd_arg_f32(&a, args->k_scale);
  cd_arg_u32(&a, s->flags);
  cd_arg_u32(&a, (uint32_t)args->D);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_prep_bwd_cpu: setting arguments");
  const size_t one = 1, gws = pb_slots(s, args->B, args->N);
  return cd_enqueue(ctx, s->cpu, 1, &gws, &one, l, "cd_prep_bwd_cpu");
}

static camdelta_status pb_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_prep_backward_args *args = c->args;
  const pb_call *s = c->op;
  camdelta_context *ctx = c->ctx;
  if (s->fused) return cd_pbf_run(ctx, args, s->saved, s->g2, &s->p, l);
  const camdelta_prep_saved *saved = s->saved;
  const size_t B = args->B, N = args->N, H = args->H, D = args->D;
  const unsigned flags = s->flags;
  const size_t ts = s->k.ts, ntiles = (N + ts - 1) / ts;
  /* absent optional tensors and unused scratch: a valid buffer that is never read or written */
  const camdelta_buffer dummy = {s->scr[PW], 0};
  camdelta_buffer bs[NSCR];
  for (int i = 0; i < NSCR; i++) bs[i] = s->scr[i] ? (camdelta_buffer){s->scr[i], 0} : dummy;
  const camdelta_buffer binv = saved ? (camdelta_buffer){saved->inv_rms, 0} : bs[INV];
#define OPT(x) ((x).mem ? (x) : dummy)
  camdelta_status st = CAMDELTA_OK;
  if (s->g2 && !s->cpu) st = add_g2(ctx, args, s->g2, l);
  if (!saved && !st)
    st = cd_prep_inv_rms(ctx, B, N, H, D, args->dtype, args->norm_eps, args->q_raw, args->k_raw, s->scr[INV], l);
  if (s->cpu) {
    if (!st) st = enqueue_cpu(ctx, args, s, bs, binv, l);
    if (!st) st = enqueue_reduce(ctx, args, s, bs, l);
    return st;
  }
  if (!st) {
    cd_args a = {s->k.heads, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, args->q_raw, args->k_raw, OPT(args->v_raw), args->q_norm_weight, args->k_norm_weight, args->proj_q,
                args->proj_kv, args->rope_cos, args->rope_sin, binv, OPT(args->grad_q), OPT(args->grad_k),
                OPT(args->grad_v), OPT(args->grad_inflation_sq), args->dq_raw, args->dk_raw, args->dv_raw, bs[UQ],
                bs[UK], bs[PS], bs[PW], bs[PP], bs[PRH]);
    cd_arg_u64(&a, N);
    cd_arg_u32(&a, (uint32_t)H);
    cd_arg_f32(&a, args->k_scale);
    cd_arg_u32(&a, flags);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_prep_bwd_heads: setting arguments");
    const size_t lws[3] = {ts * (D / 4), 1, 1}, gws[3] = {ntiles * lws[0], H, B};
    if (!st) st = cd_enqueue(ctx, s->k.heads, 3, gws, lws, l, "cd_prep_bwd_heads");
  }
  if (!st) {
    cd_args a = {s->k.tokens, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, args->q_raw, args->k_raw, args->q_norm_weight, args->k_norm_weight, binv, args->dq_raw,
                args->dk_raw, bs[UQ], bs[UK], bs[PS], bs[PP], bs[PRH], bs[PR], OPT(args->dproj_q), OPT(args->dproj_kv));
    cd_arg_u64(&a, N);
    cd_arg_u32(&a, (uint32_t)H);
    cd_arg_u32(&a, flags);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_prep_bwd_tokens: setting arguments");
    /* a power of two up to 256 work-items, within the kernel's limit */
    size_t lws[2] = {1, 1};
    const size_t lmax = cd_kernel_max_wg(ctx, s->k.tokens);
    while (lws[0] * 2 <= 256 && lws[0] * 2 <= lmax) lws[0] *= 2;
    const size_t gws[2] = {(N + PB_TT - 1) / PB_TT * lws[0], B};
    if (!st) st = cd_enqueue(ctx, s->k.tokens, 2, gws, lws, l, "cd_prep_bwd_tokens");
  }
  if (!st) st = enqueue_reduce(ctx, args, s, bs, l);
#undef OPT
  return st;
}

static camdelta_status pb_end(cd_call *c, camdelta_status st) {
  pb_call *s = c->op;
  if (s->fused) cd_pbf_release(&s->p);
  /* Released buffers live on until the enqueued kernels that use them have finished. */
  for (int i = 0; i < NSCR; i++)
    if (s->scr[i]) clReleaseMemObject(s->scr[i]);
  release_kernels(&s->k);
  if (s->cpu) clReleaseKernel(s->cpu);
  return st;
}

static const cd_entry PREP_BACKWARD =
    CD_ENTRY(OP, camdelta_prep_backward_args, PB_SLOTS_, pb_check, pb_plan, pb_enqueue, pb_end);

static camdelta_status run(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                           const camdelta_prep_saved *saved, const camdelta_buffer *g2, int scan_f32) {
  pb_call s = {.saved = saved, .g2 = g2, .scan_f32 = scan_f32, .flags = 0, .fused = 0, .scr = {NULL}};
  cd_call c = {.entry = &PREP_BACKWARD, .ctx = ctx, .args = args, .saved = saved,
               .saved_ctx = saved ? saved->ctx : NULL, .op = &s};
  return cd_run_entry(&c);
}
camdelta_status camdelta_prep_backward(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                       const camdelta_prep_saved *saved) {
  return run(ctx, args, saved, NULL, 0);
}

camdelta_status cd_prep_backward_split(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                       const camdelta_prep_saved *saved, const camdelta_buffer *g2) {
  return run(ctx, args, saved, g2, 1);
}

camdelta_status cd_prep_backward_g2(camdelta_context *ctx, const camdelta_prep_backward_args *args,
                                    const camdelta_prep_saved *saved, camdelta_buffer grad_k2,
                                    camdelta_buffer grad_v2) {
  const camdelta_buffer g2[2] = {grad_k2, grad_v2};
  return run(ctx, args, saved, g2, 0);
}
