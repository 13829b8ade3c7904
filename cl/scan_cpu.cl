/* CPU forms of the scan's phases (SPEC sections 3 and 4; docs/math.md, "Scan" and "Backward").
 *
 * The same math as scan_chunkwise.cl and scan_backward.cl, shaped for a CPU device whose compiler runs a
 * work-item's explicit vector types on the core's SIMD units (PoCL): a work-group is one work-item, one core's
 * task (a frame's column block of a gram, a chain's column block, a frame's token block); it owns register tiles
 * of float8 accumulators over contiguous memory and keeps its own scratch in local memory; there are no barriers.
 * Every product is in one form: acc[r][v] += a(k, r)·b(k, v), a scalar broadcast from a row of one operand and b
 * a float8 of eight consecutive elements of the other, so that no tensor is read across its contiguous axis:
 *
 *   cd_cpu_gram         per (b, h, f, column block): C = X_fᵀ·Y_f over the frame's tokens, Y staged token-major
 *                       (8 x 8 register transposes) with β applied; W_f = Q_fᵀ·dO_f, A_f = d_f·(I − K_fᵀβK_f)
 *                       (the upper block triangle, mirrored), U_f = K_fᵀβV_f
 *   cd_cpu_chain        per (b, h, block of value columns), serial over frames: the forward states
 *                       M_f = A_f·M_{f−1} + U_f (causal) or T_{f−1} = A_f·T_f + U_f (reverse), as
 *                       cd_scan_phase_b; with a mask, the scan pair's reverse chain (cd_pair_phase_b)
 *   cd_cpu_grad_chain   per (b, h, block of columns): the backward's chain of cd_scan_bwd_chain (the states first
 *                       when asked, then G_f = dL/dM_f with Aᵀ), same arguments
 *   cd_cpu_apply        per (b, h, f, token block): out_fᵀ = M_fᵀ·Q_fᵀ (all D rows of the block)
 *   cd_cpu_frames       per (b, h, f, token block): the backward's per-token gradients of cd_scan_bwd_frames (dq,
 *                       dk, dv, dbeta and the ddecay partial of the block), same arguments
 *   cd_cpu_ddecay       per (b, h, f): ddecay = <G_f, Mprev_f> + the blocks' partials, as cd_scan_bwd_ddecay
 *
 * Tokens are (B, H, D, N) rows, contiguous over tokens; per-frame matrices (B, H, F, D, D) and states (B, H, D, D)
 * row-major. Launches: local size 1; gram global (B·H·F, column blocks), chain (B·H, D / CD_CB) (the pair's
 * (B·H, 2·D / CD_CB)), gradient chains B·H·(D / CD_CB) (the pair's twice that), apply and frames (B·H·F·blocks),
 * ddecay (B·H·F). Every buffer comes with a ulong element offset; every sum has a fixed order.
 * Where the driver ends a work-item's loops after a number of iterations per launch (Mesa's gallivm, cd_loop_budget),
 * the chains run a span of their steps per launch (t0, t1; u0, u1 with a carry buffer) and the gram a span of a
 * frame's tokens (s0, s1, part), as their work-group counterparts do; src/scan/cpu.c counts each kernel's loop
 * iterations as written here (loops of a constant trip count of at most 8 aside: the compilers unroll them, so
 * they are kept in that form, the tails of token vectors included).
 *
 * Build options: CD_D head dim (a multiple of 8); CD_CB gram and chain columns per work-group (8 or 16, divides
 * CD_D); CD_TC gram tokens per staged chunk (a multiple of 8); CD_GR gram rows per register block (2, 4, 6 or 8);
 * CD_TV, CD_FTV apply and frames float8 token vectors per block (1 .. 4: 8·CD_TV, 8·CD_FTV tokens per block);
 * CD_AR apply rows, CD_FAR frames dk and dq rows, CD_FR frames stage-1 value columns per register block (1 .. 8). Packed clips (CD_PACKED, cl/common.cl): CD_PK_ARGS last, as the FMA kernels. */

#ifndef CD_D
#error "CD_D (head dim) must be given as a build option"
#endif
#ifndef CD_CB
#define CD_CB 16
#endif
#ifndef CD_TC
#define CD_TC 256
#endif
#ifndef CD_TV
#define CD_TV 3
#endif
#ifndef CD_FTV
#define CD_FTV 1
#endif

#define CD_DD ((ulong)CD_D * CD_D)
#define CD_CBV (CD_CB / 8) /* float8 vectors per column block */
#define CD_TB (8 * CD_TV)   /* tokens per apply block */
#define CD_FTB (8 * CD_FTV) /* tokens per frames block */
#define CD_RI 4            /* rows per register block */
#define CD_UNROLL _Pragma("unroll")
#define CD_UNROLL4 _Pragma("unroll 4")

/* Vector v of a token block at p: full blocks load whole vectors, a tail block only its n valid tokens. */
#define CD_LD(p, v, full, n) ((full) ? vload8((v), (p)) : cd_ldf8n((p) + 8 * (v), (int)(n) - 8 * (v)))
#define CD_ST(x, p, v, full, n)                               \
  do {                                                        \
    if (full) vstore8((x), (v), (p));                         \
    else cd_stf8n((p) + 8 * (v), (x), (int)(n) - 8 * (v)); \
  } while (0)

/* The state matrix with index j (CD_STATE_FN of cl/common.cl, as scan_backward.cl's cd_state). */
CD_STATE_FN(cd_cpu_state)

/* ---------------------------------------------------------------------------------------------- gram */

