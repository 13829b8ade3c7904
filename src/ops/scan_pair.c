/* The fused scan pair of the camera branch (SPEC 8.4): the causal scan with (β', decay) plus the reverse scan
 * with (β'_r, decay_r) = (β', decay) zeroed at the chunk-start frames, summed, in one pass (cl/scan_pair.cl):
 *
 *   phase A once          A_f, U_f of the causal gates (the reverse's are the same except 0 at masked frames)
 *   cd_pair_phase_b       both chains in one launch (2× the work-groups of one scan's phase B), each
 *                         direction's per-frame states into its own buffer (the backward reads them)
 *   cd_pair_sum           states_c + states_r (B·H·F·D² floats: a few per cent of one scan's memory traffic)
 *   phase C once          out_f = Q_f·(M_f + T_f)
 *
 * instead of two scans (phases A, B, C twice) and an add. Phases A and C are the chunkwise scan's own
 * (src/ops/scan.c, tensor cores where its plan has them); each direction's states are bit-identical to those of
 * its own camdelta_scan_forward, the output differs from the sum of the two outputs by the rounding of one
 * product instead of two. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan_pair.h"
#include "scan_warm.h"

static const char OP[] = "cd_scan_pair_forward";

int cd_scan_pair_wanted(camdelta_context *ctx, camdelta_scan_algorithm alg, size_t BH, size_t D, size_t S) {
  if (!ctx->branch_pair) return 0;
  if (alg == CAMDELTA_SCAN_AUTO) alg = cd_scan_auto(&ctx->info, BH, D, S);
  return alg == CAMDELTA_SCAN_CHUNKWISE;
}

/* The saved object holds `bytes` of state_post (state_pre is not kept by the pair). */
static camdelta_status saved_post(camdelta_context *ctx, camdelta_scan_saved *s, size_t bytes) {
  if (s->state_post && s->bytes >= bytes && !s->state_pre) return CAMDELTA_OK;
  if (s->state_pre) clReleaseMemObject(s->state_pre);
  if (s->state_post) clReleaseMemObject(s->state_post);
  s->state_pre = s->state_post = NULL, s->bytes = 0;
  camdelta_status st = cd_alloc(ctx, bytes, &s->state_post);
  if (!st) s->bytes = bytes;
  return st;
}

