/* Chunkwise-parallel delta-rule scan (docs/math.md §3), three kernels:
 *
 *   cd_scan_phase_a  per (b, h, f) in parallel:
 *                      A_f = decay_f · (I − K_fᵀ·β_f·K_f)     (D x D, rows and cols = key dim)
 *                      U_f = K_fᵀ·β_f·V_f                      (D x D, rows = key dim, cols = value dim)
 *   cd_scan_phase_b  per (b, h, block of value columns), serial over frames:
 *                      causal  M_f = A_f·M_{f−1} + U_f
 *                      reverse T_{F−1} = init, T_{f−1} = A_f·T_f + U_f (f = F−1 … 1), final = A_0·T_0 + U_0
 *                    writing the state each output frame reads (state_post) and optionally state_pre.
 *   cd_scan_phase_c  per (b, h, f, output tile) in parallel: out_f = Q_f·M_f.
 *
 * Phase A is reusable on its own (e.g. by a backward pass), contract:
 *   cd_scan_phase_a(k, v, beta, decay, a_out, u_out, N, S, F, col_lo, col_hi, n_ctiles, s_lo, s_hi, part)
 *     k, v   (B, H, D, N) f32, N = F·S; beta (B, H, F, S); decay (B, H, F)
 *     a_out  (B, H, F, D, D) f32, A_f[i][j] at ((bh·F + f)·D + i)·D + j, written when col_lo == 0
 *     u_out  (B, H, F, D, D) f32, U_f[i][j] likewise, written when col_hi == 2·D
 *     The kernel computes the D x 2D matrix C = K_fᵀ·β_f·[K_f | V_f] restricted to the columns
 *     [col_lo, col_hi) (col_lo ∈ {0, D}, col_hi ∈ {D, 2D}): columns < D give A, columns >= D give U.
 *     A buffer whose columns are not requested may be NULL.
 *     Launch: local size (A_WR·A_WC, 1); global (local·B·H·F, n_rtiles·n_ctiles) with
 *     n_rtiles = ceil(D / A_TM), n_ctiles = ceil((col_hi − col_lo) / A_TN).
 *     A launch sums the tokens s_lo <= s < s_hi of each frame (s_lo a multiple of A_KC): all of them (0, 0xFFFFFFFF,
 *     part 0) in one launch, or a frame in launches of whole chunks where the driver ends a work-item's loops after
 *     a fixed number of iterations: part bit 0 continues the raw sums the previous launch left in the outputs
 *     (A's at i <= j), bit 1 leaves the raw sums there for the next one; the last launch (bit 1 clear) stores A and
 *     U as above. The tokens are summed in the order of one launch.
 *   Build options: CD_D; CD_A_WR, CD_A_RM (item rows, rows per item; tile rows A_TM = WR·RM);
 *   CD_A_WC, CD_A_RN (tile cols A_TN = WC·RN); CD_A_KC (tokens staged per step).
 *
 * Every item of a work-group owns a small register block of its output tile, strided across the tile
 * (row ir + WR·a, column ic + WC·c), so that consecutive items touch consecutive local and global
 * addresses: local reads are conflict-free and global stores coalesce along the contiguous dimension.
 * Reductions stream through local memory in chunks; everything accumulates in f32.
 * Phase A uses the symmetry of K_fᵀβ_fK_f: tiles strictly below the diagonal of A return at once and the upper
 * triangle is stored twice (A_f is exactly symmetric; the diagonal tiles still compute their lower half).
 * All offsets into (B, H, D, N) tensors are 64-bit. Each buffer comes as (pointer, element offset).
 * Packed clips (build option CD_PACKED, cl/common.cl): every kernel takes CD_PK_ARGS last; B = 1, frames are the
 * packed frames with their own token ranges (phases A and C; a token tile past its frame's end leaves at once) and
 * phase B's work-groups are (clip·H + h) chains over their clip's frames. */

#define CD_CEIL(a, b) (((a) + (b) - 1) / (b))

