/* Prep backward, register-resident form (SPEC section 4): the gradients of cl/prep_backward_fused.cl (same math:
 * read cl/prep_backward.cl's header) with every input element read from device memory once.
 *
 * cd_prep_bwd_fused walks each tile's heads twice (the RMSNorm sums S_q, S_k couple all heads of a token before
 * dq_raw, dk_raw can be written) and reads q_raw, k_raw, grad_q and grad_k again in the second walk. Here
 * work-item (slot, t, g) keeps, for its heads h = slot + CD_HS*i (i < CD_HPI), the raw q and k units and
 * u = da inv_rms w in registers between the walk and the final writes, so the second walk is gone:
 *   per head step i  the three (D x CD_TT) gradient tiles of CD_HS heads come in through local memory (rows of
 *                    CD_TT consecutive tokens, loaded one step ahead), the forward is recomputed in registers,
 *                    dpost/dpre of each (token, head) from the local pre/post sums, dv_raw is written, and the
 *                    norm-weight terms are summed over the tile's tokens into a per-work-group accumulator in
 *                    local memory (2 C floats);
 *   at the end       S_q, S_k per token (fixed order), then dq_raw = u - ir^3/C x S and dk_raw as 16-byte rows.
 * The work-groups walk the tiles persistently (one per compute unit); cd_prep_bwd_regs_reduce sums the per-group
 * norm-weight rows in a fixed order. No atomics: bit-identical run to run.
 *
 * Build options: CD_DTYPE, CD_D, CD_TT (tokens per tile), CD_HS (head slots), CD_HPI (heads per slot; any
 * H <= CD_HS * CD_HPI). Work-group size CD_TT * CD_D/4 * CD_HS. Flags: which of grad_q, grad_k, grad_v,
 * grad_inflation_sq are given, and whether every tensor starts at a multiple of 4 elements (16-byte accesses). */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_TT
#define CD_TT 4
#endif
#ifndef CD_HS
#define CD_HS 1
#endif
#ifndef CD_HPI
#define CD_HPI 1
#endif
#define CD_DH (CD_D / 2)
#define CD_G4 (CD_D / 4)
#define CD_RL (CD_TT * CD_G4 * CD_HS)
#define CD_ROWS (CD_HS * CD_TT)
/* gradient tile row stride: a multiple of 4 floats (16-byte rows), = 32 / CD_TT (mod 32) banks when that is >= 4 */
#define CD_BK ((32 / CD_TT) < 4 ? 4 : (32 / CD_TT))
#define CD_GSTR (CD_D + (CD_BK - CD_D % 32 + 32) % 32)

#define CD_F_GQ 1u
#define CD_F_GK 2u
#define CD_F_GV 4u
#define CD_F_GI 8u

#define CD_F_ALIGNED 16u /* every tensor, weight, table and matrix starts at a multiple of 4 elements */

#define CD_LDF4(p, i) (al ? *(global const float4 *)((p) + (i)) : vload4(0, (p) + (i)))
#if CD_DTYPE == 0
#define CD_LD4(p, i) CD_LDF4(p, i)
#define CD_ST4(p, i, x)                                 \
  do {                                                  \
    if (al) *(global float4 *)((p) + (i)) = (x);        \
    else vstore4((x), 0, (p) + (i));                    \
  } while (0)
#elif CD_DTYPE == 1
#define CD_LD4(p, i) vload_half4(0, (p) + (i))
#define CD_ST4(p, i, x) vstore_half4_rte((x), 0, (p) + (i))
#else
#define CD_LD4(p, i) as_float4(convert_uint4(al ? *(global const ushort4 *)((p) + (i)) : vload4(0, (p) + (i))) << 16)
#define CD_ST4(p, i, val)                                                                                    \
  do {                                                                                                       \
    const float4 x_ = (val);                                                                                 \
    const ushort4 u_ = (ushort4)(cd_to_bf16(x_.x), cd_to_bf16(x_.y), cd_to_bf16(x_.z), cd_to_bf16(x_.w)); \
    if (al) *(global ushort4 *)((p) + (i)) = u_;                                                             \
    else vstore4(u_, 0, (p) + (i));                                                                          \
  } while (0)
