/* f64 host reference of the scan over packed clips (docs/math.md §9), forward and backward.
 *
 * Packed layouts (B = 1): q, k, v, out (1, H, D, N) with N = frame_offsets[frames]; beta (1, H, N) per token;
 * decay (1, H, frames); states (clips, H, D, D). Frame f holds tokens [frame_offsets[f], frame_offsets[f+1]),
 * clip c holds frames [clip_offsets[c], clip_offsets[c+1]). The result is, by definition, each clip run alone:
 * per (clip, head) the clip's frames are copied into a fixed-shape problem (B = H = 1) with S = the clip's
 * largest frame, shorter frames padded with zero q, k, v and beta, and run through camdelta_ref_scan_forward /
 * _backward. A padded token changes nothing exactly (its key row is zero, so it neither updates the state nor
 * feeds a gradient back; its output row is dropped), so frames of any token counts are covered. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static camdelta_status check_packed(const char *op, const camdelta_ref_scan_packed *p, size_t *N) {
  if (!p || !p->q || !p->k || !p->v || !p->beta || !p->decay || !p->frame_offsets || !p->clip_offsets)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: NULL argument (p, q, k, v, beta, decay, frame_offsets, clip_offsets are required)", op);
  if (!p->H || !p->D || !p->frames || !p->clips)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: H=%zu D=%zu frames=%zu clips=%zu: each must be at least 1", op, p->H,
                   p->D, p->frames, p->clips);
  const int64_t *fo = p->frame_offsets, *co = p->clip_offsets;
  if (fo[0] != 0) return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frame_offsets[0] = %lld, expected 0", op, (long long)fo[0]);
  for (size_t f = 0; f < p->frames; f++)
    if (fo[f + 1] <= fo[f])
      return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: frame_offsets not increasing at %zu (%lld then %lld)", op, f,
                     (long long)fo[f], (long long)fo[f + 1]);
  if (co[0] != 0 || (size_t)co[p->clips] != p->frames)
    return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: clip_offsets must run from 0 to frames = %zu", op, p->frames);
  for (size_t c = 0; c < p->clips; c++)
    if (co[c + 1] <= co[c])
      return cd_fail(CAMDELTA_ERROR_SHAPE, "%s: clip_offsets not increasing at %zu", op, c);
  *N = (size_t)fo[p->frames];
  return CAMDELTA_OK;
}

/* One (clip, head) as a fixed-shape problem: F frames of S tokens (padded), B = H = 1. */
typedef struct clip_job {
  size_t F, S, D, f0, N;
  double *q, *k, *v, *beta, *go, *out, *dq, *dk, *dv, *dbeta;
} clip_job;

static void clip_free(clip_job *j) {
  free(j->q), free(j->k), free(j->v), free(j->beta), free(j->go), free(j->out), free(j->dq), free(j->dk), free(j->dv);
  free(j->dbeta);
}

/* Packed (h, d, n) -> padded (d, f·S + s) and back. dir 0: gather src (packed) into dst; 1: scatter. */
static void move_tokens(const camdelta_ref_scan_packed *p, size_t N, const clip_job *j, size_t h, size_t rows,
                        double *packed, double *padded, int scatter) {
  const int64_t *fo = p->frame_offsets;
  const size_t Nc = j->F * j->S;
  for (size_t r = 0; r < rows; r++)
    for (size_t f = 0; f < j->F; f++) {
      const size_t n0 = (size_t)fo[j->f0 + f], len = (size_t)fo[j->f0 + f + 1] - n0;
      double *pk = packed + (h * rows + r) * N + n0, *pd = padded + r * Nc + f * j->S;
      if (scatter) memcpy(pk, pd, len * sizeof *pk);
      else memcpy(pd, pk, len * sizeof *pd);
    }
}

