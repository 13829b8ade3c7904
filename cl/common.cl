/* Prepended to every camdelta kernel source: storage-type helpers.
 *
 * CD_SOFT_FMA=1 (set by the host where the device reports no fused multiply-add in hardware, CL_FP_FMA absent):
 * there fma() is an exact software routine, tens of times slower than a multiply and an add, and the kernels' fma()
 * becomes mad(), a multiply and an add. Every sum keeps its order; the results round differently from a fused
 * multiply-add, well inside the bounds of docs/math.md §5. */
#if defined(CD_SOFT_FMA) && CD_SOFT_FMA
#define fma(a, b, c) mad((a), (b), (c))
#endif
/* CD_DTYPE (build option): 0 = f32, 1 = f16, 2 = bf16 (16-bit storage).
 * CD_SDTYPE (build option, default CD_DTYPE): the storage of prep's (B, H, D, N) side (its outputs q, k, v, their
 * gradients and the saved q, k its backward reads), where it differs from the raw activations': the camera branch
 * runs prep on 16-bit activations with the scan's f32 on that side.
 * Arithmetic is always f32. f16 goes through vload_half / vstore_half_rte (core OpenCL C 1.2, no cl_khr_fp16); bf16
 * is the upper half of an f32, rounded to nearest even on store (NaN kept quiet). */
#ifndef CD_DTYPE
#define CD_DTYPE 0
#endif
#ifndef CD_SDTYPE
#define CD_SDTYPE CD_DTYPE
#endif

