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
 * tensor-core tiles', src/scan/tc.h):
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
 *   CD_STAGE_F32  1 = staged tiles hold f32 values, split per fragment (default: the gram); 0 = hi and lo parts
 *   CD_LO_ROUND   1 = lo parts rounded to TF32; 0 = truncated by the tensor core's read (the default)
 *   CD_TF32_CVT   1 = TF32 rounding by cvt.rna.tf32.f32 (the default in tf32 at D <= 64); 0 = the same rounding in
 *                 integer operations
 *   CD_FOLD       1 = local-memory accesses indexed so that their constant parts fold into immediates (default)
 *   CD_BETA_LATE  gram: 1 = β is multiplied into the next chunk's values when they are staged (default with the
 *                 split), 0 = as soon as they are loaded (tf32: 16 registers fewer)
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
#ifndef CD_LO_ROUND /* split: the lo parts 1 = rounded to TF32 (cd_tf32), 0 = their f32 bits, of which the tensor core
                       reads the TF32 part (truncation: one conversion less per element; |lo − its TF32 part| is at
                       most 2^-21 of the element instead of 2^-22) */
#define CD_LO_ROUND 0
#endif
#ifndef CD_STAGE_F32 /* split: 1 = the staged tiles hold the f32 values (8-byte slots) and each warp splits the fragments it
                        loads (half the local-memory traffic, more conversions: the gram, whose fragments are read by
                        two warps each); 0 = they hold the split parts (16-byte slots, each element split once when it
                        is staged: the frames kernel, whose staged B is read by every warp) */
#ifdef CD_GRAM
#define CD_STAGE_F32 1
#else
#define CD_STAGE_F32 0
#endif
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

/* cd_frame_start(f, S) (cl/common.cl) is where frame f's tokens start on the token axis, cd_frame_len(f, S) how many
 * it has. Packed clips (CD_PACKED): every kernel takes CD_PK_ARGS last, frames have their own token counts (a token
 * tile past its frame's end leaves at once) and a chain's first/last frame and init row come from the table. */

#ifndef CD_BETA_LATE /* 1: the gram's β product waits for its loads (exact); 0: it is done at staging (tf32), where
                        the late form's registers cost more than it gains (docs/performance.md, "Measurements behind
                        the code's constants") */
#define CD_BETA_LATE CD_SPLIT
#endif
#ifndef CD_TF32_CVT /* 1: TF32 rounding by cvt.rna.tf32.f32; 0: the same rounding (nearest, ties away) in two integer
                       operations: the faster of the two per path on the H200 (docs/performance.md, "Measurements
                       behind the code's constants") */
#define CD_TF32_CVT (!CD_SPLIT && CD_D <= 64)
#endif
/* TF32 operand (round to nearest, ties away). The integer form maps inf to inf and a finite value that rounds past
 * FLT_MAX to inf, as cvt.rna does; a NaN keeps its high payload bits (a quiet NaN stays NaN), and one whose payload
 * is only in the low 13 bits comes out as inf, whose split lo part x - hi is then NaN. The emulation always takes
 * the integer form. */
inline uint cd_tf32(float x) {
#if CD_TF32_CVT && !CD_TC_EMULATE
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  return (as_uint(x) + 0x1000u) & 0xffffe000u;
#endif
}

#if CD_TC_EMULATE
/* Emulation for testing on any device (CAMDELTA_TC=emulate): no inline PTX; cd_tc_block computes each lane's
 * accumulator entries (the PTX C layout) straight from the staged local tiles with the same TF32 rounding and
 * split, without barriers. It checks the kernels' tiles, strides, tails, epilogues and host side where no
 * tensor cores exist (CI); the fragment layout itself is what the feature test checks on the real device. */
#else
#define CD_MMA(c, a, b)                                                                                   \
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "        \
      "{%0,%1,%2,%3};"                                                                                    \
      : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                                            \
      : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
#endif

/* The split's lo part of x, whose hi part is h (see CD_LO_ROUND). */
inline uint cd_lo(float x, uint h) { return CD_LO_ROUND ? cd_tf32(x - as_float(h)) : as_uint(x - as_float(h)); }

#if !CD_TC_EMULATE
/* c[mi][ni] += a[mi]·b[ni] for every tile of one k8 step: hi·hi, with the split also lo·hi and hi·lo (that order). */
#define CD_MMA_ALL(c, ah, al, bh, bl)                                                                    \
  do {                                                                                                  \
    _Pragma("unroll") for (int mi_ = 0; mi_ < CD_MR; mi_++) _Pragma("unroll") for (int ni_ = 0; ni_ < CD_NR; ni_++) { \
      if (CD_SPLIT) {                                                                                   \
        CD_MMA((c)[mi_][ni_], (al)[mi_], (bh)[ni_]);                                                    \
        CD_MMA((c)[mi_][ni_], (ah)[mi_], (bl)[ni_]);                                                    \
      }                                                                                                 \
      CD_MMA((c)[mi_][ni_], (ah)[mi_], (bh)[ni_]);                                                      \
    }                                                                                                   \
  } while (0)
#endif

/* ------------------------------------------------------------------------------ staged operand tiles */
/* The gram (both operands) and the frames kernel (B) stage operands in "fragment order": for an operand tile of R rows
 * (the m rows of A or the n columns of B) and CD_KC reduction elements, element (r, k) with k = 8q + t + 4h (t < 4,
 * h < 2) sits in slot (4q + t)·LDR + r, and a slot holds {hi(k), hi(k + 4), lo(k), lo(k + 4)} (split, converted
 * once by the work-item that stages it), {x(k), x(k + 4)} (split with CD_STAGE_F32: the f32 values, split by each
 * warp that loads them) or {hi(k), hi(k + 4)} (tf32). A lane (g, t) then gets the pair its mma fragment needs,
 * k = 8q + t and 8q + t + 4, in one 16- or 8-byte load. LDR = R + CD_RPAD makes those loads conflict-free: a
 * quarter warp's 16-byte loads touch rows g, g + 1 of planes t = 0..3, i.e. units t·LDR + g, distinct mod 8 when
 * LDR ≡ 2 (mod 8); a half warp's 8-byte loads units t·LDR + g (g < 4), distinct mod 16 when LDR ≡ 4 or 12
 * (mod 16). R is a multiple of 8. */
#if CD_SPLIT && !CD_STAGE_F32
typedef uint4 cd_slot;
#define CD_RPAD 2
#else
typedef uint2 cd_slot;
#define CD_RPAD 4
#endif
#define CD_LDR(R) ((R) + CD_RPAD)
#if CD_SPLIT && !CD_STAGE_F32 /* a slot's lo parts (none without the split, computed from the loaded values with
                                 CD_STAGE_F32) */
