/* The CPU forms of the scan's phases: the program of cl/scan_cpu.cl, its launches and the forward and backward
 * composed of them. */
#include <stdio.h>
#include <string.h>

#include "scan_cpu.h"

void cd_cpu_scan_tiles(const camdelta_context *ctx, size_t D, cd_cpu_scan *p) {
  p->D = D;
  p->cb = D % 16 == 0 ? 16 : 8;
  p->tc = 256;
  p->tv = 3;
  p->ftv = 1;
  p->gr = 6;
  p->ar = 4;
  p->far = 8;
  p->fr = 4;
  /* the gram's local memory: the staged chunk (tc x cb) and the accumulators (D x cb) */
  while (p->tc > 8 && (uint64_t)(p->tc + D) * p->cb * sizeof(float) > ctx->info.local_mem_bytes) p->tc /= 2;
}

void cd_cpu_scan_release(cd_cpu_scan *p) {
  cl_kernel *ks[] = {&p->gram, &p->chain, &p->pair_chain, &p->grad_chain, &p->apply, &p->frames, &p->ddecay};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
    if (*ks[i]) {
      clReleaseKernel(*ks[i]);
      *ks[i] = NULL;
    }
}

camdelta_status cd_cpu_scan_build(camdelta_context *ctx, cd_cpu_scan *p) {
  if (p->D % 8 || p->cb % 8 || p->D % p->cb || p->tc % 8 || !p->tc || !p->tv || p->tv > 4 || !p->ftv || p->ftv > 4 ||
      !p->gr || p->gr > 8 || p->gr % 2 || !p->ar || p->ar > 8 || !p->far || p->far > 8 || !p->fr || p->fr > 8)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "scan (cpu): tiles CB=%u TC=%u TV=%u FTV=%u GR=%u AR=%u FAR=%u FR=%u do not fit D=%zu", p->cb,
                   p->tc, p->tv, p->ftv, p->gr, p->ar, p->far, p->fr, p->D);
  snprintf(p->opts, sizeof p->opts,
           "-DCD_D=%zu -DCD_CB=%u -DCD_TC=%u -DCD_TV=%u -DCD_FTV=%u -DCD_GR=%u -DCD_AR=%u -DCD_FAR=%u -DCD_FR=%u", p->D,
           p->cb, p->tc, p->tv, p->ftv, p->gr, p->ar, p->far, p->fr);
  static const char *const names[] = {"cd_cpu_gram",   "cd_cpu_chain",  "cd_cpu_pair_chain", "cd_cpu_grad_chain",
                                      "cd_cpu_apply",  "cd_cpu_frames", "cd_cpu_ddecay"};
  cl_kernel *ks[] = {&p->gram, &p->chain, &p->pair_chain, &p->grad_chain, &p->apply, &p->frames, &p->ddecay};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) *ks[i] = NULL;
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    camdelta_status st = cd_kernel(ctx, "scan_cpu.cl", p->opts, names[i], ks[i]);
    if (st) {
      cd_cpu_scan_release(p);
      return st;
    }
  }
  return CAMDELTA_OK;
}

static camdelta_status launch(camdelta_context *ctx, cd_args *a, cl_uint dims, const size_t *gws, cd_launch *l,
                              const char *what) {
  if (a->err != CL_SUCCESS) return cd_cl_fail(a->err, what);
  const size_t one[2] = {1, 1};
  return cd_enqueue(ctx, a->kernel, dims, gws, one, l, what);
}

camdelta_status cd_cpu_gram(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, cd_cpu_gram_mode mode,
                            camdelta_buffer x, camdelta_buffer y0, camdelta_buffer y1, camdelta_buffer beta,
                            camdelta_buffer decay, camdelta_buffer o0, camdelta_buffer o1, cd_launch *l) {
  /* absent operands stand in as a present one (never read) */
  if (!y0.mem) y0 = x;
  if (!y1.mem) y1 = x;
  if (!o0.mem) o0 = o1;
  if (!o1.mem) o1 = o0;
  if (!beta.mem) beta = x;
  if (!decay.mem) decay = x;
  cd_args a = {p->gram, 0, CL_SUCCESS};
  cd_arg_buf(&a, x);
  cd_arg_buf(&a, y0);
  cd_arg_buf(&a, y1);
  cd_arg_buf(&a, beta);
  cd_arg_buf(&a, decay);
  cd_arg_buf(&a, o0);
  cd_arg_buf(&a, o1);
  cd_arg_u64(&a, g->N);
  cd_arg_u32(&a, (uint32_t)g->S);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_u32(&a, (uint32_t)mode);
  const size_t cols = mode == CD_CPU_GRAM_AU ? 2 * p->D : p->D;
  const size_t gws[2] = {g->BH * g->F, cols / p->cb};
  static const char *const what[] = {"cd_cpu_gram (W)", "cd_cpu_gram (A)", "cd_cpu_gram (A, U)", "cd_cpu_gram (U)"};
  return launch(ctx, &a, 2, gws, l, what[mode]);
}

