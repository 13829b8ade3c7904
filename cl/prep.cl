/* Prep forward (SPEC section 2): per-token inverse RMS, then the fused
 * RMSNorm + ReLU + k-scale + UCPE 4x4 camera transform + RoPE, written
 * transposed to (B, H, D, N).
 *
 * Build options: CD_DTYPE (storage type of q/k/v in and out, see common.cl),
 * CD_D (head dim, multiple of 8, <= 128), CD_TS (tokens per work-group).
 * Every buffer comes with a ulong element offset. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_TS
#define CD_TS 32
#endif
#define CD_DH (CD_D / 2)
#define CD_G4 (CD_D / 4) /* 4-channel units per token and head */

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
inline void flush_tile(local float (*tile)[CD_TS + 1], global cd_store_t *out, ulong base, ulong N, uint n0, uint nt,
                       uint lid, uint L) {
  for (uint idx = lid; idx < CD_D * CD_TS; idx += L) {
    const uint d = idx / CD_TS, t = idx % CD_TS;
    if (t < nt) CD_STORE(out, base + (ulong)d * N + n0 + t, tile[d][t]);
  }
}

/* Work-group: CD_TS consecutive tokens of one (b, h); local size CD_TS*CD_G4,
 * one work-item per (token, 4-channel unit). Global: (tiles*L, H, B). */
