/* Prep forward (docs/math.md §2): per-token inverse RMS, then the fused
 * RMSNorm + ReLU + k-scale + UCPE 4x4 camera transform + RoPE, written
 * transposed to (B, H, D, N).
 *
 * Build options: CD_DTYPE (storage type of q/k/v raw, see common.cl), CD_SDTYPE (of q/k/v out, default CD_DTYPE),
 * CD_D (head dim, multiple of 8, <= 128), CD_TS (tokens per work-group).
 * Every buffer comes with a ulong element offset. */

#ifndef CD_D /* cd_prep_inv_rms is built without CD_D and CD_TS */
#define CD_D 8
#endif
#ifndef CD_TS
#define CD_TS 32
#endif

/* inv_rms[0][b*N+n] for q, inv_rms[1][b*N+n] for k (stride BN).
 * One work-group per token; any power-of-two local size <= 1024. */
kernel void cd_prep_inv_rms(global const cd_store_t *q_raw, ulong q_off, global const cd_store_t *k_raw, ulong k_off,
                            global float *inv_rms, ulong inv_off, ulong BN, uint C, float eps,
                            local float *scratch /* 2 * local size */) {
  const size_t tok = get_group_id(0);
  const uint lid = get_local_id(0), L = get_local_size(0);
  const ulong row = (ulong)tok * C;
  float sq = 0.0f, sk = 0.0f;
  for (uint c = lid; c < C; c += L) {
    float a = CD_LOAD(q_raw, q_off + row + c);
    float b = CD_LOAD(k_raw, k_off + row + c);
    sq = fma(a, a, sq);
    sk = fma(b, b, sk);
  }
  scratch[lid] = sq;
  scratch[L + lid] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = L / 2; s > 0; s >>= 1) {
    if (lid < s) {
      scratch[lid] += scratch[lid + s];
      scratch[L + lid] += scratch[L + lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    const float invC = 1.0f / (float)C;
    inv_rms[inv_off + tok] = 1.0f / sqrt(scratch[0] * invC + eps);
    inv_rms[inv_off + BN + tok] = 1.0f / sqrt(scratch[L] * invC + eps);
  }
}

/* Writes the (CD_D x CD_TS) local tile to out (B, H, D, N), rows along N. */
inline void flush_tile(local float (*tile)[CD_TS + 1], global cd_sstore_t *out, ulong base, ulong N, uint n0, uint nt,
                       uint lid, uint L) {
  for (uint idx = lid; idx < CD_D * CD_TS; idx += L) {
    const uint d = idx / CD_TS, t = idx % CD_TS;
    if (t < nt) CD_SSTORE(out, base + (ulong)d * N + n0 + t, tile[d][t]);
  }
}

/* Work-group: CD_TS consecutive tokens of one (b, h); local size CD_TS*CD_G4,
 * one work-item per (token, 4-channel unit). Global: (tiles*L, H, B). */
kernel void cd_prep_forward(global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw,
                            ulong k_raw_off, global const cd_store_t *v_raw, ulong v_raw_off,
                            global const float *qw, ulong qw_off, global const float *kw, ulong kw_off,
                            global const float *proj_q, ulong pq_off, global const float *proj_kv, ulong pkv_off,
                            global const float *rope_cos, ulong rc_off, global const float *rope_sin, ulong rs_off,
                            global const float *inv_rms, ulong inv_off, global cd_sstore_t *q_out, ulong q_off,
                            global cd_sstore_t *k_out, ulong k_off, global cd_sstore_t *v_out, ulong v_off,
                            global float *infl, ulong infl_off, ulong N, uint H, float k_scale) {
  local float tile[CD_D][CD_TS + 1];
  local float pre_part[CD_TS][CD_G4];
  local float post_part[CD_TS][CD_G4];

  const uint lid = get_local_id(0), L = get_local_size(0);
  const uint h = get_global_id(1);
  const ulong b = get_global_id(2);
  const uint n0 = get_group_id(0) * CD_TS;
  const uint nt = (N - n0) < CD_TS ? (uint)(N - n0) : CD_TS;
  const uint t = lid / CD_G4, g = lid % CD_G4;
  const bool active = t < nt;
  const ulong n = n0 + t;
  const ulong BN = (ulong)get_global_size(2) * N;

  float qo[4], ko[4], vo[4];
  float pre = 0.0f, post = 0.0f;
  if (active) {
    const ulong tok = b * N + n;
    const ulong row = (tok * H + h) * CD_D + 4 * g;
    const float irq = inv_rms[inv_off + tok], irk = inv_rms[inv_off + BN + tok];
    float qn[4], kn[4], vn[4];
    for (int j = 0; j < 4; j++) {
      const uint c = h * CD_D + 4 * g + j;
      float qv = CD_LOAD(q_raw, q_raw_off + row + j) * irq * qw[qw_off + c];
      float kv = CD_LOAD(k_raw, k_raw_off + row + j) * irk * kw[kw_off + c];
      qn[j] = qv > 0.0f ? qv : 0.0f;
      kn[j] = (kv > 0.0f ? kv : 0.0f) * k_scale;
      vn[j] = CD_LOAD(v_raw, v_raw_off + row + j);
      pre = fma(kn[j], kn[j], pre);
    }
    if (4 * g < CD_DH) {
      /* camera transform: x_out[i] = sum_j P[i][j] x[j] */
      global const float *Pq = proj_q + pq_off + tok * 16, *Pkv = proj_kv + pkv_off + tok * 16;
      for (int i = 0; i < 4; i++) {
        float aq = 0.0f, ak = 0.0f, av = 0.0f;
        for (int j = 0; j < 4; j++) {
          aq = fma(Pq[4 * i + j], qn[j], aq);
          ak = fma(Pkv[4 * i + j], kn[j], ak);
          av = fma(Pkv[4 * i + j], vn[j], av);
        }
        qo[i] = aq, ko[i] = ak, vo[i] = av;
      }
    } else {
      /* interleaved-pair RoPE: y[r] = x[r] cos[r] + x[r^1] sin[r] */
      const ulong rrow = n * CD_DH + (4 * g - CD_DH);
      for (int j = 0; j < 4; j++) {
        const float cs = rope_cos[rc_off + rrow + j], sn = rope_sin[rs_off + rrow + j];
        qo[j] = fma(qn[j ^ 1], sn, qn[j] * cs);
        ko[j] = fma(kn[j ^ 1], sn, kn[j] * cs);
        vo[j] = fma(vn[j ^ 1], sn, vn[j] * cs);
      }
    }
    for (int j = 0; j < 4; j++) post = fma(ko[j], ko[j], post);
  } else {
    for (int j = 0; j < 4; j++) qo[j] = ko[j] = vo[j] = 0.0f;
  }
  if (t < CD_TS) {
    pre_part[t][g] = pre;
    post_part[t][g] = post;
  }

  const ulong base = ((b * H + h) * CD_D) * N;
  /* q */
  if (t < CD_TS)
    for (int j = 0; j < 4; j++) tile[4 * g + j][t] = qo[j];
  barrier(CLK_LOCAL_MEM_FENCE);
  flush_tile(tile, q_out, q_off + base, N, n0, nt, lid, L);
  barrier(CLK_LOCAL_MEM_FENCE);
  /* k */
  if (t < CD_TS)
    for (int j = 0; j < 4; j++) tile[4 * g + j][t] = ko[j];
  barrier(CLK_LOCAL_MEM_FENCE);
  flush_tile(tile, k_out, k_off + base, N, n0, nt, lid, L);
  barrier(CLK_LOCAL_MEM_FENCE);
  /* v */
  if (t < CD_TS)
    for (int j = 0; j < 4; j++) tile[4 * g + j][t] = vo[j];
  barrier(CLK_LOCAL_MEM_FENCE);
  flush_tile(tile, v_out, v_off + base, N, n0, nt, lid, L);

  /* inflation_sq = max(post, 1e-12) / max(pre, 1e-12), summed in a fixed order */
  if (g == 0 && active) {
    float sp = 0.0f, so = 0.0f;
    for (uint u = 0; u < CD_G4; u++) {
      sp += pre_part[t][u];
      so += post_part[t][u];
    }
    infl[infl_off + (b * H + h) * N + n] = fmax(so, 1e-12f) / fmax(sp, 1e-12f);
  }
}

/* ------------------------------------------------------------------------------------------------------------
 * Fused prep forward: the inverse RMS and the transform in one kernel, read straight from the (B, N, H, D) rows and
 * written straight to the (B, H, D, N) rows, without a transposing tile in local memory.
 *
 * A work-group owns CD_TT consecutive tokens of one batch row across ALL heads (a tile) and walks tiles
 * persistently (tile = group, group + groups, ...), so that the host chooses how many tiles are in flight and with
 * them the bytes the L2 cache must hold between the two reads of q_raw and k_raw. Per tile:
 *   phase 1  walks the heads, HB at a time, each work-item summing the squares of its float4 of q_raw and k_raw;
 *            the work-group then sums each token's shares in a fixed order: inv_rms (2, B, N), also written out
 *            for the backward;
 *   phase 2  walks the heads again in reverse order (the rows phase 1 read last are the likeliest still in the
 *            L2 cache), transforms each float4 of q, k and v and stores its four channels as scalars: the
 *            work-items of one 4-channel unit are CD_TT consecutive tokens, so a row store covers CD_TT tokens
 *            (32 bytes at CD_TT = 8 in f32). The squares before and after k's transform go to a ring of CD_RS
 *            steps in local memory, summed per (token, head) in a fixed order every CD_RS steps: inflation_sq.
 * Work-item (hl, g, t) = lid / (CD_TT * CD_G4), (lid / CD_TT) % CD_G4, lid % CD_TT (token fastest). No barrier
 * inside a step; two per CD_RS steps and two per tile.
 * Build options: CD_DTYPE, CD_D, CD_TT (tokens per tile, power of two; at most CD_TT * 32 work-items).
 * Run-time: HB (heads per step, local size HB * CD_TT * CD_D / 4), flags (CD_F_ALIGNED: every (B, N, H, D) tensor,
 * weight, matrix and table starts at a multiple of 4 elements, 16-byte loads). Global: groups * local size. */
#ifndef CD_TT
#define CD_TT 8
#endif
#define CD_WGMAX (CD_TT * 32)
#define CD_RS (2048 / CD_WGMAX > 0 ? 2048 / CD_WGMAX : 1) /* steps per inflation flush: 16 KiB of ring */
#define CD_F_ALIGNED 1u


/* channels 4g .. 4g+3 of one token, stored into four (B, H, D, N) rows `stride` (N) apart */
#define CD_ST_ROWS(dst, i, val, stride)           \
  do {                                            \
    const float4 v_ = (val);                      \
    CD_SSTORE(dst, (i), v_.x);                     \
    CD_SSTORE(dst, (i) + (stride), v_.y);          \
    CD_SSTORE(dst, (i) + 2 * (stride), v_.z);      \
    CD_SSTORE(dst, (i) + 3 * (stride), v_.w);      \
  } while (0)

/* The one-pass forms' tensors: the inputs, inverse RMS (written), outputs and inflation_sq, each with an offset */
#define CD_PREP_ONEPASS_TENSORS                                                                                     \
  global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,                 \
      global const cd_store_t *v_raw, ulong v_raw_off, global const float *qw, ulong qw_off, global const float *kw, \
      ulong kw_off, global const float *proj_q, ulong pq_off, global const float *proj_kv, ulong pkv_off,            \
      global const float *rope_cos, ulong rc_off, global const float *rope_sin, ulong rs_off, global float *inv_rms, \
      ulong inv_off, global cd_sstore_t *q_out, ulong q_off, global cd_sstore_t *k_out, ulong k_off,                 \
      global cd_sstore_t *v_out, ulong v_off, global float *infl, ulong infl_off

kernel void cd_prep_fused(CD_PREP_ONEPASS_TENSORS, ulong N, uint H, ulong B, float k_scale, float eps,
                          uint HB, uint flags) {
  local float red[2][CD_WGMAX];
  local float irl[2][CD_TT];
  local float ring[2][CD_RS][CD_WGMAX]; /* k's squares before / after the transform, per step and work-item */

  const uint lid = get_local_id(0), L = get_local_size(0);
  const uint t = lid % CD_TT, g = (lid / CD_TT) % CD_G4, hl = lid / (CD_TT * CD_G4);
  const int lane_ok = hl < HB, first = 4 * g < CD_DH, al = (flags & CD_F_ALIGNED) != 0;
  const uint C = H * CD_D, nsteps = (H + HB - 1) / HB;
  const ulong tpr = (N + CD_TT - 1) / CD_TT, total = B * tpr, BN = B * N;

  for (ulong tile = get_group_id(0); tile < total; tile += get_num_groups(0)) {
    const ulong b = tile / tpr, n0 = (tile % tpr) * CD_TT;
    const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
    const int tok_ok = lane_ok && t < nt;
    const ulong n = n0 + t, tok = b * N + n;

    /* phase 1: this work-item's share of the squares of q_raw and k_raw, then the inverse RMS per token */
    float sq = 0.0f, sk = 0.0f;
    for (uint s = 0; s < nsteps; s++) {
      const uint h = s * HB + hl;
      if (tok_ok && h < H) {
        const ulong row = (tok * H + h) * CD_D + 4 * g;
        sq += cd_sq4(CD_LD4(q_raw, q_raw_off + row, al));
        sk += cd_sq4(CD_LD4(k_raw, k_raw_off + row, al));
      }
    }
    red[0][lid] = sq;
    red[1][lid] = sk;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 2 * CD_TT) {
      const uint which = lid / CD_TT, tt = lid % CD_TT;
      float sum = 0.0f;
      for (uint u = 0; u < HB * CD_G4; u++) sum += red[which][u * CD_TT + tt];
      const float ir = 1.0f / sqrt(sum * (1.0f / (float)C) + eps);
      irl[which][tt] = ir;
      if (tt < nt) inv_rms[inv_off + which * BN + b * N + n0 + tt] = ir;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float irq = irl[0][t], irk = irl[1][t];

    /* this token's camera matrices (camera half: rows in P0..P3 for q, K0..K3 for k and v) or RoPE coefficients
     * (second half: cos in P0, sin in P1) */
    float4 P0 = (float4)(0.0f), P1 = P0, P2 = P0, P3 = P0, K0 = P0, K1 = P0, K2 = P0, K3 = P0;
    if (tok_ok) {
      if (first) {
        global const float *Pq = proj_q + pq_off + tok * 16, *Pkv = proj_kv + pkv_off + tok * 16;
        P0 = CD_LDF4(Pq, 0, al), P1 = CD_LDF4(Pq, 4, al), P2 = CD_LDF4(Pq, 8, al), P3 = CD_LDF4(Pq, 12, al);
        K0 = CD_LDF4(Pkv, 0, al), K1 = CD_LDF4(Pkv, 4, al), K2 = CD_LDF4(Pkv, 8, al), K3 = CD_LDF4(Pkv, 12, al);
      } else {
        const ulong rrow = n * CD_DH + (4 * g - CD_DH);
        P0 = CD_LDF4(rope_cos, rc_off + rrow, al);
        P1 = CD_LDF4(rope_sin, rs_off + rrow, al);
      }
    }

    /* phase 2: the heads in reverse order */
    for (uint s2 = 0; s2 < nsteps; s2++) {
      const uint s = nsteps - 1 - s2, h = s * HB + hl, slot = s2 % CD_RS;
      float pre = 0.0f, post = 0.0f;
      if (tok_ok && h < H) {
        const ulong row = (tok * H + h) * CD_D + 4 * g;
        const uint c = h * CD_D + 4 * g;
        const float4 qn = fmax(CD_LD4(q_raw, q_raw_off + row, al) * irq * CD_LDF4(qw, qw_off + c, al), 0.0f);
        const float4 kn =
            fmax(CD_LD4(k_raw, k_raw_off + row, al) * irk * CD_LDF4(kw, kw_off + c, al), 0.0f) * k_scale;
        const float4 vn = CD_LD4(v_raw, v_raw_off + row, al);
        float4 qo, ko, vo;
        if (first) {
          qo = (float4)(dot(P0, qn), dot(P1, qn), dot(P2, qn), dot(P3, qn));
          ko = (float4)(dot(K0, kn), dot(K1, kn), dot(K2, kn), dot(K3, kn));
          vo = (float4)(dot(K0, vn), dot(K1, vn), dot(K2, vn), dot(K3, vn));
        } else {
          qo = fma(qn.yxwz, P1, qn * P0);
          ko = fma(kn.yxwz, P1, kn * P0);
          vo = fma(vn.yxwz, P1, vn * P0);
        }
        pre = cd_sq4(kn);
        post = cd_sq4(ko);
        const ulong o = ((b * H + h) * CD_D + 4 * g) * N + n;
        CD_ST_ROWS(q_out, q_off + o, qo, N);
        CD_ST_ROWS(k_out, k_off + o, ko, N);
        CD_ST_ROWS(v_out, v_off + o, vo, N);
      }
      ring[0][slot][lid] = pre;
      ring[1][slot][lid] = post;
      if (slot == CD_RS - 1 || s2 == nsteps - 1) { /* uniform: every work-item meets these barriers */
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint per = HB * CD_TT;
        for (uint w = lid; w < (slot + 1) * per; w += L) {
          const uint r = w / per, hh = (w / CD_TT) % HB, tt = w % CD_TT;
          const uint h2 = (nsteps - 1 - (s2 - slot + r)) * HB + hh;
          if (h2 < H && tt < nt) {
            float sp = 0.0f, so = 0.0f;
            for (uint u = 0; u < CD_G4; u++) {
              sp += ring[0][r][(hh * CD_G4 + u) * CD_TT + tt];
              so += ring[1][r][(hh * CD_G4 + u) * CD_TT + tt];
            }
            infl[infl_off + (b * H + h2) * N + n0 + tt] = fmax(so, 1e-12f) / fmax(sp, 1e-12f);
          }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
      }
    }
  }
}

/* ------------------------------------------------------------------------------------------------------------
 * Register-resident prep forward: every input row is read once. A work-group owns CD_TT consecutive tokens of one
 * batch row and ONE of the three tensors (kind = group % 3: q, k or v), all CD_H heads, and holds its rows in
 * registers: work-item (g, t) = (lid / CD_TT, lid % CD_TT) keeps the float4 of channels 4g..4g+3 of token t in
 * every head, x[CD_H]. The q and k kinds sum their squares and reduce them per token (inverse RMS, also written for
 * the backward); every kind then normalizes (q, k), transforms (camera matrix or RoPE) and stores each head's four
 * channels into four (B, H, D, N) rows: a row store covers CD_TT tokens (32 bytes at CD_TT = 8 in f32). The k kind
 * also keeps k's squares before and after the transform in a ring of CD_RR heads and sums them per (token, head)
 * in a fixed order: inflation_sq.
 * Splitting by tensor halves what one work-group holds (a tile of one tensor, CD_TT * CD_H * CD_D floats) against
 * the q-and-k form, so two tiles fit an NVIDIA SM's registers at D = 112, H = 20 without spilling; all of a
 * work-item's CD_H loads are issued back to back.
 * Build options: CD_DTYPE, CD_D, CD_H (heads; by default the host uses this form up to 48, see prep.c), CD_TT,
 * CD_WL (where the norm weights are read: prep.c says which is faster where).
 * Local size CD_TT * CD_D / 4; global 3 * B * ceil(N / CD_TT) work-groups. Flags as cd_prep_fused. */
#ifdef CD_H
#ifndef CD_RR
#define CD_RR (CD_H < 8 ? CD_H : 8)
#endif
#define CD_RL (CD_TT * CD_G4)
#ifndef CD_WL /* where the q and k kinds read the norm weights: 0 in the head loop (from the L1 cache), 1 applied to the
                 rows before the barrier, 2 staged in local memory before the barrier */
#define CD_WL 2
#endif

kernel void cd_prep_regs(CD_PREP_ONEPASS_TENSORS, ulong N, ulong B, float k_scale, float eps, uint flags) {
  local float red[CD_RL];
  local float irl[CD_TT];
  local float ring[2][CD_RR][CD_RL]; /* k kind: squares before / after the transform, per head of the ring */
  local float4 wl[CD_WL == 2 ? CD_H * CD_G4 : 1];

  const uint lid = get_local_id(0);
  const uint t = lid % CD_TT, g = lid / CD_TT, kind = get_group_id(0) % 3;
  const int first = 4 * g < CD_DH, al = (flags & CD_F_ALIGNED) != 0;
  /* indices count from each tensor's offset (cd_ix: 32 bits where the host found that they fit) */
  const cd_ix Nx = (cd_ix)N, tile = get_group_id(0) / 3, tpr = (Nx + CD_TT - 1) / CD_TT;
  const cd_ix b = tile / tpr, n0 = (tile % tpr) * CD_TT;
  const uint nt = (Nx - n0) < CD_TT ? (uint)(Nx - n0) : CD_TT;
  const int ok = t < nt;
  const cd_ix n = n0 + t, tok = b * Nx + n;

  global const cd_store_t *src = kind == 0 ? q_raw + q_raw_off : kind == 1 ? k_raw + k_raw_off : v_raw + v_raw_off;
  global cd_sstore_t *dst = kind == 0 ? q_out + q_off : kind == 1 ? k_out + k_off : v_out + v_off;

  float4 x[CD_H];
  const cd_ix row = tok * (CD_H * CD_D) + 4 * g;
#pragma unroll
  for (uint h = 0; h < CD_H; h++) x[h] = ok ? CD_LD4(src, row + h * CD_D, al) : (float4)(0.0f);

  /* this token's camera matrix (camera half) or RoPE coefficients (second half: cos in P0, sin in P1) */
  float4 P0 = (float4)(0.0f), P1 = P0, P2 = P0, P3 = P0;
  if (ok) {
    if (first) {
      global const float *Pm = kind == 0 ? proj_q + pq_off + tok * 16 : proj_kv + pkv_off + tok * 16;
      P0 = CD_LDF4(Pm, 0, al), P1 = CD_LDF4(Pm, 4, al), P2 = CD_LDF4(Pm, 8, al), P3 = CD_LDF4(Pm, 12, al);
    } else {
      const cd_ix rrow = n * CD_DH + (4 * g - CD_DH);
      P0 = CD_LDF4(rope_cos + rc_off, rrow, al);
      P1 = CD_LDF4(rope_sin + rs_off, rrow, al);
    }
  }

  /* q and k: the inverse RMS of each token over all H * D channels, the work-item's heads first, then its
   * CD_G4 units in order */
  float ir = 1.0f;
  global const float *w = kind == 0 ? qw + qw_off : kw + kw_off;
  if (kind < 2) { /* uniform over the work-group */
    if (CD_WL == 2)
      for (uint i = lid; i < CD_H * CD_G4; i += CD_RL) wl[i] = CD_LDF4(w, 4 * i, al);
    float s = 0.0f;
#pragma unroll
    for (uint h = 0; h < CD_H; h++) s += cd_sq4(x[h]);
    red[lid] = s;
    if (CD_WL == 1) {
#pragma unroll
      for (uint h = 0; h < CD_H; h++) x[h] *= CD_LDF4(w, h * CD_D + 4 * g, al);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < CD_TT) {
      float sum = 0.0f;
      for (uint u = 0; u < CD_G4; u++) sum += red[u * CD_TT + lid];
      const float r = 1.0f / sqrt(sum * (1.0f / (float)(CD_H * CD_D)) + eps);
      irl[lid] = r;
      if (lid < nt) inv_rms[inv_off + kind * (cd_ix)B * Nx + b * Nx + n0 + lid] = r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ir = irl[t];
  }
  const float scale = kind == 1 ? k_scale : 1.0f;
  global float *inf = infl + infl_off;

#pragma unroll
  for (uint h = 0; h < CD_H; h++) {
    float4 xn = x[h];
    if (kind < 2) {
      /* mode 1 has applied the weights already */
      const float4 wh = CD_WL == 0 ? CD_LDF4(w, h * CD_D + 4 * g, al) : CD_WL == 2 ? wl[h * CD_G4 + g] : 1.0f;
      xn = fmax(xn * ir * wh, 0.0f) * scale;
    }
    float4 o;
    if (first) o = (float4)(dot(P0, xn), dot(P1, xn), dot(P2, xn), dot(P3, xn));
    else o = fma(xn.yxwz, P1, xn * P0);
    if (ok) {
      const cd_ix at = ((b * CD_H + h) * CD_D + 4 * g) * Nx + n;
      CD_ST_ROWS(dst, at, o, Nx);
    }
    if (kind == 1) { /* uniform */
      const uint slot = h % CD_RR;
      ring[0][slot][lid] = cd_sq4(xn);
      ring[1][slot][lid] = cd_sq4(o);
      if (slot == CD_RR - 1 || h == CD_H - 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint h0 = h - slot;
        for (uint i = lid; i < (slot + 1) * CD_TT; i += CD_RL) {
          const uint r = i / CD_TT, tt = i % CD_TT;
          if (tt < nt) {
            float sp = 0.0f, so = 0.0f;
            for (uint u = 0; u < CD_G4; u++) {
              sp += ring[0][r][u * CD_TT + tt];
              so += ring[1][r][u * CD_TT + tt];
            }
            inf[(b * CD_H + h0 + r) * Nx + n0 + tt] = fmax(so, 1e-12f) / fmax(sp, 1e-12f);
          }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
      }
    }
  }
}
#endif
