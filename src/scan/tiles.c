/* Tile policy of the scan's FMA kernel families: parameters, constraints, local-memory formulas, the choice for
 * given device limits and the overrides (declarations and meanings in tiles.h). Apart from the plans, so that they
 * decide once per shape class and the tests check the policy without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan/tiles.h"

static const char *const OP = "camdelta_scan_forward";
static const char SBWD_OP[] = "camdelta_scan_backward";

/* ==================================================================================== scan forward */

static unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }
static unsigned round8(size_t a) { return (unsigned)((a + 7) / 8 * 8); }
/* Powers of two around x, capped at 2^31 (so that S up to 2^32 − 1 cannot loop forever or wrap). */
static unsigned pow2_floor(size_t x) {
  unsigned p = 1;
  while (p < (1u << 31) && (size_t)p * 2 <= x) p *= 2;
  return p;
}
static unsigned pow2_ceil(size_t x) {
  unsigned p = 1;
  while (p < (1u << 31) && p < x) p *= 2;
  return p;
}

/* Spread an R x C output tile over W items (W a power of two). Cost per reduction step and item:
 * rm·rn FMAs + rm + rn local loads, times the padding; fewer than min(min_wc, C) items along the columns
 * (the contiguous dimension in global memory) costs 50% for uncoalesced access. */
static cd_scan_layout pick_layout(unsigned R, unsigned C, unsigned W, unsigned min_wc) {
  cd_scan_layout best = {W, ceil_div(R, W), 1, C};
  double best_cost = -1;
  const unsigned want_wc = min_wc < C ? min_wc : C;
  for (unsigned wc = 1; wc <= W; wc *= 2) {
    const unsigned wr = W / wc, rm = ceil_div(R, wr), rn = ceil_div(C, wc);
    double cost = (double)rm * rn + rm + rn;
    if (wc < want_wc) cost *= 1.5;
    if (best_cost < 0 || cost < best_cost - 1e-9) best = (cd_scan_layout){wr, rm, wc, rn}, best_cost = cost;
  }
  return best;
}

/* Largest of 32, 16, 8 that divides D (D is a multiple of 8). */
static unsigned k_chunk(size_t D) { return D % 32 == 0 ? 32 : D % 16 == 0 ? 16 : 8; }

/* From the device facts the context read once (no kernel is compiled or queried here): the preferred
 * work-group multiple is the SIMD width, 64 on AMD GPUs (wave64), 32 elsewhere (NVIDIA warps; CPUs and
 * Intel GPUs prefer less, and 32 items per group suits them too). Each compiled kernel's own limit is
 * still checked when the plan builds them. */
void cd_scan_limits_from_info(const camdelta_device_info *info, cd_scan_limits *lim) {
  const int amd = strstr(info->device_vendor, "Advanced Micro Devices") != NULL ||
                  strstr(info->device_vendor, "AMD") != NULL;
  const int gpu = (info->type & CL_DEVICE_TYPE_GPU) != 0;
  const size_t pm = amd && gpu ? 64 : 32;
  size_t dmax = info->max_work_group_size ? info->max_work_group_size : 1;
  const size_t kmax = dmax;
  lim->dev_wg = dmax;
  lim->max_wg = pow2_floor(kmax < 256 ? kmax : 256);
  lim->min_wg = pow2_ceil(pm < 32 ? 32 : pm);
  if (lim->min_wg > lim->max_wg) lim->min_wg = lim->max_wg;
  uint64_t lm = info->local_mem_bytes;
  lim->local_bytes = lm > 512 ? (size_t)(lm - 256) : 0;
  if (lim->local_bytes > (size_t)1 << 20) lim->local_bytes = (size_t)1 << 20;
  lim->cus = info->compute_units ? info->compute_units : 1;
  lim->gpu = cd_device_gpu_like(info);
  lim->loop_budget = 0; /* a fact of the driver, not of the device info: the caller sets it (cd_loop_budget) */
}

/* Work-group size for a tile of `outputs` cells, `per_item` cells per item. */
static unsigned wg_for(const cd_scan_limits *lim, size_t outputs, size_t per_item, unsigned cap) {
  unsigned w = pow2_floor(outputs / per_item ? outputs / per_item : 1);
  if (w > cap) w = cap;
  if (w > lim->max_wg) w = lim->max_wg;
  if (w < lim->min_wg) w = lim->min_wg;
  return w;
}

