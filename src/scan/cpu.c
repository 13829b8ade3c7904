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

/* CD_ROW_BLOCKS(R) over D rows, each block a loop of D (cd_mx_rows, cd_frames_s1, cd_frames_s2): the blocks' loop
 * and at most three rest blocks, every loop one more for its exit. */
static size_t row_blocks(size_t D, size_t R) { return D / R + 1 + (D / R + 3) * (D + 1); }

/* cd_cpu_ddecay's work-item before its walk over a frame's token blocks: the D x D / 8 partial sums and the loops'
 * exits. */
static size_t ddecay_fixed(size_t D) { return D * D / 8 + 2 + 1; }

/* Every loop is counted one iteration more than its body runs (its exit test), an upper bound of what gallivm counts
 * that the chains' failure points on llvmpipe need (a causal gradient chain of 18 steps at D=112 ends early without
 * it). */
void cd_cpu_loop_count(const cd_cpu_scan *p, cd_cpu_loops *n) {
  const size_t D = p->D, cbv = p->cb / 8, tc8 = p->tc / 8;
  /* the accumulators zeroed (or read back) and stored (A: a loop of cb per row) */
  n->gram_fixed = D * cbv + 1 + D * (2 + p->cb) + 1;
  /* a chunk: its loop, the staging (8 tokens a step, each over the cbv vectors; a tail of up to 7 with its cb loop),
   * the row blocks' loop and each block's walk over the chunk (8 tokens a step, each token a loop step: that loop's
   * body is too large to be unrolled; then the tail) */
  n->gram_chunk = 1 + tc8 * (2 + cbv) + 1 + 8 * (2 + p->cb) + D / p->gr + 1 + (D / p->gr + 2) * (tc8 * 10 + 8 + 1);
  /* the state loaded (twice in a gradient chain), the reverse's first two saves, the last or carried one; per step
   * the pre and post saves (gradients: W added, G saved), the D / 4 row blocks of the step each over D, the copy */
  n->chain_fixed = 4 * (D + 1) + 1;
  n->chain_step = 1 + 2 * (D + 1) + D * cbv + 1 + D / 4 + 1 + (D / 4) * (D + 1);
  n->apply = row_blocks(D, p->ar);
  n->frames = row_blocks(D, p->fr) + 2 * row_blocks(D, p->far);
  n->ddecay_fixed = ddecay_fixed(D);
}

camdelta_status cd_cpu_ddecay_fits(camdelta_context *ctx, size_t D, size_t ntiles) {
  const size_t budget = cd_loop_budget(ctx), need = ddecay_fixed(D) + ntiles + 1; /* each block a step */
  if (!budget || need <= budget) return CAMDELTA_OK;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                 "camdelta_scan_backward: the driver ends a work-item's loops after %zu iterations per launch (Mesa's "
                 "llvmpipe does, silently); cd_cpu_ddecay at D=%zu over %zu token blocks a frame needs %zu",
                 budget, D, ntiles, need);
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
  /* the gram sums as many whole chunks of a frame's tokens per launch as the driver's loop budget allows */
  p->budget = cd_loop_budget(ctx);
  p->gram_tokens = SIZE_MAX;
  if (p->budget) {
    cd_cpu_loops n;
    cd_cpu_loop_count(p, &n);
    if (n.gram_fixed + n.gram_chunk > p->budget)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "scan (cpu): the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe "
                     "does, silently); cd_cpu_gram at D=%zu needs %zu for one chunk of %u tokens",
                     p->budget, p->D, n.gram_fixed + n.gram_chunk, p->tc);
    p->gram_tokens = (p->budget - n.gram_fixed) / n.gram_chunk * p->tc;
  }
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
  const size_t cols = mode == CD_CPU_GRAM_AU ? 2 * p->D : p->D;
  const size_t gws[2] = {g->BH * g->F, cols / p->cb};
  static const char *const what[] = {"cd_cpu_gram (W)", "cd_cpu_gram (A)", "cd_cpu_gram (A, U)", "cd_cpu_gram (U)"};
  /* p->gram_tokens of a frame's tokens per launch (whole chunks, so in the order of one launch), the raw sums carried
   * in the outputs from one launch to the next */
  camdelta_status st = CAMDELTA_OK;
  for (size_t s0 = 0; !st; s0 += p->gram_tokens) {
    const int last = p->gram_tokens >= g->S - s0;
    cd_args a = {p->gram, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, x, y0, y1, beta, decay, o0, o1);
    cd_arg_u64(&a, g->N);
    cd_arg_u32(&a, (uint32_t)g->S);
    cd_arg_u32(&a, (uint32_t)g->F);
    cd_arg_u32(&a, (uint32_t)mode);
    cd_arg_u32(&a, (uint32_t)s0);
    cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(s0 + p->gram_tokens));
    cd_arg_u32(&a, (s0 ? 1u : 0u) | (last ? 0u : 2u));
    st = launch(ctx, &a, 2, gws, l, what[mode]);
    if (last) break;
  }
  return st;
}

/* The tensor-core path, where the device has it (or it is emulated), comes first. Under a driver's loop budget
 * (cd_loop_budget: Mesa's llvmpipe) the chains and the gram split their walks over launches (chain.c, cd_cpu_gram);
 * the apply, frames and ddecay work-items (a token block, a frame) must fit as they are, and every walk's one step:
 * where they do not, the work-group forms, which split differently, run. */
int cd_scan_cpu_forms(camdelta_context *ctx, size_t D) {
  if (cd_option(ctx, CD_OPT_SCAN_CPU, CAMDELTA_F32) != 1 || cd_tc_available(ctx)) return 0;
  const size_t budget = cd_loop_budget(ctx);
  if (!budget) return 1;
  cd_cpu_scan p;
  memset(&p, 0, sizeof p);
  cd_cpu_scan_tiles(ctx, D, &p);
  cd_cpu_loops n;
  cd_cpu_loop_count(&p, &n);
  return n.gram_fixed + n.gram_chunk <= budget && n.chain_fixed + n.chain_step <= budget && n.apply <= budget &&
         n.frames <= budget && n.ddecay_fixed + 1 <= budget;
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
