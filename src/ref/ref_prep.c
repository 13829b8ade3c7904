/* f64 host reference of the prep forward (docs/math.md §2). */
#include <math.h>
#include <stdlib.h>

#include "ref/ref_prep.h"

camdelta_status camdelta_ref_prep_forward(const camdelta_ref_prep *p) {
  cd_clear_error();
  if (!p || !p->q_raw || !p->k_raw || !p->v_raw || !p->q_norm_weight || !p->k_norm_weight || !p->proj_q ||
      !p->proj_kv || !p->rope_cos || !p->rope_sin)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_ref_prep_forward: NULL argument");
  camdelta_status st = cd_check_head_dim("camdelta_ref_prep_forward", p->D);
  if (st) return st;
  const size_t B = p->B, N = p->N, H = p->H, D = p->D, C = H * D, Dh = D / 2;
  {
    /* every index below stays under B*N*H*D and B*N*16 elements: both must fit, in bytes too */
    const size_t f[4] = {B, N, H, D}, g[3] = {B, N, 16};
    size_t all, cams;
    if (!cd_prod(&all, 4, f) || !cd_prod(&cams, 3, g) || all > SIZE_MAX / sizeof(double) ||
        cams > SIZE_MAX / sizeof(double))
      return cd_fail(CAMDELTA_ERROR_OVERFLOW, "camdelta_ref_prep_forward: B*N*H*D = %zu*%zu*%zu*%zu overflows size_t",
                     B, N, H, D);
  }
  double *qn = malloc(D * sizeof *qn), *kn = malloc(D * sizeof *kn), *vn = malloc(D * sizeof *vn);
  double *qo = malloc(D * sizeof *qo), *ko = malloc(D * sizeof *ko), *vo = malloc(D * sizeof *vo);
  if (!qn || !kn || !vn || !qo || !ko || !vo) {
    free(qn), free(kn), free(vn), free(qo), free(ko), free(vo);
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_ref_prep_forward: out of host memory");
  }
  for (size_t b = 0; b < B; b++) {
    for (size_t n = 0; n < N; n++) {
      const size_t tok = (b * N + n) * C;
      double irq, irk;
      cd_ref_prep_inv_rms(p, tok, &irq, &irk);
      const double *Pq = p->proj_q + (b * N + n) * 16, *Pkv = p->proj_kv + (b * N + n) * 16;
      const double *cs = p->rope_cos + n * Dh, *sn = p->rope_sin + n * Dh;
      for (size_t h = 0; h < H; h++) {
        const size_t row = tok + h * D;
        const double pre = cd_ref_prep_head(p, row, h, irq, irk, qn, kn, vn);
        double post = 0;
        cd_ref_prep_transform(D, Pq, cs, sn, qn, qo);
        cd_ref_prep_transform(D, Pkv, cs, sn, kn, ko);
        cd_ref_prep_transform(D, Pkv, cs, sn, vn, vo);
        for (size_t d = 0; d < D; d++) post += ko[d] * ko[d];
        const size_t ob = ((b * H + h) * D) * N + n;
        for (size_t d = 0; d < D; d++) {
          if (p->q) p->q[ob + d * N] = qo[d];
          if (p->k) p->k[ob + d * N] = ko[d];
          if (p->v) p->v[ob + d * N] = vo[d];
        }
        if (p->inflation_sq)
          p->inflation_sq[(b * H + h) * N + n] = (post > 1e-12 ? post : 1e-12) / (pre > 1e-12 ? pre : 1e-12);
      }
    }
  }
  free(qn), free(kn), free(vn), free(qo), free(ko), free(vo);
  return CAMDELTA_OK;
}

void cd_ref_prep_inv_rms(const camdelta_ref_prep *p, size_t tok, double *irq, double *irk) {
  const size_t C = p->H * p->D;
  double sq = 0, sk = 0;
  for (size_t c = 0; c < C; c++) {
    sq += p->q_raw[tok + c] * p->q_raw[tok + c];
    sk += p->k_raw[tok + c] * p->k_raw[tok + c];
  }
  *irq = 1.0 / sqrt(sq / (double)C + p->norm_eps);
  *irk = 1.0 / sqrt(sk / (double)C + p->norm_eps);
}

double cd_ref_prep_head(const camdelta_ref_prep *p, size_t row, size_t h, double irq, double irk, double *qn,
                        double *kn, double *vn) {
  const size_t D = p->D;
  double pre = 0;
  for (size_t d = 0; d < D; d++) {
    double q = p->q_raw[row + d] * irq * p->q_norm_weight[h * D + d];
    double k = p->k_raw[row + d] * irk * p->k_norm_weight[h * D + d];
    qn[d] = q > 0 ? q : 0;
    kn[d] = (k > 0 ? k : 0) * p->k_scale;
    vn[d] = p->v_raw[row + d];
    pre += kn[d] * kn[d];
  }
  return pre;
}

void cd_ref_prep_transform(size_t D, const double *P, const double *cs, const double *sn, const double *x, double *y) {
  const size_t Dh = D / 2;
  for (size_t g = 0; g < Dh / 4; g++)
    for (size_t i = 0; i < 4; i++) {
      double acc = 0;
      for (size_t j = 0; j < 4; j++) acc += P[i * 4 + j] * x[4 * g + j];
      y[4 * g + i] = acc;
    }
  for (size_t r = 0; r < Dh; r++) y[Dh + r] = x[Dh + r] * cs[r] + x[Dh + (r ^ 1)] * sn[r];
}