/* Value-column blocks (phase B). GPUs: as many work-groups as the compute units hold one each (BH chains, blocks
 * at least `min_j` wide): the chain is serial and bound by latency, and a compute unit running two of them
 * finishes last (measured on the H200: docs/performance.md, "Measurements behind the code's constants").
 * CPUs: one block (a few cores are filled by B·H; AUTO picks chunkwise when they are not), so that the
 * kernels built for a CPU depend on D and the token bucket only (PoCL compiles each variant for seconds). */
static unsigned value_blocks(const cd_scan_limits *lim, size_t BH, size_t D, size_t min_j) {
  if (!lim->gpu) return 1;
  size_t want = BH >= lim->cus ? 1 : lim->cus / BH, most = D / min_j ? D / min_j : 1;
  if (want > most) want = most;
  if (want < 1) want = 1;
  return ceil_div(D, round8(ceil_div(D, want)));
}

/* More value-column blocks, until the block (a multiple of 8) is narrower than J: one more block can leave the
 * rounded width unchanged (D = 80: 6 blocks of 16 are 5), which looped forever on devices with little local
 * memory. Where one more block already narrows it, this is the one step it always was. */
static void next_blocks(size_t D, unsigned J, unsigned *nJ) {
  do ++*nJ;
  while (round8(ceil_div(D, *nJ)) >= J);
}

/* Tokens per tile: a power of two >= S in [8, most] on GPUs; on CPUs 8 for S <= 8, else `most`. */
static unsigned token_tile(const cd_scan_limits *lim, size_t S, unsigned most) {
  if (!lim->gpu || S >= most) return S <= 8 ? 8 : most;
  unsigned t = pow2_ceil(S < 8 ? 8 : S);
  return t > most ? most : t;
}

/* ------------------------------------------------------------------------------ sequential config */

/* Value-column blocks of the sequential kernel. GPUs: at most two work-groups per compute unit, as many as fit
 * (floor: a third work-group on some units makes them the kernel's tail), blocks at least 8 columns wide, of any
 * width (ceil(D / blocks), not rounded); see docs/performance.md, "Measurements behind the code's constants". CPUs: one block. */
static unsigned seq_blocks(const cd_scan_limits *lim, size_t BH, size_t D) {
  if (!lim->gpu) return 1;
  const size_t slots = 2 * (size_t)lim->cus, most = D / 8 ? D / 8 : 1;
  size_t want = BH >= slots ? 1 : slots / BH;
  if (want > most) want = most;
  return ceil_div(D, ceil_div(D, want));
}

size_t cd_seq_local_bytes(size_t D, const cd_seq_cfg *c) {
  size_t sc = c->p.wr * c->p.rm, jc = c->u.wc * c->u.rn, kr = c->u.wr * c->u.rm;
  if (c->o.wc * c->o.rn > sc) sc = c->o.wc * c->o.rn;
  if (c->p.wc * c->p.rn > jc) jc = c->p.wc * c->p.rn;
  if (c->o.wr * c->o.rm > jc) jc = c->o.wr * c->o.rm;
  if (D > kr) kr = D;
  return 4 * (kr * (sc + 1) + jc * (sc + 1) + sc * jc + D * jc + sc);
}

static void seq_layouts(size_t D, cd_seq_cfg *c) {
  c->u = pick_layout((unsigned)D, c->J, c->W, 1); /* the state goes to global memory through Ps */
  c->p = pick_layout(c->TS, c->J, c->W, 1);
  c->o = pick_layout(c->J, c->TS, c->W, 8);
}


/* The override's fields over the heuristic choice, each checked against what the kernel relies on. */
static camdelta_status seq_override(const cd_scan_limits *lim, size_t D, const unsigned *ov,
                                    const char *var, cd_seq_cfg *c) {
  if (ov[CD_SQ_J]) {
    if (ov[CD_SQ_J] > D)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s: J=%u is more than the head dim D=%zu", OP, var,
                     ov[CD_SQ_J], D);
    c->J = ov[CD_SQ_J];
    c->nJ = ceil_div(D, c->J);
  }
  if (ov[CD_SQ_TS]) {
    if (ov[CD_SQ_TS] > 1024)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s: TS=%u tokens per tile, at most 1024", OP, var,
                     ov[CD_SQ_TS]);
    c->TS = ov[CD_SQ_TS];
  }
  if (ov[CD_SQ_W]) {
    const unsigned w = ov[CD_SQ_W], most = lim->dev_wg < 1024 ? (unsigned)lim->dev_wg : 1024;
    if (w & (w - 1) || w < 32 || w > most)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s: W=%u must be a power of two in [32, %u]", OP, var, w,
                     most);
    c->W = w;
  }
  if (ov[CD_SQ_PF]) {
    if (ov[CD_SQ_PF] > 2)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s: PF=%u: 1 prefetches, 2 does not", OP, var, ov[CD_SQ_PF]);
    c->PF = ov[CD_SQ_PF] == 1;
  }
  if (ov[CD_SQ_OUT]) {
    if (ov[CD_SQ_OUT] > 2)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: %s: OUT=%u: 1 outputs in the kernel, 2 by phase C", OP, var,
                     ov[CD_SQ_OUT]);
    c->OUT = ov[CD_SQ_OUT];
  }
  seq_layouts(D, c);
  const size_t need = cd_seq_local_bytes(D, c);
  if (need > lim->local_bytes)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s: J=%u TS=%u need %zu bytes of local memory, the device has %zu",
                   OP, var, c->J, c->TS, need, lim->local_bytes);
  return CAMDELTA_OK;
}

