/* Prep backward, fused form for GPUs (SPEC section 4): the same gradients as cl/prep_backward.cl (read its header
 * for the math) in one pass over the tensors, without dproj_q/dproj_kv/drope_cos/drope_sin (calls that ask for
 * those take the three-kernel form).
 *
 * A work-group owns CD_TT consecutive tokens of one batch row across ALL heads (a tile) and walks tiles
 * persistently (tile = group, group + groups, ...), so that the number of work-groups in flight, and with it the
 * bytes the L2 cache must hold, is chosen by the host. Per tile:
 *   phase 1  walks the heads, HB at a time, recomputing the forward of each (head, token, 4-channel unit) and the
 *            upstream gradients' share of the RMSNorm sums S_q, S_k of each token (kept per work-item, summed over
 *            the work-group in a fixed order at the end); with grad_inflation_sq, the per-(token, head) chain
 *            coefficients dpost, dpre go to a global scratch (2, B, H, N) for phase 2.
 *   phase 2  walks the heads again in reverse order (the heads read last in phase 1 are the likeliest still in the
 *            L2 cache), recomputes, and writes dq_raw = u - ir^3/C x S, dk_raw and dv_raw as 16-byte rows, and adds
 *            the tile's norm-weight partials (summed over the tile's tokens in order) to a per-work-group
 *            accumulator in local memory (when 2 C floats fit; else one row of partials per tile in global memory).
 * Work-item (hl, g, t) = lid / (CD_TT * CD_G4), (lid / CD_TT) % CD_G4, lid % CD_TT: token t fastest, so that each
 * read of a transposed (B, H, D, N) gradient row covers CD_TT consecutive tokens (32 bytes at CD_TT = 8 in f32),
 * and 4-channel units of one token next to each other for the (B, N, H, D) rows.
 * cd_prep_bwd_fused_reduce then sums the norm-weight partials over their rows in a fixed order.
 * No atomics; every sum has a fixed order (bit-identical run to run).
 *
 * Build options: CD_DTYPE, CD_D, CD_TT (tokens per tile, power of two; the work-group has at most CD_TT * 32
 * work-items), CD_PF (1: each step's loads are issued during the previous step, 0: at the step itself), CD_G2.
 * Run-time: HB (heads per step, HB * CD_TT * CD_G4 <= local size), flags. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_TT
#define CD_TT 8
#endif
#ifndef CD_PF
#define CD_PF 1 /* load the next step's inputs before this step's barriers */
#endif
#define CD_WGMAX (CD_TT * 32)
#define CD_DH (CD_D / 2)
#define CD_G4 (CD_D / 4)
#define CD_HBD (4 * CD_WGMAX / CD_TT) /* the most channels one step covers: HB * CD_D <= 128 */

#define CD_F_GQ 1u
#define CD_F_GK 2u
#define CD_F_GV 4u
#define CD_F_GI 8u
#define CD_F_ALIGNED 16u /* every (B, N, H, D) tensor, the weights, tables and matrices start at a multiple of 4 */
#define CD_F_WLOCAL 32u  /* norm-weight partials accumulate in local memory (accw holds 2 C floats) */
#ifndef CD_G2 /* 1: grad_k, grad_v are each the sum of two tensors, grad_k + grad_k2 and grad_v + grad_v2 (the camera
                 branch's two scan directions, summed as they are read); a build option, so that the plain prep
                 backward's loads carry no test for it */
#define CD_G2 0
#endif


