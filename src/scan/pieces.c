/* The engine's small pieces (units.h): ddecay from the frames kernel's partials (scan_backward.cl), and the
 * elementwise kernels of scan_pair.cl, the pair's sum of its two directions' states and its gradient adds. */
#include "scan/engine.h"
#include "scan/units.h"

camdelta_status cd_ddecay_build(camdelta_context *ctx, const char *opts, const cd_sbwd_cfg *c, cd_ddecay *d) {
  *d = (cd_ddecay){.w = (unsigned)c->rl};
  return cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_ddecay", &d->k);
}

camdelta_status cd_ddecay_build_cpu(const cd_cpu_scan *p, cd_ddecay *d) {
  *d = (cd_ddecay){.w = 1, .cpu = 1};
  return cd_cpu_retain(p->ddecay, "cd_cpu_ddecay", &d->k);
}

void cd_ddecay_release(cd_ddecay *d) {
  if (d->k) clReleaseKernel(d->k);
  d->k = NULL;
}

camdelta_status cd_ddecay_enqueue(camdelta_context *ctx, const cd_ddecay *d, const cd_scan_geo *geo,
                                  camdelta_buffer states, camdelta_buffer init, camdelta_buffer G, camdelta_buffer part,
                                  camdelta_buffer ddecay, size_t ntiles, int reverse, int has_init, cd_launch *l) {
  if (d->cpu) { /* a work-item sums its frame's partials: within the driver's loop budget */
    const camdelta_status st = cd_cpu_ddecay_fits(ctx, geo->D, ntiles);
    if (st) return st;
  }
  cd_args a = {d->k, 0, CL_SUCCESS};
  cd_arg_buf(&a, states);
  cd_arg_buf(&a, has_init ? init : states); /* not read without an init */
  CD_ARG_BUFS(&a, G, part, ddecay);
  cd_arg_u32(&a, (uint32_t)geo->F);
  cd_arg_u32(&a, (uint32_t)ntiles);
  cd_arg_i32(&a, reverse != 0);
  cd_arg_i32(&a, has_init != 0);
  cd_arg_packed(&a, geo);
  const char *name = d->cpu ? "cd_cpu_ddecay" : "cd_scan_bwd_ddecay";
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, name);
  const size_t lws = d->w, gws = geo->BHF * lws;
  return cd_enqueue(ctx, d->k, 1, &gws, &lws, l, name);
}

camdelta_status cd_pieces_build(camdelta_context *ctx, cd_pieces *p) {
  p->sum = p->add = NULL;
  camdelta_status st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_sum", &p->sum);
  if (!st) st = cd_kernel(ctx, "scan_pair.cl", "-DCD_D=8", "cd_pair_add", &p->add);
  return st;
}

void cd_pieces_release(cd_pieces *p) {
  if (p->sum) clReleaseKernel(p->sum);
  if (p->add) clReleaseKernel(p->add);
  p->sum = p->add = NULL;
}

void cd_units_destroy(void *plan) {
  cd_units *u = plan;
  if (!u) return;
  cd_sequential_release(&u->seq);
  cd_gram_release(&u->gram);
  cd_chain_release(&u->chain);
  cd_apply_release(&u->apply);
  cd_frames_release(&u->frames);
  cd_ddecay_release(&u->ddecay);
  cd_pieces_release(&u->pieces);
  cd_ws_free(&u->ws);
  cd_cpu_scan_release(&u->cpu_prog);
  free(plan);
}

/* The chunkwise units (gram, chain, apply) in their CPU forms, all three from the one CPU program; here, beside the
 * units' other plumbing, because cpu.c only builds that program and the units retain its kernels. */
camdelta_status cd_units_chunk_cpu(camdelta_context *ctx, size_t D, cd_chain_form chain, cd_units *u) {
  camdelta_status st = cd_scan_cpu_program(ctx, D, &u->cpu_prog);
  if (!st) st = cd_gram_build_cpu(&u->cpu_prog, &u->gram);
  if (!st) st = cd_chain_build_cpu(ctx, &u->cpu_prog, chain, &u->chain);
  if (!st) st = cd_apply_build_cpu(&u->cpu_prog, &u->apply);
  return st;
}

camdelta_status cd_units_done(void *plan, camdelta_status st, void **out) {
  if (st) cd_units_destroy(plan);
  else *out = plan;
  return st;
}

/* The elementwise kernels' local size: the largest power of two up to 256 that the compiled kernel takes. */
static size_t elementwise_local(camdelta_context *ctx, cl_kernel k) {
  size_t lws = 1;
  while (lws < 256 && lws * 2 <= cd_kernel_max_wg(ctx, k)) lws *= 2;
  return lws;
}

camdelta_status cd_pieces_sum(camdelta_context *ctx, const cd_pieces *p, cl_mem a, cl_mem b, cl_mem sum, uint64_t n,
                              cd_launch *l) {
  const uint64_t n4 = n / 4;
  cd_args ar = {p->sum, 0, CL_SUCCESS};
  cd_arg_mem(&ar, a);
  cd_arg_mem(&ar, b);
  cd_arg_mem(&ar, sum);
  cd_arg_u64(&ar, n4);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_pair_sum: setting arguments");
  const size_t lws = elementwise_local(ctx, p->sum), gws = (n4 + lws - 1) / lws * lws;
  return cd_enqueue(ctx, p->sum, 1, &gws, &lws, l, "cd_pair_sum");
}

camdelta_status cd_pair_add_enqueue(camdelta_context *ctx, cl_kernel add, camdelta_buffer a, camdelta_buffer b,
                                    uint64_t n, cd_launch *l, const char *what) {
  cd_args ar = {add, 0, CL_SUCCESS};
  cd_arg_buf(&ar, a);
  cd_arg_buf(&ar, b);
  cd_arg_u64(&ar, n);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_pair_add: setting arguments");
  const size_t lws = elementwise_local(ctx, add), gws = (n + lws - 1) / lws * lws;
  return cd_enqueue(ctx, add, 1, &gws, &lws, l, what);
}
