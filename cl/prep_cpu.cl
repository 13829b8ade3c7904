/* Prep forward, CPU form (docs/math.md §2): the inverse RMS and the transform in one pass, shaped for a CPU device
 * whose compiler runs a work-item's explicit vectors on the core's SIMD units (PoCL).
 *
 * A work-group is one work-item, one core's task: CD_PB blocks of 8 consecutive tokens of one batch row, all heads.
 * Per block it sums each token's squares over all C channels of q_raw and k_raw (float8 along the channels): the
 * inverse RMS, also written out for the backward. Then, per head, tensor and group of 8 channels, it loads each
 * block's 8 token rows and transposes them (8 x 8 in registers), so that everything after works on channel vectors
 * whose lanes are the 8 tokens: the norm weights are scalars, the per-token camera matrices and RoPE tables vectors
 * (transposed once per block, kept in local memory for every head), the squares of k before and after its
 * transform sum along the lanes, and each output channel row (B, H, D, N) gets the blocks' 8-token vectors one
 * after the other (CD_PB = 2 in f32: whole 64-byte lines). Every sum runs in a fixed order. No barriers.
 *
 * Build options: CD_DTYPE (storage of q_raw, k_raw, v_raw), CD_SDTYPE (of q, k, v out; common.cl), CD_DMAX the
 * largest head dim (it sizes the local RoPE tables), CD_PB 8-token blocks per work-item. The head dim D (a multiple
 * of 8) is an argument: one program serves every head dim. Launch: local size 1, global B·ceil(N / (8·CD_PB)). The
 * tensors of the one-pass forms (CD_PREP_ONEPASS_TENSORS), then N, H, k_scale, eps, D. */

#ifndef CD_DMAX
#error "CD_DMAX (the largest head dim) must be given as a build option"
#endif
#ifndef CD_PB
#define CD_PB 2
#endif

/* Eight consecutive elements of the raw activations (CD_DTYPE) as a float8; eight of the outputs' storage
 * (CD_SDTYPE) from one. */
#if CD_DTYPE == 0
#define CD_LD8(p) vload8(0, (p))
#elif CD_DTYPE == 1
#define CD_LD8(p) vload_half8(0, (p))
#else
#define CD_LD8(p) as_float8(convert_uint8(vload8(0, (p))) << 16)
#endif
#if CD_SDTYPE == 0
#define CD_ST8(x, p) vstore8((x), 0, (p))
#elif CD_SDTYPE == 1
#define CD_ST8(x, p) vstore_half8_rte((x), 0, (p))
#else
#define CD_ST8(x, p)                                                                                            \
  do {                                                                                                          \
    const float8 x_ = (x);                                                                                      \
    vstore8((ushort8)(cd_to_bf16(x_.s0), cd_to_bf16(x_.s1), cd_to_bf16(x_.s2), cd_to_bf16(x_.s3),              \
                      cd_to_bf16(x_.s4), cd_to_bf16(x_.s5), cd_to_bf16(x_.s6), cd_to_bf16(x_.s7)),              \
            0, (p));                                                                                            \
  } while (0)
#endif

/* Stores the n valid tokens of one channel row (all 8 when full). */
CD_INLINE void cd_store_row(float8 x, global cd_sstore_t *p, uint n) {
  if (n == 8) {
    CD_ST8(x, p);
  } else {
    float t[8];
    vstore8(x, 0, t);
    for (uint i = 0; i < n; i++) CD_SSTORE(p, i, t[i]);
  }
}

inline float cd_hsum8(float8 x) {
  const float4 a = x.lo + x.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}

enum { CD_PREP_Q = 0, CD_PREP_K = 1, CD_PREP_V = 2 };

/* One 8-channel group g of one head of one tensor for 8 tokens (n valid): rows at src (token stride C), the
 * transform, channel rows at dst (stride N). q and k: RMSNorm (inv: per-token inverse RMS, w: the head's weights),
 * ReLU, and for k the scale; P the per-token camera matrices (16 vectors), cs and sn the RoPE tables (Dh = D / 2
 * vectors). k adds its squares before and after the transform to *pre and *post. */