/* A 4x4 camera matrix by rows, in registers */
typedef struct cd_m4 {
  float4 r0, r1, r2, r3;
} cd_m4;
inline cd_m4 cd_load_m4(global const float *P, int al) {
  cd_m4 m;
  m.r0 = CD_LDF4(P, 0, al);
  m.r1 = CD_LDF4(P, 4, al);
  m.r2 = CD_LDF4(P, 8, al);
  m.r3 = CD_LDF4(P, 12, al);
  return m;
}
/* y = P x (camera transform) */
inline float4 cd_cam(cd_m4 P, float4 x) { return (float4)(dot(P.r0, x), dot(P.r1, x), dot(P.r2, x), dot(P.r3, x)); }
/* x = P^T y */
inline float4 cd_cam_t(cd_m4 P, float4 y) { return fma(P.r3, y.w, fma(P.r2, y.z, fma(P.r1, y.y, P.r0 * y.x))); }
/* interleaved-pair RoPE y[r] = x[r] cos[r] + x[r^1] sin[r], and its transpose x[j] = y[j] cos[j] + y[j^1] sin[j^1] */
inline float4 cd_rope(float4 x, float4 cs, float4 sn) { return fma(x.yxwz, sn, x * cs); }
inline float4 cd_rope_t(float4 y, float4 cs, float4 sn) { return fma(y.yxwz, sn.yxwz, y * cs); }

inline float cd_dotw(float4 a, float4 x, float4 w, float s) {
  s = fma(a.x * x.x, w.x, s);
  s = fma(a.y * x.y, w.y, s);
  s = fma(a.z * x.z, w.z, s);
  return fma(a.w * x.w, w.w, s);
}

/* One row of the transposed gradient (B, H, D, N): 4 channels of one token, rows N apart. */
inline float4 cd_grad4(global const cd_store_t *p, ulong i, ulong N) {
  return (float4)(CD_LOAD(p, i), CD_LOAD(p, i + N), CD_LOAD(p, i + 2 * N), CD_LOAD(p, i + 3 * N));
}

/* The inputs of step S for this work-item, zeros where it has nothing (uses the kernel's locals); P2 (phase 2)
 * adds grad_v and dpost/dpre. */
#define CD_STEP_LOAD(S, P2, xq, xk, wq, wk, gq, gk, gv, dpo, dpr)                                        \
  do {                                                                                                   \
    const uint h_ = (S) * HB + hl;                                                                       \
    xq = xk = wq = wk = gq = gk = gv = (float4)(0.0f);                                                   \
    dpo = dpr = 0.0f;                                                                                    \
    if (lane_ok && h_ < H && tok_ok) {                                                                   \
      const ulong row_ = (tok * H + h_) * CD_D + 4 * g, grow_ = ((b * H + h_) * CD_D + 4 * g) * N + n; \
      const uint c_ = h_ * CD_D + 4 * g;                                                                 \
      xq = CD_LD4(q_raw, q_raw_off + row_, al);                                                          \
      xk = CD_LD4(k_raw, k_raw_off + row_, al);                                                          \
      wq = CD_LDF4(qw, qw_off + c_, al);                                                                 \
      wk = CD_LDF4(kw, kw_off + c_, al);                                                                 \
      if (has_gq) gq = cd_grad4(grad_q, gq_off + grow_, N);                                              \
      if (has_gk) gk = cd_grad4(grad_k, gk_off + grow_, N);                                              \
      if (has_gk && has_g2) gk += cd_grad4(grad_k2, gk2_off + grow_, N);                                 \
      if ((P2) && has_gv) gv = cd_grad4(grad_v, gv_off + grow_, N);                                      \
      if ((P2) && has_gv && has_g2) gv += cd_grad4(grad_v2, gv2_off + grow_, N);                         \
      if ((P2) && has_gi) {                                                                              \
        const ulong o_ = (b * H + h_) * N + n;                                                           \
        dpo = dgi[o_];                                                                                   \
        dpr = dgi[BHN + o_];                                                                             \
      }                                                                                                  \
    }                                                                                                    \
  } while (0)

/* Global: groups * local size (1-D), groups <= tiles. Scratch: dgi (2, B, H, N) dpost then dpre (with
 * grad_inflation_sq); part_w rows of 2 C floats (dq_norm_weight then dk_norm_weight partials): one per work-group
 * (CD_F_WLOCAL) or one per tile. */
