/* The apply unit (units.h): products of a frame's tokens with the state the frame reads.
 *   out   out_f = Q_f·M_f: cd_scan_phase_c (FMA, the chunkwise tiles) or cd_apply_tc
 *   ot    the same with the camera branch's output transform as its epilogue, straight into y: cd_apply_ot_tc
 *   dq    the backward's dq_f = dO_f·M_fᵀ: cd_apply_tc (the FMA backward computes dq in its frames kernel) */
#include "scan/units.h"

static unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

camdelta_status cd_apply_build_fma(camdelta_context *ctx, const char *opts, const cd_chunk_cfg *c, cd_apply *a) {
  *a = (cd_apply){.form = CD_APPLY_FMA, .w = c->c_w, .nv = c->c_nv, .ts = c->c.wc * c->c.rn};
  return cd_kernel(ctx, "scan_chunkwise.cl", opts, "cd_scan_phase_c", &a->k);
}

camdelta_status cd_apply_build_tc(camdelta_context *ctx, size_t D, int split, int vec, int with_ot,
                                  camdelta_dtype ot_dtype, const char *extra, cd_apply *a) {
  *a = (cd_apply){.form = CD_APPLY_TC};
  const camdelta_status st = cd_tc_unit(ctx, CD_TC_APPLY, "cd_apply_tc", D, split, vec, extra, &a->t, &a->k, NULL);
  if (st || !with_ot) return st;
  const size_t lm = ctx->info.local_mem_bytes ? (size_t)ctx->info.local_mem_bytes : 16384;
  a->t_ot = cd_tc_apply_ot_tiles(&a->t, ctx->info.max_work_group_size);
  if (cd_tc_apply_ot_local_bytes(&a->t_ot) > lm) return CAMDELTA_OK; /* the epilogue's tile does not fit */
  char opts[256], dt[40]; /* y's storage (common.cl's CD_DTYPE; f32, the default, adds nothing) */
  snprintf(opts, sizeof opts, "%s%s%s", extra, ot_dtype == CAMDELTA_F32 ? "" : " ",
           ot_dtype == CAMDELTA_F32 ? "" : cd_dtype_opts(ot_dtype, dt));
  return cd_tc_kernel(ctx, CD_TC_APPLY, "cd_apply_ot_tc", D, split, vec, &a->t_ot, opts, NULL, 0, &a->k_ot);
}

camdelta_status cd_apply_build_cpu(const cd_cpu_scan *p, cd_apply *a) {
  *a = (cd_apply){.form = CD_APPLY_CPU, .w = 1, .nv = 1, .ts = 8 * p->tv};
  return cd_cpu_retain(p->apply, "cd_cpu_apply", &a->k);
}

void cd_apply_release(cd_apply *a) {
  cd_kernel_drop(&a->k);
  cd_kernel_drop(&a->k_ot);
  a->form = CD_APPLY_NONE;
}

/* cd_apply_tc: out = op(states)ᵀ-applied products; transpose 1 for the forward's out_f = Q_f·M_f (x = q), 0 for the
 * backward's dq_f = dO_f·M_fᵀ (x = dO, with the reverse's last frame reading init). */
static camdelta_status apply_tc(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo, camdelta_buffer x,
                                camdelta_buffer states, camdelta_buffer init, camdelta_buffer out, int transpose,
                                int last_init, int has_init, const char *what, cd_launch *l) {
  const unsigned nr = ceil_div(geo->D, cd_tc_tm(&a->t)), ns = ceil_div(geo->S, cd_tc_tn(&a->t));
  cd_args ar = {a->k, 0, CL_SUCCESS};
  CD_ARG_BUFS(&ar, x, states, init, out);
  cd_arg_tokens(&ar, geo);
  cd_arg_u32(&ar, nr);
  cd_arg_i32(&ar, transpose);
  cd_arg_i32(&ar, last_init);
  cd_arg_i32(&ar, has_init);
  cd_arg_packed(&ar, geo);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_apply_tc: setting arguments");
  const size_t w = cd_tc_wg(&a->t), lws[2] = {w, 1}, gws[2] = {w * nr * ns, geo->BHF};
  return cd_enqueue(ctx, a->k, 2, gws, lws, l, what);
}

