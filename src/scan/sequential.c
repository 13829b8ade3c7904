/* The sequential unit (units.h): cd_scan_sequential (scan_sequential.cl), a work-group per (b, h, block of J value
 * columns) walking the frames with its state block in registers; it computes the outputs itself (OUT=1, CPUs) or
 * writes the state every output frame reads for the apply to compute them (OUT=2, GPUs). Under the driver's loop
 * budget (cd_loop_budget) the walk runs in launches of as many steps as fit (s->per, set by the plan). */
#include <stdint.h>

#include "scan/units.h"

void cd_sequential_release(cd_sequential *s) {
  if (s->k) clReleaseKernel(s->k);
  s->k = NULL;
}

/* Steps of the walk: F, and F + 1 in reverse with a final state (the last one folds frame 0 into it). */
static size_t walk_steps(const cd_scan_geo *geo, const cd_sequential_io *io) {
  return geo->F + (io->reverse && io->final.mem ? 1 : 0);
}

camdelta_status cd_sequential_enqueue(camdelta_context *ctx, const cd_sequential *s, const cd_scan_geo *geo,
                                      const cd_sequential_io *io, cd_launch *l) {
  const size_t steps = walk_steps(geo, io);
  if (!s->per)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "camdelta_scan_forward: the driver ends a work-item's loops after %zu iterations per launch (Mesa's "
                   "llvmpipe does, silently); one frame of the sequential scan at D=%zu S=%zu needs more: use the "
                   "chunkwise algorithm or fewer tokens per frame",
                   cd_loop_budget(ctx), geo->D, geo->S);
  /* the walk in launches of s->per steps, the state carried through `carry` (each work-group reads its block of it
   * before writing it back) */
  cl_mem carry = NULL;
  camdelta_status st =
      s->per < steps ? cd_alloc(ctx, geo->BH * geo->D * geo->D * sizeof(float), &carry) : CAMDELTA_OK;
  for (size_t t0 = 0; t0 < steps && !st; t0 += s->per) {
    const size_t t1 = steps - t0 > s->per ? t0 + s->per : steps;
    const camdelta_buffer in = t0 ? (camdelta_buffer){carry, 0} : io->init;
    const camdelta_buffer fin = t1 < steps ? (camdelta_buffer){carry, 0} : io->final;
    cd_args a = {s->k, 0, CL_SUCCESS};
    CD_ARG_BUFS(&a, io->q, io->k, io->v, io->beta, io->decay, io->out, in, fin, io->pre, io->post);
    cd_arg_tokens(&a, geo);
    cd_arg_i32(&a, io->reverse != 0);
    cd_arg_i32(&a, in.mem != NULL);
    cd_arg_i32(&a, fin.mem != NULL);
    cd_arg_i32(&a, io->pre.mem != NULL);
    cd_arg_i32(&a, io->post.mem != NULL);
    cd_arg_i32(&a, io->write_out != 0);
    cd_arg_u32(&a, (uint32_t)t0);
    cd_arg_u32(&a, (uint32_t)t1);
    if (a.err != CL_SUCCESS) st = cd_cl_fail(a.err, "cd_scan_sequential: setting arguments");
    const size_t lws[2] = {s->c.W, 1}, gws[2] = {(size_t)s->c.W * geo->BH, s->c.nJ};
    if (!st) st = cd_enqueue(ctx, s->k, 2, gws, lws, l, "cd_scan_sequential");
  }
  if (carry) clReleaseMemObject(carry); /* it lives on until the launches that use it have finished */
  return st;
}
