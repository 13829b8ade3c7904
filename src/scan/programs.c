/* The FMA programs' parts (units.h): the units of one program (scan_chunkwise.cl's phases A, B, C; the sequential
 * kernel with its phase C; scan_backward.cl's grams, chain, frames and ddecay) are built with one option string from
 * the tile policy (tiles.c) and the context's override of that program's family. Each compiled kernel's own
 * work-group limit (its registers) may be below the device's: the parts are then chosen again with smaller
 * work-groups, unless an override gave the tiles (shrinking would undo it: that fails, naming its source). Where the
 * driver ends a work-item's loops after a fixed number of iterations per launch (cd_loop_budget), the parts also
 * get how many steps of their serial walks (tokens, for the backward's grams) one launch may run; a part whose one
 * step cannot fit fails with UNSUPPORTED and a message naming the budget. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scan/units.h"

static const char FWD_OP[] = "camdelta_scan_forward";
static const char BWD_OP[] = "camdelta_scan_backward";

/* What the chunkwise tiles are chosen from: the device's limits and the override (option family "chunkwise"), *var
 * naming its source in messages. */
static void chunk_inputs(camdelta_context *ctx, cd_scan_limits *lim, cd_scan_override *o, char *var, size_t var_size) {
  unsigned v[CD_ST_COUNT];
  cd_scan_limits_from_info(&ctx->info, lim);
  cd_scan_tile_values(ctx, CD_OPT_CHUNKWISE, CD_ST_COUNT, v, var, var_size);
  *o = cd_scan_override_of(v);
}

camdelta_status cd_chunk_parts(camdelta_context *ctx, size_t BH, size_t D, size_t S, const char *extra,
                               cd_chunk_cfg *cc, cd_gram *gram, cd_chain *chain, cd_apply *apply) {
  cd_scan_limits lim;
  cd_scan_override ov;
  char var[64];
  chunk_inputs(ctx, &lim, &ov, var, sizeof var);
  camdelta_status st;
  const int overridden = ov.a || ov.b || ov.c;
  for (unsigned cap = 256;; cap /= 2) {
    cd_gram g = {0};
    cd_chain b = {0};
    cd_apply c = {0};
    memset(cc, 0, sizeof *cc);
    if ((st = cd_chunk_configure(&lim, BH, D, S, cap, overridden ? &ov : NULL, var, cc))) return st;
    if (extra && *extra) {
      const size_t used = strlen(cc->opts);
      if (used + strlen(extra) >= sizeof cc->opts)
        return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the packed variant's build options are too long", FWD_OP);
      memcpy(cc->opts + used, extra, strlen(extra) + 1);
    }
    if ((st = cd_gram_build_tiled(ctx, cc->opts, cc, &g)) || (st = cd_chain_build_states(ctx, cc->opts, cc, 0, &b)) ||
        (st = cd_apply_build_fma(ctx, cc->opts, cc, &c))) {
      cd_gram_release(&g), cd_chain_release(&b), cd_apply_release(&c);
      return st;
    }
    const size_t have[3] = {cd_kernel_max_wg(ctx, g.k), cd_kernel_max_wg(ctx, b.k), cd_kernel_max_wg(ctx, c.k)};
    const unsigned need[3] = {cc->a_w, cc->b_w, cc->c_w};
    const int given[3] = {ov.a, ov.b, ov.c};
    int fits = 1;
    for (int i = 0; i < 3 && !st; i++) {
      if (have[i] >= need[i]) continue;
      fits = 0;
      if (given[i]) /* shrinking would undo the override */
        st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: the compiled phase %c kernel allows work-groups of %zu items, its tiles need %u", FWD_OP,
                     var, "ABC"[i], have[i], need[i]);
    }
    if (!st && !fits && cap <= lim.min_wg)
      st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the chunkwise kernels for D=%zu do not fit the device's work-group "
                   "limit", FWD_OP, D);
    if (st || !fits) {
      cd_gram_release(&g), cd_chain_release(&b), cd_apply_release(&c);
      if (st) return st;
      continue;
    }
    /* the driver's loop budget: phase C, parallel over frames, must fit as it is (phase A, whose count follows a
     * frame's tokens, is checked as it is enqueued); phase B's chain runs in launches of as many frames as fit */
    const size_t budget = cd_loop_budget(ctx);
    size_t na, nb_fixed, nb_step, nc;
    cd_chunk_loop_count(D, S, cc, &na, &nb_fixed, &nb_step, &nc);
    if (budget && nc > budget)
      st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                   "silently); the chunkwise phase C at D=%zu needs %zu: use a smaller head dim",
                   FWD_OP, budget, D, nc);
    if (!st) st = cd_chain_budget(ctx, &b, nb_fixed, nb_step, "camdelta_scan_forward: the chunkwise phase B");
    if (st) {
      cd_gram_release(&g), cd_chain_release(&b), cd_apply_release(&c);
      return st;
    }
    if (gram) *gram = g;
    else cd_gram_release(&g);
    if (chain) *chain = b;
    else cd_chain_release(&b);
    if (apply) *apply = c;
    else cd_apply_release(&c);
    return CAMDELTA_OK;
  }
}

