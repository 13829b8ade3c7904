/* Scan forward (docs/math.md §3): argument checks, the saved object, tile choice and the two algorithms.
 *
 * Sequential (cl/scan_sequential.cl): a work-group per (b, h, block of J value columns) walks the frames with its
 * state block in registers. On GPUs (OUT=2) it keeps only the recurrence and writes the state every output frame
 * reads, and the chunkwise phase C (tensor cores where available) computes all the outputs from them; on CPUs
 * (OUT=1) the kernel computes them itself, one launch.
 * Chunkwise: the gram (phase A: A_f, U_f per (b, h, f)), the state chain (phase B: serial over frames per
 * (b, h, value block), writing the state every output frame reads) and the apply (phase C: out_f = Q_f·M_f per
 * (b, h, f, tile)), the units of units.h. A, U and the per-frame states are the plan's workspace (with a saved
 * object, A_f and the per-frame states go into it: its a_mat, its state_post, and phase B also writes its
 * state_pre).
 *
 * Tiles come from the device, never from constants for one GPU:
 *  - the work-group size W is a power of two, at least the kernel's preferred work-group multiple
 *    (from the device facts read at context creation, cd_scan_limits_from_info()) and at most 256 and the device's
 *    and kernel's limit;
 *  - every work-group output tile is spread over its W items as (WR x WC) items owning (RM x RN)
 *    register blocks, chosen by pick_layout() to minimise padding and local-memory reads per FMA while
 *    keeping >= 8 consecutive items (a 32-byte sector) along the contiguous dimension of global stores;
 *  - tile extents fit the local memory the device reports (CL_DEVICE_LOCAL_MEM_SIZE);
 *  - the number of value-column blocks (sequential, phase B) is chosen so that B·H·blocks covers a GPU's
 *    compute units; CPUs use one block, and their variants depend on D and on S <= 8 only (PoCL spends
 *    seconds compiling each).
 * Plans: the tiles, work-group sizes and kernels are decided on the first call of an (algorithm, D, shape class,
 * precision) and kept in the context (src/runtime/plan.c) with their workspace; later calls set arguments and
 * launch. The tile policy itself is src/scan/tiles.c, the programs' parts src/scan/programs.c.
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
 * AUTO (camdelta_scan_algorithm CAMDELTA_SCAN_AUTO) is decided once per shape, in the plan lookup, from the plans'
 * costs (src/scan/cost.c), and kept with the plans: both plans
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/compose.h"
#include "scan/engine.h"

static const char *const OP = "camdelta_scan_forward";

/* ------------------------------------------------------------------------------------ saved object */

