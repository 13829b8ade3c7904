/* f64 host reference of the prep backward (docs/math.md §4): the exact gradients of camdelta_ref_prep_forward
 * (src/ref_prep.c), recomputing the forward per token.
 *
 * Per (b, n, h), with a = raw·inv_rms·w (pre-ReLU), qn = relu(a_q), kn = relu(a_k)·k_scale, vn = v_raw:
 *  - inflation_sq = cl(post)/cl(pre), cl(x) = x > 1e-12 ? x : 1e-12, so (same convention as the forward's
 *    comparison: a clamped value passes no gradient, also at exactly 1e-12)
 *      d post = gi·[post > 1e-12]/cl(pre),   d pre = −gi·cl(post)/cl(pre)²·[pre > 1e-12]
 *    and k_out receives 2·k_out·d post, kn receives 2·kn·d pre.
 *  - camera transformᵀ on the first half: dx[4g+j] = Σ_i P[i][j]·dy[4g+i], dP[i][j] += Σ_g dy[4g+i]·x[4g+j].
 *  - RoPEᵀ on the second half: dx[Dh+r] += dy[Dh+r]·cos[r], dx[Dh+(r^1)] += dy[Dh+r]·sin[r],
 *    dcos[n][r] += dy[Dh+r]·x[Dh+r], dsin[n][r] += dy[Dh+r]·x[Dh+(r^1)] (summed over b, h and q, k, v).
 *  - k_scale, then the ReLU masks [a > 0] (the derivative at exactly 0 is 0, as the forward's `a > 0`).
 *  - full-channel RMSNorm, ir = (Σ_c x²/C + eps)^-1/2 per token over all heads:
 *      dw[c] += da[c]·x[c]·ir,   dx[c] = da[c]·ir·w[c] − ir³/C·x[c]·Σ_c' da[c']·x[c']·w[c'].
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_prep.h"

static double clamp_floor(double x) { return x > 1e-12 ? x : 1e-12; }

/* Transposed camera transform and RoPE of one head's vector: y = T(x) forward; given dy, dx = Tᵀ dy, and the
 * parameter gradients accumulate into dP (16) and dcs/dsn (Dh), each may be NULL. */
static void transform_backward(size_t D, const double *P, const double *cs, const double *sn, const double *x,
                               const double *dy, double *dx, double *dP, double *dcs, double *dsn) {
  const size_t Dh = D / 2;
  for (size_t g = 0; g < Dh / 4; g++) {
    for (size_t j = 0; j < 4; j++) {
      double acc = 0;
      for (size_t i = 0; i < 4; i++) acc += P[i * 4 + j] * dy[4 * g + i];
      dx[4 * g + j] = acc;
    }
    if (dP)
      for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 4; j++) dP[i * 4 + j] += dy[4 * g + i] * x[4 * g + j];
  }
  for (size_t r = 0; r < Dh; r++) dx[Dh + r] = 0;
  for (size_t r = 0; r < Dh; r++) {
    dx[Dh + r] += dy[Dh + r] * cs[r];
    dx[Dh + (r ^ 1)] += dy[Dh + r] * sn[r];
    if (dcs) dcs[r] += dy[Dh + r] * x[Dh + r];
    if (dsn) dsn[r] += dy[Dh + r] * x[Dh + (r ^ 1)];
  }
}