camdelta_status cd_seq_configure(const cd_scan_limits *lim, size_t BH, size_t D, size_t S, unsigned wg_cap,
                                 const unsigned *ov, const char *var, cd_seq_cfg *c) {
  /* GPUs: two work-groups per compute unit (seq_blocks), each at least 4 warps (one work-group is one serial
   * chain: the second hides its barriers and latencies) */
  c->nJ = seq_blocks(lim, BH, D);
  c->PF = lim->gpu != 0;
  c->OUT = lim->gpu ? 2 : 1;
  unsigned ts = token_tile(lim, S, 64);
  c->J = ceil_div(D, c->nJ);
  for (;;) {
    c->nJ = ceil_div(D, c->J);
    c->TS = ts;
    c->W = wg_for(lim, D * c->J, lim->gpu ? 8 : 16, wg_cap);
    if (lim->gpu && c->W < 128 && wg_cap >= 128 && lim->max_wg >= 128) c->W = 128;
    seq_layouts(D, c);
    const int fits_local = cd_seq_local_bytes(D, c) <= lim->local_bytes;
    /* under a loop budget, a step (one frame) of the walk must fit a launch: narrower blocks give each item less */
    if (fits_local && (!lim->loop_budget || c->J <= 8 ||
                       cd_seq_steps_per_launch(D, S, c->OUT == 1, c, lim->loop_budget, 1) > 0))
      break;
    if (fits_local || ts <= 8) {
      if (c->J <= 8)
        return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the device's local memory (%zu bytes) is too small for D=%zu",
                       OP, lim->local_bytes, D);
      next_blocks(D, round8(c->J), &c->nJ);
      c->J = round8(ceil_div(D, c->nJ));
    } else
      ts /= 2;
  }
  if (ov) {
    camdelta_status st = seq_override(lim, D, ov, var ? var : "CAMDELTA_SEQ_TILES", c);
    if (st) return st;
  }
  snprintf(c->opts, sizeof c->opts,
           "-DCD_D=%zu -DCD_S_J=%u -DCD_S_TS=%u -DCD_U_WR=%u -DCD_U_RM=%u -DCD_U_WC=%u -DCD_U_RN=%u "
           "-DCD_P_WR=%u -DCD_P_RM=%u -DCD_P_WC=%u -DCD_P_RN=%u -DCD_O_WR=%u -DCD_O_RM=%u -DCD_O_WC=%u "
           "-DCD_O_RN=%u -DCD_S_PF=%u",
           D, c->J, c->TS, c->u.wr, c->u.rm, c->u.wc, c->u.rn, c->p.wr, c->p.rm, c->p.wc, c->p.rn, c->o.wr, c->o.rm,
           c->o.wc, c->o.rn, c->PF);
  return CAMDELTA_OK;
}

/* Iterations of `for (e = lid; e < n; e += W)` for one item, at most. */
static size_t strided(size_t n, size_t W) { return (n + W - 1) / W; }
/* The FMA GEMM core (cl/common.cl CD_FMA_GEMM) over K steps of an a x b register block, and CD_FMA_ZERO. */
static size_t gemm_loops(size_t K, const cd_scan_layout *l) {
  return K * (1 + 2 * (size_t)l->rm + l->rn + (size_t)l->rm * l->rn);
}
static size_t zero_loops(const cd_scan_layout *l) { return l->rm + (size_t)l->rm * l->rn; }

