/* Tiles of the tensor-core kernel families: each family's parameters, constraints and local-memory formula in
 * one place; the per-device table (vendor -> device -> entry, as CLBlast's database); entries saved by
 * `camdelta tune --save` in the cache folder (the tuning file, read and written under the kernel cache's trust
 * rules: src/runtime/cache.c); overrides per context (the option registry's families gram, apply, frames: CAMDELTA_TC_TILES,
 * camdelta_tune_set).
 * Resolution for (family, D): override > saved entry > table entry > heuristic (tc.c); the gram takes a table's
 * small-work entry besides, for calls of few (b, h, f) frames (cd_tc_small_entry). */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scan/tiles.h"
#include "scan/tc.h"

const char *const cd_tc_family_names[CD_TC_FAMILIES] = {"gram", "apply", "frames"};

/* Measured winners. Device names as CL_DEVICE_NAME reports them; D ranges inclusive. */
typedef struct table_entry {
  const char *vendor, *device;
  int family;
  unsigned dmin, dmax;
  cd_tc_tiles t;
  int prec; /* ANY, or the one precision the entry is for (an entry for it beats an ANY one) */
  size_t bhf_max; /* 0: any call; else a small-work entry, for calls of at most this many (b, h, f) frames (the
                     gram only: cd_tc_small_entry), a stream's block, where the grid is too small for the tiles that
                     win on whole sequences */
} table_entry;
enum { ANY = 0, EXACT = 1, TF32 = 2 };
static const table_entry TABLE[] = {
    /* NVIDIA H200 (driver 580.159.04, OpenCL 3.0 CUDA 13.0.98): the winners of `camdelta tune` at sana480
     * (B1 H20 D112 F21 S1560) and at D=64 (docs/performance.md, "Measurements behind the code's constants"). PoCL and other devices without the tensor-core
     * path have no entries: the FMA kernels. */
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_GRAM, .dmin = 112, .dmax = 112,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 4, .kc = 32}, .prec = ANY},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_APPLY, .dmin = 112, .dmax = 112,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 8, .kc = 16}, .prec = ANY},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_FRAMES, .dmin = 112, .dmax = 112,
     .t = {.wm = 4, .wn = 1, .mr = 1, .nr = 14, .kc = 16}, .prec = ANY},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_GRAM, .dmin = 112, .dmax = 112,
     .t = {.wm = 4, .wn = 2, .mr = 1, .nr = 4, .kc = 32}, .prec = TF32},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_GRAM, .dmin = 64, .dmax = 64,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 2, .kc = 32}, .prec = ANY},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_APPLY, .dmin = 64, .dmax = 64,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 8, .kc = 16}, .prec = ANY},
    {.vendor = "NVIDIA", .device = "NVIDIA H200", .family = CD_TC_FRAMES, .dmin = 64, .dmax = 64,
     .t = {.wm = 4, .wn = 1, .mr = 1, .nr = 8, .kc = 16}, .prec = ANY},
    /* NVIDIA H100 80GB HBM3 (driver 580.159.04): the winners of `camdelta tune` at sana480, exact (the gram stages
     * 64 tokens a step there; tf32 keeps the heuristic tiles, not tuned on this card) */
    {.vendor = "NVIDIA", .device = "NVIDIA H100 80GB HBM3", .family = CD_TC_GRAM, .dmin = 112, .dmax = 112,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 4, .kc = 64}, .prec = EXACT},
    {.vendor = "NVIDIA", .device = "NVIDIA H100 80GB HBM3", .family = CD_TC_APPLY, .dmin = 112, .dmax = 112,
     .t = {.wm = 2, .wn = 2, .mr = 2, .nr = 8, .kc = 16}, .prec = EXACT},
    {.vendor = "NVIDIA", .device = "NVIDIA H100 80GB HBM3", .family = CD_TC_FRAMES, .dmin = 112, .dmax = 112,
     .t = {.wm = 4, .wn = 1, .mr = 1, .nr = 14, .kc = 16}, .prec = EXACT},
    /* the gram's winner at a stream block's shape, 1,20,112,3,1560 (B·H·F = 60): one work-group per (b, h, f) and
     * product (14 warps, the whole 112 x 112), for calls of up to one (b, h, f) per multiprocessor (132) */
    {.vendor = "NVIDIA", .device = "NVIDIA H100 80GB HBM3", .family = CD_TC_GRAM, .dmin = 112, .dmax = 112,
     .t = {.wm = 7, .wn = 2, .mr = 1, .nr = 7, .kc = 16}, .prec = EXACT, .bhf_max = 132},
};

