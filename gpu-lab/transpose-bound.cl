/* What the prep forward's data movement costs without its arithmetic (gpu-lab/transpose-bound.c): B tensors
 * (B, N, C) -> (B, C, N), C = H * D, f32 (B = 3 stands for q, k and v). Build options H, D, TT (tokens per tile),
 * DEP (1: the work-group meets a barrier between its loads and its stores, as the prep's inverse RMS makes it),
 * INTER (1: the register tile walks the B tensors' tiles interleaved, tile % B). */
#define G4 (D / 4)

/* one contiguous float4 per work-item: the plain copy */
kernel void tp_copy(global const float4 *in, global float4 *out, ulong n4) {
  for (ulong i = get_global_id(0); i < n4; i += get_global_size(0)) out[i] = in[i];
}

/* the register tile: work-item (g, t)'s float4 of token n in every head (zero past N) */
inline void tp_load(global const float *in, ulong N, ulong b, ulong n, uint g, float4 *x) {
  const ulong row = (b * N + n) * (H * D) + 4 * g;
#pragma unroll
  for (uint h = 0; h < H; h++) x[h] = n < N ? *(global const float4 *)(in + row + h * D) : (float4)(0.0f);
}

/* the prep's inverse RMS as a dependence: the tile's sums of squares through local memory, after a barrier a factor
 * that is always 1 */
inline float tp_dep(const float4 *x, local float *red, uint lid, uint t) {
  float s = 0.0f;
#pragma unroll
  for (uint h = 0; h < H; h++) s += dot(x[h], x[h]);
  red[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  return red[t] == -1.0f ? 2.0f : 1.0f;
}

/* the prep forward's structure: a work-group holds TT tokens of all H heads, work-item (g, t) a float4 of every
 * head in registers, loads issued back to back, then four row stores per head (TT tokens per row) */
kernel void tp_tile(global const float *in, global float *out, ulong N) {
  local float red[TT * G4];
  const uint lid = get_local_id(0), t = lid % TT, g = lid / TT;
#if INTER /* the tensors' tiles interleaved (the prep's kinds: group % B) */
  const ulong tpr = (N + TT - 1) / TT, tile = get_group_id(0), b = tile % (get_num_groups(0) / tpr),
              n = (tile / (get_num_groups(0) / tpr)) * TT + t;
#else
  const ulong tpr = (N + TT - 1) / TT, tile = get_group_id(0), b = tile / tpr, n = (tile % tpr) * TT + t;
#endif
  const int ok = n < N; /* the grid has B * tpr tiles, so b < B */
  float4 x[H];
  tp_load(in, N, b, n, g, x);
#if DEP
  const float c = tp_dep(x, red, lid, t);
#else
  const float c = 1.0f;
#endif
  if (ok) {
    const ulong at = (b * H * D + 4 * g) * N + n;
#pragma unroll
    for (uint h = 0; h < H; h++) {
      const float4 v = x[h] * c;
      const ulong i = at + (ulong)h * D * N;
      out[i] = v.x, out[i + N] = v.y, out[i + 2 * N] = v.z, out[i + 3 * N] = v.w;
    }
  }
}

/* streaming: one work-item per (token, 4-channel unit, head), no register tile; work-group TT tokens x G4 units of
 * one head (group id 1 = head) */
kernel void tp_stream(global const float *in, global float *out, ulong N) {
  const uint lid = get_local_id(0), t = lid % TT, g = lid / TT, h = get_group_id(1);
  const ulong tpr = (N + TT - 1) / TT, tile = get_group_id(0), b = tile / tpr, n = (tile % tpr) * TT + t;
  if (n >= N) return; /* the grid has B * tpr tiles by H, so b < B */
  const float4 v = *(global const float4 *)(in + (b * N + n) * (H * D) + h * D + 4 * g);
  const ulong i = ((b * H + h) * D + 4 * g) * N + n;
  out[i] = v.x, out[i + N] = v.y, out[i + 2 * N] = v.z, out[i + 3 * N] = v.w;
}

/* the register tile with float4 row stores: per head, the work-group's tile goes through local memory (two
 * buffers, one barrier per head) and each work-item stores one float4 of 4 consecutive tokens of one row
 * (D * TT / 4 float4 per head = the local size). Needs N and the tile start to be multiples of 4. */
#define TLS (TT + 4)
kernel void tp_tile4(global const float *in, global float *out, ulong N) {
  local float red[TT * G4];
  local float tl[2][D][TLS] __attribute__((aligned(16)));
  const uint lid = get_local_id(0), t = lid % TT, g = lid / TT;
  const ulong tpr = (N + TT - 1) / TT, tile = get_group_id(0), b = tile / tpr, n0 = (tile % tpr) * TT, n = n0 + t;
  float4 x[H];
  tp_load(in, N, b, n, g, x);
  const float c = tp_dep(x, red, lid, t);
  const uint r = lid / (TT / 4), seg = lid % (TT / 4);
  const int sok = n0 + 4 * seg < N; /* N % 4 == 0: a float4 is all in or all out */
#pragma unroll
  for (uint h = 0; h < H; h++) {
    const uint bf = h & 1;
    const float4 v = x[h] * c;
    tl[bf][4 * g][t] = v.x, tl[bf][4 * g + 1][t] = v.y, tl[bf][4 * g + 2][t] = v.z, tl[bf][4 * g + 3][t] = v.w;
    barrier(CLK_LOCAL_MEM_FENCE);
    global float *row = out + ((b * H + h) * D + r) * N + n0;
    if (sok) *(global float4 *)(row + 4 * seg) = *(local const float4 *)&tl[bf][r][4 * seg];
  }
}