camdelta_status camdelta_scan_saved_create(camdelta_context *ctx, camdelta_scan_saved **out) {
  CD_CREATE_OBJECT("camdelta_scan_saved_create", ctx, out);
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
camdelta_status cd_saved_reserve(camdelta_context *ctx, camdelta_scan_saved *saved, size_t bytes) {
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

/* ------------------------------------------------------------------------------------------ checks */

/* 1 when [a.offset, a.offset + na) and [b.offset, b.offset + nb) of the same cl_mem overlap. */
static int overlaps(camdelta_buffer a, size_t na, camdelta_buffer b, size_t nb) {
  if (!a.mem || !b.mem || a.mem != b.mem) return 0;
  return a.offset < b.offset + nb && b.offset < a.offset + na;
}

camdelta_status cd_forward_shape(const char *op, const camdelta_scan_args *p, cd_fwd_sizes *z) {
  camdelta_status st = cd_check_algorithm(op, p->algorithm);
  if (!st) st = cd_check_precision(op, p->precision);
  if (!st) st = cd_check_head_dim(op, p->D);
  if (st) return st;
  const size_t B = p->B, H = p->H, D = p->D, F = p->F, S = p->S;
  if (!B || !H || !F || !S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu, F=%zu, S=%zu: each must be at least 1", op, B, H, F, S);
  size_t N = 0, frames;
  const size_t fst[4] = {B, H, D, D}, ffr[5] = {B, H, F, D, D}, fbhf[3] = {B, H, F};
  if (!cd_mul(&N, F, S))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: N = F*S = %zu*%zu overflows size_t", op, F, S);
  const size_t ftok[4] = {B, H, D, N};
  if (!cd_prod(&z->tok, 4, ftok) || z->tok > SIZE_MAX / 4 || !cd_prod(&z->state, 4, fst) || !cd_prod(&frames, 5, ffr) ||
      frames > SIZE_MAX / 4 || !cd_prod(&z->frames, 3, fbhf) || z->frames > SIZE_MAX / 256)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t (B=%zu H=%zu D=%zu F=%zu S=%zu)", op, B, H, D,
                   F, S);
  if (F > UINT32_MAX || S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: F=%zu or S=%zu exceeds 2^32-1", op, F, S);
  z->beta = z->frames * S;
  return CAMDELTA_OK;
}

/* The entries' buffers (final_state may be init_state itself: each is read before it is written). */
const cd_slot cd_forward_slots[CD_FWD_NSLOTS] = {
    CD_SLOT(camdelta_scan_args, q, CD_IN),     CD_SLOT(camdelta_scan_args, k, CD_IN),
    CD_SLOT(camdelta_scan_args, v, CD_IN),     CD_SLOT(camdelta_scan_args, beta, CD_IN),
    CD_SLOT(camdelta_scan_args, decay, CD_IN), CD_SLOT(camdelta_scan_args, out, CD_OUT),
    CD_SLOT(camdelta_scan_args, init_state, CD_IN),
    {.name = "final_state", .part = 0, .offset = offsetof(camdelta_scan_args, final_state), .role = CD_OUT,
     .inplace = "init_state"}};

void cd_forward_set_uses(cd_call *c, const cd_fwd_sizes *z) {
  const size_t n[CD_FWD_NSLOTS] = {z->tok, z->tok, z->tok, z->beta, z->frames, z->tok, z->state, z->state};
  for (int i = 0; i < CD_FWD_NSLOTS; i++) /* init_state and final_state optional */
    c->use[i] = (cd_use){.need = i < 6 ? CD_REQUIRED : CD_OPTIONAL, .elems = n[i], .es = 4};
}

camdelta_status cd_forward_uses(cd_call *c) {
  cd_fwd_sizes z;
  const camdelta_status st = cd_forward_shape(c->entry->op, c->args, &z);
  if (!st) cd_forward_set_uses(c, &z);
  return st;
}

camdelta_status cd_forward_check(const char *op, const camdelta_scan_args *p) {
  cd_fwd_sizes z;
  camdelta_status st = cd_forward_shape(op, p, &z);
  if (st) return st;
  const cd_tensor_arg in[6] = {{"q", p->q, z.tok, 4},          {"k", p->k, z.tok, 4},
                               {"v", p->v, z.tok, 4},          {"beta", p->beta, z.beta, 4},
                               {"decay", p->decay, z.frames, 4}, {"init_state", p->init_state, z.state, 4}};
  const cd_tensor_arg out[2] = {{"out", p->out, z.tok, 4}, {"final_state", p->final_state, z.state, 4}};
  for (int i = 0; i < 6 && !st; i++) st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, 4, i == 5);
  for (int i = 0; i < 2 && !st; i++) st = cd_check_buffer(op, out[i].name, out[i].b, out[i].elems, 4, i == 1);
  if (st) return st;
  /* outputs must not overlap inputs, except final_state being init_state itself */
  if (overlaps(p->final_state, z.state, p->init_state, z.state) && p->final_state.offset != p->init_state.offset)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: output 'final_state' overlaps input 'init_state'", op);
  return cd_check_no_overlap(op, out, 2, in, 5);
}

/* ------------------------------------------------------------------------------------------- plans */

/* Everything a call runs: the algorithm, its units (the sequential kernel, or the gram and the state chain) and
 * the apply (the tensor-core forms of the gram and the apply where the device has them), the tiles they were built
 * with, and the workspace: A, U and the per-frame states of calls without a saved object. Built once per (device,
 * D, algorithm, shape class, precision, row alignment where the tensor-core path runs, variant) and kept in the
 * context (src/runtime/plan.c). */
typedef struct fwd_plan {
  cd_units u; /* first: cd_units_destroy is the destructor */
  camdelta_scan_algorithm alg;
  cd_chunk_cfg cc; /* chunkwise: the three phases' tiles; sequential with OUT=2: its phase C's */
  int tc, split; /* the gram and the apply on tensor cores; split-TF32 (exact) or one TF32 product */
  int cpu;       /* chunkwise: the gram, the chain and the apply in their CPU forms, from u.cpu_prog */
} fwd_plan;
enum { WS_A, WS_U, WS_STATES };

static camdelta_status fwd_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)key;
  const cd_fwd_request *r = arg;
  fwd_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  pl->alg = r->alg;
  /* the fixed shape's chunkwise plan on a context that takes the CPU forms (packed clips keep the FMA forms) */
  if (r->alg == CAMDELTA_SCAN_CHUNKWISE && r->variant == 0 && cd_scan_cpu_forms(ctx, r->D)) {
    pl->cpu = 1;
    return cd_units_done(pl, cd_units_chunk_cpu(ctx, r->D, CD_CHAIN_CPU_STATES, &pl->u), out);
  }
  camdelta_status st = r->alg == CAMDELTA_SCAN_SEQUENTIAL
                           ? cd_sequential_parts(ctx, r->BH, r->D, r->S, &pl->u.seq, &pl->cc, &pl->u.apply)
                           : cd_chunk_parts(ctx, r->BH, r->D, r->S, r->extra, &pl->cc, &pl->u.gram, &pl->u.chain,
                                            &pl->u.apply);
  /* the gram and the apply on tensor cores where the device has them (the sequential plan's apply too, OUT=2) */
  if (!st && cd_tc_available(ctx) && (r->alg == CAMDELTA_SCAN_CHUNKWISE || pl->u.seq.c.OUT == 2)) {
    pl->tc = 1, pl->split = r->prec != CAMDELTA_PRECISION_TF32;
    if (r->alg == CAMDELTA_SCAN_CHUNKWISE) {
      cd_gram_release(&pl->u.gram);
      st = cd_gram_build_tc(ctx, r->D, pl->split, r->vec, r->extra, &pl->u.gram);
    }
    cd_apply_release(&pl->u.apply);
    if (!st) st = cd_apply_build_tc(ctx, r->D, pl->split, r->vec, 0, CAMDELTA_F32, r->extra, &pl->u.apply);
  }
  return cd_units_done(pl, st, out);
}

