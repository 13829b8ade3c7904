/* Short convolution on raw K along frames (docs/math.md §8.2): checks and the launches of cl/short_conv.cl.
 * The segment bounds (camdelta_conv_bounds) become one seg_end value per frame, uploaded with the call. */
#include <stdio.h>
#include <stdlib.h>

#include "ops/branch_common.h"
#include "ops/camera_op.h"

/* Spatial positions per backward work-item (option "conv" SB; src/options/table.c): fewer give more work-items
 * (memory-level parallelism) and more weight partials to sum. */
static size_t conv_sb(const camdelta_context *ctx) { return cd_option(ctx, CD_OPT_CONV_SB, CAMDELTA_F32); }

camdelta_status cd_short_conv_segments(camdelta_context *ctx, const char *op, size_t T,
                                       const camdelta_chunking *chunking, cl_mem *seg_end) {
  *seg_end = NULL;
  if (T > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: T=%zu exceeds 2^32-1", op, T);
  size_t *bounds = malloc((T + 1) * sizeof *bounds), nb = 0;
  uint32_t *ends = malloc(T * sizeof *ends);
  camdelta_status st = CAMDELTA_OK;
  if (!bounds || !ends) st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = camdelta_conv_bounds(T, chunking, bounds, T + 1, &nb);
  if (st && st != CAMDELTA_ERROR_OUT_OF_MEMORY) {
    /* keep the message but name the operation */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", camdelta_last_message());
    st = cd_fail(st, "%s: %s", op, msg);
  }
  if (!st) {
    cd_segment_ends(bounds, nb, T, ends);
    cl_int err;
    *seg_end = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, T * sizeof *ends, ends, &err);
    if (err != CL_SUCCESS) *seg_end = NULL, st = cd_cl_fail(err, "uploading the conv segments");
  }
  free(bounds);
  free(ends);
  return st;
}

/* The program for activations in `dtype`: f32 keeps the options it always had. */
static const char *conv_opts(camdelta_dtype dtype) {
  return dtype == CAMDELTA_F16 ? "-DCD_DTYPE=1" : dtype == CAMDELTA_BF16 ? "-DCD_DTYPE=2" : "";
}

int cd_conv_cpu(camdelta_context *ctx, camdelta_dtype dtype) {
  return cd_option(ctx, CD_OPT_CONV_FORM, dtype) == 1 && !cd_loop_budget(ctx);
}

camdelta_status cd_short_conv_program(camdelta_context *ctx, camdelta_dtype dtype) {
  cl_program prog;
  if (cd_conv_cpu(ctx, dtype)) {
    cl_kernel k;
    const camdelta_status st = cd_branch_cpu_kernel(ctx, dtype, "cd_conv_cpu_forward", &k);
    if (!st) clReleaseKernel(k);
    return st;
  }
  return cd_program(ctx, "short_conv.cl", conv_opts(dtype), &prog);
}

/* A kernel of the conv's form: cl/branch_cpu.cl's (cpu) or cl/short_conv.cl's. */
static camdelta_status conv_kernel(camdelta_context *ctx, camdelta_dtype dtype, int cpu, const char *name,
                                   cl_kernel *k) {
  return cpu ? cd_branch_cpu_kernel(ctx, dtype, name, k) : cd_kernel(ctx, "short_conv.cl", conv_opts(dtype), name, k);
}

/* The arguments that size the work: the CPU form's channel groups per work-item and blocks of them, the work-group
 * form's work-item count. */
static void conv_arg_items(cd_args *a, int cpu, size_t cg, size_t ncb, size_t items) {
  if (cpu) {
    cd_arg_u32(a, (uint32_t)cg);
    cd_arg_u32(a, (uint32_t)ncb);
  } else {
    cd_arg_u64(a, items);
  }
}

/* Work-group form: a work-item per (4 channels, s, b) in groups of 64. CPU form: a work-item per (b, s, block of
 * channel groups), local size 1. */
