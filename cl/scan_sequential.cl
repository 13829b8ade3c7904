/* Sequential delta-rule scan (docs/math.md §3; the seed's _cam_scan_kernel).
 *
 * One work-group per (b, h, block of value columns) walks the frames in order. With one block
 * (CD_S_J == D) that is one work-group per (b, h) holding the whole D x D state; the host splits the
 * value columns over several work-groups when the device needs the parallelism or its local memory is
 * too small: the delta rule never mixes value columns (column j of the state only ever reads column j
 * of V and of the state), so the split is exact.
 *
 * The state block (D x J, rows = key dim) lives in registers, spread over the work-group: item
 * (ur, uc) owns rows ur + U_WR·a and columns uc + U_WC·c. Each frame's tokens stream through in tiles
 * of CD_S_TS tokens staged in local memory:
 *   P = M (snapshot in local memory, after the decay)
 *   per tile:  E = β·(V − K·P)   (TS x J, reduction over the key dim; layout P_*)
 *              M += Kᵀ·E          (D x J, reduction over the tile's tokens; layout U_*)
 *   out_f = Q_f·M                 (J x TS per tile, reduction over the key dim; layout O_*)
 * With write_out = 0 the output pass is left out: the caller computes out_f = Q_f·M_f from the states saved in
 * `post` (save_post), all frames in parallel (the chunkwise forward's phase C), which takes the output GEMM off
 * the serial chain.
 * Reverse: output frame F−1−i reads the state after key frames F−1 … F−i (i = 0: the init state, no
 * decay and no update); the final state additionally absorbs frame 0.
 * A launch runs the steps t0 <= t < t1 of that walk (forward F steps; reverse F, and F + 1 when the final state is
 * wanted): the state starts from init (has_init, else zero) and ends in fin (want_final). The host runs the whole
 * walk in one launch, or, where the driver stops a work-item's loops after a fixed number of iterations (Mesa's
 * gallivm: llvmpipe under Rusticl), in several, carrying the state between them through fin and init.
 *
 * Build options: CD_D; CD_S_J (value columns per work-group); CD_S_TS (tokens per tile); CD_S_PF (prefetch);
 *   CD_U_WR, CD_U_RM, CD_U_WC, CD_U_RN   state block D x J   (WR·RM >= D,  WC·RN >= J)
 *   CD_P_WR, CD_P_RM, CD_P_WC, CD_P_RN   E tile      TS x J  (WR·RM >= TS, WC·RN >= J)
 *   CD_O_WR, CD_O_RM, CD_O_WC, CD_O_RN   out tile    J x TS  (WR·RM >= J,  WC·RN >= TS)
 * with WR·WC the same work-group size W for all three.
 * Launch: local (W, 1), global (W·B·H, ceil(D / J)).
 * Buffers come as (pointer, element offset); offsets into (B, H, D, N) tensors are 64-bit. */

#ifndef CD_D
#error "CD_D (head dim) must be given as a build option"
#endif

#define S_W (CD_U_WR * CD_U_WC)
#if CD_P_WR * CD_P_WC != S_W || CD_O_WR * CD_O_WC != S_W
#error "the three layouts must use the same work-group size"
#endif
#define SQ_MAX(a, b) ((a) > (b) ? (a) : (b))
#define S_SC SQ_MAX(CD_P_WR * CD_P_RM, CD_O_WC * CD_O_RN)                          /* token columns  */
#define S_JC SQ_MAX(SQ_MAX(CD_U_WC * CD_U_RN, CD_P_WC * CD_P_RN), CD_O_WR * CD_O_RM) /* value columns  */
#define S_KR SQ_MAX(CD_D, CD_U_WR * CD_U_RM)                                      /* key rows       */
#define S_LDK (S_SC + 1)
#ifndef CD_S_PF
#define CD_S_PF 1 /* 1: prefetch the next tile into registers (GPUs); 0: load each tile when it is used (CPUs) */
#endif
/* Each tile's global loads go to registers first, all of them issued before any is used, and the next tile's
 * loads are issued before the current tile's arithmetic (its registers are stored to local memory only at the
 * next step): a load loop that stores each element to local memory as it arrives waits a global-memory latency
 * per element, which made the kernel latency-bound (its time hardly depended on D). With CD_S_PF=0 each tile is
 * loaded and stored in the same step (PoCL keeps values live across a barrier in memory per work-item, which
 * cost more there than the latency it hides). Elements per item: */
#define S_NK ((CD_D * CD_S_TS + S_W - 1) / S_W)   /* K or Q tile (D x TS) */
#define S_NV ((CD_S_J * CD_S_TS + S_W - 1) / S_W) /* V tile (J x TS)      */
#define S_NB ((CD_S_TS + S_W - 1) / S_W)          /* β of the tile        */