kernel void cd_prep_forward(global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw,
                            ulong k_raw_off, global const cd_store_t *v_raw, ulong v_raw_off,
                            global const float *qw, ulong qw_off, global const float *kw, ulong kw_off,
                            global const float *proj_q, ulong pq_off, global const float *proj_kv, ulong pkv_off,
                            global const float *rope_cos, ulong rc_off, global const float *rope_sin, ulong rs_off,
                            global const float *inv_rms, ulong inv_off, global cd_store_t *q_out, ulong q_off,
                            global cd_store_t *k_out, ulong k_off, global cd_store_t *v_out, ulong v_off,
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
 * Fused prep forward: the inverse RMS and the transform in one pass over q_raw/k_raw/v_raw.
 * A work-group takes CD_TT consecutive tokens of one batch row across ALL heads: it first sums the squares of
 * the tokens' full q and k rows (CD_WG / CD_TT items per token, 16-byte loads), then walks the heads, each
 * (token, 4-channel unit) item transforming one float4 of q, k and v, and writes the (D x CD_TT) tiles of the
 * three outputs transposed. The second read of q/k comes from the L2 cache while the tile is small (the
 * tile's rows were read moments before), so device memory sees each input once. inv_rms (2, B, N) is written
 * too, for the backward.
 * Build options: CD_D, CD_TT (tokens per work-group, power of two, default 8: 32-byte output rows in f32),
 * CD_WG (work-group size, a multiple of CD_TT, default 256). Global size: (ceil(B*N / CD_TT) * CD_WG).
 * Tiles never straddle batch rows: group g covers tokens [g*CD_TT, ...) of row b = first token / N, cut at N. */
#ifndef CD_TT
#define CD_TT 8
#endif
#ifndef CD_WG
#define CD_WG 256
#endif
#define CD_LPT (CD_WG / CD_TT) /* lanes per token in the RMS sums */

#if CD_DTYPE == 0
#define CD_LOAD4(p, i) vload4(0, (p) + (i))
#elif CD_DTYPE == 1
#define CD_LOAD4(p, i) vload_half4(0, (p) + (i))
#else
#define CD_LOAD4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#endif

kernel __attribute__((reqd_work_group_size(CD_WG, 1, 1))) void cd_prep_fused(
    global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,
    global const cd_store_t *v_raw, ulong v_raw_off, global const float *qw, ulong qw_off, global const float *kw,
    ulong kw_off, global const float *proj_q, ulong pq_off, global const float *proj_kv, ulong pkv_off,
    global const float *rope_cos, ulong rc_off, global const float *rope_sin, ulong rs_off, global float *inv_rms,
    ulong inv_off, global cd_store_t *q_out, ulong q_off, global cd_store_t *k_out, ulong k_off,
    global cd_store_t *v_out, ulong v_off, global float *infl, ulong infl_off, ulong N, uint H, ulong B,
    float k_scale, float eps) {
  local float red[2][CD_WG];
  local float irms[2][CD_TT];
  local float tile[3][CD_D][CD_TT + 1];
  local float pre_part[CD_TT][CD_G4];
  local float post_part[CD_TT][CD_G4];

  const uint lid = get_local_id(0);
  const ulong tiles_per_row = (N + CD_TT - 1) / CD_TT;
  const ulong b = get_group_id(0) / tiles_per_row;
  const ulong n0 = (get_group_id(0) % tiles_per_row) * CD_TT;
  const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
  const uint C = H * CD_D;

  /* 1. inverse RMS of each token's q and k over all C channels (C is a multiple of 8) */
  {
    const uint t = lid / CD_LPT, lane = lid % CD_LPT;
    float sq = 0.0f, sk = 0.0f;
    if (t < nt) {
      const ulong row = (b * N + n0 + t) * C;
      for (uint c = 4 * lane; c < C; c += 4 * CD_LPT) {
        const float4 a = CD_LOAD4(q_raw, q_raw_off + row + c), e = CD_LOAD4(k_raw, k_raw_off + row + c);
        sq = fma(a.x, a.x, fma(a.y, a.y, fma(a.z, a.z, fma(a.w, a.w, sq))));
        sk = fma(e.x, e.x, fma(e.y, e.y, fma(e.z, e.z, fma(e.w, e.w, sk))));
      }
    }
    red[0][lid] = sq;
    red[1][lid] = sk;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = CD_LPT / 2; s > 0; s >>= 1) {
      if (lane < s) {
        red[0][lid] += red[0][lid + s];
        red[1][lid] += red[1][lid + s];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && t < CD_TT) {
      const float invC = 1.0f / (float)C;
      const float iq = 1.0f / sqrt(red[0][lid] * invC + eps), ik = 1.0f / sqrt(red[1][lid] * invC + eps);
      irms[0][t] = iq;
      irms[1][t] = ik;
      if (t < nt) {
        inv_rms[inv_off + b * N + n0 + t] = iq;
        inv_rms[inv_off + B * N + b * N + n0 + t] = ik;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  /* 2. per head: transform, then write the three tiles transposed */
  for (uint h = 0; h < H; h++) {
    for (uint idx = lid; idx < CD_TT * CD_G4; idx += CD_WG) {
      const uint t = idx / CD_G4, g = idx % CD_G4;
      float4 qo = (float4)(0.0f), ko = (float4)(0.0f), vo = (float4)(0.0f);
      float pre = 0.0f, post = 0.0f;
      if (t < nt) {
        const ulong tok = b * N + n0 + t;
        const ulong row = (tok * H + h) * CD_D + 4 * g;
        const uint c = h * CD_D + 4 * g;
        const float4 wq = vload4(0, qw + qw_off + c), wk = vload4(0, kw + kw_off + c);
        const float4 qn = fmax(CD_LOAD4(q_raw, q_raw_off + row) * irms[0][t] * wq, 0.0f);
        const float4 kn = fmax(CD_LOAD4(k_raw, k_raw_off + row) * irms[1][t] * wk, 0.0f) * k_scale;
        const float4 vn = CD_LOAD4(v_raw, v_raw_off + row);
        pre = fma(kn.x, kn.x, fma(kn.y, kn.y, fma(kn.z, kn.z, kn.w * kn.w)));
        if (4 * g < CD_DH) {
          global const float *Pq = proj_q + pq_off + tok * 16, *Pkv = proj_kv + pkv_off + tok * 16;
          const float4 q0 = vload4(0, Pq), q1 = vload4(1, Pq), q2 = vload4(2, Pq), q3 = vload4(3, Pq);
          const float4 k0 = vload4(0, Pkv), k1 = vload4(1, Pkv), k2 = vload4(2, Pkv), k3 = vload4(3, Pkv);
          qo = (float4)(dot(q0, qn), dot(q1, qn), dot(q2, qn), dot(q3, qn));
          ko = (float4)(dot(k0, kn), dot(k1, kn), dot(k2, kn), dot(k3, kn));
          vo = (float4)(dot(k0, vn), dot(k1, vn), dot(k2, vn), dot(k3, vn));
        } else {
          const ulong rrow = (n0 + t) * CD_DH + (4 * g - CD_DH);
          const float4 cs = vload4(0, rope_cos + rc_off + rrow), sn = vload4(0, rope_sin + rs_off + rrow);
          qo = fma(qn.yxwz, sn, qn * cs);
          ko = fma(kn.yxwz, sn, kn * cs);
          vo = fma(vn.yxwz, sn, vn * cs);
        }
        post = fma(ko.x, ko.x, fma(ko.y, ko.y, fma(ko.z, ko.z, ko.w * ko.w)));
      }
      pre_part[t][g] = pre;
      post_part[t][g] = post;
      tile[0][4 * g][t] = qo.x, tile[0][4 * g + 1][t] = qo.y, tile[0][4 * g + 2][t] = qo.z, tile[0][4 * g + 3][t] = qo.w;
      tile[1][4 * g][t] = ko.x, tile[1][4 * g + 1][t] = ko.y, tile[1][4 * g + 2][t] = ko.z, tile[1][4 * g + 3][t] = ko.w;
      tile[2][4 * g][t] = vo.x, tile[2][4 * g + 1][t] = vo.y, tile[2][4 * g + 2][t] = vo.z, tile[2][4 * g + 3][t] = vo.w;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong base = ((b * H + h) * CD_D) * N + n0;
    for (uint idx = lid; idx < 3 * CD_D * CD_TT; idx += CD_WG) {
      const uint which = idx / (CD_D * CD_TT), r = idx % (CD_D * CD_TT), d = r / CD_TT, t = r % CD_TT;
      if (t < nt) {
        const ulong o = base + (ulong)d * N + t;
        const float x = tile[which][d][t];
        if (which == 0) CD_STORE(q_out, q_off + o, x);
        else if (which == 1) CD_STORE(k_out, k_off + o, x);
        else CD_STORE(v_out, v_off + o, x);
      }
    }
    if (lid < nt) {
      float sp = 0.0f, so = 0.0f;
      for (uint u = 0; u < CD_G4; u++) {
        sp += pre_part[lid][u];
        so += post_part[lid][u];
      }
      infl[infl_off + (b * H + h) * N + n0 + lid] = fmax(so, 1e-12f) / fmax(sp, 1e-12f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}