camdelta_status cd_forward_acquire(camdelta_context *ctx, const cd_fwd_request *r, cd_plan_entry **e) {
  cd_scan_limits lim;
  cd_scan_limits_from_info(&ctx->info, &lim);
  const cd_scan_class cls = cd_scan_shape_class(&lim, r->BH, r->D, r->S);
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_SCAN_FORWARD;
  key.D = (unsigned)r->D;
  key.alg = (unsigned)r->alg;
  key.cls[0] = r->alg == CAMDELTA_SCAN_SEQUENTIAL ? cls.seq_blocks : cls.b_blocks;
  key.cls[1] = cls.tokens;
  /* under a loop budget the sequential tiles follow S itself (a frame's step must fit a launch) */
  if (r->alg == CAMDELTA_SCAN_SEQUENTIAL && cd_loop_budget(ctx)) key.cls[2] = (unsigned)r->S;
  key.variant = r->variant;
  if (cd_tc_available(ctx)) { /* the tensor-core apply serves the sequential plan too (its OUT=2) */
    key.prec = (unsigned)r->prec;
    key.vec = (unsigned)(r->vec != 0);
  }
  return cd_plan_acquire(ctx, &key, fwd_build, r, cd_units_destroy, e);
}

camdelta_scan_algorithm cd_forward_algorithm(const cd_plan_entry *e) { return ((const fwd_plan *)e->plan)->alg; }

