/* The CPU forms of the scan's phases (cl/scan_cpu.cl): one program per head dim, its kernels and their launches
 * on explicit buffers. The arithmetic and the buffers are those of the FMA forms (scan_chunkwise.cl,
 * scan_backward.cl), so each kernel stands in for its FMA counterpart phase by phase: the engine's units
 * (units.h) take them where cd_scan_cpu_forms() says. Internal to src/scan/. */
#ifndef CAMDELTA_SCAN_CPU_FORMS_H
#define CAMDELTA_SCAN_CPU_FORMS_H
#include "runtime/internal.h"

typedef struct cd_cpu_scan {
  size_t D;
  unsigned cb; /* gram and chain columns per work-group */
  unsigned tc; /* gram tokens per staged chunk */
  unsigned tv;  /* apply: float8 token vectors per block (1 .. 4) */
  unsigned ftv; /* frames: float8 token vectors per block (1 .. 4) */
  unsigned gr;  /* gram rows per register block (2, 4, 6 or 8) */
  unsigned ar;  /* apply rows per register block (1 .. 8) */
  unsigned far; /* frames dk and dq rows per register block (1 .. 8) */
  unsigned fr;  /* frames stage 1 value columns per register block (1 .. 8) */
  size_t budget;      /* the driver's loop budget per work-item and launch (cd_loop_budget; 0: none) */
  size_t gram_tokens; /* a frame's tokens the gram sums per launch: whole chunks of tc within the budget (SIZE_MAX:
                         all at once) */
  char opts[160];
  cl_kernel gram, chain, pair_chain, grad_chain, pair_grad_chain, apply, frames, ddecay;
} cd_cpu_scan;

/** Whether the context's fixed-shape plans at head dim D take the CPU forms (option scan CPU: CPU devices by
 *  default), where the tensor-core path is not available and, under the driver's loop budget (cd_loop_budget), where
 *  every CPU kernel's work-item fits a launch with one step of its walk (cd_cpu_loop_count); AUTO then runs the
 *  chunkwise algorithm. */
int cd_scan_cpu_forms(camdelta_context *ctx, size_t D);

/** Loop iterations one work-item of each CPU kernel runs at most, counted as written in cl/scan_cpu.cl (every loop,
 *  the reduction loops unrolled by 4 included, except those of a constant trip count of at most 8, which the
 *  compilers unroll: Mesa's gallivm, whose budget this is for, counts none of them; docs/portability.md). */
typedef struct cd_cpu_loops {
  size_t gram_fixed, gram_chunk;  /* the gram: per launch, and per chunk of tc tokens */
  size_t chain_fixed, chain_step; /* every chain (states, pair, gradients, recomputed states): per launch, per step */
  size_t apply, frames;           /* a work-item of the apply and of the frames kernel */
  size_t ddecay_fixed;            /* ddecay: plus one per token block of the frame */
} cd_cpu_loops;
void cd_cpu_loop_count(const cd_cpu_scan *p, cd_cpu_loops *n);
/** UNSUPPORTED with a message naming the budget where cd_cpu_ddecay's work-item at head dim D over `ntiles` token
 *  blocks a frame exceeds the context's loop budget. */
camdelta_status cd_cpu_ddecay_fits(camdelta_context *ctx, size_t D, size_t ntiles);

/** The geometry every launch sees: BH chains of F frames of S tokens, N = F·S tokens per (b, h). */
typedef struct cd_cpu_geo {
  size_t BH, F, S, N;
} cd_cpu_geo;

/** The tiles for head dim D (a multiple of 8) on the context's device: the gram's chunk shrunk until its local
 *  memory fits the device's. */
void cd_cpu_scan_tiles(const camdelta_context *ctx, size_t D, cd_cpu_scan *p);
/** Builds the program for p->D with p's tiles (cd_cpu_scan_tiles first, or set by hand) and creates its kernels; sets
 *  p->budget and p->gram_tokens from the context's loop budget (UNSUPPORTED where not one chunk fits). */
camdelta_status cd_cpu_scan_build(camdelta_context *ctx, cd_cpu_scan *p);
void cd_cpu_scan_release(cd_cpu_scan *p);
/** A unit's own reference to one of the program's kernels (the unit releases it as it releases its other forms'). */
camdelta_status cd_cpu_retain(cl_kernel k, const char *unit, cl_kernel *out);

/** Gram modes (cd_cpu_gram): the outputs computed together. */
typedef enum cd_cpu_gram_mode {
  CD_CPU_GRAM_W = 0,  /* W = Qᵀ·dO (x = q, y0 = dO, o0 = W) */
  CD_CPU_GRAM_A = 1,  /* A = d·(I − KᵀβK) (x = y0 = k, o0 = A) */
  CD_CPU_GRAM_AU = 2, /* A and U = KᵀβV (x = y0 = k, y1 = v, o0 = A, o1 = U) */
  CD_CPU_GRAM_U = 3   /* U only (x = k, y1 = v, o1 = U) */
} cd_cpu_gram_mode;
camdelta_status cd_cpu_gram(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, cd_cpu_gram_mode mode,
                            camdelta_buffer x, camdelta_buffer y0, camdelta_buffer y1, camdelta_buffer beta,
                            camdelta_buffer decay, camdelta_buffer o0, camdelta_buffer o1, cd_launch *l);
#endif
