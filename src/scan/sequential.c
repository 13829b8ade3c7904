/* The sequential unit (units.h): cd_scan_sequential (scan_sequential.cl), a work-group per (b, h, block of J value
 * columns) walking the frames with its state block in registers; it computes the outputs itself (OUT=1, CPUs) or
 * writes the state every output frame reads for the apply to compute them (OUT=2, GPUs). */
#include "units.h"

void cd_sequential_release(cd_sequential *s) {
  if (s->k) clReleaseKernel(s->k);
  s->k = NULL;
}

camdelta_status cd_sequential_enqueue(camdelta_context *ctx, const cd_sequential *s, const cd_scan_geo *geo,
                                      const cd_sequential_io *io, cd_launch *l) {
  cd_args a = {s->k, 0, CL_SUCCESS};
  cd_arg_buf(&a, io->q);
  cd_arg_buf(&a, io->k);
  cd_arg_buf(&a, io->v);
  cd_arg_buf(&a, io->beta);
  cd_arg_buf(&a, io->decay);
  cd_arg_buf(&a, io->out);
  cd_arg_buf(&a, io->init);
  cd_arg_buf(&a, io->final);
  cd_arg_buf(&a, io->pre);
  cd_arg_buf(&a, io->post);
  cd_arg_u64(&a, geo->N);
  cd_arg_u32(&a, (uint32_t)geo->S);
  cd_arg_u32(&a, (uint32_t)geo->F);
  cd_arg_i32(&a, io->reverse != 0);
  cd_arg_i32(&a, io->init.mem != NULL);
  cd_arg_i32(&a, io->final.mem != NULL);
  cd_arg_i32(&a, io->pre.mem != NULL);
  cd_arg_i32(&a, io->post.mem != NULL);
  cd_arg_i32(&a, io->write_out != 0);
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, "cd_scan_sequential: setting arguments");
  const size_t lws[2] = {s->c.W, 1}, gws[2] = {(size_t)s->c.W * geo->BH, s->c.nJ};
  return cd_enqueue(ctx, s->k, 2, gws, lws, l, "cd_scan_sequential");
}
