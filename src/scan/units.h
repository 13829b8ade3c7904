/* The scan engine's units: one per phase family, each a part of a plan (its kernel and the tiles it was built
 * with) and an enqueue on explicit buffers. The compositions (forward.c, backward.c, pair.c, packed.c,
 * summary.c, phases.c) build their plans from these parts and chain the enqueues; a phase's implementations
 * (its forms: the FMA kernels, the tensor-core kernel) are told apart inside the unit, so a new form of a phase,
 * or a new composition, is a change in one place. Internal to src/scan/ (the rest of the library includes
 * engine.h); not installed.
 *
 *   gram        per (b, h, f), D x D each: A_f = d_f·(I − K_fᵀβ_fK_f), U_f = K_fᵀβ_fV_f, W_f = Q_fᵀ·dO_f
 *   chain       serial over frames: the forward states, the pair's two chains, the backward's gradient chain
 *               (recomputing the states on the way when asked), the state summaries' D x D chains
 *   apply       per (b, h, f, tile): out_f = Q_f·M_f, optionally with the output transform as its epilogue; the
 *               backward's dq = dO_f·M_fᵀ
 *   frames      per (b, h, f, token tile): the backward's per-token gradients and ddecay partials
 *   sequential  the one-kernel recurrence
 *   pieces      ddecay from the partials, the pair's state sums and gradient adds
 *
 * The CPU forms (cpu.h, cl/scan_cpu.cl) of the gram, chain, apply, frames and ddecay come from one program per
 * plan (cd_cpu_scan, owned by the plan, which outlives its units); a unit built from it retains its kernel. They
 * run the fixed shape only (no packed clips). cd_scan_cpu_forms() says whether a plan takes them.
 *
 * Every enqueue sets its kernel's arguments and launches it on `l`: the caller holds the plan's `use` lock (the
 * kernel objects' arguments are not safe to set from two threads at once) and has built everything before the
 * first enqueue. Where the driver ends a work-item's loops after a fixed number of iterations per launch
 * (cd_loop_budget: Mesa's gallivm), the serial units (the sequential walk, the chains, the backward's grams over a
 * frame's tokens) run in as many launches as that budget needs, in the same order of arithmetic, their state
 * carried from one launch to the next through a scratch buffer; a unit whose one step cannot fit fails to build
 * with UNSUPPORTED and a message naming the budget. Without a budget every unit is one launch. Buffers are (B, H, F, D, D) per-frame matrices and (B, H, D, D) states unless said otherwise;
 * an absent optional buffer is {NULL, 0}. */
#ifndef CAMDELTA_SCAN_UNITS_H
#define CAMDELTA_SCAN_UNITS_H
#include "runtime/internal.h"
#include "scan/cpu.h"
#include "scan/tc.h"
#include "scan/tiles.h"

/* ------------------------------------------------------------------------------------------ geometry */

/** What every launch sees of a call's shape. Fixed shape: BH = B·H chains of F frames of S tokens, N = F·S tokens
 *  per (b, h) row, BHF = B·H·F per-frame matrices. Packed clips (packed.c): BH = clips·H chains over their clip's
 *  frames, F = every packed frame, S = the longest frame, N = the packed tokens, BHF = H·F, and pk the kernels'
 *  offsets table (cl/common.cl, CD_PK_ARGS) with pk_h = H. */
typedef struct cd_scan_geo {
  size_t D, F, S, N;
  size_t BH, BHF;
  cl_mem pk;
  uint32_t pk_h;
} cd_scan_geo;
cd_scan_geo cd_scan_geo_fixed(size_t B, size_t H, size_t D, size_t F, size_t S);
/** The token geometry most kernels take after their buffers: N (ulong), S and F (uint). */
void cd_arg_tokens(cd_args *a, const cd_scan_geo *geo);
/** The packed variant's last two kernel arguments (pk, pk_h); nothing for the fixed shape. */
void cd_arg_packed(cd_args *a, const cd_scan_geo *geo);

/** Picks the tiles and builds the CPU forms' program for head dim D into p (released by cd_cpu_scan_release). */
camdelta_status cd_scan_cpu_program(camdelta_context *ctx, size_t D, cd_cpu_scan *p);