camdelta_status cd_scan_pair_forward(camdelta_context *ctx, const cd_scan_pair_args *a, camdelta_scan_saved *saved_c,
                                     camdelta_scan_saved *saved_r) {
  if (!ctx || !a) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: '%s' is NULL", OP, ctx ? "args" : "ctx");
  if (!saved_c != !saved_r)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: pass both saved objects or neither", OP);
  if ((saved_c && saved_c->ctx != ctx) || (saved_r && saved_r->ctx != ctx))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: a saved object was created for another context", OP);
  if (!a->mask) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'mask' is NULL", OP);
  /* the shapes and the causal scan's buffers are checked by the plan (as camdelta_scan_forward checks them) */
  const camdelta_scan_args sa = {a->B,    a->H,     a->D,       a->F,     a->S,        0,
                                 CAMDELTA_SCAN_CHUNKWISE, a->q, a->k, a->v, a->beta, a->decay,
                                 a->out,  a->init_c, a->final_c, a->profile, NULL, a->precision};
  cd_scan_chunk *plan = NULL;
  camdelta_status st = cd_scan_chunk_create(ctx, &sa, &plan);
  if (st) return st;
  const size_t BH = a->B * a->H, D = a->D, BHDD = BH * D * D;
  if (!st) st = cd_check_buffer(OP, "init_r", a->init_r, BHDD, 4, 1);
  if (!st) st = cd_check_buffer(OP, "final_r", a->final_r, BHDD, 4, 1);
  if (!st && a->final_r.mem && a->final_r.mem == a->final_c.mem && a->final_r.offset < a->final_c.offset + BHDD &&
      a->final_c.offset < a->final_r.offset + BHDD)
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'final_c' and 'final_r' overlap", OP);
  size_t mask_bytes = 0;
  if (!st && (clGetMemObjectInfo(a->mask, CL_MEM_SIZE, sizeof mask_bytes, &mask_bytes, NULL) != CL_SUCCESS ||
              mask_bytes < a->F * sizeof(uint32_t)))
    st = cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: 'mask' holds %zu bytes, F=%zu frames need %zu", OP, mask_bytes,
                 a->F, a->F * sizeof(uint32_t));
  const char *opts = NULL;
  unsigned bw = 0, nj = 0;
  cl_kernel kb = NULL, ks = NULL;
  if (!st) {
    cd_scan_chunk_phase_b(plan, &opts, &bw, &nj);
    st = cd_kernel(ctx, "scan_pair.cl", opts, "cd_pair_phase_b", &kb);
  }
  if (!st) st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_sum", &ks);
  if (!st && cd_kernel_max_wg(ctx, kb) < bw)
    st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the compiled pair chain allows work-groups of %zu items, needs %u", OP,
                 cd_kernel_max_wg(ctx, kb), bw);
  if (!st && getenv("CAMDELTA_SCAN_VERBOSE")) {
    char text[1024];
    cd_scan_chunk_describe(plan, text, sizeof text);
    fprintf(stderr, "camdelta scan pair: %s\n", text);
  }
  const size_t BHF = BH * a->F, fbytes = BHF * D * D * sizeof(float);
  cl_mem A = NULL, U = NULL, sc = NULL, sr = NULL, sum = NULL;
  if (!st) st = cd_alloc(ctx, fbytes, &A);
  if (!st) st = cd_alloc(ctx, fbytes, &U);
  if (!st && saved_c) {
    saved_c->valid = saved_r->valid = 0;
    st = saved_post(ctx, saved_c, fbytes);
    if (!st) st = saved_post(ctx, saved_r, fbytes);
    if (!st) sc = saved_c->state_post, sr = saved_r->state_post;
  }
  if (!st && !sc) st = cd_alloc(ctx, fbytes, &sc);
  if (!st && !sr) st = cd_alloc(ctx, fbytes, &sr);
  if (!st) st = cd_alloc(ctx, fbytes, &sum);
  if (a->profile) a->profile->kernel_ms = 0, a->profile->kernels = 0;
  cd_launch l;
  cd_launch_init(&l, a->profile);
  if (!st) st = cd_scan_chunk_phase_a(ctx, plan, A, U, &l);
  if (!st) {
    cd_args ar = {kb, 0, CL_SUCCESS};
    cd_arg_buf(&ar, (camdelta_buffer){A, 0});
    cd_arg_buf(&ar, (camdelta_buffer){U, 0});
    cd_arg_mem(&ar, a->mask);
    cd_arg_buf(&ar, a->init_c);
    cd_arg_buf(&ar, a->init_r);
    cd_arg_buf(&ar, (camdelta_buffer){sc, 0});
    cd_arg_buf(&ar, (camdelta_buffer){sr, 0});
    cd_arg_buf(&ar, a->final_c);
    cd_arg_buf(&ar, a->final_r);
    cd_arg_u32(&ar, (uint32_t)a->F);
    cd_arg_u32(&ar, nj);
    cd_arg_i32(&ar, a->init_c.mem != NULL);
    cd_arg_i32(&ar, a->init_r.mem != NULL);
    cd_arg_i32(&ar, a->final_c.mem != NULL);
    cd_arg_i32(&ar, a->final_r.mem != NULL);
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_pair_phase_b: setting arguments");
    const size_t lws[2] = {bw, 1}, gws[2] = {(size_t)bw * BH, 2 * (size_t)nj};
    if (!st) st = cd_enqueue(ctx, kb, 2, gws, lws, &l, "cd_pair_phase_b");
  }
  if (!st) {
    const uint64_t n4 = BHF * D * D / 4; /* D % 8 == 0 */
    cd_args ar = {ks, 0, CL_SUCCESS};
    cd_arg_mem(&ar, sc);
    cd_arg_mem(&ar, sr);
    cd_arg_mem(&ar, sum);
    cd_arg_u64(&ar, n4);
    if (ar.err != CL_SUCCESS) st = cd_cl_fail(ar.err, "cd_pair_sum: setting arguments");
    size_t lws = 1;
    while (lws < 256 && lws * 2 <= cd_kernel_max_wg(ctx, ks)) lws *= 2;
    const size_t gws = (n4 + lws - 1) / lws * lws;
    if (!st) st = cd_enqueue(ctx, ks, 1, &gws, &lws, &l, "cd_pair_sum");
  }
  if (!st) st = cd_scan_chunk_phase_c(ctx, plan, sum, &l);
  /* released buffers live on until the enqueued kernels that use them have finished */
  cl_mem tmp[5] = {A, U, saved_c ? NULL : sc, saved_r ? NULL : sr, sum};
  for (int i = 0; i < 5; i++)
    if (tmp[i]) clReleaseMemObject(tmp[i]);
  if (kb) clReleaseKernel(kb);
  if (ks) clReleaseKernel(ks);
  cd_scan_chunk_destroy(plan);
  st = cd_launch_end(ctx, &l, st);
  if (!st && saved_c) {
    camdelta_scan_saved *s[2] = {saved_c, saved_r};
    for (int i = 0; i < 2; i++) {
      s[i]->B = a->B, s[i]->H = a->H, s[i]->D = D, s[i]->F = a->F, s[i]->S = a->S;
      s[i]->reverse = i;
      s[i]->has_init = (i ? a->init_r.mem : a->init_c.mem) != NULL;
      s[i]->valid = 1;
    }
  }
  return st;
}
