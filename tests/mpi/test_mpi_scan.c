/* Sequence parallelism over MPI (camdelta_mpi.h): run under `mpirun -np P` (P = 1 … 4). Every rank builds the
 * same random problems, takes its contiguous share of frames (camdelta_mpi_frame_share: uneven when F % P != 0,
 * a single frame per rank when F = P), and runs camdelta_mpi_scan_forward / camdelta_mpi_scan_backward; rank 0
 * runs the whole sequence on one device and every rank's share must equal it within 1e-6 relative
 * (max |x − one device| over the share / max |one device| over the whole tensor), forward and backward, both
 * directions, with and without init/final states, both forward algorithms, and the backward from the MPI
 * forward's saved states. Bad input on one rank must fail every rank with the same status, the message naming
 * the rank, and nothing written. Prints "[ measure  ]" lines with the largest differences for this rank count.
 * Exit status 0 on success (on every rank). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_mpi.h"
#include "mpi_harness.h"

#define BOUND 1e-6


/* The problem, identical on every rank. */
typedef struct prob {
  size_t B, H, D, F, S, N, BH;
  float *q, *k, *v, *beta, *decay, *init, *go, *gf;
} prob;

static void prob_make(prob *p, size_t B, size_t H, size_t D, size_t F, size_t S, uint64_t seed) {
  p->B = B, p->H = H, p->D = D, p->F = F, p->S = S, p->N = F * S, p->BH = B * H;
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  const size_t nt = p->BH * D * p->N;
  const double kscale = 1.7 / sqrt((double)D * (double)S);
  p->q = randv(nt, -1, 1), p->k = randv(nt, -kscale, kscale), p->v = randv(nt, -1, 1), p->go = randv(nt, -1, 1);
  p->beta = randv(p->BH * p->N, 0, 1), p->decay = randv(p->BH * F, 0.6, 1.0);
  p->init = randv(p->BH * D * D, -0.5, 0.5), p->gf = randv(p->BH * D * D, -0.5, 0.5);
}

static void prob_free(prob *p) {
  free(p->q), free(p->k), free(p->v), free(p->go), free(p->beta), free(p->decay), free(p->init), free(p->gf);
}

/* outputs: forward out, final; backward dq dk dv dbeta ddecay dinit */
enum { O_OUT, O_FIN, O_DQ, O_DK, O_DV, O_DB, O_DD, O_DI, O_COUNT };
static const char *const O_NAME[O_COUNT] = {"out", "final_state", "dq", "dk", "dv", "dbeta", "ddecay", "dinit_state"};
static double g_worst[O_COUNT];

typedef struct cfg {
  size_t B, H, D, F, S;
  int reverse, with_init, with_final, algorithm, use_saved;
} cfg;

/* Sizes of a tensor kind for F frames: rows and columns per row (tokens or frames). */
static void shape_of(const prob *p, int o, size_t F, size_t *rows, size_t *cols) {
  const size_t D = p->D;
  switch (o) {
    case O_OUT: case O_DQ: case O_DK: case O_DV: *rows = p->BH * D, *cols = F * p->S; return;
    case O_DB: *rows = p->BH, *cols = F * p->S; return;
    case O_DD: *rows = p->BH, *cols = F; return;
    default: *rows = 1, *cols = p->BH * D * D; return;
  }
}