/* ---------------------------------------------------------------------------------------------- gram */

/** The gram's forms. */
typedef enum cd_gram_form {
  CD_GRAM_NONE = 0,
  CD_GRAM_FMA_TILED,  /* cd_scan_phase_a (scan_chunkwise.cl): A and U as one D x 2D product, the chunkwise tiles */
  CD_GRAM_FMA_MODES,  /* cd_scan_bwd_grams (scan_backward.cl): W, A, U as the launch's first 1, 2 or 3 modes */
  CD_GRAM_FMA_SINGLE, /* cd_summary_gram (scan_summary.cl): one product per launch */
  CD_GRAM_TC,         /* cd_gram_tc (gemm_tc.cl): tensor cores; W in one launch, A with or without U in another */
  CD_GRAM_CPU         /* cd_cpu_gram (scan_cpu.cl): any of W, A, U; A with U in one launch */
} cd_gram_form;

typedef struct cd_gram {
  cd_gram_form form;
  cl_kernel k;
  unsigned w;      /* work-group size */
  unsigned nr, nc; /* FMA_TILED: row and column tiles of the D x 2D product */
  cd_tc_tiles t;   /* TC */
  cl_kernel k_small;     /* TC: the device table's small-work tiles (cd_tc_small_entry), or NULL */
  cd_tc_tiles t_small;   /* with its work-group size */
  unsigned w_small;
  size_t small_bhf;      /* k_small runs the calls of at most this many (b, h, f) frames */
  const cd_cpu_scan *cpu; /* CPU: the program (the plan's) */
  size_t tokens;   /* FMA_MODES, FMA_TILED: a frame's tokens summed per launch (whole TSG or KC chunks, as many as
                      fit the driver's loop budget; SIZE_MAX: all at once) */
} cd_gram;

/** Inputs (those the outputs need) and outputs (mem NULL: not computed). Tokens (B, H, D, N), beta per token,
 *  decay per frame. */
typedef struct cd_gram_io {
  camdelta_buffer q, k, v, dout, beta, decay;
  camdelta_buffer A, U, W;
} cd_gram_io;

camdelta_status cd_gram_build_tiled(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, cd_gram *g);
camdelta_status cd_gram_build_modes(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c,
                                    cd_gram *g);
camdelta_status cd_gram_build_single(camdelta_context *ctx, size_t D, cd_gram *g);
camdelta_status cd_gram_build_tc(camdelta_context *ctx, size_t D, int split, int vec, const char *extra, cd_gram *g);
camdelta_status cd_gram_build_cpu(const cd_cpu_scan *p, cd_gram *g);
void cd_gram_release(cd_gram *g);
/** The outputs the form computes together: FMA_TILED A and U (both), FMA_MODES W then A then U (a prefix: W; W and
 *  A; all three), FMA_SINGLE any, TC any but U without A. UNSUPPORTED for a set the form does not compute. */
camdelta_status cd_gram_enqueue(camdelta_context *ctx, const cd_gram *g, const cd_scan_geo *geo, const cd_gram_io *io,
                                cd_launch *l);

/* --------------------------------------------------------------------------------------------- chain */

typedef enum cd_chain_form {
  CD_CHAIN_NONE = 0,
  CD_CHAIN_STATES,      /* cd_scan_phase_b (scan_chunkwise.cl) */
  CD_CHAIN_STATES_PAIR, /* cd_pair_phase_b (scan_chunkwise.cl, tiles for the pair's 2·B·H chains) */
  CD_CHAIN_GRADS,       /* cd_scan_bwd_chain (scan_backward.cl) */
  CD_CHAIN_GRADS_PAIR,  /* cd_pair_bwd_chain (scan_backward.cl) */
  CD_CHAIN_SUMMARY,     /* cd_summary_apply (scan_summary.cl): one D x D step per launch */
  CD_CHAIN_CPU_STATES,  /* cd_cpu_chain (scan_cpu.cl): phase B's arguments, a work-item per (chain, column block) */
  CD_CHAIN_CPU_STATES_PAIR, /* cd_cpu_pair_chain */
  CD_CHAIN_CPU_GRADS,       /* cd_cpu_grad_chain: cd_scan_bwd_chain's arguments */
  CD_CHAIN_CPU_GRADS_PAIR   /* cd_cpu_pair_grad_chain: cd_pair_bwd_chain's arguments */
} cd_chain_form;

