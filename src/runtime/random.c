/* camdelta_fill_random / camdelta_random_value: device-side input generation for benchmarks and large tests
 * (cl/random.cl), and the same values on the host. */
#include <math.h>
#include <stdio.h>

#include "runtime/internal.h"

static float random_unit(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(uint32_t)(z >> 40) * 0x1.0p-24f;
}

float camdelta_random_value(uint64_t seed, uint64_t index, float lo, float hi) {
  return fmaf(hi - lo, random_unit(seed, index), lo);
}

/* The parameters of camdelta_fill_random as an argument struct, for the entry driver. */
typedef struct fill_args {
  camdelta_buffer buf;
  size_t count;
  camdelta_dtype dtype;
  uint64_t seed;
  float lo, hi;
} fill_args;

static const cd_slot FILL_SLOTS[1] = {CD_SLOT(fill_args, buf, CD_OUT)};

static camdelta_status fill_check(cd_call *c) {
  const fill_args *a = c->args;
  const char *op = c->entry->op;
  camdelta_status st = cd_check_dtype(op, a->dtype);
  if (st) return st;
  if (!isfinite(a->lo) || !isfinite(a->hi) || !isfinite(a->hi - a->lo))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: lo=%g and hi=%g must be finite (and so must hi - lo)", op,
                   (double)a->lo, (double)a->hi);
  c->use[0] = (cd_use){.need = CD_REQUIRED, .elems = a->count, .es = camdelta_dtype_size(a->dtype)};
  return CAMDELTA_OK;
}

static camdelta_status fill_plan(cd_call *c) {
  const fill_args *a = c->args;
  if (a->count == 0) return CAMDELTA_OK;
  char opts[32];
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d", (int)a->dtype);
  return cd_kernel(c->ctx, "random.cl", opts, "cd_fill_random", (cl_kernel *)c->op);
}

static camdelta_status fill_enqueue(cd_call *c, cd_launch *l) {
  const fill_args *a = c->args;
  camdelta_context *ctx = c->ctx;
  const cl_kernel k = *(cl_kernel *)c->op;
  if (!k) return CAMDELTA_OK;
  cd_args g = {k, 0, CL_SUCCESS};
  cd_arg_buf(&g, a->buf);
  cd_arg_u64(&g, a->count);
  cd_arg_u64(&g, a->seed);
  cd_arg_f32(&g, a->lo);
  cd_arg_f32(&g, a->hi - a->lo);
  if (g.err != CL_SUCCESS) return cd_cl_fail(g.err, "cd_fill_random: setting arguments");
  /* enough work-items to fill the device, each looping over the rest */
  size_t lws = 256, groups = (a->count + lws - 1) / lws;
  const size_t max_groups = (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 64;
  if (groups > max_groups) groups = max_groups;
  if (lws > cd_kernel_max_wg(ctx, k)) lws = cd_kernel_max_wg(ctx, k);
  size_t gws = groups * lws;
  return cd_enqueue(ctx, k, 1, &gws, &lws, l, "cd_fill_random");
}

static camdelta_status fill_end(cd_call *c, camdelta_status st) {
  const cl_kernel k = *(cl_kernel *)c->op;
  if (k) clReleaseKernel(k);
  return st;
}

static const cd_entry FILL = {.op = "camdelta_fill_random",
                              .second = NULL,
                              .slots = FILL_SLOTS,
                              .nslots = 1,
                              .profile_part = -1,
                              .profile_offset = 0,
                              .check = fill_check,
                              .plan = fill_plan,
                              .enqueue = fill_enqueue,
                              .end = fill_end};

camdelta_status camdelta_fill_random(camdelta_context *ctx, camdelta_buffer buf, size_t count, camdelta_dtype dtype,
                                     uint64_t seed, float lo, float hi) {
  const fill_args a = {.buf = buf, .count = count, .dtype = dtype, .seed = seed, .lo = lo, .hi = hi};
  cl_kernel k = NULL;
  cd_call c = {.entry = &FILL, .ctx = ctx, .args = &a, .op = &k};
  return cd_run_entry(&c);
}
