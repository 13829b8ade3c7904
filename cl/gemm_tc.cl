/* Tensor-core GEMM core of the scan (NVIDIA only): mma.sync.aligned.m16n8k8 with TF32 operands and f32
 * accumulators, through inline PTX. The host builds this file only on a device where the feature test
 * (cd_tc_probe below, run once per device, its result kept in the binary cache) gave the exact answer;
 * every other device runs the portable FMA kernels of scan_chunkwise.cl / scan_backward.cl.
 *
 * Precision (CD_SPLIT):
 *   1 `exact`: each f32 operand x is split into hi = tf32(x) and lo = tf32(x − hi); a product is
 *     hi·hi + hi·lo + lo·hi (split-TF32; the dropped lo·lo is below 2^-22 of |x·y|). The tensor core
 *     accumulates the 8 products of one k8 step with truncation, so over a frame's tokens each warp sums a
 *     chunk of CD_KC reduction elements in a fresh accumulator and adds the chunk to its f32 total with a
 *     rounded add (CD_CHUNK_SUM).
 *   0 `tf32`: one product hi·hi (about 1e-3 relative, documented in docs/performance.md).
 *
 * Parameters (build options; the defaults below are what an unset option means; the same names as the
 * tuning module's, src/tune/tune.h):
 *   CD_D      head dim (rows and columns of the D x D matrices)
 *   CD_SPLIT  1 = split-TF32 (exact), 0 = one TF32 product (tf32)
 *   CD_WM     warps along a work-group tile's rows
 *   CD_WN     warps along a work-group tile's columns
 *   CD_MR     16-row mma tiles per warp (tile rows TM = 16·WM·MR)
 *   CD_NR     8-column mma tiles per warp (tile columns TN = 8·WN·NR)
 *   CD_KC     reduction elements staged in local memory per step (a multiple of 8)
 *   CD_VEC    1 = token rows are 16-byte aligned at every frame start (host-checked): 16-byte loads
 *   CD_CHUNK_SUM  1 = sum each CD_KC chunk in a fresh accumulator, then add it rounded (default: the gram,
 *             whose reductions run over a whole frame; the apply reduces over D <= 128 only)
 *
 * Kernels (each in its own program, selected by CD_GRAM / CD_APPLY / CD_FRAMES / CD_PROBE):
 *   cd_gram_tc   C = X_f·diag(β_f)·[Y0_f | Y1_f]ᵀ over a frame's tokens (phase A of the forward; W, A, U of
 *                the backward), D x D per region, A-form epilogue d·(I − C) with its symmetric half skipped
 *   cd_apply_tc  out_f = op(M_f)·X_f (op = transpose for the forward's phase C, identity for the backward's dq)
 *   cd_frames_tc the backward's per-token products and elementwise work (dk, dv, dbeta, ddecay partials)
 *   cd_tc_probe  the feature test: one m16n8k8 product of known values. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_SPLIT
#define CD_SPLIT 1
#endif
#ifndef CD_WM
#define CD_WM 2
#endif
#ifndef CD_WN
#define CD_WN 2
#endif
#ifndef CD_MR
#define CD_MR 2
#endif
#ifndef CD_NR
#define CD_NR 4
#endif
#ifndef CD_KC
#define CD_KC 32
#endif
#ifndef CD_VEC
#define CD_VEC 0
#endif
#ifndef CD_TC_EMULATE /* 1: no inline PTX, each lane's products computed from the local tiles (tests on any device) */
#define CD_TC_EMULATE 0
#endif
#ifndef CD_CHUNK_SUM
#ifdef CD_GRAM
#define CD_CHUNK_SUM 1
#else
#define CD_CHUNK_SUM 0
#endif
#endif

#define CD_TM (16 * CD_WM * CD_MR)
#define CD_TN (8 * CD_WN * CD_NR)
#define CD_W (32 * CD_WM * CD_WN)
#define CD_DD ((ulong)CD_D * CD_D)

/* cd_frame_start(f, S) (cl/common.cl) is where frame f's tokens start on the token axis. */