typedef struct cd_chain {
  cd_chain_form form;
  cl_kernel k;
  unsigned w;  /* work-group size (GRADS*: D / cr) */
  unsigned nj; /* STATES*: value-column blocks; GRADS*: column blocks D / CB */
  unsigned cr; /* GRADS*: rows per work-item (1 unless the compiled chain allows fewer than D items) */
  size_t per;  /* steps of the chain per launch within the driver's loop budget (SIZE_MAX: all in one launch) */
} cd_chain;

camdelta_status cd_chain_build_states(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, int pair,
                                      cd_chain *ch);
camdelta_status cd_chain_build_grads(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c, int pair,
                                     cd_chain *ch);
camdelta_status cd_chain_build_summary(camdelta_context *ctx, size_t D, cd_chain *ch);
/** The CPU form of a chain kind: CD_CHAIN_CPU_STATES, _STATES_PAIR, _GRADS or _GRADS_PAIR, its steps per launch
 *  within the context's loop budget (cd_chain_budget). */
camdelta_status cd_chain_build_cpu(camdelta_context *ctx, const cd_cpu_scan *p, cd_chain_form form, cd_chain *ch);
/** Sets ch->per from the chain's loop iterations per launch (fixed) and per step within the context's loop budget
 *  (cd_loop_budget); UNSUPPORTED with a message (what: the chain in words) where not one step fits. */
camdelta_status cd_chain_budget(camdelta_context *ctx, cd_chain *ch, size_t fixed, size_t per_step, const char *what);
void cd_chain_release(cd_chain *ch);

/** The forward states: causal M_f = A_f·M_{f−1} + U_f from init; reverse T_{F−1} = init, T_{f−1} = A_f·T_f + U_f.
 *  post: the state each output frame reads; pre (optional): the state each key frame's update starts from;
 *  final (optional): the state after the last key frame. */
typedef struct cd_chain_states_io {
  camdelta_buffer A, U, decay, init, post, pre, final;
  int reverse;
} cd_chain_states_io;
camdelta_status cd_chain_states(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                const cd_chain_states_io *io, cd_launch *l);

/** The pair's two chains in one launch: the causal one and the reverse one with A_f = 0, U_f = 0 where mask[f] is 0
 *  (F uint32), each into its own post (and final). */
typedef struct cd_chain_pair_io {
  camdelta_buffer A, U;
  cl_mem mask;
  camdelta_buffer init_c, init_r, post_c, post_r, final_c, final_r;
} cd_chain_pair_io;
camdelta_status cd_chain_states_pair(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                     const cd_chain_pair_io *io, cd_launch *l);

/** The backward's chain: with `recompute`, first the states M_f = A_f·M_prev + U_f into `states` (the layout the
 *  forward's post has); then the gradient chain G_f = dL/dM_f from W_f and gfinal into G, and dinit (optional).
 *  Absent optional buffers may be given any valid buffer (they are not read or written): A stands in. */
typedef struct cd_chain_grads_io {
  camdelta_buffer A, W, U, states, init, gfinal, G, dinit;
  int reverse, recompute;
} cd_chain_grads_io;
camdelta_status cd_chain_grads(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                               const cd_chain_grads_io *io, cd_launch *l);

/** The pair's two gradient chains in one launch (the reverse one with A_f = 0 where mask[f] is 0). */
typedef struct cd_chain_grads_pair_io {
  camdelta_buffer A, W;
  cl_mem mask;
  camdelta_buffer gfinal_c, gfinal_r, G_c, G_r, dinit_c, dinit_r;
} cd_chain_grads_pair_io;
camdelta_status cd_chain_grads_pair(camdelta_context *ctx, const cd_chain *ch, const cd_scan_geo *geo,
                                    const cd_chain_grads_pair_io *io, cd_launch *l);

