/* The camera branch's token-wise stages in CPU forms: the short conv on raw K, forward and backward (docs/math.md
 * §8.2), and the output transform, forward and backward (§8.5), shaped for a CPU device whose compiler runs a
 * work-item's explicit vectors on the core's SIMD units (PoCL), as cl/prep_cpu.cl and cl/scan_cpu.cl are.
 *
 * A work-group is one work-item, one core's task; no local memory, no barriers. Every kernel does the arithmetic of
 * its work-group form (cl/short_conv.cl, cl/branch.cl) in the same order, lane by lane, so the two agree bit for
 * bit. Build option CD_DTYPE (common.cl): the storage of the activations (the conv's x, look-back, y, dy and dx; the
 * output transform's y and grad_y); everything else is f32, and so is the arithmetic. Shapes are arguments: one
 * program per storage serves every shape. */

/* ------------------------------------------------------------------------------------------------ short conv */

/* The taps of channels c0 … c0 + n − 1 (w: the weight row of c0, 4 floats per channel) as channel vectors:
 * w[j] lane i = weight j of channel c0 + i (zero past n). */
CD_INLINE void cd_bc_taps(global const float *w, uint n, float8 *tap) {
  float t[32];
  if (n == 8) {
    vstore16(vload16(0, w), 0, t);
    vstore16(vload16(1, w), 1, t);
  } else {
    for (uint i = 0; i < 32; i++) t[i] = i < 4 * n ? w[i] : 0.0f;
  }
  _Pragma("unroll") for (int j = 0; j < 4; j++)
    tap[j] = (float8)(t[j], t[4 + j], t[8 + j], t[12 + j], t[16 + j], t[20 + j], t[24 + j], t[28 + j]);
}

/* Layout (B, T, S, C) as in cl/short_conv.cl. One work-item per (b, s, block of CG groups of 8 channels): per group
 * it walks the T frames with the sliding window of 7 frames in float8 registers (lanes: the channels), so every
 * element is read once. lb, back, seg_end and lb_out as cl/short_conv.cl's cd_short_conv_forward; ncb channel
 * blocks per (b, s); launch: local size 1, global B·S·ncb. */
kernel void cd_conv_cpu_forward(global const cd_store_t *restrict x, ulong x_off, global const cd_store_t *restrict lb,
                                ulong lb_off, global const float *restrict w, ulong w_off,
                                global const uint *restrict seg_end, global cd_store_t *restrict y, ulong y_off,
                                uint T, uint S, uint C, uint CG, uint ncb, uint back,
                                global cd_store_t *restrict lb_out, ulong lbo_off, uint write_lb) {
  const ulong gid = get_global_id(0), bs = gid / ncb, b = bs / S, s = bs % S;
  const uint G = (C + 7) / 8, g0 = (uint)(gid % ncb) * CG, g1 = min(g0 + CG, G);
  const ulong stride = (ulong)S * C, base = (b * T * S + s) * C, lbase = lb_off + (b * 3 * S + s) * C;
  for (uint g = g0; g < g1; g++) {
    const uint c0 = 8 * g, n = min(8u, C - c0);
    float8 tap[4];
    cd_bc_taps(w + w_off + 4 * c0, n, tap);
    global const cd_store_t *xp = x + x_off + base + c0;
    global const cd_store_t *lp = lb + lbase + c0;
    global cd_store_t *yp = y + y_off + base + c0;
    const float8 z = (float8)(0.0f);
    float8 xm3 = back > 2 ? cd_ld8n(lp, n) : z, xm2 = back > 1 ? cd_ld8n(lp + stride, n) : z,
           xm1 = back > 0 ? cd_ld8n(lp + 2 * stride, n) : z;
    float8 x0 = cd_ld8n(xp, n), xp1 = T > 1 ? cd_ld8n(xp + stride, n) : z,
           xp2 = T > 2 ? cd_ld8n(xp + 2 * stride, n) : z, xp3 = T > 3 ? cd_ld8n(xp + 3 * stride, n) : z;
    for (uint t = 0; t < T; t++) {
      const uint e = seg_end[back + t] - back; /* relative to x's frames */
      float8 acc;
      CD_CONV_STEP(acc, tap, xm3, xm2, xm1, x0, xp1, xp2, xp3, t, e);
      cd_st8n(yp + (ulong)t * stride, acc, n);
      xm3 = xm2, xm2 = xm1, xm1 = x0, x0 = xp1, xp1 = xp2, xp2 = xp3;
      xp3 = t + 4 < T ? cd_ld8n(xp + (ulong)(t + 4) * stride, n) : z;
    }
    if (write_lb) {
      global cd_store_t *op = lb_out + lbo_off + (b * 3 * S + s) * C + c0;
      cd_st8n(op, xm3, n);
      cd_st8n(op + stride, xm2, n);
      cd_st8n(op + 2 * stride, xm1, n);
    }
  }
}

