/* The whole camera branch (SPEC 8.6), forward and backward, around the public prep and scan operations.
 *
 * Forward (one saved object holds every intermediate the backward reads):
 *   cd_camera_matrices, cd_camera_rope   cameras -> proj_q, proj_kv, proj_o, rope tables
 *   cd_short_conv_forward                k_raw -> k_conv
 *   camdelta_prep_forward                (q_raw, k_conv, v_raw) -> q, k, v (B, H, D, N), inflation_sq
 *   cd_branch_discount                   beta' = beta / max(mean_s inflation_sq, 1); beta'_r, decay_r masked
 *   cd_scan_pair_forward                 where the scan runs chunkwise: both scans in one pass, their outputs summed
 *                                        (src/ops/scan_pair.c)
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
 * The scan kernels are used through their public API only (their internals are another module's). Every
 * reduction has a fixed order: the results are bit-identical run to run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_common.h"
#include "branch_sp.h"
#include "camera_op.h"
#include "prep_common.h"
#include "scan_pair.h"

enum { PQ, PKV, PO, RC, RS, KCONV, QB, KB, VB, INFL, IOTA, BP, BR, DR, OUTC, OUTR, MASK, SEG, NBUF };

struct camdelta_branch_saved {
  camdelta_context *ctx;
  cl_mem mem[NBUF];
  size_t bytes[NBUF];
  camdelta_prep_saved *prep;
  camdelta_scan_saved *scan_c, *scan_r;
  /* what the forward was run with */
  size_t B, T, Hs, Ws, H, D, ph, pw;
  float k_scale, norm_eps;
  size_t *bounds, nb, *cbounds, ncb;
  int valid;
};

camdelta_status camdelta_branch_saved_create(camdelta_context *ctx, camdelta_branch_saved **out) {
  cd_clear_error();
  if (!ctx || !out)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_branch_saved_create: '%s' is NULL", ctx ? "out" : "ctx");
  *out = calloc(1, sizeof **out);
  if (!*out) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_branch_saved_create: out of host memory");
  (*out)->ctx = ctx;
  return CAMDELTA_OK;
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

/* ------------------------------------------------------------------------------------------------ checks */

typedef struct branch_geo {
  size_t N, S, C, BNC, BHN, BHT, BN16, NDh;
  size_t *bounds, nb, *cbounds, ncb;
  uint32_t *mask, *seg_end;
  /* sequence parallelism: this rank's frames start at global f0; the conv runs on the frames [e0, e0 + Te)
   * (this rank's and up to 3 of each neighbour's); one device: f0 = e0 = 0, Te = T */
  size_t f0, e0, Te;
} branch_geo;

static void geo_free(branch_geo *g) {
  free(g->bounds), free(g->cbounds), free(g->mask), free(g->seg_end);
  memset(g, 0, sizeof *g);
}

static camdelta_status check_args(camdelta_context *ctx, const char *op, const camdelta_branch_args *a,
                                  branch_geo *g, const cd_branch_sp *sp) {
  memset(g, 0, sizeof *g);
  camdelta_status st = cd_check_head_dim(op, a->D);
  if (st) return st;
  if ((st = cd_check_grid(op, a->T, a->Hs, a->Ws, &g->N))) return st;
  if (!a->B || !a->H) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu: each must be at least 1", op, a->B, a->H);
  if (!a->pt || !a->ph || !a->pw)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: patch (%zu, %zu, %zu): each must be at least 1", op, a->pt, a->ph,
                   a->pw);
  if (a->algorithm != CAMDELTA_SCAN_AUTO && a->algorithm != CAMDELTA_SCAN_SEQUENTIAL &&
      a->algorithm != CAMDELTA_SCAN_CHUNKWISE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: algorithm %d unknown", op, (int)a->algorithm);
  /* every count, and the byte sizes the kernels index (at most 16 bytes per token element; 4*C in 32 bits) */
  size_t cams, bytes16, c4;
  if (!CD_PROD(&g->BNC, a->B, g->N, a->H, a->D) || !CD_PROD(&bytes16, g->BNC, 16) || !CD_PROD(&g->C, a->H, a->D) ||
      !CD_PROD(&c4, g->C, 4) || c4 > UINT32_MAX || !CD_PROD(&g->S, a->Hs, a->Ws) ||
      !CD_PROD(&g->BHN, a->B, a->H, g->N) || !CD_PROD(&g->BHT, a->B, a->H, a->T) ||
      !CD_PROD(&g->BN16, a->B, g->N, 16) || !CD_PROD(&g->NDh, g->N, a->D / 2) || !CD_PROD(&cams, a->B, a->T, 20))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D = %zu*%zu*%zu*%zu overflows", op, a->B, g->N, a->H, a->D);
  const size_t T = sp ? sp->T_global : a->T, f0 = sp ? sp->f0 : 0;
  if (sp && (f0 > T || a->T > T - f0))
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frames [%zu, %zu) of this rank are not within the sequence's %zu", op,
                   f0, f0 + a->T, T);
  if (T > UINT32_MAX) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: T=%zu frames exceeds 2^32-1", op, T);
  if (!(a->k_scale == a->k_scale) || a->k_scale - a->k_scale != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: k_scale must be finite (got %g)", op, (double)a->k_scale);
  if (!(a->norm_eps >= 0.0f) || a->norm_eps - a->norm_eps != 0.0f)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: norm_eps must be finite and >= 0 (got %g)", op,
                   (double)a->norm_eps);
  /* the buffers before the per-frame host arrays: a call with hostile sizes stops here, allocating nothing */
  const cd_tensor_arg in[] = {{"q_raw", a->q_raw, g->BNC, 4},
                              {"k_raw", a->k_raw, g->BNC, 4},
                              {"v_raw", a->v_raw, g->BNC, 4},
                              {"conv_weight", a->conv_weight, 4 * g->C, 4},
                              {"q_norm_weight", a->q_norm_weight, g->C, 4},
                              {"k_norm_weight", a->k_norm_weight, g->C, 4},
                              {"camera_conditions", a->camera_conditions, cams, 4},
                              {"beta", a->beta, g->BHN, 4},
                              {"decay", a->decay, g->BHT, 4}};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    if ((st = cd_check_buffer(op, in[i].name, in[i].b, in[i].elems, 4, 0))) return st;
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
  if (sp) { /* this rank's frames of the mask; the segment ends of the conv's frames, relative to e0 */
    memmove(g->mask, g->mask + f0, a->T * sizeof *g->mask);
    for (size_t i = 0; i < g->Te; i++) {
      const size_t e = g->seg_end[g->e0 + i];
      g->seg_end[i] = (uint32_t)((e < g->e0 + g->Te ? e : g->e0 + g->Te) - g->e0);
    }
  }
  return CAMDELTA_OK;
}

