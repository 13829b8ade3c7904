/* f64 host reference of the scan forward (docs/math.md §3) and its exact backward (docs/math.md §4).
 *
 * Per (b, h) both directions are one chain of "steps" over a state M (D x D, rows = key dim, cols = value dim):
 *
 *   M_0 = init_state (or zero)
 *   step t = 1..T:  P_t = g_t * M_{t-1};  M_t = P_t + K_tᵀ·β_t·(V_t − K_t·P_t)
 *   an output frame reads a state: out_qf = Q_qf · M_t
 *
 * Causal: T = F, step t = f + 1 uses key frame f (g = decay[f]) and output frame f reads M_t.
 * Reverse: output frame F−1 reads M_0 (the reverse init_state: the contribution of every frame after the
 * segment, zero when there is none); step t = 1..F−1 uses key frame kf = F−t (g = decay[kf]) and output
 * frame F−1−t reads M_t; the reverse final_state is one more step over key frame 0 (g = decay[0]) that no
 * output reads, taken only when a final_state is asked for (forward) or receives a gradient (backward).
 * final_state is always the M after the last step.
 *
 * state_pre / state_post are indexed by output frame: the state after decay before the update (P_t) and the
 * state after the update (M_t). In reverse, output frame F−1 has no update: its state_pre and state_post are
 * both M_0, i.e. zero without an init_state and the init_state itself with one.
 *
 * The backward walks the steps in reverse order (dM = the gradient of M_t):
 *   dM += Q_qfᵀ·dO_qf;  dq_qf = dO_qf · M_tᵀ
 *   R = V − K·P, Δ = β·R (row-scaled), dΔ = K·dM
 *   dv = β·dΔ, dβ_s = <dΔ_s, R_s>, dk = Δ·dMᵀ − (β·dΔ)·Pᵀ, dP = dM − Kᵀ·(β·dΔ)
 *   ddecay = <dP, M_{t−1}>  (exact for every g, including g = 0), dM_{t−1} = g·dP
 * and at the end dinit_state = dM_0 (after the reverse output F−1's contribution). dinit_state is written whenever
 * it is asked for: without an init_state it is the gradient w.r.t. the implicit zero initial state. Every requested
 * gradient is written in full (zero where nothing depends on the input, e.g. reverse frame 0 without a
 * grad_final_state). D is not restricted to the library's head dims here: any D >= 1 works. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* Geometry of one (b, h) problem. */
typedef struct scan_geo {
  size_t D, F, S, N;
  int reverse;
} scan_geo;

/* Key frame of step t (1-based), and the output frame that reads M_t (or -1 when none reads it). */
static size_t step_key_frame(const scan_geo *g, size_t t) { return g->reverse ? (t < g->F ? g->F - t : 0) : t - 1; }

static long step_out_frame(const scan_geo *g, size_t t) {
  if (!g->reverse) return (long)(t - 1);
  return t < g->F ? (long)(g->F - 1 - t) : -1;
}

/* Number of steps: F causal; F−1 reverse, plus the final-state step over frame 0 when `with_final`. */
static size_t step_count(const scan_geo *g, int with_final) {
  if (!g->reverse) return g->F;
  return g->F - 1 + (with_final ? 1 : 0);
}

/* dst = src (D x D) */
static void mat_copy(double *dst, const double *src, size_t D) { memcpy(dst, src, D * D * sizeof *dst); }

/* out[:, qf] = Q_qf · M : out[v*N + qf*S + s] = Σ_k q[k*N + qf*S + s]·M[k][v] */
static void frame_output(const scan_geo *g, const double *q, const double *M, size_t qf, double *out) {
  const size_t D = g->D, N = g->N, S = g->S;
  for (size_t s = 0; s < S; s++) {
    const size_t n = qf * S + s;
    for (size_t v = 0; v < D; v++) {
      double acc = 0;
      for (size_t k = 0; k < D; k++) acc += q[k * N + n] * M[k * D + v];
      out[v * N + n] = acc;
    }
  }
}

