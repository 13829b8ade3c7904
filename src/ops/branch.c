/* The whole camera branch (docs/math.md §8.6), forward and backward, composed of the camera, conv, prep, output
 * transform operations and the scan engine (src/scan/engine.h).
 *
 * Forward (one saved object holds every intermediate the backward reads):
 *   cd_camera_matrices, cd_camera_rope   cameras -> proj_q, proj_kv, proj_o, rope tables
 *   cd_short_conv_forward                k_raw -> k_conv
 *   camdelta_prep_forward                (q_raw, k_conv, v_raw) -> q, k, v (B, H, D, N), inflation_sq
 *   cd_branch_discount                   beta' = beta / max(mean_s inflation_sq, 1); beta'_r, decay_r masked
 *   cd_scan_pair_forward                 where the scan runs chunkwise: both scans in one pass, their outputs summed
 *                                        (src/scan/pair.c)
 *   or camdelta_scan_forward x 2         causal (beta', decay) and reverse (beta'_r, decay_r)
 *   cd_output_transform                  transforms the pair's sum (or sums the two scan outputs) -> y (B, N, H, D);
 *                                        with tensor cores the pair's phase C does it as its epilogue instead
 *                                        (cd_apply_ot_tc, where y, proj_o and the tables start on 16 bytes)
 * Backward:
 *   cd_output_transform_backward         grad_y -> grad_out (B, H, D, N), the same for both scans
 *   cd_scan_pair_backward                after the pair: both scans' dbeta, ddecay and their summed dq, dk, dv
 *   or camdelta_scan_backward x 2        each scan's dq, dk, dv, dbeta, ddecay
 *      and cd_branch_add3                dq, dk, dv of the two scans summed
 *   cd_branch_discount_backward          dbeta, ddecay, grad_inflation_sq
 *   camdelta_prep_backward               dq_raw, dk_conv, dv_raw, dq_norm_weight, dk_norm_weight
 *   cd_short_conv_backward, _reduce      dk_raw, dconv_weight
 * Every reduction has a fixed order: the results are bit-identical run to run.
 *
 * A call is a run (include/camdelta_phases.h): a sequence of stages, each enqueueing its part of the work; a run
 * on a part of the sequence (camdelta_mpi's branch) stops between stages where the part needs the rest of the
 * sequence (the conv's halo, the two scans, the sums of the weights' gradients) and says what in a request. A run
 * over the whole sequence needs nothing: camdelta_branch_forward and _backward are such runs, and so is a stream's
 * block (src/ops/stream.c, cd_branch_block_start): a forward on the frames [f0, f0 + T) whose conv reads the
 * stream's look-back, whose causal scan starts from the stream's state and writes the next one. The AUTO choice is
 * made once per forward (the backward reads from the saved object whether the forward ran the pair). The branch's
 * plan (kept in the context) holds its kernels and its workspace: the backward's scratch, the forward's saved
 * object when the caller passes none, the halo's extended frames. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/branch_block.h"
#include "ops/branch_common.h"
#include "camdelta_phases.h"
#include "ops/camera_op.h"
#include "scan/engine.h"
#include "ops/prep_common.h"

enum { PQ, PKV, PO, RC, RS, KCONV, QB, KB, VB, INFL, IOTA, BP, BR, DR, OUTC, OUTR, MASK, SEG, NBUF };

struct camdelta_branch_saved {
  camdelta_context *ctx;
  cl_mem mem[NBUF];
  size_t bytes[NBUF];
  camdelta_prep_saved *prep;
  camdelta_scan_saved *scan_c, *scan_r;
  /* what the forward was run with */
  size_t B, T, Hs, Ws, H, D, ph, pw;
  camdelta_dtype dtype;
  float k_scale, norm_eps;
  size_t *bounds, nb, *cbounds, ncb;
  int pair; /* the forward ran the fused scan pair (its backward then runs the pair's) */
  int valid;
};

camdelta_status camdelta_branch_saved_create(camdelta_context *ctx, camdelta_branch_saved **out) {
  CD_CREATE_OBJECT("camdelta_branch_saved_create", ctx, out);
}

void camdelta_branch_saved_destroy(camdelta_branch_saved *s) {
  if (!s) return;
  for (int i = 0; i < NBUF; i++)
    if (s->mem[i]) clReleaseMemObject(s->mem[i]);
  camdelta_prep_saved_destroy(s->prep);
  camdelta_scan_saved_destroy(s->scan_c);
  camdelta_scan_saved_destroy(s->scan_r);
  free(s->bounds);
  free(s->cbounds);
  free(s);
}

camdelta_status cd_branch_saved_gates(const camdelta_branch_saved *s, cl_mem *beta_p, cl_mem *beta_r,
                                      cl_mem *decay_r, cl_mem *inflation_sq) {
  if (!s || !s->valid) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "cd_branch_saved_gates: no valid saved object");
  *beta_p = s->mem[BP], *beta_r = s->mem[BR], *decay_r = s->mem[DR], *inflation_sq = s->mem[INFL];
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------------------------------------------ checks */

typedef struct branch_geo {
  size_t N, S, C, BNC, BHN, BHT, BN16, NDh;
  size_t *bounds, nb, *cbounds, ncb;
  uint32_t *mask, *seg_end;
  /* a part of a sequence: its frames start at the sequence's f0; the conv runs on the frames [e0, e0 + Te) (the
   * part's and up to 3 of each neighbour's); the whole sequence: f0 = e0 = 0, Te = T */
  size_t f0, e0, Te;
} branch_geo;

static void geo_free(branch_geo *g) {
  free(g->bounds), free(g->cbounds), free(g->mask), free(g->seg_end);
  memset(g, 0, sizeof *g);
}