#if CD_TC_EMULATE
/* Emulation for testing on any device (CAMDELTA_TC=emulate): no inline PTX; cd_tc_block computes each lane's
 * accumulator entries (the PTX C layout) straight from the staged local tiles with the same TF32 rounding and
 * split, without barriers. It checks the kernels' tiles, strides, tails, epilogues and host side where no
 * tensor cores exist (CI); the fragment layout itself is what the feature test checks on the real device. */
inline uint cd_tf32(float x) {
  uint u = as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; /* nearest, ties away */
  return u;
}
#else
/* TF32 operand (round to nearest, ties away) and, for the split, the TF32 remainder. */
inline uint cd_tf32(float x) {
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

#define CD_MMA(c, a, b)                                                                                   \
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "        \
      "{%0,%1,%2,%3};"                                                                                    \
      : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                                            \
      : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
#endif

/* tot[mi][ni] += Σ_k A(16·mi + row, k)·B(k, 8·ni + col) for k in [0, CD_KC), one warp, fragments from local
 * memory: A(m, k) = Am[m·am + k·ak], B(k, n) = Bm[k·bk + n·bn]. Lane = 4·g + t (PTX fragment layout):
 * a = {A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4)}, b = {B(t, g), B(t+4, g)},
 * c = {C(g, 2t), C(g, 2t+1), C(g+8, 2t), C(g+8, 2t+1)}. */
inline void cd_tc_block(float tot[CD_MR][CD_NR][4], local const float *Am, uint am, uint ak, local const float *Bm,
                        uint bk, uint bn, uint g, uint t) {
#if CD_CHUNK_SUM
  float c[CD_MR][CD_NR][4];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) c[mi][ni][e] = 0.0f;
#else
#define c tot
#endif
#if CD_TC_EMULATE
  for (uint k0 = 0; k0 < CD_KC; k0 += 8)
    for (int mi = 0; mi < CD_MR; mi++)
      for (int ni = 0; ni < CD_NR; ni++)
        for (int e = 0; e < 4; e++) {
          const uint row = 16 * mi + g + 8 * (e >> 1), col = 8 * ni + 2 * t + (e & 1);
          float sum = 0.0f;
          for (uint kk = 0; kk < 8; kk++) {
            const float x = Am[row * am + (k0 + kk) * ak], y = Bm[(k0 + kk) * bk + col * bn];
            const float xh = as_float(cd_tf32(x)), yh = as_float(cd_tf32(y));
#if CD_SPLIT
            const float xl = as_float(cd_tf32(x - xh)), yl = as_float(cd_tf32(y - yh));
            sum = fma(xl, yh, sum);
            sum = fma(xh, yl, sum);
#endif
            sum = fma(xh, yh, sum);
          }
          c[mi][ni][e] += sum;
        }
#else
#pragma unroll
  for (uint k0 = 0; k0 < CD_KC; k0 += 8) {
    uint ah[CD_MR][4], bh[CD_NR][2];
#if CD_SPLIT
    uint al[CD_MR][4], bl[CD_NR][2];
#endif
#pragma unroll
    for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float x = Am[(16 * mi + g + 8 * (e & 1)) * am + (k0 + t + 4 * (e >> 1)) * ak];
        ah[mi][e] = cd_tf32(x);
#if CD_SPLIT
        al[mi][e] = cd_tf32(x - as_float(ah[mi][e]));
#endif
      }
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float x = Bm[(k0 + t + 4 * e) * bk + (8 * ni + g) * bn];
        bh[ni][e] = cd_tf32(x);
#if CD_SPLIT
        bl[ni][e] = cd_tf32(x - as_float(bh[ni][e]));
#endif
      }
#pragma unroll
    for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
      for (int ni = 0; ni < CD_NR; ni++) {
#if CD_SPLIT
        CD_MMA(c[mi][ni], al[mi], bh[ni]);
        CD_MMA(c[mi][ni], ah[mi], bl[ni]);
#endif
        CD_MMA(c[mi][ni], ah[mi], bh[ni]);
      }
  }
#endif
#if CD_CHUNK_SUM
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) tot[mi][ni][e] += c[mi][ni][e];
#else
#undef c
#endif
}

