/* Tiles of the tensor-core kernel families: each family's parameters, constraints and local-memory formula in
 * one place; the per-device table (vendor -> device -> entry, as CLBlast's database); entries saved by
 * `camdelta tune --save` in the cache folder; overrides per context (camdelta_tune_set, CAMDELTA_TC_TILES).
 * Resolution for (family, D): override > saved entry > table entry > heuristic (tc.c). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "scan_tiles.h"
#include "tune.h"

const char *const cd_tc_family_names[CD_TC_FAMILIES] = {"gram", "apply", "frames"};
static const char *const KEYS[5] = {"WM", "WN", "MR", "NR", "KC"};

/* Measured winners. Device names as CL_DEVICE_NAME reports them; D ranges inclusive. */
typedef struct table_entry {
  const char *vendor, *device;
  int family;
  unsigned dmin, dmax;
  cd_tc_tiles t;
  int prec; /* ANY, or the one precision the entry is for (an entry for it beats an ANY one) */
} table_entry;
enum { ANY = 0, EXACT = 1, TF32 = 2 };
static const table_entry TABLE[] = {
    /* NVIDIA H200 (driver 580.159.04, OpenCL 3.0 CUDA 13.0.98), `camdelta tune --shape sana480` (B1 H20 D112 F21
     * S1560, exact), 2026-12-03, with the gram's staged split operands and the frames kernel's staged B: forward
     * chunkwise 2.11 ms, backward 4.82 ms (4.21 once the backward reads the forward's A_f). The tf32 sweep then
     * preferred gram KC=16 and apply WN=2, NR=8 by 1-3%, and one entry served both precisions. Re-swept in the tenth
     * session, after the gram began staging f32 values and truncating lo parts: the same three winners (forward
     * 1.67 ms, backward 3.06 ms). PoCL and other devices without the tensor-core path have no entries: the FMA
     * kernels. */
    {"NVIDIA", "NVIDIA H200", CD_TC_GRAM, 112, 112, {2, 2, 2, 4, 32}, ANY},
    /* apply re-swept in the thirteenth session: WN=2 (tiles of 64 x 128) won in both precisions, and one call of
     * `bench sana480` against WN=1 gave exact forward 1.270 -> 1.244 ms, backward 2.935 -> 2.825 (its dq), tf32
     * forward 1.097 -> 1.091, backward 2.392 -> 2.270 */
    {"NVIDIA", "NVIDIA H200", CD_TC_APPLY, 112, 112, {2, 2, 2, 8, 16}, ANY},
    {"NVIDIA", "NVIDIA H200", CD_TC_FRAMES, 112, 112, {4, 1, 1, 14, 16}, ANY},
    /* `camdelta tune --shape sana480 --precision tf32`, thirteenth session (the gram reading rows with consecutive
     * work-items): gram WM=4 WN=2 MR=1 NR=4 forward 1.096 ms against 1.184 with the entry above; the tf32
     * forward at sana480 1.262 -> 1.176 ms, the backward 2.449 -> 2.435 in one later call; in `exact` the same tiles
     * were slower (forward 1.361 -> 1.427), so the entry is tf32's only. */
    {"NVIDIA", "NVIDIA H200", CD_TC_GRAM, 112, 112, {4, 2, 1, 4, 32}, TF32},
    /* `camdelta tune --shape 1,20,64,21,1560` (exact), 2026-12-03: gram 0.722 ms against 0.739 with the heuristic
     * tiles, apply 0.702 against 0.708, frames (the backward) 1.578 against 2.061; with these the shape's forward
     * chunkwise 0.705 ms and backward 1.576 ms (0.740 / 1.836 with the heuristic tiles, the earlier session).
     * Re-swept in the tenth session: gram and apply unchanged, frames WM=4 WN=1 NR=8 1.096 ms against 1.115. */
    {"NVIDIA", "NVIDIA H200", CD_TC_GRAM, 64, 64, {2, 2, 2, 2, 32}, ANY},
    {"NVIDIA", "NVIDIA H200", CD_TC_APPLY, 64, 64, {2, 2, 2, 8, 16}, ANY},
    {"NVIDIA", "NVIDIA H200", CD_TC_FRAMES, 64, 64, {4, 1, 1, 8, 16}, ANY},
};

