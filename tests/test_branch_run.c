/* The camera branch as a run (include/camdelta_phases.h): a run on a part of a sequence asks, in order, for what it
 * needs (the conv's halo, the two scans, the sums of the weights' gradients); a part that is the whole sequence,
 * driven by hand (no halo to fill, the scans run on this device, a sum over one part a copy), gives
 * camdelta_branch_forward's and _backward's results bit for bit where those run two scans (the sequential
 * algorithm); a part outside its sequence, and the run's own misuse, are rejected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch_problem.h"
#include "camdelta_phases.h"
#include "testutil.h"

typedef struct problem {
  size_t B, T, Hs, Ws, H, D, N, C, tok, frames;
  cl_mem in[9]; /* q_raw k_raw v_raw conv_weight q_norm_weight k_norm_weight camera_conditions beta decay */
  cl_mem grad_y;
} problem;

static void make(problem *p, size_t B, size_t T, size_t Hs, size_t Ws, size_t H, size_t D) {
  memset(p, 0, sizeof *p);
  p->B = B, p->T = T, p->Hs = Hs, p->Ws = Ws, p->H = H, p->D = D, p->N = T * Hs * Ws, p->C = H * D;
  p->tok = B * p->N * p->C, p->frames = B * H * T;
  const size_t n[9] = {p->tok, p->tok, p->tok, 4 * p->C, p->C, p->C, B * T * 20, B * H * p->N, p->frames};
  tu_seed(77);
  for (int i = 0; i < 9; i++) {
    float *x = malloc(n[i] * 4);
    assert_non_null(x);
    if (i == 6) bp_cameras(x, B, T, Hs, Ws, 1, 1);
    else if (i == 7) tu_fill_uniform(x, n[i], 0.0, 1.0);
    else if (i == 8) tu_fill_uniform(x, n[i], 0.6, 1.0);
    else tu_fill_normal(x, n[i], i < 3 ? 1.0 : 0.5);
    p->in[i] = tu_upload(x, n[i] * 4);
    free(x);
  }
  float *g = malloc(p->tok * 4);
  assert_non_null(g);
  tu_fill_normal(g, p->tok, 1.0);
  p->grad_y = tu_upload(g, p->tok * 4);
  free(g);
}

static void release(problem *p) {
  for (int i = 0; i < 9; i++) clReleaseMemObject(p->in[i]);
  clReleaseMemObject(p->grad_y);
}

static camdelta_buffer B_(cl_mem m) { return (camdelta_buffer){.mem = m, .offset = 0}; }

static camdelta_branch_args args_of(const problem *p, cl_mem y) {
  const camdelta_chunking chunking = {.chunk_size = 2, .strategy = CAMDELTA_CHUNK_FIRST_FRAME};
  const camdelta_branch_args a = {.B = p->B, .T = p->T, .Hs = p->Hs, .Ws = p->Ws, .H = p->H, .D = p->D, .pt = 1,
                                  .ph = 1, .pw = 1, .chunking = chunking, .k_scale = 0.05f, .norm_eps = 1e-6f,
                                  .algorithm = CAMDELTA_SCAN_SEQUENTIAL, .q_raw = B_(p->in[0]), .k_raw = B_(p->in[1]),
                                  .v_raw = B_(p->in[2]), .conv_weight = B_(p->in[3]),
                                  .q_norm_weight = B_(p->in[4]), .k_norm_weight = B_(p->in[5]),
                                  .camera_conditions = B_(p->in[6]), .beta = B_(p->in[7]), .decay = B_(p->in[8]),
                                  .y = B_(y)};
  return a;
}

/* Every gradient (dq_raw dk_raw dv_raw dconv_weight dq_norm_weight dk_norm_weight dbeta ddecay), poisoned. */
typedef struct grads {
  cl_mem m[8];
  camdelta_branch_grads g;
} grads;