/* The AUTO choice of one shape, kept with the plans. */
static void auto_destroy(void *p) { free(p); }

static camdelta_status auto_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)arg;
  cd_scan_estimate *e = malloc(sizeof *e);
  if (!e) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", OP);
  cd_scan_auto_ctx(ctx, key->exact[0], key->D, key->exact[1], key->exact[2], e);
  *out = e;
  return CAMDELTA_OK;
}

camdelta_status cd_scan_decide(camdelta_context *ctx, size_t BH, size_t D, size_t F, size_t S,
                               camdelta_scan_algorithm *alg, cd_scan_estimate *e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_AUTO;
  key.D = (unsigned)D;
  key.exact[0] = BH, key.exact[1] = F, key.exact[2] = S;
  cd_plan_entry *pe;
  camdelta_status st = cd_plan_acquire(ctx, &key, auto_build, NULL, auto_destroy, &pe);
  if (st) return st;
  cd_scan_estimate est = *(const cd_scan_estimate *)pe->plan;
  cd_plan_release(ctx, pe);
  /* AUTO does not pick a sequential plan whose one frame exceeds the driver's loop budget (cd_loop_budget): the
   * chunkwise one, which sums long frames over several launches, runs instead */
  if (est.pick == CAMDELTA_SCAN_SEQUENTIAL && cd_loop_budget(ctx)) {
    const cd_fwd_request r = {.alg = CAMDELTA_SCAN_SEQUENTIAL, .BH = BH, .D = D, .S = S,
                              .prec = CAMDELTA_PRECISION_EXACT, .vec = S % 4 == 0, .extra = ""};
    if ((st = cd_forward_acquire(ctx, &r, &pe))) return st;
    if (!((const fwd_plan *)pe->plan)->u.seq.per)
      est.pick = CAMDELTA_SCAN_CHUNKWISE, est.ms[CAMDELTA_SCAN_SEQUENTIAL] = HUGE_VAL;
    cd_plan_release(ctx, pe);
  }
  *alg = est.pick;
  if (e) *e = est;
  return CAMDELTA_OK;
}

camdelta_status cd_forward_request(camdelta_context *ctx, const camdelta_scan_args *a, cd_fwd_request *r) {
  const size_t BH = a->B * a->H;
  *r = (cd_fwd_request){.alg = a->algorithm, .BH = BH, .D = a->D, .S = a->S, .prec = a->precision, .extra = ""};
  const size_t offs[5] = {a->q.offset, a->k.offset, a->v.offset, a->beta.offset, a->out.offset};
  r->vec = cd_tc_vec_ok(a->S, offs, 5);
  if (r->alg != CAMDELTA_SCAN_AUTO) return CAMDELTA_OK;
  return cd_scan_decide(ctx, BH, a->D, a->F, a->S, &r->alg, NULL);
}

camdelta_status cd_scan_warm(camdelta_context *ctx, size_t BH, size_t D, size_t S) {
  if (S > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "camdelta_warm_shape: S=%zu exceeds the scan's limit 2^32-1", S);
  camdelta_status st = CAMDELTA_OK;
  for (int alg = CAMDELTA_SCAN_SEQUENTIAL; alg <= CAMDELTA_SCAN_CHUNKWISE && !st; alg++)
    for (int prec = CAMDELTA_PRECISION_EXACT; prec <= CAMDELTA_PRECISION_TF32 && !st; prec++) {
      const cd_fwd_request r = {.alg = (camdelta_scan_algorithm)alg, .BH = BH, .D = D, .S = S,
                                .prec = (camdelta_precision)prec, .vec = S % 4 == 0, .extra = ""};
      cd_plan_entry *e;
      if (!(st = cd_forward_acquire(ctx, &r, &e))) cd_plan_release(ctx, e);
    }
  return st;
}

