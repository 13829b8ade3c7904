/* Prep forward: argument checks, the saved object, and the two launches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "ops/prep_common.h"

camdelta_status camdelta_prep_saved_create(camdelta_context *ctx, camdelta_prep_saved **out) {
  CD_CREATE_OBJECT("camdelta_prep_saved_create", ctx, out);
}

void camdelta_prep_saved_destroy(camdelta_prep_saved *saved) {
  if (!saved) return;
  if (saved->inv_rms) clReleaseMemObject(saved->inv_rms);
  free(saved);
}

camdelta_status cd_prep_check_shape(const char *op, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype,
                                    float k_scale, float norm_eps) {
  camdelta_status st = cd_check_dtype(op, dtype);
  if (st) return st;
  st = cd_check_head_dim(op, D);
  if (st) return st;
  if (B == 0 || N == 0 || H == 0)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, N=%zu, H=%zu: each must be at least 1", op, B, N, H);
  size_t dims[4] = {B, N, H, D}, total;
  if (!cd_prod(&total, 4, dims) || total > SIZE_MAX / 4)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D = %zu*%zu*%zu*%zu overflows size_t", op, B, N, H, D);
  if (N > UINT32_MAX || H * D > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: N=%zu or C=%zu exceeds 2^32-1", op, N, H * D);
  if (!isfinite(k_scale))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: k_scale must be finite (got %g)", op, (double)k_scale);
  if (!isfinite(norm_eps) || norm_eps < 0)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: norm_eps must be finite and >= 0 (got %g)", op,
                   (double)norm_eps);
  return CAMDELTA_OK;
}

void cd_prep_use_inputs(cd_call *c, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype, int need_v) {
  const size_t es = camdelta_dtype_size(dtype), BNHD = B * N * H * D;
  const size_t counts[CD_PREP_INPUTS] = {BNHD,       BNHD,       BNHD,        H * D,      H * D,
                                         B * N * 16, B * N * 16, N * (D / 2), N * (D / 2)};
  for (int i = 0; i < CD_PREP_INPUTS; i++) {
    const cd_need need = i == 2 && !need_v ? CD_OPTIONAL : CD_REQUIRED; /* v_raw */
    c->use[i] = (cd_use){.need = need, .elems = counts[i], .es = i < 3 ? es : 4};
  }
}

camdelta_status cd_prep_inv_rms_warm(camdelta_context *ctx, camdelta_dtype dtype) {
  char opts[64];
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d", (int)cd_raw_dtype(dtype)); /* reads the raw side only */
  cl_program prog;
  return cd_program(ctx, "prep.cl", opts, &prog);
}

camdelta_status cd_prep_forward_warm(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H) {
  camdelta_status st = CAMDELTA_OK;
  cd_pf_plan pf;
  /* the register-resident form in both index widths (a call's N decides which, cd_prep_ix32); the other forms do not
   * take the flag, so the second call finds the first one's program */
  int fused = 0;
  for (int ix = 0; ix < 2 && !st; ix++)
    if ((fused = cd_prep_fused_kernel(ctx, dtype, D, H, ix, &pf, &st))) clReleaseKernel(pf.k);
  if (st) return st;
  cl_kernel k;
  size_t ts;
  if (!fused && !(st = cd_prep_kernel(ctx, "prep.cl", "cd_prep_forward", dtype, D, &k, &ts))) clReleaseKernel(k);
  return st ? st : cd_prep_inv_rms_warm(ctx, dtype);
}

camdelta_status cd_prep_inv_rms(camdelta_context *ctx, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dtype,
                                 float eps, camdelta_buffer q_raw, camdelta_buffer k_raw, cl_mem inv_rms,
                                 cd_launch *l) {
  char opts[128];
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d", (int)cd_raw_dtype(dtype)); /* reads the raw side only */
  cl_kernel k;
  camdelta_status st = cd_kernel(ctx, "prep.cl", opts, "cd_prep_inv_rms", &k);
  if (st) return st;
  size_t L = cd_kernel_max_wg(ctx, k), p2 = 1;
  if (L > 256) L = 256;
  while (p2 * 2 <= L) p2 *= 2;
  L = p2;
  cd_args a = {k, 0, CL_SUCCESS};
  cd_arg_buf(&a, q_raw);
  cd_arg_buf(&a, k_raw);
  cd_arg_mem(&a, inv_rms);
  cd_arg_u64(&a, 0);
  cd_arg_u64(&a, (uint64_t)(B * N));
  cd_arg_u32(&a, (uint32_t)(H * D));
  cd_arg_f32(&a, eps);
  cd_arg_local(&a, 2 * L * sizeof(float));
  if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_prep_inv_rms: setting arguments");
  size_t gws = B * N * L;
  if (!st) st = cd_enqueue(ctx, k, 1, &gws, &L, l, "cd_prep_inv_rms");
  clReleaseKernel(k);
  return st;
}

