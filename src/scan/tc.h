/* Tuning module of the scan engine: kernel-family parameters, the tensor-core feature test and the tiles of
 * the tensor-core GEMM core (cl/gemm_tc.cl). Not installed. */
#ifndef CAMDELTA_SCAN_TC_H
#define CAMDELTA_SCAN_TC_H
#include "runtime/internal.h"

/** Tiles of the tensor-core GEMM core, same names as cl/gemm_tc.cl's build options:
 *  wm x wn warps per work-group, each owning mr x nr mma tiles (16 x 8 each); kc reduction elements per
 *  staging step. Work-group tile: 16·wm·mr rows x 8·wn·nr columns, 32·wm·wn work-items,
 *  local memory gram: 4·(tm + tn)·(kc + 4) bytes, apply: 4·kc·(tm + tn + 16) bytes. */
typedef struct cd_tc_tiles {
  unsigned wm, wn, mr, nr, kc;
} cd_tc_tiles;

#define CD_TUNE_MAX_ENTRIES 48 /* lines of the tuning file (tc_params.c): 16 head dims x 3 families */
#define CD_TUNE_MAX_BYTES 4096 /* its size limit (48 lines of at most 40 bytes) */
/** The tensor-core path's state per context, kept in the context's extension slot (cd_context_ext). */
typedef struct cd_tc_context {
  int probe;           /* the feature test (cd_tc_available): 0 not run yet, 1 passed, 2 emulated, -1 off */
  unsigned probe_mode; /* the value of option "scan" TC that `probe` was found for */
  /* tiles saved by `camdelta tune --save` (tc_params.c), read once per context */
  int tune_loaded;
  unsigned tune_saved[CD_TUNE_MAX_ENTRIES][8]; /* family, D min, D max, WM, WN, MR, NR, KC */
  int tune_nsaved;
} cd_tc_context;
/** The context's tensor-core state (tc_state.c), created zeroed on first use (the context frees it); NULL when host
 *  memory is short. Not to be called with the context's lock held. */
cd_tc_context *cd_tc_context_of(camdelta_context *ctx);
/** The same if it was created, else NULL (creates nothing). Not to be called with the context's lock held. */
const cd_tc_context *cd_tc_context_find(const camdelta_context *ctx);

/** 1 when the tensor-core path can run on the context's device: an NVIDIA OpenCL device on which the feature
 *  test (a compiled cd_tc_probe program giving the exact split-TF32 product) passed. Run once per context; the
 *  result is also kept in the binary cache folder, keyed like the programs (device, driver, library version,
 *  source), so later processes skip the test. Option "scan" TC (CAMDELTA_TC) 0 turns the path off, `emulate` turns
 *  it on emulated; the test runs again when the option changes. */
int cd_tc_available(camdelta_context *ctx);
/** 1 when the path runs emulated (option "scan" TC = emulate: the same kernels with the mma done through local
 *  memory, on any device; for tests). */
int cd_tc_emulated(const camdelta_context *ctx);

/** Default tiles for the gram (reduction over a frame's tokens, D x D outputs) and apply (reduction over D,
 *  D x tokens outputs) kernels. */
cd_tc_tiles cd_tc_gram_tiles(size_t D);
cd_tc_tiles cd_tc_apply_tiles(size_t D);
/** Tiles of the backward's frames kernel: 16·wm·mr tokens per work-group, 8·wn·nr >= D columns, kc | D. */
cd_tc_tiles cd_tc_frames_tiles(size_t D);
/** Small tiles that fit any device with 48 KiB of local memory and 256-item work-groups (the fallback when a
 *  table or saved entry, or the preferred heuristic, does not fit). */
cd_tc_tiles cd_tc_safe_tiles(int family, size_t D);

/** Build options for a tensor-core kernel family ("CD_GRAM" or "CD_APPLY") with these tiles and precision
 *  (split = 1 exact, 0 tf32); vec = 1 when every token row the kernels touch starts on 16 bytes. */
void cd_tc_options(char *buf, size_t size, const char *family, size_t D, int split, int vec, const cd_tc_tiles *t);

/** cd_apply_ot_tc's tile from the apply's: the same, a single column warp split in two along the tokens where
 *  NR is even and the device takes twice the work-items (the epilogue's loads and stores want the work-items). */
cd_tc_tiles cd_tc_apply_ot_tiles(const cd_tc_tiles *apply, size_t max_work_group);
/** 1 when S and every element offset are multiples of 4 (16-byte token rows for CD_VEC). */
int cd_tc_vec_ok(size_t S, const size_t *offsets, int n);

