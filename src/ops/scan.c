/* Scan forward (SPEC section 3): argument checks, the saved object, tile choice and the two algorithms.
 *
 * Sequential (cl/scan_sequential.cl): a work-group per (b, h, block of J value columns) walks the frames with its
 * state block in registers. On GPUs (OUT=2) it keeps only the recurrence and writes the state every output frame
 * reads, and the chunkwise phase C (tensor cores where available) computes all the outputs from them; on CPUs
 * (OUT=1) the kernel computes them itself, one launch.
 * Chunkwise (cl/scan_chunkwise.cl): phase A (A_f, U_f per (b, h, f)), phase B (serial over frames per
 * (b, h, value block), writes the state every output frame reads), phase C (out_f = Q_f·M_f per
 * (b, h, f, tile)). A, U and the per-frame states are scratch buffers allocated per call (with a saved
 * object, the per-frame states are its state_post and phase B also writes its state_pre).
 *
 * Tiles come from the device, never from constants for one GPU:
 *  - the work-group size W is a power of two, at least the kernel's preferred work-group multiple
 *    (from the device facts read at context creation, see device_limits()) and at most 256 and the device's/kernel's limit;
 *  - every work-group output tile is spread over its W items as (WR x WC) items owning (RM x RN)
 *    register blocks, chosen by pick_layout() to minimise padding and local-memory reads per FMA while
 *    keeping >= 8 consecutive items (a 32-byte sector) along the contiguous dimension of global stores;
 *  - tile extents fit the local memory the device reports (CL_DEVICE_LOCAL_MEM_SIZE);
 *  - the number of value-column blocks (sequential, phase B) is chosen so that B·H·blocks covers a GPU's
 *    compute units; CPUs use one block, and their variants depend on D and on S <= 8 only (PoCL spends
 *    seconds compiling each).
 * Plans: the tiles, work-group sizes and kernels are decided on the first call of an (algorithm, D, shape class,
 * precision) and kept in the context (src/tune/plan.c); later calls set arguments and launch. The tile policy
 * itself is src/tune/scan_tiles.c.
 * CAMDELTA_SCAN_VERBOSE=1 prints the chosen algorithm, work-group sizes and build options to stderr (each call).
 * The environment is read once, at context creation.
 * CAMDELTA_SCAN_TILES (tuning, see cd_parse_tiles() in check.c; or camdelta_tune_set family "chunkwise", which
 *   replaces it for the context): a comma-separated list of KEY=N replacing the chunkwise tile
 *   fields chosen above, keys A_WR A_RM A_WC A_RN A_KC (phase A), B_J B_WR B_RM B_WC B_RN B_KC (phase B), C_WR
 *   C_RM C_WC C_RN C_KC (phase C), e.g. "A_WR=16,A_RM=7,A_WC=8,A_RN=7,A_KC=16". Fields not given keep their
 *   choice (giving B_J re-picks phase B's layout first). A list that does not parse, or tiles that break a
 *   kernel's constraints, the local memory or the work-group limit, fail with a message naming the variable.
 * CAMDELTA_SEQ_TILES (or camdelta_tune_set family "sequential"): the same for the sequential kernel, keys J (value
 *   columns per work-group), TS (tokens per tile), W (items), PF (1 prefetch, 2 not), OUT (1 outputs in the
 *   kernel, 2 by phase C).
 *
 * AUTO (camdelta_scan_algorithm CAMDELTA_SCAN_AUTO) comes from the plans' costs (src/tune/cost.c): both plans
 * are configured for the call's B·H, D, F, S and each kernel's time is estimated from its flops (chunkwise: the
 * useful 6·N·D² per (b, h) plus phase B's 2·F·D³; tensor-core rates for phases A and C where the plan runs them
 * there), its bytes (chunkwise: 3·B·H·F·D² scratch floats written and read), its work-groups against what the
 * device holds, its serial chain (the sequential kernel: a stage per token tile per frame, two with the outputs in
 * the kernel, B·H·(value blocks) work-groups, plus phase C where it computes the outputs; phase B: its reduction
 * chunks per frame) and launches; chunkwise must be estimated at least 10%
 * faster. Calibrated on the H200 (sana480, sana720, D=64) and on PoCL with 2 cores (B1 H20 D112 F21 S1560,
 * B1 H8 D112 F5 S1560, B1 H1 D112 F5 S300, B2 H4 D32 F5 S64: sequential in all); the table of estimates
 * against measurements is in docs/performance.md ("AUTO from plan costs"), the unit tests in
 * tests/test_scan_auto.c. The plan description (camdelta_scan_plan_describe, CAMDELTA_SCAN_VERBOSE) ends with
 * both estimates and the choice. The caller can force either through camdelta_scan_args.algorithm (the CLI's
 * --algorithm); the estimates are then still shown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "internal.h"
#include "plan.h"
#include "scan_hook.h"
#include "scan_packed.h"
#include "scan_pair.h"
#include "scan_tiles.h"
#include "scan_warm.h"
#include "tune.h"

static const char *const OP = "camdelta_scan_forward";

const char *camdelta_precision_name(camdelta_precision precision) {
  switch (precision) {
    case CAMDELTA_PRECISION_EXACT: return "exact";
    case CAMDELTA_PRECISION_TF32: return "tf32";
  }
  return "unknown";
}

const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm) {
  switch (algorithm) {
    case CAMDELTA_SCAN_AUTO: return "auto";
    case CAMDELTA_SCAN_SEQUENTIAL: return "sequential";
    case CAMDELTA_SCAN_CHUNKWISE: return "chunkwise";
  }
  return "unknown";
}

/* ------------------------------------------------------------------------------------ saved object */

camdelta_status camdelta_scan_saved_create(camdelta_context *ctx, camdelta_scan_saved **out) {
  cd_clear_error();
  if (!ctx || !out)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_scan_saved_create: '%s' is NULL", ctx ? "out" : "ctx");
  *out = calloc(1, sizeof **out);
  if (!*out) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_scan_saved_create: out of host memory");
  (*out)->ctx = ctx;
  return CAMDELTA_OK;
}

void camdelta_scan_saved_destroy(camdelta_scan_saved *saved) {
  if (!saved) return;
  if (saved->state_pre) clReleaseMemObject(saved->state_pre);
  if (saved->state_post) clReleaseMemObject(saved->state_post);
  if (saved->a_mat) clReleaseMemObject(saved->a_mat);
  free(saved);
}

camdelta_status camdelta_scan_saved_states(const camdelta_scan_saved *saved, cl_mem *state_pre, cl_mem *state_post) {
  cd_clear_error();
  if (!saved)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_scan_saved_states: 'saved' is NULL");
  if (!saved->valid)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_scan_saved_states: 'saved' holds no states (no successful camdelta_scan_forward with it)");
  if (state_pre) *state_pre = saved->state_pre;
  if (state_post) *state_post = saved->state_post;
  return CAMDELTA_OK;
}