static camdelta_status check_args(camdelta_context *ctx, const char *op, const camdelta_branch_args *a,
                                  branch_geo *g, const camdelta_branch_part *part) {
  memset(g, 0, sizeof *g);
  camdelta_status st = cd_check_dtype(op, a->dtype);
  if (!st) st = cd_check_head_dim(op, a->D);
  if (st) return st;
  if (part && a->dtype != CAMDELTA_F32)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: a part of a sequence (sequence parallel) takes f32 activations, "
                   "got dtype %s", op, camdelta_dtype_name(a->dtype));
  if ((st = cd_check_grid(op, a->T, a->Hs, a->Ws, &g->N))) return st;
  if (!a->B || !a->H) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu: each must be at least 1", op, a->B, a->H);
  if (!a->pt || !a->ph || !a->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: patch (%zu, %zu, %zu): each must be at least 1", op, a->pt, a->ph,
                   a->pw);
  if ((st = cd_check_algorithm(op, a->algorithm))) return st;
  /* every count, and the byte sizes the kernels index (at most 16 bytes per token element; 4*C in 32 bits) */
  size_t cams, bytes16, c4;
  if (!CD_PROD(&g->BNC, a->B, g->N, a->H, a->D) || !CD_PROD(&bytes16, g->BNC, 16) || !CD_PROD(&g->C, a->H, a->D) ||
      !CD_PROD(&c4, g->C, 4) || c4 > UINT32_MAX || !CD_PROD(&g->S, a->Hs, a->Ws) ||
      !CD_PROD(&g->BHN, a->B, a->H, g->N) || !CD_PROD(&g->BHT, a->B, a->H, a->T) ||
      !CD_PROD(&g->BN16, a->B, g->N, 16) || !CD_PROD(&g->NDh, g->N, a->D / 2) || !CD_PROD(&cams, a->B, a->T, 20))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D = %zu*%zu*%zu*%zu overflows", op, a->B, g->N, a->H, a->D);
  const size_t T = part ? part->frames : a->T, f0 = part ? part->first : 0;
  if (part && (f0 > T || a->T > T - f0))
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frames [%zu, %zu) of this part are not within the sequence's %zu", op,
                   f0, f0 + a->T, T);
  if (T > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: T=%zu frames exceeds 2^32-1", op, T);
  if (!(a->k_scale == a->k_scale) || a->k_scale - a->k_scale != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: k_scale must be finite (got %g)", op, (double)a->k_scale);
  if (!(a->norm_eps >= 0.0f) || a->norm_eps - a->norm_eps != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: norm_eps must be finite and >= 0 (got %g)", op,
                   (double)a->norm_eps);
  /* the input buffers' sizes before the per-frame host arrays: a call with hostile sizes stops here, allocating
   * nothing (the driver checks every buffer again, with its context, after this step) */
  const size_t es = camdelta_dtype_size(a->dtype);
  const cd_tensor_arg in[] = {{"q_raw", a->q_raw, g->BNC, es},
                              {"k_raw", a->k_raw, g->BNC, es},
                              {"v_raw", a->v_raw, g->BNC, es},
                              {"conv_weight", a->conv_weight, 4 * g->C, 4},
                              {"q_norm_weight", a->q_norm_weight, g->C, 4},
                              {"k_norm_weight", a->k_norm_weight, g->C, 4},
                              {"camera_conditions", a->camera_conditions, cams, 4},
                              {"beta", a->beta, g->BHN, 4},
                              {"decay", a->decay, g->BHT, 4}};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    if ((st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, in[i].es, 0))) return st;
  if ((st = cd_camera_check_conditions(ctx, op, a->camera_conditions, a->B, a->T))) return st;
  g->f0 = f0, g->e0 = f0 >= 3 ? f0 - 3 : 0;
  g->Te = (T - f0 - a->T >= 3 ? f0 + a->T + 3 : T) - g->e0;
  g->bounds = cd_malloc_array(T + 1, sizeof *g->bounds); /* T + 1 <= 2^32 */
  g->cbounds = cd_malloc_array(T + 1, sizeof *g->cbounds);
  g->mask = cd_malloc_array(T, sizeof *g->mask);
  g->seg_end = cd_malloc_array(T, sizeof *g->seg_end);
  if (!g->bounds || !g->cbounds || !g->mask || !g->seg_end)
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if ((st = camdelta_chunk_bounds(T, &a->chunking, g->bounds, T + 1, &g->nb)) ||
      (st = camdelta_conv_bounds(T, &a->chunking, g->cbounds, T + 1, &g->ncb))) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", camdelta_last_message());
    return cd_fail(st, "%s: %s", op, msg);
  }
  cd_reverse_mask(g->bounds, g->nb, T, g->mask);
  cd_segment_ends(g->cbounds, g->ncb, T, g->seg_end);
  if (part) { /* this part's frames of the mask; the segment ends of the conv's frames, relative to e0 */
    memmove(g->mask, g->mask + f0, a->T * sizeof *g->mask);
    for (size_t i = 0; i < g->Te; i++) {
      const size_t e = g->seg_end[g->e0 + i];
      g->seg_end[i] = (uint32_t)((e < g->e0 + g->Te ? e : g->e0 + g->Te) - g->e0);
    }
  }
  return CAMDELTA_OK;
}

/* The entries' buffers (src/runtime/driver.c): the args struct's, then the backward's grads. */
#define BA(f, role) CD_SLOT(camdelta_branch_args, f, role)
#define BG(f, role) CD_SLOT2(camdelta_branch_grads, f, role)
#define ARGS_SLOTS(y_role)                                                                                         \
  BA(q_raw, CD_IN), BA(k_raw, CD_IN), BA(v_raw, CD_IN), BA(conv_weight, CD_IN), BA(q_norm_weight, CD_IN),          \
      BA(k_norm_weight, CD_IN), BA(camera_conditions, CD_IN), BA(beta, CD_IN), BA(decay, CD_IN), BA(y, y_role)
enum { NARGS = 10, NGRADS = 9 };
static const cd_slot FWD_SLOTS[NARGS] = {ARGS_SLOTS(CD_OUT)};
static const cd_slot BWD_SLOTS[NARGS + NGRADS] = {
    ARGS_SLOTS(CD_UNREAD), BG(grad_y, CD_IN),          BG(dq_raw, CD_OUT),         BG(dk_raw, CD_OUT),
    BG(dv_raw, CD_OUT),    BG(dconv_weight, CD_OUT),   BG(dq_norm_weight, CD_OUT), BG(dk_norm_weight, CD_OUT),
    BG(dbeta, CD_OUT),     BG(ddecay, CD_OUT)};
#undef ARGS_SLOTS
#undef BG
#undef BA

/* How a call uses the args struct's inputs (slots 0-8) and the forward's y or the backward's grads. */
static void set_uses(cd_call *c, const camdelta_branch_args *a, const branch_geo *g, int backward) {
  const size_t n[NARGS + NGRADS] = {g->BNC, g->BNC, g->BNC, 4 * g->C, g->C,   g->C,   a->B * a->T * 20,
                                    g->BHN, g->BHT, g->BNC, g->BNC,   g->BNC, g->BNC, g->BNC,
                                    4 * g->C, g->C, g->C,   g->BHN,   g->BHT};
  /* the activations and their gradients in the call's dtype: q_raw, k_raw, v_raw, y, grad_y, dq_raw, dk_raw, dv_raw */
  const size_t es = camdelta_dtype_size(a->dtype);
  for (int i = 0; i < NARGS + NGRADS; i++) {
    const int act = i < 3 || (i >= NARGS - 1 && i <= NARGS + 3);
    cd_need need = i < NARGS - 1 ? CD_REQUIRED : CD_UNUSED;
    if (i == NARGS - 1 && !backward) need = CD_REQUIRED; /* y */
    if (i == NARGS && backward) need = CD_REQUIRED;       /* grad_y */
    if (i > NARGS && backward) need = CD_OPTIONAL;        /* the gradients */
    if (i < NARGS || backward) c->use[i] = (cd_use){.need = need, .elems = n[i], .es = act ? es : 4};
  }
}

static int same_bounds(const size_t *a, size_t na, const size_t *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static camdelta_status check_saved(const char *op, const camdelta_branch_args *a, const branch_geo *g,
                                   const camdelta_branch_saved *s) {
  if (!s->valid)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'saved' holds nothing (pass it to camdelta_branch_forward first, or pass NULL)", op);
  if (s->dtype != a->dtype)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a forward in %s, this call is in %s", op,
                   camdelta_dtype_name(s->dtype), camdelta_dtype_name(a->dtype));
  if (s->B != a->B || s->T != a->T || s->Hs != a->Hs || s->Ws != a->Ws || s->H != a->H || s->D != a->D ||
      s->ph != a->ph || s->pw != a->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE,
                   "%s: 'saved' is from a forward with B=%zu T=%zu Hs=%zu Ws=%zu H=%zu D=%zu, this call has B=%zu "
                   "T=%zu Hs=%zu Ws=%zu H=%zu D=%zu (or another patch)",
                   op, s->B, s->T, s->Hs, s->Ws, s->H, s->D, a->B, a->T, a->Hs, a->Ws, a->H, a->D);
  if (!same_bounds(s->bounds, s->nb, g->bounds, g->nb) || !same_bounds(s->cbounds, s->ncb, g->cbounds, g->ncb))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a forward with another chunking", op);
  if (s->k_scale != a->k_scale || s->norm_eps != a->norm_eps)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'saved' is from a forward with another k_scale or norm_eps",
                   op);
  return CAMDELTA_OK;
}

/* ----------------------------------------------------------------------------------------------- the plan */

/* The branch's plan for head dim D: its own kernels (cl/branch.cl's discount, its backward and the add of the two
 * scans' gradients), built with the programs of the operations it composes, and its workspace: the backward's
 * scratch (GOUT … SPARE), the forward's y when the backward recomputes it, the halo's extended frames (KX, KC in
 * the forward, GX, K0, DXE, DW in the backward), and a saved object for calls that pass none. */
