/* Output transform (SPEC 8.5), forward and backward: checks and the launches of cl/branch.cl. */
#include "branch_common.h"
#include "camera_op.h"
#include "prep_common.h"

camdelta_status cd_branch_kernel(camdelta_context *ctx, size_t D, const char *name, cl_kernel *k, size_t *ts) {
  return cd_prep_kernel(ctx, "branch.cl", name, CAMDELTA_F32, D, k, ts);
}

camdelta_status cd_output_transform_enqueue(camdelta_context *ctx, int backward,
                                            const camdelta_output_transform_args *a, cd_launch *l) {
  cl_kernel k;
  size_t ts;
  camdelta_status st =
      cd_branch_kernel(ctx, a->D, backward ? "cd_output_transform_backward" : "cd_output_transform", &k, &ts);
  if (st) return st;
  cd_args g = {k, 0, CL_SUCCESS};
  if (!backward) {
    cd_arg_buf(&g, a->out);
    cd_arg_buf(&g, a->out2.mem ? a->out2 : a->out);
    cd_arg_u32(&g, a->out2.mem ? 1u : 0u);
    cd_arg_buf(&g, a->proj_o);
    cd_arg_buf(&g, a->rope_cos);
    cd_arg_buf(&g, a->rope_sin);
    cd_arg_buf(&g, a->y);
  } else {
    cd_arg_buf(&g, a->grad_y);
    cd_arg_buf(&g, a->proj_o);
    cd_arg_buf(&g, a->rope_cos);
    cd_arg_buf(&g, a->rope_sin);
    cd_arg_buf(&g, a->grad_out);
  }
  cd_arg_u64(&g, a->N);
  cd_arg_u32(&g, (uint32_t)a->H);
  /* 16-byte accesses where every offset is a multiple of 4 floats (D % 8 == 0 keeps the indexes so) */
  const camdelta_buffer bufs[8] = {a->out, a->out2, a->grad_y, a->proj_o, a->rope_cos, a->rope_sin, a->y, a->grad_out};
  cd_arg_u32(&g, (uint32_t)cd_buffers_aligned4(bufs, 8));
  if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_output_transform: setting arguments");
  const size_t lws[3] = {ts * (a->D / 4), 1, 1}, gws[3] = {(a->N + ts - 1) / ts * lws[0], a->H, a->B};
  if (!st)
    st = cd_enqueue(ctx, k, 3, gws, lws, l, backward ? "cd_output_transform_backward" : "cd_output_transform");
  clReleaseKernel(k);
  return st;
}

static camdelta_status run(camdelta_context *ctx, const camdelta_output_transform_args *a, int backward) {
  const char *op = backward ? "camdelta_output_transform_backward" : "camdelta_output_transform_forward";
  cd_clear_error();
  camdelta_status st = cd_prologue(op, ctx, a, NULL, 0, a ? a->profile : NULL, NULL, 0);
  if (!st) st = cd_check_head_dim(op, a->D);
  if (st) return st;
  if (!a->B || !a->N || !a->H)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, N=%zu, H=%zu: each must be at least 1", op, a->B, a->N, a->H);
  size_t total;
  const size_t f[4] = {a->B, a->N, a->H, a->D};
  if (!cd_prod(&total, 4, f) || total > SIZE_MAX / 4 || a->N > UINT32_MAX || a->H > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D overflows", op);
  const size_t BN16 = a->B * a->N * 16, NDh = a->N * (a->D / 2);
  const cd_tensor_arg in[5] = {{backward ? "grad_y" : "out", backward ? a->grad_y : a->out, total, 4},
                               {"out2", backward ? (camdelta_buffer){NULL, 0} : a->out2, total, 4},
                               {"proj_o", a->proj_o, BN16, 4},
                               {"rope_cos", a->rope_cos, NDh, 4},
                               {"rope_sin", a->rope_sin, NDh, 4}};
  const cd_tensor_arg out[1] = {{backward ? "grad_out" : "y", backward ? a->grad_out : a->y, total, 4}};
  for (int i = 0; i < 5; i++)
    if ((st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, 4, i == 1))) return st;
  if ((st = cd_check_buffer(op, out[0].name, out[0].b, total, 4, 0))) return st;
  if ((st = cd_check_no_overlap(op, out, 1, in, 5))) return st;
  cl_kernel k;
  size_t ts;
  if ((st = cd_branch_kernel(ctx, a->D, "cd_output_transform", &k, &ts))) return st; /* build before enqueuing */
  clReleaseKernel(k);
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);
  st = cd_output_transform_enqueue(ctx, backward, a, &l);
  return cd_launch_end(ctx, &l, st);
}

camdelta_status camdelta_output_transform_forward(camdelta_context *ctx, const camdelta_output_transform_args *args) {
  return run(ctx, args, 0);
}

camdelta_status camdelta_output_transform_backward(camdelta_context *ctx,
                                                   const camdelta_output_transform_args *args) {
  return run(ctx, args, 1);
}