/* Rows i0 .. i0 + R (R <= CD_GR) of the work-group's column block: acc[r][v] = C[i0 + r][block vector v] from Cs,
 * plus the chunk's tn tokens of X rows (global, from x at token 0 of the chunk, row stride N) times the staged Ys;
 * eight tokens per iteration, then the rest. */
#ifndef CD_GR
#define CD_GR 6
#endif
CD_INLINE void cd_gram_rows(local float8 *Cs, local const float8 *Ys, global const float *x, ulong N, uint i0, uint tn,
                            const int R) {
  float8 acc[CD_GR][CD_CBV];
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int v = 0; v < CD_CBV; v++) acc[r][v] = Cs[(i0 + r) * CD_CBV + v];
  global const float *x0 = x + (ulong)i0 * N;
#define CD_GRAM_STEP(s_)                                                                            \
  do {                                                                                              \
    float8 y_[CD_CBV];                                                                              \
    CD_UNROLL for (int v = 0; v < CD_CBV; v++) y_[v] = Ys[(s_) * CD_CBV + v];                       \
    CD_UNROLL for (int r = 0; r < R; r++) {                                                         \
      const float8 a_ = (float8)(x0[(ulong)r * N + (s_)]);                                          \
      CD_UNROLL for (int v = 0; v < CD_CBV; v++) acc[r][v] = fma(a_, y_[v], acc[r][v]);             \
    }                                                                                               \
  } while (0)
  const uint t8 = tn & ~7u;
  for (uint s0 = 0; s0 < t8; s0 += 8) CD_UNROLL for (uint s = 0; s < 8; s++) CD_GRAM_STEP(s0 + s);
  for (uint s = t8; s < tn; s++) CD_GRAM_STEP(s);
#undef CD_GRAM_STEP
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int v = 0; v < CD_CBV; v++) Cs[(i0 + r) * CD_CBV + v] = acc[r][v];
}

/* One work-item per (b, h, f, column block): group (bhf, cb). mode 0: W = Q_fᵀ·dO_f (x = q, y0 = dO, o0 = W);
 * mode 1: A only (x = y0 = k, o0 = A); mode 2: A and U over 2D columns (x = y0 = k, y1 = v, o0 = A, o1 = U), the
 * column blocks of A first; mode 3: U only (x = k, y1 = v, o1 = U). β scales the staged Y in modes 1-3. A's column
 * block computes the rows up to its last column and writes them twice (A is symmetric).
 * A launch sums the frame's tokens s0 <= s < s1 (s0 a multiple of CD_TC, so that the chunks are those of one
 * launch): all of them (0, 0xFFFFFFFF), or where the driver ends a work-item's loops after a fixed number of
 * iterations (Mesa's gallivm) a part; part bit 0: continue the raw sums an earlier launch left in the outputs (the
 * block's own elements), bit 1: leave the raw sums there for the next launch instead of finishing them. */
kernel void cd_cpu_gram(global const float *x, ulong x_off, global const float *y0, ulong y0_off,
                        global const float *y1, ulong y1_off, global const float *beta, ulong beta_off,
                        global const float *decay, ulong decay_off, global float *o0, ulong o0_off, global float *o1,
                        ulong o1_off, ulong N, uint S, uint F, uint mode, uint s0, uint s1,
                        uint part CD_PK_ARGS) {
  local float8 Ys[CD_TC * CD_CBV]; /* Ys[s][v]: β_s·Y[c0 + 8v .. +8][t0 + s] */
  local float8 Cs[CD_D * CD_CBV];  /* the block's accumulators C[i][c0 ..] */
  const ulong bhf = get_group_id(0);
  const uint cb = get_group_id(1);
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const uint Sf = cd_frame_len(f, S);
  const ulong base = bh * CD_D * N + cd_frame_start(f, S);
  const uint cfirst = mode == 3 ? CD_D : 0; /* the block's column in [A | U] */
  const uint col = cfirst + cb * CD_CB;
  const int is_a = mode != 0 && col < CD_D;
  const uint c0 = col % CD_D; /* its column in its own matrix */
  global const float *y = (mode == 0 || is_a ? y0 + y0_off : y1 + y1_off) + base + (ulong)c0 * N;
  global const float *xb = x + x_off + base;
  global const float *bt = beta + beta_off + cd_beta_base(bh, bhf, f, S, N);
  const int use_beta = mode != 0;
  const uint rows = is_a ? c0 + CD_CB : CD_D; /* A: the rows up to the block's last column */

  /* the raw sums: A's block at its own rows and columns, W's and U's at theirs */
  global float *raw = (is_a ? o0 + o0_off : mode == 0 ? o0 + o0_off : o1 + o1_off) + bhf * CD_DD + c0;
  if (part & 1u) {
    for (uint i = 0; i < rows; i++)
      CD_UNROLL for (int v = 0; v < CD_CBV; v++) Cs[i * CD_CBV + v] = vload8(v, raw + (ulong)i * CD_D);
  } else {
    for (uint i = 0; i < rows * CD_CBV; i++) Cs[i] = (float8)(0.0f);
  }
  const uint tend = min(s1, Sf);
  for (uint t0 = s0; t0 < tend; t0 += CD_TC) {
    const uint tn = min((uint)CD_TC, tend - t0);
    const uint t8 = tn & ~7u;
    /* stage Ys: 8 x 8 blocks transposed, the chunk's last partial group element by element */
    for (uint s = 0; s < t8; s += 8) {
      const float8 b = use_beta ? vload8(0, bt + t0 + s) : (float8)(1.0f);
      CD_UNROLL for (int v = 0; v < CD_CBV; v++) {
        float8 r[8];
        CD_UNROLL for (int i = 0; i < 8; i++) r[i] = vload8(0, y + (ulong)(8 * v + i) * N + t0 + s);
        cd_transpose8(r);
        Ys[(s + 0) * CD_CBV + v] = b.s0 * r[0];
        Ys[(s + 1) * CD_CBV + v] = b.s1 * r[1];
        Ys[(s + 2) * CD_CBV + v] = b.s2 * r[2];
        Ys[(s + 3) * CD_CBV + v] = b.s3 * r[3];
        Ys[(s + 4) * CD_CBV + v] = b.s4 * r[4];
        Ys[(s + 5) * CD_CBV + v] = b.s5 * r[5];
        Ys[(s + 6) * CD_CBV + v] = b.s6 * r[6];
        Ys[(s + 7) * CD_CBV + v] = b.s7 * r[7];
      }
    }
    for (uint s = t8; s < tn; s++) {
      const float b = use_beta ? bt[t0 + s] : 1.0f;
      local float *row = (local float *)(Ys + s * CD_CBV);
      for (uint c = 0; c < CD_CB; c++) row[c] = b * y[(ulong)c * N + t0 + s];
    }
    uint i0 = 0;
    for (; i0 + CD_GR <= rows; i0 += CD_GR) cd_gram_rows(Cs, Ys, xb + t0, N, i0, tn, CD_GR);
    /* rows is a multiple of 8: the rest is 0, 2, 4 or 6 rows */
    if (rows - i0 >= 4) cd_gram_rows(Cs, Ys, xb + t0, N, i0, tn, 4), i0 += 4;
    if (rows - i0 >= 2) cd_gram_rows(Cs, Ys, xb + t0, N, i0, tn, 2), i0 += 2;
  }

  const local float *C = (const local float *)Cs;
  if (part & 2u) {
    for (uint i = 0; i < rows; i++)
      CD_UNROLL for (int v = 0; v < CD_CBV; v++) vstore8(Cs[i * CD_CBV + v], v, raw + (ulong)i * CD_D);
  } else if (is_a) {
    global float *A = o0 + o0_off + bhf * CD_DD;
    const float d = decay[decay_off + bhf];
    for (uint i = 0; i < rows; i++)
      for (uint c = 0; c < CD_CB; c++) {
        const uint j = c0 + c;
        const float a = d * ((i == j ? 1.0f : 0.0f) - C[i * CD_CB + c]);
        A[(ulong)i * CD_D + j] = a;
        if (i < c0) A[(ulong)j * CD_D + i] = a; /* the block below the diagonal no work-item computes */
      }
  } else {
    global float *O = (mode == 0 ? o0 + o0_off : o1 + o1_off) + bhf * CD_DD + c0;
    for (uint i = 0; i < CD_D; i++) {
      global float *orow = O + (ulong)i * CD_D;
      CD_UNROLL for (int v = 0; v < CD_CBV; v++) vstore8(Cs[i * CD_CBV + v], v, orow);
    }
  }
}