/** A D x D matrix per chain: element offset, and stride between consecutive chains; mem NULL = absent. */
typedef struct cd_mat {
  cl_mem mem;
  size_t off, stride;
} cd_mat;
/** One summary step for every chain: Y = op(A)·(X + W) + U (op: A, or Aᵀ with trans; I when A is absent; absent
 *  X, W, U are zero). Y must not overlap an input. */
camdelta_status cd_chain_summary_step(camdelta_context *ctx, const cd_chain *ch, size_t D, size_t BH, cd_mat A,
                                      int trans, cd_mat X, cd_mat W, cd_mat U, cd_mat Y, cd_launch *l);
/** The state summaries of docs/math.md §9.2 over the F frames of the per-frame matrices A, U, W (U for E, W for G):
 *  T, E (from init; absent: zero) and G (from gfinal; absent: zero), each computed when its mem is set, in
 *  camdelta_scan_summary's orders. scratch: two (BH, D, D) buffers. */
typedef struct cd_chain_summary_io {
  cl_mem A, U, W;
  camdelta_buffer init, gfinal, T, E, G;
  cl_mem scratch[2];
  int reverse;
} cd_chain_summary_io;
camdelta_status cd_chain_summaries(camdelta_context *ctx, const cd_chain *ch, size_t D, size_t BH, size_t F,
                                   const cd_chain_summary_io *io, cd_launch *l);

/* --------------------------------------------------------------------------------------------- apply */

typedef enum cd_apply_form {
  CD_APPLY_NONE = 0,
  CD_APPLY_FMA, /* cd_scan_phase_c (scan_chunkwise.cl) */
  CD_APPLY_TC,  /* cd_apply_tc, and cd_apply_ot_tc for the output transform (gemm_tc.cl) */
  CD_APPLY_CPU  /* cd_cpu_apply (scan_cpu.cl): phase C's arguments, a work-item per (b, h, f, token block) */
} cd_apply_form;

typedef struct cd_apply {
  cd_apply_form form;
  cl_kernel k;
  unsigned w;            /* FMA: work-group size */
  unsigned nv, ts;       /* FMA: value-row tiles, tokens per tile */
  cd_tc_tiles t, t_ot;   /* TC: the apply's tiles, and the epilogue form's */
  cl_kernel k_ot;        /* TC: cd_apply_ot_tc, NULL where it was not asked for or its tile does not fit */
} cd_apply;

camdelta_status cd_apply_build_fma(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, cd_apply *a);
/** with_ot: also the output transform's epilogue form writing y in ot_dtype storage (left out when its tile needs
 *  more local memory). */
camdelta_status cd_apply_build_tc(camdelta_context *ctx, size_t D, int split, int vec, int with_ot,
                                  camdelta_dtype ot_dtype, const char *extra, cd_apply *a);
camdelta_status cd_apply_build_cpu(const cd_cpu_scan *p, cd_apply *a);
void cd_apply_release(cd_apply *a);
/** out_f = Q_f·states_f (the state each output frame reads). */
camdelta_status cd_apply_out(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo, camdelta_buffer q,
                             camdelta_buffer states, camdelta_buffer out, cd_launch *l);
/** The output transform (docs/math.md §8.5) of Q_f·states_f straight into y (B, N, H, D): *done = 1 when enqueued, 0
 *  (and OK, nothing enqueued) where the plan has no such form or y, proj_o or the tables are not on 16 bytes. */
typedef struct cd_apply_ot_io {
  camdelta_buffer q, states, proj_o, rope_cos, rope_sin, y;
  size_t H;
} cd_apply_ot_io;
camdelta_status cd_apply_out_transform(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo,
                                       const cd_apply_ot_io *io, int *done, cd_launch *l);
/** TC: dq_f = dO_f·Mᵀ with M the state output frame f reads (states_f; in reverse, frame F−1 reads init, which is
 *  not read without has_init). */
camdelta_status cd_apply_dq(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo, camdelta_buffer dout,
                            camdelta_buffer states, camdelta_buffer init, camdelta_buffer dq, int reverse, int has_init,
                            cd_launch *l);

/* -------------------------------------------------------------------------------------------- frames */

