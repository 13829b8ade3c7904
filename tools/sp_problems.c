/* The synthetic problems of demo and bench --sequence-parallel (tools/sp_problems.h). */
#include "sp_problems.h"

#ifdef CAMDELTA_WITH_MPI

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_budget(const char *cmd, const sp_shape *s, int whole, int branch, camdelta_context *ctx) {
  cli_budget b = {0, 0, 0, 0};
  size_t N = 0, tok = 0, st = 0, C = 0, bnc = 0;
  if (!camdelta_size_mul(&N, s->F, s->S) || !camdelta_size_prod(&tok, 4, (const size_t[]){s->B, s->H, s->D, N}) ||
      !camdelta_size_prod(&st, 4, (const size_t[]){s->B, s->H, s->D, s->D}) || !camdelta_size_mul(&C, s->H, s->D) ||
      !camdelta_size_prod(&bnc, 3, (const size_t[]){s->B, N, C}) || tok > (size_t)2147483647 ||
      bnc > (size_t)2147483647)
    b.overflow = 1; /* (MPI_Bcast counts are int) */
  cli_budget_device(&b, 10, tok, 4); /* q k v grad_out out dq dk dv, beta and its gradient within */
  cli_budget_device(&b, 4, st, 4);
  if (whole) cli_budget_host(&b, 4 + 8, tok, 4); /* the problem and the broadcast references */
  if (branch) {
    cli_budget_device(&b, 8, bnc, 4);
    if (whole) cli_budget_host(&b, 4 + 4, bnc, 4);
  }
  char what[320], shown[256];
  snprintf(what, sizeof what, "%s --sequence-parallel: shape %s", cmd, cli_escape(s->name, shown, sizeof shown));
  return cli_budget_check(&b, ctx, what);
}

static unsigned long long g_rng = 0x2545F4914F6CDD1Dull;

void sp_seed(size_t seed) { g_rng ^= (unsigned long long)seed * 0x9E3779B97F4A7C15ull; }

static float *rand_f(size_t n, double lo, double hi) {
  float *x = malloc(n ? n * 4 : 4);
  if (!x) return NULL;
  for (size_t i = 0; i < n; i++) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    x[i] = (float)(lo + (hi - lo) * (double)(g_rng >> 11) * (1.0 / 9007199254740992.0));
  }
  return x;
}

int sp_prob_make(sp_prob *p, const sp_shape *s, camdelta_scan_algorithm alg) {
  p->alg = alg;
  p->B = s->B, p->H = s->H, p->D = s->D, p->F = s->F, p->S = s->S, p->N = s->F * s->S, p->BH = s->B * s->H;
  const size_t nt = p->BH * p->D * p->N, ns = p->BH * p->D * p->D;
  const double ks = 1.7 / sqrt((double)p->D * (double)p->S);
  p->q = rand_f(nt, -1, 1), p->k = rand_f(nt, -ks, ks), p->v = rand_f(nt, -1, 1), p->go = rand_f(nt, -1, 1);
  p->beta = rand_f(p->BH * p->N, 0, 1), p->decay = rand_f(p->BH * p->F, 0.6, 1.0);
  p->init = rand_f(ns, -0.5, 0.5), p->gf = rand_f(ns, -0.5, 0.5);
  if (!p->q || !p->k || !p->v || !p->go || !p->beta || !p->decay || !p->init || !p->gf)
    return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  return CLI_EXIT_OK;
}

void sp_prob_free(sp_prob *p) {
  free(p->q), free(p->k), free(p->v), free(p->go), free(p->beta), free(p->decay), free(p->init), free(p->gf);
}

int sp_bufs_make(camdelta_context *ctx, const sp_prob *p, size_t f0, size_t F, sp_bufs *b) {
  memset(b, 0, sizeof *b);
  const size_t D = p->D, S = p->S, BH = p->BH, n0 = f0 * S, nl = F * S;
  const size_t tok = BH * D * nl, ns = BH * D * D;
  const size_t counts[B_COUNT] = {tok, tok, tok, BH * nl, BH * F, tok, ns, ns, tok, ns, tok, tok, tok, BH * nl, BH * F, ns};
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < B_COUNT && !rc; i++) {
    b->n[i] = counts[i];
    float *h = NULL;
    if (i <= B_GF) {
      if (p->q) {
        const float *src[8] = {p->q, p->k, p->v, p->beta, p->decay, p->go, p->init, p->gf};
        h = i == B_BETA ? sp_slice(src[i], BH, p->N, n0, nl)
          : i == B_DECAY ? sp_slice(src[i], BH, p->F, f0, F)
          : i >= B_INIT ? sp_slice(src[i], 1, ns, 0, ns)
                        : sp_slice(src[i], BH * D, p->N, n0, nl);
      } else {
        const double ks = 1.7 / sqrt((double)D * (double)S);
        h = i == B_K ? rand_f(counts[i], -ks, ks)
          : i == B_BETA ? rand_f(counts[i], 0, 1)
          : i == B_DECAY ? rand_f(counts[i], 0.6, 1.0)
                         : rand_f(counts[i], -0.5, 0.5);
      }
      if (!h) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    }
    if (!rc) rc = sp_upload(ctx, h, counts[i], &b->m[i]);
    free(h);
  }
  return rc;
}