enum { GOUT, DQ, DK, DV, DQ2, DK2, DV2, DB, DB2, DD, DD2, GINFL, DQW, DKW, SPARE, NSCR };
enum { WS_Y = NSCR, WS_KX, WS_KC, WS_GX, WS_K0, WS_DXE, WS_DW, WS_COUNT };

typedef struct branch_plan {
  cl_kernel discount, discount_bwd, add3;
  camdelta_branch_saved *tmp; /* the saved object of calls that pass none */
  cd_workspace ws;
  cd_camera_axis axis; /* a stream block's RoPE angle table, reused block after block */
} branch_plan;

static void branch_destroy(void *p) {
  branch_plan *pl = p;
  cl_kernel k[3] = {pl->discount, pl->discount_bwd, pl->add3};
  for (int i = 0; i < 3; i++)
    if (k[i]) clReleaseKernel(k[i]);
  camdelta_branch_saved_destroy(pl->tmp);
  cd_ws_free(&pl->ws);
  if (pl->axis.mem) clReleaseMemObject(pl->axis.mem);
  free(pl);
}

/* The kernels, and the programs of the operations the branch composes (camera, conv, output transform), built
 * before anything is enqueued. */
static camdelta_status branch_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **out) {
  (void)arg;
  branch_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_branch: out of host memory");
  const size_t D = key->D;
  const camdelta_dtype dtype = (camdelta_dtype)key->variant; /* the activations' */
  cl_program prog;
  size_t ts;
  cl_kernel k = NULL;
  camdelta_status st = cd_program(ctx, "camera.cl", "", &prog);
  if (!st) st = cd_short_conv_program(ctx, dtype);
  if (!st) st = cd_branch_kernel(ctx, CAMDELTA_F32, D, "cd_branch_discount", &pl->discount, &ts);
  if (!st) st = cd_branch_kernel(ctx, CAMDELTA_F32, D, "cd_branch_discount_backward", &pl->discount_bwd, &ts);
  if (!st) st = cd_branch_kernel(ctx, CAMDELTA_F32, D, "cd_branch_add3", &pl->add3, &ts);
  if (cd_output_cpu(ctx, dtype)) {
    if (!st && !(st = cd_branch_cpu_kernel(ctx, dtype, "cd_ot_cpu_forward", &k))) clReleaseKernel(k);
  } else {
    if (!st && !(st = cd_branch_kernel(ctx, dtype, D, "cd_output_transform", &k, &ts))) clReleaseKernel(k);
    if (!st && !(st = cd_branch_kernel(ctx, dtype, D, "cd_output_transform_backward", &k, &ts))) clReleaseKernel(k);
  }
  if (!st) st = camdelta_branch_saved_create(ctx, &pl->tmp);
  if (st) {
    branch_destroy(pl);
    return st;
  }
  *out = pl;
  return CAMDELTA_OK;
}

/* One plan per head dim and activations' dtype (the key's variant; f32 = 0). */
static camdelta_status branch_acquire(camdelta_context *ctx, size_t D, camdelta_dtype dtype, cd_plan_entry **e) {
  cd_plan_key key;
  memset(&key, 0, sizeof key);
  key.op = CD_PLAN_BRANCH;
  key.D = (unsigned)D;
  key.variant = (unsigned)dtype;
  return cd_plan_acquire(ctx, &key, branch_build, NULL, branch_destroy, e);
}

camdelta_status cd_branch_warm(camdelta_context *ctx, size_t D) {
  cd_plan_entry *e;
  const camdelta_status st = branch_acquire(ctx, D, CAMDELTA_F32, &e);
  if (!st) cd_plan_release(ctx, e);
  return st;
}

/* -------------------------------------------------------------------------------------------------- the run */

/* The stages of a run, in order; a run over a part stops after the ones that end in a request. */
enum {
  ST_FWD_START, /* saved buffers and masks; cameras; the halo's extended frames (a part: HALO) */
  ST_FWD_CONV,  /* conv, prep, discount; the scans (a part: SCAN_FORWARD causal) */
  ST_FWD_SCAN_R, /* a part: SCAN_FORWARD reverse */
  ST_FWD_END,   /* the output transform, the saved object's record */
  ST_BWD_START, /* the output transform backward; the scans (a part: SCAN_BACKWARD causal) */
  ST_BWD_SCAN_R, /* a part: SCAN_BACKWARD reverse */
  ST_BWD_PREP,  /* the gradients' add, the discount backward, the prep backward (a part: SUM dq_norm_weight) */
  ST_BWD_SUM_K, /* a part: SUM dk_norm_weight */
  ST_BWD_CONV,  /* the conv backward (a part: HALO of dk_conv first) */
  ST_BWD_CONV2, /* a part: the conv backward over the extended frames, dk_raw (SUM dconv_weight) */
  ST_DONE
};

struct camdelta_branch_run {
  camdelta_context *ctx;
  const char *op;
  camdelta_branch_args a;  /* the call's (y replaced by the workspace's when the backward recomputes) */
  camdelta_branch_grads gr; /* the backward's */
  int backward, training, has_part;
  const cd_branch_block *blk; /* a stream's block (src/ops/stream.c), or NULL */
  cd_branch_block block;
  cl_mem mask, seg; /* the forward's reverse-scan mask and conv segment ends on the device */
  branch_geo g;
  cd_plan_entry *pe; /* the branch plan, held for the run */
  branch_plan *pl;
  camdelta_branch_saved *s;        /* the forward's saved object: the caller's, or the plan's */
  const camdelta_branch_saved *rs; /* the one the backward reads: the caller's, or s after the recomputed forward */
  camdelta_scan_algorithm alg;
  int pair;
  camdelta_profile *prof, part; /* the call's profile (its total), and one stage's or scan's part */
  int stage;
  camdelta_status failed;
  camdelta_buffer m[NBUF], x[NSCR]; /* the saved object's buffers, the backward's scratch */
  cd_pair_ot ot;
};

/* Copies n frames (fs elements of es bytes each) of every batch: frame sf of src (B, sT frames) -> frame df of dst
 * (B, dT). */
static camdelta_status copy_frames(camdelta_context *ctx, camdelta_buffer src, size_t sT, size_t sf,
                                   camdelta_buffer dst, size_t dT, size_t df, size_t n, size_t B, size_t fs,
                                   size_t es, cd_launch *l) {
  for (size_t b = 0; b < B && n; b++) {
    const camdelta_status st = cd_copy(ctx, src.mem, (src.offset + (b * sT + sf) * fs) * es, dst.mem,
                                       (dst.offset + (b * dT + df) * fs) * es, n * fs * es, l);
    if (st) return st;
  }
  return CAMDELTA_OK;
}

/* Frames of this part's outputs that read a neighbour's input (the conv's halo, docs/math.md §8.2), relative to the
 * extended frames [e0, e0 + Te) with this part's at [nl, nl + T):
 *   forward (y reads x): all nl frames before (the look-back crosses segment starts) and, after, those within the
 *     segment of this part's last frame (the look-ahead stops at its end);
 *   backward (dx reads dy): all frames after (their look-back reads this part's frames) and, before, those whose
 *     segment reaches into this part's frames. */
static void halo_wants(const branch_geo *g, size_t T, int backward, size_t *left, size_t *right) {
  const size_t nl = g->f0 - g->e0, nr = g->Te - nl - T;
  if (!backward) {
    const size_t e = g->seg_end[nl + T - 1]; /* relative, at most Te */
    *left = nl, *right = e > nl + T ? e - (nl + T) : 0;
    return;
  }
  size_t first = nl;
  while (first > 0 && g->seg_end[first - 1] > nl) first--;
  *left = nl - first, *right = nr;
}

/* x's frames (B, T frames of fs floats) into the extended frames `ext` (B, Te) at [nl, nl + T), zeros elsewhere: the
 * halo a part's caller then fills (only the frames it wants from the neighbours; zero where it wants none). */