camdelta_status cd_short_conv_enqueue_forward(camdelta_context *ctx, camdelta_dtype dtype, size_t B, size_t T,
                                              size_t S, size_t C, camdelta_buffer lookback, size_t back,
                                              camdelta_buffer x, camdelta_buffer w, cl_mem seg_end, camdelta_buffer y,
                                              camdelta_buffer lookback_out, cd_launch *l) {
  const int cpu = cd_conv_cpu(ctx, dtype);
  const char *name = cpu ? "cd_conv_cpu_forward" : "cd_short_conv_forward";
  cl_kernel k;
  camdelta_status st = conv_kernel(ctx, dtype, cpu, name, &k);
  if (st) return st;
  const size_t BSC4 = B * S * ((C + 3) / 4), G = (C + 7) / 8, cg = cpu ? cd_branch_cpu_groups(ctx, B * S, G) : 1;
  const size_t ncb = (G + cg - 1) / cg;
  cd_args a = {k, 0, CL_SUCCESS};
  cd_arg_buf(&a, x);
  cd_arg_buf(&a, back ? lookback : x); /* back = 0: never read */
  cd_arg_buf(&a, w);
  cd_arg_mem(&a, seg_end);
  cd_arg_buf(&a, y);
  cd_arg_u32(&a, (uint32_t)T);
  cd_arg_u32(&a, (uint32_t)S);
  cd_arg_u32(&a, (uint32_t)C);
  conv_arg_items(&a, cpu, cg, ncb, BSC4);
  cd_arg_u32(&a, (uint32_t)back);
  cd_arg_buf(&a, lookback_out.mem ? lookback_out : y); /* absent: never written */
  cd_arg_u32(&a, lookback_out.mem != NULL);
  /* the work-group form's 4-channel accesses are whole aligned vectors where every offset and C are multiples of 4 */
  if (!cpu)
    cd_arg_u32(&a, C % 4 == 0 && x.offset % 4 == 0 && y.offset % 4 == 0 && (!back || lookback.offset % 4 == 0) &&
                       (!lookback_out.mem || lookback_out.offset % 4 == 0));
  if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, cpu ? "cd_conv_cpu_forward: setting arguments"
                                                      : "cd_short_conv_forward: setting arguments");
  const size_t lws = cpu ? 1 : 64, gws = cpu ? B * S * ncb : (BSC4 + 63) / 64 * 64;
  if (!st) st = cd_enqueue(ctx, k, 1, &gws, cpu || cd_kernel_max_wg(ctx, k) >= 64 ? &lws : NULL, l, name);
  clReleaseKernel(k);
  return st;
}

/* Work-group form: a work-item per (c, block of sb spatial positions, b) in groups of 64, then a work-item per weight
 * summing its partials. CPU form: a work-item per (b, block of sb spatial positions, block of channel groups), then
 * the partials summed 64 weights per work-item. */