/* M = P + K_fᵀ·β_f·(V_f − K_f·P), with M != P. row: a D-vector of scratch. */
static void frame_update(const scan_geo *g, const double *k, const double *v, const double *beta, size_t f,
                         const double *P, double *M, double *row) {
  const size_t D = g->D, N = g->N, S = g->S;
  mat_copy(M, P, D);
  for (size_t s = 0; s < S; s++) {
    const size_t n = f * S + s;
    const double b = beta[f * S + s];
    for (size_t c = 0; c < D; c++) {
      double pred = 0;
      for (size_t a = 0; a < D; a++) pred += k[a * N + n] * P[a * D + c];
      row[c] = b * (v[c * N + n] - pred);
    }
    for (size_t a = 0; a < D; a++) {
      const double ka = k[a * N + n];
      for (size_t c = 0; c < D; c++) M[a * D + c] += ka * row[c];
    }
  }
}

/* Run the steps of one (b, h). Ms: (T+1) states M_0..M_T, Ps: T states P_1..P_T (slot t−1). */
static void run_steps(const scan_geo *g, const double *k, const double *v, const double *beta, const double *decay,
                      const double *init, size_t T, double *Ms, double *Ps, double *row) {
  const size_t DD = g->D * g->D;
  if (init) mat_copy(Ms, init, g->D);
  else memset(Ms, 0, DD * sizeof *Ms);
  for (size_t t = 1; t <= T; t++) {
    const size_t kf = step_key_frame(g, t);
    const double gt = decay[kf];
    double *P = Ps + (t - 1) * DD;
    for (size_t i = 0; i < DD; i++) P[i] = gt * Ms[(t - 1) * DD + i];
    frame_update(g, k, v, beta, kf, P, Ms + t * DD, row);
  }
}

static camdelta_status check_scan(const char *op, const camdelta_ref_scan *p, size_t *N, size_t *elems) {
  if (!p || !p->q || !p->k || !p->v || !p->beta || !p->decay)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: NULL argument (p, q, k, v, beta and decay are required)", op);
  if (!p->B || !p->H || !p->D || !p->F || !p->S)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: every dimension must be > 0 (B=%zu H=%zu D=%zu F=%zu S=%zu)", op, p->B,
                   p->H, p->D, p->F, p->S);
  const size_t f1[] = {p->B, p->H, p->D, p->F, p->S}, f2[] = {p->B, p->H, p->F, p->D, p->D};
  size_t a, b;
  if (!cd_prod(&a, 5, f1) || !cd_prod(&b, 5, f2) || !cd_mul(N, p->F, p->S) || a > SIZE_MAX / sizeof(double) ||
      b > SIZE_MAX / sizeof(double))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "%s: sizes overflow size_t", op);
  *elems = a;
  return CAMDELTA_OK;
}

