/* Scan plans without a device (the AUTO choice: test_scan_auto.c): the tensor-core tile resolution (heuristic,
 * per-device table, saved entries, overrides) with each family's constraints and local-memory formula, and the
 * fallback when an entry does not fit. A fake context carries only the device facts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "scan/tiles.h"
#include "scan/engine.h"
#include "testutil.h"
#include "scan/tc.h"

static camdelta_device_info facts(const char *vendor, const char *name, cl_device_type type, unsigned cus,
                                  size_t max_wg, uint64_t local) {
  camdelta_device_info d;
  memset(&d, 0, sizeof d);
  snprintf(d.device_vendor, sizeof d.device_vendor, "%s", vendor);
  snprintf(d.device_name, sizeof d.device_name, "%s", name);
  d.type = type, d.compute_units = cus, d.max_work_group_size = max_wg, d.local_mem_bytes = local;
  return d;
}

/* A context with these facts only: no OpenCL objects; the tuning state starts empty (no file, no environment). */
static camdelta_context *fake(const camdelta_device_info *d) {
  camdelta_context *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(mtx_init(&c->lock, mtx_plain), thrd_success);
  c->info = *d;
  cd_tc_context *s = cd_tc_context_of(c);
  assert_non_null(s);
  s->tune_loaded = 1;
  return c;
}

static void fake_free(camdelta_context *c) {
  cd_context_ext_free(c);
  mtx_destroy(&c->lock);
  free(c);
}

static void check_fits(camdelta_context *c, int family, size_t D, const cd_tc_tiles *t) {
  if (cd_tc_check(c, family, D, 1, t) != CAMDELTA_OK)
    fail_msg("%s D=%zu WM=%u WN=%u MR=%u NR=%u KC=%u: %s", cd_tc_family_names[family], D, t->wm, t->wn, t->mr, t->nr,
             t->kc, camdelta_last_message());
}

/* Every head dim gets tiles that meet the constraints on a 48 KiB, 1024-item device (after the fallback). */
static void test_tiles_every_head_dim(void **state) {
  (void)state;
  const camdelta_device_info d = facts("NVIDIA Corporation", "Some GPU", CL_DEVICE_TYPE_GPU, 100, 1024, 49152);
  camdelta_context *c = fake(&d);
  for (size_t D = 8; D <= 128; D += 8) {
    for (int f = 0; f < CD_TC_FAMILIES; f++) {
      cd_tc_tiles t;
      const char *from;
      TU_OK(cd_tc_resolve(c, f, D, 1, &t, &from));
      assert_string_equal(from, "heuristic");
      if (cd_tc_check(c, f, D, 1, &t) != CAMDELTA_OK) t = cd_tc_safe_tiles(f, D); /* as cd_tc_tiles_for does */
      check_fits(c, f, D, &t);
      if (f == CD_TC_FRAMES) {
        assert_int_equal(D % t.kc, 0);
        assert_true(8 * t.wn * t.nr >= D);
      }
    }
    /* the safe tiles fit a smaller device too (48 KiB, 256 items; every device with NVIDIA tensor cores has
     * 48 KiB of local memory per work-group) */
    const camdelta_device_info s = facts("X", "small", CL_DEVICE_TYPE_GPU, 8, 256, 49152);
    camdelta_context *sc = fake(&s);
    for (int f = 0; f < CD_TC_FAMILIES; f++) {
      const cd_tc_tiles t = cd_tc_safe_tiles(f, D);
      check_fits(sc, f, D, &t);
    }
    fake_free(sc);
  }
  fake_free(c);
}

/* The output-transform epilogue's tiles (cd_apply_ot_tc): two column warps, at most 64 tokens wide, from either of
 * the apply tiles an H200 entry may hold (WN=1 or WN=2). */
static void test_apply_ot_tiles(void **state) {
  (void)state;
  const cd_tc_tiles a1 = {2, 1, 2, 8, 16}, a2 = {2, 2, 2, 8, 16};
  const cd_tc_tiles o1 = cd_tc_apply_ot_tiles(&a1, 1024), o2 = cd_tc_apply_ot_tiles(&a2, 1024);
  assert_true(o1.wm == 2 && o1.wn == 2 && o1.mr == 2 && o1.nr == 4 && o1.kc == 16);
  assert_true(o2.wm == 2 && o2.wn == 2 && o2.mr == 2 && o2.nr == 4 && o2.kc == 16);
}