void cd_seq_loop_count(size_t D, size_t S, int write_out, const cd_seq_cfg *c, size_t *fixed, size_t *per_step) {
  const size_t W = c->W, TS = c->TS, J = c->J, tiles = (S + TS - 1) / TS;
  size_t sc = c->p.wr * c->p.rm, jc = c->u.wc * c->u.rn, kr = c->u.wr * c->u.rm;
  if (c->o.wc * c->o.rn > sc) sc = c->o.wc * c->o.rn;
  if (c->p.wc * c->p.rn > jc) jc = c->p.wc * c->p.rn;
  if (c->o.wr * c->o.rm > jc) jc = c->o.wr * c->o.rm;
  if (D > kr) kr = D;
  const size_t state = zero_loops(&c->u);          /* a pass over the item's state registers */
  const size_t nk = strided(D * TS, W), nv = strided(J * TS, W), nb = strided(TS, W);
  const size_t save = strided(D * jc, W);          /* the state block to or from global memory */
  /* staging zeroed, the initial state loaded and spread; at the end published and saved */
  *fixed = strided(kr * (sc + 1), W) + strided(jc * (sc + 1), W) + strided(sc * jc, W) + strided(D * jc, W) +
           strided(sc, W) + save + state + state + save;
  /* one update tile: its K, V and β (loaded, or stored from the registers and the next one fetched), E and M */
  const size_t loads = c->PF ? 2 * (nk + nv + nb) : nk + nv + nb;
  const size_t upd = 1 + loads + zero_loops(&c->p) + gemm_loops(D, &c->p) + zero_loops(&c->p) + gemm_loops(TS, &c->u);
  /* one output tile: its Q, the output GEMM and the store */
  const size_t out = 1 + (c->PF ? 2 * nk : nk) + zero_loops(&c->o) + gemm_loops(D, &c->o) + zero_loops(&c->o);
  /* a step: decay, publish, the saved states, the first tiles' fetches, the tiles, publish again */
  *per_step = 1 + state + state + 2 * save + (c->PF ? 2 * (nk + nv + nb) : 0) + tiles * upd + state +
              (write_out ? tiles * out : 0);
}

size_t cd_seq_steps_per_launch(size_t D, size_t S, int write_out, const cd_seq_cfg *c, size_t budget,
                               size_t steps) {
  if (!budget) return steps;
  size_t fixed, per;
  cd_seq_loop_count(D, S, write_out, c, &fixed, &per);
  if (fixed + per > budget) return 0;
  const size_t most = (budget - fixed) / per;
  return most < steps ? most : steps;
}

/* ------------------------------------------------------------------------------- tile override */

static void set_if(unsigned *field, unsigned v) {
  if (v) *field = v;
}

/* ------------------------------------------------------------------------------- chunkwise config */

size_t cd_chunk_a_local_bytes(const cd_chunk_cfg *c) {
  return 4 * (size_t)c->a_kc * (c->a.wr * c->a.rm + 1 + c->a.wc * c->a.rn + 1);
}
size_t cd_chunk_b_local_bytes(size_t D, const cd_chunk_cfg *c) {
  return 4 * (D * (size_t)(c->b.wc * c->b.rn) + (size_t)c->b_kc * (c->b.wr * c->b.rm + 1) + 1);
}
size_t cd_chunk_c_local_bytes(const cd_chunk_cfg *c) {
  return 4 * (size_t)c->c_kc * (c->c.wr * c->c.rm + c->c.wc * c->c.rn);
}

