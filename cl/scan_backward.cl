/* Scan backward (docs/math.md §4.1): exact gradients of the delta-rule scan, both directions.
 *
 * Per (b, h) the forward is a chain of key-frame updates of a D x D state (rows = key dim, cols = value dim):
 *   P_f = d_f * Mprev_f,  M_f = A_f * Mprev_f + U_f,  A_f = d_f (I - K_f^T diag(b_f) K_f),  U_f = K_f^T diag(b_f) V_f
 * Causal: key frame f follows f-1 (Mprev_0 = init), output frame f reads M_f.
 * Reverse: key frame f follows f+1 (Mprev_{F-1} = init), output frame f reads Mprev_f (= M_{f+1}, init for F-1);
 * key frame 0's update only feeds the final state.
 *
 * With G_f = dL/dM_f (key frame f):
 *   causal  G_f = Q_f^T dO_f + [f = F-1] grad_final + A_{f+1} G_{f+1},  dinit = A_0 G_0
 *   reverse G_f = [f = 0] grad_final + [f > 0] (Q_{f-1}^T dO_{f-1} + A_{f-1} G_{f-1}),
 *           dinit = Q_{F-1}^T dO_{F-1} + A_{F-1} G_{F-1}
 * and per key frame, with Y = K Mprev, R = V - d Y, dDelta = K G, dR = b dDelta:
 *   dV = dR, dbeta_s = sum_v dDelta R, dK = (b R) G^T - d dR Mprev^T,
 *   ddecay = <G - K^T dR, Mprev> = <G, Mprev> - sum_{s,v} dR Y      (exact, no division by d)
 * and per output frame dQ = dO M^T with M the state it reads.
 *
 * Four kernels (one program, same build options):
 *   cd_scan_bwd_grams   per (mode, b, h, f): W_f = Q_f^T dO_f, A_f, and (recompute only) U_f; D x D each
 *   cd_scan_bwd_chain   per (b, h, column block): the serial passes over frames (the state chain when the
 *                       forward's states are not given, then the G chain), D x D x CB work per frame
 *   cd_scan_bwd_frames  per (b, h, f, token tile): dq, dk, dv, dbeta and partial ddecay sums
 *   cd_scan_bwd_ddecay  per (b, h, f): ddecay = <G, Mprev> + the tiles' partial sums of -dR Y, in a fixed order
 * No atomics: every sum has a fixed order, so results are bit-identical run to run.
 *
 * "states" is (B, H, F, D, D) indexed by output frame: the state that output frame reads is states[f],
 * except in reverse where frame F-1 reads init (the slot is never read). Mprev of key frame f is
 * states[f-1] (causal, init for f = 0) or states[f] (reverse, init for f = F-1). An absent init is zero.
 *
 * Build options: CD_D head dim; grams: CD_RPT (rows per work-item), CD_TSG (tokens per chunk);
 * chain: CD_CB (columns per work-group), CD_CHAIN_R (rows per work-item, 1 unless the kernel's work-group limit is
 * below D); frames: CD_DPT (value columns per work-item), CD_TL (token lanes),
 * CD_TPT (tokens per lane), CD_MC (contraction chunk); ddecay: CD_RL (work-group size, power of two).
 * Every buffer comes with a ulong element offset.
 * Packed clips (build option CD_PACKED, cl/common.cl): every kernel takes CD_PK_ARGS last; B = 1, a frame's tokens
 * and its chain's first/last frame and init row come from the table, the chain kernel's work-groups are
 * (clip·H + h) chains over their clip's frames, and a frames tile past its frame's end writes a zero partial. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_RPT
#define CD_RPT 4
#endif
#ifndef CD_TSG
#define CD_TSG 32
#endif
#ifndef CD_CB
#define CD_CB 8
#endif
#ifndef CD_DPT
#define CD_DPT 8
#endif
#ifndef CD_TL
#define CD_TL 32
#endif
#ifndef CD_TPT
#define CD_TPT 2
#endif
#ifndef CD_CHAIN_UNROLL /* 1: the chain step's loops over D unrolled, its A column in registers (GPUs) */
#define CD_CHAIN_UNROLL 0
#endif
#if CD_CHAIN_UNROLL
#define CD_CHAIN_LOOP _Pragma("unroll")
#else
#define CD_CHAIN_LOOP _Pragma("unroll 1")
#endif
#ifndef CD_MC
#define CD_MC 8
#endif
#ifndef CD_CHAIN_R /* chain rows per work-item: the chain's work-group is D / CD_CHAIN_R items */
#define CD_CHAIN_R 1
#endif
#define CD_CW (CD_D / CD_CHAIN_R)
#ifndef CD_RL
#define CD_RL 64
#endif
#ifndef CD_SKIP_DQ /* 1: the frames kernel leaves dq to cd_apply_tc (cl/gemm_tc.cl) */
#define CD_SKIP_DQ 0
#endif