CD_INLINE void cd_prep_group(const uint Dh, global const cd_store_t *src, uint C, uint n, uint g, global const float *w,
                             float8 inv, float k_scale, const int kind, local const float8 *P, local const float8 *cs,
                             local const float8 *sn, global cd_sstore_t *dst, ulong N, float8 *pre, float8 *post) {
  float8 x[8];
  _Pragma("unroll") for (uint t = 0; t < 8; t++) x[t] = t < n ? CD_LD8(src + (ulong)t * C + 8 * g) : (float8)(0.0f);
  cd_transpose8(x); /* x[i]: channel 8g + i of the 8 tokens */
  if (kind != CD_PREP_V) {
    const float8 wv = vload8(g, w);
    const float wc[8] = {wv.s0, wv.s1, wv.s2, wv.s3, wv.s4, wv.s5, wv.s6, wv.s7};
    _Pragma("unroll") for (int i = 0; i < 8; i++) {
      float8 a = fmax(x[i] * inv * wc[i], (float8)(0.0f));
      if (kind == CD_PREP_K) {
        a *= k_scale;
        *pre = fma(a, a, *pre);
      }
      x[i] = a;
    }
  }
  float8 o[8];
  _Pragma("unroll") for (int u = 0; u < 2; u++) {
    const uint c0 = 8 * g + 4 * u; /* the unit's first channel */
    if (c0 < Dh) {                 /* camera transform: o[i] = Σ_j P[i][j] x[j] */
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        float8 acc = P[4 * i] * x[4 * u];
        _Pragma("unroll") for (int j = 1; j < 4; j++) acc = fma(P[4 * i + j], x[4 * u + j], acc);
        o[4 * u + i] = acc;
      }
    } else { /* interleaved-pair RoPE: o[r] = x[r]·cos[r] + x[r^1]·sin[r] */
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        const uint r = c0 - Dh + i;
        o[4 * u + i] = fma(x[4 * u + (i ^ 1)], sn[r], x[4 * u + i] * cs[r]);
      }
    }
  }
  _Pragma("unroll") for (int i = 0; i < 8; i++) {
    if (kind == CD_PREP_K) *post = fma(o[i], o[i], *post);
    cd_store_row(o[i], dst + (ulong)(8 * g + i) * N, n);
  }
}

/* One head of one tensor for the work-item's CD_PB blocks: the blocks of one channel group one after the other, so
 * that each channel row is written as CD_PB consecutive 8-token vectors (whole cache lines). */
CD_INLINE void cd_prep_head(const uint D, global const cd_store_t *src, uint C, const uint *nb, global const float *w,
                            local const float8 *inv, float k_scale, const int kind, local const float8 *P,
                            local const float8 *cs, local const float8 *sn, global cd_sstore_t *dst, ulong N,
                            float8 *pre, float8 *post) {
  const uint Dh = D / 2;
  for (uint g = 0; g < D / 8; g++)
    for (uint sb = 0; sb < CD_PB; sb++)
      if (nb[sb])
        cd_prep_group(Dh, src + (ulong)(8 * sb) * C, C, nb[sb], g, w, inv[sb], k_scale, kind, P + 16 * sb, cs + Dh * sb,
                      sn + Dh * sb, dst + 8 * sb, N, pre + sb, post + sb);
}