/* Forward camera transform + RoPE of one head's vector (as in ref_prep.c). */
camdelta_status camdelta_ref_prep_backward(const camdelta_ref_prep *p, const camdelta_ref_prep_grads *gr) {
  cd_clear_error();
  static const char op[] = "camdelta_ref_prep_backward";
  if (!p || !gr || !p->q_raw || !p->k_raw || !p->v_raw || !p->q_norm_weight || !p->k_norm_weight || !p->proj_q ||
      !p->proj_kv || !p->rope_cos || !p->rope_sin)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: NULL argument", op);
  camdelta_status st = cd_check_head_dim(op, p->D);
  if (st) return st;
  const size_t B = p->B, N = p->N, H = p->H, D = p->D, C = H * D, Dh = D / 2;
  const size_t f[] = {B, N, C};
  size_t all;
  if (!cd_prod(&all, 3, f) || all > SIZE_MAX / sizeof(double) || C > SIZE_MAX / 8 / sizeof(double))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  double *buf = malloc((2 * C + 9 * D) * sizeof *buf);
  if (!buf) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  double *daq = buf, *dak = buf + C; /* per token, all heads: gradient wrt the pre-ReLU normed values */
  double *qn = dak + C, *kn = qn + D, *vn = kn + D, *ko = vn + D;
  double *gq = ko + D, *gk = gq + D, *gv = gk + D, *dx = gv + D, *dvn = dx + D;
  if (gr->dq_norm_weight) memset(gr->dq_norm_weight, 0, C * sizeof(double));
  if (gr->dk_norm_weight) memset(gr->dk_norm_weight, 0, C * sizeof(double));
  if (gr->drope_cos) memset(gr->drope_cos, 0, N * Dh * sizeof(double));
  if (gr->drope_sin) memset(gr->drope_sin, 0, N * Dh * sizeof(double));
  for (size_t b = 0; b < B; b++) {
    for (size_t n = 0; n < N; n++) {
      const size_t tok = (b * N + n) * C;
      const double *xq = p->q_raw + tok, *xk = p->k_raw + tok;
      double irq, irk;
      cd_ref_prep_inv_rms(p, tok, &irq, &irk); /* the forward's own arithmetic: the ReLU masks agree bit for bit */
      const double *Pq = p->proj_q + (b * N + n) * 16, *Pkv = p->proj_kv + (b * N + n) * 16;
      const double *cs = p->rope_cos + n * Dh, *sn = p->rope_sin + n * Dh;
      double *dPq = gr->dproj_q ? gr->dproj_q + (b * N + n) * 16 : NULL;
      double *dPkv = gr->dproj_kv ? gr->dproj_kv + (b * N + n) * 16 : NULL;
      double *dcs = gr->drope_cos ? gr->drope_cos + n * Dh : NULL, *dsn = gr->drope_sin ? gr->drope_sin + n * Dh : NULL;
      if (dPq) memset(dPq, 0, 16 * sizeof *dPq);
      if (dPkv) memset(dPkv, 0, 16 * sizeof *dPkv);
      for (size_t h = 0; h < H; h++) {
        const size_t row = tok + h * D;
        const double pre = cd_ref_prep_head(p, row, h, irq, irk, qn, kn, vn);
        double post = 0;
        cd_ref_prep_transform(D, Pkv, cs, sn, kn, ko);
        for (size_t d = 0; d < D; d++) post += ko[d] * ko[d];
        const size_t ob = ((b * H + h) * D) * N + n;
        for (size_t d = 0; d < D; d++) {
          gq[d] = gr->grad_q ? gr->grad_q[ob + d * N] : 0;
          gk[d] = gr->grad_k ? gr->grad_k[ob + d * N] : 0;
          gv[d] = gr->grad_v ? gr->grad_v[ob + d * N] : 0;
        }
        double dpre = 0;
        if (gr->grad_inflation_sq) {
          const double gi = gr->grad_inflation_sq[(b * H + h) * N + n];
          const double cpre = clamp_floor(pre), cpost = clamp_floor(post);
          const double dpost = post > 1e-12 ? gi / cpre : 0;
          dpre = pre > 1e-12 ? -gi * cpost / (cpre * cpre) : 0;
          for (size_t d = 0; d < D; d++) gk[d] += 2 * ko[d] * dpost;
        }
        /* q */
        transform_backward(D, Pq, cs, sn, qn, gq, dx, dPq, dcs, dsn);
        for (size_t d = 0; d < D; d++) {
          double a = p->q_raw[row + d] * irq * p->q_norm_weight[h * D + d];
          daq[h * D + d] = a > 0 ? dx[d] : 0;
        }
        /* k */
        transform_backward(D, Pkv, cs, sn, kn, gk, dx, dPkv, dcs, dsn);
        for (size_t d = 0; d < D; d++) {
          double a = p->k_raw[row + d] * irk * p->k_norm_weight[h * D + d];
          dak[h * D + d] = a > 0 ? (dx[d] + 2 * kn[d] * dpre) * p->k_scale : 0;
        }
        /* v */
        transform_backward(D, Pkv, cs, sn, vn, gv, dvn, dPkv, dcs, dsn);
        if (gr->dv_raw)
          for (size_t d = 0; d < D; d++) gr->dv_raw[row + d] = dvn[d];
      }
      /* full-channel RMSNorm backward */
      double Sq = 0, Sk = 0;
      for (size_t c = 0; c < C; c++) {
        Sq += daq[c] * xq[c] * p->q_norm_weight[c];
        Sk += dak[c] * xk[c] * p->k_norm_weight[c];
      }
      const double cq = irq * irq * irq / (double)C, ck = irk * irk * irk / (double)C;
      for (size_t c = 0; c < C; c++) {
        if (gr->dq_raw) gr->dq_raw[tok + c] = daq[c] * irq * p->q_norm_weight[c] - cq * xq[c] * Sq;
        if (gr->dk_raw) gr->dk_raw[tok + c] = dak[c] * irk * p->k_norm_weight[c] - ck * xk[c] * Sk;
        if (gr->dq_norm_weight) gr->dq_norm_weight[c] += daq[c] * xq[c] * irq;
        if (gr->dk_norm_weight) gr->dk_norm_weight[c] += dak[c] * xk[c] * irk;
      }
    }
  }
  free(buf);
  return CAMDELTA_OK;
}
