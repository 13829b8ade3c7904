/* camdelta_fill_random / camdelta_random_value: device-side input generation for benchmarks and large tests
 * (cl/random.cl), and the same values on the host. */
#include <math.h>
#include <stdio.h>

#include "internal.h"

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

camdelta_status camdelta_fill_random(camdelta_context *ctx, camdelta_buffer buf, size_t count, camdelta_dtype dtype,
                                     uint64_t seed, float lo, float hi) {
  static const char op[] = "camdelta_fill_random";
  cd_clear_error();
  const cd_named_buffer nb[1] = {{"buf", buf}};
  camdelta_status st = cd_prologue(op, ctx, ctx, NULL, 0, NULL, nb, 1);
  if (st) return st;
  if ((st = cd_check_dtype(op, dtype))) return st;
  if (!isfinite(lo) || !isfinite(hi) || !isfinite(hi - lo))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: lo=%g and hi=%g must be finite (and so must hi - lo)", op,
                   (double)lo, (double)hi);
  if ((st = cd_check_buffer(op, "buf", buf, count, camdelta_dtype_size(dtype), 0))) return st;
  if (count == 0) return CAMDELTA_OK;
  char opts[32];
  snprintf(opts, sizeof opts, "-DCD_DTYPE=%d", (int)dtype);
  cl_kernel k;
  if ((st = cd_kernel(ctx, "random.cl", opts, "cd_fill_random", &k))) return st;
  cd_args a = {k, 0, CL_SUCCESS};
  cd_arg_buf(&a, buf);
  cd_arg_u64(&a, count);
  cd_arg_u64(&a, seed);
  cd_arg_f32(&a, lo);
  cd_arg_f32(&a, hi - lo);
  if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_fill_random: setting arguments");
  /* enough work-items to fill the device, each looping over the rest */
  size_t lws = 256, groups = (count + lws - 1) / lws;
  const size_t max_groups = (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 64;
  if (groups > max_groups) groups = max_groups;
  if (lws > cd_kernel_max_wg(ctx, k)) lws = cd_kernel_max_wg(ctx, k);
  size_t gws = groups * lws;
  cd_launch l;
  cd_launch_init(&l, NULL);
  if (!st) st = cd_enqueue(ctx, k, 1, &gws, &lws, &l, "cd_fill_random");
  clReleaseKernel(k);
  return cd_launch_end(ctx, &l, st);
}