#define CD_DD ((ulong)CD_D * CD_D)
/* Row stride of the transposed token tiles and of the B-operand chunks: D + 4 (or 2D + 4) floats makes
 * the (8 rows x 4 columns) store pattern below hit 32 different banks and keeps float4 alignment. */
#define CD_DP (CD_D + 4)

/* The state matrix for index j (see above) and whether it is zero; init row srow (cd_state_row). */
CD_STATE_FN(cd_state)

/* ------------------------------------------------------------------ grams */
#define CD_NG (CD_D / CD_RPT)

/* One work-group of CD_NG^2 work-items per (mode, b, h, f); group index = bhf * modes + mode.
 * mode 0: W = Q^T dO; mode 1: A = d (I - (b K)^T K); mode 2: U = (b K)^T V. Outputs (B, H, F, D, D).
 * A launch sums the tokens s_lo <= s < s_hi of each frame (s_lo a multiple of CD_TSG): all of them (0, 0xFFFFFFFF),
 * or where the driver ends a work-item's loops after a fixed number of iterations (Mesa's gallivm), a range per
 * launch: part bit 0 continues the sums the previous launch left in the outputs, bit 1 leaves the sums there for
 * the next one (mode 1's transform waits for the last). The sums run in the same order either way. */
kernel void cd_scan_bwd_grams(global const float *q, ulong q_off, global const float *k, ulong k_off,
                              global const float *v, ulong v_off, global const float *go, ulong go_off,
                              global const float *beta, ulong beta_off, global const float *decay, ulong decay_off,
                              global float *W, ulong W_off, global float *A, ulong A_off, global float *U,
                              ulong U_off, ulong N, uint S, uint F, uint modes, uint s_lo, uint s_hi,
                              uint part CD_PK_ARGS) {
  local float4 Xs4[CD_TSG * CD_DP / 4];
  local float4 Ys4[CD_TSG * CD_DP / 4];
  local float *Xs = (local float *)Xs4;
  local float *Ys = (local float *)Ys4;

  const uint lid = get_local_id(0);
  const ulong grp = get_group_id(0);
  const uint mode = (uint)(grp % modes);
  const ulong bhf = grp / modes;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * CD_D * N + cd_frame_start(f, S);
  const uint Sf = cd_frame_len(f, S);

  global const float *X = mode == 0 ? q + q_off : k + k_off;
  global const float *Y = mode == 0 ? go + go_off : (mode == 1 ? k + k_off : v + v_off);
  global const float *bt = beta + beta_off + cd_beta_base(bh, bhf, f, S, N);

  const uint ti = lid / CD_NG, tj = lid % CD_NG;
  global float *out = mode == 0 ? W + W_off : (mode == 1 ? A + A_off : U + U_off);
  out += bhf * CD_DD;
  float acc[CD_RPT][CD_RPT];
  for (int i = 0; i < CD_RPT; i++)
    for (int j = 0; j < CD_RPT; j++) acc[i][j] = (part & 1u) ? out[(ti * CD_RPT + i) * CD_D + tj * CD_RPT + j] : 0.0f;

  /* the frame's rows of (β·)X and of Y, TSG tokens at a time: 32 consecutive work-items load 8 tokens x 4 rows
   * (32-byte global segments, conflict-free stores); each item's block of rows and columns is contiguous. This
   * launch sums tokens s_lo … min(Sf, s_hi) − 1 (s_lo a multiple of TSG), continuing the sums in out (part bit 0) */
  const uint s_end = min(Sf, s_hi);
#define G_STAGE(t0)                                                                  \
  for (uint idx = lid; idx < CD_D * CD_TSG; idx += CD_NG * CD_NG) {                   \
    const uint lo = idx % 32, blk = idx / 32;                                         \
    const uint t = (blk / (CD_D / 4)) * 8 + lo % 8, d = (blk % (CD_D / 4)) * 4 + lo / 8; \
    const uint s = s_lo + (t0) + t;                                                   \
    float x = 0.0f, y = 0.0f;                                                         \
    if (s < s_end) {                                                                  \
      const ulong e = base + (ulong)d * N + s;                                        \
      x = X[e];                                                                       \
      y = Y[e];                                                                       \
      if (mode != 0) x *= bt[s];                                                      \
    }                                                                                 \
    Xs[t * CD_DP + d] = x;                                                            \
    Ys[t * CD_DP + d] = y;                                                            \
  }
#define G_X(t, i) Xs[(t) * CD_DP + ti * CD_RPT + (i)]
#define G_Y(t, j) Ys[(t) * CD_DP + tj * CD_RPT + (j)]
  /* tokens in this launch, none where the frame ends before s_lo (packed clips); signed, so that no compiler turns it
   * into a saturating subtraction, an intrinsic oclgrind cannot run */
  const int n_tok = (int)s_end - (int)s_lo;
  CD_GRAM_FMA(acc, CD_RPT, CD_RPT, CD_TSG, n_tok > 0 ? (uint)n_tok : 0u, G_STAGE, G_X, G_Y);
#undef G_STAGE
#undef G_X
#undef G_Y

  const float dcy = mode == 1 ? decay[decay_off + bhf] : 1.0f;
  for (int i = 0; i < CD_RPT; i++) {
    const uint row = ti * CD_RPT + i;
    for (int j = 0; j < CD_RPT; j++) {
      const uint col = tj * CD_RPT + j;
      float x = acc[i][j];
      if (mode == 1 && !(part & 2u)) x = CD_GRAM_A(dcy, row, col, x);
      out[row * CD_D + col] = x;
    }
  }
}