/* Both (B, H, F, D, D) buffers, (re)allocated together so that they always have the same size. */
static camdelta_status saved_reserve(camdelta_context *ctx, camdelta_scan_saved *saved, size_t bytes) {
  if (saved->state_pre && saved->state_post && saved->bytes >= bytes) return CAMDELTA_OK;
  if (saved->state_pre) clReleaseMemObject(saved->state_pre);
  if (saved->state_post) clReleaseMemObject(saved->state_post);
  saved->state_pre = saved->state_post = NULL;
  saved->bytes = 0;
  camdelta_status st = cd_alloc(ctx, bytes, &saved->state_pre);
  if (!st) st = cd_alloc(ctx, bytes, &saved->state_post);
  if (st) {
    if (saved->state_pre) clReleaseMemObject(saved->state_pre);
    saved->state_pre = NULL;
    return st;
  }
  saved->bytes = bytes;
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------------------------------------ tiling */

/* The tile policy lives in src/tune/scan_tiles.c (parameters, constraints, local memory, AUTO rule). */
typedef cd_scan_limits dev_limits;
typedef cd_seq_cfg seq_cfg;
typedef cd_chunk_cfg chunk_cfg;
typedef cd_scan_override tile_override;

static unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

static camdelta_status device_limits(camdelta_context *ctx, dev_limits *lim) {
  cd_scan_limits_from_info(&ctx->info, lim);
  lim->loop_budget = cd_loop_budget(ctx);
  return CAMDELTA_OK;
}

/* The chunkwise override: CAMDELTA_SCAN_TILES as read at context creation, or camdelta_tune_set "chunkwise";
 * *var names its source in messages. */
static camdelta_status read_override(camdelta_context *ctx, tile_override *o, char *var, size_t var_size) {
  char text[512];
  cd_tune_fma_text(ctx, CD_FMA_CHUNKWISE, text, sizeof text, var, var_size);
  return cd_scan_override_parse(var, text, o);
}

/* The sequential override: CAMDELTA_SEQ_TILES as read at context creation, or camdelta_tune_set "sequential";
 * *given: a value was set (sov then holds its fields, 0 = not given); *var names its source in messages. */
static camdelta_status read_seq_override(camdelta_context *ctx, unsigned sov[CD_SQ_COUNT], int *given, char *var,
                                         size_t var_size) {
  char text[512];
  cd_tune_fma_text(ctx, CD_FMA_SEQUENTIAL, text, sizeof text, var, var_size);
  *given = text[0] != 0;
  return *given ? cd_parse_tiles(var, text, cd_seq_tile_keys, CD_SQ_COUNT, sov) : CAMDELTA_OK;
}

/* ------------------------------------------------------------------------------------------ checks */

/* 1 when [a.offset, a.offset + na) and [b.offset, b.offset + nb) of the same cl_mem overlap. */
static int overlaps(camdelta_buffer a, size_t na, camdelta_buffer b, size_t nb) {
  if (!a.mem || !b.mem || a.mem != b.mem) return 0;
  return a.offset < b.offset + nb && b.offset < a.offset + na;
}

static camdelta_status check_args(const camdelta_scan_args *p, size_t *n_tok, size_t *n_state, size_t *n_frames) {
  if (p->algorithm != CAMDELTA_SCAN_AUTO && p->algorithm != CAMDELTA_SCAN_SEQUENTIAL &&
      p->algorithm != CAMDELTA_SCAN_CHUNKWISE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: algorithm %d unknown (expected CAMDELTA_SCAN_AUTO, SEQUENTIAL or CHUNKWISE)", OP,
                   (int)p->algorithm);
  if (p->precision != CAMDELTA_PRECISION_EXACT && p->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: precision %d unknown (expected CAMDELTA_PRECISION_EXACT or CAMDELTA_PRECISION_TF32)", OP,
                   (int)p->precision);
  camdelta_status st = cd_check_head_dim(OP, p->D);
  if (st) return st;
  const size_t B = p->B, H = p->H, D = p->D, F = p->F, S = p->S;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", OP, B, H, F, S);
  size_t N = 0, frames;
  const size_t fst[4] = {B, H, D, D}, ffr[5] = {B, H, F, D, D}, fbhf[3] = {B, H, F};
  if (!cd_mul(&N, F, S))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: N = F*S = %zu*%zu overflows size_t", OP, F, S);
  const size_t ftok[4] = {B, H, D, N};
  if (!cd_prod(n_tok, 4, ftok) || *n_tok > SIZE_MAX / 4 || !cd_prod(n_state, 4, fst) || !cd_prod(&frames, 5, ffr) ||
      frames > SIZE_MAX / 4 || !cd_prod(n_frames, 3, fbhf) || *n_frames > SIZE_MAX / 256)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t (B=%zu H=%zu D=%zu F=%zu S=%zu)", OP, B, H, D,
                   F, S);
  if (F > UINT32_MAX || S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu or S=%zu exceeds 2^32-1", OP, F, S);
  const size_t nbeta = *n_frames * S;
  if ((st = cd_check_buffer(OP, "q", p->q, *n_tok, 4, 0)) || (st = cd_check_buffer(OP, "k", p->k, *n_tok, 4, 0)) ||
      (st = cd_check_buffer(OP, "v", p->v, *n_tok, 4, 0)) ||
      (st = cd_check_buffer(OP, "beta", p->beta, nbeta, 4, 0)) ||
      (st = cd_check_buffer(OP, "decay", p->decay, *n_frames, 4, 0)) ||
      (st = cd_check_buffer(OP, "out", p->out, *n_tok, 4, 0)) ||
      (st = cd_check_buffer(OP, "init_state", p->init_state, *n_state, 4, 1)) ||
      (st = cd_check_buffer(OP, "final_state", p->final_state, *n_state, 4, 1)))
    return st;
  /* outputs must not overlap inputs (final_state may be init_state itself: each is read before written) */
  const struct {
    const char *name;
    camdelta_buffer b;
    size_t n;
  } in[6] = {{"q", p->q, *n_tok},          {"k", p->k, *n_tok},           {"v", p->v, *n_tok},
             {"beta", p->beta, nbeta},     {"decay", p->decay, *n_frames}, {"init_state", p->init_state, *n_state}};
  for (int i = 0; i < 6; i++) {
    if (overlaps(p->out, *n_tok, in[i].b, in[i].n))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'out' overlaps input '%s' in the same cl_mem", OP,
                     in[i].name);
    if (i < 5 && overlaps(p->final_state, *n_state, in[i].b, in[i].n))
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'final_state' overlaps input '%s' in the same cl_mem", OP,
                     in[i].name);
  }
  if (overlaps(p->final_state, *n_state, p->out, *n_tok))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'final_state' overlaps 'out' in the same cl_mem", OP);
  if (p->init_state.mem && p->final_state.mem == p->init_state.mem &&
      overlaps(p->final_state, *n_state, p->init_state, *n_state) && p->final_state.offset != p->init_state.offset)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'final_state' partly overlaps 'init_state' (the same range, or disjoint ranges, are fine)", OP);
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------------------------------- launches */

typedef struct scan_job {
  const camdelta_scan_args *p;
  size_t N, BH, BHF, n_state;
  cl_mem pre, post; /* saved states, or NULL */
  camdelta_scan_saved *sv; /* the saved object (phase A's A_f is kept in it), or NULL */
  cl_mem pk;        /* packed clips (scan_packed.c): the kernels' CD_PK_ARGS, else NULL */
  uint32_t pk_h;
} scan_job;

