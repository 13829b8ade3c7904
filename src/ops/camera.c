/* Cameras -> per-token matrices and camera-half RoPE tables (docs/math.md §8.1): checks and the launches of
 * cl/camera.cl. The RoPE angles are computed on the host in f64 per axis position (T*nt + Hs*nh + Ws*nh values,
 * uploaded with the call); the device spreads them to the (N, D/2) tables. The matrices are computed on the device in
 * f32. */
#include <math.h>
#include <stdlib.h>

#include "ops/branch_common.h"
#include "ops/camera_op.h"

static const char OP[] = "camdelta_camera_forward";

enum { CAM_CONDITIONS, CAM_PROJ_Q, CAM_PROJ_KV, CAM_PROJ_O, CAM_ROPE_COS, CAM_ROPE_SIN, CAM_SLOTS };
#define CAM_SLOT(field, role) CD_SLOT(camdelta_camera_args, field, role)
static const cd_slot CAMERA_SLOTS[CAM_SLOTS] = {
    [CAM_CONDITIONS] = CAM_SLOT(camera_conditions, CD_IN), [CAM_PROJ_Q] = CAM_SLOT(proj_q, CD_OUT),
    [CAM_PROJ_KV] = CAM_SLOT(proj_kv, CD_OUT), [CAM_PROJ_O] = CAM_SLOT(proj_o, CD_OUT),
    [CAM_ROPE_COS] = CAM_SLOT(rope_cos, CD_OUT), [CAM_ROPE_SIN] = CAM_SLOT(rope_sin, CD_OUT)};

typedef struct camera_call {
  size_t N;
} camera_call;

static camdelta_status camera_check(cd_call *c) {
  const camdelta_camera_args *a = c->args;
  camera_call *s = c->op;
  size_t N;
  camdelta_status st = cd_check_grid(OP, a->T, a->Hs, a->Ws, &N);
  if (st) return st;
  if (!a->B) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=0 (expected at least 1)", OP);
  if (!a->pt || !a->ph || !a->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: patch (%zu, %zu, %zu): each must be at least 1", OP, a->pt, a->ph,
                   a->pw);
  size_t BN16, bytes, cams, NDh;
  const int rope = a->rope_cos.mem || a->rope_sin.mem;
  if (rope && (st = cd_check_head_dim(OP, a->D))) return st;
  if (!CD_PROD(&BN16, a->B, N, 16) || !CD_PROD(&bytes, BN16, 4) || a->B > UINT32_MAX ||
      !CD_PROD(&cams, a->B, a->T, 20) || !CD_PROD(&NDh, N, rope ? a->D / 2 : 1))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*16 overflows", OP);
  c->use[CAM_CONDITIONS] = (cd_use){.need = CD_REQUIRED, .elems = cams, .es = 4};
  for (int i = CAM_PROJ_Q; i <= CAM_PROJ_O; i++) c->use[i] = (cd_use){.need = CD_OPTIONAL, .elems = BN16, .es = 4};
  for (int i = CAM_ROPE_COS; i <= CAM_ROPE_SIN; i++) c->use[i] = (cd_use){.need = CD_OPTIONAL, .elems = NDh, .es = 4};
  s->N = N;
  return CAMDELTA_OK;
}

camdelta_status cd_camera_check_conditions(camdelta_context *ctx, const char *op, camdelta_buffer cc, size_t B,
                                           size_t T) {
  enum { CHUNK = 4096 * 20 }; /* floats read at a time: whole frames */
  const size_t n = B * T * 20;
  float *host = malloc((n < CHUNK ? n : CHUNK) * sizeof *host);
  if (!host) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  camdelta_status st = CAMDELTA_OK;
  for (size_t at = 0; at < n && !st; at += CHUNK) {
    const size_t len = n - at < CHUNK ? n - at : CHUNK;
    const cl_int err = clEnqueueReadBuffer(ctx->queue, cc.mem, CL_TRUE, (cc.offset + at) * sizeof(float),
                                           len * sizeof(float), host, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      st = cd_cl_fail(err, "reading camera_conditions to check them");
      break;
    }
    const size_t i = cd_camera_first_inf_f32(host, len);
    if (i < len) st = cd_camera_inf_error(op, at + i, T, host[i]);
  }
  free(host);
  return st;
}

camdelta_status cd_camera_enqueue(camdelta_context *ctx, const camdelta_camera_args *a, size_t N, cd_launch *l) {
  return cd_camera_enqueue_at(ctx, a, N, 0, NULL, l);
}