/* Applies the given override fields to the tiles chosen by chunk_configure and checks what the kernels need. */
static camdelta_status chunk_override(const cd_scan_limits *lim, size_t D, size_t S, const cd_scan_override *o,
                                      const char *TILES_ENV, cd_chunk_cfg *c) {
  const size_t lb = lim->local_bytes;
  const unsigned *v = o->v;
  size_t bytes;
  if (o->a) {
    set_if(&c->a.wr, v[CD_ST_A_WR]), set_if(&c->a.rm, v[CD_ST_A_RM]), set_if(&c->a.wc, v[CD_ST_A_WC]);
    set_if(&c->a.rn, v[CD_ST_A_RN]), set_if(&c->a_kc, v[CD_ST_A_KC]);
    c->a_w = c->a.wr * c->a.wc;
    bytes = cd_chunk_a_local_bytes(c);
    if (c->a.rm * c->a.rn > 256 || c->a_w > lim->dev_wg || bytes > lb)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: phase A tiles WR=%u RM=%u WC=%u RN=%u KC=%u (work-group %u, %zu bytes of local memory, "
                     "%u registers per item) exceed the device's limits (work-group %zu, local memory %zu bytes, "
                     "256 registers)",
                     OP, TILES_ENV, c->a.wr, c->a.rm, c->a.wc, c->a.rn, c->a_kc, c->a_w, bytes, c->a.rm * c->a.rn,
                     lim->dev_wg, lb);
    c->a_nr = ceil_div(D, c->a.wr * c->a.rm);
    c->a_nc = ceil_div(2 * D, c->a.wc * c->a.rn);
  }
  if (o->b) {
    if (v[CD_ST_B_J]) {
      c->b_j = v[CD_ST_B_J];
      c->b_nj = ceil_div(D, c->b_j);
      c->b = pick_layout((unsigned)D, c->b_j, c->b_w, 1);
    }
    set_if(&c->b.wr, v[CD_ST_B_WR]), set_if(&c->b.rm, v[CD_ST_B_RM]), set_if(&c->b.wc, v[CD_ST_B_WC]);
    set_if(&c->b.rn, v[CD_ST_B_RN]), set_if(&c->b_kc, v[CD_ST_B_KC]);
    c->b_w = c->b.wr * c->b.wc;
    bytes = cd_chunk_b_local_bytes(D, c);
    if (c->b.wr * c->b.rm < D || c->b.wc * c->b.rn < c->b_j || D % c->b_kc || c->b_j > D)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: phase B needs B_WR*B_RM >= D (%u*%u vs %zu), B_WC*B_RN >= B_J (%u*%u vs %u), "
                     "B_J <= D and B_KC dividing D (B_KC=%u)",
                     OP, TILES_ENV, c->b.wr, c->b.rm, D, c->b.wc, c->b.rn, c->b_j, c->b_kc);
    if (c->b.rm * c->b.rn > 256 || c->b_w > lim->dev_wg || bytes > lb)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: phase B tiles J=%u WR=%u RM=%u WC=%u RN=%u KC=%u (work-group %u, %zu bytes of local "
                     "memory) exceed the device's limits (work-group %zu, local memory %zu bytes, 256 registers)",
                     OP, TILES_ENV, c->b_j, c->b.wr, c->b.rm, c->b.wc, c->b.rn, c->b_kc, c->b_w, bytes, lim->dev_wg,
                     lb);
  }
  if (o->c) {
    set_if(&c->c.wr, v[CD_ST_C_WR]), set_if(&c->c.rm, v[CD_ST_C_RM]), set_if(&c->c.wc, v[CD_ST_C_WC]);
    set_if(&c->c.rn, v[CD_ST_C_RN]), set_if(&c->c_kc, v[CD_ST_C_KC]);
    c->c_w = c->c.wr * c->c.wc;
    bytes = cd_chunk_c_local_bytes(c);
    if (D % c->c_kc)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s: C_KC=%u must divide D=%zu", OP, TILES_ENV, c->c_kc, D);
    if (c->c.rm * c->c.rn > 256 || c->c_w > lim->dev_wg || bytes > lb)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                     "%s: %s: phase C tiles WR=%u RM=%u WC=%u RN=%u KC=%u (work-group %u, %zu bytes of local memory) "
                     "exceed the device's limits (work-group %zu, local memory %zu bytes, 256 registers)",
                     OP, TILES_ENV, c->c.wr, c->c.rm, c->c.wc, c->c.rn, c->c_kc, c->c_w, bytes, lim->dev_wg, lb);
    c->c_nv = ceil_div(D, c->c.wr * c->c.rm);
    c->c_ns = ceil_div(S, c->c.wc * c->c.rn);
  }
  return CAMDELTA_OK;
}

