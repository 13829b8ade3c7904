/* Tensor-core path: the feature test (once per context, its result kept with the cached binaries), and a family's
 * checked tiles and kernels of cl/gemm_tc.cl (the tiles themselves: tc_params.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/tc.h"

static const char PROBE_OPTS[] = "-DCD_PROBE -DCD_MR=1 -DCD_NR=1 -DCD_KC=8 -DCD_SPLIT=1";

/* Runs cd_tc_probe: C (16 x 8) = A (16 x 8)·B (8 x 8), through the staged tiles and through the raw ones, with
 * operands whose low mantissa bits matter, so that a wrong fragment layout, a missing split or a broken conversion
 * all show. 1: both exact to 1e-6. */
static int run_probe(camdelta_context *ctx, int emulate) {
  cl_kernel k = NULL;
  char opts[128];
  snprintf(opts, sizeof opts, "%s%s", PROBE_OPTS, emulate ? " -DCD_TC_EMULATE=1" : "");
  if (cd_kernel(ctx, "gemm_tc.cl", opts, "cd_tc_probe", &k)) return 0;
  float a[128], b[64], c[256];
  for (int e = 0; e < 128; e++) a[e] = (float)(((e * 37) % 17) - 8) / 8.0f + (float)e * 0x1p-17f;
  for (int e = 0; e < 64; e++) b[e] = (float)(((e * 23) % 13) - 6) / 4.0f - (float)e * 0x1p-18f;
  cl_int err;
  cl_mem ba = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
  cl_mem bb = err == CL_SUCCESS ? clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof b, b, &err)
                                : NULL;
  cl_mem bc = err == CL_SUCCESS ? clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, sizeof c, NULL, &err) : NULL;
  int ok = err == CL_SUCCESS;
  if (ok) {
    ok = clSetKernelArg(k, 0, sizeof ba, &ba) == CL_SUCCESS && clSetKernelArg(k, 1, sizeof bb, &bb) == CL_SUCCESS &&
         clSetKernelArg(k, 2, sizeof bc, &bc) == CL_SUCCESS;
    const size_t n = 32;
    ok = ok && clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &n, &n, 0, NULL, NULL) == CL_SUCCESS &&
         clEnqueueReadBuffer(ctx->queue, bc, CL_TRUE, 0, sizeof c, c, 0, NULL, NULL) == CL_SUCCESS;
  }
  if (ok) {
    double worst = 0, scale = 0;
    for (int half = 0; half < 2; half++)
      for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
          double r = 0;
          for (int q = 0; q < 8; q++) r += (double)a[m * 8 + q] * b[q * 8 + n];
          const double e = fabs((double)c[128 * half + m * 8 + n] - r);
          if (!(e <= worst)) worst = e; /* NaN counts as the worst */
          if (fabs(r) > scale) scale = fabs(r);
        }
    ok = worst <= 1e-6 * scale;
  }
  if (ba) clReleaseMemObject(ba);
  if (bb) clReleaseMemObject(bb);
  if (bc) clReleaseMemObject(bc);
  clReleaseKernel(k);
  return ok;
}

/* Option "scan" TC: 0 off, 1 where the feature test passes, 2 emulated. */
static unsigned tc_wanted(const camdelta_context *ctx) { return cd_option(ctx, CD_OPT_SCAN_TC, CAMDELTA_F32); }

int cd_tc_emulated(const camdelta_context *ctx) {
  const cd_tc_context *s = cd_tc_context_find(ctx);
  return tc_wanted(ctx) == 2 && s && s->probe_mode == 2 && s->probe == 2;
}