static const cd_tensor_arg *inputs_of(const camdelta_branch_args *a, const branch_geo *g, cd_tensor_arg *in) {
  const cd_tensor_arg x[9] = {{"q_raw", a->q_raw, g->BNC, 4},
                              {"k_raw", a->k_raw, g->BNC, 4},
                              {"v_raw", a->v_raw, g->BNC, 4},
                              {"conv_weight", a->conv_weight, 4 * g->C, 4},
                              {"q_norm_weight", a->q_norm_weight, g->C, 4},
                              {"k_norm_weight", a->k_norm_weight, g->C, 4},
                              {"camera_conditions", a->camera_conditions, a->B * a->T * 20, 4}, /* as checked */
                              {"beta", a->beta, g->BHN, 4},
                              {"decay", a->decay, g->BHT, 4}};
  memcpy(in, x, sizeof x);
  return in;
}

/* ------------------------------------------------------------------------------ sequence parallelism */

/* Copies n frames (fs floats each) of every batch: frame sf of src (B, sT frames) -> frame df of dst (B, dT). */
static camdelta_status copy_frames(camdelta_context *ctx, camdelta_buffer src, size_t sT, size_t sf,
                                   camdelta_buffer dst, size_t dT, size_t df, size_t n, size_t B, size_t fs) {
  for (size_t b = 0; b < B && n; b++) {
    const camdelta_status st = cd_copy(ctx, src.mem, (src.offset + (b * sT + sf) * fs) * 4, dst.mem,
                                       (dst.offset + (b * dT + df) * fs) * 4, n * fs * 4);
    if (st) return st;
  }
  return CAMDELTA_OK;
}

/* Frames of this rank's outputs that read a neighbour's input (the conv's halo, SPEC 8.2), relative to the
 * extended frames [e0, e0 + Te) with this rank's at [nl, nl + T):
 *   forward (y reads x): all nl frames before (the look-back crosses segment starts) and, after, those within the
 *     segment of this rank's last frame (the look-ahead stops at its end);
 *   backward (dx reads dy): all frames after (their look-back reads this rank's frames) and, before, those whose
 *     segment reaches into this rank's frames. */
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

/* Collective: dst (n floats) <- the sum over the ranks of src (n floats), in rank order. */
static camdelta_status sp_reduce(camdelta_context *ctx, const cd_branch_sp *sp, camdelta_status st,
                                 camdelta_buffer src, camdelta_buffer dst, size_t n) {
  return sp->reduce(sp->user, st, ctx, src, dst, n);
}

