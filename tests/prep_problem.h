/* A random prep problem on the host, shared by the prep tests. */
#ifndef CD_PREP_PROBLEM_H
#define CD_PREP_PROBLEM_H
#include "testutil.h"

typedef struct prep_problem {
  size_t B, N, H, D;
  camdelta_dtype dtype;
  float k_scale, norm_eps;
  float *in[9]; /* q_raw k_raw v_raw qw kw proj_q proj_kv rope_cos rope_sin (f32, rounded to dtype) */
  size_t count[9];
} prep_problem;

/** Random inputs; `zero_k_every` > 0 zeroes all of k_raw for every such token. */
void prep_problem_init(prep_problem *p, size_t B, size_t N, size_t H, size_t D, camdelta_dtype dt, uint64_t seed,
                       size_t zero_k_every);
void prep_problem_free(prep_problem *p);
/** f64 reference outputs (each malloc'd, may pass NULL to skip). */
void prep_problem_reference(const prep_problem *p, double **q, double **k, double **v, double **infl);
#endif