#define CD_LO0(s) (s).z
#define CD_LO1(s) (s).w
#else
#define CD_LO0(s) 0u
#define CD_LO1(s) 0u
#endif
/* The gram's staged chunk: a row's KC tokens are read by KC/8 consecutive work-items, their first 16-byte loads
 * covering the first KC/2 tokens and their second loads the rest, so a warp's load instruction reads runs of KC/2
 * contiguous tokens from 32 / (KC/8) rows (rather than 16 bytes of each of 32 rows, which is slower, most of all on
 * rows of 2^7·odd bytes: docs/performance.md, "Measurements behind the code's constants").
 * Work-item unit q of a row then holds tokens 4q .. 4q+3 and KC/2 + 4q .. KC/2 + 4q+3 as staged k = 8q .. 8q+7, the
 * same order for both operands, so the products sum the same terms. The slots of unit q sit CD_QS·q further on, so
 * that a half warp's 8-byte staging stores (16 / (KC/8) rows times KC/8 units) hit distinct banks: the planes
 * 4q + t are 4·LDR ≡ 0 (mod 16) slots apart. The frames kernel stages whole rows of 8 (no skew). */
#ifdef CD_GRAM
#define CD_QS (16 / (CD_KC / 8))
#else
#define CD_QS 0
#endif
#define CD_SLOTS(R) ((CD_KC / 2) * CD_LDR(R) + CD_QS * (CD_KC / 8 - 1)) /* slots of a staged R x CD_KC tile */

/* CD_AT(T, v, c) is T[v + c] for a work-item's variable part v and a compile-time part c. With CD_FOLD (the default)
 * it indexes from T + v, so the compiler can fold c into the load's or store's immediate offset; one unsigned index
 * v + c cannot be split (it may wrap), and every access then needs its own address arithmetic (the gram would run as
 * many address instructions as mma). */
#ifndef CD_FOLD /* 1 except in the frames kernel at D <= 64, which runs slower with it on the H200 (docs/performance.md,
                   "Measurements behind the code's constants") */
#if defined(CD_FRAMES) && CD_D <= 64
#define CD_FOLD 0
#else
#define CD_FOLD 1
#endif
#endif
#if CD_FOLD
#define CD_AT(T, v, c) ((T) + (v))[c]
#else
#define CD_AT(T, v, c) (T)[(v) + (c)]
#endif

/* Writes the pair (r, k = 8q + t) and (r, k + 4) with values x0, x1 into slot T[v + c] (plane p = 4q + t, row r). */
#if CD_SPLIT && CD_STAGE_F32
#define CD_PUT(T, v, c, x0, x1) CD_AT(T, v, c) = (uint2)(as_uint(x0), as_uint(x1))
#elif CD_SPLIT
#define CD_PUT(T, v, c, x0, x1)                                                                           \
  do {                                                                                                    \
    const float x0_ = (x0), x1_ = (x1);                                                                   \
    const uint h0_ = cd_tf32(x0_), h1_ = cd_tf32(x1_);                                                    \
    CD_AT(T, v, c) = (uint4)(h0_, h1_, cd_lo(x0_, h0_), cd_lo(x1_, h1_));                                 \
  } while (0)
#else
#define CD_PUT(T, v, c, x0, x1) CD_AT(T, v, c) = (uint2)(cd_tf32(x0), cd_tf32(x1))
#endif

/* Row r's elements k = 8q .. 8q+7 (lo = the first four, hi = the last four; the gram's order, see CD_QS). */
inline void cd_put_row8(local cd_slot *tile, uint ldr, uint r, uint q, float4 lo, float4 hi) {
  CD_PUT(tile, (4 * ldr + CD_QS) * q + r, 0, lo.x, hi.x);
  CD_PUT(tile, (4 * ldr + CD_QS) * q + r, ldr, lo.y, hi.y);
  CD_PUT(tile, (4 * ldr + CD_QS) * q + r, 2 * ldr, lo.z, hi.z);
  CD_PUT(tile, (4 * ldr + CD_QS) * q + r, 3 * ldr, lo.w, hi.w);
}

/* Rows r .. r+3 at k = 8q + t (a) and k + 4 (b), plane p = 4q + t: an operand contiguous along its rows. */
inline void cd_put_col4(local cd_slot *tile, uint ldr, uint r, uint p, float4 a, float4 b) {
  CD_PUT(tile, p * ldr + r, 0, a.x, b.x);
  CD_PUT(tile, p * ldr + r, 1, a.y, b.y);
  CD_PUT(tile, p * ldr + r, 2, a.z, b.z);
  CD_PUT(tile, p * ldr + r, 3, a.w, b.w);
}

/* ----------------------------------------------------------------------------- one warp's products */
/* a lane's (g, t) slot of a staged tile's plane 4q + t, row 16·mi + g: the lane part of the index */
#define CD_LANE(ld) (t * (ld) + g)
/* tot[mi][ni] += Σ_k A(16·mi + row, k)·B(k, 8·ni + col) for k in [0, CD_KC), one warp, with each operand either a
 * staged tile (A or B pointing at the warp's first row / column, lda / ldb its LDR) or raw floats in local memory
 * (A(m, k) = Am[m·am + k·ak], B(k, n) = Bm[k·bk + n·bn]; split per fragment by each warp that reads it).
 * PTX fragment layout, lane = 4·g + t: a = {A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4)}, b = {B(t, g), B(t+4, g)},
 * c = {C(g, 2t), C(g, 2t+1), C(g+8, 2t), C(g+8, 2t+1)}. The fragment loaders of one k8 step q: */
#if CD_SPLIT && CD_STAGE_F32
/* hi and lo of a staged f32 value (bits u) */
#define CD_SPLIT_AT(h, l, u)                                                                              \
  do {                                                                                                    \
    h = cd_tf32(as_float(u));                                                                             \
    l = cd_lo(as_float(u), h);                                                                            \
  } while (0)
#define CD_FRAG_A_STAGED(A, lda, q)                                                                       \
  _Pragma("unroll") for (int mi = 0; mi < CD_MR; mi++) {                                                    \
    const cd_slot s0 = CD_AT(A, CD_LANE(lda), (4 * (lda) + CD_QS) * (q) + 16 * mi);                         \
    const cd_slot s1 = CD_AT(A, CD_LANE(lda), (4 * (lda) + CD_QS) * (q) + 16 * mi + 8);                     \
    CD_SPLIT_AT(ah[mi][0], al[mi][0], s0.x);                                                                \
    CD_SPLIT_AT(ah[mi][1], al[mi][1], s1.x);                                                                \
    CD_SPLIT_AT(ah[mi][2], al[mi][2], s0.y);                                                                \
    CD_SPLIT_AT(ah[mi][3], al[mi][3], s1.y);                                                                \
  }
