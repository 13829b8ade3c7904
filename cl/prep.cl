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