/* The local-memory formulas match the kernels' __local arrays. The gram's staged tiles: 16 planes (KC/2) of 64 + 4
 * slots of 8 bytes per operand in both precisions (the split stages the f32 values), and a skew of 16 / (KC/8)
 * slots for each 8-token unit after the first (3 units of 4 at KC = 32, 1 of 8 at KC = 16). The frames kernel:
 * the raw K tile (D rows of TM + 8 floats), one staged B chunk of TN columns in 16-byte slots (split) or 8-byte ones (tf32),
 * the reduction scratch. */
static void test_local_memory_formula(void **state) {
  (void)state;
  const cd_tc_tiles g = {2, 2, 2, 4, 32}, fr = {2, 2, 1, 7, 16}, big = {4, 1, 1, 14, 16};
  assert_int_equal(cd_tc_local_bytes(CD_TC_GRAM, 112, 1, &g), 17408 + 2 * 8 * 3 * 4);
  assert_int_equal(cd_tc_local_bytes(CD_TC_GRAM, 112, 0, &g), 17408 + 2 * 8 * 3 * 4);
  const cd_tc_tiles g16 = {2, 2, 2, 4, 16};
  assert_int_equal(cd_tc_local_bytes(CD_TC_GRAM, 112, 1, &g16), 8704 + 2 * 8 * 1 * 8);
  assert_int_equal(cd_tc_local_bytes(CD_TC_APPLY, 112, 1, &g), 18432); /* raw tiles, as before */
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, 1, &fr), 17920 + 14592 + 1536);
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, 1, &big), 32256 + 14592 + 1536);
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, 0, &big), 32256 + 7424 + 1536);
  const camdelta_device_info d = facts("NVIDIA Corporation", "Some GPU", CL_DEVICE_TYPE_GPU, 100, 1024, 49152);
  camdelta_context *c = fake(&d);
  const cd_tc_tiles toobig = {4, 2, 1, 7, 16}; /* skipped by the H200 sweep */
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, 1, &toobig), 32256 + 14592 + 3072);
  assert_int_equal(cd_tc_check(c, CD_TC_FRAMES, 112, 1, &toobig), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "local memory"));
  const cd_tc_tiles badkc = {2, 2, 1, 8, 16};
  assert_int_equal(cd_tc_check(c, CD_TC_FRAMES, 120, 1, &badkc), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "KC must divide D"));
  const cd_tc_tiles wide = {8, 8, 1, 1, 8};
  assert_int_equal(cd_tc_check(c, CD_TC_GRAM, 64, 1, &wide), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "work-group"));
  fake_free(c);
}