/* The table's entry for this context's device, `family` and D in one precision (split: exact), among the entries
 * for every call (small 0) or the small-work ones (small 1): one for the precision, else one for both; NULL if none. */
static const table_entry *table_pick(const camdelta_context *ctx, int family, size_t D, int split, int small) {
  const int prec = split ? EXACT : TF32;
  const table_entry *best = NULL;
  int found = 0; /* 1: an ANY entry, 2: one for this precision */
  for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
    const table_entry *e = &TABLE[i];
    const int rank = e->prec == ANY ? 1 : e->prec == prec ? 2 : 0;
    if (rank > found && (e->bhf_max != 0) == small && e->family == family && D >= e->dmin && D <= e->dmax &&
        strstr(ctx->info.device_vendor, e->vendor) && strcmp(ctx->info.device_name, e->device) == 0)
      best = e, found = rank;
  }
  return best;
}

/* Rows (or columns) of D padded to the mma tile: up to 64 rows in two warps of two 16-row tiles. */
static void rows_for(size_t D, unsigned *w, unsigned *r) {
  const unsigned t16 = (unsigned)((D + 15) / 16);
  if (t16 <= 2) *w = 1, *r = t16;
  else *w = 2, *r = 2;
}

/* Heuristics, from the H200 sweep at D=112 (`camdelta tune`): the gram is register-bound
 * (255 registers, spills at KC=32), so it stages 16 tokens per step; the frames kernel does best with one warp
 * per 16 tokens covering every column (WN=1). cd_tc_safe_tiles() is the fallback where these do not fit. */
cd_tc_tiles cd_tc_gram_tiles(size_t D) {
  cd_tc_tiles t = {.wm = 2, .wn = 2, .mr = 2, .nr = 4, .kc = 16};
  rows_for(D, &t.wm, &t.mr);
  const unsigned t8 = (unsigned)((D + 7) / 8);
  if (t8 <= 4) t.wn = 1, t.nr = t8;
  else if (t8 <= 8) t.wn = 2, t.nr = (t8 + 1) / 2;
  return t;
}

cd_tc_tiles cd_tc_apply_tiles(size_t D) {
  cd_tc_tiles t = {.wm = 2, .wn = 2, .mr = 2, .nr = 4, .kc = 32};
  rows_for(D, &t.wm, &t.mr);
  t.kc = D % 32 == 0 ? 32 : D % 16 == 0 ? 16 : 8;
  return t;
}

cd_tc_tiles cd_tc_frames_tiles(size_t D) {
  cd_tc_tiles t = {.wm = 4, .wn = 1, .mr = 1, .nr = 1, .kc = 16};
  t.nr = (unsigned)((D + 7) / 8);
  if (t.nr > 16) t.wn = 2, t.nr = (t.nr + 1) / 2;
  t.kc = D % 16 == 0 ? 16 : 8;
  return t;
}

cd_tc_tiles cd_tc_safe_tiles(int family, size_t D) {
  cd_tc_tiles t = family == CD_TC_GRAM ? cd_tc_gram_tiles(D) : cd_tc_apply_tiles(D);
  t.kc = 8;
  if (family == CD_TC_FRAMES) {
    t = (cd_tc_tiles){.wm = 2, .wn = 1, .mr = 1, .nr = 1, .kc = 8};
    if (D > 8) t.wn = 2;
    t.nr = (unsigned)((D + 8 * t.wn - 1) / (8 * t.wn));
  }
  return t;
}

