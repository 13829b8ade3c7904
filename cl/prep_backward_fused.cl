/* Prep backward, two-pass form for GPUs (docs/math.md §4): the same gradients as cl/prep_backward.cl (read its
 * header for the math) without dproj_q/dproj_kv/drope_cos/drope_sin (calls that ask for those take the three-kernel
 * form). The full-channel RMSNorm couples a token's heads through S = sum_c da[c] x[c] w[c], so:
 *
 * cd_prep_bwd_sums   pass 1, one work-item per (b, n, h) walking the head's 4-channel units (reads q_raw, k_raw,
 *                    grad_q, grad_k once): the head's share of S_q and S_k per token and, with grad_inflation_sq,
 *                    the chain coefficients dpost, dpre. dpost and dpre need the head's pre/post sums first, so the
 *                    share of S_k is kept linear in them:
 *                      da_k = [a_k > 0] k_scale (T^T g_k + 2 dpost T^T (T kn) + 2 dpre kn)
 *                      share(S_k) = A + dpost Bc + dpre Cc, A, Bc, Cc = the three terms times x w, summed over d.
 * cd_prep_bwd_sums_out[4]  pass 1 when the caller gives the forward's outputs q, k and inflation_sq: the same
 *                    shares as dot products along the tokens, share(S_q) = (g_q . q) / ir_q (4: four tokens per
 *                    work-item, 16-byte loads).
 * cd_prep_bwd_ssum   S (2, B, N): the shares summed over the heads in order, and planar copies of the camera
 *                    matrices (cd_load_pm) and of the RoPE tables, laid out by rows across the tokens, so that pass 2's
 *                    loads for consecutive tokens are contiguous.
 * cd_prep_bwd_grads  pass 2, work-groups per (head, share of the head's 4-channel units), persistent over tiles of
 *                    CD_TT tokens, one work-item per (unit, token): writes dq_raw = da ir w - ir^3/C x S, dk_raw,
 *                    dv_raw, and keeps its channels' norm-weight terms in registers across its tiles.
 * cd_prep_bwd_grads_kind  pass 2 with one of dq_raw, dk_raw, dv_raw per work-group (the default in 16-bit storage).
 * cd_prep_bwd_fused_reduce  the norm-weight gradients: the grads work-groups' partial rows summed in order.
 *
 * Two passes, because a token's RMSNorm sum needs every head before any gradient is written: each pass streams its
 * tensors once at close to the memory's bandwidth, where one pass holding a tile's heads for a second read would
 * depend on the L2 cache keeping them (docs/performance.md has the times). No atomics; every sum has a fixed order
 * (bit-identical run to run).
 *
 * Build options: CD_DTYPE, CD_SDTYPE (common.cl), CD_D, CD_TT (tokens per tile of cd_prep_bwd_grads), CD_UW (its
 * 4-channel units per
 * work-group, a divisor of D/4: the work-group has CD_TT * CD_UW work-items), CD_G2. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_TT
#define CD_TT 8
#endif
#ifndef CD_UW
#define CD_UW CD_G4 /* cd_prep_bwd_grads: 4-channel units per work-group (a divisor of D/4) */
#endif

#define CD_F_GQ 1u
#define CD_F_GK 2u
#define CD_F_GV 4u
#define CD_F_GI 8u
#define CD_F_ALIGNED 16u /* every (B, N, H, D) tensor, the weights, tables and matrices start at a multiple of 4 */
#ifndef CD_G2 /* 1: grad_k, grad_v are each the sum of two tensors, grad_k + grad_k2 and grad_v + grad_v2 (the camera
                 branch's two scan directions, summed as they are read); a build option, so that the plain prep
                 backward's loads carry no test for it */
#define CD_G2 0
#endif

/* A 4x4 camera matrix by rows, in registers */
typedef struct cd_m4 {
  float4 r0, r1, r2, r3;
} cd_m4;
inline cd_m4 cd_load_m4(global const float *P, int al) {
  cd_m4 m;
  m.r0 = CD_LDF4(P, 0, al);
  m.r1 = CD_LDF4(P, 4, al);
  m.r2 = CD_LDF4(P, 8, al);
  m.r3 = CD_LDF4(P, 12, al);
  return m;
}
/* Matrix m (0: proj_q, 1: proj_kv) of token tok from the planar copy pm (8, BN) float4: row r at (4 m + r) BN + tok,
 * so that a warp's row loads for consecutive tokens are contiguous */