/* Tokens per work-group: as many as fit (<= 32) in the kernel's work-group
 * limit with D/4 work-items per token; the tile is D x (TS+1) floats. */
camdelta_status cd_prep_kernel(camdelta_context *ctx, const char *source, const char *name, camdelta_dtype dtype,
                               size_t D, cl_kernel *out, size_t *ts_out) {
  const size_t g4 = D / 4;
  size_t ts = 32;
  while (ts > 1 && (ts * g4 > ctx->info.max_work_group_size ||
                    (D * (ts + 1) + 2 * ts * g4) * sizeof(float) > ctx->info.local_mem_bytes / 2))
    ts /= 2;
  for (;;) {
    char opts[160], dt[40];
    snprintf(opts, sizeof opts, "%s -DCD_D=%zu -DCD_TS=%zu", cd_dtype_opts(dtype, dt), D, ts);
    cl_kernel k;
    camdelta_status st = cd_kernel(ctx, source, opts, name, &k);
    if (st) return st;
    if (ts * g4 <= cd_kernel_max_wg(ctx, k) || ts == 1) {
      *out = k;
      *ts_out = ts;
      return CAMDELTA_OK;
    }
    clReleaseKernel(k);
    ts /= 2;
  }
}

/* The one-pass forwards on GPUs and accelerators, unless the context says otherwise (option "prep" FORM;
 * cd_prep_forward_form); CPUs run the CPU form (cl/prep_cpu.cl: one work-item per PB blocks of 8 tokens of all heads,
 * explicit float8 vectors, one launch). The two-pass form (inverse RMS, then the per-head kernel) stays as FORM 0.
 * The register-resident form (cl/prep.cl cd_prep_regs) takes TT tokens of one tensor, all heads, per work-group
 * (local size TT * D/4, TT as below). The staged form (cd_prep_fused), past 48 heads: a tile is TT tokens of one
 * batch row, all heads; a step covers HB heads, one work-item per (head of the step, 4-channel unit, token): local
 * size HB * TT * D/4 <= 32 TT, HB the most heads that fit, evened out over the steps. TT (option TT) = 8 in f32 (a
 * row store covers 32 bytes, one sector), 16 in 16-bit storage, halved while the device or the built kernel cannot
 * take TT * D/4 work-items. The work-groups walk the tiles persistently, WPC per compute unit (fewer keep fewer
 * tiles' rows in the L2 cache). The register-resident form counts its indices in 32 bits where cd_prep_ix32 allows
 * (option IX). */
/* The register-resident form (cd_prep_regs: one tensor's tile of all heads in registers, 4 H floats per work-item)
 * is the GPUs' default up to PF_REGS_HMAX heads; FORM=2 asks for it up to PF_REGS_HLIMIT (past them its registers'
 * worth of rows per work-item makes it slower than the staged form). */
enum { PF_REGS_HMAX = 48, PF_REGS_HLIMIT = 64 };

unsigned cd_prep_heads_per_step(size_t H, size_t g4, size_t tt, size_t lmax) {
  size_t hbmax = 32 / g4;
  while (hbmax > 1 && hbmax * tt * g4 > lmax) hbmax--;
  const size_t steps = (H + hbmax - 1) / hbmax;
  return (unsigned)((H + steps - 1) / steps);
}

size_t cd_prep_tile_groups(const camdelta_context *ctx, size_t tiles, size_t wpc) {
  const size_t cu = ctx->info.compute_units ? ctx->info.compute_units : 1;
  return cu * wpc < tiles ? cu * wpc : tiles;
}

int cd_prep_forward_form(uint32_t form, size_t H) {
  if (form == 3) return 3;
  if (form == CD_OPT_AUTO) form = H && H <= PF_REGS_HMAX ? 2 : 1;
  if (form == 2 && (!H || H > PF_REGS_HLIMIT)) form = 1;
  return (int)form;
}

int cd_prep_ix32(size_t B, size_t N, size_t H, size_t D) {
  const uint64_t bn = (uint64_t)B * N, most = UINT32_MAX;
  return bn * H * D <= most && bn * 16 <= most && 2 * bn <= most && (uint64_t)N * (D / 2) <= most;
}

