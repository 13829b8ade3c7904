/* Tensor-core GEMM core of the scan (NVIDIA only): mma.sync.aligned.m16n8k8 with TF32 operands and f32
 * accumulators, through inline PTX. The host builds this file only on a device where the feature test
 * (cd_tc_probe below, run once per device, its result kept in the binary cache) gave the exact answer;
 * every other device runs the portable FMA kernels of scan_chunkwise.cl / scan_backward.cl.
 *
 * Precision (CD_SPLIT):
 *   1 `exact`: each f32 operand x is split into hi = tf32(x) and lo = tf32(x − hi); a product is
 *     hi·hi + hi·lo + lo·hi (split-TF32; the dropped lo·lo is below 2^-22 of |x·y|). The tensor core
 *     accumulates the 8 products of one k8 step with truncation, so each warp sums a chunk of CD_KC
 *     reduction elements in a fresh accumulator and adds the chunk to its f32 total with a rounded add.
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
 *
 * Kernels (each in its own program, selected by CD_GRAM / CD_APPLY / CD_PROBE):
 *   cd_gram_tc   C = X_f·diag(β_f)·[Y0_f | Y1_f]ᵀ over a frame's tokens (phase A of the forward; W, A, U of
 *                the backward), D x D per region, A-form epilogue d·(I − C) with its symmetric half skipped
 *   cd_apply_tc  out_f = op(M_f)·X_f (op = transpose for the forward's phase C, identity for the backward's dq)
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

#define CD_TM (16 * CD_WM * CD_MR)
#define CD_TN (8 * CD_WN * CD_NR)
#define CD_W (32 * CD_WM * CD_WN)
#define CD_DD ((ulong)CD_D * CD_D)

/* The token range of frame f: the only place that knows where a frame's tokens sit in (B, H, D, N). */
inline ulong cd_frame_start(uint f, uint S) { return (ulong)f * S; }

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

/* tot[mi][ni] += Σ_k A(16·mi + row, k)·B(k, 8·ni + col) for k in [0, CD_KC), one warp, fragments from local
 * memory: A(m, k) = Am[m·am + k·ak], B(k, n) = Bm[k·bk + n·bn]. Lane = 4·g + t (PTX fragment layout):
 * a = {A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4)}, b = {B(t, g), B(t+4, g)},
 * c = {C(g, 2t), C(g, 2t+1), C(g+8, 2t), C(g+8, 2t+1)}. */
inline void cd_tc_block(float tot[CD_MR][CD_NR][4], local const float *Am, uint am, uint ak, local const float *Bm,
                        uint bk, uint bn, uint g, uint t) {
  float c[CD_MR][CD_NR][4];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) c[mi][ni][e] = 0.0f;
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
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) tot[mi][ni][e] += c[mi][ni][e];
}

/* ------------------------------------------------------------------------------------------- gram */
#ifdef CD_GRAM
#define CD_LDK (CD_KC + 4) /* row stride of the staged tiles: fragment reads hit 32 different banks */