#endif

inline float4 cd_r_cam(local const float4 *P, float4 x) {
  return (float4)(dot(P[0], x), dot(P[1], x), dot(P[2], x), dot(P[3], x));
}
inline float4 cd_r_cam_t(local const float4 *P, float4 y) {
  return fma(P[3], y.w, fma(P[2], y.z, fma(P[1], y.y, P[0] * y.x)));
}
inline float cd_r_sq4(float4 v) { return fma(v.x, v.x, fma(v.y, v.y, fma(v.z, v.z, v.w * v.w))); }
inline float cd_r_dotw(float4 a, float4 x, float4 w, float s) {
  s = fma(a.x * x.x, w.x, s);
  s = fma(a.y * x.y, w.y, s);
  s = fma(a.z * x.z, w.z, s);
  return fma(a.w * x.w, w.w, s);
}

/* this work-item's 4 elements of each of the three gradient tiles of step S (heads S*CD_HS + slot) */
#define CD_GRAD_LOAD(S)                                                                                   \
  do {                                                                                                    \
    for (uint k_ = 0; k_ < 4; k_++) {                                                                     \
      const uint idx_ = lid + CD_RL * k_, t2_ = idx_ % CD_TT, d_ = (idx_ / CD_TT) % CD_D,                  \
                 h2_ = idx_ / (CD_TT * CD_D) + CD_HS * (S);                                               \
      pg0[k_] = pg1[k_] = pg2[k_] = 0.0f;                                                                 \
      if (t2_ < nt && h2_ < H) {                                                                          \
        const ulong o_ = ((b * H + h2_) * CD_D + d_) * N + n0 + t2_;                                       \
        if (has_gq) pg0[k_] = CD_LOAD(grad_q, gq_off + o_);                                               \
        if (has_gk) pg1[k_] = CD_LOAD(grad_k, gk_off + o_);                                               \
        if (has_gv) pg2[k_] = CD_LOAD(grad_v, gv_off + o_);                                               \
      }                                                                                                   \
    }                                                                                                     \
  } while (0)

/* Global: groups * CD_RL (1-D), groups <= tiles. part_w: one row of 2 C floats (dq_norm_weight then dk_norm_weight
 * partials) per work-group; accw: 2 C floats of local memory. */