/* The packed variant's last two arguments (cl/common.cl, CD_PACKED). */
static void arg_pk(cd_args *a, const scan_job *j) {
  if (!j->pk) return;
  cd_arg_mem(a, j->pk);
  cd_arg_u32(a, j->pk_h);
}

/* Steps of the sequential walk (the kernel's t: F, and F + 1 in reverse with a final state) and how many one launch
 * may run within the driver's loop budget (cd_loop_budget; all of them where there is none); 0 when not one fits,
 * with the message set. */
static size_t seq_steps(camdelta_context *ctx, const camdelta_scan_args *p, const seq_cfg *c, int write_out,
                        size_t *steps) {
  *steps = p->F + (p->reverse && p->final_state.mem ? 1 : 0);
  const size_t budget = cd_loop_budget(ctx);
  const size_t per = cd_seq_steps_per_launch(p->D, p->S, write_out, c, budget, *steps);
  if (!per)
    cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
            "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, silently); "
            "one frame of the sequential scan at D=%zu S=%zu needs more: use the chunkwise algorithm or fewer "
            "tokens per frame", OP, budget, p->D, p->S);
  return per;
}

/* The sequential kernel; post: where the states every output frame reads go (NULL: nowhere), write_out: whether the
 * kernel computes the outputs itself. The walk runs in one launch, or where the driver caps a work-item's loop
 * iterations (cd_loop_budget) in launches of as many steps as fit, the state carried from one to the next through a
 * scratch buffer (each work-group reads its block of it before writing it back). */
static camdelta_status run_sequential(camdelta_context *ctx, const scan_job *j, cl_kernel k, const seq_cfg *c,
                                      cl_mem post, int write_out, cd_launch *l) {
  const camdelta_scan_args *p = j->p;
  size_t steps;
  const size_t per = seq_steps(ctx, p, c, write_out, &steps);
  if (!per) return CAMDELTA_ERROR_UNSUPPORTED;
  cl_mem carry = NULL;
  camdelta_status st = per < steps ? cd_alloc(ctx, j->n_state * sizeof(float), &carry) : CAMDELTA_OK;
  for (size_t t0 = 0; t0 < steps && !st; t0 += per) {
    const size_t t1 = t0 + per < steps ? t0 + per : steps;
    const camdelta_buffer in = t0 ? (camdelta_buffer){carry, 0} : p->init_state;
    const camdelta_buffer fin = t1 < steps ? (camdelta_buffer){carry, 0} : p->final_state;
    cd_args a = {k, 0, CL_SUCCESS};
    cd_arg_buf(&a, p->q);
    cd_arg_buf(&a, p->k);
    cd_arg_buf(&a, p->v);
    cd_arg_buf(&a, p->beta);
    cd_arg_buf(&a, p->decay);
    cd_arg_buf(&a, p->out);
    cd_arg_buf(&a, in);
    cd_arg_buf(&a, fin);
    cd_arg_buf(&a, (camdelta_buffer){j->pre, 0});
    cd_arg_buf(&a, (camdelta_buffer){post, 0});
    cd_arg_u64(&a, j->N);
    cd_arg_u32(&a, (uint32_t)p->S);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_i32(&a, p->reverse != 0);
    cd_arg_i32(&a, in.mem != NULL);
    cd_arg_i32(&a, fin.mem != NULL);
    cd_arg_i32(&a, j->pre != NULL);
    cd_arg_i32(&a, post != NULL);
    cd_arg_i32(&a, write_out);
    cd_arg_u32(&a, (uint32_t)t0);
    cd_arg_u32(&a, (uint32_t)t1);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_sequential: setting arguments");
    const size_t lws[2] = {c->W, 1}, gws[2] = {(size_t)c->W * j->BH, c->nJ};
    if (!st) st = cd_enqueue(ctx, k, 2, gws, lws, l, "cd_scan_sequential");
  }
  if (carry) clReleaseMemObject(carry); /* it lives on until the launches that use it have finished */
  return st;
}

/* Phase A: A_f, U_f of every (b, h, f) into A and U ((B, H, F, D, D) each). */
static camdelta_status enqueue_phase_a(camdelta_context *ctx, const scan_job *j, cl_kernel ka, const chunk_cfg *c,
                                       const cd_tc_set *tc, cl_mem A, cl_mem U, cd_launch *l) {
  const camdelta_scan_args *p = j->p;
  const size_t D = p->D;
  camdelta_status st = CAMDELTA_OK;
  if (tc->on) {
    const unsigned tm = cd_tc_tm(&tc->g), tn = cd_tc_tn(&tc->g), nr = ceil_div(D, tm), ncol = ceil_div(D, tn);
    cd_args a = {tc->gram, 0, CL_SUCCESS};
    cd_arg_buf(&a, p->k);
    cd_arg_buf(&a, p->k);
    cd_arg_buf(&a, p->v);
    cd_arg_buf(&a, p->beta);
    cd_arg_buf(&a, p->decay);
    cd_arg_buf(&a, (camdelta_buffer){A, 0});
    cd_arg_buf(&a, (camdelta_buffer){U, 0});
    cd_arg_u64(&a, j->N);
    cd_arg_u32(&a, (uint32_t)p->S);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_u32(&a, ncol);
    cd_arg_u32(&a, ncol);
    cd_arg_i32(&a, 1);
    cd_arg_i32(&a, 1);
    arg_pk(&a, j);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_gram_tc: setting arguments");
    const size_t w = cd_tc_wg(&tc->g), lws[2] = {w, 1}, gws[2] = {w * nr * 2 * ncol, j->BHF};
    if (!st) st = cd_enqueue(ctx, tc->gram, 2, gws, lws, l, "cd_gram_tc (phase A)");
  } else {
    cd_args a = {ka, 0, CL_SUCCESS};
    cd_arg_buf(&a, p->k);
    cd_arg_buf(&a, p->v);
    cd_arg_buf(&a, p->beta);
    cd_arg_buf(&a, p->decay);
    cd_arg_buf(&a, (camdelta_buffer){A, 0});
    cd_arg_buf(&a, (camdelta_buffer){U, 0});
    cd_arg_u64(&a, j->N);
    cd_arg_u32(&a, (uint32_t)p->S);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_u32(&a, 0);
    cd_arg_u32(&a, (uint32_t)(2 * D));
    cd_arg_u32(&a, c->a_nc);
    arg_pk(&a, j);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_phase_a: setting arguments");
    const size_t lws[2] = {c->a_w, 1}, gws[2] = {(size_t)c->a_w * j->BHF, (size_t)c->a_nr * c->a_nc};
    if (!st) st = cd_enqueue(ctx, ka, 2, gws, lws, l, "cd_scan_phase_a");
  }
  return st;
}