static camdelta_status run(const char *op, const camdelta_ref_scan_packed *p, const camdelta_ref_scan_grads *g) {
  cd_clear_error();
  size_t N = 0;
  camdelta_status st = check_packed(op, p, &N);
  if (st) return st;
  const size_t H = p->H, D = p->D, DD = D * D;
  if (g) {
    /* every requested gradient is written in full */
    if (g->dq) memset(g->dq, 0, H * D * N * sizeof *g->dq);
    if (g->dk) memset(g->dk, 0, H * D * N * sizeof *g->dk);
    if (g->dv) memset(g->dv, 0, H * D * N * sizeof *g->dv);
    if (g->dbeta) memset(g->dbeta, 0, H * N * sizeof *g->dbeta);
  }
  for (size_t c = 0; c < p->clips && !st; c++) {
    clip_job j;
    memset(&j, 0, sizeof j);
    j.f0 = (size_t)p->clip_offsets[c], j.F = (size_t)p->clip_offsets[c + 1] - j.f0, j.D = D;
    for (size_t f = 0; f < j.F; f++) {
      const size_t len = (size_t)(p->frame_offsets[j.f0 + f + 1] - p->frame_offsets[j.f0 + f]);
      if (len > j.S) j.S = len;
    }
    const size_t Nc = j.F * j.S, nt = D * Nc;
    j.q = calloc(nt, sizeof(double)), j.k = calloc(nt, sizeof(double)), j.v = calloc(nt, sizeof(double));
    j.beta = calloc(Nc, sizeof(double)), j.out = calloc(nt, sizeof(double));
    if (g) {
      j.go = calloc(nt, sizeof(double)), j.dq = calloc(nt, sizeof(double)), j.dk = calloc(nt, sizeof(double));
      j.dv = calloc(nt, sizeof(double)), j.dbeta = calloc(Nc, sizeof(double));
    }
    if (!j.q || !j.k || !j.v || !j.beta || !j.out || (g && (!j.go || !j.dq || !j.dk || !j.dv || !j.dbeta))) {
      clip_free(&j);
      return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (size_t h = 0; h < H && !st; h++) {
      move_tokens(p, N, &j, h, D, (double *)p->q, j.q, 0);
      move_tokens(p, N, &j, h, D, (double *)p->k, j.k, 0);
      move_tokens(p, N, &j, h, D, (double *)p->v, j.v, 0);
      move_tokens(p, N, &j, h, 1, (double *)p->beta, j.beta, 0);
      const size_t sidx = c * H + h; /* (clips, H, D, D) */
      camdelta_ref_scan rs = {.B = 1, .H = 1, .D = D, .F = j.F, .S = j.S, .reverse = p->reverse,
                              .q = j.q, .k = j.k, .v = j.v, .beta = j.beta,
                              .decay = p->decay + h * p->frames + j.f0,
                              .init_state = p->init_state ? p->init_state + sidx * DD : NULL,
                              .out = j.out,
                              .final_state = p->final_state ? p->final_state + sidx * DD : NULL};
      if (!g) {
        st = camdelta_ref_scan_forward(&rs);
        if (!st && p->out) move_tokens(p, N, &j, h, D, p->out, j.out, 1);
        continue;
      }
      if (g->grad_out) move_tokens(p, N, &j, h, D, (double *)g->grad_out, j.go, 0);
      camdelta_ref_scan_grads cg = {.grad_out = g->grad_out ? j.go : NULL,
                                    .grad_final_state = g->grad_final_state ? g->grad_final_state + sidx * DD : NULL,
                                    .dq = j.dq,
                                    .dk = j.dk,
                                    .dv = j.dv,
                                    .dbeta = j.dbeta,
                                    .ddecay = g->ddecay ? g->ddecay + h * p->frames + j.f0 : NULL,
                                    .dinit_state = g->dinit_state ? g->dinit_state + sidx * DD : NULL};
      rs.out = NULL, rs.final_state = NULL;
      st = camdelta_ref_scan_backward(&rs, &cg);
      if (!st) {
        if (g->dq) move_tokens(p, N, &j, h, D, g->dq, j.dq, 1);
        if (g->dk) move_tokens(p, N, &j, h, D, g->dk, j.dk, 1);
        if (g->dv) move_tokens(p, N, &j, h, D, g->dv, j.dv, 1);
        if (g->dbeta) move_tokens(p, N, &j, h, 1, g->dbeta, j.dbeta, 1);
      }
    }
    clip_free(&j);
  }
  return st;
}

camdelta_status camdelta_ref_scan_packed_forward(const camdelta_ref_scan_packed *p) {
  return run("camdelta_ref_scan_packed_forward", p, NULL);
}

camdelta_status camdelta_ref_scan_packed_backward(const camdelta_ref_scan_packed *p, const camdelta_ref_scan_grads *g) {
  if (!g) {
    cd_clear_error();
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_ref_scan_packed_backward: NULL argument 'g'");
  }
  return run("camdelta_ref_scan_packed_backward", p, g);
}
