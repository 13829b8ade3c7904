/* The CPU forms of the scan's phases: the program of cl/scan_cpu.cl and its launches (the engine's units choose
 * them, units.h). */
#include <stdio.h>
#include <string.h>

#include "scan/cpu.h"
#include "scan/units.h"

void cd_cpu_scan_tiles(const camdelta_context *ctx, size_t D, cd_cpu_scan *p) {
  p->D = D;
  p->cb = D % 16 == 0 ? 16 : 8;
  p->tc = 256;
  p->tv = 3;
  p->ftv = 1;
  p->gr = 6;
  p->ar = 4;
  p->far = 8;
  p->fr = 4;
  /* the gram's local memory: the staged chunk (tc x cb) and the accumulators (D x cb) */
  while (p->tc > 8 && (uint64_t)(p->tc + D) * p->cb * sizeof(float) > ctx->info.local_mem_bytes) p->tc /= 2;
}

/* The program's kernels, in the order of their names in cd_cpu_scan_build. */
enum { NKERNELS = 8 };
static void kernel_slots(cd_cpu_scan *p, cl_kernel *ks[NKERNELS]) {
  cl_kernel *all[NKERNELS] = {&p->gram,  &p->chain,  &p->pair_chain, &p->grad_chain, &p->pair_grad_chain,
                              &p->apply, &p->frames, &p->ddecay};
  memcpy(ks, all, sizeof all);
}

void cd_cpu_scan_release(cd_cpu_scan *p) {
  cl_kernel *ks[NKERNELS];
  kernel_slots(p, ks);
  for (size_t i = 0; i < NKERNELS; i++) cd_kernel_drop(ks[i]);
}

camdelta_status cd_cpu_scan_build(camdelta_context *ctx, cd_cpu_scan *p) {
  if (p->D % 8 || p->cb % 8 || p->D % p->cb || p->tc % 8 || !p->tc || !p->tv || p->tv > 4 || !p->ftv || p->ftv > 4 ||
      !p->gr || p->gr > 8 || p->gr % 2 || !p->ar || p->ar > 8 || !p->far || p->far > 8 || !p->fr || p->fr > 8)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "scan (cpu): tiles CB=%u TC=%u TV=%u FTV=%u GR=%u AR=%u FAR=%u FR=%u do not fit D=%zu", p->cb,
                   p->tc, p->tv, p->ftv, p->gr, p->ar, p->far, p->fr, p->D);
  snprintf(p->opts, sizeof p->opts,
           "-DCD_D=%zu -DCD_CB=%u -DCD_TC=%u -DCD_TV=%u -DCD_FTV=%u -DCD_GR=%u -DCD_AR=%u -DCD_FAR=%u -DCD_FR=%u", p->D,
           p->cb, p->tc, p->tv, p->ftv, p->gr, p->ar, p->far, p->fr);
  static const char *const names[NKERNELS] = {"cd_cpu_gram",       "cd_cpu_chain",           "cd_cpu_pair_chain",
                                              "cd_cpu_grad_chain", "cd_cpu_pair_grad_chain", "cd_cpu_apply",
                                              "cd_cpu_frames",     "cd_cpu_ddecay"};
  cl_kernel *ks[NKERNELS];
  kernel_slots(p, ks);
  for (size_t i = 0; i < NKERNELS; i++) *ks[i] = NULL;
  for (size_t i = 0; i < NKERNELS; i++) {
    camdelta_status st = cd_kernel(ctx, "scan_cpu.cl", p->opts, names[i], ks[i]);
    if (st) {
      cd_cpu_scan_release(p);
      return st;
    }
  }
  return CAMDELTA_OK;
}

static camdelta_status launch(camdelta_context *ctx, cd_args *a, cl_uint dims, const size_t *gws, cd_launch *l,
                              const char *what) {
  if (a->err != CL_SUCCESS) return cd_cl_fail(a->err, what);
  const size_t one[2] = {1, 1};
  return cd_enqueue(ctx, a->kernel, dims, gws, one, l, what);
}

camdelta_status cd_cpu_gram(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, cd_cpu_gram_mode mode,
                            camdelta_buffer x, camdelta_buffer y0, camdelta_buffer y1, camdelta_buffer beta,
                            camdelta_buffer decay, camdelta_buffer o0, camdelta_buffer o1, cd_launch *l) {
  /* absent operands stand in as a present one (never read) */
  if (!y0.mem) y0 = x;
  if (!y1.mem) y1 = x;
  if (!o0.mem) o0 = o1;
  if (!o1.mem) o1 = o0;
  if (!beta.mem) beta = x;
  if (!decay.mem) decay = x;
  cd_args a = {p->gram, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, x, y0, y1, beta, decay, o0, o1);
  cd_arg_u64(&a, g->N);
  cd_arg_u32(&a, (uint32_t)g->S);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_u32(&a, (uint32_t)mode);
  const size_t cols = mode == CD_CPU_GRAM_AU ? 2 * p->D : p->D;
  const size_t gws[2] = {g->BH * g->F, cols / p->cb};
  static const char *const what[] = {"cd_cpu_gram (W)", "cd_cpu_gram (A)", "cd_cpu_gram (A, U)", "cd_cpu_gram (U)"};
  return launch(ctx, &a, 2, gws, l, what[mode]);
}

/* The tensor-core path, where the device has it (or it is emulated), comes first. The CPU forms run each walk over
 * frames and tokens in one launch, so a driver with a loop budget (cd_loop_budget: Mesa's llvmpipe) keeps the
 * work-group forms, which split their launches within it. */
int cd_scan_cpu_forms(camdelta_context *ctx) {
  return cd_option(ctx, CD_OPT_SCAN_CPU, CAMDELTA_F32) == 1 && !cd_tc_available(ctx) && !cd_loop_budget(ctx);
}

camdelta_status cd_cpu_retain(cl_kernel k, const char *unit, cl_kernel *out) {
  const cl_int err = clRetainKernel(k);
  if (err != CL_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "%s: retaining the CPU form's kernel", unit);
    return cd_cl_fail(err, what);
  }
  *out = k;
  return CAMDELTA_OK;
}

camdelta_status cd_scan_cpu_program(camdelta_context *ctx, size_t D, cd_cpu_scan *p) {
  memset(p, 0, sizeof *p);
  cd_cpu_scan_tiles(ctx, D, p);
  return cd_cpu_scan_build(ctx, p);
}