kernel __attribute__((reqd_work_group_size(CD_RL, 1, 1))) void cd_prep_bwd_regs(
    global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,
    global const float *qw, ulong qw_off, global const float *kw, ulong kw_off, global const float *proj_q,
    ulong pq_off, global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,
    global const float *rope_sin, ulong rs_off, global const float *inv_rms, ulong inv_off,
    global const cd_store_t *grad_q, ulong gq_off, global const cd_store_t *grad_k, ulong gk_off,
    global const cd_store_t *grad_v, ulong gv_off, global const float *grad_infl, ulong gi_off,
    global cd_store_t *dq_raw, ulong dq_off, global cd_store_t *dk_raw, ulong dk_off, global cd_store_t *dv_raw,
    ulong dv_off, global float *part_w, local float *accw, ulong N, uint H, ulong B, float k_scale, uint flags) {
  local float gt[3][CD_ROWS * CD_GSTR]; /* gradient tiles q, k, v; then the norm-weight terms (q, k) */
  local float part[2][CD_ROWS][CD_G4 + 1];
  local float dpp[2][CD_ROWS];
  local float Sl[2][CD_TT];
  local float4 Pl[2][CD_TT][4];

  const uint lid = get_local_id(0);
  const uint g = lid % CD_G4, row = lid / CD_G4, t = row % CD_TT, slot = row / CD_TT;
  const bool cam = 4 * g < CD_DH;
  const uint C = H * CD_D;
  const ulong tpr = (N + CD_TT - 1) / CD_TT, total = B * tpr, BN = B * N;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gv = (flags & CD_F_GV) != 0;
  const int has_gi = (flags & CD_F_GI) != 0, al = (flags & CD_F_ALIGNED) != 0;

  for (uint c = lid; c < 2 * C; c += CD_RL) accw[c] = 0.0f;

  for (ulong tile = get_group_id(0); tile < total; tile += get_num_groups(0)) {
    const ulong b = tile / tpr, n0 = (tile % tpr) * CD_TT;
    const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
    const bool act = t < nt;
    const ulong tok = b * N + n0 + t, rbase = tok * C + 4 * g;

    float pg0[4], pg1[4], pg2[4];
    CD_GRAD_LOAD(0);
    float4 xq[CD_HPI], xk[CD_HPI], uq[CD_HPI], uk[CD_HPI];
#pragma unroll
    for (uint i = 0; i < CD_HPI; i++) {
      const uint h = slot + CD_HS * i;
      xq[i] = xk[i] = (float4)(0.0f);
      if (act && h < H) {
        xq[i] = CD_LD4(q_raw, q_raw_off + rbase + h * CD_D);
        xk[i] = CD_LD4(k_raw, k_raw_off + rbase + h * CD_D);
      }
    }
    float irq = 0.0f, irk = 0.0f;
    float4 cs = (float4)(0.0f), sn = (float4)(0.0f);
    if (act) {
      irq = inv_rms[inv_off + tok];
      irk = inv_rms[inv_off + BN + tok];
      if (!cam) {
        const ulong rrow = (n0 + t) * CD_DH + (4 * g - CD_DH);
        cs = CD_LDF4(rope_cos, rc_off + rrow);
        sn = CD_LDF4(rope_sin, rs_off + rrow);
      }
    }
    for (uint idx = lid; idx < 2 * CD_TT * 4; idx += CD_RL) {
      const uint which = idx / (CD_TT * 4), tt = (idx / 4) % CD_TT, r = idx % 4;
      float4 x = (float4)(0.0f);
      if (tt < nt) x = CD_LDF4((which ? proj_kv + pkv_off : proj_q + pq_off), (b * N + n0 + tt) * 16 + 4 * r);
      Pl[which][tt][r] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    local const float4 *Pq = Pl[0][t], *Pk = Pl[1][t];

    float sq_acc = 0.0f, sk_acc = 0.0f;
#pragma unroll
    for (uint i = 0; i < CD_HPI; i++) {
      const uint h = slot + CD_HS * i;
      const bool on = act && h < H;
      const uint c = h * CD_D + 4 * g;
      float4 wq = (float4)(0.0f), wk = (float4)(0.0f);
      if (on) wq = CD_LDF4(qw, qw_off + c), wk = CD_LDF4(kw, kw_off + c);
      const float4 aq = xq[i] * irq * wq, ak = xk[i] * irk * wk;
      const float4 kn = fmax(ak, 0.0f) * k_scale;
      float4 ko = (float4)(0.0f);
      if (has_gi) {
        ko = cam ? cd_r_cam(Pk, kn) : fma(kn.yxwz, sn, kn * cs);
        part[0][row][g] = cd_r_sq4(kn);
        part[1][row][g] = cd_r_sq4(ko);
      }
      /* this step's gradient tiles in, the next step's loads issued */
      for (uint k = 0; k < 4; k++) {
        const uint idx = lid + CD_RL * k, t2 = idx % CD_TT, d = (idx / CD_TT) % CD_D, s2 = idx / (CD_TT * CD_D);
        const uint o = (s2 * CD_TT + t2) * CD_GSTR + d;
        gt[0][o] = pg0[k], gt[1][o] = pg1[k], gt[2][o] = pg2[k];
      }
      if (i + 1 < CD_HPI) CD_GRAD_LOAD(i + 1);
      barrier(CLK_LOCAL_MEM_FENCE);
      float4 gq = vload4(0, gt[0] + row * CD_GSTR + 4 * g);
      float4 gk = vload4(0, gt[1] + row * CD_GSTR + 4 * g);
      const float4 gv = vload4(0, gt[2] + row * CD_GSTR + 4 * g);
      if (lid < CD_ROWS) {
        /* dpost, dpre of (head slot, token) row lid */
        float vpo = 0.0f, vpr = 0.0f;
        const uint t2 = lid % CD_TT, h2 = lid / CD_TT + CD_HS * i;
        if (has_gi && t2 < nt && h2 < H) {
          float sp = 0.0f, so = 0.0f;
          for (uint u = 0; u < CD_G4; u++) {
            sp += part[0][lid][u];
            so += part[1][lid][u];
          }
          const float gi = grad_infl[gi_off + (b * H + h2) * N + n0 + t2];
          const float cpre = fmax(sp, 1e-12f), cpost = fmax(so, 1e-12f);
          vpo = so > 1e-12f ? gi / cpre : 0.0f;
          vpr = sp > 1e-12f ? -gi * cpost / (cpre * cpre) : 0.0f;
        }
        dpp[0][lid] = vpo;
        dpp[1][lid] = vpr;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      const float dpost = dpp[0][row], dpre = dpp[1][row];
      gk = fma(2.0f * ko, (float4)(dpost), gk);
      const float4 dxq = cam ? cd_r_cam_t(Pq, gq) : fma(gq.yxwz, sn.yxwz, gq * cs);
      const float4 dxk = cam ? cd_r_cam_t(Pk, gk) : fma(gk.yxwz, sn.yxwz, gk * cs);
      const float4 dxv = cam ? cd_r_cam_t(Pk, gv) : fma(gv.yxwz, sn.yxwz, gv * cs);
      const float4 daq = select((float4)(0.0f), dxq, isgreater(aq, (float4)(0.0f)));
      const float4 dak =
          select((float4)(0.0f), fma(2.0f * kn, (float4)(dpre), dxk) * k_scale, isgreater(ak, (float4)(0.0f)));
      sq_acc = cd_r_dotw(daq, xq[i], wq, sq_acc);
      sk_acc = cd_r_dotw(dak, xk[i], wk, sk_acc);
      uq[i] = daq * irq * wq;
      uk[i] = dak * irk * wk;
      if (on) CD_ST4(dv_raw, dv_off + rbase + h * CD_D, dxv);
      /* norm-weight terms of this step's channels, summed over the tile's tokens in order */
      vstore4(daq * xq[i] * irq, 0, gt[0] + row * CD_GSTR + 4 * g);
      vstore4(dak * xk[i] * irk, 0, gt[1] + row * CD_GSTR + 4 * g);
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint idx = lid; idx < 2 * CD_HS * CD_D; idx += CD_RL) {
        const uint which = idx / (CD_HS * CD_D), r = idx % (CD_HS * CD_D), s2 = r / CD_D, d = r % CD_D;
        const uint h2 = s2 + CD_HS * i;
        if (h2 < H) {
          float sum = 0.0f;
          for (uint u = 0; u < CD_TT; u++) sum += gt[which][(s2 * CD_TT + u) * CD_GSTR + d];
          accw[which * C + h2 * CD_D + d] += sum;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* S per token over all heads, in a fixed order; then dq_raw, dk_raw */
    part[0][row][g] = sq_acc;
    part[1][row][g] = sk_acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 2 * CD_TT) {
      const uint which = lid / CD_TT, tt = lid % CD_TT;
      float sum = 0.0f;
      for (uint s = 0; s < CD_HS; s++)
        for (uint u = 0; u < CD_G4; u++) sum += part[which][s * CD_TT + tt][u];
      Sl[which][tt] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float Sq = Sl[0][t], Sk = Sl[1][t];
    const float cq = irq * irq * irq / (float)C, ck = irk * irk * irk / (float)C;
#pragma unroll
    for (uint i = 0; i < CD_HPI; i++) {
      const uint h = slot + CD_HS * i;
      if (act && h < H) {
        CD_ST4(dq_raw, dq_off + rbase + h * CD_D, fma(-cq * xq[i], (float4)(Sq), uq[i]));
        CD_ST4(dk_raw, dk_off + rbase + h * CD_D, fma(-ck * xk[i], (float4)(Sk), uk[i]));
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint c = lid; c < 2 * C; c += CD_RL) part_w[(ulong)get_group_id(0) * 2 * C + c] = accw[c];
}

/* The norm-weight gradients: column c of the (rows, 2 C) partials summed over the rows in a fixed order. Local size
 * (W, R), W, R <= 32: lane r takes rows r, r + R, ... in order, then the R lane sums in order. */
kernel void cd_prep_bwd_regs_reduce(global const float *part_w, ulong rows, uint C, global float *dqw, ulong dqw_off,
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
