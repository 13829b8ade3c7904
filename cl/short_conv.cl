/* Short convolution on raw K along frames (docs/math.md §8.2), forward and backward. Build option CD_DTYPE
 * (common.cl): the storage of x, y, dy and dx (the activations'); the weights and their gradient are f32, the
 * arithmetic f32.
 *
 * Layout (B, T, S, C): element ((b*T + t)*S + s)*C + c. Each (b, s, c) is its own length-T sequence, filtered by
 * the symmetric 7-tap w0 w1 w2 w3 w2 w1 w0 (w = conv_weight[c, 0..3]): look-back reads across segment starts
 * (zero before frame 0), look-ahead stops at seg_end[t] (the end of t's segment). Every work-item walks one
 * sequence along t with a sliding window in registers, so every element is read once.
 *
 * Backward: dx[t] = w3 dy[t] + sum_{o=1..3} tap(o) (dy[t+o] + [t < seg_end[t-o]] dy[t-o]) and the weight
 * gradient dw[c, 3-o] = sum dy[t] (x[t-o] + [t+o < seg_end[t]] x[t+o]) (dw[c, 3] = sum dy[t] x[t]), summed per
 * work-item over sb spatial positions (a kernel argument, the host's choice) into partials (P, C, 4) and then over P
 * in a fixed order: deterministic, no atomics. */

/* Four consecutive channels c .. c + n - 1 (n <= 4; the lanes past n are zero and not stored) as a float4: one
 * aligned 16-byte (8-byte in 16-bit storage) access where n = 4 and al (every offset and C multiples of 4). */
inline float4 cd_cv_ld4(global const cd_store_t *p, ulong i, uint n, uint al) {
  if (n == 4) return CD_LD4(p, i, al);
  float4 v = (float4)(0.0f);
  v.s0 = CD_LOAD(p, i);
  if (n > 1) v.s1 = CD_LOAD(p, i + 1);
  if (n > 2) v.s2 = CD_LOAD(p, i + 2);
  return v;
}
inline void cd_cv_st4(global cd_store_t *p, ulong i, float4 v, uint n, uint al) {
  if (n == 4) {
    CD_ST4(p, i, v, al);
    return;
  }
  CD_STORE(p, i, v.s0);
  if (n > 1) CD_STORE(p, i + 1, v.s1);
  if (n > 2) CD_STORE(p, i + 2, v.s2);
}

#define XAT(p, t) ((t) < T ? cd_cv_ld4(p, base + (ulong)(t) * stride, n, al) : (float4)(0.0f))

/* one work-item per (4 channels c .. c + 3, s, b), each lane the same sums in the same order as one channel of the
 * CPU form (cl/branch_cpu.cl), so the two agree bit for bit. A stream's block (back = 1..3) continues the frames of
 * its look-back: lb (B, 3, S, C) holds the raw frames before x's, the last `back` of them read (the earlier ones are
 * before frame 0: zero), and seg_end has back + T entries, those of the frames [look-back's | x's] (back = 0: lb
 * unread, T entries). y gets x's T frames only. With write_lb, lb_out (B, 3, S, C; not lb) gets the last three
 * frames of [look-back's | x's], the window's registers after the walk (zeros for frames before frame 0): a
 * committing block's next look-back, with no second pass over x. al: x_off, lb_off, y_off, lbo_off and C are
 * multiples of 4. Launch: BSC4 = B·S·ceil(C/4) work-items. */
kernel void cd_short_conv_forward(global const cd_store_t *restrict x, ulong x_off,
                                  global const cd_store_t *restrict lb, ulong lb_off, global const float *restrict w,
                                  ulong w_off,
                                  global const uint *restrict seg_end, global cd_store_t *restrict y, ulong y_off,
                                  uint T, uint S, uint C, ulong BSC4, uint back, global cd_store_t *restrict lb_out,
                                  ulong lbo_off, uint write_lb, uint al) {
  const ulong idx = get_global_id(0);
  if (idx >= BSC4) return;
  const uint C4 = (C + 3) / 4, c = 4 * (uint)(idx % C4), n = min(4u, C - c);
  const ulong bs = idx / C4, b = bs / S, s = bs % S;
  const ulong stride = (ulong)S * C, base = x_off + (b * T * S + s) * C + c;
  const ulong ybase = y_off + (b * T * S + s) * C + c, lbase = lb_off + (b * 3 * S + s) * C + c;
  float4 tap[4];
  for (uint j = 0; j < 4; j++) {
    global const float *wj = w + w_off + 4 * c + j;
    tap[j] = (float4)(wj[0], n > 1 ? wj[4] : 0.0f, n > 2 ? wj[8] : 0.0f, n > 3 ? wj[12] : 0.0f);
  }
  const float4 z = (float4)(0.0f);
  float4 xm3 = back > 2 ? cd_cv_ld4(lb, lbase, n, al) : z, xm2 = back > 1 ? cd_cv_ld4(lb, lbase + stride, n, al) : z,
         xm1 = back > 0 ? cd_cv_ld4(lb, lbase + 2 * stride, n, al) : z;
  float4 x0 = XAT(x, 0u), xp1 = XAT(x, 1u), xp2 = XAT(x, 2u), xp3 = XAT(x, 3u);
  /* restrict: the loads of later steps may be issued ahead of this step's store */
#pragma unroll 4
  for (uint t = 0; t < T; t++) {
    const uint e = seg_end[back + t] - back; /* relative to x's frames */
    float4 acc;
    CD_CONV_STEP(acc, tap, xm3, xm2, xm1, x0, xp1, xp2, xp3, t, e);
    cd_cv_st4(y, ybase + (ulong)t * stride, acc, n, al);
    xm3 = xm2, xm2 = xm1, xm1 = x0, x0 = xp1, xp1 = xp2, xp2 = xp3;
    xp3 = XAT(x, t + 4);
  }
  if (write_lb) {
    const ulong o = lbo_off + (b * 3 * S + s) * C + c;
    cd_cv_st4(lb_out, o, xm3, n, al);
    cd_cv_st4(lb_out, o + stride, xm2, n, al);
    cd_cv_st4(lb_out, o + 2 * stride, xm1, n, al);
  }
}
#undef XAT
#define XAT(p, t) ((t) < T ? CD_LOAD(p, base + (ulong)(t) * stride) : 0.0f)