/* Table entries on the H200 at D=112 and 64, heuristics elsewhere; overrides win and read back; saved entries apply. */
static void test_resolution_order(void **state) {
  (void)state;
  const camdelta_device_info d = facts("NVIDIA Corporation", "NVIDIA H200", CL_DEVICE_TYPE_GPU, 132, 1024, 49152);
  camdelta_context *c = fake(&d);
  cd_tc_tiles t;
  const char *from;
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 112, 1, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 2 && t.wn == 2 && t.mr == 2 && t.nr == 4 && t.kc == 32);
  TU_OK(cd_tc_resolve(c, CD_TC_FRAMES, 112, 1, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 4 && t.wn == 1 && t.nr == 14);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 64, 1, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 2 && t.wn == 2 && t.mr == 2 && t.nr == 2 && t.kc == 32);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 128, 1, &t, &from));
  assert_string_equal(from, "heuristic");
  /* tf32 has its own gram entry at D=112; the other families and D=64 share exact's */
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 112, 0, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 4 && t.wn == 2 && t.mr == 1 && t.nr == 4 && t.kc == 32);
  TU_OK(cd_tc_resolve(c, CD_TC_FRAMES, 112, 0, &t, &from));
  assert_true(t.wm == 4 && t.wn == 1 && t.nr == 14);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 64, 0, &t, &from));
  assert_true(t.wm == 2 && t.wn == 2 && t.mr == 2 && t.nr == 2 && t.kc == 32);
  /* a saved entry (as `camdelta tune --save` leaves) beats the table */
  cd_tc_context *s = cd_tc_context_of(c);
  s->tune_nsaved = 1;
  const unsigned row[8] = {CD_TC_GRAM, 100, 120, 1, 2, 2, 4, 16};
  memcpy(s->tune_saved[0], row, sizeof row);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 112, 1, &t, &from));
  assert_string_equal(from, "saved");
  assert_true(t.wm == 1 && t.wn == 2 && t.kc == 16);
  /* an override beats both and reads back; unset keys keep the resolved value */
  TU_OK(camdelta_tune_set(c, "gram", "KC=64"));
  char got[160];
  TU_OK(camdelta_tune_get(c, "gram", 112, got, sizeof got));
  assert_non_null(strstr(got, "KC=64 (camdelta_tune_set); for D=112: WM=1 WN=2 MR=2 NR=4 KC=64 (override)"));
  /* frames: overriding WN alone re-derives NR so that the tile covers D */
  TU_OK(camdelta_tune_set(c, "frames", "WN=2"));
  TU_OK(cd_tc_resolve(c, CD_TC_FRAMES, 112, 1, &t, &from));
  assert_true(t.wn == 2 && 8 * t.wn * t.nr >= 112);
  TU_OK(camdelta_tune_set(c, "gram", NULL));
  TU_OK(camdelta_tune_get(c, "gram", 112, got, sizeof got));
  assert_non_null(strstr(got, "KC=auto; for D=112: WM=1 WN=2 MR=2 NR=4 KC=16 (saved)"));
  /* bad input */
  assert_int_equal(camdelta_tune_get(c, "gram", 12, got, sizeof got), CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(camdelta_tune_get(c, "nope", 64, got, sizeof got), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_get(c, "gram", 64, got, 4), CAMDELTA_ERROR_INVALID_ARGUMENT);
  tu_tune_refused(c, "gram", "WM=0", NULL);
  fake_free(c);
}

/* ------------------------------------------------------------------------ FMA tiles (src/scan/tiles.c) */