camdelta_status cd_chunk_pair_chain(camdelta_context *ctx, size_t chains, size_t D, size_t S, cd_chain *chain) {
  static const char OP[] = "cd_scan_pair_forward";
  cd_scan_limits lim;
  cd_scan_override ov;
  char var[64];
  chunk_inputs(ctx, &lim, &ov, var, sizeof var);
  camdelta_status st;
  for (unsigned cap = 256;; cap /= 2) {
    cd_chunk_cfg cc;
    memset(&cc, 0, sizeof cc);
    if ((st = cd_chunk_configure(&lim, chains, D, S, cap, ov.a || ov.b || ov.c ? &ov : NULL, var, &cc)) ||
        (st = cd_chain_build_states(ctx, cc.opts, &cc, 1, chain)))
      return st;
    const size_t have = cd_kernel_max_wg(ctx, chain->k);
    if (have >= chain->w) {
      size_t na, nb_fixed, nb_step, nc;
      cd_chunk_loop_count(D, S, &cc, &na, &nb_fixed, &nb_step, &nc);
      if ((st = cd_chain_budget(ctx, chain, nb_fixed, nb_step, "cd_scan_pair_forward: the pair's chains")))
        cd_chain_release(chain);
      return st;
    }
    const unsigned need = chain->w;
    cd_chain_release(chain);
    if (cap <= 32)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the compiled pair chain allows work-groups of %zu items, needs %u",
                     OP, have, need);
  }
}

camdelta_status cd_sequential_parts(camdelta_context *ctx, size_t BH, size_t D, size_t S, cd_sequential *seq,
                                    cd_chunk_cfg *cc, cd_apply *apply) {
  cd_scan_limits lim;
  cd_scan_override ov; /* not applied: phase C after the sequential kernel takes the policy's tiles */
  char var[64], svar[64];
  unsigned sov[CD_SQ_COUNT];
  chunk_inputs(ctx, &lim, &ov, var, sizeof var);
  lim.loop_budget = cd_loop_budget(ctx); /* narrower value blocks where a frame would not fit a launch */
  camdelta_status st;
  const int sgiven = cd_scan_tile_values(ctx, CD_OPT_SEQUENTIAL, CD_SQ_COUNT, sov, svar, sizeof svar);
  memset(apply, 0, sizeof *apply);
  for (unsigned cap = 256;; cap /= 2) {
    seq->k = NULL;
    if ((st = cd_seq_configure(&lim, BH, D, S, cap, sgiven ? sov : NULL, svar, &seq->c))) return st;
    if ((st = cd_kernel(ctx, "scan_sequential.cl", seq->c.opts, "cd_scan_sequential", &seq->k))) return st;
    const size_t have = cd_kernel_max_wg(ctx, seq->k);
    int fits = have >= seq->c.W;
    if (!fits && sgiven && sov[CD_SQ_W]) { /* shrinking would undo the override */
      cd_sequential_release(seq);
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s: the compiled sequential kernel allows work-groups of %zu "
                     "items, W=%u asked", FWD_OP, svar, have, seq->c.W);
    }
    if (seq->c.OUT == 2) { /* the outputs by the chunkwise phase C (its FMA kernel, or the tensor-core one) */
      memset(cc, 0, sizeof *cc);
      if ((st = cd_chunk_configure(&lim, BH, D, S, cap, NULL, var, cc)) ||
          (st = cd_apply_build_fma(ctx, cc->opts, cc, apply))) {
        cd_sequential_release(seq);
        return st;
      }
      fits = fits && cd_kernel_max_wg(ctx, apply->k) >= cc->c_w;
    }
    if (fits) { /* steps per launch within the loop budget (0: not one fits; the enqueue says so) */
      seq->per = cd_seq_steps_per_launch(D, S, seq->c.OUT == 1, &seq->c, lim.loop_budget, SIZE_MAX);
      return CAMDELTA_OK;
    }
    cd_sequential_release(seq);
    cd_apply_release(apply);
    if (cap <= lim.min_wg)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the sequential kernels for D=%zu do not fit the device's "
                     "work-group limit", FWD_OP, D);
  }
}

