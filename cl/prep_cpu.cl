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
 * Where the driver ends a work-item's loops after a number of iterations per launch (Mesa's gallivm), src/ops/prep.c
 * counts this kernel's loops as written (those of a constant trip count of 8 aside: unrolled, the partial blocks'
 * stores included) and takes fewer blocks per work-item (CD_PB) until one fits.
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

/* A hint that the channel rows (stride N bytes) that the next 8-channel group reads (w = 0) or writes (w = 1) will
 * soon be used: bytes [p + i·N, p + i·N + bytes) for i = 0..7. Each row's few lines lie in a page of their own, where
 * the cores' prefetchers do not follow. The CPU's prefetch instructions where the kernel is compiled for the host's
 * CPU (PoCL: __x86_64__, __aarch64__; its OpenCL prefetch() is empty); nothing elsewhere, not even the loops. */
CD_INLINE void cd_prefetch8(global const uchar *p, ulong N, uint bytes, const int w) {
#if defined(__x86_64__) || defined(__aarch64__)
  if (!bytes) return;
  _Pragma("unroll") for (int i = 0; i < 8; i++) {
    global const uchar *r = p + (ulong)i * N;
    for (uint l = 0; l < bytes; l += 64) {
      if (w) __builtin_prefetch(r + l, 1);
      else __builtin_prefetch(r + l, 0);
    }
    if (w) __builtin_prefetch(r + bytes - 1, 1);
    else __builtin_prefetch(r + bytes - 1, 0);
  }
#else
  (void)p, (void)N, (void)bytes, (void)w;
#endif
}

inline float cd_hsum8(float8 x) {
  const float4 a = x.lo + x.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}

enum { CD_PREP_Q = 0, CD_PREP_K = 1, CD_PREP_V = 2 };

/* The n valid rows (token stride C, zero past them) of 8 consecutive channels at src, transposed: x[i] is channel i
 * of the 8 tokens. */
CD_INLINE void cd_rows8(global const cd_store_t *src, uint C, uint n, float8 *x) {
  _Pragma("unroll") for (uint t = 0; t < 8; t++) x[t] = t < n ? CD_LD8(src + (ulong)t * C) : (float8)(0.0f);
  cd_transpose8(x);
}

/* o = T x (tr = 0) or Tᵀ x (tr = 1) for the 8-channel group g, two 4-channel units: the camera transform in the first
 * half, o[i] = Σ_j P[i][j] x[j] (P: the tokens' matrices, 16 vectors), the interleaved-pair RoPE in the second,
 * o[r] = x[r]·cos[r] + x[r^1]·sin[r] (transposed: sin[r^1]; cs, sn: the tables, Dh vectors). Each sum runs over
 * j = 0..3 from the first product, as cl/prep.cl and cl/prep_backward.cl order it. */
CD_INLINE void cd_cam8(const uint Dh, uint g, const int tr, local const float8 *P, local const float8 *cs,
                       local const float8 *sn, const float8 *x, float8 *o) {
  _Pragma("unroll") for (int u = 0; u < 2; u++) {
    const uint c0 = 8 * g + 4 * u; /* the unit's first channel */
    if (c0 < Dh) {
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        float8 acc = P[tr ? i : 4 * i] * x[4 * u];
        _Pragma("unroll") for (int j = 1; j < 4; j++) acc = fma(P[tr ? 4 * j + i : 4 * i + j], x[4 * u + j], acc);
        o[4 * u + i] = acc;
      }
    } else {
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        const uint r = c0 - Dh + i;
        o[4 * u + i] = fma(x[4 * u + (i ^ 1)], sn[tr ? r ^ 1 : r], x[4 * u + i] * cs[r]);
      }
    }
  }
}

/* A block's per-token tables, lanes = its n tokens (zero past them): the camera matrices of proj_q and proj_kv (rows
 * of the tokens t0.., transposed to 16 vectors each) and the RoPE tables (rows of the positions s0.., Dh vectors). */