int cd_tc_family(const char *name) {
  for (int f = 0; f < CD_TC_FAMILIES; f++)
    if (name && strcmp(name, cd_tc_family_names[f]) == 0) return f;
  return -1;
}

static void to_row(const cd_tc_tiles *t, unsigned v[5]) { v[0] = t->wm, v[1] = t->wn, v[2] = t->mr, v[3] = t->nr, v[4] = t->kc; }
static void from_row(const unsigned v[5], cd_tc_tiles *t) { t->wm = v[0], t->wn = v[1], t->mr = v[2], t->nr = v[3], t->kc = v[4]; }

void cd_tune_file(const camdelta_context *ctx, char *buf, size_t size) {
  char dir[4096], name[160];
  size_t n = 0;
  for (const char *p = ctx->info.device_name; *p && n + 1 < sizeof name; p++)
    name[n++] = isalnum((unsigned char)*p) ? *p : '_';
  name[n] = '\0';
  if (!cd_cache_folder(dir, sizeof dir)) {
    buf[0] = '\0';
    return;
  }
  snprintf(buf, size, "%s/tune-%s.txt", dir, name);
}

/* Overrides from CAMDELTA_TC_TILES ("gram:WM=2,KC=16;frames:WM=4") and the saved entries, once per context. */
static camdelta_status load(camdelta_context *ctx) {
  if (ctx->tune_loaded) return CAMDELTA_OK;
  ctx->tune_loaded = 1;
  char path[4300];
  cd_tune_file(ctx, path, sizeof path);
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  if (f) {
    char line[256], fam[32];
    unsigned v[7];
    while (fgets(line, sizeof line, f) && ctx->tune_nsaved < 24) {
      if (sscanf(line, "%31s %u %u %u %u %u %u %u", fam, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) != 8) continue;
      const int fi = cd_tc_family(fam);
      if (fi < 0) continue;
      unsigned *row = ctx->tune_saved[ctx->tune_nsaved++];
      row[0] = (unsigned)fi;
      for (int i = 0; i < 7; i++) row[1 + i] = v[i];
    }
    fclose(f);
  }
  const char *env = ctx->tc_tiles_env; /* CAMDELTA_TC_TILES as read at context creation */
  if (env && *env) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", env);
    for (char *part = strtok(copy, ";"); part; part = strtok(NULL, ";")) {
      char *colon = strchr(part, ':');
      if (!colon)
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "CAMDELTA_TC_TILES: '%s' is not FAMILY:KEY=N,... (value: '%s')",
                       part, env);
      *colon = '\0';
      const int fi = cd_tc_family(part);
      if (fi < 0)
        return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "CAMDELTA_TC_TILES: unknown family '%s' (gram, apply, frames)",
                       part);
      camdelta_status st = cd_parse_tiles("CAMDELTA_TC_TILES", colon + 1, KEYS, 5, ctx->tune_over[fi]);
      if (st) return st;
    }
  }
  return CAMDELTA_OK;
}

camdelta_status cd_tc_resolve(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t,
                              const char **from) {
  mtx_lock(&ctx->lock);
  camdelta_status st = load(ctx);
  *t = family == CD_TC_GRAM ? cd_tc_gram_tiles(D) : family == CD_TC_APPLY ? cd_tc_apply_tiles(D) : cd_tc_frames_tiles(D);
  *from = "heuristic";
  const int prec = split ? EXACT : TF32;
  int found = 0; /* 1: an ANY entry, 2: one for this precision */
  for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
    const table_entry *e = &TABLE[i];
    const int rank = e->prec == ANY ? 1 : e->prec == prec ? 2 : 0;
    if (rank > found && e->family == family && D >= e->dmin && D <= e->dmax &&
        strstr(ctx->info.device_vendor, e->vendor) && strcmp(ctx->info.device_name, e->device) == 0)
      *t = e->t, *from = "table", found = rank;
  }
  for (int i = 0; i < ctx->tune_nsaved; i++) {
    const unsigned *r = ctx->tune_saved[i];
    if ((int)r[0] == family && D >= r[1] && D <= r[2]) from_row(r + 3, t), *from = "saved";
  }
  unsigned v[5];
  to_row(t, v);
  int over = 0;
  for (int k = 0; k < 5; k++)
    if (ctx->tune_over[family][k]) v[k] = ctx->tune_over[family][k], over = 1;
  from_row(v, t);
  if (over) *from = "override";
  /* the frames kernel covers all D columns: NR follows WN unless given */
  if (family == CD_TC_FRAMES && (!over || !ctx->tune_over[family][3]) && 8 * t->wn * t->nr < D)
    t->nr = (unsigned)((D + 8 * t->wn - 1) / (8 * t->wn));
  mtx_unlock(&ctx->lock);
  return st;
}

