/* Tile policy of the scan's FMA kernel families (cl/scan_sequential.cl, cl/scan_chunkwise.cl,
 * cl/scan_backward.cl), in one place: each kernel's parameters (the build options' names without "CD_"), their
 * constraints, their local-memory formula, the choice for given device limits and the tile overrides (the AUTO
 * choice between the forward's algorithms estimates these plans' costs: cost.h). Pure functions of the device
 * facts and the shape (no device, no environment): the programs' parts (programs.c) call them once per (operation,
 * device, shape class) as plans are built, and the unit tests call them with given device limits. Not installed. */
#ifndef CAMDELTA_SCAN_TILES_H
#define CAMDELTA_SCAN_TILES_H
#include "runtime/internal.h"

/* ------------------------------------------------------------------------------------ device limits */

/** What the forward's tile policy reads of a device (from camdelta_device_info, once per context). */
typedef struct cd_scan_limits {
  size_t local_bytes; /* usable local memory per work-group: the device's less 256 bytes, at most 1 MiB */
  size_t dev_wg;      /* the device's work-group limit */
  unsigned max_wg;    /* power of two, <= 256 */
  unsigned min_wg;    /* power of two >= the preferred multiple (32; 64 on AMD GPUs) */
  unsigned cus;
  int gpu;            /* GPU or accelerator */
  size_t loop_budget; /* loop iterations a work-item may run per launch (cd_loop_budget; 0: no limit) */
} cd_scan_limits;
void cd_scan_limits_from_info(const camdelta_device_info *info, cd_scan_limits *lim);

/** An output tile spread over a work-group: item grid wr x wc, each item owning rm x rn (strided). */
typedef struct cd_scan_layout {
  unsigned wr, rm, wc, rn;
} cd_scan_layout;

/* ------------------------------------------------------------------------------ sequential kernel */

/** cl/scan_sequential.cl: J value columns per work-group (nJ blocks), TS tokens per step, W items; layouts u
 *  (D x J state update), p (TS x J projections), o (J x TS outputs). */
typedef struct cd_seq_cfg {
  unsigned J, TS, W, nJ, PF; /* PF: next tile's loads in flight during the current tile's arithmetic (1 on GPUs) */
  unsigned OUT;              /* 1: outputs in the kernel; 2: states only, outputs by phase C (GPUs) */
  cd_scan_layout u, p, o;
  char opts[512];
} cd_seq_cfg;
/** Local memory of the sequential kernel's work-group. */
size_t cd_seq_local_bytes(size_t D, const cd_seq_cfg *c);
/** The sequential family's keys (src/options/table.c, CD_OPT_SEQUENTIAL + i): value columns per work-group, tokens
 *  per tile, work-group size, prefetch (1 on, 2 off), where the outputs are computed (1 in the kernel, 2 by the
 *  chunkwise phase C from the saved states). */
enum { CD_SQ_J, CD_SQ_TS, CD_SQ_W, CD_SQ_PF, CD_SQ_OUT, CD_SQ_COUNT };
/** Tiles for B*H = BH, D, S with work-groups of at most wg_cap items, then the override `ov` (NULL: none; 0 = field
 *  not given; `var` names its source in messages): J in [1, D], TS in [1, 1024], W a power of two in
 *  [32, the device's limit], and the work-group's local memory must fit. Under a loop budget (lim->loop_budget),
 *  narrower value blocks where a frame's step would not fit one launch. Fills c->opts. */
camdelta_status cd_seq_configure(const cd_scan_limits *lim, size_t BH, size_t D, size_t S, unsigned wg_cap,
                                 const unsigned *ov, const char *var, cd_seq_cfg *c);

/** Loop iterations one work-item of the sequential kernel runs (cl/scan_sequential.cl), counting every loop as
 *  written, none unrolled (an upper bound of what a driver's loop budget sees, cd_loop_budget): *fixed for the
 *  launch (staging set-up, the initial and the final state) and *per_step for each step of the walk over frames of
 *  S tokens (write_out: the kernel computes the outputs). */
void cd_seq_loop_count(size_t D, size_t S, int write_out, const cd_seq_cfg *c, size_t *fixed, size_t *per_step);
/** Steps of the walk per launch within a loop budget (0: no budget): the whole walk (`steps`) where it fits, else
 *  the most that fit; 0 when not even one does. */
size_t cd_seq_steps_per_launch(size_t D, size_t S, int write_out, const cd_seq_cfg *c, size_t budget,
                               size_t steps);

/* ------------------------------------------------------------------------------ chunkwise kernels */

/** The chunkwise family's keys (src/options/table.c, CD_OPT_CHUNKWISE + i). */
enum {
  CD_ST_A_WR, CD_ST_A_RM, CD_ST_A_WC, CD_ST_A_RN, CD_ST_A_KC,
  CD_ST_B_J, CD_ST_B_WR, CD_ST_B_RM, CD_ST_B_WC, CD_ST_B_RN, CD_ST_B_KC, CD_ST_B_PF,
  CD_ST_C_WR, CD_ST_C_RM, CD_ST_C_WC, CD_ST_C_RN, CD_ST_C_KC,
  CD_ST_COUNT
};

/** The chunkwise fields given by an override; 0 = not given; a, b, c: any field of the phase given. */
typedef struct cd_scan_override {
  unsigned v[CD_ST_COUNT];
  int a, b, c;
} cd_scan_override;
/** The override of the values v (0: not given). */
cd_scan_override cd_scan_override_of(const unsigned v[CD_ST_COUNT]);