cd_tc_tiles cd_tc_apply_ot_tiles(const cd_tc_tiles *apply, size_t max_work_group) {
  cd_tc_tiles t = *apply;
  /* two warps along the tokens with half the fragments each ran faster than the apply's own tiles
   * (docs/performance.md, "Measurements behind the code's constants"); the epilogue stages TN tokens x TM rows, so token tiles stay at most 64 wide */
  if (t.wn == 1 && t.nr % 2 == 0 && 2 * cd_tc_wg(&t) <= max_work_group) t.wn = 2, t.nr /= 2;
  while (cd_tc_tn(&t) > 64 && t.nr % 2 == 0) t.nr /= 2;
  return t;
}

static void to_row(const cd_tc_tiles *t, unsigned v[5]) { v[0] = t->wm, v[1] = t->wn, v[2] = t->mr, v[3] = t->nr, v[4] = t->kc; }
static void from_row(const unsigned v[5], cd_tc_tiles *t) { t->wm = v[0], t->wn = v[1], t->mr = v[2], t->nr = v[3], t->kc = v[4]; }

void cd_tune_file_name(const camdelta_context *ctx, char *buf, size_t size) {
  char name[160];
  size_t n = 0;
  for (const char *p = ctx->info.device_name; *p && n + 1 < sizeof name; p++)
    name[n++] = isalnum((unsigned char)*p) ? *p : '_';
  name[n] = '\0';
  snprintf(buf, size, "tune-%s.txt", name);
}