/* --------------------------------------------------------------------------------------------- chains */

/* Y = op(A)·X (+ U) for the work-item's column block: X, Y (D x CB) in local memory, A (D x D) and U (its block
 * columns, row stride D) in global; trans: Aᵀ. keep 0: Y = U (or zero), the pair's masked frames. */
CD_INLINE void cd_chain_step(local float8 *Y, local const float8 *X, global const float *A, int trans,
                          global const float *U, int use_u, int keep) {
  for (uint i0 = 0; i0 < CD_D; i0 += CD_RI) {
    float8 acc[CD_RI][CD_CBV];
    CD_UNROLL for (int r = 0; r < CD_RI; r++) CD_UNROLL for (int v = 0; v < CD_CBV; v++)
      acc[r][v] = use_u ? vload8(v, U + (ulong)(i0 + r) * CD_D) : (float8)(0.0f);
    if (keep) {
      if (trans) {
        CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
          float8 xv[CD_CBV];
          CD_UNROLL for (int v = 0; v < CD_CBV; v++) xv[v] = X[m * CD_CBV + v];
          CD_UNROLL for (int r = 0; r < CD_RI; r++) {
            const float8 a = (float8)(A[(ulong)m * CD_D + i0 + r]);
            CD_UNROLL for (int v = 0; v < CD_CBV; v++) acc[r][v] = fma(a, xv[v], acc[r][v]);
          }
        }
      } else {
        CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
          float8 xv[CD_CBV];
          CD_UNROLL for (int v = 0; v < CD_CBV; v++) xv[v] = X[m * CD_CBV + v];
          CD_UNROLL for (int r = 0; r < CD_RI; r++) {
            const float8 a = (float8)(A[(ulong)(i0 + r) * CD_D + m]);
            CD_UNROLL for (int v = 0; v < CD_CBV; v++) acc[r][v] = fma(a, xv[v], acc[r][v]);
          }
        }
      }
    }
    CD_UNROLL for (int r = 0; r < CD_RI; r++) CD_UNROLL for (int v = 0; v < CD_CBV; v++) Y[(i0 + r) * CD_CBV + v] = acc[r][v];
  }
}

inline void cd_block_load(local float8 *X, global const float *src, int on) {
  for (uint i = 0; i < CD_D; i++)
    CD_UNROLL for (int v = 0; v < CD_CBV; v++) X[i * CD_CBV + v] = on ? vload8(v, src + (ulong)i * CD_D) : (float8)(0.0f);
}
inline void cd_block_save(global float *dst, local const float8 *X, float scale) {
  for (uint i = 0; i < CD_D; i++)
    CD_UNROLL for (int v = 0; v < CD_CBV; v++) vstore8(scale * X[i * CD_CBV + v], v, dst + (ulong)i * CD_D);
}