/** cl/scan_chunkwise.cl, one program for the three phases. */
typedef struct cd_chunk_cfg {
  /* phase A: tile rows (key dim) x cols (2D: A then U), tokens staged per step */
  cd_scan_layout a;
  unsigned a_w, a_kc, a_nr, a_nc;
  /* phase B: value columns per work-group; b_pf chunks of A loaded ahead into registers (divides D / b_kc) */
  cd_scan_layout b;
  unsigned b_w, b_j, b_nj, b_kc, b_pf;
  /* phase C: value rows x tokens */
  cd_scan_layout c;
  unsigned c_w, c_kc, c_nv, c_ns;
  char opts[512]; /* one program holds the three kernels */
} cd_chunk_cfg;
/** Local memory of each phase's work-group. */
size_t cd_chunk_a_local_bytes(const cd_chunk_cfg *c);
size_t cd_chunk_b_local_bytes(size_t D, const cd_chunk_cfg *c);
size_t cd_chunk_c_local_bytes(const cd_chunk_cfg *c);
/** Loop iterations one work-item of each chunkwise phase runs (cl/scan_chunkwise.cl), counted as
 *  cd_seq_loop_count does: phase A over a frame of S tokens (*a), phase B's chain (*b_fixed for the launch,
 *  *b_step per frame) and phase C (*c). */
void cd_chunk_loop_count(size_t D, size_t S, const cd_chunk_cfg *c, size_t *a, size_t *b_fixed, size_t *b_step,
                         size_t *cc);
/** Phase A's count alone: *fixed per launch and *per_chunk per a_kc tokens of a frame. */
void cd_chunk_a_loop_count(const cd_chunk_cfg *c, size_t *fixed, size_t *per_chunk);
/** Tiles for BH, D, S with work-groups of at most wg_cap items, then the override `o` (NULL: none; `var` names
 *  it in messages); fills c->opts. */
camdelta_status cd_chunk_configure(const cd_scan_limits *lim, size_t BH, size_t D, size_t S, unsigned wg_cap,
                                   const cd_scan_override *o, const char *var, cd_chunk_cfg *c);

/* ----------------------------------------------------------------------------------- shape class */

/** What the forward's tiles depend on besides D and the device: the value-column blocks of the sequential kernel
 *  and of phase B, the token tile (a call with the same class gets the same tiles). */
typedef struct cd_scan_class {
  unsigned seq_blocks, b_blocks, tokens;
} cd_scan_class;
cd_scan_class cd_scan_shape_class(const cd_scan_limits *lim, size_t BH, size_t D, size_t S);

/* ------------------------------------------------------------------------------ backward kernels */

/** cl/scan_backward.cl (the FMA kernels). */
typedef struct cd_sbwd_cfg {
  size_t rpt; /* grams: rows (and columns) per work-item; work-group (D/rpt)^2 */
  size_t tsg; /* grams: tokens per local chunk */
  size_t cb;  /* chain: columns per work-group; work-group D / cr */
  size_t dpt; /* frames: value columns per work-item */
  size_t tl;  /* frames: token lanes; work-group tl * D/dpt */
  size_t tpt; /* frames: tokens per lane */
  size_t mc;  /* frames: contraction chunk */
  size_t rl;  /* ddecay: work-group size (power of two) */
  size_t cr;  /* chain: rows per work-item, dividing D (1 unless the chain kernel's work-group limit is below D) */
} cd_sbwd_cfg;
enum { CD_SB_RPT, CD_SB_TSG, CD_SB_CB, CD_SB_DPT, CD_SB_TL, CD_SB_TPT, CD_SB_MC, CD_SB_RL, CD_SB_CR, CD_SB_COUNT };
/** The backward's device limits: work-group limit, and usable local memory (at most 48 KiB, less 1 KiB). */
void cd_sbwd_limits(const camdelta_device_info *info, size_t *dev_wg, size_t *local_bytes);
/** Local memory of the grams and frames kernels. */
size_t cd_sbwd_grams_local_bytes(size_t D, const cd_sbwd_cfg *c);
size_t cd_sbwd_frames_local_bytes(size_t D, const cd_sbwd_cfg *c);
/** Largest configuration that fits the work-group limits (per kernel) and the local memory. */
camdelta_status cd_sbwd_choose(size_t D, size_t local_bytes, size_t wg_grams, size_t wg_frames, size_t wg_chain,
                               size_t wg_rl, cd_sbwd_cfg *c);
/** Loop iterations one work-item runs (counted as cd_seq_loop_count does): the grams kernel's *g_fixed per launch
 *  and *g_chunk per TSG tokens; the chain's *c_fixed per launch and *c_step per step. */
void cd_sbwd_loop_count(size_t D, const cd_sbwd_cfg *c, size_t *g_fixed, size_t *g_chunk, size_t *c_fixed,
                        size_t *c_step);
/** Replaces the given fields of `c` and checks every constraint the kernels rely on (`var` names the source). */
camdelta_status cd_sbwd_override(size_t D, size_t local_bytes, size_t dev_wg, const unsigned v[CD_SB_COUNT],
                                 const char *var, cd_sbwd_cfg *c);

/* ------------------------------------------------------------ overrides per context (tile_options.c) */

/** The override of a tile family from the option registry: v[0..n) for the keys from id `first` (0: not given, the
 *  policy chooses), *var the values' source for messages (the variable, or camdelta_tune_set(FAMILY)). 1 when any
 *  key is given. */
int cd_scan_tile_values(const camdelta_context *ctx, cd_opt_id first, unsigned n, unsigned *v, char *var,
                        size_t var_size);
#endif
