/* Short convolution on raw K along frames (SPEC 8.2): checks and the launches of cl/short_conv.cl.
 * The segment bounds (camdelta_conv_bounds) become one seg_end value per frame, uploaded with the call. */
#include <stdio.h>
#include <stdlib.h>

#include "branch_common.h"
#include "device.h"
#include "camera_op.h"

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

camdelta_status cd_short_conv_enqueue_forward(camdelta_context *ctx, size_t B, size_t T, size_t S, size_t C,
                                              camdelta_buffer x, camdelta_buffer w, cl_mem seg_end, camdelta_buffer y,
                                              cd_launch *l) {
  cl_kernel k;
  camdelta_status st = cd_kernel(ctx, "short_conv.cl", "", "cd_short_conv_forward", &k);
  if (st) return st;
  const size_t BSC = B * S * C;
  cd_args a = {k, 0, CL_SUCCESS};
  cd_arg_buf(&a, x);
  cd_arg_buf(&a, w);
  cd_arg_mem(&a, seg_end);
  cd_arg_buf(&a, y);
  cd_arg_u32(&a, (uint32_t)T);
  cd_arg_u32(&a, (uint32_t)S);
  cd_arg_u32(&a, (uint32_t)C);
  cd_arg_u64(&a, BSC);
  if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_short_conv_forward: setting arguments");
  const size_t lws = 64, gws = (BSC + 63) / 64 * 64;
  if (!st) st = cd_enqueue(ctx, k, 1, &gws, cd_kernel_max_wg(ctx, k) >= 64 ? &lws : NULL, l, "cd_short_conv_forward");
  clReleaseKernel(k);
  return st;
}

camdelta_status cd_short_conv_enqueue_backward(camdelta_context *ctx, size_t B, size_t T, size_t S, size_t C,
                                               camdelta_buffer x, camdelta_buffer w, cl_mem seg_end,
                                               camdelta_buffer dy, camdelta_buffer dx, camdelta_buffer dw,
                                               cd_launch *l) {
  cl_kernel kb = NULL, kr = NULL;
  camdelta_status st = cd_kernel(ctx, "short_conv.cl", "", "cd_short_conv_backward", &kb);
  if (!st) st = cd_kernel(ctx, "short_conv.cl", "", "cd_short_conv_reduce", &kr);
  const size_t sbl = conv_sb(ctx), nsb = (S + sbl - 1) / sbl, P = B * nsb, total = P * C;
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
    cd_arg_u64(&a, total);
    cd_arg_u32(&a, dx.mem ? 1u : 0u);
    cd_arg_u32(&a, dw.mem ? 1u : 0u);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_short_conv_backward: setting arguments");
    const size_t lws = 64, gws = (total + 63) / 64 * 64;
    if (!st)
      st = cd_enqueue(ctx, kb, 1, &gws, cd_kernel_max_wg(ctx, kb) >= 64 ? &lws : NULL, l, "cd_short_conv_backward");
  }
  if (!st && dw.mem) {
    cd_args a = {kr, 0, CL_SUCCESS};
    cd_arg_mem(&a, part);
    cd_arg_buf(&a, dw);
    cd_arg_u32(&a, (uint32_t)C);
    cd_arg_u32(&a, (uint32_t)P);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_short_conv_reduce: setting arguments");
    const size_t gws = 4 * C;
    if (!st) st = cd_enqueue(ctx, kr, 1, &gws, NULL, l, "cd_short_conv_reduce");
  }
  if (part) clReleaseMemObject(part);
  if (kb) clReleaseKernel(kb);
  if (kr) clReleaseKernel(kr);
  return st;
}

static camdelta_status check(const camdelta_context *ctx, const char *op, const camdelta_short_conv_args *a,
                             int backward) {
  if (!a->B || !a->T || !a->S || !a->C)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, T=%zu, S=%zu, C=%zu: each must be at least 1", op, a->B, a->T,
                   a->S, a->C);
  size_t total;
  const size_t f[4] = {a->B, a->T, a->S, a->C};
  const size_t sb = conv_sb(ctx); /* the backward's B·ceil(S / sb) weight partials are counted in 32 bits */
  if (!cd_prod(&total, 4, f) || total > SIZE_MAX / 16 || a->T > UINT32_MAX || a->S > UINT32_MAX ||
      a->C > UINT32_MAX / 4 || a->B * ((a->S + sb - 1) / sb) > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*T*S*C = %zu*%zu*%zu*%zu is too large", op, a->B, a->T, a->S, a->C);
  camdelta_status st;
  const size_t C4 = 4 * a->C;
  if (!backward) {
    const cd_tensor_arg in[2] = {{"k_raw", a->k_raw, total, 4}, {"conv_weight", a->conv_weight, C4, 4}};
    const cd_tensor_arg out[1] = {{"k_conv", a->k_conv, total, 4}};
    for (int i = 0; i < 2; i++)
      if ((st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, 4, 0))) return st;
    if ((st = cd_check_buffer(op, "k_conv", a->k_conv, total, 4, 0))) return st;
    return cd_check_no_overlap(op, out, 1, in, 2);
  }
  const cd_tensor_arg in[3] = {{"k_raw", a->k_raw, total, 4},
                               {"conv_weight", a->conv_weight, C4, 4},
                               {"grad_k_conv", a->grad_k_conv, total, 4}};
  const cd_tensor_arg out[2] = {{"dk_raw", a->dk_raw, total, 4}, {"dconv_weight", a->dconv_weight, C4, 4}};
  for (int i = 0; i < 3; i++)
    if ((st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, 4, 0))) return st;
  for (int i = 0; i < 2; i++)
    if ((st = cd_check_buffer(op, out[i].name, out[i].b, out[i].elems, 4, 1))) return st;
  return cd_check_no_overlap(op, out, 2, in, 3);
}

static camdelta_status run(camdelta_context *ctx, const camdelta_short_conv_args *args, int backward) {
  const char *op = backward ? "camdelta_short_conv_backward" : "camdelta_short_conv_forward";
  cd_clear_error();
  camdelta_status st = cd_prologue(op, ctx, args, NULL, 0, args ? args->profile : NULL, NULL, 0);
  if (!st) st = check(ctx, op, args, backward);
  if (st) return st;
  if (backward && !args->dk_raw.mem && !args->dconv_weight.mem) return CAMDELTA_OK;
  cl_mem seg = NULL;
  if ((st = cd_short_conv_segments(ctx, op, args->T, &args->chunking, &seg))) return st;
  cl_program prog;
  if ((st = cd_program(ctx, "short_conv.cl", "", &prog))) {
    clReleaseMemObject(seg);
    return st;
  }
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  if (!backward)
    st = cd_short_conv_enqueue_forward(ctx, args->B, args->T, args->S, args->C, args->k_raw, args->conv_weight, seg,
                                       args->k_conv, &l);
  else
    st = cd_short_conv_enqueue_backward(ctx, args->B, args->T, args->S, args->C, args->k_raw, args->conv_weight, seg,
                                        args->grad_k_conv, args->dk_raw, args->dconv_weight, &l);
  clReleaseMemObject(seg);
  return cd_launch_end(ctx, &l, st);
}

camdelta_status camdelta_short_conv_forward(camdelta_context *ctx, const camdelta_short_conv_args *args) {
  return run(ctx, args, 0);
}

camdelta_status camdelta_short_conv_backward(camdelta_context *ctx, const camdelta_short_conv_args *args) {
  return run(ctx, args, 1);
}