camdelta_status cd_chunk_configure(const cd_scan_limits *lim, size_t BH, size_t D, size_t S, unsigned wg_cap,
                                   const cd_scan_override *o, const char *var, cd_chunk_cfg *c) {
  const size_t lb = lim->local_bytes;
  /* phase A: tiles of at most 64 x 64 outputs, ~32 outputs per item */
  {
    const unsigned tm = round8(ceil_div(D, ceil_div(D, 64))), tn = round8(ceil_div(2 * D, ceil_div(2 * D, 64)));
    c->a_w = wg_for(lim, (size_t)tm * tn, 32, wg_cap);
    c->a = pick_layout(tm, tn, c->a_w, 1);
    c->a_kc = 32;
    while (c->a_kc > 8 && cd_chunk_a_local_bytes(c) > lb) c->a_kc /= 2;
    if (cd_chunk_a_local_bytes(c) > lb)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the device's local memory (%zu bytes) is too small", OP, lb);
    c->a_nr = ceil_div(D, c->a.wr * c->a.rm);
    c->a_nc = ceil_div(2 * D, c->a.wc * c->a.rn);
  }
  /* phase B: value-column blocks for the compute units; the state block and a chunk of A in local memory */
  {
    c->b_nj = value_blocks(lim, BH, D, 8);
    c->b_kc = k_chunk(D);
    for (;;) {
      c->b_j = round8(ceil_div(D, c->b_nj));
      c->b_nj = ceil_div(D, c->b_j);
      c->b_w = wg_for(lim, D * c->b_j, lim->gpu ? 4 : 8, wg_cap); /* serial: latency matters, not occupancy */
      c->b = pick_layout((unsigned)D, c->b_j, c->b_w, 1);      /* the state goes to global memory through Ms */
      if (cd_chunk_b_local_bytes(D, c) <= lb) break;
      if (c->b_kc > 8) c->b_kc /= 2;
      else if (c->b_j > 8) next_blocks(D, c->b_j, &c->b_nj);
      else return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the device's local memory (%zu bytes) is too small", OP, lb);
    }
  }
  /* phase C: all value rows of a frame (so Q_f is read once) x up to 64 tokens */
  {
    const unsigned ts = token_tile(lim, S, 64), tv = round8(ceil_div(D, ceil_div(D, 128)));
    c->c_w = wg_for(lim, (size_t)tv * ts, 32, wg_cap);
    c->c = pick_layout(tv, ts, c->c_w, 8);
    c->c_kc = k_chunk(D);
    while (c->c_kc > 8 && cd_chunk_c_local_bytes(c) > lb) c->c_kc /= 2;
    if (cd_chunk_c_local_bytes(c) > lb)
      return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: the device's local memory (%zu bytes) is too small", OP, lb);
    c->c_nv = ceil_div(D, c->c.wr * c->c.rm);
    c->c_ns = ceil_div(S, c->c.wc * c->c.rn);
  }
  if (o) {
    camdelta_status st = chunk_override(lim, D, S, o, var, c);
    if (st) return st;
  }
  /* phase B's loads of A run ahead of the chain by b_pf chunks: on GPUs the most that divide the step's D / B_KC
   * chunks within 64 registers per item (the whole next step at D = 112 on 256 items); on CPUs one (the kernel
   * unrolls its chunk loop when b_pf > 1, which costs PoCL long compiles and a CPU nothing to wait for) */
  {
    const unsigned nc = (unsigned)(D / c->b_kc), per = ceil_div(D * c->b_kc, c->b_w);
    if (o && o->v[CD_ST_B_PF]) {
      c->b_pf = o->v[CD_ST_B_PF];
      if (nc % c->b_pf)
        return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s: B_PF=%u must divide D / B_KC = %u", OP,
                       var ? var : "CAMDELTA_SCAN_TILES", c->b_pf, nc);
    } else
      for (c->b_pf = lim->gpu ? nc : 1; c->b_pf > 1 && (nc % c->b_pf || c->b_pf * per > 64);) c->b_pf--;
  }
  snprintf(c->opts, sizeof c->opts,
           "-DCD_D=%zu -DCD_A_WR=%u -DCD_A_RM=%u -DCD_A_WC=%u -DCD_A_RN=%u -DCD_A_KC=%u "
           "-DCD_B_J=%u -DCD_B_WR=%u -DCD_B_RM=%u -DCD_B_WC=%u -DCD_B_RN=%u -DCD_B_KC=%u -DCD_B_PF=%u "
           "-DCD_C_WR=%u -DCD_C_RM=%u -DCD_C_WC=%u -DCD_C_RN=%u -DCD_C_KC=%u",
           D, c->a.wr, c->a.rm, c->a.wc, c->a.rn, c->a_kc, c->b_j, c->b.wr, c->b.rm, c->b.wc, c->b.rn, c->b_kc,
           c->b_pf, c->c.wr, c->c.rm, c->c.wc, c->c.rn, c->c_kc);
  return CAMDELTA_OK;
}

void cd_chunk_a_loop_count(const cd_chunk_cfg *c, size_t *fixed, size_t *per_chunk) {
  /* per chunk of a_kc tokens the two staging loops and the GEMM; the zeroing and the stores */
  const size_t a_tm = c->a.wr * c->a.rm, a_tn = c->a.wc * c->a.rn;
  *fixed = 2 * zero_loops(&c->a);
  *per_chunk = 1 + strided(a_tm * c->a_kc, c->a_w) + strided(a_tn * c->a_kc, c->a_w) + gemm_loops(c->a_kc, &c->a);
}