/* One chain's column block over the frames fr0 .. fr0 + Fc − 1, the arithmetic of cd_phase_b_chain
 * (scan_chunkwise.cl): causal M_f = A_f·M_{f−1} + U_f, reverse T_{f−1} = A_f·T_f + U_f; post[qf] the state output
 * frame qf reads, pre[qf] the decayed state before the update (save_pre), fin the last state (want_final); mask
 * (NULL: none) drops key frame f's update where mask[f] == 0. sbase: this chain's init/final row and column.
 * As cd_phase_b_chain, a launch runs the steps t0 <= t < t1 (all: 0, 0xFFFFFFFF), the state coming from init and,
 * where steps are left (t1 != 0xFFFFFFFF), going to fin for the next launch. */
inline void cd_chain_states(local float8 *X, local float8 *Y, global const float *A, global const float *U,
                            global const float *decay, global const float *init, int has_init, global float *post,
                            global float *pre, int save_pre, global float *fin, int want_final,
                            global const uint *mask, ulong fr0, uint Fc, ulong sbase, uint j0, int reverse, uint t0,
                            uint t1) {
  cd_block_load(X, init + sbase, has_init);
  if (reverse && t0 == 0) { /* output frame F−1 reads the init state: no decay, no update */
    cd_block_save(post + (fr0 + Fc - 1) * CD_DD + j0, X, 1.0f);
    if (save_pre) cd_block_save(pre + (fr0 + Fc - 1) * CD_DD + j0, X, 1.0f);
  }
  const uint nsteps = reverse ? (Fc - 1 + (want_final ? 1 : 0)) : Fc;
  const uint tend = min(t1, nsteps);
  for (uint t = t0; t < tend; t++) {
    const uint kf = reverse ? Fc - 1 - t : t;
    const int qf = reverse ? (int)kf - 1 : (int)kf;
    const int keep = !mask || mask[kf] != 0u;
    if (save_pre && qf >= 0) cd_block_save(pre + (fr0 + (uint)qf) * CD_DD + j0, X, decay[fr0 + kf]);
    cd_chain_step(Y, X, A + (fr0 + kf) * CD_DD, 0, U + (fr0 + kf) * CD_DD + j0, keep, keep);
    for (uint i = 0; i < CD_D * CD_CBV; i++) X[i] = Y[i];
    if (qf >= 0) cd_block_save(post + (fr0 + (uint)qf) * CD_DD + j0, X, 1.0f);
  }
  if (want_final || t1 != 0xFFFFFFFFu) cd_block_save(fin + sbase, X, 1.0f);
}

/* cd_scan_phase_b's arguments and meaning; group (bh, column block). */
kernel void cd_cpu_chain(global const float *A, ulong a_off, global const float *U, ulong u_off,
                         global const float *decay, ulong decay_off, global const float *init, ulong init_off,
                         global float *post, ulong post_off, global float *pre, ulong pre_off, global float *fin,
                         ulong fin_off, uint F, int reverse, int has_init, int save_pre, int want_final, uint t0,
                         uint t1 CD_PK_ARGS) {
  local float8 X[CD_D * CD_CBV], Y[CD_D * CD_CBV];
  const ulong bh = get_group_id(0);
  uint Fc;
  const ulong fr0 = cd_chain(bh, F, &Fc);
  const uint j0 = get_group_id(1) * CD_CB;
  cd_chain_states(X, Y, A + a_off, U + u_off, decay + decay_off, init + init_off, has_init, post + post_off,
                  pre + pre_off, save_pre, fin + fin_off, want_final, NULL, fr0, Fc, bh * CD_DD + j0, j0, reverse, t0,
                  t1);
}

/* cd_pair_phase_b's arguments and meaning: group (bh, column block), blocks [0, nj) of the causal chains, the rest
 * the reverse ones with mask; global (B·H, 2·nj). No decay is read (no pre states). */
kernel void cd_cpu_pair_chain(global const float *A, ulong a_off, global const float *U, ulong u_off,
                              global const uint *mask, global const float *init_c, ulong init_c_off,
                              global const float *init_r, ulong init_r_off, global float *post_c, ulong post_c_off,
                              global float *post_r, ulong post_r_off, global float *fin_c, ulong fin_c_off,
                              global float *fin_r, ulong fin_r_off, uint F, uint nj, int has_init_c, int has_init_r,
                              int want_final_c, int want_final_r, uint t0, uint t1) {
  local float8 X[CD_D * CD_CBV], Y[CD_D * CD_CBV];
  const ulong bh = get_group_id(0);
  const int reverse = get_group_id(1) >= nj;
  const uint j0 = (get_group_id(1) % nj) * CD_CB;
  const ulong sbase = bh * CD_DD + j0;
  if (reverse)
    cd_chain_states(X, Y, A + a_off, U + u_off, A, init_r + init_r_off, has_init_r, post_r + post_r_off, post_r, 0,
                    fin_r + fin_r_off, want_final_r, mask, bh * F, F, sbase, j0, 1, t0, t1);
  else
    cd_chain_states(X, Y, A + a_off, U + u_off, A, init_c + init_c_off, has_init_c, post_c + post_c_off, post_c, 0,
                    fin_c + fin_c_off, want_final_c, NULL, bh * F, F, sbase, j0, 0, t0, t1);
}

/* One gradient chain's column block c0 over its Fc frames (Ab, Wb at the chain's first frame), its steps
 * g0 <= st < g1: causal f = Fc−1..0: G_f = W_f + x, x = A_fᵀG_f; reverse f = 0..Fc−1: G_f = x, x = W_f +
 * [mask_f] A_fᵀG_f (mask NULL: every frame kept); x starts at gf (zero without has_gf) on step 0, else at the carry
 * row crow (an earlier launch's x). G at the chain's first frame and column block. */
