/* The whole camera branch over MPI (camdelta_mpi_branch_forward / _backward): run under `mpirun -np P`
 * (P = 1 … 4). Every rank builds the same random problems and takes its contiguous share of frames
 * (camdelta_mpi_frame_share: uneven when T % P != 0, one frame per rank when T = P, so the conv's 3-frame halo
 * spans several ranks); rank 0 runs the whole sequence with camdelta_branch_forward / _backward on one device and
 * every rank's share of y and of every gradient must equal it within 1e-6 relative (max |x − one device| over
 * the share / max |one device| over the whole tensor; dconv_weight and the norm weights' gradients whole, on
 * every rank). Chunkings: a chunk straddling ranks (T=7, cs=3: conv on the scan's chunks), first_frame chunks
 * (one-frame chunk masked), chunk_size >= T (one bidirectional conv segment) and no chunking. Bad input on one
 * rank fails every rank with the same status, the message naming the rank, and nothing written.
 * Prints "[ measure  ]" lines with the largest differences. Exit status 0 on success (on every rank). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_mpi.h"
#include "mpi_harness.h"
#include "se3.h"

#define BOUND 1e-6


/* Random cameras: rotations from random unit quaternions, translations in [-2, 2], focal lengths near the
 * image extent, principal points near its centre. */
static void cameras(float *cc, size_t n, size_t Hs, size_t Ws) {
  for (size_t i = 0; i < n; i++) {
    double q[4], t[3];
    for (int j = 0; j < 4; j++) q[j] = uni(-1, 1);
    for (int j = 0; j < 3; j++) t[j] = uni(-2, 2);
    float *c = cc + i * 20;
    tu_se3(q, t, c);
    c[16] = (float)(Ws * uni(0.6, 1.4)), c[17] = (float)(Hs * uni(0.6, 1.4));
    c[18] = (float)(Ws * uni(0.4, 0.6)), c[19] = (float)(Hs * uni(0.4, 0.6));
  }
}

typedef struct cfg {
  size_t B, H, D, T, Hs, Ws, cs;
  int strategy, algorithm, use_saved;
} cfg;

/* inputs */
enum { IQ, IK, IV, IW, IQW, IKW, ICC, IBETA, IDECAY, NIN };
/* outputs: y and the gradients */
enum { OY, ODQ, ODK, ODV, ODW, ODQW, ODKW, ODB, ODD, NOUT };
static const char *const O_NAME[NOUT] = {"y",  "dq_raw", "dk_raw", "dv_raw", "dconv_weight", "dq_norm_weight",
                                         "dk_norm_weight", "dbeta", "ddecay"};
static double g_worst[NOUT];

/* rows and per-frame columns of each tensor (0 columns per frame: not split, `rows` floats whole) */
static void layout_in(const cfg *c, int i, size_t *rows, size_t *per) {
  const size_t S = c->Hs * c->Ws, C = c->H * c->D;
  const size_t r[NIN] = {c->B, c->B, c->B, 4 * C, C, C, c->B, c->B * c->H, c->B * c->H};
  const size_t p[NIN] = {S * C, S * C, S * C, 0, 0, 0, 20, S, 1};
  *rows = r[i], *per = p[i];
}

static void layout_out(const cfg *c, int o, size_t *rows, size_t *per) {
  static const int in_of[NOUT] = {IQ, IQ, IK, IV, IW, IQW, IKW, IBETA, IDECAY};
  layout_in(c, in_of[o], rows, per);
}

static size_t count_of(size_t rows, size_t per, size_t T) { return per ? rows * per * T : rows; }