size_t cd_tc_local_bytes(int family, size_t D, int split, const cd_tc_tiles *t) {
  const size_t tm = cd_tc_tm(t), tn = cd_tc_tn(t), kc = t->kc, w = cd_tc_wg(t);
  /* the gram's staged tiles: KC/2 planes of R + 4 slots of 8 bytes, a slot {x, x'} (split: the f32 values, split
   * per fragment, CD_STAGE_F32) or {hi, hi'} (tf32), and a skew of CD_QS = 16 / (KC/8) slots per 8-token unit
   * after the first (KC >= 8, cd_tc_check) */
  if (family == CD_TC_GRAM) return 8 * ((kc / 2) * (tm + 4 + tn + 4) + 2 * (16 / (kc / 8)) * (kc / 8 - 1));
  if (family == CD_TC_APPLY) return 4 * kc * (tm + 8) + 4 * kc * (tn + 8);
  /* frames: the raw K tile, one staged B chunk (KC/2 planes of TN + pad slots: {hi, hi', lo, lo'} with the split,
   * pad 2; {hi, hi'} in tf32, pad 4), the reduction scratch */
  const size_t bs = split ? 16 * (kc / 2) * (tn + 2) : 8 * (kc / 2) * (tn + 4);
  return 4 * D * (tm + 8) + bs + 4 * (t->wn * 4 * tm + w);
}

size_t cd_tc_apply_ot_local_bytes(const cd_tc_tiles *t) {
  const size_t tm = cd_tc_tm(t), tn = cd_tc_tn(t), xs = t->kc * (tn + 8), os = tn * (tm + 4);
  return 4 * (t->kc * (tm + 8) + (xs > os ? xs : os));
}

camdelta_status cd_tc_check(const camdelta_context *ctx, int family, size_t D, int split, const cd_tc_tiles *t) {
  const char *bad = NULL;
  const size_t lm = ctx->info.local_mem_bytes ? (size_t)ctx->info.local_mem_bytes : 16384;
  const size_t maxwg = ctx->info.max_work_group_size ? ctx->info.max_work_group_size : 256;
  if (!t->wm || !t->wn || !t->mr || !t->nr || !t->kc) bad = "every parameter must be at least 1";
  else if (t->kc % 8) bad = "KC must be a multiple of 8";
  else if (t->mr * t->nr > 32) bad = "MR*NR must be at most 32 (accumulator registers)";
  else if (cd_tc_wg(t) > maxwg || cd_tc_wg(t) > 1024) bad = "32*WM*WN exceeds the device's work-group size";
  else if (family == CD_TC_FRAMES && D % t->kc) bad = "frames: KC must divide D";
  else if (family == CD_TC_FRAMES && 8 * t->wn * t->nr < D) bad = "frames: 8*WN*NR must cover D";
  else if (cd_tc_local_bytes(family, D, split, t) > lm) bad = "the tiles need more local memory than the device has";
  if (!bad) return CAMDELTA_OK;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED,
                 "scan tiles %s WM=%u WN=%u MR=%u NR=%u KC=%u for D=%zu: %s (local memory %zu of %zu bytes)",
                 cd_tc_family_names[family], t->wm, t->wn, t->mr, t->nr, t->kc, D, bad,
                 cd_tc_local_bytes(family, D, split, t), lm);
}

