/* f64 references of the camera branch around prep and scan (docs/math.md §8.2-8.6): the short conv on K, the output
 * transform, and the whole branch forward and backward composed from the references of every stage (cameras,
 * conv, prep, beta discount, causal + chunk-masked reverse scan, output transform). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/branch_common.h"

/* ------------------------------------------------------------------------------------------- short conv */

/* Tap of offset o in [-3, 3]: the symmetric 7-tap filter w0 w1 w2 w3 w2 w1 w0. */
static double tap(const double *w, int o) { return w[3 - (o < 0 ? -o : o)]; }

static camdelta_status conv_check(const char *op, const camdelta_ref_conv *p, uint32_t **seg_end) {
  cd_clear_error();
  if (!p || !p->x || !p->w || !p->bounds)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'p', 'x', 'w' or 'bounds' is NULL", op);
  if (!p->B || !p->T || !p->S || !p->C)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B, T, S, C must each be at least 1", op);
  size_t total;
  if (!CD_PROD(&total, p->B, p->T, p->S, p->C, sizeof(double)) || p->T > UINT32_MAX)
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*T*S*C = %zu*%zu*%zu*%zu overflows", op, p->B, p->T, p->S, p->C);
  if (p->nbounds < 2 || p->bounds[0] != 0 || p->bounds[p->nbounds - 1] != p->T)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: bounds must run from 0 to T", op);
  *seg_end = cd_malloc_array(p->T, sizeof **seg_end);
  if (!*seg_end) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  cd_segment_ends(p->bounds, p->nbounds, p->T, *seg_end);
  return CAMDELTA_OK;
}

/* Does output frame t read frame t + o? */
static int conv_reads(const uint32_t *seg_end, size_t T, size_t t, int o) {
  const long src = (long)t + o;
  if (src < 0 || src >= (long)T) return 0;
  return o <= 0 || (size_t)src < seg_end[t];
}

camdelta_status camdelta_ref_short_conv_forward(const camdelta_ref_conv *p) {
  uint32_t *seg_end = NULL;
  camdelta_status st = conv_check("camdelta_ref_short_conv_forward", p, &seg_end);
  if (st) return st;
  const size_t T = p->T, S = p->S, C = p->C;
  if (p->y)
    for (size_t b = 0; b < p->B; b++)
      for (size_t t = 0; t < T; t++)
        for (size_t s = 0; s < S; s++)
          for (size_t c = 0; c < C; c++) {
            double acc = 0;
            for (int o = -3; o <= 3; o++)
              if (conv_reads(seg_end, T, t, o)) acc += tap(p->w + 4 * c, o) * p->x[((b * T + t + o) * S + s) * C + c];
            p->y[((b * T + t) * S + s) * C + c] = acc;
          }
  free(seg_end);
  return CAMDELTA_OK;
}