/* Branch forward + backward with these host inputs (F frames); mpi: over MPI_COMM_WORLD. Outputs malloc'd. */
static void run_branch(const cfg *c, float *const in[NIN], const float *gy, size_t F, int mpi, float *out[NOUT]) {
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = c->B, a.T = F, a.Hs = c->Hs, a.Ws = c->Ws, a.H = c->H, a.D = c->D, a.pt = 1, a.ph = 1, a.pw = 1;
  a.chunking.chunk_size = c->cs, a.chunking.strategy = (camdelta_chunk_strategy)c->strategy;
  a.k_scale = (float)(1.0 / sqrt((double)c->D * (double)(c->Hs * c->Ws))), a.norm_eps = 1e-6f;
  a.algorithm = (camdelta_scan_algorithm)c->algorithm;
  cl_mem m[NIN], g[NOUT];
  size_t rows, per, n[NOUT];
  for (int i = 0; i < NIN; i++) {
    layout_in(c, i, &rows, &per);
    m[i] = upload(in[i], count_of(rows, per, F));
  }
  camdelta_buffer *b[NIN] = {&a.q_raw, &a.k_raw, &a.v_raw, &a.conv_weight, &a.q_norm_weight, &a.k_norm_weight,
                             &a.camera_conditions, &a.beta, &a.decay};
  for (int i = 0; i < NIN; i++) *b[i] = (camdelta_buffer){m[i], 0};
  for (int o = 0; o < NOUT; o++) {
    layout_out(c, o, &rows, &per);
    n[o] = count_of(rows, per, F);
    g[o] = poisoned(n[o]);
  }
  a.y = (camdelta_buffer){g[OY], 0};
  camdelta_branch_grads gr;
  memset(&gr, 0, sizeof gr);
  cl_mem dgy = upload(gy, n[OY]);
  gr.grad_y = (camdelta_buffer){dgy, 0};
  camdelta_buffer *gb[NOUT] = {NULL, &gr.dq_raw, &gr.dk_raw, &gr.dv_raw, &gr.dconv_weight, &gr.dq_norm_weight,
                               &gr.dk_norm_weight, &gr.dbeta, &gr.ddecay};
  for (int o = 1; o < NOUT; o++) *gb[o] = (camdelta_buffer){g[o], 0};
  camdelta_branch_saved *saved = NULL;
  if (c->use_saved || !mpi) OK(camdelta_branch_saved_create(g_ctx, &saved));
  if (mpi && c->use_saved) { /* the timed calls (the same work, with this rank's wall-clock split) */
    camdelta_mpi_timing tt[2];
    OK(camdelta_mpi_branch_forward_timed(g_ctx, &a, saved, MPI_COMM_WORLD, &tt[0]));
    OK(camdelta_mpi_branch_backward_timed(g_ctx, &a, &gr, saved, MPI_COMM_WORLD, &tt[1]));
    for (int i = 0; i < 2; i++) {
      const camdelta_mpi_timing *t = &tt[i];
      const double parts = t->summary_ms + t->wait_ms + t->exchange_ms + t->combine_ms + t->scan_ms;
      CHECK(t->total_ms > 0 && t->wait_ms >= 0 && t->summary_ms >= 0 && t->combine_ms >= 0 && t->scan_ms >= 0 &&
                fabs(parts - t->total_ms) < 1e-6 * t->total_ms + 1e-9 &&
                fabs(t->compute_ms - (t->summary_ms + t->combine_ms + t->scan_ms)) < 1e-9 &&
                (g_size == 1 ? t->exchange_ms >= 0 : t->exchange_ms > 0),
            "branch %s timing: total %g summary %g wait %g exchange %g combine %g scan %g compute %g (P=%d)",
            i ? "backward" : "forward", t->total_ms, t->summary_ms, t->wait_ms, t->exchange_ms, t->combine_ms,
            t->scan_ms, t->compute_ms, g_size);
      CHECK(t->d2h_ms >= 0 && t->mpi_ms >= 0 && t->h2d_ms >= 0 &&
                fabs(t->d2h_ms + t->mpi_ms + t->h2d_ms - t->exchange_ms) <= 1e-6 + 1e-9 * t->exchange_ms,
            "branch %s timing: exchange %g = d2h %g + mpi %g + h2d %g?", i ? "backward" : "forward", t->exchange_ms,
            t->d2h_ms, t->mpi_ms, t->h2d_ms);
    }
  } else if (mpi) {
    OK(camdelta_mpi_branch_forward(g_ctx, &a, saved, MPI_COMM_WORLD));
    OK(camdelta_mpi_branch_backward(g_ctx, &a, &gr, saved, MPI_COMM_WORLD));
  } else {
    OK(camdelta_branch_forward(g_ctx, &a, saved));
    OK(camdelta_branch_backward(g_ctx, &a, &gr, saved));
  }
  camdelta_branch_saved_destroy(saved);
  for (int o = 0; o < NOUT; o++) out[o] = download(g[o], n[o]), clReleaseMemObject(g[o]);
  for (int i = 0; i < NIN; i++) clReleaseMemObject(m[i]);
  clReleaseMemObject(dgy);
}