inline void cd_grads(local float8 *X, local float8 *Y, global const float *Ab, global const float *Wb,
                     global const float *gf, int has_gf, global const float *crow, global float *G,
                     global const uint *mask, uint Fc, uint g0, uint g1, uint c0, int reverse) {
  if (g0 >= g1) return;
  if (g0 == 0) cd_block_load(X, gf, has_gf);
  else cd_block_load(X, crow, 1);
  for (uint r = g0; r < g1; r++) {
    const uint f = reverse ? r : Fc - 1 - r;
    if (!reverse) /* G_f = W_f + x */
      for (uint i = 0; i < CD_D; i++)
        CD_UNROLL for (int v = 0; v < CD_CBV; v++) X[i * CD_CBV + v] += vload8(v, Wb + f * CD_DD + (ulong)i * CD_D + c0);
    cd_block_save(G + f * CD_DD, X, 1.0f);
    cd_chain_step(Y, X, Ab + f * CD_DD, 1, Wb + f * CD_DD + c0, reverse, !mask || mask[f] != 0u);
    for (uint i = 0; i < CD_D * CD_CBV; i++) X[i] = Y[i];
  }
}

/* cd_scan_bwd_chain's arguments and meaning; group bh·(D / CB) + column block: with recompute, first the states
 * M_f = A_f·Mprev_f + U_f into Z (the `states` layout), then G_f (causal f = F−1..0: G_f = W_f + x, x = A_fᵀG_f;
 * reverse f = 0..F−1: G_f = x, x = W_f + A_fᵀG_f) into G, and dinit = x when asked. As that kernel's, a launch runs
 * the steps u0 <= u < u1 of the two chains one after the other (all: 0, 0xFFFFFFFF), x carried to the next launch
 * through `carry` ((·, D, D) per chain, like init). */
kernel void cd_cpu_grad_chain(CD_GRAD_CHAIN_PARAMS) {
  local float8 X[CD_D * CD_CBV], Y[CD_D * CD_CBV];
  const ulong bh = get_group_id(0) / (CD_D / CD_CB);
  const uint c0 = (uint)(get_group_id(0) % (CD_D / CD_CB)) * CD_CB;
  uint Fc;
  const ulong fb = cd_chain(bh, F, &Fc) * CD_DD, sb = bh * CD_DD + c0;
  global const float *Ab = A + A_off + fb, *Ub = U + U_off + fb, *Wb = W + W_off + fb;
  const uint nfwd = recompute ? (reverse ? Fc - 1 : Fc) : 0, total = nfwd + Fc;
  const uint ua = min(u0, total), ub = min(u1, total); /* this launch's steps */
  /* the states: causal key frames 0..F−1 into slots 0..F−1; reverse key frames F−1..1 into slots F−2..0 */
  const uint r0 = ua, r1 = min(ub, nfwd);
  if (r0 < r1) {
    if (r0 == 0) cd_block_load(X, init + init_off + sb, has_init);
    else cd_block_load(X, carry + sb, 1);
    for (uint r = r0; r < r1; r++) {
      const uint f = reverse ? Fc - 1 - r : r, slot = reverse ? f - 1 : f;
      cd_chain_step(Y, X, Ab + f * CD_DD, 0, Ub + f * CD_DD + c0, 1, 1);
      for (uint i = 0; i < CD_D * CD_CBV; i++) X[i] = Y[i];
      cd_block_save(Z + Z_off + fb + slot * CD_DD + c0, X, 1.0f);
    }
  }
  const uint g0 = max(ua, nfwd) - nfwd, g1 = max(ub, nfwd) - nfwd; /* g0 == 0: this launch starts the G chain */
  cd_grads(X, Y, Ab, Wb, gfinal + gf_off + sb, has_gfinal, carry + sb, G + G_off + fb + c0, NULL, Fc, g0, g1, c0,
           reverse);
  if (ua < ub && ub < total) cd_block_save(carry + sb, X, 1.0f);
  if (ua < ub && ub == total && has_dinit) cd_block_save(dinit + di_off + sb, X, 1.0f);
}

/* cd_pair_bwd_chain's arguments and meaning: group bh·(D / CB) + column block, the first half of the groups the
 * causal gradient chains, the second the reverse ones with A_f = 0 at the frames where mask is 0; global
 * 2·B·H·(D / CB). Steps u0 <= u < u1 per launch, x carried through `carry` ((2·B·H, D, D): causal chains, then
 * reverse), as cd_pair_bwd_chain's. */
kernel void cd_cpu_pair_grad_chain(global const float *A, ulong A_off, global const float *W, ulong W_off,
                                   global const uint *mask, global const float *gf_c, ulong gf_c_off,
                                   global const float *gf_r, ulong gf_r_off, global float *G_c, ulong G_c_off,
                                   global float *G_r, ulong G_r_off, global float *di_c, ulong di_c_off,
                                   global float *di_r, ulong di_r_off, uint F, int has_gf_c, int has_gf_r,
                                   int has_di_c, int has_di_r, uint u0, uint u1, global float *carry) {
  local float8 X[CD_D * CD_CBV], Y[CD_D * CD_CBV];
  const ulong nhalf = get_num_groups(0) / 2;
  const int reverse = get_group_id(0) >= nhalf;
  const ulong grp = get_group_id(0) % nhalf;
  const ulong bh = grp / (CD_D / CD_CB);
  const uint c0 = (uint)(grp % (CD_D / CD_CB)) * CD_CB;
  const ulong fb = bh * F * CD_DD, sb = bh * CD_DD + c0;
  const ulong cr = (get_group_id(0) / (CD_D / CD_CB)) * CD_DD + c0; /* this chain's carry row and column */
  global const float *Ab = A + A_off + fb, *Wb = W + W_off + fb;
  const uint g0 = min(u0, F), g1 = min(u1, F);
  global float *di;
  int has_di;
  if (reverse) {
    cd_grads(X, Y, Ab, Wb, gf_r + gf_r_off + sb, has_gf_r, carry + cr, G_r + G_r_off + fb + c0, mask, F, g0, g1,
             c0, 1);
    di = di_r + di_r_off + sb, has_di = has_di_r;
  } else {
    cd_grads(X, Y, Ab, Wb, gf_c + gf_c_off + sb, has_gf_c, carry + cr, G_c + G_c_off + fb + c0, NULL, F, g0, g1,
             c0, 0);
    di = di_c + di_c_off + sb, has_di = has_di_c;
  }
  if (g0 < g1 && g1 < F) cd_block_save(carry + cr, X, 1.0f);
  if (g0 < g1 && g1 == F && has_di) cd_block_save(di, X, 1.0f);
}