/* Where cd_prep_regs reads the norm weights (CD_WL, option WL minus 1): in the loop over the heads, between the
 * barrier and the stores (0); applied to the rows before the barrier (1: more registers, so 16-bit storage runs
 * 8-token tiles, but its loads leave the loop); staged in local memory before the barrier and read from there in the
 * loop (2). */
int cd_prep_weights_mode(const camdelta_context *ctx, camdelta_dtype dtype, size_t H, size_t D, unsigned tt) {
  const uint32_t wl = cd_option(ctx, CD_OPT_PREP_WL, dtype);
  int mode = wl != CD_OPT_AUTO ? (int)wl - 1 : dtype != CAMDELTA_F32 && D >= 96 ? 1 : 2;
  /* cd_prep_regs's local memory with the weights staged: the weights, the ring of k's squares, the sums */
  const size_t g4 = D / 4, rr = H < 8 ? H : 8;
  const size_t bytes = (H * D + 2 * rr * tt * g4 + tt * g4 + tt) * sizeof(float);
  if (mode == 2 && bytes > ctx->info.local_mem_bytes) mode = 0;
  return mode;
}

/* Counted as written: per block its token loop, the squares over C = H·D channels (8 at a time) of each of its 8
 * tokens and the RoPE rows; per head the sums' set-up, three tensors' D / 8 channel groups of pb blocks each, and per
 * group and block 4 for cd_prep_group's loops over a register tile's lanes and rows (gallivm unrolls most of them;
 * 4 bounds what its failure points showed: llvmpipe with no budget applied, D=112, one block per work-item, right
 * up to 240 heads and wrong from 280). */
size_t cd_prep_cpu_loops(size_t H, size_t D, size_t pb) {
  const size_t C = H * D;
  return 1 + pb * (1 + 8 + C + D / 2) + H * (1 + 2 * pb + 3 * (D / 8) * (1 + pb + 4 * pb));
}

int cd_prep_fused_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, size_t H, int ix32, cd_pf_plan *p,
                         camdelta_status *st) {
  *st = CAMDELTA_OK;
  memset(p, 0, sizeof *p);
  int want = cd_prep_forward_form(cd_option(ctx, CD_OPT_PREP_FORM, dtype), H);
  unsigned pb = want == 3 ? cd_option(ctx, CD_OPT_PREP_PB, dtype) : 0;
  /* its local memory per block: the inverse RMS (2), camera matrices (32) and RoPE tables (D) as float8, sized for
   * the largest head dim (D is an argument: one program serves every head dim) */
  while (pb > 1 && (uint64_t)pb * (34 + CAMDELTA_MAX_HEAD_DIM) * 32 > ctx->info.local_mem_bytes) pb /= 2;
  /* a driver with a loop budget (cd_loop_budget: Mesa's llvmpipe): fewer blocks per work-item until its loops fit;
   * where not even one block fits, the GPU forms run */
  const size_t budget = want == 3 ? cd_loop_budget(ctx) : 0;
  while (budget && pb > 1 && cd_prep_cpu_loops(H, D, pb) > budget) pb /= 2;
  if (want == 3 && budget && cd_prep_cpu_loops(H, D, pb) > budget) want = cd_prep_forward_form(CD_OPT_AUTO, H);
  if (!want) return 0;
  if (want == 3) {
    char opts[120], dt[40];
    p->cpu = 1, p->pb = pb, p->lws = 1;
    snprintf(opts, sizeof opts, "%s -DCD_DMAX=%d -DCD_PB=%u", cd_dtype_opts(dtype, dt), CAMDELTA_MAX_HEAD_DIM, p->pb);
    return (*st = cd_kernel(ctx, "prep_cpu.cl", opts, "cd_prep_cpu", &p->k)) ? 0 : 1;
  }
  p->regs = want == 2;
  const size_t g4 = D / 4;
  for (p->tt = cd_option(ctx, CD_OPT_PREP_TT, dtype);; p->tt /= 2) {
    if (p->tt * g4 <= ctx->info.max_work_group_size) {
      char opts[200], dt[40];
      int n = snprintf(opts, sizeof opts, "%s -DCD_D=%zu -DCD_TT=%u", cd_dtype_opts(dtype, dt), D, p->tt);
      if (p->regs)
        snprintf(opts + n, sizeof opts - (size_t)n, " -DCD_H=%zu -DCD_IX32=%d -DCD_WL=%d", H,
                 ix32 && cd_option(ctx, CD_OPT_PREP_IX, dtype) != 64, cd_prep_weights_mode(ctx, dtype, H, D, p->tt));
      if ((*st = cd_kernel(ctx, "prep.cl", opts, p->regs ? "cd_prep_regs" : "cd_prep_fused", &p->k))) return 0;
      const size_t lmax = cd_kernel_max_wg(ctx, p->k);
      if (p->tt * g4 <= lmax) {
        p->hb = p->regs ? 1 : cd_prep_heads_per_step(H, g4, p->tt, lmax);
        p->lws = p->hb * p->tt * g4;
        return 1;
      }
      clReleaseKernel(p->k);
      p->k = NULL;
    }
    if (p->tt <= 4) { /* neither one-pass form fits: the caller runs the two-pass form, with its arguments */
      memset(p, 0, sizeof *p);
      return 0;
    }
  }
}