/* ------------------------------------------------------------------ chain */
/* x[c] = [use_add] add[c] + sum_m A[m, i] * Yl[m][c], Yl holding the previous x of every row, with acol[m] = A[m, i]
 * loaded by the step before. A is symmetric in exact arithmetic (A_f = d (I - K^T b K)), so A^T x = A x; the
 * transposed read is the coalesced one. The chain's A and add rows do not depend on x, so each step also loads
 * the next step's (An, adn: the last step reloads its own) into acol and addv as it goes, and a step waits on no
 * global load. The loads are unconditional: branches between the barriers multiply the paths PoCL's work-group
 * compiler walks. */
/* Work-item i owns rows i + CD_CW·r (r < CD_CHAIN_R) of a chain work-group of CD_CW = D / CD_CHAIN_R items: one row
 * each (CD_CHAIN_R = 1) unless the kernel's work-group limit is below D. x, acol and addv hold each owned row's. */
inline void cd_chain_step(local float4 *Yl4, float (*x)[CD_CB], float (*acol)[CD_D], float (*addv)[CD_CB], int keep,
                          int use_add, global const float *An, global const float *adn, uint i, uint c0) {
  local float *Yl = (local float *)Yl4;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = 0; r < CD_CHAIN_R; r++)
    for (int c = 0; c < CD_CB; c++) Yl[(i + CD_CW * r) * CD_CB + c] = x[r][c];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = 0; r < CD_CHAIN_R; r++) {
    const uint row = i + CD_CW * r;
    float y[CD_CB];
#pragma unroll
    for (int c = 0; c < CD_CB; c++) {
      y[c] = use_add ? addv[r][c] : 0.0f;
      addv[r][c] = adn[row * CD_D + c0 + c];
    }
    if (keep) /* uniform: 0 only at the pair's masked reverse frames (A_f = 0 there) */
      CD_CHAIN_LOOP
      for (uint m = 0; m < CD_D; m++) {
        const float a = acol[r][m];
        acol[r][m] = An[m * CD_D + row];
        for (int c4 = 0; c4 < CD_CB / 4; c4++) {
          const float4 yl = Yl4[m * (CD_CB / 4) + c4];
          y[4 * c4] = fma(a, yl.x, y[4 * c4]);
          y[4 * c4 + 1] = fma(a, yl.y, y[4 * c4 + 1]);
          y[4 * c4 + 2] = fma(a, yl.z, y[4 * c4 + 2]);
          y[4 * c4 + 3] = fma(a, yl.w, y[4 * c4 + 3]);
        }
      }
    else
      CD_CHAIN_LOOP
      for (uint m = 0; m < CD_D; m++) acol[r][m] = An[m * CD_D + row];
    for (int c = 0; c < CD_CB; c++) x[r][c] = y[c];
  }
}

/* The first step's A columns and add rows (what cd_chain_step expects loaded). */
inline void cd_chain_first(float (*acol)[CD_D], float (*addv)[CD_CB], global const float *A, global const float *add,
                           uint i, uint c0) {
  for (int r = 0; r < CD_CHAIN_R; r++) {
    const uint row = i + CD_CW * r;
    CD_CHAIN_LOOP
    for (uint m = 0; m < CD_D; m++) acol[r][m] = A[m * CD_D + row];
    for (int c = 0; c < CD_CB; c++) addv[r][c] = add[row * CD_D + c0 + c];
  }
}

