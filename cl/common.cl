/* Prepended to every camdelta kernel source: storage-type helpers.
 * CD_DTYPE (build option): 0 = f32, 1 = f16, 2 = bf16 (16-bit storage).
 * Arithmetic is always f32. */
#ifndef CD_DTYPE
#define CD_DTYPE 0
#endif

#if CD_DTYPE == 0
typedef float cd_store_t;
#define CD_LOAD(p, i) ((p)[i])
#define CD_STORE(p, i, x) ((p)[i] = (x))
#elif CD_DTYPE == 1
typedef half cd_store_t;
#define CD_LOAD(p, i) vload_half((i), (p))
#define CD_STORE(p, i, x) vstore_half_rte((x), (i), (p))
#else
typedef ushort cd_store_t;
#define CD_LOAD(p, i) as_float(((uint)(p)[i]) << 16)
inline ushort cd_to_bf16(float x) {
  uint u = as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
#define CD_STORE(p, i, x) ((p)[i] = cd_to_bf16(x))
#endif

/* The tokens of frame f (SPEC 1: token n = f·S + s): the one place the scan kernels learn where a frame starts
 * on the token axis (per-frame offsets, e.g. packed clips, change only this). */
inline ulong cd_frame_start(uint f, uint S) { return (ulong)f * S; }
