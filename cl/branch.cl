/* The camera branch around prep and scan (docs/math.md §8.3-8.5): beta discount and the reverse gates, their backward,
 * the output transform forward and backward, and the sum of the two scans' input gradients. f32 arithmetic.
 *
 * Build options: CD_D (head dim, multiple of 8, <= 128), CD_TS (tokens per work-group of the output transform),
 * CD_DTYPE (common.cl: the storage of the output transform's y and the backward's grad_y; everything else f32). */

#if !defined(CD_D) || !defined(CD_TS)
#error "CD_D and CD_TS must be given as build options (cd_prep_kernel)"
#endif

/* Sum of the local values x over the work-group (power-of-two size), in a fixed order; result in red[0]. */
inline float wg_sum(local float *red, float x) {
  const uint lid = get_local_id(0), L = get_local_size(0);
  red[lid] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = L / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* One work-group per (t, h, b): iota = mean_s inflation_sq[b, h, t*S + s], beta' = beta / max(iota, 1),
 * beta'_r = mask[t] beta', decay_r = mask[t] decay; iota saved for the backward. */
kernel void cd_branch_discount(global const float *infl, global const float *beta, ulong beta_off,
                               global const float *decay, ulong decay_off, global const uint *mask,
                               global float *bp, global float *br, global float *dr, global float *iota, uint T,
                               uint S, local float *red) {
  const uint t = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  const ulong bh = (ulong)get_global_id(2) * get_global_size(1) + get_global_id(1);
  const ulong N = (ulong)T * S, row = (bh * T + t) * S;
  float acc = 0.0f;
  for (uint s = lid; s < S; s += L) acc += infl[bh * N + (ulong)t * S + s];
  const float io = wg_sum(red, acc) / (float)S;
  const float m = fmax(io, 1.0f);
  const uint keep = mask[t];
  for (uint s = lid; s < S; s += L) {
    const float b = beta[beta_off + row + s] / m;
    bp[row + s] = b;
    br[row + s] = keep ? b : 0.0f;
  }
  if (lid == 0) {
    iota[bh * T + t] = io;
    dr[bh * T + t] = keep ? decay[decay_off + bh * T + t] : 0.0f;
  }
}

/* One work-group per (t, h, b): dbeta' = dbc + mask dbr; dbeta = dbeta' / m; grad_inflation_sq[b, h, t*S + s] =
 * d iota / S with d iota = -sum_s dbeta'_s beta_s / m^2 when iota > 1 (else 0); ddecay = ddc + mask ddr. */
kernel void cd_branch_discount_backward(global const float *dbc, global const float *dbr,
                                        global const float *ddc, global const float *ddr,
                                        global const float *beta, ulong beta_off, global const float *iota,
                                        global const uint *mask, global float *dbeta, ulong dbeta_off,
                                        global float *ddecay, ulong ddecay_off, global float *ginfl, uint T, uint S,
                                        uint want_dbeta, uint want_ddecay, local float *red) {
  const uint t = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  const ulong bh = (ulong)get_global_id(2) * get_global_size(1) + get_global_id(1);
  const ulong N = (ulong)T * S, row = (bh * T + t) * S;
  const uint keep = mask[t];
  const float io = iota[bh * T + t], m = fmax(io, 1.0f);
  float acc = 0.0f;
  for (uint s = lid; s < S; s += L) {
    const float g = keep ? dbc[row + s] + dbr[row + s] : dbc[row + s];
    acc = fma(g, beta[beta_off + row + s], acc);
    if (want_dbeta) dbeta[dbeta_off + row + s] = g / m;
  }
  const float tot = wg_sum(red, acc);
  const float gi = io > 1.0f ? -tot / (m * m) / (float)S : 0.0f;
  for (uint s = lid; s < S; s += L) ginfl[bh * N + (ulong)t * S + s] = gi;
  if (lid == 0 && want_ddecay)
    ddecay[ddecay_off + bh * T + t] = keep ? ddc[bh * T + t] + ddr[bh * T + t] : ddc[bh * T + t];
}

/* The output transform's work-group: tokens n0 … n0 + nt − 1 (CD_TS of them, fewer at the end) of head h of batch b,
 * staged through tile[d][token] (base: row 0 of that tile in the (B, H, D, N) side). */
#define CD_OT_TILE                                                  \
  local float tile[CD_D][CD_TS + 1];                                \
  const uint lid = get_local_id(0), L = get_local_size(0);          \
  const uint h = get_global_id(1);                                  \
  const ulong b = get_global_id(2);                                 \
  const ulong n0 = (ulong)get_group_id(0) * CD_TS;                  \
  const uint nt = (N - n0) < CD_TS ? (uint)(N - n0) : CD_TS;        \
  const ulong base = ((b * H + h) * CD_D) * N + n0;

/* Work-group: CD_TS consecutive tokens of one (b, h); local size CD_TS*CD_G4, one work-item per (token, 4-channel
 * unit). Global: (tiles*L, H, B). Forward: tile <- out (+ out2) (B, H, D, N) along N, then y (B, N, H, D). */
kernel void cd_output_transform(global const float *restrict out, ulong out_off, global const float *restrict out2,
                                ulong out2_off, uint has_out2, global const float *restrict proj_o, ulong po_off,
                                global const float *restrict rope_cos, ulong rc_off,
                                global const float *restrict rope_sin, ulong rs_off, global cd_store_t *restrict y,
                                ulong y_off, ulong N, uint H, uint al) {
  CD_OT_TILE
  for (uint idx = lid; idx < CD_D * CD_TS; idx += L) {
    const uint d = idx / CD_TS, t = idx % CD_TS;
    float x = 0.0f;
    if (t < nt) {
      x = out[out_off + base + (ulong)d * N + t];
      if (has_out2) x += out2[out2_off + base + (ulong)d * N + t];
    }
    tile[d][t] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint t = lid / CD_G4, g = lid % CD_G4;
  if (t >= nt) return;
  const ulong n = n0 + t, tok = b * N + n;
  const float4 v = (float4)(tile[4 * g][t], tile[4 * g + 1][t], tile[4 * g + 2][t], tile[4 * g + 3][t]);
  float4 o;
  if (4 * g < CD_DH) { /* (cl/gemm_tc.cl's cd_apply_ot_tc does the same operations in the same order) */
    global const float *P = proj_o + po_off + tok * 16;
    const float4 p0 = CD_LDF4(P, 0, al), p1 = CD_LDF4(P, 4, al), p2 = CD_LDF4(P, 8, al), p3 = CD_LDF4(P, 12, al);
    CD_OT_CAM(o, p0, p1, p2, p3, v);
  } else {
    const ulong rrow = n * CD_DH + (4 * g - CD_DH);
    const float4 c = CD_LDF4(rope_cos, rc_off + rrow, al), sn = CD_LDF4(rope_sin, rs_off + rrow, al);
    CD_OT_ROPE(o, v, c, sn);
  }
  CD_ST4(y, y_off + (tok * H + h) * CD_D + 4 * g, o, al);
}

/* Backward: grad_out (B, H, D, N) from grad_y (B, N, H, D): first half P^T gy per 4-group, second half
 * dx[r] = gy[r] cos[r] - gy[r^1] sin[r^1]. Same work-groups as the forward. */
kernel void cd_output_transform_backward(global const cd_store_t *restrict gy, ulong gy_off,
                                         global const float *restrict proj_o, ulong po_off,
                                         global const float *restrict rope_cos, ulong rc_off,
                                         global const float *restrict rope_sin, ulong rs_off,
                                         global float *restrict gout, ulong gout_off, ulong N, uint H, uint al) {
  CD_OT_TILE
  const uint t = lid / CD_G4, g = lid % CD_G4;
  if (t < nt) {
    const ulong n = n0 + t, tok = b * N + n;
    const float4 v = CD_LD4(gy, gy_off + (tok * H + h) * CD_D + 4 * g, al);
    float4 o;
    if (4 * g < CD_DH) { /* o = Pᵀ·v */
      global const float *P = proj_o + po_off + tok * 16;
      const float4 p0 = CD_LDF4(P, 0, al), p1 = CD_LDF4(P, 4, al), p2 = CD_LDF4(P, 8, al), p3 = CD_LDF4(P, 12, al);
      o = fma(p3, (float4)(v.w), fma(p2, (float4)(v.z), fma(p1, (float4)(v.y), fma(p0, (float4)(v.x), (float4)(0.0f)))));
    } else {
      const ulong rrow = n * CD_DH + (4 * g - CD_DH);
      const float4 c = CD_LDF4(rope_cos, rc_off + rrow, al), sn = CD_LDF4(rope_sin, rs_off + rrow, al);
      CD_OT_ROPE(o, v, c, sn.yxwz); /* dx[r] = gy[r]·cos[r] − gy[r^1]·sin[r^1] */
    }
    tile[4 * g][t] = o.x, tile[4 * g + 1][t] = o.y, tile[4 * g + 2][t] = o.z, tile[4 * g + 3][t] = o.w;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint idx = lid; idx < CD_D * CD_TS; idx += L) {
    const uint d = idx / CD_TS, tt = idx % CD_TS;
    if (tt < nt) gout[gout_off + base + (ulong)d * N + tt] = tile[d][tt];
  }
}

/* a_i += b_i for the three pairs (dq, dk, dv of the two scans); count4 float4 elements each. */
kernel void cd_branch_add3(global float4 *a0, global const float4 *b0, global float4 *a1, global const float4 *b1,
                           global float4 *a2, global const float4 *b2, ulong count4) {
  const ulong i = get_global_id(0);
  if (i >= count4) return;
  a0[i] += b0[i];
  a1[i] += b1[i];
  a2[i] += b2[i];
}