/* ------------------------------------------------------------------------------------------- forward */

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

/* Starts one group of the branch's own launches: its part of the profile starts from zero. */
static void begin(cd_launch *l, camdelta_profile *part) {
  if (part) part->kernel_ms = 0, part->kernels = 0;
  cd_launch_init(l, part);
}

static void add_profile(camdelta_profile *total, const camdelta_profile *part) {
  if (!total) return;
  total->kernel_ms += part->kernel_ms;
  total->kernels += part->kernels;
}

/* Kernels of the branch's own programs, built before anything is enqueued. */
static camdelta_status warm_programs(camdelta_context *ctx, size_t D) {
  cl_program prog;
  camdelta_status st = cd_program(ctx, "camera.cl", "", &prog);
  if (!st) st = cd_program(ctx, "short_conv.cl", "", &prog);
  /* each kernel of branch.cl picks its token tile from its own work-group limit: build every variant used */
  static const char *const names[] = {"cd_branch_discount", "cd_branch_discount_backward", "cd_branch_add3",
                                      "cd_output_transform", "cd_output_transform_backward"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !st; i++) {
    cl_kernel k;
    size_t ts;
    if (!(st = cd_branch_kernel(ctx, D, names[i], &k, &ts))) clReleaseKernel(k);
  }
  return st;
}

camdelta_status cd_branch_warm(camdelta_context *ctx, size_t D) { return warm_programs(ctx, D); }