static void run_case(const cfg *c, uint64_t seed) {
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  const size_t T = c->T, S = c->Hs * c->Ws, C = c->H * c->D;
  float *in[NIN], *gy;
  size_t rows, per;
  for (int i = 0; i < NIN; i++) {
    layout_in(c, i, &rows, &per);
    const size_t n = count_of(rows, per, T);
    in[i] = i == IW        ? randv(n, -0.6, 0.6)
            : i == IQW || i == IKW ? randv(n, 0.5, 1.5)
            : i == IBETA   ? randv(n, 0.1, 0.9)
            : i == IDECAY  ? randv(n, 0.5, 1.0)
                           : randv(n, -1.5, 1.5);
    if (i == ICC) cameras(in[i], c->B * T, c->Hs, c->Ws);
  }
  gy = randv(c->B * T * S * C, -1, 1);
  /* one device on rank 0, broadcast */
  float *ref[NOUT];
  size_t nref[NOUT];
  for (int o = 0; o < NOUT; o++) layout_out(c, o, &rows, &per), nref[o] = count_of(rows, per, T);
  if (g_rank == 0) run_branch(c, in, gy, T, 0, ref);
  else
    for (int o = 0; o < NOUT; o++) ref[o] = malloc(nref[o] * 4 + 4);
  for (int o = 0; o < NOUT; o++) MPI_Bcast(ref[o], (int)nref[o], MPI_FLOAT, 0, MPI_COMM_WORLD);
  /* this rank's share */
  size_t f0, F;
  camdelta_mpi_frame_share(T, g_size, g_rank, &f0, &F);
  float *mine[NIN], *got[NOUT];
  for (int i = 0; i < NIN; i++) {
    layout_in(c, i, &rows, &per);
    mine[i] = per ? slice(in[i], rows, per * T, per * f0, per * F) : slice(in[i], 1, rows, 0, rows);
  }
  float *gym = slice(gy, c->B, T * S * C, f0 * S * C, F * S * C);
  run_branch(c, mine, gym, F, 1, got);
  for (int o = 0; o < NOUT; o++) {
    layout_out(c, o, &rows, &per);
    float *r = per ? slice(ref[o], rows, per * T, per * f0, per * F) : slice(ref[o], 1, rows, 0, rows);
    const size_t n = per ? rows * per * F : rows;
    double mx = 0, diff = 0;
    for (size_t i = 0; i < nref[o]; i++) mx = fmax(mx, fabs(ref[o][i]));
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
      finite &= isfinite(got[o][i]) != 0;
      diff = fmax(diff, fabs((double)got[o][i] - r[i]));
    }
    const double rel = mx > 0 ? diff / mx : diff;
    CHECK(finite && rel <= BOUND && (mx > 0 || diff == 0),
          "T=%zu cs=%zu strategy %d: %s of frames [%zu, %zu): max rel diff %.3e (max |ref| %.3e, finite %d)", T,
          c->cs, c->strategy, O_NAME[o], f0, f0 + F, rel, mx, finite);
    double all = 0;
    MPI_Allreduce(&rel, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (all > g_worst[o]) g_worst[o] = all;
    free(r);
  }
  for (int i = 0; i < NIN; i++) free(in[i]), free(mine[i]);
  for (int o = 0; o < NOUT; o++) free(ref[o]), free(got[o]);
  free(gy), free(gym);
}

/* Bad input on the last rank (beta one frame short): every rank fails with the same status, naming that rank,
 * and y stays untouched. */
