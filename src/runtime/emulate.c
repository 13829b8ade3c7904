/* Device limits lowered for tests (CAMDELTA_DEVICE_LIMITS), the facts of another device (plan golden tests), and
 * the launch trace those tests compare. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static const char LIMITS_VAR[] = "CAMDELTA_DEVICE_LIMITS";

/* One "KEY=N" value of CAMDELTA_DEVICE_LIMITS: a plain decimal in [1, 2^40]. */
static int parse_value(const char *text, size_t len, uint64_t *out) {
  if (len == 0 || len > 13) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return 0;
    v = v * 10 + (uint64_t)(text[i] - '0');
  }
  if (v == 0 || v > ((uint64_t)1 << 40)) return 0;
  *out = v;
  return 1;
}

camdelta_status cd_limits_env(camdelta_context *ctx) {
  const char *text = getenv(LIMITS_VAR);
  if (!text || !*text) return CAMDELTA_OK;
  camdelta_device_info *in = &ctx->info;
  for (const char *p = text; *p;) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    uint64_t v = 0;
    const size_t klen = eq ? (size_t)(eq - p) : len;
    const int off = eq && klen == 9 && strncmp(p, "profiling", 9) == 0 && len - klen - 1 == 1 && eq[1] == '0';
    /* loops=none: no loop budget, and the probe kernel is not run (a simulator such as oclgrind, whose checks would
     * also see the probe's launch) */
    const int noloops = eq && klen == 5 && strncmp(p, "loops", 5) == 0 && len - klen - 1 == 4 &&
                        strncmp(eq + 1, "none", 4) == 0;
    if (!eq || (!off && !noloops && !parse_value(eq + 1, len - klen - 1, &v)))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                     "%s: '%.*s' is not KEY=N (keys local, wg, cu, loops; N a whole number from 1 to 2^40), "
                     "loops=none or profiling=0",
                     LIMITS_VAR, (int)len, p);
    if (klen == 5 && strncmp(p, "local", 5) == 0) {
      if (v < in->local_mem_bytes) in->local_mem_bytes = v;
    } else if (klen == 2 && strncmp(p, "wg", 2) == 0) {
      if (v < in->max_work_group_size) in->max_work_group_size = (size_t)v;
    } else if (klen == 2 && strncmp(p, "cu", 2) == 0) {
      if (v < in->compute_units) in->compute_units = (unsigned)v;
    } else if (noloops) {
      ctx->loop_limit = 0, ctx->loop_budget = 0, ctx->loop_state = 1;
    } else if (klen == 5 && strncmp(p, "loops", 5) == 0) {
      ctx->loop_limit = (size_t)v;
    } else if (klen == 9 && strncmp(p, "profiling", 9) == 0 && len - klen - 1 == 1 && eq[1] == '0') {
      ctx->kernel_times = 0;
    } else {
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: unknown key '%.*s' (local, wg, cu, loops or profiling=0)",
                     LIMITS_VAR, (int)klen, p);
    }
    p += len;
    if (*p == ',') p++;
  }
  return CAMDELTA_OK;
}

/* The facts cd_context_emulate gives a context: those that plans read (ctx->info, the preferred work-group
 * multiple, the tensor-core path). */
typedef struct emulated_device {
  const char *name;
  camdelta_device_info info;
  size_t pref_multiple;
  int tc; /* 1: the tensor-core path exists (emulated on the real device) */
} emulated_device;

/* An NVIDIA Hopper card as its OpenCL driver (580.159.04, OpenCL 3.0 CUDA 13.0.98) reports it: 132 multiprocessors,
 * 48 KiB of local memory, the tensor-core path (emulated on the real device). */
#define CD_HOPPER(short_name, cl_name, memory)                                                                      \
  {.name = short_name,                                                                                             \
   .info = {.platform_name = "NVIDIA CUDA",                                                                        \
            .platform_version = "OpenCL 3.0 CUDA 13.0.98",                                                         \
            .device_name = cl_name,                                                                                \
            .device_vendor = "NVIDIA Corporation",                                                                 \
            .device_version = "OpenCL 3.0 CUDA",                                                                   \
            .driver_version = "580.159.04",                                                                        \
            .type = CL_DEVICE_TYPE_GPU,                                                                            \
            .max_work_group_size = 1024,                                                                           \
            .local_mem_bytes = 49152,                                                                              \
            .global_mem_bytes = (memory),                                                                          \
            .compute_units = 132,                                                                                  \
            .nvidia_ptx = 1},                                                                                      \
   .pref_multiple = 32,                                                                                            \
   .tc = 1}

static const emulated_device DEVICES[] = {
    CD_HOPPER("h200", "NVIDIA H200", 150754820096ull),
    /* the H100 of the device sessions (SXM, 80 GB HBM3), whose tile entries differ from the H200's; its global
     * memory rounded (no plan reads it) */
    CD_HOPPER("h100", "NVIDIA H100 80GB HBM3", 85000000000ull),
    {.name = "pocl2",
     .info = {.platform_name = "Portable Computing Language",
              .platform_version = "OpenCL 3.0 PoCL 3.1",
              .device_name = "pthread-emulated",
              .device_vendor = "AuthenticAMD",
              .device_version = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-haswell",
              .driver_version = "3.1",
              .type = CL_DEVICE_TYPE_CPU,
              .max_work_group_size = 4096,
              .local_mem_bytes = 524288,
              .global_mem_bytes = 23128711168ull,
              .compute_units = 2,
              .nvidia_ptx = 0},
     .pref_multiple = 8,
     .tc = 0},
};

camdelta_status cd_context_emulate(camdelta_context *ctx, const char *device) {
  for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++) {
    const emulated_device *e = &DEVICES[i];
    if (!device || strcmp(device, e->name) != 0) continue;
    mtx_lock(&ctx->lock);
    ctx->info = e->info;
    ctx->pref_multiple = e->pref_multiple;
    ctx->facts_emulated = 1;
    cd_opt_put(&ctx->opts, CD_OPT_SCAN_TC, e->tc ? 2 : 0, CD_OPT_FROM_API); /* emulated, or off */
    ctx->loop_state = 0; /* the loop budget is measured again (none, for emulated facts) */
    mtx_unlock(&ctx->lock);
    return CAMDELTA_OK;
  }
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "cd_context_emulate: unknown device '%s' (h200, h100 or pocl2)",
                 device ? device : "(null)");
}

void cd_trace_launches(camdelta_context *ctx, FILE *out, int dry) {
  ctx->trace = out;
  ctx->dry_run = out && dry;
}

void cd_trace_note(camdelta_context *ctx, const char *fmt, ...) {
  if (!ctx->trace) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(ctx->trace, fmt, ap);
  va_end(ap);
  fputc('\n', ctx->trace);
}