static camdelta_status extend_local(camdelta_branch_run *r, camdelta_buffer x, camdelta_buffer ext, size_t fs,
                                    cd_launch *l) {
  const size_t B = r->a.B, T = r->a.T, Te = r->g.Te, nl = r->g.f0 - r->g.e0;
  camdelta_status st = copy_frames(r->ctx, x, T, 0, ext, Te, nl, T, B, fs, 4, l); /* parts are f32 */
  for (size_t b = 0; b < B && !st; b++) {
    const size_t base = (ext.offset + b * Te * fs) * 4;
    if (nl) st = cd_zero(r->ctx, ext.mem, base, nl * fs * 4, l);
    if (!st && nl + T < Te) st = cd_zero(r->ctx, ext.mem, base + (nl + T) * fs * 4, (Te - nl - T) * fs * 4, l);
  }
  return st;
}

static camdelta_status upload_u32(camdelta_context *ctx, const uint32_t *host, size_t n, cl_mem *mem, size_t *have) {
  if (*mem) clReleaseMemObject(*mem);
  cl_int err;
  *mem = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof *host, (void *)host, &err);
  if (err != CL_SUCCESS) {
    *mem = NULL, *have = 0;
    return cd_cl_fail(err, "uploading the chunk masks");
  }
  *have = n * sizeof *host;
  return CAMDELTA_OK;
}

/* One group of the branch's own launches: its part of the profile starts from zero ... and is added to the call's
 * total at its end. */
static void group_begin(camdelta_branch_run *r, cd_launch *l) {
  if (r->prof) r->part.kernel_ms = 0, r->part.kernels = 0;
  cd_launch_init(l, r->prof ? &r->part : NULL);
}

static void add_part(camdelta_branch_run *r) {
  if (!r->prof) return;
  r->prof->kernel_ms += r->part.kernel_ms;
  r->prof->kernels += r->part.kernels;
  r->part.kernel_ms = 0, r->part.kernels = 0;
}

static camdelta_status group_end(camdelta_branch_run *r, cd_launch *l, camdelta_status st) {
  st = cd_launch_end(r->ctx, l, st);
  add_part(r);
  return st;
}

/* The elementwise launches of the discount (forward and backward) take the largest power of two up to 256 the
 * kernel holds. */
static size_t discount_local(camdelta_context *ctx, cl_kernel k) {
  size_t L = 1;
  const size_t lmax = cd_kernel_max_wg(ctx, k);
  while (L * 2 <= 256 && L * 2 <= lmax) L *= 2;
  return L;
}

/* ------------------------------------------------------------------------------------------ forward stages */

/* The saved object's buffers and masks, the cameras, and a part's extended k_raw. */
static camdelta_status fwd_start(camdelta_branch_run *r, camdelta_branch_request *rq) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const branch_geo *g = &r->g;
  camdelta_branch_saved *s = r->s;
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, S = g->S, C = g->C;
  /* the scan pair: fused (one gram and one apply for both directions, src/scan/pair.c) where the scan runs
   * chunkwise, else two scans; a part's scans are its caller's (their states cross the parts) */
  camdelta_status st = cd_scan_branch_algorithm(ctx, a->algorithm, B * H, D, T, S, &r->alg, &r->pair);
  r->pair = r->pair && !r->has_part;
  /* k_conv in the activations' dtype (as the model's conv writes it); the rest f32 */
  const size_t bytes[NBUF] = {g->BN16 * 4, g->BN16 * 4, g->BN16 * 4, g->NDh * 4, g->NDh * 4,
                              g->BNC * camdelta_dtype_size(a->dtype),
                              g->BNC * 4,  g->BNC * 4,  g->BNC * 4,  g->BHN * 4, g->BHT * 4, g->BHN * 4,
                              g->BHN * 4,  g->BHT * 4,  g->BNC * 4,  r->pair ? 0 : g->BNC * 4, 0, 0};
  for (int i = 0; i < NBUF && !st; i++)
    if (bytes[i]) st = cd_ensure_buffer(ctx, &s->mem[i], &s->bytes[i], bytes[i]);
  s->valid = 0;
  if (!st && !r->blk) st = upload_u32(ctx, g->mask, T, &s->mem[MASK], &s->bytes[MASK]);
  if (!st && !r->blk) st = upload_u32(ctx, g->seg_end, g->Te, &s->mem[SEG], &s->bytes[SEG]);
  r->mask = r->blk ? r->blk->mask : s->mem[MASK], r->seg = r->blk ? r->blk->seg_end : s->mem[SEG];
  /* a block keeps prep's inverse RMS values in the plan's saved object too: its buffer is reused block after block */
  if (!st && (r->training || r->blk) && !s->prep) st = camdelta_prep_saved_create(ctx, &s->prep);
  if (!st && r->training && !s->scan_c) st = camdelta_scan_saved_create(ctx, &s->scan_c);
  if (!st && r->training && !s->scan_r) st = camdelta_scan_saved_create(ctx, &s->scan_r);
  if (st) return st;
  for (int i = 0; i < NBUF; i++) r->m[i] = (camdelta_buffer){s->mem[i], 0};
  cd_launch l;
  group_begin(r, &l);
  const camdelta_camera_args ca = {.B = B, .T = T, .Hs = a->Hs, .Ws = a->Ws, .pt = a->pt, .ph = a->ph, .pw = a->pw,
                                   .D = D, .camera_conditions = a->camera_conditions, .proj_q = r->m[PQ],
                                   .proj_kv = r->m[PKV], .proj_o = r->m[PO], .rope_cos = r->m[RC],
                                   .rope_sin = r->m[RS]};
  st = cd_camera_enqueue_at(ctx, &ca, g->N, g->f0, r->blk ? &r->pl->axis : NULL, &l);
  /* a part's conv reads k_raw with the neighbours' halo frames (a block's reads the stream's look-back itself) */
  camdelta_buffer kx;
  const size_t es = camdelta_dtype_size(a->dtype); /* k_raw's */
  if (!st && r->has_part) st = cd_ws_get(ctx, &r->pl->ws, WS_KX, B * g->Te * S * C * es, &kx);
  if (!st && r->has_part) st = extend_local(r, a->k_raw, kx, S * C, &l);
  st = group_end(r, &l, st);
  if (!st && r->has_part) {
    size_t wl, wr;
    halo_wants(g, T, 0, &wl, &wr);
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_HALO, .halo = kx.mem, .halo_batches = B,
                                    .halo_frames = g->Te, .halo_floats = S * C, .halo_at = g->f0 - g->e0,
                                    .halo_before = wl, .halo_after = wr};
  }
  return st;
}

/* The scan arguments of one direction of this call (a part's are what a one-device call over the part gives). */
static camdelta_scan_args scan_args(camdelta_branch_run *r, int rev) {
  const camdelta_buffer *m = r->m;
  const camdelta_scan_args sa = {.B = r->a.B, .H = r->a.H, .D = r->a.D, .F = r->a.T, .S = r->g.S, .reverse = rev,
                                 .algorithm = r->alg, .q = m[QB], .k = m[KB], .v = m[VB],
                                 .beta = rev ? m[BR] : m[BP], .decay = rev ? m[DR] : r->a.decay,
                                 .out = rev ? m[OUTR] : m[OUTC], .profile = r->prof ? &r->part : NULL,
                                 .precision = r->a.precision};
  return sa;
}