static void bad_input(void) {
  const cfg c = {1, 1, 16, (size_t)g_size + 1, 2, 2, 0, 0, CAMDELTA_SCAN_SEQUENTIAL, 1};
  size_t f0, F;
  camdelta_mpi_frame_share(c.T, g_size, g_rank, &f0, &F);
  const size_t S = 4, C = 16, nt = F * S * C;
  float *x = randv(nt + 4 * C + 20 * F, 0.5, 1.0);
  cl_mem t = upload(x, nt), w = upload(x, 4 * C), nw = upload(x, C), cc = upload(x, 20 * F);
  cl_mem beta = upload(x, g_rank == g_size - 1 ? (F - 1) * S : F * S), decay = upload(x, F), y = poisoned(nt);
  cameras(x, F, 2, 2);
  clEnqueueWriteBuffer(camdelta_context_queue(g_ctx), cc, CL_TRUE, 0, 20 * F * 4, x, 0, NULL, NULL);
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = 1, a.T = F, a.Hs = 2, a.Ws = 2, a.H = 1, a.D = 16, a.pt = a.ph = a.pw = 1, a.k_scale = 0.1f, a.norm_eps = 1e-6f;
  a.q_raw = a.k_raw = a.v_raw = (camdelta_buffer){t, 0};
  a.conv_weight = (camdelta_buffer){w, 0}, a.q_norm_weight = a.k_norm_weight = (camdelta_buffer){nw, 0};
  a.camera_conditions = (camdelta_buffer){cc, 0}, a.beta = (camdelta_buffer){beta, 0};
  a.decay = (camdelta_buffer){decay, 0}, a.y = (camdelta_buffer){y, 0};
  const camdelta_status st = camdelta_mpi_branch_forward(g_ctx, &a, NULL, MPI_COMM_WORLD);
  int mine = (int)st, lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(st == CAMDELTA_ERROR_BUFFER_TOO_SMALL && lo == hi, "bad input: status %s (min %d max %d)",
        camdelta_status_name(st), lo, hi);
  char who[32];
  snprintf(who, sizeof who, "rank %d of %d", g_size - 1, g_size);
  const char *msg = camdelta_last_message();
  CHECK(strstr(msg, who) && strstr(msg, "'beta'"), "bad input: message '%s'", msg);
  float *o = download(y, nt);
  int untouched = 1;
  for (size_t i = 0; i < nt; i++) untouched &= isnan(o[i]) != 0;
  CHECK(untouched, "bad input: y was written");
  if (g_rank == 0) printf("bad input: %s: %s\n", camdelta_status_name(st), msg);
  free(o), free(x);
  cl_mem rel[7] = {t, w, nw, cc, beta, decay, y};
  for (int i = 0; i < 7; i++) clReleaseMemObject(rel[i]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  OK(camdelta_context_create(&g_ctx, NULL));
  const size_t P = (size_t)g_size;
  const cfg cases[] = {
      /* B H  D   T          Hs Ws cs  strategy                               algorithm                saved */
      {1, 2, 16, 7, 2, 3, 3, CAMDELTA_CHUNK_UNIFORM, CAMDELTA_SCAN_SEQUENTIAL, 1},     /* chunk [3, 7) straddles */
      {2, 1, 16, P, 1, 2, 0, CAMDELTA_CHUNK_UNIFORM, CAMDELTA_SCAN_CHUNKWISE, 1},      /* one frame per rank */
      {1, 1, 16, 2 * P + 1, 2, 2, 2, CAMDELTA_CHUNK_FIRST_FRAME, CAMDELTA_SCAN_AUTO, 1},
      {1, 1, 16, 6, 2, 2, 2, CAMDELTA_CHUNK_UNIFORM, CAMDELTA_SCAN_SEQUENTIAL, 1},     /* T % cs == 0 conv segments */
      {1, 1, 16, P + 2, 2, 2, 16, CAMDELTA_CHUNK_UNIFORM, CAMDELTA_SCAN_SEQUENTIAL, 0}, /* cs >= T, recompute */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (cases[i].T >= P) run_case(&cases[i], 2000 + i);
  bad_input();
  if (g_rank == 0)
    for (int o = 0; o < NOUT; o++)
      printf("[ measure  ] mpi branch P=%d %s max rel diff vs one device = %.3e\n", g_size, O_NAME[o], g_worst[o]);
  return finish();
}
