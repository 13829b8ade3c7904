/* The fused scan pair of the camera branch (docs/math.md §8.4; host src/scan/pair.c): a causal and a chunk-masked
 * reverse delta-rule scan over the same q, k, v, summed. The reverse scan's gates equal the causal ones except
 * β = 0 and decay = 0 at its masked frames, so its A_f, U_f equal the causal A_f, U_f except A_f = 0, U_f = 0
 * there: phase A (scan_chunkwise.cl / gemm_tc.cl) runs once, this file's phase B runs both chains in one launch,
 * cd_pair_sum adds the two directions' per-frame states and phase C runs once on the sum (the output is linear
 * in the state).
 *
 *   cd_pair_phase_b  (in scan_chunkwise.cl, beside cd_scan_phase_b, whose chain it shares) both directions'
 *                    chains in one launch, the reverse one restarting at its masked frames.
 *   cd_pair_sum      sum[i] = a[i] + b[i], float4 elements; launch: global n4 rounded up to the local size.
 *   cd_pair_bwd_chain  (in scan_backward.cl, beside cd_scan_bwd_chain, whose chain step it shares) both
 *                    directions' G chains of the scan backward.
 *   cd_pair_add      a[i] += b[i]. */

#define CD_CEIL(a, b) (((a) + (b) - 1) / (b))


__kernel void cd_pair_sum(__global const float4 *a, __global const float4 *b, __global float4 *out, ulong n4) {
  const ulong i = get_global_id(0);
  if (i < n4) out[i] = a[i] + b[i];
}


/* a[i] += b[i] (the two directions' dq, dk or dv; the same bits as cd_branch_add3) */
__kernel void cd_pair_add(__global float *a, ulong a_off, __global const float *b, ulong b_off, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) a[a_off + i] = a[a_off + i] + b[b_off + i];
}