/* Per (b, h, f) = group 0 and tile = group 1 (row tile rt, column tile ct; ct < n_c0: region 0, else region 1):
 *   C[i][j] = Σ_s X[i][s]·β_s·Yr[j][s] over frame f's tokens (β_s = 1 without use_beta), i, j < D;
 *   region 0 goes to out0 (a_form: out0 = decay_f·(I − C), only the tiles on or above the diagonal run and
 *   C's upper triangle is stored at (i, j) and (j, i)), region 1 to out1. Outputs (B, H, F, D, D).
 * Launch: local (32·WM·WN), global (local·B·H·F, n_rt·(n_c0 + n_c1)), n_rt = ceil(D / TM), n_c = ceil(D / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_gram_tc(
    __global const float *x, ulong x_off, __global const float *y0, ulong y0_off, __global const float *y1,
    ulong y1_off, __global const float *beta, ulong beta_off, __global const float *decay, ulong decay_off,
    __global float *out0, ulong o0_off, __global float *out1, ulong o1_off, ulong N, uint S, uint F, uint n_c0,
    uint n_c1, int use_beta, int a_form) {
  __local float Xs[CD_TM * CD_LDK]; /* Xs[r][s] = X[row0 + r][s0 + s]        */
  __local float Ys[CD_TN * CD_LDK]; /* Ys[c][s] = β_s·Yr[col0 + c][s0 + s]   */
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(0);
  const uint nct = n_c0 + n_c1, tile = get_group_id(1), rt = tile / nct, ct = tile % nct;
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

  for (uint s0 = 0; s0 < S; s0 += CD_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < CD_TM * CD_KC; e += CD_W) {
      const uint r = e / CD_KC, s = e % CD_KC, i = row0 + r, gs = s0 + s;
      Xs[r * CD_LDK + s] = (i < CD_D && gs < S) ? xb[(ulong)i * N + gs] : 0.0f;
    }
    for (uint e = lid; e < CD_TN * CD_KC; e += CD_W) {
      const uint r = e / CD_KC, s = e % CD_KC, j = col0 + r, gs = s0 + s;
      float yv = 0.0f;
      if (j < CD_D && gs < S) {
        yv = yb[(ulong)j * N + gs];
        if (use_beta) yv *= bb[gs];
      }
      Ys[r * CD_LDK + s] = yv;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    cd_tc_block(tot, Xs + (16 * CD_MR * wm) * CD_LDK, CD_LDK, 1, Ys + (8 * CD_NR * wn) * CD_LDK, 1, CD_LDK, g, t);
  }

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

/* Per (b, h, f) = group 0 and tile = group 1 (row tile rt, token tile st):
 *   out[r][s] = Σ_c op(M)[r][c]·X[c][s] over frame f's tokens, op(M)[r][c] = M[c][r] when transpose, else M[r][c];
 *   M = states[b, h, f] (B, H, F, D, D), except that with last_init frame F−1 reads init (zero without has_init).
 * Launch: local (32·WM·WN), global (local·B·H·F, ceil(D / TM)·n_stiles), n_stiles = ceil(S / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_apply_tc(
    __global const float *x, ulong x_off, __global const float *states, ulong st_off, __global const float *init,
    ulong init_off, __global float *out, ulong out_off, ulong N, uint S, uint F, uint n_stiles, int transpose,
    int last_init, int has_init) {
  __local float Ms[CD_KC * CD_LDR]; /* Ms[c][r] = op(M)[row0 + r][c0 + c] */
  __local float Xs[CD_KC * CD_LDS]; /* Xs[c][s] = X[c0 + c][s0 + s]       */
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(0);
  const uint tile = get_group_id(1), row0 = (tile / n_stiles) * CD_TM, s0 = (tile % n_stiles) * CD_TN;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S) + s0;
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

  for (uint c0 = 0; c0 < CD_D; c0 += CD_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < CD_KC * CD_TM; e += CD_W) {
      const uint c = e / CD_TM, r = e % CD_TM, rr = row0 + r, cc = c0 + c;
      float m = 0.0f;
      if (rr < CD_D && cc < CD_D && !zero) m = transpose ? M[cc * CD_D + rr] : M[rr * CD_D + cc];
      Ms[c * CD_LDR + r] = m;
    }
    for (uint e = lid; e < CD_KC * CD_TN; e += CD_W) {
      const uint c = e / CD_TN, s = e % CD_TN, cc = c0 + c;
      Xs[c * CD_LDS + s] = (cc < CD_D && s0 + s < S) ? xb[(ulong)cc * N + s] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    cd_tc_block(tot, Ms + 16 * CD_MR * wm, 1, CD_LDR, Xs + 8 * CD_NR * wn, CD_LDS, 1, g, t);
  }

  __global float *ob = out + out_off + base;
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int ni = 0; ni < CD_NR; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint r = row0 + 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1);
        const uint s = 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
        if (r < CD_D && s0 + s < S) ob[(ulong)r * N + s] = tot[mi][ni][e];
      }
}
#endif /* CD_APPLY */

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
