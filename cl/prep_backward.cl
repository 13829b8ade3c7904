/* Prep backward (docs/math.md §4): the exact gradients of cl/prep.cl.
 *
 * Per (b, n, h), with a = raw * inv_rms * w (pre-ReLU), qn = relu(a_q), kn = relu(a_k) * k_scale, vn = v_raw and
 * T the camera transform (first half, 4x4 per group) + RoPE (second half):
 *   inflation_sq = cl(post) / cl(pre), pre = |kn|^2, post = |T kn|^2, cl(x) = max(x, 1e-12):
 *     dpost = gi [post > 1e-12] / cl(pre),  dpre = -gi cl(post) / cl(pre)^2 [pre > 1e-12]
 *     g_k += 2 (T kn) dpost;  kn receives 2 kn dpre
 *   dx = T^T g;  da_q = [a_q > 0] dx_q;  da_k = [a_k > 0] (dx_k + 2 kn dpre) k_scale;  dv_raw = T^T g_v
 *   dP[i][j] += g[4g'+i] x[4g'+j]; dcos[n][r] += g[Dh+r] x[Dh+r]; dsin[n][r] += g[Dh+r] x[Dh+(r^1)]
 * and the full-channel RMSNorm, ir = inv_rms per token over all heads:
 *   S = sum_c da[c] x[c] w[c],  dx_raw[c] = da[c] ir w[c] - ir^3 / C x[c] S,  dw[c] += da[c] x[c] ir.
 *
 * Three kernels, no atomics, every sum in a fixed order (bit-identical run to run):
 * cd_prep_bwd_heads   per (b, tile of CD_TS tokens, h), like the forward: recomputes the forward of that head,
 *                     writes dv_raw, u = da ir w (f32: straight into dq_raw/dk_raw; 16-bit types: f32 scratch),
 *                     the head's share of S per token, the per-(tile, h) norm-weight partials and, when asked,
 *                     per-(b, n, h) dproj and RoPE-table partials. Upstream gradients (B, H, D, N) come through
 *                     a local tile (coalesced along N).
 * cd_prep_bwd_tokens  per (b, tile of CD_TT tokens): S = sum over heads, dproj and RoPE partials summed over
 *                     heads, then dx_raw = u - ir^3 / C x S elementwise (coalesced along the channels).
 * cd_prep_bwd_reduce  the norm-weight gradients (sum over token tiles) and the RoPE-table gradients (sum over b).
 *
 * This is the form CPUs run, and every device for dproj/drope; GPUs run cl/prep_backward_fused.cl otherwise.
 * Build options: CD_DTYPE (storage of q/k/v raw and dq/dk/dv raw), CD_SDTYPE (of the gradients of q/k/v, default
 * CD_DTYPE; common.cl), CD_D, CD_TS.
 * Every buffer comes with a ulong element offset. */

#if !defined(CD_D) || !defined(CD_TS)
#error "CD_D and CD_TS must be given as build options (cd_prep_kernel)"
#endif
#define CD_TT 16          /* tokens per work-group of cd_prep_bwd_tokens */
#define CD_GH (CD_G4 / 2) /* units in the camera half */

/* flags */
#define CD_HAS_GQ 1u
#define CD_HAS_GK 2u
#define CD_HAS_GV 4u
#define CD_HAS_GI 8u
#define CD_WANT_PQ 16u   /* dproj_q */
#define CD_WANT_ROPE 32u /* drope_cos or drope_sin */
#define CD_WANT_PKV 64u  /* dproj_kv */
#define CD_WANT_COS 128u /* reduce: drope_cos */
#define CD_WANT_SIN 256u /* reduce: drope_sin */

/* tile[d][t] = src[base + d*N + n0 + t] (zero past the last token) */
inline void cd_load_tile(local float (*tile)[CD_TS + 1], global const cd_sstore_t *src, ulong base, ulong N, uint n0,
                         uint nt, uint lid, uint L) {
  for (uint idx = lid; idx < CD_D * CD_TS; idx += L) {
    const uint d = idx / CD_TS, t = idx % CD_TS;
    tile[d][t] = t < nt ? CD_SLOAD(src, base + (ulong)d * N + n0 + t) : 0.0f;
  }
}

/* y = T x (transpose 0) or y = T^T x (1) for this work-item's 4 channels: the 4x4 block (first half, read from
 * global memory: the units of a token share it through the cache, and registers stay free) or RoPE,
 * y[r] = x[r^1]·sin[r] + x[r]·cos[r] (transposed: sin[r^1]). Each y[r] is fma'd over k = 0..3 onto 0. */