/* Row blocks of R over the D rows of an output, CALL(j0, r) each; the rest (D is a multiple of 8, R of at most 8)
 * in blocks of 4, 2 and 1: every count is a compile-time constant. */
#define CD_ROW_BLOCKS(R, CALL)                                 \
  do {                                                         \
    uint j0_ = 0;                                              \
    for (; j0_ + (R) <= CD_D; j0_ += (R)) CALL(j0_, (R));      \
    if ((R) > 4 && CD_D - j0_ >= 4) CALL(j0_, 4), j0_ += 4;    \
    if ((R) > 2 && CD_D - j0_ >= 2) CALL(j0_, 2), j0_ += 2;    \
    if ((R) > 1 && CD_D - j0_ >= 1) CALL(j0_, 1), j0_ += 1;    \
  } while (0)

#ifndef CD_AR /* apply rows per register block */
#define CD_AR 4
#endif
#ifndef CD_FAR /* frames dk and dq rows per register block */
#define CD_FAR 8
#endif
#ifndef CD_FR /* frames stage 1: value columns per register block (two products each) */
#define CD_FR 4
#endif
#define CD_RMAX 8
#define CD_TVMAX 4

/* acc[r][t] = Σ_m M'(m, j0 + r)·X[m][block vector t] for rows j0 .. j0 + R of a token block (n tokens; full: n =
 * CD_TB): M'(m, j) = M[m][j] (trans 0: Mᵀ·X, the apply) or M[j][m] (trans 1: M·X, dq = dO·Mᵀ); X rows at x, stride
 * N. Stores the rows at out (stride N). */
CD_INLINE void cd_mx_rows(global const float *M, const int trans, global const float *x, global float *out, ulong N,
                          uint j0, const int R, const int TV, uint n, const int full) {
  float8 acc[CD_RMAX][CD_TVMAX];
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int t = 0; t < TV; t++) acc[r][t] = (float8)(0.0f);
  CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
    float8 xv[CD_TVMAX];
    CD_UNROLL for (int t = 0; t < TV; t++) xv[t] = CD_LD(x + (ulong)m * N, t, full, n);
    CD_UNROLL for (int r = 0; r < R; r++) {
      const float8 a = (float8)(trans ? M[(j0 + r) * CD_D + m] : M[m * CD_D + j0 + r]);
      CD_UNROLL for (int t = 0; t < TV; t++) acc[r][t] = fma(a, xv[t], acc[r][t]);
    }
  }
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int t = 0; t < TV; t++)
    CD_ST(acc[r][t], out + (ulong)(j0 + r) * N, t, full, n);
}

/* out_fᵀ = Mᵀ·Q_fᵀ for one token block. */
CD_INLINE void cd_apply_block(global const float *q, global const float *M, global float *out, ulong N, uint n,
                              const int full) {
#define CD_APPLY_ROWS(j0, R) cd_mx_rows(M, 0, q, out, N, j0, R, CD_TV, n, full)
  CD_ROW_BLOCKS(CD_AR, CD_APPLY_ROWS);
#undef CD_APPLY_ROWS
}

/* The token block of this work-group, group bhf·nblocks + block (blocks of tb tokens): (b, h) = bh, frame f, the
 * frame's block's first token s0 and its token count n (0: a block past the frame's end, packed clips). */
inline ulong cd_cpu_block(uint nblocks, uint tb, uint S, uint F, ulong *bh, uint *f, uint *s0, uint *n) {
  const ulong grp = get_group_id(0);
  const ulong bhf = grp / nblocks;
  *bh = bhf / F;
  *f = (uint)(bhf % F);
  const uint Sf = cd_frame_len(*f, S);
  *s0 = (uint)(grp % nblocks) * tb;
  *n = *s0 < Sf ? min(tb, Sf - *s0) : 0u;
  return bhf;
}

/* cd_scan_phase_c's meaning: out_f = Q_f·states_f (the state output frame f reads); group bhf·blocks + block. */
kernel void cd_cpu_apply(global const float *q, ulong q_off, global const float *states, ulong st_off,
                         global float *out, ulong out_off, ulong N, uint S, uint F, uint nblocks CD_PK_ARGS) {
  ulong bh;
  uint f, s0, n;
  const ulong bhf = cd_cpu_block(nblocks, CD_TB, S, F, &bh, &f, &s0, &n);
  if (!n) return;
  const ulong tb = bh * CD_D * N + cd_frame_start(f, S) + s0;
  global const float *M = states + st_off + bhf * CD_DD;
  if (n == CD_TB) cd_apply_block(q + q_off + tb, M, out + out_off + tb, N, n, 1);
  else cd_apply_block(q + q_off + tb, M, out + out_off + tb, N, n, 0);
}