camdelta_status cd_backward_parts(camdelta_context *ctx, size_t D, int skip_dq, const char *extra, int pair,
                                  cd_sbwd_cfg *cfg, char *opts, int *overridden_out, cd_gram *gram, cd_chain *chain,
                                  cd_frames *frames, cd_ddecay *ddecay) {
  size_t dev_wg, local;
  cd_sbwd_limits(&ctx->info, &dev_wg, &local);
  /* GPUs: the chain step unrolled over D, its A column in registers (PoCL would compile that for long) */
  const int gpu = cd_device_gpu_like(&ctx->info);
  size_t wg_grams = dev_wg, wg_frames = dev_wg, wg_chain = dev_wg, wg_rl = dev_wg;
  unsigned ov[CD_SB_COUNT];
  int overridden = 0;
  char var[64]; /* the override's source (the variable or camdelta_tune_set) */
  overridden = cd_scan_tile_values(ctx, CD_OPT_BACKWARD, CD_SB_COUNT, ov, var, sizeof var);
  *overridden_out = overridden;
  if (!extra) extra = "";
  for (int attempt = 0; attempt < 8; attempt++) {
    camdelta_status st = cd_sbwd_choose(D, local, wg_grams, wg_frames, wg_chain, wg_rl, cfg);
    if (!st && overridden) st = cd_sbwd_override(D, local, dev_wg, ov, var, cfg);
    if (st) return st;
    /* the chain's rows per item: only where its kernel allows fewer than D items (the options are otherwise those
     * of a row per item) */
    char rows[48] = "";
    if (cfg->cr > 1) snprintf(rows, sizeof rows, " -DCD_CHAIN_R=%zu", cfg->cr);
    snprintf(opts, 256,
             "-DCD_D=%zu -DCD_RPT=%zu -DCD_TSG=%zu -DCD_CB=%zu -DCD_DPT=%zu -DCD_TL=%zu -DCD_TPT=%zu -DCD_MC=%zu "
             "-DCD_RL=%zu%s%s%s%s",
             D, cfg->rpt, cfg->tsg, cfg->cb, cfg->dpt, cfg->tl, cfg->tpt, cfg->mc, cfg->rl, rows,
             skip_dq ? " -DCD_SKIP_DQ=1" : "", gpu ? " -DCD_CHAIN_UNROLL=1" : "", extra);
    cd_gram g = {0};
    cd_chain c = {0};
    cd_frames f = {0};
    cd_ddecay d = {0};
    if ((st = cd_gram_build_modes(ctx, opts, D, cfg, &g)) || (st = cd_chain_build_grads(ctx, opts, D, cfg, 0, &c)) ||
        (st = cd_frames_build_fma(ctx, opts, D, cfg, &f)) || (st = cd_ddecay_build(ctx, opts, cfg, &d))) {
      cd_gram_release(&g), cd_chain_release(&c), cd_frames_release(&f), cd_ddecay_release(&d);
      return st;
    }
    const size_t need_g = g.w, need_f = f.w, need_c = c.w;
    const size_t have_g = cd_kernel_max_wg(ctx, g.k), have_f = cd_kernel_max_wg(ctx, f.k);
    const size_t have_c = cd_kernel_max_wg(ctx, c.k), have_r = cd_kernel_max_wg(ctx, d.k);
    if (need_g <= have_g && need_f <= have_f && need_c <= have_c && cfg->rl <= have_r) {
      if (pair) { /* the pair's chain, from the same program */
        cd_chain_release(&c);
        st = cd_chain_build_grads(ctx, opts, D, cfg, 1, &c);
        if (!st && cd_kernel_max_wg(ctx, c.k) < c.w)
          st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "cd_scan_pair_backward: the compiled chain allows work-groups "
                       "below its %u items", c.w);
      }
      /* the driver's loop budget: the grams sum a frame's tokens over launches of whole TSG chunks, the chain runs
       * in launches of as many steps as fit */
      const size_t budget = cd_loop_budget(ctx);
      size_t gf, gc, cf, cs;
      cd_sbwd_loop_count(D, cfg, &gf, &gc, &cf, &cs);
      if (!st && budget && gf + gc > budget)
        st = cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: the driver ends a work-item's loops after %zu iterations per launch (Mesa's llvmpipe does, "
                     "silently); the grams kernel at D=%zu needs %zu",
                     BWD_OP, budget, D, gf + gc);
      if (!st && budget) g.tokens = (budget - gf) / gc * cfg->tsg;
      if (!st) st = cd_chain_budget(ctx, &c, cf, cs, pair ? "cd_scan_pair_backward: the chains" :
                                                           "camdelta_scan_backward: the chain");
      if (st || !gram) cd_gram_release(&g);
      if (st || !chain) cd_chain_release(&c);
      if (st || !frames) cd_frames_release(&f);
      if (st || !ddecay) cd_ddecay_release(&d);
      if (st) return st;
      if (gram) *gram = g;
      if (chain) *chain = c;
      if (frames) *frames = f;
      if (ddecay) *ddecay = d;
      return CAMDELTA_OK;
    }
    cd_gram_release(&g), cd_chain_release(&c), cd_frames_release(&f), cd_ddecay_release(&d);
    if (overridden)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: the compiled kernels allow work-groups of %zu (grams), %zu (frames), %zu (chain), %zu "
                     "(ddecay) items; the tiles need %zu, %zu, %zu, %zu",
                     BWD_OP, var, have_g, have_f, have_c, have_r, need_g, need_f, need_c, cfg->rl);
    if (need_g > have_g) wg_grams = have_g;
    if (need_f > have_f) wg_frames = have_f;
    if (need_c > have_c) wg_chain = have_c;
    if (cfg->rl > have_r) wg_rl = have_r;
  }
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: no kernel configuration for D=%zu fits this device", BWD_OP, D);
}