inline cd_m4 cd_load_pm(global const float4 *pm, uint m, ulong tok, ulong BN) {
  cd_m4 M;
  global const float4 *p = pm + 4 * m * BN + tok;
  M.r0 = p[0];
  M.r1 = p[BN];
  M.r2 = p[2 * BN];
  M.r3 = p[3 * BN];
  return M;
}
/* y = P x (camera transform) */
inline float4 cd_cam(cd_m4 P, float4 x) { return (float4)(dot(P.r0, x), dot(P.r1, x), dot(P.r2, x), dot(P.r3, x)); }
/* x = P^T y */
inline float4 cd_cam_t(cd_m4 P, float4 y) { return fma(P.r3, y.w, fma(P.r2, y.z, fma(P.r1, y.y, P.r0 * y.x))); }
/* interleaved-pair RoPE y[r] = x[r] cos[r] + x[r^1] sin[r], and its transpose x[j] = y[j] cos[j] + y[j^1] sin[j^1] */
inline float4 cd_rope(float4 x, float4 cs, float4 sn) { return fma(x.yxwz, sn, x * cs); }
inline float4 cd_rope_t(float4 y, float4 cs, float4 sn) { return fma(y.yxwz, sn.yxwz, y * cs); }

inline float cd_dotw(float4 a, float4 x, float4 w, float s) {
  s = fma(a.x * x.x, w.x, s);
  s = fma(a.y * x.y, w.y, s);
  s = fma(a.z * x.z, w.z, s);
  return fma(a.w * x.w, w.w, s);
}

/* One row of the transposed gradient (B, H, D, N): 4 channels of one token, rows N apart. */
inline float4 cd_grad4(global const cd_sstore_t *p, ulong i, ulong N) {
  return (float4)(CD_SLOAD(p, i), CD_SLOAD(p, i + N), CD_SLOAD(p, i + 2 * N), CD_SLOAD(p, i + 3 * N));
}

/* The transforms of a 4-channel unit (uses first, Mq, Mk in scope): camera half by the token's matrices, RoPE half
 * with cos in Mq.r0 and sin in Mq.r1 */
#define CD_TQ(y) (first ? cd_cam_t(Mq, (y)) : cd_rope_t((y), Mq.r0, Mq.r1))  /* q: T^T y */
#define CD_TK(x) (first ? cd_cam(Mk, (x)) : cd_rope((x), Mq.r0, Mq.r1))      /* k: T x */
#define CD_TKT(y) (first ? cd_cam_t(Mk, (y)) : cd_rope_t((y), Mq.r0, Mq.r1)) /* k, v: T^T y */

/* One 4-channel unit of cd_prep_bwd_sums: acc[0..5] += the unit's share of S_q, of A, pre, post, Bc, Cc. first: the
 * unit is in the camera half (Mq, Mk its matrices), else RoPE (cos in Mq.r0, sin in Mq.r1). */
inline void cd_sums_unit(float4 xq, float4 xk, float4 wq, float4 wk, float4 gq, float4 gk, float irq, float irk,
                         int first, cd_m4 Mq, cd_m4 Mk, float k_scale, int has_gi, float *acc) {
  const float4 aq = xq * irq * wq, ak = xk * irk * wk;
  const int4 mq = isgreater(aq, (float4)(0.0f)), mk = isgreater(ak, (float4)(0.0f));
  const float4 kn = fmax(ak, 0.0f) * k_scale, xwk = xk * wk;
  acc[0] = cd_dotw(select((float4)(0.0f), CD_TQ(gq), mq), xq, wq, acc[0]);
  acc[1] += dot(select((float4)(0.0f), CD_TKT(gk) * k_scale, mk), xwk);
  if (has_gi) {
    const float4 ko = CD_TK(kn);
    acc[2] += cd_sq4(kn);
    acc[3] += cd_sq4(ko);
    acc[4] += dot(select((float4)(0.0f), CD_TKT(ko) * (2.0f * k_scale), mk), xwk);
    acc[5] += dot(select((float4)(0.0f), kn * (2.0f * k_scale), mk), xwk);
  }
}

/* Pass 1's work-item: (batch row b, item i, head h) over B rows of `count` items each (tokens, or groups of four),
 * L = the local size items of one head per work-group, heads fastest in the grid (cd_pbf_shape sizes it); 0 past
 * the end. */
inline int cd_pass1_item(ulong count, ulong B, uint H, ulong *b, ulong *i, uint *h) {
  const ulong L = get_local_size(0), tpr = (count + L - 1) / L, grp = get_group_id(0), tile = grp / H;
  *h = (uint)(grp % H);
  *b = tile / tpr;
  *i = (tile % tpr) * L + get_local_id(0);
  return *b < B && *i < count;
}

/* Global: B * ceil(N / L) * H work-groups of L work-items (heads fastest), one work-item per (b, n, h) walking the
 * head's 4-channel units: no reduction across work-items, no local memory. Writes part (2, B, H, N): shares of S_q
 * then S_k; with grad_inflation_sq also dgi (2, B, H, N): dpost then dpre. */