/* The conv (over a part's extended frames), prep and discount; the scans (a part: the causal one's request). */
static camdelta_status fwd_conv(camdelta_branch_run *r, camdelta_branch_request *rq) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const branch_geo *g = &r->g;
  camdelta_branch_saved *s = r->s;
  const camdelta_buffer *m = r->m;
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, N = g->N, S = g->S, C = g->C;
  const size_t es = camdelta_dtype_size(a->dtype); /* k_raw's and k_conv's */
  camdelta_buffer kx = {NULL, 0}, kc = {NULL, 0};
  camdelta_status st = CAMDELTA_OK;
  if (r->has_part) { /* the conv runs on the extended frames */
    kx = (camdelta_buffer){r->pl->ws.mem[WS_KX], 0};
    st = cd_ws_get(ctx, &r->pl->ws, WS_KC, B * g->Te * S * C * es, &kc);
  }
  /* a block's conv continues the look-back's last `back` frames (its seg_end covers them) */
  const camdelta_buffer none = {NULL, 0}, lb = r->blk ? r->blk->lookback : none;
  const size_t back = r->blk ? g->f0 - g->e0 : 0;
  cd_launch l;
  group_begin(r, &l);
  /* a committing block's next look-back comes from the conv's own walk over [look-back | block] (a block is never a
   * sequence-parallel part: cd_branch_block_start) */
  const camdelta_buffer lb_out = r->blk ? r->blk->lookback_out : none;
  if (!st && !r->has_part)
    st = cd_short_conv_enqueue_forward(ctx, a->dtype, B, T, S, C, lb, back, a->k_raw, a->conv_weight, r->seg,
                                       m[KCONV], lb_out, &l);
  if (!st && r->has_part)
    st = cd_short_conv_enqueue_forward(ctx, a->dtype, B, g->Te, S, C, none, 0, kx, a->conv_weight, r->seg, kc, none,
                                       &l);
  if (!st && r->has_part) st = copy_frames(ctx, kc, g->Te, g->f0 - g->e0, m[KCONV], T, 0, T, B, S * C, es, &l);
  st = group_end(r, &l, st);
  if (!st) {
    /* prep on the activations' dtype, its outputs in f32 for the scan */
    const camdelta_prep_args pa = {.B = B, .N = N, .H = H, .D = D, .dtype = a->dtype, .k_scale = a->k_scale,
                                   .norm_eps = a->norm_eps, .q_raw = a->q_raw, .k_raw = m[KCONV], .v_raw = a->v_raw,
                                   .q_norm_weight = a->q_norm_weight, .k_norm_weight = a->k_norm_weight,
                                   .proj_q = m[PQ], .proj_kv = m[PKV], .rope_cos = m[RC], .rope_sin = m[RS],
                                   .q = m[QB], .k = m[KB], .v = m[VB], .inflation_sq = m[INFL],
                                   .profile = r->prof ? &r->part : NULL};
    st = cd_prep_forward_split(ctx, &pa, r->training || r->blk ? s->prep : NULL);
    add_part(r);
  }
  if (!st) {
    group_begin(r, &l);
    cl_kernel k = r->pl->discount;
    const size_t L = discount_local(ctx, k);
    cd_args ar = {k, 0, CL_SUCCESS};
    cd_arg_mem(&ar, s->mem[INFL]);
    cd_arg_buf(&ar, a->beta);
    cd_arg_buf(&ar, a->decay);
    cd_arg_mem(&ar, r->mask);
    cd_arg_mem(&ar, s->mem[BP]);
    cd_arg_mem(&ar, s->mem[BR]);
    cd_arg_mem(&ar, s->mem[DR]);
    cd_arg_mem(&ar, s->mem[IOTA]);
    cd_arg_u32(&ar, (uint32_t)T);
    cd_arg_u32(&ar, (uint32_t)S);
    cd_arg_local(&ar, L * sizeof(float));
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_branch_discount: setting arguments");
    const size_t gws[3] = {T * L, H, B}, lws[3] = {L, 1, 1};
    if (!st) st = cd_enqueue(ctx, k, 3, gws, lws, &l, "cd_branch_discount");
    st = group_end(r, &l, st);
  }
  if (st) return st;
  if (r->has_part) {
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SCAN_FORWARD, .scan = scan_args(r, 0),
                                    .saved = r->training ? s->scan_c : NULL};
    return CAMDELTA_OK;
  }
  /* with tensor cores the pair's apply writes y itself, the output transform as its epilogue */
  r->ot = (cd_pair_ot){.proj_o = m[PO], .rope_cos = m[RC], .rope_sin = m[RS], .y = a->y, .dtype = a->dtype};
  /* a block's causal scan goes on from the stream's state and gives the state after the block */
  const camdelta_buffer init_c = r->blk ? r->blk->init : none, final_c = r->blk ? r->blk->final : none;
  if (r->pair) {
    const cd_scan_pair_args pa = {.B = B, .H = H, .D = D, .F = T, .S = S, .q = m[QB], .k = m[KB], .v = m[VB],
                                  .beta = m[BP], .decay = a->decay, .mask = r->mask, .out = m[OUTC],
                                  .init_c = init_c, .init_r = none, .final_c = final_c, .final_r = none,
                                  .precision = a->precision, .profile = r->prof ? &r->part : NULL,
                                  .ot = &r->ot};
    st = cd_scan_pair_forward(ctx, &pa, r->training ? s->scan_c : NULL, r->training ? s->scan_r : NULL);
    add_part(r);
    return st;
  }
  for (int rev = 0; rev < 2 && !st; rev++) {
    camdelta_scan_args sa = scan_args(r, rev);
    if (!rev) sa.init_state = init_c, sa.final_state = final_c;
    st = camdelta_scan_forward(ctx, &sa, r->training ? (rev ? s->scan_r : s->scan_c) : NULL);
    add_part(r);
  }
  return st;
}

/* The output transform (unless the pair's apply did it) and the saved object's record. */
static camdelta_status fwd_end(camdelta_branch_run *r) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const branch_geo *g = &r->g;
  camdelta_branch_saved *s = r->s;
  const camdelta_buffer *m = r->m;
  camdelta_status st = CAMDELTA_OK;
  if (!r->ot.done) {
    cd_launch l;
    group_begin(r, &l);
    const camdelta_buffer none = {NULL, 0};
    /* the pair's output is the sum: no second one */
    const camdelta_output_transform_args oa = {.B = a->B, .N = g->N, .H = a->H, .D = a->D, .out = m[OUTC],
                                               .out2 = r->pair ? none : m[OUTR], .proj_o = m[PO], .rope_cos = m[RC],
                                               .rope_sin = m[RS], .y = a->y};
    st = cd_output_transform_enqueue(ctx, a->dtype, 0, &oa, &l);
    st = group_end(r, &l, st);
  }
  if (st) return st;
  if (r->blk) { /* a stream's block keeps nothing for a backward */
    s->valid = 0;
    return CAMDELTA_OK;
  }
  s->B = a->B, s->T = a->T, s->Hs = a->Hs, s->Ws = a->Ws, s->H = a->H, s->D = a->D, s->ph = a->ph, s->pw = a->pw;
  s->k_scale = a->k_scale, s->norm_eps = a->norm_eps, s->dtype = a->dtype;
  free(s->bounds), free(s->cbounds);
  s->bounds = malloc(g->nb * sizeof *s->bounds);
  s->cbounds = malloc(g->ncb * sizeof *s->cbounds);
  if (!s->bounds || !s->cbounds) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory");
  memcpy(s->bounds, g->bounds, g->nb * sizeof *s->bounds);
  memcpy(s->cbounds, g->cbounds, g->ncb * sizeof *s->cbounds);
  s->nb = g->nb, s->ncb = g->ncb;
  s->pair = r->pair;
  s->valid = r->training ? 1 : 0;
  return CAMDELTA_OK;
}

/* ----------------------------------------------------------------------------------------- backward stages */