/* ------------------------------------------------------------------------------------ token loads */
/* Four consecutive tokens gs .. gs+3 (frame-relative) of one row, zero past the frame's S tokens. With CD_VEC the
 * host has checked that every row, frame and buffer offset is a multiple of 4 floats (so S % 4 == 0): one
 * 16-byte load. */
inline float4 cd_load4(__global const float *row, uint gs, uint S) {
#if CD_VEC
  return gs < S ? *(__global const float4 *)(row + gs) : (float4)(0.0f);
#else
  float4 r;
  r.x = gs < S ? row[gs] : 0.0f;
  r.y = gs + 1 < S ? row[gs + 1] : 0.0f;
  r.z = gs + 2 < S ? row[gs + 2] : 0.0f;
  r.w = gs + 3 < S ? row[gs + 3] : 0.0f;
  return r;
#endif
}

/* ------------------------------------------------------------------------------------------- gram */
#ifdef CD_GRAM
#define CD_LDK (CD_KC + 4) /* row stride of the staged tiles: fragment reads hit 32 different banks */
#define CD_QK (CD_KC / 4)  /* float4 per staged row */
#define CD_LX ((CD_TM * CD_QK + CD_W - 1) / CD_W)
#define CD_LY ((CD_TN * CD_QK + CD_W - 1) / CD_W)

/* Per tile = group 0 (row tile rt, column tile ct; ct < n_c0: region 0, else region 1) and (b, h, f) = group 1
 * (the tiles of one frame run side by side and share its tokens in the cache):
 *   C[i][j] = Σ_s X[i][s]·β_s·Yr[j][s] over frame f's tokens (β_s = 1 without use_beta), i, j < D;
 *   region 0 goes to out0 (a_form: out0 = decay_f·(I − C), only the tiles on or above the diagonal run and
 *   C's upper triangle is stored at (i, j) and (j, i)), region 1 to out1. Outputs (B, H, F, D, D).
 * Global loads for the next chunk of tokens are issued before the mma work on the current one.
 * Launch: local (32·WM·WN), global (local·n_rt·(n_c0 + n_c1), B·H·F), n_rt = ceil(D / TM), n_c = ceil(D / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_gram_tc(
    __global const float *x, ulong x_off, __global const float *y0, ulong y0_off, __global const float *y1,
    ulong y1_off, __global const float *beta, ulong beta_off, __global const float *decay, ulong decay_off,
    __global float *out0, ulong o0_off, __global float *out1, ulong o1_off, ulong N, uint S, uint F, uint n_c0,
    uint n_c1, int use_beta, int a_form) {
  __local float4 Xs4[CD_TM * CD_LDK / 4]; /* Xs[r][s] = X[row0 + r][s0 + s]        */
  __local float4 Ys4[CD_TN * CD_LDK / 4]; /* Ys[c][s] = β_s·Yr[col0 + c][s0 + s]   */
  __local const float *Xs = (__local const float *)Xs4, *Ys = (__local const float *)Ys4;
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(1);
  const uint nct = n_c0 + n_c1, tile = get_group_id(0), rt = tile / nct, ct = tile % nct;
  const int reg1 = ct >= n_c0;
  const uint row0 = rt * CD_TM, col0 = (reg1 ? ct - n_c0 : ct) * CD_TN;
  if (!reg1 && a_form && row0 >= col0 + CD_TN) return; /* strictly below the diagonal: the mirror stores it */
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  __global const float *xb = x + x_off + base;
  __global const float *yb = (reg1 ? y1 + y1_off : y0 + y0_off) + base;
  __global const float *bb = beta + beta_off + bhf * S;

  float tot[CD_MR][CD_NR][4];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) tot[mi][ni][e] = 0.0f;

  float4 xr[CD_LX], yr[CD_LY];
