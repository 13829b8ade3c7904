/* State summaries (docs/math.md §9.2): the per-frame D x D grams and a batched D x D "apply" for their chains.
 *
 *   cd_summary_gram   per (b, h, f, 32 x 32 output tile) in parallel:
 *                       out_f(i, j) = g_f · (diag·δ_ij + sgn · Σ_s X[i, f·S+s] · w[f·S+s] · Y[j, f·S+s])
 *                     X, Y (B, H, D, N) f32 (N = F·S), w (B, H, F, S) optional (absent = 1), g_f = decay
 *                     (B, H, F) optional (absent = 1); out (B, H, F, D, D).
 *                     A_f = decay_f·(I − K_fᵀβ_fK_f): X = Y = K, w = β, g = decay, diag = 1, sgn = −1, sym = 1
 *                     (sym: X = Y; tiles below the diagonal return at once, those above write both halves).
 *                     U_f = K_fᵀβ_fV_f: X = K, Y = V, w = β, diag = 0, sgn = 1.  W_f = Q_fᵀ·dO_f: X = Q, Y = dO.
 *   cd_summary_apply  per (b, h, 32 x 32 output tile) in parallel:
 *                       Y = op(A)·(X + W) + U,  op(A) = A, Aᵀ, or I when A is absent
 *                     every matrix D x D at (offset + bh·stride); X, W, U optional (absent = 0).
 *                     Y must not overlap any input (other work-groups still read them).
 *
 * Work-groups of 8 x 8 items, each item owning a 4 x 4 register block strided by 8 over the 32 x 32 tile;
 * the contraction (tokens, or the D of the product) streams through local memory in chunks of 16.
 * Everything accumulates in f32; all tensor offsets are 64-bit. Build option: CD_D (head dim). */
#ifndef CD_D
#error "CD_D (head dim) must be given as a build option"
#endif

#define SM_T 32 /* output tile (rows and columns) */
#define SM_R 4  /* register block per item (rows and columns) */
#define SM_K 16 /* contraction chunk */
#define SM_LD (SM_T + 1)

__kernel __attribute__((reqd_work_group_size(8, 8, 1))) void cd_summary_gram(
    __global const float *X, ulong x_off, __global const float *Y, ulong y_off, __global const float *w, ulong w_off,
    __global const float *g, ulong g_off, __global float *out, ulong out_off, ulong N, uint S, uint F, int has_w,
    int has_g, int diag, float sgn, int sym) {
  __local float xs[SM_K * SM_LD]; /* xs[s][i] = w_s · X[i0 + i][s0 + s] */
  __local float ys[SM_K * SM_LD]; /* ys[s][j] = Y[j0 + j][s0 + s]       */
  const uint lx = get_local_id(0), ly = get_local_id(1), lid = ly * 8 + lx;
  const uint j0 = get_group_id(0) * SM_T, i0 = get_group_id(1) * SM_T;
  if (sym && i0 > j0) return; /* the whole work-group: its tile is the mirror of (j0, i0) */
  const ulong bhf = get_global_id(2), bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong tok0 = (ulong)f * S;
  __global const float *Xb = X + x_off + bh * CD_D * N + tok0;
  __global const float *Yb = Y + y_off + bh * CD_D * N + tok0;
  __global const float *wb = has_w ? w + w_off + bh * N + tok0 : w;
  float acc[SM_R][SM_R];
  CD_FMA_ZERO(acc, SM_R, SM_R);
  /* the tile's rows of w·X and of Y, SM_K tokens at a time, consecutive items along the tokens */
#define SM_STAGE(s0)                                                                         \
  for (uint e = lid; e < SM_K * SM_T; e += 64) {                                              \
    const uint r = e / SM_K, s = e % SM_K, tok = (s0) + s;                                    \
    const int in_s = tok < S;                                                                 \
    const float ws = (has_w && in_s) ? wb[tok] : 1.0f;                                        \
    xs[s * SM_LD + r] = (in_s && i0 + r < CD_D) ? ws * Xb[(ulong)(i0 + r) * N + tok] : 0.0f; \
    ys[s * SM_LD + r] = (in_s && j0 + r < CD_D) ? Yb[(ulong)(j0 + r) * N + tok] : 0.0f;      \
  }
#define SM_X(s, a) xs[(s) * SM_LD + ly + 8 * (a)]
#define SM_Y(s, c) ys[(s) * SM_LD + lx + 8 * (c)]
  CD_GRAM_FMA(acc, SM_R, SM_R, SM_K, S, SM_STAGE, SM_X, SM_Y);
#undef SM_STAGE
#undef SM_X
#undef SM_Y
  const float gf = has_g ? g[g_off + bhf] : 1.0f;
  __global float *ob = out + out_off + bhf * CD_D * CD_D;
  CD_FMA_CELLS(a, c, SM_R, SM_R) {
    const uint i = i0 + ly + 8 * a, j = j0 + lx + 8 * c;
    if (i >= CD_D || j >= CD_D) continue;
    const float d = (diag && i == j) ? 1.0f : 0.0f, val = gf * (d + sgn * acc[a][c]);
    ob[i * CD_D + j] = val;
    if (sym && i0 < j0) ob[j * CD_D + i] = val;
  }
}