camdelta_status cd_short_conv_enqueue_backward(camdelta_context *ctx, camdelta_dtype dtype, size_t B, size_t T,
                                               size_t S, size_t C, camdelta_buffer x, camdelta_buffer w,
                                               cl_mem seg_end, camdelta_buffer dy, camdelta_buffer dx,
                                               camdelta_buffer dw, cd_launch *l) {
  const int cpu = cd_conv_cpu(ctx, dtype);
  const char *name = cpu ? "cd_conv_cpu_backward" : "cd_short_conv_backward";
  const char *rname = cpu ? "cd_conv_cpu_reduce" : "cd_short_conv_reduce";
  cl_kernel kb = NULL, kr = NULL;
  camdelta_status st = conv_kernel(ctx, dtype, cpu, name, &kb);
  if (!st) st = conv_kernel(ctx, dtype, cpu, rname, &kr);
  const size_t sbl = conv_sb(ctx), nsb = (S + sbl - 1) / sbl, P = B * nsb, total = P * C;
  const size_t G = (C + 7) / 8, cg = cpu ? cd_branch_cpu_groups(ctx, P, G) : 1, ncb = (G + cg - 1) / cg;
  cl_mem part = NULL;
  if (!st && dw.mem) st = cd_alloc(ctx, P * C * 4 * sizeof(float), &part);
  if (!st) {
    cd_args a = {kb, 0, CL_SUCCESS};
    cd_arg_buf(&a, x);
    cd_arg_buf(&a, w);
    cd_arg_mem(&a, seg_end);
    cd_arg_buf(&a, dy);
    cd_arg_buf(&a, dx.mem ? dx : dy); /* absent: never written */
    cd_arg_mem(&a, part ? part : seg_end);
    cd_arg_u32(&a, (uint32_t)T);
    cd_arg_u32(&a, (uint32_t)S);
    cd_arg_u32(&a, (uint32_t)C);
    cd_arg_u32(&a, (uint32_t)sbl);
    cd_arg_u32(&a, (uint32_t)nsb);
    conv_arg_items(&a, cpu, cg, ncb, total);
    cd_arg_u32(&a, dx.mem ? 1u : 0u);
    cd_arg_u32(&a, dw.mem ? 1u : 0u);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, cpu ? "cd_conv_cpu_backward: setting arguments"
                                                        : "cd_short_conv_backward: setting arguments");
    const size_t lws = cpu ? 1 : 64, gws = cpu ? P * ncb : (total + 63) / 64 * 64;
    if (!st) st = cd_enqueue(ctx, kb, 1, &gws, cpu || cd_kernel_max_wg(ctx, kb) >= 64 ? &lws : NULL, l, name);
  }
  if (!st && dw.mem) {
    cd_args a = {kr, 0, CL_SUCCESS};
    cd_arg_mem(&a, part);
    cd_arg_buf(&a, dw);
    cd_arg_u32(&a, (uint32_t)(cpu ? 4 * C : C));
    cd_arg_u32(&a, (uint32_t)P);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, cpu ? "cd_conv_cpu_reduce: setting arguments"
                                                        : "cd_short_conv_reduce: setting arguments");
    const size_t one = 1, gws = cpu ? (4 * C + 63) / 64 : 4 * C;
    if (!st) st = cd_enqueue(ctx, kr, 1, &gws, cpu ? &one : NULL, l, rname);
  }
  if (part) clReleaseMemObject(part);
  if (kb) clReleaseKernel(kb);
  if (kr) clReleaseKernel(kr);
  return st;
}

enum { CV_K_RAW, CV_CONV_WEIGHT, CV_K_CONV, CV_GRAD_K_CONV, CV_DK_RAW, CV_DCONV_WEIGHT, CV_SLOTS };
#define CV_SLOT(field, role) CD_SLOT(camdelta_short_conv_args, field, role)
/* the forward's and the backward's use of the struct they share */
static const cd_slot CONV_SLOTS[2][CV_SLOTS] = {
    {[CV_K_RAW] = CV_SLOT(k_raw, CD_IN), [CV_CONV_WEIGHT] = CV_SLOT(conv_weight, CD_IN),
     [CV_K_CONV] = CV_SLOT(k_conv, CD_OUT), [CV_GRAD_K_CONV] = CV_SLOT(grad_k_conv, CD_UNREAD),
     [CV_DK_RAW] = CV_SLOT(dk_raw, CD_UNREAD), [CV_DCONV_WEIGHT] = CV_SLOT(dconv_weight, CD_UNREAD)},
    {[CV_K_RAW] = CV_SLOT(k_raw, CD_IN), [CV_CONV_WEIGHT] = CV_SLOT(conv_weight, CD_IN),
     [CV_K_CONV] = CV_SLOT(k_conv, CD_UNREAD), [CV_GRAD_K_CONV] = CV_SLOT(grad_k_conv, CD_IN),
     [CV_DK_RAW] = CV_SLOT(dk_raw, CD_OUT), [CV_DCONV_WEIGHT] = CV_SLOT(dconv_weight, CD_OUT)}};

typedef struct conv_call {
  int backward;
  cl_mem seg_end; /* the segment ends, uploaded by the plan step */
} conv_call;

/* A backward asked for neither gradient does nothing. */
static int conv_idle(const cd_call *c) {
  const camdelta_short_conv_args *a = c->args;
  return ((const conv_call *)c->op)->backward && !a->dk_raw.mem && !a->dconv_weight.mem;
}