kernel void cd_prep_bwd_sums(global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw,
                             ulong k_raw_off, global const float *qw, ulong qw_off, global const float *kw,
                             ulong kw_off, global const float *proj_q, ulong pq_off, global const float *proj_kv,
                             ulong pkv_off, global const float *rope_cos, ulong rc_off, global const float *rope_sin,
                             ulong rs_off, global const float *inv_rms, ulong inv_off, global const cd_sstore_t *grad_q,
                             ulong gq_off, global const cd_sstore_t *grad_k, ulong gk_off,
                             global const cd_sstore_t *grad_k2, ulong gk2_off, global const float *grad_infl,
                             ulong gi_off, global float *dgi, global float *part, ulong N, uint H, ulong B,
                             float k_scale, uint flags) {
  ulong b, n;
  uint h;
  if (!cd_pass1_item(N, B, H, &b, &n, &h)) return;
  const ulong tok = b * N + n, BN = B * N, BHN = B * H * N;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gi = (flags & CD_F_GI) != 0;
  const int al = (flags & CD_F_ALIGNED) != 0, has_g2 = CD_G2;
  const float irq = inv_rms[inv_off + tok], irk = inv_rms[inv_off + BN + tok];
  const ulong row0 = (tok * H + h) * CD_D, grow0 = (b * H + h) * CD_D * N + n;
  const uint c0 = h * CD_D;
  float acc[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float4 gq = (float4)(0.0f), gk = (float4)(0.0f);
#define CD_SUMS_LOADS(u)                                                                   \
  const float4 xq = CD_LD4(q_raw, q_raw_off + row0 + 4 * (u), al);                         \
  const float4 xk = CD_LD4(k_raw, k_raw_off + row0 + 4 * (u), al);                         \
  const float4 wq = CD_LDF4(qw, qw_off + c0 + 4 * (u), al);                                \
  const float4 wk = CD_LDF4(kw, kw_off + c0 + 4 * (u), al);                                \
  if (has_gq) gq = cd_grad4(grad_q, gq_off + grow0 + 4 * (u) * N, N);                      \
  if (has_gk) gk = cd_grad4(grad_k, gk_off + grow0 + 4 * (u) * N, N);                      \
  if (has_gk && has_g2) gk += cd_grad4(grad_k2, gk2_off + grow0 + 4 * (u) * N, N);
  {
    const cd_m4 Mq = cd_load_m4(proj_q + pq_off + tok * 16, al), Mk = cd_load_m4(proj_kv + pkv_off + tok * 16, al);
#pragma unroll 2
    for (uint u = 0; u < CD_DH / 4; u++) {
      CD_SUMS_LOADS(u);
      cd_sums_unit(xq, xk, wq, wk, gq, gk, irq, irk, 1, Mq, Mk, k_scale, has_gi, acc);
    }
  }
#pragma unroll 2
  for (uint u = CD_DH / 4; u < CD_G4; u++) {
    CD_SUMS_LOADS(u);
    const ulong rrow = n * CD_DH + (4 * u - CD_DH);
    cd_m4 R;
    R.r0 = CD_LDF4(rope_cos, rc_off + rrow, al);
    R.r1 = CD_LDF4(rope_sin, rs_off + rrow, al);
    R.r2 = R.r3 = (float4)(0.0f);
    cd_sums_unit(xq, xk, wq, wk, gq, gk, irq, irk, 0, R, R, k_scale, has_gi, acc);
  }
#undef CD_SUMS_LOADS
  const ulong o = (b * H + h) * N + n;
  float sk = acc[1];
  if (has_gi) {
    const float sp = acc[2], so = acc[3], gi = grad_infl[gi_off + o];
    const float cpre = fmax(sp, 1e-12f), cpost = fmax(so, 1e-12f);
    const float vpo = so > 1e-12f ? gi / cpre : 0.0f;
    const float vpr = sp > 1e-12f ? -gi * cpost / (cpre * cpre) : 0.0f;
    dgi[o] = vpo;
    dgi[BHN + o] = vpr;
    sk = fma(vpo, acc[4], fma(vpr, acc[5], sk));
  }
  part[o] = acc[0];
  part[BHN + o] = sk;
}

/* Pass 1 from the forward's outputs q = T relu(a_q), k = T kn and inflation_sq = cl(post) / cl(pre) (cl(x) =
 * max(x, 1e-12)), in cd_prep_bwd_sums's shape and with its outputs: since x w = a / ir and [a > 0] a = relu(a),
 *   share(S_q) = (1 / ir_q) sum_d g_q . q
 *   share(S_k) = (1 / ir_k) (sum_d g_k . k + 2 dpost post + 2 dpre pre)
 * with post = sum_d k^2 and cl(pre) = cl(post) / inflation_sq, so dpost = gi [post > 1e-12] inflation_sq / cl(post)
 * and dpre = -gi inflation_sq^2 / cl(post) [pre > 1e-12]. pre > 1e-12 is taken as cl(pre) > 1e-12 (1 + 1e-6): the
 * quotient carries the rounding of two divisions, and a clamped pre must not count as unclamped. Every read runs
 * along the tokens: no camera matrix, RoPE table, norm weight or raw input is read.
 *
 * cd_sums_out_end: the end of both kernels for one (b, h, n): dpost, dpre and the head's shares of S_q and S_k from
 * the token's dot products sq = g_q . q, sk = g_k . k and post = |k|^2 over the head's channels. */
inline void cd_sums_out_end(float sq, float sk, float post, ulong o, ulong tok, ulong BN, ulong BHN, int has_gi,
                            global const float *inv_rms, ulong inv_off, global const float *infl, ulong infl_off,
                            global const float *grad_infl, ulong gi_off, global float *dgi, global float *part) {
  if (has_gi) {
    const float gi = grad_infl[gi_off + o], r = infl[infl_off + o], cpost = fmax(post, 1e-12f);
    const int pre_pos = cpost / r > 1.000001e-12f;
    const float vpo = post > 1e-12f ? gi * r / cpost : 0.0f;
    const float vpr = pre_pos ? -gi * r * r / cpost : 0.0f;
    dgi[o] = vpo;
    dgi[BHN + o] = vpr;
    /* 2 dpost post + 2 dpre pre, pre = cl(post) / r where it counts */
    sk = fma(2.0f * vpo, post, sk);
    if (pre_pos) sk = fma(2.0f * vpr, cpost / r, sk);
  }
  part[o] = sq / inv_rms[inv_off + tok];
  part[BHN + o] = sk / inv_rms[inv_off + BN + tok];
}

#define CD_SUMS_OUT_ARGS                                                                                              \
  global const float *inv_rms, ulong inv_off, global const cd_sstore_t *q_out, ulong q_off,                           \
      global const cd_sstore_t *k_out, ulong k_off, global const cd_sstore_t *grad_q, ulong gq_off,                    \
      global const cd_sstore_t *grad_k, ulong gk_off, global const cd_sstore_t *grad_k2, ulong gk2_off,                \
      global const float *infl, ulong infl_off, global const float *grad_infl, ulong gi_off, global float *dgi,      \
      global float *part, ulong N, uint H, ulong B, uint flags

/* One work-item per (b, n, h), as cd_prep_bwd_sums. */
kernel void cd_prep_bwd_sums_out(CD_SUMS_OUT_ARGS) {
  ulong b, n;
  uint h;
  if (!cd_pass1_item(N, B, H, &b, &n, &h)) return;
  const ulong BN = B * N, BHN = B * H * N, g0 = (b * H + h) * CD_D * N + n;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gi = (flags & CD_F_GI) != 0;
  const int has_g2 = CD_G2;
  float sq = 0.0f, sk = 0.0f, post = 0.0f;
  if (has_gq) {
#pragma unroll 8
    for (uint d = 0; d < CD_D; d++)
      sq = fma(CD_SLOAD(grad_q, gq_off + g0 + d * N), CD_SLOAD(q_out, q_off + g0 + d * N), sq);
  }
  if (has_gk || has_gi) {
#pragma unroll 8
    for (uint d = 0; d < CD_D; d++) {
      const float k = CD_SLOAD(k_out, k_off + g0 + d * N);
      if (has_gk) {
        float g = CD_SLOAD(grad_k, gk_off + g0 + d * N);
        if (has_g2) g += CD_SLOAD(grad_k2, gk2_off + g0 + d * N);
        sk = fma(g, k, sk);
      }
      post = fma(k, k, post);
    }
  }
  cd_sums_out_end(sq, sk, post, (b * H + h) * N + n, b * N + n, BN, BHN, has_gi, inv_rms, inv_off, infl, infl_off,
                  grad_infl, gi_off, dgi, part);
}

/* One work-item per (b, 4 consecutive tokens, h), 16-byte loads along the tokens: for N a multiple of 4 and the
 * offsets of q, k, grad_q, grad_k[, grad_k2] multiples of 4. The same sums in the same order as cd_prep_bwd_sums_out
 * (bit-identical results). */
kernel void cd_prep_bwd_sums_out4(CD_SUMS_OUT_ARGS) {
  ulong b, n4;
  uint h;
  if (!cd_pass1_item(N / 4, B, H, &b, &n4, &h)) return;
  const ulong BN = B * N, BHN = B * H * N, n = 4 * n4, g0 = (b * H + h) * CD_D * N + n;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gi = (flags & CD_F_GI) != 0;
  const int has_g2 = CD_G2;
  float4 sq = (float4)(0.0f), sk = sq, post = sq;
  if (has_gq) {
#pragma unroll 4
    for (uint d = 0; d < CD_D; d++)
      sq = fma(CD_SLD4(grad_q, gq_off + g0 + d * N, 1), CD_SLD4(q_out, q_off + g0 + d * N, 1), sq);
  }
  if (has_gk || has_gi) {
#pragma unroll 4
    for (uint d = 0; d < CD_D; d++) {
      const float4 k = CD_SLD4(k_out, k_off + g0 + d * N, 1);
      if (has_gk) {
        float4 g = CD_SLD4(grad_k, gk_off + g0 + d * N, 1);
        if (has_g2) g += CD_SLD4(grad_k2, gk2_off + g0 + d * N, 1);
        sk = fma(g, k, sk);
      }
      post = fma(k, k, post);
    }
  }
  const ulong o = (b * H + h) * N + n, tok = b * N + n;
  cd_sums_out_end(sq.x, sk.x, post.x, o, tok, BN, BHN, has_gi, inv_rms, inv_off, infl, infl_off, grad_infl, gi_off,
                  dgi, part);
  cd_sums_out_end(sq.y, sk.y, post.y, o + 1, tok + 1, BN, BHN, has_gi, inv_rms, inv_off, infl, infl_off, grad_infl,
                  gi_off, dgi, part);
  cd_sums_out_end(sq.z, sk.z, post.z, o + 2, tok + 2, BN, BHN, has_gi, inv_rms, inv_off, infl, infl_off, grad_infl,
                  gi_off, dgi, part);
  cd_sums_out_end(sq.w, sk.w, post.w, o + 3, tok + 3, BN, BHN, has_gi, inv_rms, inv_off, infl, infl_off, grad_infl,
                  gi_off, dgi, part);
}

/* Global: B * N, at least N * D/8 (rounded up). S (2, B, N) = part (2, B, H, N) summed over h in order; the token's
 * camera matrices by rows into pm (cd_load_pm's layout), and the RoPE tables after them, (D/8, N) float4 each, cos
 * then sin; al: proj_q, proj_kv and the tables start at multiples of 4. */
kernel void cd_prep_bwd_ssum(global const float *part, global float *S, global const float *proj_q, ulong pq_off,
                             global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,
                             global const float *rope_sin, ulong rs_off, global float4 *pm, uint al, ulong N, uint H,
                             ulong B) {
  const ulong i = get_global_id(0), BN = B * N;
  if (i < N * (CD_G4 / 2)) { /* the RoPE tables by 4-channel unit u across the tokens: cos, then sin */
    const ulong n = i % N, u = i / N;
    global float4 *pr = pm + 8 * BN + u * N + n;
    pr[0] = CD_LDF4(rope_cos, rc_off + n * CD_DH + 4 * u, al);
    pr[(CD_G4 / 2) * N] = CD_LDF4(rope_sin, rs_off + n * CD_DH + 4 * u, al);
  }
  if (i >= BN) return;
  {
    const cd_m4 Mq = cd_load_m4(proj_q + pq_off + i * 16, al), Mk = cd_load_m4(proj_kv + pkv_off + i * 16, al);
    pm[i] = Mq.r0, pm[BN + i] = Mq.r1, pm[2 * BN + i] = Mq.r2, pm[3 * BN + i] = Mq.r3;
    pm[4 * BN + i] = Mk.r0, pm[5 * BN + i] = Mk.r1, pm[6 * BN + i] = Mk.r2, pm[7 * BN + i] = Mk.r3;
  }
  const ulong b = i / N, n = i % N, BHN = BN * H;
  float sq = 0.0f, sk = 0.0f;
  for (uint h = 0; h < H; h++) {
    const ulong o = (b * H + h) * N + n;
    sq += part[o];
    sk += part[BHN + o];
  }
  S[i] = sq;
  S[BN + i] = sk;
}

/* Pass 2's RoPE coefficients of 4-channel unit g (second half) of token n into M.r0 (cos) and M.r1 (sin), from
 * cd_prep_bwd_ssum's planar copy (uses pm, BN, N in scope) */
#define CD_LOAD_ROPE(M)                                                                                              \
  do {                                                                                                               \
    global const float4 *pr_ = pm + 8 * BN + (g - CD_G4 / 2) * N + n;                                                \
    (M).r0 = pr_[0];                                                                                                 \
    (M).r1 = pr_[(CD_G4 / 2) * N];                                                                                   \
  } while (0)

/* The arguments of both forms of pass 2 */
#define CD_GRADS_ARGS                                                                                                \
  global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,                 \
      global const float *qw, ulong qw_off, global const float *kw, ulong kw_off, global const float *proj_q,       \
      ulong pq_off, global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,          \
      global const float *rope_sin, ulong rs_off, global const float *inv_rms, ulong inv_off,                       \
      global const cd_sstore_t *grad_q, ulong gq_off, global const cd_sstore_t *grad_k, ulong gk_off,                  \
      global const cd_sstore_t *grad_v, ulong gv_off, global const cd_sstore_t *grad_k2, ulong gk2_off,                \
      global const cd_sstore_t *grad_v2, ulong gv2_off, global const float *dgi, global const float *S,               \
      global const float4 *pm,                                                                                       \
      global cd_store_t *dq_raw, ulong dq_off, global cd_store_t *dk_raw, ulong dk_off, global cd_store_t *dv_raw,   \
      ulong dv_off, global float *part_w, ulong N, uint H, ulong B, float k_scale, uint flags

/* Global: H * NU * J work-groups of CD_TT * CD_UW (NU = D/4 / CD_UW; group = (j * NU + v) * H + h): work-group
 * (h, v, j) takes units [v CD_UW, (v + 1) CD_UW) of head h over tiles of CD_TT tokens j, j + J, ...; work-item
 * (unit, token) = (v CD_UW + lid / CD_TT, lid % CD_TT). The norm-weight terms stay in registers across the tiles
 * and are summed over the tokens in order at the end: part_w has J rows of 2 C floats, row j's channels of
 * (h, v) written by work-group (h, v, j). */
kernel void cd_prep_bwd_grads(CD_GRADS_ARGS) {
  local float rw[2][4 * CD_UW][CD_TT + 1];
  const uint NU = CD_G4 / CD_UW, ug0 = (uint)((get_group_id(0) / H) % NU) * CD_UW;
  const uint lid = get_local_id(0), t = lid % CD_TT, g = ug0 + lid / CD_TT;
  const int first = 4 * g < CD_DH;
  const uint C = H * CD_D, h = (uint)(get_group_id(0) % H);
  const ulong J = get_num_groups(0) / (H * NU), j = get_group_id(0) / (H * NU);
  const ulong tpr = (N + CD_TT - 1) / CD_TT, total = B * tpr, BN = B * N, BHN = B * H * N;
  const int has_gq = (flags & CD_F_GQ) != 0, has_gk = (flags & CD_F_GK) != 0, has_gv = (flags & CD_F_GV) != 0;
  const int has_gi = (flags & CD_F_GI) != 0, al = (flags & CD_F_ALIGNED) != 0, has_g2 = CD_G2;
  const uint c = h * CD_D + 4 * g;
  const float4 wq = CD_LDF4(qw, qw_off + c, al), wk = CD_LDF4(kw, kw_off + c, al);
  float4 pwq = (float4)(0.0f), pwk = (float4)(0.0f);

  for (ulong tile = j; tile < total; tile += J) {
    const ulong b = tile / tpr, n0 = (tile % tpr) * CD_TT;
    const int tok_ok = n0 + t < N;
    const ulong n = n0 + t, tok = b * N + n;
    /* the token's inverse RMS values, and its camera matrices (camera half) or this unit's RoPE coefficients
     * (second half: cos in Mq.r0, sin in Mq.r1) */
    float irq = 0.0f, irk = 0.0f;
    cd_m4 Mq, Mk;
    Mq.r0 = Mq.r1 = Mq.r2 = Mq.r3 = Mk.r0 = Mk.r1 = Mk.r2 = Mk.r3 = (float4)(0.0f);
    if (tok_ok) {
      irq = inv_rms[inv_off + tok];
      irk = inv_rms[inv_off + BN + tok];
      if (first) {
        Mq = cd_load_pm(pm, 0, tok, BN);
        Mk = cd_load_pm(pm, 1, tok, BN);
      } else {
        CD_LOAD_ROPE(Mq);
      }
    }
    float4 xq = (float4)(0.0f), xk = xq, gq = xq, gk = xq, gv = xq;
    float dpost = 0.0f, dpre = 0.0f, Sq = 0.0f, Sk = 0.0f;
    const ulong row = (tok * H + h) * CD_D + 4 * g;
    if (tok_ok) {
      const ulong grow = ((b * H + h) * CD_D + 4 * g) * N + n;
      xq = CD_LD4(q_raw, q_raw_off + row, al);
      xk = CD_LD4(k_raw, k_raw_off + row, al);
      if (has_gq) gq = cd_grad4(grad_q, gq_off + grow, N);
      if (has_gk) gk = cd_grad4(grad_k, gk_off + grow, N);
      if (has_gk && has_g2) gk += cd_grad4(grad_k2, gk2_off + grow, N);
      if (has_gv) gv = cd_grad4(grad_v, gv_off + grow, N);
      if (has_gv && has_g2) gv += cd_grad4(grad_v2, gv2_off + grow, N);
      if (has_gi) {
        const ulong o = (b * H + h) * N + n;
        dpost = dgi[o];
        dpre = dgi[BHN + o];
      }
      Sq = S[tok];
      Sk = S[BN + tok];
    }
    const float4 aq = xq * irq * wq, ak = xk * irk * wk;
    const float4 kn = fmax(ak, 0.0f) * k_scale;
    if (has_gi) gk = fma(2.0f * CD_TK(kn), (float4)(dpost), gk);
    const float4 daq = select((float4)(0.0f), CD_TQ(gq), isgreater(aq, (float4)(0.0f)));
    const float4 dak = select((float4)(0.0f), fma(2.0f * kn, (float4)(dpre), CD_TKT(gk)) * k_scale,
                              isgreater(ak, (float4)(0.0f)));
    if (tok_ok) {
      const float cq = irq * irq * irq / (float)C, ck = irk * irk * irk / (float)C;
      CD_ST4(dq_raw, dq_off + row, fma(-cq * xq, (float4)(Sq), daq * irq * wq), al);
      CD_ST4(dk_raw, dk_off + row, fma(-ck * xk, (float4)(Sk), dak * irk * wk), al);
      CD_ST4(dv_raw, dv_off + row, CD_TKT(gv), al);
    }
    pwq = fma(daq * xq, (float4)(irq), pwq);
    pwk = fma(dak * xk, (float4)(irk), pwk);
  }
  /* the norm-weight terms summed over the work-items' tokens, then over t in order */
  const uint gl = g - ug0;
  rw[0][4 * gl][t] = pwq.x, rw[0][4 * gl + 1][t] = pwq.y, rw[0][4 * gl + 2][t] = pwq.z, rw[0][4 * gl + 3][t] = pwq.w;
  rw[1][4 * gl][t] = pwk.x, rw[1][4 * gl + 1][t] = pwk.y, rw[1][4 * gl + 2][t] = pwk.z, rw[1][4 * gl + 3][t] = pwk.w;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = lid; w < 8 * CD_UW; w += get_local_size(0)) {
    const uint which = w / (4 * CD_UW), r = w % (4 * CD_UW);
    float sum = 0.0f;
    for (uint u = 0; u < CD_TT; u++) sum += rw[which][r][u];
    part_w[j * 2 * C + which * C + h * CD_D + 4 * ug0 + r] = sum;
  }
}