__kernel __attribute__((reqd_work_group_size(S_W, 1, 1))) void cd_scan_sequential(
    __global const float *q, ulong q_off, __global const float *k, ulong k_off, __global const float *v,
    ulong v_off, __global const float *beta, ulong beta_off, __global const float *decay, ulong decay_off,
    __global float *out, ulong out_off, __global const float *init, ulong init_off, __global float *fin,
    ulong fin_off, __global float *pre, ulong pre_off, __global float *post, ulong post_off, ulong N, uint S,
    uint F, int reverse, int has_init, int want_final, int save_pre, int save_post, int write_out, uint t0, uint t1) {
  __local float Ks[S_KR * S_LDK]; /* Ks[k][s]: K (update) or Q (output) tile */
  __local float Vs[S_JC * S_LDK]; /* Vs[j][s]                                */
  __local float Es[S_SC * S_JC];  /* Es[s][j] = β_s·(V − K·P)[s][j]          */
  __local float Ps[CD_D * S_JC];  /* Ps[k][j]: the state block               */
  __local float Bs[S_SC];         /* β of the tile                           */
  const uint lid = get_local_id(0);
  const ulong bh = get_group_id(0);
  const uint j0 = get_group_id(1) * CD_S_J;
  const uint jn = min((uint)CD_S_J, (uint)CD_D - j0); /* valid value columns of this block */
  const ulong tok = bh * (ulong)CD_D * N;
  const ulong sbase = bh * (ulong)(CD_D * CD_D);
  __global const float *qb = q + q_off + tok;
  __global const float *kb = k + k_off + tok;
  __global const float *vb = v + v_off + tok;
  __global float *ob = out + out_off + tok;
  __global const float *bb = beta + beta_off + bh * F * (ulong)S;
  __global const float *db = decay + decay_off + bh * F;

  const uint uc = lid % CD_U_WC, ur = lid / CD_U_WC;
  const uint pc = lid % CD_P_WC, pr = lid / CD_P_WC;
  const uint oc = lid % CD_O_WC, orr = lid / CD_O_WC;
/* The operands of the step's three products (CD_FMA_GEMM), by the tiles' layouts and the work-item's place in each
 * product's grid: E = K·P (tokens x columns), M += Kᵀ·E (rows x columns), out = Pᵀ·Q (columns x tokens). */
#define S_E_K(k, a) Ks[(k) * S_LDK + pr + CD_P_WR * (a)]
#define S_E_P(k, c) Ps[(k) * S_JC + pc + CD_P_WC * (c)]
#define S_U_K(s, a) Ks[(ur + CD_U_WR * (a)) * S_LDK + (s)]
#define S_U_E(s, c) Es[(s) * S_JC + uc + CD_U_WC * (c)]
#define S_O_P(k, a) Ps[(k) * S_JC + orr + CD_O_WR * (a)]
#define S_O_Q(k, c) Ks[(k) * S_LDK + oc + CD_O_WC * (c)]

  /* Zero all staging memory once: padding rows and columns then stay zero (finite). */
  for (uint e = lid; e < S_KR * S_LDK; e += S_W) Ks[e] = 0.0f;
  for (uint e = lid; e < S_JC * S_LDK; e += S_W) Vs[e] = 0.0f;
  for (uint e = lid; e < S_SC * S_JC; e += S_W) Es[e] = 0.0f;
  for (uint e = lid; e < CD_D * S_JC; e += S_W) Ps[e] = 0.0f;
  for (uint e = lid; e < S_SC; e += S_W) Bs[e] = 0.0f;

/* Rolled, coalesced copies between a (D x D) slice of global memory and the state block in Ps. */
#define S_SAVE(buf, base)                                          \
  for (uint e = lid; e < CD_D * S_JC; e += S_W) {                 \
    const uint i_ = e / S_JC, j_ = e % S_JC;                       \
    if (j_ < jn) (buf)[(base) + i_ * CD_D + j_] = Ps[e];           \
  }

  /* the initial state, through Ps */
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint e = lid; e < CD_D * S_JC; e += S_W) {
    const uint i = e / S_JC, j = e % S_JC;
    Ps[e] = (has_init && j < jn) ? init[init_off + sbase + j0 + i * CD_D + j] : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float m[CD_U_RM][CD_U_RN];
  #pragma unroll
  for (int a = 0; a < CD_U_RM; a++) {
    const uint i = ur + CD_U_WR * a;
    #pragma unroll
    for (int c = 0; c < CD_U_RN; c++) m[a][c] = i < CD_D ? Ps[i * S_JC + uc + CD_U_WC * c] : 0.0f;
  }

/* Ps = m, between barriers (nobody still reads the old contents; everybody sees the new) */
#define S_PUBLISH()                                                                     \
  do {                                                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                       \
    for (int a = 0; a < CD_U_RM; a++) {                                                 \
      const uint i = ur + CD_U_WR * a;                                                  \
      if (i < CD_D)                                                                     \
        for (int c = 0; c < CD_U_RN; c++) Ps[i * S_JC + uc + CD_U_WC * c] = m[a][c];    \
    }                                                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                                       \
  } while (0)

/* One tile of a (rows x N) tensor: rows [row0, row0 + ROWS) (those at or past `valid` read as zero) x tokens
 * [s0, s0 + min(TS, S − s0)) of frame start fs (zeros past the end), element e = row·TS + token.
 * S_FETCH: into the registers r (NR per item); S_STORE: the registers to the local tile dst (stride S_LDK);
 * S_DIRECT: straight from global to local memory (no prefetch: the form PoCL vectorizes across work-items best).
 * β of the tile: rb / Bs, likewise. */
#define S_FETCH(r, NR, ROWS, valid, src, row0, fs, s0)                                                     \
  do {                                                                                                     \
    const uint sn_ = min((uint)CD_S_TS, S - (s0));                                                         \
    _Pragma("unroll") for (int i_ = 0; i_ < (NR); i_++) {                                                  \
      const uint e_ = lid + (uint)i_ * S_W, w_ = e_ / CD_S_TS, s_ = e_ % CD_S_TS;                          \
      r[i_] = (e_ < (ROWS) * CD_S_TS && s_ < sn_ && w_ < (valid)) ? (src)[(ulong)((row0) + w_) * N + (fs) + (s0) + s_] \
                                                                   : 0.0f;                                 \
    }                                                                                                      \
  } while (0)
#define S_STORE(r, NR, ROWS, dst)                                                       \
  _Pragma("unroll") for (int i_ = 0; i_ < (NR); i_++) {                                 \
    const uint e_ = lid + (uint)i_ * S_W;                                               \
    if (e_ < (ROWS) * CD_S_TS) (dst)[(e_ / CD_S_TS) * S_LDK + e_ % CD_S_TS] = r[i_];    \
  }
#define S_DIRECT(dst, ROWS, valid, src, row0, fs, s0)                                                      \
  do {                                                                                                     \
    const uint sn_ = min((uint)CD_S_TS, S - (s0));                                                         \
    for (uint e_ = lid; e_ < (ROWS) * CD_S_TS; e_ += S_W) {                                                \
      const uint w_ = e_ / CD_S_TS, s_ = e_ % CD_S_TS;                                                     \
      (dst)[w_ * S_LDK + s_] = (s_ < sn_ && w_ < (valid)) ? (src)[(ulong)((row0) + w_) * N + (fs) + (s0) + s_] : 0.0f; \
    }                                                                                                      \
  } while (0)
#define S_FETCH_B(fs, s0)                                                                      \
  _Pragma("unroll") for (int i_ = 0; i_ < S_NB; i_++) {                                        \
    const uint s_ = lid + (uint)i_ * S_W;                                                      \
    rb[i_] = s_ < min((uint)CD_S_TS, S - (s0)) ? bb[(fs) + (s0) + s_] : 0.0f;                  \
  }
#define S_STORE_B()                                                     \
  _Pragma("unroll") for (int i_ = 0; i_ < S_NB; i_++) {                 \
    const uint s_ = lid + (uint)i_ * S_W;                               \
    if (s_ < CD_S_TS) Bs[s_] = rb[i_];                                  \
  }
#define S_DIRECT_B(fs, s0) \
  for (uint s_ = lid; s_ < CD_S_TS; s_ += S_W) Bs[s_] = s_ < min((uint)CD_S_TS, S - (s0)) ? bb[(fs) + (s0) + s_] : 0.0f;
#if CD_S_PF
  float rk[S_NK], rv[S_NV], rb[S_NB];
#endif

  for (uint t = t0; t < t1; t++) {
    /* key frame kf (update) and output frame qf of this step */
    const int upd = !reverse || t > 0;
    const uint kf = reverse ? (t < F ? F - t : 0u) : t;
    const int qf = reverse ? (int)F - 1 - (int)t : (int)t;

    /* Barriers never sit inside a condition (only inside loops whose trip counts are uniform): the
     * update pass runs over 0 tokens when the step has no update, the output pass when no frame reads. */
    const uint s_upd = upd ? S : 0u, s_out = qf >= 0 && write_out ? S : 0u;
    const float g = upd ? db[kf] : 1.0f;
    #pragma unroll
    for (int a = 0; a < CD_U_RM; a++)
      #pragma unroll
      for (int c = 0; c < CD_U_RN; c++) m[a][c] *= g;
    S_PUBLISH();
    if (save_pre && qf >= 0) S_SAVE(pre, pre_off + (bh * F + (uint)qf) * (ulong)(CD_D * CD_D) + j0);
    const ulong nk = cd_frame_start(kf, S);
#if CD_S_PF
    if (s_upd) {
      S_FETCH(rk, S_NK, CD_D, CD_D, kb, 0u, nk, 0u);
      S_FETCH(rv, S_NV, CD_S_J, jn, vb, j0, nk, 0u);
      S_FETCH_B(nk, 0u);
    }
#endif
    for (uint s0 = 0; s0 < s_upd; s0 += CD_S_TS) {
      barrier(CLK_LOCAL_MEM_FENCE);
#if CD_S_PF
      S_STORE(rk, S_NK, CD_D, Ks);
      S_STORE(rv, S_NV, CD_S_J, Vs);
      S_STORE_B();
#else
      S_DIRECT(Ks, CD_D, CD_D, kb, 0u, nk, s0);
      S_DIRECT(Vs, CD_S_J, jn, vb, j0, nk, s0);
      S_DIRECT_B(nk, s0);
#endif
      barrier(CLK_LOCAL_MEM_FENCE);
#if CD_S_PF
      if (s0 + CD_S_TS < s_upd) { /* the next tile's loads, in flight during this tile's arithmetic */
        S_FETCH(rk, S_NK, CD_D, CD_D, kb, 0u, nk, s0 + CD_S_TS);
        S_FETCH(rv, S_NV, CD_S_J, jn, vb, j0, nk, s0 + CD_S_TS);
        S_FETCH_B(nk, s0 + CD_S_TS);
      }
#endif

      /* E = β·(V − K·P) */
      {
        float acc[CD_P_RM][CD_P_RN];
        CD_FMA_ZERO(acc, CD_P_RM, CD_P_RN);
        CD_FMA_GEMM(acc, CD_P_RM, CD_P_RN, CD_D, S_E_K, S_E_P);
        #pragma unroll
        for (int a = 0; a < CD_P_RM; a++) {
          const uint s = pr + CD_P_WR * a;
          const float bt = Bs[s];
          #pragma unroll
          for (int c = 0; c < CD_P_RN; c++) {
            const uint j = pc + CD_P_WC * c;
            Es[s * S_JC + j] = bt * (Vs[j * S_LDK + s] - acc[a][c]);
          }
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);

      /* M += Kᵀ·E */
      CD_FMA_GEMM(m, CD_U_RM, CD_U_RN, CD_S_TS, S_U_K, S_U_E);
    }
    /* out_qf = Q_qf · M */
    S_PUBLISH();
    if (save_post && qf >= 0) S_SAVE(post, post_off + (bh * F + (uint)qf) * (ulong)(CD_D * CD_D) + j0);
    const ulong nq = cd_frame_start((uint)(qf >= 0 ? qf : 0), S);
#if CD_S_PF
    if (s_out) S_FETCH(rk, S_NK, CD_D, CD_D, qb, 0u, nq, 0u);
#endif
    for (uint s0 = 0; s0 < s_out; s0 += CD_S_TS) {
      const uint sn = min((uint)CD_S_TS, S - s0);
      barrier(CLK_LOCAL_MEM_FENCE);
#if CD_S_PF
      S_STORE(rk, S_NK, CD_D, Ks);
#else
      S_DIRECT(Ks, CD_D, CD_D, qb, 0u, nq, s0);
#endif
      barrier(CLK_LOCAL_MEM_FENCE);
#if CD_S_PF
      if (s0 + CD_S_TS < s_out) S_FETCH(rk, S_NK, CD_D, CD_D, qb, 0u, nq, s0 + CD_S_TS);
#endif
      float acc[CD_O_RM][CD_O_RN];
      CD_FMA_ZERO(acc, CD_O_RM, CD_O_RN);
      CD_FMA_GEMM(acc, CD_O_RM, CD_O_RN, CD_D, S_O_P, S_O_Q);
      CD_FMA_CELLS(a, c, CD_O_RM, CD_O_RN) {
        const uint j = orr + CD_O_WR * a, s = oc + CD_O_WC * c;
        if (j < jn && s < sn) ob[(ulong)(j0 + j) * N + nq + s0 + s] = acc[a][c];
      }
    }
  }
  S_PUBLISH();
  if (want_final) S_SAVE(fin, fin_off + sbase + j0);
#undef S_SAVE
#undef S_PUBLISH
#undef S_FETCH
#undef S_STORE
#undef S_DIRECT
#undef S_FETCH_B
#undef S_STORE_B
#undef S_DIRECT_B
#undef S_E_K
#undef S_E_P
#undef S_U_K
#undef S_U_E
#undef S_O_P
#undef S_O_Q
}