#define CD_FRAG_B_STAGED(B, ldb, q)                                                                       \
  _Pragma("unroll") for (int ni = 0; ni < CD_NR; ni++) {                                                    \
    const cd_slot s = CD_AT(B, CD_LANE(ldb), (4 * (ldb) + CD_QS) * (q) + 8 * ni);                           \
    CD_SPLIT_AT(bh[ni][0], bl[ni][0], s.x);                                                                 \
    CD_SPLIT_AT(bh[ni][1], bl[ni][1], s.y);                                                                 \
  }
#else
#define CD_FRAG_A_STAGED(A, lda, q)                                                                       \
  _Pragma("unroll") for (int mi = 0; mi < CD_MR; mi++) {                                                    \
    const cd_slot s0 = CD_AT(A, CD_LANE(lda), (4 * (lda) + CD_QS) * (q) + 16 * mi);                         \
    const cd_slot s1 = CD_AT(A, CD_LANE(lda), (4 * (lda) + CD_QS) * (q) + 16 * mi + 8);                     \
    ah[mi][0] = s0.x, ah[mi][1] = s1.x, ah[mi][2] = s0.y, ah[mi][3] = s1.y;                                 \
    al[mi][0] = CD_LO0(s0), al[mi][1] = CD_LO0(s1), al[mi][2] = CD_LO1(s0), al[mi][3] = CD_LO1(s1);         \
  }
#define CD_FRAG_B_STAGED(B, ldb, q)                                                                       \
  _Pragma("unroll") for (int ni = 0; ni < CD_NR; ni++) {                                                    \
    const cd_slot s = CD_AT(B, CD_LANE(ldb), (4 * (ldb) + CD_QS) * (q) + 8 * ni);                           \
    bh[ni][0] = s.x, bh[ni][1] = s.y;                                                                       \
    bl[ni][0] = CD_LO0(s), bl[ni][1] = CD_LO1(s);                                                           \
  }
#endif
#define CD_FRAG_A_RAW(Am, am, ak, q)                                                                      \
  _Pragma("unroll") for (int mi = 0; mi < CD_MR; mi++) _Pragma("unroll") for (int e = 0; e < 4; e++) {      \
    const float x = CD_AT(Am, g * (am) + t * (ak), (16 * mi + 8 * (e & 1)) * (am) + (8 * (q) + 4 * (e >> 1)) * (ak)); \
    ah[mi][e] = cd_tf32(x);                                                                                 \
    if (CD_SPLIT) al[mi][e] = cd_lo(x, ah[mi][e]);                                                          \
  }
#define CD_FRAG_B_RAW(Bm, bk, bn, q)                                                                      \
  _Pragma("unroll") for (int ni = 0; ni < CD_NR; ni++) _Pragma("unroll") for (int e = 0; e < 2; e++) {      \
    const float x = CD_AT(Bm, t * (bk) + g * (bn), (8 * (q) + 4 * e) * (bk) + 8 * ni * (bn));               \
    bh[ni][e] = cd_tf32(x);                                                                                 \
    if (CD_SPLIT) bl[ni][e] = cd_lo(x, bh[ni][e]);                                                          \
  }

/* Every value (mi, ni, e) a lane holds of its warp's CD_MR x CD_NR fragments, E per fragment (4 accumulator
 * entries, or 2 row halves h), the three loops unrolled: `CD_TC_CELLS(mi, ni, e, 4) stmt;`, the kernel's own
 * statement per value. */
#define CD_TC_CELLS(mi, ni, e, E)                                                                           \
  _Pragma("unroll") for (int mi = 0; mi < CD_MR; mi++) _Pragma("unroll") for (int ni = 0; ni < CD_NR; ni++) \
      _Pragma("unroll") for (int e = 0; e < (E); e++)

/* The register-staged chunk loop of the gram and the apply over a contraction of K elements, CD_KC at a time
 * (loop variable k0): FETCH(k0) loads a chunk into the work-item's registers, STORE moves them into the local tiles
 * between two barriers, and the next chunk's loads are issued before PRODUCT multiplies the staged one. */
#define CD_STAGED_LOOP(k0, K, FETCH, STORE, PRODUCT) \
  FETCH(0u);                                         \
  for (uint k0 = 0; k0 < (K); k0 += CD_KC) {         \
    barrier(CLK_LOCAL_MEM_FENCE);                    \
    STORE                                            \
    barrier(CLK_LOCAL_MEM_FENCE);                    \
    if (k0 + CD_KC < (K)) FETCH(k0 + CD_KC);         \
    PRODUCT;                                         \
  }

#if CD_TC_EMULATE
#define CD_LO_KEEP (CD_LO_ROUND ? 0xffffffffu : 0xffffe000u) /* the bits of a lo part the tensor core reads */
/* The parts the tensor core reads of one element (lo = 0: hi, 1: lo): of a staged tile's element (r, k), and of a
 * raw value. */
inline float cd_staged_part(local const cd_slot *T, uint ld, uint r, uint k, int lo) {
  const cd_slot x = T[(4 * (k / 8) + k % 4) * ld + CD_QS * (k / 8) + r];
  const uint h = (k % 8) / 4;
#if CD_SPLIT && CD_STAGE_F32
  const float v = as_float(h ? x.y : x.x);
  const uint hv = cd_tf32(v);
  return lo ? as_float(cd_lo(v, hv) & CD_LO_KEEP) : as_float(hv);
#else
  return lo ? as_float((h ? CD_LO1(x) : CD_LO0(x)) & CD_LO_KEEP) : as_float(h ? x.y : x.x);
#endif
}
inline float cd_raw_part(float x, int lo) {
  const uint hi = cd_tf32(x);
  return lo ? as_float(cd_lo(x, hi) & CD_LO_KEEP) : as_float(hi);
}
/* c += each lane's accumulator entries from the element parts AP(row, k, lo) and BP(k, col, lo), with the same
 * TF32 rounding and split, without barriers */