void sp_bufs_free(sp_bufs *b) {
  for (int i = 0; i < B_COUNT; i++)
    if (b->m[i]) clReleaseMemObject(b->m[i]);
}

camdelta_status sp_run_fwd(camdelta_context *ctx, const sp_prob *p, size_t F, sp_bufs *b, int reverse, int mpi,
                               camdelta_mpi_timing *tm) {
  camdelta_scan_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = F, a.S = p->S, a.reverse = reverse, a.algorithm = p->alg;
  a.q.mem = b->m[B_Q], a.k.mem = b->m[B_K], a.v.mem = b->m[B_V], a.beta.mem = b->m[B_BETA];
  a.decay.mem = b->m[B_DECAY], a.init_state.mem = b->m[B_INIT], a.out.mem = b->m[B_OUT], a.final_state.mem = b->m[B_FIN];
  if (mpi) return camdelta_mpi_scan_forward(ctx, &a, NULL, MPI_COMM_WORLD, tm);
  camdelta_status st = camdelta_scan_forward(ctx, &a, NULL);
  return st ? st : camdelta_finish(ctx);
}

camdelta_status sp_run_bwd(camdelta_context *ctx, const sp_prob *p, size_t F, sp_bufs *b, int reverse, int mpi,
                               camdelta_mpi_timing *tm) {
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.H = p->H, a.D = p->D, a.F = F, a.S = p->S, a.reverse = reverse;
  a.q.mem = b->m[B_Q], a.k.mem = b->m[B_K], a.v.mem = b->m[B_V], a.beta.mem = b->m[B_BETA];
  a.decay.mem = b->m[B_DECAY], a.init_state.mem = b->m[B_INIT], a.grad_out.mem = b->m[B_GO];
  a.grad_final_state.mem = b->m[B_GF];
  a.dq.mem = b->m[B_DQ], a.dk.mem = b->m[B_DK], a.dv.mem = b->m[B_DV], a.dbeta.mem = b->m[B_DB];
  a.ddecay.mem = b->m[B_DD], a.dinit_state.mem = b->m[B_DI];
  if (mpi) return camdelta_mpi_scan_backward(ctx, &a, NULL, MPI_COMM_WORLD, tm);
  camdelta_status st = camdelta_scan_backward(ctx, &a, NULL);
  return st ? st : camdelta_finish(ctx);
}

/* ------------------------------------------------------------------------------ the branch over ranks */

void sp_br_free(sp_br_prob *p) {
  for (int i = 0; i < BR_NIN; i++) free(p->in[i]), p->in[i] = NULL;
}

int sp_br_make(sp_br_prob *p, const sp_shape *s, camdelta_scan_algorithm alg) {
  memset(p, 0, sizeof *p);
  p->alg = alg;
  size_t hs, ws;
  cli_grid_of(s->S, &hs, &ws);
  p->B = s->B, p->H = s->H, p->D = s->D, p->T = s->F, p->Hs = hs, p->Ws = ws, p->S = s->S, p->C = s->H * s->D;
  p->cs = s->F / 3 < 3 ? 3 : s->F / 3;
  if (p->cs >= p->T) p->cs = 0;
  const size_t B = p->B, C = p->C, T = p->T, S = p->S, BH = p->B * p->H;
  const size_t rows[BR_NIN] = {B, B, B, 4 * C, C, C, B, BH, BH, B}, unit[BR_NIN] = {S * C, S * C, S * C, 0, 0, 0, 20,
                                                                                  S, 1, S * C};
  const size_t orows[BO_N] = {B, B, B, B, 4 * C, C, C, BH, BH}, ounit[BO_N] = {S * C, S * C, S * C, S * C, 0, 0, 0, S, 1};
  memcpy(p->rows, rows, sizeof rows), memcpy(p->unit, unit, sizeof unit);
  memcpy(p->orows, orows, sizeof orows), memcpy(p->ounit, ounit, sizeof ounit);
  const double lo[BR_NIN] = {-1, -1, -1, -0.5, 0.8, 0.8, 0, 0.05, 0.85, -1}, hi[BR_NIN] = {1, 1, 1, 0.5, 1.2, 1.2, 0,
                                                                                         0.95, 1.0, 1};
  for (int i = 0; i < BR_NIN; i++) {
    const size_t n = rows[i] * (unit[i] ? T * unit[i] : 1);
    if (!(p->in[i] = rand_f(n, lo[i], hi[i]))) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  }
  /* cameras: an orbit of radius 3 around the origin at height 0.4, looking at it; fx = fy = 0.9·Ws */
  for (size_t b = 0; b < B; b++)
    for (size_t f = 0; f < T; f++) {
      float *cc = p->in[BR_CC] + (b * T + f) * 20;
      const double a = -0.4 + 0.8 * (double)f / (double)(T > 1 ? T - 1 : 1) + 0.1 * (double)b;
      const double c[3] = {3 * sin(a), 0.4, -3 * cos(a)};
      double z[3] = {-c[0], -c[1], -c[2]}, n = sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2]);
      for (int i = 0; i < 3; i++) z[i] /= n;
      double x[3] = {z[2], 0, -z[0]};
      n = sqrt(x[0] * x[0] + x[2] * x[2]);
      x[0] /= n, x[2] /= n;
      const double y[3] = {z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]};
      for (int i = 0; i < 3; i++)
        cc[4 * i] = (float)x[i], cc[4 * i + 1] = (float)y[i], cc[4 * i + 2] = (float)z[i], cc[4 * i + 3] = (float)c[i];
      cc[12] = cc[13] = cc[14] = 0, cc[15] = 1;
      cc[16] = cc[17] = (float)(0.9 * (double)p->Ws), cc[18] = (float)p->Ws / 2, cc[19] = (float)p->Hs / 2;
    }
  return CLI_EXIT_OK;
}