/* one work-item per (c, block of sb spatial positions, b): dx (when want_dx) and the weight partials
 * part[(b*nsb + sb)*C + c][0..3] (when want_dw) */
kernel void cd_short_conv_backward(global const cd_store_t *restrict x, ulong x_off, global const float *restrict w,
                                   ulong w_off, global const uint *restrict seg_end,
                                   global const cd_store_t *restrict dy, ulong dy_off, global cd_store_t *restrict dx,
                                   ulong dx_off,
                                   global float4 *restrict part, uint T, uint S, uint C,
                                   uint sb_len, uint nsb, ulong total, uint want_dx, uint want_dw) {
  const ulong idx = get_global_id(0);
  if (idx >= total) return;
  const uint c = (uint)(idx % C);
  const ulong bsb = idx / C, b = bsb / nsb, sb = bsb % nsb;
  const float w0 = w[w_off + 4 * c], w1 = w[w_off + 4 * c + 1], w2 = w[w_off + 4 * c + 2],
              w3 = w[w_off + 4 * c + 3];
  const ulong stride = (ulong)S * C;
  float4 acc = (float4)(0.0f);
  const uint s_end = min((uint)(sb * sb_len + sb_len), S);
  for (uint s = (uint)(sb * sb_len); s < s_end; s++) {
    const ulong base0 = (b * T * S + s) * C + c;
    ulong base = x_off + base0;
    float xm3 = 0.0f, xm2 = 0.0f, xm1 = 0.0f;
    float x0 = XAT(x, 0u), xp1 = XAT(x, 1u), xp2 = XAT(x, 2u), xp3 = XAT(x, 3u);
    base = dy_off + base0;
    float gm3 = 0.0f, gm2 = 0.0f, gm1 = 0.0f;
    float g0 = XAT(dy, 0u), gp1 = XAT(dy, 1u), gp2 = XAT(dy, 2u), gp3 = XAT(dy, 3u);
    uint em3 = 0, em2 = 0, em1 = 0; /* seg_end of t-3, t-2, t-1 */
#pragma unroll 4
    for (uint t = 0; t < T; t++) {
      const uint e = seg_end[t];
      if (want_dx) {
        /* outputs t, t+1, t+2, t+3 read x[t] backwards (always, when they exist); t-1, t-2, t-3 forwards */
        float a = w3 * g0;
        a = fma(w2, gp1, a);
        a = fma(w1, gp2, a);
        a = fma(w0, gp3, a);
        if (t >= 1 && t < em1) a = fma(w2, gm1, a);
        if (t >= 2 && t < em2) a = fma(w1, gm2, a);
        if (t >= 3 && t < em3) a = fma(w0, gm3, a);
        CD_STORE(dx, dx_off + base0 + (ulong)t * stride, a);
      }
      if (want_dw) {
        acc.w = fma(g0, x0, acc.w);
        acc.z = fma(g0, xm1 + (t + 1 < e ? xp1 : 0.0f), acc.z);
        acc.y = fma(g0, xm2 + (t + 2 < e ? xp2 : 0.0f), acc.y);
        acc.x = fma(g0, xm3 + (t + 3 < e ? xp3 : 0.0f), acc.x);
      }
      em3 = em2, em2 = em1, em1 = e;
      xm3 = xm2, xm2 = xm1, xm1 = x0, x0 = xp1, xp1 = xp2, xp2 = xp3;
      gm3 = gm2, gm2 = gm1, gm1 = g0, g0 = gp1, gp1 = gp2, gp2 = gp3;
      base = x_off + base0;
      xp3 = XAT(x, t + 4);
      base = dy_off + base0;
      gp3 = XAT(dy, t + 4);
    }
  }
  if (want_dw) part[bsb * C + c] = acc;
}

/* dw[c*4 + j] = sum over p of part[p][c][j], in order; one work-item per (c, j) */
kernel void cd_short_conv_reduce(global const float *part, global float *dw, ulong dw_off, uint C, uint P) {
  const uint i = get_global_id(0);
  if (i >= 4 * C) return;
  float acc = 0.0f;
  for (uint p = 0; p < P; p++) acc += part[(ulong)p * 4 * C + i];
  dw[dw_off + i] = acc;
}