#define CD_TC_PRODUCTS(c, AP, BP, FRAG_A, FRAG_B)                                                         \
  for (uint k0 = 0; k0 < CD_KC; k0 += 8)                                                                  \
    for (int mi = 0; mi < CD_MR; mi++)                                                                    \
      for (int ni = 0; ni < CD_NR; ni++)                                                                  \
        for (int e = 0; e < 4; e++) {                                                                     \
          const uint row = 16 * mi + g + 8 * (e >> 1), col = 8 * ni + 2 * t + (e & 1);                    \
          float sum = 0.0f;                                                                               \
          for (uint k = k0; k < k0 + 8; k++) {                                                            \
            if (CD_SPLIT) {                                                                               \
              sum = fma(AP(row, k, 1), BP(k, col, 0), sum);                                               \
              sum = fma(AP(row, k, 0), BP(k, col, 1), sum);                                               \
            }                                                                                             \
            sum = fma(AP(row, k, 0), BP(k, col, 0), sum);                                                 \
          }                                                                                               \
          (c)[mi][ni][e] += sum;                                                                          \
        }
#else
#define CD_TC_PRODUCTS(c, AP, BP, FRAG_A, FRAG_B)                                                         \
  _Pragma("unroll") for (uint q = 0; q < CD_KC / 8; q++) {                                                \
    uint ah[CD_MR][4], bh[CD_NR][2], al[CD_MR][4], bl[CD_NR][2]; /* al, bl: split only */                 \
    FRAG_A(q)                                                                                             \
    FRAG_B(q)                                                                                             \
    CD_MMA_ALL(c, ah, al, bh, bl);                                                                        \
  }
#endif

/* The operand forms of CD_TC_PRODUCTS in the three product functions below, by the names of their parameters:
 * staged A (A, lda) or raw A (Am, am, ak), staged B (B, ldb) or raw B (Bm, bk, bn); each form's element parts (AP,
 * BP: the emulation) and fragment loads (FA, FB: the tensor cores). */
#define CD_AP_STAGED(r, k, lo) cd_staged_part(A, lda, r, k, lo)
#define CD_BP_STAGED(k, n, lo) cd_staged_part(B, ldb, n, k, lo)
#define CD_FA_STAGED(q) CD_FRAG_A_STAGED(A, lda, q)
#define CD_FB_STAGED(q) CD_FRAG_B_STAGED(B, ldb, q)
#define CD_AP_RAW(r, k, lo) cd_raw_part(Am[(r) * am + (k) * ak], lo)
#define CD_BP_RAW(k, n, lo) cd_raw_part(Bm[(k) * bk + (n) * bn], lo)
#define CD_FA_RAW(q) CD_FRAG_A_RAW(Am, am, ak, q)
#define CD_FB_RAW(q) CD_FRAG_B_RAW(Bm, bk, bn, q)

/* Both operands staged (the gram; the probe). With CD_CHUNK_SUM the chunk is summed in a fresh accumulator and
 * added to tot rounded (see the header). */
inline void cd_tc_tile(float tot[CD_MR][CD_NR][4], local const cd_slot *A, uint lda, local const cd_slot *B, uint ldb,
                       uint g, uint t) {
#if CD_CHUNK_SUM
  float c[CD_MR][CD_NR][4];
  CD_TC_CELLS(mi, ni, e, 4) c[mi][ni][e] = 0.0f;
  CD_TC_PRODUCTS(c, CD_AP_STAGED, CD_BP_STAGED, CD_FA_STAGED, CD_FB_STAGED)
  CD_TC_CELLS(mi, ni, e, 4) tot[mi][ni][e] += c[mi][ni][e];
#else
  CD_TC_PRODUCTS(tot, CD_AP_STAGED, CD_BP_STAGED, CD_FA_STAGED, CD_FB_STAGED)
#endif
}

#if defined(CD_APPLY) || defined(CD_FRAMES) || defined(CD_PROBE)
/* Both operands raw (the apply; the probe). */
inline void cd_tc_block_raw(float tot[CD_MR][CD_NR][4], local const float *Am, uint am, uint ak, local const float *Bm,
                            uint bk, uint bn, uint g, uint t) {
  CD_TC_PRODUCTS(tot, CD_AP_RAW, CD_BP_RAW, CD_FA_RAW, CD_FB_RAW)
}
#endif

#ifdef CD_FRAMES
/* A raw, B staged (the frames kernel: each warp splits only its own token rows; the Mprev / G chunk is split once
 * when staged and shared by every warp). */
inline void cd_tc_rawa(float tot[CD_MR][CD_NR][4], local const float *Am, uint am, uint ak, local const cd_slot *B,
                       uint ldb, uint g, uint t) {
  CD_TC_PRODUCTS(tot, CD_AP_RAW, CD_BP_STAGED, CD_FA_RAW, CD_FB_STAGED)
}
#endif

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
#define CD_LDX CD_LDR(CD_TM)
#define CD_LDY CD_LDR(CD_TN)
#define CD_UX (CD_TM * (CD_KC / 8)) /* 8-token units of a staged X chunk (row r = unit % TM) */
#define CD_UY (CD_TN * (CD_KC / 8))
#define CD_LX ((CD_UX + CD_W - 1) / CD_W)
#define CD_LY ((CD_UY + CD_W - 1) / CD_W)
/* A work-item's unit e of a staged chunk: its row, its unit q within the row's chunk, the first token of its first
 * four (frame-relative, from the chunk's start) and how far on its other four start (see CD_QS) */
#define CD_UROW(e) ((e) / (CD_KC / 8))
#define CD_UQ(e) ((e) % (CD_KC / 8))
#define CD_UTOK(e) (4 * CD_UQ(e))
#define CD_UHI (CD_KC / 2)

/* Per tile = group 0 (row tile rt, column tile ct; ct < n_c0: region 0, else region 1) and (b, h, f) = group 1
 * (the tiles of one frame run side by side and share its tokens in the cache):
 *   C[i][j] = Σ_s X[i][s]·β_s·Yr[j][s] over frame f's tokens (β_s = 1 without use_beta), i, j < D;
 *   region 0 goes to out0 (a_form: out0 = decay_f·(I − C), only the tiles on or above the diagonal run and
 *   C's upper triangle is stored at (i, j) and (j, i)), region 1 to out1. Outputs (B, H, F, D, D).
 * Each work-item loads 8 tokens of a row per unit (two 16-byte loads, see CD_QS); the loads of the next chunk
 * are issued before the mma work on the current one, and written into the staged tiles after it (f32 values with
 * the split, CD_STAGE_F32; TF32 hi parts in tf32).
 * Launch: local (32·WM·WN), global (local·n_rt·(n_c0 + n_c1), B·H·F), n_rt = ceil(D / TM), n_c = ceil(D / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_gram_tc(
    __global const float *x, ulong x_off, __global const float *y0, ulong y0_off, __global const float *y1,
    ulong y1_off, __global const float *beta, ulong beta_off, __global const float *decay, ulong decay_off,
    __global float *out0, ulong o0_off, __global float *out1, ulong o1_off, ulong N, uint S, uint F, uint n_c0,
    uint n_c1, int use_beta, int a_form CD_PK_ARGS) {
  __local cd_slot Xs[CD_SLOTS(CD_TM)]; /* X[row0 + r][s0 + k] */
  __local cd_slot Ys[CD_SLOTS(CD_TN)]; /* β_s·Yr[col0 + c][s0 + k] */
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
  const uint Sf = cd_frame_len(f, S);
  __global const float *xb = x + x_off + base;
  __global const float *yb = (reg1 ? y1 + y1_off : y0 + y0_off) + base;
  __global const float *bb = beta + beta_off + cd_beta_base(bh, bhf, f, S, N);

  float tot[CD_MR][CD_NR][4];
  CD_TC_CELLS(mi, ni, e, 4) tot[mi][ni][e] = 0.0f;

  /* the next chunk's values and its β: multiplied in when staged with CD_BETA_LATE (br), else as loaded (br unused) */
  float4 xr[CD_LX][2], yr[CD_LY][2], br[CD_LY][2];