/* One work-item per (b, block of sb_len spatial positions, block of CG channel groups): dx (when want_dx) and the
 * weight partials part[((b·nsb + sb)·C + c)·4 + j] (when want_dw), j = 0 … 3 the taps w0 … w3, as
 * cl/short_conv.cl's cd_short_conv_backward writes them (the same sums in the same order). Launch: local size 1,
 * global B·nsb·ncb. */
kernel void cd_conv_cpu_backward(global const cd_store_t *restrict x, ulong x_off, global const float *restrict w,
                                 ulong w_off, global const uint *restrict seg_end,
                                 global const cd_store_t *restrict dy, ulong dy_off, global cd_store_t *restrict dx,
                                 ulong dx_off, global float *restrict part, uint T, uint S, uint C, uint sb_len,
                                 uint nsb, uint CG, uint ncb, uint want_dx, uint want_dw) {
  const ulong gid = get_global_id(0), bsb = gid / ncb, b = bsb / nsb, sb = bsb % nsb;
  const uint G = (C + 7) / 8, g0 = (uint)(gid % ncb) * CG, g1 = min(g0 + CG, G);
  const uint s0 = (uint)sb * sb_len, s1 = min(s0 + sb_len, S);
  const ulong stride = (ulong)S * C;
  const float8 z = (float8)(0.0f);
  for (uint g = g0; g < g1; g++) {
    const uint c0 = 8 * g, n = min(8u, C - c0);
    float8 tap[4];
    cd_bc_taps(w + w_off + 4 * c0, n, tap);
    float8 acc[4] = {z, z, z, z}; /* the partials of taps w0 (look 3), w1, w2, w3 (the frame itself) */
    for (uint s = s0; s < s1; s++) {
      const ulong base = (b * T * S + s) * C + c0;
      global const cd_store_t *xp = x + x_off + base, *gp = dy + dy_off + base;
      float8 xm3 = z, xm2 = z, xm1 = z, x0 = z, xp1 = z, xp2 = z, xp3 = z;
      if (want_dw) {
        x0 = cd_ld8n(xp, n);
        xp1 = T > 1 ? cd_ld8n(xp + stride, n) : z;
        xp2 = T > 2 ? cd_ld8n(xp + 2 * stride, n) : z;
        xp3 = T > 3 ? cd_ld8n(xp + 3 * stride, n) : z;
      }
      float8 gm3 = z, gm2 = z, gm1 = z, g0v = cd_ld8n(gp, n), gp1 = T > 1 ? cd_ld8n(gp + stride, n) : z,
             gp2 = T > 2 ? cd_ld8n(gp + 2 * stride, n) : z, gp3 = T > 3 ? cd_ld8n(gp + 3 * stride, n) : z;
      uint em3 = 0, em2 = 0, em1 = 0; /* seg_end of t-3, t-2, t-1 */
      for (uint t = 0; t < T; t++) {
        const uint e = seg_end[t];
        if (want_dx) {
          /* outputs t … t+3 read x[t] backwards (always, when they exist); t-1 … t-3 forwards */
          float8 a = tap[3] * g0v;
          a = fma(tap[2], gp1, a);
          a = fma(tap[1], gp2, a);
          a = fma(tap[0], gp3, a);
          if (t >= 1 && t < em1) a = fma(tap[2], gm1, a);
          if (t >= 2 && t < em2) a = fma(tap[1], gm2, a);
          if (t >= 3 && t < em3) a = fma(tap[0], gm3, a);
          cd_st8n(dx + dx_off + base + (ulong)t * stride, a, n);
        }
        if (want_dw) {
          acc[3] = fma(g0v, x0, acc[3]);
          acc[2] = fma(g0v, xm1 + (t + 1 < e ? xp1 : z), acc[2]);
          acc[1] = fma(g0v, xm2 + (t + 2 < e ? xp2 : z), acc[1]);
          acc[0] = fma(g0v, xm3 + (t + 3 < e ? xp3 : z), acc[0]);
          xm3 = xm2, xm2 = xm1, xm1 = x0, x0 = xp1, xp1 = xp2, xp2 = xp3;
          xp3 = t + 4 < T ? cd_ld8n(xp + (ulong)(t + 4) * stride, n) : z;
        }
        em3 = em2, em2 = em1, em1 = e;
        gm3 = gm2, gm2 = gm1, gm1 = g0v, g0v = gp1, gp1 = gp2, gp2 = gp3;
        gp3 = t + 4 < T ? cd_ld8n(gp + (ulong)(t + 4) * stride, n) : z;
      }
    }
    if (want_dw) {
      float a[4][8];
      _Pragma("unroll") for (int j = 0; j < 4; j++) vstore8(acc[j], 0, a[j]);
      global float *pp = part + (bsb * C + c0) * 4;
      for (uint i = 0; i < n; i++) vstore4((float4)(a[0][i], a[1][i], a[2][i], a[3][i]), i, pp);
    }
  }
}