/* Phase C: out_f = Q_f·states_f for every (b, h, f). */
static camdelta_status enqueue_phase_c(camdelta_context *ctx, const scan_job *j, cl_kernel kc, const chunk_cfg *c,
                                       const cd_tc_set *tc, cl_mem states, cd_launch *l) {
  const camdelta_scan_args *p = j->p;
  const size_t D = p->D;
  camdelta_status st = CAMDELTA_OK;
  if (tc->on) {
    const unsigned tm = cd_tc_tm(&tc->a), tn = cd_tc_tn(&tc->a), nr = ceil_div(D, tm), ns = ceil_div(p->S, tn);
    cd_args a = {tc->apply, 0, CL_SUCCESS};
    cd_arg_buf(&a, p->q);
    cd_arg_buf(&a, (camdelta_buffer){states, 0});
    cd_arg_buf(&a, (camdelta_buffer){states, 0});
    cd_arg_buf(&a, p->out);
    cd_arg_u64(&a, j->N);
    cd_arg_u32(&a, (uint32_t)p->S);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_u32(&a, nr);
    cd_arg_i32(&a, 1);
    cd_arg_i32(&a, 0);
    cd_arg_i32(&a, 0);
    arg_pk(&a, j);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_apply_tc: setting arguments");
    const size_t w = cd_tc_wg(&tc->a), lws[2] = {w, 1}, gws[2] = {w * nr * ns, j->BHF};
    if (!st) st = cd_enqueue(ctx, tc->apply, 2, gws, lws, l, "cd_apply_tc (phase C)");
  } else {
    cd_args a = {kc, 0, CL_SUCCESS};
    cd_arg_buf(&a, p->q);
    cd_arg_buf(&a, (camdelta_buffer){states, 0});
    cd_arg_buf(&a, p->out);
    cd_arg_u64(&a, j->N);
    cd_arg_u32(&a, (uint32_t)p->S);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_u32(&a, c->c_ns);
    arg_pk(&a, j);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_phase_c: setting arguments");
    const size_t lws[2] = {c->c_w, 1}, gws[2] = {(size_t)c->c_w * j->BHF, (size_t)c->c_nv * c->c_ns};
    if (!st) st = cd_enqueue(ctx, kc, 2, gws, lws, l, "cd_scan_phase_c");
  }
  return st;
}

/* The driver's loop budget (cd_loop_budget) against the chunkwise phases' work-items (cd_chunk_loop_count): *b_per
 * frames of phase B's chain per launch (F + 1: all of them; b_per NULL: phase B not checked); UNSUPPORTED with a
 * message where phase A or C, or one frame of phase B, needs more than the budget. */
static camdelta_status chunk_budget(camdelta_context *ctx, const camdelta_scan_args *p, const chunk_cfg *c,
                                    const cd_tc_set *tc, size_t *b_per) {
  const size_t budget = cd_loop_budget(ctx);
  size_t na, nb_fixed, nb_step, nc, per = (size_t)p->F + 1;
  if (b_per) *b_per = per;
  if (!budget) return CAMDELTA_OK;
  cd_chunk_loop_count(p->D, p->S, c, &na, &nb_fixed, &nb_step, &nc);
  const size_t over = !tc->on && na > budget ? na : !tc->on && nc > budget ? nc : 0;
  if (b_per) *b_per = per = nb_fixed + nb_step <= budget ? (budget - nb_fixed) / nb_step : 0;
  if (over || !per)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); the chunkwise scan at D=%zu S=%zu needs %zu in its phase %c: use fewer tokens per frame",
                   OP, budget, p->D, p->S, over ? over : nb_fixed + nb_step, !over ? 'B' : over == na ? 'A' : 'C');
  return CAMDELTA_OK;
}

static camdelta_status run_chunkwise(camdelta_context *ctx, const scan_job *j, cl_kernel ka, cl_kernel kb,
                                     cl_kernel kc, const chunk_cfg *c, const cd_tc_set *tc, cd_launch *l,
                                     const cd_scan_hook *hook) {
  const camdelta_scan_args *p = j->p;
  const size_t D = p->D, frames_bytes = j->BHF * D * D * sizeof(float);
  /* Under a loop budget (cd_loop_budget) phase B's chain runs in launches of as many frames as fit, the state
   * carried through a scratch buffer; phases A and C, parallel over frames, must fit as they are. */
  size_t b_per;
  camdelta_status bst = chunk_budget(ctx, p, c, tc, &b_per);
  if (bst) return bst;
  /* the chain's steps (packed clips: at least every clip's) */
  const size_t b_steps = j->pk ? (size_t)p->F + 1 : p->reverse ? p->F - 1 + (p->final_state.mem != NULL) : p->F;
  cl_mem A = NULL, U = NULL, states = j->post, carry = NULL;
  /* with a saved object, A_f goes into it: the backward reads it instead of computing it again */
  camdelta_status st = j->sv ? cd_ensure_buffer(ctx, &j->sv->a_mat, &j->sv->a_bytes, frames_bytes)
                             : cd_alloc(ctx, frames_bytes, &A);
  if (j->sv) A = j->sv->a_mat;
  if (!st) st = cd_alloc(ctx, frames_bytes, &U);
  if (!st && !states) st = cd_alloc(ctx, frames_bytes, &states);
  if (!st && b_per < b_steps) st = cd_alloc(ctx, j->n_state * sizeof(float), &carry);
  if (!st) st = enqueue_phase_a(ctx, j, ka, c, tc, A, U, l);
  if (!st && hook) st = hook->fn(hook->user, A, U, NULL); /* scan_hook.h */
  for (size_t t0 = 0; (t0 < b_steps || !t0) && !st; t0 += b_per) { /* one launch at least (b_steps may be 0) */
    const int last = t0 + b_per >= b_steps;
    const camdelta_buffer in = t0 ? (camdelta_buffer){carry, 0} : p->init_state;
    const camdelta_buffer fin = last ? p->final_state : (camdelta_buffer){carry, 0};
    cd_args a = {kb, 0, CL_SUCCESS};
    cd_arg_buf(&a, (camdelta_buffer){A, 0});
    cd_arg_buf(&a, (camdelta_buffer){U, 0});
    cd_arg_buf(&a, p->decay);
    cd_arg_buf(&a, in);
    cd_arg_buf(&a, (camdelta_buffer){states, 0});
    cd_arg_buf(&a, (camdelta_buffer){j->pre, 0});
    cd_arg_buf(&a, fin);
    cd_arg_u32(&a, (uint32_t)p->F);
    cd_arg_i32(&a, p->reverse != 0);
    cd_arg_i32(&a, in.mem != NULL);
    cd_arg_i32(&a, j->pre != NULL);
    cd_arg_i32(&a, p->final_state.mem != NULL); /* the walk's length; a launch that leaves steps writes fin anyway */
    cd_arg_u32(&a, (uint32_t)t0);
    cd_arg_u32(&a, last ? UINT32_MAX : (uint32_t)(t0 + b_per));
    arg_pk(&a, j);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_phase_b: setting arguments");
    const size_t lws[2] = {c->b_w, 1}, gws[2] = {(size_t)c->b_w * j->BH, c->b_nj};
    if (!st) st = cd_enqueue(ctx, kb, 2, gws, lws, l, "cd_scan_phase_b");
  }
  if (!st) st = enqueue_phase_c(ctx, j, kc, c, tc, states, l);
  /* Releasing after enqueue is safe: the runtime keeps the buffers alive until the kernels finish. */
  if (A && !j->sv) clReleaseMemObject(A);
  if (U) clReleaseMemObject(U);
  if (carry) clReleaseMemObject(carry);
  if (states && states != j->post) clReleaseMemObject(states);
  return st;
}