kernel void cd_prep_bwd_fused(
    global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,
    global const float *qw, ulong qw_off, global const float *kw, ulong kw_off, global const float *proj_q,
    ulong pq_off, global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,
    global const float *rope_sin, ulong rs_off, global const float *inv_rms, ulong inv_off,
    global const cd_store_t *grad_q, ulong gq_off, global const cd_store_t *grad_k, ulong gk_off,
    global const cd_store_t *grad_v, ulong gv_off, global const cd_store_t *grad_k2, ulong gk2_off,
    global const cd_store_t *grad_v2, ulong gv2_off, global const float *grad_infl, ulong gi_off,
    global cd_store_t *dq_raw, ulong dq_off, global cd_store_t *dk_raw, ulong dk_off, global cd_store_t *dv_raw,
    ulong dv_off, global float *dgi, global float *part_w, local float *accw, ulong N, uint H, ulong B, uint HB,
    float k_scale, uint flags) {
  local float red[2][CD_WGMAX];        /* pre/post per work-item, then S_q/S_k per work-item */
  local float dpp[2][CD_WGMAX];        /* dpost, dpre per (head of the step, token) */
  local float Sl[2][CD_TT];            /* S_q, S_k per token */
  local float rw[2][CD_HBD][CD_TT + 1]; /* norm-weight terms of one step, per channel and token */

  const uint lid = get_local_id(0), L = get_local_size(0);
  const uint t = lid % CD_TT, g = (lid / CD_TT) % CD_G4, hl = lid / (CD_TT * CD_G4);
  const int lane_ok = hl < HB;
  const int first = 4 * g < CD_DH;
  const uint C = H * CD_D, nsteps = (H + HB - 1) / HB, HBD = HB * CD_D;
  const ulong tpr = (N + CD_TT - 1) / CD_TT, total = B * tpr, BN = B * N, BHN = B * H * N;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gv = (flags & CD_F_GV) != 0;
  const int has_gi = (flags & CD_F_GI) != 0, al = (flags & CD_F_ALIGNED) != 0, wlocal = (flags & CD_F_WLOCAL) != 0;
  const int has_g2 = CD_G2;

  if (wlocal)
    for (uint c = lid; c < 2 * C; c += L) accw[c] = 0.0f;

  for (ulong tile = get_group_id(0); tile < total; tile += get_num_groups(0)) {
    const ulong b = tile / tpr, n0 = (tile % tpr) * CD_TT;
    const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
    const int tok_ok = t < nt;
    const ulong n = n0 + t, tok = b * N + n;

    /* this work-item's inverse RMS values, and its token's camera matrices (camera half) or its RoPE coefficients
     * (second half: cos in Mq.r0, sin in Mq.r1) */
    float irq = 0.0f, irk = 0.0f;
    cd_m4 Mq, Mk;
    Mq.r0 = Mq.r1 = Mq.r2 = Mq.r3 = Mk.r0 = Mk.r1 = Mk.r2 = Mk.r3 = (float4)(0.0f);
    if (tok_ok) {
      irq = inv_rms[inv_off + tok];
      irk = inv_rms[inv_off + BN + tok];
      if (first) {
        Mq = cd_load_m4(proj_q + pq_off + tok * 16, al);
        Mk = cd_load_m4(proj_kv + pkv_off + tok * 16, al);
      } else {
        const ulong rrow = n * CD_DH + (4 * g - CD_DH);
        Mq.r0 = CD_LDF4(rope_cos, rc_off + rrow, al);
        Mq.r1 = CD_LDF4(rope_sin, rs_off + rrow, al);
      }
    }
#define CD_TQ(y) (first ? cd_cam_t(Mq, (y)) : cd_rope_t((y), Mq.r0, Mq.r1))  /* q: T^T y */
#define CD_TK(x) (first ? cd_cam(Mk, (x)) : cd_rope((x), Mq.r0, Mq.r1))      /* k: T x */
#define CD_TKT(y) (first ? cd_cam_t(Mk, (y)) : cd_rope_t((y), Mq.r0, Mq.r1)) /* k, v: T^T y */

    /* phase 1: this work-item's share of S_q, S_k (and dpost, dpre per (token, head)); with CD_PF, the next step's
     * inputs are loaded while this step waits at its barriers */
    float sq_acc = 0.0f, sk_acc = 0.0f;
    float4 xq, xk, wq, wk, gq, gk, gv;
    float dpo, dpr;
#if CD_PF
    float4 pxq, pxk, pwq, pwk, pgq, pgk, pgv;
    float pdpo, pdpr;
    CD_STEP_LOAD(0, 0, pxq, pxk, pwq, pwk, pgq, pgk, pgv, pdpo, pdpr);
#endif
    for (uint s = 0; s < nsteps; s++) {
#if CD_PF
      xq = pxq, xk = pxk, wq = pwq, wk = pwk, gq = pgq, gk = pgk;
      if (s + 1 < nsteps) CD_STEP_LOAD(s + 1, 0, pxq, pxk, pwq, pwk, pgq, pgk, pgv, pdpo, pdpr);
#else
      CD_STEP_LOAD(s, 0, xq, xk, wq, wk, gq, gk, gv, dpo, dpr);
#endif
      const float4 aq = xq * irq * wq, ak = xk * irk * wk;
      const float4 kn = fmax(ak, 0.0f) * k_scale;
      float dpost = 0.0f, dpre = 0.0f;
      float4 ko = (float4)(0.0f);
      /* the barriers run whatever the flags (uniform anyway), so every work-item meets the same ones */
      if (has_gi) {
        ko = CD_TK(kn);
        red[0][lid] = cd_sq4(kn);
        red[1][lid] = cd_sq4(ko);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (has_gi && lid < HB * CD_TT) {
        const uint hh = lid / CD_TT, tt = lid % CD_TT, h2 = s * HB + hh;
        float sp = 0.0f, so = 0.0f;
        for (uint u = 0; u < CD_G4; u++) {
          sp += red[0][(hh * CD_G4 + u) * CD_TT + tt];
          so += red[1][(hh * CD_G4 + u) * CD_TT + tt];
        }
        float vpo = 0.0f, vpr = 0.0f;
        if (h2 < H && tt < nt) {
          const ulong o = (b * H + h2) * N + n0 + tt;
          const float gi = grad_infl[gi_off + o];
          const float cpre = fmax(sp, 1e-12f), cpost = fmax(so, 1e-12f);
          vpo = so > 1e-12f ? gi / cpre : 0.0f;
          vpr = sp > 1e-12f ? -gi * cpost / (cpre * cpre) : 0.0f;
          dgi[o] = vpo;
          dgi[BHN + o] = vpr;
        }
        dpp[0][lid] = vpo;
        dpp[1][lid] = vpr;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (has_gi && lane_ok) {
        dpost = dpp[0][hl * CD_TT + t];
        dpre = dpp[1][hl * CD_TT + t];
      }
      gk = fma(2.0f * ko, (float4)(dpost), gk);
      const float4 dxq = CD_TQ(gq);
      const float4 dxk = CD_TKT(gk);
      const float4 daq = select((float4)(0.0f), dxq, isgreater(aq, (float4)(0.0f)));
      const float4 dak = select((float4)(0.0f), fma(2.0f * kn, (float4)(dpre), dxk) * k_scale,
                                isgreater(ak, (float4)(0.0f)));
      sq_acc = cd_dotw(daq, xq, wq, sq_acc);
      sk_acc = cd_dotw(dak, xk, wk, sk_acc);
    }

    /* S per token: the work-items' shares in a fixed order; dgi becomes visible to the whole work-group */
    red[0][lid] = sq_acc;
    red[1][lid] = sk_acc;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid < 2 * CD_TT) {
      const uint which = lid / CD_TT, tt = lid % CD_TT;
      float sum = 0.0f;
      for (uint u = 0; u < HB * CD_G4; u++) sum += red[which][u * CD_TT + tt];
      Sl[which][tt] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float Sq = Sl[0][t], Sk = Sl[1][t];
    const float cq = irq * irq * irq / (float)C, ck = irk * irk * irk / (float)C;

    /* phase 2: the heads in reverse order; the gradients, and the norm-weight partials */
#if CD_PF
    CD_STEP_LOAD(nsteps - 1, 1, pxq, pxk, pwq, pwk, pgq, pgk, pgv, pdpo, pdpr);
#endif
    for (uint s2 = 0; s2 < nsteps; s2++) {
      const uint s = nsteps - 1 - s2, h = s * HB + hl;
      const int act = lane_ok && h < H && tok_ok;
      const ulong row = (tok * H + h) * CD_D + 4 * g;
#if CD_PF
      xq = pxq, xk = pxk, wq = pwq, wk = pwk, gq = pgq, gk = pgk, gv = pgv, dpo = pdpo, dpr = pdpr;
      if (s > 0) CD_STEP_LOAD(s - 1, 1, pxq, pxk, pwq, pwk, pgq, pgk, pgv, pdpo, pdpr);
#else
      CD_STEP_LOAD(s, 1, xq, xk, wq, wk, gq, gk, gv, dpo, dpr);
#endif
      const float dpost = dpo, dpre = dpr;
      const float4 aq = xq * irq * wq, ak = xk * irk * wk;
      const float4 kn = fmax(ak, 0.0f) * k_scale;
      if (has_gi) {
        const float4 ko = CD_TK(kn);
        gk = fma(2.0f * ko, (float4)(dpost), gk);
      }
      const float4 dxq = CD_TQ(gq);
      const float4 dxk = CD_TKT(gk);
      const float4 dxv = CD_TKT(gv);
      const float4 daq = select((float4)(0.0f), dxq, isgreater(aq, (float4)(0.0f)));
      const float4 dak = select((float4)(0.0f), fma(2.0f * kn, (float4)(dpre), dxk) * k_scale,
                                isgreater(ak, (float4)(0.0f)));
      if (act) {
        CD_ST4(dq_raw, dq_off + row, fma(-cq * xq, (float4)(Sq), daq * irq * wq), al);
        CD_ST4(dk_raw, dk_off + row, fma(-ck * xk, (float4)(Sk), dak * irk * wk), al);
        CD_ST4(dv_raw, dv_off + row, dxv, al);
      }
      /* norm weights: this step's channels summed over the tile's tokens in order */
      if (lane_ok) {
        const float4 pq = daq * xq * irq, pk = dak * xk * irk;
        const uint r = hl * CD_D + 4 * g;
        rw[0][r][t] = pq.x, rw[0][r + 1][t] = pq.y, rw[0][r + 2][t] = pq.z, rw[0][r + 3][t] = pq.w;
        rw[1][r][t] = pk.x, rw[1][r + 1][t] = pk.y, rw[1][r + 2][t] = pk.z, rw[1][r + 3][t] = pk.w;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint w = lid; w < 2 * HBD; w += L) {
        const uint which = w / HBD, r = w % HBD, h2 = s * HB + r / CD_D;
        if (h2 < H) {
          float sum = 0.0f;
          for (uint u = 0; u < CD_TT; u++) sum += rw[which][r][u];
          const uint c = which * C + h2 * CD_D + r % CD_D;
          if (wlocal) accw[c] += sum;
          else part_w[tile * 2 * C + c] = sum;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  if (wlocal) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint c = lid; c < 2 * C; c += L) part_w[(ulong)get_group_id(0) * 2 * C + c] = accw[c];
  }
}

/* The norm-weight gradients: column c of the (rows, 2 C) partials summed over the rows in a fixed order. Local size
 * (W, R), W, R <= 32: lane r takes rows r, r + R, ... in order, then the R lane sums in order. */
kernel void cd_prep_bwd_fused_reduce(global const float *part_w, ulong rows, uint C, global float *dqw, ulong dqw_off,
                                     global float *dkw, ulong dkw_off) {
  local float red[32][33];
  const uint lx = get_local_id(0), ly = get_local_id(1), R = get_local_size(1);
  const ulong i = get_global_id(0);
  float s = 0.0f;
  if (i < 2 * (ulong)C)
    for (ulong u = ly; u < rows; u += R) s += part_w[u * 2 * C + i];
  red[ly][lx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (ly == 0 && i < 2 * (ulong)C) {
    float tsum = 0.0f;
    for (uint r = 0; r < R; r++) tsum += red[r][lx];
    if (i < C) dqw[dqw_off + i] = tsum;
    else dkw[dkw_off + i - C] = tsum;
  }
}