camdelta_status camdelta_ref_scan_forward(const camdelta_ref_scan *p) {
  cd_clear_error();
  static const char op[] = "camdelta_ref_scan_forward";
  size_t N, elems;
  camdelta_status st = check_scan(op, p, &N, &elems);
  if (st) return st;
  (void)elems;
  const scan_geo geo = {.D = p->D, .F = p->F, .S = p->S, .N = N, .reverse = p->reverse != 0};
  const size_t D = p->D, DD = D * D, F = p->F;
  const size_t T = step_count(&geo, p->final_state != NULL);
  double *Ms = malloc((T + 1) * DD * sizeof *Ms), *Ps = malloc((T ? T : 1) * DD * sizeof *Ps);
  double *row = malloc(D * sizeof *row);
  if (!Ms || !Ps || !row) {
    free(Ms), free(Ps), free(row);
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (size_t bh = 0; bh < p->B * p->H; bh++) {
    const size_t tok = bh * D * N;
    const double *q = p->q + tok, *k = p->k + tok, *v = p->v + tok;
    run_steps(&geo, k, v, p->beta + bh * F * p->S, p->decay + bh * F, p->init_state ? p->init_state + bh * DD : NULL,
              T, Ms, Ps, row);
    double *spre = p->state_pre ? p->state_pre + bh * F * DD : NULL;
    double *spost = p->state_post ? p->state_post + bh * F * DD : NULL;
    if (geo.reverse) {
      /* output frame F−1 reads M_0 and has no update */
      if (p->out) frame_output(&geo, q, Ms, F - 1, p->out + tok);
      if (spre) mat_copy(spre + (F - 1) * DD, Ms, D);
      if (spost) mat_copy(spost + (F - 1) * DD, Ms, D);
    }
    for (size_t t = 1; t <= T; t++) {
      const long qf = step_out_frame(&geo, t);
      if (qf < 0) continue;
      if (p->out) frame_output(&geo, q, Ms + t * DD, (size_t)qf, p->out + tok);
      if (spre) mat_copy(spre + (size_t)qf * DD, Ps + (t - 1) * DD, D);
      if (spost) mat_copy(spost + (size_t)qf * DD, Ms + t * DD, D);
    }
    if (p->final_state) mat_copy(p->final_state + bh * DD, Ms + T * DD, D);
  }
  free(Ms), free(Ps), free(row);
  return CAMDELTA_OK;
}

/* Output-read backward: dM += Q_qfᵀ·dO_qf; dq_qf = dO_qf·Mᵀ. */
static void output_backward(const scan_geo *g, const double *q, const double *go, const double *M, size_t qf,
                            double *dM, double *dq) {
  const size_t D = g->D, N = g->N, S = g->S;
  for (size_t s = 0; s < S; s++) {
    const size_t n = qf * S + s;
    for (size_t a = 0; a < D; a++) {
      const double qa = q[a * N + n];
      double acc = 0;
      for (size_t c = 0; c < D; c++) {
        dM[a * D + c] += qa * go[c * N + n];
        acc += go[c * N + n] * M[a * D + c];
      }
      if (dq) dq[a * N + n] = acc;
    }
  }
}

camdelta_status camdelta_ref_scan_backward(const camdelta_ref_scan *p, const camdelta_ref_scan_grads *gr) {
  cd_clear_error();
  static const char op[] = "camdelta_ref_scan_backward";
  size_t N, elems;
  camdelta_status st = check_scan(op, p, &N, &elems);
  if (st) return st;
  if (!gr) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: NULL argument 'g'", op);
  const scan_geo geo = {.D = p->D, .F = p->F, .S = p->S, .N = N, .reverse = p->reverse != 0};
  const size_t D = p->D, DD = D * D, F = p->F, S = p->S;
  const size_t T = step_count(&geo, gr->grad_final_state != NULL);
  double *Ms = malloc((T + 1) * DD * sizeof *Ms), *Ps = malloc((T ? T : 1) * DD * sizeof *Ps);
  double *row = malloc(D * sizeof *row), *dM = malloc(DD * sizeof *dM), *dP = malloc(DD * sizeof *dP);
  double *R = malloc(S * D * sizeof *R), *dDel = malloc(S * D * sizeof *dDel);
  if (!Ms || !Ps || !row || !dM || !dP || !R || !dDel) {
    free(Ms), free(Ps), free(row), free(dM), free(dP), free(R), free(dDel);
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  /* frames no step touches (reverse frame 0 without a final-state gradient) get zero gradients */
  if (gr->dk) memset(gr->dk, 0, elems * sizeof *gr->dk);
  if (gr->dv) memset(gr->dv, 0, elems * sizeof *gr->dv);
  if (gr->dq) memset(gr->dq, 0, elems * sizeof *gr->dq);
  if (gr->dbeta) memset(gr->dbeta, 0, p->B * p->H * F * S * sizeof *gr->dbeta);
  if (gr->ddecay) memset(gr->ddecay, 0, p->B * p->H * F * sizeof *gr->ddecay);
  for (size_t bh = 0; bh < p->B * p->H; bh++) {
    const size_t tok = bh * D * N;
    const double *q = p->q + tok, *k = p->k + tok, *v = p->v + tok;
    const double *beta = p->beta + bh * F * S, *decay = p->decay + bh * F;
    const double *go = gr->grad_out ? gr->grad_out + tok : NULL;
    double *dq = gr->dq ? gr->dq + tok : NULL, *dk = gr->dk ? gr->dk + tok : NULL, *dv = gr->dv ? gr->dv + tok : NULL;
    double *dbeta = gr->dbeta ? gr->dbeta + bh * F * S : NULL, *ddecay = gr->ddecay ? gr->ddecay + bh * F : NULL;
    run_steps(&geo, k, v, beta, decay, p->init_state ? p->init_state + bh * DD : NULL, T, Ms, Ps, row);
    if (gr->grad_final_state) mat_copy(dM, gr->grad_final_state + bh * DD, D);
    else memset(dM, 0, DD * sizeof *dM);
    for (size_t t = T; t >= 1; t--) {
      const long qf = step_out_frame(&geo, t);
      const double *Mt = Ms + t * DD, *P = Ps + (t - 1) * DD, *Mprev = Ms + (t - 1) * DD;
      if (qf >= 0) {
        if (go) output_backward(&geo, q, go, Mt, (size_t)qf, dM, dq);
      }
      const size_t kf = step_key_frame(&geo, t);
      const double gt = decay[kf];
      /* R = V − K·P, dΔ = K·dM (rows s, cols = value dim) */
      for (size_t s = 0; s < S; s++) {
        const size_t n = kf * S + s;
        for (size_t c = 0; c < D; c++) {
          double pred = 0, dd = 0;
          for (size_t a = 0; a < D; a++) {
            pred += k[a * N + n] * P[a * D + c];
            dd += k[a * N + n] * dM[a * D + c];
          }
          R[s * D + c] = v[c * N + n] - pred;
          dDel[s * D + c] = dd;
        }
      }
      mat_copy(dP, dM, D);
      for (size_t s = 0; s < S; s++) {
        const size_t n = kf * S + s;
        const double b = beta[kf * S + s];
        double db = 0;
        for (size_t c = 0; c < D; c++) db += dDel[s * D + c] * R[s * D + c];
        if (dbeta) dbeta[kf * S + s] = db;
        if (dv)
          for (size_t c = 0; c < D; c++) dv[c * N + n] = b * dDel[s * D + c];
        /* dk[s,a] = Σ_c dM[a,c]·Δ[s,c] − Σ_c (β·dΔ)[s,c]·P[a,c] */
        for (size_t a = 0; a < D; a++) {
          double acc = 0;
          for (size_t c = 0; c < D; c++) acc += dM[a * D + c] * b * R[s * D + c] - b * dDel[s * D + c] * P[a * D + c];
          if (dk) dk[a * N + n] = acc;
          const double ka = k[a * N + n];
          for (size_t c = 0; c < D; c++) dP[a * D + c] -= ka * b * dDel[s * D + c];
        }
      }
      double dg = 0;
      for (size_t i = 0; i < DD; i++) dg += dP[i] * Mprev[i];
      if (ddecay) ddecay[kf] = dg;
      for (size_t i = 0; i < DD; i++) dM[i] = gt * dP[i];
    }
    if (geo.reverse && go) output_backward(&geo, q, go, Ms, F - 1, dM, dq);
    if (gr->dinit_state) mat_copy(gr->dinit_state + bh * DD, dM, D);
  }
  free(Ms), free(Ps), free(row), free(dM), free(dP), free(R), free(dDel);
  return CAMDELTA_OK;
}