/* Pass 2's result for one 4-channel unit of one token, for tensor `kind` (0: dq_raw, 1: dk_raw, 2: dv_raw): x = the
 * raw input row (q, k), g = its upstream gradient, ir = the token's inverse RMS value, Sx = its S, M = the token's
 * camera matrix for this tensor (first) or the unit's RoPE coefficients (cos in M.r0, sin in M.r1). Adds the unit's
 * norm-weight term to *pw (q, k):
 *   q: da = [a > 0] T^T g;  k: da = [a > 0] k_scale (T^T (g + 2 dpost T kn) + 2 dpre kn);  dx = da ir w - ir^3/C x S
 *   v: dv = T^T g
 * cd_grad_unit serves cd_prep_bwd_grads_kind only. cd_prep_bwd_grads keeps the same arithmetic written out for its
 * three tensors, which its compiled form needs: through three calls of this helper it runs slower. */
inline float4 cd_grad_unit(uint kind, int first, cd_m4 M, float4 x, float4 g, float4 w, float ir, float Sx,
                           float dpost, float dpre, float k_scale, int has_gi, float C, float4 *pw) {
  if (kind == 2) return first ? cd_cam_t(M, g) : cd_rope_t(g, M.r0, M.r1);
  const float4 a = x * ir * w;
  const float4 kn = fmax(a, 0.0f) * k_scale;
  if (kind == 1 && has_gi) g = fma(2.0f * (first ? cd_cam(M, kn) : cd_rope(kn, M.r0, M.r1)), (float4)(dpost), g);
  float4 da = first ? cd_cam_t(M, g) : cd_rope_t(g, M.r0, M.r1);
  if (kind == 1) da = fma(2.0f * kn, (float4)(dpre), da) * k_scale;
  da = select((float4)(0.0f), da, isgreater(a, (float4)(0.0f)));
  *pw = fma(da * x, (float4)(ir), *pw);
  return fma(-(ir * ir * ir / C) * x, (float4)(Sx), da * ir * w);
}