/* stmt for each owned row r and column c < CD_CB of the block; ro_ is the row's element (row, c0) of a D x D matrix. */
#define CD_CHAIN_ROWS(stmt)                                 \
  for (int r = 0; r < CD_CHAIN_R; r++) {                    \
    const ulong ro_ = (ulong)(i + CD_CW * r) * CD_D + c0;   \
    for (int c = 0; c < CD_CB; c++) stmt;                   \
  }

/* The G chain's steps g0 <= st < g1 over the chain's n frames, one body for cd_scan_bwd_chain and cd_pair_bwd_chain
 * (so the pair's G is bit-identical to the scan backward's): causal f = n−1..0, G_f = W_f + x, x = A_f·G_f; reverse
 * f = 0..n−1, G_f = x, x = W_f + A_f·G_f (A_f left out where KEEP(f) is 0). x starts at X0 (an expression of r, c and
 * ro_) on step 0, else at the carry row CROW; G_f goes to GOUT[f·D·D + …]. Uses the kernels' Ab, Wb, x, acol, addv,
 * Yl4, i, c0 and reverse. */
#define CD_GF(r, n) (reverse ? (r) : (n) - 1 - (r)) /* key frame of G step r */
#define CD_G_CHAIN(n, g0, g1, X0, CROW, GOUT, KEEP)                                                      \
  if ((g0) < (g1)) {                                                                                     \
    if ((g0) == 0) CD_CHAIN_ROWS(x[r][c] = (X0))                                                         \
    else CD_CHAIN_ROWS(x[r][c] = (CROW)[ro_ + c])                                                        \
    cd_chain_first(acol, addv, Ab + CD_GF(g0, n) * CD_DD, Wb + CD_GF(g0, n) * CD_DD, i, c0);             \
  }                                                                                                      \
  for (uint st = (g0); st < (g1); st++) {                                                                \
    const int more = st + 1 < (g1);                                                                      \
    const uint f = CD_GF(st, n), fn = more ? CD_GF(st + 1, n) : f;                                       \
    if (!reverse) CD_CHAIN_ROWS(x[r][c] += addv[r][c])                                                   \
    CD_CHAIN_ROWS((GOUT)[f * CD_DD + ro_ + c] = x[r][c])                                                 \
    cd_chain_step(Yl4, x, acol, addv, KEEP(f), reverse, Ab + fn * CD_DD, Wb + fn * CD_DD, i, c0);        \
  }

/* One work-group of CD_CW work-items (rows i + CD_CW·r) per (b, h, column block); group index = bh * (D / CB) + cb.
 * recompute: first the state chain M_f = A_f Mprev_f + U_f, written to Z (the `states` layout);
 * then the G chain, written to G (B, H, F, D, D) by key frame, and dinit when asked.
 * A launch runs the steps u0 <= u < u1 of the two chains one after the other (the state chain's nfwd steps, then the
 * G chain's Fc): all of them (0, 0xFFFFFFFF), or where the driver ends a work-item's loops after a fixed number of
 * iterations (Mesa's gallivm), a part, the running x carried to the next launch through `carry` ((·, D, D) per
 * chain, like init).
 * The loops have uniform trip counts and no barrier sits under a condition (see cd_gemm_t). */