#ifndef CD_D
#error "CD_D (head dim) must be given as a build option"
#endif

/* ------------------------------------------------------------------------------------------ phase A */
#ifdef CD_A_WR
#define A_W (CD_A_WR * CD_A_WC)
#define A_TM (CD_A_WR * CD_A_RM)
#define A_TN (CD_A_WC * CD_A_RN)
#define A_LDX (A_TM + 1)
#define A_LDY (A_TN + 1)

__kernel __attribute__((reqd_work_group_size(A_W, 1, 1))) void cd_scan_phase_a(
    __global const float *k, ulong k_off, __global const float *v, ulong v_off, __global const float *beta,
    ulong beta_off, __global const float *decay, ulong decay_off, __global float *a_out, ulong a_off,
    __global float *u_out, ulong u_off, ulong N, uint S, uint F, uint col_lo, uint col_hi, uint n_ctiles, uint s_lo,
    uint s_hi, uint part CD_PK_ARGS) {
  __local float Xs[CD_A_KC * A_LDX]; /* Xs[s][i] = K[row0 + i][s0 + s]          */
  __local float Ys[CD_A_KC * A_LDY]; /* Ys[s][j] = β_s·[K | V][col0 + j][s0 + s] */
  const uint lid = get_local_id(0);
  const uint ic = lid % CD_A_WC, ir = lid / CD_A_WC;
  const ulong bhf = get_group_id(0);
  const uint tile = get_group_id(1);
  const uint row0 = (tile / n_ctiles) * A_TM, col0 = col_lo + (tile % n_ctiles) * A_TN;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  const uint Sf = min(cd_frame_len(f, S), s_hi); /* this frame's tokens, up to the launch's last */
  __global const float *kb = k + k_off + base;
  __global const float *vb = v + v_off + base;
  __global const float *bb = beta + beta_off + cd_beta_base(bh, bhf, f, S, N);
  /* K_fᵀβ_fK_f is symmetric: only elements i <= j of A are computed and stored, each i < j also at (j, i).
   * A tile strictly below the diagonal (every element i > j) has nothing to do; the whole work-group leaves
   * before any barrier. */
  if (col0 + A_TN <= CD_D && row0 >= col0 + A_TN) return;

  const ulong obase = bhf * (ulong)(CD_D * CD_D);
  float acc[CD_A_RM][CD_A_RN];
  CD_FMA_ZERO(acc, CD_A_RM, CD_A_RN);
  if (part & 1u) { /* the raw sums of the tokens before s_lo */
#pragma unroll
    for (int a = 0; a < CD_A_RM; a++) {
      const uint i = row0 + ir + CD_A_WR * a;
#pragma unroll
      for (int c = 0; c < CD_A_RN; c++) {
        const uint j = col0 + ic + CD_A_WC * c;
        if (i < CD_D && j < col_hi)
          acc[a][c] = j >= CD_D ? u_out[u_off + obase + i * CD_D + (j - CD_D)]
                               : i <= j ? a_out[a_off + obase + i * CD_D + j] : 0.0f;
      }
    }
  }

  /* the tile's rows of K and its columns of β·[K | V], KC tokens at a time, consecutive items along the tokens */
#define A_STAGE(s0)                                                                                               \
  for (uint e = lid; e < A_TM * CD_A_KC; e += A_W) {                                                              \
    const uint r = e / CD_A_KC, s = e % CD_A_KC, i = row0 + r, gs = (s0) + s;                                     \
    Xs[s * A_LDX + r] = (i < CD_D && gs < Sf) ? kb[(ulong)i * N + gs] : 0.0f;                                    \
  }                                                                                                               \
  for (uint e = lid; e < A_TN * CD_A_KC; e += A_W) {                                                              \
    const uint r = e / CD_A_KC, s = e % CD_A_KC, j = col0 + r, gs = (s0) + s;                                     \
    float y = 0.0f;                                                                                               \
    if (j < col_hi && gs < Sf) y = bb[gs] * (j < CD_D ? kb[(ulong)j * N + gs] : vb[(ulong)(j - CD_D) * N + gs]); \
    Ys[s * A_LDY + r] = y;                                                                                        \
  }
#define A_X(s, a) Xs[(s) * A_LDX + ir + CD_A_WR * (a)]
#define A_Y(s, c) Ys[(s) * A_LDY + ic + CD_A_WC * (c)]
  CD_GRAM_FMA_RANGE(acc, CD_A_RM, CD_A_RN, CD_A_KC, s_lo, Sf, A_STAGE, A_X, A_Y);
#undef A_STAGE
#undef A_X
#undef A_Y

  const float d = decay[decay_off + bhf];
  const int raw = (part & 2u) != 0; /* a later launch continues these sums */
  CD_FMA_CELLS(a, c, CD_A_RM, CD_A_RN) {
    const uint i = row0 + ir + CD_A_WR * a, j = col0 + ic + CD_A_WC * c;
    if (i >= CD_D || j >= col_hi) continue;
    if (j < CD_D) {
      const float x = raw ? acc[a][c] : CD_GRAM_A(d, i, j, acc[a][c]);
      if (i <= j) a_out[a_off + obase + i * CD_D + j] = x;
      if (i < j && !raw) a_out[a_off + obase + j * CD_D + i] = x;
    } else
      u_out[u_off + obase + i * CD_D + (j - CD_D)] = acc[a][c];
  }
}
#endif /* CD_A_WR */