int cd_tc_available(camdelta_context *ctx) {
  const unsigned want = tc_wanted(ctx);
  if (!want) return 0;
  /* The tensor-core tiles take work-groups of at least 128 items (32*WM*WN, the safe tiles' WM = WN = 2) and up to
   * 48 KiB of local memory, what every device with this path (NVIDIA's) reports. A device, or a constrained profile
   * (CAMDELTA_DEVICE_LIMITS), reporting less takes the portable FMA forms, which fit themselves to any limits,
   * instead of refusing shapes. The tensor-core kernels walk a whole frame in one launch: a driver that ends a
   * work-item's loops after a budget (cd_loop_budget; emulated with CAMDELTA_DEVICE_LIMITS loops=N) takes the FMA
   * forms too, which split their launches under it. The emulation (option TC=2, tests on CPUs) keeps its own rule. */
  if (want != 2 && (ctx->info.max_work_group_size < 128 || ctx->info.local_mem_bytes < 48 * 1024 || cd_loop_budget(ctx)))
    return 0;
  cd_tc_context *s = cd_tc_context_of(ctx);
  if (!s) return 0; /* out of host memory: the portable forms need no state */
  if (s->probe && s->probe_mode == want) return s->probe > 0;
  int ok = 0;
  if (want == 2) {
    ok = run_probe(ctx, 1) ? 2 : 0;
    cd_clear_error();
  } else if (ctx->info.nvidia_ptx) {
    /* the recorded result of an earlier test on this device, driver and library */
    const char *src = NULL;
    size_t len = 0;
    char *owned = NULL, key[65];
    int known = 0;
    if (cd_kernel_source("gemm_tc.cl", &src, &len, &owned) == CAMDELTA_OK) {
      cd_cache_key(ctx, "camdelta-tc-probe-result", src, len, key);
      size_t blen = 0;
      unsigned char *rec = cd_cache_load(key, &blen);
      if (rec && blen == 1 && (rec[0] == '0' || rec[0] == '1')) known = 1, ok = rec[0] == '1';
      free(rec);
      if (!known) {
        ok = run_probe(ctx, 0);
        const unsigned char r = ok ? '1' : '0';
        cd_cache_store(key, &r, 1, ctx->real_info.device_name);
      }
    }
    free(owned);
    cd_clear_error(); /* a failed probe build is an answer, not an error of the caller's call */
  }
  mtx_lock(&ctx->lock);
  s->probe = ok ? ok : -1;
  s->probe_mode = want;
  mtx_unlock(&ctx->lock);
  return ok;
}

void cd_tc_options(char *buf, size_t size, const char *family, size_t D, int split, int vec, const cd_tc_tiles *t) {
  snprintf(buf, size,
           "-D%s -DCD_D=%zu -DCD_SPLIT=%d -DCD_VEC=%d -DCD_WM=%u -DCD_WN=%u -DCD_MR=%u -DCD_NR=%u -DCD_KC=%u", family, D,
           split ? 1 : 0, vec ? 1 : 0, t->wm, t->wn, t->mr, t->nr, t->kc);
}


camdelta_status cd_tc_tiles_for(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t) {
  const char *from;
  camdelta_status st = cd_tc_resolve(ctx, family, D, split, t, &from);
  if (st) return st;
  st = cd_tc_check(ctx, family, D, split, t);
  /* a table or saved entry (or a preferred heuristic) that does not fit this D or device: the safe heuristic; an
   * override that does not fit fails */
  if (st && strcmp(from, "override") != 0) {
    cd_clear_error();
    *t = cd_tc_safe_tiles(family, D);
    st = cd_tc_check(ctx, family, D, split, t);
  }
  return st;
}

static const char *const FAMILY_MACRO[CD_TC_FAMILIES] = {"CD_GRAM", "CD_APPLY", "CD_FRAMES"};

camdelta_status cd_tc_kernel(camdelta_context *ctx, int family, const char *name, size_t D, int split, int vec,
                             const cd_tc_tiles *t, const char *extra, char *opts, size_t opts_size, cl_kernel *k) {
  char buf[192];
  cd_tc_options(buf, sizeof buf, FAMILY_MACRO[family], D, split, vec, t);
  const char *emu = cd_tc_emulated(ctx) ? " -DCD_TC_EMULATE=1" : "";
  if (!extra) extra = "";
  if (strlen(buf) + strlen(emu) + strlen(extra) >= sizeof buf)
    return cd_fail(CAMDELTA_ERROR_BUILD, "tensor-core kernels: build options too long");
  strcat(buf, emu), strcat(buf, extra);
  if (opts) snprintf(opts, opts_size, "%s", buf);
  return cd_kernel(ctx, "gemm_tc.cl", buf, name, k);
}

int cd_tc_vec_ok(size_t S, const size_t *offsets, int n) {
  if (S % 4) return 0;
  for (int i = 0; i < n; i++)
    if (offsets[i] % 4) return 0;
  return 1;
}

camdelta_status cd_tc_unit(camdelta_context *ctx, int family, const char *name, size_t D, int split, int vec,
                           const char *extra, cd_tc_tiles *t, cl_kernel *k, unsigned *w) {
  camdelta_status st = cd_tc_tiles_for(ctx, family, D, split, t);
  if (!st) st = cd_tc_kernel(ctx, family, name, D, split, vec, t, extra, NULL, 0, k);
  if (!st && w) *w = cd_tc_wg(t);
  return st;
}