kernel void cd_scan_bwd_chain(CD_GRAD_CHAIN_PARAMS) {
  local float4 Yl4[CD_D * CD_CB / 4];
  const uint i = get_local_id(0);
  const ulong grp = get_group_id(0);
  const uint c0 = (uint)(grp % (CD_D / CD_CB)) * CD_CB;
  const ulong bh = grp / (CD_D / CD_CB);
  uint Fc; /* the chain's frames (F, or its clip's) */
  const ulong fb = cd_chain(bh, F, &Fc) * CD_DD; /* the chain's first frame in the (B, H, F, D, D) buffers */
  global const float *Ab = A + A_off + fb, *Ub = U + U_off + fb, *Wb = W + W_off + fb;
  float x[CD_CHAIN_R][CD_CB], acol[CD_CHAIN_R][CD_D], addv[CD_CHAIN_R][CD_CB];
  const uint nfwd = recompute ? (reverse ? Fc - 1 : Fc) : 0, total = nfwd + Fc;
  const uint ua = min(u0, total), ub = min(u1, total); /* this launch's steps */

  /* state chain: causal key frames 0..F-1 into slots 0..F-1; reverse key frames F-1..1 into slots F-2..0 */
  const uint r0 = ua, r1 = min(ub, nfwd);
#define CD_SF(r) (reverse ? Fc - 1 - (r) : (r)) /* key frame of state step r */
  if (r0 < r1) {
    if (r0 == 0) CD_CHAIN_ROWS(x[r][c] = has_init ? init[init_off + bh * CD_DD + ro_ + c] : 0.0f)
    else CD_CHAIN_ROWS(x[r][c] = carry[bh * CD_DD + ro_ + c])
    cd_chain_first(acol, addv, Ab + CD_SF(r0) * CD_DD, Ub + CD_SF(r0) * CD_DD, i, c0);
  }
  for (uint st = r0; st < r1; st++) {
    const int more = st + 1 < r1;
    const uint f = CD_SF(st), slot = reverse ? f - 1 : f, fn = more ? CD_SF(st + 1) : f;
    cd_chain_step(Yl4, x, acol, addv, 1, 1, Ab + fn * CD_DD, Ub + fn * CD_DD, i, c0);
    CD_CHAIN_ROWS(Z[Z_off + fb + slot * CD_DD + ro_ + c] = x[r][c])
  }
#undef CD_SF

  /* G chain: causal f = F-1..0, G_f = W_f + x, x = A_f G_f; reverse f = 0..F-1, G_f = x, x = W_f + A_f G_f.
   * The last step only feeds dinit (computed always, written when asked). */
  const uint g0 = max(ua, nfwd) - nfwd, g1 = max(ub, nfwd) - nfwd; /* g0 == 0: this launch starts the G chain */
#define CD_KEEP_ALL(f) 1
  CD_G_CHAIN(Fc, g0, g1, has_gfinal ? gfinal[gf_off + bh * CD_DD + ro_ + c] : 0.0f, carry + bh * CD_DD,
             G + G_off + fb, CD_KEEP_ALL)
#undef CD_KEEP_ALL
  if (ua < ub && ub < total) CD_CHAIN_ROWS(carry[bh * CD_DD + ro_ + c] = x[r][c])
  if (ua < ub && ub == total && has_dinit) CD_CHAIN_ROWS(dinit[di_off + bh * CD_DD + ro_ + c] = x[r][c])
}

/* The fused scan pair's backward (src/scan/pair.c): both directions' G chains of cd_scan_bwd_chain (no
 * recompute) in one launch, the reverse one with A_f = 0 at its masked frames; the same arithmetic in the same
 * order as that kernel, so each direction's G is bit-identical to its own scan backward's.
 *   causal  f = F−1..0: G_f = W_f + x, x = A_f·G_f               (x starts at grad_final_c; dinit_c = x)
 *   reverse f = 0..F−1: G_f = x, x = W_f + [mask_f] A_f·G_f        (x starts at grad_final_r; dinit_r = x)
 * Steps u0 <= u < u1 per launch, x carried through `carry` ((2·B·H, D, D): causal chains, then reverse), as
 * cd_scan_bwd_chain's.
 * Launch: local D / CD_CHAIN_R, global (D / CD_CHAIN_R)·2·B·H·(D / CB): groups [0, G) causal, [G, 2·G) reverse. */
kernel void cd_pair_bwd_chain(global const float *A, ulong A_off, global const float *W, ulong W_off,
                              global const uint *mask, global const float *gf_c, ulong gf_c_off,
                              global const float *gf_r, ulong gf_r_off, global float *G_c, ulong G_c_off,
                              global float *G_r, ulong G_r_off, global float *di_c, ulong di_c_off, global float *di_r,
                              ulong di_r_off, uint F, int has_gf_c, int has_gf_r, int has_di_c, int has_di_r, uint u0,
                              uint u1, global float *carry) {
  local float4 Yl4[CD_D * CD_CB / 4];
  const uint i = get_local_id(0);
  const ulong nhalf = get_num_groups(0) / 2;
  const int reverse = get_group_id(0) >= nhalf;
  const ulong grp = get_group_id(0) % nhalf;
  const uint c0 = (uint)(grp % (CD_D / CD_CB)) * CD_CB;
  const ulong bh = grp / (CD_D / CD_CB);
  const ulong cb = get_group_id(0) / (CD_D / CD_CB); /* this chain's row of carry */
  const ulong fb = bh * F * CD_DD; /* (b, h) base of the (B, H, F, D, D) buffers */
  global const float *gf = reverse ? gf_r + gf_r_off : gf_c + gf_c_off;
  global float *G = reverse ? G_r + G_r_off : G_c + G_c_off;
  global float *di = reverse ? di_r + di_r_off : di_c + di_c_off;
  global const float *Ab = A + A_off + fb, *Wb = W + W_off + fb;
  const int has_gf = reverse ? has_gf_r : has_gf_c, has_di = reverse ? has_di_r : has_di_c;
  float x[CD_CHAIN_R][CD_CB], acol[CD_CHAIN_R][CD_D], addv[CD_CHAIN_R][CD_CB];
  const uint g0 = min(u0, F), g1 = min(u1, F);
#define CD_KEEP_MASK(f) (!reverse || mask[f] != 0u)
  CD_G_CHAIN(F, g0, g1, has_gf ? gf[bh * CD_DD + ro_ + c] : 0.0f, carry + cb * CD_DD, G + fb, CD_KEEP_MASK)
#undef CD_KEEP_MASK
  if (g0 < g1 && g1 < F) CD_CHAIN_ROWS(carry[cb * CD_DD + ro_ + c] = x[r][c])
  if (g0 < g1 && g1 == F && has_di) CD_CHAIN_ROWS(di[bh * CD_DD + ro_ + c] = x[r][c])
}
#undef CD_G_CHAIN
#undef CD_GF