inline ushort cd_to_bf16(float x) {
  uint u = as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

/* Per storage type t (0, 1, 2): CD_T_t the element type, CD_LD_t / CD_ST_t one element, CD_LD4_t / CD_ST4_t four
 * consecutive ones as a float4 (al: the element index is a multiple of 4, one 16- or 8-byte access). */
#define CD_T_0 float
#define CD_T_1 half
#define CD_T_2 ushort
#define CD_LD_0(p, i) ((p)[i])
#define CD_ST_0(p, i, x) ((p)[i] = (x))
#define CD_LD_1(p, i) vload_half((i), (p))
#define CD_ST_1(p, i, x) vstore_half_rte((x), (i), (p))
#define CD_LD_2(p, i) as_float(((uint)(p)[i]) << 16)
#define CD_ST_2(p, i, x) ((p)[i] = cd_to_bf16(x))
#define CD_LD4_0(p, i, al) ((al) ? *(global const float4 *)((p) + (i)) : vload4(0, (p) + (i)))
#define CD_ST4_0(p, i, x, al)                    \
  do {                                           \
    if (al) *(global float4 *)((p) + (i)) = (x); \
    else vstore4((x), 0, (p) + (i));             \
  } while (0)
#define CD_LD4_1(p, i, al) vload_half4(0, (p) + (i))
#define CD_ST4_1(p, i, x, al) vstore_half4_rte((x), 0, (p) + (i))
#define CD_LD4_2(p, i, al) \
  as_float4(convert_uint4((al) ? *(global const ushort4 *)((p) + (i)) : vload4(0, (p) + (i))) << 16)
#define CD_ST4_2(p, i, val, al)                                                                              \
  do {                                                                                                       \
    const float4 x_ = (val);                                                                                 \
    const ushort4 u_ = (ushort4)(cd_to_bf16(x_.x), cd_to_bf16(x_.y), cd_to_bf16(x_.z), cd_to_bf16(x_.w)); \
    if (al) *(global ushort4 *)((p) + (i)) = u_;                                                             \
    else vstore4(u_, 0, (p) + (i));                                                                          \
  } while (0)
#define CD_CAT_(a, b) a##b
#define CD_CAT(a, b) CD_CAT_(a, b)

/* The activations' storage (CD_DTYPE) and prep's (B, H, D, N) side (CD_SDTYPE). */
typedef CD_CAT(CD_T_, CD_DTYPE) cd_store_t;
#define CD_LOAD(p, i) CD_CAT(CD_LD_, CD_DTYPE)(p, i)
#define CD_STORE(p, i, x) CD_CAT(CD_ST_, CD_DTYPE)(p, i, x)
#define CD_LD4(p, i, al) CD_CAT(CD_LD4_, CD_DTYPE)(p, i, al)
#define CD_ST4(p, i, x, al) CD_CAT(CD_ST4_, CD_DTYPE)(p, i, x, al)
typedef CD_CAT(CD_T_, CD_SDTYPE) cd_sstore_t;
#define CD_SLOAD(p, i) CD_CAT(CD_LD_, CD_SDTYPE)(p, i)
#define CD_SSTORE(p, i, x) CD_CAT(CD_ST_, CD_SDTYPE)(p, i, x)
#define CD_SLD4(p, i, al) CD_CAT(CD_LD4_, CD_SDTYPE)(p, i, al)

/* The leading parameters of the prep backward's per-head passes (cd_prep_bwd_heads in prep_backward.cl,
 * cd_prep_bwd_cpu in prep_cpu.cl): the forward's inputs, the inverse RMS per token and the upstream gradients, each
 * buffer with its element offset. */
#define CD_PREP_BWD_INPUTS                                                                                        \
  global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,               \
      global const cd_store_t *v_raw, ulong v_raw_off, global const float *qw, ulong qw_off,                      \
      global const float *kw, ulong kw_off, global const float *proj_q, ulong pq_off,                             \
      global const float *proj_kv, ulong pkv_off, global const float *rope_cos, ulong rc_off,                     \
      global const float *rope_sin, ulong rs_off, global const float *inv_rms, ulong inv_off,                     \
      global const cd_sstore_t *grad_q, ulong gq_off, global const cd_sstore_t *grad_k, ulong gk_off,             \
      global const cd_sstore_t *grad_v, ulong gv_off, global const float *grad_infl, ulong gi_off

/* The token kernels' units of a head of CD_D channels (cl/prep.cl, cl/prep_backward.cl, cl/prep_backward_fused.cl,
 * cl/branch.cl): its halves (the camera half, then the RoPE half) and its 4-channel units. */
#define CD_DH (CD_D / 2)
#define CD_G4 (CD_D / 4)

/* Index arithmetic: a kernel that counts its indices from each tensor's offset uses cd_ix, 32 bits where the host
 * builds it with CD_IX32=1 because every such index of the call fits (cheaper arithmetic than 64 bits). */
#ifndef CD_IX32
#define CD_IX32 0
#endif
#if CD_IX32
typedef uint cd_ix;
#else
typedef ulong cd_ix;
#endif

/* Four consecutive f32 values (weights and tables) and a float4's squared norm. */
#define CD_LDF4(p, i, al) ((al) ? *(global const float4 *)((p) + (i)) : vload4(0, (p) + (i)))
inline float cd_sq4(float4 v) { return fma(v.x, v.x, fma(v.y, v.y, fma(v.z, v.z, v.w * v.w))); }

/* The tokens of frame f (docs/math.md §1: token n = f·S + s): the one place the scan kernels learn where a frame
 * starts on the token axis, how many tokens it has, and where its chain (clip) starts and ends.
 *
 * Fixed shape: frame f of (b, h) starts at f·S, has S tokens; the chain of (b, h) is frames 0 .. F−1 and its
 * init/final state is row bh of (B, H, D, D).
 * CD_PACKED (packed clips, docs/math.md §9, B = 1 so bh = h and f is the frame's index in the packed batch): every
 * scan kernel takes two more arguments last, CD_PK_ARGS = `pk, pk_h`: pk holds F + 1 frame offsets (tokens), then
 * per frame (its clip c)·4·H + 1 (first frame of its clip) + 2 (last frame), then clips + 1 clip offsets (frames);
 * pk_h = H. Its init/final state is row c·H + h of (clips, H, D, D); S is then the longest frame (grids) and each
 * frame's own count is cd_frame_len. Per-frame scratch stays (H, F, D, D) by packed frame.
 * CD_PK_CONST=1: the table is a __constant argument (it fits in 64 KiB; every index is uniform per work-group).
 * CD_PACKED=2: every frame has S tokens, so token ranges are computed as for the fixed shape (no table loads in the
 * per-frame kernels) and the table serves the clip bounds only. */
#ifdef CD_PACKED
#if defined(CD_PK_CONST) && CD_PK_CONST /* the table fits the constant buffer (64 KiB): read through it */
#define CD_PK_SPACE __constant
#else
#define CD_PK_SPACE __global
#endif
#define CD_PK_ARGS , CD_PK_SPACE const long *pk, uint pk_h
#if CD_PACKED == 2 /* every frame has S tokens (clips of one resolution): frame starts as for the fixed shape */
#define cd_frame_start(f, S) ((ulong)(f) * (S))
#define cd_frame_len(f, S) (S)
#else
#define cd_frame_start(f, S) ((ulong)pk[f])
#define cd_frame_len(f, S) ((uint)(pk[(f) + 1] - pk[f]))
#endif
#define cd_frame_first(f, F) ((pk[(ulong)(F) + 1 + (f)] & 1) != 0)
#define cd_frame_last(f, F) ((pk[(ulong)(F) + 1 + (f)] & 2) != 0)
#define cd_state_row(bh, f, F) ((ulong)(pk[(ulong)(F) + 1 + (f)] >> 2) + (bh))
#define cd_beta_base(bh, bhf, f, S, N) ((bh) * (ulong)(N) + cd_frame_start(f, S))
/* Chain gb = c·H + h: its first frame's row h·F + co[c] in the (H, F) per-frame buffers, and its frame count. */
inline ulong cd_chain_rows(CD_PK_SPACE const long *pk, uint H, uint F, ulong gb, uint *n) {
  const ulong c = gb / H, h = gb % H;
  const long f0 = pk[2 * (ulong)F + 1 + c];
  *n = (uint)(pk[2 * (ulong)F + 2 + c] - f0);
  return h * F + (ulong)f0;
}
#define cd_chain(gb, F, n) cd_chain_rows(pk, pk_h, F, gb, n)
#else
#define CD_PK_ARGS
inline ulong cd_frame_start(uint f, uint S) { return (ulong)f * S; }
#define cd_frame_len(f, S) (S)
#define cd_frame_first(f, F) ((f) == 0)
#define cd_frame_last(f, F) ((f) == (F) - 1)
#define cd_state_row(bh, f, F) (bh)
#define cd_beta_base(bh, bhf, f, S, N) ((bhf) * (ulong)(S))
#define cd_chain(gb, F, n) (*(n) = (F), (ulong)(gb) * (F))
#endif

/* The output transform of one 4-channel unit v of a token (docs/math.md §8.5): the one statement of its arithmetic
 * for cl/branch.cl and cl/gemm_tc.cl's cd_apply_ot_tc, whose y agree bit for bit. CD_OT_CAM: the camera half o = P·v
 * (P's rows p0 … p3, each dot product fma'd from x to w onto 0); CD_OT_ROPE: the RoPE half
 * o[r] = v[r]·cos[r] − v[r^1]·sin[r]. The backward's RoPE half is the same with each pair's sines swapped (sn.yxwz):
 * g[r]·cos[r] − g[r^1]·sin[r^1]. Macros, not functions: common.cl is part of every tensor-core program, whose device
 * code stays as it was without a function per call. */
#define CD_OT_CAM(o, p0, p1, p2, p3, v)                                                      \
  ((o).x = fma((p0).w, (v).w, fma((p0).z, (v).z, fma((p0).y, (v).y, fma((p0).x, (v).x, 0.0f)))), \
   (o).y = fma((p1).w, (v).w, fma((p1).z, (v).z, fma((p1).y, (v).y, fma((p1).x, (v).x, 0.0f)))), \
   (o).z = fma((p2).w, (v).w, fma((p2).z, (v).z, fma((p2).y, (v).y, fma((p2).x, (v).x, 0.0f)))), \
   (o).w = fma((p3).w, (v).w, fma((p3).z, (v).z, fma((p3).y, (v).y, fma((p3).x, (v).x, 0.0f)))))
#define CD_OT_ROPE(o, v, c, sn)                                                                        \
  ((o).x = fma(-(v).y, (sn).x, (v).x * (c).x), (o).y = fma(-(v).x, (sn).y, (v).y * (c).y),           \
   (o).z = fma(-(v).w, (sn).z, (v).z * (c).z), (o).w = fma(-(v).z, (sn).w, (v).w * (c).w))

/* One output frame of the short conv (docs/math.md §8.2) from a sliding window of frames t-3 .. t+3 in vector lanes,
 * one channel per lane: the one statement of its arithmetic for cl/short_conv.cl and cl/branch_cpu.cl, whose outputs
 * agree bit for bit. tap[0 .. 3] = w0 .. w3; the look-ahead taps count where frame t+1 .. t+3 is before e, the end
 * of t's segment (the look-back always counts: frames before the sequence are zeros in the window). */
#define CD_CONV_STEP(acc, tap, xm3, xm2, xm1, x0, xp1, xp2, xp3, t, e) \
  do {                                                                 \
    (acc) = (tap)[0] * (xm3);                                          \
    (acc) = fma((tap)[1], (xm2), (acc));                               \
    (acc) = fma((tap)[2], (xm1), (acc));                               \
    (acc) = fma((tap)[3], (x0), (acc));                                \
    if ((t) + 1 < (e)) (acc) = fma((tap)[2], (xp1), (acc));            \
    if ((t) + 2 < (e)) (acc) = fma((tap)[1], (xp2), (acc));            \
    if ((t) + 3 < (e)) (acc) = fma((tap)[0], (xp3), (acc));            \
  } while (0)

/* The FMA GEMM core of the scan kernels (sequential, chunkwise phases A, B and C, the state summaries): for K
 * reduction steps k, acc[a][c] += X(k, a)·Y(k, c) over the work-item's RM x RN cells. X and Y are function-like
 * macros of the step and the register index that read the kernel's local-memory tiles in its own layout (an item
 * (ir, ic) of a WR x WC grid owning rows ir + WR·a and columns ic + WC·c); the reduction loop is unrolled by 4,
 * the register loops fully. CD_FMA_ZERO clears the accumulators. */
#define CD_FMA_ZERO(acc, RM, RN)                            \
  _Pragma("unroll") for (int a_ = 0; a_ < (RM); a_++)       \
    _Pragma("unroll") for (int c_ = 0; c_ < (RN); c_++) (acc)[a_][c_] = 0.0f
#define CD_FMA_GEMM(acc, RM, RN, K, X, Y)                                                                    \
  _Pragma("unroll 4") for (int k_ = 0; k_ < (int)(K); k_++) {                                              \
    float xr_[RM], yr_[RN];                                                                                 \
    _Pragma("unroll") for (int a_ = 0; a_ < (RM); a_++) xr_[a_] = X(k_, a_);                                \
    _Pragma("unroll") for (int c_ = 0; c_ < (RN); c_++) yr_[c_] = Y(k_, c_);                                \
    _Pragma("unroll") for (int a_ = 0; a_ < (RM); a_++)                                                     \
      _Pragma("unroll") for (int c_ = 0; c_ < (RN); c_++) (acc)[a_][c_] = fma(xr_[a_], yr_[c_], (acc)[a_][c_]); \
  }

/* Every cell (a, c) of a work-item's RM x RN register block (acc[a][c] of CD_FMA_GEMM), both loops unrolled:
 * `CD_FMA_CELLS(a, c, RM, RN) { … }`, the kernel's own epilogue per cell (its row and column from a and c). */
#define CD_FMA_CELLS(a, c, RM, RN) \
  _Pragma("unroll") for (int a = 0; a < (RM); a++) _Pragma("unroll") for (int c = 0; c < (RN); c++)

/* The ddecay kernels' frame (the FMA backward's and the CPU form's, which take the same arguments): work-group bhf
 * = (bh, f), Mp the state frame f's update started from in the scan's direction (via STATE, a CD_STATE_FN; zero: an
 * absent init), Gf frame f's gradient chain matrix. */
#define CD_DDECAY_FRAME(STATE)                                                                                \
  const ulong bhf = get_group_id(0);                                                                          \
  const ulong bh = bhf / F;                                                                                   \
  const uint f = (uint)(bhf % F);                                                                             \
  int zero;                                                                                                   \
  global const float *Mp = STATE(states, st_off, init, init_off, bh, F, reverse ? (int)f : (int)f - 1,        \
                                 reverse ? cd_frame_last(f, F) : cd_frame_first(f, F), has_init, &zero,       \
                                 cd_state_row(bh, f, F));                                                     \
  global const float *Gf = G + G_off + bhf * CD_DD;

/* The parameters of the backward's gradient chain (cd_scan_bwd_chain in scan_backward.cl, cd_cpu_grad_chain in
 * scan_cpu.cl: one launch's arguments for either form, src/scan/chain.c). */
#define CD_GRAD_CHAIN_PARAMS                                                                                      \
  global const float *A, ulong A_off, global const float *W, ulong W_off, global const float *U, ulong U_off,     \
      global float *Z, ulong Z_off, global const float *init, ulong init_off, global const float *gfinal,         \
      ulong gf_off, global float *G, ulong G_off, global float *dinit, ulong di_off, uint F, int reverse,         \
      int recompute, int has_init, int has_gfinal, int has_dinit, uint u0, uint u1, global float *carry CD_PK_ARGS

/* The scan's state matrix with index j of head bh, defined as `name` by the files whose CD_DD is a state's size (the
 * FMA backward's and the CPU forms'): init (its row srow) when is_init, *zero when that init is absent; else
 * states[bh, j] of F per head. */
#define CD_STATE_FN(name)                                                                                          \
  inline global const float *name(global const float *states, ulong st_off, global const float *init,            \
                                  ulong init_off, ulong bh, uint F, int j, int is_init, int has_init, int *zero, \
                                  ulong srow) {                                                                  \
    if (is_init) {                                                                                               \
      *zero = !has_init;                                                                                         \
      return init + init_off + srow * CD_DD;                                                                     \
    }                                                                                                            \
    *zero = 0;                                                                                                   \
    return states + st_off + (bh * F + (uint)j) * CD_DD;                                                         \
  }

/* The FMA gram, the one body of the scan's three FMA gram kernels (cl/scan_chunkwise.cl's phase A,
 * cl/scan_backward.cl's grams, cl/scan_summary.cl's products): over a frame's Sf tokens, KC at a time, STAGE(s0)
 * fills the work-group's local tiles with tokens s0 … s0 + KC − 1 (zero past the frame's end) and each work-item
 * accumulates its RM x RN register block with CD_FMA_GEMM, acc[a][c] += X(k, a)·Y(k, c) for the staged tokens k in
 * order (a token's weight folded into one operand by the staging). Every entry is the sum over the frame's tokens,
 * in order, of one fma per product of its row's and its column's values: the kernels differ in their tiles and
 * their staging only. The loop's trip count is uniform over the work-group, its barriers under no condition. */
#define CD_GRAM_FMA(acc, RM, RN, KC, Sf, STAGE, X, Y) CD_GRAM_FMA_RANGE(acc, RM, RN, KC, 0, Sf, STAGE, X, Y)
/* The same over the tokens lo … hi − 1 only (lo a multiple of KC): a frame summed in several launches. */
#define CD_GRAM_FMA_RANGE(acc, RM, RN, KC, lo, hi, STAGE, X, Y) \
  for (uint g_s0_ = (lo); g_s0_ < (hi); g_s0_ += (KC)) {      \
    barrier(CLK_LOCAL_MEM_FENCE);                               \
    STAGE(g_s0_);                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                               \
    CD_FMA_GEMM(acc, RM, RN, KC, X, Y);                         \
  }
/* An entry of the A form from its sum: gate·(δ_ij − sum), A_f = d_f·(I − K_fᵀβ_fK_f). */
#define CD_GRAM_A(gate, i, j, sum) ((gate) * (((i) == (j) ? 1.0f : 0.0f) - (sum)))

/* Helpers of the CPU forms (scan_cpu.cl, prep_cpu.cl, branch_cpu.cl). CD_INLINE: inlined into each caller, so that
 * a constant argument (a block's `full` flag, a register tile's row count) is a constant there. */
#define CD_INLINE inline __attribute__((always_inline))
/* Eight consecutive elements as a float8, per storage type t (0 f32, 1 f16, 2 bf16): CD_LD8_t loads, CD_ST8_t
 * stores (bf16 rounded to nearest even, NaN kept quiet, as CD_STORE does). CD_LD8 / CD_ST8: the activations' storage
 * (CD_DTYPE); CD_SLD8 / CD_SST8: that of prep's (B, H, D, N) side (CD_SDTYPE). */
#define CD_LD8_0(p) vload8(0, (p))
#define CD_LD8_1(p) vload_half8(0, (p))
#define CD_LD8_2(p) as_float8(convert_uint8(vload8(0, (p))) << 16)
#define CD_ST8_0(x, p) vstore8((x), 0, (p))
#define CD_ST8_1(x, p) vstore_half8_rte((x), 0, (p))
#define CD_ST8_2(x, p) vstore8(cd_to_bf16_8(x), 0, (p))
/* cd_to_bf16 on eight lanes at once, without its branch: the same bits. */
CD_INLINE ushort8 cd_to_bf16_8(float8 x) {
  const uint8 u = as_uint8(x);
  const uint8 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
  return convert_ushort8(select(rounded, quiet, (u & 0x7FFFFFFFu) > 0x7F800000u));
}
#define CD_LD8(p) CD_CAT(CD_LD8_, CD_DTYPE)(p)
#define CD_ST8(x, p) CD_CAT(CD_ST8_, CD_DTYPE)(x, p)
#define CD_SLD8(p) CD_CAT(CD_LD8_, CD_SDTYPE)(p)
#define CD_SST8(x, p) CD_CAT(CD_ST8_, CD_SDTYPE)(x, p)

/* The first n consecutive elements as a float8, zero past n; and the first n lanes of x stored (n may be below 1:
 * nothing; 8 or more: the whole vector). cd_ldf8n / cd_stf8n: f32; cd_ld8n / cd_st8n: the activations' storage;
 * cd_sld8n / cd_sst8n: prep's (B, H, D, N) side. */
#define CD_PARTIAL8(ld, st, T, LD8, ST8, LD1, ST1)                                             \
  CD_INLINE float8 ld(global const T *p, int n) {                                               \
    if (n >= 8) return LD8(p);                                                                  \
    float t[8];                                                                                 \
    _Pragma("unroll") for (int i = 0; i < 8; i++) t[i] = i < n ? LD1(p, i) : 0.0f;              \
    return vload8(0, t);                                                                        \
  }                                                                                             \
  CD_INLINE void st(global T *p, float8 x, int n) {                                             \
    if (n >= 8) {                                                                               \
      ST8(x, p);                                                                                \
      return;                                                                                   \
    }                                                                                           \
    float t[8];                                                                                 \
    vstore8(x, 0, t);                                                                           \
    _Pragma("unroll") for (int i = 0; i < 8; i++) if (i < n) ST1(p, i, t[i]);                   \
  }
#define CD_LDF1(p, i) ((p)[i])
#define CD_STF1(p, i, x) ((p)[i] = (x))
CD_PARTIAL8(cd_ldf8n, cd_stf8n, float, CD_LD8_0, CD_ST8_0, CD_LDF1, CD_STF1)
CD_PARTIAL8(cd_ld8n, cd_st8n, cd_store_t, CD_LD8, CD_ST8, CD_LOAD, CD_STORE)
CD_PARTIAL8(cd_sld8n, cd_sst8n, cd_sstore_t, CD_SLD8, CD_SST8, CD_SLOAD, CD_SSTORE)

/* Transposes the 8 x 8 block r[0..8) in place (r[i].sj becomes r[j].si): unpacks, 2-lane shuffles and half swaps. */
CD_INLINE void cd_transpose8(float8 *r) {
  float8 t[8], u[8];
  _Pragma("unroll") for (int i = 0; i < 8; i += 2) {
    t[i] = (float8)(r[i].s0, r[i + 1].s0, r[i].s1, r[i + 1].s1, r[i].s4, r[i + 1].s4, r[i].s5, r[i + 1].s5);
    t[i + 1] = (float8)(r[i].s2, r[i + 1].s2, r[i].s3, r[i + 1].s3, r[i].s6, r[i + 1].s6, r[i].s7, r[i + 1].s7);
  }
  _Pragma("unroll") for (int i = 0; i < 8; i += 4) {
    u[i] = (float8)(t[i].s01, t[i + 2].s01, t[i].s45, t[i + 2].s45);
    u[i + 1] = (float8)(t[i].s23, t[i + 2].s23, t[i].s67, t[i + 2].s67);
    u[i + 2] = (float8)(t[i + 1].s01, t[i + 3].s01, t[i + 1].s45, t[i + 3].s45);
    u[i + 3] = (float8)(t[i + 1].s23, t[i + 3].s23, t[i + 1].s67, t[i + 3].s67);
  }
  _Pragma("unroll") for (int i = 0; i < 4; i++) {
    r[i] = (float8)(u[i].s0123, u[i + 4].s0123);
    r[i + 4] = (float8)(u[i].s4567, u[i + 4].s4567);
  }
}