static camdelta_status run_forward(camdelta_context *ctx, const camdelta_branch_args *a, const branch_geo *g,
                                   camdelta_branch_saved *s, int training, const cd_branch_sp *sp) {
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, N = g->N, S = g->S, C = g->C;
  camdelta_status st = warm_programs(ctx, D);
  /* the scan pair: fused (one phase A and one phase C for both directions, src/ops/scan_pair.c) where the scan
   * runs chunkwise, else two scans; with sp the scans go through the hooks (their states cross the ranks) */
  const int pair = !sp && cd_scan_pair_wanted(ctx, a->algorithm, B * H, D, T, S);
  const size_t bytes[NBUF] = {g->BN16 * 4, g->BN16 * 4, g->BN16 * 4, g->NDh * 4, g->NDh * 4, g->BNC * 4,
                              g->BNC * 4,  g->BNC * 4,  g->BNC * 4,  g->BHN * 4, g->BHT * 4, g->BHN * 4,
                              g->BHN * 4,  g->BHT * 4,  g->BNC * 4,  pair ? 0 : g->BNC * 4, 0, 0};
  for (int i = 0; i < NBUF && !st; i++)
    if (bytes[i]) st = cd_ensure_buffer(ctx, &s->mem[i], &s->bytes[i], bytes[i]);
  s->valid = 0;
  if (!st) st = upload_u32(ctx, g->mask, T, &s->mem[MASK], &s->bytes[MASK]);
  if (!st) st = upload_u32(ctx, g->seg_end, g->Te, &s->mem[SEG], &s->bytes[SEG]);
  if (!st && training && !s->prep) st = camdelta_prep_saved_create(ctx, &s->prep);
  if (!st && training && !s->scan_c) st = camdelta_scan_saved_create(ctx, &s->scan_c);
  if (!st && training && !s->scan_r) st = camdelta_scan_saved_create(ctx, &s->scan_r);
  if (st && !sp) return st;
  /* sequence parallelism: the conv reads k_raw with the neighbours' halo frames and writes the same frames */
  cl_mem kx = NULL, kc = NULL; /* the hooks' buffers (sp) */
  if (sp) {
    size_t wl, wr;
    halo_wants(g, T, 0, &wl, &wr);
    st = sp->extend(sp->user, st, ctx, 0, B, S * C, a->k_raw, T, g->Te, g->f0 - g->e0, wl, wr, &kx);
    if (!st) st = sp->scratch(sp->user, ctx, 1, B * g->Te * S * C * 4, &kc);
  }
  camdelta_buffer m[NBUF];
  for (int i = 0; i < NBUF; i++) m[i] = (camdelta_buffer){s->mem[i], 0};
  camdelta_profile *prof = a->profile, part = {0, 0};
  camdelta_profile *pp = prof ? &part : NULL;
  if (prof) prof->kernel_ms = 0, prof->kernels = 0;

  cd_launch l;
  begin(&l, pp);
  const camdelta_camera_args ca = {B,        T,        a->Hs,   a->Ws, a->pt, a->ph, a->pw, D, a->camera_conditions,
                                   m[PQ],    m[PKV],   m[PO],   m[RC], m[RS], NULL};
  if (!st) st = cd_camera_enqueue_at(ctx, &ca, N, g->f0, &l);
  if (!st && !sp)
    st = cd_short_conv_enqueue_forward(ctx, B, T, S, C, a->k_raw, a->conv_weight, s->mem[SEG], m[KCONV], &l);
  if (!st && sp)
    st = cd_short_conv_enqueue_forward(ctx, B, g->Te, S, C, (camdelta_buffer){kx, 0}, a->conv_weight, s->mem[SEG],
                                       (camdelta_buffer){kc, 0}, &l);
  if (!st && sp)
    st = copy_frames(ctx, (camdelta_buffer){kc, 0}, g->Te, g->f0 - g->e0, m[KCONV], T, 0, T, B, S * C);
  st = cd_launch_end(ctx, &l, st);
  add_profile(prof, &part);
  if (!st) {
    camdelta_prep_args pa = {B,        N,           H,     D,     CAMDELTA_F32,  a->k_scale,   a->norm_eps,
                             a->q_raw, m[KCONV],    a->v_raw, a->q_norm_weight, a->k_norm_weight, m[PQ], m[PKV],
                             m[RC],    m[RS],       m[QB], m[KB], m[VB],         m[INFL],      pp};
    st = camdelta_prep_forward(ctx, &pa, training ? s->prep : NULL);
    add_profile(prof, &part);
  }
  if (!st) {
    begin(&l, pp);
    cl_kernel k;
    size_t ts;
    st = cd_branch_kernel(ctx, D, "cd_branch_discount", &k, &ts);
    if (!st) {
      size_t L = 1;
      const size_t lmax = cd_kernel_max_wg(ctx, k);
      while (L * 2 <= 256 && L * 2 <= lmax) L *= 2;
      cd_args ar = {k, 0, CL_SUCCESS};
      cd_arg_mem(&ar, s->mem[INFL]);
      cd_arg_buf(&ar, a->beta);
      cd_arg_buf(&ar, a->decay);
      cd_arg_mem(&ar, s->mem[MASK]);
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
      clReleaseKernel(k);
    }
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
  }
  /* with tensor cores the pair's phase C writes y itself, the output transform as its epilogue */
  cd_pair_ot ot = {m[PO], m[RC], m[RS], a->y, 0};
  if (pair && !st) {
    const cd_scan_pair_args pa = {B,     H,     D,     T,         S,         m[QB],     m[KB],     m[VB],
                                  m[BP], a->decay, s->mem[MASK], m[OUTC], {NULL, 0}, {NULL, 0}, {NULL, 0},
                                  {NULL, 0}, a->precision, pp, &ot};
    st = cd_scan_pair_forward(ctx, &pa, training ? s->scan_c : NULL, training ? s->scan_r : NULL);
    add_profile(prof, &part);
  }
  for (int rev = 0; rev < 2 && !pair && (!st || sp); rev++) {
    camdelta_scan_args sa = {B,     H,           D,     T,     S,      rev,    a->algorithm,
                             m[QB], m[KB],       m[VB], rev ? m[BR] : m[BP], rev ? m[DR] : a->decay,
                             rev ? m[OUTR] : m[OUTC], {NULL, 0}, {NULL, 0}, pp, NULL, a->precision};
    camdelta_scan_saved *ss = training ? (rev ? s->scan_r : s->scan_c) : NULL;
    st = sp ? sp->scan_forward(sp->user, st, ctx, &sa, ss) : camdelta_scan_forward(ctx, &sa, ss);
    add_profile(prof, &part);
  }
  if (!st && !ot.done) {
    begin(&l, pp);
    const camdelta_buffer out2 = pair ? (camdelta_buffer){NULL, 0} : m[OUTR]; /* the pair's output is the sum */
    const camdelta_output_transform_args oa = {B,      N,         H,         D,        m[OUTC],  out2,     m[PO],
                                               m[RC],  m[RS],     a->y,      {NULL, 0}, {NULL, 0}, NULL};
    st = cd_output_transform_enqueue(ctx, 0, &oa, &l);
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
  }
  if (!st) {
    s->B = B, s->T = T, s->Hs = a->Hs, s->Ws = a->Ws, s->H = H, s->D = D, s->ph = a->ph, s->pw = a->pw;
    s->k_scale = a->k_scale, s->norm_eps = a->norm_eps;
    free(s->bounds), free(s->cbounds);
    s->bounds = malloc(g->nb * sizeof *s->bounds);
    s->cbounds = malloc(g->ncb * sizeof *s->cbounds);
    if (!s->bounds || !s->cbounds) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory");
    memcpy(s->bounds, g->bounds, g->nb * sizeof *s->bounds);
    memcpy(s->cbounds, g->cbounds, g->ncb * sizeof *s->cbounds);
    s->nb = g->nb, s->ncb = g->ncb;
    s->valid = training ? 1 : 0;
  }
  return st;
}