/* The scan backward arguments of one direction. */
static camdelta_scan_backward_args scan_backward_args(camdelta_branch_run *r, int rev) {
  const camdelta_buffer *m = r->m, *x = r->x;
  const camdelta_scan_backward_args sb = {
      .B = r->a.B, .H = r->a.H, .D = r->a.D, .F = r->a.T, .S = r->g.S, .reverse = rev, .q = m[QB], .k = m[KB],
      .v = m[VB], .beta = rev ? m[BR] : m[BP], .decay = rev ? m[DR] : r->a.decay, .grad_out = x[GOUT],
      .dq = rev ? x[DQ2] : x[DQ], .dk = rev ? x[DK2] : x[DK], .dv = rev ? x[DV2] : x[DV], .dbeta = rev ? x[DB2] : x[DB],
      .ddecay = rev ? x[DD2] : x[DD], .profile = r->prof ? &r->part : NULL,
      .precision = r->a.precision};
  return sb;
}

/* The scratch, the output transform backward; the scans (a part: the causal one's request). */
static camdelta_status bwd_start(camdelta_branch_run *r, camdelta_branch_request *rq) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const camdelta_branch_grads *gr = &r->gr;
  const branch_geo *g = &r->g;
  const camdelta_branch_saved *s = r->rs;
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, N = g->N, S = g->S, C = g->C;
  /* the pair's backward where the forward ran the pair: both directions' gradients, the work they share done once,
   * dq summed, dk and dv summed by the prep backward's loads (src/scan/pair.c); else two scan backward calls and an
   * add */
  r->pair = s->pair;
  /* the profile counts the backward's own kernels (not those of a forward it recomputed) */
  r->prof = gr->profile;
  if (r->prof) r->prof->kernel_ms = 0, r->prof->kernels = 0;
  const size_t spare = r->pair && !gr->dv_raw.mem ? g->BNC * 4 : 0;
  const size_t bytes[NSCR] = {g->BNC * 4, g->BNC * 4, g->BNC * 4, g->BNC * 4, g->BNC * 4,
                              g->BNC * 4, g->BNC * 4, g->BHN * 4, g->BHN * 4, g->BHT * 4,
                              g->BHT * 4, g->BHN * 4, C * 4,      C * 4,      spare};
  camdelta_status st = CAMDELTA_OK;
  for (int i = 0; i < NSCR && !st; i++)
    r->x[i] = (camdelta_buffer){NULL, 0}, st = bytes[i] ? cd_ws_get(ctx, &r->pl->ws, i, bytes[i], &r->x[i]) : st;
  for (int i = 0; i < NBUF; i++) r->m[i] = (camdelta_buffer){s->mem[i], 0};
  if (st) return st;
  const camdelta_buffer *m = r->m, *x = r->x;
  cd_launch l;
  group_begin(r, &l);
  const camdelta_output_transform_args oa = {.B = B, .N = N, .H = H, .D = D, .proj_o = m[PO], .rope_cos = m[RC],
                                             .rope_sin = m[RS], .grad_y = gr->grad_y, .grad_out = x[GOUT]};
  st = cd_output_transform_enqueue(ctx, a->dtype, 1, &oa, &l);
  st = group_end(r, &l, st);
  if (st) return st;
  if (r->has_part) {
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SCAN_BACKWARD,
                                    .scan_backward = scan_backward_args(r, 0), .saved_backward = s->scan_c};
    return CAMDELTA_OK;
  }
  if (r->pair) {
    const camdelta_buffer none = {NULL, 0};
    const cd_scan_pair_bwd_args pb = {
        .B = B, .H = H, .D = D, .F = T, .S = S, .q = m[QB], .k = m[KB], .v = m[VB], .beta = m[BP],
        .decay = a->decay, .beta_r = m[BR], .decay_r = m[DR], .mask = s->mem[MASK], .grad_out = x[GOUT],
        .init_c = none, .init_r = none, .grad_final_c = none, .grad_final_r = none, .dq = x[DQ], .dk = x[DK],
        .dv = x[DV], .dbeta_c = x[DB], .dbeta_r = x[DB2], .ddecay_c = x[DD], .ddecay_r = x[DD2], .dinit_c = none,
        .dinit_r = none, .scratch_dq = x[DQ2], .scratch_dk = x[DK2], .scratch_dv = x[DV2],
        .precision = a->precision, .profile = r->prof ? &r->part : NULL, .kv_apart = 1};
    st = cd_scan_pair_backward(ctx, &pb, s->scan_c, s->scan_r);
    add_part(r);
    return st;
  }
  for (int rev = 0; rev < 2 && !st; rev++) {
    const camdelta_scan_backward_args sb = scan_backward_args(r, rev);
    st = camdelta_scan_backward(ctx, &sb, rev ? s->scan_r : s->scan_c);
    add_part(r);
  }
  return st;
}

/* The two scans' gradients added (unless the pair's backward summed them), the discount backward and the prep
 * backward (dk_conv into DQ2); a part: the SUM of dq_norm_weight. */
static camdelta_status bwd_prep(camdelta_branch_run *r, camdelta_branch_request *rq) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const camdelta_branch_grads *gr = &r->gr;
  const branch_geo *g = &r->g;
  const camdelta_branch_saved *s = r->rs;
  const camdelta_buffer *m = r->m, *x = r->x;
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, N = g->N, S = g->S;
  cd_launch l;
  group_begin(r, &l);
  camdelta_status st = CAMDELTA_OK;
  if (!r->pair) {
    cl_kernel ka = r->pl->add3;
    cd_args ar = {ka, 0, CL_SUCCESS};
    for (int i = 0; i < 3; i++) {
      cd_arg_mem(&ar, x[DQ + i].mem);
      cd_arg_mem(&ar, x[DQ2 + i].mem);
    }
    cd_arg_u64(&ar, g->BNC / 4); /* D % 8 == 0: whole float4s */
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_branch_add3: setting arguments");
    const size_t lws = 64, gws = (g->BNC / 4 + 63) / 64 * 64;
    if (!st) st = cd_enqueue(ctx, ka, 1, &gws, cd_kernel_max_wg(ctx, ka) >= 64 ? &lws : NULL, &l, "cd_branch_add3");
  }
  if (!st) {
    cl_kernel kd = r->pl->discount_bwd;
    const size_t L = discount_local(ctx, kd);
    cd_args ar = {kd, 0, CL_SUCCESS};
    cd_arg_mem(&ar, x[DB].mem);
    cd_arg_mem(&ar, x[DB2].mem);
    cd_arg_mem(&ar, x[DD].mem);
    cd_arg_mem(&ar, x[DD2].mem);
    cd_arg_buf(&ar, a->beta);
    cd_arg_mem(&ar, s->mem[IOTA]);
    cd_arg_mem(&ar, s->mem[MASK]);
    cd_arg_buf(&ar, gr->dbeta.mem ? gr->dbeta : x[DB]);
    cd_arg_buf(&ar, gr->ddecay.mem ? gr->ddecay : x[DD]);
    cd_arg_mem(&ar, x[GINFL].mem);
    cd_arg_u32(&ar, (uint32_t)T);
    cd_arg_u32(&ar, (uint32_t)S);
    cd_arg_u32(&ar, gr->dbeta.mem ? 1u : 0u);
    cd_arg_u32(&ar, gr->ddecay.mem ? 1u : 0u);
    cd_arg_local(&ar, L * sizeof(float));
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_branch_discount_backward: setting arguments");
    const size_t gws[3] = {T * L, H, B}, lws[3] = {L, 1, 1};
    if (!st) st = cd_enqueue(ctx, kd, 3, gws, lws, &l, "cd_branch_discount_backward");
  }
  st = group_end(r, &l, st);
  /* prep backward: dk_conv into DQ2, absent outputs into free scratch (GOUT and SPARE with the pair, else DK2 and
   * DV2; the norm-weight slots); the forward's q, k, inflation_sq, which its pass 1 reads along the tokens */
  if (!st) {
    const camdelta_prep_backward_args pb = {
        .B = B, .N = N, .H = H, .D = D, .dtype = a->dtype, .k_scale = a->k_scale, .norm_eps = a->norm_eps,
        .q_raw = a->q_raw, .k_raw = m[KCONV], .v_raw = a->v_raw, .q_norm_weight = a->q_norm_weight,
        .k_norm_weight = a->k_norm_weight, .proj_q = m[PQ], .proj_kv = m[PKV], .rope_cos = m[RC], .rope_sin = m[RS],
        .grad_q = x[DQ], .grad_k = x[DK], .grad_v = x[DV], .grad_inflation_sq = x[GINFL],
        .dq_raw = gr->dq_raw.mem ? gr->dq_raw : x[r->pair ? GOUT : DK2], .dk_raw = x[DQ2],
        .dv_raw = gr->dv_raw.mem ? gr->dv_raw : x[r->pair ? SPARE : DV2],
        .dq_norm_weight = gr->dq_norm_weight.mem ? gr->dq_norm_weight : x[DQW],
        .dk_norm_weight = gr->dk_norm_weight.mem ? gr->dk_norm_weight : x[DKW],
        .profile = r->prof ? &r->part : NULL, .q = m[QB], .k = m[KB], .inflation_sq = m[INFL]};
    const camdelta_buffer g2[2] = {x[DK2], x[DV2]};
    st = cd_prep_backward_split(ctx, &pb, s->prep, r->pair ? g2 : NULL);
    add_part(r);
  }
  if (!st && r->has_part && gr->dq_norm_weight.mem)
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SUM, .sum_src = gr->dq_norm_weight,
                                    .sum_dst = gr->dq_norm_weight, .sum_n = r->g.C};
  return st;
}