camdelta_status camdelta_ref_short_conv_backward(const camdelta_ref_conv *p) {
  uint32_t *seg_end = NULL;
  camdelta_status st = conv_check("camdelta_ref_short_conv_backward", p, &seg_end);
  if (st) return st;
  if (!p->dy) {
    free(seg_end);
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_ref_short_conv_backward: 'dy' is NULL");
  }
  const size_t T = p->T, S = p->S, C = p->C, total = p->B * T * S * C;
  if (p->dx) memset(p->dx, 0, total * sizeof *p->dx);
  if (p->dw) memset(p->dw, 0, 4 * C * sizeof *p->dw);
  for (size_t b = 0; b < p->B; b++)
    for (size_t t = 0; t < T; t++)
      for (size_t s = 0; s < S; s++)
        for (size_t c = 0; c < C; c++) {
          const double g = p->dy[((b * T + t) * S + s) * C + c];
          for (int o = -3; o <= 3; o++) {
            if (!conv_reads(seg_end, T, t, o)) continue;
            const size_t src = ((b * T + t + o) * S + s) * C + c;
            if (p->dx) p->dx[src] += tap(p->w + 4 * c, o) * g;
            if (p->dw) p->dw[4 * c + 3 - (o < 0 ? -o : o)] += g * p->x[src];
          }
        }
  free(seg_end);
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------------------------------- output transform */

/* The checks of both directions: no NULL (all five arrays given), D a multiple of 8, the sizes in size_t. */
static camdelta_status check_transform(const char *op, size_t B, size_t N, size_t H, size_t D, int all_given) {
  cd_clear_error();
  if (!all_given) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: an argument is NULL", op);
  if (D < 8 || D % 8) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: D=%zu", op, D);
  size_t total, mats;
  if (!CD_PROD(&total, B, N, H, D, sizeof(double)) || !CD_PROD(&mats, B, N, 16, sizeof(double)))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D overflows size_t", op);
  return CAMDELTA_OK;
}

/* y = M·out per token (transpose: grad_out = Mᵀ·grad_y), M the transform of docs/math.md §8.5: proj_o's 4 x 4
 * matrix on each group of 4 of the first D/2 channels, the RoPE rotation of pairs on the other D/2. `in` and `o` in
 * y's layout (B, N, H, D) or the scan output's (B, H, D, N): out's to y's, or (transpose) y's to out's. */
static void transform(size_t B, size_t N, size_t H, size_t D, const double *proj_o, const double *rope_cos,
                      const double *rope_sin, int transpose, const double *in, double *o) {
  const size_t Dh = D / 2, is = transpose ? 1 : N, os = transpose ? N : 1;
  for (size_t b = 0; b < B; b++)
    for (size_t h = 0; h < H; h++)
      for (size_t n = 0; n < N; n++) {
        const size_t tok_y = ((b * N + n) * H + h) * D, tok_out = ((b * H + h) * D) * N + n;
        const double *x = in + (transpose ? tok_y : tok_out);
        double *t = o + (transpose ? tok_out : tok_y);
        const double *P = proj_o + (b * N + n) * 16, *c = rope_cos + n * Dh, *sn = rope_sin + n * Dh;
        for (size_t d = 0; d < Dh; d++) {
          const size_t g = d / 4, i = d % 4;
          double acc = 0;
          for (size_t j = 0; j < 4; j++) acc += (transpose ? P[4 * j + i] : P[4 * i + j]) * x[(4 * g + j) * is];
          t[d * os] = acc;
        }
        for (size_t r = 0; r < Dh; r++)
          t[(Dh + r) * os] = x[(Dh + r) * is] * c[r] - x[(Dh + (r ^ 1)) * is] * sn[transpose ? r ^ 1 : r];
      }
}

camdelta_status camdelta_ref_output_transform(size_t B, size_t N, size_t H, size_t D, const double *out,
                                              const double *proj_o, const double *rope_cos, const double *rope_sin,
                                              double *y) {
  camdelta_status st = check_transform("camdelta_ref_output_transform", B, N, H, D,
                                       out && proj_o && rope_cos && rope_sin && y);
  if (!st) transform(B, N, H, D, proj_o, rope_cos, rope_sin, 0, out, y);
  return st;
}

camdelta_status camdelta_ref_output_transform_backward(size_t B, size_t N, size_t H, size_t D, const double *grad_y,
                                                       const double *proj_o, const double *rope_cos,
                                                       const double *rope_sin, double *grad_out) {
  camdelta_status st = check_transform("camdelta_ref_output_transform_backward", B, N, H, D,
                                       grad_y && proj_o && rope_cos && rope_sin && grad_out);
  if (!st) transform(B, N, H, D, proj_o, rope_cos, rope_sin, 1, grad_y, grad_out);
  return st;
}

/* ------------------------------------------------------------------------------------------- whole branch */

typedef struct branch_fwd {
  size_t N, S, C, nb, ncb;
  size_t *bounds, *cbounds;
  uint32_t *mask;
  double *pq, *pkv, *po, *rc, *rs, *kconv, *q, *k, *v, *infl, *iota, *bp, *br, *dr, *oc, *orv;
} branch_fwd;

static void fwd_free(branch_fwd *f) {
  free(f->bounds), free(f->cbounds), free(f->mask);
  double **arr[] = {&f->pq, &f->pkv, &f->po, &f->rc, &f->rs, &f->kconv, &f->q, &f->k, &f->v,
                    &f->infl, &f->iota, &f->bp, &f->br, &f->dr, &f->oc, &f->orv};
  for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) free(*arr[i]), *arr[i] = NULL;
}