/* ------------------------------------------------------------------ frames */
#define CD_DG (CD_D / CD_DPT)   /* value-column groups */
#define CD_TS (CD_TL * CD_TPT)  /* tokens per work-group */
#define CD_WG (CD_TL * CD_DG)   /* work-group size */
#define CD_BST (2 * CD_D + 4)   /* row stride of the B-operand chunk */

/* acc[t][j] += a_t·b_j over the work-item's CD_TPT tokens (a_t = ex[CD_TL·t]) and its CD_DPT columns (b = b4[0 ..
 * DPT/4)), one fma per product: a step of the token-tile products (cd_gemm_t, cd_scan_bwd_frames). */
inline void cd_fma_step(float acc[CD_TPT][CD_DPT], local const float *ex, local const float4 *b4) {
  float a[CD_TPT];
  for (int t = 0; t < CD_TPT; t++) a[t] = ex[CD_TL * t];
  for (int j4 = 0; j4 < CD_DPT / 4; j4++) {
    const float4 b = b4[j4];
    for (int t = 0; t < CD_TPT; t++) {
      acc[t][4 * j4] = fma(a[t], b.x, acc[t][4 * j4]);
      acc[t][4 * j4 + 1] = fma(a[t], b.y, acc[t][4 * j4 + 1]);
      acc[t][4 * j4 + 2] = fma(a[t], b.z, acc[t][4 * j4 + 2]);
      acc[t][4 * j4 + 3] = fma(a[t], b.w, acc[t][4 * j4 + 3]);
    }
  }
}

/* acc[i][j] += sum_{v} Ex[v][s_i] * src[d_j, v] over all v (src D x D, row-major, read transposed through
 * local chunks of CD_MC columns; a zero matrix when `zero`). Ex holds the A operand as [v][token].
 * Barriers never sit under a condition here: PoCL replicates the code after a conditional barrier. */
inline void cd_gemm_t(local const float *Ex, local float4 *Bs4, global const float *src, int zero,
                      float acc[CD_TPT][CD_DPT], uint lid, uint tl, uint dg) {
  local float *Bs = (local float *)Bs4;
  for (uint v0 = 0; v0 < CD_D; v0 += CD_MC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint idx = lid; idx < CD_D * CD_MC; idx += CD_WG) {
      const uint dd = idx / CD_MC, vv = idx % CD_MC;
      Bs[vv * CD_BST + dd] = zero ? 0.0f : src[dd * CD_D + v0 + vv];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint vv = 0; vv < CD_MC; vv++)
      cd_fma_step(acc, Ex + (v0 + vv) * CD_TS + tl, Bs4 + (vv * CD_BST + dg * CD_DPT) / 4);
  }
}

/* Loads a (D x TS) token tile of a (B, H, D, N) tensor into Ex[d][s] (zero past the frame's end). */
inline void cd_load_tile(local float *Ex, global const float *x, ulong tb, ulong N, uint ns, uint lid) {
  for (uint idx = lid; idx < CD_D * CD_TS; idx += CD_WG) {
    const uint d = idx / CD_TS, s = idx % CD_TS;
    Ex[idx] = s < ns ? x[tb + (ulong)d * N + s] : 0.0f;
  }
}