/* With sp (sequence parallelism), every rank reaches the same collective hooks in the same order whatever its
 * status: the checks are agreed on before anything is enqueued, and the end status too. */
static camdelta_status branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                      camdelta_branch_saved *saved, const cd_branch_sp *sp) {
  const char *op = sp ? "camdelta_mpi_branch_forward" : "camdelta_branch_forward";
  cd_clear_error();
  camdelta_status st = cd_prologue(op, ctx, args, saved ? saved->ctx : NULL, saved != NULL,
                                   args ? args->profile : NULL, NULL, 0);
  branch_geo g;
  memset(&g, 0, sizeof g);
  if (st && !sp) return st;
  if (!st) st = check_args(ctx, op, args, &g, sp);
  if (!st) st = cd_check_buffer(op, "y", args->y, g.BNC, 4, 0);
  if (!st) {
    cd_tensor_arg in[9];
    const cd_tensor_arg out[1] = {{"y", args->y, g.BNC, 4}};
    st = cd_check_no_overlap(op, out, 1, inputs_of(args, &g, in), 9);
  }
  camdelta_branch_saved *s = saved;
  if (!st && !s) st = camdelta_branch_saved_create(ctx, &s);
  if (sp) st = sp->agree(sp->user, st);
  if (!st) st = run_forward(ctx, args, &g, s, saved != NULL, sp);
  if (sp) st = sp->agree(sp->user, st);
  if (!saved) camdelta_branch_saved_destroy(s);
  geo_free(&g);
  return st;
}

camdelta_status camdelta_branch_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                        camdelta_branch_saved *saved) {
  return branch_forward(ctx, args, saved, NULL);
}

camdelta_status camdelta_branch_sp_forward(camdelta_context *ctx, const camdelta_branch_args *args,
                                     camdelta_branch_saved *saved, const cd_branch_sp *sp) {
  return branch_forward(ctx, args, saved, sp);
}

/* ------------------------------------------------------------------------------------------ backward */