#define CD_FETCH(s0)                                                                          \
  do {                                                                                        \
    _Pragma("unroll") for (int u = 0; u < CD_LX; u++) {                                       \
      const uint e = lid + u * CD_W, r = e / CD_QK, i = row0 + r;                             \
      xr[u] = (r < CD_TM && i < CD_D) ? cd_load4(xb + (ulong)i * N, (s0) + 4 * (e % CD_QK), S) \
                                      : (float4)(0.0f);                                       \
    }                                                                                         \
    _Pragma("unroll") for (int u = 0; u < CD_LY; u++) {                                       \
      const uint e = lid + u * CD_W, r = e / CD_QK, j = col0 + r, gs = (s0) + 4 * (e % CD_QK); \
      float4 yv = (float4)(0.0f);                                                             \
      if (r < CD_TN && j < CD_D) {                                                            \
        yv = cd_load4(yb + (ulong)j * N, gs, S);                                              \
        if (use_beta) yv *= cd_load4(bb, gs, S);                                              \
      }                                                                                       \
      yr[u] = yv;                                                                             \
    }                                                                                         \
  } while (0)

  CD_FETCH(0u);
  for (uint s0 = 0; s0 < S; s0 += CD_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int u = 0; u < CD_LX; u++) {
      const uint e = lid + u * CD_W, r = e / CD_QK;
      if (r < CD_TM) Xs4[(r * CD_LDK) / 4 + e % CD_QK] = xr[u];
    }
#pragma unroll
    for (int u = 0; u < CD_LY; u++) {
      const uint e = lid + u * CD_W, r = e / CD_QK;
      if (r < CD_TN) Ys4[(r * CD_LDK) / 4 + e % CD_QK] = yr[u];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (s0 + CD_KC < S) CD_FETCH(s0 + CD_KC);
    cd_tc_block(tot, Xs + (16 * CD_MR * wm) * CD_LDK, CD_LDK, 1, Ys + (8 * CD_NR * wn) * CD_LDK, 1, CD_LDK, g, t);
  }
#undef CD_FETCH

  const int af = a_form && !reg1;
  const float d = af ? decay[decay_off + bhf] : 1.0f;
  __global float *ob = (reg1 ? out1 + o1_off : out0 + o0_off) + bhf * CD_DD;
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint i = row0 + 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1);
        const uint j = col0 + 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
        if (i >= CD_D || j >= CD_D) continue;
        const float c = tot[mi][ni][e];
        if (af) {
          const float a = d * ((i == j ? 1.0f : 0.0f) - c);
          if (i <= j) ob[i * CD_D + j] = a;
          if (i < j) ob[j * CD_D + i] = a;
        } else
          ob[i * CD_D + j] = c;
      }
}
#endif /* CD_GRAM */

/* ------------------------------------------------------------------------------------------ apply */
#ifdef CD_APPLY
#define CD_LDR (CD_TM + 8) /* row strides of the staged tiles: 8 or 24 mod 32 floats, conflict-free fragments */
#define CD_LDS (CD_TN + 8)
#define CD_QN (CD_TN / 4) /* float4 per staged token row */
#define CD_LM ((CD_KC * CD_TM + CD_W - 1) / CD_W)
#define CD_LQ ((CD_KC * CD_QN + CD_W - 1) / CD_W)

/* Per tile = group 0 (token tile st, row tile rt: the row tiles of one token tile run side by side) and
 * (b, h, f) = group 1:
 *   out[r][s] = Σ_c op(M)[r][c]·X[c][s] over frame f's tokens, op(M)[r][c] = M[c][r] when transpose, else M[r][c];
 *   M = states[b, h, f] (B, H, F, D, D), except that with last_init frame F−1 reads init (zero without has_init).
 * Launch: local (32·WM·WN), global (local·n_rt·n_stiles, B·H·F), n_rt = ceil(D / TM), n_stiles = ceil(S / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_apply_tc(
    __global const float *x, ulong x_off, __global const float *states, ulong st_off, __global const float *init,
    ulong init_off, __global float *out, ulong out_off, ulong N, uint S, uint F, uint n_rtiles, int transpose,
    int last_init, int has_init) {
  __local float Ms[CD_KC * CD_LDR];        /* Ms[c][r] = op(M)[row0 + r][c0 + c] */
  __local float4 Xs4[CD_KC * CD_LDS / 4]; /* Xs[c][s] = X[c0 + c][s0 + s]       */
  __local const float *Xs = (__local const float *)Xs4;
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(1);
  const uint tile = get_group_id(0), row0 = (tile % n_rtiles) * CD_TM, s0 = (tile / n_rtiles) * CD_TN;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  __global const float *xb = x + x_off + base;
  const int from_init = last_init && f == F - 1;
  const int zero = from_init && !has_init;
  __global const float *M = from_init ? init + init_off + bh * CD_DD : states + st_off + bhf * CD_DD;

  float tot[CD_MR][CD_NR][4];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) tot[mi][ni][e] = 0.0f;

  float mr[CD_LM];
  float4 qr[CD_LQ];