/* Given device limits -> expected tiles (the reference: a change here is a change of what runs). */
static void test_fma_tiles_given_limits(void **state) {
  (void)state;
  const camdelta_device_info h200 = facts("NVIDIA Corporation", "NVIDIA H200", CL_DEVICE_TYPE_GPU, 132, 1024, 49152);
  const camdelta_device_info cpu = facts("AuthenticAMD", "pthread-haswell", CL_DEVICE_TYPE_CPU, 2, 4096, 4 << 20);
  cd_scan_limits lim;
  cd_scan_limits_from_info(&h200, &lim);
  assert_int_equal(lim.local_bytes, 48896);
  assert_true(lim.max_wg == 256 && lim.min_wg == 32 && lim.gpu == 1 && lim.cus == 132);
  cd_seq_cfg sq;
  TU_OK(cd_seq_configure(&lim, 20, 112, 1560, 256, NULL, NULL, &sq));
  /* at most two work-groups per compute unit (13 blocks of 9 value columns: 260 for 132 SMs), 4 warps each */
  assert_true(sq.J == 9 && sq.TS == 64 && sq.W == 128 && sq.nJ == 13 && sq.OUT == 2);
  assert_string_equal(sq.opts, "-DCD_D=112 -DCD_S_J=9 -DCD_S_TS=64 -DCD_U_WR=64 -DCD_U_RM=2 -DCD_U_WC=2 -DCD_U_RN=5 "
                               "-DCD_P_WR=64 -DCD_P_RM=1 -DCD_P_WC=2 -DCD_P_RN=5 -DCD_O_WR=4 -DCD_O_RM=3 -DCD_O_WC=32 "
                               "-DCD_O_RN=2 -DCD_S_PF=1");
  /* more chains: fewer blocks (40 chains: 6 of 19); once B·H alone fills two per SM, one block is wanted, but
   * a whole D=112 state block does not fit 48 KiB of local memory: two of 56, the smallest token tile */
  TU_OK(cd_seq_configure(&lim, 40, 112, 1560, 256, NULL, NULL, &sq));
  assert_true(sq.nJ == 6 && sq.J == 19);
  TU_OK(cd_seq_configure(&lim, 264, 112, 1560, 256, NULL, NULL, &sq));
  assert_true(sq.nJ == 2 && sq.J == 56 && sq.TS == 8);
  TU_OK(cd_seq_configure(&lim, 20, 64, 1560, 256, NULL, NULL, &sq));
  assert_true(sq.J == 8 && sq.nJ == 8 && sq.W == 128);
  /* the sequential override (CAMDELTA_SEQ_TILES keys): the given fields, layouts re-spread over the new W */
  const unsigned sov[CD_SQ_COUNT] = {8, 32, 256, 2};
  TU_OK(cd_seq_configure(&lim, 20, 112, 1560, 256, sov, "X", &sq));
  assert_true(sq.J == 8 && sq.nJ == 14 && sq.TS == 32 && sq.W == 256 && sq.PF == 0);
  assert_true(sq.u.wr * sq.u.wc == 256 && sq.p.wr * sq.p.wc == 256 && sq.o.wr * sq.o.wc == 256);
  assert_non_null(strstr(sq.opts, "-DCD_S_J=8 -DCD_S_TS=32 "));
  const unsigned sbad[][CD_SQ_COUNT] = {{113, 0, 0, 0}, {0, 2048, 0, 0}, {0, 0, 96, 0}, {0, 0, 2048, 0},
                                        {112, 1024, 0, 0}, {0, 0, 0, 3}};
  const char *const sneedle[] = {"MYVAR: J=113 is more than the head dim", "TS=2048 tokens per tile, at most 1024",
                                 "W=96 must be a power of two in [32, 1024]", "W=2048 must be a power of two",
                                 "MYVAR: J=112 TS=1024 need", "PF=3: 1 prefetches, 2 does not"};
  for (size_t i = 0; i < sizeof sbad / sizeof *sbad; i++) {
    assert_int_not_equal(cd_seq_configure(&lim, 20, 112, 1560, 256, sbad[i], "MYVAR", &sq), CAMDELTA_OK);
    if (!strstr(camdelta_last_message(), sneedle[i]))
      fail_msg("sequential override %zu: '%s' lacks '%s'", i, camdelta_last_message(), sneedle[i]);
  }
  cd_chunk_cfg ck;
  TU_OK(cd_chunk_configure(&lim, 20, 112, 1560, 256, NULL, "X", &ck));
  /* phase B: 20 chains, 132 compute units: 6 blocks wanted (one work-group per unit), 5 of 24 columns */
  assert_true(ck.a_w == 64 && ck.b_w == 256 && ck.b_nj == 5 && ck.b_j == 24 && ck.c_w == 128 && ck.c_ns == 25);
  assert_string_equal(ck.opts, "-DCD_D=112 -DCD_A_WR=8 -DCD_A_RM=7 -DCD_A_WC=8 -DCD_A_RN=7 -DCD_A_KC=32 -DCD_B_J=24 "
                               "-DCD_B_WR=32 -DCD_B_RM=4 -DCD_B_WC=8 -DCD_B_RN=3 -DCD_B_KC=16 -DCD_B_PF=7 -DCD_C_WR=16 "
                               "-DCD_C_RM=7 -DCD_C_WC=8 -DCD_C_RN=8 -DCD_C_KC=16");
  /* the scan pair's 40 chains: 3 blocks of 40 (120 work-groups); 200 chains fill the units with one block,
   * which local memory holds as two of 56 columns */
  TU_OK(cd_chunk_configure(&lim, 40, 112, 1560, 256, NULL, "X", &ck));
  assert_true(ck.b_nj == 3 && ck.b_j == 40);
  TU_OK(cd_chunk_configure(&lim, 200, 112, 1560, 256, NULL, "X", &ck));
  assert_true(ck.b_nj == 2 && ck.b_j == 56);
  /* an override replaces exactly the given fields */
  cd_scan_override o;
  unsigned ov[CD_ST_COUNT] = {[CD_ST_B_J] = 32};
  o = cd_scan_override_of(ov);
  assert_true(!o.a && o.b && !o.c && o.v[CD_ST_B_J] == 32);
  TU_OK(cd_chunk_configure(&lim, 20, 112, 1560, 256, &o, "X", &ck));
  assert_true(ck.b_j == 32 && ck.b_nj == 4 && ck.a_w == 64 && ck.c_w == 128);
  /* phase B's prefetch: a whole step (7 chunks of 7 elements per item) by default; B_KC=8 makes it 14 chunks of
   * 4, of which 14 would need 56 registers (kept); a B_PF that does not divide the chunk count fails */
  o = cd_scan_override_of((const unsigned[CD_ST_COUNT]){[CD_ST_B_KC] = 8});
  TU_OK(cd_chunk_configure(&lim, 20, 112, 1560, 256, &o, "X", &ck));
  assert_true(ck.b_kc == 8 && ck.b_pf == 14);
  o = cd_scan_override_of(
      (const unsigned[CD_ST_COUNT]){[CD_ST_B_J] = 16, [CD_ST_B_WR] = 32, [CD_ST_B_RM] = 4, [CD_ST_B_WC] = 2, [CD_ST_B_RN] = 8});
  TU_OK(cd_chunk_configure(&lim, 20, 112, 1560, 256, &o, "X", &ck));
  assert_true(ck.b_w == 64 && ck.b_pf == 1); /* 28 elements per chunk and item: 7 chunks would need 196 */
  o = cd_scan_override_of((const unsigned[CD_ST_COUNT]){[CD_ST_B_PF] = 2});
  assert_true(o.b && !o.a && !o.c);
  assert_int_equal(cd_chunk_configure(&lim, 20, 112, 1560, 256, &o, "MYVAR", &ck), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "MYVAR: B_PF=2 must divide D / B_KC = 7"));
  o = cd_scan_override_of((const unsigned[CD_ST_COUNT]){[CD_ST_C_KC] = 3});
  assert_int_equal(cd_chunk_configure(&lim, 20, 112, 1560, 256, &o, "MYVAR", &ck), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "MYVAR: C_KC=3 must divide D=112"));
  /* a CPU: one value block, 256 items */
  cd_scan_limits_from_info(&cpu, &lim);
  TU_OK(cd_seq_configure(&lim, 20, 112, 1560, 256, NULL, NULL, &sq));
  assert_true(sq.J == 112 && sq.TS == 64 && sq.W == 256 && sq.nJ == 1 && sq.PF == 0 && sq.OUT == 1);
  /* backward on the H200's limits */
  size_t wg, local;
  cd_sbwd_limits(&h200, &wg, &local);
  assert_true(wg == 1024 && local == 48128);
  cd_sbwd_cfg b;
  TU_OK(cd_sbwd_choose(112, local, wg, wg, wg, wg, &b));
  assert_true(b.rpt == 8 && b.tsg == 32 && b.cb == 8 && b.dpt == 16 && b.tl == 32 && b.tpt == 2 && b.mc == 16 &&
              b.rl == 256);
  /* a kernel allowing fewer items (registers): smaller grams and frames groups */
  TU_OK(cd_sbwd_choose(112, local, 128, 128, wg, 32, &b));
  assert_true(b.rpt == 16 && b.tl == 16 && b.rl == 32);
  const unsigned v[CD_SB_COUNT] = {[CD_SB_MC] = 3};
  assert_int_equal(cd_sbwd_override(112, local, wg, v, "X", &b), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "MC must divide D"));
}