CD_INLINE void cd_block_tables(global const float *proj_q, global const float *proj_kv, global const float *rope_cos,
                               global const float *rope_sin, ulong t0, ulong s0, uint n, uint Dh, local float8 *Pq,
                               local float8 *Pk, local float8 *cs, local float8 *sn) {
  _Pragma("unroll") for (int h8 = 0; h8 < 2; h8++) {
    float8 a[8], e[8];
    _Pragma("unroll") for (uint t = 0; t < 8; t++) {
      a[t] = t < n ? vload8(h8, proj_q + (t0 + t) * 16) : (float8)(0.0f);
      e[t] = t < n ? vload8(h8, proj_kv + (t0 + t) * 16) : (float8)(0.0f);
    }
    cd_transpose8(a);
    cd_transpose8(e);
    _Pragma("unroll") for (int i = 0; i < 8; i++) Pq[8 * h8 + i] = a[i], Pk[8 * h8 + i] = e[i];
  }
  for (uint r = 0; r < Dh; r++) {
    float c8[8], s8[8];
    _Pragma("unroll") for (uint t = 0; t < 8; t++) {
      c8[t] = t < n ? rope_cos[(s0 + t) * Dh + r] : 0.0f;
      s8[t] = t < n ? rope_sin[(s0 + t) * Dh + r] : 0.0f;
    }
    cs[r] = vload8(0, c8);
    sn[r] = vload8(0, s8);
  }
}

/* One 8-channel group g of one head of one tensor for 8 tokens (n valid): rows at src (token stride C), the
 * transform, channel rows at dst (stride N). q and k: RMSNorm (inv: per-token inverse RMS, w: the head's weights),
 * ReLU, and for k the scale; P the per-token camera matrices (16 vectors), cs and sn the RoPE tables (Dh = D / 2
 * vectors). k adds its squares before and after the transform to *pre and *post. */
CD_INLINE void cd_prep_group(const uint Dh, global const cd_store_t *src, uint C, uint n, uint g, global const float *w,
                             float8 inv, float k_scale, const int kind, local const float8 *P, local const float8 *cs,
                             local const float8 *sn, global cd_sstore_t *dst, ulong N, float8 *pre, float8 *post) {
  float8 x[8];
  cd_rows8(src + 8 * g, C, n, x);
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
  cd_cam8(Dh, g, 0, P, cs, sn, x, o);
  _Pragma("unroll") for (int i = 0; i < 8; i++) {
    if (kind == CD_PREP_K) *post = fma(o[i], o[i], *post);
    cd_sst8n(dst + (ulong)(8 * g + i) * N, o[i], n);
  }
}

/* One head of one tensor for the work-item's CD_PB blocks: the blocks of one channel group one after the other, so
 * that each channel row is written as CD_PB consecutive 8-token vectors (whole cache lines). */