/* stream: the conv's segments are the scan's chunks (a stream's blocks), whatever T % chunk_size */
static camdelta_status run_forward(const char *op, const camdelta_ref_branch *p, branch_fwd *f, int stream) {
  memset(f, 0, sizeof *f);
  if (!p || !p->q_raw || !p->k_raw || !p->v_raw || !p->conv_weight || !p->q_norm_weight || !p->k_norm_weight ||
      !p->camera_conditions || !p->beta || !p->decay)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: an input is NULL", op);
  camdelta_status st = cd_check_grid(op, p->T, p->Hs, p->Ws, &f->N);
  if (st) return st;
  if ((st = cd_check_head_dim(op, p->D))) return st;
  size_t bnc8;
  if (!p->B || !p->H) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: B=%zu, H=%zu: each must be at least 1", op, p->B, p->H);
  if (!CD_PROD(&bnc8, p->B, f->N, p->H, p->D, sizeof(double)) || !CD_PROD(&bnc8, p->B, f->N, 16, sizeof(double)))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: B*N*H*D = %zu*%zu*%zu*%zu overflows", op, p->B, f->N, p->H, p->D);
  /* every count below divides B*N*H*D or B*N*16, checked just above (N >= T, S) */
  const size_t B = p->B, H = p->H, D = p->D, T = p->T, N = f->N, S = p->Hs * p->Ws, C = H * D;
  f->S = S, f->C = C;
  f->bounds = cd_malloc_array(T + 1, sizeof *f->bounds);
  f->cbounds = cd_malloc_array(T + 1, sizeof *f->cbounds);
  f->mask = cd_malloc_array(T, sizeof *f->mask);
  if (!f->bounds || !f->cbounds || !f->mask) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: host memory", op);
  if ((st = camdelta_chunk_bounds(T, &p->chunking, f->bounds, T + 1, &f->nb)) ||
      (!stream && (st = camdelta_conv_bounds(T, &p->chunking, f->cbounds, T + 1, &f->ncb))))
    return st;
  if (stream) memcpy(f->cbounds, f->bounds, f->nb * sizeof *f->bounds), f->ncb = f->nb;
  cd_reverse_mask(f->bounds, f->nb, T, f->mask);
  const size_t BN16 = B * N * 16, NDh = N * (D / 2), BNC = B * N * C, BHN = B * H * N, BHT = B * H * T;
  struct {
    double **p;
    size_t n;
  } al[] = {{&f->pq, BN16},  {&f->pkv, BN16},  {&f->po, BN16}, {&f->rc, NDh},  {&f->rs, NDh},  {&f->kconv, BNC},
            {&f->q, BNC},    {&f->k, BNC},     {&f->v, BNC},   {&f->infl, BHN}, {&f->iota, BHT}, {&f->bp, BHN},
            {&f->br, BHN},   {&f->dr, BHT},    {&f->oc, BNC},  {&f->orv, BNC}};
  for (size_t i = 0; i < sizeof al / sizeof al[0]; i++)
    if (!(*al[i].p = malloc(al[i].n * sizeof(double))))
      return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  const camdelta_ref_camera cam = {.B = B, .T = T, .Hs = p->Hs, .Ws = p->Ws, .ph = p->ph ? p->ph : 1,
                                   .pw = p->pw ? p->pw : 1, .D = D, .camera_conditions = p->camera_conditions,
                                   .proj_q = f->pq, .proj_kv = f->pkv, .proj_o = f->po, .rope_cos = f->rc,
                                   .rope_sin = f->rs};
  if ((st = camdelta_ref_camera_forward(&cam))) return st;
  const camdelta_ref_conv cv = {.B = B, .T = T, .S = S, .C = C, .bounds = f->cbounds, .nbounds = f->ncb,
                                .x = p->k_raw, .w = p->conv_weight, .y = f->kconv};
  if ((st = camdelta_ref_short_conv_forward(&cv))) return st;
  const camdelta_ref_prep pp = {.B = B, .N = N, .H = H, .D = D, .k_scale = p->k_scale, .norm_eps = p->norm_eps,
                                .q_raw = p->q_raw, .k_raw = f->kconv, .v_raw = p->v_raw,
                                .q_norm_weight = p->q_norm_weight, .k_norm_weight = p->k_norm_weight,
                                .proj_q = f->pq, .proj_kv = f->pkv, .rope_cos = f->rc, .rope_sin = f->rs,
                                .q = f->q, .k = f->k, .v = f->v, .inflation_sq = f->infl};
  if ((st = camdelta_ref_prep_forward(&pp))) return st;
  for (size_t bh = 0; bh < B * H; bh++)
    for (size_t t = 0; t < T; t++) {
      double acc = 0;
      for (size_t s = 0; s < S; s++) acc += f->infl[bh * N + t * S + s];
      const double iota = acc / (double)S, m = iota > 1.0 ? iota : 1.0;
      f->iota[bh * T + t] = iota;
      for (size_t s = 0; s < S; s++) {
        const size_t i = (bh * T + t) * S + s;
        f->bp[i] = p->beta[i] / m;
        f->br[i] = f->mask[t] ? f->bp[i] : 0.0;
      }
      f->dr[bh * T + t] = f->mask[t] ? p->decay[bh * T + t] : 0.0;
    }
  camdelta_ref_scan sc = {.B = B, .H = H, .D = D, .F = T, .S = S, .reverse = 0,
                          .q = f->q, .k = f->k, .v = f->v, .beta = f->bp, .decay = p->decay, .out = f->oc};
  if ((st = camdelta_ref_scan_forward(&sc))) return st;
  camdelta_ref_scan sr = {.B = B, .H = H, .D = D, .F = T, .S = S, .reverse = 1,
                          .q = f->q, .k = f->k, .v = f->v, .beta = f->br, .decay = f->dr, .out = f->orv};
  if ((st = camdelta_ref_scan_forward(&sr))) return st;
  for (size_t i = 0; i < BNC; i++) f->oc[i] += f->orv[i]; /* oc = the summed scan output */
  return CAMDELTA_OK;
}