/* Every head dim on devices from 8 KiB / 64 items to 1 MiB / 4096 items: the chosen tiles meet the kernels'
 * constraints (local memory, work-group limits, the layouts covering their tiles) or the call says the device is
 * too small; never a hang (one more value block could leave the width unchanged and looped forever). Calls of
 * one shape class get the same tiles. */
static void test_fma_tiles_constraints(void **state) {
  (void)state;
  const camdelta_device_info devs[] = {
      facts("NVIDIA Corporation", "NVIDIA H200", CL_DEVICE_TYPE_GPU, 132, 1024, 49152),
      facts("AuthenticAMD", "pthread-haswell", CL_DEVICE_TYPE_CPU, 2, 4096, 4 << 20),
      facts("Advanced Micro Devices, Inc.", "gfx90a", CL_DEVICE_TYPE_GPU, 104, 256, 65536),
      facts("X", "accel", CL_DEVICE_TYPE_ACCELERATOR, 8, 128, 16384),
      facts("X", "tiny", CL_DEVICE_TYPE_GPU, 4, 64, 8192)};
  static const size_t BHs[] = {1, 3, 20, 600}, Ss[] = {1, 8, 9, 37, 100, 1560};
  for (size_t di = 0; di < sizeof devs / sizeof *devs; di++) {
    cd_scan_limits lim;
    cd_scan_limits_from_info(&devs[di], &lim);
    for (size_t D = 8; D <= 128; D += 8)
      for (size_t bi = 0; bi < sizeof BHs / sizeof *BHs; bi++)
        for (size_t si = 0; si < sizeof Ss / sizeof *Ss; si++) {
          const size_t BH = BHs[bi], S = Ss[si];
          cd_seq_cfg sq;
          if (cd_seq_configure(&lim, BH, D, S, 256, NULL, NULL, &sq) == CAMDELTA_OK) {
            assert_true(cd_seq_local_bytes(D, &sq) <= lim.local_bytes);
            assert_true(sq.W <= lim.max_wg && sq.J >= 1 && sq.J <= D && sq.nJ * sq.J >= D && (sq.nJ - 1) * sq.J < D);
            assert_true(sq.u.wr * sq.u.wc == sq.W && sq.u.wr * sq.u.rm >= D && sq.u.wc * sq.u.rn >= sq.J);
            assert_true(sq.p.wr * sq.p.rm >= sq.TS && sq.o.wc * sq.o.rn >= sq.TS && sq.o.wr * sq.o.rm >= sq.J);
          } else {
            assert_non_null(strstr(camdelta_last_message(), "too small"));
          }
          cd_chunk_cfg ck;
          if (cd_chunk_configure(&lim, BH, D, S, 256, NULL, "X", &ck) == CAMDELTA_OK) {
            assert_true(cd_chunk_a_local_bytes(&ck) <= lim.local_bytes && cd_chunk_b_local_bytes(D, &ck) <= lim.local_bytes &&
                        cd_chunk_c_local_bytes(&ck) <= lim.local_bytes);
            assert_true(ck.a_w <= lim.max_wg && ck.b_w <= lim.max_wg && ck.c_w <= lim.max_wg);
            assert_true(ck.a_nr * ck.a.wr * ck.a.rm >= D && ck.a_nc * ck.a.wc * ck.a.rn >= 2 * D);
            assert_true(ck.b.wr * ck.b.rm >= D && ck.b.wc * ck.b.rn >= ck.b_j && ck.b_nj * ck.b_j >= D);
            assert_true(D % ck.b_kc == 0 && D % ck.c_kc == 0 && ck.c_nv * ck.c.wr * ck.c.rm >= D &&
                        ck.c_ns * ck.c.wc * ck.c.rn >= S);
            /* the plan's shape class: another S and B*H of the same class give the same kernels */
            const cd_scan_class k1 = cd_scan_shape_class(&lim, BH, D, S);
            for (size_t b2 = 0; b2 < sizeof BHs / sizeof *BHs; b2++)
              for (size_t s2 = 0; s2 < sizeof Ss / sizeof *Ss; s2++) {
                const cd_scan_class k2 = cd_scan_shape_class(&lim, BHs[b2], D, Ss[s2]);
                if (k1.b_blocks != k2.b_blocks || k1.tokens != k2.tokens) continue;
                cd_chunk_cfg c2;
                TU_OK(cd_chunk_configure(&lim, BHs[b2], D, Ss[s2], 256, NULL, "X", &c2));
                assert_string_equal(ck.opts, c2.opts);
              }
          } else {
            assert_non_null(strstr(camdelta_last_message(), "too small"));
          }
        }
    size_t wg, local;
    cd_sbwd_limits(&devs[di], &wg, &local);
    for (size_t D = 8; D <= 128; D += 8) {
      cd_sbwd_cfg b;
      if (cd_sbwd_choose(D, local, wg, wg, wg, wg, &b) != CAMDELTA_OK) {
        assert_true(D > wg || strstr(camdelta_last_message(), "does not fit"));
        continue;
      }
      /* the kernels' constraints and the limits (RPT^2 <= 256 registers is not always kept: on a 128-item device
       * D = 104 gets RPT = 52, as before the move) */
      assert_true(b.rpt % 4 == 0 && D % b.rpt == 0 && b.tsg % 8 == 0 && b.cb % 4 == 0 && D % b.cb == 0);
      assert_true(b.dpt % 4 == 0 && D % b.dpt == 0 && D % b.mc == 0 && (b.rl & (b.rl - 1)) == 0 && b.rl <= 256);
      assert_true((D / b.rpt) * (D / b.rpt) <= wg && b.tl * (D / b.dpt) <= wg && b.rl <= wg);
      assert_true(cd_sbwd_frames_local_bytes(D, &b) <= local && cd_sbwd_grams_local_bytes(D, &b) <= local);
    }
  }
}