camdelta_status cd_camera_enqueue_at(camdelta_context *ctx, const camdelta_camera_args *a, size_t N, size_t frame0,
                                     cd_camera_axis *keep, cd_launch *l) {
  const int want_m = a->proj_q.mem || a->proj_kv.mem || a->proj_o.mem;
  const int want_r = a->rope_cos.mem || a->rope_sin.mem;
  cl_kernel km = NULL, kr = NULL;
  cl_mem axis = NULL;
  camdelta_status st = CAMDELTA_OK;
  if (want_m) st = cd_kernel(ctx, "camera.cl", "", "cd_camera_matrices", &km);
  if (!st && want_r) st = cd_kernel(ctx, "camera.cl", "", "cd_camera_rope", &kr);
  size_t nt = 0, nh = 0;
  if (!st && want_r) {
    double omega[32];
    cd_rope_frequencies(a->D, &nt, &nh, omega);
    const size_t count = a->T * nt + (a->Hs + a->Ws) * nh; /* T, Hs, Ws below 2^32 (cd_check_grid), nt, nh < 32 */
    float *cs = cd_malloc_array(count ? count : 1, 2 * sizeof *cs);
    if (!cs) st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    if (!st) {
      size_t i = 0;
      const size_t first = frame0; /* global index of frame 0 (sequence parallelism) */
      const size_t ext[3] = {a->T, a->Hs, a->Ws}, nf[3] = {nt, nh, nh}, f0[3] = {0, nt, nt + nh};
      for (int ax = 0; ax < 3; ax++)
        for (size_t p = 0; p < ext[ax]; p++)
          for (size_t j = 0; j < nf[ax]; j++, i++) {
            const double ang = (double)(ax == 0 ? p + first : p) * omega[f0[ax] + j];
            cs[2 * i] = (float)cos(ang);
            cs[2 * i + 1] = (float)sin(ang);
          }
      const size_t bytes = (count ? count : 1) * 2 * sizeof *cs;
      cl_int err = CL_SUCCESS;
      if (keep) {
        st = cd_ensure_buffer(ctx, &keep->mem, &keep->bytes, bytes);
        if (!st) err = clEnqueueWriteBuffer(ctx->queue, keep->mem, CL_TRUE, 0, bytes, cs, 0, NULL, NULL);
        if (!st && err != CL_SUCCESS) st = cd_cl_fail(err, "camdelta_camera_forward: uploading the RoPE angles");
      } else {
        axis = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, cs, &err);
        if (err != CL_SUCCESS) axis = NULL, st = cd_cl_fail(err, "camdelta_camera_forward: uploading the RoPE angles");
      }
      free(cs);
    }
  }
  /* absent optional outputs: a valid buffer that is never written */
  const camdelta_buffer any = a->proj_q.mem    ? a->proj_q
                              : a->proj_kv.mem ? a->proj_kv
                              : a->proj_o.mem  ? a->proj_o
                              : a->rope_cos.mem ? a->rope_cos
                                                : a->rope_sin;
#define OPT(x) ((x).mem ? (x) : any)
  if (!st && want_m) {
    const size_t S = a->Hs * a->Ws;
    cd_args g = {km, 0, CL_SUCCESS};
    CD_ARG_BUFS(&g, a->camera_conditions, OPT(a->proj_q), OPT(a->proj_kv), OPT(a->proj_o));
    cd_arg_u64(&g, N);
    cd_arg_u32(&g, (uint32_t)a->T);
    cd_arg_u32(&g, (uint32_t)S);
    cd_arg_u32(&g, (uint32_t)a->Ws);
    cd_arg_f32(&g, (float)a->ph);
    cd_arg_f32(&g, (float)a->pw);
    cd_arg_u32(&g, (a->proj_q.mem ? 1u : 0u) | (a->proj_kv.mem ? 2u : 0u) | (a->proj_o.mem ? 4u : 0u));
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_camera_matrices: setting arguments");
    const size_t lws[2] = {64, 1}, gws[2] = {(N + 63) / 64 * 64, a->B};
    if (!st) st = cd_enqueue(ctx, km, 2, gws, cd_kernel_max_wg(ctx, km) >= 64 ? lws : NULL, l, "cd_camera_matrices");
  }
  if (!st && want_r) {
    cd_args g = {kr, 0, CL_SUCCESS};
    cd_arg_mem(&g, keep ? keep->mem : axis);
    cd_arg_buf(&g, OPT(a->rope_cos));
    cd_arg_buf(&g, OPT(a->rope_sin));
    cd_arg_u64(&g, N);
    cd_arg_u32(&g, (uint32_t)(a->Hs * a->Ws));
    cd_arg_u32(&g, (uint32_t)a->Ws);
    cd_arg_u32(&g, (uint32_t)a->T);
    cd_arg_u32(&g, (uint32_t)a->Hs);
    cd_arg_u32(&g, (uint32_t)nt);
    cd_arg_u32(&g, (uint32_t)nh);
    cd_arg_u32(&g, (a->rope_cos.mem ? 1u : 0u) | (a->rope_sin.mem ? 2u : 0u));
    if (g.err != CL_SUCCESS) st = cd_cl_fail(g.err, "cd_camera_rope: setting arguments");
    const size_t gws[2] = {a->D / 4, N};
    if (!st) st = cd_enqueue(ctx, kr, 2, gws, NULL, l, "cd_camera_rope");
  }
#undef OPT
  if (km) clReleaseKernel(km);
  if (kr) clReleaseKernel(kr);
  if (axis) clReleaseMemObject(axis); /* lives on until the enqueued kernel is done */
  return st;
}

/* The camera-conditions rule (an infinity refused, camdelta.h), then the program: nothing is enqueued when either
 * fails. */
static camdelta_status camera_plan(cd_call *c) {
  const camdelta_camera_args *a = c->args;
  camdelta_status st = cd_camera_check_conditions(c->ctx, OP, a->camera_conditions, a->B, a->T);
  if (st) return st;
  if (!a->proj_q.mem && !a->proj_kv.mem && !a->proj_o.mem && !a->rope_cos.mem && !a->rope_sin.mem)
    return CAMDELTA_OK;
  cl_program prog;
  return cd_program(c->ctx, "camera.cl", "", &prog);
}

static camdelta_status camera_enqueue(cd_call *c, cd_launch *l) {
  return cd_camera_enqueue(c->ctx, c->args, ((const camera_call *)c->op)->N, l);
}

static const cd_entry CAMERA =
    CD_ENTRY(OP, camdelta_camera_args, CAMERA_SLOTS, camera_check, camera_plan, camera_enqueue, NULL);

camdelta_status camdelta_camera_forward(camdelta_context *ctx, const camdelta_camera_args *args) {
  camera_call s = {.N = 0};
  cd_call c = {.entry = &CAMERA, .ctx = ctx, .args = args, .op = &s};
  return cd_run_entry(&c);
}