static void run_case(const cfg *c, uint64_t seed) {
  prob p;
  prob_make(&p, c->B, c->H, c->D, c->F, c->S, seed);
  const size_t D = p.D, S = p.S, BH = p.BH, ns = BH * D * D;
  /* ---- one device, on rank 0, broadcast */
  float *ref[O_COUNT];
  size_t rows, cols;
  for (int o = 0; o < O_COUNT; o++) {
    shape_of(&p, o, p.F, &rows, &cols);
    ref[o] = malloc(rows * cols * 4 + 4);
  }
  if (g_rank == 0) {
    const size_t nt = BH * D * p.N;
    cl_mem q = upload(p.q, nt), k = upload(p.k, nt), v = upload(p.v, nt), b = upload(p.beta, BH * p.N),
           d = upload(p.decay, BH * p.F), in = upload(p.init, ns), go = upload(p.go, nt), gf = upload(p.gf, ns);
    cl_mem m[O_COUNT];
    for (int o = 0; o < O_COUNT; o++) shape_of(&p, o, p.F, &rows, &cols), m[o] = poisoned(rows * cols);
    camdelta_scan_args a;
    memset(&a, 0, sizeof a);
    a.B = p.B, a.H = p.H, a.D = D, a.F = p.F, a.S = S, a.reverse = c->reverse, a.algorithm = c->algorithm;
    a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = b, a.decay.mem = d, a.out.mem = m[O_OUT];
    if (c->with_init) a.init_state.mem = in;
    a.final_state.mem = m[O_FIN];
    camdelta_scan_saved *rsaved = NULL; /* the same path as the ranks: with or without saved states */
    if (c->use_saved) OK(camdelta_scan_saved_create(g_ctx, &rsaved));
    OK(camdelta_scan_forward(g_ctx, &a, rsaved));
    camdelta_scan_backward_args ba;
    memset(&ba, 0, sizeof ba);
    ba.B = p.B, ba.H = p.H, ba.D = D, ba.F = p.F, ba.S = S, ba.reverse = c->reverse;
    ba.q.mem = q, ba.k.mem = k, ba.v.mem = v, ba.beta.mem = b, ba.decay.mem = d, ba.grad_out.mem = go;
    if (c->with_init) ba.init_state.mem = in;
    if (c->with_final) ba.grad_final_state.mem = gf;
    ba.dq.mem = m[O_DQ], ba.dk.mem = m[O_DK], ba.dv.mem = m[O_DV], ba.dbeta.mem = m[O_DB], ba.ddecay.mem = m[O_DD];
    ba.dinit_state.mem = m[O_DI];
    OK(camdelta_scan_backward(g_ctx, &ba, rsaved));
    camdelta_scan_saved_destroy(rsaved);
    for (int o = 0; o < O_COUNT; o++) {
      shape_of(&p, o, p.F, &rows, &cols);
      free(ref[o]);
      ref[o] = download(m[o], rows * cols);
      clReleaseMemObject(m[o]);
    }
    cl_mem rel[8] = {q, k, v, b, d, in, go, gf};
    for (int i = 0; i < 8; i++) clReleaseMemObject(rel[i]);
  }
  for (int o = 0; o < O_COUNT; o++) {
    shape_of(&p, o, p.F, &rows, &cols);
    MPI_Bcast(ref[o], (int)(rows * cols), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  /* ---- this rank's share */
  size_t f0, fl;
  camdelta_mpi_frame_share(p.F, g_size, g_rank, &f0, &fl);
  const size_t n0 = f0 * S, nl = fl * S;
  float *lq = slice(p.q, BH * D, p.N, n0, nl), *lk = slice(p.k, BH * D, p.N, n0, nl);
  float *lv = slice(p.v, BH * D, p.N, n0, nl), *lgo = slice(p.go, BH * D, p.N, n0, nl);
  float *lb = slice(p.beta, BH, p.N, n0, nl), *ld = slice(p.decay, BH, p.F, f0, fl);
  cl_mem q = upload(lq, BH * D * nl), k = upload(lk, BH * D * nl), v = upload(lv, BH * D * nl),
         go = upload(lgo, BH * D * nl), b = upload(lb, BH * nl), d = upload(ld, BH * fl), in = upload(p.init, ns),
         gf = upload(p.gf, ns);
  cl_mem m[O_COUNT];
  for (int o = 0; o < O_COUNT; o++) shape_of(&p, o, fl, &rows, &cols), m[o] = poisoned(rows * cols);
  camdelta_scan_saved *saved = NULL;
  if (c->use_saved) OK(camdelta_scan_saved_create(g_ctx, &saved));
  camdelta_scan_args a;
  memset(&a, 0, sizeof a);
  a.B = p.B, a.H = p.H, a.D = D, a.F = fl, a.S = S, a.reverse = c->reverse, a.algorithm = c->algorithm;
  a.q.mem = q, a.k.mem = k, a.v.mem = v, a.beta.mem = b, a.decay.mem = d, a.out.mem = m[O_OUT];
  if (c->with_init) a.init_state.mem = in;
  a.final_state.mem = m[O_FIN];
  camdelta_mpi_timing tf, tb;
  OK(camdelta_mpi_scan_forward(g_ctx, &a, saved, MPI_COMM_WORLD, &tf));
  camdelta_scan_backward_args ba;
  memset(&ba, 0, sizeof ba);
  ba.B = p.B, ba.H = p.H, ba.D = D, ba.F = fl, ba.S = S, ba.reverse = c->reverse;
  ba.q.mem = q, ba.k.mem = k, ba.v.mem = v, ba.beta.mem = b, ba.decay.mem = d, ba.grad_out.mem = go;
  if (c->with_init) ba.init_state.mem = in;
  if (c->with_final) ba.grad_final_state.mem = gf;
  ba.dq.mem = m[O_DQ], ba.dk.mem = m[O_DK], ba.dv.mem = m[O_DV], ba.dbeta.mem = m[O_DB], ba.ddecay.mem = m[O_DD];
  ba.dinit_state.mem = m[O_DI];
  OK(camdelta_mpi_scan_backward(g_ctx, &ba, saved, MPI_COMM_WORLD, &tb));
  camdelta_scan_saved_destroy(saved);
  /* ---- compare the share with the one-device result */
  char line[512];
  int len = snprintf(line, sizeof line, "P=%d F=%zu (frames %zu..%zu here) %s init=%d final=%d %s%s:", g_size, p.F, f0,
                     f0 + fl - 1, c->reverse ? "reverse" : "causal", c->with_init, c->with_final,
                     camdelta_scan_algorithm_name((camdelta_scan_algorithm)c->algorithm), c->use_saved ? " saved" : "");
  for (int o = 0; o < O_COUNT; o++) {
    shape_of(&p, o, p.F, &rows, &cols);
    double mref = 0, mdiff = 0;
    for (size_t i = 0; i < rows * cols; i++) mref = fmax(mref, fabs(ref[o][i]));
    size_t lr, lc;
    shape_of(&p, o, fl, &lr, &lc);
    float *x = download(m[o], lr * lc);
    /* the share's columns in the full tensor */
    const size_t c0 = (o == O_FIN || o == O_DI) ? 0 : o == O_DD ? f0 : n0;
    for (size_t r = 0; r < lr; r++)
      for (size_t j = 0; j < lc; j++) {
        const double dv = fabs((double)x[r * lc + j] - ref[o][r * cols + c0 + j]);
        mdiff = isnan(dv) ? INFINITY : fmax(mdiff, dv);
      }
    free(x);
    double all = 0;
    MPI_Allreduce(&mdiff, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double e = all / fmax(mref, 1e-30);
    g_worst[o] = fmax(g_worst[o], e);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1e", O_NAME[o], e);
    CHECK(e <= BOUND, "%s: %s differs from one device by %.3e relative (bound %.0e)", line, O_NAME[o], e, BOUND);
  }
  if (g_rank == 0) printf("%s\n", line);
  /* timing of this rank (small shapes: only a sanity check that the phases were measured) */
  CHECK(tf.total_ms > 0 && tb.total_ms >= tb.scan_ms && tb.scan_ms > 0, "timing not filled");
  const camdelta_mpi_timing *tt[2] = {&tf, &tb};
  for (int i = 0; i < 2; i++) {
    const camdelta_mpi_timing *t = tt[i];
    const double parts = t->summary_ms + t->wait_ms + t->exchange_ms + t->combine_ms + t->scan_ms;
    CHECK(t->summary_ms >= 0 && t->wait_ms >= 0 && t->exchange_ms >= 0 && t->combine_ms >= 0 &&
              fabs(t->compute_ms - (t->summary_ms + t->combine_ms + t->scan_ms)) < 1e-9 && parts <= t->total_ms + 1e-6,
          "%s timing: summary %g wait %g exchange %g combine %g scan %g compute %g total %g", i ? "backward" : "forward",
          t->summary_ms, t->wait_ms, t->exchange_ms, t->combine_ms, t->scan_ms, t->compute_ms, t->total_ms);
    /* one rank has nothing to exchange; several exchange something (and the exchange is timed apart) */
    CHECK(g_size == 1 ? t->exchange_ms == 0 && t->wait_ms == 0 : t->exchange_ms > 0, "%s timing: exchange %g with P=%d",
          i ? "backward" : "forward", t->exchange_ms, g_size);
    /* the exchange's legs: none negative, together the exchange */
    CHECK(t->d2h_ms >= 0 && t->mpi_ms >= 0 && t->h2d_ms >= 0 &&
              fabs(t->d2h_ms + t->mpi_ms + t->h2d_ms - t->exchange_ms) <= 1e-9 + 1e-9 * t->exchange_ms,
          "%s timing: exchange %g = d2h %g + mpi %g + h2d %g?", i ? "backward" : "forward", t->exchange_ms, t->d2h_ms,
          t->mpi_ms, t->h2d_ms);
  }
  for (int o = 0; o < O_COUNT; o++) free(ref[o]), clReleaseMemObject(m[o]);
  cl_mem rel[8] = {q, k, v, b, d, in, go, gf};
  for (int i = 0; i < 8; i++) clReleaseMemObject(rel[i]);
  free(lq), free(lk), free(lv), free(lgo), free(lb), free(ld);
  prob_free(&p);
}

/* Bad input on one rank fails every rank with the same status, before anything is written:
 * 0: the last rank calls with another S (its buffers are large enough: only the other ranks can tell),
 * 1: the last rank's decay buffer is too small (offset 1),
 * 2, 3: the last rank's final_state is its k (the MPI checks pass; the local scan's own check fails on that rank
 *    only, so the other ranks, already inside the scan and waiting for the summaries, must learn it there),
 *    chunkwise (the callback after phase A) and sequential (the callback before the only launch). */
static void bad_input(void) {
  const size_t D = 16, S = 3, F = 1, nt = D * F * S, ns = D * D;
  g_rng = 77;
  float *x = randv(nt, -0.1, 0.1), *bb = randv(F * S, 0, 1), *dd = randv(F, 0.5, 1);
  cl_mem q = upload(x, nt), b = upload(bb, F * S), d = upload(dd, F), out = poisoned(nt), fin = poisoned(ns);
  const size_t nk = nt > ns ? nt : ns; /* k, large enough to be a final_state too */
  float *kx = randv(nk, -0.1, 0.1);
  cl_mem kk = upload(kx, nk);
  const int culprit = g_size - 1;
  for (int which = 0; which < 4; which++) {
    if (which == 0 && g_size == 1) continue;
    camdelta_scan_args a;
    memset(&a, 0, sizeof a);
    a.B = 1, a.H = 1, a.D = D, a.F = F, a.S = S;
    a.q.mem = q, a.k.mem = q, a.v.mem = q, a.beta.mem = b, a.decay.mem = d, a.out.mem = out, a.final_state.mem = fin;
    a.algorithm = which == 3 ? CAMDELTA_SCAN_SEQUENTIAL : CAMDELTA_SCAN_CHUNKWISE;
    if (which >= 2) a.k.mem = kk;
    if (g_rank == culprit) {
      if (which == 0) a.S = S - 1;
      else if (which == 1) a.decay.offset = 1;
      else a.final_state.mem = kk;
    }
    const camdelta_status want = which == 0   ? CAMDELTA_ERROR_SHAPE
                                 : which == 1 ? CAMDELTA_ERROR_BUFFER_TOO_SMALL
                                              : CAMDELTA_ERROR_INVALID_ARGUMENT;
    const char *const names[4] = {"same B, H, D, S", "'decay'", "'final_state' overlaps input 'k'",
                                  "'final_state' overlaps input 'k'"};
    const camdelta_status st = camdelta_mpi_scan_forward(g_ctx, &a, NULL, MPI_COMM_WORLD, NULL);
    char who[32];
    snprintf(who, sizeof who, "rank %d", which == 0 ? 0 : culprit); /* the first rank that fails */
    const char *msg = camdelta_last_message();
    CHECK(st == want, "bad input %d: got %s, expected %s", which, camdelta_status_name(st), camdelta_status_name(want));
    CHECK(strstr(msg, who) && strstr(msg, names[which]), "bad input %d: message '%s'", which, msg);
    float *o = download(out, nt), *f = download(fin, ns);
    int untouched = 1;
    for (size_t i = 0; i < nt; i++) untouched &= isnan(o[i]) != 0;
    for (size_t i = 0; i < ns; i++) untouched &= isnan(f[i]) != 0;
    CHECK(untouched, "bad input %d: something was written", which);
    free(o), free(f);
    if (g_rank == 0) printf("bad input %d: %s: %s\n", which, camdelta_status_name(st), msg);
  }
  float *kd = download(kk, nk);
  CHECK(memcmp(kd, kx, nk * 4) == 0, "bad input: k was written");
  free(kd);
  clReleaseMemObject(q), clReleaseMemObject(b), clReleaseMemObject(d), clReleaseMemObject(out), clReleaseMemObject(fin);
  clReleaseMemObject(kk);
  free(x), free(bb), free(dd), free(kx);
}

/* Run under mpirun with CAMDELTA_SP_CHUNK_BYTES different on the ranks (and CD_TEST_CHUNK_MISMATCH set): every
 * rank fails with CAMDELTA_ERROR_INVALID_ARGUMENT naming the variable, nothing written (no rank waits for messages
 * of another size). */
static int chunk_mismatch(void) {
  const size_t D = 16, S = 3, F = 2, nt = D * F * S;
  g_rng = 78;
  float *x = randv(nt, -0.1, 0.1), *bb = randv(F * S, 0, 1), *dd = randv(F, 0.5, 1);
  cl_mem q = upload(x, nt), b = upload(bb, F * S), d = upload(dd, F), out = poisoned(nt);
  camdelta_scan_args a;
  memset(&a, 0, sizeof a);
  a.B = 1, a.H = 1, a.D = D, a.F = F, a.S = S, a.algorithm = CAMDELTA_SCAN_CHUNKWISE;
  a.q.mem = a.k.mem = a.v.mem = q, a.beta.mem = b, a.decay.mem = d, a.out.mem = out;
  const camdelta_status st = camdelta_mpi_scan_forward(g_ctx, &a, NULL, MPI_COMM_WORLD, NULL);
  const char *msg = camdelta_last_message();
  CHECK(g_size == 1 || (st == CAMDELTA_ERROR_INVALID_ARGUMENT && strstr(msg, "CAMDELTA_SP_CHUNK_BYTES")),
        "chunk mismatch: %s: %s", camdelta_status_name(st), msg);
  float *o = download(out, nt);
  int untouched = 1;
  for (size_t i = 0; i < nt; i++) untouched &= isnan(o[i]) != 0;
  CHECK(g_size == 1 || untouched, "chunk mismatch: out was written");
  if (g_rank == 0) printf("chunk mismatch: %s: %s\n", camdelta_status_name(st), msg);
  free(o), free(x), free(bb), free(dd);
  clReleaseMemObject(q), clReleaseMemObject(b), clReleaseMemObject(d), clReleaseMemObject(out);
  return finish();
}

/* camdelta_mpi_frame_share for frame counts near 2^64 (F * rank once wrapped, giving ranks overlapping or empty
 * shares): contiguous shares that cover [0, F), each floor(F/P) or one more, for every rank count up to 9. */
static void frame_share_extremes(void) {
  const size_t Fs[] = {1, 7, (size_t)1 << 40, SIZE_MAX / 3, SIZE_MAX - 5, SIZE_MAX};
  for (size_t i = 0; i < sizeof Fs / sizeof Fs[0]; i++)
    for (int P = 1; P <= 9; P++) {
      size_t next = 0;
      for (int r = 0; r < P; r++) {
        size_t f0, n;
        camdelta_mpi_frame_share(Fs[i], P, r, &f0, &n);
        CHECK(f0 == next && (n == Fs[i] / (size_t)P || n == Fs[i] / (size_t)P + 1),
              "F=%zu P=%d rank %d: share [%zu, +%zu) after %zu", Fs[i], P, r, f0, n, next);
        next = f0 + n;
      }
      CHECK(next == Fs[i], "F=%zu P=%d: the shares cover %zu frames", Fs[i], P, next);
    }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  frame_share_extremes();
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  OK(camdelta_context_create(&g_ctx, NULL));
  const size_t P = (size_t)g_size;
  const cfg cases[] = {
      /* B H  D   F      S  rev init fin algorithm                 saved */
      {1, 2, 16, 5, 5, 0, 1, 1, CAMDELTA_SCAN_SEQUENTIAL, 0},
      {1, 2, 16, 5, 5, 1, 1, 1, CAMDELTA_SCAN_SEQUENTIAL, 0},
      {2, 1, 16, P, 4, 0, 0, 0, CAMDELTA_SCAN_SEQUENTIAL, 1}, /* one frame per rank, no states */
      {2, 1, 16, P, 4, 1, 0, 0, CAMDELTA_SCAN_SEQUENTIAL, 1},
      {1, 1, 24, 2 * P + 1, 9, 0, 1, 0, CAMDELTA_SCAN_CHUNKWISE, 0},
      {1, 1, 24, 2 * P + 1, 9, 1, 0, 1, CAMDELTA_SCAN_CHUNKWISE, 1},
  };
  if (getenv("CD_TEST_CHUNK_MISMATCH")) return chunk_mismatch();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], 1000 + i);
    /* the staging kept for the communicator, freed halfway: the next calls make it again */
    if (i == 2) OK(camdelta_mpi_release_staging(MPI_COMM_WORLD));
  }
  bad_input();
  if (g_rank == 0)
    for (int o = 0; o < O_COUNT; o++)
      printf("[ measure  ] mpi P=%d %s max rel diff vs one device = %.3e\n", g_size, O_NAME[o], g_worst[o]);
  return finish();
}