#define CD_FETCH(c0)                                                                                   \
  do {                                                                                                 \
    _Pragma("unroll") for (int u = 0; u < CD_LM; u++) {                                                \
      const uint e = lid + u * CD_W, c = e / CD_TM, rr = row0 + e % CD_TM, cc = (c0) + c;              \
      float m = 0.0f;                                                                                  \
      if (c < CD_KC && rr < CD_D && cc < CD_D && !zero) m = transpose ? M[cc * CD_D + rr] : M[rr * CD_D + cc]; \
      mr[u] = m;                                                                                       \
    }                                                                                                  \
    _Pragma("unroll") for (int u = 0; u < CD_LQ; u++) {                                                \
      const uint e = lid + u * CD_W, c = e / CD_QN, cc = (c0) + c;                                     \
      qr[u] = (c < CD_KC && cc < CD_D) ? cd_load4(xb + (ulong)cc * N, s0 + 4 * (e % CD_QN), S)         \
                                       : (float4)(0.0f);                                               \
    }                                                                                                  \
  } while (0)

  CD_FETCH(0u);
  for (uint c0 = 0; c0 < CD_D; c0 += CD_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int u = 0; u < CD_LM; u++) {
      const uint e = lid + u * CD_W, c = e / CD_TM;
      if (c < CD_KC) Ms[c * CD_LDR + e % CD_TM] = mr[u];
    }
#pragma unroll
    for (int u = 0; u < CD_LQ; u++) {
      const uint e = lid + u * CD_W, c = e / CD_QN;
      if (c < CD_KC) Xs4[(c * CD_LDS) / 4 + e % CD_QN] = qr[u];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c0 + CD_KC < CD_D) CD_FETCH(c0 + CD_KC);
    cd_tc_block(tot, Ms + 16 * CD_MR * wm, 1, CD_LDR, Xs + 8 * CD_NR * wn, CD_LDS, 1, g, t);
  }
#undef CD_FETCH

  __global float *ob = out + out_off + base + s0;
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint r = row0 + 16 * (CD_MR * wm + mi) + g + 8 * h;
        const uint s = 8 * (CD_NR * wn + ni) + 2 * t;
        if (r >= CD_D) continue;
#if CD_VEC
        if (s0 + s < S) *(__global float2 *)(ob + (ulong)r * N + s) = (float2)(tot[mi][ni][2 * h], tot[mi][ni][2 * h + 1]);
#else
        if (s0 + s < S) ob[(ulong)r * N + s] = tot[mi][ni][2 * h];
        if (s0 + s + 1 < S) ob[(ulong)r * N + s + 1] = tot[mi][ni][2 * h + 1];
#endif
      }
}
#endif /* CD_APPLY */

/* ----------------------------------------------------------------------------------------- frames */
#ifdef CD_FRAMES
#define CD_TS CD_TM         /* tokens per work-group: the rows of every product here */
#define CD_LDT (CD_TS + 8)  /* row stride of Ks / Es ([d][token]): 8 or 24 mod 32 floats */
#define CD_LDB (CD_TN + 8)  /* stage 1: rows of the [Mprev | G] chunks ([k][n]) */
#define CD_LDC (CD_KC + 4)  /* stage 2: rows of the G / Mprev chunks ([j][c]) */
#define CD_QT (CD_TS / 4)
#define CD_BS (2 * CD_KC * CD_LDB > CD_TN * CD_LDC ? 2 * CD_KC * CD_LDB : CD_TN * CD_LDC)