enum { PF_Q = CD_PREP_INPUTS, PF_K, PF_V, PF_INFLATION_SQ, PF_SLOTS };
#define PF_SLOT(field, role) CD_SLOT(camdelta_prep_args, field, role)
static const cd_slot PF_SLOTS_[PF_SLOTS] = {
    CD_PREP_INPUT_SLOTS(camdelta_prep_args), [PF_Q] = PF_SLOT(q, CD_OUT), [PF_K] = PF_SLOT(k, CD_OUT),
    [PF_V] = PF_SLOT(v, CD_OUT), [PF_INFLATION_SQ] = PF_SLOT(inflation_sq, CD_OUT)};

typedef struct pf_call {
  camdelta_prep_saved *saved;
  int scan_f32;   /* q, k, v out in f32 whatever the dtype (cd_prep_forward_split) */
  int fused;      /* the one-pass form (pf), else the two-pass one (k, ts) */
  cd_pf_plan pf;
  cl_kernel k;
  size_t ts;
  cl_mem inv;     /* the inverse RMS values: the saved object's, or the call's own */
} pf_call;

static camdelta_status pf_check(cd_call *c) {
  const camdelta_prep_args *a = c->args;
  camdelta_status st = cd_prep_check_shape(c->entry->op, a->B, a->N, a->H, a->D, a->dtype, a->k_scale, a->norm_eps);
  if (st) return st;
  cd_prep_use_inputs(c, a->B, a->N, a->H, a->D, a->dtype, 1);
  const size_t es = cd_scan_es(cd_store_code(a->dtype, ((const pf_call *)c->op)->scan_f32));
  const size_t BNHD = a->B * a->N * a->H * a->D;
  for (int i = PF_Q; i <= PF_V; i++) c->use[i] = (cd_use){.need = CD_REQUIRED, .elems = BNHD, .es = es};
  c->use[PF_INFLATION_SQ] = (cd_use){.need = CD_REQUIRED, .elems = a->B * a->H * a->N, .es = 4};
  return CAMDELTA_OK;
}

static camdelta_status pf_plan(cd_call *c) {
  const camdelta_prep_args *a = c->args;
  pf_call *s = c->op;
  camdelta_status st;
  const camdelta_dtype dtype = cd_store_code(a->dtype, s->scan_f32);
  s->fused = cd_prep_fused_kernel(c->ctx, dtype, a->D, a->H, cd_prep_ix32(a->B, a->N, a->H, a->D), &s->pf, &st);
  if (st) return st;
  if (s->fused) s->k = s->pf.k;
  else if ((st = cd_prep_kernel(c->ctx, "prep.cl", "cd_prep_forward", dtype, a->D, &s->k, &s->ts))) return st;
  const size_t bytes = 2 * a->B * a->N * sizeof(float);
  if (s->saved) {
    st = cd_ensure_buffer(c->ctx, &s->saved->inv_rms, &s->saved->bytes, bytes);
    s->saved->valid = 0;
    if (!st) s->inv = s->saved->inv_rms;
    return st;
  }
  return cd_alloc(c->ctx, bytes, &s->inv);
}

/* Both forms take the same leading arguments; the fused one adds B and eps (it computes the inverse RMS), heads per
 * step and the alignment flag. */
