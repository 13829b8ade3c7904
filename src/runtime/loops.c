/* The loop budget: how many loop iterations one work-item may run in a launch before the driver ends its loops
 * (cl/device_probe.cl). Measured once per context by running the probe, the answer kept with the cached binaries
 * (per device, driver and library) so that later processes read it instead of running it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* Steps the probe runs: any budget below this is seen (gallivm's is 65535). */
#define PROBE_STEPS (1u << 20)

static uint32_t lcg(uint32_t s) { return s * 1664525u + 1013904223u; }

/* Runs cd_probe_loops: 0 when all PROBE_STEPS steps ran (no budget seen), else the number that ran; 0 as well when
 * the probe cannot run (then nothing is known, and nothing is assumed). */
static size_t run_probe(camdelta_context *ctx) {
  cl_kernel k = NULL;
  if (cd_kernel(ctx, "device_probe.cl", "", "cd_probe_loops", &k)) return 0;
  cl_int err;
  cl_mem b = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, sizeof(cl_uint), NULL, &err);
  const cl_uint n = PROBE_STEPS;
  cl_uint got = 0;
  const size_t one = 1;
  int ok = err == CL_SUCCESS && clSetKernelArg(k, 0, sizeof b, &b) == CL_SUCCESS &&
           clSetKernelArg(k, 1, sizeof n, &n) == CL_SUCCESS &&
           clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &one, &one, 0, NULL, NULL) == CL_SUCCESS &&
           clEnqueueReadBuffer(ctx->queue, b, CL_TRUE, 0, sizeof got, &got, 0, NULL, NULL) == CL_SUCCESS;
  if (b) clReleaseMemObject(b);
  clReleaseKernel(k);
  if (!ok) return 0;
  uint32_t s = 1;
  for (size_t i = 0; i < PROBE_STEPS; i++) {
    if (s == got) return i; /* the first i whose value matches: LCG values do not repeat within 2^32 steps */
    s = lcg(s);
  }
  return 0; /* s == got after all steps: no budget; another value: not this probe's result, nothing known */
}

size_t cd_loop_budget(camdelta_context *ctx) {
  mtx_lock(&ctx->lock);
  const int known = ctx->loop_state;
  size_t budget = ctx->loop_budget;
  mtx_unlock(&ctx->lock);
  if (known) return budget;
  budget = 0;
  if (!ctx->facts_emulated) { /* an emulated device's facts (plan golden tests) include no budget */
    const char *src = NULL;
    size_t len = 0;
    char *owned = NULL, key[65];
    if (cd_kernel_source("device_probe.cl", &src, &len, &owned) == CAMDELTA_OK) {
      cd_cache_key(ctx, "camdelta-loop-probe-result", src, len, key);
      size_t blen = 0;
      unsigned char *rec = cd_cache_load(key, &blen);
      char text[24] = "";
      int have = 0;
      if (rec && blen > 0 && blen < sizeof text) {
        memcpy(text, rec, blen);
        char *end = NULL;
        const unsigned long long v = strtoull(text, &end, 10);
        if (end && *end == '\0' && end != text) have = 1, budget = (size_t)v;
      }
      free(rec);
      if (!have) {
        budget = run_probe(ctx);
        snprintf(text, sizeof text, "%zu", budget);
        cd_cache_store(key, (const unsigned char *)text, strlen(text), ctx->real_info.device_name);
      }
    }
    free(owned);
    cd_clear_error(); /* a probe that cannot run is an answer (nothing known), not an error of the caller's call */
  }
  /* CAMDELTA_DEVICE_LIMITS=loops=N emulates a budget (the smaller of the two where both exist) */
  if (ctx->loop_limit && (!budget || ctx->loop_limit < budget)) budget = ctx->loop_limit;
  mtx_lock(&ctx->lock);
  ctx->loop_budget = budget;
  ctx->loop_state = 1;
  mtx_unlock(&ctx->lock);
  return budget;
}