CD_INLINE void cd_prep_head(const uint D, global const cd_store_t *src, uint C, const uint *nb, global const float *w,
                            local const float8 *inv, float k_scale, const int kind, local const float8 *P,
                            local const float8 *cs, local const float8 *sn, global cd_sstore_t *dst, ulong N,
                            float8 *pre, float8 *post) {
  const uint Dh = D / 2;
  uint ntok = 0;
  for (uint sb = 0; sb < CD_PB; sb++) ntok += nb[sb];
  for (uint g = 0; g < D / 8; g++) {
    /* the next group's output rows, for writing */
    if (g + 1 < D / 8)
      cd_prefetch8((global const uchar *)(dst + (ulong)(8 * g + 8) * N), N * sizeof(cd_sstore_t),
                   (uint)sizeof(cd_sstore_t) * ntok, 1);
    for (uint sb = 0; sb < CD_PB; sb++)
      if (nb[sb])
        cd_prep_group(Dh, src + (ulong)(8 * sb) * C, C, nb[sb], g, w, inv[sb], k_scale, kind, P + 16 * sb, cs + Dh * sb,
                      sn + Dh * sb, dst + 8 * sb, N, pre + sb, post + sb);
  }
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
    if (n)
      cd_block_tables(proj_q + pq_off, proj_kv + pkv_off, rope_cos + rc_off, rope_sin + rs_off, t0, s0, n, Dh,
                      Pq + 16 * sb, Pk + 16 * sb, cs + Dh * sb, sn + Dh * sb);
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
      cd_stf8n(ip, infl8, nb[sb]);
    }
  }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Prep backward, CPU form (docs/math.md §4; cl/prep_backward.cl states the gradients). The forward's expressions are
 * recomputed as cd_prep_cpu writes them, so that the ReLU masks and the clamps of inflation_sq agree with it.
 *
 * A work-group is one work-item: CD_PB blocks of 8 consecutive tokens of one batch row, all heads, the tokens of a
 * block in the lanes. Per head it first sums k's squares before and after the transform (the inflation's chain
 * needs both before any of k's gradients), then per 8-channel group and block: Tᵀ of the upstream gradients, the
 * ReLU masks, u = da·ir·w (f32: into dq_raw and dk_raw; 16-bit storage: into uq, uk), the tokens' RMSNorm sums S,
 * dv_raw, and the sums of the norm weights', dproj's and the RoPE tables' gradients. After the last head S is
 * complete, and dx_raw = u − ir³/C·x·S runs along each token's row (the rows this work-item wrote). dproj_q and
 * dproj_kv are written per token (every head is here); the norm weights' sums per work-item, part_w (2, slots, C)
 * with slot = the work-group, and the RoPE tables' per batch row, rope_b (2, B, N, Dh), are finished by
 * cd_prep_bwd_reduce (prep_backward.cl). Every sum has a fixed order. No barriers.
 *
 * Launch: local size 1, global B·ceil(N / (8·CD_PB)). inv_rms (2, B, N) from the forward. Flags: those of
 * prep_backward.cl (the host's enum in src/ops/prep_backward.c), plus second K and V gradients (grad_k2, grad_v2,
 * f32) added as they are read. */
#define CD_BW_GQ 1u
#define CD_BW_GK 2u
#define CD_BW_GV 4u
#define CD_BW_GI 8u
#define CD_BW_PQ 16u
#define CD_BW_ROPE 32u
#define CD_BW_PKV 64u
#define CD_BW_G2 512u

/* The 8 channel rows of group g of one head (row stride N) for the block's n tokens, plus those of g2 (f32) when
 * given; zero when absent. */
CD_INLINE void cd_grads8(int has, global const cd_sstore_t *p, global const float *p2, ulong N, uint n, float8 *gg) {
  _Pragma("unroll") for (int i = 0; i < 8; i++) {
    gg[i] = has ? cd_sld8n(p + (ulong)i * N, n) : (float8)(0.0f);
    if (p2) gg[i] += cd_ldf8n(p2 + (ulong)i * N, n);
  }
}

/* Channel vectors x[i] back to the n token rows at dst (stride C): f32 (u) or the activations' storage (dv_raw). */
CD_INLINE void cd_rows8_out_f32(float8 *x, global float *dst, uint C, uint n) {
  cd_transpose8(x);
  for (uint t = 0; t < n; t++) vstore8(x[t], 0, dst + (ulong)t * C);
}
CD_INLINE void cd_rows8_out(float8 *x, global cd_store_t *dst, uint C, uint n) {
  cd_transpose8(x);
  for (uint t = 0; t < n; t++) CD_ST8(x[t], dst + (ulong)t * C);
}

/* Adds the group's products of the gradients g and the inputs x of the transform: the camera half's into M[4i + j]
 * (g[i]·x[j], when want_p), the RoPE half's into the tables' sums, R[r] += g[r]·x[r], Rs[r] += g[r]·x[r^1] (when
 * want_r). */