void cd_chunk_loop_count(size_t D, size_t S, const cd_chunk_cfg *c, size_t *a, size_t *b_fixed, size_t *b_step,
                         size_t *cc) {
  size_t a_fixed, a_chunk;
  cd_chunk_a_loop_count(c, &a_fixed, &a_chunk);
  *a = a_fixed + ((S + c->a_kc - 1) / c->a_kc) * a_chunk;
  /* phase B: the As padding, the initial state (loaded and spread), the reverse's first saves, the first fetches
   * and the final save; per step the saves, the chunks (store, fetch, GEMM) and the register passes */
  const size_t b_tn = c->b.wc * c->b.rn, b_tm = c->b.wr * c->b.rm, save = strided(D * b_tn, c->b_w);
  const size_t per = strided(D * c->b_kc, c->b_w), regs = zero_loops(&c->b);
  *b_fixed = strided((size_t)c->b_kc * (b_tm + 1), c->b_w) + save + regs + 2 * save + c->b_pf * (1 + per) + regs +
             save;
  *b_step = 1 + save + regs + (D / c->b_kc) * (1 + 2 * per + gemm_loops(c->b_kc, &c->b)) + 3 * regs + save;
  /* phase C: per chunk of c_kc key rows its two staging loops and the GEMM; the zeroing and the stores */
  const size_t c_tv = c->c.wr * c->c.rm, c_ts = c->c.wc * c->c.rn;
  *cc = 2 * zero_loops(&c->c) + (D / c->c_kc) * (1 + strided(c->c_kc * c_tv, c->c_w) + strided(c->c_kc * c_ts, c->c_w) +
                                                gemm_loops(c->c_kc, &c->c));
}

/* ---------------------------------------------------------------------------------- shape class */

/* (The AUTO choice between the algorithms is src/scan/cost.c: it estimates both plans configured here.) */
cd_scan_class cd_scan_shape_class(const cd_scan_limits *lim, size_t BH, size_t D, size_t S) {
  const cd_scan_class k = {seq_blocks(lim, BH, D), value_blocks(lim, BH, D, 8), token_tile(lim, S, 64)};
  return k;
}

/* =================================================================================== scan backward */

void cd_sbwd_limits(const camdelta_device_info *info, size_t *dev_wg, size_t *local_bytes) {
  size_t local = info->local_mem_bytes ? (size_t)info->local_mem_bytes : 16384;
  if (local > 48 * 1024) local = 48 * 1024; /* same tiles everywhere; more buys nothing here */
  local -= 1024;                            /* room for the implementation's own use */
  *dev_wg = info->max_work_group_size ? info->max_work_group_size : 64;
  *local_bytes = local;
}

size_t cd_sbwd_grams_local_bytes(size_t D, const cd_sbwd_cfg *c) { return 2 * c->tsg * (D + 4) * sizeof(float); }

size_t cd_sbwd_frames_local_bytes(size_t D, const cd_sbwd_cfg *c) {
  const size_t ts = c->tl * c->tpt;
  return (D * ts + c->mc * (2 * D + 4) + (D / c->dpt) * ts) * sizeof(float);
}

/* Largest configuration that fits the work-group limits (per kernel) and the local memory. */
camdelta_status cd_sbwd_choose(size_t D, size_t local_bytes, size_t wg_grams, size_t wg_frames, size_t wg_chain,
                               size_t wg_rl, cd_sbwd_cfg *c) {
  /* the chain: a row per work-item, or where the kernel allows fewer than D items, the fewest rows per item that
   * divide D and fit (D / cr items) */
  for (c->cr = 1; D / c->cr > wg_chain || D % c->cr; c->cr++) continue;
  c->rpt = D;
  for (size_t r = D >= 64 ? 8 : 4; r <= D; r += 4)
    if (D % r == 0 && (D / r) * (D / r) <= wg_grams) {
      c->rpt = r;
      break;
    }
  c->tsg = 32;
  while (c->tsg > 8 && cd_sbwd_grams_local_bytes(D, c) > local_bytes) c->tsg /= 2;
  c->cb = 8;
  c->dpt = D % 16 == 0 ? 16 : 8;
  c->tl = 32;
  c->tpt = 2;
  c->mc = 16; /* fewer barriers and longer runs between them when it fits, else 8 */
  while (c->tl > 1 && c->tl * (D / c->dpt) > wg_frames) c->tl /= 2;
  if (D % 16 != 0 || cd_sbwd_frames_local_bytes(D, c) > local_bytes) c->mc = 8;
  while (cd_sbwd_frames_local_bytes(D, c) > local_bytes && (c->tpt > 1 || c->tl > 1)) {
    if (c->tpt > 1) c->tpt /= 2;
    else c->tl /= 2;
  }
  if (c->tl * (D / c->dpt) > wg_frames || cd_sbwd_frames_local_bytes(D, c) > local_bytes ||
      cd_sbwd_grams_local_bytes(D, c) > local_bytes)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: D=%zu does not fit the device's work-group or local memory limits",
                   SBWD_OP, D);
  c->rl = 1;
  while (c->rl * 2 <= wg_rl && c->rl * 2 <= 256) c->rl *= 2;
  return CAMDELTA_OK;
}