inline void cd_transform4(int first, int transpose, global const float *P, const float *cs, const float *sn,
                          const float *x, float *y) {
  if (first) {
    for (int r = 0; r < 4; r++) {
      float acc = 0.0f;
      for (int k = 0; k < 4; k++) acc = fma(transpose ? P[4 * k + r] : P[4 * r + k], x[k], acc);
      y[r] = acc;
    }
  } else {
    for (int r = 0; r < 4; r++) y[r] = fma(x[r ^ 1], sn[transpose ? r ^ 1 : r], x[r] * cs[r]);
  }
}

/* Work-group: CD_TS consecutive tokens of one (b, h); local size CD_TS*CD_G4, one work-item per
 * (token, 4-channel unit). Global: (tiles * local size, H, B).
 * Scratch: part_s (2, B, N, H) the head's share of S; part_w (2, slots, C) norm-weight partials, slot = b * tiles
 * + tile; part_proj (B, N, H, 32) dproj_q then dproj_kv entries; part_rope (2, B, N, H, Dh) cos then sin;
 * uq, uk (B, N, H, D) f32 u = da ir w (16-bit storage types only; f32 writes u into dq_raw, dk_raw). */
kernel void cd_prep_bwd_heads(CD_PREP_BWD_INPUTS, global cd_store_t *dq_raw, ulong dq_off, global cd_store_t *dk_raw,
                                ulong dk_off, global cd_store_t *dv_raw, ulong dv_off, global float *uq, ulong uq_off,
                                global float *uk, ulong uk_off, global float *part_s, ulong ps_off,
                                global float *part_w, ulong pw_off, global float *part_proj, ulong pp_off,
                                global float *part_rope, ulong pr_off, ulong N, uint H, float k_scale, uint flags) {
  local float tile[CD_D][CD_TS + 1];
  local float red[2][CD_TS][CD_G4];

  const uint lid = get_local_id(0), L = get_local_size(0);
  const uint h = get_global_id(1);
  const ulong b = get_global_id(2);
  const uint B = get_global_size(2);
  const uint tile_i = get_group_id(0), ntiles = get_num_groups(0);
  const uint n0 = tile_i * CD_TS;
  const uint nt = (N - n0) < CD_TS ? (uint)(N - n0) : CD_TS;
  const uint t = lid / CD_G4, g = lid % CD_G4;
  const int active = t < nt;
  const ulong n = n0 + t;
  const ulong tok = b * N + n;
  const ulong BN = (ulong)B * N;
  const uint C = H * CD_D;
  const int first = 4 * g < CD_DH;
  const int has_gq = (flags & CD_HAS_GQ) != 0, has_gk = (flags & CD_HAS_GK) != 0;
  const int has_gv = (flags & CD_HAS_GV) != 0, has_gi = (flags & CD_HAS_GI) != 0;
  const int want_pq = (flags & CD_WANT_PQ) != 0, want_pkv = (flags & CD_WANT_PKV) != 0;
  const int want_proj = want_pq || want_pkv, want_rope = (flags & CD_WANT_ROPE) != 0;
  const ulong slot = b * ntiles + tile_i, slots = (ulong)B * ntiles;

  /* the two 4x4 matrices of the token (camera half; past the last token: the tile's first token, never stored)
   * or this unit's RoPE coefficients */
  const ulong ptok = active ? tok : b * N + n0;
  global const float *Pq = proj_q + pq_off + ptok * 16, *Pkv = proj_kv + pkv_off + ptok * 16;
  float cs[4], sn[4];
  float irq = 0.0f, irk = 0.0f;
  for (int j = 0; j < 4; j++) cs[j] = sn[j] = 0.0f;
  if (active) {
    irq = inv_rms[inv_off + tok];
    irk = inv_rms[inv_off + BN + tok];
    if (!first) {
      const ulong rrow = n * CD_DH + (4 * g - CD_DH);
      for (int j = 0; j < 4; j++) {
        cs[j] = rope_cos[rc_off + rrow + j];
        sn[j] = rope_sin[rs_off + rrow + j];
      }
    }
  }

  const ulong row = (tok * H + h) * CD_D + 4 * g;
  const uint c0 = h * CD_D + 4 * g;
  /* forward recompute (same expressions as cl/prep.cl, so masks and clamps agree) */
  float xq[4], xk[4], xv[4], aq[4], ak[4], qn[4], kn[4], ko[4], wq[4], wk[4];
  float pre = 0.0f, post = 0.0f;
  const int need_v = active && has_gv && (want_pkv || want_rope);
  for (int j = 0; j < 4; j++) {
    wq[j] = qw[qw_off + c0 + j];
    wk[j] = kw[kw_off + c0 + j];
    xq[j] = active ? CD_LOAD(q_raw, q_raw_off + row + j) : 0.0f;
    xk[j] = active ? CD_LOAD(k_raw, k_raw_off + row + j) : 0.0f;
    xv[j] = need_v ? CD_LOAD(v_raw, v_raw_off + row + j) : 0.0f;
    aq[j] = xq[j] * irq * wq[j];
    ak[j] = xk[j] * irk * wk[j];
    qn[j] = aq[j] > 0.0f ? aq[j] : 0.0f;
    kn[j] = (ak[j] > 0.0f ? ak[j] : 0.0f) * k_scale;
    pre = fma(kn[j], kn[j], pre);
  }
  cd_transform4(first, 0, Pkv, cs, sn, kn, ko);
  for (int j = 0; j < 4; j++) post = fma(ko[j], ko[j], post);

  /* inflation_sq chain: the token's pre and post sums, in the forward's order */
  red[0][t][g] = pre;
  red[1][t][g] = post;
  barrier(CLK_LOCAL_MEM_FENCE);
  float dpost = 0.0f, dpre = 0.0f;
  if (has_gi) {
    float sp = 0.0f, so = 0.0f;
    for (uint u = 0; u < CD_G4; u++) {
      sp += red[0][t][u];
      so += red[1][t][u];
    }
    const float gi = active ? grad_infl[gi_off + (b * H + h) * N + n] : 0.0f;
    const float cpre = fmax(sp, 1e-12f), cpost = fmax(so, 1e-12f);
    dpost = so > 1e-12f ? gi / cpre : 0.0f;
    dpre = sp > 1e-12f ? -gi * cpost / (cpre * cpre) : 0.0f;
  }

  /* upstream gradients of this unit's channels (absent ones are zero) */
  const ulong gbase = ((b * H + h) * CD_D) * N;
  float gq[4], gk[4], gv[4];
  for (int j = 0; j < 4; j++) gq[j] = gk[j] = gv[j] = 0.0f;
  if (has_gq) cd_load_tile(tile, grad_q, gq_off + gbase, N, n0, nt, lid, L);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_gq)
    for (int j = 0; j < 4; j++) gq[j] = tile[4 * g + j][t];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_gk) cd_load_tile(tile, grad_k, gk_off + gbase, N, n0, nt, lid, L);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_gk)
    for (int j = 0; j < 4; j++) gk[j] = tile[4 * g + j][t];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_gv) cd_load_tile(tile, grad_v, gv_off + gbase, N, n0, nt, lid, L);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_gv)
    for (int j = 0; j < 4; j++) gv[j] = tile[4 * g + j][t];
  for (int j = 0; j < 4; j++) gk[j] = fma(2.0f * ko[j], dpost, gk[j]);

  float dxq[4], dxk[4], dxv[4], daq[4], dak[4];
  cd_transform4(first, 1, Pq, cs, sn, gq, dxq);
  cd_transform4(first, 1, Pkv, cs, sn, gk, dxk);
  cd_transform4(first, 1, Pkv, cs, sn, gv, dxv);
  float sq = 0.0f, sk = 0.0f;
  for (int j = 0; j < 4; j++) {
    daq[j] = aq[j] > 0.0f ? dxq[j] : 0.0f;
    dak[j] = ak[j] > 0.0f ? fma(2.0f * kn[j], dpre, dxk[j]) * k_scale : 0.0f;
    sq = fma(daq[j] * xq[j], wq[j], sq);
    sk = fma(dak[j] * xk[j], wk[j], sk);
  }
  if (active) {
    for (int j = 0; j < 4; j++) {
      CD_STORE(dv_raw, dv_off + row + j, dxv[j]);
#if CD_DTYPE == 0
      dq_raw[dq_off + row + j] = daq[j] * irq * wq[j];
      dk_raw[dk_off + row + j] = dak[j] * irk * wk[j];
#else
      uq[uq_off + row + j] = daq[j] * irq * wq[j];
      uk[uk_off + row + j] = dak[j] * irk * wk[j];
#endif
    }
    if (!first && want_rope) {
      const ulong rrow = (tok * H + h) * CD_DH + (4 * g - CD_DH), BNHDh = BN * H * CD_DH;
      for (int j = 0; j < 4; j++) {
        part_rope[pr_off + rrow + j] = fma(gv[j], xv[j], fma(gk[j], kn[j], gq[j] * qn[j]));
        part_rope[pr_off + BNHDh + rrow + j] = fma(gv[j], xv[j ^ 1], fma(gk[j], kn[j ^ 1], gq[j] * qn[j ^ 1]));
      }
    }
  }

  /* the head's share of S per token, summed over units in order */
  barrier(CLK_LOCAL_MEM_FENCE);
  red[0][t][g] = sq;
  red[1][t][g] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < 2 * CD_TS) {
    const uint which = lid / CD_TS, tt = lid % CD_TS;
    float s = 0.0f;
    for (uint u = 0; u < CD_G4; u++) s += red[which][tt][u];
    if (tt < nt) part_s[ps_off + ((ulong)which * BN + b * N + n0 + tt) * H + h] = s;
  }

  /* norm-weight partials of this head's channels, summed over the tile's tokens in order */
  for (int j = 0; j < 4; j++) tile[4 * g + j][t] = daq[j] * xq[j] * irq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint d = lid; d < CD_D; d += L) {
    float s = 0.0f;
    for (uint u = 0; u < CD_TS; u++) s += tile[d][u];
    part_w[pw_off + slot * C + h * CD_D + d] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int j = 0; j < 4; j++) tile[4 * g + j][t] = dak[j] * xk[j] * irk;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint d = lid; d < CD_D; d += L) {
    float s = 0.0f;
    for (uint u = 0; u < CD_TS; u++) s += tile[d][u];
    part_w[pw_off + (slots + slot) * C + h * CD_D + d] = s;
  }

  /* dproj partials of this head: the camera-half units of each token summed in order, 8 entries at a time */
  {
    /* entry e of camera unit g of token t goes to tile[8 g + e][t] (8 CD_GH = CD_D rows, CD_TS columns): inside the
     * tile's two dimensions (a pointer to row 0 indexed past that row's end was out of bounds: oclgrind "Index
     * exceeds static array size") */
    for (uint chunk = 0; chunk < 4; chunk++) {
      barrier(CLK_LOCAL_MEM_FENCE);
      if (first && want_proj)
        for (int e = 0; e < 8; e++) {
          const int i = (int)(chunk % 2) * 2 + e / 4, j = e % 4;
          tile[8 * g + e][t] = chunk < 2 ? gq[i] * qn[j] : fma(gv[i], xv[j], gk[i] * kn[j]);
        }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint w = lid; want_proj && w < CD_TS * 8; w += L) {
        const uint tt = w / 8, e = w % 8;
        float s = 0.0f;
        for (uint u = 0; u < CD_GH; u++) s += tile[8 * u + e][tt];
        if (tt < nt) part_proj[pp_off + ((b * N + n0 + tt) * H + h) * 32 + chunk * 8 + e] = s;
      }
    }
  }
}