/* ------------------------------------------------------------------------------------------ describe */

static void tc_text(char *buf, size_t size, const char *what, const char *kernel, const cd_tc_tiles *t) {
  snprintf(buf, size, "; %s %s WM=%u WN=%u MR=%u NR=%u KC=%u", what, kernel, t->wm, t->wn, t->mr, t->nr, t->kc);
}

static const char *path_text(int tc, int split, camdelta_precision requested) {
  return tc ? (split ? "exact (tensor cores, split-TF32)" : "tf32 (tensor cores)")
         : requested == CAMDELTA_PRECISION_TF32 ? "exact (fma; tf32 requested, no tensor-core path on this device)"
                                                : "exact (fma)";
}

void cd_chunk_text(const cd_chunk_cfg *cc, const cd_gram *gram, const cd_apply *apply, int split,
                   camdelta_precision requested, char *buf, size_t size) {
  const int tc = gram->form == CD_GRAM_TC;
  char a[160], c[160];
  if (tc) tc_text(a, sizeof a, "phase_a", "gram_tc", &gram->t);
  else
    snprintf(a, sizeof a, "; phase_a fma A_WR=%u A_RM=%u A_WC=%u A_RN=%u A_KC=%u", cc->a.wr, cc->a.rm, cc->a.wc,
             cc->a.rn, cc->a_kc);
  if (apply->form == CD_APPLY_TC) tc_text(c, sizeof c, "phase_c", "apply_tc", &apply->t);
  else
    snprintf(c, sizeof c, "; phase_c fma C_WR=%u C_RM=%u C_WC=%u C_RN=%u C_KC=%u", cc->c.wr, cc->c.rm, cc->c.wc,
             cc->c.rn, cc->c_kc);
  snprintf(buf, size, "chunkwise; precision %s%s; phase_b fma B_J=%u B_WR=%u B_RM=%u B_WC=%u B_RN=%u B_KC=%u B_PF=%u%s",
           path_text(tc, split, requested), a, cc->b_j, cc->b.wr, cc->b.rm, cc->b.wc, cc->b.rn, cc->b_kc, cc->b_pf,
           c);
}

/* The serial walk's steps of a fixed-shape call: the sequential kernel's (F, and F + 1 in reverse with a final
 * state), phase B's (F, less one in reverse without a final state). */
static size_t walk_steps(const fwd_plan *pl, const camdelta_scan_args *a) {
  const size_t fin = a->final_state.mem != NULL;
  if (pl->alg == CAMDELTA_SCAN_SEQUENTIAL) return a->F + (a->reverse ? fin : 0);
  return a->reverse ? a->F - 1 + fin : a->F;
}

/* Appends how the serial walk splits where the driver caps a work-item's loop iterations per launch
 * (cd_loop_budget): nothing where it runs in one launch. steps: the walk's steps in this call, S its frames' tokens
 * (the CPU form's gram sums them over launches of whole chunks). */
static void budget_text(const fwd_plan *pl, size_t budget, size_t steps, size_t S, char *buf, size_t size) {
  const size_t per = pl->alg == CAMDELTA_SCAN_SEQUENTIAL ? pl->u.seq.per : pl->u.chain.per;
  size_t used = strlen(buf);
  if (budget && pl->cpu && pl->u.cpu_prog.gram_tokens < S) {
    snprintf(buf + used, size - used, "; the gram sums %zu tokens per launch (the driver's loop budget: %zu "
             "iterations per work-item)", pl->u.cpu_prog.gram_tokens, budget);
    used = strlen(buf);
  }
  if (!budget || per >= steps) return;
  if (!per)
    snprintf(buf + used, size - used, "; exceeds the driver's loop budget (%zu iterations per work-item)", budget);
  else
    snprintf(buf + used, size - used,
             "; %zu frames per launch (the driver's loop budget: %zu iterations per work-item)", per, budget);
}

