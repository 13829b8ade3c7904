/* Prep forward, register-resident form (SPEC section 2): one pass over q_raw, k_raw and v_raw, each element read
 * from device memory exactly once.
 *
 * cd_prep_fused (prep.cl) sums each token's squares over all C channels and then reads q/k a second time per
 * head, hoping for the L2 cache; at sana480 a thousand resident work-groups with 143 KB of q/k each do not fit
 * in it, so device memory sees q and k twice. Here a work-group takes CD_TT consecutive tokens of one batch row
 * across ALL heads and keeps their q and k rows in registers between the inverse RMS and the transform:
 * work-item (slot, t, g) holds the float4 unit g of token t for the heads h = slot + CD_HS*i, i < CD_HPI
 * (CD_HS*CD_HPI >= H), so q and k are loaded once with 16-byte loads along the rows. v is loaded one head
 * ahead of its use. The outputs go out through a local tile per (head slot, token) row (two tiles used in
 * turn, one barrier per tile): CD_TT consecutive tokens of each (h, d) row of (B, H, D, N) per store.
 *
 * Build options: CD_DTYPE, CD_D, CD_TT (tokens per work-group), CD_HS (head slots), CD_HPI (heads per slot; the
 * kernel takes any H <= CD_HS * CD_HPI). Work-group size CD_TT * CD_D/4 * CD_HS; global size ceil(N / CD_TT) * B
 * work-groups. Arguments as cd_prep_fused, then `al`. Tiles never straddle batch rows. Sums are in a fixed order:
 * deterministic. */

#ifndef CD_D
#define CD_D 8
#endif
#ifndef CD_TT
#define CD_TT 8
#endif
#ifndef CD_HS
#define CD_HS 1
#endif
#ifndef CD_HPI
#define CD_HPI 1
#endif
#define CD_DH (CD_D / 2)
#define CD_G4 (CD_D / 4)
#define CD_RL (CD_TT * CD_G4 * CD_HS)               /* work-group size */
#define CD_ROWS (CD_HS * CD_TT)                     /* (head slot, token) rows of a tile */
#define CD_TSTR (CD_D + (36 - CD_D % 32) % 32)      /* tile row stride: = 4 (mod 32) banks */

/* 16-byte loads: `al` (run time) says every tensor, weight, table and matrix starts at a multiple of 4 elements */
#define CD_LDF4(p, i) (al ? *(global const float4 *)((p) + (i)) : vload4(0, (p) + (i)))
#if CD_DTYPE == 0
#define CD_LD4(p, i) CD_LDF4(p, i)
#elif CD_DTYPE == 1
#define CD_LD4(p, i) vload_half4(0, (p) + (i))
#else
#define CD_LD4(p, i) as_float4(convert_uint4(al ? *(global const ushort4 *)((p) + (i)) : vload4(0, (p) + (i))) << 16)
#endif