#define CD_FETCH(s0)                                                                          \
  do {                                                                                        \
    _Pragma("unroll") for (int u = 0; u < CD_LX; u++) {                                       \
      const uint e = lid + u * CD_W, i = row0 + CD_UROW(e), gs = (s0) + CD_UTOK(e);          \
      xr[u][0] = xr[u][1] = (float4)(0.0f);                                                   \
      if (e < CD_UX && i < CD_D) {                                                            \
        xr[u][0] = cd_load4(xb + (ulong)i * N, gs, Sf);                                       \
        xr[u][1] = cd_load4(xb + (ulong)i * N, gs + CD_UHI, Sf);                              \
      }                                                                                       \
    }                                                                                         \
    _Pragma("unroll") for (int u = 0; u < CD_LY; u++) {                                       \
      const uint e = lid + u * CD_W, j = col0 + CD_UROW(e), gs = (s0) + CD_UTOK(e);          \
      yr[u][0] = yr[u][1] = (float4)(0.0f);                                                   \
      br[u][0] = br[u][1] = (float4)(1.0f);                                                   \
      if (e < CD_UY && j < CD_D) {                                                            \
        yr[u][0] = cd_load4(yb + (ulong)j * N, gs, Sf);                                       \
        yr[u][1] = cd_load4(yb + (ulong)j * N, gs + CD_UHI, Sf);                              \
        if (use_beta) {                                                                       \
          if (CD_BETA_LATE) {                                                                 \
            br[u][0] = cd_load4(bb, gs, Sf);                                                  \
            br[u][1] = cd_load4(bb, gs + CD_UHI, Sf);                                         \
          } else {                                                                            \
            yr[u][0] *= cd_load4(bb, gs, Sf);                                                 \
            yr[u][1] *= cd_load4(bb, gs + CD_UHI, Sf);                                        \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  } while (0)

#define CD_PUT_CHUNK                                                                              \
  _Pragma("unroll") for (int u = 0; u < CD_LX; u++) {                                             \
    const uint e = lid + u * CD_W;                                                                \
    if (e < CD_UX) cd_put_row8(Xs, CD_LDX, CD_UROW(e), CD_UQ(e), xr[u][0], xr[u][1]);             \
  }                                                                                               \
  _Pragma("unroll") for (int u = 0; u < CD_LY; u++) {                                             \
    const uint e = lid + u * CD_W;                                                                \
    if (e < CD_UY)                                                                                \
      cd_put_row8(Ys, CD_LDY, CD_UROW(e), CD_UQ(e), CD_BETA_LATE ? yr[u][0] * br[u][0] : yr[u][0], \
                  CD_BETA_LATE ? yr[u][1] * br[u][1] : yr[u][1]);                                 \
  }
  CD_STAGED_LOOP(s0, Sf, CD_FETCH, CD_PUT_CHUNK,
                 cd_tc_tile(tot, Xs + 16 * CD_MR * wm, CD_LDX, Ys + 8 * CD_NR * wn, CD_LDY, g, t))
#undef CD_PUT_CHUNK
#undef CD_FETCH

  const int af = a_form && !reg1;
  const float d = af ? decay[decay_off + bhf] : 1.0f;
  __global float *ob = (reg1 ? out1 + o1_off : out0 + o0_off) + bhf * CD_DD;
  CD_TC_CELLS(mi, ni, e, 4) {
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
#define CD_LDA (CD_TM + 8) /* row strides of the staged tiles: 8 or 24 mod 32 floats, conflict-free fragments */
#define CD_LDS (CD_TN + 8)
#define CD_QN (CD_TN / 4) /* float4 per staged token row */
#define CD_LM ((CD_KC * CD_TM + CD_W - 1) / CD_W)
#define CD_LQ ((CD_KC * CD_QN + CD_W - 1) / CD_W)

/* tot = op(M)[row0 .. row0+TM)·X[.., s0 .. s0+TN) of one work-group tile (the warps' parts of it), M (D x D) from
 * global memory (zero: all zero), X = xb's D rows of frame-relative tokens (Sf of them, stride N). Ms and Xs4 are
 * the kernel's local tiles (CD_KC·CD_LDA floats, CD_KC·CD_LDS / 4 float4). */
inline void cd_apply_products(float tot[CD_MR][CD_NR][4], __global const float *xb, __global const float *M,
                              int transpose, int zero, uint row0, uint s0, uint Sf, ulong N, local float *Ms,
                              local float4 *Xs4, uint lid, uint wm, uint wn, uint g, uint t) {
  local const float *Xs = (local const float *)Xs4;
  CD_TC_CELLS(mi, ni, e, 4) tot[mi][ni][e] = 0.0f;

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
      qr[u] = (c < CD_KC && cc < CD_D) ? cd_load4(xb + (ulong)cc * N, s0 + 4 * (e % CD_QN), Sf)        \
                                       : (float4)(0.0f);                                               \
    }                                                                                                  \
  } while (0)

#define CD_PUT_CHUNK                                                                              \
  _Pragma("unroll") for (int u = 0; u < CD_LM; u++) {                                             \
    const uint e = lid + u * CD_W, c = e / CD_TM;                                                 \
    if (c < CD_KC) Ms[c * CD_LDA + e % CD_TM] = mr[u];                                            \
  }                                                                                               \
  _Pragma("unroll") for (int u = 0; u < CD_LQ; u++) {                                             \
    const uint e = lid + u * CD_W, c = e / CD_QN;                                                 \
    if (c < CD_KC) Xs4[(c * CD_LDS) / 4 + e % CD_QN] = qr[u];                                     \
  }
  CD_STAGED_LOOP(c0, CD_D, CD_FETCH, CD_PUT_CHUNK,
                 cd_tc_block_raw(tot, Ms + 16 * CD_MR * wm, 1, CD_LDA, Xs + 8 * CD_NR * wn, CD_LDS, 1, g, t))
#undef CD_PUT_CHUNK
#undef CD_FETCH
}

/* The work-item's place in an apply launch: its warp's tile (wm, wn) and lane (g, t); the work-group's row tile row0,
 * token tile s0 and frame (bh, f); base: the frame's first token of row 0 of (B, H, D, N). */
#define CD_APPLY_IDS                                                                                  \
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;                                 \
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;                       \
  const ulong bhf = get_group_id(1);                                                                  \
  const uint tile = get_group_id(0), row0 = (tile % n_rtiles) * CD_TM, s0 = (tile / n_rtiles) * CD_TN; \
  const ulong bh = bhf / F;                                                                           \
  const uint f = (uint)(bhf % F);                                                                     \
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);

/* Per tile = group 0 (token tile st, row tile rt: the row tiles of one token tile run side by side) and
 * (b, h, f) = group 1:
 *   out[r][s] = Σ_c op(M)[r][c]·X[c][s] over frame f's tokens, op(M)[r][c] = M[c][r] when transpose, else M[r][c];
 *   M = states[b, h, f] (B, H, F, D, D), except that with last_init frame F−1 reads init (zero without has_init).
 * Launch: local (32·WM·WN), global (local·n_rt·n_stiles, B·H·F), n_rt = ceil(D / TM), n_stiles = ceil(S / TN). */
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_apply_tc(
    __global const float *x, ulong x_off, __global const float *states, ulong st_off, __global const float *init,
    ulong init_off, __global float *out, ulong out_off, ulong N, uint S, uint F, uint n_rtiles, int transpose,
    int last_init, int has_init CD_PK_ARGS) {
  __local float Ms[CD_KC * CD_LDA];        /* Ms[c][r] = op(M)[row0 + r][c0 + c] */
  __local float4 Xs4[CD_KC * CD_LDS / 4]; /* Xs[c][s] = X[c0 + c][s0 + s]       */
  CD_APPLY_IDS
  const uint Sf = cd_frame_len(f, S);
#ifdef CD_PACKED
  if (s0 >= Sf) return; /* a tile past this frame's end (the grid is sized by the longest frame) */
#endif
  const int from_init = last_init && cd_frame_last(f, F);
  const int zero = from_init && !has_init;
  __global const float *M =
      from_init ? init + init_off + cd_state_row(bh, f, F) * CD_DD : states + st_off + bhf * CD_DD;
  float tot[CD_MR][CD_NR][4];
  cd_apply_products(tot, x + x_off + base, M, transpose, zero, row0, s0, Sf, N, Ms, Xs4, lid, wm, wn, g, t);

  __global float *ob = out + out_off + base + s0;
  CD_TC_CELLS(mi, ni, h, 2) {
    const uint r = row0 + 16 * (CD_MR * wm + mi) + g + 8 * h;
    const uint s = 8 * (CD_NR * wn + ni) + 2 * t;
    if (r >= CD_D) continue;
#if CD_VEC
    if (s0 + s < Sf) *(__global float2 *)(ob + (ulong)r * N + s) = (float2)(tot[mi][ni][2 * h], tot[mi][ni][2 * h + 1]);
#else
    if (s0 + s < Sf) ob[(ulong)r * N + s] = tot[mi][ni][2 * h];
    if (s0 + s + 1 < Sf) ob[(ulong)r * N + s + 1] = tot[mi][ni][2 * h + 1];
#endif
  }
}

#ifndef CD_PACKED
/* Phase C of the camera branch's scan pair with the output transform (docs/math.md §8.5) as its epilogue: the tile's
 * o = Mᵀ·Q (M = states[b, h, f], the pair's summed state) goes through local memory Os[s][r] and each work-item
 * writes whole 4-channel units of y (B, N, H, D): rows r < D/2 in 4-groups y = proj_o·o (proj_o (B, N, 4, 4) per
 * token), the others the inverse RoPE y[r] = o[r]·cos[r] − o[r^1]·sin[r] (tables (N, D/2)); the same operations
 * in the same order as cd_output_transform (cl/branch.cl), so y is bit-identical to phase C and that kernel.
 * The pair's out (B, H, D, N) is not written. y is in the activations' storage (CD_DTYPE, common.cl; rounded on the
 * store as cd_output_transform rounds it). Launch as cd_apply_tc; TM is a multiple of 16, so no 4-group or RoPE pair
 * straddles two row tiles. The host has checked that y_off, po_off, rc_off and rs_off are multiples of 4 elements
 * (D % 8 == 0): every 4-channel unit is one 16-byte load or store (8-byte in 16-bit storage). */
#define CD_LDO (CD_TM + 4) /* Os row stride: 4 mod 32 floats, the fragment stores conflict-free */
#define CD_XO (CD_KC * CD_LDS > CD_TN * CD_LDO ? CD_KC * CD_LDS : CD_TN * CD_LDO)
__kernel __attribute__((reqd_work_group_size(CD_W, 1, 1))) void cd_apply_ot_tc(
    __global const float *restrict x, ulong x_off, __global const float *restrict states, ulong st_off,
    __global const float *restrict proj_o, ulong po_off, __global const float *restrict rope_cos, ulong rc_off,
    __global const float *restrict rope_sin, ulong rs_off, __global cd_store_t *restrict y, ulong y_off, ulong N,
    uint S, uint F, uint H, uint n_rtiles) {
  __local float Ms[CD_KC * CD_LDA];
  __local float4 XO4[CD_XO / 4]; /* Xs during the products, then Os[s][r] = o[row0 + r][s0 + s] */
  CD_APPLY_IDS
  float tot[CD_MR][CD_NR][4];
  cd_apply_products(tot, x + x_off + base, states + st_off + bhf * CD_DD, 1, 0, row0, s0, S, N, Ms, XO4, lid, wm,
                    wn, g, t);
  local float *Os = (local float *)XO4;
  barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last Xs chunk */
  CD_TC_CELLS(mi, ni, e, 4)
    Os[(8 * (CD_NR * wn + ni) + 2 * t + (e & 1)) * CD_LDO + 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1)] =
        tot[mi][ni][e];
  barrier(CLK_LOCAL_MEM_FENCE);
  const ulong b = bh / H;
  const uint h = (uint)(bh % H);
#pragma unroll
  for (uint u = lid; u < CD_TN * (CD_TM / 4); u += CD_W) {
    const uint s = u / (CD_TM / 4), r = row0 + 4 * (u % (CD_TM / 4));
    if (r >= CD_D || s0 + s >= S) continue;
    const float4 v = vload4(0, Os + s * CD_LDO + (r - row0));
    const ulong n = cd_frame_start(f, S) + s0 + s, tok = b * N + n;
    float4 o;
    if (r < CD_D / 2) {
      __global const float4 *P = (__global const float4 *)(proj_o + po_off + tok * 16);
      const float4 p0 = P[0], p1 = P[1], p2 = P[2], p3 = P[3];
      CD_OT_CAM(o, p0, p1, p2, p3, v);
    } else {
      const ulong rrow = n * (CD_D / 2) + (r - CD_D / 2);
      const float4 c = *(__global const float4 *)(rope_cos + rc_off + rrow);
      const float4 sn = *(__global const float4 *)(rope_sin + rs_off + rrow);
      CD_OT_ROPE(o, v, c, sn);
    }
    CD_ST4(y, y_off + (tok * H + h) * CD_D + r, o, 1);
  }
}
#undef CD_LDO
#undef CD_XO
#endif /* !CD_PACKED */
#endif /* CD_APPLY */

/* ----------------------------------------------------------------------------------------- frames */
#ifdef CD_FRAMES
#define CD_TS CD_TM             /* tokens per work-group: the rows of every product here */
#define CD_LDT (CD_TS + 8)      /* row stride of Ks / Es ([d][token]): 8 or 24 mod 32 floats */
#define CD_LDBS CD_LDR(CD_TN)   /* the staged B chunks (Mprev, G or their transposes): KC/2 planes of TN + pad slots */
#define CD_QT (CD_TS / 4)
#define CD_U1 ((CD_TN / 4) * (CD_KC / 2)) /* float4 pairs of a staged stage-1 B chunk */
#define CD_U2 (CD_TN * (CD_KC / 8))       /* and of a stage-2 one (the same count) */
#define CD_LU ((CD_U1 + CD_W - 1) / CD_W)  /* per work-item */
#ifndef CD_FRAMES_PF /* 1: the next B chunk's loads issued before this chunk's products (faster on the H200 than
                        loading each chunk when it is staged) */