/* Work-group: CD_TT consecutive tokens of one b, any local size. Global: (tiles * local size, B). */
kernel void cd_prep_bwd_tokens(global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw,
                               ulong k_raw_off, global const float *qw, ulong qw_off, global const float *kw,
                               ulong kw_off, global const float *inv_rms, ulong inv_off, global cd_store_t *dq_raw,
                               ulong dq_off, global cd_store_t *dk_raw, ulong dk_off, global const float *uq,
                               ulong uq_off, global const float *uk, ulong uk_off, global const float *part_s,
                               ulong ps_off, global const float *part_proj, ulong pp_off,
                               global const float *part_rope, ulong pr_off, global float *rope_b, ulong rb_off,
                               global float *dproj_q, ulong dpq_off, global float *dproj_kv, ulong dpkv_off, ulong N,
                               uint H, uint flags) {
  local float S[2][CD_TT];
  local float cf[2][CD_TT];
  const uint lid = get_local_id(0), L = get_local_size(0);
  const ulong b = get_global_id(1);
  const ulong BN = (ulong)get_global_size(1) * N;
  const ulong n0 = (ulong)get_group_id(0) * CD_TT;
  const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
  const ulong tok0 = b * N + n0;
  const uint C = H * CD_D;
  const int want_pq = (flags & CD_WANT_PQ) != 0, want_pkv = (flags & CD_WANT_PKV) != 0;
  const int want_rope = (flags & CD_WANT_ROPE) != 0;

  /* S per token, summed over the heads in order, and the coefficients ir and ir^3 / C */
  for (uint w = lid; w < 2 * CD_TT; w += L) {
    const uint which = w / CD_TT, tt = w % CD_TT;
    float s = 0.0f, c = 0.0f;
    if (tt < nt) {
      global const float *p = part_s + ps_off + ((ulong)which * BN + tok0 + tt) * H;
      for (uint h = 0; h < H; h++) s += p[h];
      const float ir = inv_rms[inv_off + (ulong)which * BN + tok0 + tt];
      c = ir * ir * ir / (float)C;
    }
    S[which][tt] = s;
    cf[which][tt] = c;
  }
  /* dproj per token: the head partials summed in order */
  for (uint w = lid; (want_pq || want_pkv) && w < nt * 32; w += L) {
    const uint tt = w / 32, e = w % 32;
    global const float *p = part_proj + pp_off + (tok0 + tt) * H * 32 + e;
    float s = 0.0f;
    for (uint h = 0; h < H; h++) s += p[h * 32];
    if (e < 16 && want_pq) dproj_q[dpq_off + (tok0 + tt) * 16 + e] = s;
    if (e >= 16 && want_pkv) dproj_kv[dpkv_off + (tok0 + tt) * 16 + e - 16] = s;
  }
  /* RoPE-table partials of this b: the head partials summed in order */
  for (uint w = lid; want_rope && w < 2 * nt * CD_DH; w += L) {
    const uint which = w / (nt * CD_DH), rem = w % (nt * CD_DH), tt = rem / CD_DH, r = rem % CD_DH;
    global const float *p = part_rope + pr_off + (ulong)which * BN * H * CD_DH + (tok0 + tt) * H * CD_DH + r;
    float s = 0.0f;
    for (uint h = 0; h < H; h++) s += p[h * CD_DH];
    rope_b[rb_off + (ulong)which * BN * CD_DH + (tok0 + tt) * CD_DH + r] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  /* dx_raw = u - ir^3 / C x S, token by token along the channels */
  for (uint tt = 0; tt < nt; tt++)
    for (uint c = lid; c < C; c += L) {
      const ulong e = (tok0 + tt) * C + c;
#if CD_DTYPE == 0
      const float u_q = dq_raw[dq_off + e], u_k = dk_raw[dk_off + e];
#else
      const float u_q = uq[uq_off + e], u_k = uk[uk_off + e];
#endif
      const float xq = CD_LOAD(q_raw, q_raw_off + e), xk = CD_LOAD(k_raw, k_raw_off + e);
      CD_STORE(dq_raw, dq_off + e, fma(-cf[0][tt] * xq, S[0][tt], u_q));
      CD_STORE(dk_raw, dk_off + e, fma(-cf[1][tt] * xk, S[1][tt], u_k));
    }
}

/* Final fixed-order sums. Local size (W, R), W <= 32 columns, R <= 32 lanes. Work-groups [0, nwb): norm weights,
 * W columns (q then k over 2C) each summed over the `slots` token-tile partials: lane r takes slots r, r + R, ...
 * in order, then the R lane sums in order. Work-groups [nwb, ...): RoPE tables (cos then sin over 2 N Dh), each
 * entry summed over b in order. */
kernel void cd_prep_bwd_reduce(global const float *part_w, ulong pw_off, global const float *part_rope, ulong pr_off,
                               global float *dqw, ulong dqw_off, global float *dkw, ulong dkw_off,
                               global float *dcos, ulong dcos_off, global float *dsin, ulong dsin_off, uint C,
                               ulong slots, uint B, ulong NDh, uint nwb, uint flags) {
  local float red[32][32];
  const uint lx = get_local_id(0), ly = get_local_id(1), W = get_local_size(0), R = get_local_size(1);
  const uint gx = get_group_id(0);
  const int weights = gx < nwb;
  const ulong i = (ulong)gx * W + lx;
  float s = 0.0f;
  if (weights && i < 2 * (ulong)C) {
    const uint which = (uint)(i / C), c = (uint)(i % C);
    global const float *p = part_w + pw_off + (ulong)which * slots * C + c;
    for (ulong u = ly; u < slots; u += R) s += p[u * C];
  }
  if (!weights) {
    const ulong j = ((ulong)(gx - nwb) * R + ly) * W + lx;
    if (j < 2 * NDh) {
      const uint which = (uint)(j / NDh);
      const ulong e = j % NDh;
      global const float *p = part_rope + pr_off + (ulong)which * B * NDh + e;
      float t = 0.0f;
      for (uint u = 0; u < B; u++) t += p[u * NDh];
      if (which == 0 && (flags & CD_WANT_COS)) dcos[dcos_off + e] = t;
      if (which == 1 && (flags & CD_WANT_SIN)) dsin[dsin_off + e] = t;
    }
  }
  red[ly][lx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (weights && ly == 0 && i < 2 * (ulong)C) {
    float t = 0.0f;
    for (uint r = 0; r < R; r++) t += red[r][lx];
    const uint which = (uint)(i / C), c = (uint)(i % C);
    if (which == 0) dqw[dqw_off + c] = t;
    else dkw[dkw_off + c] = t;
  }
}