/* ------------------------------------------------------------------------------------- entry point */

static void release_kernels(cl_kernel *k, int n) {
  for (int i = 0; i < n; i++)
    if (k[i]) clReleaseKernel(k[i]);
}

/* The kernels of `alg` for (B*H, D, S), shrinking the work-groups if a compiled kernel allows fewer items. */
static camdelta_status build_kernels(camdelta_context *ctx, const dev_limits *lim, camdelta_scan_algorithm alg,
                                     size_t BH, size_t D, size_t S, cl_kernel kern[3], seq_cfg *sc, chunk_cfg *cc) {
  tile_override ov;
  char var[64], svar[64];
  unsigned sov[CD_SQ_COUNT];
  int sgiven = 0;
  camdelta_status st = read_override(ctx, &ov, var, sizeof var);
  if (!st && alg == CAMDELTA_SCAN_SEQUENTIAL) st = read_seq_override(ctx, sov, &sgiven, svar, sizeof svar);
  if (st) return st;
  const int overridden = ov.a || ov.b || ov.c;
  kern[0] = kern[1] = kern[2] = NULL;
  for (unsigned cap = 256;; cap /= 2) {
    release_kernels(kern, 3);
    kern[0] = kern[1] = kern[2] = NULL;
    int fits = 1;
    if (alg == CAMDELTA_SCAN_SEQUENTIAL) {
      if ((st = cd_seq_configure(lim, BH, D, S, cap, sgiven ? sov : NULL, svar, sc))) return st;
      if ((st = cd_kernel(ctx, "scan_sequential.cl", sc->opts, "cd_scan_sequential", &kern[0]))) return st;
      fits = cd_kernel_max_wg(ctx, kern[0]) >= sc->W;
      if (!fits && sgiven && sov[CD_SQ_W]) { /* shrinking would undo the override */
        const size_t have = cd_kernel_max_wg(ctx, kern[0]);
        release_kernels(kern, 3);
        return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s: the compiled sequential kernel allows work-groups of %zu "
                       "items, W=%u asked", OP, svar, have, sc->W);
      }
      if (sc->OUT == 2) { /* the outputs by the chunkwise phase C (its FMA kernel, or the tensor-core one) */
        if ((st = cd_chunk_configure(lim, BH, D, S, cap, NULL, var, cc)) ||
            (st = cd_kernel(ctx, "scan_chunkwise.cl", cc->opts, "cd_scan_phase_c", &kern[2]))) {
          release_kernels(kern, 3);
          return st;
        }
        fits = fits && cd_kernel_max_wg(ctx, kern[2]) >= cc->c_w;
      }
    } else {
      if ((st = cd_chunk_configure(lim, BH, D, S, cap, overridden ? &ov : NULL, var, cc))) return st;
      if (cc->pk_opts) { /* the packed-clips variant (scan_packed.c) */
        const size_t used = strlen(cc->opts);
        if (used + strlen(cc->pk_opts) >= sizeof cc->opts)
          return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the packed variant's build options are too long", OP);
        memcpy(cc->opts + used, cc->pk_opts, strlen(cc->pk_opts) + 1);
      }
      if ((st = cd_kernel(ctx, "scan_chunkwise.cl", cc->opts, "cd_scan_phase_a", &kern[0])) ||
          (st = cd_kernel(ctx, "scan_chunkwise.cl", cc->opts, "cd_scan_phase_b", &kern[1])) ||
          (st = cd_kernel(ctx, "scan_chunkwise.cl", cc->opts, "cd_scan_phase_c", &kern[2]))) {
        release_kernels(kern, 3);
        return st;
      }
      const size_t have[3] = {cd_kernel_max_wg(ctx, kern[0]), cd_kernel_max_wg(ctx, kern[1]),
                              cd_kernel_max_wg(ctx, kern[2])};
      const unsigned need[3] = {cc->a_w, cc->b_w, cc->c_w};
      const int given[3] = {ov.a, ov.b, ov.c};
      for (int i = 0; i < 3; i++) {
        if (have[i] >= need[i]) continue;
        fits = 0;
        if (given[i]) { /* shrinking would undo the override */
          release_kernels(kern, 3);
          return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                         "%s: %s: the compiled phase %c kernel allows work-groups of %zu items, its tiles need %u", OP,
                         var, "ABC"[i], have[i], need[i]);
        }
      }
    }
    if (fits) return CAMDELTA_OK;
    if (cap <= lim->min_wg) {
      release_kernels(kern, 3);
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the %s kernels for D=%zu do not fit the device's work-group limit",
                     OP, camdelta_scan_algorithm_name(alg), D);
    }
  }
}

/* Everything a call runs: the algorithm, its kernels and tiles, and the tensor-core kernels when used. Built once
 * per (device, D, algorithm, shape class, precision and row alignment where the tensor-core path runs) and kept
 * in the context (src/tune/plan.c); c_ns (phase C's token tiles) is the one field that follows S itself and is
 * recomputed per call. */
typedef struct fwd_plan {
  camdelta_scan_algorithm alg;
  cl_kernel kern[3];
  seq_cfg sc;
  chunk_cfg cc;
  cd_tc_set tc;
} fwd_plan;

static void plan_release(fwd_plan *pl) {
  release_kernels(pl->kern, 3);
  cd_tc_release(&pl->tc);
}

static void fwd_destroy(void *p) {
  plan_release(p);
  free(p);
}

/* A plan of algorithm `alg` for BH chains of args' D and S, 16-byte token rows or not (vec); pk_opts: the packed
 * variant's build options (scan_packed.c), else NULL. */
static camdelta_status fwd_build_opts(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH,
                                      const camdelta_scan_args *args, int vec, const char *pk_opts, fwd_plan **out) {
  fwd_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  dev_limits lim;
  camdelta_status st = device_limits(ctx, &lim);
  pl->alg = alg;
  pl->cc.pk_opts = pk_opts;
  if (!st) st = build_kernels(ctx, &lim, pl->alg, BH, args->D, args->S, pl->kern, &pl->sc, &pl->cc);
  /* a chunkwise plan also serves the camera branch's scan pair, whose phase C can do the output transform */
  const int with = pl->alg == CAMDELTA_SCAN_CHUNKWISE && !pk_opts ? CD_TC_WITH_OT : 0;
  if (!st && (pl->alg == CAMDELTA_SCAN_CHUNKWISE || pl->sc.OUT == 2))
    st = cd_tc_build_opts(ctx, args->D, args->precision, vec, with, pk_opts ? pk_opts : "", &pl->tc);
  if (st) {
    fwd_destroy(pl);
    return st;
  }
  *out = pl;
  return CAMDELTA_OK;
}

/* Builds the plan for `key` from the first call of its class (arg: that call's arguments). */
static camdelta_status fwd_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  const camdelta_scan_args *args = arg;
  fwd_plan *pl = NULL;
  const camdelta_status st =
      fwd_build_opts(ctx, (camdelta_scan_algorithm)key->alg, args->B * args->H, args, (int)key->vec, NULL, &pl);
  *out = pl;
  return st;
}