void cd_sbwd_loop_count(size_t D, const cd_sbwd_cfg *c, size_t *g_fixed, size_t *g_chunk, size_t *c_fixed,
                        size_t *c_step) {
  const size_t r = c->rpt, ng = D / r, regs = r + r * r;
  *g_fixed = 2 * regs; /* the sums set up (or read back) and stored */
  const cd_scan_layout blk = {.wr = (unsigned)ng, .rm = (unsigned)r, .wc = (unsigned)ng, .rn = (unsigned)r};
  *g_chunk = 1 + strided(D * c->tsg, ng * ng) + gemm_loops(c->tsg, &blk); /* the staging, CD_GRAM_FMA's GEMM */
  const size_t rows = c->cr * (1 + c->cb); /* a pass over an item's rows of the block */
  const size_t first = c->cr * (1 + D + c->cb);
  *c_fixed = 2 * (rows + first) + 2 * rows; /* each chain's x and first columns; the carry or dinit */
  /* the publish, each row's update (its sums over D, the next step's loads) and the kernel's row passes */
  *c_step = 1 + rows + c->cr * (1 + 2 * c->cb + D * (1 + c->cb / 4)) + 2 * rows;
}

/* Replaces the given fields of `c` and checks every constraint the kernels rely on. */
camdelta_status cd_sbwd_override(size_t D, size_t local_bytes, size_t dev_wg, const unsigned v[CD_SB_COUNT],
                                 const char *TILES_ENV, cd_sbwd_cfg *c) {
  size_t *const field[CD_SB_COUNT] = {&c->rpt, &c->tsg, &c->cb, &c->dpt, &c->tl, &c->tpt, &c->mc, &c->rl, &c->cr};
  for (int i = 0; i < CD_SB_COUNT; i++)
    if (v[i]) *field[i] = v[i];
  const char *bad = NULL;
  if (c->rpt % 4 || D % c->rpt) bad = "RPT must be a multiple of 4 dividing D";
  else if (c->tsg % 8) bad = "TSG must be a multiple of 8";
  else if (c->cb % 4 || D % c->cb) bad = "CB must be a multiple of 4 dividing D";
  else if (c->dpt % 4 || D % c->dpt) bad = "DPT must be a multiple of 4 dividing D";
  else if (D % c->mc) bad = "MC must divide D";
  else if (c->rl & (c->rl - 1) || c->rl > 256) bad = "RL must be a power of two <= 256";
  else if (D % c->cr) bad = "CR must divide D";
  else if (c->rpt * c->rpt > 256 || c->tpt * c->dpt > 128) bad = "RPT^2 <= 256 and TPT*DPT <= 128 (registers)";
  if (bad)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "%s: %s (D=%zu, RPT=%zu TSG=%zu CB=%zu DPT=%zu TL=%zu TPT=%zu MC=%zu "
                   "RL=%zu CR=%zu)", SBWD_OP, bad, D, c->rpt, c->tsg, c->cb, c->dpt, c->tl, c->tpt, c->mc, c->rl, c->cr);
  const size_t wg_g = (D / c->rpt) * (D / c->rpt), wg_f = c->tl * (D / c->dpt);
  const size_t lg = cd_sbwd_grams_local_bytes(D, c), lf = cd_sbwd_frames_local_bytes(D, c);
  if (wg_g > dev_wg || wg_f > dev_wg || c->rl > dev_wg || D / c->cr > dev_wg || lg > local_bytes ||
      lf > local_bytes)
    return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                   "%s: %s: grams (RPT=%zu TSG=%zu) needs work-groups of %zu and %zu bytes of local memory, frames "
                   "(DPT=%zu TL=%zu TPT=%zu MC=%zu) %zu and %zu bytes, ddecay RL=%zu, chain (CR=%zu) %zu items; the "
                   "device allows %zu items and %zu bytes",
                   SBWD_OP, TILES_ENV, c->rpt, c->tsg, wg_g, lg, c->dpt, c->tl, c->tpt, c->mc, wg_f, lf, c->rl, c->cr,
                   D / c->cr, dev_wg, local_bytes);
  return CAMDELTA_OK;
}
