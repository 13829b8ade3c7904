/* Output transform (docs/math.md §8.5), forward and backward: checks and the launches of cl/branch.cl. */
#include <stdio.h>

#include "ops/branch_common.h"
#include "ops/camera_op.h"
#include "ops/prep_common.h"

camdelta_status cd_branch_kernel(camdelta_context *ctx, camdelta_dtype dtype, size_t D, const char *name,
                                 cl_kernel *k, size_t *ts) {
  return cd_prep_kernel(ctx, "branch.cl", name, dtype, D, k, ts);
}

int cd_output_cpu(camdelta_context *ctx, camdelta_dtype dtype) {
  return cd_option(ctx, CD_OPT_OUTPUT_FORM, dtype) == 1 && !cd_loop_budget(ctx);
}

/* 8-token blocks per work-item of the CPU form's output transform (CD_OB of cl/branch_cpu.cl) */
enum { OT_CPU_BLOCKS = 4 };

camdelta_status cd_branch_cpu_kernel(camdelta_context *ctx, camdelta_dtype dtype, const char *name, cl_kernel *k) {
  char opts[80], dt[40];
  snprintf(opts, sizeof opts, "%s -DCD_OB=%d", cd_dtype_opts(dtype, dt), OT_CPU_BLOCKS);
  return cd_kernel(ctx, "branch_cpu.cl", opts, name, k);
}

size_t cd_branch_cpu_groups(const camdelta_context *ctx, size_t items, size_t G) {
  const size_t want = 4 * (ctx->info.compute_units ? ctx->info.compute_units : 1);
  size_t cg = G;
  while (cg > 1 && items * ((G + cg - 1) / cg) < want) cg = (cg + 1) / 2;
  return cg;
}

/* Work-group form: a work-group per tile of tokens of one (b, h) (cl/branch.cl). CPU form: a work-item per
 * OT_CPU_BLOCKS blocks of 8 tokens of one batch row, every head (cl/branch_cpu.cl). */
camdelta_status cd_output_transform_enqueue(camdelta_context *ctx, camdelta_dtype dtype, int backward,
                                            const camdelta_output_transform_args *a, cd_launch *l) {
  const int cpu = cd_output_cpu(ctx, dtype);
  const char *name = cpu ? (backward ? "cd_ot_cpu_backward" : "cd_ot_cpu_forward")
                         : (backward ? "cd_output_transform_backward" : "cd_output_transform");
  cl_kernel k;
  size_t ts = 1;
  camdelta_status st =
      cpu ? cd_branch_cpu_kernel(ctx, dtype, name, &k) : cd_branch_kernel(ctx, dtype, a->D, name, &k, &ts);
  if (st) return st;
  cd_args g = {k, 0, CL_SUCCESS};
  if (!backward) {
    cd_arg_buf(&g, a->out);
    cd_arg_buf(&g, a->out2.mem ? a->out2 : a->out);
    cd_arg_u32(&g, a->out2.mem ? 1u : 0u);
    CD_ARG_BUFS(&g, a->proj_o, a->rope_cos, a->rope_sin, a->y);
  } else {
    CD_ARG_BUFS(&g, a->grad_y, a->proj_o, a->rope_cos, a->rope_sin, a->grad_out);
  }
  cd_arg_u64(&g, a->N);
  cd_arg_u32(&g, (uint32_t)a->H);
  const size_t nblk = (a->N + 8 * OT_CPU_BLOCKS - 1) / (8 * OT_CPU_BLOCKS);
  if (cpu) {
    cd_arg_u32(&g, (uint32_t)a->D);
    cd_arg_u32(&g, (uint32_t)nblk);
  } else {
    /* 16-byte accesses where every offset is a multiple of 4 floats (D % 8 == 0 keeps the indexes so) */
    const camdelta_buffer bufs[8] = {a->out,      a->out2, a->grad_y, a->proj_o,
                                     a->rope_cos, a->rope_sin, a->y, a->grad_out};
    cd_arg_u32(&g, (uint32_t)cd_buffers_aligned4(bufs, 8));
  }
  if (g.err != CL_SUCCESS)
    st = cd_cl_fail(g.err, cpu ? "cd_ot_cpu: setting arguments" : "cd_output_transform: setting arguments");
  const size_t lws[3] = {cpu ? 1 : ts * (a->D / 4), 1, 1};
  const size_t gws[3] = {cpu ? a->B * nblk : (a->N + ts - 1) / ts * lws[0], a->H, a->B};
  if (!st) st = cd_enqueue(ctx, k, cpu ? 1 : 3, gws, lws, l, name);
  clReleaseKernel(k);
  return st;
}

