/* The fused scan pair of the camera branch (SPEC 8.4; host src/ops/scan_pair.c): a causal and a chunk-masked
 * reverse delta-rule scan over the same q, k, v, summed. The reverse scan's gates equal the causal ones except
 * β = 0 and decay = 0 at its masked frames, so its A_f, U_f equal the causal A_f, U_f except A_f = 0, U_f = 0
 * there: phase A (scan_chunkwise.cl / gemm_tc.cl) runs once, this file's phase B runs both chains in one launch,
 * cd_pair_sum adds the two directions' per-frame states and phase C runs once on the sum (the output is linear
 * in the state).
 *
 *   cd_pair_phase_b  (in scan_chunkwise.cl, beside cd_scan_phase_b, whose chain it shares) both directions'
 *                    chains in one launch, the reverse one restarting at its masked frames.
 *   cd_pair_sum      sum[i] = a[i] + b[i], float4 elements; launch: global n4 rounded up to the local size.
 *   cd_pair_bwd_chain  both directions' G chains of the scan backward (built with scan_backward.cl's options).
 *   cd_pair_add      a[i] += b[i]. */

#define CD_CEIL(a, b) (((a) + (b) - 1) / (b))


__kernel void cd_pair_sum(__global const float4 *a, __global const float4 *b, __global float4 *out, ulong n4) {
  const ulong i = get_global_id(0);
  if (i < n4) out[i] = a[i] + b[i];
}

/* ------------------------------------------------------------------------------------- backward chain */
/* Built with scan_backward.cl's options (CD_D, CD_CB, ...). Both directions' G chains of cd_scan_bwd_chain (no
 * recompute) in one launch, the reverse one with A_f = 0 at its masked frames; the same arithmetic in the same
 * order as that kernel, so each direction's G is bit-identical to its own scan backward's.
 *   causal  f = F−1..0: G_f = W_f + x, x = A_f·G_f               (x starts at grad_final_c; dinit_c = x)
 *   reverse f = 0..F−1: G_f = x, x = W_f + [mask_f] A_f·G_f        (x starts at grad_final_r; dinit_r = x)
 * Launch: local D, global D·2·B·H·(D / CB): groups [0, G) causal, [G, 2·G) reverse. */
#ifdef CD_CB
#define CD_PDD ((ulong)CD_D * CD_D)

/* x[c] = [use_add] add[i, c0 + c] + [keep] sum_m Am[m, i]·Yl[m][c] (cd_chain_step of scan_backward.cl) */
inline void cd_pair_chain_step(local float4 *Yl4, float *x, global const float *Am, int keep,
                               global const float *add, int use_add, uint i, uint c0) {
  local float *Yl = (local float *)Yl4;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int c = 0; c < CD_CB; c++) Yl[i * CD_CB + c] = x[c];
  barrier(CLK_LOCAL_MEM_FENCE);
  float y[CD_CB];
  for (int c = 0; c < CD_CB; c++) y[c] = use_add ? add[i * CD_D + c0 + c] : 0.0f;
  if (keep)
    for (uint m = 0; m < CD_D; m++) {
      const float a = Am[m * CD_D + i];
      for (int c4 = 0; c4 < CD_CB / 4; c4++) {
        const float4 yl = Yl4[m * (CD_CB / 4) + c4];
        y[4 * c4] = fma(a, yl.x, y[4 * c4]);
        y[4 * c4 + 1] = fma(a, yl.y, y[4 * c4 + 1]);
        y[4 * c4 + 2] = fma(a, yl.z, y[4 * c4 + 2]);
        y[4 * c4 + 3] = fma(a, yl.w, y[4 * c4 + 3]);
      }
    }
  for (int c = 0; c < CD_CB; c++) x[c] = y[c];
}

kernel void cd_pair_bwd_chain(global const float *A, ulong A_off, global const float *W, ulong W_off,
                              global const uint *mask, global const float *gf_c, ulong gf_c_off,
                              global const float *gf_r, ulong gf_r_off, global float *G_c, ulong G_c_off,
                              global float *G_r, ulong G_r_off, global float *di_c, ulong di_c_off, global float *di_r,
                              ulong di_r_off, uint F, int has_gf_c, int has_gf_r, int has_di_c, int has_di_r) {
  local float4 Yl4[CD_D * CD_CB / 4];
  const uint i = get_local_id(0);
  const ulong nhalf = get_num_groups(0) / 2;
  const int reverse = get_group_id(0) >= nhalf;
  const ulong grp = get_group_id(0) % nhalf;
  const uint c0 = (uint)(grp % (CD_D / CD_CB)) * CD_CB;
  const ulong bh = grp / (CD_D / CD_CB);
  const ulong fb = bh * F * CD_PDD; /* (b, h) base of the (B, H, F, D, D) buffers */
  global const float *gf = reverse ? gf_r + gf_r_off : gf_c + gf_c_off;
  global float *G = reverse ? G_r + G_r_off : G_c + G_c_off;
  global float *di = reverse ? di_r + di_r_off : di_c + di_c_off;
  const int has_gf = reverse ? has_gf_r : has_gf_c, has_di = reverse ? has_di_r : has_di_c;
  float x[CD_CB];
  for (int c = 0; c < CD_CB; c++) x[c] = has_gf ? gf[bh * CD_PDD + i * CD_D + c0 + c] : 0.0f;
  for (uint r = 0; r < F; r++) {
    const uint f = reverse ? r : F - 1 - r;
    if (!reverse)
      for (int c = 0; c < CD_CB; c++) x[c] += W[W_off + fb + f * CD_PDD + i * CD_D + c0 + c];
    for (int c = 0; c < CD_CB; c++) G[fb + f * CD_PDD + i * CD_D + c0 + c] = x[c];
    const int keep = !reverse || mask[f] != 0u;
    cd_pair_chain_step(Yl4, x, A + A_off + fb + f * CD_PDD, keep, W + W_off + fb + f * CD_PDD, reverse, i, c0);
  }
  if (has_di)
    for (int c = 0; c < CD_CB; c++) di[bh * CD_PDD + i * CD_D + c0 + c] = x[c];
}
#endif /* CD_CB */

/* a[i] += b[i] (the two directions' dq, dk or dv; the same bits as cd_branch_add3) */
__kernel void cd_pair_add(__global float *a, ulong a_off, __global const float *b, ulong b_off, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) a[a_off + i] = a[a_off + i] + b[b_off + i];
}