camdelta_status cd_cpu_chain(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, camdelta_buffer A,
                             camdelta_buffer U, camdelta_buffer decay, camdelta_buffer init, camdelta_buffer post,
                             camdelta_buffer pre, camdelta_buffer final, int reverse, cd_launch *l) {
  cd_args a = {p->chain, 0, CL_SUCCESS};
  cd_arg_buf(&a, A);
  cd_arg_buf(&a, U);
  cd_arg_buf(&a, decay);
  cd_arg_buf(&a, init.mem ? init : A);
  cd_arg_buf(&a, post);
  cd_arg_buf(&a, pre.mem ? pre : post);
  cd_arg_buf(&a, final.mem ? final : post);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_i32(&a, reverse);
  cd_arg_i32(&a, init.mem != NULL);
  cd_arg_i32(&a, pre.mem != NULL);
  cd_arg_i32(&a, final.mem != NULL);
  const size_t gws[2] = {g->BH, p->D / p->cb};
  return launch(ctx, &a, 2, gws, l, "cd_cpu_chain");
}

camdelta_status cd_cpu_apply(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, camdelta_buffer q,
                             camdelta_buffer post, camdelta_buffer out, cd_launch *l) {
  const size_t tb = 8u * p->tv, nb = (g->S + tb - 1) / tb;
  cd_args a = {p->apply, 0, CL_SUCCESS};
  cd_arg_buf(&a, q);
  cd_arg_buf(&a, post);
  cd_arg_buf(&a, out);
  cd_arg_u64(&a, g->N);
  cd_arg_u32(&a, (uint32_t)g->S);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_u32(&a, (uint32_t)nb);
  const size_t gws = g->BH * g->F * nb;
  return launch(ctx, &a, 1, &gws, l, "cd_cpu_apply");
}

camdelta_status cd_cpu_grad_chain(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g,
                                  const cd_cpu_grad_chain_io *io, cd_launch *l) {
  cd_args a = {p->grad_chain, 0, CL_SUCCESS};
  cd_arg_buf(&a, io->A);
  cd_arg_buf(&a, io->W);
  cd_arg_buf(&a, io->U.mem ? io->U : io->A);
  cd_arg_buf(&a, io->states.mem ? io->states : io->G);
  cd_arg_buf(&a, io->init.mem ? io->init : io->A);
  cd_arg_buf(&a, io->gfinal.mem ? io->gfinal : io->A);
  cd_arg_buf(&a, io->G);
  cd_arg_buf(&a, io->dinit.mem ? io->dinit : io->G);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_i32(&a, io->reverse);
  cd_arg_i32(&a, io->recompute);
  cd_arg_i32(&a, io->init.mem != NULL);
  cd_arg_i32(&a, io->gfinal.mem != NULL);
  cd_arg_i32(&a, io->dinit.mem != NULL);
  const size_t gws[2] = {g->BH, p->D / p->cb};
  return launch(ctx, &a, 2, gws, l, "cd_cpu_grad_chain");
}

size_t cd_cpu_frames_blocks(const cd_cpu_scan *p, size_t S) {
  const size_t tb = 8u * p->ftv;
  return (S + tb - 1) / tb;
}

camdelta_status cd_cpu_frames(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g,
                              const cd_cpu_frames_io *io, cd_launch *l) {
  const size_t nb = cd_cpu_frames_blocks(p, g->S);
  const camdelta_buffer init = io->has_init ? io->init : io->G;
  cd_args a = {p->frames, 0, CL_SUCCESS};
  cd_arg_buf(&a, io->k);
  cd_arg_buf(&a, io->v);
  cd_arg_buf(&a, io->beta);
  cd_arg_buf(&a, io->decay);
  cd_arg_buf(&a, io->dout);
  cd_arg_buf(&a, io->states);
  cd_arg_buf(&a, init);
  cd_arg_buf(&a, io->G);
  cd_arg_buf(&a, io->dq); /* a NULL mem: dq not computed */
  cd_arg_buf(&a, io->dk);
  cd_arg_buf(&a, io->dv);
  cd_arg_buf(&a, io->dbeta);
  cd_arg_buf(&a, io->part);
  cd_arg_u64(&a, g->N);
  cd_arg_u32(&a, (uint32_t)g->S);
  cd_arg_u32(&a, (uint32_t)g->F);
  cd_arg_u32(&a, (uint32_t)nb);
  cd_arg_i32(&a, io->reverse);
  cd_arg_i32(&a, io->has_init);
  const size_t gws = g->BH * g->F * nb;
  camdelta_status st = launch(ctx, &a, 1, &gws, l, "cd_cpu_frames");
  if (st) return st;
  cd_args b = {p->ddecay, 0, CL_SUCCESS};
  cd_arg_buf(&b, io->states);
  cd_arg_buf(&b, init);
  cd_arg_buf(&b, io->G);
  cd_arg_buf(&b, io->part);
  cd_arg_buf(&b, io->ddecay);
  cd_arg_u32(&b, (uint32_t)g->F);
  cd_arg_u32(&b, (uint32_t)nb);
  cd_arg_i32(&b, io->reverse);
  cd_arg_i32(&b, io->has_init);
  const size_t gws2 = g->BH * g->F;
  return launch(ctx, &b, 1, &gws2, l, "cd_cpu_ddecay");
}