camdelta_status camdelta_tune_set(camdelta_context *ctx, const char *family, const char *params) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_set: 'ctx' is NULL");
  if (cd_tune_fma_family(family) >= 0) return cd_tune_fma_set(ctx, cd_tune_fma_family(family), params);
  const int fi = cd_tc_family(family);
  if (fi < 0)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_tune_set: unknown family '%s' (gram, apply, frames, chunkwise, backward)",
                   family ? family : "(null)");
  unsigned v[5] = {0, 0, 0, 0, 0};
  if (params && *params) {
    camdelta_status st = cd_parse_tiles("camdelta_tune_set", params, KEYS, 5, v);
    if (st) return st;
  }
  mtx_lock(&ctx->lock);
  camdelta_status st = load(ctx);
  memcpy(ctx->tune_over[fi], v, sizeof v);
  mtx_unlock(&ctx->lock);
  cd_plan_invalidate(ctx); /* the next call plans with the new tiles */
  return st;
}

camdelta_status camdelta_tune_get(camdelta_context *ctx, const char *family, size_t D, char *buf, size_t size) {
  cd_clear_error();
  if (!ctx || !buf) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_get: '%s' is NULL", ctx ? "buf" : "ctx");
  const int fi = cd_tc_family(family);
  if (fi < 0 && cd_tune_fma_family(family) < 0)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_tune_get: unknown family '%s' (gram, apply, frames, chunkwise, backward)",
                   family ? family : "(null)");
  camdelta_status st = cd_check_head_dim("camdelta_tune_get", D);
  if (st) return st;
  if (fi < 0) return cd_tune_fma_get(ctx, cd_tune_fma_family(family), D, buf, size);
  cd_tc_tiles t;
  const char *from;
  if ((st = cd_tc_resolve(ctx, fi, D, 1, &t, &from))) return st;
  char text[160];
  snprintf(text, sizeof text, "WM=%u WN=%u MR=%u NR=%u KC=%u (%s)", t.wm, t.wn, t.mr, t.nr, t.kc, from);
  return cd_copy_text("camdelta_tune_get", text, buf, size);
}

camdelta_status camdelta_tune_save(camdelta_context *ctx, size_t D, char *path, size_t path_size) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_save: 'ctx' is NULL");
  camdelta_status st = cd_check_head_dim("camdelta_tune_save", D);
  if (st) return st;
  char file[4300], tmp[4400];
  cd_tune_file(ctx, file, sizeof file);
  if (!file[0]) return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: the kernel cache is off (CAMDELTA_CACHE=0)");
  cd_tc_tiles t[CD_TC_FAMILIES];
  const char *from;
  for (int f = 0; f < CD_TC_FAMILIES; f++)
    if ((st = cd_tc_resolve(ctx, f, D, 1, &t[f], &from))) return st;
  /* keep the other entries, replace this D's */
  char keep[64][256];
  int nkeep = 0;
  FILE *in = fopen(file, "r");
  if (in) {
    char line[256], fam[32];
    unsigned lo, hi;
    while (fgets(line, sizeof line, in) && nkeep < 64)
      if (sscanf(line, "%31s %u %u", fam, &lo, &hi) == 3 && !(lo == D && hi == D)) snprintf(keep[nkeep++], 256, "%s", line);
    fclose(in);
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", file);
  FILE *out = fopen(tmp, "w");
  if (!out) return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: cannot write '%s' (does the cache folder exist?)", tmp);
  for (int i = 0; i < nkeep; i++) fputs(keep[i], out);
  for (int f = 0; f < CD_TC_FAMILIES; f++)
    fprintf(out, "%s %zu %zu %u %u %u %u %u\n", cd_tc_family_names[f], D, D, t[f].wm, t[f].wn, t[f].mr, t[f].nr,
            t[f].kc);
  if (fclose(out) != 0 || rename(tmp, file) != 0) {
    remove(tmp);
    return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: cannot write '%s'", file);
  }
  if (path && path_size) snprintf(path, path_size, "%s", file);
  return CAMDELTA_OK;
}
