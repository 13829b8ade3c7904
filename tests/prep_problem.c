#include "prep_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void prep_problem_init(prep_problem *p, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dt, uint64_t seed,
                       size_t zero_k_every) {
  memset(p, 0, sizeof *p);
  p->B = B, p->N = N, p->H = H, p->D = D, p->dtype = dt;
  p->k_scale = (float)(1.0 / sqrt((double)D));
  p->norm_eps = 1e-6f;
  const size_t BNHD = B * N * H * D, Dh = D / 2;
  const size_t counts[9] = {BNHD, BNHD, BNHD, H * D, H * D, B * N * 16, B * N * 16, N * Dh, N * Dh};
  tu_seed(seed);
  for (int i = 0; i < 9; i++) {
    p->count[i] = counts[i];
    p->in[i] = malloc((counts[i] ? counts[i] : 1) * sizeof(float));
    assert_non_null(p->in[i]);
  }
  for (int i = 0; i < 3; i++) tu_fill_normal(p->in[i], BNHD, 1.0);
  tu_fill_uniform(p->in[3], H * D, 0.5, 1.5);
  tu_fill_uniform(p->in[4], H * D, 0.5, 1.5);
  tu_fill_normal(p->in[5], B * N * 16, 0.7);
  tu_fill_normal(p->in[6], B * N * 16, 0.7);
  for (size_t n = 0; n < N; n++) {
    for (size_t i = 0; i < Dh / 2; i++) {
      double th = tu_uniform(-3.14159, 3.14159);
      p->in[7][n * Dh + 2 * i] = p->in[7][n * Dh + 2 * i + 1] = (float)cos(th);
      p->in[8][n * Dh + 2 * i] = (float)-sin(th);
      p->in[8][n * Dh + 2 * i + 1] = (float)sin(th);
    }
  }
  if (zero_k_every)
    for (size_t b = 0; b < B; b++)
      for (size_t n = 0; n < N; n += zero_k_every) memset(p->in[1] + (b * N + n) * H * D, 0, H * D * sizeof(float));
  for (int i = 0; i < 3; i++) tu_round_to(dt, p->in[i], BNHD);
}

void prep_problem_free(prep_problem *p) {
  for (int i = 0; i < 9; i++) free(p->in[i]);
}

void prep_problem_reference(const prep_problem *p, double **q, double **k, double **v, double **infl) {
  double *in[9];
  for (int i = 0; i < 9; i++) in[i] = tu_to_f64(p->in[i], p->count[i]);
  const size_t BNHD = p->B * p->N * p->H * p->D;
  camdelta_ref_prep r = {p->B, p->N, p->H, p->D, p->k_scale, p->norm_eps, in[0], in[1], in[2], in[3], in[4],
                         in[5], in[6], in[7], in[8], NULL, NULL, NULL, NULL};
  if (q) r.q = *q = malloc(BNHD * sizeof(double));
  if (k) r.k = *k = malloc(BNHD * sizeof(double));
  if (v) r.v = *v = malloc(BNHD * sizeof(double));
  if (infl) r.inflation_sq = *infl = malloc(p->B * p->H * p->N * sizeof(double));
  TU_OK(camdelta_ref_prep_forward(&r));
  for (int i = 0; i < 9; i++) free(in[i]);
}
