/* Scan plans without a device: the AUTO rule from device facts, the tensor-core tile resolution (heuristic,
 * per-device table, saved entries, overrides) with each family's constraints and local-memory formula, and the
 * fallback when an entry does not fit. A fake context carries only the device facts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scan_warm.h"
#include "testutil.h"
#include "tune.h"

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
  c->tune_loaded = 1;
  return c;
}

static void fake_free(camdelta_context *c) {
  mtx_destroy(&c->lock);
  free(c);
}

static void test_auto_rule(void **state) {
  (void)state;
  const camdelta_device_info h200 = facts("NVIDIA Corporation", "NVIDIA H200", CL_DEVICE_TYPE_GPU, 132, 1024, 49152);
  const camdelta_device_info cpu = facts("AuthenticAMD", "pthread-haswell", CL_DEVICE_TYPE_CPU, 2, 4096, 4 << 20);
  /* GPU, B·H below 4 per compute unit: chunkwise (B·H·F-way parallelism) */
  assert_int_equal(cd_scan_auto(&h200, 20, 112, 1560), CAMDELTA_SCAN_CHUNKWISE);
  assert_int_equal(cd_scan_auto(&h200, 20, 64, 1560), CAMDELTA_SCAN_CHUNKWISE);
  /* GPU with B·H >= 4 per compute unit: sequential fills it without scratch traffic */
  assert_int_equal(cd_scan_auto(&h200, 4 * 132, 112, 1560), CAMDELTA_SCAN_SEQUENTIAL);
  /* frames much shorter than D: chunkwise would add more than 2/3 of the useful work */
  assert_int_equal(cd_scan_auto(&h200, 20, 112, 40), CAMDELTA_SCAN_SEQUENTIAL);
  assert_int_equal(cd_scan_auto(&h200, 20, 112, 56), CAMDELTA_SCAN_CHUNKWISE);
  /* CPUs: sequential */
  assert_int_equal(cd_scan_auto(&cpu, 20, 112, 1560), CAMDELTA_SCAN_SEQUENTIAL);
}

static void check_fits(camdelta_context *c, int family, size_t D, const cd_tc_tiles *t) {
  if (cd_tc_check(c, family, D, t) != CAMDELTA_OK)
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
      TU_OK(cd_tc_resolve(c, f, D, &t, &from));
      assert_string_equal(from, "heuristic");
      if (cd_tc_check(c, f, D, &t) != CAMDELTA_OK) t = cd_tc_safe_tiles(f, D); /* as cd_tc_build does */
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

/* The local-memory formulas match the kernels' __local arrays (ptxas reported 18448 and 34832 bytes for these on
 * the H200, 16 of which are the implementation's own). */
static void test_local_memory_formula(void **state) {
  (void)state;
  const cd_tc_tiles g = {2, 2, 2, 4, 32}, fr = {2, 2, 1, 7, 16}, big = {4, 1, 1, 14, 16};
  assert_int_equal(cd_tc_local_bytes(CD_TC_GRAM, 112, &g), 18432);
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, &fr), 34816);
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, &big), 49152);
  const camdelta_device_info d = facts("NVIDIA Corporation", "Some GPU", CL_DEVICE_TYPE_GPU, 100, 1024, 49152);
  camdelta_context *c = fake(&d);
  const cd_tc_tiles toobig = {4, 2, 1, 7, 16}; /* 50688 bytes, skipped by the H200 sweep */
  assert_int_equal(cd_tc_local_bytes(CD_TC_FRAMES, 112, &toobig), 50688);
  assert_int_equal(cd_tc_check(c, CD_TC_FRAMES, 112, &toobig), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "local memory"));
  const cd_tc_tiles badkc = {2, 2, 1, 8, 16};
  assert_int_equal(cd_tc_check(c, CD_TC_FRAMES, 120, &badkc), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "KC must divide D"));
  const cd_tc_tiles wide = {8, 8, 1, 1, 8};
  assert_int_equal(cd_tc_check(c, CD_TC_GRAM, 64, &wide), CAMDELTA_ERROR_UNSUPPORTED);
  assert_non_null(strstr(camdelta_last_message(), "work-group"));
  fake_free(c);
}

/* Table entry on the H200 at D=112, heuristics elsewhere; overrides win and read back; saved entries apply. */
static void test_resolution_order(void **state) {
  (void)state;
  const camdelta_device_info d = facts("NVIDIA Corporation", "NVIDIA H200", CL_DEVICE_TYPE_GPU, 132, 1024, 49152);
  camdelta_context *c = fake(&d);
  cd_tc_tiles t;
  const char *from;
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 112, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 2 && t.wn == 4 && t.mr == 2 && t.nr == 2 && t.kc == 32);
  TU_OK(cd_tc_resolve(c, CD_TC_FRAMES, 112, &t, &from));
  assert_string_equal(from, "table");
  assert_true(t.wm == 4 && t.wn == 1 && t.nr == 14);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 64, &t, &from));
  assert_string_equal(from, "heuristic");
  /* a saved entry (as `camdelta tune --save` leaves) beats the table */
  c->tune_nsaved = 1;
  const unsigned row[8] = {CD_TC_GRAM, 100, 120, 1, 2, 2, 4, 16};
  memcpy(c->tune_saved[0], row, sizeof row);
  TU_OK(cd_tc_resolve(c, CD_TC_GRAM, 112, &t, &from));
  assert_string_equal(from, "saved");
  assert_true(t.wm == 1 && t.wn == 2 && t.kc == 16);
  /* an override beats both and reads back; unset keys keep the resolved value */
  TU_OK(camdelta_tune_set(c, "gram", "KC=64"));
  char got[160];
  TU_OK(camdelta_tune_get(c, "gram", 112, got, sizeof got));
  assert_string_equal(got, "WM=1 WN=2 MR=2 NR=4 KC=64 (override)");
  /* frames: overriding WN alone re-derives NR so that the tile covers D */
  TU_OK(camdelta_tune_set(c, "frames", "WN=2"));
  TU_OK(cd_tc_resolve(c, CD_TC_FRAMES, 112, &t, &from));
  assert_true(t.wn == 2 && 8 * t.wn * t.nr >= 112);
  TU_OK(camdelta_tune_set(c, "gram", NULL));
  TU_OK(camdelta_tune_get(c, "gram", 112, got, sizeof got));
  assert_string_equal(got, "WM=1 WN=2 MR=2 NR=4 KC=16 (saved)");
  /* bad input */
  assert_int_equal(camdelta_tune_get(c, "gram", 12, got, sizeof got), CAMDELTA_ERROR_UNSUPPORTED);
  assert_int_equal(camdelta_tune_get(c, "nope", 64, got, sizeof got), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_get(c, "gram", 64, got, 4), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_set(c, "gram", "WM=0"), CAMDELTA_ERROR_INVALID_ARGUMENT);
  fake_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auto_rule),
      cmocka_unit_test(test_tiles_every_head_dim),
      cmocka_unit_test(test_local_memory_formula),
      cmocka_unit_test(test_resolution_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