/* The scan backward's per-token work on tensor cores (the FMA twin is cd_scan_bwd_frames in scan_backward.cl,
 * whose header states the math): per tile of CD_TS tokens = group 0 and (b, h, f) = group 1, with
 * Y = K·Mprev, dΔ = K·G, R = V − d·Y, dR = β·dΔ:
 *   dv = dR, dbeta_s = Σ_v dΔ·R, part = −Σ dR·Y (ddecay partial), dk = (β·R)·Gᵀ − d·dR·Mprevᵀ.
 * dq is cd_apply_tc's. CD_KC divides D. Warps: WM along tokens (MR 16-token tiles each), WN along the value
 * columns (NR 8-column tiles each, 8·WN·NR >= D).
 * Launch: local (32·WM·WN), global (local·ntiles, B·H·F), ntiles = ceil(S / CD_TS). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_frames_tc(
    __global const float *k, ulong k_off, __global const float *v, ulong v_off, __global const float *beta,
    ulong beta_off, __global const float *decay, ulong decay_off, __global const float *states, ulong st_off,
    __global const float *init, ulong init_off, __global const float *G, ulong G_off, __global float *dk,
    ulong dk_off, __global float *dv, ulong dv_off, __global float *dbeta, ulong dbeta_off, __global float *part,
    ulong part_off, ulong N, uint S, uint F, uint ntiles, int reverse, int has_init) {
  __local float4 Ks4[CD_D * CD_LDT / 4]; /* Ks[d][s] = K[d][s0 + s]; later Es[c][s], the A operand of stage 2 */
  __local float Bs[CD_BS];
  __local float red[CD_WN * 4 * CD_TS + CD_W];
  __local float *Ks = (__local float *)Ks4;
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(1);
  const uint tile = get_group_id(0), s0 = tile * CD_TS;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  /* Mprev: the state before key frame f's update (init at the chain's start, zero without one) */
  const int prev_init = reverse ? f == F - 1 : f == 0;
  const int prev_zero = prev_init && !has_init;
  __global const float *Mp =
      prev_init ? init + init_off + bh * CD_DD : states + st_off + (bh * F + (reverse ? f : f - 1)) * CD_DD;
  __global const float *Gf = G + G_off + bhf * CD_DD;
  const float d = decay[decay_off + bhf];

  for (uint e = lid; e < CD_D * CD_QT; e += CD_W) {
    const uint c = e / CD_QT, q = e % CD_QT;
    Ks4[(c * CD_LDT) / 4 + q] = cd_load4(k + k_off + base + (ulong)c * N, s0 + 4 * q, S);
  }

  /* stage 1: Y = K·Mprev, dΔ = K·G (tokens x value columns) */
  float Y[CD_MR][CD_NR][4], Dl[CD_MR][CD_NR][4], Kd[CD_MR][CD_NR][4];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) Y[mi][ni][e] = Dl[mi][ni][e] = Kd[mi][ni][e] = 0.0f;
  for (uint k0 = 0; k0 < CD_D; k0 += CD_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < 2 * CD_KC * CD_TN; e += CD_W) {
      const uint h = e / (CD_KC * CD_TN), r = e % (CD_KC * CD_TN), kk = r / CD_TN, n = r % CD_TN;
      float x = 0.0f;
      if (n < CD_D) x = h ? Gf[(k0 + kk) * CD_D + n] : (prev_zero ? 0.0f : Mp[(k0 + kk) * CD_D + n]);
      Bs[(h * CD_KC + kk) * CD_LDB + n] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __local const float *Ak = Ks + k0 * CD_LDT + 16 * CD_MR * wm;
    cd_tc_block(Y, Ak, 1, CD_LDT, Bs + 8 * CD_NR * wn, CD_LDB, 1, g, t);
    cd_tc_block(Dl, Ak, 1, CD_LDT, Bs + CD_KC * CD_LDB + 8 * CD_NR * wn, CD_LDB, 1, g, t);
  }

  /* elementwise: dv, the dbeta and ddecay partials; Y becomes Δ = β·R, Dl becomes −d·dR */
  __global const float *vb = v + v_off + base;
  float pd = 0.0f, pb[CD_MR][2];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const uint s = 16 * (CD_MR * wm + mi) + g + 8 * h, gs = s0 + s;
      const int valid = gs < S;
      const float b = valid ? beta[beta_off + bhf * S + gs] : 0.0f;
      float acc = 0.0f;