/* One work-group of CD_WG work-items per (b, h, f, token tile); group index = (bh * F + f) * ntiles + tile.
 * Work-item (tl, dg) owns tokens tl + TL*t (t < TPT) and value/key columns dg*DPT .. +DPT. */
kernel void cd_scan_bwd_frames(global const float *k, ulong k_off, global const float *v, ulong v_off,
                               global const float *beta, ulong beta_off, global const float *decay, ulong decay_off,
                               global const float *go, ulong go_off,
                               global const float *states, ulong st_off, global const float *init, ulong init_off,
                               global const float *G, ulong G_off, global float *dq, ulong dq_off, global float *dk,
                               ulong dk_off, global float *dv, ulong dv_off, global float *dbeta, ulong dbeta_off,
                               global float *part, ulong part_off, ulong N, uint S, uint F, uint ntiles, int reverse,
                               int has_init CD_PK_ARGS) {
  local float Ex[CD_D * CD_TS];
  local float4 Bs4[CD_MC * CD_BST / 4];
  local float red[CD_DG * CD_TS];
  local float *Bs = (local float *)Bs4;

  const uint lid = get_local_id(0), tl = lid % CD_TL, dg = lid / CD_TL;
  const ulong grp = get_group_id(0);
  const uint tile = (uint)(grp % ntiles);
  const ulong bhf = grp / ntiles;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const uint s0 = tile * CD_TS;
  const uint Sf = cd_frame_len(f, S);
#ifdef CD_PACKED
  if (s0 >= Sf) { /* a tile past this frame's end (the grid is sized by the longest frame): no ddecay partial */
    if (get_local_id(0) == 0) part[part_off + bhf * ntiles + tile] = 0.0f;
    return;
  }
#endif
  const uint ns = min((uint)CD_TS, Sf - s0);
  const ulong tb = bh * CD_D * N + cd_frame_start(f, S) + s0;
  const ulong bbase = cd_beta_base(bh, bhf, f, S, N) + s0;

  int prev_zero, post_zero;
  const int jprev = reverse ? (int)f : (int)f - 1;
  const ulong srow = cd_state_row(bh, f, F);
  global const float *Mp = cd_state(states, st_off, init, init_off, bh, F, jprev,
                                    reverse ? cd_frame_last(f, F) : cd_frame_first(f, F), has_init, &prev_zero, srow);
  global const float *Mq = cd_state(states, st_off, init, init_off, bh, F, (int)f, reverse && cd_frame_last(f, F),
                                    has_init, &post_zero, srow);
  global const float *Gf = G + G_off + bhf * CD_DD;
  const float dcy = decay[decay_off + bhf];

  /* stage 1: Y = K Mprev, dDelta = K G (tokens x value columns) */
  cd_load_tile(Ex, k + k_off, tb, N, ns, lid);
  float accY[CD_TPT][CD_DPT], accD[CD_TPT][CD_DPT];
  for (int t = 0; t < CD_TPT; t++)
    for (int j = 0; j < CD_DPT; j++) accY[t][j] = accD[t][j] = 0.0f;
  for (uint m0 = 0; m0 < CD_D; m0 += CD_MC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint idx = lid; idx < CD_MC * 2 * CD_D; idx += CD_WG) {
      const uint mm = idx / (2 * CD_D), c = idx % (2 * CD_D);
      float x;
      if (c < CD_D) x = prev_zero ? 0.0f : Mp[(m0 + mm) * CD_D + c];
      else x = Gf[(m0 + mm) * CD_D + c - CD_D];
      Bs[mm * CD_BST + c] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint mm = 0; mm < CD_MC; mm++) { /* Y and dΔ: two independent sums, each in the order of cd_gemm_t's */
      cd_fma_step(accY, Ex + (m0 + mm) * CD_TS + tl, Bs4 + (mm * CD_BST + dg * CD_DPT) / 4);
      cd_fma_step(accD, Ex + (m0 + mm) * CD_TS + tl, Bs4 + (mm * CD_BST + CD_D + dg * CD_DPT) / 4);
    }
  }

  /* elementwise: R = V - d Y, Delta = b R, dR = b dDelta = dV; keep Delta in accY and -d dR in accD */
  float pb[CD_TPT], pd = 0.0f;
  for (int t = 0; t < CD_TPT; t++) {
    const uint s = tl + CD_TL * t;
    const int valid = s < ns;
    const float b = valid ? beta[beta_off + bbase + s] : 0.0f;
    pb[t] = 0.0f;
    for (int j = 0; j < CD_DPT; j++) {
      const ulong e = tb + (ulong)(dg * CD_DPT + j) * N + s;
      const float y = accY[t][j], dd = accD[t][j];
      const float r = (valid ? v[v_off + e] : 0.0f) - dcy * y;
      const float dr = b * dd;
      pb[t] = fma(dd, r, pb[t]);
      pd = fma(dr, y, pd);
      if (valid) dv[dv_off + e] = dr;
      accY[t][j] = b * r;
      accD[t][j] = -dcy * dr;
    }
  }

  /* dbeta: sum the DG column-group partials of each token in order */
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < CD_TPT; t++) red[dg * CD_TS + tl + CD_TL * t] = pb[t];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (dg == 0) {
    for (int t = 0; t < CD_TPT; t++) {
      const uint s = tl + CD_TL * t;
      float sum = 0.0f;
      for (uint g = 0; g < CD_DG; g++) sum += red[g * CD_TS + s];
      if (s < ns) dbeta[dbeta_off + bbase + s] = sum;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* ddecay partial: - sum dR * Y over the tile; per token lane over the column groups, then over the lanes */
  red[lid] = pd;
  barrier(CLK_LOCAL_MEM_FENCE);
  float lane = 0.0f;
  if (dg == 0)
    for (uint g = 0; g < CD_DG; g++) lane += red[g * CD_TL + tl];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (dg == 0) red[tl] = lane;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float sum = 0.0f;
    for (uint u = 0; u < CD_TL; u++) sum += red[u];
    part[part_off + bhf * ntiles + tile] = -sum;
  }

  /* stage 2: dK = Delta G^T - d dR Mprev^T */
  for (int t = 0; t < CD_TPT; t++)
    for (int j = 0; j < CD_DPT; j++) Ex[(dg * CD_DPT + j) * CD_TS + tl + CD_TL * t] = accY[t][j];
  for (int t = 0; t < CD_TPT; t++)
    for (int j = 0; j < CD_DPT; j++) accY[t][j] = 0.0f;
  cd_gemm_t(Ex, Bs4, Gf, 0, accY, lid, tl, dg);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < CD_TPT; t++)
    for (int j = 0; j < CD_DPT; j++) Ex[(dg * CD_DPT + j) * CD_TS + tl + CD_TL * t] = accD[t][j];
  cd_gemm_t(Ex, Bs4, Mp, prev_zero, accY, lid, tl, dg);
  for (int t = 0; t < CD_TPT; t++) {
    const uint s = tl + CD_TL * t;
    if (s < ns)
      for (int j = 0; j < CD_DPT; j++) dk[dk_off + tb + (ulong)(dg * CD_DPT + j) * N + s] = accY[t][j];
  }