#define CD_FRAMES_PF 1
#endif

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
    ulong part_off, ulong N, uint S, uint F, uint ntiles, int reverse, int has_init CD_PK_ARGS) {
  __local float4 Ks4[CD_D * CD_LDT / 4]; /* Ks[d][s] = K[d][s0 + s]; later Es[c][s], the A operand of stage 2 */
  __local cd_slot Bs[CD_SLOTS(CD_TN)]; /* a staged B chunk: Mprev or G rows k (stage 1), their columns (stage 2) */
  __local float red[CD_WN * 4 * CD_TS + CD_W];
  __local float *Ks = (__local float *)Ks4;
  const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const uint wm = warp / CD_WN, wn = warp % CD_WN, g = lane >> 2, t = lane & 3;
  const ulong bhf = get_group_id(1);
  const uint tile = get_group_id(0), s0 = tile * CD_TS;
  const ulong bh = bhf / F;
  const uint f = (uint)(bhf % F);
  const ulong base = bh * (ulong)CD_D * N + cd_frame_start(f, S);
  const uint Sf = cd_frame_len(f, S);
#ifdef CD_PACKED
  if (s0 >= Sf) { /* a tile past this frame's end (the grid is sized by the longest frame): no ddecay partial */
    if (lid == 0) part[part_off + bhf * ntiles + tile] = 0.0f;
    return;
  }
#endif
  const ulong bbase = cd_beta_base(bh, bhf, f, S, N);
  /* Mprev: the state before key frame f's update (init at the chain's start, zero without one) */
  const int prev_init = reverse ? cd_frame_last(f, F) : cd_frame_first(f, F);
  const int prev_zero = prev_init && !has_init;
  __global const float *Mp =
      prev_init ? init + init_off + cd_state_row(bh, f, F) * CD_DD : states + st_off + (bh * F + (reverse ? f : f - 1)) * CD_DD;
  __global const float *Gf = G + G_off + bhf * CD_DD;
  const float d = decay[decay_off + bhf];
  /* the matrices' rows in 16-byte loads where their offsets allow (D % 8 == 0, every index below a multiple of 4) */
  const int al4 = ((st_off | init_off | G_off) & 3) == 0;
#define CD_MLD4(p) (al4 ? *(__global const float4 *)(p) : vload4(0, (p)))

  for (uint e = lid; e < CD_D * CD_QT; e += CD_W) {
    const uint c = e / CD_QT, q = e % CD_QT;
    Ks4[(c * CD_LDT) / 4 + q] = cd_load4(k + k_off + base + (ulong)c * N, s0 + 4 * q, Sf);
  }

  /* stage 1: Y = K·Mprev, dΔ = K·G (tokens x value columns) */
  float Y[CD_MR][CD_NR][4], Dl[CD_MR][CD_NR][4], Kd[CD_MR][CD_NR][4];
  CD_TC_CELLS(mi, ni, e, 4) Y[mi][ni][e] = Dl[mi][ni][e] = Kd[mi][ni][e] = 0.0f;
  /* The staged B chunks go through registers pf: with CD_FRAMES_PF the next chunk's loads are issued before this
   * chunk's products (its L2 latency hidden behind them), else each chunk is loaded just before it is staged.
   * Stage 1: B(k, n) = src[k·D + n], k = k0 + 8q + t (+4): units of 4 columns n at one plane. */
  float4 pf[CD_LU > 0 ? CD_LU : 1][2];
#define CD_FETCH1(src, zero, k0)                                                                            \
  _Pragma("unroll") for (int u = 0; u < CD_LU; u++) {                                                      \
    const uint e = lid + u * CD_W, n = 4 * (e % (CD_TN / 4)), p = e / (CD_TN / 4);                         \
    const uint kk = (k0) + 8 * (p / 4) + p % 4;                                                             \
    const int ok = e < CD_U1 && n < CD_D && !(zero);                                                        \
    pf[u][0] = ok ? CD_MLD4((src) + kk * CD_D + n) : (float4)(0.0f);                                        \
    pf[u][1] = ok ? CD_MLD4((src) + (kk + 4) * CD_D + n) : (float4)(0.0f);                                  \
  }
#define CD_PUT1                                                                                             \
  _Pragma("unroll") for (int u = 0; u < CD_LU; u++) {                                                      \
    const uint e = lid + u * CD_W;                                                                          \
    if (e < CD_U1) cd_put_col4(Bs, CD_LDBS, 4 * (e % (CD_TN / 4)), e / (CD_TN / 4), pf[u][0], pf[u][1]);   \
  }
#define CD_STAGE1(acc, src, zero)                                                                           \
  if (CD_FRAMES_PF) CD_FETCH1(src, zero, 0u);                                                              \
  for (uint k0 = 0; k0 < CD_D; k0 += CD_KC) {                                                               \
    if (!CD_FRAMES_PF) CD_FETCH1(src, zero, k0);                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                           \
    CD_PUT1                                                                                                 \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                           \
    if (CD_FRAMES_PF && k0 + CD_KC < CD_D) CD_FETCH1(src, zero, k0 + CD_KC);                               \
    cd_tc_rawa(acc, Ks + k0 * CD_LDT + 16 * CD_MR * wm, 1, CD_LDT, Bs + 8 * CD_NR * wn, CD_LDBS, g, t);     \
  }
  CD_STAGE1(Y, Mp, prev_zero)
  CD_STAGE1(Dl, Gf, 0)
#undef CD_STAGE1
#undef CD_PUT1
#undef CD_FETCH1

  /* elementwise: dv, the dbeta and ddecay partials; Y becomes Δ = β·R, Dl becomes −d·dR */
  __global const float *vb = v + v_off + base;
  float pd = 0.0f, pb[CD_MR][2];
#pragma unroll
  for (int mi = 0; mi < CD_MR; mi++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const uint s = 16 * (CD_MR * wm + mi) + g + 8 * h, gs = s0 + s;
      const int valid = gs < Sf;
      const float b = valid ? beta[beta_off + bbase + gs] : 0.0f;
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
    if (s0 + s < Sf) dbeta[dbeta_off + bbase + s0 + s] = sum;
  }
  if (lid == 0) {
    float sum = 0.0f;
    for (uint u = 0; u < CD_W; u++) sum += red[CD_WN * 4 * CD_TS + u];
    part[part_off + bhf * ntiles + tile] = -sum;
  }

  /* stage 2: dk = Δ·Gᵀ + (−d·dR)·Mprevᵀ, the A operand through Es[c][s] (in Ks' place) */
  for (int pass = 0; pass < 2; pass++) {
    barrier(CLK_LOCAL_MEM_FENCE);
    CD_TC_CELLS(mi, ni, e, 4) {
      const uint m = 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1), c = 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
      if (c < CD_D) Ks[c * CD_LDT + m] = pass ? Dl[mi][ni][e] : Y[mi][ni][e];
    }
    __global const float *src = pass ? Mp : Gf;
    const int zero = pass && prev_zero;
    /* B(c, j) = src[j·D + c]: units of 8 consecutive c of one row j */
#define CD_FETCH2(c0)                                                                                       \
  _Pragma("unroll") for (int u = 0; u < CD_LU; u++) {                                                      \
    const uint e = lid + u * CD_W, j = e % CD_TN, q = e / CD_TN;                                            \
    const int ok = e < CD_U2 && j < CD_D && !zero;                                                          \
    __global const float *row = src + j * CD_D + (c0) + 8 * q;                                              \
    pf[u][0] = ok ? CD_MLD4(row) : (float4)(0.0f);                                                          \
    pf[u][1] = ok ? CD_MLD4(row + 4) : (float4)(0.0f);                                                      \
  }
    if (CD_FRAMES_PF) CD_FETCH2(0u);
    for (uint c0 = 0; c0 < CD_D; c0 += CD_KC) {
      if (!CD_FRAMES_PF) CD_FETCH2(c0);
      barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
      for (int u = 0; u < CD_LU; u++) {
        const uint e = lid + u * CD_W;
        if (e < CD_U2) cd_put_row8(Bs, CD_LDBS, e % CD_TN, e / CD_TN, pf[u][0], pf[u][1]);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (CD_FRAMES_PF && c0 + CD_KC < CD_D) CD_FETCH2(c0 + CD_KC);
      cd_tc_rawa(Kd, Ks + c0 * CD_LDT + 16 * CD_MR * wm, 1, CD_LDT, Bs + 8 * CD_NR * wn, CD_LDBS, g, t);
    }
#undef CD_FETCH2
  }
  __global float *kb = dk + dk_off + base;
  CD_TC_CELLS(mi, ni, e, 4) {
    const uint gs = s0 + 16 * (CD_MR * wm + mi) + g + 8 * (e >> 1), j = 8 * (CD_NR * wn + ni) + 2 * t + (e & 1);
    if (j < CD_D && gs < Sf) kb[(ulong)j * N + gs] = Kd[mi][ni][e];
  }
}
#undef CD_MLD4
#endif /* CD_FRAMES */