typedef enum cd_frames_form {
  CD_FRAMES_NONE = 0,
  CD_FRAMES_FMA, /* cd_scan_bwd_frames (scan_backward.cl): dq, dk, dv, dbeta, partials */
  CD_FRAMES_TC,  /* cd_frames_tc (gemm_tc.cl): dk, dv, dbeta, partials (dq by cd_apply_dq) */
  CD_FRAMES_CPU  /* cd_cpu_frames (scan_cpu.cl): the FMA form's arguments, a work-item per (b, h, f, token block) */
} cd_frames_form;

typedef struct cd_frames {
  cd_frames_form form;
  cl_kernel k;
  unsigned w;      /* work-group size */
  unsigned tokens; /* tokens per work-group */
  cd_tc_tiles t;   /* TC */
} cd_frames;

camdelta_status cd_frames_build_fma(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c,
                                    cd_frames *f);
camdelta_status cd_frames_build_tc(camdelta_context *ctx, size_t D, int split, int vec, const char *extra,
                                   cd_frames *f);
camdelta_status cd_frames_build_cpu(const cd_cpu_scan *p, cd_frames *f);
void cd_frames_release(cd_frames *f);
/** Token tiles per frame of S tokens (the partials buffer holds BHF of them). */
size_t cd_frames_tiles(const cd_frames *f, size_t S);

/** Per key frame, from the states the forward saved (or recomputed) and the gradient chain's G: dk, dv, dbeta
 *  and the ddecay partials `part` (BHF x tiles), and dq where the form computes it (FMA). */
typedef struct cd_frames_io {
  camdelta_buffer k, v, beta, decay, dout, states, init, G;
  camdelta_buffer dq, dk, dv, dbeta, part;
  int reverse, has_init;
} cd_frames_io;
camdelta_status cd_frames_enqueue(camdelta_context *ctx, const cd_frames *f, const cd_scan_geo *geo,
                                  const cd_frames_io *io, cd_launch *l);

/* ---------------------------------------------------------------------------------------- sequential */

typedef struct cd_sequential {
  cl_kernel k;
  cd_seq_cfg c;
  size_t per; /* steps of the walk per launch within the driver's loop budget (SIZE_MAX: all in one launch; 0: not
                 one step fits, and the enqueue fails with the budget's message) */
} cd_sequential;

typedef struct cd_sequential_io {
  camdelta_buffer q, k, v, beta, decay, out, init, final, pre, post;
  int reverse;
  int write_out; /* the kernel computes the outputs (else only post, for the apply) */
} cd_sequential_io;
void cd_sequential_release(cd_sequential *s);
camdelta_status cd_sequential_enqueue(camdelta_context *ctx, const cd_sequential *s, const cd_scan_geo *geo,
                                      const cd_sequential_io *io, cd_launch *l);

/* -------------------------------------------------------------------------------------------- pieces */

/** ddecay = <G_f, Mprev_f> + the frames' partials, in a fixed order (cd_scan_bwd_ddecay, scan_backward.cl). */
typedef struct cd_ddecay {
  cl_kernel k;
  unsigned w;
  int cpu; /* cd_cpu_ddecay */
} cd_ddecay;
camdelta_status cd_ddecay_build(camdelta_context *ctx, const char *opts, const cd_sbwd_cfg *c, cd_ddecay *d);
/** cd_cpu_ddecay (scan_cpu.cl): the same arguments, a work-item per (b, h, f). */
camdelta_status cd_ddecay_build_cpu(const cd_cpu_scan *p, cd_ddecay *d);
void cd_ddecay_release(cd_ddecay *d);
camdelta_status cd_ddecay_enqueue(camdelta_context *ctx, const cd_ddecay *d, const cd_scan_geo *geo,
                                  camdelta_buffer states, camdelta_buffer init, camdelta_buffer G, camdelta_buffer part,
                                  camdelta_buffer ddecay, size_t ntiles, int reverse, int has_init, cd_launch *l);

