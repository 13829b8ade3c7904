/* Reproducible pseudo-random fill (camdelta_fill_random): element i of a buffer gets
 *   u = (top 24 bits of splitmix64(seed + (i + 1) * golden)) * 2^-24,  x = fma(span, u, lo)  (span = hi - lo in f32)
 * stored in CD_DTYPE (f16/bf16: rounded to nearest even). camdelta_random_value() computes the same f32 value on
 * the host, bit for bit (the 24-bit u is exact in f32 and fma is correctly rounded on both sides), so a test can
 * recompute any input element without reading it back. Grid-stride loop: any global size covers any count. */

inline float cd_random_unit(ulong seed, ulong i) {
  ulong z = seed + (i + 1) * 0x9E3779B97F4A7C15ul;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ul;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBul;
  z ^= z >> 31;
  return (float)(uint)(z >> 40) * 0x1.0p-24f;
}

kernel void cd_fill_random(global cd_store_t *out, ulong off, ulong count, ulong seed, float lo, float span) {
  const ulong stride = get_global_size(0);
  for (ulong i = get_global_id(0); i < count; i += stride) CD_STORE(out, off + i, fma(span, cd_random_unit(seed, i), lo));
}