kernel __attribute__((reqd_work_group_size(CD_RL, 1, 1))) void cd_prep_regs(
    global const cd_store_t *q_raw, ulong q_raw_off, global const cd_store_t *k_raw, ulong k_raw_off,
    global const cd_store_t *v_raw, ulong v_raw_off, global const float *qw, ulong qw_off, global const float *kw,
    ulong kw_off, global const float *proj_q, ulong pq_off, global const float *proj_kv, ulong pkv_off,
    global const float *rope_cos, ulong rc_off, global const float *rope_sin, ulong rs_off, global float *inv_rms,
    ulong inv_off, global cd_store_t *q_out, ulong q_off, global cd_store_t *k_out, ulong k_off,
    global cd_store_t *v_out, ulong v_off, global float *infl, ulong infl_off, ulong N, uint H, ulong B,
    float k_scale, float eps, uint al) {
  local float tile[2][CD_ROWS * CD_TSTR];
  local float part[2][CD_ROWS][CD_G4 + 1];
  local float irms[2][CD_TT];
  local float4 Pl[2][CD_TT][4];

  const uint lid = get_local_id(0);
  const uint g = lid % CD_G4, row = lid / CD_G4, t = row % CD_TT, slot = row / CD_TT;
  const ulong tiles_per_row = (N + CD_TT - 1) / CD_TT;
  const ulong b = get_group_id(0) / tiles_per_row;
  const ulong n0 = (get_group_id(0) % tiles_per_row) * CD_TT;
  const uint nt = (N - n0) < CD_TT ? (uint)(N - n0) : CD_TT;
  const uint C = H * CD_D;
  const bool act = t < nt;
  const ulong tok = b * N + n0 + t;
  const ulong rbase = tok * C + 4 * g; /* + h * CD_D */

  /* 1. this item's q and k units of every head it owns, and their squares */
  float4 qr[CD_HPI], kr[CD_HPI];
  float sq = 0.0f, sk = 0.0f;
#pragma unroll
  for (uint i = 0; i < CD_HPI; i++) {
    const uint h = slot + CD_HS * i;
    qr[i] = kr[i] = (float4)(0.0f);
    if (act && h < H) {
      qr[i] = CD_LD4(q_raw, q_raw_off + rbase + h * CD_D);
      kr[i] = CD_LD4(k_raw, k_raw_off + rbase + h * CD_D);
    }
  }
  float4 vn = (float4)(0.0f);
  if (act && slot < H) vn = CD_LD4(v_raw, v_raw_off + rbase + slot * CD_D);
#pragma unroll
  for (uint i = 0; i < CD_HPI; i++) {
    sq = fma(qr[i].x, qr[i].x, fma(qr[i].y, qr[i].y, fma(qr[i].z, qr[i].z, fma(qr[i].w, qr[i].w, sq))));
    sk = fma(kr[i].x, kr[i].x, fma(kr[i].y, kr[i].y, fma(kr[i].z, kr[i].z, fma(kr[i].w, kr[i].w, sk))));
  }
  /* camera matrices of the tile's tokens (shared by every head) */
  for (uint idx = lid; idx < 2 * CD_TT * 4; idx += CD_RL) {
    const uint which = idx / (CD_TT * 4), tt = (idx / 4) % CD_TT, r = idx % 4;
    float4 x = (float4)(0.0f);
    if (tt < nt) x = CD_LDF4((which ? proj_kv + pkv_off : proj_q + pq_off), (b * N + n0 + tt) * 16 + 4 * r);
    Pl[which][tt][r] = x;
  }
  /* RoPE coefficients of this item's unit (second half; shared by every head) */
  const bool cam = 4 * g < CD_DH;
  float4 cs = (float4)(0.0f), sn = (float4)(0.0f);
  if (act && !cam) {
    const ulong rrow = (n0 + t) * CD_DH + (4 * g - CD_DH);
    cs = CD_LDF4(rope_cos, rc_off + rrow);
    sn = CD_LDF4(rope_sin, rs_off + rrow);
  }
  part[0][row][g] = sq;
  part[1][row][g] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < CD_TT) {
    float a = 0.0f, c = 0.0f;
    for (uint s = 0; s < CD_HS; s++)
      for (uint u = 0; u < CD_G4; u++) {
        a += part[0][s * CD_TT + lid][u];
        c += part[1][s * CD_TT + lid][u];
      }
    const float invC = 1.0f / (float)C;
    const float iq = 1.0f / sqrt(a * invC + eps), ik = 1.0f / sqrt(c * invC + eps);
    irms[0][lid] = iq;
    irms[1][lid] = ik;
    if (lid < nt) {
      inv_rms[inv_off + b * N + n0 + lid] = iq;
      inv_rms[inv_off + B * N + b * N + n0 + lid] = ik;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float iq = irms[0][t], ik = irms[1][t];

  /* 2. per owned head: transform in registers, then three tiles (q, k, v) out through local memory */
#pragma unroll
  for (uint i = 0; i < CD_HPI; i++) {
    const uint h = slot + CD_HS * i;
    const bool on = act && h < H;
    float4 vnext = (float4)(0.0f);
    if (i + 1 < CD_HPI && act && h + CD_HS < H) vnext = CD_LD4(v_raw, v_raw_off + rbase + (h + CD_HS) * CD_D);
    float4 qo = (float4)(0.0f), ko = (float4)(0.0f), vo = (float4)(0.0f);
    float pre = 0.0f, post = 0.0f;
    if (on) {
      const uint c = h * CD_D + 4 * g;
      const float4 wq = CD_LDF4(qw, qw_off + c), wk = CD_LDF4(kw, kw_off + c);
      const float4 qn = fmax(qr[i] * iq * wq, 0.0f);
      const float4 kn = fmax(kr[i] * ik * wk, 0.0f) * k_scale;
      pre = fma(kn.x, kn.x, fma(kn.y, kn.y, fma(kn.z, kn.z, kn.w * kn.w)));
      if (cam) {
        qo = (float4)(dot(Pl[0][t][0], qn), dot(Pl[0][t][1], qn), dot(Pl[0][t][2], qn), dot(Pl[0][t][3], qn));
        ko = (float4)(dot(Pl[1][t][0], kn), dot(Pl[1][t][1], kn), dot(Pl[1][t][2], kn), dot(Pl[1][t][3], kn));
        vo = (float4)(dot(Pl[1][t][0], vn), dot(Pl[1][t][1], vn), dot(Pl[1][t][2], vn), dot(Pl[1][t][3], vn));
      } else {
        qo = fma(qn.yxwz, sn, qn * cs);
        ko = fma(kn.yxwz, sn, kn * cs);
        vo = fma(vn.yxwz, sn, vn * cs);
      }
      post = fma(ko.x, ko.x, fma(ko.y, ko.y, fma(ko.z, ko.z, ko.w * ko.w)));
    }
    vn = vnext;
    for (uint w = 0; w < 3; w++) {
      local float *tb = tile[(3 * i + w) & 1];
      vstore4(w == 0 ? qo : w == 1 ? ko : vo, 0, tb + row * CD_TSTR + 4 * g);
      if (w == 0) {
        part[0][row][g] = pre;
        part[1][row][g] = post;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (w == 0 && lid < CD_ROWS) {
        /* inflation_sq of (head slot, token) row lid, summed in a fixed order */
        const uint t2 = lid % CD_TT, h2 = lid / CD_TT + CD_HS * i;
        if (t2 < nt && h2 < H) {
          float sp = 0.0f, so = 0.0f;
          for (uint u = 0; u < CD_G4; u++) {
            sp += part[0][lid][u];
            so += part[1][lid][u];
          }
          infl[infl_off + (b * H + h2) * N + n0 + t2] = fmax(so, 1e-12f) / fmax(sp, 1e-12f);
        }
      }
      global cd_store_t *dst = w == 0 ? q_out : w == 1 ? k_out : v_out;
      const ulong doff = w == 0 ? q_off : w == 1 ? k_off : v_off;
      for (uint idx = lid; idx < CD_ROWS * CD_D; idx += CD_RL) {
        const uint t2 = idx % CD_TT, d = (idx / CD_TT) % CD_D, s2 = idx / (CD_TT * CD_D), h2 = s2 + CD_HS * i;
        if (t2 < nt && h2 < H)
          CD_STORE(dst, doff + ((b * H + h2) * CD_D + d) * N + n0 + t2, tb[(s2 * CD_TT + t2) * CD_TSTR + d]);
      }
    }
  }
}