static int same_bounds(const size_t *a, size_t na, const size_t *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static camdelta_status check_saved(const char *op, const camdelta_branch_args *a, const branch_geo *g,
                                   const camdelta_branch_saved *s) {
  if (!s->valid)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: 'saved' holds nothing (pass it to camdelta_branch_forward first, or pass NULL)", op);
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

/* Scratch of the backward. With the scan pair, DK2 and DV2 hold the reverse direction's dk, dv until the prep
 * backward reads them (summed with DK, DV as it loads them), and SPARE (allocated then) takes an absent dv_raw. */
enum { GOUT, DQ, DK, DV, DQ2, DK2, DV2, DB, DB2, DD, DD2, GINFL, DQW, DKW, SPARE, NSCR };

static camdelta_status run_backward(camdelta_context *ctx, const camdelta_branch_args *a,
                                    const camdelta_branch_grads *gr, const branch_geo *g,
                                    const camdelta_branch_saved *s, const cd_branch_sp *sp) {
  const size_t B = a->B, H = a->H, D = a->D, T = a->T, N = g->N, S = g->S, C = g->C;
  camdelta_status st = warm_programs(ctx, D);
  /* the scan pair's backward where the forward ran the pair: both directions' gradients, the work they share done
   * once, dq summed, dk and dv summed by the prep backward's loads (src/ops/scan_pair.c); else two scan backward
   * calls and an add */
  const int pair = !sp && cd_scan_pair_wanted(ctx, a->algorithm, B * H, D, T, S);
  const size_t bytes[NSCR] = {g->BNC * 4, g->BNC * 4, g->BNC * 4, g->BNC * 4, g->BNC * 4,
                              g->BNC * 4, g->BNC * 4, g->BHN * 4, g->BHN * 4, g->BHT * 4,
                              g->BHT * 4, g->BHN * 4, C * 4,      C * 4,      pair && !gr->dv_raw.mem ? g->BNC * 4 : 0};
  cl_mem scr[NSCR] = {NULL};
  for (int i = 0; i < NSCR && !st; i++)
    if (bytes[i]) st = cd_alloc(ctx, bytes[i], &scr[i]);
  camdelta_buffer m[NBUF], x[NSCR];
  for (int i = 0; i < NBUF; i++) m[i] = (camdelta_buffer){s->mem[i], 0};
  for (int i = 0; i < NSCR; i++) x[i] = (camdelta_buffer){scr[i], 0};
  camdelta_profile *prof = gr->profile, part = {0, 0};
  camdelta_profile *pp = prof ? &part : NULL;
  if (prof) prof->kernel_ms = 0, prof->kernels = 0;
  cd_launch l;
  if (!st) {
    begin(&l, pp);
    const camdelta_output_transform_args oa = {B,     N,     H,         D,         {NULL, 0}, {NULL, 0}, m[PO],
                                               m[RC], m[RS], {NULL, 0}, gr->grad_y, x[GOUT],   NULL};
    st = cd_output_transform_enqueue(ctx, 1, &oa, &l);
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
  }
  if (pair && !st) {
    const camdelta_buffer none = {NULL, 0};
    const cd_scan_pair_bwd_args pb = {B,     H,     D,     T,     S,     m[QB],  m[KB],  m[VB], m[BP],
                                      a->decay, m[BR], m[DR], s->mem[MASK], x[GOUT], none, none, none, none,
                                      x[DQ], x[DK], x[DV], x[DB], x[DB2], x[DD], x[DD2], none, none,
                                      x[DQ2], x[DK2], x[DV2], a->precision, pp, 1};
    st = cd_scan_pair_backward(ctx, &pb, s->scan_c, s->scan_r);
    add_profile(prof, &part);
  }
  for (int rev = 0; rev < 2 && !pair && (!st || sp); rev++) {
    camdelta_scan_backward_args sb = {B,
                                      H,
                                      D,
                                      T,
                                      S,
                                      rev,
                                      m[QB],
                                      m[KB],
                                      m[VB],
                                      rev ? m[BR] : m[BP],
                                      rev ? m[DR] : a->decay,
                                      {NULL, 0},
                                      x[GOUT],
                                      {NULL, 0},
                                      rev ? x[DQ2] : x[DQ],
                                      rev ? x[DK2] : x[DK],
                                      rev ? x[DV2] : x[DV],
                                      rev ? x[DB2] : x[DB],
                                      rev ? x[DD2] : x[DD],
                                      {NULL, 0},
                                      pp,
                                      a->precision};
    const camdelta_scan_saved *ss = rev ? s->scan_r : s->scan_c;
    st = sp ? sp->scan_backward(sp->user, st, ctx, &sb, ss) : camdelta_scan_backward(ctx, &sb, ss);
    add_profile(prof, &part);
  }
  if (!st) {
    begin(&l, pp);
    cl_kernel ka = NULL, kd = NULL;
    size_t ts;
    if (!pair) st = cd_branch_kernel(ctx, D, "cd_branch_add3", &ka, &ts);
    if (!st) st = cd_branch_kernel(ctx, D, "cd_branch_discount_backward", &kd, &ts);
    if (!st && !pair) {
      cd_args ar = {ka, 0, CL_SUCCESS};
      for (int i = 0; i < 3; i++) {
        cd_arg_mem(&ar, scr[DQ + i]);
        cd_arg_mem(&ar, scr[DQ2 + i]);
      }
      cd_arg_u64(&ar, g->BNC / 4); /* D % 8 == 0: whole float4s */
      if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_branch_add3: setting arguments");
      const size_t lws = 64, gws = (g->BNC / 4 + 63) / 64 * 64;
      if (!st) st = cd_enqueue(ctx, ka, 1, &gws, cd_kernel_max_wg(ctx, ka) >= 64 ? &lws : NULL, &l, "cd_branch_add3");
    }
    if (!st) {
      size_t L = 1;
      const size_t lmax = cd_kernel_max_wg(ctx, kd);
      while (L * 2 <= 256 && L * 2 <= lmax) L *= 2;
      cd_args ar = {kd, 0, CL_SUCCESS};
      cd_arg_mem(&ar, scr[DB]);
      cd_arg_mem(&ar, scr[DB2]);
      cd_arg_mem(&ar, scr[DD]);
      cd_arg_mem(&ar, scr[DD2]);
      cd_arg_buf(&ar, a->beta);
      cd_arg_mem(&ar, s->mem[IOTA]);
      cd_arg_mem(&ar, s->mem[MASK]);
      cd_arg_buf(&ar, gr->dbeta.mem ? gr->dbeta : x[DB]);
      cd_arg_buf(&ar, gr->ddecay.mem ? gr->ddecay : x[DD]);
      cd_arg_mem(&ar, scr[GINFL]);
      cd_arg_u32(&ar, (uint32_t)T);
      cd_arg_u32(&ar, (uint32_t)S);
      cd_arg_u32(&ar, gr->dbeta.mem ? 1u : 0u);
      cd_arg_u32(&ar, gr->ddecay.mem ? 1u : 0u);
      cd_arg_local(&ar, L * sizeof(float));
      if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_branch_discount_backward: setting arguments");
      const size_t gws[3] = {T * L, H, B}, lws[3] = {L, 1, 1};
      if (!st) st = cd_enqueue(ctx, kd, 3, gws, lws, &l, "cd_branch_discount_backward");
    }
    if (ka) clReleaseKernel(ka);
    if (kd) clReleaseKernel(kd);
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
  }
  /* prep backward: dk_conv into DQ2, absent outputs into free scratch (GOUT and SPARE with the pair, else DK2 and
   * DV2; the norm-weight slots) */
  if (!st) {
    camdelta_prep_backward_args pb = {B,
                                      N,
                                      H,
                                      D,
                                      CAMDELTA_F32,
                                      a->k_scale,
                                      a->norm_eps,
                                      a->q_raw,
                                      m[KCONV],
                                      a->v_raw,
                                      a->q_norm_weight,
                                      a->k_norm_weight,
                                      m[PQ],
                                      m[PKV],
                                      m[RC],
                                      m[RS],
                                      x[DQ],
                                      x[DK],
                                      x[DV],
                                      x[GINFL],
                                      gr->dq_raw.mem ? gr->dq_raw : x[pair ? GOUT : DK2],
                                      x[DQ2],
                                      gr->dv_raw.mem ? gr->dv_raw : x[pair ? SPARE : DV2],
                                      gr->dq_norm_weight.mem ? gr->dq_norm_weight : x[DQW],
                                      gr->dk_norm_weight.mem ? gr->dk_norm_weight : x[DKW],
                                      {NULL, 0},
                                      {NULL, 0},
                                      {NULL, 0},
                                      {NULL, 0},
                                      pp,
                                      m[QB], /* the forward's q, k, inflation_sq: pass 1 reads them along the */
                                      m[KB], /* tokens */
                                      m[INFL]};
    st = pair ? cd_prep_backward_g2(ctx, &pb, s->prep, x[DK2], x[DV2]) : camdelta_prep_backward(ctx, &pb, s->prep);
    add_profile(prof, &part);
  }
  /* sequence parallelism: the norm weights' gradients summed over the ranks */
  if (sp && gr->dq_norm_weight.mem) st = sp_reduce(ctx, sp, st, gr->dq_norm_weight, gr->dq_norm_weight, C);
  if (sp && gr->dk_norm_weight.mem) st = sp_reduce(ctx, sp, st, gr->dk_norm_weight, gr->dk_norm_weight, C);
  if (sp && (gr->dk_raw.mem || gr->dconv_weight.mem)) {
    /* the conv's adjoint on frames [e0, e0 + Te): each rank takes the input frames it holds. dk_raw of its frames
     * reads dk_conv of the neighbours' outputs that read them (their halo, extend); dconv_weight sums dy[t]·x[s]
     * over the pairs (output t, input s) with s its own: K with zeros in the other frames, dy with the same halo,
     * so every pair is counted by exactly one rank, and the partials are summed over the ranks. One kernel for
     * both; the neighbours' K is never sent. */
    const size_t fs = S * C, nl = g->f0 - g->e0;
    size_t wl, wr;
    halo_wants(g, T, 1, &wl, &wr);
    cl_mem gx = NULL, k0 = NULL, dxe = NULL, dw = NULL;
    st = sp->extend(sp->user, st, ctx, 0, B, fs, x[DQ2], T, g->Te, nl, wl, wr, &gx);
    if (gr->dconv_weight.mem) st = sp->extend(sp->user, st, ctx, 1, B, fs, a->k_raw, T, g->Te, nl, 0, 0, &k0);
    if (!st && gr->dk_raw.mem) st = sp->scratch(sp->user, ctx, 2, B * g->Te * fs * 4, &dxe);
    if (!st && gr->dconv_weight.mem) st = sp->scratch(sp->user, ctx, 3, 4 * C * 4, &dw);
    begin(&l, pp);
    const camdelta_buffer none = {NULL, 0};
    if (!st)
      st = cd_short_conv_enqueue_backward(ctx, B, g->Te, S, C, (camdelta_buffer){k0 ? k0 : gx, 0}, a->conv_weight,
                                          s->mem[SEG], (camdelta_buffer){gx, 0},
                                          dxe ? (camdelta_buffer){dxe, 0} : none, dw ? (camdelta_buffer){dw, 0} : none,
                                          &l);
    if (!st && dxe) st = copy_frames(ctx, (camdelta_buffer){dxe, 0}, g->Te, nl, gr->dk_raw, T, 0, T, B, fs);
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
    if (gr->dconv_weight.mem) st = sp_reduce(ctx, sp, st, (camdelta_buffer){dw, 0}, gr->dconv_weight, 4 * C);
  }
  if (!sp && !st && (gr->dk_raw.mem || gr->dconv_weight.mem)) {
    begin(&l, pp);
    st = cd_short_conv_enqueue_backward(ctx, B, T, S, C, a->k_raw, a->conv_weight, s->mem[SEG], x[DQ2], gr->dk_raw,
                                        gr->dconv_weight, &l);
    st = cd_launch_end(ctx, &l, st);
    add_profile(prof, &part);
  }
  for (int i = 0; i < NSCR; i++)
    if (scr[i]) clReleaseMemObject(scr[i]);
  return st;
}

static camdelta_status branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                       const camdelta_branch_grads *grads, const camdelta_branch_saved *saved,
                                       const cd_branch_sp *sp) {
  const char *op = sp ? "camdelta_mpi_branch_backward" : "camdelta_branch_backward";
  cd_clear_error();
  camdelta_status st = CAMDELTA_OK;
  if (ctx && args && !grads) st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'grads' is NULL", op);
  if (!st)
    st = cd_prologue(op, ctx, args, saved ? saved->ctx : NULL, saved != NULL, grads ? grads->profile : NULL, NULL, 0);
  branch_geo g;
  memset(&g, 0, sizeof g);
  if (st && !sp) return st;
  if (!st) st = check_args(ctx, op, args, &g, sp);
  if (!st) st = cd_check_buffer(op, "grad_y", grads->grad_y, g.BNC, 4, 0);
  if (!st) {
    cd_tensor_arg in[10];
    inputs_of(args, &g, in);
    in[9] = (cd_tensor_arg){"grad_y", grads->grad_y, g.BNC, 4};
    const cd_tensor_arg out[8] = {{"dq_raw", grads->dq_raw, g.BNC, 4},
                                  {"dk_raw", grads->dk_raw, g.BNC, 4},
                                  {"dv_raw", grads->dv_raw, g.BNC, 4},
                                  {"dconv_weight", grads->dconv_weight, 4 * g.C, 4},
                                  {"dq_norm_weight", grads->dq_norm_weight, g.C, 4},
                                  {"dk_norm_weight", grads->dk_norm_weight, g.C, 4},
                                  {"dbeta", grads->dbeta, g.BHN, 4},
                                  {"ddecay", grads->ddecay, g.BHT, 4}};
    for (int i = 0; i < 8 && !st; i++) st = cd_check_buffer(op, out[i].name, out[i].b, out[i].elems, 4, 1);
    if (!st) st = cd_check_no_overlap(op, out, 8, in, 10);
  }
  if (!st && saved) st = check_saved(op, args, &g, saved);
  camdelta_branch_saved *tmp = NULL;
  const camdelta_branch_saved *s = saved;
  cl_mem y = NULL;
  if (!saved) {
    /* recompute the forward into a temporary saved object (with sp: every rank passes no saved object) */
    if (!st) st = camdelta_branch_saved_create(ctx, &tmp);
    if (!st) st = cd_alloc(ctx, g.BNC * 4, &y);
    if (sp) st = sp->agree(sp->user, st);
    if (!st) {
      camdelta_branch_args fa = *args;
      fa.y = (camdelta_buffer){y, 0};
      fa.profile = NULL;
      st = run_forward(ctx, &fa, &g, tmp, 1, sp);
    }
    s = tmp;
  }
  if (sp) st = sp->agree(sp->user, st);
  if (!st) st = run_backward(ctx, args, grads, &g, s, sp);
  if (sp) st = sp->agree(sp->user, st);
  if (y) clReleaseMemObject(y);
  camdelta_branch_saved_destroy(tmp);
  geo_free(&g);
  return st;
}

camdelta_status camdelta_branch_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                         const camdelta_branch_grads *grads, const camdelta_branch_saved *saved) {
  return branch_backward(ctx, args, grads, saved, NULL);
}

camdelta_status camdelta_branch_sp_backward(camdelta_context *ctx, const camdelta_branch_args *args,
                                      const camdelta_branch_grads *grads, const camdelta_branch_saved *saved,
                                      const cd_branch_sp *sp) {
  return branch_backward(ctx, args, grads, saved, sp);
}

camdelta_status cd_branch_saved_gates(const camdelta_branch_saved *s, cl_mem *beta_p, cl_mem *beta_r,
                                      cl_mem *decay_r, cl_mem *inflation_sq) {
  if (!s || !s->valid) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "cd_branch_saved_gates: no valid saved object");
  *beta_p = s->mem[BP], *beta_r = s->mem[BR], *decay_r = s->mem[DR], *inflation_sq = s->mem[INFL];
  return CAMDELTA_OK;
}