void cd_forward_text(const cd_plan_entry *e, camdelta_precision requested, char *buf, size_t size) {
  const fwd_plan *pl = e->plan;
  const cd_chunk_cfg *cc = &pl->cc;
  const cd_seq_cfg *sc = &pl->u.seq.c;
  if (pl->alg == CAMDELTA_SCAN_CHUNKWISE && pl->cpu) {
    snprintf(buf, size, "chunkwise; precision exact (fma)%s; cpu forms (gram, chain, apply): %s",
             requested == CAMDELTA_PRECISION_TF32 ? "; tf32 requested, no tensor-core path on this device" : "",
             pl->u.cpu_prog.opts);
    return;
  }
  if (pl->alg == CAMDELTA_SCAN_CHUNKWISE) {
    cd_chunk_text(cc, &pl->u.gram, &pl->u.apply, pl->split, requested, buf, size);
    return;
  }
  if (sc->OUT != 2) {
    snprintf(buf, size, "sequential; precision exact (fma); sequential fma W=%u blocks=%u J=%u TS=%u PF=%u OUT=1",
             sc->W, sc->nJ, sc->J, sc->TS, sc->PF);
    return;
  }
  char c[160];
  if (pl->tc) tc_text(c, sizeof c, "phase_c", "apply_tc", &pl->u.apply.t);
  else
    snprintf(c, sizeof c, "; phase_c fma W=%u C_WR=%u C_RM=%u C_WC=%u C_RN=%u C_KC=%u", cc->c_w, cc->c.wr, cc->c.rm,
             cc->c.wc, cc->c.rn, cc->c_kc);
  snprintf(buf, size, "sequential; precision %s; sequential fma W=%u blocks=%u J=%u TS=%u PF=%u OUT=2%s",
           path_text(pl->tc, pl->split, requested), sc->W, sc->nJ, sc->J, sc->TS, sc->PF, c);
}

/* Appends "; " and both algorithms' estimated costs with the choice (src/scan/cost.c) to the plan text, and where
 * AUTO runs another algorithm than the estimates pick (run: the plan's), why. */
static camdelta_status choice_text(camdelta_context *ctx, const camdelta_scan_args *args, camdelta_scan_algorithm run,
                                   char *text, size_t size) {
  cd_scan_estimate est;
  camdelta_scan_algorithm alg;
  char choice[256];
  const camdelta_status st = cd_scan_decide(ctx, args->B * args->H, args->D, args->F, args->S, &alg, &est);
  if (st) return st;
  cd_scan_estimate_text(&est, args->algorithm, choice, sizeof choice);
  const size_t used = strlen(text);
  snprintf(text + used, size - used, "; %s%s", choice,
           args->algorithm == CAMDELTA_SCAN_AUTO && run != alg
               ? " (runs chunkwise: a sequential frame exceeds the driver's loop budget)"
               : "");
  return CAMDELTA_OK;
}

camdelta_status camdelta_scan_plan_describe(camdelta_context *ctx, const camdelta_scan_args *args, char *buf,
                                            size_t size) {
  cd_clear_error();
  static const char *const fn = "camdelta_scan_plan_describe";
  if (!ctx || !args || !buf)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", fn, !ctx ? "ctx" : !args ? "args" : "buf");
  camdelta_status st = cd_check_algorithm(fn, args->algorithm);
  if (!st) st = cd_check_precision(fn, args->precision);
  if (!st) st = cd_check_head_dim(fn, args->D);
  if (st) return st;
  if (!args->B || !args->H || !args->F || !args->S || args->S > UINT32_MAX || args->F > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu H=%zu F=%zu S=%zu: each must be in [1, 2^32)", fn, args->B,
                   args->H, args->F, args->S);
  cd_fwd_request r;
  cd_plan_entry *e;
  if ((st = cd_forward_request(ctx, args, &r)) || (st = cd_forward_acquire(ctx, &r, &e))) return st;
  char text[1024];
  cd_forward_text(e, args->precision, text, sizeof text);
  budget_text(e->plan, cd_loop_budget(ctx), walk_steps(e->plan, args), args->S, text, sizeof text);
  cd_plan_release(ctx, e);
  if ((st = choice_text(ctx, args, r.alg, text, sizeof text))) return st;
  return cd_copy_text(fn, text, buf, size);
}