kernel void cd_prep_cpu(global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw,
                        ulong k_raw_off, global const cd_store_t *v_raw, ulong v_raw_off, global const float *qw,
                        ulong qw_off, global const float *kw, ulong kw_off, global const float *proj_q, ulong pq_off,
                        global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,
                        global const float *rope_sin, ulong rs_off, global float *inv_rms, ulong inv_off,
                        global cd_sstore_t *q_out, ulong q_off, global cd_sstore_t *k_out, ulong k_off,
                        global cd_sstore_t *v_out, ulong v_off, global float *infl, ulong infl_off, ulong N, uint H,
                        float k_scale, float eps, uint D) {
  /* per block: the inverse RMS, the camera matrices and the RoPE tables (D / 2 vectors each), lanes = its tokens */
  local float8 Iq[CD_PB], Ik[CD_PB], Pq[CD_PB * 16], Pk[CD_PB * 16], cs[CD_PB * CD_DMAX / 2], sn[CD_PB * CD_DMAX / 2];
  const uint Dh = D / 2;
  const ulong nblk = (N + 8 * CD_PB - 1) / (8 * CD_PB);
  const ulong b = get_group_id(0) / nblk, blk = get_group_id(0) % nblk;
  const ulong BN = (ulong)(get_num_groups(0) / nblk) * N;
  const uint C = H * D;
  const ulong n0 = blk * CD_PB * 8, tok0 = b * N + n0;
  uint nb[CD_PB]; /* valid tokens of each block */
  for (uint sb = 0; sb < CD_PB; sb++) {
    const ulong s0 = n0 + 8 * sb;
    const uint n = nb[sb] = s0 < N ? (uint)min((ulong)8, N - s0) : 0u;
    const ulong t0 = tok0 + 8 * sb;
    float iq[8], ik[8];
    for (uint t = 0; t < 8; t++) {
      iq[t] = ik[t] = 0.0f;
      if (t < n) {
        float8 sq = (float8)(0.0f), sk = (float8)(0.0f);
        global const cd_store_t *qr = q_raw + q_raw_off + (t0 + t) * C, *kr = k_raw + k_raw_off + (t0 + t) * C;
        for (uint c = 0; c < C; c += 8) {
          const float8 a = CD_LD8(qr + c), e = CD_LD8(kr + c);
          sq = fma(a, a, sq);
          sk = fma(e, e, sk);
        }
        const float invC = 1.0f / (float)C;
        iq[t] = 1.0f / sqrt(cd_hsum8(sq) * invC + eps);
        ik[t] = 1.0f / sqrt(cd_hsum8(sk) * invC + eps);
        inv_rms[inv_off + t0 + t] = iq[t];
        inv_rms[inv_off + BN + t0 + t] = ik[t];
      }
    }
    Iq[sb] = vload8(0, iq), Ik[sb] = vload8(0, ik);
    _Pragma("unroll") for (int h8 = 0; h8 < 2; h8++) {
      float8 a[8], e[8];
      _Pragma("unroll") for (uint t = 0; t < 8; t++) {
        a[t] = t < n ? vload8(h8, proj_q + pq_off + (t0 + t) * 16) : (float8)(0.0f);
        e[t] = t < n ? vload8(h8, proj_kv + pkv_off + (t0 + t) * 16) : (float8)(0.0f);
      }
      cd_transpose8(a);
      cd_transpose8(e);
      _Pragma("unroll") for (int i = 0; i < 8; i++) Pq[16 * sb + 8 * h8 + i] = a[i], Pk[16 * sb + 8 * h8 + i] = e[i];
    }
    for (uint r = 0; r < Dh; r++) {
      float c8[8], s8[8];
      _Pragma("unroll") for (uint t = 0; t < 8; t++) {
        c8[t] = t < n ? rope_cos[rc_off + (s0 + t) * Dh + r] : 0.0f;
        s8[t] = t < n ? rope_sin[rs_off + (s0 + t) * Dh + r] : 0.0f;
      }
      cs[Dh * sb + r] = vload8(0, c8);
      sn[Dh * sb + r] = vload8(0, s8);
    }
  }

  for (uint h = 0; h < H; h++) {
    const ulong in0 = tok0 * C + (ulong)h * D, out0 = ((b * H + h) * D) * N + n0;
    float8 pre[CD_PB], post[CD_PB], unused[CD_PB];
    for (uint sb = 0; sb < CD_PB; sb++) pre[sb] = post[sb] = (float8)(0.0f);
    cd_prep_head(D, q_raw + q_raw_off + in0, C, nb, qw + qw_off + h * D, Iq, k_scale, CD_PREP_Q, Pq, cs, sn,
                 q_out + q_off + out0, N, unused, unused);
    cd_prep_head(D, k_raw + k_raw_off + in0, C, nb, kw + kw_off + h * D, Ik, k_scale, CD_PREP_K, Pk, cs, sn,
                 k_out + k_off + out0, N, pre, post);
    cd_prep_head(D, v_raw + v_raw_off + in0, C, nb, qw, Iq, k_scale, CD_PREP_V, Pk, cs, sn, v_out + v_off + out0, N,
                 unused, unused);
    /* inflation_sq = max(post, 1e-12) / max(pre, 1e-12) */
    for (uint sb = 0; sb < CD_PB; sb++) {
      const float8 infl8 = fmax(post[sb], (float8)(1e-12f)) / fmax(pre[sb], (float8)(1e-12f));
      global float *ip = infl + infl_off + (b * H + h) * N + n0 + 8 * sb;
      if (nb[sb] == 8) vstore8(infl8, 0, ip);
      else {
        float t8[8];
        vstore8(infl8, 0, t8);
        for (uint t = 0; t < nb[sb]; t++) ip[t] = t8[t];
      }
    }
  }
}