void cd_cpu_work_release(cd_cpu_work *w) {
  cl_mem *ms[] = {&w->A, &w->U, &w->W, &w->G, &w->states, &w->part};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    if (*ms[i]) {
      clReleaseMemObject(*ms[i]);
      *ms[i] = NULL;
    }
}

camdelta_status cd_cpu_work_alloc(camdelta_context *ctx, const cd_cpu_scan *p, const cd_cpu_geo *g, cd_cpu_work *w) {
  memset(w, 0, sizeof *w);
  size_t mats, parts;
  if (!cd_prod(&mats, 4, (const size_t[]){g->BH, g->F, p->D, p->D}) || !cd_mul(&w->mat_bytes, mats, sizeof(float)) ||
      !cd_prod(&parts, 3, (const size_t[]){g->BH, g->F, cd_cpu_frames_blocks(p, g->S)}) ||
      !cd_mul(&w->part_bytes, parts, sizeof(float)))
    return cd_fail(CAMDELTA_ERROR_SHAPE, "scan (cpu): workspace size overflows");
  cl_mem *ms[] = {&w->A, &w->U, &w->W, &w->G, &w->states};
  camdelta_status st = CAMDELTA_OK;
  for (size_t i = 0; i < sizeof ms / sizeof ms[0] && !st; i++) st = cd_alloc(ctx, w->mat_bytes, ms[i]);
  if (!st) st = cd_alloc(ctx, w->part_bytes, &w->part);
  if (st) cd_cpu_work_release(w);
  return st;
}

static camdelta_buffer whole(cl_mem m) { return (camdelta_buffer){m, 0}; }

camdelta_status cd_cpu_scan_forward(camdelta_context *ctx, const cd_cpu_scan *p, const camdelta_scan_args *a,
                                    cd_cpu_work *w, cd_launch *l) {
  const cd_cpu_geo g = {.BH = a->B * a->H, .F = a->F, .S = a->S, .N = a->F * a->S};
  const camdelta_buffer none = {NULL, 0};
  camdelta_status st = cd_cpu_gram(ctx, p, &g, CD_CPU_GRAM_AU, a->k, a->k, a->v, a->beta, a->decay, whole(w->A),
                                   whole(w->U), l);
  if (!st)
    st = cd_cpu_chain(ctx, p, &g, whole(w->A), whole(w->U), a->decay, a->init_state, whole(w->states), none,
                      a->final_state, a->reverse, l);
  if (!st) st = cd_cpu_apply(ctx, p, &g, a->q, whole(w->states), a->out, l);
  return st;
}

camdelta_status cd_cpu_scan_backward(camdelta_context *ctx, const cd_cpu_scan *p, const camdelta_scan_backward_args *a,
                                     int have_a, int have_states, cd_cpu_work *w, cd_launch *l) {
  const cd_cpu_geo g = {.BH = a->B * a->H, .F = a->F, .S = a->S, .N = a->F * a->S};
  const camdelta_buffer none = {NULL, 0};
  camdelta_status st = cd_cpu_gram(ctx, p, &g, CD_CPU_GRAM_W, a->q, a->grad_out, none, none, none, whole(w->W), none, l);
  if (!st && !have_a)
    st = cd_cpu_gram(ctx, p, &g, have_states ? CD_CPU_GRAM_A : CD_CPU_GRAM_AU, a->k, a->k, a->v, a->beta, a->decay,
                     whole(w->A), have_states ? none : whole(w->U), l);
  if (!st && have_a && !have_states)
    st = cd_cpu_gram(ctx, p, &g, CD_CPU_GRAM_U, a->k, none, a->v, a->beta, a->decay, none, whole(w->U), l);
  const cd_cpu_grad_chain_io cio = {.A = whole(w->A),
                                    .W = whole(w->W),
                                    .U = have_states ? none : whole(w->U),
                                    .states = whole(w->states),
                                    .init = a->init_state,
                                    .gfinal = a->grad_final_state,
                                    .G = whole(w->G),
                                    .dinit = a->dinit_state,
                                    .reverse = a->reverse,
                                    .recompute = !have_states};
  if (!st) st = cd_cpu_grad_chain(ctx, p, &g, &cio, l);
  const cd_cpu_frames_io fio = {.k = a->k,
                                .v = a->v,
                                .beta = a->beta,
                                .decay = a->decay,
                                .dout = a->grad_out,
                                .states = whole(w->states),
                                .init = a->init_state,
                                .G = whole(w->G),
                                .dq = a->dq,
                                .dk = a->dk,
                                .dv = a->dv,
                                .dbeta = a->dbeta,
                                .part = whole(w->part),
                                .ddecay = a->ddecay,
                                .reverse = a->reverse,
                                .has_init = a->init_state.mem != NULL};
  if (!st) st = cd_cpu_frames(ctx, p, &g, &fio, l);
  return st;
}