CD_INLINE void cd_bw_tables(const uint Dh, uint g, const float8 *gg, const float8 *x, int want_p, int want_r,
                            local float8 *M, local float8 *Rc, local float8 *Rs) {
  _Pragma("unroll") for (int u = 0; u < 2; u++) {
    const uint c0 = 8 * g + 4 * u;
    if (c0 < Dh) {
      if (want_p)
        _Pragma("unroll") for (int i = 0; i < 4; i++) _Pragma("unroll") for (int j = 0; j < 4; j++)
          M[4 * i + j] = fma(gg[4 * u + i], x[4 * u + j], M[4 * i + j]);
    } else if (want_r) {
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        const uint r = c0 - Dh + i;
        Rc[r] = fma(gg[4 * u + i], x[4 * u + i], Rc[r]);
        Rs[r] = fma(gg[4 * u + i], x[4 * u + (i ^ 1)], Rs[r]);
      }
    }
  }
}

/* The 8 per-token vectors w[i] (channel i, lanes = tokens) summed over the tokens: channel sums as one vector. */
CD_INLINE float8 cd_token_sums(float8 *w) {
  cd_transpose8(w);
  float8 s = w[0];
  _Pragma("unroll") for (int t = 1; t < 8; t++) s += w[t];
  return s;
}