static void grads_make(grads *g, const problem *p) {
  const size_t n[8] = {p->tok, p->tok, p->tok, 4 * p->C, p->C, p->C, p->B * p->H * p->N, p->frames};
  for (int i = 0; i < 8; i++) g->m[i] = bp_poison(n[i] * 4);
  g->g = (camdelta_branch_grads){.grad_y = B_(p->grad_y), .dq_raw = B_(g->m[0]), .dk_raw = B_(g->m[1]),
                                 .dv_raw = B_(g->m[2]), .dconv_weight = B_(g->m[3]), .dq_norm_weight = B_(g->m[4]),
                                 .dk_norm_weight = B_(g->m[5]), .dbeta = B_(g->m[6]), .ddecay = B_(g->m[7])};
}

static void grads_free(grads *g) {
  for (int i = 0; i < 8; i++) clReleaseMemObject(g->m[i]);
}

/* Drives a run over a part that is its whole sequence; *needs receives the needs in order (up to 16). */
static void drive(camdelta_context *ctx, camdelta_branch_run *run, int *needs, int *n) {
  *n = 0;
  for (;;) {
    camdelta_branch_request rq;
    TU_OK(camdelta_branch_run_next(run, &rq));
    assert_true(*n < 16);
    needs[(*n)++] = (int)rq.need;
    switch (rq.need) {
      case CAMDELTA_BRANCH_NEED_NOTHING: return;
      case CAMDELTA_BRANCH_NEED_HALO: /* the whole sequence: no neighbour, nothing wanted */
        assert_int_equal(rq.halo_before, 0);
        assert_int_equal(rq.halo_after, 0);
        assert_int_equal(rq.halo_at, 0);
        break;
      case CAMDELTA_BRANCH_NEED_SCAN_FORWARD: TU_OK(camdelta_scan_forward(ctx, &rq.scan, rq.saved)); break;
      case CAMDELTA_BRANCH_NEED_SCAN_BACKWARD:
        TU_OK(camdelta_scan_backward(ctx, &rq.scan_backward, rq.saved_backward));
        break;
      case CAMDELTA_BRANCH_NEED_SUM: /* one part: the sum is its own partial */
        if (rq.sum_src.mem != rq.sum_dst.mem || rq.sum_src.offset != rq.sum_dst.offset) {
          cl_int err = clEnqueueCopyBuffer(camdelta_context_queue(ctx), rq.sum_src.mem, rq.sum_dst.mem,
                                           rq.sum_src.offset * 4, rq.sum_dst.offset * 4, rq.sum_n * 4, 0, NULL, NULL);
          assert_int_equal(err, CL_SUCCESS);
        }
        break;
    }
  }
}