/* ------------------------------------------------------------------------------------------ phase B */
/* Build options: CD_B_J (value columns per work-group), CD_B_WR, CD_B_RM (rows: WR·RM >= D),
 * CD_B_WC, CD_B_RN (columns: WC·RN >= J), CD_B_KC (key columns of A staged per step; divides D),
 * CD_B_PF (chunks of A held in registers ahead of their use, a divisor of D / B_KC; default 1).
 * Launch: local (B_WR·B_WC, 1), global (local·B·H, ceil(D / J)). */
#ifdef CD_B_WR
#define B_W (CD_B_WR * CD_B_WC)
#define B_TM (CD_B_WR * CD_B_RM)
#define B_TN (CD_B_WC * CD_B_RN)
#define B_LDA (B_TM + 1)
#define B_NC (CD_D / CD_B_KC)                     /* chunks of A per step */
#define B_PER CD_CEIL(CD_D * CD_B_KC, B_W)        /* elements of a chunk per work-item */
#ifndef CD_B_PF
#define CD_B_PF 1
#endif
#if B_NC % CD_B_PF
#error "CD_B_PF must divide D / CD_B_KC"
#endif
#if CD_B_PF > 1 /* the register slots of the prefetched chunks need compile-time indices */
#define B_CHUNK_UNROLL _Pragma("unroll")
#else
#define B_CHUNK_UNROLL _Pragma("unroll 1")
#endif

/* One chain over the frames fr0 .. fr0 + Fc − 1 of A, U (and decay, states) for the value columns j0 .. j0 + CD_B_J
 * of one (b, h): causal M_f = A_f·M_{f−1} + U_f, reverse T_{f−1} = A_f·T_f + U_f, writing the state each output
 * frame reads (post) and, when save_pre, the decayed state before each update (pre). mask (NULL: none) drops the
 * update of every key frame f with mask[f] == 0 (A_f = 0, U_f = 0: the chain restarts; the scan pair's reverse
 * chain). init and fin are (·, D, D) at sbase (this block's first column). Shared by cd_scan_phase_b and
 * cd_pair_phase_b, so that both give bit-identical states. Ms (D·B_TN) and As (B_KC·B_LDA) are local.
 * A launch runs the steps t0 <= t < t1 of the chain (of its nsteps): all of them, or where the driver ends a
 * work-item's loops after a fixed number of iterations (Mesa's gallivm: llvmpipe under Rusticl) a part, the state
 * coming from init and going to fin. t1 = 0xFFFFFFFF marks the walk's last launch; an earlier one always writes
 * fin, from which the next reads the state back (also for a packed chain that has already ended). */