static camdelta_status pf_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_prep_args *a = c->args;
  const pf_call *s = c->op;
  camdelta_context *ctx = c->ctx;
  const size_t B = a->B, N = a->N, H = a->H, D = a->D;
  const int fused = s->fused;
  const cd_pf_plan *pf = &s->pf;
  camdelta_status st = CAMDELTA_OK;
  if (!fused) st = cd_prep_inv_rms(ctx, B, N, H, D, a->dtype, a->norm_eps, a->q_raw, a->k_raw, s->inv, l);
  if (st) return st;
  const camdelta_buffer in[CD_PREP_INPUTS] = {a->q_raw,  a->k_raw,   a->v_raw,    a->q_norm_weight, a->k_norm_weight,
                                              a->proj_q, a->proj_kv, a->rope_cos, a->rope_sin};
  cd_args g = {s->k, 0, CL_SUCCESS};
  for (int i = 0; i < CD_PREP_INPUTS; i++) cd_arg_buf(&g, in[i]);
  cd_arg_mem(&g, s->inv);
  cd_arg_u64(&g, 0);
  CD_ARG_BUFS(&g, a->q, a->k, a->v, a->inflation_sq);
  cd_arg_u64(&g, N);
  if (!pf->regs) cd_arg_u32(&g, (uint32_t)H);
  if (fused && !pf->cpu) cd_arg_u64(&g, B);
  cd_arg_f32(&g, a->k_scale);
  size_t lws[3] = {1, 1, 1}, gws[3] = {1, 1, 1};
  if (pf->cpu) { /* one work-item per pb blocks of 8 tokens of a batch row */
    cd_arg_f32(&g, a->norm_eps);
    cd_arg_u32(&g, (uint32_t)D);
    gws[0] = B * ((N + 8 * pf->pb - 1) / (8 * pf->pb));
  } else if (fused) {
    const camdelta_buffer outs[3] = {a->q, a->k, a->v};
    const int al = cd_buffers_aligned4(in, CD_PREP_INPUTS) && cd_buffers_aligned4(outs, 3);
    cd_arg_f32(&g, a->norm_eps);
    if (!pf->regs) cd_arg_u32(&g, pf->hb);
    cd_arg_u32(&g, al ? 1u : 0u);
    /* the staged form's work-groups walk the tiles persistently; the register-resident form has one work-group
     * per (tile, tensor) */
    const size_t wpc = cd_option(ctx, CD_OPT_PREP_WPC, a->dtype);
    const size_t tiles = B * ((N + pf->tt - 1) / pf->tt);
    lws[0] = pf->lws, gws[0] = (pf->regs ? 3 * tiles : cd_prep_tile_groups(ctx, tiles, wpc)) * pf->lws;
  } else {
    lws[0] = s->ts * (D / 4), gws[0] = (N + s->ts - 1) / s->ts * lws[0], gws[1] = H, gws[2] = B;
  }
  const char *name = pf->cpu ? "cd_prep_cpu" : pf->regs ? "cd_prep_regs" : fused ? "cd_prep_fused" : "cd_prep_forward";
  if (g.err != CL_SUCCESS) return cd_cl_fail(g.err, name);
  return cd_enqueue(ctx, s->k, 3, gws, lws, l, name);
}

static camdelta_status pf_end(cd_call *c, camdelta_status st) {
  const camdelta_prep_args *a = c->args;
  pf_call *s = c->op;
  if (s->k) clReleaseKernel(s->k);
  if (!s->saved && s->inv) clReleaseMemObject(s->inv); /* lives on until the enqueued kernels are done */
  if (s->saved && !st) {
    s->saved->B = a->B, s->saved->N = a->N, s->saved->H = a->H, s->saved->D = a->D;
    s->saved->valid = 1;
  }
  return st;
}

static const cd_entry PREP_FORWARD =
    CD_ENTRY("camdelta_prep_forward", camdelta_prep_args, PF_SLOTS_, pf_check, pf_plan, pf_enqueue, pf_end);

static camdelta_status pf_run(camdelta_context *ctx, const camdelta_prep_args *args, camdelta_prep_saved *saved,
                              int scan_f32) {
  pf_call s = {.saved = saved, .scan_f32 = scan_f32, .fused = 0, .k = NULL, .ts = 0, .inv = NULL};
  cd_call c = {.entry = &PREP_FORWARD, .ctx = ctx, .args = args, .saved = saved,
               .saved_ctx = saved ? saved->ctx : NULL, .op = &s};
  return cd_run_entry(&c);
}

camdelta_status camdelta_prep_forward(camdelta_context *ctx, const camdelta_prep_args *args,
                                      camdelta_prep_saved *saved) {
  return pf_run(ctx, args, saved, 0);
}

camdelta_status cd_prep_forward_split(camdelta_context *ctx, const camdelta_prep_args *args,
                                      camdelta_prep_saved *saved) {
  return pf_run(ctx, args, saved, 1);
}