/* ------------------------------------------------------------------------------------------ probe */
#ifdef CD_PROBE
/* One warp: C (16 x 8) = A (16 x 8)·B (8 x 8) with A[m][k] = a[m·8 + k], B[k][n] = b[k·8 + n], computed twice: through
 * the staged tiles of the gram and the apply (written row-major to c[0, 128)) and through the raw tiles of the
 * frames kernel (c[128, 256)); the host compares both with its own product (fragment layouts, conversion and
 * split all checked at once). */
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void cd_tc_probe(__global const float *a,
                                                                          __global const float *b, __global float *c) {
  __local float As[16 * 8], Bs[8 * 8];
  __local cd_slot Ast[CD_SLOTS(16)], Bst[CD_SLOTS(8)];
  const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  for (uint e = lane; e < 128; e += 32) As[e] = a[e];
  for (uint e = lane; e < 64; e += 32) Bs[e] = b[e];
  if (lane < 16) /* row `lane` of A, planes t = 0..3 */
    for (uint p = 0; p < 4; p++) CD_PUT(Ast, p * CD_LDR(16) + lane, 0, a[lane * 8 + p], a[lane * 8 + p + 4]);
  else if (lane < 24) /* column n = lane − 16 of B */
    for (uint p = 0; p < 4; p++)
      CD_PUT(Bst, p * CD_LDR(8) + lane - 16, 0, b[p * 8 + lane - 16], b[(p + 4) * 8 + lane - 16]);
  barrier(CLK_LOCAL_MEM_FENCE);
  float tot[CD_MR][CD_NR][4], raw[CD_MR][CD_NR][4];
#pragma unroll
  for (int e = 0; e < 4; e++) tot[0][0][e] = raw[0][0][e] = 0.0f;
  cd_tc_tile(tot, Ast, CD_LDR(16), Bst, CD_LDR(8), g, t);
  cd_tc_block_raw(raw, As, 8, 1, Bs, 8, 1, g, t);
#pragma unroll
  for (int e = 0; e < 4; e++) {
    c[(g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = tot[0][0][e];
    c[128 + (g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = raw[0][0][e];
  }
}
#endif /* CD_PROBE */