inline void cd_phase_b_chain(__local float *Ms, __local float *As, __global const float *A, ulong a_off,
                             __global const float *U, ulong u_off, __global const float *decay, ulong decay_off,
                             __global const float *init, ulong init_off, int has_init, __global float *post,
                             ulong post_off, __global float *pre, ulong pre_off, int save_pre, __global float *fin,
                             ulong fin_off, int want_final, __global const uint *mask, ulong fr0, uint Fc, ulong sbase,
                             uint j0, int reverse, uint t0, uint t1) {
  const uint lid = get_local_id(0);
  const uint ic = lid % CD_B_WC, ir = lid / CD_B_WC;
  const uint jn = min((uint)CD_B_J, (uint)CD_D - j0); /* valid value columns of this block */
  const ulong DD = (ulong)(CD_D * CD_D);

/* Rolled, coalesced copies between a (D x D) slice of global memory and the block in Ms. */
#define B_SAVE(buf, base, scale)                                     \
  for (uint e = lid; e < CD_D * B_TN; e += B_W) {                   \
    const uint i_ = e / B_TN, j_ = e % B_TN;                         \
    if (j_ < jn) (buf)[(base) + i_ * CD_D + j_] = (scale) * Ms[e]; \
  }
#define B_LOAD(buf, base, on)                                                 \
  for (uint e = lid; e < CD_D * B_TN; e += B_W) {                            \
    const uint i_ = e / B_TN, j_ = e % B_TN;                                  \
    Ms[e] = ((on) && j_ < jn) ? (buf)[(base) + i_ * CD_D + j_] : 0.0f;       \
  }

  float m[CD_B_RM][CD_B_RN];
  /* As' padding rows D .. B_TM−1 are read by the register blocks (their results are never stored): zero once,
   * the per-chunk stores below only write rows < D */
  for (uint e = lid; e < CD_B_KC * B_LDA; e += B_W) As[e] = 0.0f;
  B_LOAD(init, init_off + sbase, has_init);
  barrier(CLK_LOCAL_MEM_FENCE);
  #pragma unroll
  for (int a = 0; a < CD_B_RM; a++) {
    const uint i = ir + CD_B_WR * a;
    #pragma unroll
    for (int c = 0; c < CD_B_RN; c++) m[a][c] = i < CD_D ? Ms[i * B_TN + ic + CD_B_WC * c] : 0.0f;
  }
  /* Invariant at the top of each step: Ms holds m, visible to the whole work-group. */
  if (reverse && t0 == 0) { /* output frame F−1 reads the init state: no decay, no update */
    B_SAVE(post, post_off + (fr0 + Fc - 1) * DD + j0, 1.0f);
    if (save_pre) B_SAVE(pre, pre_off + (fr0 + Fc - 1) * DD + j0, 1.0f);
  }
  const uint nsteps = reverse ? (Fc - 1 + (want_final ? 1 : 0)) : Fc;
  const uint tend = min(t1, nsteps); /* this launch's steps: t0 .. tend − 1 */

  /* A and U do not depend on the chain, so their loads run ahead of it: ar holds the next CD_B_PF chunks of A
   * (flat over the steps: chunk c of step t sits in slot c % CD_B_PF from CD_B_PF chunks before its use), and ur
   * this step's block of U in m's layout, loaded a whole step before it is added. The loads are unconditional
   * (clamped addresses, selected values; the last step reloads its own chunks): branches between the barriers of
   * the unrolled chunk loop multiply the paths PoCL's work-group compiler walks. A chunk's elements past D·B_KC
   * (the last of an item's B_PER) go to the dump slot at the end of As. */
  float ar[CD_B_PF][B_PER], ur[CD_B_RM][CD_B_RN];
#define B_KF(t_) (reverse ? Fc - 1 - (t_) : (t_)) /* key frame of step t_ (in the chain) */
#define B_FETCH_A(slot, t_, keep_, k0_)                                                          \
  do {                                                                                          \
    __global const float *a_ = A + a_off + (fr0 + B_KF(t_)) * DD + (k0_);                       \
    _Pragma("unroll") for (int u = 0; u < B_PER; u++) {                                         \
      const uint e = min(lid + u * B_W, (uint)(CD_D * CD_B_KC - 1));                            \
      const float x_ = a_[(e / CD_B_KC) * CD_D + e % CD_B_KC];                                   \
      ar[slot][u] = (keep_) ? x_ : 0.0f;                                                        \
    }                                                                                           \
  } while (0)
#define B_FETCH_U(t_, keep_)                                                                      \
  do {                                                                                            \
    __global const float *u_ = U + u_off + (fr0 + B_KF(t_)) * DD + j0;                           \
    _Pragma("unroll") for (int a = 0; a < CD_B_RM; a++) _Pragma("unroll") for (int c = 0; c < CD_B_RN; c++) { \
      const uint i = ir + CD_B_WR * a, jc = ic + CD_B_WC * c;                                     \
      const float x_ = u_[min(i, (uint)CD_D - 1) * CD_D + min(jc, jn - 1)];                       \
      ur[a][c] = ((keep_) && i < CD_D && jc < jn) ? x_ : 0.0f;                                    \
    }                                                                                             \
  } while (0)
  int keep = t0 >= tend || !mask || mask[B_KF(t0)] != 0u; /* this step's (uniform over the work-group) */
  if (t0 < tend) {
    #pragma unroll
    for (int p = 0; p < CD_B_PF; p++) B_FETCH_A(p, t0, keep, p * CD_B_KC);
    B_FETCH_U(t0, keep);
  }
  for (uint t = t0; t < tend; t++) {
    const uint kf = B_KF(t);
    const int qf = reverse ? (int)kf - 1 : (int)kf; /* output frame reading the result, or -1 */
    const uint tn = t + 1 < tend ? t + 1 : t;       /* the step whose loads this one issues */
    const int keepn = !mask || mask[B_KF(tn)] != 0u;
    if (save_pre && qf >= 0) B_SAVE(pre, pre_off + (fr0 + (uint)qf) * DD + j0, decay[decay_off + fr0 + kf]);
    /* m = A_kf · Ms */
    #pragma unroll
    for (int a = 0; a < CD_B_RM; a++)
      #pragma unroll
      for (int c = 0; c < CD_B_RN; c++) m[a][c] = 0.0f;
    B_CHUNK_UNROLL
    for (int ch = 0; ch < B_NC; ch++) {
      const uint k0 = ch * CD_B_KC;
      barrier(CLK_LOCAL_MEM_FENCE);
      #pragma unroll
      for (int u = 0; u < B_PER; u++) {
        const uint e = lid + u * B_W;
        As[e < CD_D * CD_B_KC ? (e % CD_B_KC) * B_LDA + e / CD_B_KC : CD_B_KC * B_LDA] = ar[ch % CD_B_PF][u];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (ch + CD_B_PF < B_NC) B_FETCH_A(ch % CD_B_PF, t, keep, (ch + CD_B_PF) * CD_B_KC); /* compile-time test */
      else B_FETCH_A(ch % CD_B_PF, tn, keepn, (ch + CD_B_PF - B_NC) * CD_B_KC);
#define B_A(kk, a) As[(kk) * B_LDA + ir + CD_B_WR * (a)]
#define B_M(kk, c) Ms[(k0 + (kk)) * B_TN + ic + CD_B_WC * (c)]
      CD_FMA_GEMM(m, CD_B_RM, CD_B_RN, CD_B_KC, B_A, B_M);
#undef B_A
#undef B_M
    }
    /* m += U_kf, then publish m */
    #pragma unroll
    for (int a = 0; a < CD_B_RM; a++)
      #pragma unroll
      for (int c = 0; c < CD_B_RN; c++) m[a][c] += ur[a][c];
    B_FETCH_U(tn, keepn);
    keep = keepn;
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int a = 0; a < CD_B_RM; a++) {
      const uint i = ir + CD_B_WR * a;
      if (i < CD_D)
        #pragma unroll
        for (int c = 0; c < CD_B_RN; c++) Ms[i * B_TN + ic + CD_B_WC * c] = m[a][c];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (qf >= 0) B_SAVE(post, post_off + (fr0 + (uint)qf) * DD + j0, 1.0f);
  }
#undef B_KF
#undef B_FETCH_A
#undef B_FETCH_U
  if (want_final || t1 != 0xFFFFFFFFu) B_SAVE(fin, fin_off + sbase, 1.0f);
#undef B_SAVE
#undef B_LOAD
}

__kernel __attribute__((reqd_work_group_size(B_W, 1, 1))) void cd_scan_phase_b(
    __global const float *A, ulong a_off, __global const float *U, ulong u_off, __global const float *decay,
    ulong decay_off, __global const float *init, ulong init_off, __global float *post, ulong post_off,
    __global float *pre, ulong pre_off, __global float *fin, ulong fin_off, uint F, int reverse, int has_init,
    int save_pre, int want_final, uint t0, uint t1 CD_PK_ARGS) {
  __local float Ms[CD_D * B_TN];     /* the state's column block Ms[k][j]            */
  __local float As[CD_B_KC * B_LDA + 1]; /* As[kk][i] = A[i][k0 + kk], then a dump slot     */
  const ulong bh = get_group_id(0);
  uint Fc;                              /* the chain's frames: rows fr0 .. fr0 + Fc − 1 of A, U, decay, states */
  const ulong fr0 = cd_chain(bh, F, &Fc);
  const uint j0 = get_group_id(1) * CD_B_J;
  cd_phase_b_chain(Ms, As, A, a_off, U, u_off, decay, decay_off, init, init_off, has_init, post, post_off, pre,
                   pre_off, save_pre, fin, fin_off, want_final, 0, fr0, Fc, bh * (ulong)(CD_D * CD_D) + j0, j0,
                   reverse, t0, t1);
}

/* The fused scan pair's chains (docs/math.md §8.4; src/scan/pair.c, cl/scan_pair.cl), same build options as phase B:
 * per (direction, b, h, block of value columns), the causal chain M_f = A_f·M_{f−1} + U_f -> post_c[f], and the
 * reverse chain T_{F−1} = init_r, T_{f−1} = [mask_f] (A_f·T_f + U_f) -> post_r[f − 1] (post_r[F − 1] = init_r),
 * each bit-identical to its own scan's phase B. Launch: local (B_WR·B_WC, 1), global (local·B·H, 2·nj): groups
 * [0, nj) causal, the rest reverse. */
__kernel __attribute__((reqd_work_group_size(B_W, 1, 1))) void cd_pair_phase_b(
    __global const float *A, ulong a_off, __global const float *U, ulong u_off, __global const uint *mask,
    __global const float *init_c, ulong init_c_off, __global const float *init_r, ulong init_r_off,
    __global float *post_c, ulong post_c_off, __global float *post_r, ulong post_r_off, __global float *fin_c,
    ulong fin_c_off, __global float *fin_r, ulong fin_r_off, uint F, uint nj, int has_init_c, int has_init_r,
    int want_final_c, int want_final_r, uint t0, uint t1) {
  __local float Ms[CD_D * B_TN];
  __local float As[CD_B_KC * B_LDA + 1];
  const ulong bh = get_group_id(0);
  const int reverse = get_group_id(1) >= nj;
  const uint j0 = (get_group_id(1) % nj) * CD_B_J;
  const ulong sbase = bh * (ulong)(CD_D * CD_D) + j0;
  if (reverse)
    cd_phase_b_chain(Ms, As, A, a_off, U, u_off, A, 0, init_r, init_r_off, has_init_r, post_r, post_r_off, 0, 0, 0,
                     fin_r, fin_r_off, want_final_r, mask, bh * F, F, sbase, j0, 1, t0, t1);
  else
    cd_phase_b_chain(Ms, As, A, a_off, U, u_off, A, 0, init_c, init_c_off, has_init_c, post_c, post_c_off, 0, 0, 0,
                     fin_c, fin_c_off, want_final_c, 0, bh * F, F, sbase, j0, 0, t0, t1);
}
#endif /* CD_B_WR */

/* ------------------------------------------------------------------------------------------ phase C */
/* out[b,h,v, f·S + s] = Σ_k M_f[k][v] · q[b,h,k, f·S + s]; output tile C_TV (value rows) x C_TS (tokens).
 * Build options: CD_C_WR, CD_C_RM (value rows), CD_C_WC, CD_C_RN (tokens), CD_C_KC (divides D).
 * Launch: local (C_WR·C_WC, 1), global (local·B·H·F, ceil(D / C_TV)·n_stiles), n_stiles = ceil(S / C_TS). */
#ifdef CD_C_WR
#define C_W (CD_C_WR * CD_C_WC)
#define C_TV (CD_C_WR * CD_C_RM)
#define C_TS (CD_C_WC * CD_C_RN)

__kernel __attribute__((reqd_work_group_size(C_W, 1, 1))) void cd_scan_phase_c(
    __global const float *q, ulong q_off, __global const float *states, ulong st_off, __global float *out,
    ulong out_off, ulong N, uint S, uint F, uint n_stiles CD_PK_ARGS) {
  __local float Ms[CD_C_KC * C_TV]; /* Ms[kk][v] = M[k0 + kk][v0 + v]        */
  __local float Qs[CD_C_KC * C_TS]; /* Qs[kk][s] = q[k0 + kk][f·S + s0 + s]  */
  const uint lid = get_local_id(0);
  const uint ic = lid % CD_C_WC, ir = lid / CD_C_WC;
  const ulong bhf = get_group_id(0);
  const uint tile = get_group_id(1);
  const uint v0 = (tile / n_stiles) * C_TV, s0 = (tile % n_stiles) * C_TS;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  const uint Sf = cd_frame_len(f, S);
#ifdef CD_PACKED
  if (s0 >= Sf) return; /* a tile past this frame's end (the grid is sized by the longest frame) */
#endif
  __global const float *qb = q + q_off + base;
  __global const float *mb = states + st_off + bhf * (ulong)(CD_D * CD_D);

  float acc[CD_C_RM][CD_C_RN];
  CD_FMA_ZERO(acc, CD_C_RM, CD_C_RN);

  for (uint k0 = 0; k0 < CD_D; k0 += CD_C_KC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < CD_C_KC * C_TV; e += C_W) {
      const uint kk = e / C_TV, vv = e % C_TV;
      Ms[e] = (v0 + vv < CD_D) ? mb[(k0 + kk) * CD_D + v0 + vv] : 0.0f;
    }
    for (uint e = lid; e < CD_C_KC * C_TS; e += C_W) {
      const uint kk = e / C_TS, ss = e % C_TS;
      Qs[e] = (s0 + ss < Sf) ? qb[(ulong)(k0 + kk) * N + s0 + ss] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#define C_M(kk, a) Ms[(kk) * C_TV + ir + CD_C_WR * (a)]
#define C_Q(kk, c) Qs[(kk) * C_TS + ic + CD_C_WC * (c)]
    CD_FMA_GEMM(acc, CD_C_RM, CD_C_RN, CD_C_KC, C_M, C_Q);
#undef C_M
#undef C_Q
  }

  __global float *ob = out + out_off + base;
  CD_FMA_CELLS(a, c, CD_C_RM, CD_C_RN) {
    const uint vv = v0 + ir + CD_C_WR * a, ss = s0 + ic + CD_C_WC * c;
    if (vv < CD_D && ss < Sf) ob[(ulong)vv * N + ss] = acc[a][c];
  }
}
#endif /* CD_C_WR */