enum { OT_OUT, OT_OUT2, OT_PROJ_O, OT_ROPE_COS, OT_ROPE_SIN, OT_Y, OT_GRAD_Y, OT_GRAD_OUT, OT_SLOTS };
#define OT_SLOT(field, role) CD_SLOT(camdelta_output_transform_args, field, role)
/* the forward's and the backward's use of the struct they share */
static const cd_slot OT_SLOTS_OF[2][OT_SLOTS] = {
    {[OT_OUT] = OT_SLOT(out, CD_IN), [OT_OUT2] = OT_SLOT(out2, CD_IN), [OT_PROJ_O] = OT_SLOT(proj_o, CD_IN),
     [OT_ROPE_COS] = OT_SLOT(rope_cos, CD_IN), [OT_ROPE_SIN] = OT_SLOT(rope_sin, CD_IN), [OT_Y] = OT_SLOT(y, CD_OUT),
     [OT_GRAD_Y] = OT_SLOT(grad_y, CD_UNREAD), [OT_GRAD_OUT] = OT_SLOT(grad_out, CD_UNREAD)},
    {[OT_OUT] = OT_SLOT(out, CD_UNREAD), [OT_OUT2] = OT_SLOT(out2, CD_UNREAD), [OT_PROJ_O] = OT_SLOT(proj_o, CD_IN),
     [OT_ROPE_COS] = OT_SLOT(rope_cos, CD_IN), [OT_ROPE_SIN] = OT_SLOT(rope_sin, CD_IN),
     [OT_Y] = OT_SLOT(y, CD_UNREAD), [OT_GRAD_Y] = OT_SLOT(grad_y, CD_IN), [OT_GRAD_OUT] = OT_SLOT(grad_out, CD_OUT)}};

/* the call's state: 1 for the backward */
static int ot_backward(const cd_call *c) { return *(const int *)c->op; }

static camdelta_status ot_check(cd_call *c) {
  const camdelta_output_transform_args *a = c->args;
  const char *op = c->entry->op;
  camdelta_status st = cd_check_head_dim(op, a->D);
  if (st) return st;
  if (!a->B || !a->N || !a->H)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, N=%zu, H=%zu: each must be at least 1", op, a->B, a->N, a->H);
  size_t total;
  const size_t f[4] = {a->B, a->N, a->H, a->D};
  if (!cd_prod(&total, 4, f) || total > SIZE_MAX / 4 || a->N > UINT32_MAX || a->H > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D overflows", op);
  const cd_use tokens = {.need = CD_REQUIRED, .elems = total, .es = 4};
  const cd_use rope = {.need = CD_REQUIRED, .elems = a->N * (a->D / 2), .es = 4};
  if (!ot_backward(c)) {
    c->use[OT_OUT] = tokens, c->use[OT_Y] = tokens;
    c->use[OT_OUT2] = (cd_use){.need = CD_OPTIONAL, .elems = total, .es = 4};
  } else {
    c->use[OT_GRAD_Y] = tokens, c->use[OT_GRAD_OUT] = tokens;
  }
  c->use[OT_PROJ_O] = (cd_use){.need = CD_REQUIRED, .elems = a->B * a->N * 16, .es = 4};
  c->use[OT_ROPE_COS] = rope, c->use[OT_ROPE_SIN] = rope;
  return CAMDELTA_OK;
}

/* Builds the program first: nothing is enqueued when a build fails. */
static camdelta_status ot_plan(cd_call *c) {
  cl_kernel k;
  size_t ts;
  const camdelta_status st =
      cd_output_cpu(c->ctx, CAMDELTA_F32)
          ? cd_branch_cpu_kernel(c->ctx, CAMDELTA_F32, ot_backward(c) ? "cd_ot_cpu_backward" : "cd_ot_cpu_forward", &k)
          : cd_branch_kernel(c->ctx, CAMDELTA_F32, ((const camdelta_output_transform_args *)c->args)->D,
                             "cd_output_transform", &k, &ts);
  if (!st) clReleaseKernel(k);
  return st;
}

static camdelta_status ot_enqueue(cd_call *c, cd_launch *l) {
  return cd_output_transform_enqueue(c->ctx, CAMDELTA_F32, ot_backward(c), c->args, l);
}

static const cd_entry OT_ENTRIES[2] = {
    CD_ENTRY("camdelta_output_transform_forward", camdelta_output_transform_args, OT_SLOTS_OF[0], ot_check, ot_plan,
             ot_enqueue, NULL),
    CD_ENTRY("camdelta_output_transform_backward", camdelta_output_transform_args, OT_SLOTS_OF[1], ot_check, ot_plan,
             ot_enqueue, NULL)};

camdelta_status camdelta_output_transform_forward(camdelta_context *ctx, const camdelta_output_transform_args *args) {
  int backward = 0;
  cd_call c = {.entry = &OT_ENTRIES[backward], .ctx = ctx, .args = args, .op = &backward};
  return cd_run_entry(&c);
}

camdelta_status camdelta_output_transform_backward(camdelta_context *ctx,
                                                   const camdelta_output_transform_args *args) {
  int backward = 1;
  cd_call c = {.entry = &OT_ENTRIES[backward], .ctx = ctx, .args = args, .op = &backward};
  return cd_run_entry(&c);
}