/* dw[i] = Σ_p part[p·n4c + i] over p = 0 … P−1 in order (i < n4c = 4·C), 64 of them per work-item in float8. */
kernel void cd_conv_cpu_reduce(global const float *restrict part, global float *restrict dw, ulong dw_off, uint n4c,
                               uint P) {
  const uint i0 = (uint)get_global_id(0) * 64, i1 = min(i0 + 64, n4c);
  for (uint i = i0; i < i1; i += 8) {
    const uint n = min(8u, i1 - i);
    float8 acc = (float8)(0.0f);
    for (uint p = 0; p < P; p++) acc += cd_ldf8n(part + (ulong)p * n4c + i, n);
    cd_stf8n(dw + dw_off + i, acc, n);
  }
}

/* ---------------------------------------------------------------------------------------- output transform */

/* Output transform work-items: one per (b, block of 8·CD_OB tokens), every head. The (B, H, D, N) side is read and
 * written as channel rows of 8 tokens (lanes: the tokens); the (B, N, H, D) side as 8 channels of one token, through
 * an 8 x 8 transpose (cd_transpose8). The per-token camera matrices (16 token vectors per 8 tokens) are transposed
 * once per work-item, each 8-channel group's RoPE tables once per group for every head. CD_OB (a build option, the
 * host's): the channel rows, each in its own page at production shapes, are read or written CD_OB·32 bytes at a
 * time. Launch: local size 1, global B·nblk (nblk = ceil(N / (8·CD_OB))). */
#ifndef CD_OB
#error "CD_OB (8-token blocks per work-item of the output transform) must be given as a build option"
#endif

/* The tokens n0 … n0 + nt − 1 (nt ≤ 8) of one block: their camera matrices (P[k] lane t = proj_o[token t][k]). */
CD_INLINE void cd_ot_matrices(global const float *po, uint nt, float8 *P) {
  float8 r[8];
  _Pragma("unroll") for (int hf = 0; hf < 2; hf++) {
    _Pragma("unroll") for (uint t = 0; t < 8; t++) r[t] = t < nt ? vload8(0, po + t * 16 + 8 * hf) : (float8)(0.0f);
    cd_transpose8(r);
    _Pragma("unroll") for (int k = 0; k < 8; k++) P[8 * hf + k] = r[k];
  }
}