static void test_whole_part(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  problem p;
  make(&p, 1, 5, 2, 3, 2, 16);
  cl_mem y1 = bp_poison(p.tok * 4), y2 = bp_poison(p.tok * 4);
  camdelta_branch_saved *s1, *s2;
  TU_OK(camdelta_branch_saved_create(ctx, &s1));
  TU_OK(camdelta_branch_saved_create(ctx, &s2));
  const camdelta_branch_args a1 = args_of(&p, y1), a2 = args_of(&p, y2);
  TU_OK(camdelta_branch_forward(ctx, &a1, s1));
  const camdelta_branch_part part = {.frames = p.T, .first = 0};
  camdelta_branch_run *run;
  int needs[16], n;
  TU_OK(camdelta_branch_run_forward(ctx, &a2, s2, &part, &run));
  drive(ctx, run, needs, &n);
  camdelta_branch_run_destroy(run);
  const int fwd[4] = {CAMDELTA_BRANCH_NEED_HALO, CAMDELTA_BRANCH_NEED_SCAN_FORWARD, CAMDELTA_BRANCH_NEED_SCAN_FORWARD,
                      CAMDELTA_BRANCH_NEED_NOTHING};
  assert_int_equal(n, 4);
  assert_memory_equal(needs, fwd, sizeof fwd);
  tu_assert_same_bytes(y1, y2, p.tok * 4, "y");
  /* the backward with the saved objects, and recomputing the forward */
  for (int recompute = 0; recompute < 2; recompute++) {
    grads g1, g2;
    grads_make(&g1, &p), grads_make(&g2, &p);
    TU_OK(camdelta_branch_backward(ctx, &a1, &g1.g, recompute ? NULL : s1));
    TU_OK(camdelta_branch_run_backward(ctx, &a2, &g2.g, recompute ? NULL : s2, &part, &run));
    drive(ctx, run, needs, &n);
    camdelta_branch_run_destroy(run);
    const int bwd[7] = {CAMDELTA_BRANCH_NEED_SCAN_BACKWARD, CAMDELTA_BRANCH_NEED_SCAN_BACKWARD,
                        CAMDELTA_BRANCH_NEED_SUM,           CAMDELTA_BRANCH_NEED_SUM,
                        CAMDELTA_BRANCH_NEED_HALO,          CAMDELTA_BRANCH_NEED_SUM,
                        CAMDELTA_BRANCH_NEED_NOTHING};
    /* recomputing: the forward's needs first (but its NOTHING) */
    assert_int_equal(n, recompute ? 10 : 7);
    if (recompute) assert_memory_equal(needs, fwd, 3 * sizeof fwd[0]);
    assert_memory_equal(needs + (recompute ? 3 : 0), bwd, sizeof bwd);
    static const char *const names[8] = {"dq_raw", "dk_raw", "dv_raw", "dconv_weight", "dq_norm_weight",
                                         "dk_norm_weight", "dbeta", "ddecay"};
    const size_t bytes[8] = {p.tok * 4, p.tok * 4, p.tok * 4, 16 * p.C, 4 * p.C, 4 * p.C, 4 * p.B * p.H * p.N,
                             4 * p.frames};
    for (int i = 0; i < 8; i++) tu_assert_same_bytes(g1.m[i], g2.m[i], bytes[i], names[i]);
    grads_free(&g1), grads_free(&g2);
  }
  camdelta_branch_saved_destroy(s1), camdelta_branch_saved_destroy(s2);
  clReleaseMemObject(y1), clReleaseMemObject(y2);
  release(&p);
}

static void test_bad_runs(void **state) {
  (void)state;
  camdelta_context *ctx = tu_context();
  problem p;
  make(&p, 1, 3, 2, 2, 1, 8);
  cl_mem y = bp_poison(p.tok * 4);
  const camdelta_branch_args a = args_of(&p, y);
  camdelta_branch_run *run = (camdelta_branch_run *)&p; /* set to NULL on failure */
  /* a part that is not within its sequence */
  const camdelta_branch_part outside = {.frames = 4, .first = 2};
  assert_int_equal(camdelta_branch_run_forward(ctx, &a, NULL, &outside, &run), CAMDELTA_ERROR_SHAPE);
  assert_null(run);
  assert_non_null(strstr(camdelta_last_message(), "not within the sequence"));
  assert_int_equal(camdelta_branch_run_forward(ctx, &a, NULL, NULL, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  camdelta_branch_request rq;
  assert_int_equal(camdelta_branch_run_next(NULL, &rq), CAMDELTA_ERROR_INVALID_ARGUMENT);
  /* next's own arguments; a run left unfinished is destroyed */
  const camdelta_branch_part part = {.frames = 5, .first = 1};
  TU_OK(camdelta_branch_run_forward(ctx, &a, NULL, &part, &run));
  assert_int_equal(camdelta_branch_run_next(run, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  TU_OK(camdelta_branch_run_next(run, &rq));
  assert_int_equal(rq.need, CAMDELTA_BRANCH_NEED_HALO);
  assert_int_equal(rq.halo_at, 1); /* one frame before this part */
  assert_int_equal(rq.halo_frames, 5);
  camdelta_branch_run_destroy(run); /* unfinished */
  camdelta_branch_run_destroy(NULL);
  /* the backward of a run needs its gradients */
  assert_int_equal(camdelta_branch_run_backward(ctx, &a, NULL, NULL, &part, &run), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_true(bp_untouched(y, p.tok * 4));
  clReleaseMemObject(y);
  release(&p);
}

TU_MAIN(NULL, tu_teardown_context, cmocka_unit_test(test_whole_part), cmocka_unit_test(test_bad_runs))