/** Kernel families of the tensor-core core, their names ("gram", "apply", "frames"). */
enum { CD_TC_GRAM, CD_TC_APPLY, CD_TC_FRAMES, CD_TC_FAMILIES };
extern const char *const cd_tc_family_names[CD_TC_FAMILIES];
/** The tiles a family uses for head dim D on this context in one precision (split: 1 `exact`, 0 `tf32`):
 *  override > saved entry > device table (an entry for the precision, else one for both; small-work entries aside,
 *  cd_tc_small_entry) > heuristic; *from names
 *  the source. Overrides and saved entries serve both precisions. */
camdelta_status cd_tc_resolve(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t,
                              const char **from);
/** 1 with the device table's small-work entry for `family` and D in one precision (its tiles, and the most (b, h, f)
 *  frames of a call it serves), 0 where the table has none, or an override or a saved entry sets this family's tiles
 *  for D (they serve calls of every size). The tiles are not checked against the device (cd_tc_check). */
int cd_tc_small_entry(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t, size_t *bhf_max);
/** The checked tiles of `family` for D in one precision: cd_tc_resolve's, or, where a table or saved entry (or the
 *  preferred heuristic) does not fit this D or device, cd_tc_safe_tiles; an override that does not fit fails. */
camdelta_status cd_tc_tiles_for(camdelta_context *ctx, int family, size_t D, int split, cd_tc_tiles *t);
/** The kernel `name` of gemm_tc.cl built for `family` with tiles t (the emulation where the context runs it, and
 *  `extra` appended, e.g. the packed variant's " -DCD_PACKED=1"); opts (may be NULL) receives the build options. */
camdelta_status cd_tc_kernel(camdelta_context *ctx, int family, const char *name, size_t D, int split, int vec,
                             const cd_tc_tiles *t, const char *extra, char *opts, size_t opts_size, cl_kernel *k);
/** A unit's tensor-core form: the checked tiles of `family` for D (cd_tc_tiles_for) into t, the kernel `name` built
 *  with them (cd_tc_kernel, no options returned) and, when w is given, its work-group size (cd_tc_wg). */
camdelta_status cd_tc_unit(camdelta_context *ctx, int family, const char *name, size_t D, int split, int vec,
                           const char *extra, cd_tc_tiles *t, cl_kernel *k, unsigned *w);
/** Local memory a family's work-group needs (the kernels' __local arrays, cl/gemm_tc.cl); split: 1 for `exact`
 *  (split-TF32: the frames kernel's staged slots hold hi and lo; the gram's hold f32 values either way), 0 for
 *  `tf32`. */
size_t cd_tc_local_bytes(int family, size_t D, int split, const cd_tc_tiles *t);
/** cd_apply_ot_tc's local memory: the apply's Ms, and its Xs or the output tile Os (TN rows of TM + 4) in one array. */
size_t cd_tc_apply_ot_local_bytes(const cd_tc_tiles *t);
/** UNSUPPORTED with a message when the tiles break the family's constraints or the device's limits. */
camdelta_status cd_tc_check(const camdelta_context *ctx, int family, size_t D, int split, const cd_tc_tiles *t);
/** The name of the tuning file `camdelta tune --save` writes and contexts read in the cache folder, one per device
 *  name: "tune-<device name, each byte but letters and digits as '_'>.txt". It is read and written under the kernel
 *  cache's rules (src/runtime/cache.c: the folder's checks; a regular file owned by the user, opened without
 *  following a link or blocking on a FIFO, at most CD_TUNE_MAX_BYTES; written through a random temporary name
 *  and an atomic rename). A file refused by those rules or by cd_tune_parse is ignored, with one warning per
 *  process on stderr (escaped). */
void cd_tune_file_name(const camdelta_context *ctx, char *buf, size_t size);
/** The strict parser of the tuning file's text (len bytes): lines "FAMILY DMIN DMAX WM WN MR NR KC\n", FAMILY one
 *  of cd_tc_family_names, DMIN <= DMAX head dims (multiples of 8 in [8, 128]), tiles in [1, 4096], decimal digits
 *  only, single spaces, every line ending in a newline, at most max_rows lines, at most CD_TUNE_MAX_BYTES. 1 and
 *  rows[0 .. *nrows) (family, DMIN, DMAX, WM, WN, MR, NR, KC) when the whole text is good, else 0 with the reason
 *  (naming the line) in why. */
int cd_tune_parse(const char *text, size_t len, unsigned rows[][8], int max_rows, int *nrows, char *why,
                  size_t why_size);
/** Why the tuning file was last ignored on this thread ("" when it was not). */
const char *cd_tune_refusal(void);

/** Work-group size and tile extents. */
static inline unsigned cd_tc_wg(const cd_tc_tiles *t) { return 32 * t->wm * t->wn; }
static inline unsigned cd_tc_tm(const cd_tc_tiles *t) { return 16 * t->wm * t->mr; }
static inline unsigned cd_tc_tn(const cd_tc_tiles *t) { return 8 * t->wn * t->nr; }
#endif
