/* f64 host reference of the state summaries (docs/math.md §9, include/camdelta_summary.h), per (b, h):
 *   A_f = decay_f·(I − K_fᵀβ_fK_f), U_f = K_fᵀβ_fV_f, W_f = Q_fᵀ·dO_f (D x D, rows = key dim)
 *   T: causal A_{F−1}···A_0, reverse A_0···A_{F−1}
 *   E: causal X ← A_f·X + U_f for f = 0 … F−1, reverse for f = F−1 … 0, from X = 0 (or init_state)
 *   G: causal X ← A_f·(X + W_f) for f = F−1 … 0; reverse X ← A_f·(X + W_{f−1}) for f = 0 … F−1 (W_{−1} = 0),
 *      then X + W_{F−1}; from X = 0 (or grad_final_state).
 * Written from the definitions, independently of the device code's step lists. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

typedef struct sref {
  size_t D, F, S, N;
} sref;

/* out = g·(diag·I + sgn·X_fᵀ·diag(w)·Y_f) over the S tokens of frame f; X, Y (D, N); w may be NULL. */
static void gram(const sref *r, const double *X, const double *Y, const double *w, size_t f, double g, int diag,
                 double sgn, double *out) {
  const size_t D = r->D, N = r->N, S = r->S;
  for (size_t i = 0; i < D; i++)
    for (size_t j = 0; j < D; j++) {
      double acc = 0;
      for (size_t s = 0; s < S; s++) {
        const size_t n = f * S + s;
        acc += X[i * N + n] * (w ? w[n] : 1.0) * Y[j * N + n];
      }
      out[i * D + j] = g * ((diag && i == j ? 1.0 : 0.0) + sgn * acc);
    }
}

/* Y = A·X (D x D), Y distinct from A and X. */
static void matmul(size_t D, const double *A, const double *X, double *Y) {
  for (size_t i = 0; i < D; i++)
    for (size_t j = 0; j < D; j++) {
      double acc = 0;
      for (size_t k = 0; k < D; k++) acc += A[i * D + k] * X[k * D + j];
      Y[i * D + j] = acc;
    }
}

static camdelta_status check(const char *op, const camdelta_ref_scan *p, int need_v, int need_q) {
  if (!p || !p->k || !p->beta || !p->decay || (need_v && !p->v) || (need_q && !p->q))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: NULL argument (p, k, beta, decay%s are required)", op,
                   need_q ? ", q" : need_v ? ", v" : "");
  if (!p->B || !p->H || !p->D || !p->F || !p->S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: every dimension must be > 0", op);
  size_t n;
  const size_t f[5] = {p->B, p->H, p->F, p->D, p->D};
  if (!cd_prod(&n, 5, f) || n > SIZE_MAX / 16 || !cd_mul(&n, p->F, p->S) || !cd_mul(&n, n, p->D))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  return CAMDELTA_OK;
}

camdelta_status camdelta_ref_scan_summary(const camdelta_ref_scan *p, double *T, double *E) {
  static const char op[] = "camdelta_ref_scan_summary";
  cd_clear_error();
  camdelta_status st = check(op, p, E != NULL, 0);
  if (st) return st;
  const size_t D = p->D, DD = D * D, F = p->F, N = F * p->S;
  const sref r = {D, F, p->S, N};
  double *A = malloc(DD * sizeof *A), *U = malloc(DD * sizeof *U), *X = malloc(DD * sizeof *X),
         *Y = malloc(DD * sizeof *Y), *Z = malloc(DD * sizeof *Z);
  if (!A || !U || !X || !Y || !Z) {
    free(A), free(U), free(X), free(Y), free(Z);
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (size_t bh = 0; bh < p->B * p->H; bh++) {
    const double *k = p->k + bh * D * N, *v = p->v ? p->v + bh * D * N : NULL, *beta = p->beta + bh * N;
    const double *decay = p->decay + bh * F;
    /* X: T so far (identity), Z: E so far */
    memset(X, 0, DD * sizeof *X);
    for (size_t i = 0; i < D; i++) X[i * D + i] = 1;
    if (p->init_state) memcpy(Z, p->init_state + bh * DD, DD * sizeof *Z);
    else memset(Z, 0, DD * sizeof *Z);
    for (size_t i = 0; i < F; i++) {
      const size_t f = p->reverse ? F - 1 - i : i;
      gram(&r, k, k, beta, f, decay[f], 1, -1.0, A);
      matmul(D, A, X, Y);
      memcpy(X, Y, DD * sizeof *X);
      if (E) {
        gram(&r, k, v, beta, f, 1.0, 0, 1.0, U);
        matmul(D, A, Z, Y);
        for (size_t e = 0; e < DD; e++) Z[e] = Y[e] + U[e];
      }
    }
    if (T) memcpy(T + bh * DD, X, DD * sizeof *X);
    if (E) memcpy(E + bh * DD, Z, DD * sizeof *Z);
  }
  free(A), free(U), free(X), free(Y), free(Z);
  return CAMDELTA_OK;
}

camdelta_status camdelta_ref_scan_grad_summary(const camdelta_ref_scan *p, const double *grad_out,
                                               const double *grad_final_state, double *G) {
  static const char op[] = "camdelta_ref_scan_grad_summary";
  cd_clear_error();
  camdelta_status st = check(op, p, 0, 1);
  if (st) return st;
  if (!G) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: NULL argument 'G'", op);
  const size_t D = p->D, DD = D * D, F = p->F, N = F * p->S;
  const sref r = {D, F, p->S, N};
  double *A = malloc(DD * sizeof *A), *W = malloc(DD * sizeof *W), *X = malloc(DD * sizeof *X),
         *Y = malloc(DD * sizeof *Y);
  if (!A || !W || !X || !Y) {
    free(A), free(W), free(X), free(Y);
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (size_t bh = 0; bh < p->B * p->H; bh++) {
    const double *q = p->q + bh * D * N, *k = p->k + bh * D * N, *beta = p->beta + bh * N;
    const double *go = grad_out ? grad_out + bh * D * N : NULL, *decay = p->decay + bh * F;
    if (grad_final_state) memcpy(X, grad_final_state + bh * DD, DD * sizeof *X);
    else memset(X, 0, DD * sizeof *X);
    for (size_t i = 0; i < F; i++) {
      const size_t f = p->reverse ? i : F - 1 - i;
      /* W of the output frame read at this step: causal f, reverse f − 1 */
      const int has_w = go && (!p->reverse || f > 0);
      if (has_w) {
        gram(&r, q, go, NULL, p->reverse ? f - 1 : f, 1.0, 0, 1.0, W);
        for (size_t e = 0; e < DD; e++) X[e] += W[e];
      }
      gram(&r, k, k, beta, f, decay[f], 1, -1.0, A);
      matmul(D, A, X, Y);
      memcpy(X, Y, DD * sizeof *X);
    }
    if (p->reverse && go) {
      gram(&r, q, go, NULL, F - 1, 1.0, 0, 1.0, W);
      for (size_t e = 0; e < DD; e++) X[e] += W[e];
    }
    memcpy(G + bh * DD, X, DD * sizeof *X);
  }
  free(A), free(W), free(X), free(Y);
  return CAMDELTA_OK;
}