/* Pass 2 with one tensor per work-group: cd_prep_bwd_grads's arguments and results, 3 * H * NU * J work-groups
 * (group = ((j * NU + v) * H + h) * 3 + kind) of CD_TT * CD_UW work-items; work-group (kind, h, v, j) writes dq_raw
 * (kind 0), dk_raw (1) or dv_raw (2) over cd_prep_bwd_grads's tiles. Each work-item then holds one camera matrix and
 * one input row (fewer registers than cd_prep_bwd_grads), so more work-groups fit a compute unit: the faster form in
 * 16-bit storage, the slower one in f32 (option "prep_backward" TW chooses; docs/tuning.md). */
kernel void cd_prep_bwd_grads_kind(CD_GRADS_ARGS) {
  local float rw[4 * CD_UW][CD_TT + 1];
  const uint kind = get_group_id(0) % 3; /* uniform over the work-group */
  const ulong grp = get_group_id(0) / 3, ngrp = get_num_groups(0) / 3;
  const uint NU = CD_G4 / CD_UW, ug0 = (uint)((grp / H) % NU) * CD_UW;
  const uint lid = get_local_id(0), t = lid % CD_TT, g = ug0 + lid / CD_TT;
  const int first = 4 * g < CD_DH;
  const uint C = H * CD_D, h = (uint)(grp % H);
  const ulong J = ngrp / (H * NU), j = grp / (H * NU);
  const ulong tpr = (N + CD_TT - 1) / CD_TT, total = B * tpr, BN = B * N, BHN = B * H * N;
  const int al = (flags & CD_F_ALIGNED) != 0, has_gi = kind == 1 && (flags & CD_F_GI) != 0;
  const int has_g = (flags & (kind == 0 ? CD_F_GQ : kind == 1 ? CD_F_GK : CD_F_GV)) != 0, has_g2 = CD_G2 && kind;
  global const cd_store_t *x_raw = kind == 0 ? q_raw + q_raw_off : k_raw + k_raw_off;
  global const cd_sstore_t *grad = kind == 0 ? grad_q + gq_off : kind == 1 ? grad_k + gk_off : grad_v + gv_off;
  global const cd_sstore_t *grad2 = kind == 1 ? grad_k2 + gk2_off : grad_v2 + gv2_off;
  global cd_store_t *dst = kind == 0 ? dq_raw + dq_off : kind == 1 ? dk_raw + dk_off : dv_raw + dv_off;
  const uint c = h * CD_D + 4 * g;
  const float4 w = kind == 0 ? CD_LDF4(qw, qw_off + c, al) : CD_LDF4(kw, kw_off + c, al);
  float4 pw = (float4)(0.0f);

  for (ulong tile = j; tile < total; tile += J) {
    const ulong b = tile / tpr, n0 = (tile % tpr) * CD_TT;
    const int tok_ok = n0 + t < N;
    const ulong n = n0 + t, tok = b * N + n;
    float ir = 0.0f, dpost = 0.0f, dpre = 0.0f, Sx = 0.0f;
    cd_m4 M;
    M.r0 = M.r1 = M.r2 = M.r3 = (float4)(0.0f);
    float4 x = (float4)(0.0f), gr = x;
    const ulong row = (tok * H + h) * CD_D + 4 * g;
    if (tok_ok) {
      if (first) {
        M = cd_load_pm(pm, kind != 0, tok, BN);
      } else {
        CD_LOAD_ROPE(M);
      }
      const ulong grow = ((b * H + h) * CD_D + 4 * g) * N + n;
      if (has_g) gr = cd_grad4(grad, grow, N);
      if (has_g && has_g2) gr += cd_grad4(grad2, grow, N);
      if (kind < 2) {
        ir = inv_rms[inv_off + kind * BN + tok];
        x = CD_LD4(x_raw, row, al);
        Sx = S[kind * BN + tok];
      }
      if (has_gi) {
        const ulong o = (b * H + h) * N + n;
        dpost = dgi[o];
        dpre = dgi[BHN + o];
      }
    }
    const float4 out = cd_grad_unit(kind, first, M, x, gr, w, ir, Sx, dpost, dpre, kind == 1 ? k_scale : 1.0f,
                                    has_gi, (float)C, &pw);
    if (tok_ok) CD_ST4(dst, row, out, al);
  }
  if (kind == 2) return; /* uniform: dv has no norm weight */
  /* the norm-weight terms summed over the work-items' tokens, then over t in order */
  const uint gl = g - ug0;
  rw[4 * gl][t] = pw.x, rw[4 * gl + 1][t] = pw.y, rw[4 * gl + 2][t] = pw.z, rw[4 * gl + 3][t] = pw.w;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint r = lid; r < 4 * CD_UW; r += get_local_size(0)) {
    float sum = 0.0f;
    for (uint u = 0; u < CD_TT; u++) sum += rw[r][u];
    part_w[j * 2 * C + kind * C + h * CD_D + 4 * ug0 + r] = sum;
  }
}

/* The norm-weight gradients: column c of the (rows, 2 C) partials summed over the rows in a fixed order. Local size
 * (W, R), W, R <= 32: lane r takes rows r, r + R, ... in order, then the R lane sums in order. */
kernel void cd_prep_bwd_fused_reduce(global const float *part_w, ulong rows, uint C, global float *dqw, ulong dqw_off,
                                     global float *dkw, ulong dkw_off) {
  local float red[32][33];
  const uint lx = get_local_id(0), ly = get_local_id(1), R = get_local_size(1);
  const ulong i = get_global_id(0);
  float s = 0.0f;
  if (i < 2 * (ulong)C)
    for (ulong u = ly; u < rows; u += R) s += part_w[u * 2 * C + i];
  red[ly][lx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (ly == 0 && i < 2 * (ulong)C) {
    float tsum = 0.0f;
    for (uint r = 0; r < R; r++) tsum += red[r][lx];
    if (i < C) dqw[dqw_off + i] = tsum;
    else dkw[dkw_off + i - C] = tsum;
  }
}