/* --------------------------------------------------------------------------------------------- frames */

/* Stage 1 of a frames block for value columns j0 .. j0 + R: Y = K·Mprev and dDelta = K·G, then R = V − d·Y,
 * dR = β·dDelta: dv = dR, db += dDelta·R (per token), pd += dR·Y, and βR, −d·dR kept in BR, ND. */
CD_INLINE void cd_frames_s1(local float8 *BR, local float8 *ND, global const float *k, global const float *v,
                            const float8 *bv, float dcy, global const float *Mp, int prev_zero,
                            global const float *Gf, global float *dv, float8 *db, float8 *pd, ulong N, uint j0,
                            const int R, const int TV, uint n, const int full) {
  float8 ay[CD_RMAX][CD_TVMAX], ad[CD_RMAX][CD_TVMAX];
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int t = 0; t < TV; t++) ay[r][t] = ad[r][t] = (float8)(0.0f);
  if (prev_zero) {
    CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
      float8 x[CD_TVMAX];
      CD_UNROLL for (int t = 0; t < TV; t++) x[t] = CD_LD(k + (ulong)m * N, t, full, n);
      CD_UNROLL for (int r = 0; r < R; r++) {
        const float8 g = (float8)(Gf[m * CD_D + j0 + r]);
        CD_UNROLL for (int t = 0; t < TV; t++) ad[r][t] = fma(g, x[t], ad[r][t]);
      }
    }
  } else {
    CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
      float8 x[CD_TVMAX];
      CD_UNROLL for (int t = 0; t < TV; t++) x[t] = CD_LD(k + (ulong)m * N, t, full, n);
      CD_UNROLL for (int r = 0; r < R; r++) {
        const float8 a = (float8)(Mp[m * CD_D + j0 + r]), g = (float8)(Gf[m * CD_D + j0 + r]);
        CD_UNROLL for (int t = 0; t < TV; t++) {
          ay[r][t] = fma(a, x[t], ay[r][t]);
          ad[r][t] = fma(g, x[t], ad[r][t]);
        }
      }
    }
  }
  CD_UNROLL for (int r = 0; r < R; r++) {
    const uint j = j0 + r;
    CD_UNROLL for (int t = 0; t < TV; t++) {
      const float8 y = ay[r][t], dd = ad[r][t];
      const float8 rr = CD_LD(v + (ulong)j * N, t, full, n) - dcy * y;
      const float8 dr = bv[t] * dd;
      db[t] = fma(dd, rr, db[t]);
      *pd = fma(dr, y, *pd);
      CD_ST(dr, dv + (ulong)j * N, t, full, n);
      BR[j * TV + t] = bv[t] * rr;
      ND[j * TV + t] = -dcy * dr;
    }
  }
}

/* Stage 2 for key columns j0 .. j0 + R: dk = (βR)·Gᵀ − d·dR·Mprevᵀ. */
CD_INLINE void cd_frames_s2(local const float8 *BR, local const float8 *ND, global const float *Mp, int prev_zero,
                            global const float *Gf, global float *dk, ulong N, uint j0, const int R, const int TV,
                            uint n, const int full) {
  float8 acc[CD_RMAX][CD_TVMAX];
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int t = 0; t < TV; t++) acc[r][t] = (float8)(0.0f);
  if (prev_zero) {
    CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
      float8 b[CD_TVMAX];
      CD_UNROLL for (int t = 0; t < TV; t++) b[t] = BR[m * TV + t];
      CD_UNROLL for (int r = 0; r < R; r++) {
        const float8 g = (float8)(Gf[(j0 + r) * CD_D + m]);
        CD_UNROLL for (int t = 0; t < TV; t++) acc[r][t] = fma(g, b[t], acc[r][t]);
      }
    }
  } else {
    CD_UNROLL4 for (uint m = 0; m < CD_D; m++) {
      float8 b[CD_TVMAX], e[CD_TVMAX];
      CD_UNROLL for (int t = 0; t < TV; t++) b[t] = BR[m * TV + t], e[t] = ND[m * TV + t];
      CD_UNROLL for (int r = 0; r < R; r++) {
        const float8 g = (float8)(Gf[(j0 + r) * CD_D + m]), a = (float8)(Mp[(j0 + r) * CD_D + m]);
        CD_UNROLL for (int t = 0; t < TV; t++) acc[r][t] = fma(a, e[t], fma(g, b[t], acc[r][t]));
      }
    }
  }
  CD_UNROLL for (int r = 0; r < R; r++) CD_UNROLL for (int t = 0; t < TV; t++)
    CD_ST(acc[r][t], dk + (ulong)(j0 + r) * N, t, full, n);
}

/* One token block of n tokens (full: n = CD_TB) of key frame f, with Y = K·Mprev, R = V − d·Y, dDelta = K·G,
 * dR = β·dDelta (scan_backward.cl): dv = dR, dbeta_s = Σ dDelta·R, dk = (βR)·Gᵀ − d·dR·Mprevᵀ, dq = dO·Mᵀ, and the
 * block's ddecay partial −Σ dR·Y. BR and ND (D x CD_FTV float8, local) hold βR and −d·dR between the stages. */