camdelta_status camdelta_ref_branch_forward(const camdelta_ref_branch *p) {
  static const char op[] = "camdelta_ref_branch_forward";
  cd_clear_error();
  branch_fwd f;
  camdelta_status st = run_forward(op, p, &f, 0);
  if (!st && p->y) st = camdelta_ref_output_transform(p->B, f.N, p->H, p->D, f.oc, f.po, f.rc, f.rs, p->y);
  fwd_free(&f);
  return st;
}

camdelta_status camdelta_ref_branch_backward(const camdelta_ref_branch *p, const camdelta_ref_branch_grads *g) {
  static const char op[] = "camdelta_ref_branch_backward";
  cd_clear_error();
  if (!g || !g->grad_y) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'grad_y' is NULL", op);
  branch_fwd f;
  camdelta_status st = run_forward(op, p, &f, 0);
  if (st) {
    fwd_free(&f);
    return st;
  }
  const size_t B = p->B, H = p->H, D = p->D, T = p->T, N = f.N, S = f.S, C = f.C, BNC = B * N * C;
  const size_t BHN = B * H * N, BHT = B * H * T;
  double *gout = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *dq2 = NULL, *dk2 = NULL, *dv2 = NULL, *db = NULL,
         *db2 = NULL, *dd = NULL, *dd2 = NULL, *ginfl = NULL, *dkconv = NULL;
  double **al[] = {&gout, &dq, &dk, &dv, &dq2, &dk2, &dv2, &db, &db2, &dd, &dd2, &ginfl, &dkconv};
  const size_t n[] = {BNC, BNC, BNC, BNC, BNC, BNC, BNC, BHN, BHN, BHT, BHT, BHN, BNC};
  for (size_t i = 0; i < sizeof al / sizeof al[0] && !st; i++)
    if (!(*al[i] = malloc(n[i] * sizeof(double)))) st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: host memory", op);
  if (!st) st = camdelta_ref_output_transform_backward(B, N, H, D, g->grad_y, f.po, f.rc, f.rs, gout);
  if (!st) {
    camdelta_ref_scan sc = {.B = B, .H = H, .D = D, .F = T, .S = S, .reverse = 0,
                            .q = f.q, .k = f.k, .v = f.v, .beta = f.bp, .decay = p->decay};
    camdelta_ref_scan_grads gc = {.grad_out = gout, .dq = dq, .dk = dk, .dv = dv, .dbeta = db, .ddecay = dd};
    st = camdelta_ref_scan_backward(&sc, &gc);
  }
  if (!st) {
    camdelta_ref_scan sr = {.B = B, .H = H, .D = D, .F = T, .S = S, .reverse = 1,
                            .q = f.q, .k = f.k, .v = f.v, .beta = f.br, .decay = f.dr};
    camdelta_ref_scan_grads gr = {.grad_out = gout, .dq = dq2, .dk = dk2, .dv = dv2, .dbeta = db2, .ddecay = dd2};
    st = camdelta_ref_scan_backward(&sr, &gr);
  }
  if (!st) {
    for (size_t i = 0; i < BNC; i++) dq[i] += dq2[i], dk[i] += dk2[i], dv[i] += dv2[i];
    /* beta' = beta / max(iota, 1), beta'_r = mask beta', decay_r = mask decay */
    for (size_t bh = 0; bh < B * H; bh++)
      for (size_t t = 0; t < T; t++) {
        const double iota = f.iota[bh * T + t], m = iota > 1.0 ? iota : 1.0;
        double dm = 0;
        for (size_t s = 0; s < S; s++) {
          const size_t i = (bh * T + t) * S + s;
          const double dbp = db[i] + (f.mask[t] ? db2[i] : 0.0);
          if (g->dbeta) g->dbeta[i] = dbp / m;
          dm -= dbp * p->beta[i] / (m * m);
        }
        const double diota = iota > 1.0 ? dm : 0.0;
        for (size_t s = 0; s < S; s++) ginfl[bh * N + t * S + s] = diota / (double)S;
        if (g->ddecay) g->ddecay[bh * T + t] = dd[bh * T + t] + (f.mask[t] ? dd2[bh * T + t] : 0.0);
      }
    const camdelta_ref_prep pp = {.B = B, .N = N, .H = H, .D = D, .k_scale = p->k_scale, .norm_eps = p->norm_eps,
                                  .q_raw = p->q_raw, .k_raw = f.kconv, .v_raw = p->v_raw,
                                  .q_norm_weight = p->q_norm_weight, .k_norm_weight = p->k_norm_weight,
                                  .proj_q = f.pq, .proj_kv = f.pkv, .rope_cos = f.rc, .rope_sin = f.rs};
    const camdelta_ref_prep_grads pg = {.grad_q = dq, .grad_k = dk, .grad_v = dv, .grad_inflation_sq = ginfl,
                                        .dq_raw = g->dq_raw, .dk_raw = dkconv, .dv_raw = g->dv_raw,
                                        .dq_norm_weight = g->dq_norm_weight, .dk_norm_weight = g->dk_norm_weight};
    st = camdelta_ref_prep_backward(&pp, &pg);
  }
  if (!st && (g->dk_raw || g->dconv_weight)) {
    const camdelta_ref_conv cv = {.B = B, .T = T, .S = S, .C = C, .bounds = f.cbounds, .nbounds = f.ncb,
                                  .x = p->k_raw, .w = p->conv_weight, .dy = dkconv, .dx = g->dk_raw,
                                  .dw = g->dconv_weight};
    st = camdelta_ref_short_conv_backward(&cv);
  }
  for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) free(*al[i]);
  fwd_free(&f);
  return st;
}

camdelta_status camdelta_ref_stream_forward(const camdelta_ref_branch *p) {
  static const char op[] = "camdelta_ref_stream_forward";
  cd_clear_error();
  if (p && (!p->chunking.chunk_size || p->chunking.chunk_index))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: a stream's schedule is a chunk_size (>= 1) and a strategy",
                   op);
  branch_fwd f;
  camdelta_status st = run_forward(op, p, &f, 1);
  if (!st && p->y) st = camdelta_ref_output_transform(p->B, f.N, p->H, p->D, f.oc, f.po, f.rc, f.rs, p->y);
  fwd_free(&f);
  return st;
}
