/* The CPU forms of the scan's phases (cl/scan_cpu.cl): one program per head dim, its kernels and their launches
 * on explicit buffers, and the forward and backward composed of them (gram → chain → apply; gram → chain →
 * frames → ddecay). The arithmetic and the buffers are those of the FMA forms (scan_chunkwise.cl,
 * scan_backward.cl), so each of these kernels can stand in for its FMA counterpart phase by phase. Internal. */
#ifndef CAMDELTA_SCAN_CPU_H
#define CAMDELTA_SCAN_CPU_H
#include "internal.h"

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
  char opts[160];
  cl_kernel gram, chain, pair_chain, grad_chain, apply, frames, ddecay;
} cd_cpu_scan;

/** The geometry every launch sees: BH chains of F frames of S tokens, N = F·S tokens per (b, h). */
typedef struct cd_cpu_geo {
  size_t BH, F, S, N;
} cd_cpu_geo;

/** The tiles for head dim D (a multiple of 8) on the context's device: the gram's chunk shrunk until its local
 *  memory fits the device's. */
void cd_cpu_scan_tiles(const camdelta_context *ctx, size_t D, cd_cpu_scan *p);
/** Builds the program for p->D with p's tiles (cd_cpu_scan_tiles first, or set by hand) and creates its kernels. */
camdelta_status cd_cpu_scan_build(camdelta_context *ctx, cd_cpu_scan *p);
void cd_cpu_scan_release(cd_cpu_scan *p);

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
/** The forward states (cd_scan_phase_b's contract): post, and pre / final when given (mem NULL: not written). */
camdelta_status cd_cpu_chain(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, camdelta_buffer A,
                             camdelta_buffer U, camdelta_buffer decay, camdelta_buffer init, camdelta_buffer post,
                             camdelta_buffer pre, camdelta_buffer final, int reverse, cd_launch *l);
/** out_f = Q_f·post_f. */
camdelta_status cd_cpu_apply(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, camdelta_buffer q,
                             camdelta_buffer post, camdelta_buffer out, cd_launch *l);
/** The backward's chain (cd_scan_bwd_chain's contract): with recompute the states into `states` first. */
typedef struct cd_cpu_grad_chain_io {
  camdelta_buffer A, W, U, states, init, gfinal, G, dinit;
  int reverse, recompute;
} cd_cpu_grad_chain_io;
camdelta_status cd_cpu_grad_chain(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g,
                                  const cd_cpu_grad_chain_io *io, cd_launch *l);
/** Token blocks per frame of S tokens (the partials buffer holds BH·F of them). */
size_t cd_cpu_frames_blocks(const cd_cpu_scan *p, size_t S);
/** Per key frame (cd_scan_bwd_frames' contract, dq.mem NULL: not computed), then ddecay from the partials. */
typedef struct cd_cpu_frames_io {
  camdelta_buffer k, v, beta, decay, dout, states, init, G;
  camdelta_buffer dq, dk, dv, dbeta, part, ddecay;
  int reverse, has_init;
} cd_cpu_frames_io;
camdelta_status cd_cpu_frames(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g,
                              const cd_cpu_frames_io *io, cd_launch *l);

/** Workspace of the compositions: A, U, W, G and the states (B, H, F, D, D) each, and the frames' partials. */
typedef struct cd_cpu_work {
  cl_mem A, U, W, G, states, part;
  size_t mat_bytes, part_bytes;
} cd_cpu_work;
camdelta_status cd_cpu_work_alloc(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, cd_cpu_work *w);
void cd_cpu_work_release(cd_cpu_work *w);

/** The forward composed of the CPU forms: gram (A, U) → chain → apply. Leaves the states each output frame reads
 *  in w->states and A_f in w->A. */
camdelta_status cd_cpu_scan_forward(camdelta_context *ctx, const cd_cpu_scan *p, const camdelta_scan_args *a,
                                    cd_cpu_work *w, cd_launch *l);
/** The backward composed of them: gram (W, and A unless have_a: w->A holds the forward's) → chain (recomputing
 *  the states unless have_states: w->states holds the forward's) → frames → ddecay. */
camdelta_status cd_cpu_scan_backward(camdelta_context *ctx, const cd_cpu_scan *p, const camdelta_scan_backward_args *a,
                                     int have_a, int have_states, cd_cpu_work *w, cd_launch *l);
#endif