/* ------------------------------------------------------------------------------------- composition */

camdelta_status cd_forward_gram(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                const camdelta_scan_args *p, camdelta_scan_saved *saved, camdelta_buffer A,
                                camdelta_buffer U, cd_launch *l) {
  const fwd_plan *pl = e->plan;
  if (saved) A = (camdelta_buffer){saved->a_mat, 0};
  const cd_gram_io io = {.k = p->k, .v = p->v, .beta = p->beta, .decay = p->decay, .A = A, .U = U};
  return cd_gram_enqueue(ctx, &pl->u.gram, geo, &io, l);
}

camdelta_status cd_forward_rest(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                const camdelta_scan_args *p, camdelta_scan_saved *saved, camdelta_buffer A,
                                camdelta_buffer U, cd_launch *l) {
  fwd_plan *pl = e->plan;
  const size_t frames_bytes = geo->BHF * geo->D * geo->D * sizeof(float);
  const camdelta_buffer none = {NULL, 0};
  /* the per-frame states: the saved object's (it also gets the states before each update), else the workspace's */
  camdelta_buffer post = saved ? (camdelta_buffer){saved->state_post, 0} : none;
  const camdelta_buffer pre = saved ? (camdelta_buffer){saved->state_pre, 0} : none;
  camdelta_status st = CAMDELTA_OK;
  if (pl->alg == CAMDELTA_SCAN_SEQUENTIAL) {
    /* OUT=2: the kernel saves the state each output frame reads, the apply computes all outputs from them */
    const int split = pl->u.seq.c.OUT == 2;
    if (split && !post.mem) st = cd_ws_get(ctx, &pl->u.ws, WS_STATES, frames_bytes, &post);
    const cd_sequential_io io = {.q = p->q, .k = p->k, .v = p->v, .beta = p->beta, .decay = p->decay, .out = p->out,
                                 .init = p->init_state, .final = p->final_state, .pre = pre, .post = post,
                                 .reverse = p->reverse, .write_out = !split};
    if (!st) st = cd_sequential_enqueue(ctx, &pl->u.seq, geo, &io, l);
    if (!st && split) st = cd_apply_out(ctx, &pl->u.apply, geo, p->q, post, p->out, l);
    return st;
  }
  if (saved) A = (camdelta_buffer){saved->a_mat, 0};
  if (!post.mem) st = cd_ws_get(ctx, &pl->u.ws, WS_STATES, frames_bytes, &post);
  const cd_chain_states_io io = {.A = A, .U = U, .decay = p->decay, .init = p->init_state, .post = post, .pre = pre,
                                 .final = p->final_state, .reverse = p->reverse};
  if (!st) st = cd_chain_states(ctx, &pl->u.chain, geo, &io, l);
  if (!st) st = cd_apply_out(ctx, &pl->u.apply, geo, p->q, post, p->out, l);
  return st;
}