#pragma unroll
      for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
        for (int q = 0; q < 2; q++) {
          const uint j = 8 * (CD_NR * wn + ni) + 2 * t + q;
          const int e = 2 * h + q;
          float delta = 0.0f, ndr = 0.0f;
          if (j < CD_D) {
            const float y = Y[mi][ni][e], dd = Dl[mi][ni][e];
            const float r = (valid ? vb[(ulong)j * N + gs] : 0.0f) - d * y;
            const float dr = b * dd;
            if (valid) dv[dv_off + base + (ulong)j * N + gs] = dr;
            acc = fma(dd, r, acc);
            pd = fma(dr, y, pd);
            delta = b * r;
            ndr = -d * dr;
          }
          Y[mi][ni][e] = delta;
          Dl[mi][ni][e] = ndr;
        }
      pb[mi][h] = acc;
    }
  /* dbeta: per token, the partials of the 4 lanes of each quad and of the WN column warps, in a fixed order */
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int h = 0; h < 2; h++) red[(wn * 4 + t) * CD_TS + 16 * (CD_MR * wm + mi) + g + 8 * h] = pb[mi][h];
  red[CD_WN * 4 * CD_TS + lid] = pd;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = lid; s < CD_TS; s += CD_W) {
    float sum = 0.0f;
    for (uint u = 0; u < CD_WN * 4; u++) sum += red[u * CD_TS + s];
    if (s0 + s < S) dbeta[dbeta_off + bhf * S + s0 + s] = sum;
  }
  if (lid == 0) {
    float sum = 0.0f;
    for (uint u = 0; u < CD_W; u++) sum += red[CD_WN * 4 * CD_TS + u];
    part[part_off + bhf * ntiles + tile] = -sum;
  }

  /* stage 2: dk = Δ·Gᵀ + (−d·dR)·Mprevᵀ, the A operand through Es[c][s] (in Ks' place) */
  for (int pass = 0; pass < 2; pass++) {
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
      for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const uint m = 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1), c = 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
          if (c < CD_D) Ks[c * CD_LDT + m] = pass ? Dl[mi][ni][e] : Y[mi][ni][e];
        }
    __global const float *src = pass ? Mp : Gf;
    const int zero = pass && prev_zero;
    for (uint c0 = 0; c0 < CD_D; c0 += CD_KC) {
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint e = lid; e < CD_TN * CD_KC; e += CD_W) {
        const uint j = e / CD_KC, c = e % CD_KC;
        Bs[j * CD_LDC + c] = (j < CD_D && !zero) ? src[j * CD_D + c0 + c] : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      cd_tc_block(Kd, Ks + c0 * CD_LDT + 16 * CD_MR * wm, 1, CD_LDT, Bs + 8 * CD_NR * wn * CD_LDC, 1, CD_LDC, g, t);
    }
  }
  __global float *kb = dk + dk_off + base;
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint gs = s0 + 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1), j = 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
        if (j < CD_D && gs < S) kb[(ulong)j * N + gs] = Kd[mi][ni][e];
      }
}
#endif /* CD_FRAMES */

/* ------------------------------------------------------------------------------------------ probe */
#ifdef CD_PROBE
/* One warp: C (16 x 8) = A (16 x 8)·B (8 x 8) with A[m][k] = a[m·8 + k], B[k][n] = b[k·8 + n], written row-major
 * to c; the host compares with its own product (layout, conversion and split all checked at once). */
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void cd_tc_probe(__global const float *a,
                                                                          __global const float *b, __global float *c) {
  __local float As[16 * 8], Bs[8 * 8];
  const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  for (uint e = lane; e < 128; e += 32) As[e] = a[e];
  for (uint e = lane; e < 64; e += 32) Bs[e] = b[e];
  barrier(CLK_LOCAL_MEM_FENCE);
  float tot[CD_MR][CD_NR][4];
#pragma unroll
  for (int e = 0; e < 4; e++) tot[0][0][e] = 0.0f;
  cd_tc_block(tot, As, 8, 1, Bs, 8, 1, g, t);
#pragma unroll
  for (int e = 0; e < 4; e++) c[(g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = tot[0][0][e];
}
#endif /* CD_PROBE */