/* The RoPE tables of channels c0 … c0 + 7 (those in the RoPE half, c ≥ Dh) for a block's nt tokens from token n0:
 * cs[i] lane t = cos[(n0 + t)·Dh + c0 + i − Dh], the same for sn. A group wholly in the RoPE half reads 8
 * consecutive entries per token and transposes them; one across the halves' border (Dh % 8 = 4) reads its entries
 * one by one. */
CD_INLINE void cd_ot_tables(global const float *rc, global const float *rs, ulong n0, uint nt, uint Dh, uint c0,
                            float8 *cs, float8 *sn) {
  if (c0 >= Dh) {
    _Pragma("unroll") for (uint t = 0; t < 8; t++) {
      const ulong at = (n0 + t) * Dh + (c0 - Dh);
      cs[t] = t < nt ? vload8(0, rc + at) : (float8)(0.0f);
      sn[t] = t < nt ? vload8(0, rs + at) : (float8)(0.0f);
    }
    cd_transpose8(cs);
    cd_transpose8(sn);
    return;
  }
  float c[8][8], s[8][8];
  for (uint i = 0; i < 8; i++)
    for (uint t = 0; t < 8; t++) {
      const int in = t < nt && c0 + i >= Dh;
      const ulong at = (n0 + t) * Dh + (c0 + i - Dh);
      c[i][t] = in ? rc[at] : 0.0f;
      s[i][t] = in ? rs[at] : 0.0f;
    }
  _Pragma("unroll") for (int i = 0; i < 8; i++) cs[i] = vload8(0, c[i]), sn[i] = vload8(0, s[i]);
}

/* The rows of one 8-channel group (c0 = its first channel) for 8 tokens, transformed: the camera half through P
 * (forward: o = P·v; backward: o = Pᵀ·v), the RoPE half with the tables (the backward swaps each pair's sines), the
 * operations of cl/common.cl's CD_OT_CAM and CD_OT_ROPE in their order. */
CD_INLINE void cd_ot_group(const int backward, uint Dh, uint c0, const float8 *P, const float8 *cs, const float8 *sn,
                           const float8 *v, float8 *o) {
  const float8 z = (float8)(0.0f);
  _Pragma("unroll") for (int u = 0; u < 2; u++) {
    const int b4 = 4 * u;
    if (c0 + b4 < Dh) {
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        /* row i of P (forward) or column i (backward): the coefficients of v[b4 + 0 … 3] */
        const float8 p0 = backward ? P[i] : P[4 * i], p1 = backward ? P[4 + i] : P[4 * i + 1],
                     p2 = backward ? P[8 + i] : P[4 * i + 2], p3 = backward ? P[12 + i] : P[4 * i + 3];
        o[b4 + i] = fma(p3, v[b4 + 3], fma(p2, v[b4 + 2], fma(p1, v[b4 + 1], fma(p0, v[b4], z))));
      }
    } else {
      _Pragma("unroll") for (int i = 0; i < 4; i++) {
        const int r = b4 + i, q = b4 + (i ^ 1); /* q: r's partner in its pair */
        o[r] = fma(-v[q], backward ? sn[q] : sn[r], v[r] * cs[r]);
      }
    }
  }
}

/* The work-item's walk (gid: its index), forward (backward = 0: y from out + out2) or backward (grad_out from gy);
 * the pointers are at their tensors' offsets, those the direction does not use unread. */