/* The context's plan for `args` (built on the first call of its class), referenced and locked for this call:
 * cd_plan_release() once the launches are enqueued. */
static camdelta_status plan_alg(camdelta_context *ctx, const camdelta_scan_args *args, camdelta_scan_algorithm alg,
                                cd_plan_entry **e);

static camdelta_status plan_forward(camdelta_context *ctx, const camdelta_scan_args *args, cd_plan_entry **e) {
  camdelta_scan_algorithm alg = args->algorithm;
  if (alg == CAMDELTA_SCAN_AUTO) alg = cd_scan_auto_ctx(ctx, args->B * args->H, args->D, args->F, args->S, NULL);
  camdelta_status st = plan_alg(ctx, args, alg, e);
  /* AUTO does not pick a sequential plan whose frames exceed the driver's loop budget (cd_loop_budget) */
  if (!st && args->algorithm == CAMDELTA_SCAN_AUTO && alg == CAMDELTA_SCAN_SEQUENTIAL && cd_loop_budget(ctx)) {
    const fwd_plan *pl = (*e)->plan;
    size_t steps;
    if (!seq_steps(ctx, args, &pl->sc, pl->sc.OUT != 2, &steps)) {
      cd_clear_error();
      cd_plan_release(ctx, *e);
      *e = NULL;
      st = plan_alg(ctx, args, CAMDELTA_SCAN_CHUNKWISE, e);
    }
  }
  return st;
}

/* plan_forward for the algorithm `alg`. */
static camdelta_status plan_alg(camdelta_context *ctx, const camdelta_scan_args *args, camdelta_scan_algorithm alg,
                                cd_plan_entry **e) {
  const size_t BH = args->B * args->H, D = args->D;
  dev_limits lim;
  camdelta_status st = device_limits(ctx, &lim);
  if (st) return st;
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SCAN_FORWARD;
  key.D = (unsigned)D;
  key.alg = (unsigned)alg;
  const cd_scan_class cls = cd_scan_shape_class(&lim, BH, D, args->S);
  key.cls[0] = alg == CAMDELTA_SCAN_SEQUENTIAL ? cls.seq_blocks : cls.b_blocks;
  key.cls[1] = cls.tokens;
  /* under a loop budget the sequential tiles follow S itself (a frame's step must fit a launch) */
  if (alg == CAMDELTA_SCAN_SEQUENTIAL && lim.loop_budget) key.cls[2] = (unsigned)args->S;
  if (cd_tc_available(ctx)) { /* the tensor-core phase C serves the sequential plan too (its OUT=2) */
    const size_t offs[5] = {args->q.offset, args->k.offset, args->v.offset, args->beta.offset, args->out.offset};
    key.prec = (unsigned)args->precision;
    key.vec = (unsigned)cd_tc_vec_ok(args->S, offs, 5);
  }
  return cd_plan_acquire(ctx, &key, fwd_build, args, fwd_destroy, e);
}

camdelta_status cd_scan_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S) {
  if (S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "camdelta_warm_shape: S=%zu exceeds the scan's limit 2^32-1", S);
  camdelta_status st = CAMDELTA_OK;
  for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE && !st; alg++)
    for (int prec = CAMDELTA_PRECISION_EXACT; prec <= CAMDELTA_PRECISION_TF32 && !st; prec++) {
      camdelta_scan_args a = CAMDELTA_SCAN_ARGS_INIT;
      a.B = 1, a.H = BH, a.D = D, a.F = 1, a.S = S;
      a.algorithm = (camdelta_scan_algorithm)alg, a.precision = (camdelta_precision)prec;
      cd_plan_entry *e;
      if (!(st = plan_forward(ctx, &a, &e))) cd_plan_release(ctx, e);
    }
  return st;
}

static void tc_text(char *buf, size_t size, const char *what, const char *kernel, const cd_tc_tiles *t) {
  snprintf(buf, size, "; %s %s WM=%u WN=%u MR=%u NR=%u KC=%u", what, kernel, t->wm, t->wn, t->mr, t->nr, t->kc);
}

static void plan_text(const fwd_plan *pl, const camdelta_scan_args *args, char *buf, size_t size) {
  const int tf32 = args->precision == CAMDELTA_PRECISION_TF32;
  const char *path = pl->tc.on ? (pl->tc.split ? "exact (tensor cores, split-TF32)" : "tf32 (tensor cores)")
                     : tf32    ? "exact (fma; tf32 requested, no tensor-core path on this device)"
                               : "exact (fma)";
  char a[160], c[160];
  const chunk_cfg *cc = &pl->cc;
  if (pl->alg == CAMDELTA_SCAN_SEQUENTIAL) {
    if (pl->sc.OUT != 2) {
      snprintf(buf, size, "sequential; precision exact (fma); sequential fma W=%u blocks=%u J=%u TS=%u PF=%u OUT=1",
               pl->sc.W, pl->sc.nJ, pl->sc.J, pl->sc.TS, pl->sc.PF);
      return;
    }
    if (pl->tc.on) tc_text(c, sizeof c, "phase_c", "apply_tc", &pl->tc.a);
    else
      snprintf(c, sizeof c, "; phase_c fma W=%u C_WR=%u C_RM=%u C_WC=%u C_RN=%u C_KC=%u", cc->c_w, cc->c.wr, cc->c.rm,
               cc->c.wc, cc->c.rn, cc->c_kc);
    snprintf(buf, size, "sequential; precision %s; sequential fma W=%u blocks=%u J=%u TS=%u PF=%u OUT=2%s", path,
             pl->sc.W, pl->sc.nJ, pl->sc.J, pl->sc.TS, pl->sc.PF, c);
    return;
  }
  if (pl->tc.on) tc_text(a, sizeof a, "phase_a", "gram_tc", &pl->tc.g);
  else
    snprintf(a, sizeof a, "; phase_a fma A_WR=%u A_RM=%u A_WC=%u A_RN=%u A_KC=%u", cc->a.wr, cc->a.rm, cc->a.wc,
             cc->a.rn, cc->a_kc);
  if (pl->tc.on) tc_text(c, sizeof c, "phase_c", "apply_tc", &pl->tc.a);
  else
    snprintf(c, sizeof c, "; phase_c fma C_WR=%u C_RM=%u C_WC=%u C_RN=%u C_KC=%u", cc->c.wr, cc->c.rm, cc->c.wc,
             cc->c.rn, cc->c_kc);
  snprintf(buf, size, "chunkwise; precision %s%s; phase_b fma B_J=%u B_WR=%u B_RM=%u B_WC=%u B_RN=%u B_KC=%u B_PF=%u%s",
           path, a, cc->b_j, cc->b.wr, cc->b.rm, cc->b.wc, cc->b.rn, cc->b_kc, cc->b_pf, c);
}

/* Appends to the plan text how the serial walk splits where the driver caps a work-item's loop iterations per launch
 * (cd_loop_budget): nothing where it runs in one launch. */