CD_INLINE float cd_frames_block(local float8 *BR, local float8 *ND, global const float *k, global const float *v,
                                global const float *bt, float dcy, global const float *go, global const float *Mp,
                                int prev_zero, global const float *Mq, int post_zero, global const float *Gf,
                                global float *dq, global float *dk, global float *dv, global float *dbeta, ulong N,
                                uint n, const int full) {
  const int TV = CD_FTV;
  float8 bv[CD_TVMAX], db[CD_TVMAX], pd = (float8)(0.0f);
  CD_UNROLL for (int t = 0; t < TV; t++) bv[t] = CD_LD(bt, t, full, n), db[t] = (float8)(0.0f);
#define CD_S1(j0, R) cd_frames_s1(BR, ND, k, v, bv, dcy, Mp, prev_zero, Gf, dv, db, &pd, N, j0, R, TV, n, full)
  CD_ROW_BLOCKS(CD_FR, CD_S1);
#undef CD_S1
  CD_UNROLL for (int t = 0; t < TV; t++) CD_ST(db[t], dbeta, t, full, n);
#define CD_S2(j0, R) cd_frames_s2(BR, ND, Mp, prev_zero, Gf, dk, N, j0, R, TV, n, full)
  CD_ROW_BLOCKS(CD_FAR, CD_S2);
#undef CD_S2
  if (dq) { /* dq = dO·Mᵀ, M the state output frame f reads (zero: an absent init) */
    if (post_zero) {
      for (uint j = 0; j < CD_D; j++)
        CD_UNROLL for (int t = 0; t < TV; t++) CD_ST((float8)(0.0f), dq + (ulong)j * N, t, full, n);
    } else {
#define CD_S3(j0, R) cd_mx_rows(Mq, 1, go, dq, N, j0, R, TV, n, full)
      CD_ROW_BLOCKS(CD_FAR, CD_S3);
#undef CD_S3
    }
  }
  const float4 p4 = pd.lo + pd.hi;
  const float2 p2 = p4.lo + p4.hi;
  return -(p2.x + p2.y);
}

/* cd_scan_bwd_frames' arguments and meaning (dq NULL: not computed); group (bh·F + f)·ntiles + block. */
kernel void cd_cpu_frames(global const float *k, ulong k_off, global const float *v, ulong v_off,
                          global const float *beta, ulong beta_off, global const float *decay, ulong decay_off,
                          global const float *go, ulong go_off, global const float *states, ulong st_off,
                          global const float *init, ulong init_off, global const float *G, ulong G_off,
                          global float *dq, ulong dq_off, global float *dk, ulong dk_off, global float *dv,
                          ulong dv_off, global float *dbeta, ulong dbeta_off, global float *part, ulong part_off,
                          ulong N, uint S, uint F, uint ntiles, int reverse, int has_init CD_PK_ARGS) {
  local float8 BR[CD_D * CD_FTV], ND[CD_D * CD_FTV];
  ulong bh;
  uint f, s0, n;
  const ulong bhf = cd_cpu_block(ntiles, CD_FTB, S, F, &bh, &f, &s0, &n);
  const uint tile = (uint)(get_group_id(0) % ntiles);
  if (!n) {
    part[part_off + bhf * ntiles + tile] = 0.0f;
    return;
  }
  const ulong tb = bh * CD_D * N + cd_frame_start(f, S) + s0;
  const ulong bbase = cd_beta_base(bh, bhf, f, S, N) + s0;
  int prev_zero, post_zero;
  const int jprev = reverse ? (int)f : (int)f - 1;
  const ulong srow = cd_state_row(bh, f, F);
  global const float *Mp =
      cd_cpu_state(states, st_off, init, init_off, bh, F, jprev, reverse ? cd_frame_last(f, F) : cd_frame_first(f, F),
                   has_init, &prev_zero, srow);
  global const float *Mq = cd_cpu_state(states, st_off, init, init_off, bh, F, (int)f,
                                        reverse && cd_frame_last(f, F), has_init, &post_zero, srow);
  global const float *Gf = G + G_off + bhf * CD_DD;
  const float dcy = decay[decay_off + bhf];
  global float *dqp = dq ? dq + dq_off + tb : NULL;
  float p;
  if (n == CD_FTB)
    p = cd_frames_block(BR, ND, k + k_off + tb, v + v_off + tb, beta + beta_off + bbase, dcy, go + go_off + tb, Mp,
                        prev_zero, Mq, post_zero, Gf, dqp, dk + dk_off + tb, dv + dv_off + tb,
                        dbeta + dbeta_off + bbase, N, n, 1);
  else
    p = cd_frames_block(BR, ND, k + k_off + tb, v + v_off + tb, beta + beta_off + bbase, dcy, go + go_off + tb, Mp,
                        prev_zero, Mq, post_zero, Gf, dqp, dk + dk_off + tb, dv + dv_off + tb,
                        dbeta + dbeta_off + bbase, N, n, 0);
  part[part_off + bhf * ntiles + tile] = p;
}

/* cd_scan_bwd_ddecay's arguments and meaning: ddecay = <G_f, Mprev_f> + the blocks' partials in order; group bhf. */
kernel void cd_cpu_ddecay(global const float *states, ulong st_off, global const float *init, ulong init_off,
                          global const float *G, ulong G_off, global const float *part, ulong part_off,
                          global float *ddecay, ulong dd_off, uint F, uint ntiles, int reverse, int has_init CD_PK_ARGS) {
  CD_DDECAY_FRAME(cd_cpu_state)
  float8 acc = (float8)(0.0f);
  if (!zero)
    CD_UNROLL4 for (uint e = 0; e < CD_DD / 8; e++) acc = fma(vload8(e, Gf), vload8(e, Mp), acc);
  const float4 a4 = acc.lo + acc.hi;
  const float2 a2 = a4.lo + a4.hi;
  float p = 0.0f;
  for (uint u = 0; u < ntiles; u++) p += part[part_off + bhf * ntiles + u];
  ddecay[dd_off + bhf] = (a2.x + a2.y) + p;
}
