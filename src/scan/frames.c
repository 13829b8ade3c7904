/* The frames unit (units.h): the backward's per-token work, a work-group per (b, h, f, token tile): dk, dv, dbeta
 * and the partial sums of ddecay from the states and the gradient chain's G (and dq in the FMA form). */
#include "scan/units.h"

camdelta_status cd_frames_build_fma(camdelta_context *ctx, const char *opts, size_t D, const cd_sbwd_cfg *c,
                                    cd_frames *f) {
  *f = (cd_frames){.form = CD_FRAMES_FMA, .w = (unsigned)(c->tl * (D / c->dpt)), .tokens = (unsigned)(c->tl * c->tpt)};
  return cd_kernel(ctx, "scan_backward.cl", opts, "cd_scan_bwd_frames", &f->k);
}

camdelta_status cd_frames_build_tc(camdelta_context *ctx, size_t D, int split, int vec, const char *extra,
                                   cd_frames *f) {
  *f = (cd_frames){.form = CD_FRAMES_TC};
  const camdelta_status st =
      cd_tc_unit(ctx, CD_TC_FRAMES, "cd_frames_tc", D, split, vec, extra, &f->t, &f->k, &f->w);
  f->tokens = cd_tc_tm(&f->t);
  return st;
}

camdelta_status cd_frames_build_cpu(const cd_cpu_scan *p, cd_frames *f) {
  *f = (cd_frames){.form = CD_FRAMES_CPU, .w = 1, .tokens = 8 * p->ftv};
  return cd_cpu_retain(p->frames, "cd_cpu_frames", &f->k);
}

void cd_frames_release(cd_frames *f) {
  cd_kernel_drop(&f->k);
  f->form = CD_FRAMES_NONE;
}

size_t cd_frames_tiles(const cd_frames *f, size_t S) { return (S + f->tokens - 1) / f->tokens; }

camdelta_status cd_frames_enqueue(camdelta_context *ctx, const cd_frames *f, const cd_scan_geo *geo,
                                  const cd_frames_io *io, cd_launch *l) {
  if (f->form == CD_FRAMES_NONE) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no frames kernel");
  const int tc = f->form == CD_FRAMES_TC; /* the tensor-core form takes no dO and writes no dq */
  const size_t ntiles = cd_frames_tiles(f, geo->S);
  cd_args a = {f->k, 0, CL_SUCCESS};
  CD_ARG_BUFS(&a, io->k, io->v, io->beta, io->decay);
  if (!tc) cd_arg_buf(&a, io->dout);
  cd_arg_buf(&a, io->states);
  cd_arg_buf(&a, io->has_init ? io->init : io->states); /* not read without an init */
  cd_arg_buf(&a, io->G);
  if (!tc) cd_arg_buf(&a, io->dq);
  CD_ARG_BUFS(&a, io->dk, io->dv, io->dbeta, io->part);
  cd_arg_tokens(&a, geo);
  cd_arg_u32(&a, (uint32_t)ntiles);
  cd_arg_i32(&a, io->reverse != 0);
  cd_arg_i32(&a, io->has_init != 0);
  cd_arg_packed(&a, geo);
  /* the CPU form takes the FMA form's arguments, its work-groups one item (w = 1) */
  const char *name = tc ? "cd_frames_tc" : f->form == CD_FRAMES_CPU ? "cd_cpu_frames" : "cd_scan_bwd_frames";
  if (f->form == CD_FRAMES_CPU && geo->pk)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_cpu_frames runs the fixed shape only");
  if (a.err != CL_SUCCESS) return cd_cl_fail(a.err, name);
  const size_t lws[2] = {f->w, 1};
  const size_t gws[2] = {tc ? f->w * ntiles : geo->BHF * ntiles * f->w, tc ? geo->BHF : 1};
  return cd_enqueue(ctx, f->k, 2, gws, lws, l, name);
}