camdelta_status cd_forward_enqueue(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                   const camdelta_scan_args *p, camdelta_scan_saved *saved, cd_launch *l) {
  fwd_plan *pl = e->plan;
  const size_t frames_bytes = geo->BHF * geo->D * geo->D * sizeof(float);
  camdelta_buffer A = {NULL, 0}, U = {NULL, 0};
  camdelta_status st = CAMDELTA_OK;
  if (saved) {
    if ((st = cd_saved_reserve(ctx, saved, frames_bytes))) return st;
    saved->valid = 0, saved->has_a = 0;
  }
  if (pl->alg == CAMDELTA_SCAN_CHUNKWISE) {
    /* with a saved object, A_f goes into it: the backward reads it instead of computing it again */
    st = saved ? cd_ensure_buffer(ctx, &saved->a_mat, &saved->a_bytes, frames_bytes)
               : cd_ws_get(ctx, &pl->u.ws, WS_A, frames_bytes, &A);
    if (!st) st = cd_ws_get(ctx, &pl->u.ws, WS_U, frames_bytes, &U);
    if (!st) st = cd_forward_gram(ctx, e, geo, p, saved, A, U, l);
  }
  if (!st) st = cd_forward_rest(ctx, e, geo, p, saved, A, U, l);
  return st;
}

/* The entry (the steps of src/runtime/driver.c): the call's plan, held from the plan step to the end step. */
typedef struct fwd_call {
  camdelta_scan_saved *saved;
  cd_fwd_request r;
  cd_plan_entry *e;
} fwd_call;

static camdelta_status fwd_plan_step(cd_call *c) {
  fwd_call *s = c->op;
  const camdelta_scan_args *args = c->args;
  camdelta_status st = cd_forward_request(c->ctx, args, &s->r);
  if (!st) st = cd_forward_acquire(c->ctx, &s->r, &s->e);
  if (st) return st;
  if (cd_option(c->ctx, CD_OPT_VERBOSE_SCAN, CAMDELTA_F32)) {
    char text[1024];
    cd_forward_text(s->e, args->precision, text, sizeof text);
    budget_text(s->e->plan, cd_loop_budget(c->ctx), walk_steps(s->e->plan, args), args->S, text,
                sizeof text);
    if (!choice_text(c->ctx, args, s->r.alg, text, sizeof text)) fprintf(stderr, "camdelta scan: %s\n", text);
  }
  if (args->used) *args->used = s->r.alg;
  return CAMDELTA_OK;
}

static camdelta_status fwd_enqueue(cd_call *c, cd_launch *l) {
  fwd_call *s = c->op;
  const camdelta_scan_args *a = c->args;
  const cd_scan_geo geo = cd_scan_geo_fixed(a->B, a->H, a->D, a->F, a->S);
  return cd_forward_enqueue(c->ctx, s->e, &geo, a, s->saved, l);
}

void cd_scan_saved_commit(camdelta_scan_saved *saved, const camdelta_scan_args *a, int has_a) {
  saved->B = a->B, saved->H = a->H, saved->D = a->D, saved->F = a->F, saved->S = a->S;
  saved->reverse = a->reverse != 0;
  saved->has_init = a->init_state.mem != NULL;
  saved->has_a = has_a;
  saved->valid = 1;
}

static camdelta_status fwd_end(cd_call *c, camdelta_status st) {
  fwd_call *s = c->op;
  if (s->e) cd_plan_release(c->ctx, s->e);
  const camdelta_scan_args *a = c->args;
  if (s->saved && !st) cd_scan_saved_commit(s->saved, a, s->r.alg == CAMDELTA_SCAN_CHUNKWISE);
  return st;
}

static const cd_entry FORWARD =
    CD_ENTRY("camdelta_scan_forward", camdelta_scan_args, cd_forward_slots, cd_forward_uses, fwd_plan_step,
             fwd_enqueue, fwd_end);

camdelta_status camdelta_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args,
                                      camdelta_scan_saved *saved) {
  fwd_call s = {.saved = saved, .e = NULL};
  cd_call c = {.entry = &FORWARD, .ctx = ctx, .args = args, .saved = saved, .saved_ctx = saved ? saved->ctx : NULL,
               .op = &s};
  return cd_run_entry(&c);
}