void sp_br_bufs_free(sp_br_bufs *b) {
  for (int i = 0; i < BR_NIN; i++)
    if (b->in[i]) clReleaseMemObject(b->in[i]);
  for (int i = 0; i < BO_N; i++)
    if (b->out[i]) clReleaseMemObject(b->out[i]);
  memset(b, 0, sizeof *b);
}

int sp_br_bufs_make(camdelta_context *ctx, const sp_br_prob *p, size_t f0, size_t fl, sp_br_bufs *b) {
  memset(b, 0, sizeof *b);
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < BR_NIN && !rc; i++) {
    const size_t u = p->unit[i];
    float *loc = u ? sp_slice(p->in[i], p->rows[i], p->T * u, f0 * u, fl * u) : NULL;
    if (u && !loc) rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    if (!rc) rc = sp_upload(ctx, u ? loc : p->in[i], p->rows[i] * (u ? fl * u : 1), &b->in[i]);
    free(loc);
  }
  for (int i = 0; i < BO_N && !rc; i++) {
    b->nout[i] = p->orows[i] * (p->ounit[i] ? fl * p->ounit[i] : 1);
    rc = sp_upload(ctx, NULL, b->nout[i], &b->out[i]);
  }
  return rc;
}

/* The branch forward (with `saved`) or backward (from `saved`) on fl frames; mpi: 1 over the ranks, 2 on this rank
 * alone through the MPI component (MPI_COMM_SELF: one device with the ranks' arithmetic, two scans where the
 * single-device branch fuses its scan pair), 0 the single-device call. */
camdelta_status sp_br_run(camdelta_context *ctx, const sp_br_prob *p, size_t fl, const sp_br_bufs *b, int backward,
                              camdelta_branch_saved *saved, int mpi, camdelta_mpi_timing *tm) {
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = p->B, a.T = fl, a.Hs = p->Hs, a.Ws = p->Ws, a.H = p->H, a.D = p->D, a.pt = a.ph = a.pw = 1;
  a.chunking.chunk_size = p->cs, a.chunking.strategy = CAMDELTA_CHUNK_UNIFORM, a.algorithm = p->alg;
  a.k_scale = (float)(1.0 / sqrt((double)p->D * (double)p->S)), a.norm_eps = 1e-6f;
  camdelta_buffer *ib[BR_NIN - 1] = {&a.q_raw,         &a.k_raw, &a.v_raw, &a.conv_weight, &a.q_norm_weight,
                                     &a.k_norm_weight, &a.camera_conditions, &a.beta, &a.decay};
  for (int i = 0; i < BR_NIN - 1; i++) *ib[i] = (camdelta_buffer){b->in[i], 0};
  a.y = (camdelta_buffer){b->out[BO_Y], 0};
  camdelta_status st;
  camdelta_mpi_timing self_tm;
  const MPI_Comm comm = mpi == 2 ? MPI_COMM_SELF : MPI_COMM_WORLD;
  if (!tm) tm = &self_tm;
  if (!backward) {
    st = mpi ? camdelta_mpi_branch_forward_timed(ctx, &a, saved, comm, tm)
             : camdelta_branch_forward(ctx, &a, saved);
  } else {
    camdelta_branch_grads g;
    memset(&g, 0, sizeof g);
    g.grad_y = (camdelta_buffer){b->in[BR_GY], 0};
    camdelta_buffer *ob[BO_N - 1] = {&g.dq_raw,         &g.dk_raw,         &g.dv_raw, &g.dconv_weight,
                                     &g.dq_norm_weight, &g.dk_norm_weight, &g.dbeta,  &g.ddecay};
    for (int i = 0; i < BO_N - 1; i++) *ob[i] = (camdelta_buffer){b->out[i + 1], 0};
    st = mpi ? camdelta_mpi_branch_backward_timed(ctx, &a, &g, saved, comm, tm)
             : camdelta_branch_backward(ctx, &a, &g, saved);
  }
  return st || mpi == 1 ? st : camdelta_finish(ctx);
}

#endif /* CAMDELTA_WITH_MPI */