/* One decimal number of digits only (no sign, no space), at most 4 digits, in [lo, hi]; *p past it. */
static int tune_number(const char **p, unsigned lo, unsigned hi, unsigned *out) {
  unsigned v = 0;
  int digits = 0;
  while (**p >= '0' && **p <= '9' && digits < 5) v = 10 * v + (unsigned)(*(*p)++ - '0'), digits++;
  if (digits == 0 || digits > 4 || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

int cd_tune_parse(const char *text, size_t len, unsigned rows[][8], int max_rows, int *nrows, char *why,
                  size_t why_size) {
  *nrows = 0;
  if (len > CD_TUNE_MAX_BYTES) {
    snprintf(why, why_size, "larger than %d bytes", CD_TUNE_MAX_BYTES);
    return 0;
  }
  if (memchr(text, '\0', len)) {
    snprintf(why, why_size, "it holds a NUL byte");
    return 0;
  }
  if (len && text[len - 1] != '\n') {
    snprintf(why, why_size, "the last line does not end with a newline");
    return 0;
  }
  const char *p = text, *end = text + len;
  for (int line = 1; p < end; line++) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *sp = memchr(p, ' ', (size_t)(eol - p));
    int fam = -1;
    for (int f = 0; sp && f < CD_TC_FAMILIES; f++)
      if (strlen(cd_tc_family_names[f]) == (size_t)(sp - p) && !memcmp(p, cd_tc_family_names[f], (size_t)(sp - p)))
        fam = f;
    unsigned v[7];
    int ok = fam >= 0;
    const char *q = sp;
    for (int i = 0; ok && i < 7; i++) {
      const unsigned lo = i < 2 ? CAMDELTA_MIN_HEAD_DIM : 1, hi = i < 2 ? CAMDELTA_MAX_HEAD_DIM : 4096;
      ok = *q++ == ' ' && tune_number(&q, lo, hi, &v[i]);
      if (ok && i < 2) ok = v[i] % CAMDELTA_HEAD_DIM_MULTIPLE == 0;
    }
    ok = ok && q == eol && v[0] <= v[1];
    if (!ok) {
      snprintf(why, why_size,
               "line %d is not 'FAMILY DMIN DMAX WM WN MR NR KC' (FAMILY gram, apply or frames; DMIN <= DMAX head dims; "
               "tiles in [1, 4096]; single spaces)",
               line);
      return 0;
    }
    if (*nrows == max_rows) {
      snprintf(why, why_size, "more than %d entries", max_rows);
      return 0;
    }
    unsigned *row = rows[(*nrows)++];
    row[0] = (unsigned)fam;
    for (int i = 0; i < 7; i++) row[1 + i] = v[i];
    p = eol + 1;
  }
  return 1;
}

static _Thread_local char tune_refusal_text[1024];
const char *cd_tune_refusal(void) { return tune_refusal_text; }

/* Reads the tuning file `name` of the cache folder `dfd` (at `dir`, for the message) into rows[0 .. *n): 1 when
 * it is absent or good; 0 when refused (the reason in cd_tune_refusal, and once per process on stderr, escaped). */
static int read_tune_file(int dfd, const char *dir, const char *name, unsigned rows[][8], int *n) {
  static atomic_int warned;
  *n = 0;
  tune_refusal_text[0] = '\0';
  const char *why = NULL;
  uint64_t size = 0;
  char reason[512];
  reason[0] = '\0';
  int fd = cd_cache_open_file(dfd, name, CD_TUNE_MAX_BYTES, &size, &why);
  if (fd < 0 && !why) return 1; /* none saved */
  if (fd >= 0) {
    char text[CD_TUNE_MAX_BYTES + 1];
    if (!cd_cache_read_all(fd, (unsigned char *)text, (size_t)size)) snprintf(reason, sizeof reason, "short read");
    else if (cd_tune_parse(text, (size_t)size, rows, CD_TUNE_MAX_ENTRIES, n, reason, sizeof reason)) reason[0] = '\0';
    else *n = 0;
    close(fd);
    if (!reason[0]) return 1;
  } else {
    snprintf(reason, sizeof reason, "%s", why);
    if (strstr(why, "limit")) snprintf(reason, sizeof reason, "%s of %d bytes", why, CD_TUNE_MAX_BYTES);
  }
  char raw[4400], shown[4 * sizeof raw + 1];
  snprintf(raw, sizeof raw, "%s/%s", dir, name);
  cd_escape(raw, (size_t)-1, shown, sizeof shown);
  snprintf(tune_refusal_text, sizeof tune_refusal_text, "%.400s: %s", shown, reason);
  if (atomic_exchange(&warned, 1) == 0)
    fprintf(stderr, "camdelta: warning: ignoring the tuning file %s (saved tiles are not used)\n", tune_refusal_text);
  return 0;
}

/* The entries saved by `camdelta tune --save`, once per context. */
static void load(const camdelta_context *ctx, cd_tc_context *s) {
  if (s->tune_loaded) return;
  s->tune_loaded = 1;
  char dir[4096];
  const int dfd = cd_cache_open_dir(0, dir, sizeof dir);
  if (dfd >= 0) {
    char name[200];
    cd_tune_file_name(ctx, name, sizeof name);
    read_tune_file(dfd, dir, name, s->tune_saved, &s->tune_nsaved);
    close(dfd);
  }
}

/* The saved entry (the last one) for `family` and D: its row, or NULL. Under ctx->lock, after load(). */
static const unsigned *saved_row(const cd_tc_context *s, int family, size_t D) {
  const unsigned *row = NULL;
  for (int i = 0; i < s->tune_nsaved; i++) {
    const unsigned *r = s->tune_saved[i];
    if ((int)r[0] == family && D >= r[1] && D <= r[2]) row = r;
  }
  return row;
}

/* The context's override values of a family's five tiles (0: not set) into over; 1 when any is set. */
static int overrides(camdelta_context *ctx, int family, unsigned over[5]) {
  char var[64];
  return cd_scan_tile_values(ctx, (cd_opt_id)(CD_OPT_TC_GRAM + 5 * family), 5, over, var, sizeof var);
}

camdelta_status cd_tc_resolve(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t,
                              const char **from) {
  cd_tc_context *s = cd_tc_context_of(ctx);
  if (!s) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory resolving the tensor-core tiles");
  mtx_lock(&ctx->lock);
  load(ctx, s);
  *t = family == CD_TC_GRAM ? cd_tc_gram_tiles(D) : family == CD_TC_APPLY ? cd_tc_apply_tiles(D) : cd_tc_frames_tiles(D);
  *from = "heuristic";
  const table_entry *e = table_pick(ctx, family, D, split, 0);
  if (e) *t = e->t, *from = "table";
  const unsigned *saved = saved_row(s, family, D);
  if (saved) from_row(saved + 3, t), *from = "saved";
  unsigned v[5], over[5];
  to_row(t, v);
  const int any = overrides(ctx, family, over);
  for (int k = 0; k < 5; k++)
    if (over[k]) v[k] = over[k];
  from_row(v, t);
  if (any) *from = "override";
  /* the frames kernel covers all D columns: NR follows WN unless given */
  if (family == CD_TC_FRAMES && !over[3] && 8 * t->wn * t->nr < D) t->nr = (unsigned)((D + 8 * t->wn - 1) / (8 * t->wn));
  mtx_unlock(&ctx->lock);
  return CAMDELTA_OK;
}

int cd_tc_small_entry(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t, size_t *bhf_max) {
  cd_tc_context *s = cd_tc_context_of(ctx);
  if (!s) return 0;
  unsigned over[5];
  mtx_lock(&ctx->lock);
  load(ctx, s);
  /* an override or a saved entry sets the tiles of calls of every size */
  const table_entry *e = saved_row(s, family, D) || overrides(ctx, family, over) ? NULL
                                                                                 : table_pick(ctx, family, D, split, 1);
  if (e) *t = e->t, *bhf_max = e->bhf_max;
  mtx_unlock(&ctx->lock);
  return e != NULL;
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

camdelta_status camdelta_tune_save(camdelta_context *ctx, size_t D, char *path, size_t path_size) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_tune_save: 'ctx' is NULL");
  camdelta_status st = cd_check_head_dim("camdelta_tune_save", D);
  if (st) return st;
  cd_tc_tiles t[CD_TC_FAMILIES];
  const char *from;
  for (int f = 0; f < CD_TC_FAMILIES; f++)
    if ((st = cd_tc_resolve(ctx, f, D, 1, &t[f], &from))) return st;
  char dir[4096], name[200], file[4400], shown[4 * 4400 + 1];
  const int dfd = cd_cache_open_dir(1, dir, sizeof dir);
  if (dfd == -2)
    return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: the kernel cache is off (CAMDELTA_CACHE=0)");
  if (dfd < 0)
    return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: the cache folder is not used: %s", cd_cache_refusal());
  cd_tune_file_name(ctx, name, sizeof name);
  snprintf(file, sizeof file, "%s/%s", dir, name);
  cd_escape(file, (size_t)-1, shown, sizeof shown);
  /* keep the other entries of a good file (a refused one is replaced), replace this D's; the oldest go first
   * when the file would hold more than CD_TUNE_MAX_ENTRIES */
  unsigned rows[CD_TUNE_MAX_ENTRIES][8];
  int n = 0;
  read_tune_file(dfd, dir, name, rows, &n);
  char text[CD_TUNE_MAX_BYTES + 1]; /* CD_TUNE_MAX_ENTRIES lines of at most 40 bytes fit */
  size_t len = 0;
  int kept = 0;
  for (int i = 0; i < n; i++) kept += !(rows[i][1] == D && rows[i][2] == D);
  int skip = kept + CD_TC_FAMILIES - CD_TUNE_MAX_ENTRIES;
  for (int i = 0; i < n; i++) {
    if (rows[i][1] == D && rows[i][2] == D) continue;
    if (skip > 0) {
      skip--;
      continue;
    }
    len += (size_t)snprintf(text + len, sizeof text - len, "%s %u %u %u %u %u %u %u\n", cd_tc_family_names[rows[i][0]],
                            rows[i][1], rows[i][2], rows[i][3], rows[i][4], rows[i][5], rows[i][6], rows[i][7]);
  }
  for (int f = 0; f < CD_TC_FAMILIES; f++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%s %zu %zu %u %u %u %u %u\n", cd_tc_family_names[f], D,
                            D, t[f].wm, t[f].wn, t[f].mr, t[f].nr, t[f].kc);
  const unsigned char *part = (const unsigned char *)text;
  const int ok = len < sizeof text && cd_cache_write_file(dfd, name, &part, &len, 1);
  const int e = errno;
  close(dfd);
  if (!ok) return cd_fail(CAMDELTA_ERROR_IO, "camdelta_tune_save: cannot write %s: %s", shown, strerror(e));
  if (path && path_size) snprintf(path, path_size, "%s", file);
  return CAMDELTA_OK;
}