static void budget_text(camdelta_context *ctx, const fwd_plan *pl, const camdelta_scan_args *args, char *text,
                        size_t size) {
  const size_t budget = cd_loop_budget(ctx);
  if (!budget) return;
  size_t per, steps;
  if (pl->alg == CAMDELTA_SCAN_SEQUENTIAL) {
    per = seq_steps(ctx, args, &pl->sc, pl->sc.OUT != 2, &steps);
  } else {
    steps = args->reverse ? args->F - 1 + (args->final_state.mem != NULL) : args->F;
    if (chunk_budget(ctx, args, &pl->cc, &pl->tc, &per)) per = 0;
  }
  cd_clear_error();
  const size_t used = strlen(text);
  if (!per)
    snprintf(text + used, size - used, "; exceeds the driver's loop budget (%zu iterations per work-item)", budget);
  else if (per < steps)
    snprintf(text + used, size - used, "; %zu frames per launch (the driver's loop budget: %zu iterations per "
             "work-item)", per, budget);
}

/* Appends "; " and both algorithms' estimated costs with the choice (src/tune/cost.c) to the plan text. */
static void choice_text(camdelta_context *ctx, const camdelta_scan_args *args, char *text, size_t size) {
  cd_scan_estimate est;
  char choice[256];
  cd_scan_auto_ctx(ctx, args->B * args->H, args->D, args->F, args->S, &est);
  cd_scan_estimate_text(&est, args->algorithm, choice, sizeof choice);
  const size_t used = strlen(text);
  snprintf(text + used, size - used, "; %s", choice);
}

camdelta_status camdelta_scan_plan_describe(camdelta_context *ctx, const camdelta_scan_args *args, char *buf,
                                            size_t size) {
  cd_clear_error();
  static const char *const fn = "camdelta_scan_plan_describe";
  if (!ctx || !args || !buf)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", fn, !ctx ? "ctx" : !args ? "args" : "buf");
  if (args->algorithm != CAMDELTA_SCAN_AUTO && args->algorithm != CAMDELTA_SCAN_SEQUENTIAL &&
      args->algorithm != CAMDELTA_SCAN_CHUNKWISE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: algorithm %d unknown", fn, (int)args->algorithm);
  if (args->precision != CAMDELTA_PRECISION_EXACT && args->precision != CAMDELTA_PRECISION_TF32)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: precision %d unknown", fn, (int)args->precision);
  camdelta_status st = cd_check_head_dim(fn, args->D);
  if (st) return st;
  if (!args->B || !args->H || !args->F || !args->S || args->S > UINT32_MAX || args->F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu H=%zu F=%zu S=%zu: each must be in [1, 2^32)", fn, args->B,
                   args->H, args->F, args->S);
  cd_plan_entry *e;
  if ((st = plan_forward(ctx, args, &e))) return st;
  char text[1024];
  plan_text(e->plan, args, text, sizeof text);
  budget_text(ctx, e->plan, args, text, sizeof text);
  cd_plan_release(ctx, e);
  choice_text(ctx, args, text, sizeof text);
  return cd_copy_text(fn, text, buf, size);
}

camdelta_status camdelta_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                      camdelta_scan_saved *saved) {
  return camdelta_scan_sp_forward_hooked(ctx, args, saved, NULL);
}

camdelta_status camdelta_scan_sp_forward_hooked(camdelta_context *ctx, const camdelta_scan_args *args,
                                       camdelta_scan_saved *saved, const cd_scan_hook *hook) {
  cd_clear_error();
  { const camdelta_status pst = cd_prologue_scan_forward(ctx, args, saved); if (pst) return pst; }
  if (!ctx || !args) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", OP, ctx ? "args" : "ctx");
  if (saved && saved->ctx != ctx)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' was created for another context", OP);
  scan_job job = {args, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0};
  size_t n_tok, n_frames;
  camdelta_status st = check_args(args, &n_tok, &job.n_state, &n_frames);
  if (st) return st;
  const size_t D = args->D;
  job.N = args->F * args->S;
  job.BH = args->B * args->H;
  job.BHF = n_frames;

  /* Build everything before enqueuing anything. */
  cd_plan_entry *pe;
  if ((st = plan_forward(ctx, args, &pe))) return st;
  const fwd_plan *pl = pe->plan;
  const camdelta_scan_algorithm alg = pl->alg;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    plan_text(pl, args, text, sizeof text);
    budget_text(ctx, pl, args, text, sizeof text);
    choice_text(ctx, args, text, sizeof text);
    fprintf(stderr, "camdelta scan: %s\n", text);
  }
  if (saved) {
    if ((st = saved_reserve(ctx, saved, job.BHF * D * D * sizeof(float)))) {
      cd_plan_release(ctx, pe);
      return st;
    }
    saved->valid = 0, saved->has_a = 0;
    job.pre = saved->state_pre;
    job.post = saved->state_post;
    job.sv = saved;
  }
  if (args->used) *args->used = alg;
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  chunk_cfg cc = pl->cc; /* phase C's token tiles follow this call's S */
  const int seq_split = alg == CAMDELTA_SCAN_SEQUENTIAL && pl->sc.OUT == 2;
  if (alg == CAMDELTA_SCAN_CHUNKWISE || seq_split) cc.c_ns = ceil_div(args->S, cc.c.wc * cc.c.rn);
  if (alg == CAMDELTA_SCAN_SEQUENTIAL) {
    /* OUT=2: the kernel saves the state each output frame reads, phase C computes all outputs from them */
    cl_mem states = job.post;
    if (hook) st = hook->fn(hook->user, NULL, NULL, NULL);
    if (!st && seq_split && !states) st = cd_alloc(ctx, job.BHF * D * D * sizeof(float), &states);
    if (!st) st = run_sequential(ctx, &job, pl->kern[0], &pl->sc, states, !seq_split, &l);
    if (!st && seq_split) st = enqueue_phase_c(ctx, &job, pl->kern[2], &cc, &pl->tc, states, &l);
    if (states && states != job.post) clReleaseMemObject(states);
  } else
    st = run_chunkwise(ctx, &job, pl->kern[0], pl->kern[1], pl->kern[2], &cc, &pl->tc, &l, hook);
  cd_plan_release(ctx, pe);
  st = cd_launch_end(ctx, &l, st);
  if (saved && !st) {
    saved->B = args->B, saved->H = args->H, saved->D = D, saved->F = args->F, saved->S = args->S;
    saved->reverse = args->reverse != 0;
    saved->has_init = args->init_state.mem != NULL;
    saved->has_a = alg == CAMDELTA_SCAN_CHUNKWISE;
    saved->valid = 1;
  }
  return st;
}

/* ------------------------------------------------------------------- the chunkwise phases, internally */

/* For the fused scan pair (src/ops/scan_pair.c): the chunkwise plan of one scan call and its phases A and C,
 * exactly as camdelta_scan_forward runs them. */
struct cd_scan_chunk {
  camdelta_context *ctx;
  camdelta_scan_args args;
  scan_job job;
  cd_plan_entry *pe; /* the context's plan, held (and locked) until cd_scan_chunk_destroy */
  const fwd_plan *pl;
  chunk_cfg cc; /* the plan's tiles with phase C's token tiles for this call's S */
};