static camdelta_status conv_check(cd_call *c) {
  const camdelta_short_conv_args *a = c->args;
  const char *op = c->entry->op;
  if (!a->B || !a->T || !a->S || !a->C)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, T=%zu, S=%zu, C=%zu: each must be at least 1", op, a->B, a->T,
                   a->S, a->C);
  size_t total;
  const size_t f[4] = {a->B, a->T, a->S, a->C};
  const size_t sb = conv_sb(c->ctx); /* the backward's B·ceil(S / sb) weight partials are counted in 32 bits */
  if (!cd_prod(&total, 4, f) || total > SIZE_MAX / 16 || a->T > UINT32_MAX || a->S > UINT32_MAX ||
      a->C > UINT32_MAX / 4 || a->B * ((a->S + sb - 1) / sb) > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*T*S*C = %zu*%zu*%zu*%zu is too large", op, a->B, a->T, a->S, a->C);
  const cd_use tokens = {.need = CD_REQUIRED, .elems = total, .es = 4};
  const cd_use weights = {.need = CD_REQUIRED, .elems = 4 * a->C, .es = 4};
  c->use[CV_K_RAW] = tokens, c->use[CV_CONV_WEIGHT] = weights;
  if (!((const conv_call *)c->op)->backward) {
    c->use[CV_K_CONV] = tokens;
  } else {
    c->use[CV_GRAD_K_CONV] = tokens;
    c->use[CV_DK_RAW] = (cd_use){.need = CD_OPTIONAL, .elems = total, .es = 4};
    c->use[CV_DCONV_WEIGHT] = (cd_use){.need = CD_OPTIONAL, .elems = 4 * a->C, .es = 4};
  }
  return CAMDELTA_OK;
}

/* The segment ends on the device and the program built: nothing is enqueued when either fails. */
static camdelta_status conv_plan(cd_call *c) {
  const camdelta_short_conv_args *a = c->args;
  conv_call *s = c->op;
  if (conv_idle(c)) return CAMDELTA_OK;
  camdelta_status st = cd_short_conv_segments(c->ctx, c->entry->op, a->T, &a->chunking, &s->seg_end);
  if (!st) st = cd_short_conv_program(c->ctx, CAMDELTA_F32);
  return st;
}

static camdelta_status conv_enqueue(cd_call *c, cd_launch *l) {
  const camdelta_short_conv_args *a = c->args;
  const conv_call *s = c->op;
  if (conv_idle(c)) return CAMDELTA_OK;
  if (!s->backward)
    return cd_short_conv_enqueue_forward(c->ctx, CAMDELTA_F32, a->B, a->T, a->S, a->C, a->k_raw, 0, a->k_raw,
                                         a->conv_weight, s->seg_end, a->k_conv, (camdelta_buffer){NULL, 0}, l);
  return cd_short_conv_enqueue_backward(c->ctx, CAMDELTA_F32, a->B, a->T, a->S, a->C, a->k_raw, a->conv_weight,
                                        s->seg_end, a->grad_k_conv, a->dk_raw, a->dconv_weight, l);
}

static camdelta_status conv_end(cd_call *c, camdelta_status st) {
  conv_call *s = c->op;
  if (s->seg_end) clReleaseMemObject(s->seg_end); /* lives on until the enqueued kernels are done */
  return st;
}

static const cd_entry CONV_ENTRIES[2] = {
    CD_ENTRY("camdelta_short_conv_forward", camdelta_short_conv_args, CONV_SLOTS[0], conv_check, conv_plan,
             conv_enqueue, conv_end),
    CD_ENTRY("camdelta_short_conv_backward", camdelta_short_conv_args, CONV_SLOTS[1], conv_check, conv_plan,
             conv_enqueue, conv_end)};

static camdelta_status run(camdelta_context *ctx, const camdelta_short_conv_args *args, int backward) {
  conv_call s = {.backward = backward, .seg_end = NULL};
  cd_call c = {.entry = &CONV_ENTRIES[backward], .ctx = ctx, .args = args, .op = &s};
  return cd_run_entry(&c);
}

camdelta_status camdelta_short_conv_forward(camdelta_context *ctx, const camdelta_short_conv_args *args) {
  return run(ctx, args, 0);
}

camdelta_status camdelta_short_conv_backward(camdelta_context *ctx, const camdelta_short_conv_args *args) {
  return run(ctx, args, 1);
}
