/* Packed clips (docs/math.md §9.1): moves between the packed layout and a padded fixed-shape batch.
 *
 * packed  (1, H, R, L): L = N tokens (frame f holds tokens [fo[f], fo[f+1])) or L = F frames (per_frame)
 * padded  (clips, H, R, Fm·Sm): clip c's frame j (< its frame count) at columns [j·Sm, j·Sm + Sm), its tokens
 *         first, then `pad` (per_frame: Sm = 1, one column per frame)
 * co[c] = the clip's first frame. One work-item per padded element:
 *   global (Fm·Sm, clips·H·R): gid0 = padded column, gid1 = (c·H + h)·R + r.
 * cd_pack_gather writes every padded element; cd_pack_scatter writes only the packed elements that exist. */

inline int cd_pack_locate(__global const long *fo, __global const long *co, uint Sm, int per_frame, uint t, uint c,
                          ulong *src_col) {
  const long f0 = co[c], nf = co[c + 1] - f0;
  const uint j = per_frame ? t : t / Sm, s = per_frame ? 0 : t % Sm;
  if ((long)j >= nf) return 0;
  const long f = f0 + (long)j;
  if (per_frame) {
    *src_col = (ulong)f;
    return 1;
  }
  if ((long)s >= fo[f + 1] - fo[f]) return 0;
  *src_col = (ulong)(fo[f] + (long)s);
  return 1;
}

/* This work-item's padded element (t, row): -1 past its row's end (nothing to move); else *pad_ix its index on the
 * padded side and 1 with *pk_ix the packed element it holds, or 0 where it is padding. */
inline int cd_pack_item(__global const long *fo, __global const long *co, uint H, uint R, ulong L, uint Fm, uint Sm,
                        int per_frame, ulong *pad_ix, ulong *pk_ix) {
  const uint t = get_global_id(0);
  const ulong row = get_global_id(1);
  const ulong cols = per_frame ? (ulong)Fm : (ulong)Fm * Sm;
  if (t >= cols) return -1;
  const uint c = (uint)(row / ((ulong)H * R));
  const ulong hr = row % ((ulong)H * R);
  ulong col;
  *pad_ix = row * cols + t;
  if (!cd_pack_locate(fo, co, Sm, per_frame, t, c, &col)) return 0;
  *pk_ix = hr * L + col;
  return 1;
}

__kernel void cd_pack_gather(__global const float *src, ulong src_off, __global float *dst, ulong dst_off,
                             __global const long *fo, __global const long *co, uint H, uint R, ulong L, uint Fm,
                             uint Sm, int per_frame, float pad) {
  ulong pad_ix, pk_ix;
  const int at = cd_pack_item(fo, co, H, R, L, Fm, Sm, per_frame, &pad_ix, &pk_ix);
  if (at >= 0) dst[dst_off + pad_ix] = at ? src[src_off + pk_ix] : pad;
}

__kernel void cd_pack_scatter(__global const float *src, ulong src_off, __global float *dst, ulong dst_off,
                              __global const long *fo, __global const long *co, uint H, uint R, ulong L, uint Fm,
                              uint Sm, int per_frame) {
  ulong pad_ix, pk_ix;
  if (cd_pack_item(fo, co, H, R, L, Fm, Sm, per_frame, &pad_ix, &pk_ix) > 0)
    dst[dst_off + pk_ix] = src[src_off + pad_ix];
}