#if !CD_SKIP_DQ
  /* stage 3: dQ = dO M^T with M the state output frame f reads */
  for (int t = 0; t < CD_TPT; t++)
    for (int j = 0; j < CD_DPT; j++) accY[t][j] = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  cd_load_tile(Ex, go + go_off, tb, N, ns, lid);
  cd_gemm_t(Ex, Bs4, Mq, post_zero, accY, lid, tl, dg);
  for (int t = 0; t < CD_TPT; t++) {
    const uint s = tl + CD_TL * t;
    if (s < ns)
      for (int j = 0; j < CD_DPT; j++) dq[dq_off + tb + (ulong)(dg * CD_DPT + j) * N + s] = accY[t][j];
  }
#else
  (void)dq, (void)dq_off, (void)post_zero, (void)Mq;
#endif
}

/* ------------------------------------------------------------------ ddecay */
/* One work-group of CD_RL work-items per (b, h, f): ddecay = <G_f, Mprev_f> + sum of the tile partials. */
kernel void cd_scan_bwd_ddecay(global const float *states, ulong st_off, global const float *init, ulong init_off,
                               global const float *G, ulong G_off, global const float *part, ulong part_off,
                               global float *ddecay, ulong dd_off, uint F, uint ntiles, int reverse, int has_init
                               CD_PK_ARGS) {
  local float red[CD_RL];
  const uint lid = get_local_id(0);
  CD_DDECAY_FRAME(cd_state)
  float sum = 0.0f;
  if (!zero)
    for (uint e = lid; e < CD_D * CD_D; e += CD_RL) sum = fma(Gf[e], Mp[e], sum);
  red[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = CD_RL / 2; w > 0; w >>= 1) {
    if (lid < w) red[lid] += red[lid + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    float p = 0.0f;
    for (uint u = 0; u < ntiles; u++) p += part[part_off + bhf * ntiles + u];
    ddecay[dd_off + bhf] = red[0] + p;
  }
}