/* The plan cache without a device: a key builds once, a different key builds again, camdelta_tune_set drops the
 * plans (one in use is freed by its last release), and a build failure keeps nothing. */
static int g_built, g_freed;
static camdelta_status fake_build(camdelta_context *ctx, const cd_plan_key *key, const void *arg, void **plan) {
  (void)ctx, (void)arg;
  if (key->D == 999) return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "no");
  g_built++;
  *plan = malloc(16);
  return *plan ? CAMDELTA_OK : CAMDELTA_ERROR_OUT_OF_MEMORY;
}
static void fake_destroy(void *p) {
  g_freed++;
  free(p);
}

static void test_plan_cache(void **state) {
  (void)state;
  const camdelta_device_info d = facts("X", "cpu", CL_DEVICE_TYPE_CPU, 2, 4096, 65536);
  camdelta_context *c = fake(&d);
  cd_plan_key k1 = {.op = CD_PLAN_SCAN_FORWARD, .D = 64, .alg = 1, .cls = {1, 64, 0}}, k2 = k1;
  k2.cls[1] = 8;
  cd_plan_entry *e1, *e2, *e3;
  TU_OK(cd_plan_acquire(c, &k1, fake_build, NULL, fake_destroy, &e1));
  cd_plan_release(c, e1);
  TU_OK(cd_plan_acquire(c, &k1, fake_build, NULL, fake_destroy, &e2));
  assert_ptr_equal(e1, e2);
  assert_int_equal(g_built, 1);
  TU_OK(cd_plan_acquire(c, &k2, fake_build, NULL, fake_destroy, &e3));
  assert_int_equal(g_built, 2);
  assert_int_equal(cd_plan_count(c), 2);
  cd_plan_release(c, e3);
  /* e2 still in use: dropped from the table now, freed at its release */
  TU_OK(camdelta_tune_set(c, "backward", "RPT=8"));
  assert_int_equal(cd_plan_count(c), 0);
  assert_int_equal(g_freed, 1);
  cd_plan_release(c, e2);
  assert_int_equal(g_freed, 2);
  TU_OK(cd_plan_acquire(c, &k1, fake_build, NULL, fake_destroy, &e1));
  assert_int_equal(g_built, 3);
  cd_plan_release(c, e1);
  cd_plan_key bad = k1;
  bad.D = 999;
  assert_int_equal(cd_plan_acquire(c, &bad, fake_build, NULL, fake_destroy, &e1), CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(cd_plan_count(c), 1);
  cd_plan_free_all(c);
  assert_int_equal(g_freed, 3);
  fake_free(c);
}

TU_MAIN(NULL, NULL,
      cmocka_unit_test(test_tiles_every_head_dim),
      cmocka_unit_test(test_local_memory_formula), cmocka_unit_test(test_apply_ot_tiles),
      cmocka_unit_test(test_resolution_order),
      cmocka_unit_test(test_fma_tiles_given_limits),
      cmocka_unit_test(test_fma_tiles_constraints),
      cmocka_unit_test(test_plan_cache))