/* The conv backward: over a part's extended frames (after the HALO of dk_conv: the adjoint on frames [e0, e0 + Te),
 * each part taking the input frames it holds; dk_raw of its frames reads dk_conv of the neighbours' outputs that read
 * them; dconv_weight sums dy[t]·x[s] over the pairs (output t, input s) with s its own: K with zeros in the other
 * frames, dy with the same halo, so every pair is counted by exactly one part, and the partials are summed over the
 * parts. One kernel for both; the neighbours' K is never sent). */
static camdelta_status bwd_conv(camdelta_branch_run *r, camdelta_branch_request *rq, int second) {
  camdelta_context *ctx = r->ctx;
  const camdelta_branch_args *a = &r->a;
  const camdelta_branch_grads *gr = &r->gr;
  const branch_geo *g = &r->g;
  const camdelta_branch_saved *s = r->rs;
  const size_t B = a->B, T = a->T, S = g->S, C = g->C, fs = S * C;
  const camdelta_buffer none = {NULL, 0};
  if (!gr->dk_raw.mem && !gr->dconv_weight.mem) return CAMDELTA_OK;
  cd_launch l;
  camdelta_status st = CAMDELTA_OK;
  if (!r->has_part) {
    group_begin(r, &l);
    st = cd_short_conv_enqueue_backward(ctx, a->dtype, B, T, S, C, a->k_raw, a->conv_weight, s->mem[SEG], r->x[DQ2],
                                        gr->dk_raw, gr->dconv_weight, &l);
    return group_end(r, &l, st);
  }
  cd_workspace *ws = &r->pl->ws;
  camdelta_buffer gx, k0, dxe = none, dw = none;
  st = cd_ws_get(ctx, ws, WS_GX, B * g->Te * fs * 4, &gx);
  if (!st && gr->dconv_weight.mem) st = cd_ws_get(ctx, ws, WS_K0, B * g->Te * fs * 4, &k0);
  if (!st && gr->dk_raw.mem) st = cd_ws_get(ctx, ws, WS_DXE, B * g->Te * fs * 4, &dxe);
  if (!st && gr->dconv_weight.mem) st = cd_ws_get(ctx, ws, WS_DW, 4 * C * 4, &dw);
  if (st) return st;
  group_begin(r, &l);
  if (!second) { /* dk_conv's own frames, then the HALO request */
    st = extend_local(r, r->x[DQ2], gx, fs, &l);
    if (!st && gr->dconv_weight.mem) st = extend_local(r, a->k_raw, k0, fs, &l);
    st = group_end(r, &l, st);
    if (st) return st;
    size_t wl, wr;
    halo_wants(g, T, 1, &wl, &wr);
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_HALO, .halo = gx.mem, .halo_batches = B,
                                    .halo_frames = g->Te, .halo_floats = fs, .halo_at = g->f0 - g->e0,
                                    .halo_before = wl, .halo_after = wr};
    return CAMDELTA_OK;
  }
  const size_t nl = g->f0 - g->e0;
  st = cd_short_conv_enqueue_backward(ctx, a->dtype, B, g->Te, S, C, gr->dconv_weight.mem ? k0 : gx, a->conv_weight,
                                      s->mem[SEG], gx, dxe, dw, &l);
  if (!st && dxe.mem) st = copy_frames(ctx, dxe, g->Te, nl, gr->dk_raw, T, 0, T, B, fs, 4, &l); /* parts are f32 */
  st = group_end(r, &l, st);
  if (!st && gr->dconv_weight.mem)
    *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SUM, .sum_src = dw, .sum_dst = gr->dconv_weight,
                                    .sum_n = 4 * C};
  return st;
}

/* --------------------------------------------------------------------------------------------- the API */

camdelta_status camdelta_branch_run_next(camdelta_branch_run *r, camdelta_branch_request *rq) {
  if (!r || !rq) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_branch_run_next: '%s' is NULL",
                                r ? "request" : "run");
  memset(rq, 0, sizeof *rq);
  if (r->failed) return r->failed;
  camdelta_status st = CAMDELTA_OK;
  while (!st && rq->need == CAMDELTA_BRANCH_NEED_NOTHING && r->stage != ST_DONE) {
    const int stage = r->stage++;
    switch (stage) {
      case ST_FWD_START: st = fwd_start(r, rq); break;
      case ST_FWD_CONV: st = fwd_conv(r, rq); break;
      case ST_FWD_SCAN_R:
        add_part(r); /* the caller's causal scan */
        if (r->has_part)
          *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SCAN_FORWARD, .scan = scan_args(r, 1),
                                          .saved = r->training ? r->s->scan_r : NULL};
        break;
      case ST_FWD_END:
        add_part(r); /* the caller's reverse scan */
        st = fwd_end(r);
        if (!st && !r->backward) r->stage = ST_DONE;
        break;
      case ST_BWD_START: st = bwd_start(r, rq); break;
      case ST_BWD_SCAN_R:
        add_part(r);
        if (r->has_part)
          *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SCAN_BACKWARD,
                                          .scan_backward = scan_backward_args(r, 1), .saved_backward = r->rs->scan_r};
        break;
      case ST_BWD_PREP:
        add_part(r);
        st = bwd_prep(r, rq);
        break;
      case ST_BWD_SUM_K:
        if (r->has_part && r->gr.dk_norm_weight.mem)
          *rq = (camdelta_branch_request){.need = CAMDELTA_BRANCH_NEED_SUM, .sum_src = r->gr.dk_norm_weight,
                                          .sum_dst = r->gr.dk_norm_weight, .sum_n = r->g.C};
        break;
      case ST_BWD_CONV: st = bwd_conv(r, rq, 0); break;
      case ST_BWD_CONV2:
        if (r->has_part) st = bwd_conv(r, rq, 1);
        break;
      default: r->stage = ST_DONE;
    }
  }
  if (st) r->failed = st, r->stage = ST_DONE;
  return st;
}

void camdelta_branch_run_destroy(camdelta_branch_run *r) {
  if (!r) return;
  if (r->pe) cd_plan_release(r->ctx, r->pe);
  geo_free(&r->g);
  free(r);
}

/* ------------------------------------------------------------------------------------------ the entries */

/* A run's start, or a whole call, as an entry (the steps of src/runtime/driver.c): the check step makes the run
 * (its geometry), the plan step gives it the branch plan, the enqueue step of a whole call runs it to the end (a
 * start enqueues nothing), the end step hands a started run to the caller or destroys it. */