camdelta_status cd_apply_out(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo, camdelta_buffer q,
                             camdelta_buffer states, camdelta_buffer out, cd_launch *l) {
  if (a->form == CD_APPLY_TC) return apply_tc(ctx, a, geo, q, states, states, out, 1, 0, 0, "cd_apply_tc (phase C)", l);
  const int cpu = a->form == CD_APPLY_CPU; /* the same arguments; one work-item per (b, h, f, token block) */
  if (a->form != CD_APPLY_FMA && !cpu) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no apply");
  if (cpu && geo->pk) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_cpu_apply runs the fixed shape only");
  const unsigned ns = ceil_div(geo->S, a->ts); /* token tiles follow this call's S */
  cd_args ar = {a->k, 0, CL_SUCCESS};
  CD_ARG_BUFS(&ar, q, states, out);
  cd_arg_tokens(&ar, geo);
  cd_arg_u32(&ar, ns);
  cd_arg_packed(&ar, geo);
  if (cpu) {
    if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_cpu_apply: setting arguments");
    const size_t one = 1, gws1 = geo->BHF * ns;
    return cd_enqueue(ctx, a->k, 1, &gws1, &one, l, "cd_cpu_apply");
  }
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_scan_phase_c: setting arguments");
  const size_t lws[2] = {a->w, 1}, gws[2] = {(size_t)a->w * geo->BHF, (size_t)a->nv * ns};
  return cd_enqueue(ctx, a->k, 2, gws, lws, l, "cd_scan_phase_c");
}

camdelta_status cd_apply_out_transform(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo,
                                       const cd_apply_ot_io *io, int *done, cd_launch *l) {
  *done = 0;
  if (a->form != CD_APPLY_TC || !a->k_ot || geo->pk) return CAMDELTA_OK;
  /* 16-byte accesses to y, proj_o and the tables */
  const camdelta_buffer bufs[4] = {io->y, io->proj_o, io->rope_cos, io->rope_sin};
  if (!cd_buffers_aligned4(bufs, 4)) return CAMDELTA_OK;
  const unsigned nr = ceil_div(geo->D, cd_tc_tm(&a->t_ot)), ns = ceil_div(geo->S, cd_tc_tn(&a->t_ot));
  cd_args ar = {a->k_ot, 0, CL_SUCCESS};
  CD_ARG_BUFS(&ar, io->q, io->states, io->proj_o, io->rope_cos, io->rope_sin, io->y);
  cd_arg_tokens(&ar, geo);
  cd_arg_u32(&ar, (uint32_t)io->H);
  cd_arg_u32(&ar, nr);
  if (ar.err != CL_SUCCESS) return cd_cl_fail(ar.err, "cd_apply_ot_tc: setting arguments");
  const size_t w = cd_tc_wg(&a->t_ot), lws[2] = {w, 1}, gws[2] = {w * nr * ns, geo->BHF};
  const camdelta_status st =
      cd_enqueue(ctx, a->k_ot, 2, gws, lws, l, "cd_apply_ot_tc (phase C and the output transform)");
  if (!st) *done = 1;
  return st;
}

camdelta_status cd_apply_dq(camdelta_context *ctx, const cd_apply *a, const cd_scan_geo *geo, camdelta_buffer dout,
                            camdelta_buffer states, camdelta_buffer init, camdelta_buffer dq, int reverse, int has_init,
                            cd_launch *l) {
  if (a->form != CD_APPLY_TC) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "the plan has no dq apply");
  return apply_tc(ctx, a, geo, dout, states, has_init ? init : states, dq, 0, reverse, has_init, "cd_apply_tc (dq)", l);
}