__kernel __attribute__((reqd_work_group_size(8, 8, 1))) void cd_summary_apply(
    __global const float *A, ulong a_off, ulong a_stride, __global const float *X, ulong x_off, ulong x_stride,
    __global const float *W, ulong w_off, ulong w_stride, __global const float *U, ulong u_off, ulong u_stride,
    __global float *Yo, ulong y_off, ulong y_stride, int has_a, int trans_a, int has_x, int has_w, int has_u) {
  __local float as[SM_K * SM_LD]; /* as[k][i] = op(A)[i0 + i][k0 + k] */
  __local float xs[SM_K * SM_LD]; /* xs[k][j] = (X + W)[k0 + k][j0 + j] */
  const uint lx = get_local_id(0), ly = get_local_id(1), lid = ly * 8 + lx;
  const uint j0 = get_group_id(0) * SM_T, i0 = get_group_id(1) * SM_T;
  const ulong bh = get_global_id(2);
  __global const float *Ab = has_a ? A + a_off + bh * a_stride : A;
  __global const float *Xb = has_x ? X + x_off + bh * x_stride : X;
  __global const float *Wb = has_w ? W + w_off + bh * w_stride : W;
  __global const float *Ub = has_u ? U + u_off + bh * u_stride : U;
  __global float *Yb = Yo + y_off + bh * y_stride;
  float acc[SM_R][SM_R];
  CD_FMA_ZERO(acc, SM_R, SM_R);
  if (has_a) {
    for (uint k0 = 0; k0 < CD_D; k0 += SM_K) {
      for (uint e = lid; e < SM_K * SM_T; e += 64) {
        /* A tile: consecutive items along A's contiguous dimension */
        uint r, k;
        if (trans_a) r = e % SM_T, k = e / SM_T; /* op(A)[i][k] = A[k][i] */
        else r = e / SM_K, k = e % SM_K;
        const uint gi = i0 + r, gk = k0 + k;
        float av = 0.0f;
        if (gi < CD_D && gk < CD_D) av = trans_a ? Ab[gk * CD_D + gi] : Ab[gi * CD_D + gk];
        as[k * SM_LD + r] = av;
        /* X + W tile: consecutive items along the columns */
        const uint xk = e / SM_T, xj = e % SM_T, gxk = k0 + xk, gxj = j0 + xj;
        float xv = 0.0f;
        if (gxk < CD_D && gxj < CD_D) {
          if (has_x) xv = Xb[gxk * CD_D + gxj];
          if (has_w) xv += Wb[gxk * CD_D + gxj];
        }
        xs[xk * SM_LD + xj] = xv;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
#define SM_A(k, a) as[(k) * SM_LD + ly + 8 * (a)]
#define SM_X(k, c) xs[(k) * SM_LD + lx + 8 * (c)]
      CD_FMA_GEMM(acc, SM_R, SM_R, SM_K, SM_A, SM_X);
#undef SM_A
#undef SM_X
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  CD_FMA_CELLS(a, c, SM_R, SM_R) {
    const uint i = i0 + ly + 8 * a, j = j0 + lx + 8 * c;
    if (i >= CD_D || j >= CD_D) continue;
    float y = acc[a][c];
    if (!has_a) {
      if (has_x) y += Xb[i * CD_D + j];
      if (has_w) y += Wb[i * CD_D + j];
    }
    if (has_u) y += Ub[i * CD_D + j];
    Yb[i * CD_D + j] = y;
  }
}