/** The elementwise kernels of scan_pair.cl: cd_pair_sum (sum = a + b) and cd_pair_add (a += b). */
typedef struct cd_pieces {
  cl_kernel sum, add;
} cd_pieces;
camdelta_status cd_pieces_build(camdelta_context *ctx, cd_pieces *p);
void cd_pieces_release(cd_pieces *p);
/** sum = a + b over n floats (n a multiple of 4). */
camdelta_status cd_pieces_sum(camdelta_context *ctx, const cd_pieces *p, cl_mem a, cl_mem b, cl_mem sum, uint64_t n,
                              cd_launch *l);
/* (a += b: cd_pair_add_enqueue, engine.h) */

/* -------------------------------------------------------------------------------------------- programs */

/** The chunkwise program's parts (phases A, B, C of one scan_chunkwise.cl build) for BH chains at D, S: the tiles
 *  (with the chunkwise override of the context), work-groups halved until every compiled kernel holds its own
 *  (an override that would be shrunk fails instead); `extra` is appended to the build options (the packed
 *  variant's, or ""). Any of gram, chain, apply may be NULL (that kernel is still built and checked). */
camdelta_status cd_chunk_parts(camdelta_context *ctx, size_t BH, size_t D, size_t S, const char *extra,
                               cd_chunk_cfg *cc, cd_gram *gram, cd_chain *chain, cd_apply *apply);
/** The pair's chain: cd_pair_phase_b with phase B's tiles for `chains` chains (the override applied), work-groups
 *  halved until the compiled kernel holds them. */
camdelta_status cd_chunk_pair_chain(camdelta_context *ctx, size_t chains, size_t D, size_t S, cd_chain *chain);
/** The sequential kernel for BH chains at D, S (the sequential override of the context applied) and, where it
 *  leaves the outputs to the apply (OUT=2), the chunkwise program's phase C for them (its FMA form; the caller
 *  replaces it with the tensor-core form where the plan has one): cc->opts and *apply. */
camdelta_status cd_sequential_parts(camdelta_context *ctx, size_t BH, size_t D, size_t S, cd_sequential *seq,
                                    cd_chunk_cfg *cc, cd_apply *apply);
/** The backward program's tiles for D (the backward override of the context applied), shrunk until every compiled
 *  kernel holds its work-group, and its parts: grams, chain (pair: the pair's chain), frames (FMA) and ddecay;
 *  skip_dq: the frames kernel leaves dq to the tensor-core apply. Any part pointer may be NULL. opts (256 bytes)
 *  receives the build options, *overridden whether the tiles came from the override. */
camdelta_status cd_backward_parts(camdelta_context *ctx, size_t D, int skip_dq, const char *extra, int pair,
                                  cd_sbwd_cfg *cfg, char *opts, int *overridden, cd_gram *gram, cd_chain *chain,
                                  cd_frames *frames, cd_ddecay *ddecay);
/* ------------------------------------------------------------------------------------- a plan's units */

/** The units and the workspace a plan of the scan holds; those it does not use stay zeroed (releasing them does
 *  nothing). Every plan struct of the scan starts with one, so that cd_units_destroy is its destructor. */
typedef struct cd_units {
  cd_sequential seq;
  cd_gram gram;
  cd_chain chain;
  cd_apply apply;
  cd_frames frames;
  cd_ddecay ddecay;
  cd_pieces pieces;
  cd_workspace ws;
  cd_cpu_scan cpu_prog; /* the CPU forms' program (the units built from it retain their kernels) */
} cd_units;
/** The chunkwise units in their CPU forms for head dim D: u->cpu_prog, and from it u->gram, u->chain (`chain`:
 *  CD_CHAIN_CPU_STATES, or CD_CHAIN_CPU_STATES_PAIR for the pair) and u->apply. */
camdelta_status cd_units_chunk_cpu(camdelta_context *ctx, size_t D, cd_chain_form chain, cd_units *u);
/** A plan's destructor (cd_plan_acquire): releases the units of `plan` (a struct starting with a cd_units) and its
 *  workspace, and frees it. */
void cd_units_destroy(void *plan);
/** The end of a plan's builder: *out = plan when st is CAMDELTA_OK, else the plan destroyed; returns st. */
camdelta_status cd_units_done(void *plan, camdelta_status st, void **out);

#endif