typedef struct start_call {
  const camdelta_branch_part *part;
  camdelta_branch_saved *saved; /* the forward's */
  int whole;
  camdelta_branch_run *r;
} start_call;

static camdelta_status start_check(cd_call *c) {
  start_call *s = c->op;
  const camdelta_branch_args *a = c->args;
  const camdelta_branch_grads *gr = c->second;
  const char *op = c->entry->op;
  camdelta_branch_run *r = s->r = calloc(1, sizeof *r);
  if (!r) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  r->ctx = c->ctx, r->op = op, r->a = *a, r->backward = gr != NULL, r->has_part = s->part != NULL;
  if (gr) r->gr = *gr;
  camdelta_status st = check_args(c->ctx, op, a, &r->g, s->part);
  if (!st && gr && c->saved) st = check_saved(op, a, &r->g, c->saved);
  if (!st) set_uses(c, a, &r->g, gr != NULL);
  return st;
}

static camdelta_status start_plan(cd_call *c) {
  camdelta_branch_run *r = ((start_call *)c->op)->r;
  camdelta_status st = branch_acquire(c->ctx, r->a.D, r->a.dtype, &r->pe);
  if (st) return st;
  r->pl = r->pe->plan;
  if (!r->backward) {
    camdelta_branch_saved *saved = ((start_call *)c->op)->saved;
    r->s = saved ? saved : r->pl->tmp;
    r->training = saved != NULL;
    r->prof = r->a.profile;
    r->stage = ST_FWD_START;
  } else if (c->saved) { /* the forward's intermediates as it saved them */
    r->rs = c->saved;
    r->stage = ST_BWD_START;
  } else { /* recompute the forward into the plan's saved object, its y into the workspace; then the backward */
    camdelta_buffer y;
    if ((st = cd_ws_get(c->ctx, &r->pl->ws, WS_Y, r->g.BNC * 4, &y))) return st;
    r->a.y = y, r->a.profile = NULL;
    r->s = r->pl->tmp, r->rs = r->pl->tmp;
    r->training = 1;
    r->stage = ST_FWD_START;
  }
  return CAMDELTA_OK;
}

/* A whole call: a run over the whole sequence, which needs nothing (its stages do their own launches, adding to the
 * call's profile). */
static camdelta_status start_enqueue(cd_call *c, cd_launch *l) {
  (void)l;
  start_call *s = c->op;
  if (!s->whole) return CAMDELTA_OK;
  camdelta_branch_request rq;
  camdelta_status st = camdelta_branch_run_next(s->r, &rq);
  if (!st && rq.need != CAMDELTA_BRANCH_NEED_NOTHING)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: internal: a whole sequence's run needs %d", s->r->op,
                 (int)rq.need);
  return st;
}

static camdelta_status start_end(cd_call *c, camdelta_status st) {
  start_call *s = c->op;
  if (st || s->whole) {
    camdelta_branch_run_destroy(s->r);
    s->r = NULL;
  }
  return st;
}

#define FWD_ENTRY(op_)                                                                                          \
  {                                                                                                             \
    .op = op_, .second = NULL, .slots = FWD_SLOTS, .nslots = NARGS, .profile_part = 0,                          \
    .profile_offset = offsetof(camdelta_branch_args, profile), .check = start_check, .plan = start_plan,        \
    .enqueue = start_enqueue, .end = start_end                                                                  \
  }
#define BWD_ENTRY(op_)                                                                                          \
  {                                                                                                             \
    .op = op_, .second = "grads", .slots = BWD_SLOTS, .nslots = NARGS + NGRADS, .profile_part = 1,              \
    .profile_offset = offsetof(camdelta_branch_grads, profile), .check = start_check, .plan = start_plan,       \
    .enqueue = start_enqueue, .end = start_end                                                                  \
  }
static const cd_entry FORWARD = FWD_ENTRY("camdelta_branch_forward"),
                      RUN_FORWARD = FWD_ENTRY("camdelta_branch_run_forward");
static const cd_entry BACKWARD = BWD_ENTRY("camdelta_branch_backward"),
                      RUN_BACKWARD = BWD_ENTRY("camdelta_branch_run_backward");
#undef FWD_ENTRY
#undef BWD_ENTRY

static camdelta_status start(const cd_entry *e, camdelta_context *ctx, const camdelta_branch_args *args,
                             const camdelta_branch_grads *grads, const void *saved, const camdelta_context *saved_ctx,
                             start_call *s) {
  cd_call c = {.entry = e, .ctx = ctx, .args = args, .second = grads, .saved = saved, .saved_ctx = saved_ctx,
               .op = s};
  return cd_run_entry(&c);
}

camdelta_status camdelta_branch_run_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                            camdelta_branch_saved *saved, const camdelta_branch_part *part,
                                            camdelta_branch_run **run) {
  cd_clear_error();
  if (!run) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'run' is NULL", RUN_FORWARD.op);
  start_call s = {.part = part, .saved = saved};
  const camdelta_status st = start(&RUN_FORWARD, ctx, args, NULL, saved, saved ? saved->ctx : NULL, &s);
  *run = s.r;
  return st;
}

camdelta_status camdelta_branch_run_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                             const camdelta_branch_grads *grads, const camdelta_branch_saved *saved,
                                             const camdelta_branch_part *part, camdelta_branch_run **run) {
  cd_clear_error();
  if (!run) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'run' is NULL", RUN_BACKWARD.op);
  start_call s = {.part = part};
  const camdelta_status st = start(&RUN_BACKWARD, ctx, args, grads, saved, saved ? saved->ctx : NULL, &s);
  *run = s.r;
  return st;
}

camdelta_status camdelta_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                        camdelta_branch_saved *saved) {
  start_call s = {.saved = saved, .whole = 1};
  return start(&FORWARD, ctx, args, NULL, saved, saved ? saved->ctx : NULL, &s);
}

camdelta_status camdelta_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                         const camdelta_branch_grads *grads, const camdelta_branch_saved *saved) {
  start_call s = {.whole = 1};
  return start(&BACKWARD, ctx, args, grads, saved, saved ? saved->ctx : NULL, &s);
}

/* ---------------------------------------------------------------------------------- a stream's block */

void cd_branch_block_masks(size_t f0, size_t T, uint32_t *mask, uint32_t *seg_end) {
  const size_t back = f0 < 3 ? f0 : 3;
  /* the block is a chunk of the sequence [0, f0 + T): its start is interior when f0 > 0 (docs/math.md §8.4) */
  for (size_t t = 0; t < T; t++) mask[t] = t > 0 || (f0 == 0 && T > 1);
  for (size_t t = 0; t < back + T; t++) seg_end[t] = (uint32_t)(back + T);
}

camdelta_status cd_branch_block_start(camdelta_context *ctx, const char *op, const camdelta_branch_args *args,
                                      const cd_branch_block *block, camdelta_branch_run **run) {
  *run = NULL;
  camdelta_branch_run *r = calloc(1, sizeof *r);
  if (!r) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  r->ctx = ctx, r->op = op, r->a = *args, r->block = *block, r->blk = &r->block;
  memset(&r->a.chunking, 0, sizeof r->a.chunking);
  camdelta_status st = check_args(ctx, op, &r->a, &r->g, NULL);
  if (!st) { /* the extended frames: the look-back's, then the block's */
    const size_t back = block->f0 < 3 ? block->f0 : 3;
    r->g.f0 = block->f0, r->g.e0 = block->f0 - back, r->g.Te = back + r->a.T;
  }
  if (!st) st = branch_acquire(ctx, r->a.D, r->a.dtype, &r->pe);
  if (st) {
    camdelta_branch_run_destroy(r);
    return st;
  }
  r->pl = r->pe->plan;
  r->s = r->pl->tmp, r->training = 0;
  r->prof = r->a.profile;
  r->stage = ST_FWD_START;
  *run = r;
  return CAMDELTA_OK;
}