kernel void cd_prep_bwd_cpu(CD_PREP_BWD_INPUTS, global const float *grad_k2, ulong gk2_off, global const float *grad_v2,
                              ulong gv2_off, global cd_store_t *dq_raw, ulong dq_off, global cd_store_t *dk_raw,
                              ulong dk_off, global cd_store_t *dv_raw, ulong dv_off, global float *uq, ulong uq_off,
                              global float *uk, ulong uk_off, global float *part_w, ulong pw_off,
                              global float *rope_b, ulong rb_off, global float *dproj_q, ulong dpq_off,
                              global float *dproj_kv, ulong dpkv_off, ulong N, uint H, float k_scale, uint flags,
                              uint D) {
  /* per block, lanes = its tokens: the inverse RMS, the camera matrices and RoPE tables, and the sums of dproj_q,
   * dproj_kv (16 entries each) and of the RoPE tables' gradients (Dh each) over the heads */
  local float8 Iq[CD_PB], Ik[CD_PB], Pq[CD_PB * 16], Pk[CD_PB * 16], cs[CD_PB * CD_DMAX / 2], sn[CD_PB * CD_DMAX / 2];
  local float8 Mq[CD_PB * 16], Mk[CD_PB * 16], Rc[CD_PB * CD_DMAX / 2], Rs[CD_PB * CD_DMAX / 2];
  const uint Dh = D / 2, C = H * D;
  const ulong nblk = (N + 8 * CD_PB - 1) / (8 * CD_PB);
  const ulong b = get_group_id(0) / nblk, blk = get_group_id(0) % nblk;
  const ulong BN = (ulong)(get_num_groups(0) / nblk) * N, slots = get_num_groups(0), slot = get_group_id(0);
  const ulong n0 = blk * CD_PB * 8, tok0 = b * N + n0;
  const int has_gq = (flags & CD_BW_GQ) != 0, has_gk = (flags & CD_BW_GK) != 0, has_gv = (flags & CD_BW_GV) != 0;
  const int has_gi = (flags & CD_BW_GI) != 0, has_g2 = (flags & CD_BW_G2) != 0;
  const int want_pq = (flags & CD_BW_PQ) != 0, want_pkv = (flags & CD_BW_PKV) != 0;
  const int want_rope = (flags & CD_BW_ROPE) != 0, need_v = has_gv && (want_pkv || want_rope);
#if CD_DTYPE == 0
  global float *const ub[2] = {dq_raw + dq_off, dk_raw + dk_off}; /* u, overwritten by dx_raw at the end */
#else
  global float *const ub[2] = {uq + uq_off, uk + uk_off};
#endif
  uint nb[CD_PB]; /* valid tokens of each block */
  float8 Sq[CD_PB], Sk[CD_PB];
  const uint ntok = (uint)min((ulong)(8 * CD_PB), N - n0); /* the work-item's tokens */
  for (uint sb = 0; sb < CD_PB; sb++) {
    const ulong s0 = n0 + 8 * sb, t0 = tok0 + 8 * sb;
    const uint n = nb[sb] = s0 < N ? (uint)min((ulong)8, N - s0) : 0u;
    Sq[sb] = Sk[sb] = (float8)(0.0f);
    if (!n) continue;
    Iq[sb] = cd_ldf8n(inv_rms + inv_off + t0, n);
    Ik[sb] = cd_ldf8n(inv_rms + inv_off + BN + t0, n);
    cd_block_tables(proj_q + pq_off, proj_kv + pkv_off, rope_cos + rc_off, rope_sin + rs_off, t0, s0, n, Dh,
                    Pq + 16 * sb, Pk + 16 * sb, cs + Dh * sb, sn + Dh * sb);
    for (uint e = 0; e < 16; e++) Mq[16 * sb + e] = Mk[16 * sb + e] = (float8)(0.0f);
    for (uint r = 0; r < Dh; r++) Rc[Dh * sb + r] = Rs[Dh * sb + r] = (float8)(0.0f);
  }

  for (uint h = 0; h < H; h++) {
    const ulong in0 = tok0 * C + (ulong)h * D, gb = ((b * H + h) * D) * N + n0;
    global const float *wq = qw + qw_off + h * D, *wk = kw + kw_off + h * D;
    /* inflation_sq's chain: dpost = gi [post > 1e-12] / cl(pre), dpre = -gi cl(post) / cl(pre)^2 [pre > 1e-12] */
    float8 dpost[CD_PB], dpre[CD_PB];
    for (uint sb = 0; sb < CD_PB; sb++) dpost[sb] = dpre[sb] = (float8)(0.0f);
    if (has_gi) {
      float8 pre[CD_PB], post[CD_PB];
      for (uint sb = 0; sb < CD_PB; sb++) pre[sb] = post[sb] = (float8)(0.0f);
      for (uint g = 0; g < D / 8; g++) {
        const float8 wv = vload8(g, wk);
        const float wc[8] = {wv.s0, wv.s1, wv.s2, wv.s3, wv.s4, wv.s5, wv.s6, wv.s7};
        for (uint sb = 0; sb < CD_PB; sb++) {
          if (!nb[sb]) continue;
          float8 x[8], o[8];
          cd_rows8(k_raw + k_raw_off + in0 + (ulong)(8 * sb) * C + 8 * g, C, nb[sb], x);
          _Pragma("unroll") for (int i = 0; i < 8; i++) {
            const float8 a = fmax(x[i] * Ik[sb] * wc[i], (float8)(0.0f)) * k_scale;
            pre[sb] = fma(a, a, pre[sb]);
            x[i] = a;
          }
          cd_cam8(Dh, g, 0, Pk + 16 * sb, cs + Dh * sb, sn + Dh * sb, x, o);
          _Pragma("unroll") for (int i = 0; i < 8; i++) post[sb] = fma(o[i], o[i], post[sb]);
        }
      }
      for (uint sb = 0; sb < CD_PB; sb++) {
        if (!nb[sb]) continue;
        const float8 gi = cd_ldf8n(grad_infl + gi_off + (b * H + h) * N + n0 + 8 * sb, nb[sb]);
        const float8 cpre = fmax(pre[sb], (float8)(1e-12f)), cpost = fmax(post[sb], (float8)(1e-12f));
        dpost[sb] = select((float8)(0.0f), gi / cpre, post[sb] > (float8)(1e-12f));
        dpre[sb] = select((float8)(0.0f), -gi * cpost / (cpre * cpre), pre[sb] > (float8)(1e-12f));
      }
    }

    for (uint g = 0; g < D / 8; g++) {
      if (g + 1 < D / 8 || h + 1 < H) {
        /* the next group's gradient rows (this head's or the next head's first) */
        const ulong nx = gb + (ulong)(8 * g + 8) * N;
        const uint bytes = (uint)sizeof(cd_sstore_t) * ntok;
        const ulong stride = N * sizeof(cd_sstore_t);
        if (has_gq) cd_prefetch8((global const uchar *)(grad_q + gq_off + nx), stride, bytes, 0);
        if (has_gk) cd_prefetch8((global const uchar *)(grad_k + gk_off + nx), stride, bytes, 0);
        if (has_gv) cd_prefetch8((global const uchar *)(grad_v + gv_off + nx), stride, bytes, 0);
        if (has_g2) {
          cd_prefetch8((global const uchar *)(grad_k2 + gk2_off + nx), N * 4, 4 * ntok, 0);
          cd_prefetch8((global const uchar *)(grad_v2 + gv2_off + nx), N * 4, 4 * ntok, 0);
        }
      }
      const float8 wqv = vload8(g, wq), wkv = vload8(g, wk);
      const float wqc[8] = {wqv.s0, wqv.s1, wqv.s2, wqv.s3, wqv.s4, wqv.s5, wqv.s6, wqv.s7};
      const float wkc[8] = {wkv.s0, wkv.s1, wkv.s2, wkv.s3, wkv.s4, wkv.s5, wkv.s6, wkv.s7};
      float8 Wq[8], Wk[8]; /* da x ir per channel, lanes = tokens, summed over the blocks */
      _Pragma("unroll") for (int i = 0; i < 8; i++) Wq[i] = Wk[i] = (float8)(0.0f);
      for (uint sb = 0; sb < CD_PB; sb++) {
        const uint n = nb[sb];
        if (!n) continue;
        const ulong row = in0 + (ulong)(8 * sb) * C + 8 * g, grow = gb + (ulong)(8 * g) * N + 8 * sb;
        local const float8 *P = Pq + 16 * sb, *Pv = Pk + 16 * sb, *c8 = cs + Dh * sb, *s8 = sn + Dh * sb;
        local float8 *rc = Rc + Dh * sb, *rs = Rs + Dh * sb;
        float8 x[8], gg[8], dx[8], y[8], u[8];
        /* q: da = [a > 0] Tᵀ g_q */
        cd_rows8(q_raw + q_raw_off + row, C, n, x);
        cd_grads8(has_gq, grad_q + gq_off + grow, NULL, N, n, gg);
        cd_cam8(Dh, g, 1, P, c8, s8, gg, dx);
        _Pragma("unroll") for (int i = 0; i < 8; i++) {
          const float8 a = x[i] * Iq[sb] * wqc[i];
          const float8 da = select((float8)(0.0f), dx[i], a > (float8)(0.0f));
          u[i] = da * Iq[sb] * wqc[i];
          Sq[sb] = fma(da * x[i], wqc[i], Sq[sb]);
          Wq[i] += da * x[i] * Iq[sb];
          y[i] = fmax(a, (float8)(0.0f));
        }
        cd_rows8_out_f32(u, ub[0] + row, C, n);
        cd_bw_tables(Dh, g, gg, y, want_pq, want_rope, Mq + 16 * sb, rc, rs);
        /* k: g_k (+ g_k2) + 2 (T kn) dpost; da = [a > 0] (Tᵀ g_k + 2 kn dpre) k_scale */
        cd_rows8(k_raw + k_raw_off + row, C, n, x);
        cd_grads8(has_gk, grad_k + gk_off + grow, has_g2 ? grad_k2 + gk2_off + grow : NULL, N, n, gg);
        float8 a[8];
        _Pragma("unroll") for (int i = 0; i < 8; i++) {
          a[i] = x[i] * Ik[sb] * wkc[i];
          y[i] = fmax(a[i], (float8)(0.0f)) * k_scale;
        }
        if (has_gi) {
          cd_cam8(Dh, g, 0, Pv, c8, s8, y, dx);
          _Pragma("unroll") for (int i = 0; i < 8; i++) gg[i] = fma(2.0f * dx[i], dpost[sb], gg[i]);
        }
        cd_cam8(Dh, g, 1, Pv, c8, s8, gg, dx);
        _Pragma("unroll") for (int i = 0; i < 8; i++) {
          const float8 da = select((float8)(0.0f), fma(2.0f * y[i], dpre[sb], dx[i]) * k_scale, a[i] > (float8)(0.0f));
          u[i] = da * Ik[sb] * wkc[i];
          Sk[sb] = fma(da * x[i], wkc[i], Sk[sb]);
          Wk[i] += da * x[i] * Ik[sb];
        }
        cd_rows8_out_f32(u, ub[1] + row, C, n);
        cd_bw_tables(Dh, g, gg, y, want_pkv, want_rope, Mk + 16 * sb, rc, rs);
        /* v: dv_raw = Tᵀ g_v (+ g_v2) */
        cd_grads8(has_gv, grad_v + gv_off + grow, has_g2 ? grad_v2 + gv2_off + grow : NULL, N, n, gg);
        cd_cam8(Dh, g, 1, Pv, c8, s8, gg, dx);
        cd_rows8_out(dx, dv_raw + dv_off + row, C, n);
        if (need_v) {
          cd_rows8(v_raw + v_raw_off + row, C, n, x);
          cd_bw_tables(Dh, g, gg, x, want_pkv, want_rope, Mk + 16 * sb, rc, rs);
        }
      }
      vstore8(cd_token_sums(Wq), 0, part_w + pw_off + slot * C + h * D + 8 * g);
      vstore8(cd_token_sums(Wk), 0, part_w + pw_off + (slots + slot) * C + h * D + 8 * g);
    }
  }

  for (uint sb = 0; sb < CD_PB; sb++) {
    const uint n = nb[sb];
    if (!n) continue;
    const ulong t0 = tok0 + 8 * sb;
    float sq[8], sk[8], iq[8], ik[8];
    vstore8(Sq[sb], 0, sq), vstore8(Sk[sb], 0, sk), vstore8(Iq[sb], 0, iq), vstore8(Ik[sb], 0, ik);
    /* dx_raw = u - ir^3 / C x S along each token's row */
    for (uint t = 0; t < n; t++) {
      const ulong e0 = (t0 + t) * C;
      const float cq = iq[t] * iq[t] * iq[t] / (float)C, ck = ik[t] * ik[t] * ik[t] / (float)C;
      for (uint c = 0; c < C; c += 8) {
        const float8 xq = CD_LD8(q_raw + q_raw_off + e0 + c), xk = CD_LD8(k_raw + k_raw_off + e0 + c);
        const float8 u_q = vload8(0, ub[0] + e0 + c), u_k = vload8(0, ub[1] + e0 + c);
        CD_ST8(fma(-cq * xq, (float8)(sq[t]), u_q), dq_raw + dq_off + e0 + c);
        CD_ST8(fma(-ck * xk, (float8)(sk[t]), u_k), dk_raw + dk_off + e0 + c);
      }
    }
    /* dproj per token: entries 0..7 and 8..15 of the 4 x 4 sums, transposed to the tokens' rows */
    for (int m = 0; m < 2; m++) {
      if (!(m ? want_pkv : want_pq)) continue;
      global float *dst = m ? dproj_kv + dpkv_off : dproj_q + dpq_off;
      local const float8 *M = (m ? Mk : Mq) + 16 * sb;
      for (int hf = 0; hf < 2; hf++) {
        float8 e[8];
        _Pragma("unroll") for (int i = 0; i < 8; i++) e[i] = M[8 * hf + i];
        cd_transpose8(e);
        for (uint t = 0; t < n; t++) vstore8(e[t], hf, dst + (t0 + t) * 16);
      }
    }
    /* the RoPE tables' gradients of this batch row */
    for (uint r = 0; want_rope && r < Dh; r++) {
      float c8[8], s8[8];
      vstore8(Rc[Dh * sb + r], 0, c8), vstore8(Rs[Dh * sb + r], 0, s8);
      for (uint t = 0; t < n; t++) {
        rope_b[rb_off + (t0 + t) * Dh + r] = c8[t];
        rope_b[rb_off + (BN + t0 + t) * Dh + r] = s8[t];
      }
    }
  }
}