CD_INLINE void cd_ot_walk(const int backward, ulong gid, global const float *out, global const float *out2,
                          uint has_out2, global const cd_store_t *gy, global const float *proj_o,
                          global const float *rope_cos, global const float *rope_sin, global cd_store_t *y,
                          global float *gout, ulong N, uint H, uint D, uint nblk) {
  const ulong b = gid / nblk, nb0 = (gid % nblk) * 8 * CD_OB;
  const uint Dh = D / 2;
  float8 P[CD_OB][16], cs[CD_OB][8], sn[CD_OB][8];
  uint nt[CD_OB];
  for (uint k = 0; k < CD_OB; k++) {
    const ulong n0 = nb0 + 8 * k;
    nt[k] = n0 < N ? (uint)min((ulong)8, N - n0) : 0;
    if (nt[k]) cd_ot_matrices(proj_o + (b * N + n0) * 16, nt[k], P[k]);
  }
  for (uint c0 = 0; c0 < D; c0 += 8) {
    if (c0 + 8 > Dh)
      for (uint k = 0; k < CD_OB; k++)
        if (nt[k]) cd_ot_tables(rope_cos, rope_sin, nb0 + 8 * k, nt[k], Dh, c0, cs[k], sn[k]);
    for (uint h = 0; h < H; h++)
      for (uint k = 0; k < CD_OB; k++) {
        if (!nt[k]) continue;
        /* row: channel c0's on the (B, H, D, N) side */
        const ulong n0 = nb0 + 8 * k, row = ((b * H + h) * D + c0) * N + n0;
        float8 v[8], o[8];
        if (!backward) {
          _Pragma("unroll") for (uint i = 0; i < 8; i++) {
            v[i] = cd_ldf8n(out + row + i * N, nt[k]);
            if (has_out2) v[i] += cd_ldf8n(out2 + row + i * N, nt[k]);
          }
          cd_ot_group(0, Dh, c0, P[k], cs[k], sn[k], v, o);
          cd_transpose8(o); /* o[t]: the group's 8 channels of token t */
          for (uint t = 0; t < nt[k]; t++) cd_st8n(y + ((b * N + n0 + t) * H + h) * D + c0, o[t], 8);
        } else {
          _Pragma("unroll") for (uint t = 0; t < 8; t++)
            v[t] = t < nt[k] ? cd_ld8n(gy + ((b * N + n0 + t) * H + h) * D + c0, 8) : (float8)(0.0f);
          cd_transpose8(v); /* v[i]: channel c0 + i of the 8 tokens */
          cd_ot_group(1, Dh, c0, P[k], cs[k], sn[k], v, o);
          _Pragma("unroll") for (uint i = 0; i < 8; i++) cd_stf8n(gout + row + i * N, o[i], nt[k]);
        }
      }
  }
}

/* Forward: y (B, N, H, D) from out (+ out2) (B, H, D, N), as cl/branch.cl's cd_output_transform. */
kernel void cd_ot_cpu_forward(global const float *restrict out, ulong out_off, global const float *restrict out2,
                              ulong out2_off, uint has_out2, global const float *restrict proj_o, ulong po_off,
                              global const float *restrict rope_cos, ulong rc_off,
                              global const float *restrict rope_sin, ulong rs_off, global cd_store_t *restrict y,
                              ulong y_off, ulong N, uint H, uint D, uint nblk) {
  cd_ot_walk(0, get_global_id(0), out + out_off, out2 + out2_off, has_out2, 0, proj_o + po_off, rope_cos + rc_off,
             rope_sin + rs_off, y + y_off, 0, N, H, D, nblk);
}

/* Backward: grad_out (B, H, D, N) from grad_y (B, N, H, D), as cl/branch.cl's cd_output_transform_backward. */
kernel void cd_ot_cpu_backward(global const cd_store_t *restrict gy, ulong gy_off, global const float *restrict proj_o,
                               ulong po_off, global const float *restrict rope_cos, ulong rc_off,
                               global const float *restrict rope_sin, ulong rs_off, global float *restrict gout,
                               ulong gout_off, ulong N, uint H, uint D, uint nblk) {
  cd_ot_walk(1, get_global_id(0), 0, 0, 0, gy + gy_off, proj_o + po_off, rope_cos + rc_off, rope_sin + rs_off, 0,
             gout + gout_off, N, H, D, nblk);
}