camdelta_status cd_scan_chunk_create(camdelta_context *ctx, const camdelta_scan_args *args, cd_scan_chunk **out) {
  *out = NULL;
  cd_scan_chunk *c = calloc(1, sizeof *c);
  if (!c) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  c->ctx = ctx;
  c->args = *args;
  c->args.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  size_t n_tok, n_frames;
  camdelta_status st = check_args(&c->args, &n_tok, &c->job.n_state, &n_frames);
  if (!st) st = plan_forward(ctx, &c->args, &c->pe);
  if (st) {
    free(c);
    return st;
  }
  c->pl = c->pe->plan;
  c->cc = c->pl->cc;
  c->cc.c_ns = ceil_div(args->S, c->cc.c.wc * c->cc.c.rn);
  /* phases A and C within the driver's loop budget (the caller's chains have their own tiles and check) */
  if ((st = chunk_budget(ctx, &c->args, &c->cc, &c->pl->tc, NULL))) {
    cd_plan_release(ctx, c->pe);
    free(c);
    return st;
  }
  c->job.p = &c->args;
  c->job.N = args->F * args->S, c->job.BH = args->B * args->H, c->job.BHF = n_frames;
  *out = c;
  return CAMDELTA_OK;
}

void cd_scan_chunk_destroy(cd_scan_chunk *c) {
  if (!c) return;
  cd_plan_release(c->ctx, c->pe);
  free(c);
}

void cd_scan_chunk_describe(const cd_scan_chunk *c, char *buf, size_t size) { plan_text(c->pl, &c->args, buf, size); }

camdelta_status cd_scan_chunk_phase_a(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem A, cl_mem U,
                                      cd_launch *l) {
  return enqueue_phase_a(ctx, &c->job, c->pl->kern[0], &c->cc, &c->pl->tc, A, U, l);
}

camdelta_status cd_scan_chunk_phase_c(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem states, cd_launch *l) {
  return enqueue_phase_c(ctx, &c->job, c->pl->kern[2], &c->cc, &c->pl->tc, states, l);
}

camdelta_status cd_scan_chunk_phase_c_ot(camdelta_context *ctx, const cd_scan_chunk *c, cl_mem states,
                                         const cd_pair_ot *ot, int *done, cd_launch *l) {
  *done = 0;
  const cd_tc_set *tc = &c->pl->tc;
  const camdelta_scan_args *p = &c->args;
  const size_t D = p->D;
  if (!tc->apply_ot) return CAMDELTA_OK; /* FMA kernels, packed clips, no fit */
  /* 16-byte accesses to y, proj_o and the tables */
  const camdelta_buffer bufs[4] = {ot->y, ot->proj_o, ot->rope_cos, ot->rope_sin};
  if (!cd_buffers_aligned4(bufs, 4)) return CAMDELTA_OK;
  const unsigned tm = cd_tc_tm(&tc->ot), tn = cd_tc_tn(&tc->ot), nr = ceil_div(D, tm), ns = ceil_div(p->S, tn);
  camdelta_status st = CAMDELTA_OK;
  cd_args a = {tc->apply_ot, 0, CL_SUCCESS};
  cd_arg_buf(&a, p->q);
  cd_arg_buf(&a, (camdelta_buffer){states, 0});
  cd_arg_buf(&a, ot->proj_o);
  cd_arg_buf(&a, ot->rope_cos);
  cd_arg_buf(&a, ot->rope_sin);
  cd_arg_buf(&a, ot->y);
  cd_arg_u64(&a, c->job.N);
  cd_arg_u32(&a, (uint32_t)p->S);
  cd_arg_u32(&a, (uint32_t)p->F);
  cd_arg_u32(&a, (uint32_t)p->H);
  cd_arg_u32(&a, nr);
  if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_apply_ot_tc: setting arguments");
  const size_t w = cd_tc_wg(&tc->ot), lws[2] = {w, 1}, gws[2] = {w * nr * ns, c->job.BHF};
  if (!st) st = cd_enqueue(ctx, tc->apply_ot, 2, gws, lws, l, "cd_apply_ot_tc (phase C and the output transform)");
  if (!st) *done = 1;
  return st;
}

camdelta_status cd_scan_pair_chain_cfg(camdelta_context *ctx, size_t chains, size_t D, size_t S, unsigned cap,
                                       char *opts, size_t size, unsigned *b_w, unsigned *b_nj, size_t loops[2]) {
  dev_limits lim;
  tile_override ov;
  char var[64];
  chunk_cfg cc;
  memset(&cc, 0, sizeof cc); /* not the packed variant */
  camdelta_status st = device_limits(ctx, &lim);
  if (!st) st = read_override(ctx, &ov, var, sizeof var);
  if (!st) st = cd_chunk_configure(&lim, chains, D, S, cap, ov.a || ov.b || ov.c ? &ov : NULL, var, &cc);
  if (st) return st;
  snprintf(opts, size, "%s", cc.opts);
  *b_w = cc.b_w, *b_nj = cc.b_nj;
  size_t na, nc;
  cd_chunk_loop_count(D, S, &cc, &na, &loops[0], &loops[1], &nc);
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------------- packed clips, native (scan_packed.c) */

/* The chunkwise forward over packed clips in the kernels' packed variant: the caller (scan_packed.c) has checked
 * the offsets and buffers; args has B = 1, F = the packed frames and S = the longest frame (token-tile grids). */
camdelta_status cd_scan_forward_native(camdelta_context *ctx, const camdelta_scan_args *args, const cd_packed_run *pr,
                                       camdelta_scan_saved *saved) {
  const size_t H = args->H, D = args->D, F = args->F;
  const size_t offs[5] = {args->q.offset, args->k.offset, args->v.offset, args->beta.offset, args->out.offset};
  fwd_plan *pl = NULL; /* the packed variant's own plan (not kept in the context) */
  camdelta_status st = fwd_build_opts(ctx, CAMDELTA_SCAN_CHUNKWISE, pr->clips * H, args,
                                      pr->vec && cd_tc_vec_ok(4, offs, 5), cd_packed_opts(pr), &pl);
  if (st) return st;
  if (cd_option(ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    plan_text(pl, args, text, sizeof text);
    fprintf(stderr, "camdelta scan (packed clips, native): %s\n", text);
  }
  scan_job job = {args, pr->N, pr->clips * H, H * F, pr->clips * H * D * D, NULL, NULL, NULL, pr->pk, (uint32_t)H};
  if (saved) {
    if ((st = saved_reserve(ctx, saved, job.BHF * D * D * sizeof(float)))) {
      fwd_destroy(pl);
      return st;
    }
    saved->valid = 0, saved->has_a = 0;
    job.pre = saved->state_pre;
    job.post = saved->state_post;
    job.sv = saved;
  }
  if (args->used) *args->used = pl->alg;
  if (args->profile) args->profile->kernel_ms = 0, args->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, args->profile);
  st = run_chunkwise(ctx, &job, pl->kern[0], pl->kern[1], pl->kern[2], &pl->cc, &pl->tc, &l, NULL);
  fwd_destroy(pl);
  st = cd_launch_end(ctx, &l, st);
  if (saved && !st) { /* S = 0 marks the packed layout (H, F, D, D) by packed frame */
    saved->B = 1, saved->H = H, saved->D = D, saved->F = F, saved->S = 0;
    saved->reverse = args->reverse != 0;
    saved->has_init = args->init_state.mem != NULL;
    saved->has_a = 1;
    saved->valid = 1;
  }
  return st;
}
